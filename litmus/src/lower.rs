//! Library operations expanded into machine operations (docs/model.md §5): what the explorer runs.
//!
//! A [`Program`] lays every word of a test out in node memory (user words, shared-variable
//! copies, SC words, the lock words of docs/model.md §5.3-§5.5, and the scratch words of the
//! global fence and of the SC library), and turns each statement into [`Instr`]s: CPU accesses,
//! posts to a queue pair, polls, waits, and the two await forms of the spin loops.
//!
//! The library operations are not expanded here by hand: [`Emit`] is a
//! [`Machine`] that records what it is asked to do, and the
//! protocols it runs are the crates' own (`loco_sv::protocol`, `loco_locks::protocol`,
//! `loco_sc::protocol`), the functions `bcast`, `gf`, the locks and the SC operations execute at
//! run time. Only the layout of the words is this module's.

use std::convert::Infallible;

use loco_locks::protocol as locks;
use loco_rdmawait::protocol::{Cond, Help, Machine, Test as Cmp};
use loco_rdmawait::{WorkId, WorkRequest};
use loco_rdmawaitrmw::RmwMachine;
use loco_sc::protocol as sc;
use loco_sv::protocol as sv;

use crate::ast::*;

/// Completion tags: the explorer's names for work ids.
pub(crate) mod tags {
    use loco_rdmawait::WorkId;

    const INTERNAL: u32 = 1 << 31;

    /// The libraries' work ids, and how traces name them.
    const LIBRARY: [(WorkId, &str); 7] = [
        (loco_locks::protocol::WL_ACQ, "_wl"),
        (loco_locks::protocol::WL_REL, "_wlr"),
        (loco_locks::protocol::NL_ACQ, "_nl"),
        (loco_locks::protocol::NL_REL, "_nlr"),
        (loco_sv::GF_WORK_ID, "_gf"),
        (loco_sc::protocol::SC_FETCH, "_sc"),
        (loco_sc::protocol::SC_WRITE, "_scw"),
    ];

    /// The tag of a work id: a user's `d<i>` (`WorkId::new(i)`) is i, a library's has the top
    /// bit set.
    pub fn of(wid: WorkId) -> u32 {
        let v = wid.as_u64();
        if wid.is_internal() {
            INTERNAL | (v as u32 & !INTERNAL)
        } else {
            v as u32
        }
    }

    /// The work id of the test's work id number `w` (user ids are 1, 2, ...).
    pub fn user(w: crate::ast::WidId) -> WorkId {
        WorkId::new(w.0 as u32 + 1)
    }

    /// How a tag is written in traces.
    pub fn name(tag: u32, test: &crate::ast::Test) -> String {
        if let Some((_, n)) = LIBRARY.iter().find(|(w, _)| of(*w) == tag) {
            return (*n).into();
        }
        if tag & INTERNAL != 0 {
            return format!("_#{:x}", tag & !INTERNAL);
        }
        test.work_ids
            .get((tag as usize).wrapping_sub(1))
            .cloned()
            .unwrap_or_else(|| format!("#{tag}"))
    }
}

/// A value computed at run time: a register (or 0), masked, plus a constant, with some bits
/// set: `((reg & and) + add) | or`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Val {
    pub reg: Option<usize>,
    pub and: u64,
    pub add: u64,
    pub or: u64,
}

impl Val {
    pub fn of(v: Value) -> Val {
        match v {
            Value::Int(k) => Val::constant(k),
            Value::Reg(r) => Val::reg(r.0),
        }
    }

    fn constant(k: u64) -> Val {
        Val {
            reg: None,
            and: !0,
            add: k,
            or: 0,
        }
    }

    fn reg(reg: usize) -> Val {
        Val {
            reg: Some(reg),
            and: !0,
            add: 0,
            or: 0,
        }
    }

    pub fn eval(&self, regs: &[u64]) -> u64 {
        (self.reg.map_or(0, |r| regs[r]) & self.and).wrapping_add(self.add) | self.or
    }
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reg = |f: &mut std::fmt::Formatter<'_>, r: usize| match self.and {
            u64::MAX => write!(f, "r{r}"),
            m => write!(f, "(r{r}&{m:#x})"),
        };
        match (self.reg, self.add) {
            (None, k) => write!(f, "{k}")?,
            (Some(r), 0) => reg(f, r)?,
            (Some(r), k) => {
                reg(f, r)?;
                write!(f, "+{k}")?
            }
        }
        if self.or != 0 {
            write!(f, "|{:#x}", self.or)?;
        }
        Ok(())
    }
}

/// A remote operation as posted; operands are evaluated when the CPU issues it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PostOp {
    Put {
        local: usize,
        remote: usize,
    },
    Get {
        local: usize,
        remote: usize,
    },
    Rcas {
        remote: usize,
        expected: Val,
        new: Val,
        local: usize,
    },
    Rfaa {
        remote: usize,
        add: Val,
        local: usize,
    },
    Fence,
}

impl PostOp {
    pub fn request(&self, regs: &[u64]) -> WorkRequest {
        match *self {
            PostOp::Put { local, remote } => WorkRequest::Write {
                local,
                remote,
                words: 1,
            },
            PostOp::Get { local, remote } => WorkRequest::Read {
                local,
                remote,
                words: 1,
            },
            PostOp::Rcas {
                remote,
                expected,
                new,
                local,
            } => WorkRequest::CompareSwap {
                remote,
                expected: expected.eval(regs),
                new: new.eval(regs),
                local,
            },
            PostOp::Rfaa { remote, add, local } => WorkRequest::FetchAdd {
                remote,
                add: add.eval(regs),
                local,
            },
            PostOp::Fence => WorkRequest::Fence,
        }
    }
}

/// One machine operation of a thread. Words are indices in a node's memory; CPU words are on
/// the thread's node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Instr {
    /// CPU load into a register.
    Load { reg: usize, word: usize },
    /// CPU store (enters the store buffer).
    Store { word: usize, val: Val },
    /// CPU compare-and-swap (needs an empty store buffer); the old value into `reg`.
    Cas {
        reg: usize,
        word: usize,
        expected: Val,
        new: Val,
    },
    /// CPU fence (needs an empty store buffer).
    Mfence,
    /// Posts a remote operation towards `target` (enters the store buffer). `guard`: the nlock
    /// spin's get, whose remote read may fire only when the remote word is as the guard says.
    Post {
        target: usize,
        op: PostOp,
        tag: u32,
        guard: Option<SpinGuard>,
    },
    /// `poll(n)`.
    Poll { target: usize },
    /// `wait(d)` in its atomic form.
    Wait { tag: u32 },
    /// The wlock spin: blocks until a CPU load of one of `words` reads `val`, or (with `ring`:
    /// its node and the ring) until the highest of them is a ticket whose abandon mark is set.
    Await {
        words: Vec<usize>,
        val: Val,
        ring: Option<(usize, Ring)>,
    },
    /// `reg := a test b ? then : otherwise`.
    Select {
        reg: usize,
        a: Val,
        test: Cmp,
        b: Val,
        then: Val,
        otherwise: Val,
    },
    /// A protocol's branch: jumps (forward) to `target` if `a` and `b` pass `test`.
    Branch {
        a: Val,
        test: Cmp,
        b: Val,
        target: usize,
    },
    /// An unconditional forward jump (the end of a branch's other arm).
    Jump { target: usize },
}

/// When the nlock spin's get may fire: once the remote word holds `until`, or (with `ring`)
/// a ticket whose abandon mark is set, which the spin then passes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SpinGuard {
    pub until: Val,
    pub ring: Option<Ring>,
}

