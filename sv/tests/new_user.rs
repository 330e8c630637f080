//! A new user's edge values for every public function of `loco-sv` on the soft NIC: each returns
//! a typed error or does what its docs say, and none panics or hangs.

use loco_rdmawait::testing::{
    assert_peer_dead as dead, assert_shutdown as shut, assert_unknown_node as unknown,
};
use loco_rdmawait::{testing, Cluster, NodeId, Schedule, WorkId};
use loco_sv::{gf_words, protocol, GlobalFence, SharedVar};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

/// The soft NIC's schedules: the shutdown and dead-node tests run under each.
const SCHEDULES: [Schedule; 3] = testing::soft_schedules(3);

fn cluster(nodes: usize) -> Cluster {
    cluster_on(nodes, Schedule::Chaos { seed: 3 })
}

/// Waits time out after `testing::SHORT_TIMEOUT`: an operation that wrongly blocks fails the
/// test quickly instead of hanging it.
fn cluster_on(nodes: usize, schedule: Schedule) -> Cluster {
    testing::short_cluster(nodes, 4096, schedule)
}

/// Values at the ends of their ranges, unknown nodes, empty and repeated node lists.
#[test]
fn edge_values_and_node_lists() {
    let c = cluster(3);
    let v = SharedVar::with_value(&c, u64::MAX).unwrap();
    assert_eq!(v.copies().len(), 3);
    let ctx = c.context(N1).unwrap();
    assert_eq!(v.local(&ctx).unwrap(), v.copy(N1).unwrap());
    assert_eq!(v.load(&ctx).unwrap(), u64::MAX);
    v.store(&ctx, 0).unwrap();
    assert_eq!(v.load(&ctx).unwrap(), 0);
    for n in [NodeId(3), NodeId(u16::MAX)] {
        unknown(v.copy(n));
        unknown(v.bcast(&ctx, [n], WorkId::new(0)));
        unknown(ctx.gf([n]));
        unknown(gf_words(&ctx, &[N0, n]));
    }
    // Nothing was posted by the refused calls.
    for n in c.node_ids() {
        assert_eq!(ctx.unpolled(n).unwrap(), 0);
    }
    // Empty lists, the own node only, repeats: nothing or the same thing again.
    v.bcast(&ctx, [], WorkId::new(0)).unwrap();
    v.bcast(&ctx, [N1], WorkId::new(0)).unwrap();
    assert_eq!(ctx.unpolled(N1).unwrap(), 0, "no loop-back put");
    ctx.gf([]).unwrap();
    gf_words(&ctx, &[]).unwrap();
    v.store(&ctx, 5).unwrap();
    v.bcast(&ctx, [N2, N2, N0, N1], WorkId::new(u32::MAX))
        .unwrap();
    ctx.wait(WorkId::new(u32::MAX)).unwrap();
    ctx.gf([N2, N0, N2, N0]).unwrap();
    for n in c.node_ids() {
        assert_eq!(c.peek(&v.copy(n).unwrap()).unwrap(), 5);
    }
    ctx.gf_all().unwrap();
    // A one-node cluster: bcast and gf towards itself only.
    let one = cluster(1);
    let s = SharedVar::new(&one).unwrap();
    let ctx = one.context(N0).unwrap();
    s.store(&ctx, 1).unwrap();
    s.bcast(&ctx, one.node_ids(), WorkId::new(0)).unwrap();
    ctx.gf_all().unwrap();
    assert_eq!(s.load(&ctx).unwrap(), 1);
}

