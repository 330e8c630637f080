//! The soft NIC: an in-process NIC that executes the operational model of docs/model.md §4.
//!
//! Every node's registered memory is a block of real shared words; every thread gets queue pairs
//! and a completion queue. What differs between the three [`Schedule`]s is *when* the NIC does its
//! work, each time a behaviour the model allows:
//!
//! | schedule | who runs the NIC | what can be observed |
//! |---|---|---|
//! | [`Schedule::Immediate`] | the posting thread, at post time, in program order | only races between threads |
//! | [`Schedule::Threaded`] | one engine thread per node, concurrently with the program | the above, plus puts reading their source late |
//! | [`Schedule::Chaos`] | every thread, at every call, taking random enabled steps of the model | every weak behaviour of docs/model.md §3 |
//!
//! `Chaos` runs the rules of [`crate::model`] over the whole cluster (store buffers, queue-pair
//! pipes, remote and local write buffers, remote-atomic locks), choosing among enabled steps with a
//! seeded RNG; it is what makes the weak outcomes of the litmus tests observable.
//!
//! # Bad input
//! Nothing a caller passes makes the soft NIC panic, abort or hang: every word index (of a
//! [`WorkRequest`], a CPU access, a peek or poke) is checked against its node's memory
//! ([`Error::OutOfRange`]), unknown nodes are [`Error::UnknownNode`], memory that cannot be
//! allocated is an error of [`SoftBackend::try_new`] (at most [`MAX_SOFT_MEMORY`] in all,
//! allocated zeroed by the OS without being touched), an engine thread the OS refuses is an
//! error with its `io::Error` as source, and a timeout too large for the clock
//! ([`Duration::MAX`]) means "no deadline". The remote-atomic lock of `Immediate`/`Threaded` is
//! released even if a panic unwinds through an RMW.
//!
//! # Failures
//! [`Backend::kill`] (through [`Cluster::kill`](crate::Cluster::kill)) makes a node dead, as if
//! its process had been killed; the soft NIC detects it **immediately** (the next call of any
//! thread sees it) and nothing is recovered: a dead node stays dead.
//!
//! | what | after `kill(n)` |
//! |---|---|
//! | post towards `n` (put, get, rfence, RMW) | fails at once with [`Error::PeerDead`] naming `n`; nothing is posted |
//! | request towards `n` posted earlier, not executed yet | never executes; its poll (and so `wait`) fails with `PeerDead` (`Threaded`: the engine drops it; `Chaos`: it is discarded from the store buffer, pipe and remote write buffer) |
//! | request towards `n` already completed | its completion is delivered as usual (`Immediate` executes everything at post time, so only this case exists there) |
//! | any call of a thread on `n` (post, poll, load, store, cas, mfence), opening a context on `n`, peek/poke of `n` | fails with `PeerDead` naming `n` |
//! | an RMW of a thread on `n` holding another node's remote-atomic lock (`Chaos`) | discarded; the lock is released |
//! | `quiesce` | does not wait for work from or towards `n` |
//! | everything between live nodes | unchanged |
//!
//! This is what a real NIC does once it has given up on a peer (a request towards it completes
//! in error), except that the soft NIC knows at post time and says so there.
//!
//! [`Backend::restart`] (through [`Cluster::restart`](crate::Cluster::restart)) brings a dead
//! node back as a new incarnation ([`Backend::incarnation`] counts them from 1), as if its
//! process had been started again and had rejoined:
//!
//! | what | after `restart(n)` |
//! |---|---|
//! | `n`'s memory | zeroed: every value the dead incarnation held is gone (the cluster's allocations stay: the new process re-creates its objects in the same order) |
//! | work posted by or towards the dead incarnation and not executed | never executes (it was discarded at the kill, and requests carry the incarnations they were posted for) |
//! | contexts opened before the restart, on `n` | every call fails with [`Error::PeerDead`] naming `n` (they belonged to the dead process) |
//! | contexts opened before the restart, on other nodes | every post and poll towards `n` fails with `PeerDead` naming `n`, saying it restarted: their queue pairs led to the dead incarnation; towards other nodes they work |
//! | contexts opened after the restart | work with `n` as with any node |
//! | [`Cluster::check_alive`](crate::Cluster::check_alive) | `n` is alive again |
//!
//! After [`Backend::shutdown`], every poll, wait or quiesce that would block returns
//! [`Error::Shutdown`] promptly (completions already there are still delivered); the engine
//! threads of `Threaded` stop and are joined when the backend is dropped (an engine that
//! panicked is logged, not propagated: nothing panics in `Drop`).

