//! The `Chaos` schedule: the whole cluster's model state behind one lock, stepped at random.
//!
//! | state (docs/model.md §4.1) | here |
//! |---|---|
//! | memory of every node | [`Fabric`] (real shared words) |
//! | per thread: TSO store buffer | [`ThreadState::sb`], the model's [`StoreBuffer`]: stores *and* posted remote ops, in program order |
//! | per (thread, node): pipe, remote write buffer, local write buffer | [`ThreadState::qps`], one [`Qp`] per target |
//! | per node: remote-atomic lock | [`State::locks`] |
//!
//! Every call of every thread into its NIC first takes a random number of random enabled steps
//! anywhere in the cluster (a store-buffer flush, or a rule of [`crate::model`]); blocking calls
//! keep stepping until they can go on. Threads that have finished leave their pending work behind
//! to be stepped by others (or by [`Chaos::quiesce`]), exactly as a real NIC keeps going after
//! the CPU has moved on.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::Backoff;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{deadline, expired, Fabric};
use crate::backend::{ThreadNic, WorkRequest};
use crate::error::TimeoutKind;
use crate::model::{ClusterMemory, Entry, LocalItem, Post, Qp, SbItem, Step, StoreBuffer};
use crate::sim::explore::Explorer;
use crate::sim::sched::Op;
use crate::sim::Profile;
use crate::{Error, NodeId, Result};

/// Probabilities that a call takes no random step at all (so work stays pending across calls);
/// each run draws one, so some runs let work pile up and others keep the NIC busy.
const P_IDLE: [f64; 3] = [0.2, 0.5, 0.8];
/// After a first step, probabilities of taking one more (drawn per run, like [`P_IDLE`]).
const P_MORE: [f64; 3] = [0.3, 0.6, 0.85];
/// Probability that a call yields the OS thread afterwards, to shuffle thread interleavings.
const P_YIELD: f64 = 0.1;

#[derive(Debug)]
struct ThreadState {
    node: usize,
    /// Whether the owning [`ChaosNic`] still exists.
    alive: bool,
    sb: StoreBuffer<Post>,
    qps: Vec<Qp>,
    /// The indices of the queue pairs with anything in their pipe or buffers, in order
    /// ([`ThreadState::refresh_busy`] after every change to `qps`): the search for enabled
    /// steps looks at these only, where most queue pairs of a large cluster are idle.
    busy: Vec<usize>,
    /// Per queue pair, the steps [`Qp::steps`] last listed for it, and the value of its
    /// target's remote-atomic lock then (the one thing outside the queue pair they depend
    /// on); `None` once the queue pair may have changed ([`ThreadState::refresh_busy`]).
    steps: Vec<Option<(bool, Vec<Step>)>>,
    /// Under a profile: when each item of `sb` and of every queue pair falls due.
    times: Times,
}

impl ThreadState {
    fn settled(&self) -> bool {
        self.sb.is_empty() && self.qps.iter().all(Qp::is_settled)
    }

    /// Recomputes [`ThreadState::busy`] and forgets the listed steps (after a change to
    /// `qps`).
    fn refresh_busy(&mut self) {
        for &n in &self.busy {
            self.steps[n] = None;
        }
        self.busy.clear();
        let busy = self.qps.iter().enumerate().filter(|(_, qp)| qp_busy(qp));
        self.busy.extend(busy.map(|(n, _)| n));
    }
}

/// Whether a queue pair has anything in its pipe or buffers.
fn qp_busy(qp: &Qp) -> bool {
    !(qp.pipe.is_empty() && qp.br.is_empty() && qp.bl.is_empty())
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Flush(usize),
    Nic(usize, usize, Step),
}

#[derive(Debug)]
struct State {
    rng: ChaCha8Rng,
    threads: Vec<Option<ThreadState>>,
    locks: Vec<bool>,
    actions: Vec<Action>,
    steps: Vec<Step>,
    /// Per action kind (see [`State::kind`]), its weight in this run's random choices. Drawn
    /// once per cluster from [`BIASES`], so that each run favours some phases and starves others
    /// (a get whose remote read stays pending for long, remote writes that land late, ...): rare
    /// interleavings that uniform choices would almost never produce become common in some runs.
    bias: [f64; KINDS],
    /// This run's pick from [`P_IDLE`].
    p_idle: f64,
    /// This run's pick from [`P_MORE`].
    p_more: f64,
    /// The fabric's fault epoch last seen by [`State::sync_faults`].
    epoch: u64,
    /// Per node: dead, as of `epoch`.
    dead: Vec<bool>,
    /// Per node: stalled (and not dead), as of `epoch`.
    stalled: Vec<bool>,
    /// Under a network profile: steps are taken when due, in time order (see [`Timing`]).
    timing: Option<Timing>,
    /// Under exhaustive search: every choice comes from here instead of `rng`; a call takes
    /// no step by default, a poll its own first enabled one.
    explore: Option<Arc<Explorer>>,
}

/// Number of action kinds.
const KINDS: usize = 11;
/// Weight of doing nothing in a call's random steps (against the enabled actions' biases).
const IDLE_WEIGHT: f64 = 0.5;
/// The weights an action kind can get in a run.
const BIASES: [f64; 4] = [0.02, 0.2, 1.0, 5.0];

/// The fabric seen through the model's [`ClusterMemory`] trait.
struct Mem<'a>(&'a Fabric);

impl ClusterMemory for Mem<'_> {
    fn read(&self, node: NodeId, word: usize) -> u64 {
        self.0.read(node.index(), word)
    }
    fn write(&mut self, node: NodeId, word: usize, value: u64) {
        self.0.write(node.index(), word, value)
    }
}

/// Whether `qp` holds its target's remote-atomic lock (an RMW between its read and its write).
fn holds_lock(qp: &Qp) -> bool {
    qp.pipe.iter().any(|e| matches!(e, Entry::Atomic { .. })) || qp.br.iter().any(|w| w.atomic)
}

