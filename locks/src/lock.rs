//! The raw lock trait, the generic [`Lock`] handle and its RAII guard (lock_api's split).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loco_rdmawait::{Ctx, NodeId};

use crate::cohort::{Cohorts, NodeTurn};
use crate::thread::{Deadline, PinRef, Spin};
use crate::{Error, Result};

/// A hold on its way from one thread to another thread of the same node, unreleased (a local
/// handover of a cohort, [`Lock::set_cohort`]): made by [`RawLock::hand_off`], taken by
/// [`RawLock::take_over`]. Only this crate's locks make them.
#[derive(Debug)]
pub struct Hold {
    /// The raw lock's id.
    pub(crate) lock: u64,
    pub(crate) node: NodeId,
    pub(crate) ticket: u64,
    /// A node lock's: whether the value of `rel` the hold entered on had the poison bit.
    pub(crate) poison: bool,
    /// Keeps the hold's announcement (its first holder's `waiting` slot) in place.
    pub(crate) pin: Option<PinRef>,
}

impl Hold {
    /// The ticket of the hold.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }
}

/// The protocol of a lock: its words on the network and its per-thread state, nothing else.
///
/// Every method takes the calling thread's [`Ctx`]: the lock's state is per thread (its ticket,
/// private words, `rel` slot), and its operations run on that thread's queue pairs. A thread is a
/// context: two contexts on one OS thread are two threads of the model.
///
/// # Contract
/// Implementations guarantee **mutual exclusion**: between a successful acquire by one thread and
/// its release, no other thread's acquire succeeds. What else a release publishes is each lock's
/// own guarantee (docs/model.md §5.3-§5.5). Misuse by the calling thread is checked: acquiring a lock it holds is
/// [`Error::AlreadyHeld`], releasing one it does not hold is [`Error::NotHeld`].
pub trait RawLock: Send + Sync + fmt::Debug {
    /// Blocks until the calling thread holds the lock; returns its ticket. Tickets are served in
    /// the order they are taken (FIFO). Gives up with [`Error::Timeout`] after the cluster's
    /// timeout ([`Cluster::timeout`](loco_rdmawait::Cluster::timeout)); see
    /// [`RawLock::acquire_until`].
    ///
    /// Misuse errors are checked before anything is posted and leave the lock untouched.
    fn acquire(&self, ctx: &Ctx) -> Result<u64>;

    /// Takes the lock only if it is free now; returns the ticket, or `None` without taking any
    /// ticket. Costs a few round trips to the lock's words.
    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>>;

    /// Releases the lock held by the calling thread.
    fn release(&self, ctx: &Ctx) -> Result<()>;

    /// The ticket of the calling thread's current hold, if it holds the lock.
    fn held(&self, ctx: &Ctx) -> Result<Option<u64>>;

    /// [`RawLock::acquire`], giving up at `deadline` with [`Error::Timeout`]. **FIFO**: it takes
    /// a ticket and waits for its turn; if it gives up (timeout, shutdown, error) the ticket is
    /// **abandoned**: marked so that later tickets are not blocked by it (see the lock types'
    /// "Failures" sections). Every internal wait uses the time left, so the call returns within
    /// a small margin of `deadline` (at most one more round of a few round trips, bounded by half
    /// a second, to mark the ticket).
    ///
    /// The default implementation (for locks outside this crate) polls
    /// [`RawLock::try_acquire_until`] and is not FIFO.
    fn acquire_until(&self, ctx: &Ctx, deadline: Instant) -> Result<u64> {
        let after = deadline.saturating_duration_since(loco_rdmawait::clock::now());
        let mut spin = Spin::new();
        loop {
            if let Some(t) = self.try_acquire_until(ctx, deadline)? {
                return Ok(t);
            }
            if loco_rdmawait::clock::now() >= deadline {
                return Err(Error::Timeout { after });
            }
            spin.wait(ctx.cluster())?;
        }
    }

    /// [`RawLock::try_acquire`], with every internal wait bounded by `deadline`.
    fn try_acquire_until(&self, ctx: &Ctx, deadline: Instant) -> Result<Option<u64>> {
        let _ = deadline;
        self.try_acquire(ctx)
    }

