//! Property tests: random sequences of operations by one thread, on every soft schedule, respect
//! the per-queue-pair ordering rules of docs/model.md §3 and §4, and nothing more is assumed of
//! operations towards different nodes. With `LOCO_BACKEND=verbs` (`soft-roce-ci/run.sh`) the
//! same sequences run on the device (the schedule is then ignored).
//!
//! Each put sends a source word that is set before the run and never written again, so when the
//! put reads it does not matter. The checks:
//! 1. remote writes on one queue pair land in order: each slot ends with its last put's value;
//! 2. a get sees no value older than the last put before it on the same queue pair (rule 6: a
//!    remote read flushes earlier writes), and sees a *later* put only if no rfence lies between
//!    (Fig. 7a allows the overtaking, rule 1 forbids it across a fence);
//! 3. remote FAAs towards one node return the running sum in post order.

use loco_rdmawait::{testing, Cluster, Loc, NodeId, Schedule, WorkId};
use loco_rdmawaitrmw::Rmw;
use proptest::prelude::*;

const NODES: usize = 3;
const SLOTS: usize = 2;
const D: WorkId = WorkId::new(1);

#[derive(Clone, Debug)]
enum Op {
    Put { node: usize, slot: usize },
    Get { node: usize, slot: usize },
    Faa { node: usize, add: u64 },
    Fence { node: usize },
    Wait,
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..NODES;
    prop_oneof![
        3 => (n.clone(), 0..SLOTS).prop_map(|(node, slot)| Op::Put { node, slot }),
        3 => (n.clone(), 0..SLOTS).prop_map(|(node, slot)| Op::Get { node, slot }),
        2 => (n.clone(), 1..100u64).prop_map(|(node, add)| Op::Faa { node, add }),
        1 => n.prop_map(|node| Op::Fence { node }),
        1 => Just(Op::Wait),
    ]
}

fn schedule() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        Just(Schedule::Immediate),
        Just(Schedule::Threaded),
        any::<u64>().prop_map(|seed| Schedule::Chaos { seed }),
    ]
}

/// The value put by op `i` (distinct for every op).
fn value(i: usize) -> u64 {
    1000 + i as u64
}

fn check(ops: &[Op], schedule: Schedule) -> Result<(), TestCaseError> {
    let c = testing::cluster(NODES, 4096, schedule).unwrap_or_else(|e| panic!("{e}"));
    let me = NodeId(0);
    let slots: Vec<Vec<Loc>> = c
        .node_ids()
        .map(|n| (0..SLOTS).map(|_| c.alloc_word(n).unwrap()).collect())
        .collect();
    let counters: Vec<Loc> = c.node_ids().map(|n| c.alloc_word(n).unwrap()).collect();
    // One local word per op: the put's source, or the get's / FAA's destination.
    let local: Vec<Loc> = ops.iter().map(|_| c.alloc_word(me).unwrap()).collect();
    for (i, o) in ops.iter().enumerate() {
        if matches!(o, Op::Put { .. }) {
            c.poke(&local[i], value(i)).unwrap();
        }
    }
    {
        let ctx = c.context(me).unwrap();
        for (i, o) in ops.iter().enumerate() {
            match *o {
                Op::Put { node, slot } => ctx.put(&slots[node][slot], &local[i], D).unwrap(),
                Op::Get { node, slot } => ctx.get(&local[i], &slots[node][slot], D).unwrap(),
                Op::Faa { node, add } => ctx.rfaa(&counters[node], add, &local[i], D).unwrap(),
                Op::Fence { node } => ctx.rfence(NodeId(node as u16)).unwrap(),
                Op::Wait => ctx.wait(D).unwrap(),
            }
        }
        ctx.wait(D).unwrap();
    }
    c.quiesce().unwrap();

    // 1. Last put wins, per slot.
    for (node, node_slots) in slots.iter().enumerate() {
        for (slot, loc) in node_slots.iter().enumerate() {
            let last = ops
                .iter()
                .enumerate()
                .filter(
                    |(_, o)| matches!(o, Op::Put { node: n, slot: s } if *n == node && *s == slot),
                )
                .map(|(i, _)| value(i))
                .next_back()
                .unwrap_or(0);
            prop_assert_eq!(c.peek(loc).unwrap(), last, "slot {}/{}", node, slot);
        }
    }
    // 2. Gets see a permitted put.
    for (p, o) in ops.iter().enumerate() {
        let Op::Get { node, slot } = *o else { continue };
        let got = c.peek(&local[p]).unwrap();
        let same =
            |i: usize| matches!(ops[i], Op::Put { node: n, slot: s } if n == node && s == slot);
        let floor = (0..p).rev().find(|&i| same(i));
        let fence_after =
            (p + 1..ops.len()).find(|&i| matches!(ops[i], Op::Fence { node: n } if n == node));
        let ok = if got == 0 {
            floor.is_none()
        } else {
            let q = (got - 1000) as usize;
            q < ops.len()
                && same(q)
                && floor.is_none_or(|f| q >= f)
                && (q < p || fence_after.is_none_or(|f| q < f))
        };
        prop_assert!(
            ok,
            "get #{} of {}/{} saw {} (ops {:?})",
            p,
            node,
            slot,
            got,
            ops
        );
    }
    // 3. FAAs return running sums in post order.
    let mut sums = [0u64; NODES];
    for (i, o) in ops.iter().enumerate() {
        if let Op::Faa { node, add } = *o {
            prop_assert_eq!(c.peek(&local[i]).unwrap(), sums[node]);
            sums[node] += add;
        }
    }
    for node in 0..NODES {
        prop_assert_eq!(c.peek(&counters[node]).unwrap(), sums[node]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn per_qp_ordering(ops in prop::collection::vec(op(), 1..40), schedule in schedule()) {
        check(&ops, schedule)?;
    }
}

/// The check above is not vacuous: under Chaos a get is seen reading a later put (Fig. 7a).
#[test]
fn chaos_shows_a_get_overtaken() {
    let ops = [Op::Get { node: 1, slot: 0 }, Op::Put { node: 1, slot: 0 }];
    let mut seen = false;
    for seed in 0..2000 {
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(256)
            .soft(Schedule::Chaos { seed })
            .build()
            .unwrap();
        let (y, a, src) = (
            c.alloc_word(NodeId(1)).unwrap(),
            c.alloc_word(NodeId(0)).unwrap(),
            c.alloc_word(NodeId(0)).unwrap(),
        );
        c.poke(&src, 7).unwrap();
        {
            let ctx = c.context(NodeId(0)).unwrap();
            ctx.get(&a, &y, D).unwrap();
            ctx.put(&y, &src, D).unwrap();
        }
        c.quiesce().unwrap();
        seen |= c.peek(&a).unwrap() == 7;
    }
    assert!(seen, "{ops:?}");
}
