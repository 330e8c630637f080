//! Async against blocking, measured in one run (feature `tokio`): the latency of `put` + await
//! against `put` + `wait`, and the throughput of many outstanding async puts per thread against
//! the blocking one-at-a-time loop; and, for locks, many tasks of one context taking turns at a
//! node lock on n1 (a put to n1 awaited in each critical section) with the local handover of
//! `acquire_async` against the same with it turned off (`set_local_handovers(0)`: a network
//! release and acquire per critical section). The measurements alternate in rounds and the
//! medians of the per-round ratios are printed with their spread.
//!
//! ```sh
//! cargo run --release --features tokio --example aio_bench
//! # on rxe, in the project's VM (from a verbs build):
//! cargo build --release --features tokio,verbs --example aio_bench
//! LOCO_BACKEND=verbs soft-roce-ci/vm.sh -- target/release/examples/aio_bench
//! ```
//!
//! On rxe over loop-back (one VM) a request mostly completes inside its post, so outstanding
//! requests cannot overlap there: the throughput ratio says something only across hosts. Across
//! two hosts (`LOCO_NODE_ID` and a two-entry `LOCO_PEERS`, one process per host; with `verbs`)
//! n1's process serves its memory and n0's measures:
//!
//! ```sh
//! soft-roce-ci/cluster.sh --vms 2 -- /path/to/a/copy/of/aio_bench
//! ```

use std::time::{Duration, Instant};

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use loco::aio::AsyncCtx;
use loco::prelude::*;

#[derive(Parser)]
struct Args {
    /// Operations per measurement (1 to 2^32).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    iters: u64,
    /// Rounds, each measures all three (1 to 1000).
    #[arg(long, default_value_t = 5, value_parser = RangedU64ValueParser::<usize>::from(1..=1000))]
    rounds: usize,
    /// Tasks with a put outstanding at once, for the throughput measurement (1 to 4096).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    tasks: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let c = Cluster::builder().nodes(2).backend_from_env()?.build()?;
    let src = c.alloc_words(NodeId(0), a.tasks)?;
    let dst = c.alloc_words(NodeId(1), a.tasks)?;
    // Made by both processes, in the same order, so that its words agree.
    let lock = loco::locks::NLock::new(&c, NodeId(1))?;
    // One process per host: n1's serves its memory until n0's is done.
    #[cfg(feature = "verbs")]
    let process = loco::rdmawait::backend::verbs::Process::of(&c)
        .ok()
        .filter(|p| p.node().is_some());
    #[cfg(feature = "verbs")]
    if let Some(p) = &process {
        p.barrier()?;
        if p.node() != Some(NodeId(0)) {
            p.barrier()?;
            return Ok(());
        }
    }
    let measured = AsyncCtx::open(&c, NodeId(0))
        .map_err(Into::into)
        .and_then(|actx| measure(&a, &c, &actx, &src, &dst, &lock));
    #[cfg(feature = "verbs")]
    if let Some(p) = &process {
        // The closing barrier, even after a failure, so that n1's process does not hang.
        p.barrier()?;
    }
    measured
}