/// A lock's ring of abandon marks as laid out: `len` words from `base` (on the lock's node)
/// of the protocol's `modulus` (the rest of the ring is never written in a test).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Ring {
    pub base: usize,
    pub len: usize,
    pub modulus: u64,
}

impl Ring {
    /// Whether ticket `r`'s mark is set in `mem` (the lock node's memory).
    pub fn marked(&self, mem: &[u64], r: u64) -> bool {
        let slot = (r % self.modulus) as usize;
        slot < self.len && mem[self.base + slot] == r.wrapping_add(1)
    }
}

/// Where an instruction comes from, for traces.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    /// Index of the statement in the thread's body.
    pub stmt: usize,
    /// What the instruction is, in the test's terms (`put(y, x, d1)`, `acquire(l): rfaa(tkt, 1, turn)`).
    pub what: String,
}

/// A thread's machine code.
#[derive(Clone, Debug)]
pub(crate) struct Code {
    pub node: usize,
    pub instrs: Vec<Instr>,
    pub origins: Vec<Origin>,
    /// Registers: the user's, then internal ones.
    pub regs: usize,
}

/// A test, laid out and expanded.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// Words of each node (index = node).
    pub words: Vec<usize>,
    /// Initial memory: `(node, word, value)`.
    pub init: Vec<(usize, usize, u64)>,
    /// Word of each observable location (`(node, word)`), by [`Observable`].
    pub loc_words: Vec<(usize, usize)>,
    pub sv_words: Vec<Vec<Option<usize>>>,
    pub sc_words: Vec<(usize, usize)>,
    pub threads: Vec<Code>,
    /// Names of words, per node, for traces.
    pub word_names: Vec<Vec<String>>,
    /// What a failed remote CAS does (`atomics` of the test).
    pub failed_cas: loco_rdmawait::model::FailedCas,
}

impl Program {
    /// The `(node, word)` of an observable location (`None` for a register).
    pub fn word_of(&self, o: &Observable) -> Option<(usize, usize)> {
        match *o {
            Observable::Reg { .. } => None,
            Observable::Loc(l) => Some(self.loc_words[l.0]),
            Observable::Sc(s) => Some(self.sc_words[s.0]),
            Observable::Sv { sv, node } => {
                self.sv_words[sv.0][node.index()].map(|w| (node.index(), w))
            }
        }
    }
}

struct Layout {
    words: Vec<usize>,
    names: Vec<Vec<String>>,
    init: Vec<(usize, usize, u64)>,
}

impl Layout {
    fn alloc(&mut self, node: usize, name: String, init: u64) -> usize {
        let w = self.words[node];
        self.words[node] += 1;
        self.names[node].push(name);
        if init != 0 {
            self.init.push((node, w, init));
        }
        w
    }
}

/// Per-lock words.
enum LockWords {
    /// wlock/slock: ticket dispenser on `tkt_node`, with the `held[k]` announcement words (per
    /// node of the test; loco-locks' `held` array); per thread index its `turn` word (on its
    /// node) and `rel[t]` copies (on every node of the test). If some thread gives a ticket up:
    /// the ring of abandon marks on `tkt_node` and a `scratch` word per thread.
    Ticket {
        tkt_node: usize,
        tkt: usize,
        held: Vec<Option<usize>>,
        turn: Vec<Option<usize>>,
        rel: Vec<Option<Vec<Option<usize>>>>,
        strong: bool,
        ab: Option<(usize, usize)>,
        scratch: Vec<Option<usize>>,
    },
    /// nlock@n: `tkt` and `rel` on n, a private `loc` word per thread, and the `held[k]`
    /// announcement words on n (per node of the test; loco-locks' `held` array). If some thread
    /// gives a ticket up: the ring of abandon marks on n (`ab`: first word, words laid out) and
    /// a `scratch` word per thread.
    Node {
        node: usize,
        tkt: usize,
        rel: usize,
        loc: Vec<Option<usize>>,
        held: Vec<Option<usize>>,
        ab: Option<(usize, usize)>,
        scratch: Vec<Option<usize>>,
    },
}

struct Lowering<'a> {
    test: &'a Test,
    lay: Layout,
    loc_words: Vec<(usize, usize)>,
    sv_words: Vec<Vec<Option<usize>>>,
    sc_words: Vec<(usize, usize)>,
    locks: Vec<LockWords>,
    /// Per lock, per node: the words of a cohort's handover there (a flag, the ticket).
    handovers: Vec<Vec<Option<(usize, usize)>>>,
    /// Per SC location: its nlock, and per thread its scratch words (a, b).
    sc_locks: Vec<LockWords>,
    sc_scratch: Vec<Vec<Option<(usize, usize)>>>,
    /// Per node: the global fence's dummy word.
    gfw: Vec<Option<usize>>,
    /// Per thread: the global fence's scratch word.
    gf_scratch: Vec<Option<usize>>,
}