    /// What the calling thread must do before its hold passes, without a release, to another
    /// task of the same context (a local handover of `Lock::acquire_async`, feature
    /// `tokio`). Two critical sections of one thread with no release between them are one
    /// critical section, so by default nothing; the strong lock runs its global fence, so
    /// that its guarantee (every operation of the critical section complete before the next
    /// holder enters) holds for a local successor too. An error means: release on the network
    /// instead.
    fn hand_over_locally(&self, ctx: &Ctx) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Gets the calling thread ready to queue for the lock on its node ([`Lock::set_cohort`]):
    /// its per-thread state is made, and a thread that holds the lock is refused
    /// ([`Error::AlreadyHeld`]). Nothing is posted.
    fn prepare(&self, ctx: &Ctx) -> Result<()> {
        match self.held(ctx)? {
            Some(ticket) => Err(Error::AlreadyHeld { ticket }),
            None => Ok(()),
        }
    }

    /// Passes the calling thread's hold, unreleased, towards another thread of its node (a
    /// cohort's local handover, [`Lock::set_cohort`]), after doing what the lock's guarantee
    /// owes the next holder (docs/model.md §5.3-§5.5: nothing on the network for the weak lock,
    /// a global fence for the strong one, `gf([n])` for the node lock on n). The calling
    /// thread no longer holds the lock. `Ok(None)` (the default): this lock does not hand
    /// over; release it instead. An error leaves the hold with the caller.
    fn hand_off(&self, ctx: &Ctx) -> Result<Option<Hold>> {
        let _ = ctx;
        Ok(None)
    }

    /// The calling thread takes over a hold that another thread of its node handed off;
    /// returns its ticket. It then holds the lock, and releases it (or hands it off) as its
    /// own.
    fn take_over(&self, ctx: &Ctx, hold: Hold) -> Result<u64> {
        let _ = (ctx, hold);
        Err(Error::NotHeld)
    }

    /// Releases the lock held by the calling thread, telling the next holder that the critical
    /// section did not finish (poisoning; used by a guard dropped during a panic).
    fn release_poisoned(&self, ctx: &Ctx) -> Result<()> {
        self.release(ctx)
    }

    /// Whether the calling thread's current hold was handed over by a critical section that did
    /// not finish: a guard dropped while its thread panicked, or a holder whose node died (its
    /// ticket skipped). `false` when the thread does not hold the lock.
    fn poisoned(&self, ctx: &Ctx) -> Result<bool> {
        let _ = ctx;
        Ok(false)
    }

    /// The calling thread is done with the lock: pays what it owes (marks of abandoned
    /// tickets), reaps its outstanding release operations, and hands its per-thread state back
    /// at once (a weak lock's `rel` slot, private words). Dropping the context does the same,
    /// except that words an operation may still read or write are then leaked rather than
    /// recycled (the thread's `waiting` slot is read back at the drop, as `leave` does, and kept
    /// if that read does not complete). Fails with [`Error::AlreadyHeld`] while the thread holds the lock.
    fn leave(&self, ctx: &Ctx) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
}

