//! A new user's edge cases of `rcas`/`rfaa` not covered by `edge_values.rs`: after a shutdown,
//! from a context whose own node died, towards a node that restarted, zero-timeout waits, both
//! failed-CAS modes at the ends of the value range, and a loop-back RMW whose return word is
//! its target. Each is a typed error or what the crate docs say, on every soft schedule.
//! (No bug was found here; these pin down the documented behaviour.)

use std::time::Duration;

use loco_rdmawait::testing::{assert_peer_dead, assert_shutdown, short_cluster, soft_schedules};
use loco_rdmawait::{Cluster, Error, FailedCas, NodeId, WorkId};
use loco_rdmawaitrmw::Rmw;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D: WorkId = WorkId::new(1);

/// After `Cluster::shutdown`, both RMWs fail with `Shutdown` and post nothing; a zero-timeout
/// wait does not block.
#[test]
fn after_shutdown() {
    for s in soft_schedules(3) {
        let c = short_cluster(2, 4096, s);
        let (t, r) = (c.alloc_word(N1).unwrap(), c.alloc_word(N0).unwrap());
        let ctx = c.context(N0).unwrap();
        c.shutdown();
        assert_shutdown(ctx.rfaa(&t, 1, &r, D));
        assert_shutdown(ctx.rcas(&t, 0, 1, &r, D));
        assert_eq!(ctx.unpolled(N1).unwrap(), 0, "{s:?}");
        ctx.wait_timeout(D, Duration::ZERO).unwrap();
    }
}

/// A context whose own node died: `PeerDead` naming that node, loop-back RMWs too. A context
/// opened before its target restarted: `PeerDead` naming the target; a new context reaches the
/// new incarnation.
#[test]
fn dead_callers_and_restarted_targets() {
    for s in soft_schedules(3) {
        let c = short_cluster(3, 4096, s);
        let t = c.alloc_word(N1).unwrap();
        let (r0, r2) = (c.alloc_word(N0).unwrap(), c.alloc_word(N2).unwrap());
        let (ctx0, old2) = (c.context(N0).unwrap(), c.context(N2).unwrap());
        c.kill(N0).unwrap();
        assert_peer_dead(ctx0.rfaa(&t, 1, &r0, D), N0);
        assert_peer_dead(ctx0.rcas(&r0, 0, 1, &r0, D), N0);
        c.kill(N1).unwrap();
        c.restart(N1).unwrap();
        assert_peer_dead(old2.rfaa(&t, 1, &r2, D), N1);
        assert_peer_dead(old2.rcas(&t, 0, 1, &r2, D), N1);
        let ctx2 = c.context(N2).unwrap();
        ctx2.rfaa(&t, 5, &r2, D).unwrap();
        ctx2.rcas(&t, 5, u64::MAX, &r2, D).unwrap();
        ctx2.wait(D).unwrap();
        assert_eq!(ctx2.load(&r2).unwrap(), 5, "{s:?}");
        c.quiesce().unwrap();
        assert_eq!(
            c.peek(&t).unwrap(),
            u64::MAX,
            "{s:?}: the new incarnation's word"
        );
    }
}

/// Zero-timeout waits for RMWs either succeed or time out, consuming nothing; the values at
/// the ends of the range behave alike whether a failed CAS writes back (rxe) or not.
#[test]
fn zero_timeouts_and_failed_cas_modes() {
    for s in soft_schedules(3) {
        for mode in [FailedCas::Reads, FailedCas::WritesBack] {
            let c = Cluster::builder()
                .nodes(2)
                .soft(s)
                .failed_cas(mode)
                .build()
                .unwrap();
            let (t, r) = (c.alloc_word(N1).unwrap(), c.alloc_word(N0).unwrap());
            let ctx = c.context(N0).unwrap();
            ctx.rfaa(&t, u64::MAX, &r, D).unwrap();
            loop {
                match ctx.wait_timeout(D, Duration::ZERO) {
                    Ok(()) => break,
                    Err(Error::Timeout { .. }) => std::thread::yield_now(),
                    Err(e) => panic!("{s:?} {mode:?}: {e:?}"),
                }
            }
            assert_eq!(ctx.load(&r).unwrap(), 0);
            // Unequal: nothing swapped; equal with the same value: nothing changes either.
            ctx.rcas(&t, 0, 5, &r, D).unwrap();
            ctx.rcas(&t, u64::MAX, u64::MAX, &r, D).unwrap();
            ctx.rfaa(&t, 1, &r, D).unwrap();
            ctx.wait(D).unwrap();
            assert_eq!(ctx.load(&r).unwrap(), u64::MAX, "{s:?} {mode:?}");
            c.quiesce().unwrap();
            assert_eq!(c.peek(&t).unwrap(), 0, "{s:?} {mode:?}: u64::MAX + 1 wraps");
        }
    }
}

/// A loop-back RMW whose return word is its own target: the word ends up holding the old value
/// or the result, nothing else (which one is not specified, see the crate docs).
#[test]
fn a_return_word_that_is_the_target() {
    for s in soft_schedules(3) {
        let c = short_cluster(1, 4096, s);
        let w = c.alloc_word(N0).unwrap();
        let ctx = c.context(N0).unwrap();
        ctx.store(&w, 7).unwrap();
        ctx.rfaa(&w, 1, &w, D).unwrap();
        ctx.wait(D).unwrap();
        let v = ctx.load(&w).unwrap();
        assert!(v == 7 || v == 8, "{s:?}: {v}");
        ctx.rcas(&w, v, u64::MAX, &w, D).unwrap();
        ctx.wait(D).unwrap();
        let after = ctx.load(&w).unwrap();
        assert!(after == v || after == u64::MAX, "{s:?}: {after}");
    }
}
