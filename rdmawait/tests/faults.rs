//! The soft NIC's failure model (issue 10, point 2): after `Cluster::kill(n)`, what depends on
//! `n` fails with `PeerDead` naming it instead of blocking, what does not keeps working; a
//! shutdown frees every blocked call. Blocked calls run on their own thread and are joined
//! through a channel with a generous bound, so that a regression fails instead of hanging.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use loco_rdmawait::{Cluster, Error, NodeId, Schedule, SoftBackend, WorkId, WorkRequest};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D1: WorkId = WorkId::new(1);
const D2: WorkId = WorkId::new(2);
/// Outer bound on anything that must not hang (not a timing assertion: see HELPERS.md).
const BOUND: Duration = Duration::from_secs(60);
const SCHEDULES: [Schedule; 3] = [
    Schedule::Immediate,
    Schedule::Threaded,
    Schedule::Chaos { seed: 11 },
];

fn soft(s: Schedule) -> (Arc<SoftBackend>, Cluster) {
    let b = Arc::new(SoftBackend::try_new(3, 64, s).unwrap());
    (b.clone(), Cluster::with_backend(Box::new(b), BOUND))
}

fn dead<T: std::fmt::Debug>(r: Result<T, Error>, n: NodeId) {
    match r {
        Err(Error::PeerDead { node, reason }) => {
            assert_eq!(node, n, "{reason}");
            assert!(!reason.is_empty());
        }
        other => panic!("expected PeerDead naming {n}, got {other:?}"),
    }
}

/// Runs `f` on a thread and returns its result, failing the test if it takes more than
/// [`BOUND`]. `started` is signalled by `f` through the sender once it is about to block.
fn bounded<T: Send + 'static>(
    f: impl FnOnce(mpsc::Sender<()>) -> T + Send + 'static,
    while_blocked: impl FnOnce(),
) -> T {
    let (started_tx, started_rx) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let _ = tx.send(f(started_tx));
    });
    started_rx
        .recv_timeout(BOUND)
        .expect("the thread got to its blocking call");
    // Give it time to really block (not a timing assertion: either way the result must hold).
    thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    while_blocked();
    let out = rx.recv_timeout(BOUND).expect("the blocked call returned");
    eprintln!("blocked call returned {:?} after the fault", t.elapsed());
    h.join().unwrap();
    out
}

#[test]
fn after_a_kill_calls_towards_and_on_the_dead_node_fail_and_the_rest_works() {
    for s in SCHEDULES {
        let (_, c) = soft(s);
        let (x, y, z) = (
            c.alloc_word(N0).unwrap(),
            c.alloc_word(N1).unwrap(),
            c.alloc_word(N2).unwrap(),
        );
        let ctx0 = c.context(N0).unwrap();
        let ctx1 = c.context(N1).unwrap();
        ctx0.store(&x, 4).unwrap();
        ctx0.put(&y, &x, D1).unwrap(); // before the kill
        ctx0.put(&z, &x, D2).unwrap();
        c.kill(N1).unwrap();
        dead(c.check_alive(N1), N1);
        // Towards n1: refused at post, nothing tracked.
        dead(ctx0.put(&y, &x, D2), N1);
        dead(ctx0.get(&x, &y, D2), N1);
        dead(ctx0.rfence(N1), N1);
        dead(
            ctx0.post(
                N1,
                WorkRequest::FetchAdd {
                    remote: 0,
                    add: 1,
                    local: 0,
                },
                D2,
            ),
            N1,
        );
        // The request posted before the kill: completed (Immediate runs it at once, Threaded's
        // engine may have run it before the kill) or failed, never blocking.
        match ctx0.wait(D1) {
            Ok(()) => assert!(
                matches!(s, Schedule::Immediate | Schedule::Threaded),
                "{s:?}: only a schedule with an engine of its own may have run it"
            ),
            Err(Error::PeerDead { node: N1, .. }) => {}
            Err(e) => panic!("{s:?}: {e}"),
        }
        assert_eq!(ctx0.unpolled(N1).unwrap(), 0);
        // Towards live nodes: unaffected.
        ctx0.wait(D2).unwrap();
        ctx0.get(&x, &z, D2).unwrap();
        ctx0.wait(D2).unwrap();
        assert_eq!(ctx0.load(&x).unwrap(), 4);
        // On n1: everything fails.
        dead(ctx1.load(&y), N1);
        dead(ctx1.store(&y, 1), N1);
        dead(ctx1.cas(&y, 0, 1), N1);
        dead(ctx1.mfence(), N1);
        dead(ctx1.put(&y, &y, D1), N1);
        dead(ctx1.put(&x, &y, D1), N1);
        dead(c.context(N1).map(|_| ()), N1);
        dead(c.peek(&y), N1);
        dead(c.poke(&y, 1), N1);
        drop(ctx1);
        // The rest of the cluster.
        let ctx2 = c.context(N2).unwrap();
        assert_eq!(ctx2.load(&z).unwrap(), 4);
        c.quiesce().unwrap();
        assert_eq!(c.peek(&z).unwrap(), 4);
        assert!(c.is_alive(N0) && c.is_alive(N2) && !c.is_alive(N1));
        // Killing twice keeps the first reason.
        c.kill(N1).unwrap();
        dead(c.check_alive(N1), N1);
    }
}

