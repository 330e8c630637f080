//! The lock API: smoke, FIFO order of tickets, timed acquisition, and checked misuse. On the
//! backend `LOCO_BACKEND` names (the soft NIC by default, a real device under
//! `soft-roce-ci/run.sh`; see `loco_rdmawait::testing`), with fewer rounds on a device.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, Result, SLock, WLock};
use loco_rdmawait::testing::{self, runs};
use loco_rdmawait::{Cluster, Ctx, NodeId, Schedule};

/// A 3-node cluster: the soft NIC with `schedule`, or the device.
fn cluster(schedule: Schedule) -> Cluster {
    testing::cluster(3, 1 << 14, schedule).unwrap_or_else(|e| panic!("{e}"))
}

/// One of each lock kind on `c`, for `threads` threads.
fn each(c: &Cluster, threads: usize) -> Result<(WLock, SLock, NLock)> {
    Ok((
        WLock::new(c, NodeId(1), threads)?,
        SLock::new(c, NodeId(2), threads)?,
        NLock::new(c, NodeId(0))?,
    ))
}

/// Runs `f` once for every lock kind.
fn for_each_lock(
    c: &Cluster,
    threads: usize,
    mut f: impl FnMut(&dyn AnyLock) -> Result<()>,
) -> Result<()> {
    let (w, s, n) = each(c, threads)?;
    f(&w)?;
    f(&s)?;
    f(&n)
}

/// The lock API over the three kinds, object-safe for the tests.
trait AnyLock: Send + Sync {
    fn acquire_ticket(&self, ctx: &Ctx) -> Result<u64>;
    fn try_ticket(&self, ctx: &Ctx) -> Result<Option<u64>>;
    fn try_for_ticket(&self, ctx: &Ctx, t: Duration) -> Result<u64>;
    fn release(&self, ctx: &Ctx) -> Result<()>;
    fn is_held(&self, ctx: &Ctx) -> Result<bool>;
    fn guard_then_raw_release(&self, ctx: &Ctx) -> Result<()>;
    fn boxed(&self) -> Box<dyn AnyLock>;
    fn set_cohort(&self, max: u32);
}

impl<R: RawLock + 'static> AnyLock for Lock<R> {
    fn acquire_ticket(&self, ctx: &Ctx) -> Result<u64> {
        let g = self.acquire(ctx)?;
        let t = LockGuard::ticket(&g);
        std::mem::forget(g); // keep holding: released through `release`
        Ok(t)
    }
    fn try_ticket(&self, ctx: &Ctx) -> Result<Option<u64>> {
        self.raw().try_acquire(ctx)
    }
    fn try_for_ticket(&self, ctx: &Ctx, t: Duration) -> Result<u64> {
        let g = self.try_acquire_for(ctx, t)?;
        let t = LockGuard::ticket(&g);
        std::mem::forget(g);
        Ok(t)
    }
    fn release(&self, ctx: &Ctx) -> Result<()> {
        self.raw().release(ctx)
    }
    fn is_held(&self, ctx: &Ctx) -> Result<bool> {
        Lock::is_held(self, ctx)
    }
    fn guard_then_raw_release(&self, ctx: &Ctx) -> Result<()> {
        let g = self.acquire(ctx)?;
        self.raw().release(ctx)?;
        LockGuard::release(g)
    }
    fn boxed(&self) -> Box<dyn AnyLock> {
        Box::new(self.clone())
    }
    fn set_cohort(&self, max: u32) {
        Lock::set_cohort(self, max)
    }
}

#[test]
fn smoke() -> Result<()> {
    let c = cluster(Schedule::Threaded);
    let ctx = c.context(NodeId(1))?;
    for_each_lock(&c, 2, |l| {
        assert!(!l.is_held(&ctx)?);
        assert_eq!(l.acquire_ticket(&ctx)?, 0);
        assert!(l.is_held(&ctx)?);
        l.release(&ctx)?;
        assert!(!l.is_held(&ctx)?);
        assert_eq!(l.acquire_ticket(&ctx)?, 1);
        l.release(&ctx)
    })?;
    // The guard releases on drop.
    let l = SLock::new(&c, NodeId(0), 1)?;
    {
        let g = l.acquire(&ctx)?;
        assert_eq!(LockGuard::ticket(&g), 0);
        assert!(l.is_held(&ctx)?);
    }
    assert!(!l.is_held(&ctx)?);
    let g = l.try_acquire(&ctx)?.expect("free");
    assert_eq!(LockGuard::ticket(&g), 1);
    LockGuard::release(g)?;
    Ok(())
}

