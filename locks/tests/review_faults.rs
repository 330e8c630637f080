//! Defects found by reviews of the locks' failure paths: what a thread whose own node died is
//! told about its hold, and `Lock::combine` when a section panics, when its combiner's wait or
//! release fails, and when the combiner itself panics while taking the lock.
//!
//! No timed assertions: bounds are generous, and only outcomes are checked.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, SLock, WLock};
use loco_rdmawait::testing;
use loco_rdmawait::{Cluster, Ctx, NodeId, Schedule};

/// Generous bound on anything the tests wait for (not a measurement: a hang fails the test).
const BOUND: Duration = Duration::from_secs(60);

fn is_peer_dead(r: &loco_locks::Result<impl std::fmt::Debug>, node: NodeId) -> bool {
    matches!(r, Err(Error::Rdma(loco_rdmawait::Error::PeerDead { node: n, .. })) if *n == node)
}

/// A holder on n1 (its guard kept), then n1 is killed: the hold is no longer the thread's to
/// report. `is_held` and `RawLock::held` fail with `PeerDead` naming n1, as the context's
/// acquire and release do (the Failures table), not `Ok(true)`; a thread of a live node that
/// does not hold is told `false`; and the context of the dead incarnation keeps saying so after
/// n1 restarts.
fn held_by_a_dead_node<R: RawLock + 'static>(c: &Cluster, l: Lock<R>) {
    let name = l.raw().name();
    let holder = c.context(NodeId(1)).unwrap();
    let other = c.context(NodeId(0)).unwrap();
    let g = l.acquire(&holder).unwrap();
    assert!(l.is_held(&holder).unwrap(), "{name}");
    assert!(!l.is_held(&other).unwrap(), "{name}");
    c.quiesce().unwrap();
    c.kill(NodeId(1)).unwrap();
    let r = l.is_held(&holder);
    assert!(is_peer_dead(&r, NodeId(1)), "{name}: is_held says {r:?}");
    let r = l.raw().held(&holder);
    assert!(is_peer_dead(&r, NodeId(1)), "{name}: held says {r:?}");
    let r = l.acquire(&holder).map(|_| ());
    assert!(is_peer_dead(&r, NodeId(1)), "{name}: acquire says {r:?}");
    assert!(!l.is_held(&other).unwrap(), "{name}");
    // The survivors go on (the dead holder's ticket is skipped).
    let g0 = l.acquire(&other).unwrap();
    assert!(LockGuard::was_poisoned(&g0), "{name}");
    assert!(l.is_held(&other).unwrap(), "{name}");
    LockGuard::release(g0).unwrap();
    c.restart(NodeId(1)).unwrap();
    let r = l.is_held(&holder);
    assert!(
        is_peer_dead(&r, NodeId(1)),
        "{name}: after the restart, is_held of the old context says {r:?}"
    );
    let r = LockGuard::release(g);
    assert!(is_peer_dead(&r, NodeId(1)), "{name}: release says {r:?}");
    let fresh = c.context(NodeId(1)).unwrap();
    assert!(!l.is_held(&fresh).unwrap(), "{name}");
    // (Not acquired here: a weak or strong lock's copies on a restarted node read 0 until the
    // next release reaches them, a documented limit.)
}

#[test]
fn a_hold_whose_node_died_is_not_reported_held() {
    for k in 0..3 {
        let c = testing::short_cluster(3, 1 << 14, Schedule::Threaded);
        match k {
            0 => held_by_a_dead_node(&c, NLock::new(&c, NodeId(2)).unwrap()),
            1 => held_by_a_dead_node(&c, WLock::new(&c, NodeId(2), 4).unwrap()),
            _ => held_by_a_dead_node(&c, SLock::new(&c, NodeId(2), 4).unwrap()),
        }
    }
}

/// The node's combining thread kills its own node inside a section that then panics: the
/// combiner's landing (or its batch's wait) fails, but the section's panic is what its caller
/// gets (resumed, with its payload), not `Error::Combined`: a panic is not to be lost.
#[test]
fn a_panic_in_a_section_whose_combiner_then_fails_is_resumed() {
    let c = testing::short_cluster(2, 1 << 12, Schedule::Threaded);
    let l = NLock::new(&c, NodeId(1)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    let c2 = c.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        l.combine(&ctx, move |_: &Ctx| -> u64 {
            c2.kill(NodeId(0)).unwrap();
            panic!("boom after a kill")
        })
    }));
    match r {
        Err(p) => assert_eq!(p.downcast_ref::<&str>(), Some(&"boom after a kill")),
        Ok(r) => panic!("the section's panic was lost: combine returned {r:?}"),
    }
}

