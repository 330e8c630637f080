//! `loco bench ops`: latency and throughput of single remote operations, from a context on n0
//! to words on n1: `put`, `get`, `rfaa` and `rcas`, each followed by a `wait`.
//!
//! One sample posts `--outstanding N` requests of one kind (all tagged with one work id, all
//! towards the same remote buffer, from the same local one) and waits for them all; its
//! per-request time is the sample's time over N. Per configuration (operation, size,
//! outstanding): p50, p99 and mean of the per-request time, requests per second (all requests
//! over all samples' time) and, for `put` and `get`, MiB per second. Atomics move one 8-byte
//! word, whatever `--sizes` says.
//!
//! Backends are those of `loco bench locks` ([`BenchBackend`]): the soft NIC (real time, the
//! work the library and the soft NIC do), the simulator with a network profile (simulated
//! time, deterministic; the simulator's model gives every request the same cost whatever its
//! size, docs/simulation.md §5, so its sizes differ only in MiB/s), and verbs (one process
//! with both nodes on the local device, or with `LOCO_NODE_ID`/`LOCO_PEERS` two processes,
//! n0's measuring and n1's serving). With `--vs-perftest` (verbs only), perftest on the same
//! device, or with two processes across their hosts, alternates with loco in `--rounds` rounds
//! ([`crate::perftest`]).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use loco_rdmawait::sim;
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, Schedule, WorkId, WorkRequest};
use loco_rdmawaitrmw::Rmw;
use serde_json::json;

use crate::bench::{count, BenchBackend, ProfileArg};

const D: WorkId = WorkId::new(1);

/// The largest transfer (bytes). Each node holds two buffers of it (remote and local side).
pub(crate) const MAX_SIZE: u64 = 1 << 20;
/// Node memory of the benchmark's clusters: a buffer of the largest size, plus room.
const MEMORY: u64 = MAX_SIZE + 4096;
/// The most requests outstanding: half the verbs backend's default send-queue depth (256), so
/// that a sample never waits for queue room in the middle of its posts.
pub(crate) const MAX_OUTSTANDING: usize = 128;
/// The most iterations (or warm-up iterations) of a configuration.
const MAX_ITERS: usize = 10_000_000;

/// The operations `loco bench ops` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OpArg {
    /// RDMA WRITE of `size` bytes to n1, then wait.
    Put,
    /// RDMA READ of `size` bytes from n1, then wait.
    Get,
    /// Remote fetch-and-add on a word of n1 (8 bytes), then wait.
    Rfaa,
    /// Remote compare-and-swap on a word of n1 (8 bytes, always succeeds), then wait.
    Rcas,
}

impl OpArg {
    pub(crate) fn name(self) -> &'static str {
        match self {
            OpArg::Put => "put",
            OpArg::Get => "get",
            OpArg::Rfaa => "rfaa",
            OpArg::Rcas => "rcas",
        }
    }

    /// Whether the operation moves `size` bytes (`put`, `get`) rather than one word.
    pub(crate) fn sized(self) -> bool {
        matches!(self, OpArg::Put | OpArg::Get)
    }
}

