//! Behavioural tests written once for every backend (see `backend/mod.rs`): litmus shapes whose
//! forbidden outcome must never appear, and many-thread contention on remote FAA counters.
//!
//! By default they run on the soft NIC in `Chaos` (where the allowed weak outcomes must also
//! show up); `soft-roce-ci/run.sh` runs them with `LOCO_TEST_BACKEND=verbs` on an rxe device,
//! with fewer runs ([`backend::runs`]) and only the forbidden-outcome checks.

mod backend;

use std::collections::BTreeMap;
use std::fmt::Debug;

use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, Schedule, WorkId};
use loco_rdmawaitrmw::Rmw;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D1: WorkId = WorkId::new(1);
const D2: WorkId = WorkId::new(2);

fn chaos(seed: u64) -> Schedule {
    Schedule::Chaos { seed }
}

/// Runs `run(seed)` over the backend's number of seeds; returns the outcome histogram.
fn histogram<O: Ord + Debug>(soft_runs: u64, mut run: impl FnMut(u64) -> O) -> BTreeMap<O, u64> {
    let mut h = BTreeMap::new();
    for seed in 0..backend::runs(soft_runs, 100) {
        *h.entry(run(seed)).or_insert(0) += 1;
    }
    h
}

fn small(nodes: usize, seed: u64) -> Cluster {
    backend::cluster_sized(nodes, 4096, chaos(seed))
}

/// Fig. 2 shapes on n0: puts of x@n0 to y@n1, some completion, then `store(x, 1)`; final y.
fn fig2(seed: u64, body: impl Fn(&Ctx, &Loc, &Loc)) -> u64 {
    let c = small(2, seed);
    let x = c.alloc_word(N0).unwrap();
    let y = c.alloc_word(N1).unwrap();
    {
        let ctx = c.context(N0).unwrap();
        body(&ctx, &x, &y);
        ctx.store(&x, 1).unwrap();
    }
    c.quiesce().unwrap();
    c.peek(&y).unwrap()
}

#[test]
fn fig2a_put_poll_reads_the_source_before_the_poll_returns() {
    let h = histogram(2000, |s| {
        fig2(s, |ctx, x, y| {
            ctx.raw().put(y, x).unwrap();
            ctx.raw().poll(N1).unwrap();
        })
    });
    assert_eq!(h.keys().collect::<Vec<_>>(), vec![&0], "{h:?}");
}

#[test]
fn fig2d_put_wait_and_fig2e_other_work_id() {
    let h = histogram(2000, |s| {
        fig2(s, |ctx, x, y| {
            ctx.put(y, x, D2).unwrap();
            ctx.put(y, x, D1).unwrap();
            ctx.wait(D1).unwrap();
        })
    });
    assert_eq!(h.keys().collect::<Vec<_>>(), vec![&0], "{h:?}");
}

/// Fig. 5 with global fences: store buffering through puts is forbidden.
#[test]
fn fig5_sb_put_gf_forbidden() {
    let h = histogram(2000, |s| {
        let c = small(2, s);
        let x = c.alloc_word(N0).unwrap();
        let y = c.alloc_word(N1).unwrap();
        let ones = [c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap()];
        let gfw = [c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap()];
        let scratch = [c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap()];
        for one in &ones {
            c.poke(one, 1).unwrap();
        }
        let side = |me: NodeId, other: NodeId, target: &Loc, mine: &Loc| {
            let ctx = c.context(me).unwrap();
            ctx.put(target, &ones[me.index()], D1).unwrap();
            ctx.rfence(other).unwrap();
            ctx.get(&scratch[me.index()], &gfw[other.index()], D2)
                .unwrap();
            ctx.wait(D2).unwrap();
            ctx.load(mine).unwrap()
        };
        std::thread::scope(|sc| {
            let a = sc.spawn(|| side(N0, N1, &y, &x));
            let b = sc.spawn(|| side(N1, N0, &x, &y));
            (a.join().unwrap(), b.join().unwrap())
        })
    });
    assert!(!h.contains_key(&(0, 0)), "{h:?}");
}

/// Fig. 6(c): a remote CAS and a remote FAA on one word are atomic against each other: the
/// final value is 2 (CAS failed after the FAA) or 3 (CAS then FAA), never 1 (FAA lost).
#[test]
fn fig6c_rcas_vs_rfaa_forbidden() {
    let h = histogram(2000, |s| {
        let c = small(3, s);
        let x = c.alloc_word(N1).unwrap();
        let a = c.alloc_word(N0).unwrap();
        let b = c.alloc_word(N2).unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let ctx = c.context(N0).unwrap();
                ctx.rcas(&x, 0, 1, &a, D1).unwrap();
                ctx.wait(D1).unwrap();
            });
            sc.spawn(|| {
                let ctx = c.context(N2).unwrap();
                ctx.rfaa(&x, 2, &b, D1).unwrap();
                ctx.wait(D1).unwrap();
            });
        });
        c.quiesce().unwrap();
        c.peek(&x).unwrap()
    });
    assert!(!h.contains_key(&1), "{h:?}");
    if backend::shows_weak_outcomes(chaos(0)) {
        assert!(
            h.contains_key(&2) && h.contains_key(&3),
            "both orders: {h:?}"
        );
    }
}

