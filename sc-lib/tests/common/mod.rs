//! Helpers shared by the integration tests: tiny clusters and one thread per context.

#![allow(dead_code)]

use std::time::Duration;

use loco_rdmawait::{Cluster, Ctx, NodeId, Schedule};
use loco_sc::Result;

/// Registered memory per node of the test clusters: small, so that a run is cheap.
pub const MEMORY: u64 = 4096;

/// A small cluster of `nodes` nodes on the soft NIC with `schedule`.
pub fn cluster(nodes: usize, schedule: Schedule) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(MEMORY)
        .soft(schedule)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("cluster")
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

/// Number of seeded runs: `full` normally, or what `LOCO_SC_RUNS` says (for quick local runs
/// or longer soaks).
pub fn runs(full: u64) -> u64 {
    std::env::var("LOCO_SC_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(full)
}