#[cfg(feature = "tokio")]
pub(crate) mod channel;
mod chaos;
mod immediate;
mod threaded;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;

use super::{Backend, ThreadNic, WorkRequest};
use crate::mem::Words;
use crate::model::FailedCas;
use crate::{Error, NodeId, Result, WORD};

/// When the soft NIC executes posted work (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Schedule {
    /// Every operation executes completely at post time, in program order. Fastest; a valid
    /// behaviour of the model.
    #[default]
    Immediate,
    /// NIC engine threads (one per node) execute each queue pair's requests in order,
    /// concurrently with the program, as a real NIC does.
    Threaded,
    /// Adversarial: every reordering and delay the model allows (a put reading its source late, a
    /// get overtaken by a later put, a remote RMW split by a CPU store or a put, operations towards
    /// different nodes in any order, TSO store buffering), chosen by an RNG seeded with `seed`.
    ///
    /// The NIC's choices are a function of the seed and of the order in which threads call into
    /// it: a single-threaded program replays exactly; a multi-threaded one also depends on the
    /// OS's interleaving of its threads.
    Chaos {
        /// RNG seed.
        seed: u64,
    },
}

/// Most registered memory a soft cluster may have, over all its nodes: 1 TiB. The soft NIC's
/// memory is ordinary heap memory of this process; asking for more is a caller's mistake, refused
/// with [`Error::Backend`] before anything is allocated.
pub const MAX_SOFT_MEMORY: u64 = 1 << 40;

/// A deadline `timeout` from now, or `None` (no deadline) when it lies beyond what [`Instant`]
/// can represent: a caller that passes [`Duration::MAX`] asked to wait as long as needed.
pub(crate) fn deadline(timeout: Duration) -> Option<Instant> {
    crate::clock::now().checked_add(timeout)
}

/// Whether `deadline` has passed.
pub(crate) fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| crate::clock::now() >= d)
}

/// Registered memory of every node, shared by all NICs, with the nodes' fault state.
#[derive(Debug)]
pub(crate) struct Fabric {
    mem: Vec<Words>,
    /// Remote-atomic locks of the `Immediate` and `Threaded` NICs (Chaos keeps its own).
    rmw_locks: Vec<AtomicBool>,
    shutdown: AtomicBool,
    /// Per node: whether it is dead (fast path of [`Fabric::check_alive`]).
    dead: Vec<AtomicBool>,
    /// Per node: why it is dead (fault injection, [`Backend::kill`]), or `None`.
    reasons: Vec<parking_lot::Mutex<Option<String>>>,
    /// Per node: whether its NIC traffic is held back ([`SoftBackend::stall`]).
    stalled: Vec<AtomicBool>,
    /// Bumped on every change of `dead` or `stalled`, so that `Chaos` re-reads them only then.
    epoch: AtomicU64,
    /// Per node: its incarnation, from 1, bumped by [`Backend::restart`].
    incarnations: Vec<AtomicU64>,
    /// Restarts so far, over all nodes (contexts look at incarnations only when it moved).
    restarts: AtomicU64,
    /// What a failed remote CAS does ([`SoftBackend::with_failed_cas`]).
    failed_cas: FailedCas,
}

