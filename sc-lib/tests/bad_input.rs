//! Bad input gets typed errors, and writes nothing: handles of another cluster, values that do
//! not fit a layout, full structures, unknown nodes, corrupt states, accesses outside a layout.

mod common;

use loco_rdmawait::{NodeId, Schedule};
use loco_sc::{
    BoundedQueue, Decoder, Encoder, Error, FixedHashMap, LayoutError, MapOp, Ported, PortedHashMap,
    PortedQueue, Sc, ScLoc, Sequential,
};

#[test]
fn a_location_of_another_cluster_is_refused() {
    let a = common::cluster(2, Schedule::Immediate);
    let b = common::cluster(2, Schedule::Immediate);
    let x = ScLoc::new(&a, 3).unwrap();
    let map = PortedHashMap::new(&a, &FixedHashMap::with_buckets(2)).unwrap();
    let q = PortedQueue::new(&a, &BoundedQueue::new(2)).unwrap();
    let ctx = b.context(NodeId(0)).unwrap();
    let foreign = |e: Error| {
        assert!(
            matches!(e, Error::ForeignLocation { loc, cluster } if loc == a.id() && cluster == b.id()),
            "{e:?}"
        )
    };
    foreign(ctx.read_sc(&x).unwrap_err());
    foreign(ctx.write_sc(&x, 1).unwrap_err());
    foreign(ctx.cas_sc(&x, 3, 4).unwrap_err());
    foreign(ctx.faa_sc(&x, 1).unwrap_err());
    foreign(map.insert(&ctx, 1, 1).unwrap_err());
    foreign(q.push(&ctx, 1).unwrap_err());
    foreign(x.peek(&b).unwrap_err());
    foreign(map.peek(&b).unwrap_err());
    assert_eq!(x.peek(&a).unwrap(), 3, "untouched");
    // The message reads well in a chain.
    assert_eq!(
        ctx.read_sc(&x).unwrap_err().to_string(),
        format!(
            "location belongs to cluster #{}, not to the context's cluster #{}",
            a.id(),
            b.id()
        )
    );
}

#[test]
fn an_unknown_node_is_refused() {
    let c = common::cluster(2, Schedule::Immediate);
    let e = ScLoc::new_on(&c, NodeId(5), 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rdma(loco_rdmawait::Error::UnknownNode { nodes: 2, .. })
        ),
        "{e:?}"
    );
    assert!(Ported::new_on(&c, NodeId(2), &BoundedQueue::new(1)).is_err());
}