/// A thread blocked in `wait` on a request that cannot progress (its target is partitioned
/// away: a stall) returns `PeerDead` once the target is killed; requests of the same thread
/// towards a live node, posted after it, then complete.
#[test]
fn a_blocked_wait_fails_when_its_target_dies() {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 5 }] {
        let (b, c) = soft(s);
        let (x, y, z) = (
            c.alloc_word(N0).unwrap(),
            c.alloc_word(N1).unwrap(),
            c.alloc_word(N2).unwrap(),
        );
        b.stall(N1, true).unwrap();
        let c2 = c.clone();
        let (first, second, third) = bounded(
            move |started| {
                let ctx = c2.context(N0).unwrap();
                ctx.store(&x, 8).unwrap();
                ctx.put(&y, &x, D1).unwrap();
                ctx.get(&x, &y, D1).unwrap();
                ctx.put(&z, &x, D2).unwrap();
                started.send(()).unwrap();
                let first = ctx.wait_timeout(D1, Duration::MAX);
                let second = ctx.wait(D2);
                let third = ctx.unpolled(N1).unwrap();
                (first, second, third)
            },
            || c.kill(N1).unwrap(),
        );
        dead(first, N1);
        second.unwrap();
        assert_eq!(third, 0, "the failed requests were forgotten");
        c.quiesce().unwrap();
        assert_eq!(c.peek(&z).unwrap(), 8, "{s:?}");
    }
}

/// The same for a raw poll, and for a thread on the node that dies.
#[test]
fn a_blocked_poll_fails_when_its_own_node_dies() {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 9 }] {
        let (b, c) = soft(s);
        let (x, z) = (c.alloc_word(N1).unwrap(), c.alloc_word(N2).unwrap());
        b.stall(N2, true).unwrap();
        let c2 = c.clone();
        let r = bounded(
            move |started| {
                let ctx = c2.context(N1).unwrap();
                ctx.put(&z, &x, D1).unwrap();
                started.send(()).unwrap();
                ctx.rdmatso().poll_timeout(N2, Duration::MAX)
            },
            || c.kill(N1).unwrap(),
        );
        dead(r, N1);
        // n2 is stalled, not dead: quiesce has nothing left to wait for (n1's work failed).
        c.quiesce_timeout(BOUND).unwrap();
    }
}

/// `quiesce` does not wait for work towards a dead node, even work that could never run.
#[test]
fn quiesce_skips_work_towards_a_dead_node() {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 1 }] {
        let (b, c) = soft(s);
        let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap());
        let ctx = c.context(N0).unwrap();
        b.stall(N1, true).unwrap();
        for _ in 0..10 {
            ctx.put(&y, &x, D1).unwrap();
        }
        assert!(matches!(
            c.quiesce_timeout(Duration::ZERO),
            Err(Error::Timeout { .. })
        ));
        let c2 = c.clone();
        let r = bounded(
            move |started| {
                started.send(()).unwrap();
                c2.quiesce_timeout(Duration::MAX)
            },
            || c.kill(N1).unwrap(),
        );
        r.unwrap();
        dead(ctx.wait(D1), N1);
        ctx.wait(D1).unwrap(); // nothing left
    }
}

