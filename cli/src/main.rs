//! The `loco` command.
//!
//! - `loco litmus check FILE...`: the model's verdict of each litmus test next to its `expect`,
//!   with the number of allowed outcomes, explored states and time.
//! - `loco litmus run --backend soft|verbs [--runs N] [--seed S] FILE...`: runs each test for
//!   real and prints the histogram of observed outcomes, each marked allowed or FORBIDDEN by the
//!   model, and whether the `exists` outcome was seen.
//! - `loco litmus show FILE`: the outcomes the model allows (`--traces` adds a schedule for each).
//! - `loco keygen`: a fresh random cluster key (`LOCO_CLUSTER_KEY`) for the verbs backend.
//! - `loco doctor [--peers ...] [--json]`: the machine's RDMA setup, check by check, with fixes
//!   (exit status 1 if a check fails).
//! - `loco bench locks ...`: the lock benchmark.
//! - `loco bench ops ...`: put/get/rfaa/rcas latency and bandwidth, optionally against perftest.
//!
//! Every subcommand but `keygen` takes `--json` for machine-readable output. A file's error (it
//! cannot be read or does not parse, or the explorer gave up on it) is printed before that
//! file's row or table, and counted apart in the summary. The exit status tells what happened
//! ([`LITMUS_EXIT_CODES`]): 0 all good, 1 a verdict mismatch or a forbidden outcome observed,
//! 2 bad command line, 3 a file error (cannot be read, not a regular file, does not parse, not
//! a valid test), 4 the explorer gave up (budget), 5 a run failed; with several, the largest.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

/// `eprint!` that does not panic when stderr is closed (`loco ... 2>&-`, or a reader of it
/// that went away): the message is lost and the command goes on to its usual exit status.
/// (Defined before the modules, so that they can use it too.)
macro_rules! err {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}

/// `eprintln!` as `err!`: does not panic when stderr is closed.
macro_rules! errln {
    () => {
        err!("\n")
    };
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod bench;
mod doctor;
mod keygen;
mod ops;
mod perftest;
mod plot;
use indicatif::{ProgressBar, ProgressStyle};
use loco_litmus::ast::FailedCas;
use loco_litmus::explore::satisfies;
use loco_litmus::{Exploration, RunBackend, RunConfig, RunError, Test};
use serde_json::{json, Value};

/// `println!` through [`ops::out`]: ends the process quietly when stdout is closed.
macro_rules! out {
    () => {
        ops::out("")
    };
    ($($t:tt)*) => {
        ops::out(&format!($($t)*))
    };
}

/// The exit statuses of `loco litmus`, as `loco litmus --help` prints them.
const LITMUS_EXIT_CODES: &str = "Exit status:
  0  every file checked: verdicts match (check), no forbidden outcome observed (run)
  1  a verdict does not match its `expect` (check), or a run observed an outcome the model
     forbids (run)
  2  bad command line
  3  a file error: a file cannot be read (or is not a regular file), does not parse, or is
     not a valid test
  4  the explorer gave up on a file: --max-states or --max-memory reached
  5  a run failed (backend unavailable, a library error, a run stopped by its deadline)
With several, the largest. Errors are printed (on stderr) before the row or table of the file
they belong to.";

#[derive(Parser)]
#[command(name = "loco", version, about = "loco-rs tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands: one variant each, dispatched in `main`.
#[derive(Subcommand)]
enum Command {
    /// Litmus tests: model checking and runs on real backends.
    #[command(subcommand, after_help = LITMUS_EXIT_CODES)]
    Litmus(Litmus),
    /// Print a fresh random cluster key (LOCO_CLUSTER_KEY) for multi-process verbs clusters.
    Keygen,
    /// Benchmarks.
    #[command(subcommand)]
    Bench(Bench),
    /// Check this machine's RDMA setup: libibverbs, devices, ports, GIDs, atomics, locked
    /// memory, Soft-RoCE, peers and cluster key, and a loop-back smoke test; each problem with
    /// the command that fixes it. Exit status 1 if a check fails.
    Doctor(doctor::DoctorArgs),
}

/// `loco bench` subcommands.
#[derive(Subcommand)]
enum Bench {
    /// Lock throughput, p50/p99 acquire latency, fairness and network operations per acquire,
    /// per lock, node count and thread count (a table, or JSON lines with --json).
    #[command(after_help = LOCKS_EXIT_CODES)]
    Locks(bench::LocksArgs),
    /// Latency (p50/p99/mean) and throughput of put, get, rfaa and rcas + wait from n0 to n1,
    /// per size and outstanding count (a table, or JSON lines with --json); with --vs-perftest
    /// (verbs), the ratio to perftest on the same device.
    #[command(after_help = OPS_EXIT_CODES)]
    Ops(ops::OpsArgs),
}

/// The exit statuses of `loco bench locks`.
const LOCKS_EXIT_CODES: &str = "Exit status:
  0  measured
  2  bad command line (a count out of range, --secs not in (0, 3600], an option for another
     backend than --backend, ...)
  5  the run failed: backend unavailable, a library error, no critical section completed in
     --secs (or --sim-us), the plot cannot be written, or --vs-sim without --backend verbs";

/// The exit statuses of `loco bench ops`.
const OPS_EXIT_CODES: &str = "Exit status:
  0  measured
  2  bad command line (a size not a multiple of 8 from 8 to 1048576, --outstanding 0 or over
     128, --iters or --warmup out of range, ...)
  5  the run failed: backend unavailable, a library error, perftest gave no number, or
     --vs-perftest without --backend verbs";

/// The explorer's budget (`check`, `run`, `show`).
#[derive(Args, Clone, Copy)]
struct Budget {
    /// Give up on a test after this many distinct states (exit status 4).
    #[arg(long, default_value_t = loco_litmus::explore::DEFAULT_MAX_STATES,
          value_parser = bench::whole_usize)]
    max_states: usize,
    /// Give up on a test before the explorer's memory passes this many MiB (exit status 4).
    #[arg(long, default_value_t = loco_litmus::explore::DEFAULT_MAX_MEMORY >> 20,
          value_parser = bench::whole_usize)]
    max_memory: usize,
}

