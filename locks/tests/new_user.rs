//! A new user's edge values and misuse for every public function of `loco-locks` on the soft
//! NIC: each returns a typed error or does what its docs say, and none panics or hangs.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use loco_locks::{
    Error, Lock, LockGuard, NLock, RawLock, RawNLock, RawSLock, RawWLock, SLock, WLock,
};
use loco_rdmawait::testing::{
    assert_peer_dead as dead, assert_shutdown as shut, assert_unknown_node as unknown,
};
use loco_rdmawait::{testing, Cluster, Ctx, NodeId, RdmaCause, Schedule};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

/// The soft NIC's schedules: the shutdown and dead-node tests run under each.
const SCHEDULES: [Schedule; 3] = testing::soft_schedules(5);

fn cluster(nodes: usize) -> Cluster {
    cluster_on(nodes, Schedule::Chaos { seed: 5 })
}

/// Waits time out after `testing::SHORT_TIMEOUT`: an operation that wrongly blocks fails the
/// test quickly instead of hanging it.
fn cluster_on(nodes: usize, schedule: Schedule) -> Cluster {
    testing::short_cluster(nodes, 1 << 14, schedule)
}

fn rdma(e: &Error) -> &loco_rdmawait::Error {
    e.rdma()
        .unwrap_or_else(|| panic!("not an rdmawait error: {e:?}"))
}

fn foreign<T: std::fmt::Debug>(r: Result<T, Error>) {
    let e = r.unwrap_err();
    assert!(matches!(e, Error::ForeignContext { .. }), "{e:?}");
}

fn already<T: std::fmt::Debug>(r: Result<T, Error>, held: u64) {
    let e = r.unwrap_err();
    assert!(
        matches!(e, Error::AlreadyHeld { ticket } if ticket == held),
        "{e:?}"
    );
}

fn timeout<T: std::fmt::Debug>(r: Result<T, Error>) {
    let e = r.unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
}

/// One of each kind on `c` (for `threads` threads), homes on `home`, behind one face.
fn each(c: &Cluster, home: NodeId, threads: usize) -> Vec<Box<dyn AnyLock>> {
    vec![
        Box::new(WLock::new(c, home, threads).unwrap()),
        Box::new(SLock::new(c, home, threads).unwrap()),
        Box::new(NLock::new(c, home).unwrap()),
    ]
}

/// Every public call of a [`Lock`], object-safe; a guard is kept by forgetting it, and given
/// back through the raw release.
trait AnyLock: Send + Sync {
    fn name(&self) -> &'static str;
    fn acquire(&self, ctx: &Ctx) -> loco_locks::Result<u64>;
    fn try_acquire(&self, ctx: &Ctx) -> loco_locks::Result<Option<u64>>;
    fn try_acquire_for(&self, ctx: &Ctx, t: Duration) -> loco_locks::Result<u64>;
    fn acquire_timeout(&self, ctx: &Ctx, t: Duration) -> loco_locks::Result<u64>;
    fn acquire_until(&self, ctx: &Ctx, at: Instant) -> loco_locks::Result<u64>;
    /// A guard taken and released by `LockGuard::release`.
    fn section(&self, ctx: &Ctx) -> loco_locks::Result<u64>;
    /// A section within `t`: its ticket, and whether the guard said it was poisoned.
    fn poisoned_section(&self, ctx: &Ctx, t: Duration) -> loco_locks::Result<(u64, bool)>;
    fn release(&self, ctx: &Ctx) -> loco_locks::Result<()>;
    fn held(&self, ctx: &Ctx) -> loco_locks::Result<Option<u64>>;
    fn is_held(&self, ctx: &Ctx) -> loco_locks::Result<bool>;
    fn leave(&self, ctx: &Ctx) -> loco_locks::Result<()>;
    fn set_cohort(&self, max: u32);
    fn boxed(&self) -> Box<dyn AnyLock>;
}