/// Lays out and expands a test.
pub(crate) fn lower(test: &Test) -> Program {
    let n = test.cluster_nodes();
    let mut lay = Layout {
        words: vec![0; n],
        names: vec![Vec::new(); n],
        init: Vec::new(),
    };
    let loc_words: Vec<(usize, usize)> = test
        .locs
        .iter()
        .map(|l| {
            let node = l.node.index();
            (node, lay.alloc(node, l.name.clone(), l.init))
        })
        .collect();
    let sv_words: Vec<Vec<Option<usize>>> = test
        .svs
        .iter()
        .map(|s| {
            let mut v = vec![None; n];
            for node in &test.nodes {
                let i = node.index();
                v[i] = Some(lay.alloc(i, format!("{}@{node}", s.name), s.init));
            }
            v
        })
        .collect();
    let sc_words: Vec<(usize, usize)> = test
        .scs
        .iter()
        .map(|s| {
            let node = s.node.index();
            (node, lay.alloc(node, s.name.clone(), s.init))
        })
        .collect();
    let users = |pred: &dyn Fn(&Op) -> bool| -> Vec<bool> {
        test.threads
            .iter()
            .map(|t| t.body.iter().any(|s| pred(&s.op)))
            .collect()
    };
    let lowest = test.nodes.first().map_or(0, |n| n.index());
    let mut locks = Vec::new();
    let mut handovers = Vec::new();
    for (i, l) in test.locks.iter().enumerate() {
        let id = LockId(i);
        let used = users(
            &|op| matches!(op, Op::Acquire(x) | Op::Release(x) | Op::GiveUp(x) | Op::Handoff(x) | Op::Takeover(x) if *x == id),
        );
        let tickets = count(
            test,
            &|op| matches!(op, Op::Acquire(x) | Op::GiveUp(x) if *x == id),
        );
        let gives = count(test, &|op| matches!(op, Op::GiveUp(x) if *x == id));
        let w = match l.kind {
            LockKind::WLock | LockKind::SLock => {
                let tkt = lay.alloc(lowest, format!("tkt_{}", l.name), 0);
                let held = held_words(&mut lay, test, lowest, &l.name, &used);
                let ab = (gives > 0).then(|| ring_words(&mut lay, lowest, &l.name, tickets));
                let scratch = scratch_words(&mut lay, test, &l.name, &used, gives > 0);
                let mut turn = vec![None; test.threads.len()];
                let mut rel = vec![None; test.threads.len()];
                for (t, th) in test.threads.iter().enumerate() {
                    if !used[t] {
                        continue;
                    }
                    let tn = th.node.index();
                    turn[t] = Some(lay.alloc(tn, format!("turn_{}[{}]", l.name, th.name), 0));
                    let mut copies = vec![None; n];
                    for node in &test.nodes {
                        let name = format!("rel_{}[{}]@{node}", l.name, th.name);
                        copies[node.index()] = Some(lay.alloc(node.index(), name, 0));
                    }
                    rel[t] = Some(copies);
                }
                LockWords::Ticket {
                    tkt_node: lowest,
                    tkt,
                    held,
                    turn,
                    rel,
                    strong: l.kind == LockKind::SLock,
                    ab,
                    scratch,
                }
            }
            LockKind::NLock(node) => {
                let ring = (gives > 0).then_some(tickets);
                nlock_words(&mut lay, test, node.index(), &l.name, &used, ring)
            }
        };
        locks.push(w);
        // A cohort's handover on a node: a flag and the ticket handed over, in its memory.
        let mut words = vec![None; n];
        for th in &test.threads {
            if th.body.iter().any(|s| s.op == Op::Handoff(id)) {
                let k = th.node.index();
                words[k] = Some((
                    lay.alloc(k, format!("ho_{}@{}", l.name, th.node), 0),
                    lay.alloc(k, format!("ho_ticket_{}@{}", l.name, th.node), 0),
                ));
            }
        }
        handovers.push(words);
    }
    let mut sc_locks = Vec::new();
    let mut sc_scratch = Vec::new();
    for (i, s) in test.scs.iter().enumerate() {
        let id = ScId(i);
        let used = users(
            &|op| matches!(op, Op::ReadSc { sc, .. } | Op::WriteSc { sc, .. } | Op::CasSc { sc, .. } | Op::FaaSc { sc, .. } if *sc == id),
        );
        sc_locks.push(nlock_words(
            &mut lay,
            test,
            s.node.index(),
            &format!("sc_{}", s.name),
            &used,
            None,
        ));
        let scratch = test
            .threads
            .iter()
            .enumerate()
            .map(|(t, th)| {
                used[t].then(|| {
                    let tn = th.node.index();
                    (
                        lay.alloc(tn, format!("a_{}[{}]", s.name, th.name), 0),
                        lay.alloc(tn, format!("b_{}[{}]", s.name, th.name), 0),
                    )
                })
            })
            .collect();
        sc_scratch.push(scratch);
    }
    let fences = users(&|op| {
        matches!(op, Op::Gf(_))
            || matches!(op, Op::Release(l) if test.locks[l.0].kind == LockKind::SLock)
            || matches!(op, Op::Handoff(l) if test.locks[l.0].kind != LockKind::WLock)
    });
    let mut gfw = vec![None; n];
    if fences.iter().any(|&f| f) {
        for node in &test.nodes {
            gfw[node.index()] = Some(lay.alloc(node.index(), "gfw".into(), 0));
        }
    }
    let gf_scratch = test
        .threads
        .iter()
        .enumerate()
        .map(|(t, th)| {
            fences[t].then(|| lay.alloc(th.node.index(), format!("gf_scratch[{}]", th.name), 0))
        })
        .collect();
    let lw = Lowering {
        test,
        lay,
        loc_words,
        sv_words,
        sc_words,
        locks,
        handovers,
        sc_locks,
        sc_scratch,
        gfw,
        gf_scratch,
    };
    let threads = (0..test.threads.len()).map(|t| lw.thread(t)).collect();
    Program {
        words: lw.lay.words,
        init: lw.lay.init,
        loc_words: lw.loc_words,
        sv_words: lw.sv_words,
        sc_words: lw.sc_words,
        threads,
        word_names: lw.lay.names,
        failed_cas: test.atomics,
    }
}

/// How many statements of the test's threads pass `pred`.
fn count(test: &Test, pred: &dyn Fn(&Op) -> bool) -> usize {
    test.threads
        .iter()
        .flat_map(|t| &t.body)
        .filter(|s| pred(&s.op))
        .count()
}

/// A node lock's words; `ring`: if some thread gives a ticket up, how many tickets the test
/// takes (the ring of abandon marks is laid out for them, at most `MARKS` words).
fn nlock_words(
    lay: &mut Layout,
    test: &Test,
    node: usize,
    name: &str,
    used: &[bool],
    ring: Option<usize>,
) -> LockWords {
    let tkt = lay.alloc(node, format!("tkt_{name}"), 0);
    let rel = lay.alloc(node, format!("rel_{name}"), 0);
    let held = held_words(lay, test, node, name, used);
    // Without give-ups no mark is ever set: the ring and the scratch words are not laid out
    // (the spins look at marks only in tests that give tickets up, and the acquire's first
    // look at `rel`, which would land in scratch, is left out: `Emit::get_until_from`).
    let ab = ring.map(|tickets| ring_words(lay, node, name, tickets));
    let loc = test
        .threads
        .iter()
        .enumerate()
        .map(|(t, th)| {
            used[t].then(|| lay.alloc(th.node.index(), format!("loc_{name}[{}]", th.name), 0))
        })
        .collect();
    let scratch = scratch_words(lay, test, name, used, ring.is_some());
    LockWords::Node {
        node,
        tkt,
        rel,
        loc,
        held,
        ab,
        scratch,
    }
}

/// A lock's ring of abandon marks on `node`, laid out for a test that takes `tickets` tickets
/// (at most `MARKS` words): its first word and length.
fn ring_words(lay: &mut Layout, node: usize, name: &str, tickets: usize) -> (usize, usize) {
    let len = tickets.min(locks::MARKS as usize);
    let base = lay.words[node];
    for i in 0..len {
        lay.alloc(node, format!("ab_{name}[{i}]"), 0);
    }
    (base, len)
}

/// Per thread, its scratch word for a lock (a user's, and only if `some`).
fn scratch_words(
    lay: &mut Layout,
    test: &Test,
    name: &str,
    used: &[bool],
    some: bool,
) -> Vec<Option<usize>> {
    test.threads
        .iter()
        .enumerate()
        .map(|(t, th)| {
            (used[t] && some)
                .then(|| lay.alloc(th.node.index(), format!("scratch_{name}[{}]", th.name), 0))
        })
        .collect()
}

/// A word of node memory, as the lowering's [`Machine`] names it: `word`, or with `idx` the
/// word `word + idx` of an array of `span` words laid out from `word` (the index known only
/// when the thread runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word {
    node: usize,
    word: usize,
    span: usize,
    idx: Option<Val>,
}

fn word(node: usize, word: usize) -> Word {
    Word {
        node,
        word,
        span: 1,
        idx: None,
    }
}

/// A lock's `held[k]` words on `node`, one per node k of the lock's users.
fn held_words(
    lay: &mut Layout,
    test: &Test,
    node: usize,
    name: &str,
    used: &[bool],
) -> Vec<Option<usize>> {
    let mut held = vec![None; test.cluster_nodes()];
    for th in test
        .threads
        .iter()
        .zip(used)
        .filter(|(_, u)| **u)
        .map(|(t, _)| t)
    {
        let k = th.node.index();
        if held[k].is_none() {
            held[k] = Some(lay.alloc(node, format!("held_{name}[{}]", th.node), 0));
        }
    }
    held
}

/// Emits the code of one thread: the [`Machine`] the libraries' protocols run on here.
struct Emit<'a> {
    code: Code,
    stmt: usize,
    /// How many rounds the node lock's spin being lowered may spend passing abandoned tickets
    /// on: the test's give-ups of that lock (each round passes a different ticket on).
    rounds: usize,
    /// The statement being lowered, as written: the prefix of every instruction's origin.
    text: String,
    names: &'a [Vec<String>],
    test: &'a Test,
}

