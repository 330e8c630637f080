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

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

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

/// A node killed while a task sleeps on its operation: the task wakes with `PeerDead`.
#[test]
fn a_kill_wakes_a_sleeping_task() {
    let (soft, c, actx) = stallable(2);
    actx.set_spin_polls(0);
    let (x, y) = (words(&c, 0), words(&c, 1));
    soft.stall(NodeId(1), true).unwrap();
    let local = tokio::task::LocalSet::new();
    let op = actx.get(&x, &y).unwrap();
    let waiter = local.spawn_local(op);
    rt().block_on(local.run_until(async {
        tokio::task::yield_now().await;
        c.kill(NodeId(1)).unwrap();
        assert_peer_dead(guarded("op", waiter).await.unwrap(), NodeId(1));
    }));
}

/// A cluster shut down while a task sleeps on its operation: the task wakes with `Shutdown`.
#[test]
fn a_shutdown_wakes_a_sleeping_task() {
    let (soft, c, actx) = stallable(2);
    actx.set_spin_polls(0);
    let (x, y) = (words(&c, 0), words(&c, 1));
    soft.stall(NodeId(1), true).unwrap();
    let local = tokio::task::LocalSet::new();
    let op = actx.get(&x, &y).unwrap();
    let waiter = local.spawn_local(op);
    rt().block_on(local.run_until(async {
        tokio::task::yield_now().await;
        c.shutdown();
        assert_shutdown(guarded("op", waiter).await.unwrap());
    }));
}
