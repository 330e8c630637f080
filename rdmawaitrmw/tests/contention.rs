//! Many threads on remote RMWs, on the backend `LOCO_BACKEND` names (the soft NIC's `Threaded`
//! schedule by default, a real device under `soft-roce-ci/run.sh`; see `loco_rdmawait::testing`):
//! remote FAAs on contended counters lose no update, and a remote CAS spin lock gives mutual
//! exclusion.

use loco_rdmawait::{testing, Cluster, Loc, NodeId, Schedule, WorkId};
use loco_rdmawaitrmw::Rmw;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D1: WorkId = WorkId::new(1);

fn cluster(nodes: usize) -> Cluster {
    testing::cluster(nodes, 128 * 1024, Schedule::Threaded).unwrap_or_else(|e| panic!("{e}"))
}

/// Threads on every node do remote FAAs on counters on every node, loop-back included: no
/// update is lost, and each counter handed out every old value exactly once.
#[test]
fn contended_remote_faa_counters_lose_no_update() {
    let per_thread = testing::runs(300, 1_000);
    let c = cluster(3);
    let counters: Vec<Loc> = c.node_ids().map(|n| c.alloc_word(n).unwrap()).collect();
    let threads = [N0, N1, N1, N2, N2, N0];
    let rets: Vec<Loc> = threads
        .iter()
        .map(|&n| c.alloc_words(n, per_thread * 3).unwrap())
        .collect();
    std::thread::scope(|sc| {
        for (t, &node) in threads.iter().enumerate() {
            let (c, counters, ret) = (&c, &counters, rets[t]);
            sc.spawn(move || {
                let ctx = c.context(node).unwrap();
                for i in 0..per_thread {
                    for (k, counter) in counters.iter().enumerate() {
                        let slot = ret.word(i * 3 + k as u64).unwrap();
                        ctx.rfaa(counter, 1, &slot, D1).unwrap();
                    }
                    if i % 8 == 7 {
                        ctx.wait(D1).unwrap();
                    }
                }
                ctx.wait(D1).unwrap();
            });
        }
    });
    c.quiesce().unwrap();
    let total = per_thread * threads.len() as u64;
    for (k, counter) in counters.iter().enumerate() {
        assert_eq!(c.peek(counter).unwrap(), total, "counter on n{k}");
        let mut olds: Vec<u64> = Vec::new();
        for r in &rets {
            for i in 0..per_thread {
                olds.push(c.peek(&r.word(i * 3 + k as u64).unwrap()).unwrap());
            }
        }
        olds.sort_unstable();
        assert_eq!(
            olds,
            (0..total).collect::<Vec<_>>(),
            "old values of n{k}'s counter"
        );
    }
}

/// A remote CAS spin lock over a remote word protects a plain read-modify-write done with a get
/// and a put: mutual exclusion through rcas, with rfence keeping the release after the update.
#[test]
fn rcas_lock_protects_a_get_put_increment() {
    let rounds = testing::runs(100, 100);
    let c = cluster(2);
    let lock = c.alloc_word(N1).unwrap();
    let value = c.alloc_word(N1).unwrap();
    let threads = [N0, N0, N1];
    std::thread::scope(|sc| {
        for &node in &threads {
            let (c, lock, value) = (&c, &lock, &value);
            sc.spawn(move || {
                let ctx = c.context(node).unwrap();
                let old = c.alloc_word(node).unwrap();
                let v = c.alloc_word(node).unwrap();
                let give_up = std::time::Instant::now() + std::time::Duration::from_secs(120);
                for _ in 0..rounds {
                    loop {
                        ctx.rcas(lock, 0, 1, &old, D1).unwrap();
                        ctx.wait(D1).unwrap();
                        if ctx.load(&old).unwrap() == 0 {
                            break;
                        }
                        assert!(
                            std::time::Instant::now() < give_up,
                            "the lock word stays 1: a release was lost"
                        );
                        std::thread::yield_now();
                    }
                    ctx.get(&v, value, D1).unwrap();
                    ctx.wait(D1).unwrap();
                    let n = ctx.load(&v).unwrap();
                    ctx.store(&v, n + 1).unwrap();
                    ctx.put(value, &v, D1).unwrap();
                    ctx.rfence(N1).unwrap();
                    // Released by a CAS, not a put: on rxe a waiter's failing CAS writes back
                    // the 1 it read and can swallow a put of 0 (docs/verbs-notes.md pitfall 9);
                    // CASes exclude each other.
                    ctx.rcas(lock, 1, 0, &old, D1).unwrap();
                    ctx.wait(D1).unwrap();
                }
            });
        }
    });
    c.quiesce().unwrap();
    assert_eq!(c.peek(&value).unwrap(), rounds * threads.len() as u64);
}

/// An RMW whose result its thread has seen has taken effect at its target, also if the
/// thread's node dies right after (the responder did the read and the write as one): a later
/// FAA by a survivor counts from it. On the adversarial schedule, where the RMW's atomic write
/// may still sit in the target's write buffer when its result is seen (docs/model.md rules
/// 11-13), over many seeds.
#[test]
fn a_dead_initiators_completed_faa_is_not_lost() {
    for seed in 1..=40 {
        let c = Cluster::builder()
            .nodes(3)
            .memory_per_node(1 << 12)
            .soft(Schedule::Chaos { seed })
            .build()
            .unwrap();
        let w = c.alloc_word(NodeId(2)).unwrap();
        let c1 = c.clone();
        let seen = std::thread::spawn(move || {
            let ctx = c1.context(NodeId(1)).unwrap();
            let l = c1.alloc_word(NodeId(1)).unwrap();
            ctx.rfaa(&w, 1, &l, WorkId::new(1)).unwrap();
            ctx.wait(WorkId::new(1)).unwrap();
            ctx.load(&l).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(seen, 0);
        c.kill(NodeId(1)).unwrap();
        let ctx = c.context(NodeId(0)).unwrap();
        let l = c.alloc_word(NodeId(0)).unwrap();
        ctx.rfaa(&w, 1, &l, WorkId::new(1)).unwrap();
        ctx.wait(WorkId::new(1)).unwrap();
        assert_eq!(
            ctx.load(&l).unwrap(),
            1,
            "seed {seed}: the dead thread's FAA was lost"
        );
    }
}