impl State {
    /// Applies the kills and stalls made since the last call: the work of threads on a dead
    /// node is discarded, except what already reached a live target (its remote writes, and
    /// the atomic write of an RMW that has read); so is every request towards a dead node
    /// (store buffer, pipe, remote write buffer); local writes already on their way stay. A
    /// discarded RMW that held a remote-atomic lock releases it, so that RMWs of the survivors
    /// never wait for a dead thread.
    fn sync_faults(&mut self, fabric: &Fabric) {
        let epoch = fabric.epoch.load(std::sync::atomic::Ordering::SeqCst);
        if epoch == self.epoch {
            return;
        }
        self.epoch = epoch;
        let mut newly_dead = false;
        for n in 0..self.dead.len() {
            let dead = fabric.is_dead(n);
            newly_dead |= dead && !self.dead[n];
            self.dead[n] = dead;
            self.stalled[n] = fabric.is_stalled(n) && !dead;
        }
        if !newly_dead {
            return;
        }
        let State {
            threads,
            locks,
            dead,
            ..
        } = self;
        for slot in threads.iter_mut() {
            let Some(th) = slot else { continue };
            if dead[th.node] {
                th.sb.clear();
                for qp in &mut th.qps {
                    let mut fresh =
                        Qp::new(qp.local_node, qp.remote_node).with_failed_cas(fabric.failed_cas);
                    if dead[qp.remote_node.index()] {
                        if holds_lock(qp) {
                            locks[qp.remote_node.index()] = false;
                        }
                    } else {
                        // What reached a live target still lands there: the remote writes in
                        // its buffer, and the atomic writes of RMWs that have read (the other
                        // half of one indivisible operation, whose result the dead thread may
                        // have seen). They keep the target's atomic lock until they commit.
                        fresh.br = std::mem::take(&mut qp.br);
                        fresh.pipe = qp
                            .pipe
                            .drain(..)
                            .filter(|e| matches!(e, Entry::Atomic { .. }))
                            .collect();
                        // They commit now (a schedule where they did just before the kill), so
                        // that nothing of the dead incarnation lands after a restart.
                        let mut steps = Vec::new();
                        loop {
                            steps.clear();
                            fresh.steps(locks, &mut steps);
                            let Some(&s) = steps.first() else { break };
                            fresh.apply(s, &mut Mem(fabric), locks);
                        }
                    }
                    *qp = fresh;
                }
            } else {
                th.sb.retain_posts(|p| !dead[p.target.index()]);
                for qp in th.qps.iter_mut().filter(|qp| dead[qp.remote_node.index()]) {
                    if holds_lock(qp) {
                        locks[qp.remote_node.index()] = false;
                    }
                    qp.pipe.clear();
                    qp.br.clear();
                }
            }
            th.refresh_busy();
            if self.timing.is_some() {
                th.times.reconcile(&th.sb, &th.qps);
            }
            if !th.alive && th.settled() {
                *slot = None;
            }
        }
    }

    fn collect_actions(&mut self) {
        self.actions.clear();
        for t in 0..self.threads.len() {
            self.collect_actions_of(t);
        }
    }

    /// Appends thread `t`'s enabled actions to [`State::actions`], in the order
    /// [`State::collect_actions`] lists them.
    fn collect_actions_of(&mut self, t: usize) {
        let Some(Some(th)) = self.threads.get_mut(t) else {
            return;
        };
        if !th.sb.is_empty() {
            self.actions.push(Action::Flush(t));
        }
        debug_assert!(
            th.busy.iter().copied().eq(th
                .qps
                .iter()
                .enumerate()
                .filter(|(_, qp)| qp_busy(qp))
                .map(|(n, _)| n)),
            "busy queue pairs out of date"
        );
        for &n in &th.busy {
            if self.stalled[th.node] || self.stalled[n] {
                continue;
            }
            let qp = &th.qps[n];
            let lock = self.locks[qp.remote_node.index()];
            let cached = &mut th.steps[n];
            if cached.as_ref().is_none_or(|(l, _)| *l != lock) {
                let mut steps = cached.take().map(|(_, v)| v).unwrap_or_default();
                steps.clear();
                qp.steps(&self.locks, &mut steps);
                *cached = Some((lock, steps));
            }
            let steps = &cached.as_ref().expect("listed just now").1;
            debug_assert!(
                {
                    self.steps.clear();
                    qp.steps(&self.locks, &mut self.steps);
                    &self.steps == steps
                },
                "listed steps out of date"
            );
            self.actions
                .extend(steps.iter().map(|&s| Action::Nic(t, n, s)));
        }
    }

    fn apply(&mut self, fabric: &Fabric, a: Action) {
        // Under a profile, the item's successors fall due counted from when it was taken.
        let before = self.timing.as_ref().map(|tm| (tm.now, self.before(a)));
        match a {
            Action::Flush(t) => {
                let th = self.threads[t].as_mut().expect("flush of a live slot");
                let node = th.node;
                th.sb
                    .flush(&mut th.qps, |word, value| fabric.write(node, word, value));
            }
            Action::Nic(t, n, s) => {
                let th = self.threads[t].as_mut().expect("action of a live slot");
                th.qps[n].apply(s, &mut Mem(fabric), &mut self.locks);
            }
        }
        let (t, n) = match a {
            Action::Flush(t) => (t, None),
            Action::Nic(t, n, _) => (t, Some(n)),
        };
        if let (Some((at, before)), Some(tm)) = (before, self.timing.as_mut()) {
            let th = self.threads[t].as_mut().expect("a live slot");
            tm.retime(&mut self.rng, th, a, before, at);
        }
        let th = self.threads[t].as_mut().expect("a live slot");
        // A dead owner's notices go as they arrive.
        let dropped = match n {
            Some(n) if !th.alive => {
                th.qps[n].drop_notices();
                true
            }
            _ => false,
        };
        th.refresh_busy();
        if dropped && self.timing.is_some() {
            th.times.reconcile(&th.sb, &th.qps);
        }
        if !th.alive && th.settled() {
            self.threads[t] = None;
        }
    }

