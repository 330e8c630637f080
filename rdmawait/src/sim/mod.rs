//! Deterministic simulation: users' own multi-threaded RDMA code, run under a seeded scheduler
//! on the soft NIC's model, with virtual time. A failing run is reported with its seed and a
//! trace, and [`replay_failure`] (or [`replay`] with the same config) runs exactly that schedule
//! again.
//!
//! ```
//! use loco_rdmawait::sim::{self, Config};
//! use loco_rdmawait::{Cluster, NodeId, WorkId};
//!
//! let report = sim::check(Config::new(2).runs(20), |cluster: &Cluster| {
//!     let x = cluster.alloc_word(NodeId(1))?;
//!     let one = cluster.alloc_word(NodeId(0))?;
//!     let writer = sim::spawn(cluster, NodeId(0), move |ctx| {
//!         ctx.store(&one, 1)?;
//!         ctx.put(&x, &one, WorkId::new(1))?;
//!         ctx.wait(WorkId::new(1))
//!     });
//!     writer.join()?;
//!     Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! });
//! assert_eq!(report.unwrap().runs, 20);
//! ```
//!
//! # What a run is
//! [`check`] runs the closure once per run, each time on a fresh soft cluster (schedule
//! [`Chaos`](crate::Schedule::Chaos), so every weak behaviour of the model can happen), from a
//! seed derived from the base seed and the run's number. The closure runs as simulated thread
//! t0 ("main"); [`spawn`] starts more, each with a context on its node. **One simulated thread
//! runs at a time.** Every operation of a context (load, store, cas, mfence, each post, each
//! poll, so each wait) is a scheduling point, where the strategy picks the thread that goes
//! next; the NIC's steps are taken by those calls, from the same seed. The same seed therefore
//! gives the same execution, bit for bit, whatever the host's load or core count (a test checks
//! the trace hashes).
//!
//! **Simulated threads are coroutines**, each with a stack of its own, all on one OS thread per
//! run: handing over to another costs tens of nanoseconds, so a run makes one to five million
//! scheduling points per second of host time (`cargo bench --bench sim`). Code under test sees
//! one difference from OS threads: `thread_local!` values and `std::thread::current()` are
//! shared by a run's simulated threads. Blocking outside the simulator (a lock held across a
//! context operation by another simulated thread, a sleep, I/O) blocks the whole run, which
//! the watchdog then reports ([`FailureKind::Hang`]).
//!
//! **Virtual time.** Each step takes [`Config::step_time`] of simulated time; timeouts,
//! deadlines and back-offs of every layer read this clock ([`crate::clock`]) on simulated
//! threads, so a lock that gives up after its timeout does so at the same step every time. A
//! sleep lets virtual time pass: the thread goes on no earlier than its sleep's end, and the
//! sleeps of several threads overlap rather than add up. With [`Config::profile`], each
//! operation and NIC step costs what the network profile says instead (docs/simulation.md).
//!
//! **Strategies** ([`Strategy`]): uniform random choice at every point, PCT (probabilistic
//! concurrency testing: random thread priorities, `depth - 1` random points where the running
//! thread drops to the lowest priority; a spin loop's pause also drops it, so that a spinning
//! thread lets the one it waits for run), or bounded exhaustive search (every schedule within a
//! number of deviations from a default schedule, each run once, depth first, as loom does; the
//! [`Report::search`] says whether the bound cut the search).
//!
//! ```
//! use loco_rdmawait::sim::{self, Config, Search, Strategy};
//! use loco_rdmawait::{Cluster, Ctx, NodeId, WorkId};
//!
//! let config = Config::new(2).strategy(Strategy::Exhaustive { max_delays: 2 }).runs(10_000);
//! let report = sim::check(config, |cluster: &Cluster| {
//!     let x = cluster.alloc_word(NodeId(1))?;
//!     let one = cluster.alloc_word(NodeId(0))?;
//!     let w = sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
//!         ctx.store(&one, 1)?;
//!         ctx.put(&x, &one, WorkId::new(1))?;
//!         ctx.wait(WorkId::new(1))
//!     });
//!     w.join()?;
//!     Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! })
//! .unwrap();
//! assert!(matches!(report.search, Search::Complete | Search::DelayBound { .. }));
//! println!("{} runs: {}", report.runs, report.search);
//! ```
//!
//! **Faults** ([`Config::fault`], [`Fault`]): a node crashes, or is cut off for a number of
//! steps, at a given step or at one drawn from the run's seed; the code under test sees the
//! errors a real cluster would give (`PeerDead`, waits that time out).
//!
//! **Failures**: a panic in any simulated thread, an error returned by the closure or by a
//! spawned thread, a deadlock (every thread blocked in a join), a run longer than
//! [`Config::max_steps`] (a livelock), or a thread that reaches no scheduling point for
//! [`Config::watchdog`] of real time (it blocks outside the simulator: a `std` lock, a sleep;
//! the run's threads are then abandoned). The [`Failure`] has the seed, the message, the
//! number of steps the run took ([`Failure::steps`]) and the last steps of the trace (thread,
//! node, operation, value read).
//!
//! # Why not shuttle
//! `shuttle` (random, PCT, DFS and replay schedulers for shared-memory Rust) schedules code
//! written against its own `thread` and `sync` types. The code under test here is the soft
//! NIC and the libraries above it, which use std, parking_lot and crossbeam internally; the
//! scheduling points that matter are the NIC's operations, and the simulation needs a clock,
//! which shuttle does not model. Like shuttle, it runs simulated threads as stackful
//! coroutines (`coro.rs`, on `corosensei`). The scheduler here is small (`sched.rs`) and follows
//! shuttle's ideas (PCT with yield-deprioritisation, seeds per run); its exhaustive search
//! (`explore.rs`) is loom's depth-first walk over a choice tree, with delay bounding, and its
//! choices include the NIC's steps and the step a random fault strikes at.

