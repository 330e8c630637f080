//! Async operations for tokio services (feature `tokio`): awaiting work ids, and awaiting the
//! blocking calls of the layers above (a lock's acquire, a global fence, an SC operation)
//! without blocking the runtime's thread.
//!
//! # The model
//! An [`AsyncCtx`] is one thread context ([`Ctx`], one thread of docs/model.md §2) shared by the
//! tasks of one OS thread. Everything the tasks post goes out on the context's queue pairs in
//! the order the calls are made (program order is call order), so the guarantees of [`Ctx`]
//! hold as for any thread: the tasks of an `AsyncCtx` are, together, one thread of the model.
//!
//! Like a [`Ctx`], an `AsyncCtx` is neither `Send` nor `Sync`: use it from tokio's
//! current-thread runtime or a [`LocalSet`](https://docs.rs/tokio/latest/tokio/task/struct.LocalSet.html),
//! and, for several cores, one such thread (and context) per core (thread-per-core).
//!
//! # Work ids cannot be mixed up
//! [`AsyncCtx::put`], [`AsyncCtx::get`] and [`AsyncCtx::issue`] tag each operation with a fresh
//! work id of their own (from a range no user id or library id can name) and return an [`Op`]
//! that waits for exactly that id: many tasks can have operations in flight on one context, and
//! none waits for, or consumes the completion of, another's.
//!
//! # Blocking calls of the layers above
//! [`AsyncCtx::run`] runs a blocking call (`|ctx| lock.acquire(ctx)`,
//! `|ctx| ctx.gf([NodeId(1)])`) on a coroutine stack of its own: where it would block, in
//! [`Ctx::wait`] or in a spin loop's pause ([`crate::clock`]), it suspends and the future
//! returns `Pending`, so other tasks run. The protocols are not rewritten for async: the same
//! code the explorer and the tests check runs, one suspension point per wait.
//!
//! Calls through `run` on one context go **one at a time, in the order first polled**: a
//! library keeps per-thread state (a lock's ticket, scratch words) that two interleaved calls of
//! one thread would share. Operations of [`AsyncCtx::put`]/[`get`](AsyncCtx::get)/
//! [`issue`](AsyncCtx::issue) do not queue behind them.
//!
//! # Waking
//! A pending operation is polled again at once a few times (the lowest latency: a completion
//! usually arrives within microseconds), then:
//! - on the **verbs** backend, the task sleeps until the completion queue's completion channel
//!   signals (its file descriptor, registered through `AsyncFd` with the reactor of the runtime
//!   the task runs in: a context awaited in one runtime, then in another, is watched by each in
//!   turn);
//! - on the **soft** NIC's `Threaded` schedule, the same way: the node's engine thread signals
//!   the thread's channel when it has executed one of its requests;
//! - on the other soft schedules (`Chaos` and `Immediate`, whose requests progress only when
//!   polled or at post time), the task yields to the runtime and is polled again once the other
//!   ready tasks have run.
//!
//! Each sleep on the channel is bounded by a [`BACKSTOP`] timer (where the runtime has timers:
//! `enable_time` or `enable_all`), and never outlasts the wait's own deadline, whatever
//! [`AsyncCtx::set_backstop`] says: a lost event costs a delay, never a hang.
//!
//! Every operation still gives up after the cluster's timeout ([`crate::Cluster::timeout`]), as
//! its blocking form does; wrap it in `tokio::time::timeout` for a shorter bound.
//!
//! # Failures
//! | what happens | what the awaiting task sees |
//! |---|---|
//! | the operation's node dies ([`crate::Cluster::kill`]) | [`Error::PeerDead`] naming it, for every task with an operation pending there, also one whose operation another task's wait met first: a blocking `wait` of a plain [`Ctx`] forgets those, but on the context of an `AsyncCtx` the next wait for their work id fails with `PeerDead`, once (an [`Op`], a blocking call through [`AsyncCtx::run`], or a wait through [`AsyncCtx::ctx`]) |
//! | the cluster is shut down | [`Error::Shutdown`] |
//! | the operation never completes (its node stalled) | [`Error::Timeout`] after the cluster's timeout, also with a backstop of `Duration::MAX` |
//! | a panic inside [`AsyncCtx::run`] | the panic, resumed in the awaiting task; the context stays usable |
//!
//! # Cancellation
//! Dropping an [`Op`] loses nothing: the operation stays tracked by the context and is reaped
//! by later waits. Dropping an unfinished [`Run`] **finishes the call on the spot** (blocking the
//! thread, within the call's own timeouts) and drops its result: a cancelled lock acquire then
//! releases the lock it took instead of leaving a ticket nobody will serve.
//!
//! # Simulation
//! On a simulated thread ([`crate::sim`]) `run` calls the closure inline: the simulator
//! schedules the blocking waits itself.

