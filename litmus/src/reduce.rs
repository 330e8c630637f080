//! The explorer's partial-order reduction: which enabled transition may be taken alone.
//!
//! A transition `a` enabled in a state `s` may be explored alone (a *singleton persistent set*,
//! Godefroid 1996) when every transition that can occur from `s` in some execution that does
//! not take `a` is independent of `a`: it neither enables nor disables `a`, and the two commute
//! (either order reaches the same state). Exploring only persistent sets reaches every
//! *terminal* state of the full graph (Godefroid, Thm. 6.14) — and the explorer's results are
//! terminal states only: final outcomes and stuck states. The state graph is acyclic, so the
//! "ignoring" problem (and a cycle proviso) does not arise; caching visited states by
//! fingerprint does not change this (a cached state's terminal states were already found).
//!
//! Each rule below names the state `a` touches and why nothing else can touch it first. Two
//! facts are used throughout:
//! - **private words**: a word that only thread `t`'s instructions and posts ever name (a static
//!   scan of the lowered program) is touched by no other thread's transition.
//! - **a thread's own future accesses** come from its queue pairs (pipe entries, `Br`, `Bl`),
//!   its store buffer, and its instructions from `pc` on; the rules check these in the state.
//!
//! | transition `a` of thread `t` | taken alone when | why |
//! |---|---|---|
//! | `Exec` of a load of word `w` | `w` private; no queue pair or buffered post of `t` names `w` | nothing else writes `w`; flushing a buffered store to `w` does not change what TSO forwarding reads |
//! | `Exec` of a `cas` / await on private words | same | same; `cas` needs an empty store buffer, which only `t`'s own next instruction could refill |
//! | `Flush` of a store to `w` | `w` private; no queue pair of `t` names `w` | only `t`'s loads read `w`, and they forward from the buffer either way |
//! | pipe `Send`/`Atomic` (to `Br`) | no older `Get`/`Rmw` in the pipe | touches only its queue pair; the only steps a non-empty `Br` disables are older gets and RMWs |
//! | pipe `Load` (to `Bl`, at the head) | no `Put` in the pipe, and no post towards its node in the store buffer or before a `wait` on its tag | touches only its queue pair; a write in `Bl` disables only puts' local reads |
//! | `CommitLocal` of a write to `w` | `w` private; nothing else of `t` names `w` before a `wait` that this write blocks | later writes of `w` in the same `Bl` commit after it; that `wait` cannot pass before it |
//! | pipe `Put` reading `w` (nLR) | `w` private; no older get/RMW/load in the pipe; nothing of `t` writes `w` before a `wait` on the put's tag | no write of `w` can come first, and no local write can enter `Bl` to disable it |
//!
//! The older reduction (stores and posts entering the store buffer, posts leaving it, rfences
//! leaving a pipe, acknowledgements, enabled `poll`/`wait`/`mfence`) is in `cpu.rs`; the
//! explorer cross-checks both against the unreduced graph on every shipped test.

use loco_rdmawait::model::{Entry, LocalItem, Qp, SbItem, Step};
use loco_rdmawait::WorkRequest;

use crate::cpu::{Action, State, ThreadState};
use crate::lower::{Instr, PostOp, Program};

/// Who names each word of each node: nobody, one thread, or several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Nobody,
    One(usize),
    Many,
}

/// The static part of the reduction: each word's owner.
#[derive(Clone, Debug)]
pub(crate) struct Owners {
    owner: Vec<Vec<Owner>>,
}

impl Owners {
    pub fn new(prog: &Program) -> Owners {
        let mut owner: Vec<Vec<Owner>> =
            prog.words.iter().map(|&n| vec![Owner::Nobody; n]).collect();
        let mut mark = |node: usize, word: usize, t: usize| {
            if let Some(o) = owner.get_mut(node).and_then(|v| v.get_mut(word)) {
                *o = match *o {
                    Owner::Nobody => Owner::One(t),
                    Owner::One(u) if u == t => Owner::One(t),
                    _ => Owner::Many,
                };
            }
        };
        for (t, code) in prog.threads.iter().enumerate() {
            let me = code.node;
            for i in &code.instrs {
                match i {
                    Instr::Load { word, .. }
                    | Instr::Store { word, .. }
                    | Instr::Cas { word, .. } => mark(me, *word, t),
                    Instr::Await { words, ring, .. } => {
                        words.iter().for_each(|&w| mark(me, w, t));
                        // The guard reads the ring too.
                        if let Some((n, r)) = ring {
                            (r.base..r.base + r.len).for_each(|w| mark(*n, w, t));
                        }
                    }
                    Instr::Post {
                        target, op, guard, ..
                    } => match *op {
                        PostOp::Put { local, remote } | PostOp::Get { local, remote } => {
                            mark(me, local, t);
                            mark(*target, remote, t);
                            if let Some(r) = guard.and_then(|g| g.ring) {
                                (r.base..r.base + r.len).for_each(|w| mark(*target, w, t));
                            }
                        }
                        PostOp::Rcas { remote, local, .. } | PostOp::Rfaa { remote, local, .. } => {
                            mark(me, local, t);
                            mark(*target, remote, t);
                        }
                        PostOp::Fence => {}
                    },
                    Instr::Mfence
                    | Instr::Poll { .. }
                    | Instr::Wait { .. }
                    | Instr::Branch { .. }
                    | Instr::Jump { .. }
                    | Instr::Select { .. } => {}
                }
            }
        }
        Owners { owner }
    }

