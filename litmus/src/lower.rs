//! Library operations expanded into machine operations (docs/model.md §5): what the explorer runs.
//!
//! A [`Program`] lays every word of a test out in node memory (user words, shared-variable
//! copies, SC words, the lock words of docs/model.md §5.3-§5.5, and the scratch words of the global fence and of
//! the SC library), and turns each statement into [`Instr`]s: CPU accesses, posts to a queue
//! pair, polls, waits, and the two await forms of the spin loops.

use loco_rdmawait::WorkRequest;

use crate::ast::*;

/// Completion tags of the libraries' internal work ids (user work ids are 1, 2, ...).
pub(crate) mod tags {
    const INTERNAL: u32 = 1 << 31;
    /// wlock/slock acquire's `rfaa` and its wait.
    pub const WLOCK: u32 = INTERNAL | 1;
    /// wlock release's puts of `rel[me]` (never waited).
    pub const WLOCK_REL: u32 = INTERNAL | 2;
    /// nlock acquire's `rfaa`, guarded `get`, waits, and release's put.
    pub const NLOCK: u32 = INTERNAL | 3;
    /// The global fence's gets and wait.
    pub const GF: u32 = INTERNAL | 4;
    /// SC reads and RMWs, and their wait.
    pub const SC: u32 = INTERNAL | 5;
    /// SC writes' puts (never waited).
    pub const SC_WRITE: u32 = INTERNAL | 6;

    /// How a tag is written in traces.
    pub fn name(tag: u32, test: &crate::ast::Test) -> String {
        match tag {
            WLOCK => "_wl".into(),
            WLOCK_REL => "_wlr".into(),
            NLOCK => "_nl".into(),
            GF => "_gf".into(),
            SC => "_sc".into(),
            SC_WRITE => "_scw".into(),
            t => test
                .work_ids
                .get(t as usize - 1)
                .cloned()
                .unwrap_or_else(|| format!("#{t}")),
        }
    }
}

/// A value computed at run time: a register (or 0) plus a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Val {
    pub reg: Option<usize>,
    pub add: u64,
}

impl Val {
    pub fn of(v: Value) -> Val {
        match v {
            Value::Int(k) => Val { reg: None, add: k },
            Value::Reg(r) => Val {
                reg: Some(r.0),
                add: 0,
            },
        }
    }

    fn reg_plus(reg: usize, add: u64) -> Val {
        Val {
            reg: Some(reg),
            add,
        }
    }

    pub fn eval(&self, regs: &[u64]) -> u64 {
        self.reg.map_or(0, |r| regs[r]).wrapping_add(self.add)
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
    /// spin's get, whose remote read may fire only when the remote word equals this value.
    Post {
        target: usize,
        op: PostOp,
        tag: u32,
        guard: Option<Val>,
    },
    /// `poll(n)`.
    Poll { target: usize },
    /// `wait(d)` in its atomic form.
    Wait { tag: u32 },
    /// The wlock spin: blocks until a CPU load of one of `words` reads `val`.
    Await { words: Vec<usize>, val: Val },
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
    /// wlock/slock: ticket dispenser on `tkt_node`; per thread index its `turn` word (on its
    /// node) and `rel[t]` copies (on every node of the test).
    Ticket {
        tkt_node: usize,
        tkt: usize,
        turn: Vec<Option<usize>>,
        rel: Vec<Option<Vec<Option<usize>>>>,
        strong: bool,
    },
    /// nlock@n: `tkt` and `rel` on n, a private `loc` word per thread, and the `held[k]`
    /// announcement words on n (per node of the test; loco-locks' `held` array).
    Node {
        node: usize,
        tkt: usize,
        rel: usize,
        loc: Vec<Option<usize>>,
        held: Vec<Option<usize>>,
    },
}

struct Lowering<'a> {
    test: &'a Test,
    lay: Layout,
    loc_words: Vec<(usize, usize)>,
    sv_words: Vec<Vec<Option<usize>>>,
    sc_words: Vec<(usize, usize)>,
    locks: Vec<LockWords>,
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
    for (i, l) in test.locks.iter().enumerate() {
        let id = LockId(i);
        let used = users(&|op| matches!(op, Op::Acquire(x) | Op::Release(x) if *x == id));
        let w = match l.kind {
            LockKind::WLock | LockKind::SLock => {
                let tkt = lay.alloc(lowest, format!("tkt_{}", l.name), 0);
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
                    turn,
                    rel,
                    strong: l.kind == LockKind::SLock,
                }
            }
            LockKind::NLock(node) => nlock_words(&mut lay, test, node.index(), &l.name, &used),
        };
        locks.push(w);
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
    }
}

