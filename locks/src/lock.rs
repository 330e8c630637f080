//! The raw lock trait, the generic [`Lock`] handle and its RAII guard (lock_api's split).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loco_rdmawait::Ctx;

use crate::thread::{Deadline, Spin};
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
/// own guarantee (docs/model.md §5.3-§5.5). Misuse by the calling thread is checked: acquiring a lock it holds is
/// [`Error::AlreadyHeld`], releasing one it does not hold is [`Error::NotHeld`].
pub trait RawLock: Send + Sync + fmt::Debug {
    /// The protocol's short name, as `loco bench locks` and the litmus tests write it: `wlock`,
    /// `slock` or `nlock`; `lock` for an implementation that does not say.
    fn name(&self) -> &'static str {
        "lock"
    }

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

    /// Releases the lock held by the calling thread ([`Error::NotHeld`] if it holds none, also
    /// when it never used the lock).
    fn release(&self, ctx: &Ctx) -> Result<()>;

    /// The ticket of the calling thread's current hold, if it holds the lock. It posts nothing,
    /// and for a thread that never used the lock it takes nothing either (none of a weak lock's
    /// `max_threads` slots).
    ///
    /// The crate's locks fail with `PeerDead` naming the thread's own node once that node is
    /// reported dead (or, for a context of an incarnation that has died, restarted since), as
    /// every other call of the context does: the other threads skip a dead node's hold, so
    /// it is not reported held (see the crate's Failures).
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

    /// Sets the most local handovers in a row of the lock's **cohorts** (see
    /// [`Lock::set_cohort`]); 0 turns them off. The default implementation (for locks outside
    /// this crate) has no cohorts and ignores it.
    fn set_cohort(&self, max_handovers: u32) {
        let _ = max_handovers;
    }

    /// The bound set by [`RawLock::set_cohort`] (0: no cohorts).
    fn cohort(&self) -> u32 {
        0
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
    /// if that read does not complete). Fails with [`Error::AlreadyHeld`] while the thread holds the lock;
    /// for a thread that has not used the lock (or has left it already) it does nothing.
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
    /// The nodes' queues of [`Lock::combine`], shared by the clones.
    combining: Arc<crate::combine::Combining>,
    /// Most local handovers in a row ([`Lock::set_local_handovers`]), shared by the clones.
    #[cfg(feature = "tokio")]
    handovers: Arc<std::sync::atomic::AtomicU32>,
}