#[test]
fn misuse_is_an_error() -> Result<()> {
    let c = cluster(Schedule::Chaos { seed: 3 });
    let ctx = c.context(NodeId(2))?;
    for_each_lock(&c, 1, |l| {
        assert!(matches!(l.release(&ctx), Err(Error::NotHeld)));
        let t = l.acquire_ticket(&ctx)?;
        assert!(
            matches!(l.acquire_ticket(&ctx), Err(Error::AlreadyHeld { ticket }) if ticket == t)
        );
        assert!(matches!(l.try_ticket(&ctx), Err(Error::AlreadyHeld { .. })));
        assert!(matches!(
            l.try_for_ticket(&ctx, Duration::from_millis(1)),
            Err(Error::AlreadyHeld { .. })
        ));
        l.release(&ctx)?;
        assert!(matches!(l.release(&ctx), Err(Error::NotHeld)));
        // A guard whose hold was released behind its back does not release again.
        assert!(matches!(
            l.guard_then_raw_release(&ctx),
            Err(Error::NotHeld)
        ));
        // After all that, the lock still works.
        let t2 = l.acquire_ticket(&ctx)?;
        assert!(t2 > t);
        l.release(&ctx)
    })
}

/// A weak lock for more threads than memory holds is refused before anything is allocated:
/// the memory stays free for the next lock. Also when only the ticket node (n0) is short: it
/// holds a `rel` copy and an owner record per thread.
#[test]
fn a_lock_too_big_for_memory_takes_nothing() -> Result<()> {
    let c = cluster(Schedule::Immediate);
    let free: Vec<u64> = c
        .node_ids()
        .map(|n| c.free_bytes(n))
        .collect::<Result<_, _>>()?;
    for max in [
        usize::MAX,
        (free[1] / 8) as usize + 1,
        (free[0] / 16) as usize,
    ] {
        let e = WLock::new(&c, NodeId(0), max).unwrap_err();
        assert!(
            matches!(e, Error::Rdma(loco_rdmawait::Error::OutOfMemory { .. })),
            "{e:?}"
        );
        let now: Vec<u64> = c
            .node_ids()
            .map(|n| c.free_bytes(n))
            .collect::<Result<_, _>>()?;
        assert_eq!(now, free, "nothing taken by the refused lock");
    }
    SLock::new(&c, NodeId(0), 2)?;
    Ok(())
}

#[test]
fn bounds_and_foreign_contexts_are_errors() -> Result<()> {
    let c = cluster(Schedule::Immediate);
    assert!(matches!(
        WLock::new(&c, NodeId(0), 0),
        Err(Error::NoThreads)
    ));
    assert!(matches!(
        SLock::new(&c, NodeId(7), 1),
        Err(Error::Rdma(loco_rdmawait::Error::UnknownNode { .. }))
    ));
    assert!(matches!(
        NLock::new(&c, NodeId(3)),
        Err(Error::Rdma(loco_rdmawait::Error::UnknownNode { .. }))
    ));
    let w = WLock::new(&c, NodeId(0), 1)?;
    let a = c.context(NodeId(0))?;
    let b = c.context(NodeId(1))?;
    drop(w.acquire(&a)?);
    assert!(matches!(
        w.acquire(&b),
        Err(Error::TooManyThreads { max: 1 })
    ));
    assert!(matches!(
        w.try_acquire(&b),
        Err(Error::TooManyThreads { max: 1 })
    ));
    let other = cluster(Schedule::Immediate);
    let foreign = other.context(NodeId(0))?;
    for_each_lock(&c, 1, |l| {
        assert!(matches!(
            l.acquire_ticket(&foreign),
            Err(Error::ForeignContext { .. })
        ));
        Ok(())
    })
}

/// A timed acquire of a held lock times out without leaving a ticket behind: the holder and
/// others go on using the lock, and a later timed acquire of the free lock succeeds.
fn timeouts(schedule: Schedule) -> Result<()> {
    let c = cluster(schedule);
    for_each_lock(&c, 3, |l| {
        let holder = c.context(NodeId(0))?;
        let t = l.acquire_ticket(&holder)?;
        let (l2, c2) = (l.boxed(), c.clone());
        let waiter = thread::spawn(move || -> Result<()> {
            let ctx = c2.context(NodeId(2))?;
            assert_eq!(l2.try_ticket(&ctx)?, None);
            let err = l2.try_for_ticket(&ctx, Duration::from_millis(30));
            assert!(
                matches!(err, Err(Error::Timeout { after }) if after == Duration::from_millis(30))
            );
            assert!(!l2.is_held(&ctx)?);
            Ok(())
        });
        waiter.join().expect("waiter")?;
        l.release(&holder)?;
        // No ticket was abandoned: a blocking acquire by a third thread gets the next ticket.
        let (l3, c3) = (l.boxed(), c.clone());
        let next = thread::spawn(move || -> Result<u64> {
            let ctx = c3.context(NodeId(1))?;
            let t = l3.acquire_ticket(&ctx)?;
            l3.release(&ctx)?;
            let t2 = l3.try_for_ticket(&ctx, Duration::from_secs(5))?;
            assert_eq!(t2, t + 1);
            l3.release(&ctx)?;
            Ok(t)
        });
        assert_eq!(next.join().expect("next")?, t + 1);
        Ok(())
    })
}

