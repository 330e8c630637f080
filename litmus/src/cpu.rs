//! The whole-system state the explorer walks: memory, remote-atomic locks, and per thread its
//! program counter, registers, TSO store buffer and queue pairs.
//!
//! The NIC half of every transition is [`loco_rdmawait::model`]'s (each rule is written once in
//! the project), and so is the TSO store buffer through which stores *and* posted remote
//! operations travel in program order ([`StoreBuffer`], shared with the soft NIC's `Chaos`
//! schedule); this module adds the rest of the CPU half of docs/model.md §4.2: loads,
//! `cas`/`mfence` needing an empty buffer, `poll`, the atomic form of `wait(d)`, and the two
//! await forms of the spin loops of docs/model.md §5.8.
//!
//! | state (docs/model.md §4.1) | here |
//! |---|---|
//! | memory of every node | [`State::mem`] |
//! | per node: remote-atomic lock | [`State::locks`] |
//! | per thread: pc, registers | [`ThreadState::pc`], [`ThreadState::regs`] |
//! | per thread: TSO store buffer | [`ThreadState::sb`], a [`StoreBuffer`]: stores and posted remote ops, in program order |
//! | per (thread, node): pipe, `Br`, `Bl` | [`ThreadState::qps`], one [`Qp`] per node |

use loco_rdmawait::model::{ClusterMemory, Entry, LocalItem, Post, Qp, SbItem, Step, StoreBuffer};
use loco_rdmawait::protocol::Test;
use loco_rdmawait::{NodeId, WorkRequest};

use crate::lower::{Instr, Program, Ring};
use crate::reduce::Owners;

/// The nlock spin's guarded get: its remote read may fire only when `remote` holds `value`,
/// or (with `ring`) a ticket whose abandon mark is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Guard {
    target: usize,
    local: usize,
    remote: usize,
    value: u64,
    ring: Option<Ring>,
}

impl Guard {
    /// Whether the get may fire in `mem` (the target node's memory).
    fn open(&self, mem: &[u64]) -> bool {
        let v = mem[self.remote];
        v == self.value || self.ring.is_some_and(|r| r.marked(mem, v))
    }
}

/// One thread.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ThreadState {
    pub pc: usize,
    pub regs: Vec<u64>,
    pub sb: StoreBuffer<Post>,
    pub qps: Vec<Qp>,
    guard: Option<Guard>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub mem: Vec<Vec<u64>>,
    pub locks: Vec<bool>,
    pub threads: Vec<ThreadState>,
}

/// One transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Thread `thread` executes its next machine operation.
    Exec {
        /// Thread index.
        thread: usize,
    },
    /// The head of thread `thread`'s store buffer leaves it (to memory or to a pipe).
    Flush {
        /// Thread index.
        thread: usize,
    },
    /// A NIC rule on thread `thread`'s queue pair towards node `target`.
    Nic {
        /// Thread index.
        thread: usize,
        /// Target node.
        target: usize,
        /// The rule ([`loco_rdmawait::model::Step`]).
        step: Step,
    },
}

impl Action {
    /// The thread the action belongs to.
    pub fn thread(&self) -> usize {
        match *self {
            Action::Exec { thread } | Action::Flush { thread } | Action::Nic { thread, .. } => {
                thread
            }
        }
    }
}

struct Mem<'a>(&'a mut [Vec<u64>]);

/// The [`NodeId`] of node index `n`; every node index of a program comes from a test's
/// [`NodeId`]s, so it fits.
fn node_id(n: usize) -> NodeId {
    NodeId(n as u16)
}

impl ClusterMemory for Mem<'_> {
    fn read(&self, node: NodeId, word: usize) -> u64 {
        self.0[node.index()][word]
    }
    fn write(&mut self, node: NodeId, word: usize, value: u64) {
        self.0[node.index()][word] = value;
    }
}

impl ThreadState {
    /// Runs the thread's register-only instructions at `pc` (branches, jumps, selects): they
    /// touch nothing another thread or the NIC can see, so they take no transition of their
    /// own: a thread's `pc` rests only on instructions that do. (Forward jumps only: this ends.)
    fn run_local(&mut self, code: &crate::lower::Code) {
        while let Some(i) = code.instrs.get(self.pc) {
            self.pc = match i {
                Instr::Branch { a, test, b, target } => {
                    if test.holds(a.eval(&self.regs), b.eval(&self.regs)) {
                        *target
                    } else {
                        self.pc + 1
                    }
                }
                Instr::Jump { target } => *target,
                Instr::Select {
                    reg,
                    a,
                    test,
                    b,
                    then,
                    otherwise,
                } => {
                    let pick = if test.holds(a.eval(&self.regs), b.eval(&self.regs)) {
                        then
                    } else {
                        otherwise
                    };
                    self.regs[*reg] = pick.eval(&self.regs);
                    self.pc + 1
                }
                _ => return,
            };
        }
    }

