//! A new user's edge values for the public functions of `loco-sc` on the soft NIC: each returns
//! a typed error or does what its docs say, and none panics or hangs.

mod common;

use loco_rdmawait::testing::{assert_peer_dead as dead, assert_shutdown as shut};
use loco_rdmawait::{testing, Cluster, NodeId, RdmaCause, Schedule};
use loco_sc::lincheck::{self, Call, Register, RegisterOp};
use loco_sc::{
    BoundedQueue, Decoder, Encoder, Error, FixedHashMap, LayoutError, MapOp, MapRet, Ported,
    PortedHashMap, PortedQueue, QueueOp, QueueRet, Sc, ScLoc, Sequential,
};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

/// The soft NIC's schedules: the shutdown and dead-node tests run under each.
const SCHEDULES: [Schedule; 3] = testing::soft_schedules(8);

fn cluster(nodes: usize) -> Cluster {
    cluster_on(nodes, Schedule::Chaos { seed: 8 })
}

/// Waits time out after `testing::SHORT_TIMEOUT`: an operation that wrongly blocks fails the
/// test quickly instead of hanging it.
fn cluster_on(nodes: usize, schedule: Schedule) -> Cluster {
    testing::short_cluster(nodes, common::MEMORY, schedule)
}

fn rdma(e: &Error) -> &loco_rdmawait::Error {
    e.rdma()
        .unwrap_or_else(|| panic!("not an rdmawait error: {e:?}"))
}

fn out_of_layout<T: std::fmt::Debug>(r: Result<T, Error>) {
    let e = r.unwrap_err();
    assert!(
        matches!(e, Error::Layout(LayoutError::OutOfLayout { .. })),
        "{e:?}"
    );
}

/// The ends of the value ranges: wrapping adds, u64::MAX keys and values, zero.
#[test]
fn extreme_values() {
    let c = cluster(3);
    let x = ScLoc::new(&c, u64::MAX).unwrap();
    let ctx = c.context(N2).unwrap();
    assert_eq!(ctx.read_sc(&x).unwrap(), u64::MAX);
    assert_eq!(ctx.faa_sc(&x, 1).unwrap(), u64::MAX);
    assert_eq!(ctx.read_sc(&x).unwrap(), 0, "faa wraps");
    assert_eq!(ctx.faa_sc(&x, u64::MAX).unwrap(), 0);
    assert_eq!(ctx.cas_sc(&x, u64::MAX, 0).unwrap(), u64::MAX);
    assert_eq!(ctx.cas_sc(&x, u64::MAX, 1).unwrap(), 0, "no swap");
    ctx.write_sc(&x, u64::MAX).unwrap();
    assert_eq!(ctx.read_sc(&x).unwrap(), u64::MAX);
    c.quiesce().unwrap();
    assert_eq!(x.peek(&c).unwrap(), u64::MAX);

    let map = PortedHashMap::new(&c, &FixedHashMap::with_buckets(2)).unwrap();
    for k in [0, u64::MAX] {
        assert_eq!(map.insert(&ctx, k, u64::MAX).unwrap(), None);
        assert_eq!(map.cas(&ctx, k, u64::MAX, 0).unwrap(), Some(u64::MAX));
        assert_eq!(map.get(&ctx, k).unwrap(), Some(0));
    }
    assert_eq!(map.len(&ctx).unwrap(), 2);
    assert_eq!(map.remove(&ctx, 7).unwrap(), None);
    assert_eq!(map.cas(&ctx, 7, 0, 1).unwrap(), None);
    assert_eq!(map.remove(&ctx, u64::MAX).unwrap(), Some(0));

    // Zero sizes: nothing to keep on a node.
    assert!(matches!(
        PortedHashMap::new(&c, &FixedHashMap::with_buckets(0)).unwrap_err(),
        Error::Layout(LayoutError::Empty)
    ));
    assert!(matches!(
        PortedQueue::new(&c, &BoundedQueue::new(0)).unwrap_err(),
        Error::Layout(LayoutError::Invalid { .. })
    ));
    let q = PortedQueue::new(&c, &BoundedQueue::new(1)).unwrap();
    assert_eq!(q.pop(&ctx).unwrap(), None);
    q.push(&ctx, u64::MAX).unwrap();
    assert_eq!(q.len(&ctx).unwrap(), 1);
    assert_eq!(q.pop(&ctx).unwrap(), Some(u64::MAX));
    assert_eq!(q.capacity(), 1);
    assert_eq!(q.apply(&ctx, QueueOp::Len).unwrap(), QueueRet::Len(0));
}

