//! `bcast` and `gf` with dead nodes and edge values (issue 10, points 2 and 6): a dead node in
//! the set is named by `PeerDead`, live nodes keep working, a blocked `gf` is freed by a kill.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use loco_rdmawait::{Cluster, NodeId, Schedule, SoftBackend, WorkId};
use loco_sv::{Error, GlobalFence, SharedVar};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D: WorkId = WorkId::new(1);
const BOUND: Duration = Duration::from_secs(60);
const SCHEDULES: [Schedule; 3] = [
    Schedule::Immediate,
    Schedule::Threaded,
    Schedule::Chaos { seed: 21 },
];

fn soft(s: Schedule) -> (Arc<SoftBackend>, Cluster) {
    let b = Arc::new(SoftBackend::try_new(3, 256, s).unwrap());
    (b.clone(), Cluster::with_backend(Box::new(b), BOUND))
}

fn dead<T: std::fmt::Debug>(r: Result<T, Error>, n: NodeId) {
    assert!(
        matches!(
            &r,
            Err(Error::Rdma(loco_rdmawait::Error::PeerDead { node, .. })) if *node == n
        ),
        "expected PeerDead naming {n}, got {r:?}"
    );
}

#[test]
fn gf_and_bcast_name_the_dead_node_and_spare_the_live_ones() {
    for s in SCHEDULES {
        let (_, c) = soft(s);
        let v = SharedVar::new(&c).unwrap();
        let ctx = c.context(N0).unwrap();
        v.store(&ctx, 5).unwrap();
        ctx.gf_all().unwrap(); // allocates the fence's words while everyone is alive
        c.kill(N2).unwrap();
        dead(ctx.gf([N1, N2]), N2);
        dead(ctx.gf_all(), N2);
        dead(v.bcast(&ctx, [N1, N2], D), N2);
        assert_eq!(
            ctx.unpolled(N1).unwrap(),
            0,
            "nothing posted: nodes checked first"
        );
        v.bcast(&ctx, [N0, N1], D).unwrap();
        ctx.gf([N1]).unwrap();
        ctx.gf([N0, N1]).unwrap();
        ctx.wait(D).unwrap();
        assert_eq!(c.peek(&v.copy(N1).unwrap()).unwrap(), 5, "{s:?}");
        // The dead node's threads can do nothing.
        assert!(matches!(
            c.context(N2),
            Err(loco_rdmawait::Error::PeerDead { node: N2, .. })
        ));
    }
}

/// A `gf` blocked on a node that cannot answer (stalled) returns `PeerDead` when it dies.
#[test]
fn a_blocked_gf_fails_when_a_node_of_its_set_dies() {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 8 }] {
        let (b, c) = soft(s);
        let v = SharedVar::new(&c).unwrap();
        b.stall(N1, true).unwrap();
        let (tx, rx) = mpsc::channel();
        let (started_tx, started_rx) = mpsc::channel();
        let c2 = c.clone();
        let h = thread::spawn(move || {
            let ctx = c2.context(N0).unwrap();
            ctx.gf([N2]).unwrap(); // its words exist before the blocking fence
            v.store(&ctx, 3).unwrap();
            v.bcast(&ctx, [N1, N2], D).unwrap();
            started_tx.send(()).unwrap();
            let blocked = ctx.gf([N2, N1]);
            let after = ctx.gf([N2]);
            let _ = tx.send((blocked, after));
        });
        started_rx.recv_timeout(BOUND).unwrap();
        thread::sleep(Duration::from_millis(20));
        c.kill(N1).unwrap();
        let (blocked, after) = rx.recv_timeout(BOUND).expect("gf returned after the kill");
        h.join().unwrap();
        dead(blocked, N1);
        after.unwrap();
    }
}

#[test]
fn edge_values() {
    for s in SCHEDULES {
        let (_, c) = soft(s);
        let v = SharedVar::with_value(&c, u64::MAX).unwrap();
        let ctx = c.context(N1).unwrap();
        assert_eq!(v.load(&ctx).unwrap(), u64::MAX);
        for n in [NodeId(3), NodeId(u16::MAX)] {
            assert!(v.copy(n).is_err());
            assert!(ctx.gf([N0, n]).is_err());
            assert!(v.bcast(&ctx, [N0, n], D).is_err());
        }
        assert_eq!(ctx.unpolled(N0).unwrap(), 0);
        ctx.gf([]).unwrap();
        v.bcast(&ctx, [], D).unwrap();
        // Repeated nodes are fine: each is fenced (or sent to) again.
        v.bcast(&ctx, [N0, N0, N2], WorkId::new(u32::MAX)).unwrap();
        ctx.gf([N0, N0, N1, N1]).unwrap();
        ctx.wait(WorkId::new(u32::MAX)).unwrap();
    }
}

/// A shared variable's copies are allocated all or nothing: a node out of memory strands no
/// copy on the others.
#[test]
fn a_shared_variable_that_does_not_fit_takes_nothing() {
    let c = Cluster::builder()
        .nodes(3)
        .memory_per_node(64)
        .build()
        .unwrap();
    c.alloc_words(NodeId(2), 8).unwrap(); // n2 full
    let e = SharedVar::new(&c).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rdma(loco_rdmawait::Error::OutOfMemory {
                node: NodeId(2),
                ..
            })
        ),
        "{e:?}"
    );
    assert_eq!(c.free_bytes(NodeId(0)).unwrap(), 64);
    assert_eq!(c.free_bytes(NodeId(1)).unwrap(), 64);
}
