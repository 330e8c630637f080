//! The raw lock trait, the generic [`Lock`] handle and its RAII guard (lock_api's split).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loco_rdmawait::Ctx;

use crate::thread::Spin;
use crate::{Error, Result};

/// The protocol of a lock: its words on the network and its per-thread state, nothing else.
///
/// Every method takes the calling thread's [`Ctx`]: the lock's state is per thread (its ticket,
/// private words, `rel` slot), and its operations run on that thread's queue pairs. A thread is a
/// context: two contexts on one OS thread are two threads of the model.
///
/// # Contract
/// Implementations guarantee **mutual exclusion**: between a successful acquire by one thread and
/// its release, no other thread's acquire succeeds. What else a release publishes is each lock's
/// own guarantee (spec §5). Misuse by the calling thread is checked: acquiring a lock it holds is
/// [`Error::AlreadyHeld`], releasing one it does not hold is [`Error::NotHeld`].
pub trait RawLock: Send + Sync + fmt::Debug {
    /// Blocks until the calling thread holds the lock; returns its ticket. Tickets are served in
    /// the order they are taken (FIFO). Blocks forever if the holder never releases (a warning is
    /// logged once the cluster's timeout has passed).
    ///
    /// A network error after the ticket was taken (say, a wait that timed out because a node
    /// died) leaves that ticket unserved: the lock is then as stuck as with a holder that died.
    /// Misuse errors are checked before anything is posted and leave the lock untouched.
    fn acquire(&self, ctx: &Ctx) -> Result<u64>;

    /// Takes the lock only if it is free now; returns the ticket, or `None` without taking any
    /// ticket. Costs a few round trips to the lock's words.
    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>>;

    /// Releases the lock held by the calling thread.
    fn release(&self, ctx: &Ctx) -> Result<()>;

    /// The ticket of the calling thread's current hold, if it holds the lock.
    fn held(&self, ctx: &Ctx) -> Result<Option<u64>>;
}

/// Timed acquisition, for every [`RawLock`].
pub trait RawLockTimed: RawLock {
    /// Tries to take the lock until `timeout` has passed; returns the ticket, or
    /// [`Error::Timeout`].
    ///
    /// A ticket lock cannot hand a ticket back, so this never takes one that it might abandon: it
    /// retries [`RawLock::try_acquire`] (take a ticket only when the lock is free) with backoff.
    /// It is therefore **not FIFO**: under steady contention by blocking acquirers it can time out
    /// even though the lock keeps changing hands.
    fn try_acquire_for(&self, ctx: &Ctx, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        let mut spin = Spin::new(timeout.saturating_add(ctx.cluster().timeout()));
        loop {
            if let Some(t) = self.try_acquire(ctx)? {
                return Ok(t);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout { after: timeout });
            }
            spin.wait("try_acquire_for");
        }
    }
}

impl<R: RawLock + ?Sized> RawLockTimed for R {}

/// A lock handle over the raw protocol `R`: cheap to clone, `Send` and `Sync`, shared by threads
/// on every node. Use the aliases [`WLock`](crate::WLock), [`SLock`](crate::SLock) and
/// [`NLock`](crate::NLock).
///
/// The lock protects no Rust data: what it protects is whatever the program accesses, on any node,
/// between acquire and release. How far that protection reaches is the lock kind's guarantee.
#[derive(Debug)]
pub struct Lock<R: RawLock> {
    raw: Arc<R>,
}

impl<R: RawLock> Clone for Lock<R> {
    fn clone(&self) -> Self {
        Lock {
            raw: self.raw.clone(),
        }
    }
}

impl<R: RawLock> Lock<R> {
    /// A handle over a raw lock.
    pub fn from_raw(raw: R) -> Self {
        Lock { raw: Arc::new(raw) }
    }

    /// The raw protocol, for acquire and release without a guard.
    pub fn raw(&self) -> &R {
        &self.raw
    }