/// `Ported::with` given word indices at the end of `usize`: `OutOfLayout`, not an overflow.
#[test]
fn word_indices_at_the_end_of_usize() {
    let c = cluster(2);
    let map = PortedHashMap::new_on(&c, N1, &FixedHashMap::with_buckets(1)).unwrap();
    let ctx = c.context(N0).unwrap();
    out_of_layout(map.with(&ctx, |w| w.read(usize::MAX)));
    out_of_layout(map.with(&ctx, |w| w.write(usize::MAX, 1)));
    out_of_layout(map.with(&ctx, |w| w.write_range(usize::MAX, &[1])));
    out_of_layout(map.with(&ctx, |w| w.write_range(2, &[1, 2])));
    out_of_layout(map.with(&ctx, |w| w.read_range(usize::MAX - 1..usize::MAX)));
    out_of_layout(map.with(&ctx, |w| w.prefetch(3..4)));
    // A backwards range is its own mistake, not one of the layout's bounds.
    #[allow(clippy::reversed_empty_ranges)]
    let e = map.with(&ctx, |w| w.read_range(2..1)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Layout(LayoutError::BackwardsRange {
                start: 2,
                end: 1,
                ..
            })
        ),
        "{e:?}"
    );
    // Empty ranges inside the layout are nothing to do.
    map.with(&ctx, |w| {
        assert!(!w.is_known(usize::MAX));
        assert_eq!(w.read_range(3..3)?, Vec::<u64>::new());
        w.write_range(3, &[])?;
        w.prefetch_all(&[])?;
        assert_eq!(w.round_trips(), 0);
        Ok(())
    })
    .unwrap();
    // The lock was released after every refusal.
    assert_eq!(map.apply(&ctx, MapOp::Len).unwrap(), MapRet::Len(0));
}

/// A structure's operation inside its own `with` on the same thread: the lock is already held,
/// a typed error, not a deadlock.
#[test]
fn an_operation_inside_its_own_critical_section() {
    let c = cluster(2);
    let q = PortedQueue::new_on(&c, N1, &BoundedQueue::new(2)).unwrap();
    let ctx = c.context(N0).unwrap();
    let e = q.with(&ctx, |_| q.push(&ctx, 1)).unwrap_err();
    assert!(
        matches!(e, Error::Lock(loco_locks::Error::AlreadyHeld { .. })),
        "{e:?}"
    );
    q.push(&ctx, 2).unwrap();
    assert_eq!(q.pop(&ctx).unwrap(), Some(2));
}

