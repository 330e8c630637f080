//! Smoke test: every SC operation and every ready structure once, on every soft schedule.

mod common;

use loco_rdmawait::{NodeId, Schedule};
use loco_sc::{BoundedQueue, Error, FixedHashMap, PortedHashMap, PortedQueue, Sc, ScLoc};

#[test]
fn smoke() {
    for schedule in [
        Schedule::Immediate,
        Schedule::Threaded,
        Schedule::Chaos { seed: 1 },
    ] {
        let c = common::cluster(3, schedule);
        let x = ScLoc::new(&c, 5).unwrap();
        let y = ScLoc::new(&c, 0).unwrap();
        assert_eq!((x.node(), y.node()), (NodeId(0), NodeId(1)), "round-robin");
        let map = PortedHashMap::new(&c, &FixedHashMap::with_buckets(4)).unwrap();
        let q = PortedQueue::new_on(&c, NodeId(1), &BoundedQueue::new(2)).unwrap();
        assert_eq!(map.node(), NodeId(2));
        let ctx = c.context(NodeId(2)).unwrap();

        assert_eq!(ctx.read_sc(&x).unwrap(), 5);
        ctx.write_sc(&x, 6).unwrap();
        assert_eq!(ctx.read_sc(&x).unwrap(), 6);
        assert_eq!(ctx.cas_sc(&x, 6, 7).unwrap(), 6);
        assert_eq!(ctx.cas_sc(&x, 6, 8).unwrap(), 7);
        assert_eq!(ctx.faa_sc(&x, 3).unwrap(), 7);
        assert_eq!(ctx.read_sc(&x).unwrap(), 10);
        ctx.write_sc(&y, 1).unwrap();

        assert_eq!(map.insert(&ctx, 1, 10).unwrap(), None);
        assert_eq!(map.insert(&ctx, 1, 11).unwrap(), Some(10));
        assert_eq!(map.cas(&ctx, 1, 11, 12).unwrap(), Some(11));
        assert_eq!(map.cas(&ctx, 1, 11, 13).unwrap(), Some(12));
        assert_eq!(map.get(&ctx, 1).unwrap(), Some(12));
        assert_eq!(map.get(&ctx, 2).unwrap(), None);
        assert_eq!(map.len(&ctx).unwrap(), 1);
        assert_eq!(map.remove(&ctx, 1).unwrap(), Some(12));
        assert_eq!(map.len(&ctx).unwrap(), 0);

        q.push(&ctx, 1).unwrap();
        q.push(&ctx, 2).unwrap();
        assert!(matches!(
            q.push(&ctx, 3),
            Err(Error::QueueFull { capacity: 2 })
        ));
        assert_eq!(q.pop(&ctx).unwrap(), Some(1));
        q.push(&ctx, 3).unwrap();
        assert_eq!(q.len(&ctx).unwrap(), 2);
        assert_eq!(q.pop(&ctx).unwrap(), Some(2));
        assert_eq!(q.pop(&ctx).unwrap(), Some(3));
        assert_eq!(q.pop(&ctx).unwrap(), None);

        c.quiesce().unwrap();
        assert_eq!(x.peek(&c).unwrap(), 10);
        assert_eq!(y.peek(&c).unwrap(), 1);
        assert!(map.peek(&c).unwrap().is_empty());
        assert!(q.peek(&c).unwrap().is_empty());
    }
}
