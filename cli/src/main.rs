//! The `loco` command.
//!
//! - `loco litmus check FILE...`: the model's verdict of each litmus test next to its `expect`,
//!   with the number of allowed outcomes, explored states and time. Exit status 0 iff every
//!   verdict matches.
//! - `loco litmus run --backend soft|verbs [--runs N] [--seed S] FILE...`: runs each test for
//!   real and prints the histogram of observed outcomes, each marked allowed or FORBIDDEN by the
//!   model, and whether the `exists` outcome was seen. Exit status 0 iff no forbidden outcome was
//!   observed (and no run failed).
//! - `loco litmus show FILE`: the outcomes the model allows (`--traces` adds a schedule for each).
//! - `loco keygen`: a fresh random cluster key (`LOCO_CLUSTER_KEY`) for the verbs backend.
//!
//! Every subcommand takes `--json` for machine-readable output.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

mod keygen;
use indicatif::{ProgressBar, ProgressStyle};
use loco_litmus::explore::satisfies;
use loco_litmus::{Backend, Exploration, RunConfig, RunError, Test};
use serde_json::{json, Value};

/// `println!` that ends the process quietly when stdout is closed (`loco ... | head`), with the
/// status a SIGPIPE death would have.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(141);
        }
    }};
}

#[derive(Parser)]
#[command(name = "loco", version, about = "loco-rs tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Litmus tests: model checking and runs on real backends.
    #[command(subcommand)]
    Litmus(Litmus),
    /// Print a fresh random cluster key (LOCO_CLUSTER_KEY) for multi-process verbs clusters.
    Keygen,
}

#[derive(Subcommand)]
enum Litmus {
    /// Decide each test's `exists` condition with the model explorer.
    Check {
        /// Test files (.litmus).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Give up on a test after this many states.
        #[arg(long, default_value_t = loco_litmus::explore::DEFAULT_MAX_STATES)]
        max_states: usize,
    },
    /// Run each test for real and compare the observed outcomes with the model.
    Run {
        /// Backend to run on.
        #[arg(long, value_enum, default_value_t = BackendArg::Soft)]
        backend: BackendArg,
        /// Soft NIC schedule (with `--backend soft`).
        #[arg(long, value_enum, default_value_t = ScheduleArg::Chaos)]
        schedule: ScheduleArg,
        /// Runs per test.
        #[arg(long, default_value_t = 1000)]
        runs: usize,
        /// Seed of the first run (run i uses seed + i).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Stop a test at its first run showing the `exists` outcome (--runs is then a budget).
        #[arg(long)]
        until_exists: bool,
        /// Timeout of each wait and poll, in seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
        /// Test files (.litmus).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print the outcomes the model allows.
    Show {
        /// Test file (.litmus).
        file: PathBuf,
        /// Print a schedule reaching each outcome.
        #[arg(long)]
        traces: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cmd = match cli.command {
        Command::Litmus(cmd) => cmd,
        Command::Keygen => return keygen::main(),
    };
    let ok = match cmd {
        Litmus::Check {
            files,
            json,
            max_states,
        } => check(&files, json, max_states),
        Litmus::Run {
            backend,
            schedule,
            runs,
            seed,
            until_exists,
            timeout,
            files,
            json,
        } => {
            let backend = match (backend, schedule) {
                (BackendArg::Soft, ScheduleArg::Chaos) => Backend::SoftChaos,
                (BackendArg::Soft, ScheduleArg::Threaded) => Backend::SoftThreaded,
                (BackendArg::Verbs, _) => Backend::Verbs,
            };
            let mut cfg = RunConfig::new(backend, runs, seed);
            cfg.until_exists = until_exists;
            cfg.timeout = Duration::from_secs(timeout);
            run(&files, &cfg, json)
        }
        Litmus::Show { file, traces, json } => show(&file, traces, json),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Prints an error with its chain of causes.
fn report(e: &dyn std::error::Error) {
    eprint!("error: {e}");
    let mut src = e.source();
    while let Some(s) = src {
        eprint!(": {s}");
        src = s.source();
    }
    eprintln!();
}

fn load(path: &Path) -> Option<Test> {
    match loco_litmus::parse_file(path) {
        Ok(t) => Some(t),
        Err(e) => {
            report(&e);
            None
        }
    }
}

fn explore(
    test: &Test,
    max_states: usize,
) -> Result<Exploration, loco_litmus::explore::ExploreError> {
    let mut cfg = loco_litmus::explore::Config::default();
    cfg.max_states = max_states;
    loco_litmus::explore::explore_with(test, &cfg)
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

fn check(files: &[PathBuf], json: bool, max_states: usize) -> bool {
    let mut all_ok = true;
    let mut rows = Vec::new();
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
    for f in files {
        pb.set_message(f.display().to_string());
        let Some(test) = pb.suspend(|| load(f)) else {
            all_ok = false;
            rows.push(json!({"file": f, "error": "parse error"}));
            pb.inc(1);
            continue;
        };
        match explore(&test, max_states) {
            Ok(e) => {
                let v = e.verdict(&test);
                all_ok &= v.matches();
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
                all_ok = false;
                pb.suspend(|| report(&err));
                rows.push(json!({"file": f, "name": test.name, "error": err.to_string()}));
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    if json {
        out!("{}", serde_json::to_string_pretty(&rows).expect("json"));
    } else {
        out!(
            "{} test(s): {}",
            files.len(),
            if all_ok {
                "every verdict matches"
            } else {
                "SOME VERDICTS DO NOT MATCH"
            }
        );
    }
    all_ok
}

fn run(files: &[PathBuf], cfg: &RunConfig, json: bool) -> bool {
    let mut ok = true;
    let mut rows = Vec::new();
    let backend = match cfg.backend {
        Backend::SoftChaos => "soft (chaos)",
        Backend::SoftThreaded => "soft (threaded)",
        Backend::Verbs => "verbs",
    };
    for f in files {
        let Some(test) = load(f) else {
            ok = false;
            rows.push(json!({"file": f, "error": "parse error"}));
            continue;
        };
        let model = match explore(&test, loco_litmus::explore::DEFAULT_MAX_STATES) {
            Ok(e) => e,
            Err(err) => {
                report(&err);
                ok = false;
                rows.push(json!({"file": f, "name": test.name, "error": err.to_string()}));
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
                report(&err);
                ok = false;
                rows.push(json!({"file": f, "name": test.name, "error": err.to_string()}));
                continue;
            }
        };
        let forbidden: Vec<_> = report_
            .histogram
            .keys()
            .filter(|o| !model.allows(o))
            .collect();
        ok &= forbidden.is_empty();
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
    } else if !ok {
        out!("FORBIDDEN OUTCOMES OBSERVED, OR RUNS FAILED");
    }
    ok
}

fn show(file: &Path, traces: bool, json: bool) -> bool {
    let Some(test) = load(file) else {
        return false;
    };
    let e = match explore(&test, loco_litmus::explore::DEFAULT_MAX_STATES) {
        Ok(e) => e,
        Err(err) => {
            report(&err);
            return false;
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
            "outcomes": outs,
        });
        out!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return true;
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
    true
}
