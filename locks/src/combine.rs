//! Combining ([`Lock::combine`](crate::Lock::combine), docs/model.md §5.5b): the threads of one
//! node hand their critical sections to one of them, the **combiner**, which takes the lock once
//! and runs them one after the other on its own context, as flat combining and delegation locks
//! do (Sherman combines a node's writes the same way).
//!
//! Why it is faster: with cohorts a node's threads still hand the lock to each other, and every
//! handover costs what the lock owes its next holder (a round trip on the network: the node
//! lock's `gf([n])`), because the next thread's operations travel on queue pairs of their own
//! and could overtake the last holder's. A combiner's sections all travel on *its* queue pairs,
//! in program order: a later section's get waits for an earlier one's put to the same node
//! (docs/model.md §4.4, rules 3 and 6), so consecutive sections need nothing between them. What the
//! combiner does owe is a [`Ctx::wait_all`] before it tells a batch's threads that their
//! sections are done (so that their puts have read their sources and their gets written their
//! destinations), one round trip per batch instead of one per section.
//!
//! The queue of each node is process memory (a mutex per node and lock); no `Ctx` operation
//! and no critical section runs under it, so a simulated thread is never stopped while holding
//! it. Waiting threads spin (with [`clock::pause`]: a scheduling point under the simulator) for
//! [`SPIN_BUDGET`], then park until the combiner or a deadline wakes them.

use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use loco_rdmawait::clock::{self, Unparker};
use loco_rdmawait::Ctx;
use loco_sv::GlobalFence;

// A waiting thread spins, parks and measures wake-ups as a cohort's waiter does.
use crate::cohort::{untimed_sim, PARKED_MAX, PARKED_STEP, SLOW_WAKE, SPIN_BUDGET};
use crate::lock::RawLock;
use crate::thread::{Deadline, Spin};
use crate::{Error, Result};

/// Most sections of one batch (each batch ends with one [`Ctx::wait_all`]).
pub(crate) const MAX_BATCH: usize = 64;

/// Most batches a combiner runs in one hold of the lock: other nodes' threads wait behind at
/// most this many batches of a node.
pub const COMBINE_BATCHES: u32 = 8;

/// How long a combiner waits for the threads of its last batch to come back with their next
/// sections before it runs the next batch (or releases, if none came), where waiting threads
/// spin (see [`CROWDED_LINGER_MAX`] where they sleep): they come back within a few CPU
/// operations when they are busy, and a batch that leaves them behind costs a round trip more
/// for theirs.
const LINGER: Duration = Duration::from_micros(1);

/// At most this many looks while lingering (in an untimed simulation time does not pass).
const LINGER_ROUNDS: u32 = 64;

/// Where waiting threads sleep ([`crowded`]), the last batch's threads are woken at its end
/// and come back with their next sections a wake-up later: the combiner waits up to twice the
/// node's last measured wake-up for them, at most this long. A network release and the next
/// acquire cost several round trips (each of them tens of microseconds on Soft-RoCE), and the
/// node would otherwise hand the lock on with sections about to arrive.
const CROWDED_LINGER_MAX: Duration = Duration::from_micros(500);

/// Threads inside [`Combining::combine`] in this process, over every lock.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// Whether a node's waiting threads should not spin: where this process has more threads
/// combining than CPUs, or where waking a sleeping thread of the node was last seen to take
/// longer than [`SLOW_WAKE`] (a host short of CPUs; the simulator with a profile whose
/// wake-ups are slow, `rxe`). There a waiting thread that spins takes a CPU the combiner and
/// the NIC need (on Soft-RoCE the NIC is the kernel, on the same CPUs), so waiting threads
/// spin only briefly and combiners do not call them early; a combiner waits for the threads of
/// its last batch a wake-up long instead ([`CROWDED_LINGER_MAX`]).
fn crowded(node: &NodeJobs) -> bool {
    static CPUS: OnceLock<usize> = OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    (!clock::simulated() && INSIDE.load(SeqCst) > cpus) || node.wakes_slow.load(SeqCst)
}

/// Counts the calling thread in [`INSIDE`] while it lives.
struct Inside;

impl Inside {
    fn enter() -> Self {
        INSIDE.fetch_add(1, SeqCst);
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, SeqCst);
    }
}

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;

