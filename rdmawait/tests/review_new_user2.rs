//! A second new user's sweep of the async API (feature `tokio`): what a runtime built as the
//! `AsyncCtx` docs build theirs (`new_current_thread().build()`, or with `enable_io` only:
//! no timers) does to the thread's sleeps.
#![cfg(feature = "tokio")]

use std::cell::Cell;
use std::time::Duration;

use loco_rdmawait::aio::AsyncCtx;
use loco_rdmawait::testing::SHORT_TIMEOUT;
use loco_rdmawait::{clock, Cluster, NodeId, Schedule, SoftBackend};

thread_local! {
    /// Panics on this thread (caught or not), counted by the hook `count_panics` installs.
    static PANICS: Cell<u64> = const { Cell::new(0) };
}

/// Counts every panic of the calling thread from now on (the default hook still prints it).
fn count_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.with(|p| p.set(p.get() + 1));
        default(info);
    }));
}

/// A blocking call that sleeps, and operations that sleep on the completion channel, in a
/// runtime without timers: they work (re-polled), and tokio's refusal to make a timer there
/// (a panic, caught) is met at most once per runtime, not at every poll of every sleep (each
/// printed a panic message: hundreds for a 2 ms sleep).
#[test]
fn sleeps_without_timers_do_not_panic_at_every_poll() {
    count_panics();
    for io in [false, true] {
        let soft = std::sync::Arc::new(SoftBackend::try_new(2, 4096, Schedule::Threaded).unwrap());
        let c = Cluster::with_backend(Box::new(soft.clone()), SHORT_TIMEOUT);
        let actx = AsyncCtx::open(&c, NodeId(0)).unwrap();
        actx.set_spin_polls(0);
        let (x, y) = (
            c.alloc_word(NodeId(0)).unwrap(),
            c.alloc_word(NodeId(1)).unwrap(),
        );
        let mut b = tokio::runtime::Builder::new_current_thread();
        if io {
            b.enable_io();
        }
        let rt = b.build().unwrap();
        let before = PANICS.with(Cell::get);
        rt.block_on(async {
            for _ in 0..3 {
                actx.run(|_| clock::sleep(Duration::from_millis(2))).await;
            }
            // A get whose target is stalled for a moment: with `enable_io` the task sleeps on
            // the completion channel, whose backstop is a timer too.
            for _ in 0..3 {
                soft.stall(NodeId(1), true).unwrap();
                let s = soft.clone();
                let unstall = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(3));
                    s.stall(NodeId(1), false).unwrap();
                });
                actx.get(&x, &y).unwrap().await.unwrap();
                unstall.join().unwrap();
            }
        });
        let panics = PANICS.with(Cell::get) - before;
        // At most: the I/O driver's absence (once per context), the timers' (once per runtime).
        assert!(panics <= 2, "io {io}: {panics} panics");
    }
}