impl Fabric {
    /// `nodes` nodes of `words` zeroed words each, allocated fallibly (a size the machine cannot
    /// give is an error, not an abort). Pages are zeroed by the allocator, not touched here.
    fn new(nodes: usize, words: usize) -> Result<Self> {
        let total = u64::try_from(words)
            .ok()
            .and_then(|w| w.checked_mul(WORD))
            .and_then(|b| b.checked_mul(nodes as u64));
        match total {
            Some(t) if t <= MAX_SOFT_MEMORY => {}
            _ => {
                return Err(soft_error(format!(
                    "{nodes} nodes of {words} words is more registered memory than the soft NIC \
                     allows ({MAX_SOFT_MEMORY} bytes in all)"
                )))
            }
        }
        let mut mem = Vec::new();
        mem.try_reserve_exact(nodes)
            .map_err(|e| soft_error(format!("cannot allocate {nodes} nodes: {e}")))?;
        for _ in 0..nodes {
            mem.push(Words::zeroed(words).map_err(|_| {
                soft_error(format!(
                    "cannot allocate {words} words of registered memory per node"
                ))
            })?);
        }
        Ok(Fabric {
            mem,
            rmw_locks: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
            dead: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            reasons: (0..nodes).map(|_| parking_lot::Mutex::new(None)).collect(),
            stalled: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            epoch: AtomicU64::new(0),
            incarnations: (0..nodes).map(|_| AtomicU64::new(1)).collect(),
            restarts: AtomicU64::new(0),
            failed_cas: FailedCas::Reads,
        })
    }

    fn nodes(&self) -> usize {
        self.mem.len()
    }

    fn words(&self, node: usize) -> usize {
        self.mem.get(node).map_or(0, Words::len)
    }

    fn read(&self, node: usize, word: usize) -> u64 {
        self.mem[node].as_slice()[word].load(SeqCst)
    }

    fn write(&self, node: usize, word: usize, v: u64) {
        self.mem[node].as_slice()[word].store(v, SeqCst)
    }

