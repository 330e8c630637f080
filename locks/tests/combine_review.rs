//! `Lock::combine`, second reading: the calling thread's own program order around its section,
//! wake-ups of the next combiner, and a cluster shut down under waiting threads.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use loco_locks::NLock;
use loco_rdmawait::sim::{self, Config, Strategy};
use loco_rdmawait::{Cluster, Ctx, NodeId, WorkId};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const D: WorkId = WorkId::new(7);
const E: WorkId = WorkId::new(8);

/// A thread puts a value to a remote word and, without waiting for the put, combines a section
/// that reads that word back. Under a plain lock the section's get follows the put on the
/// thread's own queue pair (docs/model.md §4.4, rule 6) and sees it; a section run by another
/// thread, the combiner, on its own queue pairs must see it as well: program order of the
/// calling thread holds across `combine`.
#[test]
fn a_section_sees_its_callers_earlier_puts() {
    for strategy in [Strategy::Random, Strategy::Pct { depth: 3 }] {
        let r = sim::check(
            Config::new(2)
                .runs(400)
                .strategy(strategy)
                .timeout(Duration::from_millis(20)),
            |cluster: &Cluster| -> Result<(), BoxError> {
                let lock = NLock::new(cluster, NodeId(1))?;
                let mut hs = Vec::new();
                for t in 0..3u64 {
                    let (l, x) = (lock.clone(), cluster.alloc_word(NodeId(1))?);
                    let src = cluster.alloc_word(NodeId(0))?;
                    let dst = cluster.alloc_word(NodeId(0))?;
                    hs.push(sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
                        for round in 1..=2u64 {
                            let v = 100 * t + round;
                            ctx.store(&src, v)?;
                            ctx.put(&x, &src, D)?; // not waited for
                            let seen = l.combine(ctx, move |ctx: &Ctx| {
                                ctx.get(&dst, &x, E)?;
                                ctx.wait(E)?;
                                ctx.load(&dst)
                            })??;
                            if seen != v {
                                return Err(format!(
                                    "thread {t}: its section read {seen}, not the {v} it put before"
                                )
                                .into());
                            }
                            ctx.wait(D)?;
                        }
                        Ok::<(), BoxError>(())
                    }));
                }
                for h in hs {
                    h.join()?;
                }
                Ok(())
            },
        )
        .unwrap_or_else(|f| panic!("{strategy:?}:\n{}", f.report()));
        assert_eq!(r.runs, 400);
    }
}

/// The cluster shut down while a thread's section is being run by another thread: its caller
/// may get an error, but only once the section is over (not while it still runs on the
/// combiner, whose writes could then land on words the caller already reuses).
#[test]
fn a_shutdown_does_not_return_a_caller_whose_section_still_runs() {
    let r = sim::check(
        Config::new(2).runs(400).timeout(Duration::from_millis(20)),
        |cluster: &Cluster| -> Result<(), BoxError> {
            let lock = NLock::new(cluster, NodeId(1))?;
            let mut hs = Vec::new();
            for t in 0..3 {
                let (l, c) = (lock.clone(), cluster.clone());
                hs.push(sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
                    let running = Arc::new(AtomicUsize::new(0));
                    let r2 = running.clone();
                    let r = l.combine(ctx, move |_: &Ctx| {
                        r2.store(1, SeqCst);
                        if t == 2 {
                            c.shutdown();
                        }
                        // More of the section after the shutdown (scheduling points).
                        for _ in 0..20 {
                            loco_rdmawait::clock::pause();
                        }
                        r2.store(2, SeqCst);
                    });
                    if running.load(SeqCst) == 1 {
                        return Err(format!(
                            "thread {t}: combine returned {r:?} while its section was still running"
                        ));
                    }
                    Ok(())
                }));
            }
            for h in hs {
                h.join()?;
            }
            Ok(())
        },
    )
    .unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(r.runs, 400);
}

