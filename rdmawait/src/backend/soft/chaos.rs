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

use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::Backoff;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{deadline, expired, Fabric};
use crate::backend::{ThreadNic, WorkRequest};
use crate::error::TimeoutKind;
use crate::model::{ClusterMemory, Entry, LocalItem, Post, Qp, Step, StoreBuffer};
use crate::sim::sched::Op;
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
}

impl ThreadState {
    fn settled(&self) -> bool {
        self.sb.is_empty() && self.qps.iter().all(Qp::is_settled)
    }
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
    /// node is discarded, and so is every request towards a dead node that has not reached it
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
                    if holds_lock(qp) {
                        locks[qp.remote_node.index()] = false;
                    }
                    *qp = Qp::new(qp.local_node, qp.remote_node);
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
            if !th.alive && th.settled() {
                *slot = None;
            }
        }
    }

    fn collect_actions(&mut self) {
        self.actions.clear();
        for (t, th) in self.threads.iter().enumerate() {
            let Some(th) = th else { continue };
            if !th.sb.is_empty() {
                self.actions.push(Action::Flush(t));
            }
            for (n, qp) in th.qps.iter().enumerate() {
                if self.stalled[th.node] || self.stalled[n] {
                    continue;
                }
                self.steps.clear();
                qp.steps(&self.locks, &mut self.steps);
                self.actions
                    .extend(self.steps.iter().map(|&s| Action::Nic(t, n, s)));
            }
        }
    }

    fn apply(&mut self, fabric: &Fabric, a: Action) {
        match a {
            Action::Flush(t) => self.flush_one(fabric, t),
            Action::Nic(t, n, s) => {
                let th = self.threads[t].as_mut().expect("action of a live slot");
                th.qps[n].apply(s, &mut Mem(fabric), &mut self.locks);
                if !th.alive {
                    th.qps[n].drop_notices();
                    if th.settled() {
                        self.threads[t] = None;
                    }
                }
            }
        }
    }

    /// Moves the head of thread `t`'s store buffer to memory (a store) or to its queue pair's
    /// pipe (a remote op).
    fn flush_one(&mut self, fabric: &Fabric, t: usize) {
        let th = self.threads[t].as_mut().expect("flush of a live slot");
        let node = th.node;
        th.sb
            .flush(&mut th.qps, |word, value| fabric.write(node, word, value));
        if !th.alive && th.settled() {
            self.threads[t] = None;
        }
    }

    fn flush_all(&mut self, fabric: &Fabric, t: usize) {
        while self.threads[t].as_ref().is_some_and(|th| !th.sb.is_empty()) {
            self.flush_one(fabric, t);
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
    /// of thread `only` if it has any. With `idle`, doing nothing competes with weight
    /// [`IDLE_WEIGHT`] (None), so that a lone starved action still tends to stay pending.
    fn pick(&mut self, only: Option<usize>, idle: bool) -> Option<Action> {
        self.collect_actions();
        let owner = |a: &Action| match *a {
            Action::Flush(u) | Action::Nic(u, _, _) => u,
        };
        let mine = |a: &Action| only.is_none_or(|t| owner(a) == t);
        let restrict = only.is_some() && self.actions.iter().any(mine);
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
    /// it has none, one random enabled step anywhere; false if none is enabled at all.
    ///
    /// Blocking calls step this way: a real NIC works on the polled queue pair without also
    /// finishing everyone else's work, and stepping the whole cluster at every poll made the other
    /// threads' pending operations land so fast that allowed outcomes needing them to stay
    /// pending (e.g. the other-node variant of Fig. 8f) were practically never seen.
    fn step_own(&mut self, fabric: &Fabric, t: usize) -> bool {
        match self.pick(Some(t), false) {
            Some(a) => {
                self.apply(fabric, a);
                true
            }
            None => false,
        }
    }

    /// The random steps taken at each call.
    fn churn(&mut self, fabric: &Fabric) {
        if self.rng.random_bool(self.p_idle) {
            return;
        }
        while self.step(fabric, true) && self.rng.random_bool(self.p_more) {}
    }

    fn thread(&mut self, t: usize) -> &mut ThreadState {
        self.threads[t].as_mut().expect("a live NIC's slot")
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
            }),
        }
    }

    pub(super) fn open(this: &Arc<Chaos>, node: usize) -> ChaosNic {
        let nodes = this.fabric.nodes();
        let mut st = this.lock();
        let th = ThreadState {
            node,
            alive: true,
            sb: StoreBuffer::new(),
            qps: (0..nodes)
                .map(|n| Qp::new(NodeId(node as u16), NodeId(n as u16)))
                .collect(),
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
            let y = st.rng.random_bool(P_YIELD);
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
        self.chaos.call(|st, fabric| {
            // Again under the lock: a kill since the first check has been applied by now, and a
            // later one will discard this request.
            fabric.check_alive(node)?;
            fabric.check_alive(target.index())?;
            // Tag 0: this NIC completes by poll order, not by tag.
            st.thread(id).sb.post(Post { target, wr, tag: 0 });
            Ok(())
        })
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
            {
                let mut st = chaos.lock();
                chaos.fabric.check_alive(node)?;
                if first {
                    st.churn(&chaos.fabric);
                    first = false;
                }
                // A poll keeps the NIC going until its notice is at the head of the buffer.
                let dead = st.dead[t];
                for _ in 0..64 {
                    let qp = &mut st.thread(id).qps[t];
                    if qp.take_notice().is_some() {
                        return Ok(());
                    }
                    // Towards a dead node, only requests whose notice is already on its way
                    // complete; the others were discarded (they complete in error).
                    if dead && !qp.bl.iter().any(|i| matches!(i, LocalItem::Notice(_))) {
                        return chaos.fabric.check_alive(t);
                    }
                    if !st.step_own(&chaos.fabric, id) {
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
            if !crate::clock::simulated() {
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
        self.chaos.call(|st, _| st.thread(id).sb.store(word, value));
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
        Ok(v)
    }

    fn mfence(&mut self) -> Result<()> {
        crate::sim::point(|| Op::Mfence);
        self.chaos.fabric.check_alive(self.node)?;
        let id = self.id;
        self.chaos.call(|st, fabric| st.flush_all(fabric, id));
        Ok(())
    }
}

impl Drop for ChaosNic {
    fn drop(&mut self) {
        let mut st = self.chaos.lock();
        // The NIC goes on while the thread does whatever comes after its last call.
        st.churn(&self.chaos.fabric);
        let Some(th) = st.threads.get_mut(self.id).and_then(Option::as_mut) else {
            return;
        };
        th.alive = false;
        th.qps.iter_mut().for_each(Qp::drop_notices);
        if th.settled() {
            st.threads[self.id] = None;
        }
    }
}