/// `loco bench ops` options.
#[derive(Args, Debug)]
pub struct OpsArgs {
    /// Operations to measure (an operation given twice is measured once).
    #[arg(long, value_enum, num_args = 1.., value_delimiter = ',', default_values = ["put", "get", "rfaa", "rcas"])]
    pub(crate) op: Vec<OpArg>,
    /// Backend.
    #[arg(long, value_enum, default_value = "soft")]
    pub(crate) backend: BenchBackend,
    /// Transfer sizes of put and get, bytes: multiples of 8 from 8 to 1048576 (1 MiB, the
    /// benchmark's buffers). Atomics are 8 bytes only. A repeat is measured once.
    #[arg(long, num_args = 1.., value_delimiter = ',', default_values_t = [8, 64, 4096, 65536, 1048576], value_parser = size)]
    pub(crate) sizes: Vec<u64>,
    /// Requests outstanding per sample (1-128): post N, then wait for all; the figures are per
    /// request. A repeat is measured once.
    #[arg(long, num_args = 1.., value_delimiter = ',', default_values_t = [1, 16], value_parser = count::<MAX_OUTSTANDING>)]
    pub(crate) outstanding: Vec<usize>,
    /// Measured samples per configuration (1-10000000).
    #[arg(long, default_value_t = 1000, value_parser = count::<MAX_ITERS>)]
    pub(crate) iters: usize,
    /// Unmeasured samples first (0-10000000).
    #[arg(long, default_value_t = 100, value_parser = warmup)]
    pub(crate) warmup: usize,
    /// Network profile (`--backend sim`).
    #[arg(long, value_enum, default_value = "connectx5")]
    pub(crate) profile: ProfileArg,
    /// Multiplies every cost of the profile (`--backend sim`, 0.1-100): fits `rxe` to another
    /// host, by the ratio of that host's put + wait round trip to the profile's
    /// (docs/simulation.md §3).
    #[arg(long, default_value_t = 1.0, value_parser = crate::bench::profile_scale)]
    pub(crate) profile_scale: f64,
    /// Seed of the simulated runs (`--backend sim`).
    #[arg(long, default_value_t = 1, value_parser = crate::bench::whole)]
    pub(crate) seed: u64,
    /// One JSON object per line and configuration instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Where to write the plot (SVG: p50 latency against size, one line per operation and
    /// outstanding count).
    #[arg(long, default_value = "loco-bench-ops.svg")]
    pub(crate) plot: std::path::PathBuf,
    /// Write no plot.
    // With `--plot` too, one of them would be dropped silently.
    #[arg(long, conflicts_with = "plot")]
    pub(crate) no_plot: bool,
    /// Compare with perftest on the same device (`--backend verbs` only): ib_write_lat,
    /// ib_read_lat, ib_atomic_lat (8 bytes, 1 outstanding) and ib_write_bw, ib_read_bw (the
    /// largest size of `--sizes` at most 65536, with the largest `--outstanding`), alternated
    /// with loco's runs in `--rounds` rounds; prints the median of the per-round ratios and
    /// their spread. Device and GID index from LOCO_RDMA_DEVICE and LOCO_GID_INDEX (default
    /// rxe0 and 1). With LOCO_NODE_ID and a two-entry LOCO_PEERS, across the two processes'
    /// hosts: perftest's servers in n1's process, its clients and loco's measurements in n0's
    /// (run the same command in both; n0's prints).
    #[arg(long)]
    pub(crate) vs_perftest: bool,
    /// Rounds of `--vs-perftest` (1-1000): perftest, loco, perftest, loco...
    #[arg(long, default_value_t = 5, value_parser = count::<1000>)]
    pub(crate) rounds: usize,
    /// Compare loco's path with the bare device calls, in this process on the same queue pair
    /// (`--backend verbs` only, configurations with `--outstanding 1`): blocks of
    /// `--raw-block` requests through loco's post + wait alternate with blocks of the same
    /// request posted with `ibv_post_send` and polled for with `ibv_poll_cq`, as perftest's
    /// latency loop does; prints the median of the per-block-pair ratios of the p50s and their
    /// quartiles. Both sides see the host at the same moments, which rounds of separate
    /// processes do not (docs/verbs-notes.md, "A host whose speed comes and goes").
    #[arg(long)]
    pub(crate) vs_raw: bool,
    /// Requests per block of `--vs-raw` (10-100000).
    #[arg(long, default_value_t = 100, value_parser = raw_block)]
    pub(crate) raw_block: usize,
    /// Post a sample's requests one at a time, each with its own doorbell and completion,
    /// instead of in one batch (`Ctx::batch`; it matters with `--outstanding` above 1 on the
    /// verbs backend).
    #[arg(long)]
    pub(crate) no_batch: bool,
}

/// A transfer size: a multiple of 8 in `8..=MAX_SIZE` (command-line parser).
fn size(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if (8..=MAX_SIZE).contains(&n) && n % 8 == 0 => Ok(n),
        _ => Err(format!(
            "expected a multiple of 8 from 8 to {MAX_SIZE} bytes (the benchmark's node memory \
             holds one buffer of at most 1 MiB)"
        )),
    }
}