impl Emit<'_> {
    fn push(&mut self, i: Instr, what: String) {
        self.code.instrs.push(i);
        self.code.origins.push(Origin {
            stmt: self.stmt,
            what,
        });
    }

    /// An instruction of a library operation: its origin is the statement, then what it does.
    fn lib(&mut self, i: Instr, what: String) {
        let what = format!("{}: {what}", self.text);
        self.push(i, what);
    }

    fn reg(&mut self) -> usize {
        self.code.regs += 1;
        self.code.regs - 1
    }

    fn name(&self, w: Word) -> String {
        self.names
            .get(w.node)
            .and_then(|n| n.get(w.word))
            .cloned()
            .unwrap_or_else(|| format!("w{}@n{}", w.word, w.node))
    }

    /// Emits `f` for the word `w`: for an indexed word, once per word of its array, each
    /// behind a branch on the index (a switch).
    fn at(&mut self, w: Word, f: impl Fn(&mut Self, Word)) {
        let Some(i) = w.idx else {
            return f(self, w);
        };
        let mut ends = Vec::new();
        for k in 0..w.span {
            let skip = self.jump_if(Cond::ne(i, Val::constant(k as u64)), "");
            f(self, word(w.node, w.word + k));
            ends.push(self.jump());
            self.patch(skip);
        }
        for j in ends {
            self.patch(j);
        }
    }

    /// Emits a forward jump taken if `c` holds (`note`: what taking it means, for traces); its
    /// target is set by [`Emit::patch`] with the returned index.
    fn jump_if(&mut self, c: Cond<Val>, note: &str) -> usize {
        let op = match c.test {
            Cmp::Eq => "==".to_string(),
            Cmp::Ne => "!=".to_string(),
            Cmp::Behind(k) => format!("behind({k})"),
        };
        let j = self.code.instrs.len();
        self.lib(
            Instr::Branch {
                a: c.a,
                test: c.test,
                b: c.b,
                target: usize::MAX,
            },
            format!("if {} {op} {}{note} goto", c.a, c.b),
        );
        j
    }

    /// Emits an unconditional forward jump, to be [`patched`](Emit::patch).
    fn jump(&mut self) -> usize {
        let j = self.code.instrs.len();
        self.lib(Instr::Jump { target: usize::MAX }, "goto".into());
        j
    }

    /// The helping rounds of a spin ([`Machine::get_until`], [`Machine::await_any`]): with
    /// `help`, [`Emit::rounds`] times `round` (which waits, guarded on the ring, and returns
    /// whether the thread may enter and the value to pass on), leaving the spin if it may, else
    /// passing the value on (`help.pass_on`); then `last`, the plain guarded wait.
    fn helping_rounds(
        &mut self,
        help: Option<Help<'_, Self>>,
        mut round: impl FnMut(&mut Self, usize, Ring) -> Result<(Cond<Val>, Val), Infallible>,
        last: impl FnOnce(&mut Self) -> Result<(), Infallible>,
    ) -> Result<(), Infallible> {
        let mut ends = Vec::new();
        if let Some(h) = help {
            let ring = Ring {
                base: h.marks.word,
                len: h.marks.span,
                modulus: h.len,
            };
            for _ in 0..self.rounds {
                let (entered, raw) = round(self, h.marks.node, ring)?;
                ends.push(self.jump_if(entered, " (entered)"));
                (h.pass_on)(self, raw)?;
            }
        }
        last(self)?;
        for j in ends {
            self.patch(j);
        }
        Ok(())
    }

    /// Points the jump at `j` to the next instruction to be emitted.
    fn patch(&mut self, j: usize) {
        let here = self.code.instrs.len();
        match &mut self.code.instrs[j] {
            Instr::Branch { target, .. } | Instr::Jump { target } => *target = here,
            i => unreachable!("patching {i:?}"),
        }
        let o = &mut self.code.origins[j].what;
        o.push_str(&format!(" {here}"));
    }

    fn tag(&self, wid: WorkId) -> (u32, String) {
        let tag = tags::of(wid);
        (tag, tags::name(tag, self.test))
    }

    /// The wlock spin's wait: until one of `words` reads `until` (or the highest is marked in
    /// `ring`).
    fn await_words(&mut self, words: &[Word], until: Val, ring: Option<(usize, Ring)>) {
        let or_marked = if ring.is_some() { " (or marked)" } else { "" };
        let what = match words {
            [w] => format!("await {} = {until}{or_marked}", self.name(*w)),
            _ => format!("await one of {} words = {until}{or_marked}", words.len()),
        };
        let words = words.iter().map(|w| w.word).collect();
        self.lib(
            Instr::Await {
                words,
                val: until,
                ring,
            },
            what,
        );
    }

    /// The spin's get of `remote` into `local`, fired only as `until` and `ring` say.
    fn guarded_get(
        &mut self,
        local: Word,
        remote: Word,
        wid: WorkId,
        until: Val,
        ring: Option<Ring>,
    ) {
        let (tag, name) = self.tag(wid);
        let or_marked = if ring.is_some() { " or marked" } else { "" };
        let what = format!(
            "get({}, {}) once {} = {until}{or_marked} [{name}]",
            self.name(local),
            self.name(remote),
            self.name(remote)
        );
        self.lib(
            Instr::Post {
                target: remote.node,
                op: PostOp::Get {
                    local: local.word,
                    remote: remote.word,
                },
                tag,
                guard: Some(SpinGuard { until, ring }),
            },
            what,
        );
    }

    fn post(&mut self, target: usize, op: PostOp, wid: WorkId, what: String) {
        let (tag, name) = self.tag(wid);
        self.lib(
            Instr::Post {
                target,
                op,
                tag,
                guard: None,
            },
            format!("{what} [{name}]"),
        );
    }
}

/// A protocol step that cannot fail: the lowering only records it.
fn done<T>(r: Result<T, Infallible>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => match e {},
    }
}

