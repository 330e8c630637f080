//! Soft NIC latency and throughput: `put`+`wait`, `get`+`wait`, `rfaa`+`wait` in the `Immediate`
//! and `Threaded` schedules, and batched single-thread put throughput.
//!
//! `cargo bench --bench rdmawait`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use loco::prelude::*;

const BATCH: u64 = 64;

fn schedules() -> [(&'static str, Schedule); 2] {
    [
        ("immediate", Schedule::Immediate),
        ("threaded", Schedule::Threaded),
    ]
}

/// A 2-node cluster, a context on n0, a word on n0 and a word on n1.
fn setup(schedule: Schedule) -> (Cluster, Ctx, Loc, Loc) {
    let cluster = Cluster::builder().nodes(2).soft(schedule).build().unwrap();
    let ctx = cluster.context(NodeId(0)).unwrap();
    let local = cluster.alloc_word(NodeId(0)).unwrap();
    let remote = cluster.alloc_word(NodeId(1)).unwrap();
    (cluster, ctx, local, remote)
}

fn latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("latency");
    g.throughput(Throughput::Elements(1));
    for (name, schedule) in schedules() {
        let (_cluster, ctx, local, remote) = setup(schedule);
        let d = WorkId::new(1);
        g.bench_function(BenchmarkId::new("put+wait", name), |b| {
            b.iter(|| {
                ctx.put(&remote, &local, d).unwrap();
                ctx.wait(d).unwrap();
            })
        });
        g.bench_function(BenchmarkId::new("get+wait", name), |b| {
            b.iter(|| {
                ctx.get(&local, &remote, d).unwrap();
                ctx.wait(d).unwrap();
            })
        });
        g.bench_function(BenchmarkId::new("rfaa+wait", name), |b| {
            b.iter(|| {
                ctx.rfaa(&remote, 1, &local, d).unwrap();
                ctx.wait(d).unwrap();
            })
        });
    }
    g.finish();
}

fn throughput(c: &mut Criterion) {
    let mut g = c.benchmark_group("throughput");
    g.throughput(Throughput::Elements(BATCH));
    for (name, schedule) in schedules() {
        let (_cluster, ctx, local, remote) = setup(schedule);
        let d = WorkId::new(1);
        g.bench_function(BenchmarkId::new("put x64 + wait", name), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    ctx.put(&remote, &local, d).unwrap();
                }
                ctx.wait(d).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = latency, throughput
}
criterion_main!(benches);