/// A `--raw-block` size in `10..=100000` (command-line parser).
fn raw_block(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (10..=100_000).contains(&n) => Ok(n),
        _ => Err("expected a whole number from 10 to 100000".into()),
    }
}

/// A warm-up count in `0..=MAX_ITERS` (command-line parser).
fn warmup(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n <= MAX_ITERS => Ok(n),
        _ => Err(format!("expected a whole number from 0 to {MAX_ITERS}")),
    }
}

/// One configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Config {
    pub(crate) op: OpArg,
    pub(crate) size: u64,
    pub(crate) outstanding: usize,
    /// A sample's requests are posted in one batch ([`Ctx::batch`]): on the verbs backend,
    /// one doorbell and one completion for them all.
    pub(crate) batch: bool,
}

/// What one configuration measured (times in µs, per request).
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub(crate) config: Config,
    /// The 10th percentile: on a host whose speed comes and goes (a VM's neighbours), the
    /// figure of its quiet moments, where a median may land in either mode.
    pub(crate) p10_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) mean_us: f64,
    pub(crate) ops_per_sec: f64,
    /// `None` for atomics.
    pub(crate) mib_per_sec: Option<f64>,
    /// With `--vs-raw`: the bare device calls' figures.
    pub(crate) raw: Option<RawCmp>,
}

/// loco's path against the bare device calls (`--vs-raw`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawCmp {
    /// p50 of the bare requests (µs).
    pub(crate) p50_us: f64,
    /// The median over block pairs of loco's block p50 / the bare block's p50, and the first
    /// and third quartiles of those ratios.
    pub(crate) ratio: f64,
    pub(crate) q1: f64,
    pub(crate) q3: f64,
    /// Block pairs measured.
    pub(crate) pairs: usize,
}

impl Row {
    /// The figures of a configuration from its samples' times (ns, each for `outstanding`
    /// requests).
    fn new(config: Config, mut samples: Vec<u64>) -> Row {
        let n = config.outstanding as f64;
        samples.sort_unstable();
        let per = |ns: u64| ns as f64 / n / 1000.0;
        let pct = |p: f64| at(&samples, p).map_or(0.0, per);
        let total: u64 = samples.iter().sum();
        let requests = samples.len() as f64 * n;
        let ops_per_sec = if total == 0 {
            0.0
        } else {
            requests / (total as f64 / 1e9)
        };
        Row {
            config,
            p10_us: pct(0.1),
            p50_us: pct(0.5),
            p99_us: pct(0.99),
            mean_us: if requests == 0.0 {
                0.0
            } else {
                total as f64 / requests / 1000.0
            },
            ops_per_sec,
            mib_per_sec: config
                .op
                .sized()
                .then(|| ops_per_sec * config.size as f64 / (1 << 20) as f64),
            raw: None,
        }
    }
}

impl OpsArgs {
    /// Drops the repeats of every list option (`--op`, `--sizes`, `--outstanding`), keeping
    /// each value's first occurrence in the order given: a repeated value would measure the
    /// same configuration twice.
    pub(crate) fn dedup_lists(&mut self) {
        crate::bench::first_occurrences(&mut self.op);
        crate::bench::first_occurrences(&mut self.sizes);
        crate::bench::first_occurrences(&mut self.outstanding);
    }
}

/// The configurations of `args`: every sized operation at every size, atomics at 8 bytes, each
/// at every outstanding count.
pub(crate) fn configs(args: &OpsArgs) -> Vec<Config> {
    let mut v = Vec::new();
    for &op in &args.op {
        let sizes: Vec<u64> = if op.sized() {
            args.sizes.clone()
        } else {
            vec![8]
        };
        for &size in &sizes {
            for &outstanding in &args.outstanding {
                v.push(Config {
                    op,
                    size,
                    outstanding,
                    batch: !args.no_batch,
                });
            }
        }
    }
    v
}

