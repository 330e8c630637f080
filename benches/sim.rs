//! Speed of the deterministic simulator (`loco::sim`): scheduling points per second of host time,
//! on one core (every simulated thread of a run is a coroutine on one OS thread).
//!
//! Elements are the run's scheduling points (each load, store, CAS, fence, post, poll, spin
//! pause, spawn and join of a simulated thread), counted by the simulator itself; the NIC's
//! steps taken meanwhile come on top, uncounted.
//!
//! - `sim/long/T`: one run of T threads over 2 nodes, 80 000 context operations in all (stores,
//!   loads, and every eighth a put + wait): the cost of a switch and of the NIC's model.
//! - `sim/nlock/T`: one run of T threads over 4 nodes taking an `NLock` 40 times each with a put
//!   in the critical section: a contended lock, as `loco bench locks --backend sim` runs it.
//! - `sim/nlock_timed/TxN`: the same over N nodes, 10 sections each, timed by the `connectx5`
//!   profile (16 threads over 4 nodes, 64 over 16): the largest configurations of
//!   `loco bench locks --backend sim`, where every thread has a request in flight.
//! - `sim/check`: 100 short runs of 3 threads: what a `sim::check` of a small program costs,
//!   the set-up of each run's cluster included.
//!
//! `cargo bench --bench sim` (about a minute).

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use loco::locks::LockGuard;
use loco::prelude::*;
use loco::sim::{self, Config};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// T threads on n0 storing, loading and putting to n1.
fn long(threads: usize) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync + 'static {
    move |cluster: &Cluster| {
        let mut hs = Vec::new();
        for _ in 0..threads {
            let w = cluster.alloc_word(NodeId(0))?;
            let r = cluster.alloc_word(NodeId(1))?;
            hs.push(sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
                for i in 0..(40_000 / threads as u64) {
                    ctx.store(&w, i)?;
                    if i % 8 == 0 {
                        ctx.put(&r, &w, WorkId::new(1))?;
                        ctx.wait(WorkId::new(1))?;
                    }
                    ctx.load(&w)?;
                }
                Ok::<(), loco::rdmawait::Error>(())
            }));
        }
        for h in hs {
            h.join()?;
        }
        Ok(())
    }
}

/// T threads over 4 nodes, 40 NLock critical sections each, a put to n3 inside.
fn nlock(threads: usize) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync + 'static {
    nlock_over(threads, 4, 40)
}

/// T threads over `nodes` nodes, `sections` NLock critical sections each, a put to the last
/// node inside.
fn nlock_over(
    threads: usize,
    nodes: usize,
    sections: u64,
) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync + 'static {
    move |cluster: &Cluster| {
        let last = NodeId(nodes as u16 - 1);
        let lock = NLock::new(cluster, last)?;
        let data = cluster.alloc_word(last)?;
        let mut hs = Vec::new();
        for t in 0..threads {
            let node = NodeId((t % nodes) as u16);
            let src = cluster.alloc_word(node)?;
            let lock = lock.clone();
            hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                for i in 0..sections {
                    let g = lock.acquire(ctx)?;
                    ctx.store(&src, i)?;
                    ctx.put(&data, &src, WorkId::new(1))?;
                    LockGuard::release(g)?;
                }
                Ok::<(), BoxError>(())
            }));
        }
        for h in hs {
            h.join()?;
        }
        Ok(())
    }
}

/// Three threads on three nodes, a few puts, gets and waits each.
fn small(cluster: &Cluster) -> Result<(), BoxError> {
    let shared = cluster.alloc_words(NodeId(2), 4)?;
    let mut hs = Vec::new();
    for t in 0..3u16 {
        let mine = cluster.alloc_words(NodeId(t), 2)?;
        hs.push(sim::spawn(cluster, NodeId(t), move |ctx: &Ctx| {
            let (a, b) = (mine.word(0)?, mine.word(1)?);
            for i in 0..4 {
                ctx.store(&a, i)?;
                ctx.put(&shared.word(i % 4)?, &a, WorkId::new(1))?;
                ctx.get(&b, &shared.word((i + 1) % 4)?, WorkId::new(1))?;
                ctx.wait(WorkId::new(1))?;
            }
            Ok::<(), loco::rdmawait::Error>(())
        }));
    }
    for h in hs {
        h.join()?;
    }
    Ok(())
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    g.sample_size(10);
    for threads in [1, 2, 8] {
        let config = || Config::new(2).max_steps(u64::MAX);
        // Deterministic: the same seed, the same number of steps every time.
        let steps = sim::replay(config(), 1, long(threads)).unwrap().steps;
        g.throughput(Throughput::Elements(steps));
        g.bench_with_input(BenchmarkId::new("long", threads), &threads, |b, &t| {
            b.iter(|| sim::replay(config(), 1, long(t)).unwrap())
        });
    }
    for threads in [2, 8] {
        let config = || Config::new(4).max_steps(u64::MAX);
        let steps = sim::replay(config(), 1, nlock(threads)).unwrap().steps;
        g.throughput(Throughput::Elements(steps));
        g.bench_with_input(BenchmarkId::new("nlock", threads), &threads, |b, &t| {
            b.iter(|| sim::replay(config(), 1, nlock(t)).unwrap())
        });
    }
    // Timed (`connectx5`), as `loco bench locks --backend sim` runs its largest
    // configurations: every thread has a request in flight most of the time.
    for (threads, nodes) in [(16, 4), (64, 16)] {
        let config = move || {
            Config::new(nodes)
                .max_steps(u64::MAX)
                .profile(sim::Profile::connectx5())
        };
        let steps = sim::replay(config(), 1, nlock_over(threads, nodes, 10))
            .unwrap()
            .steps;
        g.throughput(Throughput::Elements(steps));
        let id = BenchmarkId::new("nlock_timed", format!("{threads}x{nodes}"));
        g.bench_function(id, |b| {
            b.iter(|| sim::replay(config(), 1, nlock_over(threads, nodes, 10)).unwrap())
        });
    }
    let config = || Config::new(3).runs(100);
    let steps = sim::check(config(), small).unwrap().steps;
    g.throughput(Throughput::Elements(steps));
    g.bench_function("check", |b| b.iter(|| sim::check(config(), small).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
