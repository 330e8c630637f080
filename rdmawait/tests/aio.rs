//! Async operations (feature `tokio`): many tasks on one context, each awaiting its own
//! operations; blocking calls run by `AsyncCtx::run` suspend instead of blocking the thread;
//! cancellation finishes a call; faults reach the awaiting task.
#![cfg(feature = "tokio")]

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use loco_rdmawait::aio::AsyncCtx;
use loco_rdmawait::{clock, testing, Cluster, Error, Loc, NodeId, Schedule, SoftBackend, WorkId};
use loco_rdmawaitrmw::Rmw;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn cluster(schedule: Schedule, nodes: usize) -> Cluster {
    Cluster::builder()
        .nodes(nodes)
        .memory_per_node(1 << 20)
        .soft(schedule)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Thousands of tasks on one context, each writing its own value to its own remote word and
/// reading it back through its own operations: no completion is lost or credited to another task
/// (a task that awaited someone else's completion would read back a stale value).
fn many_tasks(schedule: Schedule) {
    const TASKS: u64 = 2000;
    let c = cluster(schedule, 3);
    let src = c.alloc_words(NodeId(0), TASKS).unwrap();
    let back = c.alloc_words(NodeId(0), TASKS).unwrap();
    let remote: Vec<Loc> = (1..3)
        .map(|n| c.alloc_words(NodeId(n), TASKS).unwrap())
        .collect();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let local = tokio::task::LocalSet::new();
    let done = Rc::new(Cell::new(0u64));
    for i in 0..TASKS {
        let (actx, done) = (actx.clone(), done.clone());
        let src = src.word(i).unwrap();
        let back = back.word(i).unwrap();
        let dst = remote[(i % 2) as usize].word(i).unwrap();
        local.spawn_local(async move {
            for round in 1..=3u64 {
                let v = i * 10 + round;
                actx.ctx().store(&src, v).unwrap();
                let put = actx.put(&dst, &src).unwrap();
                put.await.unwrap();
                // Another round's store to `src` may follow: the put must have read it.
                let get = actx.get(&back, &dst).unwrap();
                if i % 3 == 0 {
                    tokio::task::yield_now().await;
                }
                get.await.unwrap();
                assert_eq!(actx.ctx().load(&back).unwrap(), v, "task {i} round {round}");
            }
            done.set(done.get() + 1);
        });
    }
    rt().block_on(local);
    assert_eq!(done.get(), TASKS);
    for n in 0..3 {
        assert_eq!(actx.ctx().unpolled(NodeId(n)).unwrap(), 0);
    }
}

#[test]
fn thousands_of_tasks_on_one_context_threaded() {
    many_tasks(Schedule::Threaded);
}

#[test]
fn thousands_of_tasks_on_one_context_chaos() {
    for seed in 0..3 {
        many_tasks(Schedule::Chaos { seed });
    }
}

/// On the backend `LOCO_BACKEND` names (the verbs suite runs this on rxe): many tasks with
/// operations in flight at once, most of which wait long enough to sleep on the completion
/// channel; every task reads back its own value. On verbs, the context has a channel.
#[test]
fn many_tasks_on_the_configured_backend() {
    const TASKS: u64 = 300;
    let c = testing::cluster(2, 1 << 16, Schedule::Threaded).unwrap();
    let src = c.alloc_words(NodeId(0), TASKS).unwrap();
    let back = c.alloc_words(NodeId(0), TASKS).unwrap();
    let remote = c.alloc_words(NodeId(1), TASKS).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    // Verbs and the Threaded soft NIC both have one.
    assert!(actx.has_completion_channel());
    let local = tokio::task::LocalSet::new();
    let handles: Vec<_> = (0..TASKS)
        .map(|i| {
            let actx = actx.clone();
            let (src, back, dst) = (
                src.word(i).unwrap(),
                back.word(i).unwrap(),
                remote.word(i).unwrap(),
            );
            local.spawn_local(async move {
                for round in 1..=4u64 {
                    let v = i * 10 + round;
                    actx.ctx().store(&src, v).unwrap();
                    actx.put(&dst, &src).unwrap().await.unwrap();
                    actx.get(&back, &dst).unwrap().await.unwrap();
                    assert_eq!(actx.ctx().load(&back).unwrap(), v, "task {i}");
                }
            })
        })
        .collect();
    rt().block_on(local.run_until(async {
        for h in handles {
            h.await.expect("task panicked");
        }
    }));
}

/// With no spin polls, every wait that is not complete at once sleeps on the completion channel,
/// and large transfers (256 KiB) carry the right data. rxe over loop-back in one process mostly
/// completes a request within its post, and a soft NIC poll executes requests itself, so how many
/// waits slept is printed, not asserted here (see `a_stalled_request_sleeps_on_the_channel` and
/// the wake-up protocol's unit test in `aio::notify`).
#[test]
fn tasks_with_no_spin_polls_on_the_configured_backend() {
    const TASKS: u64 = 4;
    const OPS: u64 = 10;
    const WORDS: u64 = 32 * 1024;
    // Why a channel is not used, if it is not, is logged at debug level.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("loco=debug")
        .with_test_writer()
        .try_init();
    let c = testing::cluster(2, 8 << 20, Schedule::Threaded).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    actx.set_spin_polls(0);
    let local = tokio::task::LocalSet::new();
    let handles: Vec<_> = (0..TASKS)
        .map(|i| {
            let actx = actx.clone();
            let src = c.alloc_words(NodeId(0), WORDS).unwrap();
            let back = c.alloc_words(NodeId(0), WORDS).unwrap();
            let dst = c.alloc_words(NodeId(1), WORDS).unwrap();
            local.spawn_local(async move {
                let ctx = actx.ctx();
                for k in 1..=OPS {
                    let v = i * 1000 + k;
                    ctx.store(&src.word(0).unwrap(), v).unwrap();
                    ctx.store(&src.word(WORDS - 1).unwrap(), v).unwrap();
                    actx.put(&dst, &src).unwrap().await.unwrap();
                    actx.get(&back, &dst).unwrap().await.unwrap();
                    assert_eq!(ctx.load(&back.word(0).unwrap()).unwrap(), v, "task {i}");
                    assert_eq!(ctx.load(&back.word(WORDS - 1).unwrap()).unwrap(), v);
                }
            })
        })
        .collect();
    rt().block_on(local.run_until(async {
        for h in handles {
            h.await.expect("task panicked");
        }
    }));
    eprintln!("{} sleeps on the completion channel", actx.channel_sleeps());
}

/// Two nodes on the Threaded soft NIC whose backend the test can stall: the backend, the
/// cluster, a word on n0 and one on n1, and an async context on n0.
fn stallable() -> (std::sync::Arc<SoftBackend>, Cluster, Loc, Loc, AsyncCtx) {
    let soft = std::sync::Arc::new(SoftBackend::try_new(2, 64, Schedule::Threaded).unwrap());
    let c = Cluster::with_backend(Box::new(soft.clone()), Duration::from_secs(20));
    let (x, y) = (
        c.alloc_word(NodeId(0)).unwrap(),
        c.alloc_word(NodeId(1)).unwrap(),
    );
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    (soft, c, x, y, actx)
}

/// On the Threaded soft NIC, a task whose request is held back (its target stalled, as by a
/// partition) sleeps on the completion channel, and the engine thread's signal, once the stall
/// ends and the request executes, wakes it: not a re-poll (the backstop ended no sleep), and not
/// the thread blocked (another task kept running meanwhile).
#[test]
fn a_stalled_request_sleeps_on_the_channel() {
    let (soft, c, x, y, actx) = stallable();
    // Only the engine's signal can end the sleep within the test (timers on a loaded machine
    // may stretch the ticker past the default backstop).
    actx.set_backstop(Duration::from_secs(10));
    actx.ctx().store(&x, 42).unwrap();
    soft.stall(NodeId(1), true).unwrap();
    let ticks = Rc::new(Cell::new(0u32));
    let local = tokio::task::LocalSet::new();
    let put = {
        let actx = actx.clone();
        local.spawn_local(async move { actx.put(&y, &x).unwrap().await })
    };
    let ticker = {
        let ticks = ticks.clone();
        local.spawn_local(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                ticks.set(ticks.get() + 1);
            }
            soft.stall(NodeId(1), false).unwrap();
        })
    };
    rt().block_on(local.run_until(async {
        ticker.await.unwrap();
        put.await.unwrap().unwrap();
    }));
    assert_eq!(ticks.get(), 5);
    eprintln!(
        "{} sleeps on the channel, {} ended by the backstop",
        actx.channel_sleeps(),
        actx.channel_backstops()
    );
    assert!(
        actx.channel_sleeps() > 0,
        "the task never slept on the channel"
    );
    assert_eq!(
        actx.channel_backstops(),
        0,
        "the engine's signal did not wake the task"
    );
    c.quiesce().unwrap();
    assert_eq!(c.peek(&y).unwrap(), 42);
}

