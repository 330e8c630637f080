//! `Test::validate` and the entry points of the explorer and the runner on tests built by hand:
//! a malformed test (an index past its list, a node the test does not have, a lock misused...)
//! is a typed error from every entry point, never a panic; every parsed test is valid, and
//! exploring or running one is unchanged.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use loco_litmus::ast::*;
use loco_litmus::explore::{explore_with, explore_with_progress, replay_trace, Config};
use loco_litmus::explore::{Action, ExploreError};
use loco_litmus::run::{held_at_end, run_once};
use loco_litmus::validate::{IndexOf, InvalidTestKind, LockMisuse, Place};
use loco_litmus::{explore, run, InvalidTest, RunBackend, RunConfig, RunError};
use proptest::prelude::*;

/// A valid test with an operation of every library, three threads, every kind of declaration.
const BASE: &str = "litmus base
loc x @n0
loc y @n1
loc a @n1
sv s
sc c @n2
lock l : wlock
lock m : nlock @n1
thread t0 @n0 {
  r0 = load(x)
  store(x, r0)
  r1 = cas(x, 0, 1)
  put(y, x, d1)
  wait(d1)
  bcast(s, all, d2)
  gf({n0, n1})
  acquire(l)
  release(l)
  r2 = read_sc(c)
  mfence()
}
thread t1 @n1 {
  get(a, x, d3)
  rfaa(x, 1, a, d3)
  rcas(x, 0, 1, a, d3)
  wait(d3)
  rfence(n0)
  acquire(m)
  handoff(m)
  r0 = faa_sc(c, 1)
  write_sc(c, r0)
}
thread t2 @n1 {
  takeover(m)
  release(m)
  giveup(l)
  r0 = cas_sc(c, 0, 2)
}
exists t0:r0 = 0 /\\ y = 1 /\\ s@n1 = 0 /\\ c = 1
expect allowed
";

fn base() -> Test {
    let t = loco_litmus::parse(BASE, "base.litmus").unwrap();
    t.validate().unwrap();
    t
}

fn stmt(op: Op) -> Stmt {
    Stmt {
        op,
        span: Span { line: 99, col: 1 },
        text: "hand-made".into(),
    }
}

/// Every entry point of the explorer and the runner, on a test that fails validation with
/// `want`: each returns that error; none panics. The helpers that take a test (names of
/// observables, `held_at_end`) do not panic either.
fn every_entry_point_refuses(test: &Test, want: &InvalidTest) {
    let mut no_reduction = Config::default();
    no_reduction.reduction = false;
    let explorers: [(&str, Result<(), ExploreError>); 4] = [
        ("explore", explore(test).map(|_| ())),
        (
            "explore_with",
            explore_with(test, &no_reduction).map(|_| ()),
        ),
        (
            "explore_with_progress",
            explore_with_progress(test, &Config::default(), |_| {}).map(|_| ()),
        ),
        ("replay_trace", replay_trace(test, &[]).map(|_| ())),
    ];
    for (what, r) in explorers {
        match r {
            Err(ExploreError::Invalid(e)) => assert_eq!(&e, want, "{what}"),
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: explored an invalid test"),
        }
    }
    let mut cfg = RunConfig::new(RunBackend::SoftChaos, 2, 0);
    cfg.timeout = Duration::from_millis(200);
    for backend in [
        RunBackend::SoftChaos,
        RunBackend::SoftThreaded,
        RunBackend::SoftSim,
    ] {
        cfg.backend = backend;
        for (what, r) in [
            ("run", run(test, &cfg, |_| {}).map(|_| ())),
            ("run_once", run_once(test, &cfg, 0).map(|_| ())),
        ] {
            match r {
                Err(RunError::Invalid(e)) => assert_eq!(&e, want, "{what} {backend:?}"),
                Err(e) => panic!("{what} {backend:?}: {e}"),
                Ok(()) => panic!("{what} {backend:?}: ran an invalid test"),
            }
        }
    }
    let _ = held_at_end(test);
    for o in test.observables() {
        assert!(!test.observable_name(&o).is_empty());
    }
}