/// One critical section handed to the node's combiner.
struct Job {
    /// The section, until a combiner takes it; it leaves its result with its caller.
    cs: Mutex<Option<Section>>,
    state: AtomicU8,
    /// Set, with [`DONE`], when the section ran but the combiner then failed (see
    /// [`Error::Combined`]).
    failure: Mutex<Option<String>>,
    /// The calling thread parks (and must be unparked).
    sleeping: AtomicBool,
    /// A combiner is about to take the lock for this section: its thread spins from now on,
    /// so that it is awake when told (a wake-up costs the combiner, inside its hold).
    called: AtomicBool,
    waker: Option<Unparker>,
    /// When the sleeping thread was last unparked (to measure the wake-up).
    unparked_at: Mutex<Option<Instant>>,
}

/// A queued section, as the combiner runs it: true unless it panicked.
type Section = Box<dyn FnOnce(&Ctx) -> bool + Send>;

impl Job {
    fn state(&self) -> u8 {
        self.state.load(SeqCst)
    }

    /// Runs the section on the combiner's context; false if it panicked (the panic goes to its
    /// caller, with the section's result slot).
    fn run(&self, ctx: &Ctx) -> bool {
        let cs = lock(&self.cs).take();
        cs.is_none_or(|cs| cs(ctx))
    }

    /// The section is over: its caller may return (with `failure`, if the combiner failed).
    fn finish(&self, failure: Option<String>) {
        if failure.is_some() {
            *lock(&self.failure) = failure;
        }
        self.state.store(DONE, SeqCst);
        self.wake();
    }

    /// Unparks the calling thread if it sleeps.
    fn wake(&self) {
        if self.sleeping.load(SeqCst) {
            if let Some(w) = &self.waker {
                *lock(&self.unparked_at) = Some(clock::now());
                w.unpark();
            }
        }
    }
}

/// A node's queue of sections and whether a combiner is at work there.
#[derive(Default)]
struct NodeJobs {
    state: Mutex<Queue>,
    /// The last wake-up of a thread of the node took longer than [`SLOW_WAKE`].
    wakes_slow: AtomicBool,
    /// How long the last wake-up of a thread of the node took, in nanoseconds.
    wake_ns: AtomicU64,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Arc<Job>>,
    /// A thread of the node is combining.
    busy: bool,
}

/// The combining queues of one lock (shared by its handles), one per node, made on first use.
pub(crate) struct Combining {
    nodes: OnceLock<Vec<NodeJobs>>,
    /// Most batches per hold ([`Lock::set_combine_batches`](crate::Lock::set_combine_batches)).
    batches: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for Combining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combining")
            .field("batches", &self.batches())
            .finish_non_exhaustive()
    }
}

