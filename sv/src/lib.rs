//! Shared variables and the global fence: the paper's **sv** library (docs/model.md §2, §5.1 and §5.2, after
//! LOCO).
//!
//! A [`SharedVar`] is one 8-byte word with a copy on every node. [`SharedVar::load`] and
//! [`SharedVar::store`] touch the copy on the calling thread's node (CPU accesses, x86-TSO);
//! [`SharedVar::bcast`] puts that local copy to the copies on other nodes; `wait(d)` is the
//! rdmawait [`Ctx::wait`]. [`GlobalFence::gf`] blocks until every earlier operation of the thread
//! towards the given nodes has **fully** completed, remote writes included.
//!
//! ```
//! use loco_rdmawait::{Cluster, NodeId, Schedule, WorkId};
//! use loco_sv::{GlobalFence, SharedVar};
//!
//! let cluster = Cluster::builder().nodes(3).soft(Schedule::Threaded).build()?;
//! let flag = SharedVar::new(&cluster)?;
//! let ctx = cluster.context(NodeId(0))?;
//! flag.store(&ctx, 7)?;                                 // n0's copy
//! flag.bcast(&ctx, [NodeId(1), NodeId(2)], WorkId::new(1))?;
//! ctx.gf([NodeId(1), NodeId(2)])?;                      // both puts have landed
//! assert_eq!(cluster.peek(&flag.copy(NodeId(2))?)?, 7);
//!
//! let reader = cluster.context(NodeId(2))?;
//! assert_eq!(flag.load(&reader)?, 7);                   // n2's copy
//! # Ok::<(), loco_sv::Error>(())
//! ```
//!
//! Section and rule numbers cited here (`docs/model.md §5.2`, `rule 6`) are those of the
//! project's [model page][loco-model]; the [docs index][loco-docs] lists the other reference
//! pages.
//!
//! [loco-model]: https://github.com/loco-rs/loco-rs/blob/main/docs/model.md
//! [loco-docs]: https://github.com/loco-rs/loco-rs/blob/main/docs/README.md
//!
//! # Guarantees (docs/model.md §3, §5.1 and §5.2; Figs. 5 and 8)
//! - `load`/`store` are CPU accesses to the local copy: x86-TSO, nothing is sent.
//! - `bcast(s, N, d)` is `put(s@n, s@me, d)` for each n in N, in the order given (docs/model.md §5.1).
//!   Like any put it reads the local copy when the NIC gets to it (Fig. 2), and `wait(d)` does not
//!   mean the copies have been written (Fig. 5).
//! - `gf(N)` returns only once every earlier operation of this thread towards the nodes in N has
//!   fully completed: puts and broadcasts have landed, gets and RMWs have written locally. It is
//!   what turns the allowed store buffering of Fig. 5 (puts + waits) into a forbidden one. It
//!   orders, it does not exclude: two threads' critical sections still interleave without a lock
//!   (Fig. 8c).
//!
//! # Implementation
//! `gf(N)` is the LOCO global fence (docs/model.md §5.2): for each n in N, `rfence(n)` then a
//! read of a per-node dummy word into a per-thread scratch word, tagged with the reserved work id
//! [`GF_WORK_ID`]; then `wait` for it. The read is the paper's get, or where atomics are cheaper
//! (Soft-RoCE) a remote CAS that cannot succeed ([`Ctx::fence_read`],
//! [`FenceRead`](loco_rdmawait::FenceRead)). Its remote step cannot pass the fence, and a NIC read
//! or atomic flushes every earlier write of the queue pair (docs/model.md rules 6 and 9), so once it
//! completes everything before it towards n has landed. The dummy words are the cluster's
//! ([`Cluster::fence_word`](loco_rdmawait::Cluster::fence_word)); the scratch word is made once
//! per thread, on first use, among the thread's private words.
//!
//! # Errors
//! Only those of the rdmawait layer ([`Error::Rdma`]): unknown nodes, locations of another
//! cluster, timeouts, failed completions, dead peers.
//!
//! # Failures
//! A dead node (see `Cluster::kill`) is reported as `PeerDead` naming it by `bcast` and `gf`
//! whose set contains it, checked before anything is posted; a `gf` whose node dies while it
//! waits returns `PeerDead` too, and one towards live nodes only is unaffected. What the dead
//! node's copy of a shared variable held is lost; the other copies keep their values.

#![forbid(unsafe_code)]

use std::sync::Arc;

use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WorkId};

pub mod protocol;

/// Errors of the sv layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the rdmawait layer below.
    #[error(transparent)]
    Rdma(#[from] loco_rdmawait::Error),
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl loco_rdmawait::RdmaCause for Error {
    fn rdma(&self) -> Option<&loco_rdmawait::Error> {
        match self {
            Error::Rdma(e) => Some(e),
        }
    }
}

/// The library-reserved work id of the global fence's reads. A user's `wait(d)` never waits for a
/// fence, and a fence never waits for a user's operations beyond what the fence itself orders.
pub const GF_WORK_ID: WorkId = WorkId::internal(0x5356_0001);

/// A shared variable: one 8-byte word with a copy on every node of a cluster (docs/model.md §2).
///
/// Cheap to clone (a handle), `Send` and `Sync`: make it once and share it with every thread.
/// Allocation is in node order on the cluster's bump allocators, so processes that make the same
/// objects in the same order agree on the copies' locations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedVar {
    copies: Arc<[Loc]>,
}