/// The words of a benchmark: `remote` on n1 and `local` on n0, each of the largest size.
#[derive(Clone, Copy)]
pub(crate) struct Buffers {
    remote: Loc,
    local: Loc,
}

impl Buffers {
    /// The remote and local locations one request of `config` moves (atomics: one word).
    fn of(&self, config: Config) -> Result<(Loc, Loc), String> {
        let s = |e: loco_rdmawait::Error| e.to_string();
        let bytes = if config.op.sized() { config.size } else { 8 };
        Ok((
            self.remote.slice(0, bytes).map_err(s)?,
            self.local.slice(0, bytes).map_err(s)?,
        ))
    }

    /// Allocates them (the same allocations, in the same order, in every process).
    pub(crate) fn alloc(cluster: &Cluster, bytes: u64) -> Result<Buffers, String> {
        let words = bytes / loco_rdmawait::WORD;
        Ok(Buffers {
            remote: cluster
                .alloc_words(NodeId(1), words)
                .map_err(|e| e.to_string())?,
            local: cluster
                .alloc_words(NodeId(0), words)
                .map_err(|e| e.to_string())?,
        })
    }
}

/// One sample of `config` on `ctx`: posts `outstanding` requests, waits for them all. Not
/// timed here: [`measure`] reads the clock once between samples.
fn sample(ctx: &Ctx, remote: &Loc, local: &Loc, config: Config) -> Result<(), String> {
    let s = |e: loco_rdmawait::Error| e.to_string();
    let post = || {
        for _ in 0..config.outstanding {
            match config.op {
                OpArg::Put => ctx.put(remote, local, D),
                OpArg::Get => ctx.get(local, remote, D),
                OpArg::Rfaa => ctx.rfaa(remote, 1, local, D),
                // The word stays 0, so every CAS succeeds.
                OpArg::Rcas => ctx.rcas(remote, 0, 0, local, D),
            }?;
        }
        Ok(())
    };
    if config.batch && config.outstanding > 1 {
        ctx.batch(post).map_err(s)?;
    } else {
        post().map_err(s)?;
    }
    ctx.wait(D).map_err(s)
}

/// A configuration on `ctx`: `warmup` samples, then `iters` measured ones, each timed on
/// [`loco_rdmawait::clock`] (real or simulated) as perftest's latency tests time theirs: one
/// clock read between samples, a sample's time being from its start to the next one's.
pub(crate) fn measure(
    ctx: &Ctx,
    b: &Buffers,
    config: Config,
    iters: usize,
    warmup: usize,
) -> Result<Row, String> {
    let (remote, local) = b.of(config)?;
    for _ in 0..warmup {
        sample(ctx, &remote, &local, config)?;
    }
    Ok(Row::new(
        config,
        timed(ctx, &remote, &local, config, iters)?,
    ))
}

/// [`measure`], or with `--vs-raw` [`measure_vs_raw`].
fn measure_args(ctx: &Ctx, b: &Buffers, c: Config, args: &OpsArgs) -> Result<Row, String> {
    if args.vs_raw {
        measure_vs_raw(ctx, b, c, args.iters, args.warmup, args.raw_block)
    } else {
        measure(ctx, b, c, args.iters, args.warmup)
    }
}

/// `n` samples, each timed from the end of the one before (ns).
fn timed(
    ctx: &Ctx,
    remote: &Loc,
    local: &Loc,
    config: Config,
    n: usize,
) -> Result<Vec<u64>, String> {
    let mut samples = Vec::with_capacity(n);
    let mut t = loco_rdmawait::clock::now();
    for _ in 0..n {
        sample(ctx, remote, local, config)?;
        let end = loco_rdmawait::clock::now();
        let ns = end.saturating_duration_since(t).as_nanos();
        samples.push(ns.min(u64::MAX as u128) as u64);
        t = end;
    }
    Ok(samples)
}

