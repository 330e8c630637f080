//! Backend-generic tests: one test body that runs on the soft NIC by default and on a real RDMA
//! device when `LOCO_BACKEND=verbs` (what `soft-roce-ci/run.sh` does), without being copied.
//!
//! A backend-generic test builds its clusters with [`cluster`] (or
//! [`ClusterBuilder::backend_from_env`](crate::ClusterBuilder::backend_from_env)), sizes its loops
//! with [`runs`] (a device pays real I/O per operation, and a cluster set-up per run), checks
//! forbidden outcomes on every backend, and asserts that an allowed weak outcome *was observed*
//! only when [`shows_weak_outcomes`]: the soft NIC's `Chaos` schedule is built to make them
//! common, a real NIC may never show them.
//!
//! ```
//! use loco_rdmawait::{testing, NodeId, Schedule, WorkId};
//!
//! for seed in 0..testing::runs(100, 10) {
//!     let c = testing::cluster(2, 4096, Schedule::Chaos { seed })?;
//!     let (x, y) = (c.alloc_word(NodeId(0))?, c.alloc_word(NodeId(1))?);
//!     let ctx = c.context(NodeId(0))?;
//!     ctx.put(&y, &x, WorkId::new(1))?;
//!     ctx.wait(WorkId::new(1))?;
//! }
//! # Ok::<(), loco_rdmawait::Error>(())
//! ```

use crate::{BackendKind, Cluster, Result, Schedule};

/// The backend `LOCO_BACKEND` names ([`BackendKind::from_env`]); a bad value counts as
/// [`BackendKind::Soft`] here, and fails the test when it builds a cluster with [`cluster`].
pub fn backend() -> BackendKind {
    BackendKind::from_env().unwrap_or_default()
}

/// `soft` on the soft NIC, `device` on a real one: loop counts, seeds, iterations.
pub fn runs(soft: u64, device: u64) -> u64 {
    match backend() {
        BackendKind::Soft => soft,
        _ => device,
    }
}

/// Whether tests should expect allowed weak outcomes to show up: true on the soft NIC (in its
/// `Chaos` schedule), false on a real device, where only forbidden outcomes are checked.
pub fn shows_weak_outcomes() -> bool {
    backend() == BackendKind::Soft
}

/// A cluster of `nodes` nodes with `bytes` of memory each on the backend `LOCO_BACKEND` names:
/// the soft NIC with `schedule`, or the verbs backend as `LOCO_RDMA_DEVICE` and the other
/// variables of `VerbsConfig::from_env` say (the schedule is then
/// ignored). Without a device the error says how to get one; without the `verbs` feature it is
/// [`Error::BackendNotBuilt`](crate::Error::BackendNotBuilt).
pub fn cluster(nodes: usize, bytes: u64, schedule: Schedule) -> Result<Cluster> {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(bytes)
        .soft(schedule)
        .backend_from_env()?
        .build()
}