/// A shutdown frees a blocked wait, poll and quiesce with `Shutdown`.
#[test]
fn shutdown_frees_blocked_calls() {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 2 }] {
        let (b, c) = soft(s);
        let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap());
        b.stall(N1, true).unwrap();
        let (c2, c3) = (c.clone(), c.clone());
        let (tx, rx) = mpsc::channel();
        let (q_tx, q_rx) = mpsc::channel();
        let (wait, poll) = bounded(
            move |started| {
                let ctx = c2.context(N0).unwrap();
                ctx.put(&y, &x, D1).unwrap();
                ctx.put(&y, &x, D2).unwrap();
                // Work is pending now: a quiesce blocks.
                let q = thread::spawn(move || {
                    let _ = tx.send(c3.quiesce_timeout(Duration::MAX));
                });
                q_tx.send(q).unwrap();
                started.send(()).unwrap();
                let wait = ctx.wait_timeout(D1, Duration::MAX);
                let poll = ctx.rdmatso().poll_timeout(N1, Duration::MAX);
                (wait, poll)
            },
            || c.shutdown(),
        );
        assert!(matches!(wait, Err(Error::Shutdown)), "{wait:?}");
        assert!(matches!(poll, Err(Error::Shutdown)), "{poll:?}");
        let quiesce = rx.recv_timeout(BOUND).expect("quiesce returned");
        assert!(matches!(quiesce, Err(Error::Shutdown)), "{quiesce:?}");
        q_rx.recv().unwrap().join().unwrap();
        assert!(matches!(c.context(N0), Err(Error::Shutdown)));
    }
}

/// Under Chaos a killed thread's RMW may hold another node's remote-atomic lock: it is
/// released, so the survivors' RMWs on that node still complete (over many seeds, so that the
/// kill lands at every phase of the RMW).
#[test]
fn a_dead_threads_rmw_never_blocks_the_survivors() {
    for seed in 0..40 {
        let (_, c) = soft(Schedule::Chaos { seed });
        let counter = c.alloc_word(N0).unwrap();
        let (r1, r2) = (c.alloc_word(N1).unwrap(), c.alloc_word(N2).unwrap());
        let faa = |ret: &loco_rdmawait::Loc| WorkRequest::FetchAdd {
            remote: counter.offset() as usize / 8,
            add: 1,
            local: ret.offset() as usize / 8,
        };
        let ctx1 = c.context(N1).unwrap();
        let ctx2 = c.context(N2).unwrap();
        for _ in 0..3 {
            ctx1.post(N0, faa(&r1), D1).unwrap();
        }
        ctx2.post(N0, faa(&r2), D1).unwrap();
        c.kill(N1).unwrap();
        for _ in 0..3 {
            ctx2.post(N0, faa(&r2), D1).unwrap();
        }
        ctx2.wait(D1).unwrap();
        c.quiesce().unwrap();
        let v = c.peek(&counter).unwrap();
        assert!((4..=7).contains(&v), "seed {seed}: {v}");
        drop(ctx1);
    }
}

/// Dropping contexts and clusters after kills and shutdowns never panics, and a dead node's
/// contexts leave nothing behind.
#[test]
fn drops_after_faults_do_not_panic() {
    for s in SCHEDULES {
        let (b, c) = soft(s);
        let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap());
        b.stall(N1, true).unwrap();
        let ctx0 = c.context(N0).unwrap();
        let ctx1 = c.context(N1).unwrap();
        ctx0.put(&y, &x, D1).unwrap();
        ctx1.put(&x, &y, D1).unwrap();
        c.kill(N1).unwrap();
        drop(ctx1);
        c.shutdown();
        drop(ctx0);
        drop(c);
        drop(b);
    }
}