/// Remote RMWs through `issue`: every task's FAA returns a distinct old value.
#[test]
fn rmws_through_issue_get_distinct_tickets() {
    let c = cluster(Schedule::Threaded, 2);
    let counter = c.alloc_word(NodeId(1)).unwrap();
    let olds = c.alloc_words(NodeId(0), 500).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let local = tokio::task::LocalSet::new();
    let handles: Vec<_> = (0..500)
        .map(|i| {
            let actx = actx.clone();
            let old = olds.word(i).unwrap();
            local.spawn_local(async move {
                actx.issue(|ctx, d| ctx.rfaa(&counter, 1, &old, d))
                    .unwrap()
                    .await
                    .unwrap();
                actx.ctx().load(&old).unwrap()
            })
        })
        .collect();
    let mut got = rt().block_on(local.run_until(async {
        let mut v = Vec::new();
        for h in handles {
            v.push(h.await.unwrap());
        }
        v
    }));
    got.sort_unstable();
    assert_eq!(got, (0..500).collect::<Vec<_>>());
    assert_eq!(c.peek(&counter).unwrap(), 500);
}

/// A blocking call run by `run` that spins on a remote flag (a wait per round) lets the task that
/// sets the flag run on the same thread: if `run` blocked the thread, the flag would never be set
/// and the call would time out.
#[test]
fn a_blocking_call_suspends_instead_of_blocking_the_thread() {
    let c = cluster(Schedule::Threaded, 2);
    let flag = c.alloc_word(NodeId(1)).unwrap();
    let one = c.alloc_word(NodeId(0)).unwrap();
    let seen = c.alloc_word(NodeId(0)).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    actx.ctx().store(&one, 1).unwrap();
    let local = tokio::task::LocalSet::new();
    let spinner = {
        let actx = actx.clone();
        local.spawn_local(async move {
            actx.run(|ctx| -> loco_rdmawait::Result<u64> {
                let d = WorkId::new(7);
                let mut rounds = 0;
                loop {
                    rounds += 1;
                    ctx.get(&seen, &flag, d)?;
                    ctx.wait(d)?;
                    if ctx.load(&seen)? == 1 {
                        return Ok(rounds);
                    }
                    // The setter has had ample chances to run: the thread is blocked.
                    assert!(rounds < 100_000, "the setter task never ran");
                    clock::pause();
                }
            })
            .await
        })
    };
    let setter = {
        let actx = actx.clone();
        local.spawn_local(async move {
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
            actx.put(&flag, &one).unwrap().await.unwrap();
        })
    };
    let rounds = rt().block_on(local.run_until(async {
        setter.await.unwrap();
        spinner.await.unwrap()
    }));
    assert!(
        rounds.unwrap() > 1,
        "the spinner saw the flag before it was set"
    );
}

