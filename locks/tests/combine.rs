//! `Lock::combine`: the threads of a node hand their critical sections to one combiner.
//!
//! The sections fetch-and-increment a counter on node 2 (`get`, wait, add on the CPU, `put`
//! from the calling thread's own word, not waited for) and return the value they read. With
//! several threads per node, every lock kind (the weak lock with `gf` inside the section) must
//! hand out each value exactly once, 0 to N-1 (a linearizable counter), under the soft NIC's
//! schedules and under the simulator's seeded ones; a section that wrongly overlapped another,
//! missed an earlier section's put, or whose put read its source after its thread reused it,
//! shows as a repeated or missing value. Also: a host-side occupancy count (exclusion), the
//! errors (`AlreadyHeld`, `Timeout` with the section never run), and a panic carried to its
//! caller.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, SLock, WLock};
use loco_rdmawait::sim::{self, Config, Strategy};
use loco_rdmawait::testing::{self, soft_schedules};
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WorkId};
use loco_sv::GlobalFence;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const K: NodeId = NodeId(2);
const D: WorkId = WorkId::new(7);

/// Which lock, made how.
#[derive(Clone, Copy, Debug)]
enum Kind {
    N,
    W,
    S,
}

#[derive(Clone)]
enum AnyLock {
    N(NLock),
    W(WLock),
    S(SLock),
}

fn make(kind: Kind, c: &Cluster, threads: usize) -> loco_locks::Result<AnyLock> {
    Ok(match kind {
        Kind::N => AnyLock::N(NLock::new(c, K)?),
        Kind::W => AnyLock::W(WLock::new(c, NodeId(1), threads)?),
        Kind::S => AnyLock::S(SLock::new(c, NodeId(0), threads)?),
    })
}

/// The section: reads the counter into `tmp`, writes it back plus one from `tmp` (the put is
/// not waited for: the combiner's `wait_all` must cover it), returns the value read. The weak
/// lock's section fences the counter's node, as its guarantee asks.
fn section(
    inside: Arc<AtomicUsize>,
    counter: Loc,
    tmp: Loc,
    fence: bool,
) -> impl FnOnce(&Ctx) -> Result<u64, String> + Send + 'static {
    move |ctx: &Ctx| {
        let before = inside.fetch_add(1, SeqCst);
        if before != 0 {
            return Err(format!(
                "mutual exclusion broken: {before} other section(s) inside"
            ));
        }
        let r = (|| -> Result<u64, BoxError> {
            ctx.get(&tmp, &counter, D)?;
            ctx.wait(D)?;
            let v = ctx.load(&tmp)?;
            ctx.store(&tmp, v + 1)?;
            ctx.put(&counter, &tmp, D)?;
            if fence {
                ctx.gf([K])?;
            }
            Ok(v)
        })()
        .map_err(|e| e.to_string());
        inside.fetch_sub(1, SeqCst);
        r
    }
}

fn combine(
    l: &AnyLock,
    ctx: &Ctx,
    cs: impl FnOnce(&Ctx) -> Result<u64, String> + Send + 'static,
) -> Result<u64, BoxError> {
    Ok(match l {
        AnyLock::N(l) => l.combine(ctx, cs)??,
        AnyLock::W(l) => l.combine(ctx, cs)??,
        AnyLock::S(l) => l.combine(ctx, cs)??,
    })
}

/// What the threads of a run share: `rounds` sections each on `lock`, incrementing `counter`,
/// the values read collected in `seen` (every value must come out once: `check_seen`).
#[derive(Clone)]
struct Run {
    lock: AnyLock,
    inside: Arc<AtomicUsize>,
    counter: Loc,
    rounds: usize,
    /// The weak lock's sections fence what they wrote.
    fence: bool,
    seen: Arc<Mutex<Vec<u64>>>,
}

