//! Lock latency and throughput on the soft NIC (`Threaded`), 3 nodes: `WLock` with `gf` towards
//! the written node before the release, `SLock`, `NLock` on the written node, and, as a baseline
//! for comparison only, a plain remote-CAS spinlock (`rcas` loop on a word, release by `put`).
//!
//! Every critical section does one `put` of a word to node n2 (not waited for), so each lock must
//! publish it as it promises: `gf(n2)` for the weak lock, `gf(all)` for the strong one, the
//! release's `rfence(n2)` for the node lock on n2, the queue pair's order for the spinlock on n2.
//!
//! - `locks/uncontended/*`: one thread on n0 acquires and releases, over and over (latency).
//! - `locks/contended/*/T`: T threads spread over n0, n1, n2 do the same (throughput: elements
//!   are critical sections, over all threads).
//!
//! `cargo bench --bench locks` (about 4 minutes; `-- uncontended` for a part).

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use loco::locks::LockGuard;
use loco::prelude::*;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D: WorkId = WorkId::new(1);
const THREADS: [usize; 4] = [1, 2, 4, 8];

/// A remote-CAS spinlock on a word: the baseline. Acquire: `rcas(word, 0, 1)` until it returns 0;
/// release: `rcas(word, 1, 0)`, ordered after the critical section's puts towards the same node
/// by the queue pair (but not after those towards other nodes).
#[derive(Clone)]
struct SpinLock {
    word: Loc,
}

#[derive(Clone)]
enum Bench {
    WLockGf(WLock),
    SLock(SLock),
    NLock(NLock),
    Spin(SpinLock),
}

impl Bench {
    fn all(cluster: &Cluster, threads: usize) -> Vec<(&'static str, Bench)> {
        vec![
            (
                "wlock+gf",
                Bench::WLockGf(WLock::new(cluster, N1, threads).unwrap()),
            ),
            (
                "slock",
                Bench::SLock(SLock::new(cluster, N1, threads).unwrap()),
            ),
            ("nlock", Bench::NLock(NLock::new(cluster, N2).unwrap())),
            (
                "rcas-spinlock",
                Bench::Spin(SpinLock {
                    word: cluster.alloc_word(N2).unwrap(),
                }),
            ),
        ]
    }
}

/// A thread's words: `one` to send, `ret` for the spinlock's CASes, and the target.
struct Words {
    one: Loc,
    ret: Loc,
    target: Loc,
}

impl Words {
    fn new(ctx: &Ctx, target: Loc) -> Words {
        let c = ctx.cluster();
        let w = Words {
            one: c.alloc_word(ctx.node()).unwrap(),
            ret: c.alloc_word(ctx.node()).unwrap(),
            target,
        };
        ctx.store(&w.one, 1).unwrap();
        w
    }
}

/// One acquire, critical section, release.
fn cycle(b: &Bench, ctx: &Ctx, w: &Words) {
    match b {
        Bench::WLockGf(l) => {
            let g = l.acquire(ctx).unwrap();
            ctx.put(&w.target, &w.one, D).unwrap();
            ctx.gf([N2]).unwrap();
            LockGuard::release(g).unwrap();
        }
        Bench::SLock(l) => {
            let g = l.acquire(ctx).unwrap();
            ctx.put(&w.target, &w.one, D).unwrap();
            LockGuard::release(g).unwrap();
        }
        Bench::NLock(l) => {
            let g = l.acquire(ctx).unwrap();
            ctx.put(&w.target, &w.one, D).unwrap();
            LockGuard::release(g).unwrap();
        }
        Bench::Spin(s) => {
            loop {
                ctx.rcas(&s.word, 0, 1, &w.ret, D).unwrap();
                ctx.wait(D).unwrap();
                if ctx.load(&w.ret).unwrap() == 0 {
                    break;
                }
                thread::yield_now();
            }
            ctx.put(&w.target, &w.one, D).unwrap();
            // Released by a CAS, as `loco bench locks` does: a put release can be lost to a
            // failing CAS on rxe (docs/verbs-notes.md pitfall 9).
            ctx.rcas(&s.word, 1, 0, &w.ret, D).unwrap();
        }
    }
}

fn cluster() -> Cluster {
    Cluster::builder()
        .nodes(3)
        .soft(Schedule::Threaded)
        .build()
        .unwrap()
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("locks/uncontended");
    g.throughput(Throughput::Elements(1));
    let cluster = cluster();
    let target = cluster.alloc_word(N2).unwrap();
    let ctx = cluster.context(N0).unwrap();
    let words = Words::new(&ctx, target);
    for (name, b) in Bench::all(&cluster, 1) {
        g.bench_function(name, |bench| bench.iter(|| cycle(&b, &ctx, &words)));
    }
    g.finish();
}

/// T worker threads, each with its own context for the whole benchmark (a weak lock's thread
/// bound counts contexts), driven by commands: "do n cycles".
struct Pool {
    cmds: Vec<mpsc::Sender<u64>>,
    done: mpsc::Receiver<()>,
    workers: Vec<thread::JoinHandle<()>>,
}

impl Pool {
    fn start(cluster: &Cluster, b: &Bench, target: Loc, threads: usize) -> Pool {
        let (done_tx, done) = mpsc::channel();
        let mut cmds = Vec::new();
        let workers = (0..threads)
            .map(|i| {
                let (tx, rx) = mpsc::channel::<u64>();
                cmds.push(tx);
                let (cluster, b, done_tx) = (cluster.clone(), b.clone(), done_tx.clone());
                thread::spawn(move || {
                    let ctx = cluster.context(NodeId((i % 3) as u16)).unwrap();
                    let words = Words::new(&ctx, target);
                    while let Ok(n) = rx.recv() {
                        for _ in 0..n {
                            cycle(&b, &ctx, &words);
                        }
                        done_tx.send(()).unwrap();
                    }
                })
            })
            .collect();
        Pool {
            cmds,
            done,
            workers,
        }
    }

    /// Runs about `iters` cycles over all threads; returns the time scaled to exactly `iters`.
    fn run(&self, iters: u64) -> Duration {
        let t = self.cmds.len() as u64;
        let per = iters.div_ceil(t);
        let start = Instant::now();
        for c in &self.cmds {
            c.send(per).unwrap();
        }
        for _ in 0..t {
            self.done.recv().unwrap();
        }
        start.elapsed().mul_f64(iters as f64 / (per * t) as f64)
    }

    fn stop(self) {
        drop(self.cmds);
        for w in self.workers {
            w.join().unwrap();
        }
    }
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("locks/contended");
    g.throughput(Throughput::Elements(1));
    for threads in THREADS {
        let cluster = cluster();
        let target = cluster.alloc_word(N2).unwrap();
        for (name, b) in Bench::all(&cluster, threads) {
            let pool = Pool::start(&cluster, &b, target, threads);
            g.bench_with_input(BenchmarkId::new(name, threads), &threads, |bench, _| {
                bench.iter_custom(|iters| pool.run(iters))
            });
            pool.stop();
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = uncontended, contended
}
criterion_main!(benches);
