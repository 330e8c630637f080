//! The NIC half of the operational model (docs/model.md §4), rule by rule, as a pure state
//! machine.
//!
//! One [`Qp`] is the queue pair of one thread towards one node: its pipe of pending operations,
//! its remote write buffer and its local write buffer (which also carries completion notices).
//! [`Qp::steps`] lists the transitions the rules enable, [`Qp::apply`] takes one. Memory and the
//! per-node remote-atomic locks are passed in, so the same rules drive both the soft NIC's `Chaos`
//! schedule (over real memory) and an exhaustive explorer (over a hashable state).
//!
//! The CPU half belongs to threads, not queue pairs: each thread's x86-TSO [`StoreBuffer`]
//! (docs/model.md §4.2), through which its stores and posts reach memory and the pipes of its
//! [`Qp`]s. The driver decides when an item leaves it.
//!
//! Rule numbers follow docs/model.md §4.4.

use std::collections::VecDeque;

use crate::backend::WorkRequest;
use crate::NodeId;

mod store_buffer;
pub use store_buffer::{Post, SbItem, StoreBuffer};

/// Word-addressed memory of every node, as the NIC rules see it.
pub trait ClusterMemory {
    /// Reads word `word` of node `node`.
    fn read(&self, node: NodeId, word: usize) -> u64;
    /// Writes word `word` of node `node`.
    fn write(&mut self, node: NodeId, word: usize, value: u64);
}

/// Former name of [`ClusterMemory`], kept for existing implementations.
pub use ClusterMemory as Memory;

/// Former name of [`RmwOp`].
#[deprecated(note = "renamed to `RmwOp` (distinct from the `loco_rdmawaitrmw::Rmw` trait)")]
pub type Rmw = RmwOp;

/// The two remote read-modify-writes, as a pipe entry carries them (not to be confused with the
/// `loco_rdmawaitrmw::Rmw` trait, which posts them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RmwOp {
    /// Compare-and-swap.
    Cas {
        /// Expected value.
        expected: u64,
        /// New value.
        new: u64,
    },
    /// Fetch-and-add (wrapping).
    Faa {
        /// Addend.
        add: u64,
    },
}

/// What a remote compare-and-swap that fails does at its target (docs/model.md §4.4, rule 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailedCas {
    /// The model's rule 9: it only reads. It takes no lock and writes nothing.
    #[default]
    Reads,
    /// What Soft-RoCE does (docs/verbs-notes.md, pitfall 9): it reads and writes the value it
    /// read back, under the target's remote-atomic lock, like a successful CAS whose new value
    /// is the old one (rule 10 with `new = old`). A put or a CPU store that lands between its
    /// read and its write is lost. Outside the model; code that must also be right on rxe is
    /// checked under it too (`atomics rxe` in a litmus test).
    WritesBack,
}

/// A pipe entry: a posted operation at some phase (docs/model.md §4.3).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    /// A put whose NIC local read (nLR) is pending.
    Put {
        /// First local source word.
        local: usize,
        /// First remote destination word.
        remote: usize,
        /// Words.
        words: usize,
        /// Completion tag.
        tag: u32,
    },
    /// `W`: a put that read its source; its remote write (nRW) is not yet sent.
    Send {
        /// First remote destination word.
        remote: usize,
        /// The values read.
        values: Vec<u64>,
        /// Completion tag.
        tag: u32,
    },
    /// `A`: a put whose remote write was sent; its acknowledgement is pending.
    Ack {
        /// Completion tag.
        tag: u32,
    },
    /// A get whose NIC remote read (nRR) is pending.
    Get {
        /// First local destination word.
        local: usize,
        /// First remote source word.
        remote: usize,
        /// Words.
        words: usize,
        /// Completion tag.
        tag: u32,
    },
    /// `L`: a get or RMW whose local write (nLW) is pending.
    Load {
        /// First local destination word.
        local: usize,
        /// The values to write.
        values: Vec<u64>,
        /// Completion tag.
        tag: u32,
    },
    /// A remote RMW whose atomic read (nAR) is pending.
    Rmw {
        /// Which RMW.
        op: RmwOp,
        /// Remote target word.
        remote: usize,
        /// Local word for the old value.
        local: usize,
        /// Completion tag.
        tag: u32,
    },
    /// `X`: the atomic remote write of an RMW that read and holds the remote-atomic lock.
    Atomic {
        /// Remote target word.
        remote: usize,
        /// Value to write.
        value: u64,
    },
    /// A remote fence.
    Fence,
}

