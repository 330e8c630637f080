//! Locks over RDMA: the paper's weak, strong and node locks (spec §5; Figs. 8, 10 and 13).
//!
//! Three locks, one shape ([`lock_api`]'s split into a raw protocol, a handle and a guard):
//!
//! | lock | protocol | a release publishes | release blocks? |
//! |---|---|---|---|
//! | [`WLock`] | distributed ticket lock (Fig. 10) | CPU accesses only: mutual exclusion, nothing more | no |
//! | [`SLock`] | `gf(all)` + the weak release | every earlier operation, towards every node | yes (one round trip per node) |
//! | [`NLock`] on n | centralised ticket lock on n (Fig. 13) | operations towards n | no |
//!
//! A handle is cheap to clone, `Send` and `Sync`, and is used by threads on every node; each call
//! takes the calling thread's [`Ctx`], and the guard holds it.
//!
//! ```
//! use loco_locks::SLock;
//! use loco_rdmawait::{Cluster, NodeId, Schedule, WorkId};
//!
//! let cluster = Cluster::builder().nodes(3).soft(Schedule::Threaded).build()?;
//! let counter = cluster.alloc_word(NodeId(2))?;
//! let lock = SLock::new(&cluster, NodeId(0), 4)?; // ticket dispenser on n0, up to 4 threads
//!
//! let workers: Vec<_> = (0..3u16)
//!     .map(|n| {
//!         let (cluster, lock) = (cluster.clone(), lock.clone());
//!         std::thread::spawn(move || -> loco_locks::Result<()> {
//!             let ctx = cluster.context(NodeId(n))?;
//!             let tmp = cluster.alloc_word(NodeId(n))?;
//!             let d = WorkId::new(1);
//!             for _ in 0..10 {
//!                 let _g = lock.acquire(&ctx)?;
//!                 ctx.get(&tmp, &counter, d)?;          // read the counter on n2 ...
//!                 ctx.wait(d)?;
//!                 ctx.store(&tmp, ctx.load(&tmp)? + 1)?; // ... add on the CPU ...
//!                 ctx.put(&counter, &tmp, d)?;          // ... write it back
//!             } // the guard's release fences: the put lands before the next holder enters
//!             Ok(())
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap()?;
//! }
//! cluster.quiesce()?;
//! assert_eq!(cluster.peek(&counter)?, 30);
//! # Ok::<(), loco_locks::Error>(())
//! ```
//!
//! # Guarantees (spec §5, Fig. 8)
//! All three give **mutual exclusion** and serve tickets in order (FIFO). They differ in what a
//! release makes visible to the next holder:
//! - [`WLock`]: CPU accesses of the critical section (Fig. 8a), not its remote operations: a put
//!   may land after the release, after the next holder has read the old value (Fig. 8b).
//!   Add [`gf`](loco_sv::GlobalFence::gf) towards the nodes you wrote before releasing (Fig. 8d).
//! - [`SLock`]: every operation issued before the release has fully completed before the next
//!   holder enters (Fig. 8e).
//! - [`NLock`] on n: operations **towards n** inside the critical section are visible to the next
//!   holder (Fig. 8f); operations towards other nodes are not (the other-node variant of 8f).
//!
//! A global fence alone gives no exclusion at all (Fig. 8c).
//!
//! # Errors
//! Misuse is checked, always and cheaply: acquiring a lock the thread holds is
//! [`Error::AlreadyHeld`], releasing one it does not hold is [`Error::NotHeld`], more threads than
//! a weak or strong lock was made for is [`Error::TooManyThreads`]. A timed acquire that runs out
//! is [`Error::Timeout`]. Everything else comes from the layers below ([`Error::Rdma`]).
//!
//! # Implementation
//! Each lock runs the paper's protocol over `loco-sv` and `loco-rdmawaitrmw`, and nothing else:
//! no process-local mutex stands in for it, so the soft backend exercises exactly what runs over
//! verbs. Per-thread state (ticket, private words, `rel` slot) lives in the thread's [`Ctx`]. The
//! locks' operations use library-reserved work ids ([`WorkId::internal`]), so user waits never
//! wait for them. Release operations that the paper does not wait for (the weak lock's broadcast,
//! the node lock's put) are reaped by the thread's next acquire, so completions never pile up.
//!
//! Per-thread words (a weak lock's `turn`, a node lock's `loc`) are allocated on the thread's node
//! on its first use of the lock, from the node's private region
//! ([`Cluster::alloc_private`](loco_rdmawait::Cluster::alloc_private)), so they never shift the
//! offsets of shared objects: in a cluster spanning several processes, nodes agree on the
//! addresses of locks, shared variables and data as long as each process makes them in the same
//! order.
//!
//! [`lock_api`]: https://docs.rs/lock_api
//! [`Ctx`]: loco_rdmawait::Ctx
//! [`WorkId::internal`]: loco_rdmawait::WorkId::internal

#![forbid(unsafe_code)]

mod error;
mod lock;
mod nlock;
mod thread;
mod wlock;

use loco_rdmawait::{Cluster, NodeId};

pub use error::{Error, Result};
pub use lock::{Lock, LockGuard, RawLock, RawLockTimed};
pub use nlock::RawNLock;
pub use wlock::{RawSLock, RawWLock};

