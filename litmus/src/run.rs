//! The runner: a test executed for real, many times, on a backend, and the histogram of the
//! outcomes observed.
//!
//! Each run builds a fresh cluster, allocates the test's words with the real libraries
//! (`loc`s with [`Cluster::alloc_word`], shared variables as [`loco_sv::SharedVar`]s, locks as
//! [`loco_locks`] locks, SC locations as [`loco_sc::ScLoc`]s), starts one OS thread per test thread on its node, releases them
//! together from a barrier, and has each interpret its statements by calling the real library
//! operation (`ctx.put`, `SharedVar::bcast`, `RawLock::acquire`, ...). After every thread has
//! finished and the cluster has quiesced, it reads the final values of the test's observables.
//!
//! Compare the histogram with the model's outcomes ([`crate::explore()`]): an observed outcome the
//! model forbids is a bug in a library, in the backend, or in the model.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use loco_locks::{NLock, RawLock, SLock, WLock};
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, Schedule, WorkId};
use loco_rdmawaitrmw::Rmw;
use loco_sc::{Sc, ScLoc};
use loco_sv::{GlobalFence, SharedVar};

use crate::ast::{LockKind, Observable, Op, Test, Value, Var};
use crate::explore::Outcome;
use crate::validate::InvalidTest;

/// How long a `giveup(l)` waits for the lock before giving its ticket up: long enough for the
/// FAA to complete on a loaded machine most of the time, short next to a run.
const GIVE_UP_AFTER: Duration = Duration::from_millis(2);

/// Default wait/poll timeout of a run's cluster ([`RunConfig::timeout`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Former name of [`RunBackend`].
#[deprecated(
    note = "renamed to `RunBackend` (distinct from the `loco_rdmawait::backend::Backend` trait)"
)]
pub type Backend = RunBackend;

/// The backend a test runs on (not to be confused with the `loco_rdmawait::backend::Backend` trait, which
/// a NIC implements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunBackend {
    /// The soft NIC with its adversarial `Chaos` schedule (seeded per run).
    SoftChaos,
    /// The soft NIC with NIC engine threads.
    SoftThreaded,
    /// The deterministic simulator (`loco_rdmawait::sim`): the soft NIC's `Chaos` model, the
    /// test's threads interleaved at every operation by a scheduler seeded per run, virtual
    /// time. A run is a function of its seed.
    SoftSim,
    /// Real ibverbs devices, every node in this process (needs the `verbs` feature and a
    /// device; see `loco_rdmawait::backend::verbs`).
    Verbs,
}

/// Runner settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunConfig {
    /// Backend (default [`RunBackend::SoftChaos`]).
    pub backend: RunBackend,
    /// Number of runs (default 100).
    pub runs: usize,
    /// Seed of the first run; run `i` uses `seed + i` (default 0).
    pub seed: u64,
    /// Timeout of waits, polls and quiescing in each run (default [`DEFAULT_TIMEOUT`]).
    pub timeout: Duration,
    /// Before each statement a thread makes up to this many CPU loads of a private scratch word
    /// (a seeded random number of them), and sometimes yields the OS thread: calls into the
    /// NIC that let the `Chaos` schedule take steps between statements, and variety in how the
    /// threads interleave; in half the runs a thread also starts only after a seeded number of
    /// another thread's statements. They change no outcome. Ignored under the simulator, whose
    /// scheduler interleaves at every operation. Default [`DEFAULT_NOISE`]; 0 disables.
    pub noise: u32,
    /// Stop as soon as a run shows an outcome satisfying the `exists` condition; `runs` is then
    /// a budget (default false).
    pub until_exists: bool,
}

/// Default [`RunConfig::noise`].
pub const DEFAULT_NOISE: u32 = 4;
/// Largest [`RunConfig::noise`] that has an effect (larger values are taken as this): more
/// extra loads per statement would only slow a run down, and a run's deadline cannot stop a
/// thread in the middle of its noise.
pub const MAX_NOISE: u32 = 1000;

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            backend: RunBackend::SoftChaos,
            runs: 100,
            seed: 0,
            timeout: DEFAULT_TIMEOUT,
            noise: DEFAULT_NOISE,
            until_exists: false,
        }
    }
}

impl RunConfig {
    /// The default settings with this backend, run count and seed.
    pub fn new(backend: RunBackend, runs: usize, seed: u64) -> Self {
        RunConfig {
            backend,
            runs,
            seed,
            ..RunConfig::default()
        }
    }
}