/// Timed acquisition, for every [`RawLock`].
pub trait RawLockTimed: RawLock {
    /// Tries to take the lock until `timeout` has passed; returns the ticket, or
    /// [`Error::Timeout`].
    ///
    /// It never takes a ticket while the lock is held: it retries [`RawLock::try_acquire`] (take
    /// a ticket only when the lock is free) with backoff, every internal wait bounded by the time
    /// left. It is therefore **not FIFO**: under steady contention by blocking acquirers it can
    /// time out even though the lock keeps changing hands. For a FIFO timed acquire, use
    /// [`RawLock::acquire_until`] ([`Lock::acquire_timeout`]).
    fn try_acquire_for(&self, ctx: &Ctx, timeout: Duration) -> Result<u64> {
        let deadline = Deadline::after(timeout);
        let mut spin = Spin::new();
        loop {
            match self.try_acquire_until(ctx, deadline.end()) {
                Ok(Some(t)) => return Ok(t),
                Ok(None) => {}
                Err(Error::Timeout { .. }) => return Err(Error::Timeout { after: timeout }),
                Err(e) => return Err(e),
            }
            if deadline.expired() {
                return Err(Error::Timeout { after: timeout });
            }
            spin.wait(ctx.cluster())?;
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
    /// The node queues of a cohort lock ([`Lock::set_cohort`]), shared by the clones.
    cohort: Arc<Cohorts>,
    /// Most local handovers in a row ([`Lock::set_local_handovers`]), shared by the clones.
    #[cfg(feature = "tokio")]
    handovers: Arc<std::sync::atomic::AtomicU32>,
}

impl<R: RawLock> Clone for Lock<R> {
    fn clone(&self) -> Self {
        Lock {
            raw: self.raw.clone(),
            cohort: self.cohort.clone(),
            #[cfg(feature = "tokio")]
            handovers: self.handovers.clone(),
        }
    }
}

impl<R: RawLock> Lock<R> {
    /// A handle over a raw lock.
    pub fn from_raw(raw: R) -> Self {
        Lock {
            raw: Arc::new(raw),
            cohort: Arc::default(),
            #[cfg(feature = "tokio")]
            handovers: Arc::new(std::sync::atomic::AtomicU32::new(LOCAL_HANDOVERS)),
        }
    }

    /// The raw protocol, for acquire and release without a guard (lock_api's naming: the
    /// [`RawLock`] under the guard-returning handle).
    pub fn raw(&self) -> &R {
        &self.raw
    }

    /// Blocks until the calling thread holds the lock (see [`RawLock::acquire`]); the guard
    /// releases it when dropped.
    pub fn acquire<'a>(&'a self, ctx: &'a Ctx) -> Result<LockGuard<'a, R>> {
        if self.cohort.limit() > 0 {
            let timeout = ctx.cluster().timeout();
            return self.acquire_queued(ctx, &Deadline::after(timeout), timeout);
        }
        let ticket = self.raw.acquire(ctx)?;
        Ok(self.guard(ctx, ticket))
    }

    /// Takes the lock only if it is free now (see [`RawLock::try_acquire`]).
    pub fn try_acquire<'a>(&'a self, ctx: &'a Ctx) -> Result<Option<LockGuard<'a, R>>> {
        if self.cohort.limit() > 0 {
            return self.try_acquire_queued(ctx, None);
        }
        Ok(self
            .raw
            .try_acquire(ctx)?
            .map(|ticket| self.guard(ctx, ticket)))
    }

    /// Lets the threads of each node form a **cohort** for this lock (for this handle and its
    /// clones, from the next acquire on): they queue for it on their node, and a holder
    /// whose node has a thread waiting hands the lock to it without releasing it on the
    /// network, at most `max_handovers` times in a row; then it releases on the network, and
    /// the waiting thread takes a ticket behind the other nodes' waiters, who are therefore
    /// never passed by more than `max_handovers` critical sections. Only the thread at the
    /// front of its node's queue takes a ticket, so a node puts one thread, not all of them,
    /// into the network queue. 0 (the default) turns cohorts off: every acquire takes a
    /// ticket on the network.
    ///
    /// **Guarantees.** Mutual exclusion, and each lock's guarantee from one holder to the next,
    /// local or not (docs/model.md §5.3-§5.5): a local handover first does what the lock owes
    /// its next holder, because that thread's operations travel on queue pairs of its own. The
    /// weak lock publishes the CPU accesses of the critical section (`mfence` before the next
    /// thread is let in: Fig. 8a); the strong lock also fences every node (`gf`, as its release
    /// does: Fig. 8e); the node lock on n fences n (`gf([n])`: Fig. 8f). A handover costs the
    /// weak lock no network operation, the node lock one round trip to n (where its release
    /// and the next acquire cost an FAA, a read and a CAS), the strong lock its fence.
    /// Tickets are served in order on the network; between nodes the order is by cohort, and
    /// within a node threads enter in the order they queued.
    ///
    /// The threads of one local run share the network ticket ([`LockGuard::ticket`]); a
    /// holder is told of poisoning only by a network handover. A thread that handed the lock
    /// over cannot take a ticket through [`Lock::raw`] while its successors still hold it
    /// ([`Error::HandedOff`]); through this handle it simply queues. An acquire that times
    /// out in its node's queue leaves it, and one at the front when it gives up passes the
    /// front on (releasing on the network a hold parked for it that nobody else will take).
    /// If the node dies, its whole cohort dies with it; the other nodes skip the hold as a
    /// dead node's (the `waiting` slot of the thread that took it on the network names it
    /// until the hold is released, even after that thread's context is dropped).
    pub fn set_cohort(&self, max_handovers: u32) {
        self.cohort.set_limit(max_handovers);
    }

    /// [`Lock::set_cohort`] on a new handle: `WLock::new(..)?.with_cohort(8)`.
    pub fn with_cohort(self, max_handovers: u32) -> Self {
        self.set_cohort(max_handovers);
        self
    }

    /// The bound set by [`Lock::set_cohort`] (0: no cohorts).
    pub fn cohort(&self) -> u32 {
        self.cohort.limit()
    }

    /// Acquire through the calling thread's node queue, within `d`; a timeout is reported as
    /// `timeout`.
    fn acquire_queued<'a>(
        &'a self,
        ctx: &'a Ctx,
        d: &Deadline,
        timeout: Duration,
    ) -> Result<LockGuard<'a, R>> {
        let limit = self.cohort.limit();
        self.raw.prepare(ctx)?;
        let q = self.cohort.queue(ctx.node());
        let n = q.enter();
        let timed_out = |e| match e {
            Error::Timeout { .. } => Error::Timeout { after: timeout },
            e => e,
        };
        if let Err(e) = q.wait_turn(ctx, n, d) {
            if q.withdraw(n) {
                crate::cohort::leave(self.raw(), ctx, &q, n);
            }
            return Err(timed_out(e));
        }
        let taken = match q.take_parked() {
            Some(hold) => self.raw.take_over(ctx, hold).map(|t| (t, true)),
            None => self.raw.acquire_until(ctx, d.end()).map(|t| (t, false)),
        };
        let turn = NodeTurn { q, n, limit };
        match taken {
            Ok((ticket, local)) => {
                let mut g = self.guard(ctx, ticket);
                if local {
                    g.poisoned = false;
                }
                g.turn = Some(turn);
                Ok(g)
            }
            Err(e) => {
                turn.leave(self.raw(), ctx);
                Err(timed_out(e))
            }
        }
    }