impl Run {
    fn new(kind: Kind, lock: AnyLock, counter: Loc, rounds: usize) -> Self {
        Run {
            lock,
            inside: Arc::new(AtomicUsize::new(0)),
            counter,
            rounds,
            fence: matches!(kind, Kind::W),
            seen: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A thread's work, with its own word `tmp`.
    fn worker(&self, tmp: Loc) -> impl FnOnce(&Ctx) -> Result<(), BoxError> + Send + 'static {
        let run = self.clone();
        move |ctx: &Ctx| {
            for _ in 0..run.rounds {
                let cs = section(run.inside.clone(), run.counter, tmp, run.fence);
                let v = combine(&run.lock, ctx, cs)?;
                run.seen.lock().unwrap().push(v);
                // The caller reuses its word at once: the section's put must have read it.
                ctx.store(&tmp, u64::MAX)?;
            }
            Ok(())
        }
    }
}

fn check_seen(seen: &Mutex<Vec<u64>>, n: usize) -> Result<(), String> {
    let mut v = seen.lock().unwrap().clone();
    v.sort_unstable();
    if v != (0..n as u64).collect::<Vec<_>>() {
        return Err(format!(
            "the counter's values were not handed out once each: {v:?}"
        ));
    }
    Ok(())
}

#[test]
fn each_value_once_on_the_soft_nic() {
    const THREADS: usize = 7;
    const ROUNDS: usize = 60;
    for kind in [Kind::N, Kind::W, Kind::S] {
        for (i, schedule) in soft_schedules(3).into_iter().enumerate() {
            let c = testing::cluster(3, 1 << 14, schedule).unwrap();
            let counter = c.alloc_word(K).unwrap();
            let run = Run::new(kind, make(kind, &c, THREADS).unwrap(), counter, ROUNDS);
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let node = NodeId((t % 3) as u16);
                    let w = run.worker(c.alloc_word(node).unwrap());
                    let c = c.clone();
                    std::thread::spawn(move || -> Result<(), String> {
                        let ctx = c.context(node).map_err(|e| e.to_string())?;
                        w(&ctx).map_err(|e| e.to_string())
                    })
                })
                .collect();
            for h in hs {
                h.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{kind:?}, schedule {i}: {e}"));
            }
            check_seen(&run.seen, THREADS * ROUNDS)
                .unwrap_or_else(|e| panic!("{kind:?}, schedule {i}: {e}"));
            c.quiesce().unwrap();
            assert_eq!(c.peek(&counter).unwrap(), (THREADS * ROUNDS) as u64);
        }
    }
}

/// A simulated run: 6 threads (two per node), 3 sections each.
fn sim_run(kind: Kind) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync {
    move |cluster: &Cluster| {
        const THREADS: usize = 6;
        const ROUNDS: usize = 3;
        let run = Run::new(
            kind,
            make(kind, cluster, THREADS)?,
            cluster.alloc_word(K)?,
            ROUNDS,
        );
        let mut hs = Vec::new();
        for t in 0..THREADS {
            let node = NodeId((t % 3) as u16);
            hs.push(sim::spawn(
                cluster,
                node,
                run.worker(cluster.alloc_word(node)?),
            ));
        }
        for h in hs {
            h.join()?;
        }
        check_seen(&run.seen, THREADS * ROUNDS)?;
        Ok(())
    }
}

#[test]
fn each_value_once_under_simulation() {
    for kind in [Kind::N, Kind::W, Kind::S] {
        for strategy in [Strategy::Random, Strategy::Pct { depth: 3 }] {
            let r = sim::check(
                Config::new(3)
                    .runs(300)
                    .strategy(strategy)
                    .timeout(Duration::from_millis(20)),
                sim_run(kind),
            )
            .unwrap_or_else(|f| panic!("{kind:?} {strategy:?}:\n{}", f.report()));
            assert_eq!(r.runs, 300);
        }
        let timed = sim::Profile {
            jitter: 0.5,
            ..sim::Profile::connectx5()
        };
        let r = sim::check(Config::new(3).runs(30).profile(timed), sim_run(kind))
            .unwrap_or_else(|f| panic!("{kind:?} timed:\n{}", f.report()));
        assert_eq!(r.runs, 30);
        // Slow wake-ups: waiting threads sleep, and combiners wait for them to come back.
        let slow = sim::Profile {
            jitter: 0.5,
            ..sim::Profile::rxe()
        };
        let r = sim::check(Config::new(3).runs(30).profile(slow), sim_run(kind))
            .unwrap_or_else(|f| panic!("{kind:?} rxe:\n{}", f.report()));
        assert_eq!(r.runs, 30);
    }
}