/// A configuration with `--vs-raw` (`outstanding` 1; others as [`measure`]): blocks of
/// `block` samples through loco alternate with blocks of the same request issued bare
/// ([`Ctx::raw_requests`]), loco's first in even pairs and the bare one's first in odd pairs,
/// so that a change of the host's speed weighs on both sides alike. Each pair gives the ratio
/// of its two p50s. The row's own figures are loco's, over all its blocks.
pub(crate) fn measure_vs_raw(
    ctx: &Ctx,
    b: &Buffers,
    config: Config,
    iters: usize,
    warmup: usize,
    block: usize,
) -> Result<Row, String> {
    if config.outstanding != 1 {
        return measure(ctx, b, config, iters, warmup);
    }
    let s = |e: loco_rdmawait::Error| e.to_string();
    let (remote, local) = b.of(config)?;
    let wr = bare_request(ctx, config, &remote, &local)?;
    let target = remote.node();
    for _ in 0..warmup {
        sample(ctx, &remote, &local, config)?;
    }
    ctx.raw_requests(target, wr, warmup).map_err(s)?;
    let pairs = iters.div_ceil(block).max(1);
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    let mut ratios = Vec::with_capacity(pairs);
    for p in 0..pairs {
        let (o, r) = if p % 2 == 0 {
            let o = timed(ctx, &remote, &local, config, block)?;
            (o, ctx.raw_requests(target, wr, block).map_err(s)?)
        } else {
            let r = ctx.raw_requests(target, wr, block).map_err(s)?;
            (timed(ctx, &remote, &local, config, block)?, r)
        };
        let (mo, mr) = (median_ns(&o), median_ns(&r));
        if mr > 0 {
            ratios.push(mo as f64 / mr as f64);
        }
        ours.extend(o);
        bare.extend(r);
    }
    let mut row = Row::new(config, ours);
    let (q1, ratio, q3) = quartiles(&mut ratios);
    row.raw = Some(RawCmp {
        p50_us: Row::new(config, bare).p50_us,
        ratio,
        q1,
        q3,
        pairs,
    });
    Ok(row)
}

/// The request of `config` as a bare work request (what [`sample`] posts through loco).
fn bare_request(
    ctx: &Ctx,
    config: Config,
    remote: &Loc,
    local: &Loc,
) -> Result<WorkRequest, String> {
    let s = |e: loco_rdmawait::Error| e.to_string();
    let (r, words) = ctx.cluster().check(remote).map_err(s)?;
    let (l, _) = ctx.cluster().check(local).map_err(s)?;
    Ok(match config.op {
        OpArg::Put => WorkRequest::Write {
            local: l,
            remote: r,
            words,
        },
        OpArg::Get => WorkRequest::Read {
            local: l,
            remote: r,
            words,
        },
        OpArg::Rfaa => WorkRequest::FetchAdd {
            remote: r,
            add: 1,
            local: l,
        },
        OpArg::Rcas => WorkRequest::CompareSwap {
            remote: r,
            expected: 0,
            new: 0,
            local: l,
        },
    })
}

/// The value at fraction `p` (0 to 1) of sorted `v`, nearest rank; `None` if `v` is empty. The
/// one percentile rule of this benchmark's figures.
fn at<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get((last as f64 * p).round() as usize).copied()
}

/// The median of `v` (0 if empty).
fn median_ns(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    at(&s, 0.5).unwrap_or(0)
}

/// The first quartile, median and third quartile of `v` (zeros if empty).
fn quartiles(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| at(v, p).unwrap_or(0.0);
    (q(0.25), q(0.5), q(0.75))
}

/// The options given that the run would ignore (see [`crate::bench::ignored_options`]).
pub(crate) fn ignored_options(args: &OpsArgs, m: &clap::ArgMatches) -> Vec<String> {
    let sim = args.backend == BenchBackend::Sim;
    let rules: [(&str, &str, bool); 5] = [
        ("profile", "--backend sim", sim),
        ("profile_scale", "--backend sim", sim),
        ("seed", "--backend sim", sim),
        ("rounds", "--vs-perftest", args.vs_perftest),
        ("raw_block", "--vs-raw", args.vs_raw),
    ];
    crate::bench::given_where_ignored(m, &rules)
}