mod notify;
pub use notify::BACKSTOP;
mod task;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::TimeoutKind;
use crate::{clock, Cluster, Ctx, Error, Loc, NodeId, Result, WorkId};

pub(crate) use task::{in_task, suspend, Park};
use task::{Step, Task};

/// Polls of a pending operation answered by waking the task at once, before it waits for the
/// completion channel (verbs): a round trip on a real NIC is a few microseconds, less than a
/// trip through the reactor. [`AsyncCtx::set_spin_polls`] changes it.
pub const SPIN_POLLS: u32 = 64;

/// A thread context for the tasks of one OS thread: every operation returns a future.
///
/// Cheap to clone (the clones share the context). See the [module docs](self) for the model,
/// the waking and cancellation.
///
/// ```
/// # async fn demo() -> loco_rdmawait::Result<()> {
/// use loco_rdmawait::{aio::AsyncCtx, Cluster, NodeId};
///
/// let cluster = Cluster::builder().nodes(2).build()?;
/// let src = cluster.alloc_word(NodeId(0))?;
/// let dst = cluster.alloc_word(NodeId(1))?;
/// let back = cluster.alloc_word(NodeId(0))?;
/// let actx = AsyncCtx::new(cluster.context(NodeId(0))?);
///
/// actx.ctx().store(&src, 7)?;
/// let put = actx.put(&dst, &src)?;  // posted now, in call order
/// let get = actx.get(&back, &dst)?; // same queue pair: reads what the put wrote
/// put.await?;
/// get.await?;
/// assert_eq!(actx.ctx().load(&back)?, 7);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct AsyncCtx {
    shared: Rc<Shared>,
}

struct Shared {
    ctx: Ctx,
    /// The next fresh work id.
    next: Cell<u32>,
    /// The `run` calls: the one at the front runs, the others wait their turn.
    gate: RefCell<VecDeque<(u64, Waker)>>,
    next_run: Cell<u64>,
    /// The completion channel's readiness, where the backend has one and the runtime can
    /// watch it: registered with the reactor of the runtime the tasks run in (its id; `None`
    /// outside one), set up at the first park that needs it there, and again when the context
    /// is awaited in another runtime (a reactor that is gone, or not driven, never signals).
    notify: RefCell<Option<Watcher>>,
    /// Sleeps on the channel that the backstop ended, whichever runtime's watcher they used.
    backstops: Rc<Cell<u64>>,
    /// Polls before a pending future sleeps on the channel.
    spin_polls: Cell<u32>,
    /// Times a future went to sleep on the channel.
    sleeps: Cell<u64>,
    /// The longest sleep on the channel.
    backstop: Cell<Duration>,
}

/// A context's completion-channel watcher in one runtime (`None` outside a runtime): `None` where
/// the backend has no channel or the runtime no I/O driver.
type Watcher = (Option<tokio::runtime::Id>, Option<Rc<notify::Notify>>);

impl fmt::Debug for AsyncCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCtx")
            .field("node", &self.shared.ctx.node())
            .field("queued_runs", &self.shared.gate.borrow().len())
            .field("completion_channel", &self.has_completion_channel())
            .finish()
    }
}