fn nlock_words(lay: &mut Layout, test: &Test, node: usize, name: &str, used: &[bool]) -> LockWords {
    let tkt = lay.alloc(node, format!("tkt_{name}"), 0);
    let rel = lay.alloc(node, format!("rel_{name}"), 0);
    // The abandon marks (`ab[K]`) are not laid out: no litmus thread gives a ticket up, so they
    // stay 0 and the waiters' reads of them never change the outcome (see `acquire`).
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
    let loc = test
        .threads
        .iter()
        .enumerate()
        .map(|(t, th)| {
            used[t].then(|| lay.alloc(th.node.index(), format!("loc_{name}[{}]", th.name), 0))
        })
        .collect();
    LockWords::Node {
        node,
        tkt,
        rel,
        loc,
        held,
    }
}

/// Emits the code of one thread.
struct Emit {
    code: Code,
    stmt: usize,
}

impl Emit {
    fn push(&mut self, i: Instr, what: String) {
        self.code.instrs.push(i);
        self.code.origins.push(Origin {
            stmt: self.stmt,
            what,
        });
    }

    fn reg(&mut self) -> usize {
        self.code.regs += 1;
        self.code.regs - 1
    }

    fn post(&mut self, target: usize, op: PostOp, tag: u32, what: String) {
        self.push(
            Instr::Post {
                target,
                op,
                tag,
                guard: None,
            },
            what,
        );
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
        };
        for (s, stmt) in th.body.iter().enumerate() {
            e.stmt = s;
            let text = stmt.text.clone();
            let uw = |w: WidId| w.0 as u32 + 1;
            match &stmt.op {
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
                    e.post(target, op, uw(*wid), text);
                }
                Op::Get { local, remote, wid } => {
                    let (target, rw) = self.node_word(*remote);
                    let op = PostOp::Get {
                        local: self.word(*local),
                        remote: rw,
                    };
                    e.post(target, op, uw(*wid), text);
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
                    e.post(target, op, uw(*wid), text);
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
                    e.post(target, op, uw(*wid), text);
                }
                Op::Wait(w) => e.push(Instr::Wait { tag: uw(*w) }, text),
                Op::Poll(n) => e.push(Instr::Poll { target: n.index() }, text),
                Op::Rfence(n) => e.post(n.index(), PostOp::Fence, 0, text),
                Op::Bcast { sv, nodes, wid } => {
                    let words = self.sv_copies(*sv);
                    let src = words[me].expect("sv copy on every node of the test");
                    // The own node is skipped, as loco-sv does: its copy is the source.
                    for n in nodes.iter().filter(|n| n.index() != me) {
                        let dst = words[n.index()].expect("sv copy on every node of the test");
                        let op = PostOp::Put {
                            local: src,
                            remote: dst,
                        };
                        e.post(n.index(), op, uw(*wid), format!("{text}: put to {n}"));
                    }
                }
                Op::Gf(nodes) => self.gf(&mut e, t, nodes, &text),
                Op::Acquire(l) => acquire(&mut e, &self.locks[l.0], t, &text),
                Op::Release(l) => {
                    if let LockWords::Ticket { strong: true, .. } = self.locks[l.0] {
                        let nodes = self.test.nodes.clone();
                        self.gf(&mut e, t, &nodes, &format!("{text}: gf(all)"));
                    }
                    release(&mut e, &self.locks[l.0], t, &self.test.nodes, &text);
                }
                Op::WriteSc { sc, val } => {
                    let (node, x) = self.sc_word(*sc);
                    let (_, b) = self.sc_scratch[sc.0][t].expect("scratch of a user");
                    let lock = &self.sc_locks[sc.0];
                    acquire(&mut e, lock, t, &format!("{text}: acquire"));
                    e.push(
                        Instr::Store {
                            word: b,
                            val: Val::of(*val),
                        },
                        format!("{text}: store(b, v)"),
                    );
                    let op = PostOp::Put {
                        local: b,
                        remote: x,
                    };
                    e.post(node, op, tags::SC_WRITE, format!("{text}: put(x, b)"));
                    release(
                        &mut e,
                        lock,
                        t,
                        &self.test.nodes,
                        &format!("{text}: release"),
                    );
                }
                Op::ReadSc { reg, sc } => {
                    let (node, x) = self.sc_word(*sc);
                    let (a, _) = self.sc_scratch[sc.0][t].expect("scratch of a user");
                    let op = PostOp::Get {
                        local: a,
                        remote: x,
                    };
                    self.sc_rmw(&mut e, t, *sc, node, op, reg.0, a, &text);
                }
                Op::CasSc {
                    reg,
                    sc,
                    expected,
                    new,
                } => {
                    let (node, x) = self.sc_word(*sc);
                    let (a, _) = self.sc_scratch[sc.0][t].expect("scratch of a user");
                    let op = PostOp::Rcas {
                        remote: x,
                        expected: Val::of(*expected),
                        new: Val::of(*new),
                        local: a,
                    };
                    self.sc_rmw(&mut e, t, *sc, node, op, reg.0, a, &text);
                }
                Op::FaaSc { reg, sc, add } => {
                    let (node, x) = self.sc_word(*sc);
                    let (a, _) = self.sc_scratch[sc.0][t].expect("scratch of a user");
                    let op = PostOp::Rfaa {
                        remote: x,
                        add: Val::of(*add),
                        local: a,
                    };
                    self.sc_rmw(&mut e, t, *sc, node, op, reg.0, a, &text);
                }
            }
        }
        e.code
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

    fn sc_word(&self, sc: ScId) -> (usize, usize) {
        self.sc_words[sc.0]
    }

    fn var_word(&self, v: Var, me: usize) -> usize {
        match v {
            Var::Loc(l) => self.word(l),
            Var::Sv(s) => self.sv_copies(s)[me].expect("sv copy on every node of the test"),
        }
    }

    /// `gf(N)` (docs/model.md §5.2): per node an rfence and a get of its dummy word, then one wait.
    fn gf(&self, e: &mut Emit, t: usize, nodes: &[NodeId], text: &str) {
        let scratch = self.gf_scratch[t].expect("scratch of a fencing thread");
        for n in nodes {
            let i = n.index();
            e.post(i, PostOp::Fence, 0, format!("{text}: rfence({n})"));
            let op = PostOp::Get {
                local: scratch,
                remote: self.gfw[i].expect("gf word on every node"),
            };
            e.post(i, op, tags::GF, format!("{text}: get(scratch, gfw@{n})"));
        }
        e.push(Instr::Wait { tag: tags::GF }, format!("{text}: wait(_gf)"));
    }

    #[allow(clippy::too_many_arguments)]
    fn sc_rmw(
        &self,
        e: &mut Emit,
        t: usize,
        sc: ScId,
        node: usize,
        op: PostOp,
        reg: usize,
        a: usize,
        text: &str,
    ) {
        let lock = &self.sc_locks[sc.0];
        acquire(e, lock, t, &format!("{text}: acquire"));
        e.post(node, op, tags::SC, format!("{text}: access"));
        release(e, lock, t, &self.test.nodes, &format!("{text}: release"));
        e.push(Instr::Wait { tag: tags::SC }, format!("{text}: wait(_sc)"));
        e.push(Instr::Load { reg, word: a }, format!("{text}: load(a)"));
    }
}