/// The same with several threads of the node, so that the panicking section may run in another
/// thread's batch (whose wait then fails): its caller still panics with the payload, and every
/// other thread ends with an error (or its section's result), none hangs.
#[test]
fn a_panic_in_a_failed_batch_is_resumed_in_its_caller() {
    for _ in 0..4 {
        let c = testing::short_cluster(2, 1 << 14, Schedule::Threaded);
        let l = NLock::new(&c, NodeId(1)).unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let all = Arc::new(std::sync::Barrier::new(4));
        for t in 0..4 {
            let (c, l, started, tx) = (c.clone(), l.clone(), started.clone(), tx.clone());
            let all = all.clone();
            std::thread::spawn(move || {
                let ctx = c.context(NodeId(0)).unwrap();
                all.wait();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
                    let n = started.fetch_add(1, SeqCst);
                    let c2 = c.clone();
                    let r = l.combine(&ctx, move |_: &Ctx| {
                        if t == 0 && n >= 40 {
                            c2.kill(NodeId(0)).unwrap();
                            panic!("boom in a batch");
                        }
                    });
                    if let Err(e) = r {
                        break e;
                    }
                }));
                let _ = tx.send((t, r));
            });
        }
        drop(tx);
        for _ in 0..4 {
            let (t, r): (_, std::thread::Result<Error>) = rx.recv_timeout(BOUND).expect("a hang");
            match (t, r) {
                (0, Err(p)) => assert_eq!(p.downcast_ref::<&str>(), Some(&"boom in a batch")),
                (0, Ok(e)) => panic!("the section's panic was lost: {e:?}"),
                (_, Err(_)) => panic!("thread {t} panicked"),
                (_, Ok(_)) => {}
            }
        }
    }
}

/// `combine` of a section that sets its flag, then kills the lock's node (n1).
type Combine = Box<dyn Fn(&Ctx, Arc<AtomicBool>) -> loco_locks::Result<u64>>;

/// Which lock, for the tests run over every kind.
fn each_on_n1(c: &Cluster) -> Vec<Combine> {
    fn f<R: RawLock + 'static>(l: Lock<R>, c: &Cluster) -> Combine {
        let c = c.clone();
        Box::new(move |ctx, ran| {
            let c = c.clone();
            l.combine(ctx, move |_: &Ctx| {
                ran.store(true, SeqCst);
                // The lock's node dies inside the section: its combiner's release fails.
                c.kill(NodeId(1)).unwrap();
                7
            })
        })
    }
    vec![
        f(NLock::new(c, NodeId(1)).unwrap(), c),
        f(WLock::new(c, NodeId(1), 4).unwrap(), c),
        f(SLock::new(c, NodeId(1), 4).unwrap(), c),
    ]
}

/// The combiner's release fails after its own section ran (the lock's node died inside it): the
/// caller is told that the section ran and its combiner then failed (`Error::Combined`), as a
/// section run by another thread is, not the raw release error, which `combine` returns only
/// for a section that did not run (a combiner that could not take the lock).
#[test]
fn a_combiner_whose_release_fails_after_its_section_ran_says_combined() {
    for k in 0..3 {
        let c = testing::short_cluster(2, 1 << 14, Schedule::Threaded);
        let combine = each_on_n1(&c).swap_remove(k);
        let ctx = c.context(NodeId(0)).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = combine(&ctx, ran.clone());
        assert!(ran.load(SeqCst), "kind {k}");
        assert!(matches!(&r, Err(Error::Combined { .. })), "kind {k}: {r:?}");
        // Now the lock cannot be taken: the section does not run, and the error is the raw one.
        let ran = Arc::new(AtomicBool::new(false));
        let r = combine(&ctx, ran.clone());
        assert!(!ran.load(SeqCst), "kind {k}");
        assert!(is_peer_dead(&r, NodeId(1)), "kind {k}: {r:?}");
    }
}

/// A raw lock whose next `acquire_until` panics (a protocol's bug, or a lock from outside the
/// crate), or whose next release fails after releasing (as a strong lock's release whose fence
/// times out does).
#[derive(Debug)]
struct Faulty {
    inner: NLock,
    panic_acquire: AtomicBool,
    fail_release: AtomicBool,
}