    /// What [`Timing::retime`] needs to know of `a` before it is taken.
    fn before(&self, a: Action) -> Before {
        match a {
            Action::Flush(t) => {
                let th = self.threads[t].as_ref().expect("flush of a live slot");
                match th.sb.front() {
                    Some(SbItem::Post(p)) => Before::Post(p.target.index(), p.wr),
                    _ => Before::Store,
                }
            }
            Action::Nic(_, _, Step::CommitRemote) => Before::CommitRemote,
            Action::Nic(_, _, Step::CommitLocal(_)) => Before::CommitLocal,
            Action::Nic(t, n, Step::Pipe(i)) => {
                let th = self.threads[t].as_ref().expect("action of a live slot");
                Before::Pipe(kind_of(&th.qps[n].pipe[i]))
            }
        }
    }

    /// Empties thread `t`'s store buffer (for `mfence` and `cas`): stores to memory, posts to
    /// their queue pairs' pipes.
    fn flush_all(&mut self, fabric: &Fabric, t: usize) {
        while self.threads[t].as_ref().is_some_and(|th| !th.sb.is_empty()) {
            self.apply(fabric, Action::Flush(t));
        }
    }

    /// A CPU store enters thread `t`'s store buffer.
    fn push_store(&mut self, t: usize, word: usize, value: u64) {
        let now = self.timing.as_ref().map(|tm| tm.now);
        let th = self.thread(t);
        th.sb.store(word, value);
        if let Some(now) = now {
            th.times.sb.push_back(now);
        }
    }

    /// A post enters thread `t`'s store buffer.
    fn push_post(&mut self, t: usize, post: Post) {
        let due = match self.timing.as_mut() {
            Some(tm) => Some(
                tm.now
                    .saturating_add(tm.jitter(&mut self.rng, tm.profile.doorbell)),
            ),
            None => None,
        };
        let th = self.thread(t);
        th.sb.post(post);
        if let Some(due) = due {
            th.times.sb.push_back(due);
        }
    }

    /// The kind of an action, indexing [`State::bias`].
    fn kind(&self, a: Action) -> usize {
        match a {
            Action::Flush(_) => 0,
            Action::Nic(_, _, Step::CommitRemote) => 1,
            Action::Nic(_, _, Step::CommitLocal(_)) => 2,
            Action::Nic(t, n, Step::Pipe(i)) => {
                let th = self.threads[t].as_ref().expect("action of a live slot");
                match th.qps[n].pipe[i] {
                    Entry::Fence => 3,
                    Entry::Put { .. } => 4,
                    Entry::Send { .. } => 5,
                    Entry::Ack { .. } => 6,
                    Entry::Get { .. } => 7,
                    Entry::Load { .. } => 8,
                    Entry::Rmw { .. } => 9,
                    Entry::Atomic { .. } => 10,
                }
            }
        }
    }

    /// Picks an enabled action at random, weighted by the run's bias for its kind; only actions
    /// of thread `only.0` (polling its queue pair to node `only.1`) if it has any. With `idle`, doing nothing competes with weight
    /// [`IDLE_WEIGHT`] (None), so that a lone starved action still tends to stay pending.
    fn pick(&mut self, only: Option<(usize, usize)>, idle: bool) -> Option<Action> {
        let polled = only.map(|(_, n)| n);
        let mut only = only.map(|(t, _)| t);
        // Thread `only`'s actions alone when it has any (the choice below is then among them
        // exactly as if every action were listed), else every thread's.
        self.actions.clear();
        if let Some(t) = only {
            self.collect_actions_of(t);
        }
        if self.actions.is_empty() {
            only = None;
            self.collect_actions();
        }
        let owner = |a: &Action| match *a {
            Action::Flush(u) | Action::Nic(u, _, _) => u,
        };
        let mine = |a: &Action| only.is_none_or(|t| owner(a) == t);
        let restrict = only.is_some();
        if let Some(e) = &self.explore {
            // The default (choice 0) is to take no step where that is allowed; in a poll, the
            // least work towards its notice: the thread's store buffer, then the polled queue
            // pair's pipe, local commits and remote commits, then the thread's other steps.
            // Weak outcomes (writes that stay pending) so cost no deviation; a pause's drain
            // lets everything land.
            let skip = usize::from(idle);
            let rank = |a: &Action| match (*a, polled) {
                (Action::Flush(_), Some(_)) => 0,
                (Action::Nic(_, n, Step::Pipe(_)), Some(p)) if n == p => 1,
                (Action::Nic(_, n, Step::CommitLocal(_)), Some(p)) if n == p => 2,
                (Action::Nic(_, n, Step::CommitRemote), Some(p)) if n == p => 3,
                _ => 4,
            };
            let mut options: Vec<Action> = self
                .actions
                .iter()
                .filter(|a| !restrict || mine(a))
                .copied()
                .collect();
            if options.is_empty() {
                return None;
            }
            options.sort_by_key(rank); // stable: the model's order within a rank
            let k = e.choose(options.len() + skip, false);
            return k.checked_sub(skip).map(|k| options[k]);
        }
        let weight = |st: &State, a: &Action| {
            if restrict && !mine(a) {
                0.0
            } else {
                st.bias[st.kind(*a)]
            }
        };
        let total: f64 = self.actions.iter().map(|a| weight(self, a)).sum();
        if total <= 0.0 {
            return None;
        }
        let idle_weight = if idle { IDLE_WEIGHT } else { 0.0 };
        let mut x = self.rng.random_range(0.0..total + idle_weight);
        if x >= total {
            return None;
        }
        for a in &self.actions {
            let w = weight(self, a);
            if x < w {
                return Some(*a);
            }
            x -= w;
        }
        self.actions
            .iter()
            .rev()
            .find(|a| weight(self, a) > 0.0)
            .copied()
    }