    /// x86-TSO load: the newest own buffered store to `word`, else memory.
    fn load(&self, mem: &[u64], word: usize) -> u64 {
        self.sb.load(word, || mem[word])
    }

    fn settled(&self, len: usize) -> bool {
        self.pc == len && self.sb.is_empty() && self.qps.iter().all(Qp::is_settled)
    }
}

impl State {
    pub fn initial(prog: &Program) -> State {
        let mut mem: Vec<Vec<u64>> = prog.words.iter().map(|&n| vec![0; n]).collect();
        for &(n, w, v) in &prog.init {
            mem[n][w] = v;
        }
        let nodes = prog.words.len();
        State {
            mem,
            locks: vec![false; nodes],
            threads: prog
                .threads
                .iter()
                .map(|c| {
                    let mut th = ThreadState {
                        pc: 0,
                        regs: vec![0; c.regs],
                        sb: StoreBuffer::new(),
                        qps: (0..nodes)
                            .map(|n| {
                                Qp::new(node_id(c.node), node_id(n))
                                    .with_failed_cas(prog.failed_cas)
                            })
                            .collect(),
                        guard: None,
                    };
                    th.run_local(c);
                    th
                })
                .collect(),
        }
    }

    /// Every thread finished, store buffers, pipes and `Br` empty, `Bl` holding only notices.
    pub fn is_final(&self, prog: &Program) -> bool {
        self.threads
            .iter()
            .zip(&prog.threads)
            .all(|(t, c)| t.settled(c.instrs.len()))
    }

    /// Whether thread `t`'s next instruction may execute.
    fn exec_enabled(&self, prog: &Program, t: usize) -> bool {
        let th = &self.threads[t];
        let code = &prog.threads[t];
        let Some(instr) = code.instrs.get(th.pc) else {
            return false;
        };
        match instr {
            Instr::Load { .. } | Instr::Store { .. } | Instr::Post { .. } => true,
            Instr::Cas { .. } | Instr::Mfence => th.sb.is_empty(),
            Instr::Poll { target } => {
                matches!(th.qps[*target].bl.front(), Some(LocalItem::Notice(_)))
            }
            Instr::Wait { tag } => {
                !th.sb.posts().any(|p| p.tag == *tag)
                    && th.qps.iter().all(|q| q.wait_ready(*tag).is_some())
            }
            Instr::Await { words, val, ring } => {
                let v = val.eval(&th.regs);
                let mem = &self.mem[code.node];
                if words.iter().any(|&w| th.load(mem, w) == v) {
                    return true;
                }
                // The highest value read (in ticket order, as the crate's scan), if marked.
                let Some((node, ring)) = ring else {
                    return false;
                };
                let high = words.iter().map(|&w| th.load(mem, w)).reduce(|h, x| {
                    if Test::Behind(1).holds(h, x) {
                        x
                    } else {
                        h
                    }
                });
                high.is_some_and(|h| ring.marked(&self.mem[*node], h))
            }
            // Never at `pc` (see `run_local`).
            Instr::Branch { .. } | Instr::Jump { .. } | Instr::Select { .. } => false,
        }
    }

    /// Appends the enabled actions to `out`. If some action is *eager* (it commutes with every
    /// other transition and no transition it depends on can come first: the partial-order
    /// reduction of the explorer), `out` gets that action alone.
    pub fn actions(
        &self,
        prog: &Program,
        reduce: Option<&Owners>,
        out: &mut Vec<Action>,
        steps: &mut Vec<Step>,
    ) {
        self.actions_basic(prog, reduce.is_some(), out, steps);
        if let Some(owners) = reduce {
            if out.len() > 1 {
                if let Some(&a) = out.iter().find(|&&a| owners.alone(prog, self, a)) {
                    out.clear();
                    out.push(a);
                }
            }
        }
    }