impl Faulty {
    fn new(inner: NLock) -> Self {
        Faulty {
            inner,
            panic_acquire: AtomicBool::new(false),
            fail_release: AtomicBool::new(false),
        }
    }

    fn released(&self, r: loco_locks::Result<()>) -> loco_locks::Result<()> {
        r?;
        if self.fail_release.swap(false, SeqCst) {
            return Err(Error::Timeout {
                after: Duration::from_secs(1),
            });
        }
        Ok(())
    }
}

impl RawLock for Faulty {
    fn acquire(&self, ctx: &Ctx) -> loco_locks::Result<u64> {
        self.inner.raw().acquire(ctx)
    }
    fn try_acquire(&self, ctx: &Ctx) -> loco_locks::Result<Option<u64>> {
        self.inner.raw().try_acquire(ctx)
    }
    fn release(&self, ctx: &Ctx) -> loco_locks::Result<()> {
        self.released(self.inner.raw().release(ctx))
    }
    fn held(&self, ctx: &Ctx) -> loco_locks::Result<Option<u64>> {
        self.inner.raw().held(ctx)
    }
    fn acquire_until(&self, ctx: &Ctx, deadline: std::time::Instant) -> loco_locks::Result<u64> {
        if self.panic_acquire.swap(false, SeqCst) {
            panic!("boom in acquire");
        }
        self.inner.raw().acquire_until(ctx, deadline)
    }
    fn release_poisoned(&self, ctx: &Ctx) -> loco_locks::Result<()> {
        self.released(self.inner.raw().release_poisoned(ctx))
    }
    fn poisoned(&self, ctx: &Ctx) -> loco_locks::Result<bool> {
        self.inner.raw().poisoned(ctx)
    }
}

/// The combiner's release fails (nothing else does) after its own section ran: `combine` says
/// `Error::Combined` (the section ran, its combiner then failed), not the release's raw error,
/// which would read as "the lock could not be taken, the section did not run". The lock works
/// on.
#[test]
fn a_combiner_whose_release_alone_fails_says_combined() {
    let c = testing::short_cluster(2, 1 << 14, Schedule::Threaded);
    let l = Lock::from_raw(Faulty::new(NLock::new(&c, NodeId(1)).unwrap()));
    let ctx = c.context(NodeId(0)).unwrap();
    l.raw().fail_release.store(true, SeqCst);
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = ran.clone();
    let r = l.combine(&ctx, move |_: &Ctx| r2.store(true, SeqCst));
    assert!(ran.load(SeqCst));
    assert!(
        matches!(&r, Err(Error::Combined { reason }) if reason.contains("not acquired")),
        "{r:?}"
    );
    assert!(!l.is_held(&ctx).unwrap());
    assert!(matches!(l.combine(&ctx, |_: &Ctx| 3), Ok(3)));
}

/// A combiner that panics while taking the lock: its caller gets the panic, and its section
/// leaves the node's queue, so that later sections of the node (its own next one, another
/// thread's) are combined as usual instead of waiting behind a section nobody will run until
/// they time out.
#[test]
fn a_combiner_that_panics_in_its_acquire_leaves_the_queue_clean() {
    let c = testing::short_cluster(2, 1 << 14, Schedule::Threaded);
    let l = Lock::from_raw(Faulty::new(NLock::new(&c, NodeId(1)).unwrap()));
    l.raw().panic_acquire.store(true, SeqCst);
    let ctx = c.context(NodeId(0)).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = ran.clone();
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        l.combine(&ctx, move |_: &Ctx| r2.store(true, SeqCst))
    }))
    .expect_err("the acquire's panic reaches the caller");
    assert_eq!(p.downcast_ref::<&str>(), Some(&"boom in acquire"));
    assert!(!ran.load(SeqCst), "the section ran without the lock");
    assert!(!l.is_held(&ctx).unwrap());
    let r = l.combine(&ctx, |_: &Ctx| 5);
    assert!(matches!(r, Ok(5)), "the same thread: {r:?}");
    let (c2, l2) = (c.clone(), l.clone());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let ctx = c2.context(NodeId(0)).unwrap();
        let _ = tx.send(l2.combine(&ctx, |_: &Ctx| 6));
    });
    let r = rx.recv_timeout(BOUND).expect("a hang");
    assert!(matches!(r, Ok(6)), "another thread: {r:?}");
}