    fn check_open(&self) -> Result<()> {
        if self.shutdown.load(SeqCst) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    fn is_shut_down(&self) -> bool {
        self.shutdown.load(SeqCst)
    }

    /// The node's index, or [`Error::UnknownNode`].
    fn check_node(&self, node: NodeId) -> Result<usize> {
        if node.index() < self.nodes() {
            Ok(node.index())
        } else {
            Err(Error::UnknownNode {
                node,
                nodes: self.nodes(),
            })
        }
    }

    /// Checks that `word` lies in `node`'s memory (a node index already checked).
    fn check_word(&self, node: usize, word: usize) -> Result<()> {
        WorkRequest::check_range(NodeId(node as u16), word, 1, self.words(node))
    }

    fn is_dead(&self, node: usize) -> bool {
        self.dead.get(node).is_some_and(|d| d.load(SeqCst))
    }

    /// The node's current incarnation (0 for an unknown node).
    fn incarnation(&self, node: usize) -> u64 {
        self.incarnations.get(node).map_or(0, |i| i.load(SeqCst))
    }

    fn is_stalled(&self, node: usize) -> bool {
        self.stalled.get(node).is_some_and(|d| d.load(SeqCst))
    }

    /// [`Error::PeerDead`] naming `node` if it was killed.
    fn check_alive(&self, node: usize) -> Result<()> {
        if !self.is_dead(node) {
            return Ok(());
        }
        let reason = self.reasons[node]
            .lock()
            .clone()
            .unwrap_or_else(|| "killed".to_owned());
        Err(Error::PeerDead {
            node: NodeId(node as u16),
            reason,
        })
    }

    /// What every post checks: the cluster is open, both ends are alive, the target exists and
    /// every word range of `wr` lies in the memory of its node.
    fn check_post(&self, from: usize, target: NodeId, wr: &WorkRequest) -> Result<usize> {
        self.check_open()?;
        self.check_alive(from)?;
        let to = self.check_node(target)?;
        wr.check_ranges(
            NodeId(from as u16),
            self.words(from),
            target,
            self.words(to),
        )?;
        self.check_alive(to)?;
        Ok(to)
    }

    /// Executes `wr` from `from` towards `to` completely, each phase in order (one valid schedule
    /// of the model). Remote RMWs hold `to`'s remote-atomic lock between their read and their
    /// write, and nothing else takes it: CPU stores and puts may still land in between (docs/model.md §3.4).
    /// The request's ranges were checked at post time.
    fn execute(&self, from: usize, to: usize, wr: WorkRequest) {
        match wr {
            WorkRequest::Write {
                local,
                remote,
                words,
            } => {
                for k in 0..words {
                    self.write(to, remote + k, self.read(from, local + k));
                }
            }
            WorkRequest::Read {
                local,
                remote,
                words,
            } => {
                for k in 0..words {
                    self.write(from, local + k, self.read(to, remote + k));
                }
            }
            WorkRequest::CompareSwap {
                remote,
                expected,
                new,
                local,
            } => {
                let back = self.failed_cas == FailedCas::WritesBack;
                let old = self.rmw(to, remote, |old| {
                    if old == expected {
                        Some(new)
                    } else {
                        back.then_some(old) // rxe: the value read is written back
                    }
                });
                self.write(from, local, old);
            }
            WorkRequest::FetchAdd { remote, add, local } => {
                let old = self.rmw(to, remote, |old| Some(old.wrapping_add(add)));
                self.write(from, local, old);
            }
            WorkRequest::Fence => {}
        }
    }

    fn rmw(&self, node: usize, word: usize, f: impl FnOnce(u64) -> Option<u64>) -> u64 {
        /// Releases the remote-atomic lock when dropped, also while unwinding: a panic between
        /// the read and the write must not leave the lock taken and every later RMW spinning.
        struct Unlock<'a>(&'a AtomicBool);
        impl Drop for Unlock<'_> {
            fn drop(&mut self) {
                self.0.store(false, SeqCst);
            }
        }
        let lock = &self.rmw_locks[node];
        let backoff = Backoff::new();
        while lock
            .compare_exchange_weak(false, true, SeqCst, SeqCst)
            .is_err()
        {
            backoff.snooze();
        }
        let _unlock = Unlock(lock);
        let old = self.read(node, word);
        if let Some(new) = f(old) {
            self.write(node, word, new);
        }
        old
    }
}

fn soft_error(message: String) -> Error {
    Error::Backend {
        backend: "soft",
        message,
        source: None,
    }
}

/// The soft NIC backend (the default). Build it through
/// [`ClusterBuilder::soft`](crate::ClusterBuilder::soft).
#[derive(Debug)]
pub struct SoftBackend {
    fabric: Arc<Fabric>,
    engine: Engine,
}

#[derive(Debug)]
enum Engine {
    Immediate,
    Threaded(threaded::Engines),
    Chaos(Arc<chaos::Chaos>),
}

impl SoftBackend {
    /// A soft cluster of `nodes` nodes with `words` words of registered memory each.
    ///
    /// # Panics
    /// If the memory cannot be allocated or an engine thread cannot be started; use
    /// [`SoftBackend::try_new`] (what [`ClusterBuilder::build`](crate::ClusterBuilder::build)
    /// does) to get these as errors.
    pub fn new(nodes: usize, words: usize, schedule: Schedule) -> Self {
        match Self::try_new(nodes, words, schedule) {
            Ok(b) => b,
            Err(e) => panic!("soft NIC: {e}"),
        }
    }

    /// A soft cluster of `nodes` nodes with `words` words of registered memory each.
    ///
    /// Fails with [`Error::Backend`] when `nodes` is not in `1..=65535`, when the memory cannot
    /// be allocated (more than
    /// [`MAX_SOFT_MEMORY`] in all, or more than the machine gives: nothing is touched before the
    /// allocation succeeds), and, under [`Schedule::Threaded`], when an engine thread cannot be
    /// started (the OS error is the source; the engines already started are stopped).
    pub fn try_new(nodes: usize, words: usize, schedule: Schedule) -> Result<Self> {
        Self::with_failed_cas(nodes, words, schedule, FailedCas::Reads)
    }