mod coro;
pub(crate) mod explore;
pub mod profile;
pub(crate) mod sched;

pub use profile::Profile;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::model::FailedCas;
use crate::{Cluster, Ctx, NodeId, Schedule};

use sched::{Handle, Op, Sched};

/// The environment variable that overrides the default base seed of [`Config`]: a `u64` in
/// decimal or `0x`-prefixed hex (surrounding whitespace ignored), read by each [`check`]
/// without a [`Config::seed`] ([`replay`] takes its seed as an argument and ignores it). [`check`] refuses a value that does not parse
/// ([`FailureKind::Setup`]) rather than fall back to the default.
pub const SEED_ENV: &str = "LOCO_SIM_SEED";

/// The deepest [`Strategy::Pct`] bug depth used (a larger one is taken as this).
pub const MAX_PCT_DEPTH: usize = 64;

/// Registered memory per node of a simulated cluster, unless [`Config::memory_per_node`] says
/// otherwise: 64 KiB.
pub const DEFAULT_SIM_MEMORY: u64 = 64 << 10;

/// The base seed when neither [`Config::seed`] nor [`SEED_ENV`] gives one.
pub const DEFAULT_SEED: u64 = 0x10C0_5EED;

/// Default of [`Config::watchdog`]: a minute of real time without a scheduling point.
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(60);

/// How the scheduler picks the next thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Uniformly at random among the runnable threads, at every scheduling point.
    Random,
    /// Probabilistic concurrency testing (Burckhardt et al., ASPLOS 2010): random priorities,
    /// `depth - 1` priority changes at random steps; finds any bug of depth `depth` with
    /// probability at least 1 / (threads × steps^(depth-1)) per run. `depth` is taken between
    /// 1 and [`MAX_PCT_DEPTH`].
    Pct {
        /// The bug depth aimed at (at least 1).
        depth: usize,
    },
    /// Bounded exhaustive search: every schedule that deviates from the default schedule at
    /// most `max_delays` times is run once, depth first, up to [`Config::runs`] runs; the
    /// [`Report`]'s [`Search`] says whether the search ran them all, and whether it ran every
    /// schedule there is. The default schedule: the running thread goes on; at a spin loop's
    /// pause (or a sleep) the next runnable thread in turn runs; the NIC takes no step until a
    /// thread polls (then the least work towards the poll's completion: the thread's store
    /// buffer, then the polled queue pair) or pauses (then every enabled step). So writes stay
    /// pending by default, and weak outcomes need few deviations; a wait loop must pause
    /// ([`crate::clock::pause`]), or the first run spins until [`Config::max_steps`] (the
    /// [`FailureKind::Budget`] failure says so). A deviation: any
    /// other thread, any NIC step at any call, a poll's steps in another order (delay
    /// bounding, Emmi et al., POPL 2011). An [`At::Random`] fault is tried at each scheduling
    /// point the run reaches within its window, and once not at all if the run ends first, at
    /// no delay. No RNG is used, so the base seed does not matter; a [`Failure::seed`] is
    /// the failing run's number in the search, which [`replay`] reaches by running the search
    /// again up to it. Not with a [`Config::profile`] (a timed run's order is its clocks').
    Exhaustive {
        /// Deviations from the default schedule allowed per run (2 or 3 find most bugs of
        /// small programs; each one more multiplies the runs by about the run's length).
        max_delays: usize,
    },
}

/// How much of the schedules [`check`] covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Search {
    /// Random or PCT: the runs sampled schedules.
    Sampled,
    /// Exhaustive search ran every schedule of the program: no run came to a choice it had to
    /// leave unexplored.
    Complete,
    /// Exhaustive search ran every schedule with at most `max_delays` deviations from the
    /// default; schedules with more were not run (raise the bound to run them).
    DelayBound {
        /// The bound that was hit.
        max_delays: usize,
    },
    /// Exhaustive search stopped at [`Config::runs`] runs with schedules left to run (raise
    /// `runs`, or lower the delay bound).
    RunBound {
        /// The runs made.
        runs: u64,
    },
}

impl fmt::Display for Search {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Search::Sampled => write!(f, "sampled schedules (not exhaustive)"),
            Search::Complete => write!(f, "exhaustive: every schedule of the program was run"),
            Search::DelayBound { max_delays } => write!(
                f,
                "exhaustive up to the delay bound: every schedule with at most {max_delays} \
                 deviation(s) from the default was run; schedules with more were not \
                 (raise max_delays)"
            ),
            Search::RunBound { runs } => write!(
                f,
                "exhaustive search stopped at the run bound ({runs} runs) with schedules left \
                 (raise Config::runs or lower max_delays)"
            ),
        }
    }
}

/// When a [`Fault`] strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// At this step of the run (the first is 1). [`check`] refuses step 0 (there is none) and
    /// a step past [`Config::max_steps`] (no run reaches it) as [`FailureKind::Setup`].
    Step(u64),
    /// At a step drawn from the run's seed, uniformly in `1..=within` (a run that ends sooner
    /// does not see it). `within: 0` is refused as [`FailureKind::Setup`].
    ///
    /// Under [`Strategy::Exhaustive`] nothing is drawn: the fault is decided as the run goes,
    /// at each scheduling point before step `within` a branch of the search, "here" or "not
    /// yet" (at no delay), and it strikes at the first point at or past step `within` if not
    /// before. So the search tries it at each scheduling point the run reaches within the
    /// window, plus once not at all if the run ends first: a window far longer than the run
    /// (say `within: 1_000_000` for "anywhere in the run") costs no more runs than one as long
    /// as the run, and the search can still be [`Search::Complete`].
    Random {
        /// The last step it may strike at (at least 1).
        within: u64,
    },
}