impl AsyncCtx {
    /// Wraps a context for async use. Where the backend has a completion channel (verbs), tasks
    /// that wait longer than a few polls sleep on it, registered with the reactor of the tokio
    /// runtime they run in (which needs its I/O driver: `enable_io` or `enable_all`); else
    /// pending operations are re-polled (see the [module docs](self)).
    pub fn new(ctx: Ctx) -> AsyncCtx {
        ctx.shared_by_tasks();
        AsyncCtx {
            shared: Rc::new(Shared {
                ctx,
                next: Cell::new(0),
                gate: RefCell::new(VecDeque::new()),
                next_run: Cell::new(0),
                notify: RefCell::new(None),
                backstops: Rc::default(),
                spin_polls: Cell::new(SPIN_POLLS),
                sleeps: Cell::new(0),
                backstop: Cell::new(BACKSTOP),
            }),
        }
    }

    /// [`Cluster::context`] wrapped for async use.
    pub fn open(cluster: &Cluster, node: NodeId) -> Result<AsyncCtx> {
        Ok(AsyncCtx::new(cluster.context(node)?))
    }

    /// The context, for its synchronous calls (CPU loads and stores, `rfence`, sizes): they do
    /// not block, so they need no future.
    pub fn ctx(&self) -> &Ctx {
        &self.shared.ctx
    }

    /// The node this context runs on.
    pub fn node(&self) -> NodeId {
        self.shared.ctx.node()
    }

    /// Whether the context's backend has a completion channel for tasks to sleep on (verbs, and
    /// the soft NIC's `Threaded` schedule); without one, pending operations are re-polled.
    pub fn has_completion_channel(&self) -> bool {
        self.shared.ctx.completion_events().is_some()
    }

    /// How many times a pending operation is re-polled at once before its task sleeps on the
    /// completion channel (default [`SPIN_POLLS`]): fewer saves CPU, more saves latency. No
    /// effect without a channel.
    pub fn set_spin_polls(&self, polls: u32) {
        self.shared.spin_polls.set(polls);
    }

    /// The longest a task sleeps on the completion channel before it looks again whatever the
    /// channel says (default [`BACKSTOP`]): a lost event costs at most this much. A sleep never
    /// outlasts its wait's deadline (the cluster's timeout), even with `Duration::MAX`. Needs a
    /// runtime with timers (`enable_time`); without one, sleeps are not bounded.
    pub fn set_backstop(&self, after: Duration) {
        self.shared.backstop.set(after);
    }

    /// How many times a task of this context went to sleep on the completion channel (0 without
    /// one): tells whether operations outlast the spin polls.
    pub fn channel_sleeps(&self) -> u64 {
        self.shared.sleeps.get()
    }

    /// How many of those sleeps the backstop ended (no event within
    /// [`BACKSTOP`]): a slow operation, or an event the channel lost.
    pub fn channel_backstops(&self) -> u64 {
        self.shared.backstops.get()
    }

    /// A fresh work id: only the operation it is given to carries it.
    fn fresh(&self) -> WorkId {
        let n = self.shared.next.get();
        self.shared.next.set(n.wrapping_add(1));
        WorkId::task(n)
    }

    /// `put(dst, src)` ([`Ctx::put`]) tagged with a fresh work id, posted now; the returned
    /// [`Op`] completes when `wait` of that id would return (the NIC has read `src`).
    pub fn put(&self, dst: &Loc, src: &Loc) -> Result<Op> {
        self.issue(|ctx, d| ctx.put(dst, src, d))
    }

    /// `get(dst, src)` ([`Ctx::get`]) tagged with a fresh work id, posted now; the value is in
    /// `dst` once the returned [`Op`] completes.
    pub fn get(&self, dst: &Loc, src: &Loc) -> Result<Op> {
        self.issue(|ctx, d| ctx.get(dst, src, d))
    }

    /// Posts whatever `post` posts (with the work id it is given: `rcas`/`rfaa` of
    /// `loco-rdmawaitrmw`, several puts of a broadcast) and returns the [`Op`] that waits for
    /// exactly those operations.
    ///
    /// ```
    /// # async fn demo(actx: &loco_rdmawait::aio::AsyncCtx, x: loco_rdmawait::Loc, old: loco_rdmawait::Loc) -> loco_rdmawait::Result<()> {
    /// use loco_rdmawaitrmw::Rmw;
    /// actx.issue(|ctx, d| ctx.rfaa(&x, 1, &old, d))?.await?;
    /// # Ok(()) }
    /// ```
    pub fn issue(&self, post: impl FnOnce(&Ctx, WorkId) -> Result<()>) -> Result<Op> {
        let wid = self.fresh();
        post(&self.shared.ctx, wid)?;
        Ok(self.wait(wid))
    }

