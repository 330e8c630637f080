//! The deterministic scheduler: one simulated thread runs at a time, and the seeded strategy
//! picks which at every scheduling point.
//!
//! Simulated threads are coroutines (`coro.rs`) on the run's one OS thread, which runs the
//! dispatcher ([`Sched::run_all`]): it resumes the thread holding the baton until that thread
//! hands it on. A scheduling point ([`Handle::point`]) advances virtual time, records the step
//! in the trace, and hands the baton to the thread the strategy picks (maybe the same, then
//! nothing is suspended). Because only the baton holder runs, and every choice comes from the
//! run's seed, a run is a function of its seed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::NodeId;

use super::coro::{self, Coro};
use super::explore::Explorer;
use super::{FailureKind, Strategy};

/// Steps kept in a failure's trace (the last ones).
const TRACE_KEEP: usize = 200;

thread_local! {
    static CURRENT: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// The calling thread's simulation, if it is a simulated thread.
pub(crate) fn current() -> Option<Handle> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes the calling code simulated thread `h` (until another coroutine runs, see
/// [`hand_over`]).
pub(super) fn enter(h: Option<Handle>) {
    CURRENT.with(|c| *c.borrow_mut() = h);
}

/// Suspends the calling simulated thread until the dispatcher resumes it (it has the baton, or
/// the run stopped); it is the current simulated thread again afterwards.
fn hand_over() {
    let me = current();
    if !coro::suspend() {
        // Not in a coroutine (cannot happen for a simulated thread): let others run.
        std::thread::yield_now();
    }
    enter(me);
}

/// Runs `op` as a scheduling point of the calling thread, if it is simulated (a no-op
/// otherwise); `op` describes the step for the trace.
pub(crate) fn point_op(op: impl FnOnce() -> Op) {
    if let Some(h) = current() {
        h.point_with(op());
    }
}

/// Notes the value a step read, for the trace (simulated threads only): on the calling
/// thread's own step (a load or CAS), which need not be the trace's last: other threads may
/// have run between its scheduling point and the read, and a fault may have been injected at
/// it.
pub(crate) fn note_value(v: u64) {
    if let Some(h) = current() {
        let mut st = h.sched.lock();
        let Some(step) = st.threads.get(h.me).map(|t| t.last_step) else {
            return;
        };
        // The trace holds the last steps, one event per step, the newest at the back.
        let len = st.trace.len();
        let back = usize::try_from(st.steps.saturating_sub(step)).unwrap_or(usize::MAX);
        let Some(i) = len.checked_sub(1).and_then(|last| last.checked_sub(back)) else {
            return;
        };
        let e = &mut st.trace[i];
        if e.step == step
            && e.thread == h.me
            && e.value.is_none()
            && matches!(e.op, Op::Load { .. } | Op::Cas { .. })
        {
            e.value = Some(v);
        }
    }
}

/// What a step did, for the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Load {
        word: usize,
    },
    Store {
        word: usize,
        value: u64,
    },
    Cas {
        word: usize,
        expected: u64,
        new: u64,
    },
    Mfence,
    Post {
        target: NodeId,
        what: &'static str,
    },
    Poll {
        target: NodeId,
    },
    Pause,
    /// A yield of the CPU ([`Handle::yield_now`]).
    Yield,
    /// Spin-loop hints taking `nanos` in a timed run ([`Handle::spin_hints`]).
    Spin {
        nanos: u64,
    },
    /// A request's device work done by its post on the posting thread's CPU
    /// ([`super::Profile::device_on_cpu`]), taking `nanos`.
    Device {
        nanos: u64,
    },
    Sleep {
        nanos: u64,
    },
    /// A park for at most `nanos` ([`Handle::park`]).
    Park {
        nanos: u64,
    },
    Spawn {
        thread: usize,
    },
    Join {
        thread: usize,
    },
    Start,
    End,
    Fault(Inject),
}

/// A fault the scheduler injects at a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Inject {
    /// The node crashes.
    Kill(NodeId),
    /// Traffic from and to the node is held back (`true`) or let go again (`false`).
    Stall(NodeId, bool),
}

/// What `fault` injects when it strikes at step `at`: a crash, or a partition's start and its
/// end.
fn injections(fault: &super::Fault, at: u64) -> impl Iterator<Item = (u64, Inject)> {
    let (first, then) = match *fault {
        super::Fault::Crash { node, .. } => ((at, Inject::Kill(node)), None),
        super::Fault::Partition { node, steps, .. } => (
            (at, Inject::Stall(node, true)),
            Some((at.saturating_add(steps.max(1)), Inject::Stall(node, false))),
        ),
    };
    std::iter::once(first).chain(then)
}

impl fmt::Display for Inject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Inject::Kill(n) => write!(f, "{n} crashes"),
            Inject::Stall(n, true) => write!(f, "{n} is cut off"),
            Inject::Stall(n, false) => write!(f, "{n} is reconnected"),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Op::Load { word } => write!(f, "load w{word}"),
            Op::Store { word, value } => write!(f, "store w{word} := {value}"),
            Op::Cas {
                word,
                expected,
                new,
            } => write!(f, "cas w{word} {expected} -> {new}"),
            Op::Mfence => write!(f, "mfence"),
            Op::Post { target, what } => write!(f, "post {what} to {target}"),
            Op::Poll { target } => write!(f, "poll {target}"),
            Op::Pause => write!(f, "spin pause"),
            Op::Yield => write!(f, "yield"),
            Op::Spin { nanos } => write!(f, "spin hints ({nanos} ns)"),
            Op::Device { nanos } => write!(f, "the post's device work ({nanos} ns)"),
            Op::Sleep { nanos } => write!(f, "sleep {nanos} ns"),
            Op::Park { nanos } => write!(f, "park (at most {nanos} ns)"),
            Op::Spawn { thread } => write!(f, "spawn t{thread}"),
            Op::Join { thread } => write!(f, "join t{thread}"),
            Op::Start => write!(f, "start"),
            Op::End => write!(f, "end"),
            Op::Fault(i) => write!(f, "fault: {i}"),
        }
    }
}

