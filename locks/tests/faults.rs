//! Locks under faults, on the soft NIC (Threaded and Chaos): timeouts that honour their
//! deadline, abandoned tickets that later tickets pass, a dead holder skipped (poisoned), a guard
//! dropped during a panic (poisoned), shutdown freeing waiters, and contexts that come and go.
//!
//! No timed assertions: every bound is generous (results come through channels with
//! `recv_timeout`), and measured times are logged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, Result, SLock, WLock};
use loco_rdmawait::{Cluster, NodeId, Schedule};

/// Generous bound on anything the tests wait for.
const BOUND: Duration = Duration::from_secs(60);

fn cluster(schedule: Schedule, timeout: Duration) -> Cluster {
    Cluster::builder()
        .nodes(3)
        .memory_per_node(1 << 14)
        .soft(schedule)
        .timeout(timeout)
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn schedules() -> Vec<Schedule> {
    let mut s = vec![Schedule::Threaded];
    s.extend((1..=8).map(|seed| Schedule::Chaos { seed }));
    s
}

/// The three kinds, behind one object-safe face.
trait AnyLock: Send + Sync {
    fn boxed(&self) -> Box<dyn AnyLock>;
    fn name(&self) -> &'static str;
    /// Acquire (FIFO, for at most `t`), run `cs` inside, release; returns (ticket, poisoned).
    fn with(&self, ctx: &loco_rdmawait::Ctx, t: Duration, cs: &dyn Fn()) -> Result<(u64, bool)>;
    fn try_for(&self, ctx: &loco_rdmawait::Ctx, t: Duration) -> Result<u64>;
    fn hold_forever(&self, ctx: &loco_rdmawait::Ctx) -> Result<u64>;
    fn release(&self, ctx: &loco_rdmawait::Ctx) -> Result<()>;
    fn set_cohort(&self, max: u32);
}

impl<R: RawLock + 'static> AnyLock for Lock<R> {
    fn boxed(&self) -> Box<dyn AnyLock> {
        Box::new(self.clone())
    }
    fn name(&self) -> &'static str {
        self.raw().name()
    }
    fn with(&self, ctx: &loco_rdmawait::Ctx, t: Duration, cs: &dyn Fn()) -> Result<(u64, bool)> {
        let g = self.acquire_timeout(ctx, t)?;
        cs();
        let r = (LockGuard::ticket(&g), LockGuard::was_poisoned(&g));
        LockGuard::release(g)?;
        Ok(r)
    }
    fn try_for(&self, ctx: &loco_rdmawait::Ctx, t: Duration) -> Result<u64> {
        let g = self.try_acquire_for(ctx, t)?;
        let t = LockGuard::ticket(&g);
        LockGuard::release(g)?;
        Ok(t)
    }
    fn hold_forever(&self, ctx: &loco_rdmawait::Ctx) -> Result<u64> {
        let g = self.acquire(ctx)?;
        let t = LockGuard::ticket(&g);
        std::mem::forget(g);
        Ok(t)
    }
    fn release(&self, ctx: &loco_rdmawait::Ctx) -> Result<()> {
        self.raw().release(ctx)
    }
    fn set_cohort(&self, max: u32) {
        Lock::set_cohort(self, max)
    }
}

fn each(c: &Cluster, threads: usize) -> Result<Vec<Box<dyn AnyLock>>> {
    Ok(vec![
        Box::new(NLock::new(c, NodeId(2))?),
        Box::new(WLock::new(c, NodeId(1), threads)?),
        Box::new(SLock::new(c, NodeId(0), threads)?),
    ])
}

/// Runs `f` on its own thread and waits for it for at most [`BOUND`].
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|e| panic!("{what}: no answer within {BOUND:?} ({e})"))
}

/// A timed acquire of a held lock gives up near its deadline, not after the cluster's timeout:
/// `try_acquire_for(1 ms)` and `acquire_timeout(1 ms)` on a cluster whose timeout is 60 s.
#[test]
fn timed_acquires_honour_their_deadline() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 3 }] {
        let c = cluster(s, BOUND);
        for l in each(&c, 3)? {
            let holder = c.context(NodeId(0))?;
            l.hold_forever(&holder)?;
            let (l2, c2) = (l.boxed(), c.clone());
            let (a, b) = bounded("timed acquires", move || -> Result<(Duration, Duration)> {
                let ctx = c2.context(NodeId(1))?;
                let start = Instant::now();
                let e = l2.try_for(&ctx, Duration::from_millis(1));
                assert!(matches!(e, Err(Error::Timeout { .. })), "{e:?}");
                let a = start.elapsed();
                let start = Instant::now();
                let e = l2.with(&ctx, Duration::from_millis(1), &|| ());
                assert!(matches!(e, Err(Error::Timeout { .. })), "{e:?}");
                Ok((a, start.elapsed()))
            })?;
            eprintln!(
                "{} {s:?}: try_acquire_for(1ms) took {a:?}, acquire_timeout(1ms) {b:?}",
                l.name()
            );
            // Far below the cluster's timeout (60 s): the internal waits used the time left.
            assert!(a < BOUND / 4 && b < BOUND / 4);
            l.release(&holder)?;
            // The abandoned ticket blocks nobody.
            let (l3, c3) = (l.boxed(), c.clone());
            bounded("acquire after abandon", move || {
                let ctx = c3.context(NodeId(2))?;
                l3.with(&ctx, BOUND, &|| ()).map(|_| ())
            })?;
        }
    }
    Ok(())
}