impl Entry {
    /// The completion tag this entry will report, if it reports one. An RMW's `X` has none: its
    /// notice comes with its `L`. An rfence produces no completion.
    pub fn tag(&self) -> Option<u32> {
        match self {
            Entry::Put { tag, .. }
            | Entry::Send { tag, .. }
            | Entry::Ack { tag }
            | Entry::Get { tag, .. }
            | Entry::Load { tag, .. }
            | Entry::Rmw { tag, .. } => Some(*tag),
            Entry::Atomic { .. } | Entry::Fence => None,
        }
    }

    /// "Passable" entries may be overtaken by a later remote write or read (docs/model.md §4.3).
    fn passable(&self) -> bool {
        matches!(
            self,
            Entry::Get { .. } | Entry::Load { .. } | Entry::Ack { .. }
        )
    }
}

/// A remote write waiting in the remote write buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteWrite {
    /// First remote word.
    pub remote: usize,
    /// Values.
    pub values: Vec<u64>,
    /// Whether it is an RMW's atomic write, whose commit releases the remote-atomic lock.
    pub atomic: bool,
}

/// An item of the local write buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LocalItem {
    /// A NIC local write waiting to commit.
    Write {
        /// First local word.
        local: usize,
        /// Values.
        values: Vec<u64>,
    },
    /// A completion notice, consumed by a poll.
    Notice(u32),
}

/// A transition of one queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The rule of the pipe entry at this index (each entry kind has exactly one rule).
    Pipe(usize),
    /// Rule 4/13: the head of the remote write buffer commits to remote memory.
    CommitRemote,
    /// Rule 8: the local write at this index of the local write buffer commits.
    CommitLocal(usize),
}

/// One thread's queue pair towards one node (docs/model.md §4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Qp {
    /// Node of the owning thread (where local words live).
    pub local_node: NodeId,
    /// Target node.
    pub remote_node: NodeId,
    /// Pending operations, oldest first.
    pub pipe: VecDeque<Entry>,
    /// Remote write buffer.
    pub br: VecDeque<RemoteWrite>,
    /// Local write buffer: local writes and completion notices.
    pub bl: VecDeque<LocalItem>,
    /// What a failed rcas does (rule 9, or rxe's write-back).
    pub failed_cas: FailedCas,
}

impl Qp {
    /// An empty queue pair from `local_node` to `remote_node`.
    pub fn new(local_node: NodeId, remote_node: NodeId) -> Self {
        Qp {
            local_node,
            remote_node,
            pipe: VecDeque::new(),
            br: VecDeque::new(),
            bl: VecDeque::new(),
            failed_cas: FailedCas::Reads,
        }
    }

    /// The same queue pair with failed remote CASes behaving as `mode` says.
    pub fn with_failed_cas(mut self, mode: FailedCas) -> Self {
        self.failed_cas = mode;
        self
    }

    /// Appends a posted request to the pipe; `tag` comes back in its completion notice.
    pub fn issue(&mut self, wr: WorkRequest, tag: u32) {
        let entry = match wr {
            WorkRequest::Write {
                local,
                remote,
                words,
            } => Entry::Put {
                local,
                remote,
                words,
                tag,
            },
            WorkRequest::Read {
                local,
                remote,
                words,
            } => Entry::Get {
                local,
                remote,
                words,
                tag,
            },
            WorkRequest::CompareSwap {
                remote,
                expected,
                new,
                local,
            } => Entry::Rmw {
                op: RmwOp::Cas { expected, new },
                remote,
                local,
                tag,
            },
            WorkRequest::FetchAdd { remote, add, local } => Entry::Rmw {
                op: RmwOp::Faa { add },
                remote,
                local,
                tag,
            },
            WorkRequest::Fence => Entry::Fence,
        };
        self.pipe.push_back(entry);
    }