impl<R: RawLock + 'static> AnyLock for Lock<R> {
    fn name(&self) -> &'static str {
        self.raw().name()
    }
    fn acquire(&self, ctx: &Ctx) -> loco_locks::Result<u64> {
        let g = Lock::acquire(self, ctx)?;
        let t = LockGuard::ticket(&g);
        std::mem::forget(g);
        Ok(t)
    }
    fn try_acquire(&self, ctx: &Ctx) -> loco_locks::Result<Option<u64>> {
        Ok(Lock::try_acquire(self, ctx)?.map(|g| {
            let t = LockGuard::ticket(&g);
            std::mem::forget(g);
            t
        }))
    }
    fn try_acquire_for(&self, ctx: &Ctx, t: Duration) -> loco_locks::Result<u64> {
        let g = Lock::try_acquire_for(self, ctx, t)?;
        let t = LockGuard::ticket(&g);
        std::mem::forget(g);
        Ok(t)
    }
    fn acquire_timeout(&self, ctx: &Ctx, t: Duration) -> loco_locks::Result<u64> {
        let g = Lock::acquire_timeout(self, ctx, t)?;
        let t = LockGuard::ticket(&g);
        std::mem::forget(g);
        Ok(t)
    }
    fn acquire_until(&self, ctx: &Ctx, at: Instant) -> loco_locks::Result<u64> {
        let g = Lock::acquire_until(self, ctx, at)?;
        let t = LockGuard::ticket(&g);
        std::mem::forget(g);
        Ok(t)
    }
    fn section(&self, ctx: &Ctx) -> loco_locks::Result<u64> {
        let g = Lock::acquire(self, ctx)?;
        let t = LockGuard::ticket(&g);
        LockGuard::release(g)?;
        Ok(t)
    }
    fn poisoned_section(&self, ctx: &Ctx, t: Duration) -> loco_locks::Result<(u64, bool)> {
        let g = Lock::acquire_timeout(self, ctx, t)?;
        let r = (LockGuard::ticket(&g), LockGuard::was_poisoned(&g));
        LockGuard::release(g)?;
        Ok(r)
    }
    fn release(&self, ctx: &Ctx) -> loco_locks::Result<()> {
        self.raw().release(ctx)
    }
    fn held(&self, ctx: &Ctx) -> loco_locks::Result<Option<u64>> {
        self.raw().held(ctx)
    }
    fn is_held(&self, ctx: &Ctx) -> loco_locks::Result<bool> {
        Lock::is_held(self, ctx)
    }
    fn leave(&self, ctx: &Ctx) -> loco_locks::Result<()> {
        Lock::leave(self, ctx)
    }
    fn set_cohort(&self, max: u32) {
        Lock::set_cohort(self, max)
    }
    fn boxed(&self) -> Box<dyn AnyLock> {
        Box::new(self.clone())
    }
}

/// Every call that takes a context, on `l` with `ctx`: `check` gets each result.
fn every_call(l: &dyn AnyLock, ctx: &Ctx, check: impl Fn(&str, loco_locks::Result<()>)) {
    let far = Instant::now() + Duration::from_secs(3600);
    check("acquire", l.acquire(ctx).map(drop));
    check("try_acquire", l.try_acquire(ctx).map(drop));
    check(
        "try_acquire_for",
        l.try_acquire_for(ctx, Duration::from_millis(5)).map(drop),
    );
    check(
        "acquire_timeout",
        l.acquire_timeout(ctx, Duration::MAX).map(drop),
    );
    check("acquire_until", l.acquire_until(ctx, far).map(drop));
    check("section", l.section(ctx).map(drop));
}