/// A blocking acquire gives up with `Timeout` after the cluster's timeout (here 200 ms).
#[test]
fn acquire_gives_up_after_the_cluster_timeout() -> Result<()> {
    let c = cluster(Schedule::Threaded, Duration::from_millis(200));
    for l in each(&c, 3)? {
        let holder = c.context(NodeId(0))?;
        l.hold_forever(&holder)?;
        let (l2, c2) = (l.boxed(), c.clone());
        let took = bounded("acquire", move || -> Result<Duration> {
            let ctx = c2.context(NodeId(1))?;
            let start = Instant::now();
            let e = l2.hold_forever(&ctx);
            assert!(matches!(e, Err(Error::Timeout { .. })), "{e:?}");
            Ok(start.elapsed())
        })?;
        eprintln!(
            "{}: acquire gave up after {took:?} (cluster timeout 200 ms)",
            l.name()
        );
        l.release(&holder)?;
    }
    Ok(())
}

/// Threads on every node take the lock with short random timeouts, so that many tickets are
/// abandoned, some exactly as the lock reaches them; mutual exclusion holds (an in-section
/// counter never exceeds 1), every thread finishes, and a final blocking acquire succeeds.
fn abandon_storm(s: Schedule) -> Result<()> {
    let c = cluster(s, BOUND);
    for l in each(&c, 4)? {
        let inside = Arc::new(AtomicUsize::new(0));
        let entered = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..4u64)
            .map(|i| {
                let (l, c, inside, entered) =
                    (l.boxed(), c.clone(), inside.clone(), entered.clone());
                move || -> Result<usize> {
                    let ctx = c.context(NodeId((i % 3) as u16))?;
                    let mut timeouts = 0;
                    for k in 0..12u64 {
                        let t = Duration::from_micros(50 + (i * 131 + k * 977) % 3000);
                        match l.with(&ctx, t, &|| {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                            entered.fetch_add(1, Ordering::SeqCst);
                            thread::yield_now();
                            inside.fetch_sub(1, Ordering::SeqCst);
                        }) {
                            Ok(_) => {}
                            Err(Error::Timeout { .. }) => timeouts += 1,
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(timeouts)
                }
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        for w in workers {
            let tx = tx.clone();
            thread::spawn(move || {
                let _ = tx.send(w());
            });
        }
        let mut timeouts = 0;
        for _ in 0..4 {
            timeouts += rx.recv_timeout(BOUND).expect("a worker hung")?;
        }
        let (l2, c2) = (l.boxed(), c.clone());
        let (t, _) = bounded("final acquire", move || {
            let ctx = c2.context(NodeId(0))?;
            l2.with(&ctx, BOUND, &|| ())
        })?;
        eprintln!(
            "{} {s:?}: {} entries, {timeouts} timeouts, final ticket {t}",
            l.name(),
            entered.load(Ordering::SeqCst)
        );
    }
    Ok(())
}

#[test]
fn abandoned_tickets_are_passed_threaded() -> Result<()> {
    abandon_storm(Schedule::Threaded)
}

#[test]
fn abandoned_tickets_are_passed_chaos() -> Result<()> {
    for seed in 1..=10 {
        abandon_storm(Schedule::Chaos { seed })?;
    }
    Ok(())
}

/// The deterministic case: a waiter gives its ticket up while the lock is held; the next
/// ticket's holder enters as soon as the holder releases, with the ticket after it.
#[test]
fn an_abandoned_ticket_is_skipped() -> Result<()> {
    for s in schedules() {
        let c = cluster(s, BOUND);
        for l in each(&c, 3)? {
            let holder = c.context(NodeId(0))?;
            let t0 = l.hold_forever(&holder)?;
            let (l2, c2) = (l.boxed(), c.clone());
            bounded("give up", move || {
                let ctx = c2.context(NodeId(1))?;
                let e = l2.with(&ctx, Duration::from_millis(20), &|| ());
                assert!(matches!(e, Err(Error::Timeout { .. })), "{e:?}");
                Ok::<_, Error>(())
            })?;
            let (l3, c3) = (l.boxed(), c.clone());
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                let r = c3
                    .context(NodeId(2))
                    .map_err(Error::from)
                    .and_then(|ctx| l3.with(&ctx, BOUND, &|| ()));
                let _ = tx.send(r);
            });
            thread::sleep(Duration::from_millis(5));
            l.release(&holder)?;
            let (t2, poisoned) = rx
                .recv_timeout(BOUND)
                .expect("the next ticket never entered")?;
            assert_eq!(
                t2,
                t0 + 2,
                "{} {s:?}: ticket {} was abandoned",
                l.name(),
                t0 + 1
            );
            assert!(!poisoned);
        }
    }
    Ok(())
}

/// The three kinds, with their words on nodes the fault tests keep alive (n1 is the one killed).
fn each_off_n1(c: &Cluster, threads: usize) -> Result<Vec<Box<dyn AnyLock>>> {
    Ok(vec![
        Box::new(NLock::new(c, NodeId(2))?),
        Box::new(WLock::new(c, NodeId(2), threads)?),
        Box::new(SLock::new(c, NodeId(0), threads)?),
    ])
}

/// A holder on n1 forgets its guard and its node dies: a waiter on n0 passes the dead holder's
/// ticket and enters, told that the critical section before did not finish; after that the lock
/// is clean again. For every kind.
#[test]
fn a_dead_holder_is_skipped_and_reported() -> Result<()> {
    for (s, landed) in [
        (Schedule::Threaded, true),
        (Schedule::Chaos { seed: 7 }, true),
        (Schedule::Threaded, false),
        (Schedule::Chaos { seed: 7 }, false),
        (Schedule::Chaos { seed: 8 }, false),
    ] {
        for k in 0..3 {
            // A fresh cluster per kind: n1 dies in each.
            let c = cluster(s, BOUND);
            let l = each_off_n1(&c, 3)?.swap_remove(k);
            let name = l.name();
            let (l1, c1) = (l.boxed(), c.clone());
            let t = bounded("holder", move || -> Result<u64> {
                let ctx = c1.context(NodeId(1))?;
                let t = l1.hold_forever(&ctx)?;
                // Dies inside the critical section, after its hold announcement landed or
                // (`!landed`) maybe before: then its slot still reads its claim, and the
                // ticket is skipped as claimed by no live thread.
                if landed {
                    c1.quiesce()?;
                }
                Ok(t)
            })?;
            c.kill(NodeId(1))?;
            let (l0, c0) = (l.boxed(), c.clone());
            let start = Instant::now();
            let (t2, poisoned, t3, clean) = bounded("waiter", move || -> Result<_> {
                let ctx = c0.context(NodeId(0))?;
                let r = l0.with(&ctx, BOUND, &|| {})?;
                let r2 = l0.with(&ctx, BOUND, &|| {})?;
                Ok((r.0, r.1, r2.0, r2.1))
            })?;
            eprintln!(
                "{s:?} {name} (announcement landed: {landed}): dead holder skipped in {:?}",
                start.elapsed()
            );
            assert_eq!(t2, t + 1, "{s:?} {name}");
            assert!(poisoned, "{s:?} {name}: the next holder is told");
            assert_eq!(t3, t + 2, "{s:?} {name}");
            assert!(!clean, "{s:?} {name}: a normal release clears the poison");
        }
    }
    Ok(())
}

/// A live holder that keeps the lock far longer than a waiter's stall threshold (4 ms) is
/// never skipped: its slot names its ticket, so waiters wait for its release, and the next
/// holder is not told of any poisoning. For every kind, with waiters on both other nodes.
#[test]
fn a_slow_live_holder_is_never_skipped() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 3 }] {
        let c = cluster(s, BOUND);
        for l in each(&c, 3)? {
            let name = l.name();
            let released = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = mpsc::channel();
            let (l1, c1, r1) = (l.boxed(), c.clone(), released.clone());
            let holder = thread::spawn(move || -> Result<()> {
                let ctx = c1.context(NodeId(1))?;
                l1.with(&ctx, BOUND, &|| {
                    let _ = tx.send(());
                    thread::sleep(Duration::from_millis(150));
                    r1.store(1, Ordering::SeqCst);
                })?;
                Ok(())
            });
            rx.recv_timeout(BOUND).expect("the holder got in");
            let mut waiters = Vec::new();
            for node in [NodeId(0), NodeId(2)] {
                let (l2, c2, r2) = (l.boxed(), c.clone(), released.clone());
                waiters.push(thread::spawn(move || -> Result<(bool, usize)> {
                    let ctx = c2.context(node)?;
                    let seen = std::cell::Cell::new(0);
                    let (_, poisoned) = l2.with(&ctx, BOUND, &|| {
                        seen.set(r2.load(Ordering::SeqCst));
                    })?;
                    Ok((poisoned, seen.get()))
                }));
            }
            for w in waiters {
                let (poisoned, seen) = w.join().expect("waiter")?;
                assert_eq!(seen, 1, "{s:?} {name}: a waiter got in before the release");
                assert!(
                    !poisoned,
                    "{s:?} {name}: a live holder's ticket was skipped"
                );
            }
            holder.join().expect("holder")?;
        }
    }
    Ok(())
}