    /// Appends to `out` every step the rules enable. `locks[n]` is node n's remote-atomic lock.
    pub fn steps(&self, locks: &[bool], out: &mut Vec<Step>) {
        let mut only_passable = true; // every older pipe entry is passable
        let mut unread_put_or_fence = false; // an older put has not read, or an older rfence waits
        let bl_has_write = self.bl.iter().any(|i| matches!(i, LocalItem::Write { .. }));
        for (i, e) in self.pipe.iter().enumerate() {
            let enabled = match e {
                Entry::Fence | Entry::Ack { .. } | Entry::Load { .. } => i == 0, // rules 1, 5, 7
                Entry::Put { .. } => !unread_put_or_fence && !bl_has_write,      // rule 2
                Entry::Send { .. } | Entry::Atomic { .. } => only_passable,      // rules 3, 12
                Entry::Get { .. } => only_passable && self.br.is_empty(),        // rule 6
                Entry::Rmw { .. } => {
                    only_passable && self.br.is_empty() && !locks[self.remote_node.index()]
                    // rules 9-11
                }
            };
            if enabled {
                out.push(Step::Pipe(i));
            }
            only_passable &= e.passable();
            unread_put_or_fence |= matches!(e, Entry::Put { .. } | Entry::Fence);
        }
        if !self.br.is_empty() {
            out.push(Step::CommitRemote);
        }
        if let Some(j) = self
            .bl
            .iter()
            .position(|i| matches!(i, LocalItem::Write { .. }))
        {
            out.push(Step::CommitLocal(j));
        }
    }

    /// Takes `step`, which [`Qp::steps`] must have listed for the current state.
    pub fn apply(&mut self, step: Step, mem: &mut impl ClusterMemory, locks: &mut [bool]) {
        let (ln, rn) = (self.local_node, self.remote_node);
        match step {
            Step::CommitRemote => {
                let w = self
                    .br
                    .pop_front()
                    .expect("CommitRemote listed with empty Br");
                for (k, v) in w.values.iter().enumerate() {
                    mem.write(rn, w.remote + k, *v);
                }
                if w.atomic {
                    locks[rn.index()] = false; // rule 13
                }
            }
            Step::CommitLocal(j) => {
                if let Some(LocalItem::Write { local, values }) = self.bl.remove(j) {
                    for (k, v) in values.iter().enumerate() {
                        mem.write(ln, local + k, *v);
                    }
                }
            }
            Step::Pipe(i) => match self.pipe[i].clone() {
                Entry::Fence => {
                    self.pipe.remove(i);
                }
                Entry::Put {
                    local,
                    remote,
                    words,
                    tag,
                } => {
                    let values = (0..words).map(|k| mem.read(ln, local + k)).collect();
                    self.pipe[i] = Entry::Send {
                        remote,
                        values,
                        tag,
                    };
                }
                Entry::Send {
                    remote,
                    values,
                    tag,
                } => {
                    self.br.push_back(RemoteWrite {
                        remote,
                        values,
                        atomic: false,
                    });
                    self.pipe[i] = Entry::Ack { tag };
                }
                Entry::Ack { tag } => {
                    self.pipe.remove(i);
                    self.bl.push_back(LocalItem::Notice(tag));
                }
                Entry::Get {
                    local,
                    remote,
                    words,
                    tag,
                } => {
                    let values = (0..words).map(|k| mem.read(rn, remote + k)).collect();
                    self.pipe[i] = Entry::Load { local, values, tag };
                }
                Entry::Load { local, values, tag } => {
                    self.pipe.remove(i);
                    self.bl.push_back(LocalItem::Write { local, values });
                    self.bl.push_back(LocalItem::Notice(tag));
                }
                Entry::Rmw {
                    op,
                    remote,
                    local,
                    tag,
                } => {
                    let old = mem.read(rn, remote);
                    let new = match op {
                        RmwOp::Cas { expected, new } if old == expected => Some(new),
                        RmwOp::Cas { .. } => match self.failed_cas {
                            FailedCas::Reads => None,
                            FailedCas::WritesBack => Some(old), // rxe: as rule 10, new = old
                        },
                        RmwOp::Faa { add } => Some(old.wrapping_add(add)),
                    };
                    let load = Entry::Load {
                        local,
                        values: vec![old],
                        tag,
                    };
                    match new {
                        None => self.pipe[i] = load, // rule 9: failed CAS, no lock, no write
                        Some(value) => {
                            locks[rn.index()] = true; // rules 10/11
                            self.pipe[i] = Entry::Atomic { remote, value };
                            self.pipe.insert(i + 1, load);
                        }
                    }
                }
                Entry::Atomic { remote, value } => {
                    self.pipe.remove(i);
                    self.br.push_back(RemoteWrite {
                        remote,
                        values: vec![value],
                        atomic: true,
                    });
                }
            },
        }
    }