/// Locks placed on nodes the cluster does not have, and bounds of no thread: refused at
/// creation, before any memory is taken.
#[test]
fn unknown_nodes_and_empty_bounds() {
    let c = cluster(3);
    let free = |c: &Cluster| {
        c.node_ids()
            .map(|n| c.free_bytes(n).unwrap())
            .collect::<Vec<_>>()
    };
    let before = free(&c);
    for n in [NodeId(3), NodeId(u16::MAX)] {
        unknown(WLock::new(&c, n, 1));
        unknown(SLock::new(&c, n, 4));
        unknown(NLock::new(&c, n));
        unknown(RawWLock::new(&c, n, 1));
        unknown(RawSLock::new(&c, n, 1));
        unknown(RawNLock::new(&c, n));
        // Too many threads for memory, on an unknown node: refused either way.
        assert!(WLock::new(&c, n, usize::MAX).is_err());
    }
    for n in [N0, N2, NodeId(9)] {
        for r in [
            WLock::new(&c, n, 0).map(drop),
            SLock::new(&c, n, 0).map(drop),
            RawWLock::new(&c, n, 0).map(drop),
        ] {
            assert!(matches!(r, Err(Error::NoThreads)), "{r:?}");
        }
    }
    assert_eq!(free(&c), before, "a refused lock took memory");
    // The errors say what is wrong.
    let e = NLock::new(&c, NodeId(3)).unwrap_err().to_string();
    assert!(e.contains("unknown node"), "{e}");
    assert_eq!(
        WLock::new(&c, N0, 0).unwrap_err().to_string(),
        "a lock needs room for at least one thread"
    );
    // The accessors report what the lock was made with.
    let w = WLock::new(&c, N2, 3).unwrap();
    assert_eq!((w.raw().ticket_node(), w.raw().max_threads()), (N2, 3));
    let s = SLock::new(&c, N1, 1).unwrap();
    assert_eq!((s.raw().ticket_node(), s.raw().max_threads()), (N1, 1));
    assert_eq!(NLock::new(&c, N2).unwrap().raw().node(), N2);
}

/// A lock of one cluster used with the context of another: `ForeignContext` from every call,
/// also when the other cluster has more nodes than the lock's (the context's node is not one
/// of the lock's), and nothing is taken.
#[test]
fn a_context_of_another_cluster() {
    let a = cluster(2);
    let b = cluster(5);
    for l in each(&a, N1, 2) {
        for n in [N0, NodeId(4)] {
            let ctx = b.context(n).unwrap();
            every_call(&*l, &ctx, |what, r| {
                let e = r.unwrap_err();
                assert!(
                    matches!(e, Error::ForeignContext { ctx, lock } if ctx == b.id() && lock == a.id()),
                    "{} {what}: {e:?}",
                    l.name()
                );
            });
            foreign(l.release(&ctx));
            foreign(l.held(&ctx));
            foreign(l.is_held(&ctx));
            foreign(l.leave(&ctx));
            let e = l.release(&ctx).unwrap_err().to_string();
            assert!(e.contains("context of cluster"), "{e}");
        }
        // The lock's own threads are not disturbed: all the slots of the weak locks are free.
        let (x, y) = (a.context(N0).unwrap(), a.context(N1).unwrap());
        assert_eq!(l.section(&x).unwrap(), 0, "{}", l.name());
        assert_eq!(l.section(&y).unwrap(), 1, "{}", l.name());
    }
}

/// Acquiring a lock the thread holds: `AlreadyHeld` naming its ticket from every acquire, even
/// one with no time limit or no time at all, at once rather than after a timeout; the hold is
/// untouched.
#[test]
fn reentrant_acquires_are_refused() {
    let c = cluster(3);
    for cohort in [0, 3] {
        for l in each(&c, N2, 2) {
            l.set_cohort(cohort);
            let ctx = c.context(N0).unwrap();
            let t = l.acquire(&ctx).unwrap();
            let past = Instant::now() - Duration::from_millis(1);
            already(l.acquire(&ctx), t);
            already(l.try_acquire(&ctx), t);
            for d in [Duration::ZERO, Duration::from_millis(1), Duration::MAX] {
                already(l.try_acquire_for(&ctx, d), t);
                already(l.acquire_timeout(&ctx, d), t);
            }
            already(l.acquire_until(&ctx, past), t);
            already(l.section(&ctx), t);
            // Leaving while holding is refused too: the hold stays.
            already(l.leave(&ctx), t);
            assert_eq!(l.held(&ctx).unwrap(), Some(t), "{}", l.name());
            l.release(&ctx).unwrap();
            assert!(matches!(l.release(&ctx), Err(Error::NotHeld)));
            assert_eq!(l.section(&ctx).unwrap(), t + 1, "{}", l.name());
        }
    }
}