    /// Takes one random enabled step; false if none is enabled (or, with `idle`, if doing
    /// nothing was picked).
    fn step(&mut self, fabric: &Fabric, idle: bool) -> bool {
        match self.pick(None, idle) {
            Some(a) => {
                self.apply(fabric, a);
                true
            }
            None => false,
        }
    }

    /// Takes one random enabled step of thread `t` (its store buffer or its queue pairs), or, if
    /// it has none, one random enabled step anywhere; false if none is enabled at all. `polled`
    /// is the node whose queue pair the poll waits on (exhaustive search's default favours it).
    ///
    /// Blocking calls step this way: a real NIC works on the polled queue pair without also
    /// finishing everyone else's work, and stepping the whole cluster at every poll made the other
    /// threads' pending operations land so fast that allowed outcomes needing them to stay
    /// pending (e.g. the other-node variant of Fig. 8f) were practically never seen.
    fn step_own(&mut self, fabric: &Fabric, t: usize, polled: usize) -> bool {
        match self.pick(Some((t, polled)), false) {
            Some(a) => {
                self.apply(fabric, a);
                true
            }
            None => false,
        }
    }

    /// The random steps taken at each call; under a profile, every step due by now instead.
    fn churn(&mut self, fabric: &Fabric) {
        if self.timing.is_some() {
            self.advance(fabric, sim_now());
            return;
        }
        if self.explore.is_some() {
            while self.step(fabric, true) {}
            return;
        }
        if self.rng.random_bool(self.p_idle) {
            return;
        }
        while self.step(fabric, true) && self.rng.random_bool(self.p_more) {}
    }

    fn thread(&mut self, t: usize) -> &mut ThreadState {
        self.threads[t].as_mut().expect("a live NIC's slot")
    }
}

// ---- Timed steps (a simulation with a network profile) -------------------------------------

/// The virtual time of the calling simulated thread; a thread outside the simulation (the
/// run's driver tearing the cluster down) sees the end of time, when every step is due.
fn sim_now() -> Duration {
    if crate::clock::simulated() {
        crate::sim::now()
    } else {
        Duration::MAX
    }
}

/// When nothing is due for a poller, it looks again this much later (only a fault's end, which
/// the scheduler injects at a step, can change that).
const IDLE_POLL: Duration = Duration::from_micros(1);

/// Pipe entry kinds, as the timing needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Put,
    Send,
    Ack,
    Get,
    Load,
    Rmw,
    Atomic,
    Fence,
}

fn kind_of(e: &Entry) -> Kind {
    match e {
        Entry::Put { .. } => Kind::Put,
        Entry::Send { .. } => Kind::Send,
        Entry::Ack { .. } => Kind::Ack,
        Entry::Get { .. } => Kind::Get,
        Entry::Load { .. } => Kind::Load,
        Entry::Rmw { .. } => Kind::Rmw,
        Entry::Atomic { .. } => Kind::Atomic,
        Entry::Fence => Kind::Fence,
    }
}

/// An action as it was before it was taken (what it moves where).
#[derive(Clone, Copy, Debug)]
enum Before {
    Store,
    Post(usize, WorkRequest),
    Pipe(Kind),
    CommitRemote,
    CommitLocal,
}

/// When each item of a thread's store buffer and queue pairs falls due (parallel to them:
/// `sb[k]` is the due time of the store buffer's k-th item, and so on). Kept only under a
/// profile.
#[derive(Debug, Default)]
struct Times {
    sb: VecDeque<Duration>,
    pipe: Vec<VecDeque<Duration>>,
    br: Vec<VecDeque<Duration>>,
    bl: Vec<VecDeque<Duration>>,
    /// Under [`Profile::device_put`] and its siblings: when the device is done with this
    /// thread's last request (a thread's requests hold the device one after the other).
    device_free: Duration,
}

impl Times {
    fn new(nodes: usize) -> Self {
        Times {
            sb: VecDeque::new(),
            pipe: vec![VecDeque::new(); nodes],
            br: vec![VecDeque::new(); nodes],
            bl: vec![VecDeque::new(); nodes],
            device_free: Duration::ZERO,
        }
    }

    /// After a fault discarded items (or a finished thread's notices were dropped): where a
    /// queue's length no longer matches, its items are taken as due now. Faults are rare and
    /// their timing is approximate anyway; every other change is mirrored exactly by
    /// [`Timing::retime`].
    fn reconcile(&mut self, sb: &StoreBuffer<Post>, qps: &[Qp]) {
        fn fit(times: &mut VecDeque<Duration>, len: usize) {
            if times.len() != len {
                let at = times.iter().copied().min().unwrap_or(Duration::ZERO);
                times.clear();
                times.resize(len, at);
            }
        }
        fit(&mut self.sb, sb.len());
        for (n, qp) in qps.iter().enumerate() {
            fit(&mut self.pipe[n], qp.pipe.len());
            fit(&mut self.br[n], qp.br.len());
            fit(&mut self.bl[n], qp.bl.len());
        }
    }
}

/// The clock of a timed cluster's NIC: the profile, the time of the last step taken, and when
/// each NIC is free again for its next inbound or outbound operation.
#[derive(Debug)]
struct Timing {
    profile: Profile,
    /// The time the last step was taken at (steps are taken in time order).
    now: Duration,
    inbound_free: Vec<Duration>,
    outbound_free: Vec<Duration>,
    /// Under [`Profile::device_put`] and its siblings: when the cluster's one device may start
    /// its next request.
    /// One entry per lane ([`Profile::device_lanes`]).
    device_free: Vec<Duration>,
    /// Threads spinning on local memory now (counted by the simulator's scheduler), which take
    /// device time under [`Profile::spin_share`].
    spinners: Arc<std::sync::atomic::AtomicUsize>,
}

