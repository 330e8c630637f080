//! `loco bench locks`: throughput, acquire latency, fairness and network cost of each lock.
//!
//! Every configuration (lock, nodes, threads) builds a fresh cluster, spreads the threads over
//! the nodes round-robin, and lets each thread acquire, run a critical section that writes
//! remote data, and release, over and over for `--secs`. The critical section puts one word to
//! the data node (node 1, or 0 in a one-node cluster) and makes it visible as the lock
//! promises: the weak lock fences that node (`gf`) before its release, the others need nothing
//! more (the strong lock fences every node, the node lock and the spinlock live on the data
//! node). Measured per configuration: critical sections per second (all threads), p50 and p99
//! of the acquire latency, fairness (the most critical sections of a thread over the fewest),
//! and network operations per acquire ([`Ctx::posted`], whole cycles included).
//!
//! Backends:
//! - `soft`: the soft NIC (`Threaded`: one engine thread per cluster, so its figures say how
//!   much work a protocol does, not how it would fare on a network), for `--secs` of real time;
//! - `sim`: the deterministic simulator with a network profile (`--profile connectx5` or
//!   `rxe`, see `loco_rdmawait::sim::Profile`): every figure is in simulated time, for
//!   `--sim-us` microseconds of it, and the same options give the same figures on any host.
//!
//! - `verbs`: real RDMA. Without `LOCO_NODE_ID`, every node in this process over one device
//!   (as on `soft`). With `LOCO_NODE_ID`
//!   and `LOCO_PEERS`, one process per node: every process runs the same command, creates the
//!   same objects in the same order, runs the threads of its own node (thread i on node i mod
//!   N) from a common barrier, and puts its counts and a latency histogram (320 log buckets,
//!   about 9% wide) into a table on n0; n0's process prints the figures, the others print
//!   nothing. `soft-roce-ci/cluster.sh -- loco bench locks --backend verbs ...` runs it with
//!   one process per VM.
//!
//! `--vs-sim` (verbs, one process) sets every configuration beside the simulator's prediction:
//! the requests of an uncontended lock cycle are timed on the device just before and after it
//! (the yardstick, [`mix`]), `--profile` is scaled so that the simulator takes as long for the
//! same requests, and the same configuration is simulated for as long as it ran. The host's
//! speed drifts during a run (on the emulated VM by half from one minute to the next), so the
//! fit is made per configuration, not once.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use loco_locks::{Lock, LockGuard, NLock, RawLock, SLock, WLock};
use loco_rdmawait::sim::{self, Profile};
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, Schedule, WorkId};

use crate::perftest::median_spread;
use loco_rdmawaitrmw::Rmw;
use loco_sv::GlobalFence;
use serde_json::json;

const D: WorkId = WorkId::new(1);

/// The locks `loco bench locks` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LockArg {
    /// The node lock (Fig. 13) on the data node, with cohorts (the default).
    Nlock,
    /// The weak lock (Fig. 10), ticket node 0, with `gf` towards the data node before release,
    /// with cohorts (the default).
    Wlock,
    /// The strong lock (docs/model.md §5.4), ticket node 0, with cohorts (the default).
    Slock,
    /// Baseline: the node lock without cohorts (`Lock::set_cohort(0)`): every acquire takes a
    /// ticket on the network (the protocol before cohorts).
    NlockNoCohort,
    /// Baseline: the weak lock (with `gf`) without cohorts.
    WlockNoCohort,
    /// Baseline: the strong lock without cohorts.
    SlockNoCohort,
    /// Baseline: a remote-CAS spinlock on the data node, with backoff, released by an rCAS.
    RcasSpinlock,
    /// The node lock, its critical sections run through `Lock::combine`: a node's sections
    /// are run by one of its threads in one hold of the lock.
    NlockCombining,
    /// The weak lock (with `gf` in the section) through `Lock::combine`.
    WlockCombining,
    /// The strong lock through `Lock::combine`.
    SlockCombining,
}

impl BenchBackend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BenchBackend::Soft => "soft",
            BenchBackend::Sim => "sim",
            BenchBackend::Verbs => "verbs",
        }
    }
}

impl LockArg {
    fn name(self) -> &'static str {
        match self {
            LockArg::Nlock => "nlock",
            LockArg::Wlock => "wlock",
            LockArg::Slock => "slock",
            LockArg::NlockNoCohort => "nlock-no-cohort",
            LockArg::WlockNoCohort => "wlock-no-cohort",
            LockArg::SlockNoCohort => "slock-no-cohort",
            LockArg::RcasSpinlock => "rcas-spinlock",
            LockArg::NlockCombining => "nlock-combining",
            LockArg::WlockCombining => "wlock-combining",
            LockArg::SlockCombining => "slock-combining",
        }
    }
}

/// Where the locks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    /// The soft NIC, `Threaded` schedule (real time).
    Soft,
    /// The deterministic simulator with a network profile (simulated time).
    Sim,
    /// Real RDMA (build with the `verbs` feature): in one process over one device, or, with
    /// `LOCO_NODE_ID` and `LOCO_PEERS` set, as one process per node (run the same command in
    /// every process, e.g. `soft-roce-ci/cluster.sh -- loco bench locks --backend verbs`; node
    /// 0's process prints the figures).
    Verbs,
}

/// Network profiles for `--backend sim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// A ConnectX-5 class NIC through one switch.
    Connectx5,
    /// Soft-RoCE in this project's qemu VM, calibrated against soft-roce-ci/bench.sh.
    Rxe,
}

impl ProfileArg {
    pub(crate) fn profile(self) -> Profile {
        match self {
            ProfileArg::Connectx5 => Profile::connectx5(),
            ProfileArg::Rxe => Profile::rxe(),
        }
    }

    /// The profile with every cost multiplied by `scale` (`--profile-scale`), named so
    /// (`rxe*0.25`) unless the scale is 1.
    pub(crate) fn scaled(self, scale: f64) -> Profile {
        let p = self.profile();
        if scale == 1.0 {
            return p;
        }
        let mut p = p.scaled(scale);
        p.name = format!("{}*{scale}", p.name);
        p
    }
}

/// `--profile-scale`: a factor from 0.1 to 100. Smaller ones round a profile's spin-loop costs
/// to zero, and the benchmark's simulated time would stop moving; larger ones make a request
/// take longer than the benchmark's timeouts. NaN and infinities (which `f64` parses) are no
/// factor: refused, with the rest.
pub(crate) fn profile_scale(s: &str) -> Result<f64, String> {
    const GIVE: &str = "give a factor from 0.1 to 100 that multiplies every cost of the \
                        profile, e.g. 0.25 for a host four times as fast";
    match s.parse::<f64>() {
        Ok(x) if (0.1..=100.0).contains(&x) => Ok(x),
        Ok(x) if x.is_nan() => Err(format!("NaN is not a number: {GIVE}")),
        Ok(x) if x.is_infinite() => Err(format!(
            "an infinite factor would make every cost infinite: {GIVE}"
        )),
        Ok(_) => Err(format!("the factor is out of range: {GIVE}")),
        Err(_) => Err(format!("not a number: {GIVE}")),
    }
}

