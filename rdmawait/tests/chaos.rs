//! The chaos schedule is reproducible from its seed, and actually varies with it.

use loco_rdmawait::{Cluster, NodeId, Schedule, WorkId};

/// A single-threaded program with several weak spots; returns every value it can observe.
fn program(seed: u64) -> Vec<u64> {
    let c = Cluster::builder()
        .nodes(3)
        .memory_per_node(512)
        .soft(Schedule::Chaos { seed })
        .build()
        .unwrap();
    let x = c.alloc_words(NodeId(0), 4).unwrap();
    let y1 = c.alloc_words(NodeId(1), 4).unwrap();
    let y2 = c.alloc_words(NodeId(2), 4).unwrap();
    let back = c.alloc_words(NodeId(0), 16).unwrap();
    let d = WorkId::new(1);
    {
        let ctx = c.context(NodeId(0)).unwrap();
        for i in 0..4 {
            ctx.store(&x.word(i).unwrap(), i + 1).unwrap();
            ctx.put(&y1, &x, d).unwrap();
            ctx.put(&y2, &x, d).unwrap();
            ctx.get(&back.slice(i * 32, 32).unwrap(), &y1, d).unwrap();
        }
        ctx.store(&x.word(0).unwrap(), 99).unwrap();
    }
    c.quiesce().unwrap();
    [
        c.peek_words(&y1).unwrap(),
        c.peek_words(&y2).unwrap(),
        c.peek_words(&back).unwrap(),
    ]
    .concat()
}

#[test]
fn same_seed_same_execution() {
    for seed in 0..50 {
        assert_eq!(program(seed), program(seed), "seed {seed}");
    }
}

#[test]
fn different_seeds_different_executions() {
    let outcomes: std::collections::BTreeSet<_> = (0..200).map(program).collect();
    assert!(
        outcomes.len() > 5,
        "only {} distinct outcomes",
        outcomes.len()
    );
}
