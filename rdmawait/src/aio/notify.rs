//! Sleeping on a context's completion channel (the verbs backend's `ibv_comp_channel`),
//! through tokio's `AsyncFd`.
//!
//! The protocol against lost wake-ups: a future that is about to sleep **arms** the completion
//! queue (the next completion makes the descriptor readable), **looks again** (a completion may
//! have arrived before the arming), and only then waits for the descriptor. Whoever sees it
//! readable reads and acknowledges the events, clears the readiness and bumps the **epoch**:
//! every other sleeper, woken too, sees the epoch moved, so it re-arms and looks again instead
//! of waiting on a queue that nobody armed.
//!
//! A **backstop** bounds every sleep (where the runtime has timers): after [`BACKSTOP`] (or what
//! [`AsyncCtx::set_backstop`](super::AsyncCtx::set_backstop) says) the
//! future looks again whatever the channel says, so that even a lost event costs a delay, not a
//! hang, and the operation's own timeout is always checked.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::backend::CompletionEvents;

/// The channel's descriptor for `AsyncFd`: holds the channel, so the descriptor stays open for
/// as long as the reactor watches it.
struct Fd(Arc<dyn CompletionEvents>);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd()
    }
}

/// A context's completion channel, registered with the runtime's reactor.
pub(super) struct Notify {
    fd: AsyncFd<Fd>,
    /// Bumped each time the channel's events are read.
    epoch: Cell<u64>,
    /// Sleeps ended by the backstop rather than by the channel (the context's count, shared
    /// by its watchers in successive runtimes).
    pub(super) backstops: Rc<Cell<u64>>,
}

/// The longest a future sleeps on the channel before it looks again anyway, by default
/// ([`AsyncCtx::set_backstop`](super::AsyncCtx::set_backstop)).
pub const BACKSTOP: std::time::Duration = std::time::Duration::from_millis(20);

/// One future's sleep: the epoch it armed in, its wait for the descriptor, and its backstop.
pub(super) struct Sleep {
    /// The watcher it sleeps on (a context has a new one in each runtime).
    of: Rc<Notify>,
    epoch: u64,
    readable: Pin<Box<dyn Future<Output = io::Result<()>>>>,
    backstop: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the backstop fires (`None`: never, a backstop too long for an `Instant`).
    until: Option<std::time::Instant>,
}

/// A backstop timer, where the runtime has a time driver (tokio panics, rather than failing,
/// without one: see `try_timer`).
fn backstop(after: std::time::Duration) -> Option<Pin<Box<tokio::time::Sleep>>> {
    super::try_timer(|| tokio::time::sleep(after))
}

impl Notify {
    /// Registers the channel with the current runtime's reactor; `None` outside a runtime with
    /// its I/O driver (tasks then re-poll).
    pub(super) fn new(
        events: Arc<dyn CompletionEvents>,
        backstops: Rc<Cell<u64>>,
    ) -> Option<Notify> {
        tokio::runtime::Handle::try_current().ok()?;
        let fd = Fd(events);
        // tokio panics, rather than failing, in a runtime built without its I/O driver.
        // SAFETY: `Fd` owns the channel (an `Arc` of it), so the descriptor it returns stays
        // open, and is the same one, for as long as the `AsyncFd` lives.
        let registered = catch_unwind(AssertUnwindSafe(|| unsafe {
            AsyncFd::register_with_interest(fd, Interest::READABLE)
        }));
        let fd = match registered {
            Ok(Ok(fd)) => fd,
            Ok(Err(e)) => {
                tracing::debug!(target: "loco::rdmawait", error = %e, "cannot watch the completion channel: async tasks will poll");
                return None;
            }
            Err(_) => {
                tracing::debug!(target: "loco::rdmawait", "the tokio runtime has no I/O driver: async tasks will poll");
                return None;
            }
        };
        Some(Notify {
            fd,
            epoch: Cell::new(0),
            backstops,
        })
    }

    /// Parks a future on the channel (see the module docs); true to return `Pending`, false to
    /// look for the completion again now.
    /// `after` bounds the sleep (the backstop).
    pub(super) fn park(
        self: &Rc<Self>,
        cx: &mut Context<'_>,
        sleep: &mut Option<Sleep>,
        after: std::time::Duration,
    ) -> bool {
        let epoch = self.epoch.get();
        match sleep {
            Some(s) if s.epoch == epoch && Rc::ptr_eq(&s.of, self) => {
                match s.readable.as_mut().poll(cx) {
                    Poll::Pending => {
                        if let Some(b) = s.backstop.as_mut() {
                            if b.as_mut().poll(cx).is_ready() {
                                // Look again (and re-arm): whatever was missed is found now.
                                Notify::woke(&self.backstops, sleep);
                                *sleep = None;
                                return false;
                            }
                        }
                        true
                    }
                    Poll::Ready(r) => {
                        *sleep = None;
                        if let Err(e) = r {
                            tracing::debug!(target: "loco::rdmawait", error = %e, "completion channel failed: polling");
                            cx.waker().wake_by_ref();
                            return true;
                        }
                        false
                    }
                }
            }
            _ => {
                if let Err(e) = self.fd.get_ref().0.arm() {
                    tracing::debug!(target: "loco::rdmawait", error = %e, "cannot arm the completion queue: polling");
                    *sleep = None;
                    cx.waker().wake_by_ref();
                    return true;
                }
                let me = self.clone();
                *sleep = Some(Sleep {
                    of: self.clone(),
                    epoch,
                    readable: Box::pin(async move { me.readable().await }),
                    backstop: backstop(after),
                    until: std::time::Instant::now().checked_add(after),
                });
                false
            }
        }
    }

