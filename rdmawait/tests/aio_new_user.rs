//! A new user's sweep of the async API (feature `tokio`): faults while tasks await, dropped
//! futures, edge values of the knobs, runtimes of each kind. Every test guards its awaits with
//! a generous `tokio::time::timeout` so that a hang fails the test instead of stalling the suite.
#![cfg(feature = "tokio")]

use std::time::Duration;

use loco_rdmawait::aio::AsyncCtx;
use loco_rdmawait::testing::{assert_peer_dead, assert_shutdown, SHORT_TIMEOUT};
use loco_rdmawait::{Cluster, Error, Loc, NodeId, Schedule, SoftBackend};

/// A hang guard, far above every timeout of the clusters here.
const HANG: Duration = Duration::from_secs(10);

use loco_rdmawait::testing::rt;

/// `n` nodes on the Threaded soft NIC whose backend the test can stall, with the short
/// timeout: the backend, the cluster, and an async context on n0.
fn stallable(n: usize) -> (std::sync::Arc<SoftBackend>, Cluster, AsyncCtx) {
    let soft = std::sync::Arc::new(SoftBackend::try_new(n, 4096, Schedule::Threaded).unwrap());
    let c = Cluster::with_backend(Box::new(soft.clone()), SHORT_TIMEOUT);
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    (soft, c, actx)
}

fn words(c: &Cluster, node: u16) -> Loc {
    c.alloc_word(NodeId(node)).unwrap()
}

/// Awaits `f`, failing the test if it hangs. (Not `tokio::time::timeout`, which polls `f` when
/// its timer fires: that poll would end a hang it is meant to catch.)
async fn guarded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::select! {
        biased;
        () = tokio::time::sleep(HANG) => panic!("{what}: hung"),
        v = f => v,
    }
}

/// Two tasks each have a put in flight towards a node that then dies: each task's operation
/// fails with `PeerDead`, whichever is awaited first. (The first wait to meet the failure
/// forgets every request pending towards the dead node; the other task's put must not be
/// reported as done.)
#[test]
fn every_task_towards_a_dying_node_is_told() {
    for first_a in [true, false] {
        let (soft, c, actx) = stallable(3);
        let (src, on1, on1b, on2) = (words(&c, 0), words(&c, 1), words(&c, 1), words(&c, 2));
        soft.stall(NodeId(1), true).unwrap();
        let a = actx.put(&on1, &src).unwrap();
        let live = actx.put(&on2, &src).unwrap();
        let b = actx.put(&on1b, &src).unwrap();
        c.kill(NodeId(1)).unwrap();
        rt().block_on(async {
            let (x, y) = if first_a {
                let x = guarded("a", a).await;
                (x, guarded("b", b).await)
            } else {
                let y = guarded("b", b).await;
                (guarded("a", a).await, y)
            };
            assert_peer_dead(x, NodeId(1));
            assert_peer_dead(y, NodeId(1));
            guarded("live", live).await.unwrap();
        });
    }
}

/// A request that never completes (its target stalled for good) fails its `Op` with
/// `Timeout` after the cluster's timeout, whatever the backstop: a backstop of `Duration::MAX`
/// must not leave the task asleep past its own deadline.
#[test]
fn a_stalled_op_times_out_with_an_unbounded_backstop() {
    for backstop in [Duration::MAX, Duration::from_secs(3600)] {
        let (soft, c, actx) = stallable(2);
        actx.set_spin_polls(0);
        actx.set_backstop(backstop);
        let (x, y) = (words(&c, 0), words(&c, 1));
        soft.stall(NodeId(1), true).unwrap();
        let r = rt().block_on(guarded("op", actx.get(&x, &y).unwrap()));
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    }
}

/// The same for a blocking call run through `run`: its wait's timeout ends it.
#[test]
fn a_stalled_run_times_out_with_an_unbounded_backstop() {
    let (soft, c, actx) = stallable(2);
    actx.set_spin_polls(0);
    actx.set_backstop(Duration::MAX);
    let (x, y) = (words(&c, 0), words(&c, 1));
    soft.stall(NodeId(1), true).unwrap();
    let d = loco_rdmawait::WorkId::new(5);
    let r = rt().block_on(guarded(
        "run",
        actx.run(|ctx| {
            ctx.get(&x, &y, d)?;
            ctx.wait(d)
        }),
    ));
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
}