/// `d` multiplied by a factor drawn uniformly from `1 ± j` (`j` capped at 1; none when it is
/// not positive or NaN), saturating.
fn jitter(j: f64, rng: &mut ChaCha8Rng, d: Duration) -> Duration {
    if j.is_nan() || j <= 0.0 || d.is_zero() {
        return d;
    }
    let j = j.min(1.0);
    crate::sim::profile::mul_saturating(d, rng.random_range(1.0 - j..=1.0 + j))
}

/// `at` plus every one of `ds`, saturating.
fn sum(at: Duration, ds: &[Duration]) -> Duration {
    ds.iter().fold(at, |a, &d| a.saturating_add(d))
}

impl Timing {
    /// `d` stretched or shrunk by the profile's jitter.
    fn jitter(&self, rng: &mut ChaCha8Rng, d: Duration) -> Duration {
        jitter(self.profile.jitter, rng, d)
    }

    /// Under [`Profile::device_on_cpu`]: the device time of `wr`, which its post spends on the
    /// posting thread's CPU (`None`: the profile's device works on its own, or takes no time).
    fn on_cpu(&self, wr: &WorkRequest) -> Option<Duration> {
        if !self.profile.device_on_cpu {
            return None;
        }
        Some(self.device_time(wr)).filter(|d| !d.is_zero())
    }

    /// How long request `wr` holds the device ([`Profile::device_put`] and its siblings).
    fn device_time(&self, wr: &WorkRequest) -> Duration {
        let p = &self.profile;
        match wr {
            WorkRequest::Write { .. } => p.device_put,
            WorkRequest::Fence => Duration::ZERO,
            WorkRequest::Read { .. } => p.device_get,
            WorkRequest::CompareSwap { .. } | WorkRequest::FetchAdd { .. } => p.device_rmw,
        }
    }

    /// The device's lane that is free first, and from when.
    fn device_lane(&self) -> (usize, Duration) {
        self.device_free
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .unwrap_or((0, Duration::ZERO))
    }

    /// A request's device time, stretched by the lane time spinning threads take
    /// ([`Profile::spin_share`]).
    fn stretched(&self, busy: Duration) -> Duration {
        let share = self.profile.spin_share;
        if busy.is_zero() || share.is_nan() || share <= 0.0 {
            return busy;
        }
        let spinners = self.spinners.load(std::sync::atomic::Ordering::Relaxed) as f64;
        let lanes = self.device_free.len() as f64;
        let left = (lanes - share.min(1.0) * spinners).max(1.0);
        crate::sim::profile::mul_saturating(busy, lanes / left)
    }

    /// One-way latency from `from` to `to`.
    fn wire(&self, from: usize, to: usize) -> Duration {
        if from == to {
            self.profile.loopback
        } else {
            self.profile.wire
        }
    }

    /// When action `a` of thread `th` can be taken (when its item falls due, and not before
    /// the NIC or device it needs is free), and when the item itself fell due: of the steps
    /// held back by a busy NIC or device, the one that has waited longest goes first (first
    /// come, first served).
    fn due_key(&self, th: &ThreadState, a: Action) -> (Duration, Duration) {
        let own = match a {
            Action::Flush(_) => th.times.sb[0],
            Action::Nic(_, n, Step::Pipe(i)) => th.times.pipe[n][i],
            Action::Nic(_, n, Step::CommitRemote) => th.times.br[n][0],
            Action::Nic(_, n, Step::CommitLocal(j)) => th.times.bl[n][j],
        };
        let at = match a {
            Action::Flush(_) => {
                let d = th.times.sb[0];
                match th.sb.front() {
                    Some(SbItem::Post(_)) => d
                        .max(self.outbound_free[th.node])
                        .max(self.device_lane().1)
                        .max(th.times.device_free),
                    _ => d,
                }
            }
            Action::Nic(_, n, Step::Pipe(i)) => {
                let d = th.times.pipe[n][i];
                match th.qps[n].pipe[i] {
                    Entry::Get { .. } | Entry::Rmw { .. } => d.max(self.inbound_free[n]),
                    _ => d,
                }
            }
            Action::Nic(_, n, Step::CommitRemote) => {
                let d = th.times.br[n][0];
                if th.qps[n].br[0].atomic {
                    d
                } else {
                    d.max(self.inbound_free[n])
                }
            }
            Action::Nic(_, n, Step::CommitLocal(j)) => th.times.bl[n][j],
        };
        (at.max(self.now), own)
    }