/// Runs `loco bench ops`.
pub fn ops(args: &OpsArgs) -> Result<(), String> {
    if args.vs_raw && args.backend != BenchBackend::Verbs {
        return Err(format!(
            "--vs-raw compares loco with the bare device calls: it needs --backend verbs, not {}",
            args.backend.name()
        ));
    }
    if args.vs_raw && args.vs_perftest {
        return Err(
            "--vs-raw and --vs-perftest are two comparisons: run them one at a time".into(),
        );
    }
    if args.vs_perftest && args.backend != BenchBackend::Verbs {
        return Err(format!(
            "--vs-perftest compares with perftest on an RDMA device: it needs --backend verbs, \
             not {}",
            args.backend.name()
        ));
    }
    crate::plot::check_target(&args.plot, args.no_plot)?;
    let configs = configs(args);
    let bar = crate::bench::progress(configs.len());
    let rows = match args.backend {
        BenchBackend::Soft => {
            let cluster = Cluster::builder()
                .nodes(2)
                .memory_per_node(MEMORY)
                .soft(Schedule::Threaded)
                .build()
                .map_err(|e| e.to_string())?;
            run_local(&cluster, &configs, args, &bar)?
        }
        BenchBackend::Sim => run_sim(&configs, args, &bar)?,
        BenchBackend::Verbs => {
            if args.vs_perftest {
                bar.finish_and_clear();
                return crate::perftest::compare(args);
            }
            match verbs(args, &configs, &bar)? {
                Some(rows) => rows,
                // n1's process of a two-process run: it served, n0's prints.
                None => {
                    bar.finish_and_clear();
                    return Ok(());
                }
            }
        }
    };
    bar.finish_and_clear();
    if args.json {
        for r in &rows {
            out(&json_row(r, args).to_string());
        }
    } else {
        out(table(&rows, args).trim_end());
    }
    if !args.no_plot {
        write_plot(&rows, args)?;
    }
    Ok(())
}

/// Every configuration on `cluster` (both nodes in this process), from a context on n0.
pub(crate) fn run_local(
    cluster: &Cluster,
    configs: &[Config],
    args: &OpsArgs,
    bar: &ProgressBar,
) -> Result<Vec<Row>, String> {
    let b = Buffers::alloc(cluster, MAX_SIZE)?;
    let ctx = cluster.context(NodeId(0)).map_err(|e| e.to_string())?;
    configs
        .iter()
        .map(|&c| {
            bar.set_message(label(c));
            let r = measure_args(&ctx, &b, c, args).map_err(|e| format!("{}: {e}", label(c)));
            bar.inc(1);
            r
        })
        .collect()
}

/// Every configuration under the simulator, in one simulated run (one thread on n0).
fn run_sim(configs: &[Config], args: &OpsArgs, bar: &ProgressBar) -> Result<Vec<Row>, String> {
    let rows: Arc<Mutex<Vec<Row>>> = Arc::default();
    let out = rows.clone();
    let (configs_, iters, warmup) = (configs.to_vec(), args.iters, args.warmup);
    let bar_ = bar.clone();
    let f = move |cluster: &Cluster| -> Result<(), String> {
        let b = Buffers::alloc(cluster, MAX_SIZE)?;
        let (configs, out, bar) = (configs_.clone(), out.clone(), bar_.clone());
        sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
            for &c in &configs {
                bar.set_message(label(c));
                let r = measure(ctx, &b, c, iters, warmup)?;
                out.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                bar.inc(1);
            }
            Ok::<(), String>(())
        })
        .join()
        .map_err(|e| e.to_string())
    };
    let config = sim::Config::new(2)
        .profile(args.profile.scaled(args.profile_scale))
        .memory_per_node(MEMORY)
        .timeout(Duration::from_secs(1))
        .max_steps(u64::MAX);
    sim::replay(config, args.seed, f).map_err(|e| e.report())?;
    let rows = std::mem::take(&mut *rows.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(rows)
}