impl SharedVar {
    /// A shared variable with every copy 0.
    pub fn new(cluster: &Cluster) -> Result<SharedVar> {
        // All or nothing: a node out of memory must not strand the copies taken on the others.
        let copies = cluster.alloc_word_on_each()?;
        Ok(SharedVar {
            copies: copies.into(),
        })
    }

    /// A shared variable with every copy `value`, written directly to node memory: make it before
    /// the threads that use it start.
    ///
    /// A copy that cannot be written (its node dead) fails the call with `PeerDead` naming the
    /// node, after the copies were taken: allocations are never given back, and they are kept
    /// so that the next objects get the same locations as in a process where the call
    /// succeeded (in a cluster of several processes, layouts agree by order).
    pub fn with_value(cluster: &Cluster, value: u64) -> Result<SharedVar> {
        let s = SharedVar::new(cluster)?;
        for c in s.copies.iter() {
            cluster.poke(c, value)?;
        }
        Ok(s)
    }

    /// The copy on `node`.
    pub fn copy(&self, node: NodeId) -> Result<Loc> {
        self.copies.get(node.index()).copied().ok_or(Error::Rdma(
            loco_rdmawait::Error::UnknownNode {
                node,
                nodes: self.copies.len(),
            },
        ))
    }

    /// The copies, by node index.
    pub fn copies(&self) -> &[Loc] {
        &self.copies
    }

    /// The copy on the calling thread's node (a context of another cluster: `ForeignLocation`).
    pub fn local(&self, ctx: &Ctx) -> Result<Loc> {
        self.check_cluster(ctx)?;
        self.copy(ctx.node())
    }

    /// Refuses a context of another cluster (the copies' indices are this cluster's nodes).
    fn check_cluster(&self, ctx: &Ctx) -> Result<()> {
        if let Some(c) = self.copies.first() {
            ctx.cluster().check(c)?;
        }
        Ok(())
    }

    /// `load(s)`: CPU load of the local copy.
    pub fn load(&self, ctx: &Ctx) -> Result<u64> {
        Ok(ctx.load(&self.local(ctx)?)?)
    }

    /// `store(s, v)`: CPU store to the local copy (x86-TSO: it may sit in the store buffer).
    pub fn store(&self, ctx: &Ctx, value: u64) -> Result<()> {
        Ok(ctx.store(&self.local(ctx)?, value)?)
    }

    /// `bcast(s, N, d)`: puts the local copy to the copies on every node of `nodes`, in the order
    /// given, tagged `d`. The calling thread's own node is skipped: its copy is the source.
    ///
    /// Every node is checked (it exists, [`Error::Rdma`] `UnknownNode`; it is alive, `PeerDead`
    /// naming it) before anything is posted. The puts read the local copy when the NIC
    /// gets to them (Fig. 2); `wait(d)` waits until they have, [`GlobalFence::gf`] until they have
    /// landed.
    pub fn bcast(
        &self,
        ctx: &Ctx,
        nodes: impl IntoIterator<Item = NodeId>,
        wid: WorkId,
    ) -> Result<()> {
        // The own node's copy is the source: `local` checks that the context is of this
        // cluster and its node has a copy.
        let me = ctx.node();
        self.local(ctx)?;
        let nodes = nodes.into_iter().collect::<Vec<_>>();
        for &n in nodes.iter().filter(|&&n| n != me) {
            self.copy(n)?;
            ctx.cluster().check_alive(n)?;
        }
        // Every copy exists (checked above, and the own node's is the context's).
        let copies = &self.copies;
        protocol::bcast(&mut &*ctx, |n| copies[n.index()], &nodes, wid)?;
        Ok(())
    }
}

/// The global fence on a thread context (docs/model.md §2 `gf(N)`).
pub trait GlobalFence {
    /// `gf(N)`: blocks until every earlier operation of this thread towards the nodes of `nodes`
    /// has fully completed, remote writes included (see the [crate docs](crate)).
    ///
    /// A node nothing of the thread's can still be on its way to costs nothing: no operation
    /// towards it since its last fence, or only gets (or fence reads) after it ([`Ctx::fenced`]); a fence right
    /// after another, or a strong lock's release towards nodes its section did not touch, posts
    /// nothing there (if it leaves every node out, an `mfence` drains the store buffer, as the
    /// full fence's wait would). A put that was only waited for still gets a fence: its
    /// completion does not mean it landed (Fig. 5).
    ///
    /// Every node is checked before anything is posted (unknown: `UnknownNode`; dead: `PeerDead`
    /// naming it); an empty set returns at once. A node of the set that dies during the fence
    /// makes it fail with `PeerDead` naming that node, instead of blocking.
    fn gf(&self, nodes: impl IntoIterator<Item = NodeId>) -> Result<()>;