    /// Mirrors in `th.times` what action `a` (described by `before`) did to the thread's
    /// queues, taken at time `at`: the items it moved or made fall due from `at` on, with the
    /// profile's delays (see the table in [`crate::sim::profile`]).
    fn retime(
        &mut self,
        rng: &mut ChaCha8Rng,
        th: &mut ThreadState,
        a: Action,
        before: Before,
        at: Duration,
    ) {
        let me = th.node;
        let p = &self.profile;
        let j = |rng: &mut ChaCha8Rng, d| jitter(p.jitter, rng, d);
        match (a, before) {
            (Action::Flush(_), Before::Store) => {
                th.times.sb.pop_front();
            }
            (Action::Flush(_), Before::Post(n, wr)) => {
                th.times.sb.pop_front();
                self.outbound_free[me] = at.saturating_add(p.outbound_gap);
                // A device on the CPUs has no lanes of its own: the post took its time.
                let busy = if p.device_on_cpu {
                    Duration::ZERO
                } else {
                    self.stretched(self.device_time(&wr))
                };
                if !busy.is_zero() {
                    let (lane, _) = self.device_lane();
                    self.device_free[lane] = at.saturating_add(busy);
                    th.times.device_free = at.saturating_add(busy);
                }
                let d = match wr {
                    WorkRequest::Write { .. } => j(rng, p.pcie_read),
                    WorkRequest::Fence => Duration::ZERO,
                    WorkRequest::Read { .. }
                    | WorkRequest::CompareSwap { .. }
                    | WorkRequest::FetchAdd { .. } => {
                        j(rng, self.wire(me, n)).saturating_add(j(rng, p.nic))
                    }
                };
                th.times.pipe[n].push_back(at.saturating_add(d));
            }
            (Action::Nic(_, n, Step::Pipe(i)), Before::Pipe(kind)) => {
                let wire = self.wire(me, n);
                let pipe = &mut th.times.pipe[n];
                match kind {
                    Kind::Fence => {
                        pipe.remove(i);
                    }
                    Kind::Put => pipe[i] = at.saturating_add(j(rng, p.nic)),
                    Kind::Send => {
                        let land = sum(at, &[j(rng, wire), j(rng, p.nic)]);
                        th.times.br[n].push_back(land);
                        let ack = sum(at, &[j(rng, wire).saturating_mul(2), j(rng, p.nic)]);
                        pipe[i] = ack;
                    }
                    Kind::Ack => {
                        pipe.remove(i);
                        th.times.bl[n].push_back(at.saturating_add(j(rng, p.pcie_write)));
                    }
                    Kind::Get => {
                        self.inbound_free[n] = at.saturating_add(p.inbound_gap);
                        pipe[i] = sum(at, &[j(rng, wire), j(rng, p.read_response)]);
                    }
                    Kind::Load => {
                        pipe.remove(i);
                        let w = at.saturating_add(j(rng, p.pcie_write));
                        // The data, then its completion notice.
                        th.times.bl[n].push_back(w);
                        th.times.bl[n].push_back(w);
                    }
                    Kind::Rmw => {
                        self.inbound_free[n] = at.saturating_add(p.inbound_gap);
                        let done = at.saturating_add(j(rng, p.atomic));
                        let back = done.saturating_add(j(rng, wire));
                        // Succeeded: the atomic write stays at i, its response follows.
                        if matches!(th.qps[n].pipe.get(i), Some(Entry::Atomic { .. })) {
                            pipe[i] = done;
                            pipe.insert(i + 1, back);
                        } else {
                            pipe[i] = back;
                        }
                    }
                    Kind::Atomic => {
                        pipe.remove(i);
                        th.times.br[n].push_back(at);
                    }
                }
            }
            (Action::Nic(_, n, Step::CommitRemote), _) => {
                // Before the pop: `before` does not say whether it was atomic; the due time
                // already waited for the NIC when it was not.
                th.times.br[n].pop_front();
                self.inbound_free[n] = self.inbound_free[n].max(at.saturating_add(p.inbound_gap));
            }
            (Action::Nic(_, n, Step::CommitLocal(j)), _) => {
                th.times.bl[n].remove(j);
            }
            _ => th.times.reconcile(&th.sb, &th.qps),
        }
        debug_assert_eq!(th.times.sb.len(), th.sb.len(), "store buffer times");
        debug_assert!(
            th.qps
                .iter()
                .enumerate()
                .all(|(n, q)| th.times.pipe[n].len() == q.pipe.len()
                    && th.times.br[n].len() == q.br.len()
                    && th.times.bl[n].len() == q.bl.len()),
            "queue pair times"
        );
    }
}

impl State {
    /// Under a profile: takes every step due by `now`, in time order (ties in the order the
    /// steps are listed).
    fn advance(&mut self, fabric: &Fabric, now: Duration) {
        while let Some((a, at)) = self.next_step() {
            if at > now {
                break;
            }
            if let Some(tm) = self.timing.as_mut() {
                tm.now = at;
            }
            self.apply(fabric, a);
        }
        // Nothing else is due by `now`: the NIC's clock is the CPU's (what a CPU op enqueues
        // falls due from now on).
        if let Some(tm) = self.timing.as_mut() {
            if now != Duration::MAX {
                tm.now = tm.now.max(now);
            }
        }
    }

    /// The enabled step that falls due first, and when.
    fn next_step(&mut self) -> Option<(Action, Duration)> {
        self.earliest(|_, _| true)
    }

    /// Under a profile: the enabled step among those `keep` accepts that falls due first,
    /// and when (ties: the one whose item fell due first, then the first listed).
    fn earliest(
        &mut self,
        keep: impl Fn(&ThreadState, Action) -> bool,
    ) -> Option<(Action, Duration)> {
        self.timing.as_ref()?;
        let mut best: Option<(Action, (Duration, Duration))> = None;
        // Thread by thread, each one's actions weighed while its state is at hand (the same
        // order as `collect_actions`, so ties go the same way).
        for t in 0..self.threads.len() {
            self.actions.clear();
            self.collect_actions_of(t);
            let (Some(tm), Some(Some(th))) = (self.timing.as_ref(), self.threads.get(t)) else {
                continue;
            };
            for &a in &self.actions {
                if !keep(th, a) {
                    continue;
                }
                let key = tm.due_key(th, a);
                if best.is_none_or(|(_, b)| key < b) {
                    best = Some((a, key));
                }
            }
        }
        best.map(|(a, (at, _))| (a, at))
    }