fn op(test: &mut Test, t: usize, s: usize) -> &mut Op {
    &mut test.threads[t].body[s].op
}

type Edit = fn(&mut Test);

/// A table of malformed tests: what is changed in [`BASE`], and where and what the error is.
#[test]
fn malformed_tests_are_errors_at_every_entry_point() {
    use InvalidTestKind as K;
    let stmt_at = |thread: usize, stmt: usize| {
        let b = base();
        Place::Stmt {
            thread,
            name: b.threads[thread].name.clone(),
            stmt,
            line: b.threads[thread].body[stmt].span.line,
        }
    };
    let thread_at = |thread: usize| Place::Thread {
        thread,
        name: format!("t{thread}"),
    };
    let oor = |what, index, len| K::OutOfRange { what, index, len };
    let lock = |l: usize, misuse| K::Lock {
        lock: LockId(l),
        misuse,
    };
    let cases: Vec<(&str, Edit, Place, InvalidTestKind)> = vec![
        (
            "a register past the thread's registers",
            |t| {
                *op(t, 0, 0) = Op::Load {
                    reg: RegId(9),
                    var: Var::Loc(LocId(0)),
                }
            },
            stmt_at(0, 0),
            oor(IndexOf::Reg, 9, 3),
        ),
        (
            "a thread with no registers",
            |t| {
                t.threads[1].regs.clear();
                t.threads[1].assigned.clear();
            },
            stmt_at(1, 7),
            oor(IndexOf::Reg, 0, 0),
        ),
        (
            "an operand register past the thread's registers",
            |t| {
                *op(t, 1, 8) = Op::WriteSc {
                    sc: ScId(0),
                    val: Value::Reg(RegId(5)),
                }
            },
            stmt_at(1, 8),
            oor(IndexOf::Reg, 5, 1),
        ),
        (
            "fewer `assigned` flags than registers",
            |t| {
                t.threads[0].assigned.pop();
            },
            thread_at(0),
            K::RegisterFlags {
                regs: 3,
                assigned: 2,
            },
        ),
        (
            "a loc past the locs",
            |t| {
                if let Op::Put { remote, .. } = op(t, 0, 3) {
                    *remote = LocId(7);
                }
            },
            stmt_at(0, 3),
            oor(IndexOf::Loc, 7, 3),
        ),
        (
            "no locs at all",
            |t| t.locs.clear(),
            stmt_at(0, 0),
            oor(IndexOf::Loc, 0, 0),
        ),
        (
            "a shared variable past the svs",
            |t| {
                if let Op::Bcast { sv, .. } = op(t, 0, 5) {
                    *sv = SvId(3);
                }
            },
            stmt_at(0, 5),
            oor(IndexOf::Sv, 3, 1),
        ),
        (
            "an sc location past the scs",
            |t| {
                *op(t, 0, 9) = Op::ReadSc {
                    reg: RegId(2),
                    sc: ScId(1),
                }
            },
            stmt_at(0, 9),
            oor(IndexOf::Sc, 1, 1),
        ),
        (
            "a lock past the locks",
            |t| *op(t, 0, 7) = Op::Acquire(LockId(5)),
            stmt_at(0, 7),
            oor(IndexOf::Lock, 5, 2),
        ),
        (
            "a work id past the work ids",
            |t| *op(t, 0, 4) = Op::Wait(WidId(10)),
            stmt_at(0, 4),
            oor(IndexOf::WorkId, 10, 3),
        ),
        (
            "no work ids",
            |t| t.work_ids.clear(),
            stmt_at(0, 3),
            oor(IndexOf::WorkId, 0, 0),
        ),
        (
            "a loc in the condition past the locs",
            |t| t.exists.atoms[1].obs = Observable::Loc(LocId(99)),
            Place::Atom(1),
            oor(IndexOf::Loc, 99, 3),
        ),
        (
            "a thread in the condition past the threads",
            |t| {
                t.exists.atoms[0].obs = Observable::Reg {
                    thread: 3,
                    reg: RegId(0),
                }
            },
            Place::Atom(0),
            oor(IndexOf::Thread, 3, 3),
        ),
        (
            "a register in the condition past the thread's",
            |t| {
                t.exists.atoms[0].obs = Observable::Reg {
                    thread: 2,
                    reg: RegId(4),
                }
            },
            Place::Atom(0),
            oor(IndexOf::Reg, 4, 1),
        ),
        (
            "an sc location in the condition past the scs",
            |t| t.exists.atoms[3].obs = Observable::Sc(ScId(2)),
            Place::Atom(3),
            oor(IndexOf::Sc, 2, 1),
        ),
        (
            "an sv copy on a node the test does not have",
            |t| {
                t.exists.atoms[2].obs = Observable::Sv {
                    sv: SvId(0),
                    node: NodeId(4),
                }
            },
            Place::Atom(2),
            K::NodeNotListed(NodeId(4)),
        ),
        (
            "a thread on a node the test does not list",
            |t| t.threads[0].node = NodeId(5),
            thread_at(0),
            K::NodeNotListed(NodeId(5)),
        ),
        (
            "a node past the checker's limit",
            |t| *op(t, 1, 4) = Op::Rfence(NodeId(200)),
            stmt_at(1, 4),
            K::NodeTooLarge(NodeId(200)),
        ),
        (
            "an empty node list",
            |t| t.nodes.clear(),
            Place::Decl {
                what: "loc",
                index: 0,
            },
            K::NodeNotListed(NodeId(0)),
        ),
        (
            "a node list out of order",
            |t| t.nodes.reverse(),
            Place::Test,
            K::UnsortedNodes,
        ),
        (
            "a node list past the checker's limit",
            |t| t.nodes.push(NodeId(8)),
            Place::Test,
            K::NodeTooLarge(NodeId(8)),
        ),
        (
            "an sc location on a node the test does not list",
            |t| t.scs[0].node = NodeId(6),
            Place::Decl {
                what: "sc",
                index: 0,
            },
            K::NodeNotListed(NodeId(6)),
        ),
        (
            "a node lock on a node the test does not list",
            |t| t.locks[1].kind = LockKind::NLock(NodeId(7)),
            Place::Decl {
                what: "lock",
                index: 1,
            },
            K::NodeNotListed(NodeId(7)),
        ),
        (
            "a bcast to no node",
            |t| {
                if let Op::Bcast { nodes, .. } = op(t, 0, 5) {
                    nodes.clear();
                }
            },
            stmt_at(0, 5),
            K::EmptyNodeSet,
        ),
        (
            "a gf node set out of order",
            |t| *op(t, 0, 6) = Op::Gf(vec![NodeId(1), NodeId(0)]),
            stmt_at(0, 6),
            K::UnsortedNodes,
        ),
        (
            "a gf of a node the test does not list",
            |t| *op(t, 0, 6) = Op::Gf(vec![NodeId(3)]),
            stmt_at(0, 6),
            K::NodeNotListed(NodeId(3)),
        ),
        (
            "a poll of a node the test does not list",
            |t| *op(t, 1, 4) = Op::Poll(NodeId(3)),
            stmt_at(1, 4),
            K::NodeNotListed(NodeId(3)),
        ),
        (
            "more threads than the checker handles",
            |t| {
                let th = t.threads[2].clone();
                t.threads.resize(9, th);
            },
            Place::Test,
            K::TooManyThreads(9),
        ),
        (
            "a store to another node's loc",
            |t| {
                *op(t, 0, 1) = Op::Store {
                    var: Var::Loc(LocId(1)),
                    val: Value::Int(1),
                }
            },
            stmt_at(0, 1),
            K::NotLocal {
                loc: LocId(1),
                loc_node: NodeId(1),
                thread_node: NodeId(0),
            },
        ),
        (
            "a get into another node's loc",
            |t| {
                if let Op::Get { local, .. } = op(t, 1, 0) {
                    *local = LocId(0);
                }
            },
            stmt_at(1, 0),
            K::NotLocal {
                loc: LocId(0),
                loc_node: NodeId(0),
                thread_node: NodeId(1),
            },
        ),
        (
            "a release without an acquire",
            |t| *op(t, 0, 7) = Op::Mfence,
            stmt_at(0, 8),
            lock(0, LockMisuse::NotHeld),
        ),
        (
            "a second acquire of a held lock",
            |t| *op(t, 0, 8) = Op::Acquire(LockId(0)),
            stmt_at(0, 8),
            lock(0, LockMisuse::AlreadyHeld),
        ),
        (
            "a give-up of a held lock",
            |t| *op(t, 0, 8) = Op::GiveUp(LockId(0)),
            stmt_at(0, 8),
            lock(0, LockMisuse::GiveUpHeld),
        ),
        (
            "a takeover without a handoff on its node",
            |t| *op(t, 1, 6) = Op::Release(LockId(1)),
            stmt_at(2, 0),
            lock(1, LockMisuse::TakeoverWithoutHandoff),
        ),
        (
            "a second handoff on a node",
            |t| {
                let th = Thread {
                    name: "t3".into(),
                    node: NodeId(1),
                    body: vec![stmt(Op::Acquire(LockId(1))), stmt(Op::Handoff(LockId(1)))],
                    regs: Vec::new(),
                    assigned: Vec::new(),
                };
                t.threads.push(th);
            },
            Place::Stmt {
                thread: 3,
                name: "t3".into(),
                stmt: 1,
                line: 99,
            },
            lock(1, LockMisuse::SecondHandoff),
        ),
        (
            "a second takeover on a node",
            |t| {
                let th = Thread {
                    name: "t3".into(),
                    node: NodeId(1),
                    body: vec![stmt(Op::Takeover(LockId(1)))],
                    regs: Vec::new(),
                    assigned: Vec::new(),
                };
                t.threads.push(th);
            },
            Place::Stmt {
                thread: 3,
                name: "t3".into(),
                stmt: 0,
                line: 99,
            },
            lock(1, LockMisuse::SecondTakeover),
        ),
        (
            "more tickets of a lock given up than its ring has marks",
            |t| {
                for _ in 0..loco_locks::MARKS {
                    t.threads[2].body.push(stmt(Op::GiveUp(LockId(0))));
                }
            },
            Place::Decl {
                what: "lock",
                index: 0,
            },
            lock(
                0,
                LockMisuse::TooManyTickets {
                    tickets: loco_locks::MARKS as usize + 2,
                    max: loco_locks::MARKS as usize,
                },
            ),
        ),
    ];
    let mut failed = Vec::new();
    for (what, edit, place, kind) in cases {
        let mut test = base();
        edit(&mut test);
        let want = test.validate().expect_err(what);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            assert_eq!((&want.place, &want.kind), (&place, &kind), "{what}");
            assert_eq!(want.test, "base");
            let shown = want.to_string();
            assert!(shown.starts_with("invalid test `base`: "), "{shown}");
            every_entry_point_refuses(&test, &want);
        }));
        if outcome.is_err() {
            failed.push(what);
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// The error says where and what: `Display` of a typical one.
#[test]
fn an_invalid_test_says_where_and_what() {
    let mut test = base();
    test.threads[1].regs.clear();
    test.threads[1].assigned.clear();
    let e = test.validate().unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid test `base`: thread t1, statement 7 (line 30): register 0 is out of range \
         (there are 0)"
    );
    let e = RunError::from(e);
    assert!(
        e.to_string().starts_with("invalid test `base`: thread t1"),
        "{e}"
    );
}