/// A poisoned mutex here only means a panic elsewhere while it was held; the queue itself is
/// always consistent (no user code runs under it).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Combining {
    pub(crate) fn new() -> Self {
        Combining {
            nodes: OnceLock::new(),
            batches: std::sync::atomic::AtomicU32::new(COMBINE_BATCHES),
        }
    }

    pub(crate) fn batches(&self) -> u32 {
        self.batches.load(SeqCst)
    }

    pub(crate) fn set_batches(&self, n: u32) {
        self.batches.store(n.max(1), SeqCst);
    }

    /// Runs `cs` under `raw` (see [`Lock::combine`](crate::Lock::combine)).
    pub(crate) fn combine<R: RawLock, T: Send + 'static>(
        &self,
        raw: &R,
        ctx: &Ctx,
        cs: impl FnOnce(&Ctx) -> T + Send + 'static,
    ) -> Result<T> {
        let cluster = ctx.cluster();
        cluster.check_open()?;
        cluster.check_alive(ctx.node())?;
        // A thread that holds the lock itself would wait for its own combiner (or deadlock
        // combining): the same misuse as acquiring twice.
        if let Some(ticket) = raw.held(ctx)? {
            return Err(Error::AlreadyHeld { ticket });
        }
        let nodes = self
            .nodes
            .get_or_init(|| (0..cluster.nodes()).map(|_| NodeJobs::default()).collect());
        let Some(node) = nodes.get(ctx.node().index()) else {
            return Err(Error::Rdma(loco_rdmawait::Error::UnknownNode {
                node: ctx.node(),
                nodes: nodes.len(),
            }));
        };
        let _inside = Inside::enter();
        let slot: Arc<Mutex<Option<std::thread::Result<T>>>> = Arc::new(Mutex::new(None));
        let out = slot.clone();
        let job = Arc::new(Job {
            cs: Mutex::new(Some(Box::new(move |ctx: &Ctx| {
                // The payload of a panic goes to the section's caller; the combiner is told
                // (it poisons the lock, as a guard dropped in a panic would).
                let r = catch_unwind(AssertUnwindSafe(|| cs(ctx)));
                let ok = r.is_ok();
                *lock(&out) = Some(r);
                ok
            }))),
            state: AtomicU8::new(QUEUED),
            failure: Mutex::new(None),
            sleeping: AtomicBool::new(false),
            called: AtomicBool::new(false),
            waker: clock::unparker(),
            unparked_at: Mutex::new(None),
        });
        // The section may run on another thread, on that thread's queue pairs: this thread's
        // stores must be visible to it (a store buffered here could otherwise land over what
        // the section writes), and its operations posted before must have landed (the
        // section's get of a word this thread put to would not wait for that put on another
        // queue pair, as it would on this one, docs/model.md §4.4 rule 6; a completed put may
        // still be on its way, Fig. 5; a get of this thread's could land over what the section
        // writes): a global fence towards the live nodes it may have something on its way to,
        // free when there are none.
        ctx.mfence()?;
        fence_in_flight(ctx)?;
        lock(&node.state).jobs.push_back(job.clone());
        let d = Deadline::after(cluster.timeout());
        let mut spun_since = clock::now();
        let mut spin = Spin::new();
        loop {
            if job.state() == DONE {
                return finished(&job, &slot);
            }
            // Nobody combines, and this thread's section is the oldest queued: this thread
            // does (in queue order, so that the role, which costs its thread the sections of
            // the hold it runs for others, goes round).
            let combiner = {
                let mut q = lock(&node.state);
                is_next(&q, &job) && {
                    q.busy = true;
                    true
                }
            };
            if combiner {
                // If the combiner unwinds before it took its own section (a panic in the raw
                // lock's acquire), the section leaves the queue, where nobody would take it and
                // every later section of the node would wait behind it; the next oldest is
                // woken to combine (after `StepDown`, dropped first).
                let unwinding = WithdrawOnUnwind(node, &job);
                let served = {
                    let _step_down = StepDown(node);
                    self.serve(raw, ctx, node, &job, &d)
                };
                std::mem::forget(unwinding);
                if job.state() == DONE {
                    if let Err(e) = served {
                        // Its own section ran; the combiner (this thread) then failed: waiting
                        // for it, releasing or landing. `Combined`, as for any section that ran
                        // (the raw error says the section did not run).
                        lock(&job.failure).get_or_insert_with(|| e.to_string());
                    }
                    return finished(&job, &slot);
                }
                if let Err(e) = served {
                    if withdraw(node, &job) {
                        return Err(e);
                    }
                }
                spun_since = clock::now();
                spin = Spin::new();
                continue;
            }
            let gone = cluster
                .check_open()
                .and_then(|()| cluster.check_alive(ctx.node()))
                .err();
            if gone.is_some() || d.expired() {
                // Not taken by a combiner yet: it never will be. Taken: it is running, and its
                // combiner finishes it (or fails it) within its own deadline.
                if withdraw(node, &job) {
                    return Err(gone.map_or_else(|| d.timeout(), Error::from));
                }
            }
            let spinning = clock::now().saturating_duration_since(spun_since) < SPIN_BUDGET
                || (!crowded(node) && (job.called.load(SeqCst) || job.state() == RUNNING));
            if spinning || (clock::cooperative() && !clock::simulated()) {
                // Not `?`: a shutdown fails the spin at once, and a section being run must be
                // waited for all the same (its combiner's operations now fail promptly); the
                // shutdown of a queued one is seen above.
                if spin.wait(cluster).is_err() {
                    clock::yield_now();
                }
            } else if untimed_sim() {
                // No time to wake up in: look again after a step.
                clock::sleep(PARKED_STEP);
            } else {
                job.sleeping.store(true, SeqCst);
                // Looked at again once `sleeping` is set: a combiner that stepped down (or a
                // section withdrawn from the front) since this thread last looked did not see
                // it asleep and woke nobody, and this thread is now the one to combine.
                if job.state() != DONE && !next_combiner(node, &job) {
                    clock::park_timeout(d.remaining().min(PARKED_MAX));
                }
                job.sleeping.store(false, SeqCst);
                if let Some(at) = lock(&job.unparked_at).take() {
                    let took = clock::now().saturating_duration_since(at);
                    node.wakes_slow.store(took > SLOW_WAKE, SeqCst);
                    node.wake_ns
                        .store(took.as_nanos().min(u64::MAX as u128) as u64, SeqCst);
                }
            }
        }
    }

    /// The combiner's work: takes the lock, runs batches of the node's sections (each ended by
    /// a [`Ctx::wait_all`] before its threads are told), at most [`Combining::batches`] of
    /// them, and releases. A failure fails the current batch's sections
    /// ([`Error::Combined`]) and releases; a failed release or landing is returned (the
    /// combiner's own section, if it ran, then says `Combined` too: see `combine`).
    fn serve<R: RawLock>(
        &self,
        raw: &R,
        ctx: &Ctx,
        node: &NodeJobs,
        own: &Arc<Job>,
        d: &Deadline,
    ) -> Result<()> {
        let crowded = crowded(node);
        if !crowded {
            call(node);
        }
        raw.acquire_until(ctx, d.end())?;
        let mut poisoned = false;
        let mut batches = 0;
        let limit = self.batches();
        let mut failed = None;
        // This thread's own section when it ran in a batch of its own: nobody to tell, so its
        // wait comes with the next batch's, or with the landing after the release (outside
        // the hold, not in the next holder's way).
        let mut alone = Batch(Vec::new());
        // The other threads of the last batch, expected back.
        let mut expected = 0;
        while batches < limit {
            if expected > 0 && !crowded {
                let start = clock::now();
                let mut rounds = 0;
                while queued(node) < expected
                    && rounds < LINGER_ROUNDS
                    && clock::now().saturating_duration_since(start) < LINGER
                {
                    clock::pause();
                    rounds += 1;
                }
            } else if expected > 0 && !untimed_sim() {
                // Backing off as a waiter does (yielding, not spinning on the CPU): the woken
                // threads need a CPU to come back on.
                let linger = Duration::from_nanos(node.wake_ns.load(SeqCst))
                    .saturating_mul(2)
                    .min(CROWDED_LINGER_MAX);
                let mut spin = Spin::new();
                let start = clock::now();
                while queued(node) < expected
                    && clock::now().saturating_duration_since(start) < linger
                    && spin.wait(ctx.cluster()).is_ok()
                {}
            }
            let mut batch = Batch(take(node));
            if batch.0.is_empty() {
                break;
            }
            expected = batch.0.iter().filter(|j| !Arc::ptr_eq(j, own)).count();
            for job in &batch.0 {
                poisoned |= !job.run(ctx);
            }
            if expected == 0 {
                alone.0.append(&mut batch.0);
                batches += 1;
                continue;
            }
            // The sections' operations are done before their threads hear of it (bounded by
            // the cluster's timeout, as a section's own wait would be), and their stores
            // visible to them.
            // (Completed, not landed: a landing fence here would cost each batch the remote
            // write's commit and a read on top of the acks, about a sixth of the throughput
            // at 16 threads over 4 nodes under `connectx5`; see `Lock::combine`.)
            match ctx.wait_all().and_then(|()| ctx.mfence()) {
                Ok(()) => {
                    batch.finish(None);
                    alone.finish(None);
                }
                Err(e) => {
                    batch.finish(Some(e.to_string()));
                    alone.finish(Some(e.to_string()));
                    failed = Some(Error::from(e));
                    poisoned = true;
                    break;
                }
            }
            batches += 1;
        }
        let released = if poisoned {
            raw.release_poisoned(ctx)
        } else {
            raw.release(ctx)
        };
        // Whatever this thread sent is landed before it goes on (its own section's operations
        // among them): its next `combine` then has nothing to fence before queuing.
        match land(ctx) {
            Ok(()) => alone.finish(None),
            Err(e) => {
                alone.finish(Some(e.to_string()));
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => released,
        }
    }
}

