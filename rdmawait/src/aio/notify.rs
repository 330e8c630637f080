//! Sleeping on a context's completion channel (the verbs backend's `ibv_comp_channel`),
//! through tokio's `AsyncFd`.
//!
//! The protocol against lost wake-ups: a future that is about to sleep **arms** the completion
//! queue (the next completion makes the descriptor readable), **looks again** (a completion may
//! have arrived before the arming), and only then waits for the descriptor. Whoever sees it
//! readable reads and acknowledges the events, clears the readiness and bumps the **epoch**:
//! every other sleeper, woken too, sees the epoch moved, so it re-arms and looks again instead
//! of waiting on a queue that nobody armed.

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
}

/// One future's sleep: the epoch it armed in, and its wait for the descriptor.
pub(super) struct Sleep {
    epoch: u64,
    readable: Pin<Box<dyn Future<Output = io::Result<()>>>>,
}

impl Notify {
    /// Registers the channel with the current runtime's reactor; `None` outside a runtime with
    /// its I/O driver (tasks then re-poll).
    pub(super) fn new(events: Arc<dyn CompletionEvents>) -> Option<Notify> {
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
        })
    }

    /// Parks a future on the channel (see the module docs); true to return `Pending`, false to
    /// look for the completion again now.
    pub(super) fn park(self: &Rc<Self>, cx: &mut Context<'_>, sleep: &mut Option<Sleep>) -> bool {
        let epoch = self.epoch.get();
        match sleep {
            Some(s) if s.epoch == epoch => match s.readable.as_mut().poll(cx) {
                Poll::Pending => true,
                Poll::Ready(r) => {
                    *sleep = None;
                    if let Err(e) = r {
                        tracing::debug!(target: "loco::rdmawait", error = %e, "completion channel failed: polling");
                        cx.waker().wake_by_ref();
                        return true;
                    }
                    false
                }
            },
            _ => {
                if let Err(e) = self.fd.get_ref().0.arm() {
                    tracing::debug!(target: "loco::rdmawait", error = %e, "cannot arm the completion queue: polling");
                    *sleep = None;
                    cx.waker().wake_by_ref();
                    return true;
                }
                let me = self.clone();
                *sleep = Some(Sleep {
                    epoch,
                    readable: Box::pin(async move { me.readable().await }),
                });
                false
            }
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