/// The **weak lock** (spec §5 wlock, Fig. 10): a distributed ticket lock.
///
/// # Guarantee
/// Mutual exclusion, and nothing more: the CPU accesses of one critical section happen before
/// those of the next (Fig. 8a), but its remote operations may complete after the release (Fig.
/// 8b): a put inside the critical section can land after the next holder has read the old value.
/// Tickets are served in order.
///
/// # When to choose it
/// When the critical section only touches local memory with the CPU, or when you know which nodes
/// it wrote: then fence just those (`gf(N)`) before releasing, which is cheaper than the
/// [`SLock`]'s fence towards every node (Fig. 8d). The release itself never blocks.
///
/// ```
/// use loco_locks::WLock;
/// use loco_rdmawait::{Cluster, NodeId, WorkId};
/// use loco_sv::GlobalFence;
///
/// let cluster = Cluster::builder().nodes(3).build()?;
/// let x = cluster.alloc_word(NodeId(2))?;
/// let one = cluster.alloc_word(NodeId(0))?;
/// let lock = WLock::new(&cluster, NodeId(0), 8)?;
/// let ctx = cluster.context(NodeId(0))?;
///
/// let g = lock.acquire(&ctx)?;
/// ctx.store(&one, 1)?;
/// ctx.put(&x, &one, WorkId::new(1))?;
/// ctx.gf([NodeId(2)])?; // only n2 was written: fence just n2, then release
/// loco_locks::WLockGuard::release(g)?;
/// # Ok::<(), loco_locks::Error>(())
/// ```
pub type WLock = Lock<RawWLock>;

/// The **strong lock** (spec §5 slock): the weak lock, with a global fence towards every node
/// before each release.
///
/// # Guarantee
/// Mutual exclusion, and every operation the holder issued before the release (puts, gets, RMWs,
/// towards any node) has fully completed before the next holder enters (Fig. 8e). Tickets are
/// served in order.
///
/// # When to choose it
/// When the critical section touches remote memory and you want it to behave like a lock on a
/// single machine. The price is the release: one fence and round trip per node.
///
/// ```
/// use loco_locks::SLock;
/// use loco_rdmawait::{Cluster, NodeId, WorkId};
///
/// let cluster = Cluster::builder().nodes(3).build()?;
/// let (x, y) = (cluster.alloc_word(NodeId(1))?, cluster.alloc_word(NodeId(2))?);
/// let one = cluster.alloc_word(NodeId(0))?;
/// let lock = SLock::new(&cluster, NodeId(0), 8)?;
/// let ctx = cluster.context(NodeId(0))?;
/// {
///     let _g = lock.acquire(&ctx)?;
///     ctx.store(&one, 1)?;
///     ctx.put(&x, &one, WorkId::new(1))?; // towards n1 ...
///     ctx.put(&y, &one, WorkId::new(1))?; // ... and n2: both land before the next holder enters
/// }
/// # Ok::<(), loco_locks::Error>(())
/// ```
pub type SLock = Lock<RawSLock>;

/// The **node lock** on node n (spec §5 nlock@n, Fig. 13): a centralised ticket lock whose words
/// live on n.
///
/// # Guarantee
/// Mutual exclusion; operations **towards n** inside a critical section are visible to the next
/// holder (Fig. 8f); operations towards other nodes are not (8f, other-node variant). The release
/// (`rfence(n); put`) does not block the CPU. Tickets are served in order.
///
/// # When to choose it
/// When the data the critical section touches lives on one node, as in SC objects (spec §5,
/// Fig. 14): it orders exactly what it needs to, without a fence round trip at release.
///
/// ```
/// use loco_locks::NLock;
/// use loco_rdmawait::{Cluster, NodeId, WorkId};
///
/// let cluster = Cluster::builder().nodes(3).build()?;
/// let counter = cluster.alloc_word(NodeId(2))?;
/// let tmp = cluster.alloc_word(NodeId(0))?;
/// let lock = NLock::new(&cluster, NodeId(2))?; // the data is on n2: lock on n2
/// let ctx = cluster.context(NodeId(0))?;
/// let d = WorkId::new(1);
/// {
///     let _g = lock.acquire(&ctx)?;
///     ctx.get(&tmp, &counter, d)?;
///     ctx.wait(d)?;
///     ctx.store(&tmp, ctx.load(&tmp)? + 1)?;
///     ctx.put(&counter, &tmp, d)?; // visible to the next holder, without waiting here
/// }
/// # Ok::<(), loco_locks::Error>(())
/// ```
pub type NLock = Lock<RawNLock>;

/// The guard of a [`WLock`].
pub type WLockGuard<'a> = LockGuard<'a, RawWLock>;
/// The guard of an [`SLock`].
pub type SLockGuard<'a> = LockGuard<'a, RawSLock>;
/// The guard of an [`NLock`].
pub type NLockGuard<'a> = LockGuard<'a, RawNLock>;

impl WLock {
    /// A weak lock for at most `max_threads` threads, its ticket dispenser on `ticket_node` (see
    /// [`RawWLock::new`]).
    pub fn new(cluster: &Cluster, ticket_node: NodeId, max_threads: usize) -> Result<WLock> {
        Ok(Lock::from_raw(RawWLock::new(
            cluster,
            ticket_node,
            max_threads,
        )?))
    }
}

impl SLock {
    /// A strong lock for at most `max_threads` threads, its ticket dispenser on `ticket_node` (see
    /// [`RawWLock::new`]).
    pub fn new(cluster: &Cluster, ticket_node: NodeId, max_threads: usize) -> Result<SLock> {
        Ok(Lock::from_raw(RawSLock::new(
            cluster,
            ticket_node,
            max_threads,
        )?))
    }
}

impl NLock {
    /// A node lock on `node`.
    pub fn new(cluster: &Cluster, node: NodeId) -> Result<NLock> {
        Ok(Lock::from_raw(RawNLock::new(cluster, node)?))
    }
}