/// The rounds, on n0; prints the table.
fn measure(
    a: &Args,
    c: &Cluster,
    actx: &AsyncCtx,
    src: &Loc,
    dst: &Loc,
    lock: &loco::locks::NLock,
) -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let (s0, d0) = (src.word(0)?, dst.word(0)?);
    let d = WorkId::new(1);
    let (mut lat_ratio, mut thr_ratio) = (Vec::new(), Vec::new());
    let (mut blocking_us, mut async_us, mut many_us) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cs_off_us, mut cs_on_us, mut cs_ratio) = (Vec::new(), Vec::new(), Vec::new());
    // `tasks` tasks taking turns at the lock, `iters` critical sections in all; the handover
    // bound set first (0: off). The time per critical section.
    let sections = |handovers: u32| {
        lock.set_local_handovers(handovers);
        rt.block_on(local.run_until(async {
            let t = Instant::now();
            let per = (a.iters / a.tasks).max(1);
            let hs: Vec<_> = (0..a.tasks)
                .map(|i| {
                    let (actx, lock) = (actx.clone(), lock.clone());
                    let (s, dd) = (src.word(i).unwrap(), dst.word(i).unwrap());
                    tokio::task::spawn_local(async move {
                        for _ in 0..per {
                            let g = lock.acquire_async(&actx).await?;
                            actx.put(&dd, &s)?.await?;
                            loco::locks::LockGuard::release(g)?;
                        }
                        Ok::<(), loco::locks::Error>(())
                    })
                })
                .collect();
            for h in hs {
                h.await.expect("a task panicked")?;
            }
            Ok::<f64, loco::locks::Error>(t.elapsed().as_secs_f64() * 1e6 / (per * a.tasks) as f64)
        }))
    };
    for _ in 0..a.rounds {
        // Blocking: put + wait, one at a time.
        let ctx = actx.ctx();
        let t = Instant::now();
        for _ in 0..a.iters {
            ctx.put(&d0, &s0, d)?;
            ctx.wait(d)?;
        }
        let blocking = t.elapsed();
        // Async, one task: put + await, one at a time.
        let one = rt.block_on(local.run_until(async {
            let t = Instant::now();
            for _ in 0..a.iters {
                actx.put(&d0, &s0)?.await?;
            }
            Ok::<Duration, loco::rdmawait::Error>(t.elapsed())
        }))?;
        // Async, many tasks with a put outstanding each.
        let many = rt.block_on(local.run_until(async {
            let t = Instant::now();
            let per = (a.iters / a.tasks).max(1);
            let hs: Vec<_> = (0..a.tasks)
                .map(|i| {
                    let actx = actx.clone();
                    let (s, dd) = (src.word(i).unwrap(), dst.word(i).unwrap());
                    tokio::task::spawn_local(async move {
                        for _ in 0..per {
                            actx.put(&dd, &s)?.await?;
                        }
                        Ok::<(), loco::rdmawait::Error>(())
                    })
                })
                .collect();
            for h in hs {
                h.await.expect("a task panicked")?;
            }
            // Scaled to `iters` puts (`per * tasks` is at most `iters`, or `tasks` when
            // there are fewer puts than tasks).
            Ok::<Duration, loco::rdmawait::Error>(
                t.elapsed().mul_f64(a.iters as f64 / (per * a.tasks) as f64),
            )
        }))?;
        let per_op = |d: Duration| d.as_secs_f64() * 1e6 / a.iters as f64;
        blocking_us.push(per_op(blocking));
        async_us.push(per_op(one));
        many_us.push(per_op(many));
        lat_ratio.push(one.as_secs_f64() / blocking.as_secs_f64());
        thr_ratio.push(blocking.as_secs_f64() / many.as_secs_f64());
        let off = sections(0)?;
        let on = sections(loco::locks::LOCAL_HANDOVERS)?;
        cs_off_us.push(off);
        cs_on_us.push(on);
        cs_ratio.push(off / on);
    }
    let spread = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
        format!("{lo:.2}-{hi:.2}")
    };
    println!(
        "backend {}, {} rounds of {} puts (8 B, n0 -> n1)",
        c.backend_name(),
        a.rounds,
        a.iters
    );
    if c.backend_name() == "soft" {
        // The soft NIC (Immediate) executes a request inside its post: there is no round trip
        // for async tasks to overlap or for a local handover to save, so its ratios fall short
        // of goals that are about a real NIC, and that is not a fault of the async layer.
        println!(
            "  (soft NIC: each request completes inside its post, so nothing overlaps and there is \
             no round trip to save; the goals are for an RDMA device, across hosts)"
        );
    }
    println!(
        "  blocking put+wait        {:8.2} us/op",
        median(blocking_us.clone())
    );
    println!(
        "  async put+await, 1 task  {:8.2} us/op",
        median(async_us.clone())
    );
    println!(
        "  async, {:3} tasks         {:8.2} us/op",
        a.tasks,
        median(many_us.clone())
    );
    println!(
        "  latency ratio async/blocking          {:.2} ({})  goal <= 1.2",
        median(lat_ratio.clone()),
        spread(&lat_ratio)
    );
    println!(
        "  throughput ratio {} tasks/blocking    {:.2} ({})  goal >= 3",
        a.tasks,
        median(thr_ratio.clone()),
        spread(&thr_ratio)
    );
    println!(
        "  NLock on n1, {} tasks: {:8.2} us per critical section with local handover, {:8.2} without",
        a.tasks,
        median(cs_on_us.clone()),
        median(cs_off_us.clone())
    );
    println!(
        "  lock throughput ratio local handover/none  {:.2} ({})",
        median(cs_ratio.clone()),
        spread(&cs_ratio)
    );
    println!(
        "  waits that slept on the completion channel: {} (ended by the backstop: {})",
        actx.channel_sleeps(),
        actx.channel_backstops()
    );
    Ok(())
}