/// `Cluster::restart` (issue 10, point 3): the node comes back as a new incarnation with
/// zeroed memory; nothing posted to or by the dead incarnation lands; contexts opened before
/// report `PeerDead` towards it (on it: for everything); new contexts work with it.
#[test]
fn a_restarted_node_comes_back_fresh_and_old_contexts_report_it() {
    for s in SCHEDULES {
        let (_, c) = soft(s);
        let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap());
        let ctx0 = c.context(N0).unwrap();
        let ctx1 = c.context(N1).unwrap();
        ctx0.store(&x, 4).unwrap();
        ctx0.put(&y, &x, D1).unwrap();
        ctx0.wait(D1).unwrap();
        ctx1.store(&y, 5).unwrap();
        c.quiesce().unwrap();
        let before = c.incarnation(N1).unwrap();
        assert!(matches!(c.restart(N1), Err(Error::Backend { .. })), "alive");
        assert!(matches!(
            c.restart(NodeId(9)),
            Err(Error::UnknownNode { .. })
        ));
        // Posted before the kill, maybe not executed (Threaded, Chaos): it must never land in
        // the new incarnation.
        ctx0.store(&x, 6).unwrap();
        ctx0.put(&y, &x, D2).unwrap();
        c.kill(N1).unwrap();
        c.restart(N1).unwrap();
        c.check_alive(N1).unwrap();
        let after = c.incarnation(N1).unwrap();
        assert_ne!(after, before);
        assert_eq!(c.incarnation(N0).unwrap(), 1, "{s:?}");
        // The work of the dead incarnation is reported as failed, never silently completed.
        dead(ctx0.wait(D2), N1);
        c.quiesce().unwrap();
        assert_eq!(
            c.peek(&y).unwrap(),
            0,
            "{s:?}: fresh memory, nothing of the old landed"
        );
        // Old contexts: towards the restarted node (with the reason), and on it.
        match ctx0.put(&y, &x, D1) {
            Err(Error::PeerDead { node, reason }) => {
                assert_eq!(node, N1);
                assert!(reason.contains("restarted"), "{reason}");
            }
            other => panic!("{s:?}: {other:?}"),
        }
        dead(ctx1.load(&y), N1);
        dead(ctx1.put(&x, &y, D1), N1);
        // ctx0 still works with the others.
        ctx0.store(&x, 7).unwrap();
        ctx0.mfence().unwrap();
        // New contexts work with the new incarnation, both ways.
        let ctx1b = c.context(N1).unwrap();
        let ctx0b = c.context(N0).unwrap();
        ctx0b.put(&y, &x, D1).unwrap();
        ctx0b.wait(D1).unwrap();
        c.quiesce().unwrap();
        assert_eq!(c.peek(&y).unwrap(), 7, "{s:?}");
        ctx1b.store(&y, 8).unwrap();
        ctx1b.put(&x, &y, D1).unwrap();
        ctx1b.wait(D1).unwrap();
        c.quiesce().unwrap();
        assert_eq!(c.peek(&x).unwrap(), 8, "{s:?}");
        // And again: a second restart is a third incarnation; the second's contexts go stale.
        c.kill(N1).unwrap();
        c.restart(N1).unwrap();
        assert_ne!(c.incarnation(N1).unwrap(), after);
        dead(ctx1b.load(&y), N1);
        dead(ctx0b.put(&y, &x, D1), N1);
        drop((ctx0, ctx1, ctx0b, ctx1b));
    }
}

/// A context blocked in a wait towards a node that is killed and restarted returns
/// `PeerDead`, never a completion from the new incarnation.
#[test]
fn a_wait_blocked_across_a_restart_fails() {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 5 }] {
        let (b, c) = soft(s);
        let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N2).unwrap());
        b.stall(N2, true).unwrap();
        let (c2, b2) = (c.clone(), b.clone());
        let r = bounded(
            move |started| {
                let ctx = c2.context(N0).unwrap();
                ctx.put(&y, &x, D1).unwrap();
                started.send(()).unwrap();
                ctx.wait(D1)
            },
            move || {
                c.kill(N2).unwrap();
                b2.stall(N2, false).unwrap();
                c.restart(N2).unwrap();
            },
        );
        dead(r, N2);
    }
}