/// What the model assumes of the device (`check`, `run`, `show`).
#[derive(Args, Clone, Copy)]
struct ModelArgs {
    /// What a failed remote CAS does, for every test (default: each test's `atomics` line):
    /// `model` (rule 9: it only reads) or `rxe` (Soft-RoCE writes back the value read). With
    /// `run`, it also sets the soft NIC's behaviour; on verbs, say what the device does.
    #[arg(long, value_enum)]
    atomics: Option<AtomicsArg>,
    /// How global fences read each node's dummy word, for every test (default: each test's
    /// `fence` line, else `get`): `get` (the paper's) or `cas` (a remote CAS that cannot
    /// succeed, as the verbs backend does on Soft-RoCE). With `run`, the cluster does the same.
    #[arg(long, value_enum)]
    fence: Option<FenceArg>,
}

#[derive(Clone, Copy, ValueEnum)]
enum FenceArg {
    /// A get (the paper's fence).
    Get,
    /// A remote CAS that cannot succeed.
    Cas,
}

#[derive(Clone, Copy, ValueEnum)]
enum AtomicsArg {
    /// The model's rule 9.
    Model,
    /// Soft-RoCE's write-back (docs/verbs-notes.md, pitfall 9).
    Rxe,
}

impl ModelArgs {
    fn apply(self, test: &mut Test) {
        match self.atomics {
            Some(AtomicsArg::Model) => test.atomics = FailedCas::Reads,
            Some(AtomicsArg::Rxe) => test.atomics = FailedCas::WritesBack,
            None => {}
        }
        match self.fence {
            Some(FenceArg::Get) => test.fence = loco_rdmawait::FenceRead::Get,
            Some(FenceArg::Cas) => test.fence = loco_rdmawait::FenceRead::Cas,
            None => {}
        }
    }
}