/// `Ctx::wait_all` in an async task's blocking call waits for what the context had posted when
/// it was called, not for what the context's other tasks post while it is suspended (later in
/// the thread's program): a combiner running in a task would otherwise fail its batch
/// (`Error::Combined`) on another task's request towards an unrelated stalled node, or never
/// finish while the other tasks keep posting.
#[cfg(feature = "tokio")]
#[test]
fn wait_all_in_a_task_waits_only_for_what_was_posted_before() {
    use loco_rdmawait::aio::AsyncCtx;
    use loco_rdmawait::{Schedule, SoftBackend};
    use std::cell::Cell;
    use std::rc::Rc;

    let soft = Arc::new(SoftBackend::try_new(3, 64, Schedule::Threaded).unwrap());
    let c = Cluster::with_backend(Box::new(soft.clone()), Duration::from_secs(2));
    let x = c.alloc_word(NodeId(0)).unwrap();
    let (y1, y2) = (
        c.alloc_word(NodeId(1)).unwrap(),
        c.alloc_word(NodeId(2)).unwrap(),
    );
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    actx.ctx().store(&x, 5).unwrap();
    soft.stall(NodeId(1), true).unwrap();
    let waiting = Rc::new(Cell::new(false));
    let local = tokio::task::LocalSet::new();
    let waiter = {
        let (actx, waiting) = (actx.clone(), waiting.clone());
        local.spawn_local(async move {
            actx.run(|ctx| {
                ctx.put(&y1, &x, D)?;
                waiting.set(true);
                ctx.wait_all()
            })
            .await
        })
    };
    let other = {
        let (actx, soft) = (actx.clone(), soft.clone());
        local.spawn_local(async move {
            while !waiting.get() {
                tokio::task::yield_now().await;
            }
            // Posted while the wait is suspended, towards a node that stays stalled.
            soft.stall(NodeId(2), true).unwrap();
            // (Its `Op` dropped: the context keeps tracking the request.)
            let _later = actx.put(&y2, &x).unwrap();
            soft.stall(NodeId(1), false).unwrap();
        })
    };
    let tokio_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = tokio_rt.block_on(local.run_until(async {
        other.await.unwrap();
        waiter.await.unwrap()
    }));
    soft.stall(NodeId(2), false).unwrap();
    r.expect("wait_all waited for an operation posted after it was called");
    c.quiesce().unwrap();
    assert_eq!(c.peek(&y2).unwrap(), 5);
}

/// A context made before some other node restarted still combines on a lock elsewhere: the
/// fence a caller runs before queuing its section leaves out nodes it has nothing on its way
/// to (a restarted node is never "fenced" for an old context, and its operations towards it
/// fail).
#[test]
fn an_old_context_combines_after_another_node_restarted() {
    for touched in [false, true] {
        let c =
            loco_rdmawait::testing::short_cluster(3, 1 << 12, loco_rdmawait::Schedule::Threaded);
        let l = NLock::new(&c, NodeId(1)).unwrap();
        let ctx = c.context(NodeId(0)).unwrap();
        let (w, y) = (
            c.alloc_word(NodeId(0)).unwrap(),
            c.alloc_word(NodeId(2)).unwrap(),
        );
        if touched {
            ctx.put(&y, &w, D).unwrap();
            ctx.wait(D).unwrap();
        }
        assert_eq!(l.combine(&ctx, |_| 1).unwrap(), 1);
        c.kill(NodeId(2)).unwrap();
        c.restart(NodeId(2)).unwrap();
        assert_eq!(
            l.combine(&ctx, |_| 2).unwrap(),
            2,
            "touched n2 before: {touched}"
        );
    }
}

/// The remedy the docs give for reading a section's writes back outside the lock: a section
/// that ends with `gf` towards the node it wrote is landed when `combine` returns, so its
/// caller's own get of the word, on the caller's queue pair, sees the value, whichever thread
/// ran the section. Six threads on two nodes, each with its own word on n2, under the
/// simulator's seeded schedules.
#[test]
fn a_section_that_fences_is_seen_by_its_callers_own_reads() {
    use loco_sv::GlobalFence;
    let r = sim::check(
        Config::new(3).runs(300).timeout(Duration::from_millis(20)),
        |cluster: &Cluster| -> Result<(), BoxError> {
            let lock = NLock::new(cluster, NodeId(0))?;
            let mut hs = Vec::new();
            for t in 0..6u64 {
                let node = NodeId((t % 2) as u16);
                let word = cluster.alloc_word(NodeId(2))?;
                let (src, back) = (cluster.alloc_word(node)?, cluster.alloc_word(node)?);
                let l = lock.clone();
                hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                    for round in 1..=2u64 {
                        let v = t * 10 + round;
                        ctx.store(&src, v)?;
                        l.combine(ctx, move |ctx| -> Result<(), BoxError> {
                            ctx.put(&word, &src, D)?;
                            ctx.gf([NodeId(2)])?;
                            Ok(())
                        })??;
                        ctx.get(&back, &word, D)?;
                        ctx.wait(D)?;
                        let seen = ctx.load(&back)?;
                        if seen != v {
                            return Err(format!("read back {seen}, not {v}").into());
                        }
                    }
                    Ok::<(), BoxError>(())
                }));
            }
            for h in hs {
                h.join()?;
            }
            Ok(())
        },
    )
    .unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(r.runs, 300);
}