/// A lock's acquire, as loco-locks runs it when no thread gives a ticket up or dies.
///
/// The failure paths of loco-locks (a waiter that finds the lock released to an abandoned
/// ticket, or to a ticket entered by a dead node, passes it on) are not lowered: a litmus thread
/// never gives a ticket up and no node dies, so the abandon marks stay 0, the dead-holder check
/// reads nothing, and those branches are never taken; the reads they would add change no value
/// any thread computes. What is lowered is everything the protocols write on the way: the
/// node lock's `held` announcement included.
fn acquire(e: &mut Emit, lock: &LockWords, t: usize, text: &str) {
    match lock {
        LockWords::Ticket {
            tkt_node,
            tkt,
            turn,
            rel,
            ..
        } => {
            let turn = turn[t].expect("turn word of a user");
            let op = PostOp::Rfaa {
                remote: *tkt,
                add: Val { reg: None, add: 1 },
                local: turn,
            };
            e.post(
                *tkt_node,
                op,
                tags::WLOCK,
                format!("{text}: rfaa(tkt, 1, turn)"),
            );
            e.push(
                Instr::Wait { tag: tags::WLOCK },
                format!("{text}: wait(_wl)"),
            );
            let r = e.reg();
            e.push(
                Instr::Load { reg: r, word: turn },
                format!("{text}: t = load(turn)"),
            );
            let me = e.code.node;
            let words = rel
                .iter()
                .flatten()
                .map(|c| c[me].expect("rel copy"))
                .collect();
            e.push(
                Instr::Await {
                    words,
                    val: Val::reg_plus(r, 0),
                },
                format!("{text}: await some rel[*] = t"),
            );
        }
        LockWords::Node {
            node,
            tkt,
            rel,
            loc,
            held,
        } => {
            let loc = loc[t].expect("loc word of a user");
            let op = PostOp::Rfaa {
                remote: *tkt,
                add: Val { reg: None, add: 1 },
                local: loc,
            };
            e.post(*node, op, tags::NLOCK, format!("{text}: rfaa(tkt, 1, loc)"));
            e.push(
                Instr::Wait { tag: tags::NLOCK },
                format!("{text}: wait(_nl)"),
            );
            let r = e.reg();
            e.push(
                Instr::Load { reg: r, word: loc },
                format!("{text}: t = load(loc)"),
            );
            e.push(
                Instr::Post {
                    target: *node,
                    op: PostOp::Get {
                        local: loc,
                        remote: *rel,
                    },
                    tag: tags::NLOCK,
                    guard: Some(Val::reg_plus(r, 0)),
                },
                format!("{text}: get(loc, rel) once rel = t"),
            );
            e.push(
                Instr::Wait { tag: tags::NLOCK },
                format!("{text}: wait(_nl)"),
            );
            e.push(
                Instr::Store {
                    word: loc,
                    val: Val::reg_plus(r, 1),
                },
                format!("{text}: store(loc, t+1)"),
            );
            // The hold's announcement for waiters that find this node dead (never waited).
            let me = e.code.node;
            let op = PostOp::Put {
                local: loc,
                remote: held[me].expect("held word of a user's node"),
            };
            e.post(
                *node,
                op,
                tags::NLOCK,
                format!("{text}: put(held[me], loc)"),
            );
        }
    }
}