#[derive(Subcommand)]
enum Litmus {
    /// Decide each test's `exists` condition with the model explorer.
    #[command(after_help = LITMUS_EXIT_CODES)]
    Check {
        /// Test files (.litmus); `-` reads one from standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        budget: Budget,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Run each test for real and compare the observed outcomes with the model.
    #[command(after_help = LITMUS_EXIT_CODES)]
    Run {
        /// Backend to run on.
        #[arg(long, value_enum, default_value_t = BackendArg::Soft)]
        backend: BackendArg,
        /// Soft NIC schedule (with `--backend soft`).
        #[arg(long, value_enum, default_value_t = ScheduleArg::Chaos)]
        schedule: ScheduleArg,
        /// Runs per test (at least 1).
        #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
        runs: usize,
        /// Seed of the first run (run i uses seed + i).
        #[arg(long, default_value_t = 0, value_parser = bench::whole)]
        seed: u64,
        /// Stop a test at its first run showing the `exists` outcome (--runs is then a budget).
        #[arg(long)]
        until_exists: bool,
        /// Timeout of each wait and poll, in seconds (more than 0, at most 3600; fractions
        /// allowed, e.g. 0.5).
        #[arg(long, default_value_t = 10.0, value_parser = timeout_seconds)]
        timeout: f64,
        /// On OS threads (chaos, threaded, verbs): before each statement a thread makes up to
        /// this many extra CPU loads of a private word (a seeded number) and sometimes yields,
        /// so that the threads interleave in more ways. Changes no outcome; 0 is off. Not with
        /// `--schedule sim`, whose scheduler interleaves at every operation.
        #[arg(long, default_value_t = loco_litmus::run::DEFAULT_NOISE,
              value_parser = clap::value_parser!(u32).range(0..=loco_litmus::run::MAX_NOISE as i64))]
        noise: u32,
        /// Test files (.litmus); `-` reads one from standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        budget: Budget,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Print the outcomes the model allows.
    #[command(after_help = LITMUS_EXIT_CODES)]
    Show {
        /// Test file (.litmus); `-` reads it from standard input.
        file: PathBuf,
        /// Print a schedule reaching each outcome.
        #[arg(long)]
        traces: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        budget: Budget,
        #[command(flatten)]
        model: ModelArgs,
    },
}

/// What went wrong over a command's files; the exit status is the worst.
#[derive(Default)]
struct Status {
    /// Verdict mismatches (check) or tests with a forbidden outcome observed (run).
    mismatches: usize,
    /// Files that cannot be read or do not parse.
    file_errors: usize,
    /// Files the explorer gave up on.
    gave_up: usize,
    /// Tests whose runs failed.
    run_errors: usize,
}

impl Status {
    fn code(&self) -> u8 {
        if self.run_errors > 0 {
            5
        } else if self.gave_up > 0 {
            4
        } else if self.file_errors > 0 {
            3
        } else if self.mismatches > 0 {
            1
        } else {
            0
        }
    }

    /// The problems, for the summary line (empty if none).
    fn problems(&self, mismatch: &str) -> String {
        let mut v = Vec::new();
        let mut add = |n: usize, what: &str| {
            if n > 0 {
                v.push(format!("{n} {what}"));
            }
        };
        add(self.mismatches, mismatch);
        add(self.file_errors, "FILE ERROR(S)");
        add(self.gave_up, "GAVE UP (budget)");
        add(self.run_errors, "RUN(S) FAILED");
        v.join(", ")
    }
}

/// Counts an error of the explorer and returns its JSON `kind`: a test that is not valid
/// ([`loco_litmus::explore::ExploreError::Invalid`]) is bad input, a file error (status 3) as
/// a file that does not parse; otherwise the explorer gave up (status 4).
fn count_explore_error(
    status: &mut Status,
    err: &loco_litmus::explore::ExploreError,
) -> &'static str {
    if matches!(err, loco_litmus::explore::ExploreError::Invalid(_)) {
        status.file_errors += 1;
        "file"
    } else {
        status.gave_up += 1;
        "gave up"
    }
}

/// Loads a file, or reports why not and counts a file error.
fn load_or_count(path: &Path, status: &mut Status, model: ModelArgs) -> Result<Test, String> {
    let mut t = load(path).inspect_err(|_| status.file_errors += 1)?;
    model.apply(&mut t);
    Ok(t)
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    /// The soft NIC (in-process).
    Soft,
    /// Real ibverbs devices (build with the `verbs` feature).
    Verbs,
}

#[derive(Clone, Copy, ValueEnum)]
enum ScheduleArg {
    /// Adversarial: every reordering the model allows, seeded.
    Chaos,
    /// NIC engine threads, in order.
    Threaded,
    /// The deterministic simulator: the test's threads interleaved at every operation by a
    /// seeded scheduler, on the chaos model, in virtual time (`loco_rdmawait::sim`).
    Sim,
}