impl<R: RawLock> Clone for Lock<R> {
    fn clone(&self) -> Self {
        Lock {
            raw: self.raw.clone(),
            combining: self.combining.clone(),
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
            combining: Arc::new(crate::combine::Combining::new()),
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
        let ticket = self.raw.acquire(ctx)?;
        Ok(self.guard(ctx, ticket))
    }

    /// Takes the lock only if it is free now (see [`RawLock::try_acquire`]).
    pub fn try_acquire<'a>(&'a self, ctx: &'a Ctx) -> Result<Option<LockGuard<'a, R>>> {
        Ok(self
            .raw
            .try_acquire(ctx)?
            .map(|ticket| self.guard(ctx, ticket)))
    }

    /// Tries to take the lock for at most `timeout`; fails with [`Error::Timeout`] (see
    /// [`RawLockTimed::try_acquire_for`]: not FIFO).
    pub fn try_acquire_for<'a>(
        &'a self,
        ctx: &'a Ctx,
        timeout: Duration,
    ) -> Result<LockGuard<'a, R>> {
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
        let ticket = self.raw.acquire_until(ctx, deadline)?;
        Ok(self.guard(ctx, ticket))
    }

    /// Runs the critical section `cs` under the lock and returns its result, **combining**
    /// with the other threads of the calling thread's node: the sections queued there are run
    /// by one of those threads, the combiner, on its own context (the `&Ctx` that `cs` is
    /// given), in one hold of the lock (see the crate's [Combining](crate#combining)).
    ///
    /// The guarantee is the lock's: every section runs alone, in some order that keeps each
    /// node's sections in the order they were queued, and sees the effects of the sections
    /// before it as the lock kind promises across a release (on one combiner, consecutive
    /// sections are one thread's program: they see each other in full). The caller's own
    /// operations before the call come before the section (the caller fences what it may have
    /// on its way first: nothing to do when it has nothing). When `combine` returns, the
    /// section's operations have **completed**: its puts have read their sources and its gets
    /// written their destinations (the combiner ran [`Ctx::wait_all`]); what the lock owes
    /// the next holder is paid when the combiner releases. Completed is not landed (Fig. 5):
    /// a put of the section may still be on its way when the call returns, and the caller's
    /// own get of that word, on its own queue pair, could read what was there before, where
    /// after a plain critical section of its own it would not. A section whose writes its
    /// caller reads back with operations of its own ends with a global fence towards the
    /// nodes it wrote (`ctx.gf([n])` of `loco_sv::GlobalFence`, on the context it is given),
    /// as a weak lock's sections do; a fence per batch instead would cost every section,
    /// about a sixth of the throughput at 16 threads over 4 nodes under `connectx5`.
    ///
    /// `cs` runs on another thread's context, so it captures no context of the caller's (the
    /// bounds make sure of it); its operations may name any location, and use any work id (the
    /// combiner waits for them all). A panic in `cs` is caught and resumed in the caller (also
    /// when its combiner then failed: the panic, not [`Error::Combined`]), and the lock is
    /// released poisoned, as a guard dropped in a panic would.
    ///
    /// Fails with [`Error::AlreadyHeld`] if the calling thread holds the lock, with
    /// [`Error::Timeout`] if the section was not taken by a combiner within the cluster's
    /// timeout (then it never runs), with the combiner's own error if it is the calling thread
    /// and cannot take the lock (the section did not run), and with [`Error::Combined`] if the
    /// section ran but its combiner then failed: the wait for its batch, or, when the combiner
    /// is the calling thread itself, its release of the lock or its landing of what it sent
    /// (whatever the combiner's error, `Combined` means the section ran, any other error that it
    /// did not). Other threads' sections were answered before the release: a failed release
    /// reaches only the combiner's own caller.
    pub fn combine<T: Send + 'static>(
        &self,
        ctx: &Ctx,
        cs: impl FnOnce(&Ctx) -> T + Send + 'static,
    ) -> Result<T> {
        self.combining.combine(&*self.raw, ctx, cs)
    }

    /// Sets how many batches of its node's sections a combiner runs in one hold of the lock
    /// ([`Lock::combine`]; for every handle of the lock; at least 1, default
    /// [`COMBINE_BATCHES`](crate::COMBINE_BATCHES)). Each batch ends with one round trip (the
    /// combiner's [`Ctx::wait_all`]); other nodes' sections wait behind at most this many.
    pub fn set_combine_batches(&self, batches: u32) {
        self.combining.set_batches(batches);
    }

    /// The bound of [`Lock::set_combine_batches`].
    pub fn combine_batches(&self) -> u32 {
        self.combining.batches()
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

    /// Whether the calling thread holds the lock. Fails with `PeerDead` naming the thread's
    /// own node once that node is reported dead, also while the thread held the lock (its
    /// hold is not its own any more: the other threads skip it), as the context's acquire and
    /// release do (see [`RawLock::held`]).
    pub fn is_held(&self, ctx: &Ctx) -> Result<bool> {
        Ok(self.raw.held(ctx)?.is_some())
    }

    /// Sets the most local handovers in a row of the lock's **cohorts** (for every handle of
    /// the lock, from the next acquire on); 0 turns cohorts off. On by default, with
    /// [`COHORT_HANDOVERS`](crate::COHORT_HANDOVERS).
    ///
    /// The threads of one node queue for the lock on their node, and only the thread at the
    /// front takes a ticket: a node puts one thread, not all of them, into the network queue. A
    /// holder whose node has a thread waiting hands the lock to it without releasing it on the
    /// network, at most `max_handovers` times in a row; then it releases on the network, and
    /// the next thread of its node takes a ticket behind the other nodes' waiters, which are
    /// therefore passed by at most `max_handovers` critical sections (see the crate's
    /// [Cohorts](crate#cohorts) for the guarantees and the costs). With 0, every acquire
    /// takes a ticket on the network and tickets are served strictly in order.
    pub fn set_cohort(&self, max_handovers: u32) {
        self.raw.set_cohort(max_handovers);
    }

    /// [`Lock::set_cohort`] on a new handle: `NLock::new(..)?.with_cohort(0)`.
    pub fn with_cohort(self, max_handovers: u32) -> Self {
        self.set_cohort(max_handovers);
        self
    }

    /// The bound of [`Lock::set_cohort`] (0: no cohorts).
    pub fn cohort(&self) -> u32 {
        self.raw.cohort()
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
    /// [`Lock::acquire`] does, with [`Error::Timeout`]: the wait in the local queue and the
    /// network acquire are each bounded by it (the local one where the runtime has timers). So
    /// a task that awaits a lock its own guard holds, or tasks queued behind a guard that was
    /// forgotten, are refused after the timeout instead of waiting forever.
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
        // The local queue is a wait like any other: bounded by the cluster's timeout (a guard
        // kept forever, or awaited again by its own task, would hold it forever).
        let timeout = ctx.cluster().timeout();
        let Some(local) = local::within(timeout, mutex.clone().lock_owned()).await else {
            return Err(Error::Timeout { after: timeout });
        };
        queued.entered();
        cohort
            .limit
            .set(self.handovers.load(std::sync::atomic::Ordering::Relaxed));
        if let Some(ticket) = cohort.carried.take() {
            // The previous local holder left us its network hold.
            match self.raw.held(ctx) {
                Ok(Some(t)) if t == ticket => {
                    let mut guard = LockGuard::new(self.raw(), ctx, ticket);
                    guard.local = Some(local);
                    guard.cohort = Some(cohort);
                    return Ok(guard);
                }
                Ok(_) => {} // released behind the guards' back: take it on the network
                Err(e) => {
                    // Nobody may be left to take it: give it back before failing.
                    let _ = self.raw.release(ctx);
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
    use std::future::Future;
    use std::rc::Rc;
    use std::sync::Arc;

    use loco_rdmawait::Ctx;

    use crate::{RawLock, Result};

    /// Local handovers of one lock on one context (one thread: plain cells).
    #[derive(Debug)]
    pub(super) struct Cohort {
        /// The ticket of a network hold a released guard left for the next local task.
        pub(super) carried: Cell<Option<u64>>,
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

        /// The hold with `ticket` is left to the next local task.
        pub(super) fn carry(&self, ticket: u64) {
            self.handovers.set(self.handovers.get() + 1);
            self.carried.set(Some(ticket));
        }
    }

    type Entry = (Arc<tokio::sync::Mutex<()>>, Rc<Cohort>);

    /// `f`'s output, or `None` once `timeout` has passed first (where the runtime has timers:
    /// without them, or outside a tokio runtime, `f` is awaited without a bound).
    pub(super) async fn within<F: Future>(timeout: std::time::Duration, f: F) -> Option<F::Output> {
        // (tokio panics, rather than failing, where there is no timer: `try_sleep` asks each
        // runtime once, so its message is not printed at every acquire.)
        let mut timer = loco_rdmawait::aio::try_sleep(timeout);
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                return std::task::Poll::Ready(Some(v));
            }
            match timer.as_mut().map(|t| t.as_mut().poll(cx)) {
                Some(std::task::Poll::Ready(())) => std::task::Poll::Ready(None),
                _ => std::task::Poll::Pending,
            }
        })
        .await
    }

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
                // (A thread whose node died: the release fails, after its bookkeeping.)
                if self.raw.held(self.ctx).map_or(true, |t| t == Some(ticket)) {
                    if let Err(e) = self.raw.release(self.ctx) {
                        tracing::error!(target: "loco::locks", error = %e, ticket,
                            "releasing a hold no queued task took failed");
                    }
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

    fn release_now(&self) -> Result<()> {
        match self.raw.held(self.ctx) {
            Ok(t) if t != Some(self.ticket) => return Err(Error::NotHeld),
            Ok(_) => {}
            // The thread's own node died (the hold is not reported held any more): the raw
            // release fails the same way, writing nothing, after its bookkeeping (the node's
            // queue of the cohort).
            Err(e) => return self.raw.release(self.ctx).and(Err(e)),
        }
        if std::thread::panicking() {
            tracing::warn!(target: "loco::locks", ticket = self.ticket, node = %self.ctx.node(),
                "a lock guard was dropped during a panic: the next holder is told (poisoned)");
            return self.raw.release_poisoned(self.ctx);
        }
        // A task of the same context is queued: it gets the hold (the local mutex, dropped after
        // this, lets it in), after what the lock owes a local successor.
        // Not after a shutdown: the queued task would be let in, its acquire answered `Ok`
        // when every other acquire is refused; the release below fails with `Shutdown` and ends
        // the hold, and the queued task is refused too.
        #[cfg(feature = "tokio")]
        if let Some(c) = self.cohort.as_ref().filter(|c| c.may_hand_over()) {
            let handed = self.ctx.cluster().check_open().map_err(Error::from);
            match handed.and_then(|()| self.raw.hand_over_locally(self.ctx)) {
                Ok(()) => {
                    c.carry(self.ticket);
                    return Ok(());
                }
                // A timeout would only come again in the release's own fence; a hold that is
                // gone (its lock's node restarted) has nothing to release.
                Err(e @ Error::Timeout { .. }) => return Err(e),
                Err(e) if self.raw.held(self.ctx).ok().flatten() != Some(self.ticket) => {
                    return Err(e)
                }
                Err(e) => {
                    // A node died since the acquire: the release fences the live ones only.
                    tracing::debug!(target: "loco::locks", error = %e,
                        "no local handover: releasing on the network");
                }
            }
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
            .field("poisoned", &self.poisoned)
            .finish()
    }
}