    /// `gf(all)`: the global fence towards every node of the cluster.
    fn gf_all(&self) -> Result<()>;
}

/// Per-cluster state: the dummy word on every node that the fence's reads read.
#[derive(Debug)]
struct GfTargets {
    words: Vec<Loc>,
}

/// Per-thread state: where the fence's reads land, and the cluster's dummy words.
#[derive(Debug)]
struct GfThread {
    words: std::rc::Rc<protocol::GfWords<Loc>>,
    /// The scratch word goes back when the context is dropped with nothing in flight.
    settled: loco_rdmawait::Settled,
    cluster: loco_rdmawait::Cluster,
}

impl Drop for GfThread {
    fn drop(&mut self) {
        if self.settled.get() {
            let _ = self.cluster.free_private(self.words.scratch);
        }
    }
}

fn gf_thread(ctx: &Ctx) -> Result<std::rc::Rc<GfThread>> {
    Ok(ctx.extension::<GfThread>(|ctx| {
        let targets = ctx.cluster().extension::<GfTargets>(|c| {
            let words = c
                .node_ids()
                .map(|n| c.fence_word(n))
                .collect::<loco_rdmawait::Result<Vec<_>>>()?;
            Ok(GfTargets { words })
        })?;
        let scratch = ctx.cluster().alloc_private(ctx.node(), 8)?;
        Ok(GfThread {
            words: std::rc::Rc::new(protocol::GfWords {
                dummy: targets.words.clone(),
                scratch,
            }),
            settled: ctx.settled(),
            cluster: ctx.cluster().clone(),
        })
    })?)
}

/// The words of `gf(nodes)` for the calling thread, after checking that every node of the set
/// is known and alive (`UnknownNode`, `PeerDead` naming it): what a protocol that ends in a
/// global fence (the strong lock's release) passes to [`protocol::gf`]. Made once per thread;
/// each call hands out the same words.
pub fn gf_words(ctx: &Ctx, nodes: &[NodeId]) -> Result<std::rc::Rc<protocol::GfWords<Loc>>> {
    let st = gf_thread(ctx)?;
    for &n in nodes {
        ctx.cluster().check_alive(n)?;
    }
    Ok(st.words.clone())
}

impl GlobalFence for Ctx {
    fn gf(&self, nodes: impl IntoIterator<Item = NodeId>) -> Result<()> {
        let nodes = nodes.into_iter().collect::<Vec<_>>();
        let words = gf_words(self, &nodes)?;
        protocol::gf(&mut &*self, &words, &nodes)?;
        tracing::trace!(target: "loco::sv", node = %self.node(), ?nodes, "gf done");
        Ok(())
    }

    fn gf_all(&self) -> Result<()> {
        let all = self.cluster().node_ids().collect::<Vec<_>>();
        self.gf(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loco_rdmawait::Schedule;

    /// The first global fence of a cluster makes its words on every node, a dead one
    /// included: the fence towards the live nodes must not fail because of the dead one
    /// (a word freed on it earlier could not be zeroed for reuse).
    #[test]
    fn the_first_gf_after_a_node_died_fences_the_live_nodes() -> Result<()> {
        let cluster = Cluster::builder().nodes(3).build()?;
        let w = cluster.alloc_private(NodeId(1), 8)?;
        cluster.free_private(w)?;
        cluster.kill(NodeId(1))?;
        let ctx = cluster.context(NodeId(0))?;
        ctx.gf([NodeId(0), NodeId(2)])?;
        assert!(matches!(
            ctx.gf([NodeId(1)]),
            Err(Error::Rdma(loco_rdmawait::Error::PeerDead { .. }))
        ));
        Ok(())
    }

    #[test]
    fn bcast_skips_own_node_and_checks_nodes_first() -> Result<()> {
        let cluster = Cluster::builder().nodes(2).build()?;
        let s = SharedVar::new(&cluster)?;
        let ctx = cluster.context(NodeId(0))?;
        s.store(&ctx, 3)?;
        let err = s.bcast(&ctx, [NodeId(1), NodeId(5)], WorkId::new(0));
        assert!(matches!(
            err,
            Err(Error::Rdma(loco_rdmawait::Error::UnknownNode { .. }))
        ));
        assert_eq!(ctx.unpolled(NodeId(1))?, 0, "nothing posted on error");
        s.bcast(&ctx, [NodeId(0), NodeId(1)], WorkId::new(0))?;
        assert_eq!(ctx.unpolled(NodeId(0))?, 0, "no loop-back put");
        assert_eq!(ctx.unpolled(NodeId(1))?, 1);
        Ok(())
    }

    #[test]
    fn gf_of_nothing_posts_nothing() -> Result<()> {
        let cluster = Cluster::builder()
            .nodes(2)
            .soft(Schedule::Chaos { seed: 1 })
            .build()?;
        let ctx = cluster.context(NodeId(0))?;
        ctx.gf([])?;
        assert_eq!(ctx.unpolled(NodeId(0))?, 0);
        assert_eq!(ctx.unpolled(NodeId(1))?, 0);
        Ok(())
    }
}