fn release(e: &mut Emit, lock: &LockWords, t: usize, nodes: &[NodeId], text: &str) {
    match lock {
        LockWords::Ticket { turn, rel, .. } => {
            let turn = turn[t].expect("turn word of a user");
            let copies = rel[t].as_ref().expect("rel words of a user");
            let me = e.code.node;
            let r = e.reg();
            e.push(
                Instr::Load { reg: r, word: turn },
                format!("{text}: u = load(turn)"),
            );
            let mine = copies[me].expect("rel copy");
            e.push(
                Instr::Store {
                    word: mine,
                    val: Val::reg_plus(r, 1),
                },
                format!("{text}: store(rel[me], u+1)"),
            );
            for n in nodes.iter().filter(|n| n.index() != me) {
                let op = PostOp::Put {
                    local: mine,
                    remote: copies[n.index()].expect("rel copy"),
                };
                e.post(
                    n.index(),
                    op,
                    tags::WLOCK_REL,
                    format!("{text}: put(rel[me]@{n}, rel[me])"),
                );
            }
        }
        LockWords::Node { node, rel, loc, .. } => {
            let loc = loc[t].expect("loc word of a user");
            let n = NodeId(*node as u16);
            e.post(*node, PostOp::Fence, 0, format!("{text}: rfence({n})"));
            let op = PostOp::Put {
                local: loc,
                remote: *rel,
            };
            e.post(*node, op, tags::NLOCK, format!("{text}: put(rel, loc)"));
        }
    }
}
