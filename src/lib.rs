//! loco-rs: composable, formally specified objects for RDMA networks (RoCE, InfiniBand,
//! Soft-RoCE), after Stupple, Dongol and Raad, *Specifying and Verifying RDMA Synchronisation*.
//!
//! The layers, bottom up, each with its guarantee in a line:
//!
//! - [`rdmawait`]: `put`/`get` over RC queue pairs, `wait(d)` by work id, `rfence(n)`; a put reads
//!   its source late, a wait does not cover remote writes, different nodes are unordered. Also
//!   the NIC backends: the soft NIC (default) and ibverbs (feature `verbs`).
//! - [`rdmawaitrmw`]: `rcas`/`rfaa`, atomic only against other remote RMWs.
//! - [`sv`]: shared variables (a copy per node) with `bcast`, and the global fence `gf(N)`, after
//!   which every earlier operation towards N has fully landed.
//! - [`locks`]: `WLock` (mutual exclusion only), `SLock` (a release completes everything before
//!   it), `NLock` on n (a release publishes the operations towards n, without blocking).
//! - [`sc`]: sequentially consistent `read_sc`/`write_sc`/`cas_sc`/`faa_sc` on abstract
//!   locations, and any sequential data structure made linearizable behind a node lock.
//!
//! With feature `tokio`, `aio` makes every operation a future for tokio services: an
//! `AsyncCtx` shared by the tasks of one thread, a fresh work id per operation, and the blocking
//! calls of every layer (lock acquires, `gf`, SC operations) awaited without blocking the thread
//! (`examples/tokio_tasks.rs`, `examples/kv_service.rs`).
//!
//! The model behind these guarantees, the litmus format and the notes on real devices are in
//! [docs/](https://github.com/loco-rs/loco-rs/blob/main/docs/README.md).
//!
//! ```
//! use loco::prelude::*;
//!
//! let cluster = Cluster::builder().nodes(3).build()?;
//! let counter = cluster.alloc_word(NodeId(2))?;
//! let old = cluster.alloc_word(NodeId(0))?;
//! let ctx = cluster.context(NodeId(0))?;
//! ctx.rfaa(&counter, 1, &old, WorkId::new(0))?;
//! ctx.wait(WorkId::new(0))?;
//! assert_eq!(ctx.load(&old)?, 0);
//! # Ok::<(), loco::rdmawait::Error>(())
//! ```

#![forbid(unsafe_code)]

#[doc(inline)]
pub use loco_locks as locks;
#[doc(inline)]
pub use loco_rdmawait as rdmawait;
#[doc(inline)]
pub use loco_rdmawaitrmw as rdmawaitrmw;
#[doc(inline)]
pub use loco_sc as sc;
#[doc(inline)]
pub use loco_sv as sv;

/// Futures for tokio services (feature `tokio`): awaited work ids, lock acquires, fences and SC
/// operations.
#[cfg(feature = "tokio")]
#[doc(inline)]
pub use loco_rdmawait::aio;

/// Deterministic simulation of code over these layers (seeded schedules, virtual time).
#[doc(inline)]
pub use loco_rdmawait::sim;

/// Real or simulated time, as every layer reads it.
#[doc(inline)]
pub use loco_rdmawait::clock;

/// The code blocks of README.md, compiled and run as doctests so that the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The names most programs need.
pub mod prelude {
    pub use loco_locks::{LockGuard, NLock, SLock, WLock};
    pub use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, Schedule, WorkId};
    pub use loco_rdmawaitrmw::Rmw;
    pub use loco_sc::{
        BoundedQueue, FixedHashMap, Ported, PortedHashMap, PortedQueue, Sc, ScLoc, Sequential,
    };
    pub use loco_sv::{GlobalFence, SharedVar};
}