/// The encoder and decoder at the ends of `usize`: padding past the layout is counted, not
/// looped over word by word, and reported by `finish`.
#[test]
fn encoder_and_decoder_edges() {
    let mut out = [7u64; 3];
    let mut e = Encoder::new(&mut out);
    e.push(1);
    e.pad(usize::MAX);
    assert_eq!(e.position(), usize::MAX);
    e.push(2);
    assert_eq!(e.position(), usize::MAX);
    assert_eq!(
        e.finish(),
        Err(LayoutError::DoesNotFit {
            needed: usize::MAX,
            words: 3
        })
    );
    let mut out = [7u64; 3];
    let mut e = Encoder::new(&mut out);
    e.push(1);
    e.pad(1);
    e.finish().unwrap();
    assert_eq!(out, [1, 0, 0]);
    // A queue that says it has usize::MAX slots does not fit a small layout (and says so at
    // once).
    let big = BoundedQueue::new(usize::MAX);
    assert_eq!(big.words(), usize::MAX);
    assert!(matches!(
        big.encode(&mut [0; 3]),
        Err(LayoutError::DoesNotFit { .. })
    ));
    let mut d = Decoder::new(&[]);
    assert_eq!(d.remaining(), 0);
    assert!(matches!(
        d.next_at_most(usize::MAX, "x"),
        Err(LayoutError::OutOfLayout { index: 0, words: 0 })
    ));
    let mut d = Decoder::new(&[u64::MAX]);
    assert_eq!(d.next_at_most(usize::MAX, "x"), Ok(usize::MAX));
}

/// Every operation after `Cluster::shutdown` fails with `Shutdown` rather than blocking; making
/// objects and inspecting them post nothing.
#[test]
fn after_shutdown() {
    for s in SCHEDULES {
        let c = cluster_on(2, s);
        let x = ScLoc::new_on(&c, N1, 1).unwrap();
        let map = PortedHashMap::new_on(&c, N1, &FixedHashMap::with_buckets(2)).unwrap();
        let q = PortedQueue::new_on(&c, N0, &BoundedQueue::new(2)).unwrap();
        let ctx = c.context(N0).unwrap();
        ctx.write_sc(&x, 2).unwrap();
        c.shutdown();
        shut(ctx.read_sc(&x));
        shut(ctx.write_sc(&x, 3));
        shut(ctx.cas_sc(&x, 2, 3));
        shut(ctx.faa_sc(&x, 1));
        shut(map.insert(&ctx, 1, 1));
        shut(map.get(&ctx, 1));
        shut(map.len(&ctx));
        shut(q.push(&ctx, 1));
        shut(q.pop(&ctx));
        shut(q.with(&ctx, |_| Ok(())));
        let _ = x.peek(&c);
        let _ = map.peek(&c);
        let _ = ScLoc::new(&c, 5);
        let _ = PortedQueue::new(&c, &BoundedQueue::new(1));
        assert!(c.context(N1).is_err());
    }
}

/// An object on a dead node, and a context whose own node died.
#[test]
fn a_dead_node() {
    for s in SCHEDULES {
        let c = cluster_on(3, s);
        let on2 = ScLoc::new_on(&c, N2, 0).unwrap();
        let on1 = ScLoc::new_on(&c, N1, 0).unwrap();
        let q = PortedQueue::new_on(&c, N2, &BoundedQueue::new(1)).unwrap();
        let ctx = c.context(N0).unwrap();
        let ctx2 = c.context(N2).unwrap();
        let mut nonzero = FixedHashMap::with_buckets(1);
        nonzero.apply(MapOp::Insert(1, 1));
        c.kill(N2).unwrap();
        dead(ctx.read_sc(&on2), N2);
        dead(ctx.write_sc(&on2, 1), N2);
        dead(q.push(&ctx, 1), N2);
        dead(q.peek(&c), N2);
        dead(on2.peek(&c), N2);
        dead(ctx2.read_sc(&on1), N2);
        dead(ctx2.faa_sc(&on1, 1), N2);
        // Live objects go on.
        assert_eq!(ctx.faa_sc(&on1, 1).unwrap(), 0);
        // A new object on the dead node: its initial words cannot be written there; with nothing
        // to write it is made (allocation is bookkeeping), and its operations fail.
        dead(ScLoc::new_on(&c, N2, 1), N2);
        dead(PortedHashMap::new_on(&c, N2, &nonzero), N2);
        let late = Ported::new_on(&c, N2, &BoundedQueue::new(1)).unwrap();
        dead(late.push(&ctx, 1), N2);
    }
}

