//! Shared variables and the global fence on the soft backend.

use std::thread;

use loco_rdmawait::{Cluster, NodeId, Schedule, WorkId};
use loco_sv::{GlobalFence, Result, SharedVar};

const D: WorkId = WorkId::new(1);

fn chaos(nodes: usize, seed: u64) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(4096)
        .soft(Schedule::Chaos { seed })
        .build()
        .expect("cluster")
}

#[test]
fn smoke() -> Result<()> {
    let cluster = Cluster::builder()
        .nodes(3)
        .soft(Schedule::Threaded)
        .build()?;
    let s = SharedVar::with_value(&cluster, 5)?;
    let ctx = cluster.context(NodeId(1))?;
    assert_eq!(s.load(&ctx)?, 5);
    s.store(&ctx, 9)?;
    assert_eq!(s.load(&ctx)?, 9);
    s.bcast(&ctx, cluster.node_ids(), D)?;
    ctx.gf_all()?;
    for n in cluster.node_ids() {
        assert_eq!(cluster.peek(&s.copy(n)?)?, 9);
    }
    Ok(())
}

/// After `gf(N)` every earlier put and broadcast towards N has landed, under every schedule the
/// chaos NIC picks (no quiesce: memory is read directly).
#[test]
fn gf_lands_puts_and_bcasts() -> Result<()> {
    for seed in 0..2_000 {
        let cluster = chaos(3, seed);
        let s = SharedVar::new(&cluster)?;
        let src = cluster.alloc_word(NodeId(0))?;
        let dst = cluster.alloc_word(NodeId(2))?;
        let ctx = cluster.context(NodeId(0))?;
        ctx.store(&src, seed + 1)?;
        ctx.put(&dst, &src, D)?;
        s.store(&ctx, seed + 2)?;
        s.bcast(&ctx, [NodeId(1), NodeId(2)], D)?;
        ctx.gf([NodeId(1), NodeId(2)])?;
        assert_eq!(cluster.peek(&dst)?, seed + 1, "seed {seed}: put not landed");
        assert_eq!(cluster.peek(&s.copy(NodeId(1))?)?, seed + 2, "seed {seed}");
        assert_eq!(cluster.peek(&s.copy(NodeId(2))?)?, seed + 2, "seed {seed}");
    }
    Ok(())
}

/// Without the fence the chaos NIC does leave puts in flight after a wait (Fig. 5's premise).
#[test]
fn wait_alone_does_not_land_puts() -> Result<()> {
    let mut in_flight = 0;
    for seed in 0..500 {
        let cluster = chaos(2, seed);
        let src = cluster.alloc_word(NodeId(0))?;
        let dst = cluster.alloc_word(NodeId(1))?;
        let ctx = cluster.context(NodeId(0))?;
        ctx.store(&src, 1)?;
        ctx.put(&dst, &src, D)?;
        ctx.wait(D)?;
        if cluster.peek(&dst)? == 0 {
            in_flight += 1;
        }
    }
    assert!(in_flight > 0, "a wait never left a put in flight");
    Ok(())
}

/// Store buffering through puts (Fig. 5), returning (t0:r0, t1:r0).
fn sb(seed: u64, fence: bool) -> Result<(u64, u64)> {
    let cluster = chaos(2, seed);
    let x = cluster.alloc_word(NodeId(0))?;
    let one0 = cluster.alloc_word(NodeId(0))?;
    let y = cluster.alloc_word(NodeId(1))?;
    let one1 = cluster.alloc_word(NodeId(1))?;
    cluster.poke(&one0, 1)?;
    cluster.poke(&one1, 1)?;
    let side = |me: NodeId, other: NodeId, dst, src, mine| {
        let cluster = cluster.clone();
        thread::spawn(move || -> Result<u64> {
            let ctx = cluster.context(me)?;
            ctx.put(&dst, &src, D)?;
            if fence {
                ctx.gf([other])?;
            } else {
                ctx.wait(D)?;
            }
            Ok(ctx.load(&mine)?)
        })
    };
    let t0 = side(NodeId(0), NodeId(1), y, one0, x);
    let t1 = side(NodeId(1), NodeId(0), x, one1, y);
    Ok((t0.join().unwrap()?, t1.join().unwrap()?))
}

#[test]
fn fig5_sb_put_gf_forbidden() -> Result<()> {
    for seed in 0..10_000 {
        assert_ne!(sb(seed, true)?, (0, 0), "seed {seed}: fig5-sb-put-gf");
    }
    Ok(())
}

#[test]
fn fig5_sb_put_wait_allowed() -> Result<()> {
    let seen = (0..2_000).try_fold(0, |n, seed| {
        Ok::<_, loco_sv::Error>(n + u32::from(sb(seed, false)? == (0, 0)))
    })?;
    assert!(seen > 0, "fig5-sb-put-wait: weak outcome never seen");
    Ok(())
}