/// Every shipped test is valid, explores and runs as before (the checks refuse nothing the
/// parser accepts), and every schedule the explorer records replays with `replay_trace`, as
/// `Exploration::trace` shows it; an action that is not enabled is an error, not a panic.
#[test]
fn shipped_tests_are_valid_and_their_schedules_replay() {
    for f in common::shipped_files() {
        let test = loco_litmus::parse_file(&f).unwrap();
        test.validate()
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let model = explore(&test).unwrap();
        for (o, acts) in &model.outcomes {
            let replayed = replay_trace(&test, acts).unwrap();
            assert_eq!(Some(replayed), model.trace(&test, o), "{}", f.display());
            let bogus = Action::Exec {
                thread: test.threads.len(),
            };
            let mut wrong = acts.clone();
            wrong.push(bogus);
            match replay_trace(&test, &wrong) {
                Err(ExploreError::NotEnabled { index, action }) => {
                    assert_eq!((index, action), (acts.len(), bogus));
                }
                other => panic!("{}: {other:?}", f.display()),
            }
        }
    }
}

/// The places of a statement that hold an index or a node.
enum Slot<'a> {
    Index(&'a mut usize),
    Node(&'a mut NodeId),
}

fn slots(op: &mut Op) -> Vec<Slot<'_>> {
    use Slot::{Index as I, Node as N};
    fn val<'a>(v: &'a mut Value, out: &mut Vec<Slot<'a>>) {
        if let Value::Reg(r) = v {
            out.push(Slot::Index(&mut r.0));
        }
    }
    fn var<'a>(v: &'a mut Var, out: &mut Vec<Slot<'a>>) {
        match v {
            Var::Loc(l) => out.push(Slot::Index(&mut l.0)),
            Var::Sv(s) => out.push(Slot::Index(&mut s.0)),
        }
    }
    let mut out = Vec::new();
    match op {
        Op::Load { reg, var: v } => {
            out.push(I(&mut reg.0));
            var(v, &mut out);
        }
        Op::Store { var: v, val: x } => {
            var(v, &mut out);
            val(x, &mut out);
        }
        Op::Cas {
            reg,
            loc,
            expected,
            new,
        } => {
            out.push(I(&mut reg.0));
            out.push(I(&mut loc.0));
            val(expected, &mut out);
            val(new, &mut out);
        }
        Op::Mfence => {}
        Op::Put { remote, local, wid } | Op::Get { local, remote, wid } => {
            out.extend([I(&mut remote.0), I(&mut local.0), I(&mut wid.0)]);
        }
        Op::Rcas {
            remote,
            expected,
            new,
            local,
            wid,
        } => {
            out.extend([I(&mut remote.0), I(&mut local.0), I(&mut wid.0)]);
            val(expected, &mut out);
            val(new, &mut out);
        }
        Op::Rfaa {
            remote,
            add,
            local,
            wid,
        } => {
            out.extend([I(&mut remote.0), I(&mut local.0), I(&mut wid.0)]);
            val(add, &mut out);
        }
        Op::Wait(w) => out.push(I(&mut w.0)),
        Op::Poll(n) | Op::Rfence(n) => out.push(N(n)),
        Op::Bcast { sv, nodes, wid } => {
            out.extend([I(&mut sv.0), I(&mut wid.0)]);
            out.extend(nodes.iter_mut().map(N));
        }
        Op::Gf(nodes) => out.extend(nodes.iter_mut().map(N)),
        Op::Acquire(l) | Op::Release(l) | Op::GiveUp(l) | Op::Handoff(l) | Op::Takeover(l) => {
            out.push(I(&mut l.0))
        }
        Op::ReadSc { reg, sc } => out.extend([I(&mut reg.0), I(&mut sc.0)]),
        Op::WriteSc { sc, val: x } => {
            out.push(I(&mut sc.0));
            val(x, &mut out);
        }
        Op::CasSc {
            reg,
            sc,
            expected,
            new,
        } => {
            out.extend([I(&mut reg.0), I(&mut sc.0)]);
            val(expected, &mut out);
            val(new, &mut out);
        }
        Op::FaaSc { reg, sc, add } => {
            out.extend([I(&mut reg.0), I(&mut sc.0)]);
            val(add, &mut out);
        }
    }
    out
}