    /// Called when a future that may be asleep is polled: a sleep that lasted until its backstop
    /// is counted (whatever the poll then finds) and ended.
    /// `backstops` is the context's count.
    pub(super) fn woke(backstops: &Cell<u64>, sleep: &mut Option<Sleep>) {
        if sleep
            .as_ref()
            .and_then(|s| s.until)
            .is_some_and(|u| std::time::Instant::now() >= u)
        {
            backstops.set(backstops.get() + 1);
            *sleep = None;
        }
    }

    /// Waits until the channel is readable, then reads and acknowledges its events.
    async fn readable(&self) -> io::Result<()> {
        let mut guard = self.fd.readable().await?;
        let drained = self.fd.get_ref().0.drain();
        self.epoch.set(self.epoch.get().wrapping_add(1));
        guard.clear_ready();
        drained.map(|_| ()).map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    //! The wake-up protocol against the soft NIC's channel, driven by hand. A "NIC" thread
    //! completes jobs in a random order and, like a completion queue, signals the channel only
    //! when it is armed (then disarms). And the worst case is forced: some jobs complete inside
    //! `arm`, just before the queue is armed, which only the look after arming can notice. Many
    //! futures sleep on one channel; with the backstop out of the way (an hour), a lost wake-up
    //! leaves a future asleep and the run times out.

    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::time::Duration;

    use parking_lot::Mutex;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::backend::soft::channel::Channel;

    /// The channel, with jobs that complete at the worst moment: inside `arm`, before it arms.
    struct Racy {
        ch: Channel,
        at_arm: Mutex<VecDeque<usize>>,
        done: Arc<Vec<AtomicBool>>,
    }

    impl CompletionEvents for Racy {
        fn fd(&self) -> RawFd {
            self.ch.fd()
        }
        fn arm(&self) -> crate::Result<()> {
            if let Some(i) = self.at_arm.lock().pop_front() {
                // A completion just before the arming: an event only if another future's
                // arming is still in force.
                self.done[i].store(true, SeqCst);
                self.ch.signal();
            }
            self.ch.arm()
        }
        fn drain(&self) -> crate::Result<usize> {
            self.ch.drain()
        }
    }

    /// A future that waits for job `i` the way `Op` does: look, park, look again.
    async fn wait_job(n: Rc<Notify>, done: Arc<Vec<AtomicBool>>, i: usize) {
        let mut sleep = None;
        std::future::poll_fn(|cx| loop {
            if done[i].load(SeqCst) {
                return Poll::Ready(());
            }
            if n.park(cx, &mut sleep, Duration::from_secs(3600)) {
                return Poll::Pending;
            }
        })
        .await
    }

    #[test]
    fn no_wake_up_is_lost() {
        const JOBS: usize = 64;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for seed in 0..20u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut order: Vec<usize> = (0..JOBS).collect();
            for k in (1..JOBS).rev() {
                order.swap(k, rng.random_range(0..=k));
            }
            // A quarter of the jobs complete inside `arm`, the rest from the NIC thread.
            let at_arm = order.split_off(JOBS * 3 / 4);
            let done: Arc<Vec<AtomicBool>> =
                Arc::new((0..JOBS).map(|_| AtomicBool::new(false)).collect());
            let racy = Arc::new(Racy {
                ch: Channel::new().expect("a socket pair"),
                at_arm: Mutex::new(at_arm.into()),
                done: done.clone(),
            });
            let nic = {
                let (racy, done) = (racy.clone(), done.clone());
                std::thread::spawn(move || {
                    for i in order {
                        std::thread::sleep(Duration::from_micros(rng.random_range(0..300)));
                        done[i].store(true, SeqCst);
                        racy.ch.signal();
                    }
                })
            };
            rt.block_on(async {
                let n = Rc::new(Notify::new(racy.clone(), Rc::default()).expect("a reactor"));
                let local = tokio::task::LocalSet::new();
                let all = local.run_until(async {
                    let hs: Vec<_> = (0..JOBS)
                        .map(|i| tokio::task::spawn_local(wait_job(n.clone(), done.clone(), i)))
                        .collect();
                    for h in hs {
                        h.await.unwrap();
                    }
                });
                tokio::time::timeout(Duration::from_secs(10), all)
                    .await
                    .unwrap_or_else(|_| panic!("seed {seed}: a wake-up was lost"));
                assert_eq!(n.backstops.get(), 0);
            });
            nic.join().unwrap();
        }
    }
}
