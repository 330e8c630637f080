//! A new user's review of `loco-sc`: defects found by using the public API as documented, each
//! pinned by a test that failed before its fix.

use loco_rdmawait::{testing, Cluster, NodeId, Schedule};
use loco_sc::{BoundedQueue, Error, PortedQueue, Sc, ScLoc};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);

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