/// `--backend verbs`: both nodes in this process, or (with `LOCO_NODE_ID`) this process's
/// node of two; `None` in n1's process, which only serves.
fn verbs(
    args: &OpsArgs,
    configs: &[Config],
    bar: &ProgressBar,
) -> Result<Option<Vec<Row>>, String> {
    if std::env::var_os("LOCO_NODE_ID").is_none() {
        let cluster = crate::bench::verbs_single(2, MEMORY)?;
        return run_local(&cluster, configs, args, bar).map(Some);
    }
    #[cfg(feature = "verbs")]
    {
        use loco_rdmawait::backend::verbs::{Process, VerbsConfig};
        let s = |e: loco_rdmawait::Error| e.to_string();
        let cluster = Cluster::builder()
            .nodes(2)
            .memory_per_node(MEMORY)
            .timeout(Duration::from_secs(120))
            .verbs(VerbsConfig::from_env().map_err(s)?)
            .build()
            .map_err(s)?;
        let process = Process::of(&cluster).map_err(s)?;
        let b = Buffers::alloc(&cluster, MAX_SIZE)?;
        // n1's process serves (its memory is the target) until n0's is done.
        process.barrier().map_err(s)?;
        if process.node() != Some(NodeId(0)) {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
            process.barrier().map_err(s)?;
            return Ok(None);
        }
        let ctx = cluster.context(NodeId(0)).map_err(s)?;
        let rows = configs
            .iter()
            .map(|&c| {
                bar.set_message(label(c));
                let r = measure_args(&ctx, &b, c, args);
                bar.inc(1);
                r
            })
            .collect::<Result<Vec<_>, _>>();
        drop(ctx);
        // The closing barrier, even after a failure, so that n1's process does not hang.
        process.barrier().map_err(s)?;
        rows.map(Some)
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (args, configs, bar);
        Err(crate::bench::NO_VERBS.into())
    }
}

/// Prints a line on stdout; ends the process quietly when stdout is closed (`loco ... | head`),
/// with the status a SIGPIPE death would have (every subcommand prints through it).
pub(crate) fn out(line: &str) {
    use std::io::Write as _;
    if writeln!(std::io::stdout(), "{line}").is_err() {
        std::process::exit(141);
    }
}

/// `put 4096 B x16`.
pub(crate) fn label(c: Config) -> String {
    format!("{} {} B x{}", c.op.name(), c.size, c.outstanding)
}

/// The profile's name under `--backend sim`.
fn profile_name(args: &OpsArgs) -> Option<String> {
    (args.backend == BenchBackend::Sim).then(|| args.profile.scaled(args.profile_scale).name)
}

fn json_row(r: &Row, args: &OpsArgs) -> serde_json::Value {
    json!({
        "op": r.config.op.name(),
        "backend": args.backend.name(),
        "profile": profile_name(args),
        "size": r.config.size,
        "outstanding": r.config.outstanding,
        "batch": r.config.batch,
        "iters": args.iters,
        "p10_us": r.p10_us,
        "p50_us": r.p50_us,
        "p99_us": r.p99_us,
        "mean_us": r.mean_us,
        "ops_per_sec": r.ops_per_sec,
        "mib_per_sec": r.mib_per_sec,
        "raw_p50_us": r.raw.map(|x| x.p50_us),
        "vs_raw": r.raw.map(|x| x.ratio),
        "vs_raw_q1": r.raw.map(|x| x.q1),
        "vs_raw_q3": r.raw.map(|x| x.q3),
        "raw_pairs": r.raw.map(|x| x.pairs),
    })
}

