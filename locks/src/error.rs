//! The error type of `loco-locks`.

use std::time::Duration;

/// Everything that can go wrong with a lock: misuse by the calling thread, a timed acquire that
/// ran out of time, or a failure of the layers below.
///
/// Misuse is always checked (it costs a lookup in the thread's own state): it is an error, never
/// undefined behaviour and never a broken protocol.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the rdmawait layer (network, memory, timeouts of waits).
    #[error(transparent)]
    Rdma(#[from] loco_rdmawait::Error),
    /// An error of the sv layer other than an rdmawait one.
    #[error(transparent)]
    Sv(loco_sv::Error),
    /// The calling thread already holds the lock: acquiring it again would deadlock (ticket locks
    /// are not reentrant).
    #[error("this thread already holds the lock (ticket {ticket})")]
    AlreadyHeld {
        /// The ticket the thread holds.
        ticket: u64,
    },
    /// The calling thread does not hold the lock it tried to release (or the guard being released
    /// is not the thread's current hold).
    #[error("this thread does not hold the lock")]
    NotHeld,
    /// An acquire did not get the lock in time (the cluster's timeout, or the caller's). Nothing
    /// is left behind: a ticket it took is abandoned (marked so that later tickets pass it).
    #[error("lock not acquired within {after:?}")]
    Timeout {
        /// The timeout that expired.
        after: Duration,
    },
    /// More threads use a weak or strong lock at once than it was created for (its `rel[*]`
    /// array is full; slots of dropped contexts come back, see the crate's Failures section).
    #[error(
        "the lock admits at most {max} thread{s}, and all their slots are taken",
        s = if *max == 1 { "" } else { "s" }
    )]
    TooManyThreads {
        /// The bound chosen at creation.
        max: usize,
    },
    /// The calling thread's ticket was passed over while it waited: another thread skipped it
    /// because this thread's node was reported dead (see the lock types' "Failures"
    /// sections). The thread does not hold the lock; it may acquire again.
    #[error("ticket {ticket} was skipped while waiting (this node was reported dead)")]
    Skipped {
        /// The ticket that was skipped.
        ticket: u64,
    },
    /// The calling thread handed its hold to another thread of its node (a local handover,
    /// [`Lock::set_cohort`](crate::Lock::set_cohort)), which still holds it: its `waiting` slot
    /// names that hold until it is released on the network, so the thread cannot take a ticket
    /// of its own through the raw lock meanwhile. Acquire through the [`Lock`](crate::Lock)
    /// handle, which queues it behind its node's holder.
    #[error("this thread's hold was handed to another thread of its node, which still holds it")]
    HandedOff,
    /// This node's combining thread ran the critical section
    /// ([`Lock::combine`](crate::Lock::combine)) and then failed: waiting for the operations of
    /// the sections it ran, or, when it is the calling thread itself, releasing the lock or
    /// landing what it sent. The section ran; whether its operations took effect (or reached
    /// the next holder) is not known, as for a thread whose own wait or release fails.
    /// `reason` is the combining thread's error. (A section that panicked is resumed in its
    /// caller instead.)
    #[error(
        "the critical section ran on this node's combining thread, which then failed: {reason}"
    )]
    Combined {
        /// The combining thread's error.
        reason: String,
    },
    /// A lock was created with room for no thread.
    #[error("a lock needs room for at least one thread")]
    NoThreads,
    /// A context of one cluster was used with a lock of another.
    #[error("a context of cluster #{ctx} used with a lock of cluster #{lock}")]
    ForeignContext {
        /// The context's cluster.
        ctx: u32,
        /// The lock's cluster.
        lock: u32,
    },
}

impl From<loco_sv::Error> for Error {
    fn from(e: loco_sv::Error) -> Self {
        match e {
            loco_sv::Error::Rdma(e) => Error::Rdma(e),
            other => Error::Sv(other),
        }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl loco_rdmawait::RdmaCause for Error {
    fn rdma(&self) -> Option<&loco_rdmawait::Error> {
        match self {
            Error::Rdma(e) => Some(e),
            Error::Sv(e) => e.rdma(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sv_errors_of_the_rdmawait_layer_are_flattened() {
        let e: Error = loco_sv::Error::Rdma(loco_rdmawait::Error::Empty).into();
        assert!(matches!(e, Error::Rdma(loco_rdmawait::Error::Empty)));
        assert_eq!(
            Error::Timeout {
                after: Duration::from_millis(5)
            }
            .to_string(),
            "lock not acquired within 5ms"
        );
    }
}