    /// Waits for the operations of this context tagged `wid` (a user's own id: operations the
    /// task posted through [`AsyncCtx::ctx`]). Tasks sharing an id wait for each other's
    /// operations; prefer [`AsyncCtx::issue`], which cannot mix them up.
    pub fn wait(&self, wid: WorkId) -> Op {
        Op {
            shared: self.shared.clone(),
            wid,
            start: None,
            waiting: Waiting::default(),
        }
    }

    /// Runs the blocking call `f` (a lock's acquire, a global fence, an SC operation) so that
    /// its waits suspend the task instead of blocking the thread; see the
    /// [module docs](self): calls through `run` on one context go one at a time, and dropping
    /// an unfinished one finishes it on the spot.
    ///
    /// A panic in `f` is resumed in the task that awaits the future.
    ///
    /// `f` is lent the context for the call only: a value borrowing it cannot come out
    /// (`actx.run(|ctx| lock.acquire(ctx))` fails to compile with "lifetime may not live long
    /// enough ... returning this value requires that `'1` must outlive `'2`"). For a lock's
    /// guard, use `loco-locks`' `Lock::acquire_async`, which also queues the context's tasks for
    /// the lock.
    pub fn run<'a, T: 'a>(&'a self, f: impl FnOnce(&Ctx) -> T + 'a) -> Run<'a, T> {
        Run {
            shared: &self.shared,
            body: Some(Box::new(f)),
            task: None,
            turn: None,
            waiting: Waiting::default(),
        }
    }
}

/// An operation in flight on an [`AsyncCtx`]: resolves when `wait` of its work id would return
/// ([`Ctx::wait`]'s guarantee), with its error ([`Error::PeerDead`], [`Error::Completion`], ...)
/// or [`Error::Timeout`] after the cluster's timeout.
#[must_use = "the operation is posted; awaiting it tells when it completed"]
pub struct Op {
    shared: Rc<Shared>,
    wid: WorkId,
    start: Option<Instant>,
    waiting: Waiting,
}

impl Op {
    /// The work id the operation carries.
    pub fn work_id(&self) -> WorkId {
        self.wid
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        // An operation nobody awaits any more: forget its failure, if one was kept for it.
        self.shared.ctx.forget_lost(self.wid);
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op").field("wid", &self.wid).finish()
    }
}