/// `loco bench locks` options.
#[derive(Args, Debug)]
pub struct LocksArgs {
    /// Locks to measure (a lock given twice is measured once).
    #[arg(long, value_enum, num_args = 1.., value_delimiter = ',', default_values = ["nlock", "wlock", "slock", "nlock-combining", "slock-combining", "nlock-no-cohort", "wlock-no-cohort", "slock-no-cohort", "rcas-spinlock"])]
    lock: Vec<LockArg>,
    /// Backend.
    #[arg(long, value_enum, default_value = "soft")]
    backend: BenchBackend,
    /// Thread counts (over all nodes, 1-256), e.g. `1,2,4,8`; a repeat is measured once.
    #[arg(long, num_args = 1.., value_delimiter = ',', default_values_t = [1, 2, 4], value_parser = count::<256>)]
    threads: Vec<usize>,
    /// Node counts (1-64), e.g. `2,4`; a repeat is measured once.
    #[arg(long, num_args = 1.., value_delimiter = ',', default_values_t = [3], value_parser = count::<64>)]
    nodes: Vec<usize>,
    /// Seconds per configuration (more than 0, at most 3600; real time, `--backend soft`).
    #[arg(long, default_value_t = 1.0, value_parser = seconds)]
    secs: f64,
    /// Network profile (`--backend sim`).
    #[arg(long, value_enum, default_value = "connectx5")]
    profile: ProfileArg,
    /// Multiplies every cost of the profile (`--backend sim`, 0.1-100): fits `rxe` to another
    /// host, by the ratio of that host's put + wait round trip to the profile's
    /// (docs/simulation.md §3).
    #[arg(long, default_value_t = 1.0, value_parser = profile_scale)]
    profile_scale: f64,
    /// Simulated microseconds per configuration (`--backend sim`, 1-1000000). Long enough by
    /// default for a lock's holds to go round the nodes many times: fairness over a short
    /// window says more about the window than the lock.
    #[arg(long, default_value_t = 2000, value_parser = count::<1_000_000>)]
    sim_us: usize,
    /// Seed of the simulated runs (`--backend sim`, `--vs-sim`).
    #[arg(long, default_value_t = 1, value_parser = whole)]
    seed: u64,
    /// Runs every configuration this many times (1-100), all configurations once per round,
    /// so that a host whose speed drifts slows every configuration alike; each row gives the
    /// medians over the rounds and the range of the throughput (and, with `--vs-sim`, the
    /// median and range of the per-round errors, each round fitted on its own). Under
    /// `--backend sim` round r uses seed `--seed` + r.
    #[arg(long, default_value_t = 1, value_parser = count::<100>)]
    rounds: usize,
    /// With `--backend verbs` in one process: set each configuration beside the simulator's
    /// prediction of it. The requests of an uncontended lock cycle (put, rFAA, get, wait; two
    /// puts, rCAS, wait; n0 to n1, 100 times) are timed on the device just before and after
    /// the configuration; `--profile` (give `rxe` for Soft-RoCE) is scaled so that the
    /// simulator takes as long for them, and the same configuration is simulated for as long
    /// as it ran (`--secs`). Prints both throughputs and the error.
    #[arg(long)]
    vs_sim: bool,
    /// One JSON object per line and configuration instead of the table.
    #[arg(long)]
    json: bool,
    /// Where to write the plot (SVG: throughput against threads, one line per lock and node
    /// count).
    #[arg(long, default_value = "loco-bench-locks.svg")]
    plot: std::path::PathBuf,
    /// Write no plot.
    // With `--plot` too, one of them would be dropped silently.
    #[arg(long, conflicts_with = "plot")]
    no_plot: bool,
}

impl LocksArgs {
    /// Drops the repeats of every list option (`--lock`, `--threads`, `--nodes`), keeping each
    /// value's first occurrence in the order given: a repeated value would measure the same
    /// configuration twice.
    pub(crate) fn dedup_lists(&mut self) {
        first_occurrences(&mut self.lock);
        first_occurrences(&mut self.threads);
        first_occurrences(&mut self.nodes);
    }
}

/// Keeps the first occurrence of each value of `v`, in order (`4,2,4` is `4,2`).
pub(crate) fn first_occurrences<T: PartialEq>(v: &mut Vec<T>) {
    let mut i = 0;
    while i < v.len() {
        if v[..i].contains(&v[i]) {
            v.remove(i);
        } else {
            i += 1;
        }
    }
}

/// A count in `1..=MAX` (command-line parser).
pub(crate) fn count<const MAX: usize>(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to {MAX}")),
    }
}

/// A whole number of 0 or more, for options with no narrower range (`--seed`, the explorer's
/// budget, `doctor --memory`; command-line parser): clap's own parser said only "invalid digit
/// found in string" for `-1`, `1e6` or `1MiB`.
pub(crate) fn whole(s: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .map_err(|_| format!("expected a whole number from 0 to {}", u64::MAX))
}

/// [`whole`], as a `usize`.
pub(crate) fn whole_usize(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .map_err(|_| format!("expected a whole number from 0 to {}", usize::MAX))
}

/// A duration in seconds in `(0, 3600]`, fractions allowed, and not so small that it rounds
/// to 0 ns (command-line parser).
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 3600.0 && !Duration::from_secs_f64(x).is_zero() => Ok(x),
        _ => Err("expected seconds, at least 0.000000001 (1 ns) and at most 3600".to_string()),
    }
}

/// What one configuration measured.
struct Row {
    lock: &'static str,
    nodes: usize,
    threads: usize,
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    fairness: f64,
    net_ops_per_acquire: f64,
    /// How the cluster's global fences read (`get` or `cas`, docs/model.md §5.2).
    fence_read: &'static str,
    /// `--vs-sim`: the simulator's prediction of this configuration.
    sim: Option<Prediction>,
    /// `--rounds` above 1: what the rounds spread over.
    spread: Option<Spread>,
    /// The throughput of each round, in round order (one value without `--rounds`).
    round_ops: Vec<f64>,
    /// Against the rCAS spinlock of the same node and thread count in the same run: the
    /// median, lowest and highest of the per-round ratios of throughputs (see
    /// [`vs_spinlock`]). `None` for the spinlock itself, or without it in the run.
    vs_spinlock: Option<(f64, f64, f64)>,
}

/// How the rounds of one configuration spread (`--rounds`).
#[derive(Clone, Copy, Debug)]
struct Spread {
    rounds: usize,
    /// The lowest and highest throughput of a round.
    ops: (f64, f64),
    /// `--vs-sim`: the median, lowest and highest of the rounds' prediction errors.
    error: Option<(f64, f64, f64)>,
}

impl Row {
    /// One row for the rounds of a configuration: each figure the median over the rounds
    /// (the prediction's too), with the spread. One round is returned as it is.
    fn over_rounds(mut rounds: Vec<Row>) -> Option<Row> {
        if rounds.len() <= 1 {
            return rounds.pop();
        }
        // The median of a figure over the rounds (at least two).
        fn median<T>(v: &[T], f: impl Fn(&T) -> f64) -> f64 {
            median_spread(&v.iter().map(f).collect::<Vec<_>>()).0
        }
        let m = |f: fn(&Row) -> f64| median(&rounds, f);
        let (_, lo, hi) = median_spread(&rounds.iter().map(|r| r.ops_per_sec).collect::<Vec<_>>());
        let spread = Spread {
            rounds: rounds.len(),
            ops: (lo, hi),
            error: rounds
                .iter()
                .map(|r| r.sim.map(|p| p.error(r.ops_per_sec)))
                .collect::<Option<Vec<f64>>>()
                .map(|e| median_spread(&e)),
        };
        let sim = rounds
            .iter()
            .map(|r| r.sim)
            .collect::<Option<Vec<Prediction>>>()
            .map(|p| Prediction {
                mix_us: median(&p, |p| p.mix_us),
                scale: median(&p, |p| p.scale),
                ops_per_sec: median(&p, |p| p.ops_per_sec),
            });
        let round_ops = rounds.iter().map(|r| r.ops_per_sec).collect();
        Some(Row {
            lock: rounds[0].lock,
            nodes: rounds[0].nodes,
            threads: rounds[0].threads,
            ops_per_sec: m(|r| r.ops_per_sec),
            p50_us: m(|r| r.p50_us),
            p99_us: m(|r| r.p99_us),
            fairness: m(|r| r.fairness),
            net_ops_per_acquire: m(|r| r.net_ops_per_acquire),
            fence_read: rounds[0].fence_read,
            sim,
            spread: Some(spread),
            round_ops,
            vs_spinlock: None,
        })
    }

    /// The prediction's error: the median of the rounds' errors where there were rounds, else
    /// the one prediction's.
    fn sim_error(&self) -> Option<f64> {
        match self.spread.and_then(|s| s.error) {
            Some((median, _, _)) => Some(median),
            None => self.sim.map(|p| p.error(self.ops_per_sec)),
        }
    }
}