/// A dropped context reaps what it left unpolled: `Ctx::settled` turns true, and private memory
/// given back is handed out again, zeroed. One whose operations cannot complete (its target
/// stalled) stays unsettled, within the drop's bounded budget, and its memory is not reused.
#[test]
fn a_dropped_context_settles_its_operations() {
    for s in SCHEDULES {
        let b = Arc::new(SoftBackend::try_new(3, 64, s).unwrap());
        let c = Cluster::with_backend(Box::new(b.clone()), Duration::from_millis(200));
        let y = c.alloc_word(N1).unwrap();
        let ctx = c.context(N0).unwrap();
        let x = c.alloc_private(N0, 8).unwrap();
        ctx.store(&x, 7).unwrap();
        ctx.put(&y, &x, D1).unwrap(); // never waited for
        let settled = ctx.settled();
        assert!(!settled.get(), "not before the drop");
        drop(ctx);
        assert!(settled.get(), "{s:?}: the put was reaped at the drop");
        c.free_private(x).unwrap();
        let again = c.alloc_private(N0, 8).unwrap();
        assert_eq!(again, x, "{s:?}: reused");
        assert_eq!(c.peek(&again).unwrap(), 0, "zeroed on reuse");

        if s != Schedule::Immediate {
            let ctx = c.context(N0).unwrap();
            b.stall(N1, true).unwrap();
            ctx.put(&y, &again, D1).unwrap();
            let settled = ctx.settled();
            let t = Instant::now();
            drop(ctx);
            eprintln!("{s:?}: an unsettled drop took {:?}", t.elapsed());
            assert!(!settled.get(), "{s:?}: the stalled put is still in flight");
            assert!(t.elapsed() < BOUND);
            b.stall(N1, false).unwrap();
        }
    }
}

/// `free_private` takes back only private memory: shared memory, an empty location or one of
/// another cluster is never handed out by `alloc_private`.
#[test]
fn free_private_ignores_what_is_not_private() {
    let c = Cluster::builder()
        .nodes(2)
        .memory_per_node(256)
        .build()
        .unwrap();
    let shared = c.alloc_word(N0).unwrap();
    c.free_private(shared).unwrap();
    c.free_private(c.alloc_private(N0, 0).unwrap()).unwrap();
    let other = Cluster::builder().nodes(2).build().unwrap();
    assert!(c.free_private(other.alloc_private(N0, 8).unwrap()).is_err());
    let p = c.alloc_private(N0, 8).unwrap();
    assert_ne!(p, shared);
    c.free_private(p).unwrap();
    assert_eq!(c.alloc_private(N0, 8).unwrap(), p);
}

/// A private location that is not a live block is refused, and nothing is handed out twice: a
/// second free of a block, and a word of a live block, used to go on the free list, and the next
/// two allocations then shared a word.
#[test]
fn free_private_refuses_a_second_free_and_a_part_of_a_block() {
    let c = Cluster::builder()
        .nodes(2)
        .memory_per_node(256)
        .build()
        .unwrap();
    let refused = |r: Result<(), Error>| {
        assert!(matches!(r, Err(Error::NotAPrivateBlock { .. })), "{r:?}");
    };
    let p = c.alloc_private(N0, 8).unwrap();
    c.free_private(p).unwrap();
    refused(c.free_private(p));
    let (a, b) = (
        c.alloc_private(N0, 8).unwrap(),
        c.alloc_private(N0, 8).unwrap(),
    );
    assert_ne!(a, b, "one word handed out twice");
    let big = c.alloc_private(N0, 16).unwrap();
    refused(c.free_private(big.word(1).unwrap()));
    refused(c.free_private(big.word(0).unwrap()));
    let next = c.alloc_private(N0, 8).unwrap();
    assert!(next.offset() + 8 <= big.offset() || next.offset() >= big.offset() + 16);
    // The whole block goes back, once.
    c.free_private(big).unwrap();
    refused(c.free_private(big));
    assert_eq!(c.alloc_private(N0, 16).unwrap(), big);
}