/// A fault the simulator injects, deterministically from the run's seed. The errors reach the
/// code under test as the verbs backend reports them: [`Error::PeerDead`](crate::Error::PeerDead)
/// naming the node, or [`Error::Timeout`](crate::Error::Timeout) for waits that cannot complete
/// while a node is cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `node` crashes, as [`Cluster::kill`] does: its threads' next operations fail with
    /// `PeerDead` naming their own node (a thread that ends with an error after its node
    /// crashed is not a failure; its [`JoinHandle::join`] says [`JoinError::Crashed`]), and the
    /// survivors' operations towards it fail with `PeerDead`. A crash of a node that is already
    /// dead (a second crash of it in the plan, or after the code under test killed it) does
    /// nothing more.
    Crash {
        /// The node.
        node: NodeId,
        /// When.
        at: At,
    },
    /// Traffic from and to `node` is held back for `steps` steps (a partition no failure
    /// detector has noticed yet: requests are accepted but not executed, and waits for them
    /// time out in virtual time), then let go.
    Partition {
        /// The node.
        node: NodeId,
        /// When it starts.
        at: At,
        /// How many steps it lasts (at least 1: [`check`] refuses 0 as [`FailureKind::Setup`]).
        steps: u64,
    },
}

/// How [`check`] runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    nodes: usize,
    runs: u64,
    seed: Option<u64>,
    strategy: Strategy,
    max_steps: u64,
    step_time: Duration,
    timeout: Duration,
    memory: Option<u64>,
    faults: Vec<Fault>,
    profile: Option<Profile>,
    failed_cas: FailedCas,
    fence_read: Option<crate::FenceRead>,
    watchdog: Duration,
}

impl Config {
    /// A simulated cluster of `nodes` nodes; 100 runs, random strategy, the default seed.
    pub fn new(nodes: usize) -> Self {
        Config {
            nodes,
            runs: 100,
            seed: None,
            strategy: Strategy::Random,
            max_steps: 2_000_000,
            step_time: Duration::from_nanos(100),
            timeout: Duration::from_millis(50),
            memory: None,
            faults: Vec::new(),
            profile: None,
            failed_cas: FailedCas::Reads,
            fence_read: None,
            watchdog: DEFAULT_WATCHDOG,
        }
    }

    /// How long a run may go without any scheduling point, in real time, before it fails as
    /// [`FailureKind::Hang`] (default [`DEFAULT_WATCHDOG`], a minute): code under test that
    /// blocks outside the simulator (a `std` mutex held by a descheduled thread, a sleep, I/O)
    /// would otherwise hang [`check`] for ever. Lower it to have such a hang reported sooner
    /// (not so low that a slow host's pause between two scheduling points passes for one). A
    /// limit under 1 ms is taken as 1 ms; zero is refused ([`check`] and [`replay`] fail with
    /// [`FailureKind::Setup`]: every run would hang at once).
    pub fn watchdog(mut self, limit: Duration) -> Self {
        self.watchdog = limit;
        self
    }

    /// What a failed remote CAS does: the model's rule 9 (the default), or Soft-RoCE's
    /// write-back ([`FailedCas::WritesBack`], docs/verbs-notes.md pitfall 9), under which a put
    /// or a store landing inside a failing CAS is lost. Check code that mixes remote CASes with
    /// puts or stores on one word under both before running it on rxe.
    pub fn failed_cas(mut self, mode: FailedCas) -> Self {
        self.failed_cas = mode;
        self
    }

    /// How global fences read ([`FenceRead`](crate::FenceRead)). Default: as the profile
    /// says ([`Profile::fence_read`]), a get without one.
    pub fn fence_read(mut self, read: crate::FenceRead) -> Self {
        self.fence_read = Some(read);
        self
    }

    /// Times the run with a network profile (see [`profile`]): each thread's operations and
    /// each NIC step cost what the profile says, threads run in the order of their clocks, and
    /// NIC steps are taken when due instead of at random ([`Config::step_time`] no longer
    /// applies). What to use to measure: [`now`] in the code under test reads the clock.
    /// A profile whose [`Profile::jitter`] or [`Profile::spin_share`] is NaN or infinite is
    /// refused by [`check`] and [`replay`] as [`FailureKind::Setup`].
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = Some(profile);
        self
    }

    /// How many runs [`check`] makes (each a different schedule seed); at least 1 ([`check`]
    /// refuses 0 as [`FailureKind::Setup`]: it would pass having tested nothing).
    pub fn runs(mut self, runs: u64) -> Self {
        self.runs = runs;
        self
    }

    /// The base seed (default: [`SEED_ENV`] if set, else [`DEFAULT_SEED`]).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The scheduling strategy (default [`Strategy::Random`]).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Steps after which a run fails as a livelock (default 2 000 000); at least 1 ([`check`]
    /// and [`replay`] refuse 0 as [`FailureKind::Setup`]: a run takes a step to start).
    pub fn max_steps(mut self, steps: u64) -> Self {
        self.max_steps = steps;
        self
    }

    /// Virtual time each step takes (default 100 ns). Without a [`Config::profile`], at least
    /// 1 ns ([`check`] and [`replay`] refuse zero as [`FailureKind::Setup`]: virtual time
    /// would stand still, and a wait that cannot complete would never time out).
    pub fn step_time(mut self, d: Duration) -> Self {
        self.step_time = d;
        self
    }

    /// The simulated cluster's timeout ([`Cluster::timeout`], in virtual time; default 50 ms).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Registered memory per node (default [`DEFAULT_SIM_MEMORY`]: each run makes a fresh
    /// cluster, so small memory keeps runs cheap).
    pub fn memory_per_node(mut self, bytes: u64) -> Self {
        self.memory = Some(bytes);
        self
    }

    /// Adds a fault to every run (see [`Fault`]).
    pub fn fault(mut self, f: Fault) -> Self {
        self.faults.push(f);
        self
    }

    /// The base seed in effect, or [`DEFAULT_SEED`] when [`SEED_ENV`] is set but does not
    /// parse: a value [`check`] refuses rather than fall back. To show the seed a check will
    /// use, call [`Config::try_base_seed`], which reports such a value.
    pub fn base_seed(&self) -> u64 {
        self.try_base_seed().unwrap_or(DEFAULT_SEED)
    }

    /// The base seed in effect: [`Config::seed`], else [`SEED_ENV`] if set, else
    /// [`DEFAULT_SEED`]; an error if [`SEED_ENV`] is consulted and does not parse (the value
    /// [`check`] refuses as [`FailureKind::Setup`]).
    pub fn try_base_seed(&self) -> Result<u64, SeedError> {
        seed_from(self.seed, std::env::var_os(SEED_ENV))
    }
}

