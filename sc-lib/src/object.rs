//! What SC locations and ported structures share: words on one node, that node's lock, default
//! placement, and the per-(thread, object) scratch words.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use loco_locks::{NLock, RawNLock};
use loco_rdmawait::{Cluster, Ctx, Loc, MadeOn, NodeId, WORD};

use crate::{Error, Result};

static NEXT_OBJECT: AtomicU64 = AtomicU64::new(1);

/// Words on one node and the node lock that guards them (docs/model.md §5.6: every SC location lives
/// on one node n, with a node lock of its own on n).
#[derive(Debug)]
pub(crate) struct Object {
    /// Process-unique id: the key of the threads' scratch words.
    pub(crate) id: u64,
    pub(crate) cluster: u32,
    /// The object's words (one for an SC location).
    pub(crate) words: Loc,
    pub(crate) lock: NLock,
    /// The incarnation of the object's node when it was made. A node restarted since came back
    /// with zeroed memory: the object's words, and its lock's, are gone.
    made_on: MadeOn,
}

/// The next node of the round-robin default placement, one counter per cluster.
#[derive(Debug, Default)]
struct Placement(AtomicUsize);

impl Object {
    /// Allocates `words` words and a node lock on `node` (or on the next node round-robin).
    pub(crate) fn new(cluster: &Cluster, node: Option<NodeId>, words: usize) -> Result<Object> {
        let node = Self::place(cluster, node)?;
        Self::check_memory(cluster, node, words)?;
        let made_on = MadeOn::new(cluster, node)?;
        let lock = NLock::new(cluster, node)?;
        let words = cluster.alloc_words(node, words as u64)?;
        Ok(Object {
            id: NEXT_OBJECT.fetch_add(1, Ordering::Relaxed),
            cluster: cluster.id(),
            words,
            lock,
            made_on,
        })
    }

    /// Fails with `OutOfMemory` unless `node` has room for an object of `words` words and its
    /// node lock. Checked before either is allocated: allocations are never freed, so running out
    /// half-way (the lock taken, the words not) would strand the lock's words.
    pub(crate) fn check_memory(cluster: &Cluster, node: NodeId, words: usize) -> Result<()> {
        let requested = (words as u64)
            .saturating_mul(WORD)
            .saturating_add(RawNLock::bytes(cluster.nodes()));
        Ok(cluster.check_free(node, requested)?)
    }

    /// The node an object goes on: `node` if given (it must exist), else the next one
    /// round-robin.
    pub(crate) fn place(cluster: &Cluster, node: Option<NodeId>) -> Result<NodeId> {
        Ok(match node {
            Some(n) => {
                cluster.check_node(n)?;
                n
            }
            None => {
                let p = cluster.extension(|_| Ok(Placement::default()))?;
                let i = p.0.fetch_add(1, Ordering::Relaxed);
                NodeId((i % cluster.nodes()) as u16)
            }
        })
    }

    pub(crate) fn node(&self) -> NodeId {
        self.words.node()
    }

    /// Fails with [`Error::ForeignLocation`] unless `cluster_id` is the object's cluster.
    pub(crate) fn check_cluster(&self, cluster_id: u32) -> Result<()> {
        if cluster_id != self.cluster {
            return Err(Error::ForeignLocation {
                loc: self.cluster,
                cluster: cluster_id,
            });
        }
        Ok(())
    }

    /// Fails with [`Error::ForeignLocation`] unless `cluster` is the object's, and with
    /// `PeerDead` naming the object's node if that node restarted since the object was made:
    /// its words came back zeroed, so the object is gone (its operations would otherwise fail
    /// with its node lock's refusal, which tells the caller to make a lock it never made, and
    /// an inspection would read the zeroed words as the object's state).
    pub(crate) fn check_home(&self, cluster: &Cluster) -> Result<()> {
        self.check_cluster(cluster.id())?;
        Ok(self
            .made_on
            .check(cluster, "this SC location or ported structure")?)
    }

    /// The calling thread's scratch words for this object (`words` of them, on the thread's own
    /// node), allocated on first use.
    ///
    /// They are per (thread, object) because an SC write's put is not waited for: it reads its
    /// source when the NIC gets to it. The thread's next operation on the same object goes to the
    /// same node through the same queue pair, whose first wait (the node lock's acquire) consumes
    /// the put's completion, so the put has read its source before the word is reused. An
    /// operation on another object, possibly on another node and so unordered with the put, uses
    /// other words (docs/model.md §5.6).
    pub(crate) fn scratch(&self, ctx: &Ctx, words: usize) -> Result<Loc> {
        self.check_home(ctx.cluster())?;
        let reg = ctx.extension(|ctx| {
            Ok(Scratch {
                words: RefCell::default(),
                settled: ctx.settled(),
                cluster: ctx.cluster().clone(),
            })
        })?;
        if let Some(l) = reg.words.borrow().get(&self.id) {
            return Ok(*l);
        }
        let l = ctx.cluster().alloc_private(ctx.node(), words as u64 * 8)?;
        reg.words.borrow_mut().insert(self.id, l);
        Ok(l)
    }
}

/// A thread's scratch words, keyed by object id; given back to the cluster when the context is
/// dropped with nothing in flight ([`Ctx::settled`]).
#[derive(Debug)]
struct Scratch {
    words: RefCell<HashMap<u64, Loc>>,
    settled: loco_rdmawait::Settled,
    cluster: loco_rdmawait::Cluster,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.settled.get() {
            for l in self.words.borrow().values() {
                let _ = self.cluster.free_private(*l);
            }
        }
    }
}
