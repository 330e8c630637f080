//! Awaited acquires (feature `tokio`): mutual exclusion among tasks of one context and across
//! threads, an awaited acquire that lets its thread's other tasks run, and a cancelled acquire
//! that leaves the lock free.
#![cfg(feature = "tokio")]

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, Result, SLock, WLock};
use loco_rdmawait::aio::AsyncCtx;
use loco_rdmawait::{testing, BackendKind, Cluster, Loc, NodeId, Schedule};
use loco_sv::GlobalFence;

const K: NodeId = NodeId(2);

#[derive(Clone)]
enum Variant {
    Slock(SLock),
    Nlock(NLock),
    WlockGf(WLock),
}

impl Variant {
    /// One critical section of a task: acquire, increment the counter on K (the weak lock
    /// then publishes it with `gf`), yield first if `linger` (the context's other tasks run
    /// and queue meanwhile), release. Returns the hold's ticket.
    async fn section(&self, actx: &AsyncCtx, tmp: &Loc, counter: &Loc, linger: bool) -> u64 {
        match self {
            Variant::Slock(l) => section(l, actx, tmp, counter, false, linger).await,
            Variant::Nlock(l) => section(l, actx, tmp, counter, false, linger).await,
            Variant::WlockGf(l) => section(l, actx, tmp, counter, true, linger).await,
        }
    }

    fn set_local_handovers(&self, max: u32) {
        match self {
            Variant::Slock(l) => l.set_local_handovers(max),
            Variant::Nlock(l) => l.set_local_handovers(max),
            Variant::WlockGf(l) => l.set_local_handovers(max),
        }
    }
}

async fn section<R: RawLock>(
    l: &Lock<R>,
    actx: &AsyncCtx,
    tmp: &Loc,
    counter: &Loc,
    gf: bool,
    linger: bool,
) -> u64 {
    let g = l.acquire_async(actx).await.unwrap();
    increment(actx, tmp, counter).await.unwrap();
    if gf {
        actx.run(|ctx| ctx.gf([K])).await.unwrap();
    }
    if linger {
        tokio::task::yield_now().await;
    }
    let t = LockGuard::ticket(&g);
    LockGuard::release(g).unwrap();
    t
}