/// [`SEED_ENV`] is set but is no seed ([`Config::try_base_seed`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{SEED_ENV}={value:?} is not a seed: give a u64 in decimal or 0x-prefixed hex")]
pub struct SeedError {
    value: String,
}

impl SeedError {
    /// The variable's value (lossily converted if it is not UTF-8).
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// The base seed given `seed` ([`Config::seed`]) and the value of [`SEED_ENV`] (consulted only
/// without `seed`).
fn seed_from(seed: Option<u64>, env: Option<std::ffi::OsString>) -> Result<u64, SeedError> {
    match (seed, env) {
        (Some(seed), _) => Ok(seed),
        (None, None) => Ok(DEFAULT_SEED),
        (None, Some(v)) => v.to_str().and_then(parse_seed).ok_or_else(|| SeedError {
            value: v.to_string_lossy().into_owned(),
        }),
    }
}

fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// SplitMix64: the seed of run `i` from the base seed.
fn derive(base: u64, i: u64) -> u64 {
    let mut z = base.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What [`check`] found when every run passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Runs made.
    pub runs: u64,
    /// Distinct schedules among them (by trace hash).
    pub schedules: usize,
    /// Steps over all runs.
    pub steps: u64,
    /// The longest run's virtual time.
    pub max_time: Duration,
    /// How much of the schedules the runs covered.
    pub search: Search,
}

/// One run that passed ([`replay`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The run's seed.
    pub seed: u64,
    /// Its steps.
    pub steps: u64,
    /// Its virtual time.
    pub time: Duration,
    /// A hash of its schedule (equal for equal schedules).
    pub hash: u64,
}

/// Why a run failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// A simulated thread panicked.
    Panic,
    /// The closure, or a spawned thread, returned an error.
    Error,
    /// Every thread left was blocked.
    Deadlock,
    /// The run took more than [`Config::max_steps`] steps.
    Budget,
    /// The simulated cluster could not be set up.
    Setup,
    /// A simulated thread reached no scheduling point for [`Config::watchdog`] of real time:
    /// it blocks outside the simulator.
    Hang,
    /// Under [`Strategy::Exhaustive`]: a run given the same choices as an earlier one came to
    /// other choice points, so the program depends on something outside the simulator (real
    /// time, threads that are not simulated, state kept from one run to the next) and the
    /// search cannot be trusted.
    Nondeterministic,
}

impl std::error::Error for Failure {}

impl fmt::Display for Failure {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FailureKind::Setup if self.steps == 0 => {
                write!(out, "simulation not started (Setup): {}", self.message)
            }
            kind => write!(
                out,
                "simulated run with seed {:#x} failed after {} steps ({kind:?}): {}",
                self.seed, self.steps, self.message
            ),
        }
    }
}

/// A failed run: its seed and config (give it to [`replay_failure`], or both to [`replay`]),
/// what went wrong, and the last steps.
#[derive(Clone, Debug)]
pub struct Failure {
    seed: u64,
    kind: FailureKind,
    message: String,
    steps: u64,
    trace: Vec<String>,
    /// The config of the run (what [`replay_failure`] replays it under).
    config: Box<Config>,
}

impl Failure {
    /// The config the failing run ran under (as given to [`check`] or [`replay`]): the one to
    /// [`replay`] its seed with, as [`replay_failure`] does. Compare it with a config of one's
    /// own to tell whether a replay under that one would run the same schedule. `==` compares
    /// every setting, the base seed, [`Config::runs`] and [`Config::watchdog`] too, although a
    /// replay does not use them: a config that differs from this one only in those replays the
    /// same schedule, yet is not `==` to it.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The failing run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// What went wrong.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The panic or error message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The steps the failing run took before it stopped, counted as [`Run::steps`] and
    /// [`Report::steps`] count them (the number its [`Display`](fmt::Display) says, "failed
    /// after N steps"; the last line of its [`trace`](Self::trace) is step N). 0 for a
    /// [`FailureKind::Setup`] failure refused before the run started; one more than
    /// [`Config::max_steps`] for a [`FailureKind::Budget`] one. A replay of the failure
    /// ([`replay_failure`]) takes as many.
    ///
    /// ```
    /// use loco_rdmawait::sim::{self, Config};
    /// use loco_rdmawait::Cluster;
    ///
    /// let f = |_: &Cluster| Err::<(), _>("always");
    /// let failure = sim::check(Config::new(2).runs(5), f).unwrap_err();
    /// assert!(failure.steps() > 0);
    /// let again = sim::replay_failure(&failure, f).unwrap_err();
    /// assert_eq!(again.steps(), failure.steps());
    /// ```
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The last steps of the run (up to 200), one line each: step number, virtual time,
    /// thread, node, operation, value read.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// The failure with its trace, for printing.
    pub fn report(&self) -> String {
        if self.kind == FailureKind::Setup && self.steps == 0 {
            // Nothing ran: no steps to show, no schedule to replay.
            return format!("{self}\n");
        }
        format!(
            "{self}\nlast steps:\n{}replay with sim::replay_failure(&failure, ...), or \
             sim::replay(config, {:#x}, ...) under the same config\n",
            self.trace_lines(),
            self.seed
        )
    }