/// Why a test could not be run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The test uses an operation whose library the runner cannot call (none at present: every
    /// operation of docs/litmus-format.md is dispatched).
    #[error("`{op}` is unsupported by the runner yet: {why}")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// What is missing.
        why: &'static str,
    },
    /// The backend cannot be used here.
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    /// An operation of the rdmawait layer failed.
    #[error("thread {thread}, line {line}: {source}")]
    Op {
        /// Test thread.
        thread: String,
        /// Line of the statement.
        line: u32,
        /// The library's error.
        #[source]
        source: OpError,
    },
    /// Setting up or inspecting the cluster failed.
    #[error("cluster: {0}")]
    Cluster(#[from] OpError),
    /// A test thread panicked on an OS thread (the soft NIC's `Chaos` and `Threaded`
    /// schedules, the verbs backend): the test's thread and the panic's message, if its payload
    /// is a string (a `panic!` with a message). The runner shuts the run's cluster down at once,
    /// so that the other threads return rather than wait for the panicked one. Under the
    /// simulator a panic is a [`RunError::Simulation`], whose report has the message and the
    /// run's steps.
    #[error(
        "thread {thread} panicked{}",
        message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
    )]
    Panicked {
        /// The test's thread.
        thread: String,
        /// The panic's message (`None`: a payload that is not a string).
        message: Option<String>,
    },
    /// The test fails [`Test::validate`] (a test built by hand naming something it does not
    /// have; a parsed test never does): nothing was run.
    #[error(transparent)]
    Invalid(#[from] InvalidTest),
    /// A simulated run failed (`--schedule sim`): an error or a panic of a thread, a deadlock;
    /// the simulator's report, with the seed to replay it. (A run over the step budget is
    /// [`RunError::Stalled`].)
    #[error("{0}")]
    Simulation(String),
    /// The OS refused a thread.
    #[error("cannot spawn a thread")]
    Spawn(#[source] std::io::Error),
    /// A thread ends holding a lock that another thread acquires: a run in which the first
    /// takes the lock first can never finish (the model counts those schedules as stuck).
    #[error(
        "thread {thread} ends holding lock `{lock}`, which thread {waiter} also acquires: \
         a run where {thread} takes it first never finishes"
    )]
    HeldAtEnd {
        /// The thread that ends holding the lock.
        thread: String,
        /// The lock.
        lock: String,
        /// A thread that acquires it too.
        waiter: String,
    },
    /// A run did not finish within its deadline (a few times [`RunConfig::timeout`]); the
    /// runner shut its cluster down so that every thread returned.
    #[error("run with seed {seed} did not finish within {after:?}: stopped")]
    Stalled {
        /// The run's seed.
        seed: u64,
        /// The deadline.
        after: Duration,
    },
}