    /// As [`SoftBackend::try_new`], with failed remote CASes behaving as `failed_cas` says: the
    /// model's rule 9, or rxe's write-back ([`FailedCas::WritesBack`], docs/verbs-notes.md
    /// pitfall 9), to test code that must also be right on Soft-RoCE. [`Schedule::Chaos`] (and
    /// the simulator) can then lose a put or a store to a failing CAS, as rxe can;
    /// [`Schedule::Threaded`] writes the value back too, racing the CPU's stores;
    /// [`Schedule::Immediate`] executes each CAS at once, where the two cannot be told apart.
    pub fn with_failed_cas(
        nodes: usize,
        words: usize,
        schedule: Schedule,
        failed_cas: FailedCas,
    ) -> Result<Self> {
        if nodes == 0 || nodes > u16::MAX as usize {
            return Err(Error::Backend {
                backend: "soft",
                message: format!("a cluster needs 1..=65535 nodes, not {nodes}"),
                source: None,
            });
        }
        let mut fabric = Fabric::new(nodes, words)?;
        fabric.failed_cas = failed_cas;
        let fabric = Arc::new(fabric);
        let engine = match schedule {
            Schedule::Immediate => Engine::Immediate,
            Schedule::Threaded => Engine::Threaded(threaded::Engines::start(&fabric)?),
            Schedule::Chaos { seed } => {
                Engine::Chaos(Arc::new(chaos::Chaos::new(fabric.clone(), seed)))
            }
        };
        Ok(SoftBackend { fabric, engine })
    }

    /// Under a profile: when the NIC next takes a step that writes memory of `node` (of any
    /// node with `None`; `None`: nothing pending, or untimed).
    pub(crate) fn next_write_due(&self, node: Option<NodeId>) -> Option<Duration> {
        match &self.engine {
            Engine::Chaos(c) => c.next_write_due(node),
            _ => None,
        }
    }

    /// Under a profile: the count of threads spinning on local memory the device model reads
    /// ([`crate::sim::Profile::spin_share`]), kept by the simulator's scheduler.
    pub(crate) fn spinners(&self) -> Option<Arc<std::sync::atomic::AtomicUsize>> {
        match &self.engine {
            Engine::Chaos(c) => c.spinners(),
            _ => None,
        }
    }

    /// A `Chaos`-like cluster whose NIC steps are timed by `profile` and taken in the order they
    /// fall due ([`crate::sim::Profile`]); only for simulated runs, whose clock it reads.
    pub(crate) fn timed(
        nodes: usize,
        words: usize,
        seed: u64,
        profile: crate::sim::Profile,
        failed_cas: FailedCas,
    ) -> Result<Self> {
        let mut b = Self::with_failed_cas(nodes, words, Schedule::Chaos { seed }, failed_cas)?;
        b.engine = Engine::Chaos(Arc::new(chaos::Chaos::timed(
            b.fabric.clone(),
            seed,
            profile,
        )));
        Ok(b)
    }

    /// A `Chaos` cluster whose every choice comes from an exhaustive search's `explorer`
    /// ([`crate::sim::Strategy::Exhaustive`]); only for simulated runs.
    pub(crate) fn explored(
        nodes: usize,
        words: usize,
        explorer: Arc<crate::sim::explore::Explorer>,
        failed_cas: FailedCas,
    ) -> Result<Self> {
        let b = Self::with_failed_cas(nodes, words, Schedule::Chaos { seed: 0 }, failed_cas)?;
        if let Engine::Chaos(c) = &b.engine {
            c.explore_with(explorer);
        }
        Ok(b)
    }

    /// Under exhaustive search: the NIC takes every enabled step (a spin loop's pause).
    pub(crate) fn drain(&self) {
        if let Engine::Chaos(c) = &self.engine {
            c.drain();
        }
    }