/// A guard dropped while its thread panics poisons the hand-over, for every kind.
#[test]
fn a_panicking_holder_poisons_the_lock() -> Result<()> {
    let c = cluster(Schedule::Threaded, BOUND);
    for l in each(&c, 3)? {
        let (l1, c1) = (l.boxed(), c.clone());
        let r = thread::spawn(move || {
            let ctx = c1.context(NodeId(1)).unwrap();
            let _ = l1.with(&ctx, BOUND, &|| panic!("inside the critical section"));
        })
        .join();
        assert!(r.is_err());
        let (l2, c2) = (l.boxed(), c.clone());
        let (first, second) = bounded("next holder", move || -> Result<(bool, bool)> {
            let ctx = c2.context(NodeId(0))?;
            let (_, a) = l2.with(&ctx, BOUND, &|| ())?;
            let (_, b) = l2.with(&ctx, BOUND, &|| ())?;
            Ok((a, b))
        })?;
        assert!(first, "{}: the next holder is told", l.name());
        assert!(!second, "{}: and only it", l.name());
    }
    Ok(())
}

/// `shutdown` frees threads blocked in an acquire: they return `Shutdown` promptly.
#[test]
fn shutdown_frees_waiters() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 2 }] {
        let c = cluster(s, BOUND);
        let locks = each(&c, 3)?;
        let holder = c.context(NodeId(0))?;
        let (tx, rx) = mpsc::channel();
        for l in &locks {
            l.hold_forever(&holder)?;
            let (l2, c2, tx) = (l.boxed(), c.clone(), tx.clone());
            thread::spawn(move || {
                let r = c2
                    .context(NodeId(1))
                    .map_err(Error::from)
                    .and_then(|ctx| l2.with(&ctx, BOUND, &|| ()));
                let _ = tx.send((l2.name(), r));
            });
        }
        thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        c.shutdown();
        for _ in 0..locks.len() {
            let (name, r) = rx.recv_timeout(BOUND).expect("a waiter was not freed");
            assert!(
                matches!(r, Err(Error::Rdma(loco_rdmawait::Error::Shutdown))),
                "{name}: {r:?}"
            );
        }
        eprintln!("{s:?}: waiters freed {:?} after shutdown", start.elapsed());
    }
    Ok(())
}