/// An error of one of the libraries the runner calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    /// From `loco-rdmawait` or `loco-rdmawaitrmw`.
    #[error(transparent)]
    Rdma(#[from] loco_rdmawait::Error),
    /// From `loco-sv`.
    #[error(transparent)]
    Sv(#[from] loco_sv::Error),
    /// From `loco-locks`.
    #[error(transparent)]
    Locks(#[from] loco_locks::Error),
    /// From `loco-sc`.
    #[error(transparent)]
    Sc(#[from] loco_sc::Error),
}

/// The outcomes of many runs.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// What each outcome's values are the values of ([`Test::observables`]).
    pub observables: Vec<Observable>,
    /// How often each outcome was observed.
    pub histogram: BTreeMap<Outcome, usize>,
    /// Runs made.
    pub runs: usize,
    /// Wall-clock time.
    pub elapsed: Duration,
}

impl RunReport {
    /// Whether an outcome satisfying the test's `exists` condition was observed.
    pub fn exists_seen(&self, test: &Test) -> bool {
        self.histogram
            .keys()
            .any(|o| crate::explore::satisfies(test, &self.observables, o))
    }
}

/// Checks that the runner can use `backend`. (Every operation of docs/litmus-format.md dispatches to its
/// library: rdmawait, rdmawait+RMW, loco-sv, loco-locks, loco-sc.)
pub fn supported(backend: RunBackend) -> Result<(), RunError> {
    if backend == RunBackend::Verbs && !cfg!(feature = "verbs") {
        return Err(RunError::BackendUnavailable(
            "loco-litmus was built without the `verbs` feature".into(),
        ));
    }
    Ok(())
}

/// Runs `test` `cfg.runs` times (fewer with [`RunConfig::until_exists`]); `progress` is called
/// after each run with the number done. A test that fails [`Test::validate`] is
/// [`RunError::Invalid`].
pub fn run(
    test: &Test,
    cfg: &RunConfig,
    mut progress: impl FnMut(usize),
) -> Result<RunReport, RunError> {
    supported(cfg.backend)?;
    test.validate()?;
    if let Some(e) = held_at_end(test) {
        return Err(e);
    }
    let start = Instant::now();
    let mut histogram = BTreeMap::new();
    let observables = test.observables();
    let mut runs = 0;
    while runs < cfg.runs {
        let o = run_valid_once(test, cfg, cfg.seed.wrapping_add(runs as u64))?;
        runs += 1;
        progress(runs);
        let stop = cfg.until_exists && crate::explore::satisfies(test, &observables, &o);
        *histogram.entry(o).or_insert(0) += 1;
        if stop {
            break;
        }
    }
    Ok(RunReport {
        observables,
        histogram,
        runs,
        elapsed: start.elapsed(),
    })
}

/// The first thread that ends holding a lock which another thread acquires, as an error.
pub fn held_at_end(test: &Test) -> Option<RunError> {
    let acquires = |t: &crate::ast::Thread, l| {
        t.body
            .iter()
            .any(|s| matches!(s.op, Op::Acquire(m) if m == l))
    };
    for th in &test.threads {
        let mut held = Vec::new();
        for s in &th.body {
            match s.op {
                Op::Acquire(l) => held.push(l),
                Op::Release(l) => held.retain(|&m| m != l),
                _ => {}
            }
        }
        for l in held {
            if let Some(w) = test
                .threads
                .iter()
                .find(|u| u.name != th.name && acquires(u, l))
            {
                return Some(RunError::HeldAtEnd {
                    thread: th.name.clone(),
                    // A lock the test does not declare (see `Test::validate`): its index.
                    lock: test
                        .locks
                        .get(l.0)
                        .map_or_else(|| format!("#{}", l.0), |d| d.name.clone()),
                    waiter: w.name.clone(),
                });
            }
        }
    }
    None
}

/// How long a run may take before the runner stops it: every wait already has
/// [`RunConfig::timeout`]; this catches what has none (a lock's spin on its turn).
fn run_deadline(cfg: &RunConfig) -> Duration {
    cfg.timeout.saturating_mul(3).max(Duration::from_secs(1))
}

/// A barrier that the run can call off (if a thread cannot be spawned, the others must not wait
/// for it for ever).
struct StartGate {
    /// Threads still to arrive, and whether the run was called off.
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl StartGate {
    fn new(n: usize) -> Self {
        StartGate {
            state: Mutex::new((n, false)),
            cv: Condvar::new(),
        }
    }

    /// Waits for every thread; false if the run was called off.
    fn wait(&self) -> bool {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = g.0.saturating_sub(1);
        if g.0 == 0 {
            self.cv.notify_all();
        }
        while g.0 > 0 && !g.1 {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        !g.1
    }

    fn cancel(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

/// A lock of the test, made with the real library.
#[derive(Debug)]
enum LockHandle {
    W(WLock),
    S(SLock),
    N(NLock),
}

impl LockHandle {
    fn raw(&self) -> &dyn RawLock {
        match self {
            LockHandle::W(l) => l.raw(),
            LockHandle::S(l) => l.raw(),
            LockHandle::N(l) => l.raw(),
        }
    }
}

/// Everything a run's threads share.
#[derive(Debug)]
struct Env {
    /// Per thread: a private word for the noise loads.
    scratch: Vec<Loc>,
    /// Per thread: statements executed so far in this run (the noise's start stagger).
    progress: Vec<std::sync::atomic::AtomicUsize>,
    noise: u32,
    seed: u64,
    locs: Vec<Loc>,
    svs: Vec<SharedVar>,
    scs: Vec<ScLoc>,
    locks: Vec<LockHandle>,
    /// Per lock and node (`lock * nodes + node`): a `handoff` there is done. A `takeover`
    /// waits for it, then acquires: with cohorts that is a network acquire after the release
    /// (a local handover's guarantee is the release's; the simulator checks the handovers).
    handed: Vec<std::sync::atomic::AtomicBool>,
}

fn cluster(test: &Test, cfg: &RunConfig, seed: u64) -> Result<Cluster, RunError> {
    let b = Cluster::builder()
        .nodes(test.cluster_nodes())
        .memory_per_node(4096)
        .failed_cas(test.atomics)
        .fence_read(test.fence)
        .timeout(cfg.timeout);
    let c = match cfg.backend {
        RunBackend::SoftChaos => b.soft(Schedule::Chaos { seed }).build(),
        RunBackend::SoftThreaded => b.soft(Schedule::Threaded).build(),
        RunBackend::SoftSim => unreachable!("a simulated run makes its own cluster"),
        // The device comes from the environment (`VerbsConfig::from_env`); a build without the
        // `verbs` feature gets rdmawait's typed `BackendNotBuilt` error.
        RunBackend::Verbs => b
            .backend(loco_rdmawait::BackendKind::Verbs)
            .and_then(loco_rdmawait::ClusterBuilder::build),
    };
    c.map_err(|e| RunError::BackendUnavailable(e.to_string()))
}

/// One run: a fresh cluster, the threads, the final outcome. A test that fails
/// [`Test::validate`] is [`RunError::Invalid`]. (Unlike [`run`], it does not refuse a test
/// whose thread ends holding a lock another acquires: such a run stops at its deadline.)
pub fn run_once(test: &Test, cfg: &RunConfig, seed: u64) -> Result<Outcome, RunError> {
    test.validate()?;
    run_valid_once(test, cfg, seed)
}

/// [`run_once`] of a test that passed [`Test::validate`].
fn run_valid_once(test: &Test, cfg: &RunConfig, seed: u64) -> Result<Outcome, RunError> {
    if cfg.backend == RunBackend::SoftSim {
        return sim_once(test, cfg, seed);
    }
    let cluster = cluster(test, cfg, seed)?;
    let env = setup(test, cfg, &cluster, seed)?;
    threads_once(test, cfg, seed, cluster, env)
}

/// The virtual timeout of a simulated run's waits and locks: far longer than any schedule of a
/// litmus test needs, short enough that a stuck run ends within the step budget.
const SIM_TIMEOUT: Duration = Duration::from_millis(20);

/// One run under the deterministic simulator (see [`RunBackend::SoftSim`]).
fn sim_once(test: &Test, cfg: &RunConfig, seed: u64) -> Result<Outcome, RunError> {
    use loco_rdmawait::sim;
    use std::sync::Arc;
    let out: Arc<Mutex<Option<Result<Outcome, RunError>>>> = Arc::default();
    // The first error a test thread returned, as it returned it: it names the test's thread
    // (the simulator's message would name the simulated thread, t1 for the test's t0).
    let thread_err: Arc<Mutex<Option<RunError>>> = Arc::default();
    // The first panic of a test thread: the test's thread and the panic's message (the
    // simulator's would name the simulated thread).
    let thread_panic: Arc<Mutex<Option<(usize, String)>>> = Arc::default();
    // The simulator's number of each test thread, in the test's order.
    let sim_threads: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (test2, cfg2, out2) = (Arc::new(test.clone()), cfg.clone(), out.clone());
    let (err2, ids2, panic2) = (
        thread_err.clone(),
        sim_threads.clone(),
        thread_panic.clone(),
    );
    let body = move |cluster: &Cluster| -> Result<(), String> {
        let r = (|| -> Result<Outcome, RunError> {
            let env = Arc::new(setup(&test2, &cfg2, cluster, seed)?);
            let mut handles = Vec::new();
            for t in 0..test2.threads.len() {
                let (test, env, err) = (test2.clone(), env.clone(), err2.clone());
                let panicked = panic2.clone();
                let regs: Arc<Mutex<Vec<u64>>> = Arc::default();
                let r2 = regs.clone();
                let h = sim::spawn(cluster, test.threads[t].node, move |ctx: &Ctx| {
                    let body = std::panic::AssertUnwindSafe(|| thread_body(&test, t, ctx, &env));
                    let v = std::panic::catch_unwind(body).unwrap_or_else(|p| {
                        // Noted, then passed on: the simulator fails the run with its trace
                        // (and stops the thread by unwinding, with a payload that is not a
                        // message).
                        if let Some(m) = panic_message(&*p) {
                            panicked
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get_or_insert((t, m));
                        }
                        std::panic::resume_unwind(p)
                    });
                    let v = v.map_err(|e| {
                        let message = e.to_string();
                        err.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        message
                    })?;
                    *r2.lock().unwrap_or_else(|p| p.into_inner()) = v;
                    Ok::<(), String>(())
                });
                ids2.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(h.thread());
                handles.push((h, regs));
            }
            let mut regs = Vec::new();
            for (h, r) in handles {
                h.join().map_err(|e| {
                    let own = err2.lock().unwrap_or_else(|p| p.into_inner()).take();
                    own.unwrap_or_else(|| RunError::Simulation(e.to_string()))
                })?;
                regs.push(std::mem::take(
                    &mut *r.lock().unwrap_or_else(|p| p.into_inner()),
                ));
            }
            cluster.quiesce().map_err(OpError::from)?;
            observe(&test2, cluster, &env, &regs)
        })();
        let failed = r.as_ref().err().map(ToString::to_string);
        *out2.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        failed.map_or(Ok(()), Err)
    };
    let config = sim::Config::new(test.cluster_nodes())
        .memory_per_node(4096)
        .failed_cas(test.atomics)
        .fence_read(test.fence)
        .timeout(SIM_TIMEOUT.min(cfg.timeout))
        .max_steps(1_000_000);
    let res = sim::replay(config, seed, body);
    if let Some(r) = out.lock().unwrap_or_else(|p| p.into_inner()).take() {
        if r.is_err() || res.is_ok() {
            return r;
        }
    }
    match res {
        Ok(_) => Err(RunError::Simulation(
            "the simulated run ended without an outcome".into(),
        )),
        Err(f) if f.kind() == sim::FailureKind::Budget => Err(RunError::Stalled {
            seed,
            after: SIM_TIMEOUT,
        }),
        Err(f) => {
            let ids = sim_threads.lock().unwrap_or_else(|p| p.into_inner());
            let own = thread_err.lock().unwrap_or_else(|p| p.into_inner()).take();
            let panic = thread_panic
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            Err(RunError::Simulation(match (f.kind(), own, panic) {
                (sim::FailureKind::Error, Some(e), _) => thread_failure(test, &ids, &f, &e),
                (sim::FailureKind::Panic, _, Some((t, message))) => {
                    let name = &test.threads[t].name;
                    let what = format!("thread {name} panicked: {message}");
                    thread_failure(test, &ids, &f, &what)
                }
                // A panic outside the test's threads (setting up, observing) is the
                // simulator's main thread's, t0.
                _ => f.report(),
            }))
        }
    }
}

/// A panic's message, if its payload is one (a string).
fn panic_message(p: &(dyn std::any::Any + Send)) -> Option<String> {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
}

/// The report of a simulated run that a test thread failed, by an error or a panic (`e`, as
/// the other schedules show it: naming the test's thread): `e`, the simulator's last steps, and
/// which simulated thread runs which test thread (`ids`: the simulator's numbers of the test's
/// threads started, in the test's order; the steps name them so, and t0 is the run's main
/// thread).
fn thread_failure(
    test: &Test,
    ids: &[usize],
    f: &loco_rdmawait::sim::Failure,
    e: &dyn std::fmt::Display,
) -> String {
    let mut s = format!("simulated run with seed {:#x} failed: {e}\n", f.seed());
    let sim: Vec<_> = ids.iter().map(|i| format!("t{i}")).collect();
    let names: Vec<_> = test.threads[..ids.len()]
        .iter()
        .map(|th| th.name.as_str())
        .collect();
    s.push_str(&format!(
        "last steps (the simulator's {} are the test's {}):\n",
        sim.join(", "),
        names.join(", ")
    ));
    s.push_str(&f.trace_lines());
    s
}

/// The test's words, shared variables, SC locations and locks, made on `cluster`.
fn setup(test: &Test, cfg: &RunConfig, cluster: &Cluster, seed: u64) -> Result<Env, RunError> {
    let cluster = cluster.clone();
    let setup = || -> Result<Env, OpError> {
        let mut locs = Vec::new();
        for l in &test.locs {
            let loc = cluster.alloc_word(l.node)?;
            cluster.poke(&loc, l.init)?;
            locs.push(loc);
        }
        let svs = test
            .svs
            .iter()
            .map(|s| SharedVar::with_value(&cluster, s.init))
            .collect::<Result<Vec<_>, _>>()?;
        let scs = test
            .scs
            .iter()
            .map(|s| ScLoc::new_on(&cluster, s.node, s.init))
            .collect::<Result<Vec<_>, _>>()?;
        let lowest = test.nodes.first().copied().unwrap_or(NodeId(0));
        let n = test.threads.len();
        let locks = test
            .locks
            .iter()
            .map(|l| {
                Ok(match l.kind {
                    LockKind::WLock => LockHandle::W(WLock::new(&cluster, lowest, n)?),
                    LockKind::SLock => LockHandle::S(SLock::new(&cluster, lowest, n)?),
                    LockKind::NLock(node) => LockHandle::N(NLock::new(&cluster, node)?),
                })
            })
            .collect::<Result<Vec<_>, OpError>>()?;
        let scratch = test
            .threads
            .iter()
            .map(|t| cluster.alloc_word(t.node))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Env {
            progress: test.threads.iter().map(|_| Default::default()).collect(),
            scratch,
            noise: cfg.noise,
            seed,
            locs,
            svs,
            scs,
            handed: (0..locks.len() * test.cluster_nodes())
                .map(|_| Default::default())
                .collect(),
            locks,
        })
    };
    Ok(setup()?)
}

/// The test's threads on OS threads (the soft NIC's schedules, the verbs backend).
fn threads_once(
    test: &Test,
    cfg: &RunConfig,
    seed: u64,
    cluster: Cluster,
    env: Env,
) -> Result<Outcome, RunError> {
    let barrier = StartGate::new(test.threads.len());
    let mut regs = Vec::new();
    // The first failure, in time: the error or panic of a thread (which then shuts the
    // cluster down), not the errors of the threads that the shutdown stops after it.
    let first_err: Mutex<Option<RunError>> = Mutex::new(None);
    let fail = |e: RunError| {
        first_err
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let deadline = run_deadline(cfg);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let stalled = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The watchdog: shuts the cluster down if the threads are not done by the deadline,
        // so that a thread spinning on a lock that is never released returns.
        let (cl, st) = (&cluster, &stalled);
        let watchdog = std::thread::Builder::new()
            .name("litmus-watchdog".into())
            .spawn_scoped(scope, move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    done_rx.recv_timeout(deadline)
                {
                    st.store(true, std::sync::atomic::Ordering::SeqCst);
                    cl.shutdown();
                }
            });
        if let Err(e) = watchdog {
            fail(RunError::Spawn(e));
            return;
        }
        let mut handles = Vec::new();
        for t in 0..test.threads.len() {
            let (cluster, env, barrier, fail) = (&cluster, &env, &barrier, &fail);
            let name = &test.threads[t].name;
            // An OS thread's name cannot hold a NUL (`Builder::spawn` would panic).
            let h = std::thread::Builder::new()
                .name(format!("litmus-{name}").replace('\0', "?"))
                .spawn_scoped(scope, move || {
                    let body =
                        std::panic::AssertUnwindSafe(|| thread(test, t, cluster, env, barrier));
                    let r = std::panic::catch_unwind(body).unwrap_or_else(|p| {
                        Err(RunError::Panicked {
                            thread: name.clone(),
                            message: panic_message(&*p),
                        })
                    });
                    r.map_err(|e| {
                        fail(e);
                        cluster.shutdown(); // so that the other threads fail, not hang
                    })
                    .ok()
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    fail(RunError::Spawn(e));
                    barrier.cancel();
                    break;
                }
            }
        }
        for (t, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Some(r)) => regs.push(r),
                Ok(None) => regs.push(Vec::new()), // its failure is noted
                Err(p) => {
                    // Not from the test's statements (caught above): reported all the same.
                    fail(RunError::Panicked {
                        thread: test.threads[t].name.clone(),
                        message: panic_message(&*p),
                    });
                    regs.push(Vec::new());
                }
            }
        }
        let _ = done_tx.send(()); // the watchdog may have given up already
    });
    if stalled.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(RunError::Stalled {
            seed,
            after: deadline,
        });
    }
    if let Some(e) = first_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    cluster.quiesce().map_err(OpError::from)?;
    let o = observe(test, &cluster, &env, &regs)?;
    cluster.shutdown();
    Ok(o)
}