/// The simulator's prediction of a configuration measured on a device (`--vs-sim`).
#[derive(Clone, Copy, Debug)]
struct Prediction {
    /// The yardstick's time on the device around the configuration (µs, mean of the two
    /// means; see [`mix`]).
    mix_us: f64,
    /// The factor the profile was scaled by to predict the yardstick's time.
    scale: f64,
    /// The simulated throughput.
    ops_per_sec: f64,
}

impl Prediction {
    /// The prediction's error relative to what was measured (0.1: 10% too high).
    fn error(&self, measured: f64) -> f64 {
        self.ops_per_sec / measured - 1.0
    }
}

impl Row {
    /// The figures of `count` critical sections in `elapsed` seconds: `least` and `most` are
    /// the fewest and most of one thread (`least` 0: a thread starved, fairness infinite), `net`
    /// the network operations posted, `p50`/`p99` the acquire latencies in µs.
    fn new(
        lock: LockArg,
        (nodes, threads): (usize, usize),
        count: u64,
        elapsed: f64,
        (p50_us, p99_us): (f64, f64),
        (least, most): (u64, u64),
        net: u64,
    ) -> Row {
        Row {
            lock: lock.name(),
            nodes,
            threads,
            ops_per_sec: count as f64 / elapsed,
            p50_us,
            p99_us,
            fairness: if least == 0 {
                f64::INFINITY
            } else {
                most as f64 / least as f64
            },
            net_ops_per_acquire: if count == 0 {
                0.0
            } else {
                net as f64 / count as f64
            },
            fence_read: loco_rdmawait::FenceRead::Get.name(),
            sim: None,
            spread: None,
            round_ops: vec![count as f64 / elapsed],
            vs_spinlock: None,
        }
    }
}

/// What a benchmark thread brings back: every acquire's latency (ns) and the network
/// operations it posted. (Not u32: that ends at 4.3 s, which an oversubscribed host's
/// acquires pass, and the percentiles then showed the cap.)
type Done = (Vec<u64>, u64);

/// A lock of any kind, shared by the threads.
#[derive(Clone)]
enum AnyLock {
    N(NLock),
    W(WLock),
    S(SLock),
    Spin(Loc),
    /// A lock whose sections go through `Lock::combine`.
    Combining(Box<AnyLock>),
}

/// A thread's words: `one` and `zero` to send, `ret` for the spinlock's CAS.
struct Words {
    one: Loc,
    zero: Loc,
    ret: Loc,
}

/// The options of `rules` (id, where it applies, whether it applies to this run) given on
/// the command line (not their defaults) where they do not apply, each said as an error.
pub(crate) fn given_where_ignored(
    m: &clap::ArgMatches,
    rules: &[(&str, &str, bool)],
) -> Vec<String> {
    rules
        .iter()
        .filter(|(id, _, applies)| {
            !applies && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
        })
        .map(|(id, to, _)| format!("--{} applies only to {to}", id.replace('_', "-")))
        .collect()
}

/// The options given that the run would ignore: each applies to one backend (or mode) only,
/// and a run that silently drops one measures something else than was asked for.
pub(crate) fn ignored_options(args: &LocksArgs, m: &clap::ArgMatches) -> Vec<String> {
    if args.vs_sim && args.backend != BenchBackend::Verbs {
        return Vec::new(); // the more basic mistake: `locks` says so
    }
    let sim = args.backend == BenchBackend::Sim;
    let rules: [(&str, &str, bool); 5] = [
        ("profile", "--backend sim or --vs-sim", sim || args.vs_sim),
        ("seed", "--backend sim or --vs-sim", sim || args.vs_sim),
        (
            "profile_scale",
            "--backend sim (--vs-sim fits the scale itself)",
            sim,
        ),
        (
            "sim_us",
            "--backend sim (--vs-sim simulates for --secs)",
            sim,
        ),
        (
            "secs",
            "--backend soft or verbs (give --sim-us to sim)",
            !sim,
        ),
    ];
    given_where_ignored(m, &rules)
}