/// A weak (and strong) lock made for 2 threads serves any number of successive contexts: each
/// dropped context hands its `rel` slot back. Two contexts at a time, ten in all.
#[test]
fn contexts_come_and_go() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 4 }] {
        let c = cluster(s, BOUND);
        let w = WLock::new(&c, NodeId(1), 2)?;
        let sl = SLock::new(&c, NodeId(2), 2)?;
        let n = NLock::new(&c, NodeId(0))?;
        for round in 0..5u16 {
            let pair: Vec<_> = (0..2u16)
                .map(|i| {
                    let (c, w, sl, n) = (c.clone(), w.clone(), sl.clone(), n.clone());
                    thread::spawn(move || -> Result<()> {
                        let ctx = c.context(NodeId((round + i) % 3))?;
                        for _ in 0..3 {
                            LockGuard::release(w.acquire(&ctx)?)?;
                            LockGuard::release(sl.acquire(&ctx)?)?;
                            LockGuard::release(n.acquire(&ctx)?)?;
                        }
                        if i == 0 {
                            // Explicitly, or (the other one) by dropping the context.
                            w.leave(&ctx)?;
                            n.leave(&ctx)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for p in pair {
                p.join().expect("worker")?;
            }
        }
        // A third thread at once is still too many.
        let ctxs: Vec<_> = (0..3)
            .map(|k| c.context(NodeId(k)))
            .collect::<loco_rdmawait::Result<_>>()?;
        let mut errs = 0;
        for ctx in &ctxs {
            match w.try_acquire(ctx) {
                Ok(Some(g)) => drop(g),
                Ok(None) => {}
                Err(Error::TooManyThreads { max: 2 }) => errs += 1,
                Err(e) => return Err(e),
            }
        }
        assert_eq!(errs, 1);
    }
    Ok(())
}

/// Private words come back: 400 successive contexts, each using a node lock and a weak lock
/// (then leaving the node lock, and just dropped for the weak one), on nodes with 512 words of
/// memory. Without recycling they would need over 1,600 private words on n0.
#[test]
fn private_words_come_back() -> Result<()> {
    let c = Cluster::builder()
        .nodes(3)
        .memory_per_node(4096)
        .soft(Schedule::Threaded)
        .timeout(BOUND)
        .build()?;
    let n = NLock::new(&c, NodeId(2))?;
    let w = WLock::new(&c, NodeId(1), 1)?;
    for _ in 0..400 {
        let ctx = c.context(NodeId(0))?;
        LockGuard::release(n.acquire(&ctx)?)?;
        LockGuard::release(w.acquire(&ctx)?)?;
        n.leave(&ctx)?;
    }
    Ok(())
}

/// Contexts simply dropped (no `leave`) after using each lock give their words back too, on
/// every schedule: 600 contexts on nodes of 512 words. The context reaps what its releases left
/// in flight when it is dropped (`Ctx::settled`).
#[test]
fn dropped_contexts_give_their_words_back() -> Result<()> {
    for s in [
        Schedule::Immediate,
        Schedule::Threaded,
        Schedule::Chaos { seed: 3 },
    ] {
        let c = Cluster::builder()
            .nodes(3)
            .memory_per_node(4096)
            .soft(s)
            .timeout(BOUND)
            .build()?;
        let n = NLock::new(&c, NodeId(2))?;
        let w = WLock::new(&c, NodeId(1), 1)?;
        let sl = SLock::new(&c, NodeId(1), 1)?;
        for i in 0..600 {
            let ctx = c.context(NodeId(0))?;
            let r = n
                .acquire(&ctx)
                .and_then(LockGuard::release)
                .map_err(|e| ("nlock", e))
                .and_then(|()| {
                    w.acquire(&ctx)
                        .and_then(LockGuard::release)
                        .map_err(|e| ("wlock", e))
                })
                .and_then(|()| {
                    sl.acquire(&ctx)
                        .and_then(LockGuard::release)
                        .map_err(|e| ("slock", e))
                });
            if let Err((which, e)) = r {
                panic!("{s:?}, context {i}, {which}: {e}");
            }
        }
    }
    Ok(())
}

/// A context dropped right after its acquire timed out with the ticket FAA still in flight: the
/// ticket it took is given up for it (owed, paid by the next caller in the process), so the lock
/// stays usable.
#[test]
fn a_context_dropped_with_its_ticket_in_flight_strands_nothing() -> Result<()> {
    // The node of each lock's ticket dispenser (see `each_off_n1`).
    for (k, (name, home)) in [("nlock", 2), ("wlock", 2), ("slock", 0)]
        .into_iter()
        .enumerate()
    {
        for fifo in [true, false] {
            let b = Arc::new(loco_rdmawait::SoftBackend::new(3, 2048, Schedule::Threaded));
            let c = Cluster::with_backend(Box::new(b.clone()), Duration::from_secs(5));
            let l = each_off_n1(&c, 2)?.swap_remove(k);
            {
                let ctx = c.context(NodeId(0))?;
                l.with(&ctx, BOUND, &|| {})?; // registered: the next acquire takes a ticket
                b.stall(NodeId(home), true)?;
                // FIFO: the ticket FAA times out; try: the ticket CAS does.
                let e = if fifo {
                    l.with(&ctx, Duration::from_millis(20), &|| {}).map(|_| 0)
                } else {
                    l.try_for(&ctx, Duration::from_millis(20))
                }
                .unwrap_err();
                assert!(matches!(e, Error::Timeout { .. }), "{name}: {e}");
                b.stall(NodeId(home), false)?;
            } // dropped: the FAA or CAS completes while the context settles
            let ctx = c.context(NodeId(0))?;
            let (t, _) = l
                .with(&ctx, Duration::from_secs(10), &|| {})
                .unwrap_or_else(|e| panic!("{name} (fifo {fifo}): the lock is stuck: {e}"));
            eprintln!("{name} (fifo {fifo}): entered with ticket {t} after the dropped context");
        }
    }
    Ok(())
}

/// `l.with(ctx, t, nothing)` on a new thread with a context on `node`; the result comes on the
/// channel.
fn spawn_with(
    l: &dyn AnyLock,
    c: &Cluster,
    node: NodeId,
    t: Duration,
) -> mpsc::Receiver<Result<(u64, bool)>> {
    let (l, c) = (l.boxed(), c.clone());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let r = c
            .context(node)
            .map_err(Error::from)
            .and_then(|ctx| l.with(&ctx, t, &|| {}));
        let _ = tx.send(r);
    });
    rx
}

/// Several threads of one node wait when the node dies: each announced its ticket in a
/// `waiting` slot of its own, so a waiter on a live node skips all of them (with one word per
/// node only the latest ticket was known, and the lock stayed blocked at the other).
#[test]
fn several_dead_waiters_of_one_node_are_all_skipped() -> Result<()> {
    // Without cohorts each of them took a ticket; with them (the default) only the first,
    // the others queued behind it on n1.
    for (cohort, tickets) in [(0, 3), (loco_locks::COHORT_HANDOVERS, 1)] {
        for s in [Schedule::Threaded, Schedule::Chaos { seed: 6 }] {
            for k in 0..3 {
                let c = cluster(s, BOUND);
                let l = each_off_n1(&c, 5)?.swap_remove(k);
                l.set_cohort(cohort);
                let name = l.name();
                let holder = c.context(NodeId(0))?;
                let t0 = l.hold_forever(&holder)?;
                let mut waiters = Vec::new();
                for _ in 0..3 {
                    waiters.push(spawn_with(&*l, &c, NodeId(1), BOUND));
                    thread::sleep(Duration::from_millis(30)); // it waits, and announces its ticket
                }
                c.kill(NodeId(1))?;
                for rx in waiters {
                    let r = rx
                        .recv_timeout(BOUND)
                        .expect("a dead node's waiter did not stop");
                    assert!(r.is_err(), "{s:?} {name}: {r:?}");
                }
                // On n2: a waiter on the holder's node would be handed the lock locally.
                let rx = spawn_with(&*l, &c, NodeId(2), Duration::from_secs(20));
                thread::sleep(Duration::from_millis(5));
                l.release(&holder)?;
                let (t, poisoned) =
                    rx.recv_timeout(BOUND)
                        .expect("no answer")
                        .unwrap_or_else(|e| {
                            panic!("{s:?} {name}: the dead waiters' tickets blocked: {e}")
                        });
                assert_eq!(t, t0 + tickets + 1, "{s:?} {name}, cohort {cohort}");
                assert!(poisoned, "{s:?} {name}");
            }
        }
    }
    Ok(())
}

/// A thread that dies while *waiting* (its node is killed after it took a ticket and announced
/// it): its thread stops with `PeerDead` naming its own node, and a later waiter skips its
/// ticket once the holder releases (told, conservatively, that the lock may be poisoned).
#[test]
fn a_dead_waiter_is_skipped() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 5 }] {
        for k in 0..3 {
            let c = cluster(s, BOUND);
            let l = each_off_n1(&c, 3)?.swap_remove(k);
            let name = l.name();
            let holder = c.context(NodeId(0))?;
            let t0 = l.hold_forever(&holder)?;
            let rx = spawn_with(&*l, &c, NodeId(1), BOUND);
            thread::sleep(Duration::from_millis(50)); // it waits, and announces its ticket
            c.kill(NodeId(1))?;
            let r = rx
                .recv_timeout(BOUND)
                .expect("the dead node's waiter did not stop");
            assert!(
                matches!(
                    r,
                    Err(Error::Rdma(loco_rdmawait::Error::PeerDead {
                        node: NodeId(1),
                        ..
                    }))
                ),
                "{s:?} {name}: {r:?}"
            );
            // On n2: a waiter on the holder's node would be handed the lock locally.
            let rx = spawn_with(&*l, &c, NodeId(2), BOUND);
            thread::sleep(Duration::from_millis(5));
            l.release(&holder)?;
            let (t, poisoned) = rx
                .recv_timeout(BOUND)
                .expect("the dead waiter's ticket blocked")?;
            assert_eq!(t, t0 + 2, "{s:?} {name}");
            assert!(poisoned, "{s:?} {name}");
        }
    }
    Ok(())
}