/// Combining and plain acquires of the same lock exclude each other.
#[test]
fn combined_and_plain_sections_exclude_each_other() {
    let r = sim::check(
        Config::new(3).runs(300).timeout(Duration::from_millis(20)),
        |cluster: &Cluster| -> Result<(), BoxError> {
            let lock = NLock::new(cluster, K)?;
            let run = Run::new(Kind::N, AnyLock::N(lock.clone()), cluster.alloc_word(K)?, 2);
            let (inside, seen, counter) = (run.inside.clone(), run.seen.clone(), run.counter);
            let mut hs = Vec::new();
            for t in 0..4 {
                let node = NodeId((t % 2) as u16);
                hs.push(sim::spawn(
                    cluster,
                    node,
                    run.worker(cluster.alloc_word(node)?),
                ));
            }
            // A thread taking the lock the ordinary way meanwhile.
            let (l, inside2, seen2) = (lock.clone(), inside.clone(), seen.clone());
            let tmp = cluster.alloc_word(NodeId(1))?;
            hs.push(sim::spawn(cluster, NodeId(1), move |ctx: &Ctx| {
                for _ in 0..2 {
                    let g = l.acquire(ctx)?;
                    let v = section(inside2.clone(), counter, tmp, false)(ctx)?;
                    LockGuard::release(g)?;
                    seen2.lock().unwrap().push(v);
                }
                Ok::<(), BoxError>(())
            }));
            for h in hs {
                h.join()?;
            }
            check_seen(&seen, 10)?;
            Ok(())
        },
    )
    .unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(r.runs, 300);
}

/// A holder of the lock (on n1) holds it while a section is combined, either by the holder
/// itself (`by_holder`: refused, `AlreadyHeld`) or by a thread of n0 (it times out): either way
/// the section never runs, and once the holder releases, the lock and the node's queue work.
fn refused_section_never_runs(by_holder: bool, expected: fn(&Error) -> bool) {
    let c = testing::short_cluster(2, 1 << 12, loco_rdmawait::Schedule::Immediate);
    let l = NLock::new(&c, NodeId(1)).unwrap();
    let holder = c.context(NodeId(1)).unwrap();
    let g = l.acquire(&holder).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = ran.clone();
    let section = move |_: &Ctx| r2.store(true, SeqCst);
    let r = if by_holder {
        l.combine(&holder, section)
    } else {
        let (c2, l2) = (c.clone(), l.clone());
        std::thread::spawn(move || l2.combine(&c2.context(NodeId(0)).unwrap(), section))
            .join()
            .unwrap()
    };
    assert!(r.as_ref().is_err_and(expected), "{r:?}");
    LockGuard::release(g).unwrap();
    assert!(!ran.load(SeqCst), "a refused section ran");
    let ctx = c.context(NodeId(0)).unwrap();
    assert_eq!(l.combine(&ctx, |_| 5).unwrap(), 5);
    assert_eq!(l.combine(&holder, |_| 6).unwrap(), 6);
}

#[test]
fn a_holder_cannot_combine() {
    refused_section_never_runs(true, |e| matches!(e, Error::AlreadyHeld { .. }));
}

/// A section that cannot get the lock in time times out and never runs.
#[test]
fn a_section_not_run_in_time_times_out_and_never_runs() {
    refused_section_never_runs(false, |e| matches!(e, Error::Timeout { .. }));
}

/// A panicking section: its caller panics with the payload, the lock is poisoned for its next
/// holder, and the node's other sections go on.
#[test]
fn a_panicking_section_panics_in_its_caller() {
    let c = testing::short_cluster(2, 1 << 12, loco_rdmawait::Schedule::Threaded);
    let l = NLock::new(&c, NodeId(1)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = l.combine(&ctx, |_| -> u64 { panic!("boom in a section") });
    }))
    .unwrap_err();
    assert_eq!(p.downcast_ref::<&str>(), Some(&"boom in a section"));
    let g = l.acquire(&ctx).unwrap();
    assert!(LockGuard::was_poisoned(&g), "the next holder is told");
    LockGuard::release(g).unwrap();
    assert_eq!(l.combine(&ctx, |_| 2).unwrap(), 2);
}