    /// Fault injection for tests: while `stalled`, the NIC traffic from and to `node` is held
    /// back, as by a network partition that no failure detector has noticed yet. Requests are
    /// accepted but not executed, and polls for them block (until their timeout, a
    /// [`Backend::kill`] of the node, which fails them, or the end of the stall). Only the
    /// asynchronous schedules ([`Schedule::Threaded`] and [`Schedule::Chaos`]) honour it:
    /// [`Schedule::Immediate`] executes every request at post time.
    #[doc(hidden)]
    pub fn stall(&self, node: NodeId, stalled: bool) -> Result<()> {
        let n = self.fabric.check_node(node)?;
        self.fabric.stalled[n].store(stalled, SeqCst);
        self.fabric.epoch.fetch_add(1, SeqCst);
        Ok(())
    }
}

impl Backend for SoftBackend {
    fn name(&self) -> &'static str {
        "soft"
    }

    fn nodes(&self) -> usize {
        self.fabric.nodes()
    }

    fn words(&self, node: NodeId) -> usize {
        self.fabric.words(node.index())
    }

    fn open(&self, node: NodeId) -> Result<Box<dyn ThreadNic>> {
        self.fabric.check_open()?;
        let n = self.fabric.check_node(node)?;
        self.fabric.check_alive(n)?;
        let restarts = self.fabric.restarts.load(SeqCst);
        let incarnations = (0..self.fabric.nodes())
            .map(|i| self.fabric.incarnation(i))
            .collect();
        let inner: Box<dyn ThreadNic> = match &self.engine {
            Engine::Immediate => Box::new(immediate::ImmediateNic::open(&self.fabric, n)),
            Engine::Threaded(e) => Box::new(e.open(&self.fabric, n)?),
            Engine::Chaos(c) => Box::new(chaos::Chaos::open(c, n)),
        };
        Ok(Box::new(Incarnated {
            inner,
            fabric: self.fabric.clone(),
            home: n,
            restarts,
            incarnations,
        }))
    }

    fn quiesce(&self, timeout: Duration) -> Result<()> {
        match &self.engine {
            Engine::Immediate => Ok(()),
            Engine::Threaded(e) => e.quiesce(&self.fabric, timeout),
            Engine::Chaos(c) => c.quiesce(timeout),
        }
    }

    fn peek(&self, node: NodeId, word: usize) -> Result<u64> {
        let n = self.fabric.check_node(node)?;
        self.fabric.check_word(n, word)?;
        self.fabric.check_alive(n)?;
        Ok(self.fabric.read(n, word))
    }

    fn poke(&self, node: NodeId, word: usize, value: u64) -> Result<()> {
        let n = self.fabric.check_node(node)?;
        self.fabric.check_word(n, word)?;
        self.fabric.check_alive(n)?;
        self.fabric.write(n, word, value);
        Ok(())
    }

    fn dead(&self, node: NodeId) -> Option<String> {
        self.fabric
            .check_alive(node.index())
            .err()
            .map(|e| match e {
                Error::PeerDead { reason, .. } => reason,
                other => other.to_string(),
            })
    }

    fn incarnation(&self, node: NodeId) -> u64 {
        self.fabric.incarnation(node.index())
    }

    /// Brings dead `node` back (see the [module docs](self)). Fails with [`Error::Backend`] if
    /// it is not dead (kill it first).
    fn restart(&self, node: NodeId) -> Result<()> {
        let n = self.fabric.check_node(node)?;
        if !self.fabric.is_dead(n) {
            return Err(soft_error(format!(
                "cannot restart {node}: it is alive (kill it first)"
            )));
        }
        // While it is still dead: the work of and towards the dead incarnation is discarded
        // (Chaos applies the kill now; Threaded and Immediate requests carry incarnations).
        if let Engine::Chaos(c) = &self.engine {
            c.apply_faults();
        }
        for w in self.fabric.mem[n].as_slice() {
            w.store(0, SeqCst);
        }
        self.fabric.rmw_locks[n].store(false, SeqCst);
        let inc = self.fabric.incarnations[n].fetch_add(1, SeqCst) + 1;
        self.fabric.restarts.fetch_add(1, SeqCst);
        *self.fabric.reasons[n].lock() = None;
        self.fabric.dead[n].store(false, SeqCst);
        self.fabric.epoch.fetch_add(1, SeqCst);
        tracing::debug!(target: "loco::rdmawait", %node, incarnation = inc, "soft NIC: node restarted");
        Ok(())
    }

    fn kill(&self, node: NodeId) -> Result<()> {
        let n = self.fabric.check_node(node)?;
        self.fabric.reasons[n]
            .lock()
            .get_or_insert_with(|| "killed by fault injection".to_owned());
        self.fabric.dead[n].store(true, SeqCst);
        self.fabric.epoch.fetch_add(1, SeqCst);
        tracing::debug!(target: "loco::rdmawait", %node, "soft NIC: node dead");
        Ok(())
    }

    fn shutdown(&self) {
        self.fabric.shutdown.store(true, SeqCst);
        if let Engine::Threaded(e) = &self.engine {
            e.stop();
        }
    }
}