impl Future for Op {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        this.shared.woke(&mut this.waiting);
        let start = *this.start.get_or_insert_with(clock::now);
        loop {
            match this.shared.ctx.wait_timeout(this.wid, Duration::ZERO) {
                Ok(()) => return Poll::Ready(Ok(())),
                Err(Error::Timeout { .. }) => {
                    let after = this.shared.ctx.cluster().timeout();
                    if clock::now().saturating_duration_since(start) >= after {
                        return Poll::Ready(Err(Error::Timeout {
                            what: TimeoutKind::Wait(this.wid),
                            after,
                        }));
                    }
                    let park = Park::Completion(start.checked_add(after));
                    if this.shared.park(cx, park, &mut this.waiting) {
                        return Poll::Pending;
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// tokio's `sleep(after)`, if the calling thread runs in a tokio runtime with timers; `None`
/// outside a runtime, or in one built without `enable_time`. For code that bounds a wait of its
/// own where it can (the local queue of `loco-locks`' `Lock::acquire_async`).
///
/// tokio has no way to ask whether a runtime has timers: it panics when a timer is made in one
/// without them. That panic is caught, and each runtime asked once per thread, so its message
/// is printed once rather than at every call.
pub fn try_sleep(after: Duration) -> Option<Pin<Box<tokio::time::Sleep>>> {
    try_timer(|| tokio::time::sleep(after))
}

/// A tokio timer ending at `deadline`, if the task runs on a tokio runtime with timers.
fn timer(deadline: tokio::time::Instant) -> Option<Pin<Box<tokio::time::Sleep>>> {
    try_timer(|| tokio::time::sleep_until(deadline))
}

thread_local! {
    /// The runtime last found without timers on this thread: tokio has no way to ask, it panics
    /// when a timer is made there, so each runtime is tried once (every try printed a panic
    /// message: hundreds for one short sleep in a `run`).
    static NO_TIMERS: Cell<Option<tokio::runtime::Id>> = const { Cell::new(None) };
}

/// `make()`'s timer, if the thread runs in a tokio runtime with timers (a runtime built without
/// `enable_time` panics when one is made: that is caught, once per runtime).
pub(crate) fn try_timer(
    make: impl FnOnce() -> tokio::time::Sleep,
) -> Option<Pin<Box<tokio::time::Sleep>>> {
    let id = tokio::runtime::Handle::try_current().ok()?.id();
    if NO_TIMERS.with(Cell::get) == Some(id) {
        return None;
    }
    let t = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Box::pin(make()))).ok();
    if t.is_none() {
        NO_TIMERS.with(|c| c.set(Some(id)));
    }
    t
}

/// How a pending future waits: its polls so far, its sleep on the completion channel, and the
/// timer of a call's `clock::sleep`.
#[derive(Default)]
struct Waiting {
    polls: u32,
    sleep: Option<notify::Sleep>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Shared {
    /// A pending future is polled again: counts a sleep that its backstop ended.
    fn woke(&self, w: &mut Waiting) {
        if w.sleep.is_some() {
            notify::Notify::woke(&self.backstops, &mut w.sleep);
        }
    }

    /// Arranges for the task to be woken; true if it should return `Pending`, false if it
    /// should look again now (the completion queue was just armed, or the channel signalled).
    fn park(&self, cx: &mut Context<'_>, park: Park, w: &mut Waiting) -> bool {
        if let Park::Until(end) = park {
            // A sleep: a timer wakes the task, nothing polls meanwhile. (Without a tokio
            // runtime with timers, it is re-polled like a yield.)
            w.sleep = None;
            let deadline = tokio::time::Instant::from_std(end);
            if w.timer.is_none() {
                w.timer = timer(deadline);
            }
            if let Some(t) = w.timer.as_mut() {
                if t.deadline() != deadline {
                    t.as_mut().reset(deadline);
                }
                return match t.as_mut().poll(cx) {
                    Poll::Pending => true,
                    Poll::Ready(()) => {
                        w.timer = None;
                        false
                    }
                };
            }
        }
        w.timer = None;
        w.polls = w.polls.saturating_add(1);
        if let Park::Completion(deadline) = park {
            if w.polls > self.spin_polls.get() {
                if let Some(n) = self.notify() {
                    // The backstop, but never past the wait's own deadline: a wait whose
                    // completion never comes must still wake to time out.
                    let backstop = self.backstop.get();
                    let after = deadline.map_or(backstop, |d| {
                        backstop.min(d.saturating_duration_since(Instant::now()))
                    });
                    let pending = n.park(cx, &mut w.sleep, after);
                    if pending {
                        self.sleeps.set(self.sleeps.get() + 1);
                    }
                    return pending;
                }
            }
        }
        w.sleep = None;
        cx.waker().wake_by_ref();
        true
    }

    /// The completion channel's watcher in the runtime the task runs in, set up on first use
    /// there: a context awaited first outside a runtime (or in one without an I/O driver), or
    /// in a runtime since dropped, still sleeps on its channel in the next one, instead of
    /// re-polling (or, registered with a dead reactor, spinning) for good.
    fn notify(&self) -> Option<Rc<notify::Notify>> {
        let rt = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
        let mut n = self.notify.borrow_mut();
        match &*n {
            Some((id, watcher)) if *id == rt => watcher.clone(),
            _ => {
                // The old watcher (if any) goes; sleeps begun on it keep it until they end.
                let watcher = rt.and_then(|_| {
                    notify::Notify::new(self.ctx.completion_events()?, self.backstops.clone())
                        .map(Rc::new)
                });
                *n = Some((rt, watcher.clone()));
                watcher
            }
        }
    }

    /// Takes a turn at the gate (or refreshes the waker of the one taken); true if it is this
    /// run's turn.
    fn turn(&self, id: u64, cx: &Context<'_>) -> bool {
        let mut q = self.gate.borrow_mut();
        match q.iter().position(|(i, _)| *i == id) {
            Some(0) => true,
            Some(i) => {
                q[i].1 = cx.waker().clone();
                false
            }
            None => {
                q.push_back((id, cx.waker().clone()));
                q.len() == 1
            }
        }
    }

    /// Leaves the gate; wakes the next run if this one was at the front.
    fn leave(&self, id: u64) {
        let mut q = self.gate.borrow_mut();
        if let Some(i) = q.iter().position(|(i, _)| *i == id) {
            q.remove(i);
            if i == 0 {
                if let Some((_, w)) = q.front() {
                    w.wake_by_ref();
                }
            }
        }
    }
}

/// The blocking call of a [`Run`], until it starts.
type Body<'a, T> = Box<dyn FnOnce(&Ctx) -> T + 'a>;

/// A blocking call run by [`AsyncCtx::run`]; resolves to the call's value.
#[must_use = "futures do nothing unless awaited; the call has not started"]
pub struct Run<'a, T: 'a> {
    shared: &'a Rc<Shared>,
    body: Option<Body<'a, T>>,
    task: Option<Task<'a, T>>,
    /// This run's place at the gate, once polled.
    turn: Option<u64>,
    waiting: Waiting,
}

impl<T> fmt::Debug for Run<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("started", &self.task.is_some())
            .field("turn", &self.turn)
            .finish()
    }
}

impl<T> Unpin for Run<'_, T> {}

impl<'a, T: 'a> Future for Run<'a, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        if clock::simulated() {
            // The simulator schedules blocking waits itself.
            let f = this.body.take().expect("Run polled after it finished");
            return Poll::Ready(f(&this.shared.ctx));
        }
        let id = *this.turn.get_or_insert_with(|| {
            let id = this.shared.next_run.get();
            this.shared.next_run.set(id + 1);
            id
        });
        if !this.shared.turn(id, cx) {
            return Poll::Pending;
        }
        if this.task.is_none() {
            let f = this.body.take().expect("Run polled after it finished");
            // The coroutine takes ownership of `f` only once its stack exists: on failure the
            // call runs here instead, blocking the thread (slower, never wrong).
            let cell = Rc::new(std::cell::Cell::new(Some(f)));
            let inner = cell.clone();
            let body = move |ctx: &Ctx| (inner.take().expect("taken once"))(ctx);
            match Task::new(&this.shared.ctx, body) {
                Ok(t) => this.task = Some(t),
                Err(e) => {
                    tracing::warn!(target: "loco::rdmawait", error = %e,
                        "no coroutine stack for an async call: it blocks the thread instead");
                    let f = cell.take().expect("not taken: the coroutine never ran");
                    let v = f(&this.shared.ctx);
                    this.shared.leave(id);
                    this.turn = None;
                    return Poll::Ready(v);
                }
            }
        }
        let task = this.task.as_mut().expect("set above");
        this.shared.woke(&mut this.waiting);
        loop {
            match task.resume() {
                Step::Parked(park) => {
                    if this.shared.park(cx, park, &mut this.waiting) {
                        return Poll::Pending;
                    }
                }
                Step::Done(r) => {
                    this.shared.leave(id);
                    this.turn = None;
                    match r {
                        Ok(v) => return Poll::Ready(v),
                        Err(p) => std::panic::resume_unwind(p),
                    }
                }
            }
        }
    }
}

impl<'a, T: 'a> Drop for Run<'a, T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.as_mut() {
            // Finish the call: its waits no longer have a future to suspend to, so each
            // suspension is resumed at once (a blocking wait, within the call's timeouts).
            while !task.done() {
                match task.resume() {
                    Step::Parked(Park::Until(end)) => {
                        std::thread::sleep(end.saturating_duration_since(Instant::now()));
                    }
                    Step::Parked(_) => std::thread::yield_now(),
                    Step::Done(Err(_)) => {
                        tracing::warn!(target: "loco::rdmawait", "a cancelled async call panicked while it was being finished");
                    }
                    Step::Done(Ok(_)) => {}
                }
            }
        }
        if let Some(id) = self.turn {
            self.shared.leave(id);
        }
    }
}
