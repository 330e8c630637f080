//! A completion channel for the `Threaded` soft NIC (feature `tokio`, [`crate::aio`]): the node's
//! engine thread, having executed (or dropped) a request of a thread, signals that thread's
//! channel if it is armed, as a real completion queue signals its `ibv_comp_channel`. Async
//! tasks then sleep on it rather than being re-polled.
//!
//! The descriptor is one end of a Unix socket pair; a signal is one byte written to the other.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use crate::backend::CompletionEvents;
use crate::Result;

/// A thread NIC's channel.
#[derive(Debug)]
pub(crate) struct Channel {
    rx: UnixStream,
    tx: UnixStream,
    armed: AtomicBool,
}

impl Channel {
    /// A channel, or `None` if the socket pair cannot be made (tasks then re-poll).
    pub(crate) fn new() -> Option<Channel> {
        let (rx, tx) = UnixStream::pair().ok()?;
        rx.set_nonblocking(true).ok()?;
        tx.set_nonblocking(true).ok()?;
        Some(Channel {
            rx,
            tx,
            armed: AtomicBool::new(false),
        })
    }

    /// A request of this thread completed: an event if the channel is armed (which disarms it).
    pub(crate) fn signal(&self) {
        if self.armed.swap(false, SeqCst) {
            // A full socket buffer already holds an unread event: nothing is lost.
            let _ = (&self.tx).write(&[1]);
        }
    }
}

impl CompletionEvents for Channel {
    fn fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    fn arm(&self) -> Result<()> {
        self.armed.store(true, SeqCst);
        Ok(())
    }

    fn drain(&self) -> Result<usize> {
        let mut buf = [0u8; 64];
        let mut n = 0;
        while let Ok(k) = (&self.rx).read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        Ok(n)
    }
}
