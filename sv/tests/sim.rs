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

/// Store buffering on one node with `gf` as the fence: `store(x, 1); gf([n0]); load(y)` beside
/// `store(y, 1); gf([n0]); load(x)`, both on n0. Neither thread has posted anything, so `gf`
/// leaves n0 out (`Ctx::fenced`); it must still drain the store buffer, as the full fence's
/// wait does (its get travels through the buffer), so both loads cannot read 0 (docs/model.md
/// §5.2).
fn sb_with_gf(cluster: &Cluster) -> Result<(), BoxError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let x = cluster.alloc_word(NodeId(0))?;
    let y = cluster.alloc_word(NodeId(0))?;
    let read = Arc::new([AtomicU64::new(9), AtomicU64::new(9)]);
    let side = |i: usize, mine: loco_rdmawait::Loc, other: loco_rdmawait::Loc| {
        let read = read.clone();
        sim::spawn(
            cluster,
            NodeId(0),
            move |ctx: &Ctx| -> Result<(), BoxError> {
                ctx.store(&mine, 1)?;
                ctx.gf([NodeId(0)])?;
                read[i].store(ctx.load(&other)?, Ordering::Relaxed);
                Ok(())
            },
        )
    };
    let (t0, t1) = (side(0, x, y), side(1, y, x));
    t0.join()?;
    t1.join()?;
    let r = (
        read[0].load(Ordering::Relaxed),
        read[1].load(Ordering::Relaxed),
    );
    if r == (0, 0) {
        return Err("both loads read 0 after gf".into());
    }
    Ok(())
}

#[test]
fn a_gf_that_leaves_every_node_out_still_drains_the_store_buffer() {
    sim::check(Config::new(1).runs(2000), sb_with_gf).unwrap_or_else(|f| panic!("{}", f.report()));
}