    /// Consumes the head of the local write buffer if it is a completion notice (a poll).
    pub fn take_notice(&mut self) -> Option<u32> {
        match self.bl.front() {
            Some(LocalItem::Notice(t)) => {
                let t = *t;
                self.bl.pop_front();
                Some(t)
            }
            _ => None,
        }
    }

    /// `wait(tag)` on this queue pair, in the atomic form of docs/model.md §4.6: `None` while
    /// an operation tagged `tag` is still in the pipe, or while a local write sits before the last
    /// `tag` notice of the local write buffer; otherwise `Some(k)`, where the wait consumes the
    /// first `k` items of the local write buffer (all notices; `k = 0` when no `tag` notice is
    /// there). Consume them with [`Qp::take_notices`].
    ///
    /// The caller checks the part of the premise that is not the queue pair's: that no operation
    /// tagged `tag` is still in the thread's store buffer.
    pub fn wait_ready(&self, tag: u32) -> Option<usize> {
        if self.pipe.iter().any(|e| e.tag() == Some(tag)) {
            return None;
        }
        match self.bl.iter().rposition(|i| *i == LocalItem::Notice(tag)) {
            None => Some(0),
            Some(j) => self
                .bl
                .iter()
                .take(j)
                .all(|i| matches!(i, LocalItem::Notice(_)))
                .then_some(j + 1),
        }
    }

    /// Consumes the first `k` items of the local write buffer, which must all be notices (the
    /// effect of a wait that [`Qp::wait_ready`] allowed, or of `k` polls).
    pub fn take_notices(&mut self, k: usize) {
        for _ in 0..k {
            self.take_notice()
                .expect("take_notices: a local write before the notices");
        }
    }

    /// Whether nothing remains but completion notices: every posted operation has fully taken
    /// effect in memory.
    pub fn is_settled(&self) -> bool {
        self.pipe.is_empty()
            && self.br.is_empty()
            && self.bl.iter().all(|i| matches!(i, LocalItem::Notice(_)))
    }

