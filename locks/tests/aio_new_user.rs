//! A new user's misuse and faults of the awaited acquire (`Lock::acquire_async`, feature
//! `tokio`): each ends in a typed error, never a panic or a hang. Every test guards its awaits so
//! that a hang fails the test instead of stalling the suite.
#![cfg(feature = "tokio")]

use std::time::Duration;

use loco_locks::{Error, LockGuard, NLock, SLock, WLock};
use loco_rdmawait::aio::AsyncCtx;
use loco_rdmawait::testing::{self, assert_peer_dead, assert_shutdown};
use loco_rdmawait::{Cluster, NodeId, Schedule};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);

/// A hang guard, far above the clusters' timeout (`testing::SHORT_TIMEOUT`).
const HANG: Duration = Duration::from_secs(10);

use loco_rdmawait::testing::rt;

fn cluster() -> Cluster {
    testing::short_cluster(2, 1 << 14, Schedule::Threaded)
}

/// Awaits `f`, failing the test if it hangs. (Not `tokio::time::timeout`, which polls `f` when
/// its timer fires: that poll could end a hang it is meant to catch.)
async fn guarded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::select! {
        biased;
        () = tokio::time::sleep(HANG) => panic!("{what}: hung"),
        v = f => v,
    }
}

fn timed_out<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
}

/// `body` for each lock kind, homed on n1 of a cluster of its own.
macro_rules! each_lock {
    (|$c:ident, $l:ident| $body:expr) => {{
        {
            let $c = cluster();
            let $l = NLock::new(&$c, N1).unwrap();
            $body
        }
        {
            let $c = cluster();
            let $l = SLock::new(&$c, N1, 2).unwrap();
            $body
        }
        {
            let $c = cluster();
            let $l = WLock::new(&$c, N1, 2).unwrap();
            $body
        }
    }};
}

/// A task that awaits a lock it already holds (an awaited guard kept across the second
/// acquire) is refused after the cluster's timeout, as a thread's re-entrant acquire is
/// refused: it does not wait forever in the context's local queue for itself. The hold it has
/// is intact.
#[test]
fn a_task_awaiting_a_lock_it_holds_is_refused() {
    each_lock!(|c, l| {
        let actx = AsyncCtx::open(&c, N0).unwrap();
        rt().block_on(async {
            let g = guarded("first", l.acquire_async(&actx)).await.unwrap();
            timed_out(guarded("again", l.acquire_async(&actx)).await);
            assert!(l.is_held(actx.ctx()).unwrap());
            LockGuard::release(g).unwrap();
            let g = guarded("after", l.acquire_async(&actx)).await.unwrap();
            LockGuard::release(g).unwrap();
        })
    });
}

/// A guard forgotten by a task (`mem::forget`) keeps the lock, as a thread's would: the other
/// tasks of its context time out, as other threads do, instead of queueing forever.
#[test]
fn tasks_behind_a_forgotten_guard_time_out() {
    each_lock!(|c, l| {
        let actx = AsyncCtx::open(&c, N0).unwrap();
        let local = tokio::task::LocalSet::new();
        rt().block_on(local.run_until(async {
            let g = guarded("first", l.acquire_async(&actx)).await.unwrap();
            std::mem::forget(g);
            let waiters: Vec<_> = (0..3)
                .map(|_| {
                    let (l, actx) = (l.clone(), actx.clone());
                    tokio::task::spawn_local(async move {
                        l.acquire_async(&actx).await.map(|g| LockGuard::ticket(&g))
                    })
                })
                .collect();
            for w in waiters {
                timed_out(guarded("waiter", w).await.unwrap());
            }
        }));
        // Another thread times out too.
        let ctx = c.context(N1).unwrap();
        timed_out(l.acquire(&ctx));
    });
}

/// How the tasks' wait ends: the lock's node is killed, or the cluster shut down.
#[derive(Clone, Copy)]
enum End {
    Kill,
    Shutdown,
}