/// A node restarts and rejoins (issue 10, point 3; `Cluster::restart`): its holder's ticket was
/// skipped while it was dead; afterwards the lock (on a survivor) serves the survivors and the
/// new incarnation, and no increment made under it is lost. The old incarnation's context
/// reports `PeerDead`, it is not reused.
#[test]
fn a_restarted_node_uses_the_lock_again_and_no_increment_is_lost() -> Result<()> {
    const K: u64 = 20;
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 3 }] {
        let c = cluster(s, BOUND);
        let l = NLock::new(&c, NodeId(0))?;
        let (total, tmp) = counter(&c)?;
        // Increments `total` under the lock `K` times from a new context on `n`; returns how
        // many completed and how many hand-overs were poisoned.
        let work = |n: NodeId| {
            let (l, c, total, tmp) = (l.clone(), c.clone(), total, tmp[n.index()]);
            bounded("increments", move || -> Result<(u64, u64)> {
                let ctx = c.context(n)?;
                let d = loco_rdmawait::WorkId::new(1);
                let (mut done, mut poisoned) = (0, 0);
                for _ in 0..K {
                    let g = l.acquire(&ctx)?;
                    poisoned += u64::from(LockGuard::was_poisoned(&g));
                    ctx.get(&tmp, &total, d)?;
                    ctx.wait(d)?;
                    let v = ctx.load(&tmp)?;
                    ctx.store(&tmp, v + 1)?;
                    ctx.put(&total, &tmp, d)?;
                    ctx.wait(d)?;
                    LockGuard::release(g)?;
                    done += 1;
                }
                Ok((done, poisoned))
            })
        };
        // n2 dies holding the lock (its hold announced on n0), inside an increment.
        let old = c.context(NodeId(2))?;
        let g = l.acquire(&old)?;
        c.quiesce()?;
        std::mem::forget(g);
        let before = c.incarnation(NodeId(2))?;
        c.kill(NodeId(2))?;
        let (d1, p1) = work(NodeId(1))?;
        assert_eq!(
            p1, 1,
            "{s:?}: the dead holder's ticket was skipped, and reported once"
        );
        c.restart(NodeId(2))?;
        assert_ne!(c.incarnation(NodeId(2))?, before);
        assert!(matches!(
            old.load(&tmp[2]),
            Err(loco_rdmawait::Error::PeerDead { .. })
        ));
        let (d2, p2) = work(NodeId(2))?;
        let (d0, p0) = work(NodeId(0))?;
        assert_eq!((p2, p0), (0, 0), "{s:?}");
        c.quiesce()?;
        assert_eq!(
            c.peek(&total)?,
            d0 + d1 + d2,
            "{s:?}: an increment was lost"
        );
        assert_eq!(d0 + d1 + d2, 3 * K);
        drop(old);
    }
    Ok(())
}