/// One random change to a test: small values, so that many land in range and the test stays
/// valid (and must then explore and run without panicking), many out.
#[derive(Clone, Debug)]
enum Mutation {
    /// Sets an index or node of a statement (which thread, statement, slot; the value).
    Slot(
        prop::sample::Index,
        prop::sample::Index,
        prop::sample::Index,
        usize,
    ),
    /// Clears a thread's registers.
    NoRegs(prop::sample::Index),
    /// Drops the last of a list of declarations (locs, svs, scs, locks, work ids, nodes).
    Pop(usize),
    /// Moves a thread to a node.
    ThreadNode(prop::sample::Index, u16),
    /// Moves a statement to (the end of) another thread.
    Move(
        prop::sample::Index,
        prop::sample::Index,
        prop::sample::Index,
    ),
    /// Drops a statement.
    Drop(prop::sample::Index, prop::sample::Index),
    /// Sets the index of an atom of the condition.
    Atom(prop::sample::Index, usize),
    /// Adds a node to the test's list.
    AddNode(u16),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    use prop::sample::Index as Ix;
    prop_oneof![
        4 => (any::<Ix>(), any::<Ix>(), any::<Ix>(), 0usize..10)
            .prop_map(|(t, s, k, v)| Mutation::Slot(t, s, k, v)),
        1 => any::<Ix>().prop_map(Mutation::NoRegs),
        1 => (0usize..6).prop_map(Mutation::Pop),
        1 => (any::<Ix>(), 0u16..10).prop_map(|(t, n)| Mutation::ThreadNode(t, n)),
        2 => (any::<Ix>(), any::<Ix>(), any::<Ix>()).prop_map(|(a, s, b)| Mutation::Move(a, s, b)),
        1 => (any::<Ix>(), any::<Ix>()).prop_map(|(t, s)| Mutation::Drop(t, s)),
        1 => (any::<Ix>(), 0usize..6).prop_map(|(a, v)| Mutation::Atom(a, v)),
        1 => (0u16..10).prop_map(Mutation::AddNode),
    ]
}