/// Runs `loco bench locks`.
pub fn locks(args: &LocksArgs) -> Result<(), String> {
    let secs = Duration::from_secs_f64(args.secs);
    crate::plot::check_target(&args.plot, args.no_plot)?;
    if args.vs_sim {
        if args.backend != BenchBackend::Verbs {
            return Err(format!(
                "--vs-sim sets a device's figures beside the simulator's: it needs --backend \
                 verbs, not {}",
                args.backend.name()
            ));
        }
        if std::env::var_os("LOCO_NODE_ID").is_some() {
            return Err(
                "--vs-sim runs every node in this process over one device: unset \
                        LOCO_NODE_ID (and LOCO_PEERS)"
                    .into(),
            );
        }
        if args.nodes.contains(&1) {
            return Err("--vs-sim times requests from n0 to n1: give --nodes of 2 or more".into());
        }
    }
    // After the command line's mistakes, before the first configuration, which would
    // otherwise be blamed for it.
    #[cfg(not(feature = "verbs"))]
    if args.backend == BenchBackend::Verbs {
        return Err(NO_VERBS.into());
    }
    let configs: Vec<(LockArg, usize, usize)> = args
        .lock
        .iter()
        .flat_map(|&l| {
            args.nodes
                .iter()
                .flat_map(move |&n| args.threads.iter().map(move |&t| (l, n, t)))
        })
        .collect();
    let bar = progress(configs.len() * args.rounds);
    // A multi-process verbs cluster: one for every configuration, its node count fixed by the
    // peer list.
    let spanning = match args.backend {
        BenchBackend::Verbs => verbs_cluster(args)?,
        _ => None,
    };
    let quiet = spanning.as_ref().is_some_and(|s| s.me != NodeId(0));
    if quiet {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    // Per configuration, its row once every round is in, and whether it has been shown.
    let mut done: Vec<Option<Row>> = configs.iter().map(|_| None).collect();
    let mut shown = vec![false; configs.len()];
    // Per configuration, the rows of its rounds.
    let mut rounds: Vec<Vec<Row>> = configs.iter().map(|_| Vec::new()).collect();
    // `--vs-sim`: the yardstick's simulated time, per node count (deterministic: once each).
    let mut yardsticks = std::collections::HashMap::new();
    // Within a round the spinlock's configurations go first: the others' ratios to it are then
    // known as soon as their own rows are in, and rows are printed as they come.
    let order: Vec<usize> = (0..configs.len())
        .filter(|&i| configs[i].0 == LockArg::RcasSpinlock)
        .chain((0..configs.len()).filter(|&i| configs[i].0 != LockArg::RcasSpinlock))
        .collect();
    for (round, i) in (0..args.rounds).flat_map(|r| order.iter().map(move |&i| (r, i))) {
        let (lock, nodes, threads) = configs[i];
        let message = format!("{} n={nodes} t={threads}", lock.name());
        bar.set_message(match args.rounds {
            1 => message,
            n => format!("round {}/{n}: {message}", round + 1),
        });
        // `None`: another process of a spanning run prints this configuration.
        let row = match (args.backend, &spanning) {
            (BenchBackend::Verbs, Some(sp)) => measure_spanning(sp, lock, threads, secs),
            (BenchBackend::Verbs, None) if args.vs_sim => {
                vs_sim(args, lock, nodes, threads, secs, &mut yardsticks).map(Some)
            }
            (BenchBackend::Verbs, None) => verbs_single(nodes, 1 << 20)
                .and_then(|c| measure_with(c, lock, nodes, threads, secs))
                .map(Some),
            (BenchBackend::Soft, _) => measure(lock, nodes, threads, secs).map(Some),
            (BenchBackend::Sim, _) => measure_sim(
                lock,
                nodes,
                threads,
                args.profile.scaled(args.profile_scale),
                Duration::from_micros(args.sim_us as u64),
                args.seed.wrapping_add(round as u64),
            )
            .map(Some),
        }
        .map_err(|e| format!("{} on {nodes} nodes, {threads} threads: {e}", lock.name()))?;
        bar.inc(1);
        if let Some(row) = row {
            rounds[i].push(row);
            // A configuration's row is printed once its last round is in, and, where the run
            // has the spinlock, once the spinlock's row of the same size is in too (its ratio).
            if round + 1 == args.rounds {
                if let Some(row) = Row::over_rounds(std::mem::take(&mut rounds[i])) {
                    done[i] = Some(row);
                    for j in ready(&mut done, &mut shown, &configs) {
                        if args.json {
                            let line = json_row(done[j].as_ref().expect("ready"), args);
                            bar.suspend(|| crate::ops::out(&line.to_string()));
                        }
                    }
                }
            }
        }
    }
    // Rows in the order of the configurations (the table's and the plot's).
    let rows: Vec<Row> = done.into_iter().flatten().collect();
    bar.finish_and_clear();
    if quiet {
        return Ok(());
    }
    if !args.json {
        crate::ops::out(table(&rows, args).trim_end_matches('\n'));
    }
    if !args.no_plot {
        write_plot(&rows, args)?;
    }
    Ok(())
}

/// One configuration on a device in this process, and its prediction by the simulator with
/// `--profile` fitted to the time of a lock cycle's requests ([`mix`]) on the device around it
/// (`--vs-sim`). `yardsticks` keeps the yardstick's simulated time per node count.
fn vs_sim(
    args: &LocksArgs,
    lock: LockArg,
    nodes: usize,
    threads: usize,
    secs: Duration,
    yardsticks: &mut std::collections::HashMap<usize, f64>,
) -> Result<Row, String> {
    let cluster = verbs_single(nodes, 1 << 20)?;
    let before = mix_time(&cluster)?;
    let mut row = measure_with(cluster.clone(), lock, nodes, threads, secs)?;
    let after = mix_time(&cluster)?;
    let mix_us = (before + after) / 2.0;
    let simulated = match yardsticks.get(&nodes) {
        Some(&t) => t,
        None => {
            let t = simulated_mix_time(&args.profile.profile(), nodes, args.seed)?;
            yardsticks.insert(nodes, t);
            t
        }
    };
    let scale = mix_us / simulated;
    let sim = measure_sim(
        lock,
        nodes,
        threads,
        args.profile.scaled(scale),
        secs,
        args.seed,
    )?;
    row.sim = Some(Prediction {
        mix_us,
        scale,
        ops_per_sec: sim.ops_per_sec,
    });
    Ok(row)
}

/// Samples of the yardstick timed by [`mix_time`] (after [`MIX_WARMUP`] unmeasured ones).
const MIX_SAMPLES: usize = 100;
const MIX_WARMUP: usize = 10;

/// The yardstick `--vs-sim` fits a profile with, from n0 to n1: the requests of an uncontended
/// lock cycle (a put, an rFAA and a get, then a wait; two puts and an rCAS, then a wait).
/// Not a single put + wait: on the emulated VM a lone round trip swings between two speeds
/// (24 and 42 µs, minutes apart) that requests in a row do not follow.
fn mix(ctx: &Ctx, remote: &[Loc; 3], local: &[Loc; 2]) -> Result<(), loco_rdmawait::Error> {
    ctx.put(&remote[0], &local[0], D)?;
    ctx.rfaa(&remote[1], 1, &local[1], D)?;
    ctx.get(&local[1], &remote[2], D)?;
    ctx.wait(D)?;
    ctx.put(&remote[0], &local[0], D)?;
    ctx.put(&remote[2], &local[0], D)?;
    ctx.rcas(&remote[1], 0, 0, &local[1], D)?;
    ctx.wait(D)
}

/// The mean time of [`mix`] on `cluster` (µs), from a new context on n0.
fn mix_time(cluster: &Cluster) -> Result<f64, String> {
    let ctx = cluster.context(NodeId(0)).map_err(|e| e.to_string())?;
    mix_time_on(cluster, &ctx)
}

/// The mean time of [`mix`] from `ctx` (on n0), real or simulated ([`loco_rdmawait::clock`]).
fn mix_time_on(cluster: &Cluster, ctx: &Ctx) -> Result<f64, String> {
    let s = |e: loco_rdmawait::Error| e.to_string();
    let word = |n: u16| cluster.alloc_word(NodeId(n)).map_err(s);
    let remote = [word(1)?, word(1)?, word(1)?];
    let local = [word(0)?, word(0)?];
    for _ in 0..MIX_WARMUP {
        mix(ctx, &remote, &local).map_err(s)?;
    }
    let t0 = loco_rdmawait::clock::now();
    for _ in 0..MIX_SAMPLES {
        mix(ctx, &remote, &local).map_err(s)?;
    }
    let t = loco_rdmawait::clock::now().saturating_duration_since(t0);
    Ok(t.as_secs_f64() * 1e6 / MIX_SAMPLES as f64)
}

/// [`mix_time`] under the simulator with `profile` (µs of simulated time).
fn simulated_mix_time(profile: &Profile, nodes: usize, seed: u64) -> Result<f64, String> {
    let out: Arc<Mutex<Option<f64>>> = Arc::default();
    let o = out.clone();
    let config = sim::Config::new(nodes)
        .profile(profile.clone())
        .memory_per_node(1 << 20)
        .max_steps(u64::MAX);
    sim::replay(config, seed, move |c: &Cluster| {
        let (o, c2) = (o.clone(), c.clone());
        sim::spawn(c, NodeId(0), move |ctx: &Ctx| -> Result<(), String> {
            *o.lock().unwrap_or_else(|p| p.into_inner()) = Some(mix_time_on(&c2, ctx)?);
            Ok(())
        })
        .join()
        .map_err(|e| e.to_string())
    })
    .map_err(|e| e.report())?;
    let t = out.lock().unwrap_or_else(|p| p.into_inner()).take();
    t.filter(|&t| t > 0.0)
        .ok_or_else(|| "the simulated yardstick took no time".to_string())
}

/// Throughput against threads, one line per lock and node count, as SVG at `args.plot`.
fn write_plot(rows: &[Row], args: &LocksArgs) -> Result<(), String> {
    let mut series: Vec<crate::plot::Series> = Vec::new();
    for r in rows {
        let name = format!("{} ({} nodes)", r.lock, r.nodes);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((r.threads as f64, r.ops_per_sec)),
            None => series.push(crate::plot::Series {
                name,
                points: vec![(r.threads as f64, r.ops_per_sec)],
            }),
        }
    }
    let backend = match (args.backend, profile_name(args)) {
        (_, Some(p)) => format!("sim, profile {p}, simulated time"),
        (BenchBackend::Verbs, _) => "verbs, real time".into(),
        _ => "soft NIC (Threaded), real time".into(),
    };
    let svg = crate::plot::svg(
        &format!("loco bench locks: {backend}"),
        "threads",
        "critical sections per second",
        &series,
    );
    std::fs::write(&args.plot, svg)
        .map_err(|e| format!("cannot write the plot to {}: {e}", args.plot.display()))?;
    errln!("plot written to {}", args.plot.display());
    Ok(())
}

/// The profile's name under `--backend sim`.
fn profile_name(args: &LocksArgs) -> Option<String> {
    (args.backend == BenchBackend::Sim).then(|| args.profile.scaled(args.profile_scale).name)
}

/// The configurations whose rows can be shown now, in order, marked shown: every finished row
/// whose spinlock row of the same node and thread count is finished too, or that has none in
/// the run (the spinlock's own rows among them). Sets their ratio to the spinlock on the way.
/// (The spinlock runs first in every round, so no row waits long.)
fn ready(
    done: &mut [Option<Row>],
    shown: &mut [bool],
    configs: &[(LockArg, usize, usize)],
) -> Vec<usize> {
    let spin_of = |nodes: usize, threads: usize| {
        configs
            .iter()
            .position(|&c| c == (LockArg::RcasSpinlock, nodes, threads))
    };
    let mut now = Vec::new();
    for i in 0..configs.len() {
        if shown[i] || done[i].is_none() {
            continue;
        }
        let (lock, nodes, threads) = configs[i];
        let ratio = match spin_of(nodes, threads) {
            // The spinlock's own rows (a configuration given twice among them) have none.
            Some(s) if lock != LockArg::RcasSpinlock => match &done[s] {
                Some(spin) => vs_spinlock(done[i].as_ref().expect("finished"), spin),
                None => continue, // wait for the spinlock
            },
            _ => None,
        };
        if let Some(row) = done[i].as_mut() {
            row.vs_spinlock = ratio;
        }
        shown[i] = true;
        now.push(i);
    }
    now
}