/// `litmus run --timeout`: seconds as `bench --secs` takes them (more than 0, at most 3600,
/// fractions allowed, not so small that they round to 0 ns; command-line parser).
fn timeout_seconds(s: &str) -> Result<f64, String> {
    bench::seconds(s)
}

/// A count of at least 1 (command-line parser): `--runs 0` would run nothing and report that
/// no forbidden outcome was seen.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a whole number of at least 1".into()),
    }
}

/// The command line's grammar: [`Cli`]'s, with negative numbers taken as values everywhere, so
/// that `--threads -1` is refused by the option's own parser ("expected a whole number from 1
/// to 256") rather than as an unknown argument `-1`.
fn command() -> clap::Command {
    fn negatives(c: clap::Command) -> clap::Command {
        c.allow_negative_numbers(true).mut_subcommands(negatives)
    }
    negatives(Cli::command())
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    refuse_ignored_options(&cli, &matches);
    refuse_stdin_twice(&cli);
    match cli.command {
        Command::Litmus(cmd) => ExitCode::from(litmus(cmd).code()),
        Command::Keygen => keygen::main(),
        Command::Doctor(args) => doctor::main(&args),
        Command::Bench(Bench::Locks(mut args)) => {
            args.dedup_lists();
            bench_exit("locks", bench::locks(&args))
        }
        Command::Bench(Bench::Ops(mut args)) => {
            args.dedup_lists();
            bench_exit("ops", ops::ops(&args))
        }
    }
}

/// The exit status of `loco bench <what>`: 0, or 5 with the error on standard error.
fn bench_exit(what: &str, r: Result<(), impl std::fmt::Display>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("loco bench {what}: {e}");
            ExitCode::from(5)
        }
    }
}

/// A usage error (exit 2) for options the run would ignore: given for another backend than
/// the one chosen (`--profile` with `--backend soft`, say).
fn refuse_ignored_options(cli: &Cli, m: &clap::ArgMatches) {
    let (path, ignored) = match (&cli.command, m.subcommand()) {
        (Command::Bench(bench), Some(("bench", b))) => match (bench, b.subcommand()) {
            (Bench::Locks(a), Some((name, sub))) => {
                (["bench", name], bench::ignored_options(a, sub))
            }
            (Bench::Ops(a), Some((name, sub))) => (["bench", name], ops::ignored_options(a, sub)),
            _ => return,
        },
        (
            Command::Litmus(Litmus::Run {
                backend,
                schedule,
                noise,
                ..
            }),
            Some(("litmus", l)),
        ) => {
            let Some((name, sub)) = l.subcommand() else {
                return;
            };
            let soft = matches!(backend, BackendArg::Soft);
            // The simulator's scheduler interleaves at every operation; the runner drops the
            // noise there (it would only dilute the schedules). `--noise 0` asks for just that.
            let noisy_sim = soft && matches!(schedule, ScheduleArg::Sim) && *noise > 0;
            let rules = [
                ("schedule", "--backend soft", soft),
                (
                    "noise",
                    "OS threads (--schedule chaos or threaded, or --backend verbs), not \
                     --schedule sim",
                    !noisy_sim,
                ),
            ];
            (["litmus", name], bench::given_where_ignored(sub, &rules))
        }
        _ => return,
    };
    if !ignored.is_empty() {
        usage_error(
            &path,
            format!("{} (this run would ignore it)", ignored.join("; ")),
        );
    }
}

/// Exits with a usage error (status 2) of the subcommand at `path` (`["bench", "locks"]`):
/// its usage line, not the top-level `loco <COMMAND>`.
fn usage_error(path: &[&str], msg: String) -> ! {
    let mut root = command();
    root.build();
    let mut cmd = &mut root;
    for name in path {
        cmd = cmd.find_subcommand_mut(name).expect("a subcommand of loco");
    }
    cmd.error(clap::error::ErrorKind::ArgumentConflict, msg)
        .exit()
}

