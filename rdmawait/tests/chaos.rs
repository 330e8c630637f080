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

/// `Ctx::fenced` (what lets `gf` leave a node out) says yes only once nothing the thread issued
/// towards the node can still be on its way: a put or remote RMW that completed may not have
/// landed (Fig. 5), a later get that completed has made them land, a failed request makes
/// nothing known.
#[test]
fn fenced_only_after_a_completed_get_behind_the_writes() {
    use loco_rdmawait::backend::WorkRequest;
    let d = WorkId::new(1);
    let c = Cluster::builder()
        .nodes(4)
        .memory_per_node(512)
        .soft(Schedule::Chaos { seed: 7 })
        .build()
        .unwrap();
    let (n1, n2) = (NodeId(1), NodeId(2));
    let local = c.alloc_word(NodeId(0)).unwrap();
    let remote = c.alloc_word(n1).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    assert!(ctx.fenced(n1) && ctx.fenced(n2), "nothing posted yet");
    assert!(!ctx.fenced(NodeId(9)), "an unknown node is never fenced");
    ctx.put(&remote, &local, d).unwrap();
    assert!(!ctx.fenced(n1) && ctx.fenced(n2), "only the put's node");
    ctx.wait(d).unwrap();
    assert!(!ctx.fenced(n1), "a completed put may not have landed");
    ctx.get(&local, &remote, d).unwrap();
    assert!(!ctx.fenced(n1), "the get has not completed");
    ctx.wait(d).unwrap();
    assert!(ctx.fenced(n1), "a completed get behind the put");
    let faa = WorkRequest::FetchAdd {
        remote: (remote.offset() / 8) as usize,
        add: 1,
        local: (local.offset() / 8) as usize,
    };
    ctx.post(n1, faa, d).unwrap();
    ctx.wait(d).unwrap();
    assert!(
        !ctx.fenced(n1),
        "a completed FAA's write may not have landed"
    );
    ctx.get(&local, &remote, d).unwrap();
    ctx.rfence(n1).unwrap();
    ctx.get(&local, &remote, d).unwrap();
    ctx.wait(d).unwrap();
    assert!(ctx.fenced(n1), "gets and fences write nothing remotely");
    ctx.put(&remote, &local, d).unwrap();
    let empty = WorkRequest::Read {
        local: (local.offset() / 8) as usize,
        remote: (remote.offset() / 8) as usize,
        words: 0,
    };
    ctx.post(n1, empty, d).unwrap();
    ctx.wait(d).unwrap();
    assert!(!ctx.fenced(n1), "a read of no words need not flush the put");
    // A node restarted since the context was made is never fenced: the context's operations
    // towards it fail, and a fence must say so.
    let n3 = NodeId(3);
    assert!(ctx.fenced(n3));
    c.kill(n3).unwrap();
    c.restart(n3).unwrap();
    assert!(!ctx.fenced(n3), "restarted since the context was made");
    assert!(
        c.context(NodeId(0)).unwrap().fenced(n3),
        "a new context knows the new one"
    );
    // A get that fails (its node died) proves nothing.
    let far = c.alloc_word(n2).unwrap();
    ctx.put(&far, &local, d).unwrap();
    ctx.wait(d).unwrap();
    c.kill(n2).unwrap();
    let _ = ctx.get(&local, &far, d).and_then(|()| ctx.wait(d));
    assert!(!ctx.fenced(n2), "a dead node is never fenced");
}

/// A fence read by CAS (`FenceRead::Cas`) reads the dummy word and changes nothing there, in the
/// model and with Soft-RoCE's write-back; once polled it fences its node as a get does; the
/// profiles pick the cheaper read; bad words are refused.
#[test]
fn a_cas_fence_read_reads_changes_nothing_and_fences() {
    use loco_rdmawait::sim::Profile;
    use loco_rdmawait::{FailedCas, FenceRead};
    let d = WorkId::new(1);
    for atomics in [FailedCas::Reads, FailedCas::WritesBack] {
        for seed in 0..50 {
            let c = Cluster::builder()
                .nodes(2)
                .memory_per_node(512)
                .soft(Schedule::Chaos { seed })
                .failed_cas(atomics)
                .fence_read(FenceRead::Cas)
                .build()
                .unwrap();
            let n1 = NodeId(1);
            let (src, scratch) = (
                c.alloc_word(NodeId(0)).unwrap(),
                c.alloc_word(NodeId(0)).unwrap(),
            );
            let (data, dummy) = (c.alloc_word(n1).unwrap(), c.fence_word(n1).unwrap());
            assert_eq!(
                c.fence_word(n1).unwrap(),
                dummy,
                "the same fence word each time"
            );
            let ctx = c.context(NodeId(0)).unwrap();
            ctx.store(&src, 7).unwrap();
            ctx.put(&data, &src, d).unwrap();
            ctx.fence_read(&scratch, &dummy, d).unwrap();
            assert!(!ctx.fenced(n1), "seed {seed}: not polled yet");
            ctx.wait(d).unwrap();
            assert!(
                ctx.fenced(n1),
                "seed {seed}: a completed fence read behind the put"
            );
            assert_eq!(
                c.peek(&data).unwrap(),
                7,
                "seed {seed}: the put landed first"
            );
            c.quiesce().unwrap();
            assert_eq!(
                c.peek(&dummy).unwrap(),
                0,
                "seed {seed} {atomics:?}: dummy changed"
            );
            assert_eq!(
                c.peek(&scratch).unwrap(),
                0,
                "seed {seed}: the dummy's value"
            );
        }
    }
    let c = Cluster::builder().nodes(2).build().unwrap();
    assert_eq!(
        c.fence_read(),
        FenceRead::Get,
        "the soft NIC reads with a get"
    );
    let ctx = c.context(NodeId(0)).unwrap();
    let two = c.alloc_words(NodeId(1), 2).unwrap();
    let scratch = c.alloc_word(NodeId(0)).unwrap();
    let remote_scratch = c.alloc_word(NodeId(1)).unwrap();
    assert!(matches!(
        ctx.fence_read(&scratch, &two, d),
        Err(loco_rdmawait::Error::NotAWord { .. })
    ));
    assert!(ctx.fence_read(&remote_scratch, &remote_scratch, d).is_err());
    assert_eq!(Profile::rxe().fence_read(), FenceRead::Cas);
    assert_eq!(Profile::connectx5().fence_read(), FenceRead::Get);
    assert_eq!(FenceRead::by_name("cas"), Some(FenceRead::Cas));
    assert_eq!(
        FenceRead::by_name(FenceRead::Get.name()),
        Some(FenceRead::Get)
    );
}