fn apply(test: &mut Test, m: &Mutation) {
    let threads = test.threads.len();
    match m {
        Mutation::Slot(t, s, k, v) if threads > 0 => {
            let th = &mut test.threads[t.index(threads)];
            if th.body.is_empty() {
                return;
            }
            let n = th.body.len();
            let mut slots = slots(&mut th.body[s.index(n)].op);
            if slots.is_empty() {
                return;
            }
            let n = slots.len();
            match &mut slots[k.index(n)] {
                Slot::Index(i) => **i = *v,
                Slot::Node(node) => **node = NodeId(*v as u16),
            }
        }
        Mutation::NoRegs(t) if threads > 0 => {
            let th = &mut test.threads[t.index(threads)];
            th.regs.clear();
            th.assigned.clear();
        }
        Mutation::Pop(which) => match which {
            0 => drop(test.locs.pop()),
            1 => drop(test.svs.pop()),
            2 => drop(test.scs.pop()),
            3 => drop(test.locks.pop()),
            4 => drop(test.work_ids.pop()),
            _ => drop(test.nodes.pop()),
        },
        Mutation::ThreadNode(t, n) if threads > 0 => {
            test.threads[t.index(threads)].node = NodeId(*n)
        }
        Mutation::Move(a, s, b) if threads > 0 => {
            let a = a.index(threads);
            let n = test.threads[a].body.len();
            if n > 0 {
                let st = test.threads[a].body.remove(s.index(n));
                test.threads[b.index(threads)].body.push(st);
            }
        }
        Mutation::Drop(t, s) if threads > 0 => {
            let body = &mut test.threads[t.index(threads)].body;
            if !body.is_empty() {
                let n = body.len();
                body.remove(s.index(n));
            }
        }
        Mutation::Atom(a, v) if !test.exists.atoms.is_empty() => {
            let n = test.exists.atoms.len();
            match &mut test.exists.atoms[a.index(n)].obs {
                Observable::Reg { thread, reg } => {
                    if v % 2 == 0 {
                        *thread = *v;
                    } else {
                        reg.0 = *v;
                    }
                }
                Observable::Loc(l) => l.0 = *v,
                Observable::Sc(s) => s.0 = *v,
                Observable::Sv { sv, node } => {
                    if v % 2 == 0 {
                        sv.0 = *v;
                    } else {
                        *node = NodeId(*v as u16);
                    }
                }
            }
        }
        Mutation::AddNode(n) => {
            test.nodes.push(NodeId(*n));
            test.nodes.sort();
            test.nodes.dedup();
        }
        _ => {}
    }
}