fn local_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One increment of the counter on K: get, add on the CPU, put (the counter test's critical
/// section, as the tasks' own operations).
async fn increment(actx: &AsyncCtx, tmp: &Loc, counter: &Loc) -> Result<()> {
    actx.get(tmp, counter)?.await?;
    let ctx = actx.ctx();
    ctx.store(tmp, ctx.load(tmp)? + 1)?;
    actx.put(counter, tmp)?.await?;
    Ok(())
}

/// `threads` OS threads (one context each, round-robin over 3 nodes), `tasks` tasks per
/// context, `iters` increments per task; returns the count.
fn count(
    schedule: Schedule,
    v: fn(&Cluster) -> Variant,
    threads: usize,
    tasks: usize,
    iters: u64,
) -> u64 {
    let c = testing::cluster(3, 1 << 16, schedule).unwrap();
    let counter = c.alloc_word(K).unwrap();
    let v = v(&c);
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let (c, v) = (c.clone(), v.clone());
            std::thread::spawn(move || {
                let node = NodeId((i % 3) as u16);
                let actx = AsyncCtx::open(&c, node).unwrap();
                let local = tokio::task::LocalSet::new();
                let mut handles = Vec::new();
                for _ in 0..tasks {
                    let (actx, v, c) = (actx.clone(), v.clone(), c.clone());
                    handles.push(local.spawn_local(async move {
                        let tmp = c.alloc_word(node).unwrap();
                        for _ in 0..iters {
                            v.section(&actx, &tmp, &counter, false).await;
                        }
                    }));
                }
                local_rt().block_on(local.run_until(async {
                    for h in handles {
                        h.await.expect("task panicked");
                    }
                }));
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    c.quiesce().unwrap();
    c.peek(&counter).unwrap()
}

const THREADS: usize = 3;
const TASKS: usize = 4;
const ITERS: u64 = 25;

fn exact(v: fn(&Cluster) -> Variant) {
    let want = (THREADS * TASKS) as u64 * ITERS;
    if testing::backend() != BackendKind::Soft {
        // A device: one run, no schedules to vary.
        assert_eq!(count(Schedule::Threaded, v, THREADS, TASKS, ITERS), want);
        return;
    }
    assert_eq!(
        count(Schedule::Threaded, v, THREADS, TASKS, ITERS),
        want,
        "threaded"
    );
    for seed in 0..3 {
        assert_eq!(
            count(Schedule::Chaos { seed }, v, THREADS, TASKS, ITERS),
            want,
            "chaos seed {seed}"
        );
    }
}

/// Cohorts of threads (`Lock::set_cohort`) under the tasks' local handovers: two threads per
/// node, so a hold goes from task to task of one context and from context to context of one
/// node; the node's turn goes with it.
#[test]
fn awaited_cohort_locks_exclude_tasks_and_threads() {
    let variants: [fn(&Cluster) -> Variant; 3] = [
        |c| Variant::Nlock(NLock::new(c, K).unwrap().with_cohort(4)),
        |c| Variant::Slock(SLock::new(c, NodeId(0), 6).unwrap().with_cohort(4)),
        |c| Variant::WlockGf(WLock::new(c, NodeId(1), 6).unwrap().with_cohort(4)),
    ];
    let want = 6 * 3 * 10;
    for v in variants {
        assert_eq!(count(Schedule::Threaded, v, 6, 3, 10), want, "threaded");
        if testing::backend() == BackendKind::Soft {
            assert_eq!(
                count(Schedule::Chaos { seed: 1 }, v, 6, 3, 10),
                want,
                "chaos"
            );
        }
    }
}

#[test]
fn awaited_nlock_excludes_tasks_and_threads() {
    exact(|c| Variant::Nlock(NLock::new(c, K).unwrap()));
}

#[test]
fn awaited_slock_excludes_tasks_and_threads() {
    exact(|c| Variant::Slock(SLock::new(c, NodeId(0), THREADS).unwrap()));
}

#[test]
fn awaited_wlock_with_gf_excludes_tasks_and_threads() {
    exact(|c| Variant::WlockGf(WLock::new(c, NodeId(1), THREADS).unwrap()));
}

/// Two nodes on the Threaded soft NIC and a node lock on n1.
fn two_nodes() -> (Cluster, NLock) {
    let c = Cluster::builder()
        .nodes(2)
        .soft(Schedule::Threaded)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let lock = NLock::new(&c, NodeId(1)).unwrap();
    (c, lock)
}

/// While a task awaits a lock that another thread holds, the other tasks of its thread run; the
/// holder releases only once they have finished, so a blocked thread would never get the lock.
#[test]
fn an_awaited_acquire_does_not_block_the_thread() {
    let (c, lock) = two_nodes();
    let others_done = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    let holder = {
        let (c, lock, others_done, held) =
            (c.clone(), lock.clone(), others_done.clone(), held.clone());
        std::thread::spawn(move || {
            let ctx = c.context(NodeId(1)).unwrap();
            let g = lock.acquire(&ctx).unwrap();
            held.store(true, SeqCst);
            while !others_done.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            LockGuard::release(g).unwrap();
        })
    };
    while !held.load(SeqCst) {
        std::thread::yield_now();
    }
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let src = c.alloc_word(NodeId(0)).unwrap();
    let dst = c.alloc_word(NodeId(1)).unwrap();
    let progressed = Rc::new(Cell::new(0));
    let local = tokio::task::LocalSet::new();
    let waiter = {
        let (actx, lock, progressed) = (actx.clone(), lock.clone(), progressed.clone());
        local.spawn_local(async move {
            let g = lock.acquire_async(&actx).await.unwrap();
            let seen = progressed.get();
            LockGuard::release(g).unwrap();
            seen
        })
    };
    {
        let (actx, progressed) = (actx.clone(), progressed.clone());
        local.spawn_local(async move {
            for _ in 0..100 {
                actx.put(&dst, &src).unwrap().await.unwrap();
                progressed.set(progressed.get() + 1);
            }
            others_done.store(true, SeqCst);
        });
    }
    let seen = local_rt().block_on(local.run_until(waiter)).unwrap();
    holder.join().unwrap();
    assert_eq!(seen, 100, "the lock came before the other task finished");
}

/// An acquire given up by `tokio::time::timeout` while the lock is held elsewhere is finished
/// when dropped, and the lock it then takes is released: the lock is free afterwards, for this
/// context and for others.
#[test]
fn a_cancelled_acquire_leaves_the_lock_free() {
    let (c, lock) = two_nodes();
    let held = Arc::new(AtomicBool::new(false));
    let trying = Arc::new(AtomicBool::new(false));
    let holder = {
        let (c, lock, held, trying) = (c.clone(), lock.clone(), held.clone(), trying.clone());
        std::thread::spawn(move || {
            let ctx = c.context(NodeId(1)).unwrap();
            let g = lock.acquire(&ctx).unwrap();
            held.store(true, SeqCst);
            // Held until well after the other thread starts trying (its timeout is 5 ms).
            while !trying.load(SeqCst) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(200));
            LockGuard::release(g).unwrap();
            // Afterwards the lock is free for another thread.
            let g = lock.try_acquire_for(&ctx, Duration::from_secs(10)).unwrap();
            LockGuard::release(g).unwrap();
        })
    };
    while !held.load(SeqCst) {
        std::thread::yield_now();
    }
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let rt = local_rt();
    trying.store(true, SeqCst);
    rt.block_on(async {
        let r = tokio::time::timeout(Duration::from_millis(5), lock.acquire_async(&actx)).await;
        assert!(r.is_err(), "the lock is held for 200 ms more");
    });
    assert!(
        !lock.is_held(actx.ctx()).unwrap(),
        "the cancelled acquire kept the lock"
    );
    holder.join().unwrap();
    rt.block_on(async {
        let g = lock.acquire_async(&actx).await.unwrap();
        LockGuard::release(g).unwrap();
    });
}

/// Two tasks of one context taking one lock wait for each other locally (no `AlreadyHeld`).
#[test]
fn tasks_of_one_context_queue_for_the_lock() {
    let c = Cluster::builder().nodes(2).build().unwrap();
    let lock = WLock::new(&c, NodeId(1), 1).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let inside = Rc::new(Cell::new(0));
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (actx, lock, inside) = (actx.clone(), lock.clone(), inside.clone());
        tasks.push(local.spawn_local(async move {
            let g = lock.acquire_async(&actx).await?;
            inside.set(inside.get() + 1);
            assert_eq!(inside.get(), 1, "two tasks inside");
            tokio::task::yield_now().await;
            inside.set(inside.get() - 1);
            LockGuard::release(g)?;
            Ok::<_, Error>(())
        }));
    }
    local_rt().block_on(local.run_until(async {
        for t in tasks {
            t.await.expect("task panicked").expect("task failed");
        }
    }));
}

/// Tasks of one context queued for a lock get the hold handed over locally, without a network
/// release and acquire (each critical section yields once, as one that awaits its operations
/// does, so the other tasks are queued by its end): consecutive critical sections share a
/// ticket, never more than
/// `LOCAL_HANDOVERS + 1` of them, and the count stays exact. Two threads (contexts on n0 and
/// n1) contend, so the bound is what lets each in: both finish.
fn local_handovers(v: fn(&Cluster) -> Variant, limit: u32) {
    const TASKS: usize = 6;
    const ITERS: usize = 12;
    let c = testing::cluster(3, 1 << 16, Schedule::Threaded).unwrap();
    let counter = c.alloc_word(K).unwrap();
    let v = v(&c);
    let threads: Vec<_> = (0..2u16)
        .map(|n| {
            let (c, v) = (c.clone(), v.clone());
            std::thread::spawn(move || {
                let node = NodeId(n);
                let actx = AsyncCtx::open(&c, node).unwrap();
                v.set_local_handovers(limit);
                let tickets = Rc::new(std::cell::RefCell::new(Vec::new()));
                let local = tokio::task::LocalSet::new();
                let mut handles = Vec::new();
                for _ in 0..TASKS {
                    let (actx, v, c, tickets) =
                        (actx.clone(), v.clone(), c.clone(), tickets.clone());
                    handles.push(local.spawn_local(async move {
                        let tmp = c.alloc_word(node).unwrap();
                        for _ in 0..ITERS {
                            // The others run meanwhile: they queue.
                            let t = v.section(&actx, &tmp, &counter, true).await;
                            tickets.borrow_mut().push(t);
                        }
                    }));
                }
                local_rt().block_on(local.run_until(async {
                    for h in handles {
                        h.await.expect("task panicked");
                    }
                }));
                let t = tickets.borrow().clone();
                t
            })
        })
        .collect();
    let per_thread: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    c.quiesce().unwrap();
    let sections = 2 * TASKS * ITERS;
    assert_eq!(
        c.peek(&counter).unwrap(),
        sections as u64,
        "lost increments"
    );
    let mut per_ticket = std::collections::HashMap::<u64, usize>::new();
    for t in per_thread.iter().flatten() {
        *per_ticket.entry(*t).or_default() += 1;
    }
    let most = per_ticket.values().copied().max().unwrap_or(0);
    eprintln!(
        "{} network acquires for {sections} critical sections, at most {most} per hold",
        per_ticket.len()
    );
    assert!(
        most <= limit as usize + 1,
        "a hold served {most} critical sections: the bound is {}",
        limit + 1
    );
    if limit == 0 {
        assert_eq!(per_ticket.len(), sections, "handed over though turned off");
    } else {
        assert!(
            per_ticket.len() <= sections / 2,
            "{} network acquires for {sections} critical sections: no local handover",
            per_ticket.len()
        );
    }
}

#[test]
fn nlock_hands_over_locally_within_the_bound() {
    local_handovers(
        |c| Variant::Nlock(NLock::new(c, NodeId(1)).unwrap()),
        loco_locks::LOCAL_HANDOVERS,
    );
}

#[test]
fn the_local_handover_bound_can_be_set_or_turned_off() {
    let nlock = |c: &Cluster| Variant::Nlock(NLock::new(c, NodeId(1)).unwrap());
    local_handovers(nlock, 2);
    local_handovers(nlock, 0);
    local_handovers(
        |c| Variant::WlockGf(WLock::new(c, NodeId(1), 4).unwrap()),
        1,
    );
}

#[test]
fn slock_hands_over_locally_within_the_bound() {
    local_handovers(
        |c| Variant::Slock(SLock::new(c, NodeId(1), 4).unwrap()),
        loco_locks::LOCAL_HANDOVERS,
    );
}

#[test]
fn wlock_hands_over_locally_within_the_bound() {
    local_handovers(
        |c| Variant::WlockGf(WLock::new(c, NodeId(1), 4).unwrap()),
        loco_locks::LOCAL_HANDOVERS,
    );
}

/// A hold handed over to a queued task whose acquire is then cancelled (before it ran) is not
/// left stuck: it goes back to the network, and another thread takes the lock. With two
/// queued tasks both cancelled, in either order, the same.
#[test]
fn a_hold_handed_to_a_cancelled_task_is_released() {
    hold_handed_to_cancelled_tasks(1, false);
    hold_handed_to_cancelled_tasks(2, false);
    hold_handed_to_cancelled_tasks(2, true);
}

fn hold_handed_to_cancelled_tasks(queued: usize, last_first: bool) {
    let (c, lock) = two_nodes();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let local = tokio::task::LocalSet::new();
    local_rt().block_on(local.run_until(async {
        let g = lock.acquire_async(&actx).await.unwrap();
        let ticket = LockGuard::ticket(&g);
        let mut waiting: Vec<_> = (0..queued)
            .map(|_| {
                let (lock, actx) = (lock.clone(), actx.clone());
                tokio::task::spawn_local(async move {
                    let g = lock.acquire_async(&actx).await.unwrap();
                    LockGuard::release(g).unwrap();
                })
            })
            .collect();
        tokio::task::yield_now().await; // they queue for the local mutex
        drop(g);
        assert_eq!(
            lock.raw().held(actx.ctx()).unwrap(),
            Some(ticket),
            "the hold was not handed over to the queued task"
        );
        if last_first {
            waiting.reverse();
        }
        // All cancelled before any of them can run.
        for t in &waiting {
            t.abort();
        }
        for t in waiting {
            assert!(t.await.unwrap_err().is_cancelled());
        }
        assert_eq!(
            lock.raw().held(actx.ctx()).unwrap(),
            None,
            "the hold handed to a cancelled task stayed taken"
        );
    }));
    let ctx = c.context(NodeId(1)).unwrap();
    let g = lock.acquire_timeout(&ctx, Duration::from_secs(10)).unwrap();
    LockGuard::release(g).unwrap();
}