/// A lock's throughput against the spinlock's in the same run: the median of the per-round
/// ratios (round r of the lock over round r of the spinlock, which ran in the same minutes
/// and so on a host at the same speed), with the lowest and highest of them.
fn vs_spinlock(row: &Row, spin: &Row) -> Option<(f64, f64, f64)> {
    if row.round_ops.len() != spin.round_ops.len() {
        return None;
    }
    let ratios: Vec<f64> = row
        .round_ops
        .iter()
        .zip(&spin.round_ops)
        .filter(|(_, s)| **s > 0.0)
        .map(|(r, s)| r / s)
        .collect();
    (!ratios.is_empty()).then(|| median_spread(&ratios))
}

fn json_row(r: &Row, args: &LocksArgs) -> serde_json::Value {
    let mut v = json!({
        "lock": r.lock,
        "backend": args.backend.name(),
        "profile": profile_name(args),
        "threads": r.threads,
        "nodes": r.nodes,
        "ops_per_sec": r.ops_per_sec,
        "p50_us": r.p50_us,
        "p99_us": r.p99_us,
        "fairness": r.fairness,
        "net_ops_per_acquire": r.net_ops_per_acquire,
        "fence_read": r.fence_read,
    });
    if let Some((median, lo, hi)) = r.vs_spinlock {
        v["vs_spinlock"] = json!(median);
        if r.spread.is_some() {
            v["vs_spinlock_min"] = json!(lo);
            v["vs_spinlock_max"] = json!(hi);
        }
    }
    if let Some(p) = r.sim {
        v["mix_us"] = json!(p.mix_us);
        v["sim_profile"] = json!(args.profile.profile().name);
        v["sim_profile_scale"] = json!(p.scale);
        v["sim_ops_per_sec"] = json!(p.ops_per_sec);
        v["sim_error"] = json!(r.sim_error());
    }
    if let Some(sp) = r.spread {
        v["rounds"] = json!(sp.rounds);
        v["ops_per_sec_min"] = json!(sp.ops.0);
        v["ops_per_sec_max"] = json!(sp.ops.1);
        if let Some((_, lo, hi)) = sp.error {
            v["sim_error_min"] = json!(lo);
            v["sim_error_max"] = json!(hi);
        }
    }
    v
}

fn table(rows: &[Row], args: &LocksArgs) -> String {
    let mut s = String::new();
    let spread = rows.iter().any(|r| r.spread.is_some());
    let _ = write!(
        s,
        "{:<16} {:>5} {:>7} {:>12} {:>9} {:>9} {:>9} {:>8}",
        "lock", "nodes", "threads", "ops/s", "p50 us", "p99 us", "fairness", "net ops"
    );
    let ratios = rows.iter().any(|r| r.vs_spinlock.is_some());
    let _ = writeln!(
        s,
        "{}{}{}",
        if ratios { "  x spin" } else { "" },
        if spread { "    ops/s range" } else { "" },
        if ratios && spread {
            "  x spin range"
        } else {
            ""
        }
    );
    for r in rows {
        let _ = write!(
            s,
            "{:<16} {:>5} {:>7} {:>12.0} {:>9.1} {:>9.1} {:>9.2} {:>8.2}",
            r.lock,
            r.nodes,
            r.threads,
            r.ops_per_sec,
            r.p50_us,
            r.p99_us,
            r.fairness,
            r.net_ops_per_acquire
        );
        if ratios {
            let x = r
                .vs_spinlock
                .map(|(m, _, _)| format!("{m:.2}"))
                .unwrap_or_else(|| "-".into());
            let _ = write!(s, "  {x:>6}");
        }
        if let Some(sp) = r.spread {
            let _ = write!(s, "  {:>13}", format!("{:.0}-{:.0}", sp.ops.0, sp.ops.1));
            if let Some((_, lo, hi)) = r.vs_spinlock {
                let _ = write!(s, "  {:>12}", format!("{lo:.2}-{hi:.2}"));
            }
        }
        let _ = writeln!(s);
    }
    if ratios {
        let _ = writeln!(
            s,
            "(x spin: throughput over the rCAS spinlock's at the same nodes and threads{})",
            if spread {
                ", the median of the rounds' ratios, each round against the same round"
            } else {
                ""
            }
        );
    }
    if let Some(r) = rows.first() {
        let _ = writeln!(
            s,
            "(global fences read with a {}: docs/model.md §5.2)",
            r.fence_read
        );
    }
    if rows.iter().any(|r| r.sim.is_some()) {
        let _ = writeln!(
            s,
            "\nthe simulator's prediction ({}, fitted to the time of a lock cycle's requests on the \
             device around each configuration):",
            args.profile.profile().name
        );
        let _ = writeln!(
            s,
            "{:<16} {:>5} {:>7} {:>12} {:>12} {:>8} {:>9} {:>7}{}",
            "lock",
            "nodes",
            "threads",
            "ops/s",
            "sim ops/s",
            "error",
            "mix us",
            "scale",
            if spread { "   error range" } else { "" }
        );
        for r in rows {
            if let (Some(p), Some(e)) = (r.sim, r.sim_error()) {
                let range = r
                    .spread
                    .and_then(|sp| sp.error)
                    .map(|(_, lo, hi)| format!("   {:+.0}% to {:+.0}%", lo * 100.0, hi * 100.0))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "{:<16} {:>5} {:>7} {:>12.0} {:>12.0} {:>+7.0}% {:>9.1} {:>7.3}{range}",
                    r.lock,
                    r.nodes,
                    r.threads,
                    r.ops_per_sec,
                    p.ops_per_sec,
                    e * 100.0,
                    p.mix_us,
                    p.scale
                );
            }
        }
        if spread {
            let _ = writeln!(
                s,
                "(medians over the rounds; the error is the median of the rounds' errors)"
            );
        }
    }
    let backend = match (args.backend, profile_name(args)) {
        (_, Some(p)) if args.rounds > 1 => format!(
            "backend sim, profile {p}: simulated time ({} µs per configuration, seeds {} to {})",
            args.sim_us,
            args.seed,
            args.seed.wrapping_add(args.rounds as u64 - 1)
        ),
        (_, Some(p)) => format!(
            "backend sim, profile {p}: simulated time ({} µs per configuration, seed {})",
            args.sim_us, args.seed
        ),
        (BenchBackend::Verbs, _) => "backend verbs: real RDMA, real time".into(),
        _ => "backend soft (Threaded): work done per protocol, not network timing".into(),
    };
    let _ = writeln!(
        s,
        "{backend}; net ops = network operations per acquire + critical section + release"
    );
    s
}

/// One configuration: a fresh cluster, `threads` threads for `secs`.
fn measure(lock: LockArg, nodes: usize, threads: usize, secs: Duration) -> Result<Row, String> {
    let cluster = Cluster::builder()
        .nodes(nodes)
        .memory_per_node(1 << 20)
        .soft(Schedule::Threaded)
        .build()
        .map_err(|e| e.to_string())?;
    measure_with(cluster, lock, nodes, threads, secs)
}