/// Two contexts of one node on one OS thread are two threads of the model: the second waits
/// for the first, which cannot release meanwhile, so its acquire runs into its timeout
/// (`Timeout`, the cluster's for a plain acquire) instead of hanging; `try_acquire` says the
/// lock is taken.
#[test]
fn two_contexts_of_one_thread() {
    let c = cluster(2);
    for l in each(&c, N1, 2) {
        let (a, b) = (c.context(N0).unwrap(), c.context(N0).unwrap());
        let t = l.acquire(&a).unwrap();
        assert_eq!(l.try_acquire(&b).unwrap(), None, "{}", l.name());
        timeout(l.try_acquire_for(&b, Duration::from_millis(20)));
        timeout(l.acquire_timeout(&b, Duration::from_millis(20)));
        timeout(l.acquire(&b));
        assert_eq!(l.held(&b).unwrap(), None);
        // Nothing was stranded by the timeouts: the holder releases, the other enters.
        l.release(&a).unwrap();
        assert!(l.section(&b).unwrap() > t, "{}", l.name());
        assert!(l.section(&a).unwrap() > t, "{}", l.name());
    }
}

/// Time limits at their ends: zero and a deadline in the past (nothing to wait for: the
/// lock is taken if it is free, else `Timeout`), and `Duration::MAX` or a deadline far off
/// (no practical limit). Whatever a zero-time try leaves behind is passed by later tickets:
/// nothing is lost.
#[test]
fn zero_and_huge_time_limits() {
    for s in SCHEDULES {
        let c = cluster_on(3, s);
        for l in each(&c, N1, 3) {
            let ctx = c.context(N2).unwrap();
            let past = Instant::now() - Duration::from_secs(1);
            let mut last = None;
            for i in 0..40 {
                let r = match i % 3 {
                    0 => l.try_acquire_for(&ctx, Duration::ZERO),
                    1 => l.acquire_timeout(&ctx, Duration::ZERO),
                    _ => l.acquire_until(&ctx, past),
                };
                match r {
                    Ok(t) => {
                        assert!(last < Some(t), "{}: {last:?} then {t}", l.name());
                        last = Some(t);
                        l.release(&ctx).unwrap();
                    }
                    Err(Error::Timeout { after }) => {
                        assert_eq!(after, Duration::ZERO, "{}", l.name());
                        assert_eq!(l.held(&ctx).unwrap(), None);
                    }
                    Err(e) => panic!("{} {s:?}: {e:?}", l.name()),
                }
            }
            for t in [Duration::MAX, Duration::from_secs(u64::MAX)] {
                let a = l.try_acquire_for(&ctx, t).unwrap();
                l.release(&ctx).unwrap();
                let b = l.acquire_timeout(&ctx, t).unwrap();
                l.release(&ctx).unwrap();
                assert!(a < b && last < Some(a), "{}", l.name());
                last = Some(b);
            }
            let far = Instant::now() + Duration::from_secs(10 * 365 * 86_400);
            l.acquire_until(&ctx, far).unwrap();
            l.release(&ctx).unwrap();
            // Another thread's plain acquire is not blocked by what the tries gave up.
            let (l2, c2) = (l.boxed(), c.clone());
            thread::spawn(move || l2.section(&c2.context(N0).unwrap()))
                .join()
                .unwrap()
                .unwrap();
        }
    }
}