impl Machine for Emit<'_> {
    type Word = Word;
    type Val = Val;
    type Error = Infallible;

    fn node(&self) -> loco_rdmawait::NodeId {
        loco_rdmawait::NodeId(self.code.node as u16)
    }

    fn node_of(&self, w: Word) -> loco_rdmawait::NodeId {
        loco_rdmawait::NodeId(w.node as u16)
    }

    fn constant(&mut self, k: u64) -> Val {
        Val::constant(k)
    }

    fn plus(&mut self, v: Val, k: u64) -> Val {
        // `(r + a) | o` plus k is not of the form again; no protocol asks for it (the poison
        // bit is set last, and never by the lowering).
        assert_eq!(v.or, 0, "plus of an or'ed value");
        Val {
            add: v.add.wrapping_add(k),
            ..v
        }
    }

    fn or(&mut self, v: Val, bits: u64) -> Val {
        Val {
            or: v.or | bits,
            ..v
        }
    }

    fn and(&mut self, v: Val, mask: u64) -> Val {
        if v.reg.is_none() {
            return Val::constant(v.eval(&[]) & mask);
        }
        // `((r & a) + k) | o` masked is not of the form again; protocols mask what they loaded.
        assert!(v.add == 0 && v.or == 0, "mask of a computed value");
        Val {
            and: v.and & mask,
            ..v
        }
    }

    fn index(&mut self, base: Word, i: Val, len: u64) -> Result<Word, Infallible> {
        assert!(len.is_power_of_two(), "a ring of {len} words");
        let i = self.and(i, len - 1);
        Ok(Word {
            idx: Some(i),
            ..base
        })
    }

    /// `if c goto then; otherwise; goto end; then: ...; end:` (forward jumps only).
    fn select(&mut self, c: Cond<Val>, then: Val, otherwise: Val) -> Val {
        let reg = self.reg();
        self.lib(
            Instr::Select {
                reg,
                a: c.a,
                test: c.test,
                b: c.b,
                then,
                otherwise,
            },
            format!(
                "r{reg} := {} {:?} {} ? {then} : {otherwise}",
                c.a, c.test, c.b
            ),
        );
        Val::reg(reg)
    }

    fn branch(
        &mut self,
        c: Cond<Val>,
        then: impl FnOnce(&mut Self) -> Result<(), Infallible>,
        otherwise: impl FnOnce(&mut Self) -> Result<(), Infallible>,
    ) -> Result<(), Infallible> {
        let j = self.jump_if(c, "");
        otherwise(self)?;
        let k = self.jump();
        self.patch(j);
        then(self)?;
        self.patch(k);
        Ok(())
    }

    fn load(&mut self, w: Word) -> Result<Val, Infallible> {
        let r = self.reg();
        let what = format!("r{r} := load({})", self.name(w));
        self.lib(
            Instr::Load {
                reg: r,
                word: w.word,
            },
            what,
        );
        Ok(Val::reg(r))
    }

    fn store(&mut self, w: Word, v: Val) -> Result<(), Infallible> {
        let what = format!("store({}, {v})", self.name(w));
        self.lib(
            Instr::Store {
                word: w.word,
                val: v,
            },
            what,
        );
        Ok(())
    }

    fn mfence(&mut self) -> Result<(), Infallible> {
        self.lib(Instr::Mfence, "mfence".into());
        Ok(())
    }

    fn put(&mut self, remote: Word, local: Word, wid: WorkId) -> Result<(), Infallible> {
        self.at(remote, |e, remote| {
            let what = format!("put({}, {})", e.name(remote), e.name(local));
            let op = PostOp::Put {
                local: local.word,
                remote: remote.word,
            };
            e.post(remote.node, op, wid, what);
        });
        Ok(())
    }

    fn get(&mut self, local: Word, remote: Word, wid: WorkId) -> Result<(), Infallible> {
        self.at(remote, |e, remote| {
            let what = format!("get({}, {})", e.name(local), e.name(remote));
            let op = PostOp::Get {
                local: local.word,
                remote: remote.word,
            };
            e.post(remote.node, op, wid, what);
        });
        Ok(())
    }

    /// The test's `fence` setting: a get, or a remote CAS expecting a value the dummy word never
    /// holds (it holds 0), as contexts post it ([`loco_rdmawait::Ctx::fence_read`]).
    fn fence_read(&mut self, local: Word, remote: Word, wid: WorkId) -> Result<(), Infallible> {
        match self.test.fence {
            loco_rdmawait::FenceRead::Get => self.get(local, remote, wid),
            loco_rdmawait::FenceRead::Cas => {
                let k = Val::constant(loco_rdmawait::FENCE_CAS_EXPECTED);
                RmwMachine::rcas(self, remote, k, k, local, wid)
            }
        }
    }

    /// Left out: see [`Emit::get_until_from`].
    fn peek(&mut self, _local: Word, _remote: Word, _wid: WorkId) -> Result<(), Infallible> {
        Ok(())
    }

    fn rfence(&mut self, node: loco_rdmawait::NodeId) -> Result<(), Infallible> {
        self.lib(
            Instr::Post {
                target: node.index(),
                op: PostOp::Fence,
                tag: 0,
                guard: None,
            },
            format!("rfence({node})"),
        );
        Ok(())
    }

    /// Never asked: the lowering's fence words cover every node of the test
    /// ([`Lowering::gf_words`]), and a test names no other.
    fn unknown_node(&self, node: loco_rdmawait::NodeId, nodes: usize) -> Infallible {
        unreachable!("the lowering has fence words for {nodes} nodes, not for {node}")
    }

    fn wait(&mut self, wid: WorkId) -> Result<(), Infallible> {
        let (tag, name) = self.tag(wid);
        self.lib(Instr::Wait { tag }, format!("wait({name})"));
        Ok(())
    }

    /// With `help`, [`Emit::rounds`] rounds that wait until some word reads `until` or the
    /// highest is a marked ticket, then scan the words as the crate does
    /// ([`locks::wlock_scan`]) and leave the spin or pass the highest on (`help.pass_on`); then
    /// the plain await. As for [`Machine::get_until`], the rounds left out change nothing, and
    /// each helping round passes a different ticket on.
    fn await_any(
        &mut self,
        words: &[Word],
        until: Val,
        help: Option<Help<'_, Self>>,
    ) -> Result<Val, Infallible> {
        self.helping_rounds(
            help,
            |e, node, ring| {
                e.await_words(words, until, Some((node, ring)));
                let (hit, high) = locks::wlock_scan(e, words, until)?;
                Ok((Cond::ne(hit, Val::constant(locks::NONE)), high))
            },
            |e| {
                e.await_words(words, until, None);
                Ok(())
            },
        )?;
        Ok(until)
    }

    /// With `help`, [`Emit::rounds`] rounds of `get; wait` whose get fires once the remote
    /// word reads `until` or a marked ticket, each passing a marked ticket on (`help.pass_on`)
    /// or leaving the spin; then the plain guarded round. A round that reads neither changes
    /// nothing, and is left out; each helping round passes a different ticket on, so the test's
    /// give-ups bound their number.
    fn get_until(
        &mut self,
        local: Word,
        remote: Word,
        wid: WorkId,
        until: Val,
        help: Option<Help<'_, Self>>,
    ) -> Result<Val, Infallible> {
        self.helping_rounds(
            help,
            |e, _, ring| {
                e.guarded_get(local, remote, wid, until, Some(ring));
                e.wait(wid)?;
                let raw = e.load(local)?;
                Ok((Cond::eq(raw, until), raw))
            },
            |e| {
                e.guarded_get(local, remote, wid, until, None);
                e.wait(wid)
            },
        )?;
        Ok(until)
    }

    /// The spin of [`Machine::get_until`], `first` aside (the explorer does not post the
    /// [`Machine::peek`] that read it, so it is the scratch word's unwritten 0): the same
    /// outcomes, without a branch at every acquire and without the peek's read interleaving
    /// with everything (together they made the explorer's lock and SC tests 4-30 times
    /// bigger). Had the peek found the lock the thread's, `remote` would still read `until`
    /// (nobody else writes it before the thread's own release: a pass-on needs the ticket
    /// marked, which only its own give-up does), so the spin's guarded read fires at once and
    /// reads the same; had it found another ticket, the spin reads again anyway.
    fn get_until_from(
        &mut self,
        local: Word,
        remote: Word,
        wid: WorkId,
        until: Val,
        _first: Val,
        help: Option<Help<'_, Self>>,
    ) -> Result<Val, Infallible> {
        self.get_until(local, remote, wid, until, help)
    }
}

impl RmwMachine for Emit<'_> {
    fn rcas(
        &mut self,
        remote: Word,
        expected: Val,
        new: Val,
        local: Word,
        wid: WorkId,
    ) -> Result<(), Infallible> {
        self.at(remote, |e, remote| {
            let what = format!(
                "rcas({}, {expected}, {new}, {})",
                e.name(remote),
                e.name(local)
            );
            let op = PostOp::Rcas {
                remote: remote.word,
                expected,
                new,
                local: local.word,
            };
            e.post(remote.node, op, wid, what);
        });
        Ok(())
    }

    fn rfaa(&mut self, remote: Word, add: Val, local: Word, wid: WorkId) -> Result<(), Infallible> {
        let what = format!("rfaa({}, {add}, {})", self.name(remote), self.name(local));
        let op = PostOp::Rfaa {
            remote: remote.word,
            add,
            local: local.word,
        };
        self.post(remote.node, op, wid, what);
        Ok(())
    }
}