fn shipped_tests() -> &'static [Test] {
    static T: std::sync::OnceLock<Vec<Test>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut v: Vec<Test> = common::shipped_files()
            .iter()
            .map(|f| loco_litmus::parse_file(f).unwrap())
            .collect();
        v.push(base());
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 256 } else { 2000 }))]

    /// A shipped test changed at random: invalid, every entry point says so with the same
    /// error; still valid, it explores and runs (under the simulator) without a panic.
    #[test]
    fn a_randomly_broken_test_is_an_error_or_runs(
        which in any::<prop::sample::Index>(),
        muts in prop::collection::vec(mutation(), 1..4),
    ) {
        let tests = shipped_tests();
        let mut test = tests[which.index(tests.len())].clone();
        for m in &muts {
            apply(&mut test, m);
        }
        let checked = catch_unwind(AssertUnwindSafe(|| test.validate()));
        prop_assert!(checked.is_ok(), "validate panicked on {:?}", test);
        match checked.unwrap() {
            Err(e) => {
                let r = catch_unwind(AssertUnwindSafe(|| every_entry_point_refuses(&test, &e)));
                prop_assert!(r.is_ok(), "{}\n{:?}", e, test);
            }
            Ok(()) => {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let mut cfg = Config::default();
                    cfg.max_states = 20_000;
                    if let Ok(model) = explore_with(&test, &cfg) {
                        for (o, acts) in &model.outcomes {
                            replay_trace(&test, acts).unwrap();
                            let _ = model.show(&test, o);
                        }
                    }
                    let mut run_cfg = RunConfig::new(RunBackend::SoftSim, 1, 0);
                    run_cfg.timeout = Duration::from_millis(20);
                    let _ = run_once(&test, &run_cfg, 0);
                }));
                prop_assert!(r.is_ok(), "a valid test panicked: {:?}", test);
            }
        }
    }
}