    /// Under a profile: when thread `t`'s poll towards `n` can next succeed or the NIC next
    /// does anything, whichever is first (`None`: nothing is pending at all).
    fn next_event(&mut self, t: usize, n: usize) -> Option<Duration> {
        let step = self.next_step().map(|(_, at)| at);
        let th = self.threads[t].as_ref()?;
        let notice = match th.qps[n].bl.front() {
            Some(LocalItem::Notice(_)) => th.times.bl[n].front().copied(),
            _ => None,
        };
        match (step, notice) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Consumes the completion notice at the head of thread `t`'s queue pair towards `n`, if
    /// there is one (under a profile: one that has reached host memory by `now`).
    fn take_notice(&mut self, t: usize, n: usize, now: Duration) -> bool {
        let timed = self.timing.is_some();
        let th = self.thread(t);
        if timed {
            let arrived = matches!(th.qps[n].bl.front(), Some(LocalItem::Notice(_)))
                && th.times.bl[n].front().is_some_and(|&d| d <= now);
            if !arrived {
                return false;
            }
            th.times.bl[n].pop_front();
        }
        let took = th.qps[n].take_notice().is_some();
        th.refresh_busy();
        took
    }
}

/// The shared state of a `Chaos` cluster.
#[derive(Debug)]
pub(super) struct Chaos {
    fabric: Arc<Fabric>,
    state: Mutex<State>,
}

impl Chaos {
    pub(super) fn new(fabric: Arc<Fabric>, seed: u64) -> Self {
        let nodes = fabric.nodes();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let bias = std::array::from_fn(|_| BIASES[rng.random_range(0..BIASES.len())]);
        let p_idle = P_IDLE[rng.random_range(0..P_IDLE.len())];
        let p_more = P_MORE[rng.random_range(0..P_MORE.len())];
        Chaos {
            fabric,
            state: Mutex::new(State {
                rng,
                threads: Vec::new(),
                locks: vec![false; nodes],
                actions: Vec::new(),
                steps: Vec::new(),
                bias,
                p_idle,
                p_more,
                epoch: 0,
                dead: vec![false; nodes],
                stalled: vec![false; nodes],
                timing: None,
                explore: None,
            }),
        }
    }

    /// A cluster whose steps are timed by `profile` (see [`crate::sim::profile`]).
    pub(super) fn timed(fabric: Arc<Fabric>, seed: u64, profile: Profile) -> Self {
        let nodes = fabric.nodes();
        let c = Self::new(fabric, seed);
        // A user's value: at least one lane, and not more than a device could have.
        let lanes = profile.device_lanes.clamp(1, 1024);
        c.state.lock().timing = Some(Timing {
            profile,
            now: Duration::ZERO,
            inbound_free: vec![Duration::ZERO; nodes],
            outbound_free: vec![Duration::ZERO; nodes],
            device_free: vec![Duration::ZERO; lanes],
            spinners: Arc::default(),
        });
        c
    }

    /// Under a profile: the count of threads spinning on local memory, for the scheduler to
    /// keep.
    pub(super) fn spinners(&self) -> Option<Arc<std::sync::atomic::AtomicUsize>> {
        self.lock().timing.as_ref().map(|t| t.spinners.clone())
    }

    pub(super) fn open(this: &Arc<Chaos>, node: usize) -> ChaosNic {
        let nodes = this.fabric.nodes();
        let mut st = this.lock();
        let th = ThreadState {
            node,
            alive: true,
            sb: StoreBuffer::new(),
            qps: (0..nodes)
                .map(|n| {
                    Qp::new(NodeId(node as u16), NodeId(n as u16))
                        .with_failed_cas(this.fabric.failed_cas)
                })
                .collect(),
            busy: Vec::new(),
            steps: vec![None; nodes],
            times: if st.timing.is_some() {
                Times::new(nodes)
            } else {
                Times::default()
            },
        };
        let id = match st.threads.iter().position(Option::is_none) {
            Some(i) => {
                st.threads[i] = Some(th);
                i
            }
            None => {
                st.threads.push(Some(th));
                st.threads.len() - 1
            }
        };
        ChaosNic {
            chaos: this.clone(),
            id,
            node,
        }
    }

    /// Under a profile: when the next step that writes memory of `node` falls due (of any
    /// node, with `None`).
    pub(super) fn next_write_due(&self, node: Option<NodeId>) -> Option<Duration> {
        let mut st = self.lock();
        let Some(node) = node else {
            return st.next_step().map(|(_, at)| at);
        };
        let n = node.index();
        st.earliest(|th, a| match a {
            Action::Flush(_) => th.node == n && matches!(th.sb.front(), Some(SbItem::Store { .. })),
            Action::Nic(_, q, Step::CommitRemote) => q == n,
            Action::Nic(_, _, Step::CommitLocal(_)) => th.node == n,
            Action::Nic(_, _, Step::Pipe(_)) => false,
        })
        .map(|(_, at)| at)
    }

    /// Takes every choice from `explorer` from now on (exhaustive search).
    pub(super) fn explore_with(&self, explorer: Arc<Explorer>) {
        self.state.lock().explore = Some(explorer);
    }

    /// Takes every enabled step, first enabled first (no choice: exhaustive search's default
    /// at a spin loop's pause).
    pub(super) fn drain(&self) {
        let mut st = self.lock();
        // Each step moves an item on, so this ends; the bound is a guard only.
        for _ in 0..1_000_000 {
            st.collect_actions();
            let Some(&a) = st.actions.first() else { return };
            st.apply(&self.fabric, a);
        }
    }

    /// Applies the faults made since the last call (see `State::sync_faults`).
    pub(super) fn apply_faults(&self) {
        drop(self.lock());
    }

    /// The state, with the faults made since its last use applied.
    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        let mut st = self.state.lock();
        st.sync_faults(&self.fabric);
        st
    }

    pub(super) fn quiesce(&self, timeout: Duration) -> Result<()> {
        let deadline = deadline(timeout);
        let backoff = Backoff::new();
        loop {
            {
                let mut st = self.lock();
                let mut stepped = 0;
                while stepped < 64 && st.step(&self.fabric, false) {
                    stepped += 1;
                }
                // Nothing enabled: done, unless work is held back by a stall.
                if stepped < 64 && st.threads.iter().flatten().all(ThreadState::settled) {
                    return Ok(());
                }
            }
            self.fabric.check_open()?;
            if expired(deadline) {
                return Err(Error::Timeout {
                    what: TimeoutKind::Quiesce,
                    after: timeout,
                });
            }
            backoff.snooze();
        }
    }