/// The node lock of an SC location, as the SC protocol's critical section.
struct ScLock {
    words: locks::NLockWords<Word>,
    /// The ticket held, and the value of `rel` that let it in.
    ticket: Option<(Val, Val)>,
}

impl<'a> sc::Critical<Emit<'a>> for ScLock {
    type Error = Infallible;

    fn acquire(&mut self, m: &mut Emit<'a>) -> Result<(), Infallible> {
        self.ticket = Some(locks::nlock_acquire(m, &self.words)?);
        Ok(())
    }

    fn release(&mut self, m: &mut Emit<'a>) -> Result<(), Infallible> {
        let (t, raw) = self
            .ticket
            .take()
            .unwrap_or((Val::constant(0), Val::constant(0)));
        locks::nlock_release(m, &self.words, t, raw, false)
    }
}

impl Lowering<'_> {
    fn thread(&self, t: usize) -> Code {
        let th = &self.test.threads[t];
        let me = th.node.index();
        let mut e = Emit {
            code: Code {
                node: me,
                instrs: Vec::new(),
                origins: Vec::new(),
                regs: th.regs.len(),
            },
            stmt: 0,
            rounds: 0,
            text: String::new(),
            names: &self.lay.names,
            test: self.test,
        };
        // Per lock, the ticket of the thread's current hold (the parser pairs every release
        // with an acquire before it).
        // Per lock: the ticket held, and the value that let it in.
        let mut held: Vec<Option<(Val, Val)>> = vec![None; self.locks.len()];
        for (s, stmt) in th.body.iter().enumerate() {
            e.stmt = s;
            e.text = stmt.text.clone();
            if !self.machine_op(&mut e, &stmt.op, me, stmt.text.clone()) {
                self.library_op(&mut e, &stmt.op, t, me, &mut held);
            }
        }
        e.code
    }

    /// A statement that is one machine operation: lowered as written. Returns false for a
    /// library operation.
    fn machine_op(&self, e: &mut Emit, op: &Op, me: usize, text: String) -> bool {
        match op {
            Op::Load { reg, var } => {
                let word = self.var_word(*var, me);
                e.push(Instr::Load { reg: reg.0, word }, text);
            }
            Op::Store { var, val } => {
                let word = self.var_word(*var, me);
                e.push(
                    Instr::Store {
                        word,
                        val: Val::of(*val),
                    },
                    text,
                );
            }
            Op::Cas {
                reg,
                loc,
                expected,
                new,
            } => e.push(
                Instr::Cas {
                    reg: reg.0,
                    word: self.word(*loc),
                    expected: Val::of(*expected),
                    new: Val::of(*new),
                },
                text,
            ),
            Op::Mfence => e.push(Instr::Mfence, text),
            Op::Put { remote, local, wid } => {
                let (target, rw) = self.node_word(*remote);
                let op = PostOp::Put {
                    local: self.word(*local),
                    remote: rw,
                };
                user_post(e, target, op, *wid, text);
            }
            Op::Get { local, remote, wid } => {
                let (target, rw) = self.node_word(*remote);
                let op = PostOp::Get {
                    local: self.word(*local),
                    remote: rw,
                };
                user_post(e, target, op, *wid, text);
            }
            Op::Rcas {
                remote,
                expected,
                new,
                local,
                wid,
            } => {
                let (target, rw) = self.node_word(*remote);
                let op = PostOp::Rcas {
                    remote: rw,
                    expected: Val::of(*expected),
                    new: Val::of(*new),
                    local: self.word(*local),
                };
                user_post(e, target, op, *wid, text);
            }
            Op::Rfaa {
                remote,
                add,
                local,
                wid,
            } => {
                let (target, rw) = self.node_word(*remote);
                let op = PostOp::Rfaa {
                    remote: rw,
                    add: Val::of(*add),
                    local: self.word(*local),
                };
                user_post(e, target, op, *wid, text);
            }
            Op::Wait(w) => e.push(
                Instr::Wait {
                    tag: tags::of(tags::user(*w)),
                },
                text,
            ),
            Op::Poll(n) => e.push(Instr::Poll { target: n.index() }, text),
            Op::Rfence(n) => e.push(
                Instr::Post {
                    target: n.index(),
                    op: PostOp::Fence,
                    tag: 0,
                    guard: None,
                },
                text,
            ),
            _ => return false,
        }
        true
    }

    /// A library operation: the library's own protocol, run on the recording machine. `held`:
    /// per lock, the ticket of the thread's current hold.
    fn library_op(
        &self,
        e: &mut Emit,
        op: &Op,
        t: usize,
        me: usize,
        held: &mut [Option<(Val, Val)>],
    ) {
        match op {
            Op::Bcast { sv, nodes, wid } => {
                let copies = self.sv_copies(*sv);
                let copy = |n: loco_rdmawait::NodeId| {
                    word(
                        n.index(),
                        copies[n.index()].expect("sv copy on every node of the test"),
                    )
                };
                done(sv::bcast(e, copy, nodes, tags::user(*wid)));
            }
            Op::Gf(nodes) => {
                let fence = self.gf_words(t);
                done(sv::gf(e, &fence, nodes));
            }
            Op::Acquire(l) => {
                let ticket = match &self.locks[l.0] {
                    lock @ LockWords::Ticket { .. } => {
                        let (w, copies, mine) = self.ticket_lock(lock, t, me);
                        let publish = locks::Publish {
                            mine: &mine,
                            nodes: &self.test.nodes,
                        };
                        e.rounds = count(self.test, &|op| matches!(op, Op::GiveUp(x) if x == l));
                        let t = done(locks::wlock_acquire(e, &w, &copies, publish));
                        e.rounds = 0;
                        t
                    }
                    node @ LockWords::Node { .. } => {
                        let w = node_lock(node, t, me);
                        e.rounds = count(self.test, &|op| matches!(op, Op::GiveUp(x) if x == l));
                        let t = done(locks::nlock_acquire(e, &w));
                        e.rounds = 0;
                        t
                    }
                };
                held[l.0] = Some(ticket);
            }
            Op::GiveUp(l) => match &self.locks[l.0] {
                node @ LockWords::Node { .. } => {
                    let w = node_lock(node, t, me);
                    let (u, _) = done(locks::nlock_take(e, &w));
                    // The mark is never owed in a test: the parser allows at most MARKS tickets
                    // of a lock that is given up, so only one ticket maps to each ring word.
                    done(locks::nlock_give_up(e, &w, u, |_| Ok(())));
                }
                lock @ LockWords::Ticket { .. } => {
                    let (w, copies, mine) = self.ticket_lock(lock, t, me);
                    let publish = locks::Publish {
                        mine: &mine,
                        nodes: &self.test.nodes,
                    };
                    // Its previous release has read its source (as the acquire starts).
                    done(e.wait(locks::WL_REL));
                    let u = done(locks::wlock_take(e, &w));
                    done(locks::wlock_give_up(e, &w, &copies, publish, u, |_| Ok(())));
                }
            },
            Op::Handoff(l) => {
                let (ticket, _) = held[l.0]
                    .take()
                    .unwrap_or((Val::constant(0), Val::constant(0)));
                match &self.locks[l.0] {
                    LockWords::Ticket { strong: true, .. } => {
                        let fence = self.gf_words(t);
                        done(locks::slock_hand_off(e, &fence, &self.test.nodes));
                    }
                    LockWords::Ticket { .. } => done(locks::wlock_hand_off(e)),
                    LockWords::Node { node, .. } => {
                        let fence = self.gf_words(t);
                        let n = loco_rdmawait::NodeId(*node as u16);
                        done(locks::nlock_hand_off(e, &fence, n));
                    }
                }
                // What loco-locks does next: `mfence`, then let the next thread of the node in
                // (here through its memory: the ticket, then the flag).
                e.push(Instr::Mfence, e.text.clone());
                let (flag, tw) = self.handovers[l.0][me].expect("handover words of the node");
                done(e.store(word(me, tw), ticket));
                let one = e.constant(1);
                done(e.store(word(me, flag), one));
            }
            Op::Takeover(l) => {
                let (flag, tw) = self.handovers[l.0][me].expect("handover words of the node");
                let one = e.constant(1);
                done(e.await_any(&[word(me, flag)], one, None));
                let ticket = done(e.load(word(me, tw)));
                held[l.0] = Some((ticket, ticket));
            }
            Op::Release(l) => {
                let (ticket, raw) = held[l.0]
                    .take()
                    .unwrap_or((Val::constant(0), Val::constant(0)));
                match &self.locks[l.0] {
                    LockWords::Ticket { rel, strong, .. } => {
                        let copies = rel[t].as_ref().expect("rel words of a user");
                        let mine = |n: loco_rdmawait::NodeId| {
                            word(n.index(), copies[n.index()].expect("rel copy"))
                        };
                        let nodes = &self.test.nodes;
                        if *strong {
                            let fence = self.gf_words(t);
                            done(locks::slock_release(e, &fence, mine, nodes, ticket, false));
                        } else {
                            done(locks::wlock_release(e, mine, nodes, ticket, false));
                        }
                    }
                    node @ LockWords::Node { .. } => {
                        let w = node_lock(node, t, me);
                        done(locks::nlock_release(e, &w, ticket, raw, false));
                    }
                }
            }
            Op::WriteSc { sc, val } => {
                let (x, _, b) = self.sc_operands(*sc, t);
                let mut lock = self.sc_lock(*sc, t, me);
                done(sc::write_sc(e, &mut lock, x, b, Val::of(*val)));
            }
            Op::ReadSc { reg, sc } => {
                let (x, a, _) = self.sc_operands(*sc, t);
                let mut lock = self.sc_lock(*sc, t, me);
                let v = done(sc::fetch_sc(e, &mut lock, x, a, sc::Access::Read));
                copy_to(e, *reg, v);
            }
            Op::CasSc {
                reg,
                sc,
                expected,
                new,
            } => {
                let (x, a, _) = self.sc_operands(*sc, t);
                let mut lock = self.sc_lock(*sc, t, me);
                let access = sc::Access::Cas {
                    expected: Val::of(*expected),
                    new: Val::of(*new),
                };
                let v = done(sc::fetch_sc(e, &mut lock, x, a, access));
                copy_to(e, *reg, v);
            }
            Op::FaaSc { reg, sc, add } => {
                let (x, a, _) = self.sc_operands(*sc, t);
                let mut lock = self.sc_lock(*sc, t, me);
                let access = sc::Access::Faa { add: Val::of(*add) };
                let v = done(sc::fetch_sc(e, &mut lock, x, a, access));
                copy_to(e, *reg, v);
            }
            _ => {}
        }
    }

    /// A weak or strong lock's words for thread `t` of node `me`: its words, its node's copies
    /// of every `rel[*]`, and its own slot's copy on each node.
    #[allow(clippy::type_complexity)]
    fn ticket_lock<'l>(
        &self,
        lock: &'l LockWords,
        t: usize,
        me: usize,
    ) -> (
        locks::WLockWords<Word>,
        Vec<Word>,
        impl Fn(loco_rdmawait::NodeId) -> Word + 'l,
    ) {
        let LockWords::Ticket {
            tkt_node,
            tkt,
            held,
            turn,
            rel,
            ab,
            scratch,
            ..
        } = lock
        else {
            unreachable!("a weak or strong lock's words")
        };
        let turn = word(me, turn[t].expect("turn word of a user"));
        let w = locks::WLockWords {
            tkt: word(*tkt_node, *tkt),
            held: word(*tkt_node, held[me].expect("held word of a user's node")),
            // Without give-ups, neither is ever named (no round of the spin helps).
            ab: ab.map_or(word(*tkt_node, *tkt), |(base, len)| Word {
                span: len,
                ..word(*tkt_node, base)
            }),
            turn,
            scratch: scratch[t].map_or(turn, |w| word(me, w)),
            // No incarnations here: the announcement is `t + 1`, as before the tag.
            tag: 0,
        };
        let copies: Vec<Word> = rel
            .iter()
            .flatten()
            .map(|c| word(me, c[me].expect("rel copy")))
            .collect();
        let own = rel[t].as_ref().expect("rel words of a user");
        let mine =
            move |n: loco_rdmawait::NodeId| word(n.index(), own[n.index()].expect("rel copy"));
        (w, copies, mine)
    }

    fn word(&self, l: LocId) -> usize {
        self.loc_words[l.0].1
    }

    fn node_word(&self, l: LocId) -> (usize, usize) {
        self.loc_words[l.0]
    }

    fn sv_copies(&self, sv: SvId) -> &[Option<usize>] {
        &self.sv_words[sv.0]
    }

    fn var_word(&self, v: Var, me: usize) -> usize {
        match v {
            Var::Loc(l) => self.word(l),
            Var::Sv(s) => self.sv_copies(s)[me].expect("sv copy on every node of the test"),
        }
    }

    /// The global fence's words for thread `t`: the dummy word of every node of the test (the
    /// other entries are never read) and the thread's scratch word.
    fn gf_words(&self, t: usize) -> sv::GfWords<Word> {
        let me = self.test.threads[t].node.index();
        let scratch = self.gf_scratch[t].expect("scratch of a fencing thread");
        sv::GfWords {
            dummy: self
                .gfw
                .iter()
                .enumerate()
                .map(|(n, w)| word(n, w.unwrap_or(0)))
                .collect(),
            scratch: word(me, scratch),
        }
    }

    /// An SC location's word `x` and thread `t`'s scratch words `a` and `b`.
    fn sc_operands(&self, sc: ScId, t: usize) -> (Word, Word, Word) {
        let (node, x) = self.sc_words[sc.0];
        let me = self.test.threads[t].node.index();
        let (a, b) = self.sc_scratch[sc.0][t].expect("scratch of a user");
        (word(node, x), word(me, a), word(me, b))
    }

    fn sc_lock(&self, sc: ScId, t: usize, me: usize) -> ScLock {
        ScLock {
            words: node_lock(&self.sc_locks[sc.0], t, me),
            ticket: None,
        }
    }
}