/// One configuration on `cluster` (all its nodes in this process).
fn measure_with(
    cluster: Cluster,
    lock: LockArg,
    nodes: usize,
    threads: usize,
    secs: Duration,
) -> Result<Row, String> {
    let data_node = NodeId(if nodes > 1 { 1 } else { 0 });
    let data = cluster.alloc_word(data_node).map_err(|e| e.to_string())?;
    let l = new_lock(lock, &cluster, data_node, threads)?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (c, l, stop, start) = (cluster.clone(), l.clone(), stop.clone(), start.clone());
            let node = NodeId((i % nodes) as u16);
            thread::spawn(move || -> Result<Done, String> {
                let ctx = c.context(node).map_err(|e| e.to_string());
                // Every thread reaches the barrier, failed or not, so that none waits forever.
                start.wait();
                let ctx = ctx?;
                let w = words(&ctx).map_err(|e| e.to_string())?;
                cycles(&l, &ctx, &w, &data, data_node, || {
                    !stop.load(Ordering::Relaxed)
                })
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    thread::sleep(secs);
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    let mut counts = Vec::new();
    let mut net = 0;
    for (l, n) in join_all(handles)? {
        counts.push(l.len());
        lat.extend(l);
        net += n;
    }
    let elapsed = began.elapsed().as_secs_f64();
    if lat.is_empty() {
        // Nothing to report: a row of zeros (and an infinite fairness) would read as a lock
        // that makes no progress.
        return Err(format!(
            "no critical section completed in {} (--secs {}): give a longer --secs",
            fmt_secs(elapsed),
            secs.as_secs_f64()
        ));
    }
    let mut row = summarise(lock, nodes, threads, lat, &counts, net, elapsed);
    row.fence_read = cluster.fence_read().name();
    Ok(row)
}

/// Seconds for a message: `1.5 s`, `250 µs`.
fn fmt_secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// The figures of one configuration from every acquire's latency (ns), each thread's count of
/// critical sections, the network operations and the elapsed seconds.
fn summarise(
    lock: LockArg,
    nodes: usize,
    threads: usize,
    mut lat: Vec<u64>,
    counts: &[usize],
    net: u64,
    elapsed: f64,
) -> Row {
    let total = lat.len();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() - 1) as f64 * p).round() as usize;
        lat[i] as f64 / 1000.0
    };
    let (max, min) = (
        counts.iter().copied().max().unwrap_or(0),
        counts.iter().copied().min().unwrap_or(0),
    );
    Row::new(
        lock,
        (nodes, threads),
        total as u64,
        elapsed,
        (pct(0.5), pct(0.99)),
        (min as u64, max as u64),
        net,
    )
}

/// One configuration under the simulator: a fresh simulated cluster with `profile`, `threads`
/// simulated threads cycling until `span` of simulated time has passed.
fn measure_sim(
    lock: LockArg,
    nodes: usize,
    threads: usize,
    profile: Profile,
    span: Duration,
    seed: u64,
) -> Result<Row, String> {
    let results: Arc<Mutex<Vec<Done>>> = Arc::default();
    let out = results.clone();
    let f = move |cluster: &Cluster| -> Result<(), String> {
        let s = |e: loco_rdmawait::Error| e.to_string();
        let data_node = NodeId(if nodes > 1 { 1 } else { 0 });
        let data = cluster.alloc_word(data_node).map_err(s)?;
        let l = new_lock(lock, cluster, data_node, threads)?;
        let mut hs = Vec::new();
        for i in 0..threads {
            let (l, out) = (l.clone(), out.clone());
            let node = NodeId((i % nodes) as u16);
            hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                let w = words(ctx).map_err(|e| e.to_string())?;
                let done = cycles(&l, ctx, &w, &data, data_node, || sim::now() < span)?;
                out.lock().unwrap_or_else(|p| p.into_inner()).push(done);
                Ok::<(), String>(())
            }));
        }
        for h in hs {
            h.join().map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let fence_read = profile.fence_read().name();
    let config = sim::Config::new(nodes)
        .profile(profile)
        .memory_per_node(1 << 20)
        .timeout(Duration::from_secs(1))
        .max_steps(u64::MAX);
    let run = sim::replay(config, seed, f).map_err(|e| e.report())?;
    let per = std::mem::take(&mut *results.lock().unwrap_or_else(|p| p.into_inner()));
    let counts: Vec<usize> = per.iter().map(|(l, _)| l.len()).collect();
    let net = per.iter().map(|(_, n)| n).sum();
    let lat: Vec<u64> = per.into_iter().flat_map(|(l, _)| l).collect();
    if lat.is_empty() {
        // As in `measure_with`: a row of zeros would read as a lock that makes no progress.
        return Err(format!(
            "no critical section completed in {} of simulated time: give a longer --sim-us",
            fmt_secs(span.as_secs_f64())
        ));
    }
    // Throughput over the span every thread cycled in (the last cycles end a little after).
    let elapsed = run.time.max(span).as_secs_f64();
    let mut row = summarise(lock, nodes, threads, lat, &counts, net, elapsed);
    row.fence_read = fence_read;
    Ok(row)
}

/// The lock under test, on a cluster whose data node is `data_node`.
fn new_lock(
    lock: LockArg,
    cluster: &Cluster,
    data_node: NodeId,
    threads: usize,
) -> Result<AnyLock, String> {
    match lock {
        LockArg::Nlock => NLock::new(cluster, data_node).map(AnyLock::N),
        LockArg::Wlock => WLock::new(cluster, NodeId(0), threads).map(AnyLock::W),
        LockArg::Slock => SLock::new(cluster, NodeId(0), threads).map(AnyLock::S),
        LockArg::NlockNoCohort => {
            NLock::new(cluster, data_node).map(|l| AnyLock::N(l.with_cohort(0)))
        }
        LockArg::WlockNoCohort => {
            WLock::new(cluster, NodeId(0), threads).map(|l| AnyLock::W(l.with_cohort(0)))
        }
        LockArg::SlockNoCohort => {
            SLock::new(cluster, NodeId(0), threads).map(|l| AnyLock::S(l.with_cohort(0)))
        }
        LockArg::NlockCombining => {
            NLock::new(cluster, data_node).map(|l| AnyLock::Combining(Box::new(AnyLock::N(l))))
        }
        LockArg::WlockCombining => WLock::new(cluster, NodeId(0), threads)
            .map(|l| AnyLock::Combining(Box::new(AnyLock::W(l)))),
        LockArg::SlockCombining => SLock::new(cluster, NodeId(0), threads)
            .map(|l| AnyLock::Combining(Box::new(AnyLock::S(l)))),
        LockArg::RcasSpinlock => {
            return cluster
                .alloc_word(data_node)
                .map(AnyLock::Spin)
                .map_err(|e| e.to_string())
        }
    }
    .map_err(|e| e.to_string())
}

/// A benchmark thread's work: cycles while `go_on()`; every acquire's latency (ns, on
/// [`loco_rdmawait::clock`]: real time, or simulated time on a simulated thread) and the
/// network operations posted.
fn cycles(
    l: &AnyLock,
    ctx: &Ctx,
    w: &Words,
    data: &Loc,
    data_node: NodeId,
    go_on: impl Fn() -> bool,
) -> Result<Done, String> {
    let mut lat = Vec::new();
    let before = ctx.posted();
    while go_on() {
        let t0 = loco_rdmawait::clock::now();
        cycle(l, ctx, w, data, data_node, |at| {
            let took = at.saturating_duration_since(t0);
            lat.push(took.as_nanos().min(u64::MAX as u128) as u64)
        })
        .map_err(|e| e.to_string())?;
    }
    Ok((lat, ctx.posted() - before))
}

fn words(ctx: &Ctx) -> loco_rdmawait::Result<Words> {
    let c = ctx.cluster();
    let w = Words {
        one: c.alloc_word(ctx.node())?,
        zero: c.alloc_word(ctx.node())?,
        ret: c.alloc_word(ctx.node())?,
    };
    ctx.store(&w.one, 1)?;
    Ok(w)
}

/// Any error of the layers a cycle calls.
type CycleError = Box<dyn std::error::Error>;