impl Drop for SoftBackend {
    fn drop(&mut self) {
        self.shutdown();
        if let Engine::Threaded(e) = &mut self.engine {
            e.join();
        }
    }
}

/// Longest slice of a poll between two looks at the incarnations ([`Incarnated::poll`]).
const POLL_SLICE: Duration = Duration::from_millis(20);

/// A thread NIC bound to the incarnations it was opened with: once its own node restarted,
/// every call fails (it belonged to the dead process); once a target restarted, posts and polls
/// towards it fail (its queue pair led to the dead incarnation). Costs one atomic load per call
/// while nothing ever restarted.
#[derive(Debug)]
struct Incarnated {
    inner: Box<dyn ThreadNic>,
    fabric: Arc<Fabric>,
    home: usize,
    /// `Fabric::restarts` at open.
    restarts: u64,
    /// Every node's incarnation at open.
    incarnations: Vec<u64>,
}

impl Incarnated {
    /// `PeerDead` naming `node` if it is no longer the incarnation this NIC was opened with.
    fn check(&self, node: usize) -> Result<()> {
        if self.fabric.restarts.load(SeqCst) == self.restarts {
            return Ok(());
        }
        let (then, now) = (self.incarnations[node], self.fabric.incarnation(node));
        if then == now {
            return Ok(());
        }
        let id = NodeId(node as u16);
        let reason = if node == self.home {
            format!(
                "this context belongs to incarnation {then} of {id}, which was killed; {id} \
                 restarted as incarnation {now}"
            )
        } else {
            format!(
                "{id} restarted: its incarnation {then}, which this context's queue pair led \
                 to, died, and incarnation {now} came back with fresh memory; open a new context \
                 to reach it (Cluster::incarnation)"
            )
        };
        Err(Error::PeerDead { node: id, reason })
    }

    fn check_target(&self, target: NodeId) -> Result<()> {
        self.check(self.home)?;
        if target.index() < self.incarnations.len() {
            self.check(target.index())?;
        }
        Ok(())
    }
}