/// How a task's sleep on its operation ends: the target node is killed, or the cluster shut
/// down.
#[derive(Clone, Copy)]
enum End {
    Kill,
    Shutdown,
}

/// A task sleeps on a get from a stalled node when `end` comes: it wakes with `PeerDead` naming
/// the node, or `Shutdown`.
fn sleeping_task_until(end: End) {
    let (soft, c, actx) = stallable(2);
    actx.set_spin_polls(0);
    let (x, y) = (words(&c, 0), words(&c, 1));
    soft.stall(NodeId(1), true).unwrap();
    let local = tokio::task::LocalSet::new();
    let op = actx.get(&x, &y).unwrap();
    let waiter = local.spawn_local(op);
    rt().block_on(local.run_until(async {
        tokio::task::yield_now().await;
        match end {
            End::Kill => c.kill(NodeId(1)).unwrap(),
            End::Shutdown => c.shutdown(),
        }
        let r = guarded("op", waiter).await.unwrap();
        match end {
            End::Kill => assert_peer_dead(r, NodeId(1)),
            End::Shutdown => assert_shutdown(r),
        }
    }));
}

/// A node killed while a task sleeps on its operation.
#[test]
fn a_kill_wakes_a_sleeping_task() {
    sleeping_task_until(End::Kill);
}

/// A cluster shut down while a task sleeps on its operation.
#[test]
fn a_shutdown_wakes_a_sleeping_task() {
    sleeping_task_until(End::Shutdown);
}

/// A waker that does nothing: for polling a future by hand, outside any runtime.
struct Noop;

impl std::task::Wake for Noop {
    fn wake(self: std::sync::Arc<Self>) {}
}

/// Polls `f` by hand, outside any runtime, until it is ready (at most `rounds` polls).
fn poll_by_hand<F: std::future::Future>(f: F, rounds: u32) -> Option<F::Output> {
    let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    for _ in 0..rounds {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        std::thread::yield_now();
    }
    None
}

/// Futures polled outside any runtime (a hand-made executor) still complete, and the context
/// then works inside a runtime: operations, a blocking call, and a sleep inside one.
#[test]
fn outside_a_runtime_then_inside_one() {
    for schedule in loco_rdmawait::testing::soft_schedules(3) {
        let c = loco_rdmawait::testing::short_cluster(2, 4096, schedule);
        let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
        actx.set_spin_polls(0);
        let (x, y) = (words(&c, 0), words(&c, 1));
        actx.ctx().store(&x, 9).unwrap();
        let put = actx.put(&y, &x).unwrap();
        poll_by_hand(put, 1_000_000).expect("never ready").unwrap();
        let r = poll_by_hand(
            actx.run(|ctx| {
                loco_rdmawait::clock::sleep(Duration::from_millis(1));
                ctx.load(&x)
            }),
            1_000_000,
        );
        assert_eq!(r.expect("never ready").unwrap(), 9);
        rt().block_on(async {
            guarded("get", actx.get(&x, &y).unwrap()).await.unwrap();
            let v = guarded("run", actx.run(|ctx| ctx.load(&x))).await.unwrap();
            assert_eq!(v, 9);
        });
    }
}

/// The same context awaited from a multi-thread runtime's `block_on`, with the request's
/// completion coming from another thread.
#[test]
fn from_a_multi_thread_runtime() {
    let (soft, c, actx) = stallable(2);
    actx.set_spin_polls(0);
    let (x, y) = (words(&c, 0), words(&c, 1));
    actx.ctx().store(&x, 3).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    soft.stall(NodeId(1), true).unwrap();
    let unstall = {
        let soft = soft.clone();
        rt.spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            soft.stall(NodeId(1), false).unwrap();
        })
    };
    rt.block_on(async {
        guarded("put", actx.put(&y, &x).unwrap()).await.unwrap();
        unstall.await.unwrap();
    });
    c.quiesce().unwrap();
    assert_eq!(c.peek(&y).unwrap(), 3);
}