    /// Try-acquire through the calling thread's node queue: `None` at once if a thread of the
    /// node holds or waits, else [`RawLock::try_acquire_until`] (`deadline`, or the cluster's
    /// timeout).
    fn try_acquire_queued<'a>(
        &'a self,
        ctx: &'a Ctx,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard<'a, R>>> {
        let limit = self.cohort.limit();
        self.raw.prepare(ctx)?;
        let q = self.cohort.queue(ctx.node());
        let Some(n) = q.try_enter() else {
            return Ok(None);
        };
        let deadline = deadline.unwrap_or_else(|| Deadline::after(ctx.cluster().timeout()).end());
        // Nobody of the node was at the front, so nothing is parked.
        let turn = NodeTurn { q, n, limit };
        match self.raw.try_acquire_until(ctx, deadline) {
            Ok(Some(ticket)) => {
                let mut g = self.guard(ctx, ticket);
                g.turn = Some(turn);
                Ok(Some(g))
            }
            r => {
                turn.leave(self.raw(), ctx);
                r.map(|_| None)
            }
        }
    }

    /// Tries to take the lock for at most `timeout`; fails with [`Error::Timeout`] (see
    /// [`RawLockTimed::try_acquire_for`]: not FIFO).
    pub fn try_acquire_for<'a>(
        &'a self,
        ctx: &'a Ctx,
        timeout: Duration,
    ) -> Result<LockGuard<'a, R>> {
        if self.cohort.limit() > 0 {
            let deadline = Deadline::after(timeout);
            let mut spin = Spin::new();
            loop {
                match self.try_acquire_queued(ctx, Some(deadline.end())) {
                    Ok(Some(g)) => return Ok(g),
                    Ok(None) => {}
                    Err(Error::Timeout { .. }) => return Err(Error::Timeout { after: timeout }),
                    Err(e) => return Err(e),
                }
                if deadline.expired() {
                    return Err(Error::Timeout { after: timeout });
                }
                spin.wait(ctx.cluster())?;
            }
        }
        let ticket = self.raw.try_acquire_for(ctx, timeout)?;
        Ok(self.guard(ctx, ticket))
    }

    /// Blocks until the calling thread holds the lock, for at most `timeout` (see
    /// [`RawLock::acquire_until`]: FIFO; a ticket given up on timeout is abandoned, never left
    /// blocking later ones). `Duration::MAX` is accepted (no practical limit).
    pub fn acquire_timeout<'a>(
        &'a self,
        ctx: &'a Ctx,
        timeout: Duration,
    ) -> Result<LockGuard<'a, R>> {
        let d = Deadline::after(timeout);
        if self.cohort.limit() > 0 {
            return self.acquire_queued(ctx, &d, timeout);
        }
        match self.raw.acquire_until(ctx, d.end()) {
            Ok(ticket) => Ok(self.guard(ctx, ticket)),
            Err(Error::Timeout { .. }) => Err(Error::Timeout { after: timeout }),
            Err(e) => Err(e),
        }
    }

    /// Blocks until the calling thread holds the lock, or until `deadline` (see
    /// [`RawLock::acquire_until`]: FIFO).
    pub fn acquire_until<'a>(
        &'a self,
        ctx: &'a Ctx,
        deadline: Instant,
    ) -> Result<LockGuard<'a, R>> {
        if self.cohort.limit() > 0 {
            let after = deadline.saturating_duration_since(loco_rdmawait::clock::now());
            return self.acquire_queued(ctx, &Deadline::at(deadline), after);
        }
        let ticket = self.raw.acquire_until(ctx, deadline)?;
        Ok(self.guard(ctx, ticket))
    }

    /// The calling thread is done with the lock: its per-thread state goes back now (see
    /// [`RawLock::leave`]).
    pub fn leave(&self, ctx: &Ctx) -> Result<()> {
        self.raw.leave(ctx)
    }

    fn guard<'a>(&'a self, ctx: &'a Ctx, ticket: u64) -> LockGuard<'a, R> {
        let mut g = LockGuard::new(self.raw(), ctx, ticket);
        g.poisoned = self.raw.poisoned(ctx).unwrap_or(false);
        g
    }

    /// Whether the calling thread holds the lock.
    pub fn is_held(&self, ctx: &Ctx) -> Result<bool> {
        Ok(self.raw.held(ctx)?.is_some())
    }
}