impl ThreadNic for Incarnated {
    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        self.check_target(target)?;
        self.inner.post(target, wr)
    }

    /// Polls in slices, checking the incarnations between them: a poll blocked on a request
    /// of a node that dies and restarts meanwhile fails instead of waiting for a completion
    /// that the new incarnation will never give.
    fn poll(&mut self, target: NodeId, timeout: Duration) -> Result<()> {
        let end = deadline(timeout);
        loop {
            self.check_target(target)?;
            // No deadline (`Duration::MAX`): as long as needed.
            let left = end.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(crate::clock::now())
            });
            match self.inner.poll(target, left.min(POLL_SLICE)) {
                // A timed-out poll consumed nothing: try again, unless the caller's time is up.
                Err(Error::Timeout { .. }) if left > POLL_SLICE => {}
                Err(Error::Timeout { what, .. }) => {
                    return Err(Error::Timeout {
                        what,
                        after: timeout,
                    })
                }
                r => return r,
            }
        }
    }

    fn load(&mut self, word: usize) -> Result<u64> {
        self.check(self.home)?;
        self.inner.load(word)
    }

    fn store(&mut self, word: usize, value: u64) -> Result<()> {
        self.check(self.home)?;
        self.inner.store(word, value)
    }

    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64> {
        self.check(self.home)?;
        self.inner.cas(word, expected, new)
    }

    fn mfence(&mut self) -> Result<()> {
        self.check(self.home)?;
        self.inner.mfence()
    }

    #[cfg(feature = "tokio")]
    fn completion_events(&self) -> Option<std::sync::Arc<dyn crate::backend::CompletionEvents>> {
        self.inner.completion_events()
    }
}

/// The CPU of a thread on `node` under `Immediate` and `Threaded`: accesses go straight to
/// memory (sequentially consistent, a valid behaviour of x86-TSO; only `Chaos` models the store
/// buffer).
#[derive(Debug)]
struct DirectCpu {
    fabric: Arc<Fabric>,
    node: usize,
}

impl DirectCpu {
    /// [`Error::PeerDead`] once the thread's own node was killed: its process is gone.
    fn alive(&self) -> Result<()> {
        self.fabric.check_alive(self.node)
    }

    /// Checks that the thread's node is alive and `word` is in its memory.
    fn word(&self, word: usize) -> Result<()> {
        self.alive()?;
        self.fabric.check_word(self.node, word)
    }

    fn load(&self, word: usize) -> Result<u64> {
        self.word(word)?;
        Ok(self.fabric.read(self.node, word))
    }

    fn store(&self, word: usize, value: u64) -> Result<()> {
        self.word(word)?;
        self.fabric.write(self.node, word, value);
        Ok(())
    }

    /// Atomic on memory; ignores the remote-atomic lock (docs/model.md §4).
    fn cas(&self, word: usize, expected: u64, new: u64) -> Result<u64> {
        self.word(word)?;
        Ok(cpu_cas(&self.fabric, self.node, word, expected, new))
    }

    fn mfence(&self) -> Result<()> {
        self.alive()?;
        std::sync::atomic::fence(SeqCst);
        Ok(())
    }
}

/// CPU compare-and-swap on a word already checked.
fn cpu_cas(fabric: &Fabric, node: usize, word: usize, expected: u64, new: u64) -> u64 {
    match fabric.mem[node].as_slice()[word].compare_exchange(expected, new, SeqCst, SeqCst) {
        Ok(v) | Err(v) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_an_rmw_releases_the_remote_atomic_lock() {
        let f = Fabric::new(1, 4).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f.rmw(0, 1, |_| panic!("inside the remote-atomic lock"))
        }));
        assert!(r.is_err());
        assert!(!f.rmw_locks[0].load(SeqCst), "the lock was released");
        assert_eq!(f.rmw(0, 1, |v| Some(v + 5)), 0);
        assert_eq!(f.read(0, 1), 5);
    }

    #[test]
    fn memory_sizes_are_checked_before_allocation() {
        assert!(Fabric::new(2, 0).is_ok());
        assert!(Fabric::new(1, usize::MAX).is_err());
        assert!(Fabric::new(usize::MAX, 1).is_err());
        let too_big = (MAX_SOFT_MEMORY / WORD) as usize + 1;
        assert!(Fabric::new(1, too_big).is_err());
    }

    #[test]
    fn huge_timeouts_mean_no_deadline() {
        assert_eq!(deadline(Duration::MAX), None);
        assert!(!expired(None));
        assert!(expired(deadline(Duration::ZERO)));
    }
}