/// A waiter with no practical time limit gets the lock when its holder, on another thread,
/// releases it.
#[test]
fn an_unbounded_waiter_gets_the_lock() {
    let c = cluster_on(2, Schedule::Threaded);
    for l in each(&c, N0, 2) {
        let holder = c.context(N0).unwrap();
        let t = l.acquire(&holder).unwrap();
        let start = Arc::new(Barrier::new(2));
        let (l2, c2, start2) = (l.boxed(), c.clone(), start.clone());
        let waiter = thread::spawn(move || {
            let ctx = c2.context(N1).unwrap();
            start2.wait();
            l2.acquire_timeout(&ctx, Duration::MAX)
                .and_then(|t| l2.release(&ctx).map(|()| t))
        });
        start.wait();
        thread::sleep(Duration::from_millis(5));
        l.release(&holder).unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), t + 1, "{}", l.name());
    }
}

/// Releasing, querying or leaving a lock the thread never used: `NotHeld`, `false`, nothing;
/// and none of them takes one of a weak lock's thread slots, so the threads that do use it
/// are not refused with `TooManyThreads`.
#[test]
fn queries_of_a_lock_never_used_take_nothing() {
    let c = cluster(2);
    for l in [
        Box::new(WLock::new(&c, N1, 1).unwrap()) as Box<dyn AnyLock>,
        Box::new(SLock::new(&c, N0, 1).unwrap()),
        Box::new(NLock::new(&c, N1).unwrap()),
    ] {
        let idle = c.context(N0).unwrap();
        assert!(
            matches!(l.release(&idle), Err(Error::NotHeld)),
            "{}",
            l.name()
        );
        assert!(!l.is_held(&idle).unwrap());
        assert_eq!(l.held(&idle).unwrap(), None);
        l.leave(&idle).unwrap();
        l.leave(&idle).unwrap();
        // The one thread the weak locks were made for uses them.
        let user = c.context(N1).unwrap();
        let t = l.acquire(&user).unwrap();
        assert!(!l.is_held(&idle).unwrap());
        assert!(matches!(l.release(&idle), Err(Error::NotHeld)));
        l.release(&user).unwrap();
        assert_eq!(l.section(&user).unwrap(), t + 1);
        l.leave(&user).unwrap();
        // After leaving, the slot serves the next thread.
        assert!(l.section(&idle).unwrap() > t + 1, "{}", l.name());
    }
}

/// A weak lock's bound counts threads using it at once: of more threads than it was made for,
/// exactly the extra ones are refused with `TooManyThreads` (none hangs), and the others go on.
#[test]
fn more_threads_than_a_weak_lock_admits() {
    let c = cluster_on(3, Schedule::Threaded);
    for l in [
        Box::new(WLock::new(&c, N0, 3).unwrap()) as Box<dyn AnyLock>,
        Box::new(SLock::new(&c, N1, 3).unwrap()),
    ] {
        let registered = Arc::new(Barrier::new(6));
        let workers: Vec<_> = (0..6u16)
            .map(|i| {
                let (l, c, registered) = (l.boxed(), c.clone(), registered.clone());
                thread::spawn(move || {
                    let ctx = c.context(NodeId(i % 3)).unwrap();
                    let first = l.section(&ctx);
                    registered.wait(); // nobody leaves before every thread has tried
                    match first {
                        Ok(_) => (0..5)
                            .try_for_each(|_| l.section(&ctx).map(drop))
                            .map(|()| 1),
                        Err(Error::TooManyThreads { max: 3 }) => Ok(0),
                        Err(e) => Err(e),
                    }
                })
            })
            .collect();
        let admitted: usize = workers
            .into_iter()
            .map(|w| w.join().unwrap().unwrap())
            .sum();
        assert_eq!(admitted, 3, "{}", l.name());
        // Their contexts are gone: the slots serve new threads.
        let ctx = c.context(N2).unwrap();
        l.section(&ctx).unwrap();
    }
}

