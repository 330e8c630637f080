//! The completion channel of a thread's completion queue, for async tasks (feature `tokio`,
//! [`crate::aio`]): the queue is armed with `ibv_req_notify_cq`, the channel's descriptor becomes
//! readable when a completion arrives, and each event read is acknowledged at once.
//!
//! Every event got is acknowledged before `drain` returns: `ibv_destroy_cq` waits for the
//! acknowledgement of every event got from its queue, so one left unacknowledged would hang the
//! context's drop.

use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::Arc;

use parking_lot::Mutex;
use rdma_mummy_sys as sys;
use sideway::ibverbs::completion::{CompletionChannel, CompletionQueue};

use super::{qp, verbs_error};
use crate::backend::CompletionEvents;
use crate::Result;

/// A completion queue's channel. Holds a handle of the queue, so the queue (destroyed after the
/// thread's queue pairs) lives as long as the channel is used.
pub(crate) struct Events {
    channel: Arc<CompletionChannel>,
    cq: qp::Cq,
    /// Serialises `drain` and `arm` (the context's thread is the only caller; the lock costs
    /// nothing uncontended and keeps the calls `Sync`).
    lock: Mutex<()>,
}

impl Events {
    pub(crate) fn new(channel: Arc<CompletionChannel>, cq: qp::Cq) -> Events {
        Events {
            channel,
            cq,
            lock: Mutex::new(()),
        }
    }
}

impl CompletionEvents for Events {
    fn fd(&self) -> RawFd {
        self.channel.as_raw_fd()
    }

    fn arm(&self) -> Result<()> {
        let _g = self.lock.lock();
        // SAFETY: the queue is alive while `self.cq` holds a handle of it; `ibv_req_notify_cq`
        // only asks the provider to signal the queue's channel on its next completion.
        let rc = unsafe { sys::ibv_req_notify_cq(self.cq.cq().as_ptr(), 0) };
        if rc != 0 {
            return Err(verbs_error(format!(
                "ibv_req_notify_cq failed (error {rc})"
            )));
        }
        Ok(())
    }

    fn drain(&self) -> Result<usize> {
        let _g = self.lock.lock();
        let mut got: u32 = 0;
        loop {
            let mut cq: *mut sys::ibv_cq = ptr::null_mut();
            let mut context: *mut std::ffi::c_void = ptr::null_mut();
            // SAFETY: the channel is alive while `self.channel` holds it, and its descriptor
            // was made non-blocking at creation, so this returns at once (-1 with EAGAIN when
            // no event waits); the two out-pointers are valid locals.
            let rc = unsafe {
                sys::ibv_get_cq_event(self.channel.comp_channel().as_ptr(), &mut cq, &mut context)
            };
            if rc != 0 {
                break;
            }
            got += 1;
        }
        if got > 0 {
            // SAFETY: the only queue on this channel is `self.cq` (alive, see above), and `got`
            // is the number of its events just got and not yet acknowledged.
            unsafe { sys::ibv_ack_cq_events(self.cq.cq().as_ptr(), got) };
        }
        Ok(got as usize)
    }
}