/// One acquire (`acquired` is told when the critical section started), critical section,
/// release.
fn cycle(
    l: &AnyLock,
    ctx: &Ctx,
    w: &Words,
    data: &Loc,
    data_node: NodeId,
    started: impl FnOnce(std::time::Instant),
) -> Result<(), CycleError> {
    let put = || ctx.put(data, &w.one, D);
    let now = loco_rdmawait::clock::now;
    match l {
        AnyLock::Combining(l) => {
            // The same section, run by the node's combiner on its context (the thread's word
            // `one` is on the combiner's node too); it says when it started.
            let (data, one) = (*data, w.one);
            let section = move |ctx: &Ctx, fence: bool| -> Result<std::time::Instant, String> {
                let at = loco_rdmawait::clock::now();
                let r: Result<(), CycleError> = (|| {
                    ctx.put(&data, &one, D)?;
                    if fence {
                        ctx.gf([data_node])?;
                    }
                    Ok(())
                })();
                r.map(|()| at).map_err(|e| e.to_string())
            };
            let at = match &**l {
                AnyLock::N(l) => l.combine(ctx, move |ctx| section(ctx, false))?,
                AnyLock::W(l) => l.combine(ctx, move |ctx| section(ctx, true))?,
                AnyLock::S(l) => l.combine(ctx, move |ctx| section(ctx, false))?,
                _ => return Err("only the loco locks combine".into()),
            }?;
            started(at);
            Ok(())
        }
        AnyLock::N(l) => locked(l, ctx, || started(now()), || Ok(put()?)),
        AnyLock::W(l) => locked(
            l,
            ctx,
            || started(now()),
            || {
                put()?;
                Ok(ctx.gf([data_node])?)
            },
        ),
        AnyLock::S(l) => locked(l, ctx, || started(now()), || Ok(put()?)),
        AnyLock::Spin(word) => {
            let mut round = 0u32;
            // Bounded like every wait of loco-rs: a holder that never releases is an error.
            let start = loco_rdmawait::clock::now();
            let limit = ctx.cluster().timeout();
            loop {
                ctx.rcas(word, 0, 1, &w.ret, D)?;
                ctx.wait(D)?;
                let seen = ctx.load(&w.ret)?;
                if seen == 0 {
                    break;
                }
                if loco_rdmawait::clock::now().saturating_duration_since(start) > limit {
                    return Err(format!(
                        "rcas spinlock: not acquired within {limit:?} (the word holds {seen})"
                    )
                    .into());
                }
                spin_backoff(&mut round);
            }
            started(now());
            put()?;
            // Released by an rCAS, not a put: on rxe a failed rCAS writes back the value it
            // read, so a release put landing inside a waiter's failing rCAS is lost and the
            // lock stays taken for ever (seen with 6 threads; docs/verbs-notes.md pitfall 9).
            // RMWs are atomic with each other everywhere. It follows the critical section's
            // put on the same queue pair.
            ctx.rcas(word, 1, 0, &w.ret, D)?;
            Ok(ctx.wait(D)?)
        }
    }
}

/// The spinlock's backoff after its `round`th failed CAS, the same on every backend: that of
/// `crossbeam_utils::Backoff::snooze` (spin 1, 2, 4 ... 64 hints, then yield the CPU each
/// round), written out so that a simulated thread spins and yields where an OS thread does
/// ([`clock::spin_hints`](loco_rdmawait::clock::spin_hints) take the profile's time per hint,
/// [`clock::yield_now`](loco_rdmawait::clock::yield_now)).
fn spin_backoff(round: &mut u32) {
    const SPIN_LIMIT: u32 = 6;
    if *round <= SPIN_LIMIT {
        loco_rdmawait::clock::spin_hints(1 << *round);
        *round += 1;
    } else {
        loco_rdmawait::clock::yield_now();
    }
}

/// `acquire; acquired(); section(); release` on a loco lock.
fn locked<R: RawLock + 'static>(
    l: &Lock<R>,
    ctx: &Ctx,
    acquired: impl FnOnce(),
    section: impl FnOnce() -> Result<(), CycleError>,
) -> Result<(), CycleError> {
    let g = l.acquire(ctx)?;
    acquired();
    section()?;
    Ok(LockGuard::release(g)?)
}

/// The benchmarks' progress bar of `len` steps (`loco bench locks`, `ops`, `--vs-perftest`).
pub(crate) fn progress(len: usize) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Redrawn every second, so that a long configuration (hundreds of simulated threads over
    // dozens of nodes can take minutes) still shows it is running.
    bar.enable_steady_tick(Duration::from_secs(1));
    bar
}

/// A verbs cluster in this process over one device (`--backend verbs` without `LOCO_NODE_ID`).
pub(crate) fn verbs_single(nodes: usize, memory: u64) -> Result<Cluster, String> {
    #[cfg(feature = "verbs")]
    {
        use loco_rdmawait::backend::verbs::VerbsConfig;
        Cluster::builder()
            .nodes(nodes)
            .memory_per_node(memory)
            .verbs(VerbsConfig::from_env().map_err(|e| e.to_string())?)
            .build()
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (nodes, memory);
        Err(NO_VERBS.into())
    }
}

#[cfg(not(feature = "verbs"))]
pub(crate) const NO_VERBS: &str =
    "this loco was built without the verbs backend: cargo build -p loco-cli --features verbs";

/// A cluster spanning processes, one node each (`--backend verbs` with `LOCO_NODE_ID`).
struct Spanning {
    cluster: Cluster,
    me: NodeId,
    nodes: usize,
    #[cfg(feature = "verbs")]
    process: Arc<loco_rdmawait::backend::verbs::Process>,
}

impl Spanning {
    fn barrier(&self) -> Result<(), String> {
        #[cfg(feature = "verbs")]
        {
            self.process.barrier().map_err(|e| e.to_string())
        }
        #[cfg(not(feature = "verbs"))]
        {
            Ok(())
        }
    }
}