/// A user's own remote operation, tagged with its work id.
fn user_post(e: &mut Emit, target: usize, op: PostOp, wid: WidId, text: String) {
    e.push(
        Instr::Post {
            target,
            op,
            tag: tags::of(tags::user(wid)),
            guard: None,
        },
        text,
    );
}

/// The SC operation's result into the user's register: `reg := v`, as a CPU move (the value is
/// a register of the protocol's, read by `load(a)`).
fn copy_to(e: &mut Emit, reg: RegId, v: Val) {
    // The protocol's last step is `load(a)` into a fresh register: make the user's register that
    // load instead of adding a move.
    if let (Some(r), Some(Instr::Load { reg: last, .. })) = (v.reg, e.code.instrs.last_mut()) {
        if *last == r {
            *last = reg.0;
            return;
        }
    }
    debug_assert!(false, "an SC fetch ends with a load of its result");
}

/// A node lock's words for thread `t` of node `me`.
fn node_lock(lock: &LockWords, t: usize, me: usize) -> locks::NLockWords<Word> {
    match *lock {
        LockWords::Node {
            node,
            tkt,
            rel,
            ref loc,
            ref held,
            ab,
            ref scratch,
        } => {
            let loc = word(me, loc[t].expect("loc word of a user"));
            locks::NLockWords {
                tkt: word(node, tkt),
                rel: word(node, rel),
                held: word(node, held[me].expect("held word of a user's node")),
                // Without give-ups, neither is ever written (no round of the spin helps, and
                // the acquire's first look at `rel` is left out).
                ab: ab.map_or(word(node, tkt), |(base, len)| Word {
                    span: len,
                    ..word(node, base)
                }),
                loc,
                scratch: scratch[t].map_or(loc, |w| word(me, w)),
                // No incarnations here: the announcement is `t + 1`, as before the tag.
                tag: 0,
            }
        }
        LockWords::Ticket { .. } => unreachable!("a node lock's words"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(src: &str) -> Program {
        let test = crate::parse::parse(src, "test.litmus").expect("parses");
        lower(&test)
    }

    const LOCKS: &str = "litmus locks
lock w : wlock
lock n : nlock @n1
loc x @n0
thread t0 @n0 {
  r0 = load(x)
  acquire(w)
  release(w)
  acquire(w)
  release(w)
  acquire(n)
  release(n)
}
thread t1 @n1 {
  acquire(w)
  release(w)
}
exists t0:r0 = 0
expect allowed
";

    /// The weak lock's acquire is the crate's: it starts by retiring the thread's last release
    /// (`wait(_wlr)`), a step the hand-written expansion once lacked.
    #[test]
    fn wlock_acquire_starts_with_the_crates_wait_for_the_last_release() {
        let p = lowered(LOCKS);
        let t0 = &p.threads[0];
        let wlr = tags::of(loco_locks::protocol::WL_REL);
        let first_of = |stmt: usize| {
            let i = t0.origins.iter().position(|o| o.stmt == stmt).unwrap();
            &t0.instrs[i]
        };
        assert_eq!(first_of(1), &Instr::Wait { tag: wlr });
        assert_eq!(first_of(3), &Instr::Wait { tag: wlr });
        // The release broadcasts under that tag, to the other node only.
        let posts: Vec<_> = t0
            .instrs
            .iter()
            .zip(&t0.origins)
            .filter(|(i, o)| o.stmt == 2 && matches!(i, Instr::Post { .. }))
            .collect();
        assert_eq!(posts.len(), 1);
        assert!(matches!(posts[0].0, Instr::Post { target: 1, tag, .. } if *tag == wlr));
    }

    /// The node lock's release CAS and `held` announcement carry their own tag, which no
    /// `wait` of the acquire waits for (as in the crate).
    #[test]
    fn nlock_release_ops_are_not_waited_by_the_next_acquire() {
        let p = lowered(LOCKS);
        let t0 = &p.threads[0];
        let nlr = tags::of(loco_locks::protocol::NL_REL);
        let nl = tags::of(loco_locks::protocol::NL_ACQ);
        let ops: Vec<&Instr> = t0
            .instrs
            .iter()
            .zip(&t0.origins)
            .filter(|(_, o)| o.stmt >= 5)
            .map(|(i, _)| i)
            .collect();
        assert!(matches!(ops[0], Instr::Post { op: PostOp::Rfaa { .. }, tag, .. } if *tag == nl));
        assert!(ops
            .iter()
            .any(|i| matches!(i, Instr::Post { guard: Some(_), tag, .. } if *tag == nl)));
        let tagged = |i: &&&Instr| matches!(i, Instr::Post { tag, .. } if *tag == nlr);
        let released: Vec<_> = ops.iter().filter(tagged).collect();
        assert_eq!(released.len(), 2, "the held announcement and the release");
        assert!(matches!(
            released[0],
            Instr::Post {
                op: PostOp::Put { .. },
                ..
            }
        ));
        assert!(!ops
            .iter()
            .any(|i| matches!(i, Instr::Wait { tag } if *tag == nlr)));
        // The release is `rfence(n1); rcas(rel, raw, t + 1, loc)`.
        let n = ops.len();
        assert!(matches!(
            ops[n - 2],
            Instr::Post {
                target: 1,
                op: PostOp::Fence,
                ..
            }
        ));
        assert!(matches!(
            ops[n - 1],
            Instr::Post { target: 1, op: PostOp::Rcas { .. }, tag, .. } if *tag == nlr
        ));
    }

    const GIVEUP: &str = "litmus g
lock n : nlock @n1
lock w : wlock
loc x @n0
thread t0 @n0 {
  r0 = load(x)
  acquire(n)
  release(n)
  acquire(w)
  release(w)
}
thread t1 @n1 {
  giveup(n)
  giveup(n)
  giveup(w)
}
exists t0:r0 = 0
expect allowed
";

    /// Without give-ups nothing branches and no spin helps; with them, each waiter's spin has
    /// one helping round per give-up of that lock, guarded on the lock's ring of marks.
    #[test]
    fn spins_help_once_per_giveup_of_their_lock() {
        let jumps = |c: &Code| {
            c.instrs
                .iter()
                .filter(|i| matches!(i, Instr::Branch { .. } | Instr::Jump { .. }))
                .count()
        };
        assert_eq!(jumps(&lowered(LOCKS).threads[0]), 0);
        let p = lowered(GIVEUP);
        let t0 = &p.threads[0];
        let helping_gets = t0
            .instrs
            .iter()
            .filter(|i| {
                matches!(
                    i,
                    Instr::Post {
                        guard: Some(SpinGuard { ring: Some(_), .. }),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(helping_gets, 2, "two give-ups of n");
        let helping_awaits = t0
            .instrs
            .iter()
            .filter(|i| matches!(i, Instr::Await { ring: Some(_), .. }))
            .count();
        assert_eq!(helping_awaits, 1, "one give-up of w");
        // Every jump of either thread goes forward, at most to the end.
        for c in &p.threads {
            for (k, i) in c.instrs.iter().enumerate() {
                if let Instr::Branch { target, .. } | Instr::Jump { target } = i {
                    assert!(*target > k && *target <= c.instrs.len(), "{k}: {i:?}");
                }
            }
        }
        // The give-up passes the node lock on with a CAS on `rel`, and marks with one on the
        // ring (a switch over the three tickets the test takes).
        let t1 = &p.threads[1];
        let rcas_to = |name: &str| {
            t1.instrs
                .iter()
                .zip(&t1.origins)
                .filter(|(i, o)| {
                    matches!(
                        i,
                        Instr::Post {
                            op: PostOp::Rcas { .. },
                            ..
                        }
                    ) && o.stmt == 0
                        && o.what.contains(&format!("rcas({name}"))
                })
                .count()
        };
        // Handed to it at once; or after marking, whether the mark was already there or the
        // CAS set it (the step after marking is emitted in both arms).
        assert_eq!(rcas_to("rel_n"), 3);
        assert_eq!(rcas_to("ab_n["), 3);
    }

    #[test]
    fn traces_name_the_protocol_steps() {
        let p = lowered(LOCKS);
        let what: Vec<&str> = p.threads[0]
            .origins
            .iter()
            .map(|o| o.what.as_str())
            .collect();
        assert!(
            what.iter()
                .any(|w| w.starts_with("acquire(n): rfaa(tkt_n, 1, loc_n[t0]) [_nl]")),
            "{what:#?}"
        );
        assert!(what.iter().any(|w| w.contains("wait(_wlr)")), "{what:#?}");
    }
}