    /// Runs `f` on the state after the call's random steps; maybe yields afterwards.
    fn call<T>(&self, f: impl FnOnce(&mut State, &Fabric) -> T) -> T {
        let (out, yield_now) = {
            let mut st = self.lock();
            st.churn(&self.fabric);
            let out = f(&mut st, &self.fabric);
            let y = st.explore.is_none() && st.rng.random_bool(P_YIELD);
            (out, y)
        };
        if yield_now && !crate::clock::simulated() {
            std::thread::yield_now();
        }
        out
    }
}

/// A thread's NIC under `Chaos`.
#[derive(Debug)]
pub(super) struct ChaosNic {
    chaos: Arc<Chaos>,
    id: usize,
    node: usize,
}

impl ChaosNic {
    /// Checks that the thread's node is alive and `word` is in its memory.
    fn word(&self, word: usize) -> Result<()> {
        self.chaos.fabric.check_alive(self.node)?;
        self.chaos.fabric.check_word(self.node, word)
    }
}

impl ThreadNic for ChaosNic {
    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        crate::sim::point(|| Op::Post {
            target,
            what: wr.kind(),
        });
        let (id, node) = (self.id, self.node);
        self.chaos.fabric.check_post(node, target, &wr)?;
        let busy = self.chaos.call(|st, fabric| -> Result<Option<Duration>> {
            // Again under the lock: a kill since the first check has been applied by now, and a
            // later one will discard this request.
            fabric.check_alive(node)?;
            fabric.check_alive(target.index())?;
            let busy = st.timing.as_ref().and_then(|tm| tm.on_cpu(&wr));
            // Tag 0: this NIC completes by poll order, not by tag.
            st.push_post(id, Post { target, wr, tag: 0 });
            Ok(busy)
        })?;
        // Soft-RoCE does the request's work inside the post: the thread keeps its CPU that long,
        // while the request's steps fall due from the post on.
        if let (Some(busy), Some(h)) = (busy, crate::sim::sched::current()) {
            h.device_work(busy);
        }
        Ok(())
    }

    fn poll(&mut self, target: NodeId, timeout: Duration) -> Result<()> {
        let (id, node) = (self.id, self.node);
        let t = self.chaos.fabric.check_node(target)?;
        let deadline = deadline(timeout);
        let chaos = &self.chaos;
        let backoff = Backoff::new();
        let mut first = true;
        loop {
            crate::sim::point(|| Op::Poll { target });
            // Under a profile: when to look again if this poll finds nothing.
            let mut again = None;
            {
                let mut st = chaos.lock();
                chaos.fabric.check_alive(node)?;
                let timed = st.timing.is_some();
                if first || timed {
                    st.churn(&chaos.fabric);
                    first = false;
                }
                let now = if timed { sim_now() } else { Duration::ZERO };
                // A poll keeps the NIC going until its notice is at the head of the buffer.
                let dead = st.dead[t];
                for _ in 0..64 {
                    if st.take_notice(id, t, now) {
                        return Ok(());
                    }
                    // Towards a dead node, only requests whose notice is already on its way
                    // complete; the others were discarded (they complete in error).
                    let qp = &st.thread(id).qps[t];
                    if dead && !qp.bl.iter().any(|i| matches!(i, LocalItem::Notice(_))) {
                        return chaos.fabric.check_alive(t);
                    }
                    if timed {
                        // Time moves only between scheduling points.
                        let idle = now.saturating_add(IDLE_POLL);
                        again = Some(st.next_event(id, t).unwrap_or(idle));
                        break;
                    }
                    if !st.step_own(&chaos.fabric, id, t) {
                        break;
                    }
                }
            }
            chaos.fabric.check_open()?;
            if expired(deadline) {
                return Err(Error::Timeout {
                    what: TimeoutKind::Poll(target),
                    after: timeout,
                });
            }
            if let Some(at) = again {
                crate::sim::idle_until(at);
            } else if !crate::clock::simulated() {
                backoff.snooze();
            }
        }
    }

    fn load(&mut self, word: usize) -> Result<u64> {
        crate::sim::point(|| Op::Load { word });
        self.word(word)?;
        let id = self.id;
        let v = self.chaos.call(|st, fabric| {
            let th = st.thread(id);
            th.sb.load(word, || fabric.read(th.node, word))
        });
        crate::sim::sched::note_value(v);
        Ok(v)
    }

    fn store(&mut self, word: usize, value: u64) -> Result<()> {
        crate::sim::point(|| Op::Store { word, value });
        self.word(word)?;
        let id = self.id;
        self.chaos.call(|st, _| st.push_store(id, word, value));
        Ok(())
    }

    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64> {
        crate::sim::point(|| Op::Cas {
            word,
            expected,
            new,
        });
        self.word(word)?;
        let (id, node) = (self.id, self.node);
        let v = self.chaos.call(|st, fabric| {
            st.flush_all(fabric, id);
            super::cpu_cas(fabric, node, word, expected, new)
        });
        crate::sim::sched::note_value(v);
        crate::sim::wake_spinners();
        Ok(v)
    }

    fn mfence(&mut self) -> Result<()> {
        crate::sim::point(|| Op::Mfence);
        self.chaos.fabric.check_alive(self.node)?;
        let id = self.id;
        self.chaos.call(|st, fabric| st.flush_all(fabric, id));
        crate::sim::wake_spinners();
        Ok(())
    }
}

impl Drop for ChaosNic {
    fn drop(&mut self) {
        let mut st = self.chaos.lock();
        // The NIC goes on while the thread does whatever comes after its last call.
        st.churn(&self.chaos.fabric);
        let timed = st.timing.is_some();
        let Some(th) = st.threads.get_mut(self.id).and_then(Option::as_mut) else {
            return;
        };
        th.alive = false;
        th.qps.iter_mut().for_each(Qp::drop_notices);
        th.refresh_busy();
        if timed {
            th.times.reconcile(&th.sb, &th.qps);
        }
        if th.settled() {
            st.threads[self.id] = None;
        }
    }
}