/// The sections a combiner has taken: finished by it, or failed if it unwinds first (so that
/// their threads never wait for sections nobody will finish).
struct Batch(Vec<Arc<Job>>);

impl Batch {
    fn finish(&mut self, failure: Option<String>) {
        for job in self.0.drain(..) {
            job.finish(failure.clone());
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            self.finish(Some("the combining thread panicked".into()));
        }
    }
}

/// Takes up to [`MAX_BATCH`] queued sections, marking them running.
fn take(node: &NodeJobs) -> Vec<Arc<Job>> {
    let mut q = lock(&node.state);
    let n = q.jobs.len().min(MAX_BATCH);
    q.jobs
        .drain(..n)
        .inspect(|j| j.state.store(RUNNING, SeqCst))
        .collect()
}

/// Makes everything the calling thread has sent land and complete: a global fence towards the
/// live nodes it may have writes on their way to (so that the sections' writes are visible to
/// their threads' own later operations, as they would be after a plain critical section of
/// theirs: a completed put may not have landed yet, Fig. 5), a wait for every operation (each
/// put has read its source, each get written its destination), and an `mfence` (the CPU
/// stores are visible). About one round trip; nothing when nothing is on its way.
fn land(ctx: &Ctx) -> Result<()> {
    fence_in_flight(ctx)?;
    ctx.wait_all()?;
    ctx.mfence()?;
    Ok(())
}