/// Objects made on one cluster and inspected through another: `ForeignLocation`; nodes that do
/// not exist: `UnknownNode`.
#[test]
fn other_clusters_and_unknown_nodes() {
    let a = cluster(2);
    let b = cluster(3);
    let q = PortedQueue::new(&a, &BoundedQueue::new(1)).unwrap();
    let x = ScLoc::new(&a, 0).unwrap();
    let ctx = b.context(N2).unwrap();
    for e in [
        q.push(&ctx, 1).unwrap_err(),
        q.with(&ctx, |_| Ok(())).unwrap_err(),
        q.peek(&b).map(drop).unwrap_err(),
        ctx.cas_sc(&x, 0, 1).unwrap_err(),
    ] {
        assert!(matches!(e, Error::ForeignLocation { .. }), "{e:?}");
    }
    for n in [NodeId(2), NodeId(u16::MAX)] {
        let e = ScLoc::new_on(&a, n, 0).unwrap_err();
        assert!(
            matches!(rdma(&e), loco_rdmawait::Error::UnknownNode { .. }),
            "{e:?}"
        );
        let e = PortedHashMap::new_on(&a, n, &FixedHashMap::with_buckets(1)).unwrap_err();
        assert!(
            matches!(rdma(&e), loco_rdmawait::Error::UnknownNode { .. }),
            "{e:?}"
        );
    }
}

/// The linearizability checker on degenerate histories.
#[test]
fn lincheck_edges() {
    let none: Vec<Call<RegisterOp, u64>> = Vec::new();
    lincheck::check(&Register::default(), &none).unwrap();
    // A response before its invocation counts as at its invocation.
    let h = [Call {
        thread: usize::MAX,
        invoke: u64::MAX,
        response: 0,
        op: RegisterOp::Faa(u64::MAX),
        ret: u64::MAX,
    }];
    lincheck::check(&Register { init: u64::MAX }, &h).unwrap();
    let e = lincheck::check(&Register::default(), &h).unwrap_err();
    assert_eq!(e.calls, 1);
    assert!(e.longest.is_empty());
}

/// Two maps with the same buckets and entries are equal, and hash alike, whatever order the
/// keys went in: a peeked map compared with one built by the test's own inserts was unequal
/// when two keys shared a home bucket and went in the other way round (`==` compared buckets).
#[test]
fn maps_with_the_same_entries_are_equal_whatever_their_insertion_order() {
    use std::hash::{BuildHasher, RandomState};
    let home = |k: u64| (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 4;
    let a = 1;
    let b = (2..).find(|&k| home(k) == home(a)).unwrap();
    let (mut ab, mut ba) = (FixedHashMap::with_buckets(4), FixedHashMap::with_buckets(4));
    for (m, keys) in [(&mut ab, [a, b]), (&mut ba, [b, a])] {
        for k in keys {
            assert_eq!(m.apply(MapOp::Insert(k, k * 10)), MapRet::Value(None));
        }
    }
    assert!(!ab.iter().eq(ba.iter()), "the keys sit in other buckets");
    assert_eq!(ab, ba);
    let s = RandomState::new();
    assert_eq!(s.hash_one(&ab), s.hash_one(&ba));
    // Through the network: the peeked state equals the map the same entries make.
    let c = cluster(2);
    let ctx = c.context(N0).unwrap();
    let map = PortedHashMap::new_on(&c, N1, &FixedHashMap::with_buckets(4)).unwrap();
    for k in [b, a] {
        map.insert(&ctx, k, k * 10).unwrap();
    }
    c.quiesce().unwrap();
    assert_eq!(map.peek(&c).unwrap(), ab);
    // Not equal: another value, another key, another bucket count.
    let mut other = ab.clone();
    other.apply(MapOp::Insert(a, 0));
    assert_ne!(other, ab);
    other.apply(MapOp::Remove(a));
    assert_ne!(other, ab);
    assert_ne!(FixedHashMap::with_buckets(4), FixedHashMap::with_buckets(5));
}
