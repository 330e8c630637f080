//! A new user's review of `loco-sc`: defects found by using the public API as documented, each
//! pinned by a test that failed before its fix.

use loco_rdmawait::{testing, Cluster, NodeId, Schedule};
use loco_sc::{BoundedQueue, Error, FixedHashMap, PortedHashMap, PortedQueue, Sc, ScLoc};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

fn cluster(nodes: usize) -> Cluster {
    testing::short_cluster(nodes, 4096, Schedule::Chaos { seed: 5 })
}

fn out_of_memory<T: std::fmt::Debug>(r: Result<T, Error>, node: NodeId) {
    let e = r.unwrap_err();
    assert!(
        matches!(e, Error::Rdma(loco_rdmawait::Error::OutOfMemory { node: n, .. }) if n == node),
        "{e:?}"
    );
}

/// A structure whose layout fits its node but not with its node lock: refused with
/// `OutOfMemory` and nothing taken. (The lock was allocated first and the layout's allocation
/// then failed, stranding the lock's 400 bytes for good: allocations are never freed.) The same
/// for an SC location on a node with less room than a lock.
#[test]
fn an_object_that_does_not_fit_with_its_lock_takes_nothing() {
    let c = cluster(2);
    let free = c.free_bytes(N1).unwrap();
    // Layout: 2 header words and the slots, exactly the node's memory.
    let q = BoundedQueue::new((free / 8) as usize - 2);
    out_of_memory(PortedQueue::new_on(&c, N1, &q), N1);
    assert_eq!(c.free_bytes(N1).unwrap(), free, "memory stranded");

    // Fill n1 until less than a lock's worth is left; an SC location there is refused whole.
    let lock = loco_locks::RawNLock::bytes(c.nodes());
    c.alloc(N1, free - lock + 8).unwrap();
    let left = c.free_bytes(N1).unwrap();
    out_of_memory(ScLoc::new_on(&c, N1, 0), N1);
    assert_eq!(c.free_bytes(N1).unwrap(), left, "memory stranded");

    // The other node, with room, still takes both.
    let x = ScLoc::new_on(&c, N0, 1).unwrap();
    let ctx = c.context(N1).unwrap();
    assert_eq!(ctx.faa_sc(&x, 1).unwrap(), 1);
}

/// A model of a structure that could not be made (a queue of no slot) panics where
/// `SequentialModel::new` documents it, naming the layout error. (It was made, and `check`
/// panicked later, mid-search, with "model states are valid encodings".)
#[test]
#[should_panic(expected = "the initial state's layout does not decode")]
fn a_model_of_a_structure_that_cannot_be_made_panics_at_new() {
    let _ = loco_sc::lincheck::SequentialModel::new(&BoundedQueue::new(0));
}

/// `PeerDead` naming `node`, with a reason that contains `says`.
fn peer_dead<T: std::fmt::Debug>(r: Result<T, Error>, node: NodeId, says: &str) {
    let e = r.unwrap_err();
    assert!(
        matches!(&e, Error::Rdma(loco_rdmawait::Error::PeerDead { node: n, reason })
            if *n == node && reason.contains(says)),
        "{e:?}"
    );
}

/// Objects whose node restarted ([`Cluster::restart`]): their words came back zeroed, so every
/// operation is refused with `PeerDead` naming the node and saying to make the object again
/// (it said to make "the lock" again, which an SC user never made), and so is `peek`, which
/// read the zeroed words as the object's state (0, an empty queue). Objects of live nodes go
/// on, and an object made after the restart works.
#[test]
fn objects_of_a_restarted_node_are_refused_with_their_own_reason() {
    let c = cluster(3);
    let x = ScLoc::new_on(&c, N1, 5).unwrap();
    let q = PortedQueue::new_on(&c, N1, &BoundedQueue::new(2)).unwrap();
    let map = PortedHashMap::new_on(&c, N1, &FixedHashMap::with_buckets(2)).unwrap();
    let live = ScLoc::new_on(&c, N2, 7).unwrap();
    let unused = ScLoc::new_on(&c, N1, 9).unwrap(); // never used before the restart
    let ctx = c.context(N0).unwrap();
    q.push(&ctx, 1).unwrap();
    map.insert(&ctx, 1, 1).unwrap();
    assert_eq!(ctx.read_sc(&x).unwrap(), 5);
    c.kill(N1).unwrap();
    c.restart(N1).unwrap();
    let says = "make this SC location or ported structure again";
    for (k, ctx) in [c.context(N0).unwrap(), c.context(N1).unwrap()]
        .into_iter()
        .enumerate()
    {
        for l in [&x, &unused] {
            peer_dead(ctx.read_sc(l), N1, says);
            peer_dead(ctx.write_sc(l, 1), N1, says);
            peer_dead(ctx.cas_sc(l, 0, 1), N1, says);
            peer_dead(ctx.faa_sc(l, 1), N1, says);
        }
        peer_dead(q.push(&ctx, 2), N1, says);
        peer_dead(q.pop(&ctx), N1, says);
        peer_dead(map.get(&ctx, 1), N1, says);
        peer_dead(map.insert(&ctx, 2, 2), N1, says);
        assert_eq!(ctx.faa_sc(&live, 1).unwrap(), 7 + k as u64);
    }
    peer_dead(x.peek(&c), N1, says);
    peer_dead(unused.peek(&c), N1, says);
    peer_dead(q.peek(&c), N1, says);
    peer_dead(map.peek(&c), N1, says);
    // Made again on the restarted node: works.
    let y = ScLoc::new_on(&c, N1, 3).unwrap();
    let q2 = PortedQueue::new_on(&c, N1, &BoundedQueue::new(2)).unwrap();
    let ctx = c.context(N0).unwrap();
    assert_eq!(ctx.faa_sc(&y, 1).unwrap(), 3);
    q2.push(&ctx, 4).unwrap();
    assert_eq!(q2.pop(&ctx).unwrap(), Some(4));
    c.quiesce().unwrap();
    assert_eq!(y.peek(&c).unwrap(), 4);
}