/// Three tasks of a context wait for a lock another thread holds (one on the network, the others
/// queued behind it locally) when `end` comes: every task is told (`PeerDead` naming the lock's
/// node, or `Shutdown`).
fn tasks_queue_until(end: End) {
    each_lock!(|c, l| {
        let actx = AsyncCtx::open(&c, N0).unwrap();
        let holder = c.context(N1).unwrap();
        let g = l.acquire(&holder).unwrap();
        let local = tokio::task::LocalSet::new();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (l, actx) = (l.clone(), actx.clone());
                local.spawn_local(async move {
                    l.acquire_async(&actx).await.map(|g| LockGuard::ticket(&g))
                })
            })
            .collect();
        rt().block_on(local.run_until(async {
            tokio::task::yield_now().await;
            match end {
                End::Kill => c.kill(N1).unwrap(),
                End::Shutdown => c.shutdown(),
            }
            for w in waiters {
                let r = guarded("waiter", w).await.unwrap();
                match end {
                    End::Kill => assert_peer_dead(r, N1),
                    End::Shutdown => assert_shutdown(r),
                }
            }
        }));
        drop(g);
    });
}

/// The lock's node dies while tasks queue for it.
#[test]
fn the_home_dies_while_tasks_queue() {
    tasks_queue_until(End::Kill);
}

/// The cluster shuts down while tasks queue for a lock another thread holds.
#[test]
fn a_shutdown_while_tasks_queue() {
    tasks_queue_until(End::Shutdown);
}

/// A task holds the lock and another task of its context is queued for it when the cluster
/// shuts down; the holder's release fails with `Shutdown`, and the queued task, let in, is told
/// `Shutdown` too: not `AlreadyHeld` for the holder's ticket (a hold of its context that could
/// not be released), which would tell it that it holds a lock it never took.
#[test]
fn a_task_queued_at_a_shutdown_is_told_shutdown_not_already_held() {
    each_lock!(|c, l| {
        let actx = AsyncCtx::open(&c, N0).unwrap();
        let local = tokio::task::LocalSet::new();
        rt().block_on(local.run_until(async {
            let g = guarded("holder", l.acquire_async(&actx)).await.unwrap();
            let queued = {
                let (l, actx) = (l.clone(), actx.clone());
                tokio::task::spawn_local(async move {
                    l.acquire_async(&actx).await.map(|g| LockGuard::ticket(&g))
                })
            };
            tokio::task::yield_now().await;
            c.shutdown();
            assert_shutdown(LockGuard::release(g));
            assert_shutdown(guarded("queued", queued).await.unwrap());
            assert_shutdown(guarded("again", l.acquire_async(&actx)).await);
        }));
    });
}

thread_local! {
    /// Panics on this thread, caught or not (counted by the hook `count_panics` installs).
    static PANICS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Installs a panic hook that counts each thread's panics in `PANICS`, then does what the hook
/// before it did (the message is still printed).
fn count_panics() {
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.with(|p| p.set(p.get() + 1));
        before(info)
    }));
}

/// Awaited acquires in a current-thread runtime built without timers (no `enable_time`) work,
/// their local queue unbounded there, and tokio's refusal to make a timer in such a runtime
/// (a panic, caught) is met once for the runtime, not at every acquire: each would print
/// "thread panicked ... timers are disabled" to the user's terminal as if the service had
/// crashed.
#[test]
fn awaited_acquires_without_timers_do_not_panic_at_every_call() {
    count_panics();
    each_lock!(|c, l| {
        let actx = AsyncCtx::open(&c, N0).unwrap();
        let no_timers = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let before = PANICS.with(std::cell::Cell::get);
        no_timers.block_on(async {
            for _ in 0..5 {
                let g = l.acquire_async(&actx).await.unwrap();
                LockGuard::release(g).unwrap();
            }
        });
        let panics = PANICS.with(std::cell::Cell::get) - before;
        assert!(panics <= 1, "{panics} panics for 5 acquires in one runtime");
    });
}