#[cfg(feature = "tokio")]
impl<R: RawLock> Lock<R> {
    /// Awaits the lock for a task of `actx` (feature `tokio`; loco-rdmawait's `aio`): the
    /// acquire's waits suspend the task, so the thread's other tasks keep running.
    ///
    /// The tasks of one [`AsyncCtx`](loco_rdmawait::aio::AsyncCtx) are one thread of the model,
    /// and a thread cannot take a lock it holds. So the tasks of one context first queue for the
    /// lock locally (FIFO, a tokio mutex per lock and context), then the one at the front takes
    /// it on the network: the lock excludes tasks of one context from each other as it excludes
    /// threads. The guard releases the network hold, then lets the next local task in.
    ///
    /// The network acquire runs through [`AsyncCtx::run`](loco_rdmawait::aio::AsyncCtx::run):
    /// one at a time with the context's other blocking calls, and finished if the future is
    /// dropped half-way, so a cancelled acquire (e.g. by `tokio::time::timeout`) releases what it
    /// took rather than leaving the lock stuck. It gives up after the cluster's timeout, as
    /// [`Lock::acquire`] does.
    ///
    /// **Local handover (a cohort of one context's tasks).** When a guard is released while
    /// another task of the same context is queued for the lock, the network hold passes to
    /// that task as it is: no network release, no network acquire, no round trip. At most
    /// [`LOCAL_HANDOVERS`] times in a row; the next release is a network one, and the queued
    /// task then takes a ticket behind the other threads' waiters, so they are not starved
    /// ([`Lock::set_local_handovers`] changes the bound).
    /// This keeps every lock's guarantee (docs/model.md §5.3-§5.5): the tasks of one context
    /// are one thread of the model, and two critical sections of one thread with no release in
    /// between are one longer critical section; other threads see the lock released, with
    /// everything it publishes, only at the network release. [`LockGuard::ticket`] shows it:
    /// the tasks of one local run share a ticket. A handover is not made to a task whose
    /// acquire was cancelled: if the last queued task goes, the carried hold is released on
    /// the network at once. But a future that was handed the hold and is then neither polled
    /// nor dropped keeps it, and other threads' acquires wait for it (until their timeout), as
    /// they would for a guard held and forgotten: drive or drop an acquire you start.
    ///
    /// **Deadlock hazard** of the one-at-a-time rule: a task that holds lock A and awaits another
    /// blocking call on the same context (an SC operation, a global fence) waits behind a task
    /// of that context that is acquiring lock B; if B's holder, elsewhere, is waiting for A, the
    /// three wait for each other until the cluster's timeout. Give tasks that nest locks a
    /// context of their own, or take locks in one global order.
    pub async fn acquire_async<'a>(
        &'a self,
        actx: &'a loco_rdmawait::aio::AsyncCtx,
    ) -> Result<LockGuard<'a, R>> {
        let key = Arc::as_ptr(&self.raw) as *const () as usize;
        let ctx = actx.ctx();
        let (mutex, cohort) = local::queue(ctx, key)?;
        // Counted as queued until it holds the local mutex; if this future is dropped before,
        // `Queued` makes sure a hold carried over for it does not stay stuck.
        // (Declared before the wait for the mutex, so dropped after it: a cancelled wait that
        // had been granted the mutex gives it back first, which `Queued::drop` relies on.)
        let queued = local::Queued::new(&cohort, &mutex, self.raw(), ctx);
        let local = mutex.clone().lock_owned().await;
        queued.entered();
        cohort
            .limit
            .set(self.handovers.load(std::sync::atomic::Ordering::Relaxed));
        if let Some(ticket) = cohort.carried.take() {
            // The previous local holder left us its network hold (and its node's turn).
            let turn = cohort.carried_turn.take();
            match self.raw.held(ctx) {
                Ok(Some(t)) if t == ticket => {
                    let mut guard = LockGuard::new(self.raw(), ctx, ticket);
                    guard.local = Some(local);
                    guard.cohort = Some(cohort);
                    guard.turn = turn;
                    return Ok(guard);
                }
                Ok(_) => {
                    // Released behind the guards' back: take it on the network.
                    if let Some(turn) = turn {
                        turn.leave(self.raw(), ctx);
                    }
                }
                Err(e) => {
                    // Nobody may be left to take it: give it back before failing.
                    let _ = self.raw.release(ctx);
                    if let Some(turn) = turn {
                        turn.leave(self.raw(), ctx);
                    }
                    return Err(e);
                }
            }
        }
        cohort.handovers.set(0);
        let mut guard = actx.run(move |_| self.acquire(ctx)).await?;
        guard.local = Some(local);
        guard.cohort = Some(cohort);
        Ok(guard)
    }
}