/// A holder's node dies and restarts before any waiter has looked at the lock (the new
/// incarnation does not use it): the dead incarnation's `waiting` slot still names the
/// holder's ticket, but tagged with that incarnation, which is no longer its node's, so it
/// claims nothing. The survivors' acquires skip the ticket (poisoned, told once) well within
/// their timeout instead of timing out, and no increment made under the lock is lost. For
/// every kind; the new incarnation's threads are not involved (a weak or strong lock's copies
/// there read 0 until the next release reaches them).
#[test]
fn a_holder_whose_node_restarted_before_anyone_looked_is_skipped() -> Result<()> {
    use loco_sv::GlobalFence;
    const K: u64 = 10;
    // Far below the cluster's timeout: an acquire that waits for the dead holder fails.
    const WITHIN: Duration = Duration::from_secs(5);
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 3 }] {
        for k in 0..3 {
            // A fresh cluster per kind: n1 dies and restarts in each.
            let c = cluster(s, BOUND);
            let l = each_off_n1(&c, 3)?.swap_remove(k);
            let name = l.name();
            let (total, tmp) = counter(&c)?;
            // n1 takes the lock and dies holding it, its hold announced.
            let old = c.context(NodeId(1))?;
            let t = l.hold_forever(&old)?;
            c.quiesce()?;
            let before = c.incarnation(NodeId(1))?;
            c.kill(NodeId(1))?;
            c.restart(NodeId(1))?;
            assert_ne!(c.incarnation(NodeId(1))?, before);
            // Only now does anyone look: increments from n0 and n2.
            let start = Instant::now();
            let workers: Vec<_> = [NodeId(0), NodeId(2)]
                .into_iter()
                .map(|n| {
                    let (l, c, tmp) = (l.boxed(), c.clone(), tmp[n.index()]);
                    thread::spawn(move || -> Result<(u64, u64, u64)> {
                        let ctx = c.context(n)?;
                        let d = loco_rdmawait::WorkId::new(1);
                        let (mut done, mut poisoned, mut first) = (0, 0, u64::MAX);
                        for _ in 0..K {
                            let (u, p) = l.with(&ctx, WITHIN, &|| {
                                let r =
                                    (|| -> std::result::Result<(), Box<dyn std::error::Error>> {
                                        ctx.get(&tmp, &total, d)?;
                                        ctx.wait(d)?;
                                        ctx.store(&tmp, ctx.load(&tmp)? + 1)?;
                                        ctx.put(&total, &tmp, d)?;
                                        ctx.wait(d)?;
                                        Ok(ctx.gf([NodeId(0)])?)
                                    })();
                                r.expect("an increment");
                            })?;
                            first = first.min(u);
                            poisoned += u64::from(p);
                            done += 1;
                        }
                        Ok((done, poisoned, first))
                    })
                })
                .collect();
            let (mut done, mut poisoned) = (0, 0);
            for w in workers {
                let (d, p, first) = w.join().expect("a worker panicked")?;
                assert!(
                    first > t,
                    "{s:?} {name}: ticket {first} after the holder's {t}"
                );
                done += d;
                poisoned += p;
            }
            eprintln!(
                "{s:?} {name}: holder restarted before anyone looked, skipped; {done} increments in {:?}",
                start.elapsed()
            );
            assert_eq!(
                poisoned, 1,
                "{s:?} {name}: the dead holder's ticket was skipped, and reported once"
            );
            c.quiesce()?;
            assert_eq!(
                c.peek(&total)?,
                2 * K,
                "{s:?} {name}: an increment was lost"
            );
            assert!(matches!(
                old.load(&tmp[1]),
                Err(loco_rdmawait::Error::PeerDead { .. })
            ));
        }
    }
    Ok(())
}

