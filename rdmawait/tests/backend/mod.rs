//! Builds test clusters on the backend the environment asks for, so that one behavioural test
//! runs on the soft NIC by default and on a real RDMA device under `soft-roce-ci/run.sh`:
//!
//! | `LOCO_TEST_BACKEND` | clusters are built on |
//! |---|---|
//! | unset, `soft` | the soft NIC, with the schedule the test asks for |
//! | `verbs` | the verbs backend (feature `verbs`), device from `LOCO_RDMA_DEVICE` / `LOCO_GID_INDEX`; the schedule is ignored |
//!
//! Use: `mod backend;` in a test file, then `backend::builder(schedule).nodes(2).build()` (or
//! [`cluster`]) instead of `Cluster::builder().soft(schedule)`; scale loop counts with [`runs`]
//! and assert that an allowed weak outcome *was* observed only when [`shows_weak_outcomes`].
//! With `LOCO_TEST_BACKEND=verbs` and no device, the test fails with the backend's error (which
//! says how to get one); it never passes silently.
#![allow(dead_code)]

use loco_rdmawait::{Cluster, ClusterBuilder, Schedule};

/// The backend tests run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The soft NIC.
    Soft,
    /// A real RDMA device through ibverbs.
    Verbs,
}

/// The backend `LOCO_TEST_BACKEND` asks for (default: soft). Panics on other values, and on
/// `verbs` in a build without the `verbs` feature.
pub fn kind() -> Kind {
    match std::env::var("LOCO_TEST_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("soft") => Kind::Soft,
        Ok("verbs") if cfg!(feature = "verbs") => Kind::Verbs,
        Ok("verbs") => panic!(
            "LOCO_TEST_BACKEND=verbs, but this test binary was built without the `verbs` feature \
             (cargo test --features verbs)"
        ),
        Ok(other) => panic!("LOCO_TEST_BACKEND must be `soft` or `verbs`, not `{other}`"),
    }
}

/// A cluster builder on the chosen backend; `schedule` applies to the soft NIC only.
pub fn builder(schedule: Schedule) -> ClusterBuilder {
    let b = Cluster::builder().soft(schedule);
    match kind() {
        Kind::Soft => b,
        #[cfg(feature = "verbs")]
        Kind::Verbs => b.verbs(verbs_config()),
        #[cfg(not(feature = "verbs"))]
        Kind::Verbs => unreachable!("kind() refuses verbs without the feature"),
    }
}

/// A cluster of `nodes` nodes with 64 KiB each on the chosen backend. Panics (with the backend's
/// explanation) when it cannot be built.
pub fn cluster(nodes: usize, schedule: Schedule) -> Cluster {
    cluster_sized(nodes, 64 * 1024, schedule)
}

/// A cluster of `nodes` nodes with `bytes` of memory each on the chosen backend (the drop-in
/// replacement of `Cluster::builder().nodes(n).memory_per_node(bytes).soft(schedule).build()`).
pub fn cluster_sized(nodes: usize, bytes: u64, schedule: Schedule) -> Cluster {
    builder(schedule)
        .nodes(nodes)
        .memory_per_node(bytes)
        .build()
        .unwrap_or_else(|e| panic!("cannot build a {:?} test cluster: {e}", kind()))
}

/// `soft` runs on the soft NIC, `verbs.min(soft)` on a device (each run there costs real I/O,
/// and under emulation ~10-25 µs per operation).
pub fn runs(soft: u64, verbs: u64) -> u64 {
    match kind() {
        Kind::Soft => soft,
        Kind::Verbs => verbs.min(soft),
    }
}

/// Whether the backend is expected to *show* allowed weak outcomes (the soft NIC's Chaos
/// schedule is; a real NIC may or may not, so tests only check forbidden outcomes there).
pub fn shows_weak_outcomes(schedule: Schedule) -> bool {
    kind() == Kind::Soft && matches!(schedule, Schedule::Chaos { .. })
}

/// The verbs configuration tests use: the environment's (device, port, GID index).
#[cfg(feature = "verbs")]
pub fn verbs_config() -> loco_rdmawait::VerbsConfig {
    loco_rdmawait::VerbsConfig::from_env()
        .unwrap_or_else(|e| panic!("bad verbs settings in the environment: {e}"))
}

/// A cluster on the verbs backend whatever `LOCO_TEST_BACKEND` says (for the verbs-only tests).
/// Panics with the backend's error (what to install, how to create an rxe device) when there is
/// no usable device: a missing device fails the test, it does not skip it.
#[cfg(feature = "verbs")]
pub fn verbs_cluster(nodes: usize) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(64 * 1024)
        .timeout(std::time::Duration::from_secs(20))
        .verbs(verbs_config())
        .build()
        .unwrap_or_else(|e| panic!("no verbs cluster: {e}"))
}
