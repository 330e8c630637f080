//! A new user's failures around the ported structures (`PortedQueue`, `PortedHashMap`) with
//! many threads: the structure's node killed while every thread works on it, and a thread that
//! dies inside its critical section. Each thread ends with a typed error naming the dead node,
//! none hangs, and a critical section cut short writes nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use loco_rdmawait::testing::{self, assert_peer_dead};
use loco_rdmawait::NodeId;
use loco_sc::{
    BoundedQueue, Error, FixedHashMap, MapOp, MapRet, PortedHashMap, PortedQueue, Sequential,
};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

/// Operations, in all, before the structures' node is killed.
const BEFORE_KILL: u64 = 200;

/// Five threads on every node (one on the structures' node itself) push and pop a small queue
/// and insert into and remove from a small map, both on n1, full or not, until an operation
/// fails; n1 is killed while they run. Every thread's failure is `PeerDead` naming n1: not a
/// timeout, not a layout error from a half-written state.
#[test]
fn the_structures_node_killed_while_threads_work() {
    for s in testing::soft_schedules(5) {
        let c = testing::short_cluster(3, 1 << 16, s);
        let q = PortedQueue::new_on(&c, N1, &BoundedQueue::new(4)).unwrap();
        let m = PortedHashMap::new_on(&c, N1, &FixedHashMap::with_buckets(8)).unwrap();
        let done = AtomicU64::new(0);
        let errors: Vec<Error> = std::thread::scope(|scope| {
            let threads: Vec<_> = [0, 2, 0, 2, 1]
                .into_iter()
                .enumerate()
                .map(|(t, n)| {
                    let (c, q, m, done) = (&c, &q, &m, &done);
                    scope.spawn(move || {
                        // The thread on n1 may start after the kill: refused the same way.
                        let ctx = match c.context(NodeId(n)) {
                            Ok(ctx) => ctx,
                            Err(e) => return Error::from(e),
                        };
                        for k in 0u64.. {
                            let r = if k % 2 == 0 {
                                match q.push(&ctx, k) {
                                    Err(Error::QueueFull { .. }) => q.pop(&ctx).map(drop),
                                    r => r,
                                }
                            } else {
                                match m.insert(&ctx, k % 16, t as u64) {
                                    Err(Error::MapFull { .. }) => m.remove(&ctx, (k % 16) ^ 1),
                                    r => r,
                                }
                                .map(drop)
                            };
                            done.fetch_add(1, Ordering::SeqCst);
                            if let Err(e) = r {
                                return e;
                            }
                        }
                        unreachable!("the loop ends with an error")
                    })
                })
                .collect();
            while done.load(Ordering::SeqCst) < BEFORE_KILL {
                std::thread::yield_now();
            }
            c.kill(N1).unwrap();
            threads.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in errors {
            assert_peer_dead::<(), _>(Err(e), N1);
        }
        // The survivors' other work goes on.
        let q0 = PortedQueue::new_on(&c, N0, &BoundedQueue::new(1)).unwrap();
        let ctx = c.context(N2).unwrap();
        q0.push(&ctx, 1).unwrap();
        assert_eq!(q0.pop(&ctx).unwrap(), Some(1));
    }
}

/// A thread whose node dies inside its critical section, after changing words (which are only
/// put back when the operation returns): its operation fails with `PeerDead` naming its node and
/// writes nothing; a thread waiting for the lock gets it, is told (`Words::was_poisoned`: the
/// lock's poisoning used to be dropped by `Ported::with`, so that nothing could tell a state
/// left by a cut-short critical section), and finds the queue as it was.
#[test]
fn a_thread_dies_inside_its_critical_section() {
    for s in testing::soft_schedules(5) {
        let c = testing::short_cluster(3, 1 << 16, s);
        let q = PortedQueue::new_on(&c, N1, &BoundedQueue::new(4)).unwrap();
        let ctx = c.context(N0).unwrap();
        q.push(&ctx, 10).unwrap();
        let inside = Barrier::new(2);
        std::thread::scope(|scope| {
            let dying = scope.spawn(|| {
                let ctx2 = c.context(N2).unwrap();
                q.with(&ctx2, |w| {
                    // A push of 77 written by hand: slot 1, length 2.
                    w.write(3, 77)?;
                    w.write(1, 2)?;
                    inside.wait();
                    c.kill(N2).unwrap();
                    Ok(())
                })
            });
            inside.wait();
            // Waits for the dying thread's lock; gets it once that thread's node is dead, and is
            // told that the critical section before it did not finish.
            let poisoned = q
                .with(&ctx, |w| {
                    let poisoned = w.was_poisoned();
                    let len = w.read(1)?;
                    w.write(3, 11)?;
                    w.write(1, len + 1)?;
                    Ok(poisoned)
                })
                .unwrap();
            assert!(poisoned, "{s:?}: the next holder is told");
            assert_peer_dead(dying.join().unwrap(), N2);
        });
        // Told once.
        assert!(!q.with(&ctx, |w| Ok(w.was_poisoned())).unwrap(), "{s:?}");
        assert_eq!(q.pop(&ctx).unwrap(), Some(10), "{s:?}");
        assert_eq!(q.pop(&ctx).unwrap(), Some(11), "{s:?}: 77 was never pushed");
        assert_eq!(q.pop(&ctx).unwrap(), None, "{s:?}");
    }
}

/// A map of more buckets than its node can hold: refused with `OutOfMemory` before its layout
/// is built in host memory, as a queue of too many slots is (`FixedHashMap::with_buckets` used
/// to allocate every bucket at once: 2^40 buckets aborted the process, `usize::MAX` panicked).
/// The local map of that many buckets works.
#[test]
fn a_map_too_big_for_its_node() {
    let c = testing::short_cluster(2, 4096, loco_rdmawait::Schedule::Immediate);
    let free = c.free_bytes(N1).unwrap();
    for buckets in [1 << 40, usize::MAX] {
        let mut big = FixedHashMap::with_buckets(buckets);
        assert_eq!(big.apply(MapOp::Insert(u64::MAX, 1)), MapRet::Value(None));
        assert_eq!(big.apply(MapOp::Insert(0, 2)), MapRet::Value(None));
        assert_eq!(big.get(u64::MAX), Some(1));
        assert_eq!(big.apply(MapOp::Remove(0)), MapRet::Value(Some(2)));
        assert_eq!((big.len(), big.buckets()), (1, buckets));
        let e = PortedHashMap::new_on(&c, N1, &big).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Rdma(loco_rdmawait::Error::OutOfMemory { node: N1, .. })
            ),
            "{e:?}"
        );
    }
    assert_eq!(c.free_bytes(N1).unwrap(), free, "nothing taken");
}
