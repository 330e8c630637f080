//! Shared variables under the deterministic simulator (`loco_rdmawait::sim`): publication with
//! `bcast` and the global fence, checked over many seeded schedules and by bounded exhaustive
//! search, with a control that the simulator catches the same publication without the fence.
//!
//! The writer on n0 stores `data`, broadcasts it to every node, then raises `flag` on n2 the
//! same way. The reader on n2 waits for its copy of `flag`, then reads n1's copy of `data` with a
//! get. With `gf(all)` between the two broadcasts the data has landed everywhere before the flag
//! goes out (docs/model.md §5.2); without it, the broadcast towards n1 may still be in flight
//! when the reader looks there.

use loco_rdmawait::sim::{self, Config, FailureKind};
use loco_rdmawait::{Cluster, Ctx, NodeId, WorkId};
use loco_sv::{GlobalFence, SharedVar};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ALL: [NodeId; 3] = [NodeId(0), NodeId(1), NodeId(2)];

fn publish(fenced: bool) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync + 'static {
    move |cluster: &Cluster| {
        let data = SharedVar::new(cluster)?;
        let flag = SharedVar::new(cluster)?;
        let seen = cluster.alloc_word(NodeId(2))?;
        let (d2, f2) = (data.clone(), flag.clone());
        let writer = sim::spawn(
            cluster,
            NodeId(0),
            move |ctx: &Ctx| -> Result<(), BoxError> {
                d2.store(ctx, 7)?;
                d2.bcast(ctx, ALL, WorkId::new(1))?;
                ctx.wait(WorkId::new(1))?;
                if fenced {
                    ctx.gf_all()?;
                }
                f2.store(ctx, 1)?;
                f2.bcast(ctx, ALL, WorkId::new(1))?;
                ctx.wait(WorkId::new(1))?;
                Ok(())
            },
        );
        let reader = sim::spawn(
            cluster,
            NodeId(2),
            move |ctx: &Ctx| -> Result<(), BoxError> {
                while flag.load(ctx)? == 0 {
                    loco_rdmawait::clock::pause();
                }
                ctx.get(&seen, &data.copy(NodeId(1))?, WorkId::new(2))?;
                ctx.wait(WorkId::new(2))?;
                let v = ctx.load(&seen)?;
                if v != 7 {
                    return Err(format!("flag up, but n1's copy of data reads {v}").into());
                }
                Ok(())
            },
        );
        writer.join()?;
        reader.join()?;
        Ok(())
    }
}

#[test]
fn a_fenced_publication_holds_under_simulation() {
    let r = sim::check(Config::new(3).runs(3000), publish(true))
        .unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(r.runs, 3000);
    // Also every schedule within two deviations of the default (exhaustive search).
    let r = sim::check(
        Config::new(3)
            .runs(100_000)
            .strategy(loco_rdmawait::sim::Strategy::Exhaustive { max_delays: 2 }),
        publish(true),
    )
    .unwrap_or_else(|f| panic!("{}", f.report()));
    eprintln!("exhaustive: {r:?}");
    assert_ne!(
        r.search,
        loco_rdmawait::sim::Search::RunBound { runs: r.runs }
    );
}

#[test]
fn an_unfenced_publication_is_caught_and_replayed() {
    let f = sim::check(Config::new(3).runs(3000), publish(false))
        .expect_err("without gf, n1's copy can be stale");
    assert_eq!(f.kind(), FailureKind::Error, "{}", f.report());
    assert!(
        f.message().contains("n1's copy of data reads 0"),
        "{}",
        f.report()
    );
    let again = sim::replay(Config::new(3), f.seed(), publish(false)).expect_err("replays");
    assert_eq!(again.trace(), f.trace());
    // Exhaustive search finds it with two deviations from the default schedule (n2's copies
    // of data and flag land, n1's data stays pending), and replays it.
    let config = || {
        Config::new(3)
            .runs(100_000)
            .strategy(loco_rdmawait::sim::Strategy::Exhaustive { max_delays: 2 })
    };
    let f = sim::check(config(), publish(false)).expect_err("found exhaustively");
    assert!(
        f.message().contains("n1's copy of data reads 0"),
        "{}",
        f.report()
    );
    let again = sim::replay(config(), f.seed(), publish(false)).expect_err("replays");
    assert_eq!(again.trace(), f.trace());
}