    /// The [`trace`](Self::trace) as [`report`](Self::report) lists it: one step a line,
    /// each indented by two spaces and ended by a newline. For a report of the caller's own
    /// (one that names the failing thread as the caller knows it, say).
    pub fn trace_lines(&self) -> String {
        let mut s = String::new();
        for l in &self.trace {
            s.push_str("  ");
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// Why [`JoinHandle::join`] failed.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The thread returned an error (its message).
    #[error("simulated thread t{thread} failed: {message}")]
    Failed {
        /// The thread.
        thread: usize,
        /// Its error, displayed.
        message: String,
    },
    /// The thread's node crashed (a [`Fault::Crash`]) and the thread ended with this error.
    #[error("simulated thread t{thread} stopped: its node {node} crashed ({message})")]
    Crashed {
        /// The thread.
        thread: usize,
        /// Its node.
        node: NodeId,
        /// Its error, displayed.
        message: String,
    },
    /// [`spawn`] was called outside a simulation, or [`JoinHandle::join`] was (from a thread
    /// that is not simulated, such as a `std::thread` started by the code under test).
    #[error(
        "sim::spawn or JoinHandle::join called outside a simulated thread (call them in the \
         closure given to sim::check or sim::replay, or in a thread it spawned with sim::spawn)"
    )]
    NotSimulated,
    /// [`JoinHandle::join`] was called in another run than the one that spawned the thread (the
    /// handle was kept from one run to the next): that thread is gone with its run.
    #[error(
        "simulated thread t{thread} was joined in another run than the one that spawned it (a \
         JoinHandle belongs to its run: join it there)"
    )]
    OtherRun {
        /// The thread, as its own run numbered it.
        thread: usize,
    },
}

type Outcome = Arc<Mutex<Option<Result<(), JoinError>>>>;

/// A simulated thread started by [`spawn`].
#[derive(Debug)]
#[must_use = "join the thread (its failure fails the run either way)"]
pub struct JoinHandle {
    thread: usize,
    outcome: Option<Outcome>,
    /// The run that spawned the thread (a thread number means nothing in another run).
    run: std::sync::Weak<Sched>,
}

impl JoinHandle {
    /// Waits (in simulation) until the thread has finished; its error, if it returned one.
    /// Call it from a simulated thread of the run that spawned the thread (else
    /// [`JoinError::NotSimulated`] or [`JoinError::OtherRun`]).
    pub fn join(self) -> Result<(), JoinError> {
        let (Some(outcome), Some(h)) = (self.outcome, sched::current()) else {
            return Err(JoinError::NotSimulated);
        };
        if !std::ptr::eq(self.run.as_ptr(), Arc::as_ptr(&h.sched)) {
            return Err(JoinError::OtherRun {
                thread: self.thread,
            });
        }
        h.join(self.thread);
        let r = outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
        r.unwrap_or(Ok(()))
    }

    /// The simulated thread's number (t1, t2, ... in traces).
    pub fn thread(&self) -> usize {
        self.thread
    }
}

/// The virtual time since the run started (zero outside a simulation).
pub fn now() -> Duration {
    sched::current().map_or(Duration::ZERO, |h| h.elapsed())
}

/// Starts a simulated thread on `node` that runs `f` with a context there. Call it from a
/// simulated thread (the closure given to [`check`], or a thread it spawned); elsewhere `f`
/// does not run, the handle's [`join`](JoinHandle::join) fails with
/// [`JoinError::NotSimulated`], and, if `cluster` is a run's (a `std::thread` of the code under
/// test was handed the run's cluster), that run fails as [`FailureKind::Error`] naming the
/// mistake, joined or not.
pub fn spawn<F, E>(cluster: &Cluster, node: NodeId, f: F) -> JoinHandle
where
    F: FnOnce(&Ctx) -> Result<(), E> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let Some(parent) = sched::current() else {
        // The closure cannot run: a thread that is not simulated has no place in the schedule.
        // If the cluster is a run's, that run fails naming the mistake (else the closure would
        // vanish unnoticed whenever the handle is dropped unjoined).
        if let Some(run) = SimRun::of(cluster) {
            run.fail(
                FailureKind::Error,
                format!(
                    "sim::spawn called on a thread that is not simulated (a std::thread of the \
                     code under test?): the thread it would start on {node} does not run; call \
                     sim::spawn from the closure given to sim::check or sim::replay, or from a \
                     thread it spawned with sim::spawn"
                ),
            );
        }
        return JoinHandle {
            thread: usize::MAX,
            outcome: None,
            run: std::sync::Weak::new(),
        };
    };
    let thread = parent.spawn(node);
    let outcome: Outcome = Arc::default();
    let h = Handle {
        sched: parent.sched.clone(),
        me: thread,
    };
    let cluster = cluster.clone();
    let out = outcome.clone();
    let body = move || {
        let r = cluster
            .context(node)
            .map_err(|e| format!("opening a context on {node}: {e}"))
            .and_then(|ctx| f(&ctx).map_err(|e| e.to_string()));
        // An error after the thread's own node crashed is the crash, not a failure (a node
        // that does not exist did not crash: that is the thread's error).
        let crashed = r.is_err() && cluster.check_node(node).is_ok() && !cluster.is_alive(node);
        let (end, r) = match r {
            Ok(()) => (Ok(()), Ok(())),
            Err(message) if crashed => (
                Err(JoinError::Crashed {
                    thread,
                    node,
                    message,
                }),
                Ok(()),
            ),
            Err(message) => (
                Err(JoinError::Failed {
                    thread,
                    message: message.clone(),
                }),
                Err(message),
            ),
        };
        *out.lock().unwrap_or_else(|p| p.into_inner()) = Some(end);
        r
    };
    start_thread(h, body);
    // The new thread may run first.
    parent.point_with(Op::Spawn { thread });
    JoinHandle {
        thread,
        outcome: Some(outcome),
        run: Arc::downgrade(&parent.sched),
    }
}