/// Calls through `run` on one context go one at a time: two calls that each hold a "busy" mark
/// across their waits never overlap.
#[test]
fn runs_on_one_context_do_not_interleave() {
    let c = cluster(Schedule::Chaos { seed: 5 }, 2);
    let x = c.alloc_word(NodeId(1)).unwrap();
    let buf = c.alloc_words(NodeId(0), 64).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let busy = Rc::new(Cell::new(false));
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (actx, busy) = (actx.clone(), busy.clone());
        let b = buf.word(i).unwrap();
        tasks.push(local.spawn_local(async move {
            actx.run(|ctx| {
                assert!(!busy.replace(true), "two runs overlapped");
                let d = WorkId::new(1);
                for _ in 0..3 {
                    ctx.get(&b, &x, d).unwrap();
                    ctx.wait(d).unwrap();
                }
                busy.set(false);
            })
            .await
        }));
    }
    rt().block_on(local.run_until(async {
        for t in tasks {
            t.await.expect("a run panicked");
        }
    }));
}

/// A waker that does nothing: the test polls by hand.
struct Noop;

impl std::task::Wake for Noop {
    fn wake(self: std::sync::Arc<Self>) {}
}

/// Dropping an unfinished `run` finishes its call (here: the second half of a two-step write).
#[test]
fn a_cancelled_run_finishes_its_call() {
    use std::future::Future;
    let c = cluster(Schedule::Threaded, 2);
    let dst = c.alloc_words(NodeId(1), 2).unwrap();
    let src = c.alloc_words(NodeId(0), 2).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let finished = Cell::new(false);
    let mut run = Box::pin(actx.run(|ctx| {
        let d = WorkId::new(3);
        ctx.store(&src.word(0).unwrap(), 5).unwrap();
        ctx.put(&dst.word(0).unwrap(), &src.word(0).unwrap(), d)
            .unwrap();
        ctx.wait(d).unwrap();
        clock::sleep(Duration::from_millis(200));
        ctx.store(&src.word(1).unwrap(), 6).unwrap();
        ctx.put(&dst.word(1).unwrap(), &src.word(1).unwrap(), d)
            .unwrap();
        ctx.wait(d).unwrap();
        finished.set(true);
    }));
    // A few polls (the call is then in its sleep), then give up on it.
    let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
    let mut cx = std::task::Context::from_waker(&waker);
    for _ in 0..5 {
        assert!(run.as_mut().poll(&mut cx).is_pending());
    }
    assert!(!finished.get());
    drop(run);
    assert!(finished.get(), "the dropped call was not finished");
    c.quiesce().unwrap();
    assert_eq!(c.peek_words(&dst).unwrap(), vec![5, 6]);
}