    fn private(&self, node: usize, word: usize, t: usize) -> bool {
        matches!(
            self.owner.get(node).and_then(|v| v.get(word)),
            Some(Owner::One(u)) if *u == t
        )
    }
}

fn covers(first: usize, len: usize, w: usize) -> bool {
    w >= first && w - first < len.max(1)
}

/// Whether queue pair `qp` names word `w` of node `node` anywhere: on its local side (pipe
/// entries' local words, `Bl` writes) if `node` is its local node, on its remote side (pipe
/// entries' remote words, `Br`) if `node` is its target.
fn qp_names(qp: &Qp, node: usize, w: usize, local_side: bool, remote_side: bool) -> bool {
    let loc = local_side && qp.local_node.index() == node;
    let rem = remote_side && qp.remote_node.index() == node;
    if !loc && !rem {
        return false;
    }
    let in_pipe = qp.pipe.iter().any(|e| match e {
        Entry::Put {
            local,
            remote,
            words,
            ..
        }
        | Entry::Get {
            local,
            remote,
            words,
            ..
        } => (loc && covers(*local, *words, w)) || (rem && covers(*remote, *words, w)),
        Entry::Send { remote, values, .. } => rem && covers(*remote, values.len(), w),
        Entry::Load { local, values, .. } => loc && covers(*local, values.len(), w),
        Entry::Rmw { remote, local, .. } => (loc && *local == w) || (rem && *remote == w),
        Entry::Atomic { remote, .. } => rem && *remote == w,
        Entry::Ack { .. } | Entry::Fence => false,
    });
    in_pipe
        || (rem && qp.br.iter().any(|b| covers(b.remote, b.values.len(), w)))
        || (loc && qp.bl.iter().any(
            |i| matches!(i, LocalItem::Write { local, values } if covers(*local, values.len(), w)),
        ))
}

/// Whether a work request names word `w` of `node` (posted by a thread on `me` to `target`).
fn wr_names(wr: &WorkRequest, me: usize, target: usize, node: usize, w: usize) -> bool {
    let Some((local, remote, len)) = wr.span() else {
        return false;
    };
    (me == node && covers(local, len, w)) || (target == node && covers(remote, len, w))
}

fn sb_posts_name(th: &ThreadState, me: usize, node: usize, w: usize) -> bool {
    th.sb
        .posts()
        .any(|p| wr_names(&p.wr, me, p.target.index(), node, w))
}

fn sb_stores_to(th: &ThreadState, w: usize) -> bool {
    th.sb.stores().any(|(word, _)| word == w)
}

/// Whether instruction `i` of a thread on `me` names word `w` of `me`; `writes_only`: only
/// instructions that may write it (stores, `cas`, posts whose local word receives a value).
fn instr_names(i: &Instr, me: usize, w: usize, writes_only: bool) -> bool {
    match i {
        Instr::Load { word, .. } => !writes_only && *word == w,
        Instr::Await { words, ring, .. } => {
            !writes_only
                && (words.contains(&w)
                    || ring.is_some_and(|(n, r)| n == me && (r.base..r.base + r.len).contains(&w)))
        }
        Instr::Store { word, .. } | Instr::Cas { word, .. } => *word == w,
        Instr::Post {
            target, op, guard, ..
        } => match *op {
            PostOp::Put { local, remote } => {
                (!writes_only && local == w) || (*target == me && remote == w)
            }
            PostOp::Get { local, remote } => {
                let guard_reads = guard
                    .and_then(|g| g.ring)
                    .is_some_and(|r| (r.base..r.base + r.len).contains(&w));
                local == w || (!writes_only && *target == me && (remote == w || guard_reads))
            }
            PostOp::Rcas { remote, local, .. } | PostOp::Rfaa { remote, local, .. } => {
                local == w || (*target == me && remote == w)
            }
            PostOp::Fence => false,
        },
        Instr::Mfence
        | Instr::Poll { .. }
        | Instr::Wait { .. }
        | Instr::Branch { .. }
        | Instr::Jump { .. }
        | Instr::Select { .. } => false,
    }
}