#[test]
fn a_full_queue_is_an_error_and_writes_nothing() {
    let c = common::cluster(2, Schedule::Chaos { seed: 4 });
    let q = PortedQueue::new_on(&c, NodeId(1), &BoundedQueue::new(2)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    q.push(&ctx, 1).unwrap();
    q.push(&ctx, 2).unwrap();
    for v in 3..6 {
        let e = q.push(&ctx, v).unwrap_err();
        assert!(matches!(e, Error::QueueFull { capacity: 2 }), "{e:?}");
        assert_eq!(e.to_string(), "the queue is full (capacity 2)");
    }
    c.quiesce().unwrap();
    assert_eq!(q.peek(&c).unwrap().iter().collect::<Vec<_>>(), [1, 2]);
    assert_eq!(q.pop(&ctx).unwrap(), Some(1));
}

#[test]
fn a_full_map_is_an_error_and_writes_nothing() {
    let c = common::cluster(2, Schedule::Chaos { seed: 5 });
    let map = PortedHashMap::new_on(&c, NodeId(1), &FixedHashMap::with_buckets(3)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    for k in 0..3 {
        map.insert(&ctx, k, k * 10).unwrap();
    }
    let e = map.insert(&ctx, 9, 90).unwrap_err();
    assert!(matches!(e, Error::MapFull { buckets: 3 }), "{e:?}");
    // Updating a present key of a full map is fine.
    assert_eq!(map.insert(&ctx, 1, 11).unwrap(), Some(10));
    c.quiesce().unwrap();
    let m = map.peek(&c).unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!((m.get(9), m.get(1)), (None, Some(11)));
}

/// A structure whose encoding is larger than the layout it asks for.
#[derive(Debug)]
struct Liar;

impl Sequential for Liar {
    type Op = ();
    type Ret = ();
    fn words(&self) -> usize {
        2
    }
    fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError> {
        let mut e = Encoder::new(out);
        e.pad(3);
        e.finish()
    }
    fn decode(_: &[u64]) -> Result<Self, LayoutError> {
        Ok(Liar)
    }
    fn apply(&mut self, _: ()) {}
}

/// A structure of no words.
#[derive(Debug)]
struct Nothing;

impl Sequential for Nothing {
    type Op = ();
    type Ret = ();
    fn words(&self) -> usize {
        0
    }
    fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError> {
        Encoder::new(out).finish()
    }
    fn decode(_: &[u64]) -> Result<Self, LayoutError> {
        Ok(Nothing)
    }
    fn apply(&mut self, _: ()) {}
}

#[test]
fn values_that_do_not_fit_the_layout_are_refused() {
    let c = common::cluster(2, Schedule::Immediate);
    let e = Ported::new(&c, &Liar).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Layout(LayoutError::DoesNotFit {
                needed: 3,
                words: 2
            })
        ),
        "{e:?}"
    );
    assert!(matches!(
        Ported::new(&c, &Nothing).unwrap_err(),
        Error::Layout(LayoutError::Empty)
    ));
    // A queue of no slots cannot be read back from its layout.
    assert!(matches!(
        PortedQueue::new(&c, &BoundedQueue::new(0)).unwrap_err(),
        Error::Layout(LayoutError::Invalid { .. })
    ));
    // The decoder's bound checks.
    let mut d = Decoder::new(&[5]);
    assert!(matches!(
        d.next_at_most(4, "too big"),
        Err(LayoutError::Invalid { word: 0, .. })
    ));
    assert!(matches!(
        d.next(),
        Err(LayoutError::OutOfLayout { index: 1, words: 1 })
    ));
}

#[test]
fn a_corrupt_state_is_an_error() {
    let c = common::cluster(2, Schedule::Immediate);
    let map = PortedHashMap::new_on(&c, NodeId(1), &FixedHashMap::with_buckets(1)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    // Bucket 0's tag set to 7 behind the map's back.
    let tag = map.loc().word(0).unwrap();
    c.poke(&tag, 7).unwrap();
    let e = map.get(&ctx, 1).unwrap_err();
    assert!(
        matches!(e, Error::Layout(LayoutError::Invalid { word: 0, .. })),
        "{e:?}"
    );
    // The lock was released despite the error: the next operation goes through.
    c.poke(&tag, 0).unwrap();
    assert_eq!(map.get(&ctx, 1).unwrap(), None);
}

#[test]
fn words_outside_the_layout_are_refused() {
    let c = common::cluster(2, Schedule::Immediate);
    let map = PortedHashMap::new_on(&c, NodeId(1), &FixedHashMap::with_buckets(2)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    // The error names the word asked for (of a range, its first word outside the layout).
    let e = map.with(&ctx, |w| w.read(6)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Layout(LayoutError::OutOfLayout { index: 6, words: 6 })
        ),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "word 6 is outside the layout of 6 words");
    let e = map.with(&ctx, |w| w.write_range(5, &[1, 2])).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Layout(LayoutError::OutOfLayout { index: 6, words: 6 })
        ),
        "{e:?}"
    );
    let e = map.with(&ctx, |w| w.read_range(4..9)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Layout(LayoutError::OutOfLayout { index: 6, words: 6 })
        ),
        "{e:?}"
    );
    let e = map.with(&ctx, |w| w.prefetch(8..9)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Layout(LayoutError::OutOfLayout { index: 8, words: 6 })
        ),
        "{e:?}"
    );
    // Nothing was written by the failed `with`, and the lock is free again.
    let _ = map.apply(&ctx, MapOp::Len).unwrap();
    c.quiesce().unwrap();
    assert!(map.peek(&c).unwrap().is_empty());
}