/// A test built by hand past one of the parser's size limits (statements of a thread,
/// declarations, the length of a name, atoms of the condition) is refused by `validate` with a
/// typed error naming the parser's limit, at every entry point; a test at the limits passes.
#[test]
fn a_test_past_the_parsers_limits_is_invalid() {
    use loco_litmus::parse::{MAX_ATOMS, MAX_DECLARATIONS, MAX_NAME_LEN, MAX_STATEMENTS};
    use loco_litmus::validate::SizeLimit;
    use InvalidTestKind as K;
    let long = "n".repeat(MAX_NAME_LEN + 1);
    let decls = |t: &Test| t.locs.len() + t.svs.len() + t.scs.len() + t.locks.len();
    let thread = |t: &Test, i: usize| Place::Thread {
        thread: i,
        name: t.threads[i].name.clone(),
    };
    type Case = (
        Box<dyn Fn(&mut Test)>,
        Box<dyn Fn(&Test) -> Place>,
        SizeLimit,
        usize,
    );
    let cases: Vec<Case> = vec![
        (
            Box::new(|t| {
                let n = MAX_STATEMENTS + 1 - t.threads[0].body.len();
                t.threads[0].body.extend((0..n).map(|_| stmt(Op::Mfence)));
            }),
            Box::new(move |t| thread(t, 0)),
            SizeLimit::Statements,
            MAX_STATEMENTS + 1,
        ),
        (
            Box::new(move |t| {
                let n = MAX_DECLARATIONS + 1 - decls(t);
                t.svs.extend((0..n).map(|i| SvDecl {
                    name: format!("extra{i}"),
                    init: 0,
                }));
            }),
            Box::new(|_| Place::Test),
            SizeLimit::Declarations,
            MAX_DECLARATIONS + 1,
        ),
        (
            Box::new(|t| {
                let a = t.exists.atoms[0].clone();
                t.exists.atoms.resize(MAX_ATOMS + 1, a);
            }),
            Box::new(|_| Place::Test),
            SizeLimit::Atoms,
            MAX_ATOMS + 1,
        ),
        (
            {
                let long = long.clone();
                Box::new(move |t| t.name = long.clone())
            },
            Box::new(|_| Place::Test),
            SizeLimit::NameLen,
            MAX_NAME_LEN + 1,
        ),
        (
            {
                let long = long.clone();
                Box::new(move |t| t.locs[1].name = long.clone())
            },
            Box::new(|_| Place::Decl {
                what: "loc",
                index: 1,
            }),
            SizeLimit::NameLen,
            MAX_NAME_LEN + 1,
        ),
        (
            {
                let long = long.clone();
                Box::new(move |t| t.threads[1].regs[0] = long.clone())
            },
            Box::new(move |t| thread(t, 1)),
            SizeLimit::NameLen,
            MAX_NAME_LEN + 1,
        ),
        (
            {
                let long = long.clone();
                Box::new(move |t| t.work_ids[0] = long.clone())
            },
            Box::new(|_| Place::Test),
            SizeLimit::NameLen,
            MAX_NAME_LEN + 1,
        ),
    ];
    for (edit, place, limit, count) in &cases {
        let mut test = base();
        edit(&mut test);
        let e = test.validate().unwrap_err();
        let want_place = place(&test);
        assert_eq!(e.place, want_place, "{e}");
        assert_eq!(
            e.kind,
            K::TooLarge {
                limit: *limit,
                count: *count,
                max: limit.max(),
            },
            "{e}"
        );
        assert!(e.to_string().contains("the parser's limit"), "{e}");
        every_entry_point_refuses(&test, &e);
    }
    // The limits themselves are the parser's.
    assert_eq!(SizeLimit::Statements.max(), MAX_STATEMENTS);
    assert_eq!(SizeLimit::Declarations.max(), MAX_DECLARATIONS);
    assert_eq!(SizeLimit::NameLen.max(), MAX_NAME_LEN);
    assert_eq!(SizeLimit::Atoms.max(), MAX_ATOMS);
    // At the limits: valid.
    let mut test = base();
    let n = MAX_STATEMENTS - test.threads[0].body.len();
    test.threads[0]
        .body
        .extend((0..n).map(|_| stmt(Op::Mfence)));
    let n = MAX_DECLARATIONS - decls(&test);
    test.svs.extend((0..n).map(|i| SvDecl {
        name: format!("extra{i}"),
        init: 0,
    }));
    let a = test.exists.atoms[0].clone();
    test.exists.atoms.resize(MAX_ATOMS, a);
    test.name = "n".repeat(MAX_NAME_LEN);
    test.validate().unwrap();
}

/// `parse_file` refuses a FIFO (or anything else that is not a regular file) with a typed
/// error instead of blocking on a pipe no one writes.
#[cfg(unix)]
#[test]
fn parse_file_refuses_what_is_not_a_regular_file() {
    let dir = std::env::temp_dir().join(format!("loco-litmus-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("pipe.litmus");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    // Run it on a thread, so that a regression fails the test instead of hanging it.
    let path = fifo.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(loco_litmus::parse_file(&path).map(|_| ()));
    });
    let got = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(r) => r,
        Err(_) => {
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
            panic!("parse_file blocked on a FIFO");
        }
    };
    match got {
        Err(e @ loco_litmus::Error::NotRegularFile { .. }) => {
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    match loco_litmus::parse_file(&dir) {
        Err(loco_litmus::Error::NotRegularFile { .. }) => {}
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}