fn litmus(cmd: Litmus) -> Status {
    match cmd {
        Litmus::Check {
            files,
            json,
            budget,
            model,
        } => check(&files, json, budget, model),
        Litmus::Run {
            backend,
            schedule,
            runs,
            seed,
            until_exists,
            timeout,
            noise,
            files,
            json,
            budget,
            model,
        } => {
            let backend = match (backend, schedule) {
                (BackendArg::Soft, ScheduleArg::Chaos) => RunBackend::SoftChaos,
                (BackendArg::Soft, ScheduleArg::Threaded) => RunBackend::SoftThreaded,
                (BackendArg::Soft, ScheduleArg::Sim) => RunBackend::SoftSim,
                (BackendArg::Verbs, _) => RunBackend::Verbs,
            };
            let mut cfg = RunConfig::new(backend, runs, seed);
            cfg.until_exists = until_exists;
            cfg.timeout = Duration::from_secs_f64(timeout);
            cfg.noise = noise;
            run(&files, &cfg, json, budget, model)
        }
        Litmus::Show {
            file,
            traces,
            json,
            budget,
            model,
        } => show(&file, traces, json, budget, model),
    }
}

/// Prints an error with its chain of causes.
fn report(e: &dyn std::error::Error) {
    let mut said = e.to_string();
    err!("error: {said}");
    let mut src = e.source();
    while let Some(s) = src {
        // An error that shows its source in its own message is not repeated.
        let text = s.to_string();
        if !said.contains(&text) {
            err!(": {text}");
            said.push_str(&text);
        }
        src = s.source();
    }
    errln!();
}

/// Reads and parses a file (`-`: standard input); on error, reports it (on stderr) and
/// returns its message.
fn load(path: &Path) -> Result<Test, String> {
    let parsed = if is_stdin(path) {
        loco_litmus::parse_reader(std::io::stdin().lock(), "<stdin>")
    } else {
        loco_litmus::parse_file(path)
    };
    parsed.map_err(|e| {
        report(&e);
        e.to_string()
    })
}

/// Whether a file argument is `-`, standard input.
fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// A usage error (exit 2) for `-` (standard input) given more than once: the second would
/// read nothing.
fn refuse_stdin_twice(cli: &Cli) {
    let (name, files) = match &cli.command {
        Command::Litmus(Litmus::Check { files, .. }) => ("check", files),
        Command::Litmus(Litmus::Run { files, .. }) => ("run", files),
        _ => return,
    };
    if files.iter().filter(|f| is_stdin(f)).count() > 1 {
        usage_error(
            &["litmus", name],
            "`-` (standard input) can be given once only".into(),
        );
    }
}

/// Explores `test` within `budget`; with `pb`, its message says how many states are in, as
/// they come (a large test takes minutes).
fn explore(
    test: &Test,
    budget: Budget,
    pb: Option<&ProgressBar>,
) -> Result<Exploration, loco_litmus::explore::ExploreError> {
    let mut cfg = loco_litmus::explore::Config::default();
    cfg.max_states = budget.max_states;
    cfg.max_memory = budget.max_memory.saturating_mul(1 << 20);
    loco_litmus::explore::explore_with_progress(test, &cfg, |n| {
        if let Some(pb) = pb {
            pb.set_message(format!("{}: {n} states", test.name));
        }
    })
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len as u64);
    pb.set_style(
        ProgressStyle::with_template("{prefix:>30} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn fmt_time(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{}µs", d.as_micros())
    } else if d < Duration::from_secs(1) {
        format!("{:.1}ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.2}s", d.as_secs_f64())
    }
}

/// `{ "t0:r0": 1, "x": 0 }` for an outcome.
fn outcome_json(
    test: &Test,
    e: &[loco_litmus::ast::Observable],
    o: &loco_litmus::Outcome,
) -> Value {
    let map = e
        .iter()
        .zip(&o.0)
        .map(|(x, v)| (test.observable_name(x), json!(v)))
        .collect::<serde_json::Map<_, _>>();
    Value::Object(map)
}