    /// [`State::actions`] with the reduction of this module only (see `reduce.rs` for the rest).
    fn actions_basic(
        &self,
        prog: &Program,
        reduce: bool,
        out: &mut Vec<Action>,
        steps: &mut Vec<Step>,
    ) {
        out.clear();
        for (t, th) in self.threads.iter().enumerate() {
            if self.exec_enabled(prog, t) {
                let eager = match &prog.threads[t].instrs[th.pc] {
                    Instr::Store { .. }
                    | Instr::Post { .. }
                    | Instr::Mfence
                    | Instr::Poll { .. }
                    | Instr::Wait { .. }
                    | Instr::Branch { .. }
                    | Instr::Jump { .. }
                    | Instr::Select { .. } => true,
                    Instr::Load { .. } | Instr::Cas { .. } | Instr::Await { .. } => false,
                };
                if eager && reduce {
                    out.clear();
                    out.push(Action::Exec { thread: t });
                    return;
                }
                out.push(Action::Exec { thread: t });
            }
            match th.sb.front() {
                Some(SbItem::Post(_)) if reduce => {
                    out.clear();
                    out.push(Action::Flush { thread: t });
                    return;
                }
                Some(_) => out.push(Action::Flush { thread: t }),
                None => {}
            }
            for (n, qp) in th.qps.iter().enumerate() {
                steps.clear();
                qp.steps(&self.locks, steps);
                for &step in steps.iter() {
                    if let Step::Pipe(i) = step {
                        match &qp.pipe[i] {
                            Entry::Fence | Entry::Ack { .. } if reduce => {
                                out.clear();
                                out.push(Action::Nic {
                                    thread: t,
                                    target: n,
                                    step,
                                });
                                return;
                            }
                            Entry::Get { local, remote, .. } => {
                                if let Some(g) = th.guard {
                                    let guarded =
                                        g.target == n && g.local == *local && g.remote == *remote;
                                    if guarded && !g.open(&self.mem[n]) {
                                        continue;
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                    out.push(Action::Nic {
                        thread: t,
                        target: n,
                        step,
                    });
                }
            }
        }
    }

    /// Takes an action that [`State::actions`] listed.
    pub fn apply(&mut self, prog: &Program, a: Action) {
        match a {
            Action::Exec { thread } => self.exec(prog, thread),
            Action::Flush { thread } => {
                let mem = &mut self.mem[prog.threads[thread].node];
                let th = &mut self.threads[thread];
                let flushed = th.sb.flush(&mut th.qps, |word, value| mem[word] = value);
                assert!(flushed, "flush of an empty store buffer");
            }
            Action::Nic {
                thread,
                target,
                step,
            } => {
                let th = &mut self.threads[thread];
                let qp = &mut th.qps[target];
                if let (Step::Pipe(i), Some(g)) = (step, th.guard) {
                    if matches!(qp.pipe[i], Entry::Get { local, remote, .. }
                        if g.target == target && g.local == local && g.remote == remote)
                    {
                        th.guard = None;
                    }
                }
                qp.apply(step, &mut Mem(&mut self.mem), &mut self.locks);
            }
        }
    }

    fn exec(&mut self, prog: &Program, t: usize) {
        let code = &prog.threads[t];
        let node = code.node;
        let th = &mut self.threads[t];
        let next = th.pc + 1;
        match &code.instrs[th.pc] {
            Instr::Load { reg, word } => th.regs[*reg] = th.load(&self.mem[node], *word),
            Instr::Store { word, val } => {
                let value = val.eval(&th.regs);
                th.sb.store(*word, value);
            }
            Instr::Cas {
                reg,
                word,
                expected,
                new,
            } => {
                let old = self.mem[node][*word];
                if old == expected.eval(&th.regs) {
                    self.mem[node][*word] = new.eval(&th.regs);
                }
                th.regs[*reg] = old;
            }
            Instr::Mfence | Instr::Await { .. } => {}
            Instr::Post {
                target,
                op,
                tag,
                guard,
            } => {
                let wr = op.request(&th.regs);
                if let (Some(g), WorkRequest::Read { local, remote, .. }) = (guard, wr) {
                    th.guard = Some(Guard {
                        target: *target,
                        local,
                        remote,
                        value: g.until.eval(&th.regs),
                        ring: g.ring,
                    });
                }
                th.sb.post(Post {
                    target: node_id(*target),
                    wr,
                    tag: *tag,
                });
            }
            Instr::Poll { target } => {
                th.qps[*target]
                    .take_notice()
                    .expect("poll enabled with a notice at the head");
            }
            Instr::Wait { tag } => {
                for qp in &mut th.qps {
                    let k = qp.wait_ready(*tag).expect("wait enabled");
                    qp.take_notices(k);
                }
            }
            Instr::Branch { .. } | Instr::Jump { .. } | Instr::Select { .. } => {
                unreachable!("register-only instructions run with the one before")
            }
        }
        th.pc = next;
        th.run_local(code);
    }
}

impl State {
    /// Roughly the heap bytes this state owns (for the explorer's memory budget).
    pub fn heap_bytes(&self) -> usize {
        let words: usize = self.mem.iter().map(|m| 8 * m.len() + 24).sum();
        let threads: usize = self
            .threads
            .iter()
            .map(|t| {
                let qps: usize = t
                    .qps
                    .iter()
                    .map(|q| 200 + 64 * (q.pipe.len() + q.br.len() + q.bl.len()))
                    .sum();
                8 * t.regs.len() + 48 * t.sb.len() + qps + 128
            })
            .sum();
        words + threads + self.locks.len()
    }
}
