//! Time as the libraries see it: real time, or a simulation's virtual time.
//!
//! Every timeout, deadline and back-off in the soft backend and the libraries above reads the
//! clock through [`now`] and waits through [`sleep`] and [`pause`]. On an ordinary thread they
//! are [`Instant::now`], [`std::thread::sleep`] and a spin hint. On a thread of a deterministic
//! simulation ([`crate::sim`]) they are the simulation's: virtual time that advances only as the
//! simulated threads take steps, and a pause is a scheduling point, where the simulator may run
//! another thread. That is what makes a simulated run the same, bit for bit, whatever the host's
//! load: no decision of the libraries depends on real time.

use std::time::{Duration, Instant};

use crate::sim::sched;

/// The current time: real, or the simulation's on a simulated thread.
pub fn now() -> Instant {
    sched::current().map_or_else(Instant::now, |s| s.now())
}

/// Waits `d`: sleeps, or on a simulated thread lets virtual time pass by `d` (other simulated
/// threads run meanwhile).
///
/// In an async task's blocking call (`aio::AsyncCtx::run`, feature `tokio`) the task is
/// suspended until `d` has passed, on a tokio timer (the thread's other tasks run meanwhile,
/// and nothing polls the task before its time; polled outside a tokio runtime, it is re-polled
/// until then). A sleep of more than a year is one of a year.
pub fn sleep(d: Duration) {
    match sched::current() {
        Some(s) => s.sleep(d),
        None if in_task() => {
            // A timer wakes the task at the end (a sleep longer than a year is one of a year).
            let end = Instant::now()
                .checked_add(d)
                .or_else(|| Instant::now().checked_add(Duration::from_secs(365 * 24 * 3600)));
            while let Some(e) = end.filter(|e| Instant::now() < *e) {
                suspend_until(e);
            }
        }
        None => std::thread::sleep(d),
    }
}

/// Parks the calling thread for at most `d`, until an [`Unparker`] of it wakes it:
/// [`std::thread::park_timeout`] on an ordinary thread. On a simulated thread of a timed run
/// the thread runs again when another simulated thread unparks it, after the profile's wake-up
/// time ([`Profile::wake`](crate::sim::Profile::wake)), or once `d` of virtual time has passed;
/// in an untimed run it sleeps `d` (nothing there is sized in time). In an async task's blocking
/// call, where nothing can unpark it, the task is suspended for `d`. As with
/// `std::thread::park_timeout`, a park may end early: callers check their condition again.
pub fn park_timeout(d: Duration) {
    match sched::current() {
        Some(s) => s.park(d),
        None if in_task() => sleep(d),
        None => std::thread::park_timeout(d),
    }
}

/// What wakes a thread parked in [`park_timeout`] (made by [`unparker`] on that thread).
#[derive(Clone, Debug)]
pub struct Unparker(Parked);

#[derive(Clone, Debug)]
enum Parked {
    Os(std::thread::Thread),
    Sim(sched::Handle),
}

impl Unparker {
    /// Wakes the thread if it is parked; else its next park returns at once.
    pub fn unpark(&self) {
        match &self.0 {
            Parked::Os(t) => t.unpark(),
            Parked::Sim(h) => {
                // A thread of another run (a check nested in this one, say) is no thread of
                // this run: its unpark comes from outside.
                let waker = sched::current()
                    .filter(|w| std::sync::Arc::ptr_eq(&w.sched, &h.sched))
                    .map(|w| w.me);
                h.sched.unpark(waker, h.me)
            }
        }
    }
}

/// An [`Unparker`] of the calling thread; `None` in an async task's blocking call, which parks
/// by suspending (see [`park_timeout`]).
pub fn unparker() -> Option<Unparker> {
    match sched::current() {
        Some(h) => Some(Unparker(Parked::Sim(h))),
        None if in_task() => None,
        None => Some(Unparker(Parked::Os(std::thread::current()))),
    }
}

/// A spin loop's pause between two rounds: a CPU hint, or on a simulated thread a scheduling
/// point (the thread being waited for must get to run), or in an async task's blocking call a
/// suspension of the task (the thread's other tasks run).
pub fn pause() {
    match sched::current() {
        Some(s) => s.point(),
        None if in_task() => suspend(),
        None => std::hint::spin_loop(),
    }
}

/// Hands the CPU over: `std::thread::yield_now` on an ordinary thread, a scheduling point on a
/// simulated thread, a suspension of the task in an async task's blocking call. Under a
/// profile that shares CPUs ([`Profile::cpus`](crate::sim::Profile::cpus)) a simulated thread
/// keeps its CPU until its slice ends, as a CPU-bound thread's `sched_yield` mostly does on
/// Linux; a spin loop's [`pause`] is where it lets a waiting thread have it.
pub fn yield_now() {
    match sched::current() {
        Some(s) => s.yield_now(),
        None if in_task() => suspend(),
        None => std::thread::yield_now(),
    }
}

/// `n` spin-loop hints in a row (`std::hint::spin_loop`), as a back-off that spins between
/// two tries does (crossbeam's `Backoff::snooze` spins 1, 2, 4 ... 64 of them). On a thread
/// of a timed simulation they take `n` times the profile's
/// [`spin_hint`](crate::sim::Profile::spin_hint) of virtual time and keep the CPU; in an
/// untimed one they are free, as on any other thread their time is the CPU's.
pub fn spin_hints(n: u32) {
    if let Some(s) = sched::current() {
        s.spin_hints(n);
        return;
    }
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// Whether spin loops on this thread hand over at every round ([`pause`], [`yield_now`])
/// rather than spinning or backing off on the OS thread: on a simulated thread and in an async
/// task's blocking call, where the code being waited for runs only when this code lets it.
pub fn cooperative() -> bool {
    sched::current().is_some() || in_task()
}

/// Whether the calling code is an async task's blocking call (`aio::AsyncCtx::run`, feature
/// `tokio`).
fn in_task() -> bool {
    #[cfg(feature = "tokio")]
    return crate::aio::in_task();
    #[cfg(not(feature = "tokio"))]
    false
}

fn suspend() {
    #[cfg(feature = "tokio")]
    crate::aio::suspend(crate::aio::Park::Yield, None);
}

fn suspend_until(_end: Instant) {
    #[cfg(feature = "tokio")]
    crate::aio::suspend(crate::aio::Park::Until(_end), None);
}

/// Whether durations on this thread say something about speed: true on an ordinary thread and
/// on a simulated thread of a run timed by a network profile; false in an untimed simulation,
/// where every step costs the same and a pause sized from measured times means nothing.
pub fn timed() -> bool {
    sched::current().is_none_or(|s| s.timed())
}

/// Whether the calling thread is a simulated one ([`crate::sim`]).
pub fn simulated() -> bool {
    sched::current().is_some()
}