#[cfg(feature = "tokio")]
impl<R: RawLock> Lock<R> {
    /// Sets the most local handovers in a row of this lock among the tasks of any one context
    /// (see [`Lock::acquire_async`]; default [`LOCAL_HANDOVERS`]), for this handle and its
    /// clones, from the next acquire on. More favours throughput on a busy context, fewer the
    /// other threads' waiting time; 0 turns local handover off (every release is a network
    /// one).
    pub fn set_local_handovers(&self, max: u32) {
        self.handovers
            .store(max, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Default of the most local handovers in a row of one context's hold of a lock
/// ([`Lock::acquire_async`], [`Lock::set_local_handovers`]), before a network release lets
/// other threads' waiters in.
#[cfg(feature = "tokio")]
pub const LOCAL_HANDOVERS: u32 = 8;

/// The local queues of [`Lock::acquire_async`]: per context, a FIFO mutex per lock, and the
/// state of its local handovers.
#[cfg(feature = "tokio")]
mod local {
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;
    use std::rc::Rc;
    use std::sync::Arc;

    use loco_rdmawait::Ctx;

    use crate::cohort::NodeTurn;
    use crate::{RawLock, Result};

    /// Local handovers of one lock on one context (one thread: plain cells).
    #[derive(Debug)]
    pub(super) struct Cohort {
        /// The ticket of a network hold a released guard left for the next local task.
        pub(super) carried: Cell<Option<u64>>,
        /// The place at the front of the node's queue that goes with the carried hold
        /// (thread cohorts on, [`super::Lock::set_cohort`]).
        pub(super) carried_turn: RefCell<Option<NodeTurn>>,
        /// Handovers in a row since the last network acquire.
        pub(super) handovers: Cell<u32>,
        /// Tasks queued for the local mutex.
        pub(super) queued: Cell<usize>,
        /// Most handovers in a row (the lock's [`super::Lock::set_local_handovers`], read at
        /// each acquire).
        pub(super) limit: Cell<u32>,
    }

    impl Default for Cohort {
        fn default() -> Cohort {
            Cohort {
                carried: Cell::new(None),
                carried_turn: RefCell::new(None),
                handovers: Cell::new(0),
                queued: Cell::new(0),
                limit: Cell::new(super::LOCAL_HANDOVERS),
            }
        }
    }

    impl Cohort {
        /// Whether a guard being released now may leave its hold to the next local task.
        pub(super) fn may_hand_over(&self) -> bool {
            self.queued.get() > 0 && self.handovers.get() < self.limit.get()
        }

        /// The hold with `ticket` (and the node's turn, if any) is left to the next local task.
        pub(super) fn carry(&self, ticket: u64, turn: Option<NodeTurn>) {
            self.handovers.set(self.handovers.get() + 1);
            self.carried.set(Some(ticket));
            *self.carried_turn.borrow_mut() = turn;
        }
    }

    type Entry = (Arc<tokio::sync::Mutex<()>>, Rc<Cohort>);

    /// The local mutexes of one context, keyed by the lock's address (stable while any handle
    /// of the lock, or a guard borrowing it, lives).
    #[derive(Default)]
    struct Queues(RefCell<HashMap<usize, Entry>>);

    /// The local mutex and handover state of lock `key` on `ctx`.
    pub(super) fn queue(ctx: &Ctx, key: usize) -> Result<Entry> {
        let qs = ctx.extension::<Queues>(|_| Ok(Queues::default()))?;
        let mut map = qs.0.borrow_mut();
        // Mutexes nobody holds or waits for go: locks come and go in a long-running service.
        // (A carried hold always has a holder or a queued task: see `Queued`.)
        map.retain(|_, (m, c)| {
            Arc::strong_count(m) > 1 || m.try_lock().is_err() || c.carried.get().is_some()
        });
        let (m, c) = map.entry(key).or_default();
        Ok((m.clone(), c.clone()))
    }

    /// A task queued for the local mutex. Dropped before [`Queued::entered`] (its acquire was
    /// cancelled): if it was the last queued task and a hold was carried over for it, nobody
    /// will take that hold, so it is released on the network here.
    pub(super) struct Queued<'a, R: RawLock> {
        cohort: &'a Cohort,
        mutex: &'a tokio::sync::Mutex<()>,
        raw: &'a R,
        ctx: &'a Ctx,
        entered: bool,
    }

    impl<'a, R: RawLock> Queued<'a, R> {
        pub(super) fn new(
            cohort: &'a Cohort,
            mutex: &'a tokio::sync::Mutex<()>,
            raw: &'a R,
            ctx: &'a Ctx,
        ) -> Self {
            cohort.queued.set(cohort.queued.get() + 1);
            Queued {
                cohort,
                mutex,
                raw,
                ctx,
                entered: false,
            }
        }

        /// The task holds the local mutex.
        pub(super) fn entered(mut self) {
            self.entered = true;
        }
    }

    impl<R: RawLock> Drop for Queued<'_, R> {
        fn drop(&mut self) {
            self.cohort.queued.set(self.cohort.queued.get() - 1);
            if self.entered || self.cohort.queued.get() > 0 {
                return;
            }
            // Cancelled, and nobody else queued: a carried hold (if the mutex is free, so no
            // task is about to take it) goes back to the network.
            let Ok(_free) = self.mutex.try_lock() else {
                return;
            };
            if let Some(ticket) = self.cohort.carried.take() {
                self.cohort.handovers.set(0);
                if self.raw.held(self.ctx).ok().flatten() == Some(ticket) {
                    if let Err(e) = self.raw.release(self.ctx) {
                        tracing::error!(target: "loco::locks", error = %e, ticket,
                            "releasing a hold no queued task took failed");
                    }
                }
                if let Some(turn) = self.cohort.carried_turn.take() {
                    turn.leave(self.raw, self.ctx);
                }
            }
        }
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
    poisoned: bool,
    /// The holder's place at the front of its node's queue, with cohorts on
    /// ([`Lock::set_cohort`]): left after the release or handover.
    turn: Option<NodeTurn>,
    /// An awaited acquire's place in its context's local queue: dropped after the release.
    #[cfg(feature = "tokio")]
    local: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// An awaited acquire's local handovers (see [`Lock::acquire_async`]).
    #[cfg(feature = "tokio")]
    cohort: Option<std::rc::Rc<local::Cohort>>,
}

impl<'a, R: RawLock> LockGuard<'a, R> {
    fn new(raw: &'a R, ctx: &'a Ctx, ticket: u64) -> Self {
        LockGuard {
            raw,
            ctx,
            ticket,
            done: false,
            poisoned: false,
            turn: None,
            #[cfg(feature = "tokio")]
            local: None,
            #[cfg(feature = "tokio")]
            cohort: None,
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

    /// Whether the critical section before this one did not finish (poisoning, std-style but
    /// reported once): the previous holder's guard was dropped while its thread panicked, or the
    /// previous holder's node died and its ticket was skipped. The lock protects remote memory,
    /// not a Rust value, so the holder decides what to repair; releasing normally clears it for
    /// the next holder.
    pub fn was_poisoned(guard: &Self) -> bool {
        guard.poisoned
    }

    /// The context of the holding thread.
    pub fn ctx(guard: &Self) -> &'a Ctx {
        guard.ctx
    }

    fn release_now(&mut self) -> Result<()> {
        match self.raw.held(self.ctx) {
            Ok(Some(t)) if t == self.ticket => {}
            Ok(_) => {
                self.leave_turn();
                return Err(Error::NotHeld);
            }
            Err(e) => {
                self.leave_turn();
                return Err(e);
            }
        }
        if std::thread::panicking() {
            tracing::warn!(target: "loco::locks", ticket = self.ticket, node = %self.ctx.node(),
                "a lock guard was dropped during a panic: the next holder is told (poisoned)");
            let r = self.raw.release_poisoned(self.ctx);
            self.leave_turn();
            return r;
        }
        // A task of the same context is queued: it gets the hold (the local mutex, dropped after
        // this, lets it in), after what the lock owes a local successor.
        #[cfg(feature = "tokio")]
        if let Some(c) = self.cohort.clone().filter(|c| c.may_hand_over()) {
            match self.raw.hand_over_locally(self.ctx) {
                Ok(()) => {
                    // The task takes the node's turn with the hold.
                    c.carry(self.ticket, self.turn.take());
                    return Ok(());
                }
                // A timeout would only come again in the release's own fence; a hold that is
                // gone (its lock's node restarted) has nothing to release.
                Err(e @ Error::Timeout { .. }) => {
                    self.leave_turn();
                    return Err(e);
                }
                Err(e) if self.raw.held(self.ctx).ok().flatten() != Some(self.ticket) => {
                    self.leave_turn();
                    return Err(e);
                }
                Err(e) => {
                    // A node died since the acquire: the release fences the live ones only.
                    tracing::debug!(target: "loco::locks", error = %e,
                        "no local handover: releasing on the network");
                }
            }
        }
        match self.turn.take() {
            Some(turn) => turn.release(self.raw, self.ctx),
            None => self.raw.release(self.ctx),
        }
    }

    /// Lets the next thread of the node to the front of its queue (cohorts on).
    fn leave_turn(&mut self) {
        if let Some(turn) = self.turn.take() {
            turn.leave(self.raw, self.ctx);
        }
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
            .field("poisoned", &self.poisoned)
            .finish()
    }
}