/// `protocol::gf` with dummy words that stop short of a node of its set (words the caller made
/// for a smaller cluster, or none): `UnknownNode` naming it, before anything is posted (it
/// panicked, indexing past the words). The words of `gf_words` cover every node.
#[test]
fn protocol_gf_with_too_few_dummy_words() {
    let c = cluster(3);
    let ctx = c.context(N0).unwrap();
    let full = gf_words(&ctx, &[N0, N1, N2]).unwrap();
    // A put towards n2 still in flight: the fence cannot leave n2 out as fenced already.
    let (local, remote) = (c.alloc_word(N0).unwrap(), c.alloc_word(N2).unwrap());
    ctx.put(&remote, &local, WorkId::new(1)).unwrap();
    let unpolled = |ctx: &loco_rdmawait::Ctx| {
        c.node_ids()
            .map(|n| ctx.unpolled(n).unwrap())
            .collect::<Vec<_>>()
    };
    let before = unpolled(&ctx);
    for len in [0, 1, 2] {
        let short = protocol::GfWords {
            dummy: full.dummy[..len].to_vec(),
            scratch: full.scratch,
        };
        let e = protocol::gf(&mut &ctx, &short, &[N0, N2]).unwrap_err();
        // The first node of the set without a word is named.
        let missing = if len == 0 { N0 } else { N2 };
        assert!(
            matches!(e, loco_rdmawait::Error::UnknownNode { node, nodes }
                if node == missing && nodes == len),
            "{e:?}"
        );
        let count = match len {
            0 => "no nodes".to_string(),
            1 => "1 node, n0".to_string(),
            n => format!("{n} nodes, n0 to n{}", n - 1),
        };
        assert_eq!(
            e.to_string(),
            format!("unknown node {missing} (the cluster has {count})")
        );
        assert_eq!(unpolled(&ctx), before, "posted before refusing");
    }
    // Words that cover the set, if not the cluster, fence it.
    let two = protocol::GfWords {
        dummy: full.dummy[..2].to_vec(),
        scratch: full.scratch,
    };
    protocol::gf(&mut &ctx, &two, &[N1, N0]).unwrap();
    protocol::gf(&mut &ctx, &full, &[N2, N1, N0]).unwrap();
    protocol::gf(&mut &ctx, &two, &[]).unwrap();
}

/// Every call after `Cluster::shutdown` that would post fails with `Shutdown`; CPU accesses to
/// the local copy and a fence with nothing left to fence post nothing and may still succeed;
/// none blocks.
#[test]
fn after_shutdown() {
    for s in SCHEDULES {
        let c = cluster_on(3, s);
        let v = SharedVar::with_value(&c, 4).unwrap();
        let ctx = c.context(N0).unwrap();
        // A broadcast to n1 that no fence has followed: a gf towards n1 has to post.
        v.bcast(&ctx, [N1], WorkId::new(0)).unwrap();
        c.shutdown();
        let _ = v.load(&ctx);
        let _ = v.store(&ctx, 1);
        shut(v.bcast(&ctx, [N1], WorkId::new(0)));
        shut(ctx.gf([N1]));
        shut(ctx.gf_all());
        // The put's completion may have come before the shutdown: it is still delivered.
        let _ = ctx.wait(WorkId::new(0));
        // Nothing of the thread's is on its way to n2: the fence needs nothing from the NICs.
        let _ = ctx.gf([N2]);
        ctx.gf([]).unwrap();
        let _ = SharedVar::new(&c);
        let _ = SharedVar::with_value(&c, 1);
        assert!(c.context(N1).is_err());
    }
}

/// A context whose own node died, and a set that names a dead node.
#[test]
fn a_dead_node() {
    for s in SCHEDULES {
        let c = cluster_on(3, s);
        let v = SharedVar::new(&c).unwrap();
        let on_dead = c.context(N2).unwrap();
        let ctx = c.context(N0).unwrap();
        c.kill(N2).unwrap();
        dead(v.load(&on_dead), N2);
        dead(v.store(&on_dead, 1), N2);
        dead(v.bcast(&on_dead, [N0], WorkId::new(0)), N2);
        dead(on_dead.gf([N0]), N2);
        dead(v.bcast(&ctx, [N1, N2], WorkId::new(0)), N2);
        dead(ctx.gf([N2, N1]), N2);
        dead(ctx.gf_all(), N2);
        ctx.gf([N0, N1]).unwrap();
        // A new variable still has a copy on the dead node (for when it restarts), which cannot be
        // initialised while it is dead.
        let w = SharedVar::new(&c).unwrap();
        assert_eq!(w.copies().len(), 3);
        dead(SharedVar::with_value(&c, 1), N2);
    }
}

/// `with_value` on a cluster with a dead node fails with `PeerDead` naming it, and keeps the
/// copies it took: the next allocations get the locations they get where the call succeeded
/// (in a cluster of several processes, each process's layout follows the order of its calls,
/// so a process that saw the node dead must not fall out of step with one that did not).
#[test]
fn with_value_on_a_dead_node_fails_and_keeps_the_layout() {
    let a = cluster(3);
    let b = cluster(3);
    a.kill(N1).unwrap();
    dead(SharedVar::with_value(&a, 7), N1);
    SharedVar::with_value(&b, 7).unwrap();
    for n in [N0, N1, N2] {
        let (x, y) = (a.alloc_word(n).unwrap(), b.alloc_word(n).unwrap());
        assert_eq!((x.node(), x.offset()), (y.node(), y.offset()), "{n}");
    }
}
