//! SC locations under a node failure (soft NIC, Threaded and Chaos): a node that holds one SC
//! location dies while threads on the other nodes run SC operations. Operations on the dead
//! node's location end in a typed error (`PeerDead` naming it, or `Timeout`), never a hang;
//! operations on the live nodes' locations go on and their histories stay linearizable (the
//! `lincheck` checker).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use loco_rdmawait::{Cluster, NodeId, Schedule};
use loco_sc::lincheck::{check, Call, Recorder, Register, RegisterOp};
use loco_sc::{Error, Sc, ScLoc};

/// Generous bound on a run.
const BOUND: Duration = Duration::from_secs(60);
/// The node that dies: it holds location `dead`, and no live location.
const VICTIM: NodeId = NodeId(0);

fn op(t: usize, k: u64) -> RegisterOp {
    match (t as u64 * 7 + k) % 4 {
        0 => RegisterOp::Read,
        1 => RegisterOp::Write(1 + (t as u64 * 5 + k) % 3),
        2 => RegisterOp::Cas(k % 3, 1 + k % 3),
        _ => RegisterOp::Faa(1),
    }
}

/// Whether `e` is the typed error of an operation that depended on the dead node.
fn is_fault(e: &Error) -> bool {
    matches!(
        e,
        Error::Rdma(loco_rdmawait::Error::PeerDead { node, .. }) if *node == VICTIM
    ) || matches!(e, Error::Rdma(loco_rdmawait::Error::Timeout { .. }))
        || matches!(e, Error::Lock(loco_locks::Error::Timeout { .. }))
}

type History = Vec<Call<RegisterOp, u64>>;

/// One run on 4 nodes: locations on n1, n2 (live) and n0 (dies). A thread on n0 works its own
/// location; threads on n1..n3 work all three. n0 is killed once every thread has started.
/// Returns the live locations' histories and how many calls failed with a fault.
fn run(schedule: Schedule) -> ([History; 2], usize) {
    let c: Cluster = Cluster::builder()
        .nodes(4)
        .memory_per_node(common::MEMORY)
        .soft(schedule)
        .timeout(Duration::from_secs(2))
        .build()
        .expect("cluster");
    let live = [
        ScLoc::new_on(&c, NodeId(1), 0).unwrap(),
        ScLoc::new_on(&c, NodeId(2), 0).unwrap(),
    ];
    let dead = ScLoc::new_on(&c, VICTIM, 0).unwrap();
    let recs = [Recorder::new(), Recorder::new()];
    let killed = AtomicBool::new(false);
    let faults = thread::scope(|s| {
        let victim = s.spawn(|| {
            let Ok(ctx) = c.context(VICTIM) else { return };
            // Its calls fail once it is dead; only its own location is touched.
            for k in 0..200u64 {
                if ctx.faa_sc(&dead, 1).is_err() || (k > 20 && killed.load(Ordering::SeqCst)) {
                    break;
                }
            }
        });
        let workers: Vec<_> = (1..4u16)
            .map(|n| {
                let (live, recs, dead, c, killed) = (&live, &recs, &dead, &c, &killed);
                s.spawn(move || -> loco_sc::Result<usize> {
                    let ctx = c.context(NodeId(n))?;
                    let t = n as usize;
                    let mut faults = 0;
                    for k in 0..6u64 {
                        let i = ((t as u64 + k) % 2) as usize;
                        let (x, rec) = (&live[i], &recs[i]);
                        rec.record(t, op(t, k), |op| match *op {
                            RegisterOp::Read => ctx.read_sc(x),
                            RegisterOp::Write(v) => ctx.write_sc(x, v).map(|()| 0),
                            RegisterOp::Cas(e, v) => ctx.cas_sc(x, e, v),
                            RegisterOp::Faa(a) => ctx.faa_sc(x, a),
                        })?;
                        if k == 2 && n == 1 {
                            c.kill(VICTIM)?;
                            killed.store(true, Ordering::SeqCst);
                        }
                        if killed.load(Ordering::SeqCst) {
                            // The dead node's location: an error, or (before the death was
                            // noticed) a result; never a hang.
                            match ctx.read_sc(dead) {
                                Ok(_) => {}
                                Err(e) if is_fault(&e) => faults += 1,
                                Err(e) => return Err(e),
                            }
                        }
                    }
                    Ok(faults)
                })
            })
            .collect();
        let faults = workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked").expect("worker failed"))
            .sum();
        victim.join().expect("victim panicked");
        faults
    });
    (recs.map(Recorder::into_history), faults)
}

#[test]
fn live_locations_stay_linearizable_when_a_node_dies() {
    let mut schedules = vec![Schedule::Threaded];
    schedules.extend((0..common::runs(12, 0).min(12)).map(|seed| Schedule::Chaos { seed }));
    for s in schedules {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(run(s));
        });
        let (hs, faults) = rx
            .recv_timeout(BOUND)
            .unwrap_or_else(|_| panic!("{s:?}: a run hung"));
        for h in &hs {
            assert_eq!(h.len(), 9, "{s:?}: every live call returned");
            if let Err(e) = check(&Register::default(), h) {
                panic!("{s:?}: {e}\nhistory: {h:#?}");
            }
        }
        assert!(faults > 0, "{s:?}: the dead node's location never failed");
    }
}

/// Contexts that come and go: each runs SC operations on two locations and is dropped; their
/// scratch words, lock words and fence words come back, so 500 contexts fit in nodes of 512
/// words (on every schedule).
#[test]
fn dropped_contexts_give_their_words_back() {
    for s in [
        Schedule::Immediate,
        Schedule::Threaded,
        Schedule::Chaos { seed: 4 },
    ] {
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(4096)
            .soft(s)
            .timeout(BOUND)
            .build()
            .unwrap();
        let x = ScLoc::new_on(&c, NodeId(1), 0).unwrap();
        let y = ScLoc::new_on(&c, NodeId(0), 0).unwrap();
        for i in 0..500u64 {
            let ctx = c.context(NodeId(0)).unwrap();
            let r = ctx
                .faa_sc(&x, 1)
                .and_then(|_| ctx.write_sc(&y, i))
                .and_then(|()| ctx.read_sc(&y));
            assert_eq!(r.unwrap_or_else(|e| panic!("{s:?}, context {i}: {e}")), i);
        }
        let ctx = c.context(NodeId(1)).unwrap();
        assert_eq!(ctx.read_sc(&x).unwrap(), 500, "{s:?}");
    }
}