    /// Drops every completion notice (the thread that would poll them is gone).
    pub fn drop_notices(&mut self) {
        self.bl.retain(|i| !matches!(i, LocalItem::Notice(_)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two nodes of 8 words each.
    #[derive(Default)]
    struct Mem([[u64; 8]; 2]);
    impl ClusterMemory for Mem {
        fn read(&self, n: NodeId, w: usize) -> u64 {
            self.0[n.index()][w]
        }
        fn write(&mut self, n: NodeId, w: usize, v: u64) {
            self.0[n.index()][w] = v;
        }
    }

    fn run_in_order(qp: &mut Qp, mem: &mut Mem, locks: &mut [bool]) {
        let mut s = Vec::new();
        loop {
            s.clear();
            qp.steps(locks, &mut s);
            match s.first() {
                Some(&st) => qp.apply(st, mem, locks),
                None => break,
            }
        }
    }

    #[test]
    fn put_then_get_round_trip() {
        let mut mem = Mem::default();
        mem.0[0][0] = 7;
        let mut locks = [false; 2];
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        qp.issue(
            WorkRequest::Write {
                local: 0,
                remote: 3,
                words: 1,
            },
            1,
        );
        qp.issue(
            WorkRequest::Read {
                local: 1,
                remote: 3,
                words: 1,
            },
            2,
        );
        run_in_order(&mut qp, &mut mem, &mut locks);
        assert_eq!(mem.0[1][3], 7);
        assert_eq!(mem.0[0][1], 7);
        assert_eq!(qp.take_notice(), Some(1));
        assert_eq!(qp.take_notice(), Some(2));
        assert!(qp.is_settled());
    }

    #[test]
    fn get_blocked_by_pending_remote_write() {
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        qp.br.push_back(RemoteWrite {
            remote: 0,
            values: vec![1],
            atomic: false,
        });
        qp.issue(
            WorkRequest::Read {
                local: 0,
                remote: 0,
                words: 1,
            },
            0,
        );
        let mut s = Vec::new();
        qp.steps(&[false, false], &mut s);
        assert_eq!(s, vec![Step::CommitRemote]); // rule 6 needs Br empty
    }

    #[test]
    fn later_put_may_pass_pending_get_but_not_pending_rmw() {
        let mut s = Vec::new();
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        qp.issue(
            WorkRequest::Read {
                local: 0,
                remote: 0,
                words: 1,
            },
            0,
        );
        qp.pipe.push_back(Entry::Send {
            remote: 1,
            values: vec![1],
            tag: 1,
        });
        qp.steps(&[false, false], &mut s);
        assert!(
            s.contains(&Step::Pipe(1)),
            "Fig. 7a: the put's nRW may overtake the get"
        );
        s.clear();
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        qp.issue(
            WorkRequest::FetchAdd {
                remote: 0,
                add: 1,
                local: 0,
            },
            0,
        );
        qp.pipe.push_back(Entry::Send {
            remote: 1,
            values: vec![1],
            tag: 1,
        });
        qp.steps(&[false, false], &mut s);
        assert_eq!(s, vec![Step::Pipe(0)], "Fig. 7b: not past an RMW's read");
    }

    #[test]
    fn rmw_takes_and_releases_the_atomic_lock() {
        let mut mem = Mem::default();
        let mut locks = [false; 2];
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        qp.issue(
            WorkRequest::FetchAdd {
                remote: 2,
                add: 5,
                local: 0,
            },
            0,
        );
        qp.apply(Step::Pipe(0), &mut mem, &mut locks);
        assert!(locks[1]);
        let mut other = Qp::new(NodeId(0), NodeId(1));
        other.issue(
            WorkRequest::CompareSwap {
                remote: 2,
                expected: 0,
                new: 1,
                local: 1,
            },
            0,
        );
        let mut s = Vec::new();
        other.steps(&locks, &mut s);
        assert!(s.is_empty(), "a second RMW must wait for the lock");
        run_in_order(&mut qp, &mut mem, &mut locks);
        assert!(!locks[1]);
        assert_eq!(mem.0[1][2], 5);
    }

    /// A CAS from n0 expecting 1 on n1's word 0, which holds 9, after its read (tag 4).
    fn failing_cas_read(mode: FailedCas) -> (Mem, [bool; 2], Qp) {
        let mut mem = Mem::default();
        mem.0[1][0] = 9;
        let mut locks = [false; 2];
        let mut qp = Qp::new(NodeId(0), NodeId(1)).with_failed_cas(mode);
        qp.issue(
            WorkRequest::CompareSwap {
                remote: 0,
                expected: 1,
                new: 2,
                local: 0,
            },
            4,
        );
        qp.apply(Step::Pipe(0), &mut mem, &mut locks);
        (mem, locks, qp)
    }

    #[test]
    fn failed_cas_writes_nothing_and_takes_no_lock() {
        let (mut mem, mut locks, mut qp) = failing_cas_read(FailedCas::Reads);
        assert!(!locks[1]);
        run_in_order(&mut qp, &mut mem, &mut locks);
        assert_eq!((mem.0[1][0], mem.0[0][0]), (9, 9));
        assert_eq!(qp.take_notice(), Some(4));
    }

    #[test]
    fn rxe_failed_cas_takes_the_lock_and_writes_back() {
        let (mut mem, mut locks, mut qp) = failing_cas_read(FailedCas::WritesBack);
        assert!(locks[1], "the write-back holds the remote-atomic lock");
        // A put's write landing now is overwritten by the write-back: the lost update.
        mem.0[1][0] = 7;
        run_in_order(&mut qp, &mut mem, &mut locks);
        assert!(!locks[1]);
        assert_eq!((mem.0[1][0], mem.0[0][0]), (9, 9));
        assert_eq!(qp.take_notice(), Some(4));
    }

    #[test]
    fn wait_ready_follows_the_atomic_wait_rule() {
        let mut mem = Mem::default();
        let mut locks = [false; 2];
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        assert_eq!(
            qp.wait_ready(1),
            Some(0),
            "nothing tagged: a wait goes through"
        );
        let read = |local| WorkRequest::Read {
            local,
            remote: 0,
            words: 1,
        };
        qp.issue(read(0), 1);
        qp.issue(read(1), 2);
        assert_eq!(qp.wait_ready(2), None, "tag 2 still in the pipe");
        qp.apply(Step::Pipe(0), &mut mem, &mut locks); // nRR of the first get
        qp.apply(Step::Pipe(1), &mut mem, &mut locks); // nRR of the second get
        qp.apply(Step::Pipe(0), &mut mem, &mut locks); // first get: W, N(1) to Bl
        qp.apply(Step::Pipe(0), &mut mem, &mut locks); // second get: W, N(2) to Bl
        assert_eq!(qp.wait_ready(1), None, "a local write before the 1-notice");
        assert_eq!(qp.wait_ready(3), Some(0));
        qp.apply(Step::CommitLocal(0), &mut mem, &mut locks);
        assert_eq!(qp.wait_ready(1), Some(1));
        assert_eq!(qp.wait_ready(2), None, "the second get's write is pending");
        qp.apply(Step::CommitLocal(1), &mut mem, &mut locks);
        assert_eq!(
            qp.wait_ready(2),
            Some(2),
            "consumes the notices up to the last 2"
        );
        qp.take_notices(2);
        assert!(qp.bl.is_empty());
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        qp.issue(
            WorkRequest::FetchAdd {
                remote: 0,
                add: 1,
                local: 0,
            },
            5,
        );
        qp.apply(Step::Pipe(0), &mut mem, &mut locks);
        assert_eq!(qp.pipe[0].tag(), None, "X carries no tag ...");
        assert_eq!(qp.wait_ready(5), None, "... but the L behind it does");
    }

    #[test]
    fn fence_blocks_everything_behind_it() {
        let mut qp = Qp::new(NodeId(0), NodeId(1));
        qp.issue(
            WorkRequest::Read {
                local: 0,
                remote: 0,
                words: 1,
            },
            0,
        );
        qp.issue(WorkRequest::Fence, 0);
        qp.issue(
            WorkRequest::Write {
                local: 0,
                remote: 1,
                words: 1,
            },
            1,
        );
        let mut s = Vec::new();
        qp.steps(&[false, false], &mut s);
        assert_eq!(s, vec![Step::Pipe(0)]);
    }
}