/// Two nodes on the Threaded soft NIC that the test can stall, with a timeout far above any
/// scheduling delay, and an async context on n0 that sleeps on its channel at its first pending
/// poll, with a backstop that never ends a sleep within the test: the backend, the cluster, a
/// word on n0 and one on n1, and the context.
fn sleepy() -> (std::sync::Arc<SoftBackend>, Cluster, Loc, Loc, AsyncCtx) {
    let soft = std::sync::Arc::new(SoftBackend::try_new(2, 4096, Schedule::Threaded).unwrap());
    let c = Cluster::with_backend(Box::new(soft.clone()), Duration::from_secs(20));
    let (x, y) = (words(&c, 0), words(&c, 1));
    let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
    actx.set_spin_polls(0);
    actx.set_backstop(Duration::from_secs(10));
    (soft, c, x, y, actx)
}

/// In `rt`, a task awaits a put towards the stalled n1 while another task ends the stall after
/// ten timer ticks; returns how many times the context's tasks went to sleep on the channel
/// meanwhile.
fn sleeps_through_a_stall(
    rt: &tokio::runtime::Runtime,
    soft: &std::sync::Arc<SoftBackend>,
    actx: &AsyncCtx,
    x: Loc,
    y: Loc,
) -> u64 {
    let before = actx.channel_sleeps();
    soft.stall(NodeId(1), true).unwrap();
    let local = tokio::task::LocalSet::new();
    let put = {
        let actx = actx.clone();
        local.spawn_local(async move { actx.put(&y, &x).unwrap().await })
    };
    let soft = soft.clone();
    let ticker = local.spawn_local(async move {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        soft.stall(NodeId(1), false).unwrap();
    });
    rt.block_on(local.run_until(async {
        guarded("ticker", ticker).await.unwrap();
        guarded("put", put).await.unwrap().unwrap();
    }));
    actx.channel_sleeps() - before
}

/// A context whose first pending operation was polled outside any runtime (a hand-made
/// executor) still sleeps on its completion channel once awaited inside one: the channel is
/// watched by the runtime the tasks run in, not given up for good at the first look.
#[test]
fn a_context_first_polled_outside_a_runtime_sleeps_on_its_channel_inside_one() {
    let (soft, _c, x, y, actx) = sleepy();
    soft.stall(NodeId(1), true).unwrap();
    let mut put = std::pin::pin!(actx.put(&y, &x).unwrap());
    assert!(
        poll_by_hand(put.as_mut(), 1).is_none(),
        "done while stalled"
    );
    soft.stall(NodeId(1), false).unwrap();
    poll_by_hand(put, 1_000_000).expect("never ready").unwrap();
    let sleeps = sleeps_through_a_stall(&rt(), &soft, &actx, x, y);
    assert!(
        sleeps > 0,
        "the task re-polled instead of sleeping on the channel"
    );
    assert_eq!(actx.channel_backstops(), 0);
}

/// A context awaited in a runtime that is then dropped, and afterwards in another one, sleeps
/// on its channel in the second runtime too: its watcher there is the second runtime's reactor,
/// not the first's, which is gone and would answer every sleep at once (a task spinning on the
/// CPU for as long as its operation takes, thousands of "sleeps" in a few milliseconds).
#[test]
fn a_context_awaited_in_a_second_runtime_sleeps_on_its_channel_there() {
    let (soft, _c, x, y, actx) = sleepy();
    let first = rt();
    let sleeps = sleeps_through_a_stall(&first, &soft, &actx, x, y);
    assert!(sleeps > 0, "the task never slept on the channel");
    drop(first);
    let sleeps = sleeps_through_a_stall(&rt(), &soft, &actx, x, y);
    // One sleep until the engine's signal, a few more at most for wake-ups of other events.
    assert!(
        sleeps < 50,
        "{sleeps} sleeps: the task spun instead of sleeping"
    );
    assert_eq!(actx.channel_backstops(), 0);
}

