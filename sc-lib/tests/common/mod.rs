//! Helpers shared by the integration tests: tiny clusters on the backend `LOCO_BACKEND` names
//! (the soft NIC by default, a real device under `soft-roce-ci/run.sh`; see
//! `loco_rdmawait::testing`), run counts, and one thread per context.

#![allow(dead_code)]

use std::time::Duration;

use loco_rdmawait::{testing, Cluster, Ctx, NodeId, Schedule};
use loco_sc::Result;

/// Registered memory per node of the test clusters: small, so that a run is cheap.
pub const MEMORY: u64 = 4096;

/// A small cluster of `nodes` nodes: the soft NIC with `schedule`, or the device. Panics with
/// the backend's explanation when it cannot be built.
pub fn cluster(nodes: usize, schedule: Schedule) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(MEMORY)
        .soft(schedule)
        .timeout(Duration::from_secs(20))
        .backend_from_env()
        .and_then(|b| b.build())
        .unwrap_or_else(|e| panic!("cannot build a {} test cluster: {e}", testing::backend()))
}

/// A small Chaos cluster of `nodes` nodes.
pub fn chaos(nodes: usize, seed: u64) -> Cluster {
    cluster(nodes, Schedule::Chaos { seed })
}

/// Runs one thread per entry of `nodes`, each with a fresh context on that node, and returns
/// their results in order. Panics (with the error) if a thread fails.
pub fn threads<R: Send>(
    cluster: &Cluster,
    nodes: &[u16],
    body: impl Fn(usize, &Ctx) -> Result<R> + Sync,
) -> Vec<R> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(t, &n)| {
                let body = &body;
                s.spawn(move || {
                    let ctx = cluster.context(NodeId(n))?;
                    body(t, &ctx)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread panicked").expect("thread failed"))
            .collect()
    })
}

/// Number of seeded runs: `soft` on the soft NIC, `device` on a real one, or what `LOCO_SC_RUNS`
/// says (for quick local runs or longer soaks; a 0 or a typo there fails the test, see
/// `testing::runs_override`).
pub fn runs(soft: u64, device: u64) -> u64 {
    testing::runs_override("LOCO_SC_RUNS").unwrap_or_else(|| testing::runs(soft, device))
}

/// Whether allowed weak outcomes must show up (the soft NIC's `Chaos`); on a device only
/// forbidden outcomes are checked.
pub fn shows_weak_outcomes() -> bool {
    testing::shows_weak_outcomes()
}