/// Fig. 7(b): an RMW's read is not overtaken by a later put on its queue pair.
#[test]
fn fig7b_lb_rfaa_forbidden() {
    let h = histogram(2000, |s| {
        let c = small(2, s);
        let a = c.alloc_word(N0).unwrap();
        let one = c.alloc_word(N0).unwrap();
        let x = c.alloc_word(N1).unwrap();
        let y = c.alloc_word(N1).unwrap();
        c.poke(&one, 1).unwrap();
        let r0 = std::thread::scope(|sc| {
            sc.spawn(|| {
                let ctx = c.context(N0).unwrap();
                ctx.rfaa(&x, 1, &a, D1).unwrap();
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
    });
    assert!(!h.contains_key(&(1, 1)), "{h:?}");
}

/// Message passing over one queue pair: a put of the data then a put of the flag, towards the
/// same node; a reader there that sees the flag sees the data (puts on a queue pair land in
/// order, spec §3.3).
#[test]
fn message_passing_on_one_queue_pair() {
    let h = histogram(2000, |s| {
        let c = small(2, s);
        let data = c.alloc_word(N1).unwrap();
        let flag = c.alloc_word(N1).unwrap();
        let src = c.alloc_words(N0, 2).unwrap();
        c.poke(&src.word(0).unwrap(), 42).unwrap();
        c.poke(&src.word(1).unwrap(), 1).unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let ctx = c.context(N0).unwrap();
                ctx.put(&data, &src.word(0).unwrap(), D1).unwrap();
                ctx.put(&flag, &src.word(1).unwrap(), D1).unwrap();
                ctx.wait(D1).unwrap();
            });
            sc.spawn(|| {
                let ctx = c.context(N1).unwrap();
                let mut seen = None;
                for _ in 0..10_000 {
                    if ctx.load(&flag).unwrap() == 1 {
                        seen = Some(ctx.load(&data).unwrap());
                        break;
                    }
                    std::hint::spin_loop();
                }
                seen
            })
            .join()
            .unwrap()
        })
    });
    assert!(!h.contains_key(&Some(0)), "flag seen before data: {h:?}");
}

/// Threads on every node do remote FAAs on counters on every node, loop-back included: no
/// update is lost, and each counter handed out every old value exactly once.
#[test]
fn contended_remote_faa_counters_lose_no_update() {
    let per_thread = backend::runs(300, 150);
    let schedule = Schedule::Threaded;
    let c = backend::cluster(3, schedule);
    let counters: Vec<Loc> = c.node_ids().map(|n| c.alloc_word(n).unwrap()).collect();
    let threads = [N0, N1, N1, N2, N2, N0];
    let rets: Vec<Loc> = threads
        .iter()
        .map(|&n| c.alloc_words(n, per_thread * 3).unwrap())
        .collect();
    std::thread::scope(|sc| {
        for (t, &node) in threads.iter().enumerate() {
            let (c, counters, ret) = (&c, &counters, rets[t]);
            sc.spawn(move || {
                let ctx = c.context(node).unwrap();
                for i in 0..per_thread {
                    for (k, counter) in counters.iter().enumerate() {
                        let slot = ret.word(i * 3 + k as u64).unwrap();
                        ctx.rfaa(counter, 1, &slot, D1).unwrap();
                    }
                    if i % 8 == 7 {
                        ctx.wait(D1).unwrap();
                    }
                }
                ctx.wait(D1).unwrap();
            });
        }
    });
    c.quiesce().unwrap();
    let total = per_thread * threads.len() as u64;
    for (k, counter) in counters.iter().enumerate() {
        assert_eq!(c.peek(counter).unwrap(), total, "counter on n{k}");
        let mut olds: Vec<u64> = Vec::new();
        for r in &rets {
            for i in 0..per_thread {
                olds.push(c.peek(&r.word(i * 3 + k as u64).unwrap()).unwrap());
            }
        }
        olds.sort_unstable();
        assert_eq!(
            olds,
            (0..total).collect::<Vec<_>>(),
            "old values of n{k}'s counter"
        );
    }
}

/// A remote CAS spin lock over a remote word protects a plain read-modify-write done with a get
/// and a put: mutual exclusion through rcas, with rfence keeping the release after the update.
#[test]
fn rcas_lock_protects_a_get_put_increment() {
    let rounds = backend::runs(100, 40);
    let c = backend::cluster(2, Schedule::Threaded);
    let lock = c.alloc_word(N1).unwrap();
    let value = c.alloc_word(N1).unwrap();
    let threads = [N0, N0, N1];
    std::thread::scope(|sc| {
        for &node in &threads {
            let (c, lock, value) = (&c, &lock, &value);
            sc.spawn(move || {
                let ctx = c.context(node).unwrap();
                let old = c.alloc_word(node).unwrap();
                let v = c.alloc_word(node).unwrap();
                let zero = c.alloc_word(node).unwrap();
                for _ in 0..rounds {
                    loop {
                        ctx.rcas(lock, 0, 1, &old, D1).unwrap();
                        ctx.wait(D1).unwrap();
                        if ctx.load(&old).unwrap() == 0 {
                            break;
                        }
                        std::thread::yield_now();
                    }
                    ctx.get(&v, value, D1).unwrap();
                    ctx.wait(D1).unwrap();
                    let n = ctx.load(&v).unwrap();
                    ctx.store(&v, n + 1).unwrap();
                    ctx.put(value, &v, D1).unwrap();
                    ctx.rfence(N1).unwrap();
                    ctx.put(lock, &zero, D1).unwrap();
                    ctx.wait(D1).unwrap();
                }
            });
        }
    });
    c.quiesce().unwrap();
    assert_eq!(c.peek(&value).unwrap(), rounds * threads.len() as u64);
}
