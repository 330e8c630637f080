//! The paper's litmus tests of Figs. 6 and 7 (`tests/litmus/`, docs/model.md §6): remote RMWs are atomic
//! against each other only, and their read, unlike a get's, is not overtaken by a later put. On the backend `LOCO_BACKEND` names (`loco_rdmawait::testing`):
//! forbidden outcomes never appear on any; on the soft NIC in `Chaos` (default, `RUNS` seeded
//! runs) the allowed weak ones do too; on a device (`VERBS_RUNS` runs) every outcome must be
//! allowed, and the histograms are printed.

use std::collections::BTreeMap;
use std::fmt::Debug;

use loco_rdmawait::testing::{self, shows_weak_outcomes};
use loco_rdmawait::{Cluster, NodeId, Schedule, WorkId};
use loco_rdmawaitrmw::Rmw;

const RUNS: u64 = 10_000;
const VERBS_RUNS: u64 = 500;
const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D1: WorkId = WorkId::new(1);
const D2: WorkId = WorkId::new(2);

/// A cluster for one run: the soft NIC in `Chaos { seed }`, or the device.
fn chaos(nodes: usize, seed: u64) -> Cluster {
    testing::cluster(nodes, 1024, Schedule::Chaos { seed }).unwrap_or_else(|e| panic!("{e}"))
}

fn histogram<O: Ord + Debug>(mut run: impl FnMut(u64) -> O) -> BTreeMap<O, u64> {
    let mut h = BTreeMap::new();
    for seed in 0..testing::runs(RUNS, VERBS_RUNS) {
        *h.entry(run(seed)).or_insert(0) += 1;
    }
    if !shows_weak_outcomes() {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        eprintln!("{test}: on {}: {h:?}", testing::backend());
    }
    h
}

/// Fig. 6: t0@n0 does `rcas(x@n1, 0, 1)`; a thread on `writer` node writes 2 into x, by a CPU
/// store (6a), a put (6b) or a remote FAA of 2 (6c). Returns the final x.
fn fig6(seed: u64, how: &str) -> u64 {
    let c = chaos(3, seed);
    let x = c.alloc_word(N1).unwrap();
    let a = c.alloc_word(N0).unwrap();
    let two = c.alloc_word(N2).unwrap();
    let b = c.alloc_word(N2).unwrap();
    c.poke(&two, 2).unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let ctx = c.context(N0).unwrap();
            ctx.rcas(&x, 0, 1, &a, D1).unwrap();
        });
        sc.spawn(|| match how {
            "store" => c.context(N1).unwrap().store(&x, 2).unwrap(),
            "put" => c.context(N2).unwrap().put(&x, &two, D1).unwrap(),
            _ => c.context(N2).unwrap().rfaa(&x, 2, &b, D1).unwrap(),
        });
    });
    c.quiesce().unwrap();
    c.peek(&x).unwrap()
}

#[test]
fn fig6a_rcas_vs_cpu_store_allowed() {
    let h = histogram(|s| fig6(s, "store"));
    assert!(h.keys().all(|x| [1, 2].contains(x)), "{h:?}");
    if shows_weak_outcomes() {
        assert!(
            h.contains_key(&1),
            "a CPU store must be seen lost inside a remote CAS: {h:?}"
        );
    }
}

#[test]
fn fig6b_rcas_vs_put_allowed() {
    let h = histogram(|s| fig6(s, "put"));
    assert!(h.keys().all(|x| [1, 2].contains(x)), "{h:?}");
    if shows_weak_outcomes() {
        assert!(
            h.contains_key(&1),
            "a put must be seen lost inside a remote CAS: {h:?}"
        );
    }
}

#[test]
fn fig6c_rcas_vs_rfaa_forbidden() {
    let h = histogram(|s| fig6(s, "faa"));
    assert!(h.keys().all(|x| [2, 3].contains(x)), "{h:?}");
    if shows_weak_outcomes() {
        assert!(
            h.contains_key(&2) && h.contains_key(&3),
            "both orders of the RMWs: {h:?}"
        );
    }
}

/// Fig. 7: t0@n0 reads x@n1 into a, by a get (7a) or an rfaa (7b), then puts 1 into y@n1; t1@n1
/// loads y then stores 1 to x. Returns (a, t1's r0).
fn fig7(seed: u64, rmw: bool) -> (u64, u64) {
    let c = chaos(2, seed);
    let a = c.alloc_word(N0).unwrap();
    let one = c.alloc_word(N0).unwrap();
    let x = c.alloc_word(N1).unwrap();
    let y = c.alloc_word(N1).unwrap();
    c.poke(&one, 1).unwrap();
    let r0 = std::thread::scope(|sc| {
        sc.spawn(|| {
            let ctx = c.context(N0).unwrap();
            if rmw {
                ctx.rfaa(&x, 1, &a, D1).unwrap();
            } else {
                ctx.get(&a, &x, D1).unwrap();
            }
            ctx.put(&y, &one, D2).unwrap();
        });
        sc.spawn(|| {
            let ctx = c.context(N1).unwrap();
            let r0 = ctx.load(&y).unwrap();
            ctx.store(&x, 1).unwrap();
            r0
        })
        .join()
        .unwrap()
    });
    c.quiesce().unwrap();
    (c.peek(&a).unwrap(), r0)
}

#[test]
fn fig7a_lb_get_allowed() {
    let h = histogram(|s| fig7(s, false));
    assert!(h.keys().all(|&(a, r0)| a <= 1 && r0 <= 1), "{h:?}");
    if shows_weak_outcomes() {
        assert!(
            h.contains_key(&(1, 1)),
            "a later put must overtake a get's read: {h:?}"
        );
    }
}

#[test]
fn fig7b_lb_rfaa_forbidden() {
    let h = histogram(|s| fig7(s, true));
    assert!(!h.contains_key(&(1, 1)), "{h:?}");
}