/// One step of the trace.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    step: u64,
    thread: usize,
    node: Option<NodeId>,
    op: Op,
    value: Option<u64>,
    at: Duration,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {:>7}  {:>10.3?}  t{}",
            self.step, self.at, self.thread
        )?;
        match self.node {
            Some(n) => write!(f, " ({n})")?,
            None => write!(f, " (main)")?,
        }
        write!(f, "  {}", self.op)?;
        if let Some(v) = self.value {
            write!(f, "  -> {v}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Runnable,
    Joining(usize),
    Done,
}

#[derive(Debug)]
struct Thread {
    node: Option<NodeId>,
    status: Status,
    /// PCT priority (higher runs first). Signed: a priority drop takes the next value below
    /// every other, and a long spin loop (a drop at each pause) takes more than a million of
    /// them, which went below zero as a `u64` (a panic in debug builds, blamed on the spinning
    /// thread; in release the wrapped value made it the highest).
    prio: i64,
    /// Under a profile: the thread's own clock (when its next step happens).
    clock: Duration,
    /// Under a profile: the thread is in a spin loop's pause, moved on to the NIC's next
    /// step (a CPU write by another thread brings it back, see [`Handle::wake_spinners`]).
    spinning: bool,
    /// Whether the thread posted since its last pause (then its spin polls remote memory, and
    /// its pause is not stretched).
    posted: bool,
    /// Under a profile: the thread is in a spin loop on local memory (its last pause was a
    /// local one and it has only loaded since), counted for [`super::Profile::spin_share`].
    local_spin: bool,
    /// Under a profile: the thread is parked ([`Handle::park`]) until its clock, or until
    /// another thread unparks it ([`Sched::unpark`]).
    parked: bool,
    /// An unpark that came while the thread was not parked: its next park returns at once.
    token: bool,
    /// Under a profile with [`super::Profile::cpus`]: the thread holds one of the host's CPUs.
    cpu: bool,
    /// When the thread's time slice on its CPU ends (others waiting for a CPU then get it).
    slice_end: Duration,
    /// The thread waits in [`State::cpu_queue`] for a CPU (it cannot be picked meanwhile).
    queued: bool,
    /// Since when the thread has been polling without finding its completion (its steps
    /// since then are all polls), for [`super::Profile::poll_spin`].
    polling_since: Option<Duration>,
    /// The step of the thread's last scheduling point (faults injected at it aside), where
    /// [`note_value`] puts the value the step read.
    last_step: u64,
}

/// The scheduler's state.
#[derive(Debug)]
struct State {
    rng: ChaCha8Rng,
    strategy: Strategy,
    /// PCT: the steps at which the running thread's priority drops, ascending.
    changes: Vec<u64>,
    /// PCT: the next low priority to hand out (below every initial one).
    low: i64,
    threads: Vec<Thread>,
    current: usize,
    steps: u64,
    max_steps: u64,
    now: Duration,
    step_time: Duration,
    trace: VecDeque<Event>,
    /// A hash of every step (thread, op), for telling schedules apart.
    hash: u64,
    failure: Option<(FailureKind, String)>,
    /// When the run was stopped (time goes on in real time from then: teardown code must
    /// not spin on a frozen clock).
    aborted: Option<Instant>,
    /// Faults still to inject, by step (ascending).
    plan: VecDeque<(u64, Inject)>,
    /// Under exhaustive search: the [`super::At::Random`] faults whose step is not decided
    /// yet, each with the last step of its window, in the plan's order
    /// ([`Sched::decide_faults`]).
    undecided: Vec<(u64, super::Fault)>,
    /// A timed run's profile: each thread has its own clock, advanced by its operations'
    /// costs, and the thread with the earliest clock runs next.
    profile: Option<super::Profile>,
    /// Under exhaustive search: where every choice comes from.
    explore: Option<Arc<Explorer>>,
    /// [`Sched::pick_among`]'s buffer of runnable threads.
    runnable: Vec<usize>,
    /// Under a profile: how many threads spin on local memory now (their `local_spin`) or wait
    /// for a CPU, for the NIC's device model ([`super::Profile::spin_share`]).
    spinners: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// Under a profile with [`super::Profile::cpus`]: the threads waiting for a CPU, first
    /// come first served.
    cpu_queue: VecDeque<usize>,
    /// How many threads hold a CPU.
    cpus_held: usize,
}

impl State {
    /// The host's CPUs the simulated threads share (0: as many as there are threads).
    fn cpus(&self) -> usize {
        self.profile.as_ref().map_or(0, |p| p.cpus)
    }

    /// Thread `i` lets go of its CPU at `at` (it blocks, yields or is preempted); the CPU goes
    /// to the first thread waiting for one.
    fn release_cpu(&mut self, i: usize, at: Duration) {
        if !self.threads[i].cpu {
            return;
        }
        self.threads[i].cpu = false;
        self.cpus_held -= 1;
        self.grant_cpus(at);
    }

    /// Thread `i` blocks (parks, sleeps, joins, ends): it lets go of its CPU at its clock.
    fn release_own_cpu(&mut self, i: usize) {
        let clock = self.threads[i].clock;
        self.release_cpu(i, clock);
    }

    /// Thread `i` takes a free CPU, its slice starting at its clock.
    fn hold_cpu(&mut self, i: usize) {
        let slice = self.profile.as_ref().map_or(Duration::ZERO, |p| p.slice);
        let th = &mut self.threads[i];
        th.cpu = true;
        th.slice_end = th.clock.saturating_add(slice);
        self.cpus_held += 1;
    }

    /// Hands free CPUs, from `at` on, to the threads waiting for one, in turn. The thread that
    /// gets one pays the OS's context switch ([`super::Profile::switch`]) before it goes on.
    fn grant_cpus(&mut self, at: Duration) {
        let Some(switch) = self.profile.as_ref().map(|p| p.switch) else {
            return;
        };
        let at = at.max(self.now);
        while self.cpus_held < self.cpus() {
            let Some(t) = self.cpu_queue.pop_front() else {
                return;
            };
            let th = &mut self.threads[t];
            th.queued = false;
            th.clock = th.clock.max(at).saturating_add(switch);
            self.hold_cpu(t);
            self.count_busy(false);
        }
    }

    /// Thread `i` goes to the back of the queue for a CPU (it let go of its own, or has none).
    fn queue_for_cpu(&mut self, i: usize, at: Duration) {
        let th = &mut self.threads[i];
        th.queued = true;
        th.spinning = false;
        self.cpu_queue.push_back(i);
        self.count_busy(true);
        self.release_cpu(i, at);
    }

    /// Whether thread `i` may take a step now: it holds a CPU, or takes a free one, or (every
    /// CPU held) queues for one, preempting a holder whose slice has run out.
    fn on_cpu(&mut self, i: usize) -> bool {
        let cpus = self.cpus();
        if cpus == 0 || self.threads[i].cpu {
            return true;
        }
        if self.cpus_held < cpus {
            self.hold_cpu(i);
            return true;
        }
        let clock = self.threads[i].clock;
        self.queue_for_cpu(i, clock);
        // The OS preempts a thread whose slice is over once another is ready to run.
        let over = (0..self.threads.len())
            .filter(|&t| self.threads[t].cpu && self.threads[t].slice_end <= clock)
            .min_by_key(|&t| self.threads[t].slice_end);
        if let Some(h) = over {
            let end = self.threads[h].slice_end;
            self.queue_for_cpu(h, end.max(clock));
        }
        false
    }

    /// Sets whether thread `i` is in a spin loop on local memory, keeping the count of them.
    fn set_local_spin(&mut self, i: usize, on: bool) {
        let th = &mut self.threads[i];
        if th.local_spin == on {
            return;
        }
        th.local_spin = on;
        self.count_busy(on);
    }

    /// One more (`true`) or one fewer thread spinning on local memory or waiting for a CPU:
    /// what takes device time from a software NIC ([`super::Profile::spin_share`]).
    fn count_busy(&self, more: bool) {
        if let Some(n) = &self.spinners {
            if more {
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            } else {
                n.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// What injects a fault into the simulated cluster.
pub(super) type Injector = Box<dyn Fn(Inject) + Send + Sync>;

/// What tells a timed run's scheduler when the NIC next takes a step that writes memory of a
/// node (any node with `None`; `None` back: nothing pending).
pub(super) type NextStep = Box<dyn Fn(Option<NodeId>) -> Option<Duration> + Send + Sync>;

/// In a timed run, a spinning thread looks again at least this often, even when the NIC has
/// nothing pending (deadlines in spin loops stay accurate to this).
const SPIN_LOOK: Duration = Duration::from_micros(1);

/// What lets the NIC take every enabled step (exhaustive search, at a spin loop's pause).
pub(super) type Drain = Box<dyn Fn() + Send + Sync>;

/// A simulation's scheduler.
pub(crate) struct Sched {
    state: Mutex<State>,
    cv: Condvar,
    base: Instant,
    injector: Mutex<Option<Injector>>,
    nic: Mutex<Option<NextStep>>,
    drain: Mutex<Option<Drain>>,
    /// Threads spawned whose coroutines the dispatcher has not made yet.
    pending: Mutex<Vec<(usize, Body)>>,
}

/// What a simulated thread runs (it catches its own panics).
pub(super) type Body = Box<dyn FnOnce() + Send>;

impl fmt::Debug for Sched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sched")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A simulated thread's handle on its scheduler.
#[derive(Clone, Debug)]
pub(crate) struct Handle {
    pub(crate) sched: Arc<Sched>,
    pub(crate) me: usize,
}

/// The payload a simulated thread unwinds with when its run is stopped (a failure elsewhere).
pub(super) struct Stopped;

/// The CPU cost of a step in a timed run.
fn cost(p: &super::Profile, op: Op) -> Duration {
    match op {
        Op::Load { .. } | Op::Store { .. } => p.cpu_op,
        Op::Cas { .. } | Op::Mfence => p.cpu_rmw,
        Op::Post { .. } => p.post,
        Op::Poll { .. } => p.poll,
        Op::Pause | Op::Yield => p.pause,
        Op::Spin { nanos } | Op::Device { nanos } => Duration::from_nanos(nanos),
        Op::Sleep { .. }
        | Op::Park { .. }
        | Op::Spawn { .. }
        | Op::Join { .. }
        | Op::Start
        | Op::End
        | Op::Fault(_) => Duration::ZERO,
    }
}

fn mix(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
}

impl Sched {
    pub(super) fn new(
        seed: u64,
        strategy: Strategy,
        max_steps: u64,
        step_time: Duration,
        expected_steps: u64,
        profile: Option<super::Profile>,
        explore: Option<Arc<Explorer>>,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let changes = match strategy {
            Strategy::Pct { depth } => {
                let depth = depth.clamp(1, super::MAX_PCT_DEPTH);
                let mut c: Vec<u64> = (1..depth)
                    .map(|_| rng.random_range(1..expected_steps.max(2)))
                    .collect();
                c.sort_unstable();
                c
            }
            Strategy::Random | Strategy::Exhaustive { .. } => Vec::new(),
        };
        Sched {
            state: Mutex::new(State {
                rng,
                strategy,
                changes,
                low: 1 << 20,
                threads: Vec::new(),
                current: 0,
                steps: 0,
                max_steps,
                now: Duration::ZERO,
                step_time,
                trace: VecDeque::with_capacity(TRACE_KEEP),
                hash: 0,
                failure: None,
                aborted: None,
                plan: VecDeque::new(),
                undecided: Vec::new(),
                profile,
                explore,
                runnable: Vec::new(),
                spinners: None,
                cpu_queue: VecDeque::new(),
                cpus_held: 0,
            }),
            cv: Condvar::new(),
            base: Instant::now(),
            injector: Mutex::new(None),
            nic: Mutex::new(None),
            drain: Mutex::new(None),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// The faults to inject (resolved to steps with the run's RNG), and who injects them.
    /// Under exhaustive search a random fault's step is not drawn: it is decided as the run
    /// goes ([`Sched::decide_faults`]).
    pub(super) fn plan(&self, faults: &[super::Fault], injector: Injector) {
        let mut st = self.lock();
        let mut plan = Vec::new();
        let mut undecided = Vec::new();
        for f in faults {
            let (super::Fault::Crash { at, .. } | super::Fault::Partition { at, .. }) = *f;
            let step = match at {
                super::At::Step(s) => s.max(1),
                super::At::Random { within } if st.explore.is_some() => {
                    undecided.push((within.max(1), *f));
                    continue;
                }
                super::At::Random { within } => st.rng.random_range(1..=within.max(1)),
            };
            plan.extend(injections(f, step));
        }
        plan.sort_by_key(|p| p.0);
        st.plan = plan.into();
        st.undecided = undecided;
        *self.injector.lock().unwrap_or_else(|p| p.into_inner()) = Some(injector);
    }

    /// Under exhaustive search, at a scheduling point: which of the random faults still to
    /// come strike at it. One whose window ends at this step or has ended strikes now; any
    /// other is a branch of the search, "now" or "not yet" (the default), at no delay (not a
    /// scheduling decision). So the search tries each random fault at each scheduling point
    /// the run reaches within the window, and once not at all when the run ends first, rather
    /// than every step of the window whether the run reaches it or not. Faults that strike
    /// join the plan, due now, in the plan's order.
    fn decide_faults(st: &mut State) {
        let State {
            undecided,
            explore,
            plan,
            steps,
            ..
        } = st;
        let Some(e) = explore else { return };
        let now = *steps;
        let mut i = 0;
        while i < undecided.len() {
            let (within, f) = undecided[i];
            if now >= within || e.choose(2, true) == 1 {
                undecided.remove(i);
                for (at, inject) in injections(&f, now) {
                    let pos = plan.partition_point(|p| p.0 <= at);
                    plan.insert(pos, (at, inject));
                }
            } else {
                i += 1;
            }
        }
    }

    /// Injects the faults due by now (the caller holds the baton, not the state's lock).
    fn inject_due(&self, me: usize) {
        loop {
            let due = {
                let mut st = self.lock();
                match st.plan.front() {
                    Some(&(at, i)) if at <= st.steps => {
                        st.plan.pop_front();
                        Self::record(&mut st, me, Op::Fault(i));
                        Some(i)
                    }
                    _ => None,
                }
            };
            let Some(i) = due else { return };
            if let Some(inject) = &*self.injector.lock().unwrap_or_else(|p| p.into_inner()) {
                inject(i);
            }
        }
    }

    /// Where a timed run learns when the NIC next takes a step.
    pub(super) fn set_nic(&self, next: NextStep) {
        *self.nic.lock().unwrap_or_else(|p| p.into_inner()) = Some(next);
    }

    /// Where a timed run counts the threads spinning on local memory (the NIC reads it).
    pub(super) fn set_spinners(&self, n: Arc<std::sync::atomic::AtomicUsize>) {
        self.lock().spinners = Some(n);
    }

    /// What an exhaustive search calls at a spin loop's pause to let the NIC catch up.
    pub(super) fn set_drain(&self, drain: Drain) {
        *self.drain.lock().unwrap_or_else(|p| p.into_inner()) = Some(drain);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new runnable thread on `node` (`None`: the run's main closure).
    pub(super) fn add(&self, node: Option<NodeId>) -> usize {
        let mut st = self.lock();
        // Drawn as before (a u64), so that seeds keep their schedules; below 2^40, it fits.
        let prio: u64 = st.rng.random_range((1 << 21)..(1 << 40));
        let prio = i64::try_from(prio).unwrap_or(i64::MAX);
        let clock = st.now;
        st.threads.push(Thread {
            node,
            status: Status::Runnable,
            prio,
            clock,
            spinning: false,
            local_spin: false,
            posted: false,
            parked: false,
            token: false,
            cpu: false,
            slice_end: Duration::ZERO,
            queued: false,
            polling_since: None,
            last_step: 0,
        });
        st.threads.len() - 1
    }

    /// Thread `waker` (running; `None` from outside the run) unparks thread `target`. In a
    /// timed run a parked target runs again [`Profile::wake`](super::Profile::wake) after the
    /// waker's present time (or at the end of its park, if sooner), and the waker's clock
    /// moves on by [`Profile::unpark`](super::Profile::unpark); a target not parked keeps the
    /// wake-up for its next park, at no cost. In an untimed run it does nothing (a park there
    /// is a sleep).
    pub(crate) fn unpark(&self, waker: Option<usize>, target: usize) {
        let mut st = self.lock();
        let Some((wake, unpark)) = st.profile.as_ref().map(|p| (p.wake, p.unpark)) else {
            return;
        };
        if st.aborted.is_some()
            || st
                .threads
                .get(target)
                .is_none_or(|t| t.status == Status::Done)
        {
            return;
        }
        // A waker that is no thread of this run is taken as one from outside it.
        let waker = waker.filter(|&w| w < st.threads.len());
        if !st.threads[target].parked || waker == Some(target) {
            st.threads[target].token = true;
            return;
        }
        let now = waker.map_or(st.now, |w| st.threads[w].clock.max(st.now));
        let at = now.saturating_add(wake);
        let th = &mut st.threads[target];
        th.parked = false;
        th.clock = th.clock.min(at).max(now);
        if let Some(w) = waker {
            let th = &mut st.threads[w];
            th.clock = th.clock.saturating_add(unpark);
        }
    }

    /// Stops the run with a failure (the first one counts).
    pub(super) fn fail(&self, kind: FailureKind, message: String) {
        let mut st = self.lock();
        Self::fail_locked(&mut st, kind, message);
        self.wake_all(&st);
    }

    /// Wakes the driver waiting for the run's end (the dispatcher resumes threads itself).
    fn wake_all(&self, _st: &State) {
        self.cv.notify_all();
    }

    /// Hands thread `t`'s body to the dispatcher, which starts it as a coroutine.
    pub(super) fn start_thread(&self, t: usize, body: Body) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((t, body));
    }

    /// Starts the dispatcher ([`Sched::run_all`]) on an OS thread of the simulations' pool (an
    /// idle one if there is one: a run then costs no thread creation).
    pub(super) fn start_run(self: &Arc<Self>) -> std::io::Result<()> {
        /// Idle workers kept at most; more end when their run does.
        const IDLE_KEPT: usize = 16;
        static IDLE: Mutex<Vec<mpsc::Sender<Arc<Sched>>>> = Mutex::new(Vec::new());
        let idle = || IDLE.lock().unwrap_or_else(|p| p.into_inner());
        let mut job = self.clone();
        loop {
            let Some(tx) = idle().pop() else { break };
            match tx.send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(j)) => job = j, // that worker is gone
            }
        }
        let (tx, rx) = mpsc::channel::<Arc<Sched>>();
        let back = tx.clone();
        tx.send(job)
            .map_err(|_| std::io::Error::other("a new worker's channel closed"))?;
        std::thread::Builder::new()
            .name("loco-sim".into())
            .spawn(move || {
                while let Ok(sched) = rx.recv() {
                    sched.run_all();
                    drop(sched);
                    let mut idle = idle();
                    if idle.len() >= IDLE_KEPT {
                        return;
                    }
                    idle.push(back.clone());
                }
            })
            .map(drop)
    }

    /// The dispatcher, on the run's OS thread: resumes the thread holding the baton until
    /// every thread is done; once the run has stopped, resumes each thread left so that it
    /// unwinds. Returns when every thread is done (a thread that blocks outside the simulator
    /// blocks this too: the driver's watchdog sees it, see [`Sched::wait_all_done`]).
    pub(super) fn run_all(self: &Arc<Self>) {
        let mut coros: Vec<Option<Coro>> = Vec::new();
        loop {
            let spawned: Vec<(usize, Body)> =
                std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
            for (t, body) in spawned {
                if coros.len() <= t {
                    coros.resize_with(t + 1, || None);
                }
                match Coro::new(body) {
                    Ok(c) => coros[t] = Some(c),
                    Err(e) => {
                        self.fail(
                            FailureKind::Setup,
                            format!("cannot map a stack for t{t}: {e}"),
                        );
                        Handle {
                            sched: self.clone(),
                            me: t,
                        }
                        .finish();
                    }
                }
            }
            let next = {
                let st = self.lock();
                let left = |t: &usize| st.threads[*t].status != Status::Done;
                if st.aborted.is_none() && left(&st.current) {
                    Some(st.current)
                } else {
                    (0..st.threads.len())
                        .find(|t| left(t) && coros.get(*t).is_some_and(Option::is_some))
                }
            };
            let Some(t) = next else {
                break;
            };
            match coros.get_mut(t).and_then(Option::as_mut) {
                Some(c) => {
                    if c.resume() {
                        coros[t] = None;
                    }
                }
                None => {
                    // The baton holder has no coroutine: it was never started.
                    self.fail(
                        FailureKind::Setup,
                        format!("simulated thread t{t} holds the baton but was never started"),
                    );
                    Handle {
                        sched: self.clone(),
                        me: t,
                    }
                    .finish();
                }
            }
        }
        enter(None);
    }

    fn fail_locked(st: &mut State, kind: FailureKind, message: String) {
        // Threads unwind concurrently from here: their choices are not part of the schedule.
        if let Some(e) = &st.explore {
            e.close();
        }
        if st.failure.is_none() {
            st.failure = Some((kind, message));
        }
        if st.aborted.is_none() {
            st.aborted = Some(Instant::now());
        }
    }

    /// Waits until thread `me` holds the baton; unwinds with [`Stopped`] if the run stops
    /// first (unless the thread is already unwinding).
    fn wait_turn<'a>(&'a self, mut st: MutexGuard<'a, State>, me: usize) -> MutexGuard<'a, State> {
        loop {
            if st.aborted.is_some() {
                drop(st);
                if std::thread::panicking() {
                    return self.lock();
                }
                std::panic::resume_unwind(Box::new(Stopped));
            }
            if st.current == me {
                return st;
            }
            drop(st);
            hand_over();
            st = self.lock();
        }
    }

    /// Picks the next thread to run among the runnable ones; `yielding`: the current thread
    /// asked to let others go first (a spin loop's pause).
    fn pick(st: &mut State, yielding: bool) -> Option<usize> {
        loop {
            let next = Self::pick_among(st, yielding)?;
            if st.profile.is_some() {
                st.now = st.now.max(st.threads[next].clock);
                if !st.on_cpu(next) {
                    continue;
                }
            }
            return Some(next);
        }
    }

    /// [`Sched::pick`]'s choice; in a timed run only threads whose clock is the earliest are
    /// candidates (the strategy breaks ties).
    fn pick_among(st: &mut State, yielding: bool) -> Option<usize> {
        // The buffer is kept from point to point (a scheduling point allocates nothing).
        let mut runnable = std::mem::take(&mut st.runnable);
        runnable.clear();
        // In a timed run, only the threads whose clock is the earliest, found in the same pass.
        let timed = st.profile.is_some();
        let mut first = Duration::MAX;
        for (t, th) in st.threads.iter().enumerate() {
            if th.status != Status::Runnable || th.queued {
                continue;
            }
            if timed {
                if th.clock > first {
                    continue;
                }
                if th.clock < first {
                    first = th.clock;
                    runnable.clear();
                }
            }
            runnable.push(t);
        }
        let next = Self::pick_in(st, yielding, &mut runnable);
        st.runnable = runnable;
        next
    }

    /// [`Sched::pick_among`]'s choice among `runnable` (in a timed run, the threads whose
    /// clock is the earliest).
    fn pick_in(st: &mut State, yielding: bool, runnable: &mut [usize]) -> Option<usize> {
        if runnable.is_empty() {
            return None;
        }
        match st.strategy {
            Strategy::Random => Some(runnable[st.rng.random_range(0..runnable.len())]),
            Strategy::Exhaustive { .. } => {
                // The default (choice 0): the running thread goes on, or, when it pauses or
                // cannot, the next runnable thread after it in turn; every other is a delay.
                let cur = st.current;
                let n = st.threads.len();
                let mut order: Vec<usize> = Vec::with_capacity(runnable.len());
                let goes_on = !yielding && runnable.contains(&cur);
                if goes_on {
                    order.push(cur);
                }
                order.extend(
                    (1..=n)
                        .map(|i| (cur + i) % n)
                        .filter(|t| runnable.contains(t) && !(goes_on && *t == cur)),
                );
                let k = st
                    .explore
                    .as_ref()
                    .map_or(0, |e| e.choose(order.len(), false));
                Some(order[k])
            }
            Strategy::Pct { .. } => {
                let cur = st.current;
                let change = st.changes.first().is_some_and(|&c| st.steps >= c);
                if change {
                    st.changes.remove(0);
                }
                if (change || yielding) && cur < st.threads.len() {
                    st.low = st.low.saturating_sub(1);
                    st.threads[cur].prio = st.low;
                }
                runnable.iter().copied().max_by_key(|&t| st.threads[t].prio)
            }
        }
    }

    /// Hands the baton on (the caller holds it and is `me`), then waits for it to come back.
    fn switch<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        me: usize,
        yielding: bool,
    ) -> MutexGuard<'a, State> {
        match Self::pick(&mut st, yielding) {
            Some(next) => st.current = next,
            None => {
                let m = format!("deadlock: every thread is blocked ({})", Self::joins(&st));
                Self::fail_locked(&mut st, FailureKind::Deadlock, m);
                self.wake_all(&st);
            }
        }
        self.wait_turn(st, me)
    }

    /// For a budget failure's message: why the run may have spun for ever where the code
    /// under test does not (empty if not). Under PCT and exhaustive search the running thread
    /// goes on until it pauses or blocks (or, under PCT, a priority change), so a wait loop
    /// without a pause never lets the thread it waits for run, where the random strategy
    /// would; the sign is a trace whose last steps are all `me`'s, none a pause, while another
    /// thread could have run.
    fn unpaused_spin(st: &State, me: usize) -> String {
        if matches!(st.strategy, Strategy::Random) || st.trace.len() < TRACE_KEEP {
            return String::new();
        }
        let unpaused = st.trace.iter().all(|e| {
            e.thread == me
                && !matches!(
                    e.op,
                    Op::Pause | Op::Yield | Op::Spin { .. } | Op::Sleep { .. } | Op::Park { .. }
                )
        });
        let other = st
            .threads
            .iter()
            .enumerate()
            .find(|&(t, th)| t != me && th.status == Status::Runnable);
        match other {
            Some((t, _)) if unpaused => format!(
                "; t{me} took each of the last {TRACE_KEEP} steps, none a spin pause, while t{t} \
                 could run: under Strategy::Pct and Strategy::Exhaustive the running thread goes \
                 on until it pauses or blocks, so a wait loop must call loco::clock::pause() (or \
                 clock::yield_now()) to let the thread it waits for run"
            ),
            _ => String::new(),
        }
    }

    /// Who joins whom, for a deadlock's message: "t1 joins t2, t2 joins t1".
    fn joins(st: &State) -> String {
        let blocked: Vec<String> = st
            .threads
            .iter()
            .enumerate()
            .filter_map(|(t, th)| match th.status {
                Status::Joining(u) => Some(format!("t{t} joins t{u}")),
                _ => None,
            })
            .collect();
        blocked.join(", ")
    }

    fn record(st: &mut State, me: usize, op: Op) {
        st.steps += 1;
        if st.profile.is_none() {
            st.now = st.now.saturating_add(st.step_time);
        }
        if !matches!(op, Op::Fault(_)) {
            if let Some(t) = st.threads.get_mut(me) {
                t.last_step = st.steps;
            }
        }
        let node = st.threads.get(me).and_then(|t| t.node);
        st.hash = mix(mix(st.hash, me as u64), {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            op.hash(&mut h);
            h.finish()
        });
        if st.trace.len() == TRACE_KEEP {
            st.trace.pop_front();
        }
        st.trace.push_back(Event {
            step: st.steps,
            thread: me,
            node,
            op,
            value: None,
            at: st.now,
        });
    }

    /// The trace's last steps, readable.
    pub(super) fn trace(&self) -> Vec<String> {
        self.lock().trace.iter().map(ToString::to_string).collect()
    }

    /// (steps, virtual time, schedule hash, failure).
    pub(super) fn outcome(&self) -> (u64, Duration, u64, Option<(FailureKind, String)>) {
        let st = self.lock();
        (st.steps, st.now, st.hash, st.failure.clone())
    }

    /// Waits (on a non-simulated thread) until every simulated thread is done, or the run
    /// stopped and every thread has left the scheduler. A run whose step count has not moved
    /// for `watchdog` of real time has a thread blocked outside the simulator (a std lock, a
    /// sleep, I/O, or a loop without scheduling points): it fails as [`FailureKind::Hang`],
    /// and its threads are abandoned (they cannot be stopped from outside: the run's OS thread
    /// stays blocked, and is leaked with them).
    pub(super) fn wait_all_done(&self, watchdog: Duration) {
        let mut st = self.lock();
        let mut last = (st.steps, Instant::now());
        while !st.threads.iter().all(|t| t.status == Status::Done) {
            let tick = watchdog.min(Duration::from_millis(100));
            st = self
                .cv
                .wait_timeout(st, tick)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if st.steps != last.0 {
                last = (st.steps, Instant::now());
            } else if last.1.elapsed() >= watchdog {
                let t = st.current;
                let message = format!(
                    "simulated thread t{t} reached no scheduling point for {watchdog:?} of real \
                     time: it blocks outside the simulator (a std lock, a sleep, I/O, or a loop \
                     without context operations); its threads are abandoned"
                );
                // Stopped, not only failed: should the thread come unblocked later, the run
                // unwinds at its next scheduling point instead of going on in the background.
                Self::fail_locked(&mut st, FailureKind::Hang, message);
                return;
            }
        }
    }
}

impl Handle {
    fn point_inner(&self, op: Op, yielding: bool) {
        self.point_until(op, yielding, None);
    }

    /// A scheduling point; in a timed run, with `until`, the thread's clock moves on to at
    /// least that time (a spin loop's pause waiting for the NIC's next step).
    fn point_until(&self, op: Op, yielding: bool, until: Option<Duration>) {
        let st = self.sched.lock();
        if st.aborted.is_some() {
            // Teardown after a failure: no more scheduling, threads run as they unwind.
            drop(st);
            if !std::thread::panicking() {
                std::panic::resume_unwind(Box::new(Stopped));
            }
            return;
        }
        let mut st = st;
        Self::check_turn(&st, self.me);
        Sched::record(&mut st, self.me, op);
        if std::thread::panicking() {
            // Unwinding (a panic on its way to the thread's catch): the thread runs on without
            // handing the baton over, since the next coroutine on this OS thread would see the
            // panic in progress. Time still passes, so the deadlines of its drop code expire.
            if let Some(p) = &st.profile {
                let cost = cost(p, op);
                let th = &mut st.threads[self.me];
                th.clock = th.clock.saturating_add(cost);
                let clock = th.clock;
                st.now = st.now.max(clock);
            }
            return;
        }
        if let Some((cost, poll_spin)) = st.profile.as_ref().map(|p| (cost(p, op), p.poll_spin)) {
            let th = &mut st.threads[self.me];
            th.polling_since = match op {
                Op::Poll { .. } => Some(th.polling_since.unwrap_or(th.clock)),
                _ => None,
            };
            let polled_long = th
                .polling_since
                .is_some_and(|s| th.clock.saturating_sub(s) >= poll_spin);
            th.clock = th.clock.saturating_add(cost);
            th.posted |= matches!(op, Op::Post { .. });
            th.spinning = until.is_some();
            let (cpu, clock, slice_end) = (th.cpu, th.clock, th.slice_end);
            let waiting = !st.cpu_queue.is_empty();
            if cpu && waiting && (op == Op::Pause || polled_long) {
                // A spin loop's pause yields the CPU to a thread waiting for one (the spin
                // loops of loco's waits back off into `yield_now` within microseconds), and so
                // does a poll that has spun long enough.
                st.queue_for_cpu(self.me, clock);
            } else if cpu && waiting && clock >= slice_end {
                st.queue_for_cpu(self.me, slice_end);
            } else if let Some(u) = until {
                let th = &mut st.threads[self.me];
                th.clock = th.clock.max(u);
            }
            let th = &st.threads[self.me];
            // A spin loop is loads and pauses: it goes on through its loads.
            let spin = match op {
                Op::Pause | Op::Yield => until.is_some() && !th.queued,
                Op::Load { .. } => th.local_spin,
                _ => false,
            };
            st.set_local_spin(self.me, spin);
        }
        if !st.undecided.is_empty() {
            Sched::decide_faults(&mut st);
        }
        if st.plan.front().is_some_and(|&(at, _)| at <= st.steps) {
            drop(st);
            self.sched.inject_due(self.me);
            st = self.sched.lock();
        }
        if st.steps > st.max_steps {
            let m = format!(
                "step budget exhausted: {} steps (a livelock, or raise Config::max_steps){}",
                st.max_steps,
                Sched::unpaused_spin(&st, self.me)
            );
            Sched::fail_locked(&mut st, FailureKind::Budget, m);
            self.sched.wake_all(&st);
        }
        drop(self.sched.switch(st, self.me, yielding));
    }

    fn check_turn(st: &State, me: usize) {
        debug_assert_eq!(st.current, me, "a simulated thread ran without the baton");
    }

    /// A scheduling point: another thread may run before this one goes on.
    pub(crate) fn point_with(&self, op: Op) {
        self.point_inner(op, false);
    }

    /// A spin loop's pause: a scheduling point at which the thread lets others go first. In a
    /// timed run, a spin on local memory (no post since the last pause: its loads see only its
    /// node's memory) pauses until the NIC's next step that writes that memory (or
    /// [`SPIN_LOOK`]), when what it spins on can next change: a spin of many rounds costs a few scheduling points, not one per round.
    /// A CPU write of another thread meanwhile ends the pause early ([`Handle::wake_spinners`]).
    pub(crate) fn point(&self) {
        self.pause_as(Op::Pause);
    }

    /// A yield of the CPU (`clock::yield_now`): a scheduling point, as a spin loop's pause,
    /// but under a profile with [`super::Profile::cpus`] the thread keeps its CPU until its
    /// slice ends. On Linux (CFS) `sched_yield` passes the CPU over only to a thread that has
    /// not run much longer than the yielder, and a thread that yields between CPU-bound steps
    /// (on rxe a remote CAS is a system call that does the whole round trip) mostly gets its
    /// CPU straight back; the vCPUs are shared in slices. Measured on the VM with the rCAS
    /// spinlock: docs/simulation.md §3.
    pub(crate) fn yield_now(&self) {
        self.pause_as(Op::Yield);
    }

    /// `n` spin-loop hints (`clock::spin_hints`): in a timed run, a scheduling point that
    /// costs `n` times the profile's [`spin_hint`](super::Profile::spin_hint) and keeps the
    /// CPU as a yield does (the thread is busy spinning); in an untimed run nothing, as the
    /// hints are not scheduling points there (schedules stay what they were).
    pub(crate) fn spin_hints(&self, n: u32) {
        let nanos = {
            let st = self.sched.lock();
            match &st.profile {
                Some(p) => u64::try_from(p.spin_hint.as_nanos().saturating_mul(u128::from(n)))
                    .unwrap_or(u64::MAX),
                None => return,
            }
        };
        self.point_until(Op::Spin { nanos }, true, None);
    }

    /// A post's device work on this thread's CPU, `busy` long
    /// ([`super::Profile::device_on_cpu`]): the thread keeps its CPU meanwhile, as it does in
    /// the system call of a post to Soft-RoCE.
    pub(crate) fn device_work(&self, busy: Duration) {
        let nanos = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
        self.point_until(Op::Device { nanos }, true, None);
    }

    /// [`Handle::point`] or [`Handle::yield_now`], as `op` says.
    fn pause_as(&self, op: Op) {
        // Exhaustive search: a pause is where the NIC catches up (its default is to wait).
        if let Some(d) = &*self.sched.drain.lock().unwrap_or_else(|p| p.into_inner()) {
            d();
        }
        let (local, node) = {
            let mut st = self.sched.lock();
            let timed = st.profile.is_some();
            let th = &mut st.threads[self.me];
            // A spin that posted since its last pause polls remote memory: it sees changes
            // only through its requests, which must go on at their own pace.
            let local = timed && !th.posted;
            th.posted = false;
            (local, th.node)
        };
        let until = if local {
            // Asked before taking the scheduler's lock: the NIC's lock comes first.
            let next = self
                .sched
                .nic
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .and_then(|f| f(node));
            let now = self.elapsed();
            let look = now.saturating_add(SPIN_LOOK);
            Some(next.map_or(look, |n| n.min(look)))
        } else {
            None
        };
        self.point_until(op, true, until);
    }

    /// In a timed run: a CPU write of this thread (a CAS, or a fence's drained stores) may be
    /// what spinning threads on its node wait for; they look again one pause from now.
    pub(crate) fn wake_spinners(&self) {
        let mut st = self.sched.lock();
        let Some(pause) = st.profile.as_ref().map(|p| p.pause) else {
            return;
        };
        let soon = st.now.saturating_add(pause);
        let node = st.threads[self.me].node;
        for th in &mut st.threads {
            if th.spinning && th.clock > soon && (node.is_none() || th.node == node) {
                th.clock = soon;
                th.spinning = false;
            }
        }
    }

    /// Lets `d` of virtual time pass, as a pause: the thread goes on no earlier than `d` after
    /// it began to sleep. In an untimed run the sleeps of several threads overlap, as they do
    /// on a host: while one thread sleeps the others take their steps, and time moves on to
    /// the sleeper's end only when it goes on (when every thread sleeps in turn, time moves by
    /// about one sleep per round, not by the sum of them).
    pub(crate) fn sleep(&self, d: Duration) {
        let until = {
            let mut st = self.sched.lock();
            if st.aborted.is_some() {
                None
            } else if st.profile.is_some() {
                // A sleeping thread lets go of its CPU.
                st.release_own_cpu(self.me);
                let th = &mut st.threads[self.me];
                th.clock = th.clock.saturating_add(d);
                None
            } else {
                Some(st.now.saturating_add(d))
            }
        };
        self.point_inner(
            Op::Sleep {
                nanos: d.as_nanos().min(u64::MAX as u128) as u64,
            },
            true,
        );
        if let Some(until) = until {
            let mut st = self.sched.lock();
            if st.aborted.is_none() {
                st.now = st.now.max(until);
            }
        }
    }

    /// Parks the thread for at most `d`: in a timed run until another thread unparks it
    /// ([`Sched::unpark`]) or `d` has passed (at once if an unpark came since its last park);
    /// in an untimed run, a sleep of `d`.
    pub(crate) fn park(&self, d: Duration) {
        let timed = {
            let mut st = self.sched.lock();
            let timed = st.profile.is_some() && st.aborted.is_none();
            if timed && !std::mem::take(&mut st.threads[self.me].token) {
                st.release_own_cpu(self.me);
                let th = &mut st.threads[self.me];
                th.parked = true;
                th.clock = th.clock.saturating_add(d);
            }
            timed
        };
        if !timed {
            return self.sleep(d);
        }
        self.point_inner(
            Op::Park {
                nanos: d.as_nanos().min(u64::MAX as u128) as u64,
            },
            true,
        );
        self.sched.lock().threads[self.me].parked = false;
    }

    /// In a timed run: the thread has nothing to do before `at` (a poll that found nothing,
    /// and the NIC does nothing before then); its clock moves on to it.
    pub(crate) fn idle_until(&self, at: Duration) {
        let mut st = self.sched.lock();
        if st.profile.is_some() && st.aborted.is_none() {
            let th = &mut st.threads[self.me];
            th.clock = th.clock.max(at);
        }
    }

    /// The virtual time, as an [`Instant`] (the run's start plus the time simulated so far;
    /// after the run stopped, real time goes on from there).
    pub(crate) fn now(&self) -> Instant {
        let st = self.sched.lock();
        let extra = st.aborted.map_or(Duration::ZERO, |a| a.elapsed());
        // Virtual time past what an Instant holds stays at the last one it holds.
        let far = Duration::from_secs(100 * 365 * 86_400);
        let t = st.now.saturating_add(extra);
        self.sched
            .base
            .checked_add(t)
            .or_else(|| self.sched.base.checked_add(far))
            .unwrap_or(self.sched.base)
    }

    /// Whether the run is timed by a network profile (else every step costs the same).
    pub(crate) fn timed(&self) -> bool {
        self.sched.lock().profile.is_some()
    }

    /// The virtual time since the run started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.sched.lock().now
    }

    /// Waits for the baton before the thread's first step.
    pub(super) fn start(&self) {
        let st = self.sched.lock();
        let st = self.sched.wait_turn(st, self.me);
        drop(st);
        self.point_with(Op::Start);
    }

    /// The thread is done: wakes its joiners and hands the baton on.
    pub(super) fn finish(&self) {
        let mut st = self.sched.lock();
        if st.aborted.is_none() {
            Sched::record(&mut st, self.me, Op::End);
        }
        st.set_local_spin(self.me, false);
        st.threads[self.me].status = Status::Done;
        st.release_own_cpu(self.me);
        let me = self.me;
        let now = st.now;
        for t in &mut st.threads {
            if t.status == Status::Joining(me) {
                t.status = Status::Runnable;
                t.clock = t.clock.max(now);
            }
        }
        if st.aborted.is_none() && st.current == me {
            match Sched::pick(&mut st, false) {
                Some(next) => st.current = next,
                None if st.threads.iter().all(|t| t.status == Status::Done) => {}
                None => {
                    let m = format!(
                        "deadlock: every thread left is blocked in a join ({})",
                        Sched::joins(&st)
                    );
                    Sched::fail_locked(&mut st, FailureKind::Deadlock, m);
                }
            }
        }
        // The driver waits for the last thread only (a wake-up per thread would cost a
        // futex call each).
        if st.threads.iter().all(|t| t.status == Status::Done) {
            self.sched.cv.notify_all();
        }
    }

    /// Blocks until thread `t` is done.
    pub(super) fn join(&self, t: usize) {
        let mut st = self.sched.lock();
        if st.aborted.is_some() {
            drop(st);
            if !std::thread::panicking() {
                std::panic::resume_unwind(Box::new(Stopped));
            }
            return;
        }
        Sched::record(&mut st, self.me, Op::Join { thread: t });
        if st
            .threads
            .get(t)
            .is_some_and(|th| th.status != Status::Done)
        {
            st.threads[self.me].status = Status::Joining(t);
            st.release_own_cpu(self.me);
            drop(self.sched.switch(st, self.me, false));
        }
    }

    /// Registers a new thread on `node` (its OS thread must then be started, before the
    /// spawner's next scheduling point).
    pub(super) fn spawn(&self, node: NodeId) -> usize {
        self.sched.add(Some(node))
    }
}
