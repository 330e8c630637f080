//! Ported structures: a user-defined structure through the default whole-state path, the ready
//! structures' word-level paths against their own sequential code, and the round trips each
//! operation costs.

mod common;

use loco_rdmawait::{Cluster, NodeId, Schedule};
use loco_sc::lincheck::{check, Recorder, SequentialModel};
use loco_sc::{
    BoundedQueue, Decoder, Encoder, FixedHashMap, LayoutError, MapOp, Ported, PortedHashMap,
    PortedQueue, QueueOp, Sequential, Words,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A user-defined structure: a bounded stack written with an ordinary `Vec`. Its layout is
/// `len, items[capacity]`; the sequential code does not check the bound, the layout does.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stack {
    capacity: usize,
    items: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackOp {
    Push(u64),
    Pop,
}

impl Sequential for Stack {
    type Op = StackOp;
    type Ret = Option<u64>;

    fn words(&self) -> usize {
        1 + self.capacity
    }

    fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError> {
        let mut e = Encoder::new(out);
        e.push(self.items.len() as u64);
        self.items.iter().for_each(|v| e.push(*v));
        e.finish()
    }

    fn decode(words: &[u64]) -> Result<Self, LayoutError> {
        let capacity = words.len() - 1;
        let mut d = Decoder::new(words);
        let len = d.next_at_most(capacity, "stack length above capacity")?;
        let items = (0..len).map(|_| d.next()).collect::<Result<_, _>>()?;
        Ok(Stack { capacity, items })
    }

    fn apply(&mut self, op: StackOp) -> Option<u64> {
        match op {
            StackOp::Push(v) => {
                self.items.push(v);
                None
            }
            StackOp::Pop => self.items.pop(),
        }
    }
}

#[test]
fn a_user_defined_structure_works_through_the_default_path() {
    let c = common::cluster(2, Schedule::Threaded);
    let s = Ported::new_on(
        &c,
        NodeId(1),
        &Stack {
            capacity: 3,
            items: vec![],
        },
    )
    .unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    for v in 1..=3 {
        assert_eq!(s.apply(&ctx, StackOp::Push(v)).unwrap(), None);
    }
    // A fourth value does not fit the layout: a typed error, and nothing is written.
    let e = s.apply(&ctx, StackOp::Push(4)).unwrap_err();
    assert!(
        matches!(
            e,
            loco_sc::Error::Layout(LayoutError::DoesNotFit {
                needed: 5,
                words: 4
            })
        ),
        "{e:?}"
    );
    assert_eq!(s.apply(&ctx, StackOp::Pop).unwrap(), Some(3));
    assert_eq!(s.apply(&ctx, StackOp::Pop).unwrap(), Some(2));
    c.quiesce().unwrap();
    assert_eq!(s.peek(&c).unwrap().items, [1]);
}

/// Concurrent pushes and pops of a user-defined structure under Chaos: linearizable.
#[test]
fn a_user_defined_structure_is_linearizable() {
    let init = Stack {
        capacity: 4,
        items: vec![9],
    };
    let model = SequentialModel::new(&init);
    for seed in 0..common::runs(300, 50) {
        let c = common::chaos(3, seed);
        let s = Ported::new_on(&c, NodeId((seed % 3) as u16), &init).unwrap();
        let rec = Recorder::new();
        common::threads(&c, &[0, 1, 2], |t, ctx| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 7 + t as u64);
            for _ in 0..2 {
                let op = if rng.random_bool(0.5) {
                    StackOp::Push(rng.random_range(1..50))
                } else {
                    StackOp::Pop
                };
                // A push onto a full stack fails (DoesNotFit) and is left out of the history:
                // its effect (none) is known, but it is not a call of the sequential spec.
                match rec.record(t, op, |op| s.apply(ctx, *op)) {
                    Ok(_) | Err(loco_sc::Error::Layout(LayoutError::DoesNotFit { .. })) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        let h = rec.into_history();
        check(&model, &h).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{h:#?}"));
    }
}

/// Random operations through the word-level paths (`apply_words`) and through the local
/// sequential code give the same results and the same final state, on every schedule.
#[test]
fn word_level_paths_agree_with_the_sequential_code() {
    for (i, schedule) in [
        Schedule::Immediate,
        Schedule::Threaded,
        Schedule::Chaos { seed: 3 },
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(1 << 14)
            .soft(schedule)
            .backend_from_env()
            .and_then(|b| b.build())
            .unwrap();
        let ctx = c.context(NodeId(0)).unwrap();
        for buckets in [1, 3, 8] {
            let mut local = FixedHashMap::with_buckets(buckets);
            let map = PortedHashMap::new_on(&c, NodeId(1), &local).unwrap();
            for _ in 0..150 {
                let key = rng.random_range(0..(buckets as u64 + 3));
                let op = match rng.random_range(0..5) {
                    0 => MapOp::Get(key),
                    1 | 2 => MapOp::Insert(key, rng.random_range(0..9)),
                    3 => MapOp::Remove(key),
                    _ => MapOp::Cas {
                        key,
                        expected: rng.random_range(0..9),
                        new: rng.random_range(0..9),
                    },
                };
                assert_eq!(map.apply(&ctx, op).unwrap(), local.apply(op), "{op:?}");
            }
            c.quiesce().unwrap();
            // The same entries in the same buckets (`==` alone ignores where they sit).
            let peeked = map.peek(&c).unwrap();
            assert_eq!(peeked, local);
            assert_eq!(
                peeked.iter().collect::<Vec<_>>(),
                local.iter().collect::<Vec<_>>()
            );
        }
        for capacity in [1, 3] {
            let mut local = BoundedQueue::new(capacity);
            let q = PortedQueue::new_on(&c, NodeId(1), &local).unwrap();
            for _ in 0..100 {
                let op = match rng.random_range(0..5) {
                    0 | 1 => QueueOp::Push(rng.random_range(0..1000)),
                    2 | 3 => QueueOp::Pop,
                    _ => QueueOp::Len,
                };
                assert_eq!(q.apply(&ctx, op).unwrap(), local.apply(op), "{op:?}");
            }
            c.quiesce().unwrap();
            assert_eq!(q.peek(&c).unwrap(), local);
        }
    }
}

/// Round trips spent fetching inside the critical section (the acquire adds 2 uncontended), as
/// the cost tables of `loco_sc::port` say.
#[test]
fn fetches_per_operation_are_as_documented() {
    let c = common::cluster(2, Schedule::Immediate);
    let ctx = c.context(NodeId(0)).unwrap();

    let map = PortedHashMap::new_on(&c, NodeId(1), &FixedHashMap::with_buckets(16)).unwrap();
    let count = |op: MapOp| {
        map.with(&ctx, |w: &mut Words<'_>| {
            let r = <FixedHashMap as Sequential>::apply_words(w, op)?;
            Ok((r, w.round_trips()))
        })
        .unwrap()
        .1
    };
    assert_eq!(count(MapOp::Insert(5, 1)), 1);
    assert_eq!(count(MapOp::Get(5)), 1);
    assert_eq!(
        count(MapOp::Cas {
            key: 5,
            expected: 1,
            new: 2
        }),
        1
    );
    assert_eq!(count(MapOp::Remove(5)), 1);
    assert_eq!(count(MapOp::Len), 1);

    let q = PortedQueue::new_on(&c, NodeId(1), &BoundedQueue::new(8)).unwrap();
    let count = |op: QueueOp| {
        q.with(&ctx, |w: &mut Words<'_>| {
            let r = <BoundedQueue as Sequential>::apply_words(w, op)?;
            Ok((r, w.round_trips()))
        })
        .unwrap()
        .1
    };
    assert_eq!(count(QueueOp::Push(1)), 1);
    assert_eq!(count(QueueOp::Len), 1);
    assert_eq!(count(QueueOp::Pop), 2);
    assert_eq!(count(QueueOp::Pop), 1, "an empty queue: the header only");

    let s = Ported::new_on(
        &c,
        NodeId(1),
        &Stack {
            capacity: 8,
            items: vec![],
        },
    )
    .unwrap();
    let n = s
        .with(&ctx, |w| {
            <Stack as Sequential>::apply_words(w, StackOp::Push(1))?;
            Ok(w.round_trips())
        })
        .unwrap();
    assert_eq!(n, 1, "the default path: one get of the whole state");
}
