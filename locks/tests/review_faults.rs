//! Defects found by reviews of the locks' failure paths: what a thread whose own node died is
//! told about its hold, and `Lock::combine` when a section panics, when its combiner's wait or
//! release fails, and when the combiner itself panics while taking the lock.
//!
//! No timed assertions: bounds are generous, and only outcomes are checked.


use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, SLock, WLock};
use loco_rdmawait::testing;
use loco_rdmawait::{Cluster, Ctx, NodeId, Schedule};

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