fn check(files: &[PathBuf], json: bool, budget: Budget, model: ModelArgs) -> Status {
    let mut status = Status::default();
    let mut rows = Vec::new();
    // Every file is read and parsed first, so that their errors come before the table.
    let tests: Vec<_> = files
        .iter()
        .map(|f| load_or_count(f, &mut status, model))
        .collect();
    let pb = bar(files.len(), "checking");
    if !json {
        pb.suspend(|| {
            out!(
                "{:<32} {:<9} {:<9} {:>8} {:>10} {:>9}  verdict",
                "test",
                "expect",
                "model",
                "outcomes",
                "states",
                "time"
            )
        });
    }
    for (f, test) in files.iter().zip(tests) {
        pb.set_message(f.display().to_string());
        let test = match test {
            Ok(t) => t,
            Err(msg) => {
                if !json {
                    pb.suspend(|| out!("{:<32} FILE ERROR (above)", f.display().to_string()));
                }
                rows.push(json!({"file": f, "error": msg, "kind": "file"}));
                pb.inc(1);
                continue;
            }
        };
        match explore(&test, budget, Some(&pb)) {
            Ok(e) => {
                let v = e.verdict(&test);
                if !v.matches() {
                    status.mismatches += 1;
                }
                let counterexample = match (v.matches(), e.witness(&test)) {
                    (false, Some(w)) => e.trace(&test, w),
                    _ => None,
                };
                if json {
                    rows.push(json!({
                        "file": f,
                        "name": test.name,
                        "expect": test.expect,
                        "model": v.model(),
                        "matches": v.matches(),
                        "outcomes": e.outcomes.len(),
                        "states": e.states,
                        "transitions": e.transitions,
                        "stuck": e.stuck,
                        "millis": millis(e.elapsed),
                        "counterexample": counterexample,
                    }));
                } else {
                    pb.suspend(|| {
                        out!(
                            "{:<32} {:<9} {:<9} {:>8} {:>10} {:>9}  {}",
                            test.name,
                            test.expect.to_string(),
                            v.model().to_string(),
                            e.outcomes.len(),
                            e.states,
                            fmt_time(e.elapsed),
                            if v.matches() { "ok" } else { "MISMATCH" }
                        );
                        if let Some(note) = stuck_note(&e) {
                            out!("  note: {note}");
                        }
                        if let Some(trace) = &counterexample {
                            let w = e.witness(&test).expect("a counterexample has a witness");
                            out!("  counterexample: {}", e.show(&test, w));
                            for l in trace {
                                out!("    {l}");
                            }
                        }
                    });
                }
            }
            Err(err) => {
                let kind = count_explore_error(&mut status, &err);
                pb.suspend(|| {
                    errln!("{}: {err}", f.display());
                    if !json {
                        out!(
                            "{:<32} {:<9} {:<9} {:>8} {:>10} {:>9}  {} (above)",
                            test.name,
                            test.expect.to_string(),
                            "?",
                            "?",
                            err.states(),
                            "",
                            if kind == "file" {
                                "FILE ERROR"
                            } else {
                                "GAVE UP"
                            }
                        );
                    }
                });
                rows.push(json!({
                    "file": f,
                    "name": test.name,
                    "error": err.to_string(),
                    "kind": kind,
                    "states": err.states(),
                }));
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    if json {
        out!("{}", serde_json::to_string_pretty(&rows).expect("json"));
    } else {
        let problems = status.problems("VERDICT(S) DO NOT MATCH");
        out!(
            "{} test(s): {}",
            files.len(),
            if problems.is_empty() {
                "every verdict matches".to_string()
            } else {
                problems
            }
        );
    }
    status
}

fn run(
    files: &[PathBuf],
    cfg: &RunConfig,
    json: bool,
    budget: Budget,
    model_args: ModelArgs,
) -> Status {
    let mut status = Status::default();
    // A backend this build lacks fails every file alike: said once, with how to get it, and
    // before the model of each file is explored (minutes for a large test) only to be unused.
    if let Err(e) = loco_litmus::run::supported(cfg.backend) {
        let msg = format!("{e}: cargo build -p loco-cli --features verbs");
        errln!("loco litmus run: {msg}");
        status.run_errors += files.len();
        if json {
            let rows: Vec<_> = files
                .iter()
                .map(|f| json!({"file": f, "error": msg, "kind": "run"}))
                .collect();
            out!("{}", serde_json::to_string_pretty(&rows).expect("json"));
        } else {
            out!("{} test(s): {} RUN(S) FAILED", files.len(), files.len());
        }
        return status;
    }
    let mut rows = Vec::new();
    let backend = match cfg.backend {
        RunBackend::SoftChaos => "soft (chaos)",
        RunBackend::SoftThreaded => "soft (threaded)",
        RunBackend::SoftSim => "soft (sim)",
        RunBackend::Verbs => "verbs",
    };
    for f in files {
        let test = match load_or_count(f, &mut status, model_args) {
            Ok(t) => t,
            Err(msg) => {
                rows.push(json!({"file": f, "error": msg, "kind": "file"}));
                continue;
            }
        };
        let model = match explore(&test, budget, None) {
            Ok(e) => e,
            Err(err) => {
                errln!("{}: {err}", f.display());
                let kind = count_explore_error(&mut status, &err);
                rows.push(
                    json!({"file": f, "name": test.name, "error": err.to_string(), "kind": kind}),
                );
                continue;
            }
        };
        let pb = bar(cfg.runs, &test.name);
        let res = loco_litmus::run(&test, cfg, |n| {
            if n % 16 == 0 {
                pb.set_position(n as u64)
            }
        });
        pb.finish_and_clear();
        let report_ = match res {
            Ok(r) => r,
            Err(RunError::Unsupported { op, why }) => {
                if json {
                    rows.push(
                        json!({"file": f, "name": test.name, "skipped": format!("`{op}`: {why}")}),
                    );
                } else {
                    out!(
                        "{}: skipped: `{op}` is unsupported by the runner yet ({why})\n",
                        test.name
                    );
                }
                continue;
            }
            Err(err) => {
                err!("{}: ", f.display());
                report(&err);
                // An invalid test is bad input, as a file that does not parse (status 3).
                let kind = if matches!(err, RunError::Invalid(_)) {
                    status.file_errors += 1;
                    "file"
                } else {
                    status.run_errors += 1;
                    "run"
                };
                rows.push(
                    json!({"file": f, "name": test.name, "error": err.to_string(), "kind": kind}),
                );
                continue;
            }
        };
        let forbidden: Vec<_> = report_
            .histogram
            .keys()
            .filter(|o| !model.allows(o))
            .collect();
        if !forbidden.is_empty() {
            status.mismatches += 1;
        }
        let seen = report_.exists_seen(&test);
        if json {
            let hist: Vec<_> = report_
                .histogram
                .iter()
                .map(|(o, n)| {
                    json!({
                        "outcome": outcome_json(&test, &report_.observables, o),
                        "count": n,
                        "allowed": model.allows(o),
                        "exists": satisfies(&test, &report_.observables, o),
                    })
                })
                .collect();
            rows.push(json!({
                "file": f,
                "name": test.name,
                "expect": test.expect,
                "backend": backend,
                "runs": report_.runs,
                "seed": cfg.seed,
                "exists_seen": seen,
                "forbidden_seen": forbidden.len(),
                "millis": millis(report_.elapsed),
                "histogram": hist,
            }));
        } else {
            out!(
                "{} on {backend}: {} runs from seed {} in {}; exists outcome {} (expect {})",
                test.name,
                report_.runs,
                cfg.seed,
                fmt_time(report_.elapsed),
                if seen { "seen" } else { "not seen" },
                test.expect,
            );
            out!("  {:>7}  {:<9}  outcome", "count", "model");
            for (o, n) in &report_.histogram {
                let mark = if model.allows(o) {
                    "allowed"
                } else {
                    "FORBIDDEN"
                };
                let ex = if satisfies(&test, &report_.observables, o) {
                    "  <- exists"
                } else {
                    ""
                };
                out!("  {n:>7}  {mark:<9}  {}{ex}", model.show(&test, o));
            }
            out!();
        }
    }
    if json {
        out!("{}", serde_json::to_string_pretty(&rows).expect("json"));
    } else {
        let problems = status.problems("TEST(S) SHOWED FORBIDDEN OUTCOMES");
        out!(
            "{} test(s): {}",
            files.len(),
            if problems.is_empty() {
                "no forbidden outcome observed".to_string()
            } else {
                problems
            }
        );
    }
    status
}

/// What `check` and `show` say under a test whose exploration met states where no thread can
/// go on and one has not finished (a lock never released, a `wait` or `poll` with nothing
/// outstanding): those schedules have no outcome, and only the JSON's `stuck` told so.
fn stuck_note(e: &loco_litmus::Exploration) -> Option<String> {
    (e.stuck > 0).then(|| {
        let none = if e.outcomes.is_empty() {
            "no schedule finishes: "
        } else {
            ""
        };
        format!(
            "{none}{} stuck state(s), where no thread can go on and one has not finished (a \
             lock never released, a wait or poll with nothing outstanding); `loco litmus run` \
             names the thread",
            e.stuck
        )
    })
}

fn show(file: &Path, traces: bool, json: bool, budget: Budget, model: ModelArgs) -> Status {
    let mut status = Status::default();
    let Ok(test) = load_or_count(file, &mut status, model) else {
        return status;
    };
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(Duration::from_millis(200));
    spinner.set_message(format!("{}: exploring", test.name));
    let explored = explore(&test, budget, Some(&spinner));
    spinner.finish_and_clear();
    let e = match explored {
        Ok(e) => e,
        Err(err) => {
            errln!("{}: {err}", file.display());
            count_explore_error(&mut status, &err);
            return status;
        }
    };
    if json {
        let outs: Vec<_> = e
            .outcomes
            .keys()
            .map(|o| {
                json!({
                    "outcome": outcome_json(&test, &e.observables, o),
                    "exists": satisfies(&test, &e.observables, o),
                    "trace": if traces { e.trace(&test, o) } else { None },
                })
            })
            .collect();
        let v = json!({
            "name": test.name,
            "expect": test.expect,
            "model": e.verdict(&test).model(),
            "states": e.states,
            "stuck": e.stuck,
            "outcomes": outs,
        });
        out!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return status;
    }
    out!(
        "{}: {} allowed outcome(s) ({} states, {}); exists is {} (expect {})",
        test.name,
        e.outcomes.len(),
        e.states,
        fmt_time(e.elapsed),
        e.verdict(&test).model(),
        test.expect
    );
    if let Some(note) = stuck_note(&e) {
        out!("  note: {note}");
    }
    for o in e.outcomes.keys() {
        let ex = if satisfies(&test, &e.observables, o) {
            "  <- exists"
        } else {
            ""
        };
        out!("  {}{ex}", e.show(&test, o));
        if traces {
            for l in e.trace(&test, o).unwrap_or_default() {
                out!("      {l}");
            }
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: &str = "litmus t\nloc x @n0\nthread t0 @n0 {\n  store(x, 1)\n}\nexists x = 1\n\
                        expect allowed\n";

    /// A test the explorer refuses as invalid (`ExploreError::Invalid`) is bad input: the same
    /// exit status (3) as a file that does not parse, not the explorer's give-up (4).
    #[test]
    fn an_invalid_test_exits_as_a_parse_error_does() {
        let budget = Budget {
            max_states: loco_litmus::explore::DEFAULT_MAX_STATES,
            max_memory: loco_litmus::explore::DEFAULT_MAX_MEMORY >> 20,
        };
        let mut test = loco_litmus::parse(TEST, "t.litmus").expect("parses");
        explore(&test, budget, None).expect("a valid test explores");
        test.name = "n".repeat(loco_litmus::parse::MAX_NAME_LEN + 1);
        let err = explore(&test, budget, None).expect_err("an invalid test");
        assert!(matches!(
            err,
            loco_litmus::explore::ExploreError::Invalid(_)
        ));
        let mut invalid = Status::default();
        assert_eq!(count_explore_error(&mut invalid, &err), "file");

        let bad = std::env::temp_dir().join(format!("loco-bad-{}.litmus", std::process::id()));
        std::fs::write(&bad, "litmus t\nthis does not parse\n").unwrap();
        let mut parse = Status::default();
        let model = ModelArgs {
            atomics: None,
            fence: None,
        };
        assert!(load_or_count(&bad, &mut parse, model).is_err());
        std::fs::remove_file(&bad).ok();
        assert_eq!(invalid.code(), parse.code());
        assert_eq!(invalid.code(), 3);

        // The budget is still a give-up.
        let mut gave_up = Status::default();
        let budget_err = loco_litmus::explore::ExploreError::StateLimit(1);
        assert_eq!(count_explore_error(&mut gave_up, &budget_err), "gave up");
        assert_eq!(gave_up.code(), 4);
    }
}