/// Another node dies (not the lock's, not the caller's): the lock keeps working among the
/// survivors, whether the death comes between a release and the next acquire (the release's
/// broadcast towards it is lost) or inside a critical section (the release must not fail).
#[test]
fn a_lock_outlives_an_unrelated_node() -> Result<()> {
    let mut s = vec![Schedule::Threaded];
    s.extend((1..=4).map(|seed| Schedule::Chaos { seed }));
    for s in s {
        for k in 0..3 {
            for inside in [false, true] {
                let c = cluster(s, BOUND);
                let l = each_off_n1(&c, 3)?.swap_remove(k);
                let name = l.name();
                let (l0, c0) = (l.boxed(), c.clone());
                let r = bounded("survivor", move || -> Result<()> {
                    let ctx = c0.context(NodeId(0))?;
                    l0.with(&ctx, BOUND, &|| {})?;
                    if inside {
                        l0.with(&ctx, BOUND, &|| c0.kill(NodeId(1)).unwrap())?;
                    } else {
                        c0.kill(NodeId(1))?;
                    }
                    let (t, _) = l0.with(&ctx, BOUND, &|| {})?;
                    let other = c0.context(NodeId(2))?;
                    let (u, _) = l0.with(&other, BOUND, &|| {})?;
                    assert_eq!(u, t + 1);
                    Ok(())
                });
                r.unwrap_or_else(|e| panic!("{s:?} {name} (death inside: {inside}): {e}"));
            }
        }
    }
    Ok(())
}

/// The lock's own node (the node lock's node, the weak lock's ticket node) restarts: its words
/// come back zeroed, so the lock is refused from then on with `PeerDead` naming that node, and a
/// holder from before the restart does not write its release into the fresh words (where its
/// old ticket would let a later thread in beside a new holder).
#[test]
fn a_lock_whose_home_restarted_is_refused() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 9 }] {
        for k in 0..3 {
            let c = cluster(s, BOUND);
            // Homes: n2 (node lock), n2 (weak), n0 (strong): restart that node.
            let home = [NodeId(2), NodeId(2), NodeId(0)][k];
            let l = each_off_n1(&c, 3)?.swap_remove(k);
            let name = l.name();
            let holder_node = if home == NodeId(0) {
                NodeId(1)
            } else {
                NodeId(0)
            };
            let holder = c.context(holder_node)?;
            l.hold_forever(&holder)?;
            c.quiesce()?;
            c.kill(home)?;
            c.restart(home)?;
            let r = l.release(&holder);
            assert!(
                matches!(&r, Err(Error::Rdma(loco_rdmawait::Error::PeerDead { node, .. })) if *node == home),
                "{s:?} {name}: {r:?}"
            );
            c.quiesce()?;
            let other = c.context(NodeId(1 + (holder_node.index() as u16 + 1) % 2))?;
            let r = l.with(&other, BOUND, &|| {});
            assert!(
                matches!(&r, Err(Error::Rdma(loco_rdmawait::Error::PeerDead { node, .. })) if *node == home),
                "{s:?} {name}: {r:?}"
            );
        }
    }
    Ok(())
}

/// The words of [`increment`]: `total` on n0, and a scratch word on every node (by index).
fn counter(c: &Cluster) -> Result<(loco_rdmawait::Loc, Vec<loco_rdmawait::Loc>)> {
    let total = c.alloc_word(NodeId(0))?;
    let tmp = c
        .node_ids()
        .map(|n| c.alloc_word(n))
        .collect::<loco_rdmawait::Result<_>>()?;
    Ok((total, tmp))
}

/// Increments `total` (a word on n0) once under `l` from `ctx`, reading and writing it through
/// `tmp` (a word on the context's node) and fencing n0 before the release (for the weak lock);
/// returns whether the hand-over was poisoned.
fn increment(
    l: &dyn AnyLock,
    ctx: &loco_rdmawait::Ctx,
    total: loco_rdmawait::Loc,
    tmp: loco_rdmawait::Loc,
) -> Result<bool> {
    use loco_sv::GlobalFence;
    let d = loco_rdmawait::WorkId::new(1);
    let (_, poisoned) = l.with(ctx, Duration::from_secs(10), &|| {
        let r = (|| -> std::result::Result<(), Box<dyn std::error::Error>> {
            ctx.get(&tmp, &total, d)?;
            ctx.wait(d)?;
            ctx.store(&tmp, ctx.load(&tmp)? + 1)?;
            ctx.put(&total, &tmp, d)?;
            ctx.wait(d)?;
            Ok(ctx.gf([NodeId(0)])?)
        })();
        r.expect("an increment");
    })?;
    Ok(poisoned)
}