/// A task's operation towards a node that dies fails with `PeerDead`; the other tasks'
/// operations, towards a live node, complete.
#[test]
fn a_dead_peer_fails_only_the_tasks_that_need_it() {
    let c = cluster(Schedule::Threaded, 3);
    let src = c.alloc_word(NodeId(0)).unwrap();
    let on1 = c.alloc_word(NodeId(1)).unwrap();
    let on2 = c.alloc_word(NodeId(2)).unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    c.kill(NodeId(2)).unwrap();
    rt().block_on(async {
        let to_dead = actx.put(&on2, &src);
        let to_live = actx.put(&on1, &src).unwrap();
        let dead = match to_dead {
            Ok(op) => op.await,
            Err(e) => Err(e),
        };
        assert!(
            matches!(dead, Err(Error::PeerDead { node, .. }) if node == NodeId(2)),
            "{dead:?}"
        );
        to_live.await.unwrap();
    });
}

/// A panic inside `run` reaches the awaiting task, and the context stays usable.
#[test]
fn a_panic_in_run_reaches_the_task() {
    let c = cluster(Schedule::Threaded, 1);
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let rt = rt();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(actx.run(|_| panic!("boom")))
    }));
    assert!(r.is_err());
    let x = c.alloc_word(NodeId(0)).unwrap();
    assert_eq!(rt.block_on(actx.run(|ctx| ctx.load(&x))).unwrap(), 0);
}

/// Edge values of the knobs: no spin polls or `u32::MAX` of them, a backstop of zero or of
/// `Duration::MAX` ("never"); the tasks' operations complete all the same, and a request held
/// back by a stall still wakes its sleeping task.
#[test]
fn edge_values_of_the_knobs() {
    for (polls, backstop) in [
        (0, Duration::ZERO),
        (0, Duration::MAX),
        (u32::MAX, Duration::MAX),
        (1, Duration::from_nanos(1)),
    ] {
        let (soft, _c, x, y, actx) = stallable();
        actx.set_spin_polls(polls);
        actx.set_backstop(backstop);
        actx.ctx().store(&x, 7).unwrap();
        let local = tokio::task::LocalSet::new();
        rt().block_on(local.run_until(async {
            actx.put(&y, &x).unwrap().await.unwrap();
            soft.stall(NodeId(1), true).unwrap();
            let held = actx.get(&x, &y).unwrap();
            let unstall = tokio::task::spawn_local(async move {
                tokio::task::yield_now().await;
                soft.stall(NodeId(1), false).unwrap();
            });
            held.await.unwrap();
            unstall.await.unwrap();
        }));
        assert_eq!(
            actx.ctx().load(&x).unwrap(),
            7,
            "{polls} polls, {backstop:?}"
        );
    }
}

/// A future that counts its polls.
struct Counted<F> {
    f: std::pin::Pin<Box<F>>,
    polls: Rc<Cell<u32>>,
}

impl<F: std::future::Future> std::future::Future for Counted<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.polls.set(self.polls.get() + 1);
        self.f.as_mut().poll(cx)
    }
}

/// A blocking call that sleeps (`clock::sleep`: a back-off, a lock waiter's long wait)
/// suspends its task on a timer: the task is woken once the time is up, not polled over and
/// over meanwhile (which would keep the thread busy), and it does sleep the whole time.
#[test]
fn a_sleep_in_a_blocking_call_waits_on_a_timer() {
    let c = Cluster::builder().nodes(1).build().unwrap();
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    let polls = Rc::new(Cell::new(0));
    let nap = Duration::from_millis(50);
    let slept = rt().block_on(async {
        let t = std::time::Instant::now();
        Counted {
            f: Box::pin(actx.run(|_| clock::sleep(nap))),
            polls: polls.clone(),
        }
        .await;
        t.elapsed()
    });
    assert!(slept >= nap, "woke after {slept:?}, before {nap:?}");
    assert!(
        polls.get() <= 5,
        "polled {} times while it slept: it spun",
        polls.get()
    );
}