/// The final values of the test's observables (the cluster quiesced; `regs` per thread).
fn observe(
    test: &Test,
    cluster: &Cluster,
    env: &Env,
    regs: &[Vec<u64>],
) -> Result<Outcome, RunError> {
    let values = test
        .observables()
        .iter()
        .map(|o| -> Result<u64, OpError> {
            Ok(match *o {
                Observable::Reg { thread, reg } => regs[thread][reg.0],
                Observable::Loc(l) => cluster.peek(&env.locs[l.0])?,
                Observable::Sv { sv, node } => cluster.peek(&env.svs[sv.0].copy(node)?)?,
                Observable::Sc(s) => env.scs[s.0].peek(cluster)?,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Outcome(values))
}

/// Runs thread `t`'s statements; returns its registers.
fn thread(
    test: &Test,
    t: usize,
    cluster: &Cluster,
    env: &Env,
    gate: &StartGate,
) -> Result<Vec<u64>, RunError> {
    let th = &test.threads[t];
    let ctx = cluster.context(th.node);
    if !gate.wait() {
        return Ok(Vec::new()); // the run was called off
    }
    let ctx = ctx.map_err(|e| RunError::Op {
        thread: th.name.clone(),
        line: 0,
        source: e.into(),
    })?;
    thread_body(test, t, &ctx, env)
}

/// Thread `t`'s statements on `ctx`; returns its registers.
fn thread_body(test: &Test, t: usize, ctx: &Ctx, env: &Env) -> Result<Vec<u64>, RunError> {
    let th = &test.threads[t];
    let mut regs = vec![0u64; th.regs.len()];
    // splitmix64 of (seed, thread): the noise of this thread in this run.
    let mut rng = env.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = move || {
        rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    // Each thread draws its noise level per run, so quiet runs (level 0) happen too.
    // Under the simulator its scheduler already interleaves at every operation; extra loads
    // there would only dilute the schedules (fig7a needs 8x the runs with them).
    let noise = if loco_rdmawait::clock::simulated() {
        0
    } else {
        env.noise.min(MAX_NOISE)
    };
    let level = next() % (u64::from(noise) + 1);
    if level > 0 {
        stagger(test, t, env, next());
    }
    for s in &th.body {
        let fail = |source: OpError| RunError::Op {
            thread: th.name.clone(),
            line: s.span.line,
            source,
        };
        if level > 0 {
            let r = next();
            for _ in 0..r % (level + 1) {
                ctx.load(&env.scratch[t]).map_err(|e| fail(e.into()))?;
            }
            if (r >> 32) % 4 == 0 {
                std::thread::yield_now();
            }
        }
        #[cfg(test)]
        tests::hook(test, th, s);
        exec(ctx, env, &mut regs, &s.op).map_err(fail)?;
        env.progress[t].fetch_add(1, std::sync::atomic::Ordering::Release);
    }
    Ok(regs)
}

/// How long a staggered thread waits at most for its lead (a lead may itself be waiting, or
/// blocked on this thread; the bound keeps that from costing more).
const STAGGER_MAX: Duration = Duration::from_micros(300);

/// The noise's start stagger, on OS threads: in half the runs thread `t` starts only once a
/// seeded other thread has executed a seeded number of its statements (or `STAGGER_MAX` has
/// passed). Without it the OS nearly always starts the threads in the same order, and outcomes
/// that need one thread to run between two statements of another (fig7a's load buffering: the
/// reader runs between the put's remote write and the get's remote read) show up once in tens
/// of thousands of runs; with it, a few thousand at most. (Not under the simulator, where a
/// spin would never end.)
fn stagger(test: &Test, t: usize, env: &Env, r: u64) {
    let n = test.threads.len();
    if n < 2 || r % 2 == 0 {
        return;
    }
    let lead = (t + 1 + (r >> 8) as usize % (n - 1)) % n;
    let after = (r >> 24) as usize % (test.threads[lead].body.len() + 1);
    let start = std::time::Instant::now();
    while env.progress[lead].load(std::sync::atomic::Ordering::Acquire) < after
        && start.elapsed() < STAGGER_MAX
    {
        std::thread::yield_now();
    }
}

/// The index of lock `l`'s handover flag on `node` in [`Env::handed`].
fn handover(env: &Env, l: usize, node: loco_rdmawait::NodeId) -> usize {
    l * (env.handed.len() / env.locks.len().max(1)) + node.index()
}

fn wid(w: crate::ast::WidId) -> WorkId {
    WorkId::new(w.0 as u32 + 1)
}

fn exec(ctx: &Ctx, env: &Env, regs: &mut [u64], op: &Op) -> Result<(), OpError> {
    let val = |v: &Value, regs: &[u64]| match *v {
        Value::Int(k) => k,
        Value::Reg(r) => regs[r.0],
    };
    match op {
        Op::Load { reg, var } => {
            regs[reg.0] = match *var {
                Var::Loc(l) => ctx.load(&env.locs[l.0])?,
                Var::Sv(s) => env.svs[s.0].load(ctx)?,
            }
        }
        Op::Store { var, val: v } => {
            let v = val(v, regs);
            match *var {
                Var::Loc(l) => ctx.store(&env.locs[l.0], v)?,
                Var::Sv(s) => env.svs[s.0].store(ctx, v)?,
            }
        }
        Op::Cas {
            reg,
            loc,
            expected,
            new,
        } => {
            let (e, n) = (val(expected, regs), val(new, regs));
            regs[reg.0] = ctx.cas(&env.locs[loc.0], e, n)?;
        }
        Op::Mfence => ctx.mfence()?,
        Op::Put {
            remote,
            local,
            wid: w,
        } => ctx.put(&env.locs[remote.0], &env.locs[local.0], wid(*w))?,
        Op::Get {
            local,
            remote,
            wid: w,
        } => ctx.get(&env.locs[local.0], &env.locs[remote.0], wid(*w))?,
        Op::Rcas {
            remote,
            expected,
            new,
            local,
            wid: w,
        } => {
            let (e, n) = (val(expected, regs), val(new, regs));
            ctx.rcas(&env.locs[remote.0], e, n, &env.locs[local.0], wid(*w))?;
        }
        Op::Rfaa {
            remote,
            add,
            local,
            wid: w,
        } => ctx.rfaa(
            &env.locs[remote.0],
            val(add, regs),
            &env.locs[local.0],
            wid(*w),
        )?,
        Op::Wait(w) => ctx.wait(wid(*w))?,
        Op::Poll(n) => ctx.rdmatso().poll(*n)?,
        Op::Rfence(n) => ctx.rfence(*n)?,
        Op::Bcast { sv, nodes, wid: w } => {
            env.svs[sv.0].bcast(ctx, nodes.iter().copied(), wid(*w))?
        }
        Op::Gf(nodes) => ctx.gf(nodes.iter().copied())?,
        Op::Acquire(l) => {
            env.locks[l.0].raw().acquire(ctx)?;
        }
        Op::Release(l) => env.locks[l.0].raw().release(ctx)?,
        Op::Handoff(l) => {
            env.locks[l.0].raw().release(ctx)?;
            env.handed[handover(env, l.0, ctx.node())]
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Op::Takeover(l) => {
            let start = loco_rdmawait::clock::now();
            while !env.handed[handover(env, l.0, ctx.node())]
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                if loco_rdmawait::clock::now().saturating_duration_since(start)
                    > ctx.cluster().timeout()
                {
                    return Err(loco_locks::Error::Timeout {
                        after: ctx.cluster().timeout(),
                    }
                    .into());
                }
                loco_rdmawait::clock::yield_now();
            }
            env.locks[l.0].raw().acquire(ctx)?;
        }
        Op::GiveUp(l) => {
            let raw = env.locks[l.0].raw();
            // An acquire whose deadline passes while it waits gives its ticket up. One that got
            // in first hands the lock on at once, which the test cannot tell apart.
            match raw.acquire_until(ctx, loco_rdmawait::clock::now() + GIVE_UP_AFTER) {
                Ok(_) => raw.release(ctx)?,
                Err(loco_locks::Error::Timeout { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            // A ticket whose FAA was still in flight is given up here (else by the thread's
            // next call of the lock, and the thread has none).
            raw.leave(ctx)?;
        }
        Op::ReadSc { reg, sc } => regs[reg.0] = ctx.read_sc(&env.scs[sc.0])?,
        Op::WriteSc { sc, val: v } => ctx.write_sc(&env.scs[sc.0], val(v, regs))?,
        Op::CasSc {
            reg,
            sc,
            expected,
            new,
        } => {
            let (e, n) = (val(expected, regs), val(new, regs));
            regs[reg.0] = ctx.cas_sc(&env.scs[sc.0], e, n)?;
        }
        Op::FaaSc { reg, sc, add } => {
            regs[reg.0] = ctx.faa_sc(&env.scs[sc.0], val(add, regs))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name of a test whose thread `t1` panics just before its last statement ([`hook`]).
    const PANICS: &str = "test-hook-t1-panics";

    /// The message of [`hook`]'s panic.
    const HOOK_PANIC: &str = "a panic of the test hook";

    /// A test-only way to make a test thread panic (the runner refuses a test that would make
    /// one panic by itself, see `Test::validate`): called before each statement, it panics
    /// before the last statement of thread `t1` of a test named [`PANICS`].
    pub(super) fn hook(test: &Test, th: &crate::ast::Thread, stmt: &crate::ast::Stmt) {
        if test.name == PANICS
            && th.name == "t1"
            && th.body.last().is_some_and(|l| std::ptr::eq(l, stmt))
        {
            panic!("{HOOK_PANIC}");
        }
    }

    const HELD: &str = "litmus held
lock l : wlock
loc x @n0
thread t0 @n0 {
  acquire(l)
  store(x, 1)
}
thread t1 @n1 {
  acquire(l)
  release(l)
}
exists x = 1
expect allowed
";

    /// A thread that ends holding a lock another thread wants: `run` says so at once.
    #[test]
    fn a_lock_held_at_the_end_is_an_error() {
        let test = crate::parse(HELD, "held").unwrap();
        let cfg = RunConfig::new(RunBackend::SoftChaos, 10, 0);
        let e = run(&test, &cfg, |_| {}).unwrap_err();
        assert!(matches!(e, RunError::HeldAtEnd { .. }), "{e}");
        assert!(e.to_string().contains("t0 ends holding lock `l`"), "{e}");
        // Without the waiter, the test runs: t0 ends holding a lock nobody else wants.
        let alone = HELD.replace("  acquire(l)\n  release(l)\n", "");
        let test = crate::parse(&alone, "alone").unwrap();
        let r = run(&test, &cfg, |_| {}).unwrap();
        assert_eq!(r.runs, 10);
    }

    /// A single run (which skips that check) ends rather than hanging: the waiting acquire
    /// gives up after the cluster's timeout (a typed error naming the thread and line), and the
    /// watchdog stops whatever is left (lock spins end when the cluster shuts down).
    #[test]
    fn a_stalled_run_ends() {
        let test = crate::parse(HELD, "held").unwrap();
        let mut cfg = RunConfig::new(RunBackend::SoftChaos, 10, 0);
        cfg.timeout = Duration::from_millis(300);
        let start = Instant::now();
        let (mut stalled, mut finished) = (0, 0);
        for seed in 0..8 {
            match run_once(&test, &cfg, seed) {
                Ok(_) => finished += 1,
                Err(RunError::Stalled { .. }) => stalled += 1,
                Err(RunError::Op {
                    source: OpError::Locks(loco_locks::Error::Timeout { .. }),
                    ..
                }) => stalled += 1,
                Err(e) => panic!("seed {seed}: {e}"),
            }
            if stalled > 0 && finished > 0 {
                break;
            }
        }
        eprintln!(
            "{stalled} stalled, {finished} finished in {:?}",
            start.elapsed()
        );
        assert!(stalled > 0, "no run had t0 take the lock first");
        assert!(start.elapsed() < Duration::from_secs(120));
    }

    /// A test thread that panics under the simulator is reported as the other schedules report
    /// a thread's error: the test's thread named once, with the panic message (it said "thread
    /// simulated run ... thread t2 panicked: ... panicked", naming the simulator's thread), and
    /// the trace saying which simulated thread runs which test thread.
    #[test]
    fn a_simulated_thread_panic_names_the_test_thread_once() {
        let text = "litmus sim-thread-panic
loc x @n0
loc y @n1
thread t0 @n0 {
  r0 = load(x)
}
thread t1 @n1 {
  r0 = load(y)
}
exists t0:r0 = 1
expect forbidden
";
        let mut test = crate::parse(text, "panic").unwrap();
        // t1 panics at its first (and last) statement, deterministically.
        test.name = PANICS.into();
        let cfg = RunConfig::new(RunBackend::SoftSim, 1, 0);
        let e = run_once(&test, &cfg, 0).unwrap_err();
        let report = e.to_string();
        eprintln!("{report}");
        assert!(matches!(e, RunError::Simulation(_)), "{e:?}");
        let head = report.lines().next().unwrap();
        assert_eq!(head.matches("thread ").count(), 1, "{report}");
        assert_eq!(head.matches("panicked").count(), 1, "{report}");
        assert!(
            head.contains(&format!("thread t1 panicked: {HOOK_PANIC}")),
            "{report}"
        );
        assert!(
            report.contains("the simulator's t1, t2 are the test's t0, t1"),
            "{report}"
        );
        // The trace lists the steps, one a line.
        assert!(
            report.lines().skip(2).all(|l| l.starts_with("  ")),
            "{report}"
        );
        assert!(report.lines().count() > 3, "{report}");
    }

    /// A test thread that panics on OS threads is `RunError::Panicked` with the test's thread
    /// and the panic's message (it used to keep the name only), and the run ends at once: the
    /// panicked thread holds the lock the other waits for, and the runner shuts the cluster
    /// down rather than let the other spin until the run's deadline (which would have made
    /// the run `Stalled`, the panic lost).
    #[test]
    fn an_os_thread_panic_keeps_its_message() {
        let text = format!(
            "litmus {PANICS}
lock l : wlock
loc x @n0
loc y @n1
thread t0 @n0 {{
  acquire(l)
  store(x, 1)
  release(l)
}}
thread t1 @n1 {{
  acquire(l)
  store(y, 1)
  release(l)
}}
exists x = 1 /\\ y = 1
expect allowed
"
        );
        let test = crate::parse(&text, "panic").unwrap();
        for backend in [RunBackend::SoftChaos, RunBackend::SoftThreaded] {
            let mut cfg = RunConfig::new(backend, 3, 0);
            cfg.timeout = Duration::from_secs(20); // the deadline: a minute
            let start = Instant::now();
            let e = run(&test, &cfg, |_| {}).unwrap_err();
            let took = start.elapsed();
            let RunError::Panicked { thread, message } = &e else {
                panic!("{backend:?}: {e:?}");
            };
            assert_eq!(thread, "t1");
            assert_eq!(message.as_deref(), Some(HOOK_PANIC));
            assert_eq!(e.to_string(), format!("thread t1 panicked: {HOOK_PANIC}"));
            assert!(took < Duration::from_secs(15), "{backend:?}: {took:?}");
        }
    }

    /// A panic whose payload is no string is still a `Panicked`, without a message.
    #[test]
    fn a_panic_without_a_message_is_named() {
        let e = RunError::Panicked {
            thread: "t0".into(),
            message: None,
        };
        assert_eq!(e.to_string(), "thread t0 panicked");
        let p: Box<dyn std::any::Any + Send> = Box::new(7u32);
        assert_eq!(panic_message(&*p), None);
        let p: Box<dyn std::any::Any + Send> = Box::new(String::from("m"));
        assert_eq!(panic_message(&*p).as_deref(), Some("m"));
    }

    /// A thread name with a NUL (a hand-built test; an OS thread's name cannot hold one) runs.
    #[test]
    fn a_thread_name_with_a_nul_runs() {
        let mut test = crate::parse(HELD, "held").unwrap();
        test.threads[0].name = "t\0zero".into();
        test.threads[1].body.clear();
        let r = run(&test, &RunConfig::new(RunBackend::SoftChaos, 2, 0), |_| {}).unwrap();
        assert_eq!(r.runs, 2);
    }
}
