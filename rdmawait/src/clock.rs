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
pub fn sleep(d: Duration) {
    match sched::current() {
        Some(s) => s.sleep(d),
        None => std::thread::sleep(d),
    }
}

/// A spin loop's pause between two rounds: a CPU hint, or on a simulated thread a scheduling
/// point (the thread being waited for must get to run).
pub fn pause() {
    match sched::current() {
        Some(s) => s.point(),
        None => std::hint::spin_loop(),
    }
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
