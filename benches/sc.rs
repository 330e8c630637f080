//! Latency of each SC operation and each ported-structure operation on the Threaded soft NIC,
//! uncontended and with 8 threads on the same object (the measured one plus 7 others doing the
//! same operation in a loop, spread over the nodes).
//!
//! `cargo bench --bench sc`
//!
//! Round trips per operation, uncontended (see `loco_sc`'s docs): `write_sc` 2, `read_sc`,
//! `cas_sc`, `faa_sc` 3; map `get`/`insert`/`cas` 3; queue `push` 3, `pop` 4.

#![allow(missing_docs)] // criterion_group! makes an undocumented function

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use loco::prelude::*;

const NODES: usize = 3;
/// Threads on the object in the contended runs, the measured one included.
const CONTENDED: usize = 8;
/// The object's node; the measured thread runs on n0.
const HOME: NodeId = NodeId(1);

fn cluster() -> Cluster {
    Cluster::builder()
        .nodes(NODES)
        .soft(Schedule::Threaded)
        .build()
        .unwrap()
}

/// Runs `op` in a loop on `CONTENDED - 1` background threads (each with a context on a node
/// round-robin) while `measure` runs; `threads` = 1 runs none.
fn with_background<T: Send + Sync>(
    cluster: &Cluster,
    threads: usize,
    object: &T,
    op: impl Fn(&Ctx, &T, u64) + Sync,
    measure: impl FnOnce(),
) {
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        for t in 1..threads {
            let (stop, op) = (stop.clone(), &op);
            s.spawn(move || {
                let ctx = cluster.context(NodeId((t % NODES) as u16)).unwrap();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    op(&ctx, object, i);
                    i += 1;
                }
            });
        }
        measure();
        stop.store(true, Ordering::Relaxed);
    });
}

fn label(threads: usize) -> String {
    if threads == 1 {
        "uncontended".into()
    } else {
        format!("{threads} threads")
    }
}

fn sc_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("sc");
    for threads in [1, CONTENDED] {
        let cluster = cluster();
        let x = ScLoc::new_on(&cluster, HOME, 0).unwrap();
        let ctx = cluster.context(NodeId(0)).unwrap();
        type Op = fn(&Ctx, &ScLoc, u64);
        let ops: [(&str, Op); 4] = [
            ("write_sc", |ctx, x, i| ctx.write_sc(x, i).unwrap()),
            ("read_sc", |ctx, x, _| {
                ctx.read_sc(x).unwrap();
            }),
            ("cas_sc", |ctx, x, i| {
                ctx.cas_sc(x, i, i + 1).unwrap();
            }),
            ("faa_sc", |ctx, x, _| {
                ctx.faa_sc(x, 1).unwrap();
            }),
        ];
        for (name, op) in ops {
            with_background(&cluster, threads, &x, op, || {
                g.bench_function(BenchmarkId::new(name, label(threads)), |b| {
                    let mut i = 0;
                    b.iter(|| {
                        op(&ctx, &x, i);
                        i += 1;
                    })
                });
            });
        }
    }
    g.finish();
}

fn hash_map(c: &mut Criterion) {
    let mut g = c.benchmark_group("hash map");
    const KEYS: u64 = 32;
    for threads in [1, CONTENDED] {
        let cluster = cluster();
        let mut init = FixedHashMap::with_buckets(128);
        for k in 0..KEYS {
            init.apply(loco::sc::MapOp::Insert(k, 0));
        }
        let map = PortedHashMap::new_on(&cluster, HOME, &init).unwrap();
        let ctx = cluster.context(NodeId(0)).unwrap();
        type Op = fn(&Ctx, &PortedHashMap, u64);
        let ops: [(&str, Op); 3] = [
            ("get", |ctx, m, i| {
                m.get(ctx, i % KEYS).unwrap();
            }),
            ("insert", |ctx, m, i| {
                m.insert(ctx, i % KEYS, i).unwrap();
            }),
            ("cas", |ctx, m, i| {
                m.cas(ctx, i % KEYS, i, i + 1).unwrap();
            }),
        ];
        for (name, op) in ops {
            with_background(&cluster, threads, &map, op, || {
                g.bench_function(BenchmarkId::new(name, label(threads)), |b| {
                    let mut i = 0;
                    b.iter(|| {
                        op(&ctx, &map, i);
                        i += 1;
                    })
                });
            });
        }
    }
    g.finish();
}

fn queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue");
    for threads in [1, CONTENDED] {
        let cluster = cluster();
        let q = PortedQueue::new_on(&cluster, HOME, &BoundedQueue::new(64)).unwrap();
        let ctx = cluster.context(NodeId(0)).unwrap();
        // Background threads push and pop in turn (a push may find the queue full: fine).
        let churn = |ctx: &Ctx, q: &PortedQueue, i: u64| {
            if i % 2 == 0 {
                let _ = q.push(ctx, i);
            } else {
                q.pop(ctx).unwrap();
            }
        };
        // Each iteration pushes and pops once; only the named operation is timed.
        for (name, time_push) in [("push", true), ("pop", false)] {
            with_background(&cluster, threads, &q, churn, || {
                g.bench_function(BenchmarkId::new(name, label(threads)), |b| {
                    b.iter_custom(|iters| {
                        let mut timed = Duration::ZERO;
                        for i in 0..iters {
                            let t = Instant::now();
                            let pushed = q.push(&ctx, i).is_ok();
                            if time_push {
                                timed += t.elapsed();
                            }
                            let t = Instant::now();
                            let popped = q.pop(&ctx).unwrap();
                            if !time_push {
                                timed += t.elapsed();
                            }
                            std::hint::black_box((pushed, popped));
                        }
                        timed
                    })
                });
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = sc_ops, hash_map, queue
}
criterion_main!(benches);
