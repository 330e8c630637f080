//! Shared by the integration tests: seeded chaos runs and outcome histograms.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Debug;

use loco_rdmawait::{Cluster, Schedule};

/// Runs per litmus test (the issue asks for at least 10,000 seeded runs).
pub const RUNS: u64 = 10_000;

/// A small chaos cluster for one litmus run.
pub fn chaos(nodes: usize, seed: u64) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(1024)
        .soft(Schedule::Chaos { seed })
        .build()
        .expect("building a chaos cluster")
}

/// Runs `run(seed)` for `RUNS` seeds and returns the histogram of outcomes.
pub fn histogram<O: Ord + Debug>(mut run: impl FnMut(u64) -> O) -> BTreeMap<O, u64> {
    let mut h = BTreeMap::new();
    for seed in 0..RUNS {
        *h.entry(run(seed)).or_insert(0) += 1;
    }
    h
}