/// The run a simulated cluster belongs to, kept as the cluster's extension (so that a misuse
/// of the cluster on a thread that is not simulated can fail that run).
struct SimRun(std::sync::Weak<Sched>);

impl SimRun {
    /// The run of `cluster`, if it is a simulated run's and the run is still there.
    fn of(cluster: &Cluster) -> Option<Arc<Sched>> {
        let run = cluster
            .extension(|_| Ok(SimRun(std::sync::Weak::new())))
            .ok()?;
        run.0.upgrade()
    }
}

/// Runs `body` as simulated thread `h` (a coroutine the dispatcher starts); a panic or an
/// error fails the run.
fn start_thread(h: Handle, body: impl FnOnce() -> Result<(), String> + Send + 'static) {
    let sched = h.sched.clone();
    let me = h.me;
    sched.start_thread(
        me,
        Box::new(move || {
            sched::enter(Some(h.clone()));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                h.start();
                body()
            }));
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => h
                    .sched
                    .fail(FailureKind::Error, format!("thread t{}: {e}", h.me)),
                Err(p) if p.is::<sched::Stopped>() => {}
                Err(p) => h.sched.fail(
                    FailureKind::Panic,
                    format!("thread t{} panicked: {}", h.me, panic_message(&*p)),
                ),
            }
            h.finish();
        }),
    );
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".into()
    }
}

/// Runs `f` under the simulator [`Config::runs`] times, each with a seed derived from the
/// base seed; stops at the first failing run. See the module docs.
pub fn check<F, E>(config: Config, f: F) -> Result<Report, Failure>
where
    F: Fn(&Cluster) -> Result<(), E> + Send + Sync + 'static,
    E: fmt::Display + 'static,
{
    let f = Arc::new(f);
    let setup = |message: String| Failure {
        seed: 0,
        kind: FailureKind::Setup,
        message,
        steps: 0,
        config: Box::new(config.clone()),
        trace: Vec::new(),
    };
    if config.runs == 0 {
        // A check of no run would pass having tested nothing.
        return Err(setup(
            "Config::runs(0): a check needs at least one run".into(),
        ));
    }
    // A mistyped seed is refused: falling back to the default would explore other schedules
    // than the ones asked for.
    let base = config.try_base_seed().map_err(|e| setup(e.to_string()))?;
    let explorer = explorer(&config, 0)?;
    let mut hashes = std::collections::HashSet::new();
    let mut report = Report {
        runs: 0,
        schedules: 0,
        steps: 0,
        max_time: Duration::ZERO,
        search: Search::Sampled,
    };
    let mut expected = 10_000;
    for i in 0..config.runs {
        let seed = if explorer.is_some() {
            i
        } else {
            derive(base, i)
        };
        let run = run_once(&config, seed, expected, explorer.as_ref(), f.clone())?;
        expected = expected.max(run.steps);
        hashes.insert(run.hash);
        report.runs += 1;
        report.steps += run.steps;
        report.max_time = report.max_time.max(run.time);
        if let Some(e) = &explorer {
            if !e.advance() {
                let cut = e.flags().0;
                report.search = match config.strategy {
                    Strategy::Exhaustive { max_delays } if cut => Search::DelayBound { max_delays },
                    _ => Search::Complete,
                };
                break;
            }
            report.search = Search::RunBound { runs: report.runs };
        }
    }
    report.schedules = hashes.len();
    Ok(report)
}

/// The search's explorer under [`Strategy::Exhaustive`] (refused with a profile).
fn explorer(config: &Config, seed: u64) -> Result<Option<Arc<explore::Explorer>>, Failure> {
    let Strategy::Exhaustive { max_delays } = config.strategy else {
        return Ok(None);
    };
    if config.profile.is_some() {
        return Err(Failure {
            seed,
            kind: FailureKind::Setup,
            message: "Strategy::Exhaustive runs untimed: a timed run's order is set by its \
                      clocks, so drop Config::profile (or use Random or PCT with it)"
                .into(),
            steps: 0,
            config: Box::new(config.clone()),
            trace: Vec::new(),
        });
    }
    Ok(Some(Arc::new(explore::Explorer::new(max_delays))))
}