/// A node restarts again and again, and each time a thread of its new incarnation uses a weak
/// (strong) lock made for 3 threads; so does, each time, a survivor's thread (a new context:
/// an older one cannot reach the new incarnation, whose copies of `rel` read 0 until a release
/// reaches them), the previous survivor's context being dropped. The dead incarnations'
/// contexts are never dropped (as a killed process's), so their `rel` slots never go back to
/// a pool: they are taken over through the slots' owner records (a slot whose owner's
/// incarnation is dead). Without that the new incarnations' threads took a fresh slot each
/// time and the lock ran out of slots (`TooManyThreads`) right after the first restart. Afterwards the
/// dead contexts are dropped (which must not hand back slots others took over meanwhile),
/// three live threads use the lock at once, and a fourth is still too many: no slot is lost
/// or owned twice. No increment is lost and no hand-over is poisoned.
#[test]
fn a_restarted_nodes_threads_take_back_their_dead_incarnations_rel_slots() -> Result<()> {
    const ROUNDS: usize = 6;
    for s in [
        Schedule::Threaded,
        Schedule::Chaos { seed: 3 },
        Schedule::Chaos { seed: 11 },
    ] {
        // The weak and the strong lock, their tickets on n2 and n0; n1 restarts.
        for k in 1..3 {
            let c = cluster(s, BOUND);
            let l = each_off_n1(&c, 3)?.swap_remove(k);
            let name = l.name();
            let (total, tmp) = counter(&c)?;
            let (c2, l2) = (c.clone(), l.boxed());
            let done = bounded("restarts", move || -> Result<u64> {
                let (c, l) = (c2, l2);
                let mut dead = Vec::new();
                let mut prev = None;
                let mut done = 0;
                for round in 0..ROUNDS {
                    // A survivor alternately on n0 and n2.
                    let n = NodeId(2 * (round % 2) as u16);
                    let survivor = c.context(n)?;
                    let p = increment(&*l, &survivor, total, tmp[n.index()])
                        .unwrap_or_else(|e| panic!("{s:?} {name}, round {round}, survivor: {e}"));
                    assert!(!p, "{s:?} {name}, round {round}: poisoned");
                    drop(prev.replace(survivor));
                    let fresh = c.context(NodeId(1))?;
                    let p = increment(&*l, &fresh, total, tmp[1]).unwrap_or_else(|e| {
                        panic!("{s:?} {name}, round {round}, n1's new incarnation: {e}")
                    });
                    assert!(!p, "{s:?} {name}, round {round}: poisoned");
                    done += 2;
                    c.quiesce()?;
                    c.kill(NodeId(1))?;
                    c.restart(NodeId(1))?;
                    dead.push(fresh);
                }
                drop(dead);
                drop(prev);
                let all: Vec<_> = c
                    .node_ids()
                    .map(|n| c.context(n))
                    .collect::<loco_rdmawait::Result<_>>()?;
                for (i, ctx) in all.iter().enumerate() {
                    let p = increment(&*l, ctx, total, tmp[i])
                        .unwrap_or_else(|e| panic!("{s:?} {name}, at last, n{i}: {e}"));
                    assert!(!p, "{s:?} {name}: poisoned");
                    done += 1;
                }
                let fourth = c.context(NodeId(0))?;
                let r = increment(&*l, &fourth, total, tmp[0]);
                assert!(
                    matches!(r, Err(Error::TooManyThreads { max: 3 })),
                    "{s:?} {name}: a fourth thread: {r:?}"
                );
                Ok(done)
            })?;
            c.quiesce()?;
            assert_eq!(c.peek(&total)?, done, "{s:?} {name}: an increment was lost");
            eprintln!("{s:?} {name}: {ROUNDS} restarts, {done} increments, 3 slots");
        }
    }
    Ok(())
}

/// A context hands its `rel` slot back (dropped) and then another node restarts: the slot's
/// copy on the restarted node reads 0, never the old owner's last release, and no put of the
/// old owner can reach the new incarnation, so that copy is not waited for. The process's next
/// context reuses the slot at once (the lock is made for one thread), on the same node and
/// then on the restarted one. Before, its first acquire waited for that copy until its time
/// ran out.
#[test]
fn a_slot_handed_back_before_another_node_restarted_is_reused() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 2 }] {
        for k in 1..3 {
            let c = cluster(s, BOUND);
            let l = each_off_n1(&c, 1)?.swap_remove(k);
            let name = l.name();
            let (total, tmp) = counter(&c)?;
            let (c2, l2) = (c.clone(), l.boxed());
            bounded("reuse", move || -> Result<()> {
                let (c, l) = (c2, l2);
                let ctx = c.context(NodeId(0))?;
                increment(&*l, &ctx, total, tmp[0])?;
                drop(ctx);
                c.quiesce()?;
                c.kill(NodeId(1))?;
                c.restart(NodeId(1))?;
                for n in [NodeId(0), NodeId(1)] {
                    let ctx = c.context(n)?;
                    increment(&*l, &ctx, total, tmp[n.index()])
                        .unwrap_or_else(|e| panic!("{s:?} {name}, {n} after the restart: {e}"));
                }
                Ok(())
            })?;
            c.quiesce()?;
            assert_eq!(c.peek(&total)?, 3, "{s:?} {name}");
        }
    }
    Ok(())
}

/// A node dies for good, with a thread that used a weak (strong) lock made for 2 threads,
/// idle or (`holding`) inside a critical section: its `rel` slot is taken over by a survivor's
/// new thread (its owner record names a dead node), which then uses the lock with the
/// survivor that held the other slot all along. Before, that thread's first acquire failed
/// with `TooManyThreads`.
#[test]
fn a_dead_nodes_rel_slots_are_taken_over_by_the_survivors() -> Result<()> {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 4 }] {
        for holding in [false, true] {
            for k in 1..3 {
                let c = cluster(s, BOUND);
                let l = each_off_n1(&c, 2)?.swap_remove(k);
                let name = l.name();
                let (total, tmp) = counter(&c)?;
                let (c2, l2) = (c.clone(), l.boxed());
                bounded("take over", move || -> Result<()> {
                    let (c, l) = (c2, l2);
                    let old = c.context(NodeId(0))?;
                    increment(&*l, &old, total, tmp[0])?;
                    let doomed = c.context(NodeId(1))?;
                    if holding {
                        l.hold_forever(&doomed)?;
                    } else {
                        increment(&*l, &doomed, total, tmp[1])?;
                    }
                    c.quiesce()?;
                    c.kill(NodeId(1))?;
                    let new = c.context(NodeId(2))?;
                    let p = increment(&*l, &new, total, tmp[2])
                        .unwrap_or_else(|e| panic!("{s:?} {name} (holding {holding}): {e}"));
                    assert_eq!(p, holding, "{s:?} {name}: told of the dead holder");
                    for ctx in [&old, &new, &old] {
                        let i = ctx.node().index();
                        assert!(!increment(&*l, ctx, total, tmp[i])?);
                    }
                    Ok(())
                })?;
                c.quiesce()?;
                assert_eq!(c.peek(&total)?, 5 + u64::from(!holding), "{s:?} {name}");
            }
        }
    }
    Ok(())
}