impl Owners {
    /// Whether thread `t`'s transition `a`, enabled in `s`, may be taken alone (module docs).
    pub fn alone(&self, prog: &Program, s: &State, a: Action) -> bool {
        let t = a.thread();
        let th = &s.threads[t];
        let me = prog.threads[t].node;
        // No queue pair of `t` names (me, w); `skip`: a queue pair whose local side is not
        // counted (the one a rule is about).
        let qps_clear = |w: usize, skip: Option<usize>| {
            th.qps
                .iter()
                .enumerate()
                .all(|(n, q)| !qp_names(q, me, w, Some(n) != skip, true))
        };
        match a {
            Action::Exec { .. } => match &prog.threads[t].instrs[th.pc] {
                Instr::Load { word, .. } => {
                    self.private(me, *word, t)
                        && qps_clear(*word, None)
                        && !sb_posts_name(th, me, me, *word)
                }
                Instr::Cas { word, .. } => self.private(me, *word, t) && qps_clear(*word, None),
                // An await whose guard reads marks on another thread's words is never alone.
                Instr::Await { ring: Some(_), .. } => false,
                Instr::Await { words, .. } => words.iter().all(|&w| {
                    self.private(me, w, t) && qps_clear(w, None) && !sb_posts_name(th, me, me, w)
                }),
                _ => false,
            },
            Action::Flush { .. } => match th.sb.front() {
                Some(SbItem::Store { word, .. }) => {
                    self.private(me, *word, t) && qps_clear(*word, None)
                }
                _ => false,
            },
            Action::Nic { target, step, .. } => {
                let qp = &th.qps[target];
                match step {
                    Step::Pipe(i) => match &qp.pipe[i] {
                        Entry::Send { .. } | Entry::Atomic { .. } => !qp
                            .pipe
                            .iter()
                            .take(i)
                            .any(|e| matches!(e, Entry::Get { .. } | Entry::Rmw { .. })),
                        Entry::Load { tag, .. } => {
                            // No put in the pipe, and none can enter it first: a local write in
                            // `Bl` would hold a put's local read back.
                            !qp.pipe.iter().any(|e| matches!(e, Entry::Put { .. }))
                                && !th.sb.posts().any(|p| p.target.index() == target)
                                && self.no_post_before_wait(prog, s, t, target, *tag)
                        }
                        Entry::Put {
                            local, words, tag, ..
                        } => {
                            let w = *local;
                            *words == 1
                                && self.private(me, w, t)
                                && !qp.pipe.iter().take(i).any(|e| {
                                    matches!(
                                        e,
                                        Entry::Get { .. } | Entry::Rmw { .. } | Entry::Load { .. }
                                    )
                                })
                                && qps_clear(w, Some(target))
                                && !qp_names(qp, me, w, false, true)
                                && !sb_stores_to(th, w)
                                && !sb_posts_name(th, me, me, w)
                                && self.no_access_before_wait(
                                    prog,
                                    s,
                                    t,
                                    w,
                                    true,
                                    |i| matches!(i, Instr::Wait { tag: g } if g == tag),
                                )
                        }
                        _ => false,
                    },
                    Step::CommitLocal(j) => {
                        let Some(LocalItem::Write { local, values }) = qp.bl.get(j) else {
                            return false;
                        };
                        let w = *local;
                        // The tags of notices behind this write in `Bl`: a wait on any of them
                        // cannot pass before it commits.
                        let behind: Vec<u32> = qp
                            .bl
                            .iter()
                            .skip(j + 1)
                            .filter_map(|i| match i {
                                LocalItem::Notice(g) => Some(*g),
                                LocalItem::Write { .. } => None,
                            })
                            .collect();
                        values.len() == 1
                            && self.private(me, w, t)
                            && qps_clear(w, Some(target))
                            && !qp_names(qp, me, w, false, true)
                            && !sb_stores_to(th, w)
                            && !sb_posts_name(th, me, me, w)
                            && self.no_access_before_wait(
                                prog,
                                s,
                                t,
                                w,
                                false,
                                |i| matches!(i, Instr::Wait { tag } if behind.contains(tag)),
                            )
                    }
                    Step::CommitRemote => false,
                }
            }
        }
    }

    /// Whether no instruction of `t` from its `pc` up to a `wait(tag)` posts towards `target`.
    fn no_post_before_wait(
        &self,
        prog: &Program,
        s: &State,
        t: usize,
        target: usize,
        tag: u32,
    ) -> bool {
        for i in &prog.threads[t].instrs[s.threads[t].pc..] {
            match i {
                Instr::Wait { tag: g } if *g == tag => return true,
                Instr::Post { target: g, .. } if *g == target => return false,
                // A jump may skip the wait: give up the reduction (only give-up tests jump).
                Instr::Branch { .. } | Instr::Jump { .. } => return false,
                _ => {}
            }
        }
        true
    }

    /// Whether no instruction of `t` from its `pc` up to the first that `blocks` names word `w`
    /// of its node (only writes of it if `writes_only`).
    fn no_access_before_wait(
        &self,
        prog: &Program,
        s: &State,
        t: usize,
        w: usize,
        writes_only: bool,
        blocks: impl Fn(&Instr) -> bool,
    ) -> bool {
        let code = &prog.threads[t];
        for i in &code.instrs[s.threads[t].pc..] {
            if blocks(i) {
                return true;
            }
            // A jump may skip the blocking instruction: give up the reduction.
            if instr_names(i, code.node, w, writes_only)
                || matches!(i, Instr::Branch { .. } | Instr::Jump { .. })
            {
                return false;
            }
        }
        true
    }
}