/// A global fence towards the live nodes the calling thread may have something on its way to
/// ([`Ctx::in_flight`]: not a node restarted since the context was made, which nothing of it
/// reaches any more); nothing to do, and nothing sent, when there are none.
fn fence_in_flight(ctx: &Ctx) -> Result<()> {
    let cluster = ctx.cluster();
    let unfenced: Vec<_> = cluster
        .node_ids()
        .filter(|&n| ctx.in_flight(n) && cluster.check_alive(n).is_ok())
        .collect();
    if !unfenced.is_empty() {
        ctx.gf(unfenced)?;
    }
    Ok(())
}

/// The number of queued sections.
fn queued(node: &NodeJobs) -> usize {
    lock(&node.state).jobs.len()
}

/// Wakes the threads of the queued sections that sleep, so that they spin by the time their
/// sections are done (see [`Job::called`]); the combiner is about to take the lock.
fn call(node: &NodeJobs) {
    let q = lock(&node.state);
    for job in q.jobs.iter().take(MAX_BATCH) {
        job.called.store(true, SeqCst);
        job.wake();
    }
}

/// Takes `job` out of its node's queue if no combiner has taken it yet.
fn withdraw(node: &NodeJobs, job: &Arc<Job>) -> bool {
    let mut q = lock(&node.state);
    match q.jobs.iter().position(|j| Arc::ptr_eq(j, job)) {
        Some(i) => {
            q.jobs.remove(i);
            // The next oldest may now be the one to combine.
            if i == 0 && !q.busy {
                wake_front(&q);
            }
            true
        }
        None => false,
    }
}

/// What a finished section's caller gets: the section's panic first (resumed, whatever its
/// combiner's failure: a panic is not to be lost in an error), then the combiner's failure.
fn finished<T>(job: &Job, slot: &Mutex<Option<std::thread::Result<T>>>) -> Result<T> {
    let r = lock(slot).take();
    let failure = lock(&job.failure).take();
    match (r, failure) {
        (Some(Err(panic)), _) => resume_unwind(panic),
        (_, Some(reason)) => Err(Error::Combined { reason }),
        (Some(Ok(t)), None) => Ok(t),
        (None, None) => Err(Error::Combined {
            reason: "the combiner ended without running the section".into(),
        }),
    }
}

/// Takes a combiner's own section out of its node's queue if the combiner unwinds before it
/// took it (see [`withdraw`]); forgotten when it does not unwind.
struct WithdrawOnUnwind<'a>(&'a NodeJobs, &'a Arc<Job>);

impl Drop for WithdrawOnUnwind<'_> {
    fn drop(&mut self) {
        withdraw(self.0, self.1);
    }
}

/// Ends a thread's turn as its node's combiner, also when it unwinds: the next queued thread is
/// woken to take over.
struct StepDown<'a>(&'a NodeJobs);

impl Drop for StepDown<'_> {
    fn drop(&mut self) {
        let mut q = lock(&self.0.state);
        q.busy = false;
        wake_front(&q);
    }
}

/// Whether `job`'s thread is the one to combine now: nobody combines and its section is the
/// oldest queued.
fn is_next(q: &Queue, job: &Arc<Job>) -> bool {
    !q.busy && q.jobs.front().is_some_and(|f| Arc::ptr_eq(f, job))
}

/// [`is_next`], under the node's queue lock.
fn next_combiner(node: &NodeJobs, job: &Arc<Job>) -> bool {
    is_next(&lock(&node.state), job)
}

/// Wakes the thread of the oldest queued section if it sleeps: it is the one to combine next.
fn wake_front(q: &Queue) {
    if let Some(next) = q.jobs.front() {
        next.wake();
    }
}