/// Edge values a new user tries: a context on an unknown node, empty and mismatched
/// transfers, a wait on an id with nothing pending, a post towards a dead node; each a typed
/// error at once (or, for the idle wait, done at once), and the context works afterwards.
#[test]
fn edge_values_of_the_operations() {
    for schedule in loco_rdmawait::testing::soft_schedules(4) {
        let c = loco_rdmawait::testing::short_cluster(3, 4096, schedule);
        loco_rdmawait::testing::assert_unknown_node(AsyncCtx::open(&c, NodeId(3)));
        let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
        let (x, y, two) = (
            words(&c, 0),
            words(&c, 1),
            c.alloc_words(NodeId(1), 2).unwrap(),
        );
        let r = actx.put(&two, &x);
        assert!(matches!(r, Err(Error::LengthMismatch { .. })), "{r:?}");
        let r = actx.put(&y.slice(0, 0).unwrap(), &x.slice(0, 0).unwrap());
        assert!(matches!(r, Err(Error::Empty)), "{r:?}");
        let r = actx.issue(|_, _| Err(Error::Empty));
        assert!(matches!(r, Err(Error::Empty)), "{r:?}");
        let on2 = words(&c, 2);
        c.kill(NodeId(2)).unwrap();
        assert_peer_dead(actx.get(&x, &on2), NodeId(2));
        rt().block_on(async {
            guarded("idle", actx.wait(loco_rdmawait::WorkId::new(77)))
                .await
                .unwrap();
            guarded("put", actx.put(&y, &x).unwrap()).await.unwrap();
        });
    }
}

/// Operations dropped half-way (by `tokio::time::timeout`, while their target is stalled) lose
/// nothing: they land once the stall ends, and later operations of the context, and their
/// waits, work as before.
#[test]
fn dropped_ops_lose_nothing() {
    let (soft, c, actx) = stallable(2);
    let (x, y) = (words(&c, 0), c.alloc_words(NodeId(1), 8).unwrap());
    actx.ctx().store(&x, 5).unwrap();
    soft.stall(NodeId(1), true).unwrap();
    rt().block_on(async {
        for i in 0..8 {
            let op = actx.put(&y.word(i).unwrap(), &x).unwrap();
            let r = tokio::time::timeout(Duration::from_millis(1), op).await;
            assert!(r.is_err(), "completed while stalled");
        }
        soft.stall(NodeId(1), false).unwrap();
        let back = words(&c, 0);
        guarded("get", actx.get(&back, &y.word(7).unwrap()).unwrap())
            .await
            .unwrap();
        assert_eq!(actx.ctx().load(&back).unwrap(), 5);
    });
    c.quiesce().unwrap();
    assert_eq!(c.peek_words(&y).unwrap(), vec![5; 8]);
}

/// A blocking call (`run`) waiting for its get towards a node that dies, while a task's `Op`
/// towards the same node meets the failure first: the call's wait is told `PeerDead` too, not
/// `Ok` for a get that never read.
#[test]
fn a_blocking_call_towards_a_dying_node_is_told() {
    let (soft, c, actx) = stallable(2);
    let (x, y, z) = (words(&c, 0), words(&c, 1), words(&c, 0));
    soft.stall(NodeId(1), true).unwrap();
    let d = loco_rdmawait::WorkId::new(5);
    let mut call = std::pin::pin!(actx.run(|ctx| {
        ctx.get(&x, &y, d)?;
        ctx.wait(d)
    }));
    // The call posts its get and suspends in its wait.
    assert!(poll_by_hand(call.as_mut(), 1).is_none());
    let op = actx.get(&z, &y).unwrap();
    c.kill(NodeId(1)).unwrap();
    rt().block_on(async {
        assert_peer_dead(guarded("op", op).await, NodeId(1));
        assert_peer_dead(guarded("call", call).await, NodeId(1));
    });
}
