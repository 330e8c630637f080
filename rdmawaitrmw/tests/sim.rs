//! Remote RMWs under the deterministic simulator with a network profile: an idle rFAA takes
//! the round trip the profile predicts, and rFAAs on one node are serialised by the target's
//! remote-atomic lock (docs/model.md §4.4, rules 9-13), each holding it for the profile's
//! `atomic` time, while no update is lost.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loco_rdmawait::sim::{self, Config, FailedCas, Profile};
use loco_rdmawait::{Cluster, Ctx, NodeId, WorkId};
use loco_rdmawaitrmw::Rmw;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[test]
fn an_idle_rfaa_takes_the_predicted_round_trip() {
    for base in [Profile::connectx5(), Profile::rxe()] {
        let p = Profile {
            jitter: 0.0,
            ..base
        };
        let took: Arc<Mutex<Duration>> = Arc::default();
        let out = took.clone();
        let f = move |cluster: &Cluster| {
            let (x, ret) = (
                cluster.alloc_word(NodeId(1))?,
                cluster.alloc_word(NodeId(0))?,
            );
            let out = out.clone();
            sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
                let t0 = sim::now();
                ctx.rfaa(&x, 1, &ret, WorkId::new(1))?;
                ctx.wait(WorkId::new(1))?;
                *out.lock().unwrap() = sim::now() - t0;
                Ok::<(), loco_rdmawait::Error>(())
            })
            .join()?;
            Ok::<(), BoxError>(())
        };
        sim::replay(Config::new(2).profile(p.clone()), 3, f).unwrap();
        assert_eq!(*took.lock().unwrap(), p.predict_rmw(), "{}", p.name);
    }
}

#[test]
fn contended_rfaas_are_serialised_and_lose_nothing() {
    // Unserialised, each thread would be done after EACH round trips (about 4.6 µs); serialised,
    // the last RMW ends after THREADS * EACH * atomic (7.2 µs).
    const THREADS: u64 = 12;
    const EACH: u64 = 2;
    let p = Profile {
        jitter: 0.0,
        ..Profile::connectx5()
    };
    let atomic = p.atomic;
    let f = move |cluster: &Cluster| {
        let x = cluster.alloc_word(NodeId(0))?;
        let mut hs = Vec::new();
        for t in 0..THREADS {
            let node = NodeId(1 + (t % 3) as u16);
            let ret = cluster.alloc_word(node)?;
            hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                for _ in 0..EACH {
                    ctx.rfaa(&x, 1, &ret, WorkId::new(1))?;
                    ctx.wait(WorkId::new(1))?;
                }
                Ok::<(), loco_rdmawait::Error>(())
            }));
        }
        for h in hs {
            h.join()?;
        }
        let v = cluster.peek(&x)?;
        if v != THREADS * EACH {
            return Err::<(), BoxError>(format!("lost updates: {v}").into());
        }
        // Every RMW held node 0's remote-atomic lock for `atomic`, one after the other.
        let t = sim::now();
        if t < atomic * (THREADS * EACH) as u32 {
            return Err(format!("not serialised: all done at {t:?}").into());
        }
        Ok(())
    };
    let r = sim::check(Config::new(4).profile(p).runs(10), f).unwrap();
    assert_eq!(r.runs, 10);
}

/// A failing remote CAS against a put on the same word (Fig. 6b with a CAS that fails): under
/// the model's rule 9 the put is never lost; with rxe's write-back (`FailedCas::WritesBack`,
/// docs/verbs-notes.md pitfall 9) the simulator finds a run where it is, and replays it.
#[test]
fn a_failed_cas_loses_a_put_only_with_rxe_write_back() {
    fn race(cluster: &Cluster) -> Result<(), BoxError> {
        let x = cluster.alloc_word(NodeId(1))?;
        let ret = cluster.alloc_word(NodeId(0))?;
        let two = cluster.alloc_word(NodeId(2))?;
        let cas = sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
            ctx.rcas(&x, 5, 6, &ret, WorkId::new(1))?; // x is 0 or 2: it fails
            ctx.wait(WorkId::new(1))
        });
        let put = sim::spawn(cluster, NodeId(2), move |ctx: &Ctx| {
            ctx.store(&two, 2)?;
            ctx.put(&x, &two, WorkId::new(1))?;
            ctx.wait(WorkId::new(1))
        });
        cas.join()?;
        put.join()?;
        // Both done; every write landed once the NIC has quiesced.
        cluster.quiesce()?;
        match cluster.peek(&x)? {
            2 => Ok(()),
            v => Err(format!("the put was lost: x = {v}").into()),
        }
    }
    let config = |mode| Config::new(3).runs(300).seed(5).failed_cas(mode);
    sim::check(config(FailedCas::Reads), race).unwrap_or_else(|f| panic!("{}", f.report()));
    let f = sim::check(config(FailedCas::WritesBack), race)
        .expect_err("rxe's write-back loses the put in some run");
    assert!(f.to_string().contains("the put was lost"), "{f}");
    let again = sim::replay(
        Config::new(3).failed_cas(FailedCas::WritesBack),
        f.seed(),
        race,
    )
    .expect_err("the replay fails the same way");
    assert_eq!(again.to_string(), f.to_string());
}