#[test]
fn timeouts_threaded() -> Result<()> {
    timeouts(Schedule::Threaded)
}

#[test]
fn timeouts_chaos() -> Result<()> {
    timeouts(Schedule::Chaos { seed: 11 })
}

/// Tickets are served in order: the holders, logged inside their critical sections, hold
/// tickets 0, 1, 2, ... with none skipped or overtaken. Some threads use the timed acquire, which
/// takes a ticket only when the lock is free, so it too must fit the sequence. Without cohorts
/// every section has a ticket of its own; with them (the default, `cohort` handovers in a row)
/// a local run shares its ticket, so the log is 0, 0, 1, 2, 2, 2, ...: no ticket skipped or
/// overtaken, none used by more than `cohort + 1` sections.
fn fifo(schedule: Schedule, threads: usize, iters: usize) -> Result<()> {
    for cohort in [0, 2] {
        fifo_with(schedule, threads, iters, cohort)?;
    }
    Ok(())
}

fn fifo_with(schedule: Schedule, threads: usize, iters: usize, cohort: u32) -> Result<()> {
    let c = cluster(schedule);
    for_each_lock(&c, threads, |l| {
        l.set_cohort(cohort);
        let log = Arc::new(Mutex::new(Vec::new()));
        // Tries that timed out: each gave its ticket up, and the others skip it.
        let given_up = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let start = Arc::new(Barrier::new(threads));
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (l, c, log, start) = (l.boxed(), c.clone(), log.clone(), start.clone());
                let given_up = given_up.clone();
                thread::spawn(move || -> Result<()> {
                    let ctx = c.context(NodeId((i % 3) as u16))?;
                    start.wait();
                    for k in 0..iters {
                        let t = if i == 0 && k % 2 == 1 {
                            loop {
                                match l.try_for_ticket(&ctx, Duration::from_millis(2)) {
                                    Ok(t) => break t,
                                    Err(Error::Timeout { .. }) => {
                                        given_up.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                        continue;
                                    }
                                    Err(e) => return Err(e),
                                }
                            }
                        } else {
                            l.acquire_ticket(&ctx)?
                        };
                        log.lock().unwrap().push(t);
                        l.release(&ctx)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker")?;
        }
        let log = log.lock().unwrap();
        // Served in ticket order, every ticket but those given up (a slow host, e.g. rxe under
        // emulation, times some 2 ms tries out).
        let in_order = |tickets: &[u64]| {
            let skipped = tickets
                .last()
                .map_or(0, |&t| t + 1)
                .saturating_sub(tickets.len() as u64);
            tickets.windows(2).all(|w| w[0] < w[1])
                && skipped <= given_up.load(std::sync::atomic::Ordering::Relaxed)
        };
        if cohort == 0 {
            assert_eq!(log.len(), threads * iters);
            assert!(in_order(&log), "tickets not served in order: {log:?}");
        } else {
            let mut tickets = log.clone();
            tickets.dedup();
            assert!(in_order(&tickets), "tickets not served in order: {log:?}");
            let longest = log.chunk_by(|a, b| a == b).map(<[u64]>::len).max();
            assert!(longest <= Some(cohort as usize + 1), "{log:?}");
        }
        Ok(())
    })
}

#[test]
fn fifo_threaded() -> Result<()> {
    fifo(Schedule::Threaded, 4, runs(50, 50) as usize)
}

#[test]
fn fifo_chaos() -> Result<()> {
    // On a device this is `fifo_threaded` again: once is enough. Sixteen seeds, since each seed
    // draws its own step probabilities (and a run is cheap).
    for seed in 0..runs(16, 0) {
        fifo(Schedule::Chaos { seed }, 4, 50)?;
    }
    Ok(())
}

/// Guards hold the thread's context, so they stay on the thread; handles are shared.
#[test]
fn handles_are_send_and_sync() {
    fn shared<T: Send + Sync + Clone>() {}
    shared::<WLock>();
    shared::<SLock>();
    shared::<NLock>();
}

/// The strong lock's release completes everything before it: right after `release` returns, the
/// critical section's puts towards every node have landed (read directly, no quiesce).
#[test]
fn slock_release_lands_every_put() -> Result<()> {
    for seed in 0..runs(500, 100) {
        let c = testing::cluster(3, 4096, Schedule::Chaos { seed })?;
        let l = SLock::new(&c, NodeId(0), 1)?;
        let (x, y) = (c.alloc_word(NodeId(1))?, c.alloc_word(NodeId(2))?);
        let one = c.alloc_word(NodeId(0))?;
        let ctx = c.context(NodeId(0))?;
        let g = l.acquire(&ctx)?;
        ctx.store(&one, 1)?;
        ctx.put(&x, &one, loco_rdmawait::WorkId::new(1))?;
        ctx.put(&y, &one, loco_rdmawait::WorkId::new(1))?;
        LockGuard::release(g)?;
        assert_eq!((c.peek(&x)?, c.peek(&y)?), (1, 1), "seed {seed}");
    }
    Ok(())
}

/// The node lock's release (`rfence(n); rcas(rel)`) does not wait: the CAS (and the acquire's
/// `held` announcement) are still pending when it returns, and the next acquire of the same
/// thread reaps them.
#[test]
fn nlock_release_does_not_wait() -> Result<()> {
    let c = cluster(Schedule::Chaos { seed: 5 });
    let l = NLock::new(&c, NodeId(2))?;
    let ctx = c.context(NodeId(0))?;
    LockGuard::release(l.acquire(&ctx)?)?;
    assert_eq!(
        ctx.unpolled(NodeId(2))?,
        2,
        "the release CAS and the held announcement are not waited for"
    );
    LockGuard::release(l.acquire(&ctx)?)?;
    assert_eq!(
        ctx.unpolled(NodeId(2))?,
        2,
        "only the latest release CAS and announcement are pending"
    );
    Ok(())
}

/// Completions the protocols do not wait for (release broadcasts and puts) are reaped by later
/// acquires: they never pile up in the thread's queue pairs.
#[test]
fn completions_do_not_pile_up() -> Result<()> {
    let c = cluster(Schedule::Chaos { seed: 9 });
    let ctx = c.context(NodeId(1))?;
    for_each_lock(&c, 1, |l| {
        for _ in 0..200 {
            l.acquire_ticket(&ctx)?;
            l.release(&ctx)?;
        }
        let pending: usize = c
            .node_ids()
            .map(|n| ctx.unpolled(n))
            .sum::<loco_rdmawait::Result<usize>>()?;
        assert!(pending <= 3, "{pending} completions left unpolled");
        Ok(())
    })
}

/// What an uncontended acquire + release costs on the network, counted with `Ctx::posted` on the
/// `Immediate` schedule (every operation done when posted, so the counts are exact): a change to
/// a protocol that adds network operations shows up here. 3 nodes; the thread is on n0, the
/// lock's words on n1.
///
/// - `NLock`: the claim put (`TAKING` into the thread's `waiting` slot, before the ticket),
///   `rfaa(tkt)`, one `get(rel)` (free at once), the hold announcement put, the release CAS: 5
///   (the release's `rfence` sends nothing).
/// - `WLock`: the claim put, `rfaa(tkt)`, the hold put, the release broadcast to the 2 other
///   nodes: 5.
/// - `SLock`: the weak lock's 5, and the release's `gf(all)`: one get per node the thread has
///   written to since its last fence (n1: the claim, the FAA, the hold; n2: the previous
///   release's broadcast), none towards its own node n0, where it posted nothing: 7.
#[test]
fn network_operations_per_uncontended_acquire_and_release() -> Result<()> {
    // The soft NIC whatever `LOCO_BACKEND` says: the counts are the protocols', not a device's.
    let c = Cluster::builder()
        .nodes(3)
        .memory_per_node(1 << 14)
        .soft(Schedule::Immediate)
        .build()?;
    let n = NLock::new(&c, NodeId(1))?;
    let w = WLock::new(&c, NodeId(1), 2)?;
    let s = SLock::new(&c, NodeId(1), 2)?;
    let ctx = c.context(NodeId(0))?;
    // First uses register the thread (a weak lock's slot FAA, the fence's words).
    LockGuard::release(n.acquire(&ctx)?)?;
    LockGuard::release(w.acquire(&ctx)?)?;
    LockGuard::release(s.acquire(&ctx)?)?;
    let cost = |cycle: &dyn Fn() -> Result<()>| -> Result<u64> {
        let before = ctx.posted();
        for _ in 0..10 {
            cycle()?;
        }
        Ok((ctx.posted() - before) / 10)
    };
    let costs = [
        ("nlock", cost(&|| LockGuard::release(n.acquire(&ctx)?))?, 5),
        ("wlock", cost(&|| LockGuard::release(w.acquire(&ctx)?))?, 5),
        ("slock", cost(&|| LockGuard::release(s.acquire(&ctx)?))?, 7),
    ];
    for (name, got, want) in costs {
        eprintln!("{name}: {got} network operations per acquire + release");
        assert_eq!(got, want, "{name}");
    }
    Ok(())
}