    /// Blocks until the calling thread holds the lock (see [`RawLock::acquire`]); the guard
    /// releases it when dropped.
    pub fn acquire<'a>(&'a self, ctx: &'a Ctx) -> Result<LockGuard<'a, R>> {
        let ticket = self.raw.acquire(ctx)?;
        Ok(LockGuard::new(self.raw(), ctx, ticket))
    }

    /// Takes the lock only if it is free now (see [`RawLock::try_acquire`]).
    pub fn try_acquire<'a>(&'a self, ctx: &'a Ctx) -> Result<Option<LockGuard<'a, R>>> {
        Ok(self
            .raw
            .try_acquire(ctx)?
            .map(|ticket| LockGuard::new(self.raw(), ctx, ticket)))
    }

    /// Tries to take the lock for at most `timeout`; fails with [`Error::Timeout`] (see
    /// [`RawLockTimed::try_acquire_for`]: not FIFO).
    pub fn try_acquire_for<'a>(
        &'a self,
        ctx: &'a Ctx,
        timeout: Duration,
    ) -> Result<LockGuard<'a, R>> {
        let ticket = self.raw.try_acquire_for(ctx, timeout)?;
        Ok(LockGuard::new(self.raw(), ctx, ticket))
    }

    /// Whether the calling thread holds the lock.
    pub fn is_held(&self, ctx: &Ctx) -> Result<bool> {
        Ok(self.raw.held(ctx)?.is_some())
    }
}

/// Proof that a thread holds a lock; releases it when dropped.
///
/// Holds the thread's [`Ctx`], so it cannot leave the thread (release runs on the acquiring
/// thread's queue pairs). Release does network I/O and can fail: [`LockGuard::release`] returns
/// the error; `Drop` logs it (tracing, target `loco::locks`) and never panics.
///
/// ```compile_fail
/// # use loco_locks::NLock;
/// # use loco_rdmawait::{Cluster, NodeId};
/// let cluster = Cluster::builder().nodes(1).build().unwrap();
/// let lock = NLock::new(&cluster, NodeId(0)).unwrap();
/// let ctx = cluster.context(NodeId(0)).unwrap();
/// let g = lock.acquire(&ctx).unwrap();
/// std::thread::scope(|s| {
///     s.spawn(move || drop(g)); // error: a guard cannot leave its thread
/// });
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
pub struct LockGuard<'a, R: RawLock> {
    raw: &'a R,
    ctx: &'a Ctx,
    ticket: u64,
    done: bool,
}

impl<'a, R: RawLock> LockGuard<'a, R> {
    fn new(raw: &'a R, ctx: &'a Ctx, ticket: u64) -> Self {
        LockGuard {
            raw,
            ctx,
            ticket,
            done: false,
        }
    }

    /// Releases the lock now, returning any error of the release.
    ///
    /// Fails with [`Error::NotHeld`] if the lock was released behind the guard's back (through
    /// [`Lock::raw`]) and not re-acquired with the same ticket.
    pub fn release(mut guard: Self) -> Result<()> {
        guard.done = true;
        guard.release_now()
    }

    /// The ticket of this hold: holds are served in ticket order.
    pub fn ticket(guard: &Self) -> u64 {
        guard.ticket
    }

    /// The context of the holding thread.
    pub fn ctx(guard: &Self) -> &'a Ctx {
        guard.ctx
    }

    fn release_now(&self) -> Result<()> {
        if self.raw.held(self.ctx)? != Some(self.ticket) {
            return Err(Error::NotHeld);
        }
        self.raw.release(self.ctx)
    }
}

impl<R: RawLock> Drop for LockGuard<'_, R> {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.release_now() {
                tracing::error!(target: "loco::locks", error = %e, ticket = self.ticket,
                    "releasing a lock from its guard's drop failed");
            }
        }
    }
}

impl<R: RawLock> fmt::Debug for LockGuard<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.raw)
            .field("node", &self.ctx.node())
            .field("ticket", &self.ticket)
            .finish()
    }
}