/// The spanning cluster when `LOCO_NODE_ID` is set; `None` for a single process.
fn verbs_cluster(args: &LocksArgs) -> Result<Option<Spanning>, String> {
    if std::env::var_os("LOCO_NODE_ID").is_none() {
        return Ok(None);
    }
    #[cfg(feature = "verbs")]
    {
        use loco_rdmawait::backend::verbs::{Process, VerbsConfig};
        let config = VerbsConfig::from_env().map_err(|e| e.to_string())?;
        let peers = std::env::var("LOCO_PEERS").unwrap_or_default();
        let nodes = loco_rdmawait::peer_list::parse(&peers)
            .map_err(|e| format!("LOCO_PEERS: {e}"))?
            .len();
        if args.nodes.iter().any(|&n| n != nodes) {
            return Err(format!(
                "--nodes {}: a cluster of processes has as many nodes as LOCO_PEERS names \
                 ({nodes}): give --nodes {nodes}",
                args.nodes
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        // Every configuration allocates afresh: room for the largest run of them.
        let configs = (args.lock.len() * args.threads.len()) as u64;
        let max_threads = args.threads.iter().copied().max().unwrap_or(1) as u64;
        let memory = (configs
            * (64 * 1024 + max_threads * 64 + nodes as u64 * 8 * (STATS as u64 + 8)))
            .max(1 << 20);
        let cluster = Cluster::builder()
            .nodes(nodes)
            .memory_per_node(memory)
            .timeout(Duration::from_secs(120))
            .verbs(config)
            .build()
            .map_err(|e| e.to_string())?;
        let process = Process::of(&cluster).map_err(|e| e.to_string())?;
        let me = process
            .node()
            .ok_or_else(|| "LOCO_NODE_ID is set but the cluster is not distributed".to_string())?;
        process.barrier().map_err(|e| e.to_string())?;
        Ok(Some(Spanning {
            cluster,
            me,
            nodes,
            process,
        }))
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = args;
        Err(NO_VERBS.into())
    }
}

/// Latency histogram buckets: bucket b holds latencies around 2^(b / 8) ns, up to 2^40 ns
/// (18 minutes, past any acquire's timeout).
const BUCKETS: usize = 320;
/// Words of one process's statistics: count, network operations, fewest and most critical
/// sections of one of its threads, then the histogram.
const STATS: usize = 4 + BUCKETS;

fn bucket(ns: u64) -> usize {
    ((ns.max(1) as f64).log2() * 8.0).min((BUCKETS - 1) as f64) as usize
}

fn bucket_ns(b: usize) -> f64 {
    2f64.powf((b as f64 + 0.5) / 8.0)
}

/// One configuration on a cluster of processes: this process runs the threads of its node
/// (thread i is on node i mod N), for `secs` from a common barrier; every process puts its
/// statistics into a table on n0, whose process returns the row.
fn measure_spanning(
    sp: &Spanning,
    lock: LockArg,
    threads: usize,
    secs: Duration,
) -> Result<Option<Row>, String> {
    let s = |e: loco_rdmawait::Error| e.to_string();
    let (cluster, me, nodes) = (&sp.cluster, sp.me, sp.nodes);
    // The same allocations, in the same order, in every process.
    let data_node = NodeId(if nodes > 1 { 1 } else { 0 });
    let data = cluster.alloc_word(data_node).map_err(s)?;
    let l = new_lock(lock, cluster, data_node, threads)?;
    let thread_words: Vec<Words> = (0..threads)
        .map(|i| {
            let node = NodeId((i % nodes) as u16);
            Ok(Words {
                one: cluster.alloc_word(node)?,
                zero: cluster.alloc_word(node)?,
                ret: cluster.alloc_word(node)?,
            })
        })
        .collect::<Result<_, loco_rdmawait::Error>>()
        .map_err(s)?;
    let table = cluster
        .alloc_words(NodeId(0), (nodes * STATS) as u64)
        .map_err(s)?;
    let outbox: Vec<Loc> = (0..nodes)
        .map(|i| cluster.alloc_words(NodeId(i as u16), STATS as u64))
        .collect::<Result<_, _>>()
        .map_err(s)?;
    sp.barrier()?;

    let stop = Arc::new(AtomicBool::new(false));
    let mine: Vec<usize> = (0..threads).filter(|i| i % nodes == me.index()).collect();
    let handles: Vec<_> = mine
        .iter()
        .map(|&i| {
            let (c, l, stop) = (cluster.clone(), l.clone(), stop.clone());
            let w = Words {
                one: thread_words[i].one,
                zero: thread_words[i].zero,
                ret: thread_words[i].ret,
            };
            thread::spawn(move || -> Result<Done, String> {
                let ctx = c.context(me).map_err(|e| e.to_string())?;
                ctx.store(&w.one, 1).map_err(|e| e.to_string())?;
                cycles(&l, &ctx, &w, &data, data_node, || {
                    !stop.load(Ordering::Relaxed)
                })
            })
        })
        .collect();
    let began = Instant::now();
    thread::sleep(secs);
    stop.store(true, Ordering::Relaxed);
    let mut mine = Stats::new();
    for (lat, n) in join_all(handles)? {
        mine.add_thread(&lat, n);
    }
    let elapsed = began.elapsed().as_secs_f64();
    // This process's statistics, into its slot of n0's table.
    let ctx = cluster.context(me).map_err(s)?;
    let out = &outbox[me.index()];
    for (k, v) in mine.words().enumerate() {
        ctx.store(&out.word(k as u64).map_err(s)?, v).map_err(s)?;
    }
    let bytes = STATS as u64 * loco_rdmawait::WORD;
    let slot = table.slice(me.index() as u64 * bytes, bytes).map_err(s)?;
    ctx.put(&slot, out, WorkId::new(1)).map_err(s)?;
    ctx.wait(WorkId::new(1)).map_err(s)?;
    ctx.gf([NodeId(0)]).map_err(|e| e.to_string())?;
    drop(ctx);
    sp.barrier()?;
    if me != NodeId(0) {
        sp.barrier()?;
        return Ok(None);
    }
    let all = cluster.peek_words(&table).map_err(s)?;
    sp.barrier()?;
    let mut total = Stats::new();
    for p in all.chunks(STATS) {
        total.merge(p);
    }
    // No thread anywhere (`least` never lowered) counts as starved, as in `summarise`.
    let least = if total.least == u64::MAX {
        0
    } else {
        total.least
    };
    let mut row = Row::new(
        lock,
        (nodes, threads),
        total.count,
        elapsed,
        (total.percentile(0.5), total.percentile(0.99)),
        (least, total.most),
        total.net,
    );
    row.fence_read = cluster.fence_read().name();
    Ok(Some(row))
}

/// One process's (or, merged, every process's) statistics in a spanning run: the layout of a
/// slot of n0's table is `count, net, least, most`, then the histogram ([`STATS`] words).
struct Stats {
    count: u64,
    net: u64,
    /// The fewest critical sections of one thread (`u64::MAX` before any thread).
    least: u64,
    most: u64,
    hist: Vec<u64>,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            count: 0,
            net: 0,
            least: u64::MAX,
            most: 0,
            hist: vec![0; BUCKETS],
        }
    }

    /// Adds a thread's acquire latencies (ns) and network operations.
    fn add_thread(&mut self, lat: &[u64], net: u64) {
        let n = lat.len() as u64;
        self.count += n;
        self.net += net;
        self.least = self.least.min(n);
        self.most = self.most.max(n);
        for &ns in lat {
            self.hist[bucket(ns)] += 1;
        }
    }

    /// The table slot's words.
    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        [self.count, self.net, self.least, self.most]
            .into_iter()
            .chain(self.hist.iter().copied())
    }

    /// Adds a process's slot (as [`Stats::words`] wrote it).
    fn merge(&mut self, p: &[u64]) {
        self.count += p[0];
        self.net += p[1];
        self.least = self.least.min(p[2]);
        self.most = self.most.max(p[3]);
        for (b, v) in p[4..].iter().enumerate() {
            self.hist[b] += v;
        }
    }

    /// The `q` quantile of the acquire latency, µs (a bucket's middle).
    fn percentile(&self, q: f64) -> f64 {
        let want = (self.count as f64 * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, &v) in self.hist.iter().enumerate() {
            seen += v;
            if seen >= want {
                return bucket_ns(b) / 1000.0;
            }
        }
        0.0
    }
}

/// Joins the benchmark threads: their results, or every thread's error (the first to fail is
/// the likely cause of the others: a holder that failed leaves its lock held).
fn join_all(handles: Vec<thread::JoinHandle<Result<Done, String>>>) -> Result<Vec<Done>, String> {
    let mut done = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(r)) => done.push(r),
            Ok(Err(e)) => errors.push(format!("thread {i}: {e}")),
            Err(_) => errors.push(format!("thread {i} panicked")),
        }
    }
    if errors.is_empty() {
        Ok(done)
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--profile-scale nan` (`f64` parses it) is refused with what to give, not taken as a
    /// factor; so are infinities, values out of 0.1 to 100 and words.
    #[test]
    fn a_profile_scale_must_be_a_finite_factor_from_a_tenth_to_a_hundred() {
        for ok in ["0.1", "1", "2.5", "100"] {
            assert!(profile_scale(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("nan", "NaN is not a number"),
            ("NaN", "NaN is not a number"),
            ("-nan", "NaN is not a number"),
            ("inf", "infinite"),
            ("-infinity", "infinite"),
            ("0.05", "out of range"),
            ("101", "out of range"),
            ("-1", "out of range"),
            ("fast", "not a number"),
            ("", "not a number"),
        ] {
            let e = profile_scale(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(e.contains("give a factor from 0.1 to 100"), "{bad:?}: {e}");
        }
    }

    /// An acquire of 5 s (an oversubscribed host's) is reported as 5 s, by the row and by the
    /// histogram of a cluster of processes: latencies were kept as u32 ns and the histogram
    /// ended at 2^32 ns, so the percentiles showed 4 294 967.3 us, the cap.
    #[test]
    fn latencies_past_four_seconds_are_not_capped() {
        let five_s: u64 = 5_000_000_000;
        let row = summarise(LockArg::Nlock, 2, 1, vec![five_s], &[1], 6, 5.0);
        assert_eq!(row.p99_us, 5_000_000.0);
        let mut stats = Stats::new();
        stats.add_thread(&[five_s], 6);
        let p99 = stats.percentile(0.99);
        // A bucket is 2^(1/8) wide: its middle is within 5% of the latency.
        assert!((p99 / 5_000_000.0 - 1.0).abs() < 0.05, "{p99}");
    }
}
