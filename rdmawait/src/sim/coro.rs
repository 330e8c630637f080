//! Simulated threads as stackful coroutines (`corosensei`), all on the run's one OS thread.
//!
//! A scheduling point that hands the baton to another simulated thread suspends the running
//! coroutine back to the dispatcher ([`super::sched::Sched::run_all`]), which resumes the one
//! holding the baton: a switch costs tens of nanoseconds, where parking one OS thread and
//! unparking another cost microseconds. Each coroutine has its own stack, so users' code runs
//! unchanged (deep calls, `Drop`, panics caught inside the coroutine).
//!
//! The unsafe part is small: the running coroutine's [`Yielder`] is kept in a thread-local as a
//! raw pointer, so that code deep inside the soft NIC can suspend without threading the yielder
//! through every call.

#![allow(unsafe_code)]

use std::cell::Cell;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

/// Stack of each simulated thread: as much as an OS thread gets by default (only what is
/// touched is backed by memory).
const STACK: usize = 2 << 20;

/// Stacks kept for reuse, so that a run's threads do not map and unmap their stacks.
const POOL: usize = 256;

thread_local! {
    /// The running coroutine's yielder; null outside any coroutine. Set by the coroutine
    /// itself when it starts and each time it is resumed, cleared by the dispatcher each time
    /// a resume returns, so it is non-null exactly while that coroutine runs.
    static YIELDER: Cell<*const Yielder<(), ()>> = const { Cell::new(std::ptr::null()) };
}

static STACKS: parking_lot::Mutex<Vec<DefaultStack>> = parking_lot::Mutex::new(Vec::new());

/// One simulated thread's coroutine.
pub(super) struct Coro(Option<Coroutine<(), (), (), DefaultStack>>);

impl Coro {
    /// A coroutine that runs `body` when first resumed. `body` must not unwind (the caller
    /// catches panics inside it).
    pub(super) fn new(body: Box<dyn FnOnce() + Send>) -> std::io::Result<Coro> {
        let stack = match STACKS.lock().pop() {
            Some(s) => s,
            None => DefaultStack::new(STACK)?,
        };
        let co = Coroutine::with_stack(stack, move |y: &Yielder<(), ()>, ()| {
            YIELDER.with(|c| c.set(y));
            body();
        });
        Ok(Coro(Some(co)))
    }

    /// Runs the coroutine until it suspends (false) or returns (true; its stack goes back to
    /// the pool).
    pub(super) fn resume(&mut self) -> bool {
        let Some(co) = self.0.as_mut() else {
            return true;
        };
        let r = co.resume(());
        YIELDER.with(|c| c.set(std::ptr::null()));
        match r {
            CoroutineResult::Yield(()) => false,
            CoroutineResult::Return(()) => {
                if let Some(co) = self.0.take() {
                    let mut pool = STACKS.lock();
                    if pool.len() < POOL {
                        pool.push(co.into_stack());
                    }
                }
                true
            }
        }
    }
}

/// Suspends the running coroutine until the dispatcher resumes it; false (at once) if the
/// caller is not in a coroutine.
pub(super) fn suspend() -> bool {
    let y = YIELDER.with(Cell::get);
    if y.is_null() {
        return false;
    }
    // SAFETY: `y` is non-null only while the coroutine that stored it runs (see `YIELDER`), and
    // this code runs in that coroutine, whose body holds the `&Yielder` for as long as it
    // runs; a `Yielder` is used only on the OS thread of its coroutine, which this is.
    unsafe { (*y).suspend(()) };
    YIELDER.with(|c| c.set(y));
    true
}
