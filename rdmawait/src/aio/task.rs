//! A blocking library call run as a stackful coroutine (`corosensei`) on the task's OS thread.
//!
//! The layers above rdmawait are written once, as blocking code (a lock's acquire spins on
//! `wait`s, a global fence waits for its reads): the one definition the explorer and the tests
//! check. To await them without a second, async copy of every protocol, the call runs on a
//! coroutine stack of its own; where it would block (a `wait` that is not complete yet, a spin
//! loop's pause), it suspends back to the future that drives it, which returns `Pending`.
//!
//! The unsafe part is small: the running coroutine's [`Yielder`] (and the context it serves) are
//! kept in a thread-local as raw pointers, so that `Ctx::wait` deep inside a lock can suspend
//! without threading the yielder through every layer.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

use crate::Ctx;

/// Stack of a task's coroutine: library calls are shallow, but users' closures may not be (only
/// what is touched is backed by memory).
const STACK: usize = 256 << 10;

/// Why a coroutine suspended: what the future that drives it should wait for before resuming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Park {
    /// A completion of the task's own context (a `wait` found its operations incomplete), until
    /// the wait's deadline (`None`: none), after which the task must look again whatever the
    /// completion channel says (the wait's timeout is checked when it looks).
    Completion(Option<std::time::Instant>),
    /// Anything else (a spin loop's pause, a back-off, a wait on another context): resume soon.
    Yield,
    /// A sleep (`clock::sleep`): resume at this instant, not before (a timer wakes the task).
    Until(std::time::Instant),
}

#[derive(Clone, Copy)]
struct Running {
    yielder: *const Yielder<(), Park>,
    ctx: *const Ctx,
}

thread_local! {
    /// The running task coroutine; `None` outside one. Set by the coroutine when it starts and
    /// each time it is resumed; [`Task::resume`] restores the previous value when the resume
    /// returns, so it is `Some` exactly while a task coroutine runs on this thread.
    static RUNNING: Cell<Option<Running>> = const { Cell::new(None) };
}

/// Whether the calling code runs inside a task coroutine (and may suspend).
pub(crate) fn in_task() -> bool {
    RUNNING.with(Cell::get).is_some()
}

/// Suspends the running task coroutine until its future resumes it; false (at once) outside one.
/// A `Completion` park on a context other than the task's own becomes a `Yield` (only the task's
/// own context wakes its future).
pub(crate) fn suspend(park: Park, on: Option<&Ctx>) -> bool {
    let Some(r) = RUNNING.with(Cell::get) else {
        return false;
    };
    let park = match (park, on) {
        (Park::Completion(_), Some(ctx)) if std::ptr::eq(ctx, r.ctx) => park,
        (Park::Completion(_), _) => Park::Yield,
        (other, _) => other,
    };
    // SAFETY: `RUNNING` is `Some` only while the coroutine that stored it runs (see `RUNNING`),
    // and this code runs in that coroutine, whose body holds the `&Yielder` for as long as it
    // runs; a `Yielder` is used only on the OS thread of its coroutine, which this is.
    unsafe { (*r.yielder).suspend(park) };
    RUNNING.with(|c| c.set(Some(r)));
    true
}

/// The outcome of a step of a task.
pub(crate) enum Step<T> {
    /// Suspended; resume after what the park says.
    Parked(Park),
    /// Finished with the closure's value, or the payload of its panic.
    Done(std::thread::Result<T>),
}

/// One library call on its own coroutine stack.
pub(crate) struct Task<'a, T> {
    co: Option<Coroutine<(), Park, std::thread::Result<T>, DefaultStack>>,
    /// The coroutine borrows data of lifetime `'a` (the closure's captures and the context).
    _borrows: std::marker::PhantomData<&'a ()>,
}

impl<'a, T: 'a> Task<'a, T> {
    /// A coroutine that runs `f(ctx)` when first resumed.
    pub(crate) fn new(ctx: &'a Ctx, f: impl FnOnce(&Ctx) -> T + 'a) -> std::io::Result<Self> {
        let stack = DefaultStack::new(STACK)?;
        let body = move |y: &Yielder<(), Park>, ()| {
            RUNNING.with(|c| {
                c.set(Some(Running {
                    yielder: y,
                    ctx: ctx as *const Ctx,
                }))
            });
            catch_unwind(AssertUnwindSafe(|| f(ctx)))
        };
        // SAFETY: everything `body` borrows lives for `'a` (the closure's captures and `ctx`),
        // and the coroutine does not outlive `'a`: it is owned by this `Task<'a, _>`, which the
        // borrow checker keeps within `'a`. Dropping a `Task` whose coroutine has not finished
        // runs `Drop for Coroutine`, which unwinds the stack (destructors run while `'a` still
        // holds); the futures of this module finish their coroutines before dropping them. If a
        // `Task` is leaked, its stack is leaked with it and never resumed, which is safe.
        let co = unsafe { Coroutine::with_stack_unchecked(stack, body) };
        Ok(Task {
            co: Some(co),
            _borrows: std::marker::PhantomData,
        })
    }

    /// Runs the coroutine until it suspends or returns. After `Done`, further calls return a
    /// panic payload saying so (the futures never do that).
    pub(crate) fn resume(&mut self) -> Step<T> {
        let Some(co) = self.co.as_mut() else {
            return Step::Done(Err(Box::new("task resumed after it finished")));
        };
        let outer = RUNNING.with(Cell::get);
        let r = co.resume(());
        RUNNING.with(|c| c.set(outer));
        match r {
            CoroutineResult::Yield(park) => Step::Parked(park),
            CoroutineResult::Return(v) => {
                self.co = None;
                Step::Done(v)
            }
        }
    }

    /// Whether the coroutine has returned.
    pub(crate) fn done(&self) -> bool {
        self.co.is_none()
    }
}