/// Many threads of one node: each section runs once, on some thread of the node.
#[test]
fn many_threads_of_one_node() {
    fn run<R: RawLock + 'static>(l: Lock<R>, c: &Cluster) {
        let count = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..12)
            .map(|_| {
                let (c, l, count) = (c.clone(), l.clone(), count.clone());
                std::thread::spawn(move || {
                    let ctx = c.context(NodeId(0)).unwrap();
                    for _ in 0..50 {
                        let count = count.clone();
                        l.combine(&ctx, move |ctx| {
                            assert_eq!(ctx.node(), NodeId(0));
                            count.fetch_add(1, SeqCst)
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(count.load(SeqCst), 600);
    }
    let c = testing::short_cluster(2, 1 << 14, loco_rdmawait::Schedule::Threaded);
    run(NLock::new(&c, NodeId(1)).unwrap(), &c);
    run(WLock::new(&c, NodeId(1), 12).unwrap(), &c);
}

/// A node killed while its threads combine (the lock's home, or their own node): every thread
/// ends with an error naming a dead node (or its section's `Combined` failure), none hangs and
/// none panics; sections that were done stay done.
#[test]
fn a_killed_node_ends_every_combining_thread_with_an_error() {
    for victim in [NodeId(1), NodeId(0)] {
        let c = testing::short_cluster(2, 1 << 14, loco_rdmawait::Schedule::Threaded);
        let l = NLock::new(&c, NodeId(1)).unwrap();
        let counter = c.alloc_word(NodeId(1)).unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (c, l, started) = (c.clone(), l.clone(), started.clone());
                std::thread::spawn(move || -> Result<(), Error> {
                    let ctx = c.context(NodeId(0)).map_err(Error::from)?;
                    let tmp = c.alloc_word(NodeId(0)).map_err(Error::from)?;
                    loop {
                        started.fetch_add(1, SeqCst);
                        l.combine(&ctx, move |ctx| -> Result<(), loco_rdmawait::Error> {
                            ctx.get(&tmp, &counter, D)?;
                            ctx.wait(D)?;
                            ctx.store(&tmp, ctx.load(&tmp)? + 1)?;
                            ctx.put(&counter, &tmp, D)
                        })?
                        .map_err(Error::from)?;
                    }
                })
            })
            .collect();
        while started.load(SeqCst) < 40 {
            std::thread::yield_now();
        }
        c.kill(victim).unwrap();
        for h in hs {
            let e = h.join().expect("no panic").unwrap_err();
            let dead = matches!(&e, Error::Combined { .. })
                || matches!(
                    loco_rdmawait::RdmaCause::rdma(&e),
                    Some(loco_rdmawait::Error::PeerDead { .. })
                );
            assert!(dead, "victim {victim}: {e:?}");
        }
    }
}

/// Where waking a thread is slow (the simulator's `rxe` profile, a small VM), a node's waiting
/// threads sleep and are woken at the end of their batch; the combiner waits up to twice the
/// last wake-up for them to come back before it releases, so that a node's sections share
/// holds instead of each batch of one or two paying a network acquire and release. Counted in
/// network operations per section (deterministic: a seeded simulated run), 4 threads over 3
/// nodes, two of them on one node, each section a put: 6.94 with the wait, 8.04 without it (as
/// `loco bench locks --backend sim --profile rxe --profile-scale 0.22 --nodes 3 --threads 4
/// --lock nlock-combining` counts them). On the VM's rxe0 the same change took that
/// configuration from 2237-2471 to 8386-8511 sections per second (docs/performance.md §5).
#[test]
fn a_combiner_waits_for_sleeping_threads_to_come_back() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 1000;
    let posts = Arc::new(AtomicUsize::new(0));
    let p = posts.clone();
    sim::replay(
        Config::new(3).profile(sim::Profile::rxe().scaled(0.22)),
        1,
        move |cluster: &Cluster| -> Result<(), BoxError> {
            let lock = NLock::new(cluster, NodeId(1))?;
            let data = cluster.alloc_word(NodeId(1))?;
            let mut hs = Vec::new();
            for t in 0..THREADS {
                let node = NodeId((t % 3) as u16);
                let one = cluster.alloc_word(node)?;
                let (lock, p) = (lock.clone(), p.clone());
                hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                    ctx.store(&one, 1)?;
                    for _ in 0..ROUNDS {
                        lock.combine(ctx, move |ctx| ctx.put(&data, &one, D))??;
                    }
                    p.fetch_add(ctx.posted() as usize, SeqCst);
                    Ok::<(), BoxError>(())
                }));
            }
            for h in hs {
                h.join()?;
            }
            Ok(())
        },
    )
    .unwrap_or_else(|f| panic!("{}", f.report()));
    let per = posts.load(SeqCst) as f64 / (THREADS * ROUNDS) as f64;
    assert!(per < 7.5, "network operations per section: {per:.2}");
}
