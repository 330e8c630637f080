//! Shared by the integration tests: litmus clusters on the backend `LOCO_BACKEND` names (the soft
//! NIC in `Chaos` by default, a real device under `soft-roce-ci/run.sh`; see
//! `loco_rdmawait::testing`), and outcome histograms.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Debug;

use loco_rdmawait::{testing, Cluster, Schedule};

/// Runs per litmus test on the soft NIC (the issue asks for at least 10,000 seeded runs).
pub const RUNS: u64 = 10_000;
/// Runs per litmus test on a real device (each costs a cluster set-up and real I/O; ~10-25 µs
/// per operation under emulation).
pub const VERBS_RUNS: u64 = 500;

/// A small cluster for one litmus run: the soft NIC in `Chaos { seed }`, or the device. Panics
/// with the backend's explanation when it cannot be built (no device: what to do about it).
pub fn cluster(nodes: usize, seed: u64) -> Cluster {
    testing::cluster(nodes, 1024, Schedule::Chaos { seed })
        .unwrap_or_else(|e| panic!("cannot build a {} test cluster: {e}", testing::backend()))
}

/// Runs `run(seed)` for [`RUNS`] seeds ([`VERBS_RUNS`] on a device) and returns the histogram
/// of outcomes.
pub fn histogram<O: Ord + Debug>(run: impl FnMut(u64) -> O) -> BTreeMap<O, u64> {
    histogram_n(testing::runs(RUNS, VERBS_RUNS), run)
}

/// Runs `run(seed)` for seeds `0..n` and returns the histogram of outcomes (printed on a device,
/// where which allowed outcomes show up is worth seeing).
pub fn histogram_n<O: Ord + Debug>(n: u64, mut run: impl FnMut(u64) -> O) -> BTreeMap<O, u64> {
    let mut h = BTreeMap::new();
    for seed in 0..n {
        *h.entry(run(seed)).or_insert(0) += 1;
    }
    if !testing::shows_weak_outcomes() {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        eprintln!("{test}: {n} runs on {}: {h:?}", testing::backend());
    }
    h
}

/// The verbs configuration of the verbs-only tests: the environment's (device, port, GID index).
#[cfg(feature = "verbs")]
pub fn verbs_config() -> loco_rdmawait::VerbsConfig {
    loco_rdmawait::VerbsConfig::from_env()
        .unwrap_or_else(|e| panic!("bad verbs settings in the environment: {e}"))
}

/// A cluster on the verbs backend whatever `LOCO_BACKEND` says (for the verbs-only tests).
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