/// Edge sizes of the local structures: a map of no buckets holds nothing (and does not divide
/// by zero), layout sizes saturate instead of overflowing, and a structure far larger than its
/// node is refused with `OutOfMemory` before its layout is built in host memory (a queue of
/// 2^40 slots used to abort the process allocating it).
#[test]
fn edge_sizes_are_refused_or_held() {
    let mut empty = FixedHashMap::with_buckets(0);
    assert_eq!(empty.apply(MapOp::Insert(1, 2)), loco_sc::MapRet::Full);
    assert_eq!(empty.apply(MapOp::Get(1)), loco_sc::MapRet::Value(None));
    assert_eq!(empty.apply(MapOp::Remove(1)), loco_sc::MapRet::Value(None));
    assert_eq!(empty.apply(MapOp::Len), loco_sc::MapRet::Len(0));
    assert_eq!(FixedHashMap::words_for(usize::MAX), usize::MAX);
    assert_eq!(BoundedQueue::words_for(usize::MAX), usize::MAX);
    let c = common::cluster(2, Schedule::Immediate);
    let free = c.free_bytes(NodeId(1)).unwrap();
    let e = PortedQueue::new_on(&c, NodeId(1), &BoundedQueue::new(1 << 40)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rdma(loco_rdmawait::Error::OutOfMemory { node: NodeId(1), free: f, .. }) if f == free
        ),
        "{e:?}"
    );
    // Nothing was taken from the node.
    assert_eq!(c.free_bytes(NodeId(1)).unwrap(), free);
}

#[test]
fn a_queue_of_no_slot_is_refused_and_says_so() {
    let c = common::cluster(2, Schedule::Immediate);
    let e = PortedQueue::new(&c, &BoundedQueue::new(0)).unwrap_err();
    assert!(e.to_string().contains("capacity of at least 1"), "{e}");
}

/// A range of words that starts after it ends (`2..1`) is refused as backwards, not as "outside
/// the layout" (it is inside it), by every range method; an empty range inside the layout
/// (`2..2`, and `6..6` at its end) is nothing to do, as with a slice.
#[test]
#[allow(clippy::reversed_empty_ranges)]
fn a_backwards_word_range_is_refused_as_backwards() {
    let c = common::cluster(2, Schedule::Immediate);
    let map = PortedHashMap::new_on(&c, NodeId(1), &FixedHashMap::with_buckets(2)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    let backwards = |e: Error| {
        assert!(
            matches!(
                e,
                Error::Layout(LayoutError::BackwardsRange {
                    start: 2,
                    end: 1,
                    words: 6
                })
            ),
            "{e:?}"
        );
        let m = e.to_string();
        assert!(m.contains("2..1 is backwards"), "{m}");
        assert!(!m.contains("outside the layout"), "{m}");
        assert!(m.contains("start <= end <= 6"), "{m}");
    };
    backwards(map.with(&ctx, |w| w.read_range(2..1)).unwrap_err());
    backwards(map.with(&ctx, |w| w.prefetch(2..1)).unwrap_err());
    backwards(
        map.with(&ctx, |w| w.prefetch_all(&[0..1, 2..1]))
            .unwrap_err(),
    );
    map.with(&ctx, |w| {
        assert_eq!(w.read_range(2..2)?, Vec::<u64>::new());
        assert_eq!(w.read_range(6..6)?, Vec::<u64>::new());
        w.prefetch(2..2)?;
        w.prefetch_all(&[2..2, 6..6])?;
        w.write_range(6, &[])?;
        assert_eq!(w.round_trips(), 0, "an empty range fetches nothing");
        Ok(())
    })
    .unwrap();
    // Nothing was written, and the lock is free again.
    let _ = map.apply(&ctx, MapOp::Len).unwrap();
    c.quiesce().unwrap();
    assert!(map.peek(&c).unwrap().is_empty());
}