/// Many threads, more than a node's 16 `waiting` slots on one node, with and without cohorts:
/// every section counted once, no acquire fails.
#[test]
fn many_threads_on_one_node() {
    const THREADS: usize = 20;
    const SECTIONS: usize = 5;
    let c = Cluster::builder()
        .nodes(2)
        .memory_per_node(1 << 14)
        .soft(Schedule::Threaded)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    for cohort in [0, 2] {
        for l in each(&c, N1, THREADS) {
            l.set_cohort(cohort);
            let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let workers: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (l, c) = (l.boxed(), c.clone());
                    let (inside, count) = (inside.clone(), count.clone());
                    thread::spawn(move || -> loco_locks::Result<()> {
                        use std::sync::atomic::Ordering::SeqCst;
                        let ctx = c.context(N0)?;
                        for _ in 0..SECTIONS {
                            l.acquire(&ctx)?;
                            assert_eq!(inside.fetch_add(1, SeqCst), 0, "two inside");
                            count.fetch_add(1, SeqCst);
                            inside.fetch_sub(1, SeqCst);
                            l.release(&ctx)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap().unwrap();
            }
            assert_eq!(
                count.load(std::sync::atomic::Ordering::SeqCst),
                THREADS * SECTIONS,
                "{}",
                l.name()
            );
        }
    }
}

/// A one-node cluster: every kind works, across several contexts of the node, with and
/// without cohorts.
#[test]
fn a_one_node_cluster() {
    let c = cluster(1);
    for cohort in [0, 1] {
        for l in each(&c, N0, 3) {
            l.set_cohort(cohort);
            let (a, b) = (c.context(N0).unwrap(), c.context(N0).unwrap());
            let t = l.section(&a).unwrap();
            assert_eq!(l.section(&b).unwrap(), t + 1);
            let ta = l.acquire(&a).unwrap();
            assert_eq!(l.try_acquire(&b).unwrap(), None);
            l.release(&a).unwrap();
            assert!(l.try_acquire_for(&b, Duration::from_secs(5)).unwrap() > ta);
            l.release(&b).unwrap();
        }
    }
    unknown(NLock::new(&c, N1));
}

/// After `Cluster::shutdown`: every acquire fails with `Shutdown` rather than blocking, a hold
/// from before cannot be released on the network (`Shutdown` again, and a guard dropped then
/// logs it, never panics; the hold ends there, so the thread's next acquire is refused with
/// `Shutdown` too, not `AlreadyHeld`), and none of this hangs.
#[test]
fn after_shutdown() {
    for s in SCHEDULES {
        let c = cluster_on(3, s);
        let locks = each(&c, N1, 3);
        let ctx = c.context(N0).unwrap();
        let holds: Vec<u64> = locks.iter().map(|l| l.acquire(&ctx).unwrap()).collect();
        let idle = c.context(N2).unwrap();
        let nlock = NLock::new(&c, N2).unwrap();
        let g = nlock.acquire(&ctx).unwrap();
        c.shutdown();
        for (l, &t) in locks.iter().zip(&holds) {
            every_call(&**l, &idle, |what, r| match r {
                Err(e) => assert!(
                    matches!(rdma(&e), loco_rdmawait::Error::Shutdown),
                    "{} {what} {s:?}: {e:?}",
                    l.name()
                ),
                Ok(()) => panic!("{} {what} {s:?}: acquired after shutdown", l.name()),
            });
            already(l.acquire(&ctx), t);
            shut(l.release(&ctx));
            // The failed release ended the hold: the thread is refused as every thread is.
            shut(l.acquire(&ctx));
            let _ = l.is_held(&ctx);
            let _ = l.leave(&idle);
            let _ = l.leave(&ctx);
        }
        shut(LockGuard::release(g));
        // New locks: refused, or made and then refused at acquire.
        if let Ok(l) = NLock::new(&c, N0) {
            shut(l.acquire(&idle).map(drop));
        }
        if let Ok(l) = WLock::new(&c, N0, 1) {
            shut(l.acquire(&idle).map(drop));
        }
    }
}

/// A lock whose home node died: every acquire fails with `PeerDead` naming it, from threads
/// of live nodes; a thread of the dead node is told its own node is dead. A live holder's
/// release of the weak and strong locks goes on among the live nodes.
#[test]
fn a_dead_home() {
    for s in SCHEDULES {
        let c = cluster_on(3, s);
        let locks = each(&c, N2, 3);
        let on_dead = c.context(N2).unwrap();
        let ctx = c.context(N0).unwrap();
        c.kill(N2).unwrap();
        for l in &locks {
            every_call(&**l, &ctx, |what, r| match r {
                Err(e) => assert!(
                    matches!(rdma(&e), loco_rdmawait::Error::PeerDead { node, .. } if *node == N2),
                    "{} {what} {s:?}: {e:?}",
                    l.name()
                ),
                Ok(()) => panic!("{} {what} {s:?}: acquired a lock of a dead node", l.name()),
            });
            dead(l.acquire(&on_dead), N2);
            assert_eq!(l.held(&ctx).unwrap(), None);
        }
        // A lock made on the dead node: refused at creation or at acquire.
        match NLock::new(&c, N2) {
            Ok(l) => dead(l.acquire(&ctx).map(drop), N2),
            Err(e) => assert!(matches!(rdma(&e), loco_rdmawait::Error::PeerDead { .. })),
        }
        match WLock::new(&c, N2, 1) {
            Ok(l) => dead(l.acquire(&ctx).map(drop), N2),
            Err(e) => assert!(matches!(rdma(&e), loco_rdmawait::Error::PeerDead { .. })),
        }
    }
}

/// A lock on a live node used by a thread whose own node died: `PeerDead` naming that node;
/// the other threads go on.
#[test]
fn a_thread_of_a_dead_node() {
    for s in SCHEDULES {
        let c = cluster_on(3, s);
        for l in each(&c, N0, 3) {
            let on_dead = c.context(N2).unwrap();
            let t = l.section(&on_dead).unwrap();
            c.kill(N2).unwrap();
            every_call(&*l, &on_dead, |what, r| match r {
                Err(e) => assert!(
                    matches!(rdma(&e), loco_rdmawait::Error::PeerDead { node, .. } if *node == N2),
                    "{} {what} {s:?}: {e:?}",
                    l.name()
                ),
                Ok(()) => panic!("{} {what} {s:?}: a dead node's thread entered", l.name()),
            });
            let ctx = c.context(N1).unwrap();
            assert!(l.section(&ctx).unwrap() > t, "{}", l.name());
            c.restart(N2).unwrap();
        }
    }
}

/// A holder whose node dies: the next thread of a live node gets the lock, told it is
/// poisoned. The dead holder's context is told its node is dead (`PeerDead` naming it) by
/// every call, its acquire too (which said `AlreadyHeld`), also once the node has restarted
/// (then, as documented, the others are not let past the hold: not checked here).
#[test]
fn a_holder_that_dies() {
    for s in SCHEDULES {
        for restart in [false, true] {
            let c = cluster_on(3, s);
            for l in each(&c, N0, 3) {
                let holder = c.context(N2).unwrap();
                let t = l.acquire(&holder).unwrap();
                c.kill(N2).unwrap();
                if restart {
                    c.restart(N2).unwrap();
                } else {
                    let ctx = c.context(N1).unwrap();
                    let (next, poisoned) =
                        l.poisoned_section(&ctx, Duration::from_secs(10)).unwrap();
                    assert!(
                        next > t && poisoned,
                        "{} {s:?}: {next} {poisoned}",
                        l.name()
                    );
                    // Reported once.
                    let (_, again) = l.poisoned_section(&ctx, Duration::from_secs(10)).unwrap();
                    assert!(!again, "{}", l.name());
                }
                dead(l.acquire(&holder), N2);
                dead(l.try_acquire(&holder), N2);
                dead(l.release(&holder), N2);
                dead(l.leave(&holder), N2);
                if !restart {
                    c.restart(N2).unwrap();
                }
            }
        }
    }
}

/// A context dropped while it holds (its guard forgotten): the lock stays held, as documented,
/// and the other threads' acquires run into their timeout (`Timeout`) rather than hanging; the
/// lock's home and the other locks are not affected.
#[test]
fn a_context_dropped_while_holding() {
    let c = Cluster::builder()
        .nodes(3)
        .soft(Schedule::Threaded)
        .timeout(Duration::from_millis(100)) // each plain acquire below runs into it
        .build()
        .unwrap();
    for l in each(&c, N0, 3) {
        drop({
            let a = c.context(N1).unwrap();
            l.acquire(&a).unwrap();
            a
        });
        for n in [N1, N2] {
            let ctx = c.context(n).unwrap();
            timeout(l.acquire_timeout(&ctx, Duration::from_millis(20)));
            timeout(l.try_acquire_for(&ctx, Duration::from_millis(20)));
            assert_eq!(l.try_acquire(&ctx).unwrap(), None, "{}", l.name());
            timeout(l.acquire(&ctx));
        }
    }
    let fresh = NLock::new(&c, N0).unwrap();
    LockGuard::release(fresh.acquire(&c.context(N2).unwrap()).unwrap()).unwrap();
}

/// A thread that holds a lock when the lock's home dies (and perhaps restarts): its release
/// fails with `PeerDead` naming the home and ends the hold, and so does an acquire by that
/// thread (it said `AlreadyHeld` for good: every release failed, so the thread could neither
/// acquire nor leave again). A thread of the holder's node queued behind it is refused with
/// `PeerDead` too, rather than handed the hold or left to time out.
#[test]
fn a_holder_whose_home_dies() {
    for s in SCHEDULES {
        for (restart, release_first, cohort) in
            (0..8).map(|i| (i & 1 == 1, i & 2 == 2, if i & 4 == 4 { 2 } else { 0 }))
        {
            for k in 0..3 {
                let c = cluster_on(3, s);
                let l = each(&c, N0, 3).swap_remove(k);
                let what = format!("{} {s:?} restart {restart} cohort {cohort}", l.name());
                l.set_cohort(cohort);
                let a = c.context(N1).unwrap();
                let t = l.acquire(&a).unwrap();
                let queued = Arc::new(Barrier::new(2));
                let (l2, c2, queued2) = (l.boxed(), c.clone(), queued.clone());
                let waiter = thread::spawn(move || {
                    let ctx = c2.context(N1).unwrap();
                    queued2.wait();
                    l2.acquire_timeout(&ctx, Duration::from_secs(30))
                });
                queued.wait();
                thread::sleep(Duration::from_millis(2)); // let it queue (either way is fine)
                c.kill(N0).unwrap();
                if restart {
                    c.restart(N0).unwrap();
                }
                assert_eq!(l.held(&a).unwrap(), Some(t), "{what}: not told yet");
                if release_first {
                    dead(l.release(&a), N0);
                } else {
                    dead(l.acquire(&a), N0);
                    assert!(matches!(l.release(&a), Err(Error::NotHeld)), "{what}");
                }
                assert_eq!(l.held(&a).unwrap(), None, "{what}");
                dead(l.acquire(&a), N0);
                dead(l.try_acquire_for(&a, Duration::from_millis(5)), N0);
                dead(waiter.join().unwrap(), N0);
            }
        }
    }
}

/// Each protocol names itself as the bench and the litmus tests do.
#[test]
fn each_protocol_says_its_name() {
    let c = cluster(3);
    assert_eq!(WLock::new(&c, N1, 2).unwrap().raw().name(), "wlock");
    assert_eq!(SLock::new(&c, N1, 2).unwrap().raw().name(), "slock");
    assert_eq!(NLock::new(&c, N2).unwrap().raw().name(), "nlock");
}

/// The bound's message reads right for a lock of one thread ("at most 1 thread", once "at most
/// 1 threads").
#[test]
fn too_many_threads_says_thread_in_the_singular_for_one() {
    let one = Error::TooManyThreads { max: 1 }.to_string();
    assert!(one.contains("at most 1 thread,"), "{one}");
    let three = Error::TooManyThreads { max: 3 }.to_string();
    assert!(three.contains("at most 3 threads,"), "{three}");
}