/// Runs `f` once with the run seed `seed` (a [`Failure::seed`]): the same schedule, step for
/// step, as the run that produced the seed with the same `config` (strategy, step time,
/// timeout, budget).
///
/// **The `config` must be the one the seed's run had** ([`Failure::config`]): under another
/// (other nodes, strategy, budget, step time, timeout, memory, profile or faults) the seed
/// stands for another schedule, which runs without any sign of the mismatch. To replay a
/// [`Failure`], [`replay_failure`] takes the config from it.
///
/// Any seed runs: one that never failed gives the run it stands for (`Ok` if that run passes).
/// A closure that behaves differently from the original also runs another schedule, and
/// cannot know it: compare the [`Failure::trace`] with the original's. Under
/// [`Strategy::Exhaustive`] the seed is a run number, and one past the end of the search is
/// refused as [`FailureKind::Setup`].
pub fn replay<F, E>(config: Config, seed: u64, f: F) -> Result<Run, Failure>
where
    F: Fn(&Cluster) -> Result<(), E> + Send + Sync + 'static,
    E: fmt::Display + 'static,
{
    let f = Arc::new(f);
    let explorer = explorer(&config, seed)?;
    if let Some(e) = &explorer {
        // Under exhaustive search the seed is the run's number: walk the search up to it.
        for i in 0..seed {
            // Earlier runs only move the search on; whether they failed does not matter, unless
            // they could not start (then no run can).
            if let Err(fail) = run_once(&config, i, 10_000, Some(e), f.clone()) {
                if fail.kind == FailureKind::Setup && fail.steps == 0 {
                    return Err(Failure { seed, ..fail });
                }
            }
            if !e.advance() {
                return Err(Failure {
                    seed,
                    kind: FailureKind::Setup,
                    message: format!(
                        "the exhaustive search has only {} runs: no run number {seed}",
                        i + 1
                    ),
                    steps: 0,
                    config: Box::new(config.clone()),
                    trace: Vec::new(),
                });
            }
        }
    }
    run_once(&config, seed, 10_000, explorer.as_ref(), f)
}

/// Replays `failure` (from [`check`] or [`replay`]): [`replay`] of its seed under its own
/// [`config`](Failure::config), so the run is the failing one, step for step, if `f` is the
/// closure that failed.
///
/// ```
/// use loco_rdmawait::sim::{self, Config};
/// use loco_rdmawait::Cluster;
///
/// let f = |_: &Cluster| Err::<(), _>("always");
/// let failure = sim::check(Config::new(2).runs(5), f).unwrap_err();
/// let again = sim::replay_failure(&failure, f).unwrap_err();
/// assert_eq!((again.seed(), again.trace()), (failure.seed(), failure.trace()));
/// ```
pub fn replay_failure<F, E>(failure: &Failure, f: F) -> Result<Run, Failure>
where
    F: Fn(&Cluster) -> Result<(), E> + Send + Sync + 'static,
    E: fmt::Display + 'static,
{
    replay((*failure.config).clone(), failure.seed, f)
}

fn run_once<F, E>(
    config: &Config,
    seed: u64,
    expected: u64,
    explorer: Option<&Arc<explore::Explorer>>,
    f: Arc<F>,
) -> Result<Run, Failure>
where
    F: Fn(&Cluster) -> Result<(), E> + Send + Sync + 'static,
    E: fmt::Display + 'static,
{
    let setup = |message: String| Failure {
        seed,
        kind: FailureKind::Setup,
        message,
        steps: 0,
        config: Box::new(config.clone()),
        trace: Vec::new(),
    };
    if let Some(message) = refused(config) {
        return Err(setup(message));
    }
    let words = config.memory.unwrap_or(DEFAULT_SIM_MEMORY) / crate::WORD;
    let words = usize::try_from(words).unwrap_or(usize::MAX);
    let nic_seed = derive(seed, u64::MAX);
    let soft = match (&config.profile, explorer) {
        (None, Some(e)) => {
            crate::SoftBackend::explored(config.nodes, words, e.clone(), config.failed_cas)
        }
        (None, None) => crate::SoftBackend::with_failed_cas(
            config.nodes,
            words,
            Schedule::Chaos { seed: nic_seed },
            config.failed_cas,
        ),
        (Some(p), _) => {
            crate::SoftBackend::timed(config.nodes, words, nic_seed, p.clone(), config.failed_cas)
        }
    }
    .map(Arc::new)
    .map_err(|e| setup(e.to_string()))?;
    let fence_read = config
        .fence_read
        .or_else(|| config.profile.as_ref().map(Profile::fence_read));
    let cluster = Cluster::assemble(Box::new(soft.clone()), config.timeout, fence_read);
    for fault in &config.faults {
        let (node, at) = match *fault {
            Fault::Crash { node, at } | Fault::Partition { node, at, .. } => (node, at),
        };
        cluster
            .check_node(node)
            .map_err(|e| setup(format!("a fault of the plan: {e}")))?;
        if let Some(why) = refused_fault(fault, at, config.max_steps) {
            return Err(setup(format!("a fault of the plan ({fault:?}): {why}")));
        }
    }
    let sched = Arc::new(Sched::new(
        seed,
        config.strategy,
        config.max_steps,
        config.step_time,
        expected,
        config.profile.clone(),
        explorer.cloned(),
    ));
    if config.profile.is_some() {
        let s = soft.clone();
        sched.set_nic(Box::new(move |node| s.next_write_due(node)));
        if let Some(n) = soft.spinners() {
            sched.set_spinners(n);
        }
    }
    if explorer.is_some() {
        let s = soft.clone();
        sched.set_drain(Box::new(move || s.drain()));
    }
    if !config.faults.is_empty() {
        let c = cluster.clone();
        sched.plan(
            &config.faults,
            Box::new(move |i| {
                let r = match i {
                    sched::Inject::Kill(n) => c.kill(n),
                    sched::Inject::Stall(n, on) => soft.stall(n, on),
                };
                if let Err(e) = r {
                    tracing::warn!(target: "loco::sim", error = %e, "could not inject a fault");
                }
            }),
        );
    }
    let sched_of_run = Arc::downgrade(&sched);
    cluster
        .extension(move |_| Ok(SimRun(sched_of_run)))
        .map_err(|e| setup(e.to_string()))?;
    let main = sched.add(None);
    let h = Handle {
        sched: sched.clone(),
        me: main,
    };
    let c = cluster.clone();
    start_thread(h, move || f(&c).map_err(|e| e.to_string()));
    // Every simulated thread runs on one OS thread, as a coroutine; a hung run's thread is
    // abandoned (it cannot be stopped).
    match sched.start_run() {
        Ok(()) => sched.wait_all_done(config.watchdog.max(Duration::from_millis(1))),
        Err(e) => sched.fail(
            FailureKind::Setup,
            format!("cannot spawn the simulation's OS thread: {e}"),
        ),
    }
    if let Some(e) = explorer {
        // Teardown's steps are not part of the schedule.
        e.close();
    }
    drop(cluster);
    let (steps, time, hash, mut failure) = sched.outcome();
    if failure.is_none() && explorer.is_some_and(|e| e.flags().1) {
        failure = Some((
            FailureKind::Nondeterministic,
            "replayed with the same choices, the run came to other choice points: the code \
             under test depends on something outside the simulator (real time, threads that \
             are not simulated, state kept from one run to the next), so exhaustive search \
             cannot cover it"
                .into(),
        ));
    }
    match failure {
        None => Ok(Run {
            seed,
            steps,
            time,
            hash,
        }),
        Some((kind, message)) => Err(Failure {
            seed,
            kind,
            message,
            steps,
            config: Box::new(config.clone()),
            trace: sched.trace(),
        }),
    }
}