fn table(rows: &[Row], args: &OpsArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<5} {:>8} {:>5} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "op", "size", "outst", "p50 us", "p99 us", "mean us", "ops/s", "MiB/s"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<5} {:>8} {:>5} {:>10.2} {:>10.2} {:>10.2} {:>12.0} {:>10}",
            r.config.op.name(),
            r.config.size,
            r.config.outstanding,
            r.p50_us,
            r.p99_us,
            r.mean_us,
            r.ops_per_sec,
            r.mib_per_sec.map_or("-".into(), |m| format!("{m:.1}"))
        );
    }
    if args.vs_raw {
        let _ = writeln!(
            s,
            "\n{:<5} {:>8} {:>12} {:>12} {:>8} {:>13} {:>6}",
            "op", "size", "loco p50 us", "bare p50 us", "ratio", "(q1-q3)", "pairs"
        );
        for r in rows {
            if let Some(x) = r.raw {
                let _ = writeln!(
                    s,
                    "{:<5} {:>8} {:>12.2} {:>12.2} {:>8.3} {:>13} {:>6}",
                    r.config.op.name(),
                    r.config.size,
                    r.p50_us,
                    x.p50_us,
                    x.ratio,
                    format!("({:.3}-{:.3})", x.q1, x.q3),
                    x.pairs
                );
            }
        }
        let _ = writeln!(
            s,
            "bare: the same request with ibv_post_send and ibv_poll_cq only, on the same queue \
             pair, in blocks of {} alternating with loco's; ratio: median over block pairs of \
             loco's p50 / the bare p50 (configurations with 1 outstanding)",
            args.raw_block
        );
    }
    let backend = match (args.backend, profile_name(args)) {
        (_, Some(p)) => format!(
            "backend sim, profile {p}: simulated time (seed {}); the simulator's requests cost the \
             same whatever their size (docs/simulation.md §5), so sizes change MiB/s only",
            args.seed
        ),
        (BenchBackend::Verbs, _) => "backend verbs: real RDMA, real time".into(),
        _ => "backend soft (Threaded): the work of the library and the soft NIC, not network \
              timing"
            .into(),
    };
    let _ = writeln!(
        s,
        "{backend}; n0 -> n1, {} samples (+{} warm-up) per row; with N outstanding a sample posts \
         N requests and waits for them all, figures per request",
        args.iters, args.warmup
    );
    s
}

/// p50 latency against size (log2 of the bytes), one line per operation and outstanding
/// count, as SVG at `args.plot`.
fn write_plot(rows: &[Row], args: &OpsArgs) -> Result<(), String> {
    let mut series: Vec<crate::plot::Series> = Vec::new();
    for r in rows {
        let name = format!("{} x{}", r.config.op.name(), r.config.outstanding);
        let point = ((r.config.size as f64).log2(), r.p50_us);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => series.push(crate::plot::Series {
                name,
                points: vec![point],
            }),
        }
    }
    let backend = match (args.backend, profile_name(args)) {
        (_, Some(p)) => format!("sim, profile {p}, simulated time"),
        (BenchBackend::Verbs, _) => "verbs, real time".into(),
        _ => "soft NIC (Threaded), real time".into(),
    };
    let svg = crate::plot::svg(
        &format!("loco bench ops: {backend}"),
        "log2(transfer size in bytes)",
        "p50 latency per request (µs)",
        &series,
    );
    std::fs::write(&args.plot, svg)
        .map_err(|e| format!("cannot write the plot to {}: {e}", args.plot.display()))?;
    errln!("plot written to {}", args.plot.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_figures_are_per_request() {
        let c = Config {
            op: OpArg::Put,
            size: 1 << 20,
            outstanding: 4,
            batch: true,
        };
        // Two samples of 4 requests: 4 µs and 8 µs.
        let r = Row::new(c, vec![8_000, 4_000]);
        assert_eq!(r.mean_us, 1.5);
        assert_eq!(r.ops_per_sec, 8.0 / 12e-6);
        assert_eq!(r.mib_per_sec, Some(8.0 / 12e-6));
        let a = Row::new(
            Config {
                op: OpArg::Rfaa,
                size: 8,
                outstanding: 1,
                batch: true,
            },
            vec![2_000],
        );
        assert_eq!((a.p50_us, a.p99_us, a.mib_per_sec), (2.0, 2.0, None));
    }

    #[test]
    fn sizes_are_checked() {
        assert!(size("8").is_ok() && size("1048576").is_ok());
        for bad in ["0", "4", "12", "1048584", "-8", "x"] {
            assert!(size(bad).is_err(), "{bad}");
        }
        assert!(warmup("0").is_ok());
        assert!(warmup("18446744073709551616").is_err());
    }
}