/// Why `config` cannot run, if it cannot (its faults aside, which [`refused_fault`] checks once
/// the cluster is there): a configuration that would make every run fail for a reason other
/// than the code under test, or test nothing, is the user's mistake, told as such.
fn refused(config: &Config) -> Option<String> {
    if config.max_steps == 0 {
        return Some(
            "Config::max_steps(0): a run takes at least one step (its start), so every run \
             would fail on the budget; give at least 1"
                .into(),
        );
    }
    if config.watchdog.is_zero() {
        return Some(
            "Config::watchdog(0): every run would be reported as a hang before its first step; \
             give the real time a run may go without a scheduling point (default 60 s)"
                .into(),
        );
    }
    if let Some(p) = &config.profile {
        // A NaN would also make the config unequal to itself, so that `Failure::config` could
        // not be compared with the config it was given.
        let fractions = [
            (
                "jitter",
                p.jitter,
                "0 for none; connectx5 and rxe have 0.05",
            ),
            (
                "spin_share",
                p.spin_share,
                "0 for a hardware NIC, 1 for a software one on the threads' CPUs (rxe)",
            ),
        ];
        for (field, value, hint) in fractions {
            if !value.is_finite() {
                return Some(format!(
                    "Profile::{field} of the profile {:?} is {value}, which is no fraction: \
                     give a finite value from 0 to 1 ({hint})",
                    p.name
                ));
            }
        }
    }
    if config.step_time.is_zero() && config.profile.is_none() {
        return Some(
            "Config::step_time(0): virtual time would stand still, so no timeout or deadline \
             of the code under test could expire (a wait that cannot complete would spin until \
             the step budget); give at least 1 ns, or time the run with Config::profile"
                .into(),
        );
    }
    None
}

/// Why `fault` (striking `at`) of the plan cannot be injected as asked, if it cannot.
fn refused_fault(fault: &Fault, at: At, max_steps: u64) -> Option<String> {
    match at {
        At::Step(0) => {
            return Some("At::Step(0): steps count from 1 (At::Step(1) is a run's first)".into())
        }
        At::Step(s) if s > max_steps => {
            return Some(format!(
                "At::Step({s}) is past Config::max_steps ({max_steps}): no run reaches it"
            ))
        }
        At::Random { within: 0 } => {
            return Some(
                "At::Random { within: 0 }: no step to draw from (within is the last step the \
                 fault may strike at: at least 1)"
                    .into(),
            )
        }
        At::Step(_) | At::Random { .. } => {}
    }
    match *fault {
        Fault::Partition { steps: 0, .. } => {
            Some("a partition of 0 steps would cut nothing off: give at least 1".into())
        }
        Fault::Partition { .. } | Fault::Crash { .. } => None,
    }
}

/// In a timed run, the calling simulated thread has nothing to do before virtual time `at`.
pub(crate) fn idle_until(at: Duration) {
    if let Some(h) = sched::current() {
        h.idle_until(at);
    }
}

/// In a timed run, a CPU write of the calling thread ends other threads' spin pauses.
pub(crate) fn wake_spinners() {
    if let Some(h) = sched::current() {
        h.wake_spinners();
    }
}

/// A scheduling point for the soft NIC's calls (a no-op on threads that are not simulated).
pub(crate) fn point(op: impl FnOnce() -> Op) {
    sched::point_op(op);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_seed_comes_from_the_config_then_the_environment() {
        let env = |v: &str| Some(std::ffi::OsString::from(v));
        assert_eq!(seed_from(None, None), Ok(DEFAULT_SEED));
        // Config::seed wins, even over a value that is no seed.
        assert_eq!(seed_from(Some(3), env("7")), Ok(3));
        assert_eq!(seed_from(Some(3), env("x")), Ok(3));
        assert_eq!(seed_from(None, env("7")), Ok(7));
        assert_eq!(seed_from(None, env(" 0X1f ")), Ok(0x1f));
        assert_eq!(seed_from(None, env("18446744073709551615")), Ok(u64::MAX));
        for bad in ["", "x", "-1", "0x", "18446744073709551616", "7 7"] {
            let e = seed_from(None, env(bad)).unwrap_err();
            assert_eq!(e.value(), bad);
            assert!(e.to_string().starts_with("LOCO_SIM_SEED="), "{e}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_seed_that_is_not_utf8_is_no_seed() {
        use std::os::unix::ffi::OsStringExt;
        let v = std::ffi::OsString::from_vec(vec![b'7', 0xff]);
        let e = seed_from(None, Some(v)).unwrap_err();
        assert_eq!(e.value(), "7\u{fffd}");
    }
}
