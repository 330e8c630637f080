//! `loco bench locks`: JSON lines with the documented fields, and clear errors for bad options.

mod common;
use common::{configs, json_lines, loco, SIM_LOCKS};
use std::process::Command;

#[test]
fn bench_locks_prints_one_json_object_per_configuration() {
    let dir = std::env::temp_dir().join(format!("loco-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("locks.svg");
    let out = loco(&[
        "bench",
        "locks",
        "--secs",
        "0.05",
        "--threads",
        "1,2",
        "--nodes",
        "2",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 9 * 2, "9 locks x 2 thread counts");
    for v in &lines {
        for field in [
            "lock",
            "backend",
            "profile",
            "threads",
            "nodes",
            "ops_per_sec",
            "p50_us",
            "p99_us",
            "fairness",
            "net_ops_per_acquire",
        ] {
            assert!(v.get(field).is_some(), "{field} missing in {v}");
        }
        assert_eq!(v["backend"], "soft");
        assert_eq!(v["nodes"], 2);
        assert!(v["ops_per_sec"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["net_ops_per_acquire"].as_f64().unwrap() >= 2.0, "{v}");
    }
    let locks: Vec<&str> = lines.iter().map(|v| v["lock"].as_str().unwrap()).collect();
    for l in [
        "nlock",
        "wlock",
        "slock",
        "nlock-combining",
        "slock-combining",
        "nlock-no-cohort",
        "wlock-no-cohort",
        "slock-no-cohort",
        "rcas-spinlock",
    ] {
        assert!(locks.contains(&l), "{l} missing");
    }
    // The plot: one line per lock (one node count here).
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert_eq!(svg.matches("<polyline").count(), 9, "{svg}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bench_locks_refuses_bad_options() {
    for args in [
        &["bench", "locks", "--secs", "0"][..],
        &["bench", "locks", "--threads", "0"],
        &["bench", "locks", "--nodes", "0"],
        &["bench", "locks", "--secs", "NaN"],
        &["bench", "locks", "--threads", "257"],
        &["bench", "locks", "--lock", "mutex"],
        &[
            "bench",
            "locks",
            "--backend",
            "sim",
            "--profile",
            "infiniband9000",
        ],
        &["bench", "locks", "--backend", "sim", "--sim-us", "0"],
        &[
            "bench",
            "locks",
            "--backend",
            "sim",
            "--profile-scale",
            "0.01",
        ],
        &[
            "bench",
            "locks",
            "--backend",
            "sim",
            "--profile-scale",
            "inf",
        ],
    ] {
        let out = loco(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: not a command-line error"
        );
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
}

/// `--profile-scale nan` (which `f64` parses) is a command-line error that says what to give,
/// for `bench locks` and `bench ops`, and nothing is measured.
#[test]
fn a_nan_profile_scale_is_refused_with_what_to_give() {
    for cmd in ["locks", "ops"] {
        for scale in ["nan", "NaN", "inf"] {
            let out = loco(&[
                "bench",
                cmd,
                "--backend",
                "sim",
                "--profile-scale",
                scale,
                "--no-plot",
            ]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {scale}: {err}");
            assert!(
                err.contains("--profile-scale") && err.contains("give a factor from 0.1 to 100"),
                "{cmd} {scale}: {err}"
            );
            assert!(out.stdout.is_empty(), "{cmd} {scale}");
        }
    }
}

/// `--backend sim`: figures in simulated time under a profile, the same on every run (they do
/// not depend on the host), and the profile named in the JSON.
#[test]
fn bench_locks_under_the_simulator_is_deterministic() {
    let args = [
        &SIM_LOCKS[..],
        &["--profile", "connectx5", "--threads", "1,3"],
    ]
    .concat();
    let a = loco(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = loco(&args);
    assert_eq!(a.stdout, b.stdout, "same options, same figures");
    let lines = json_lines(&a);
    assert_eq!(lines.len(), 2 * 2);
    for v in &lines {
        assert_eq!(v["backend"], "sim");
        assert_eq!(v["profile"], "connectx5");
        let ops = v["ops_per_sec"].as_f64().unwrap();
        // An acquire and a release take at least a couple of round trips of about 2 µs.
        assert!(ops > 1e4 && ops < 1e7, "{v}");
        assert!(v["p50_us"].as_f64().unwrap() >= 1.0, "{v}");
    }
    // One thread alone: every acquire costs the same, p99 close to p50.
    let solo = &lines[0];
    assert_eq!(solo["threads"], 1);
    assert!(solo["p99_us"].as_f64().unwrap() < 2.0 * solo["p50_us"].as_f64().unwrap());
}

/// `--rounds`: every configuration once per round, one row per configuration with the medians
/// and the range; under the simulator round r is seed `--seed` + r, so a row of 3 rounds is the
/// median of the rows of seeds 1, 2 and 3 run one by one.
#[test]
fn bench_locks_rounds_give_medians_and_ranges() {
    let run = |extra: &[&str]| {
        json_lines(&loco(
            &[&SIM_LOCKS[..], &["--threads", "3"], extra].concat(),
        ))
    };
    let rounds = run(&["--rounds", "3"]);
    assert_eq!(rounds.len(), 2, "one row per configuration, not per round");
    let by_seed: Vec<Vec<serde_json::Value>> = ["1", "2", "3"]
        .iter()
        .map(|s| run(&["--seed", s]))
        .collect();
    for (i, row) in rounds.iter().enumerate() {
        assert_eq!(row["rounds"], 3, "{row}");
        let mut ops: Vec<f64> = by_seed
            .iter()
            .map(|r| r[i]["ops_per_sec"].as_f64().unwrap())
            .collect();
        ops.sort_by(f64::total_cmp);
        assert_eq!(
            row["ops_per_sec"].as_f64().unwrap(),
            ops[1],
            "the median: {row}"
        );
        assert_eq!(row["ops_per_sec_min"].as_f64().unwrap(), ops[0], "{row}");
        assert_eq!(row["ops_per_sec_max"].as_f64().unwrap(), ops[2], "{row}");
    }
    // Against the spinlock: the median of the per-round ratios, round r against round r.
    // (The spinlock runs first in a round, so its row comes first.)
    let of = |rows: &[serde_json::Value], lock: &str| -> serde_json::Value {
        rows.iter()
            .find(|r| r["lock"] == lock)
            .unwrap_or_else(|| panic!("no {lock} row"))
            .clone()
    };
    let mut ratios: Vec<f64> = by_seed
        .iter()
        .map(|r| {
            of(r, "nlock")["ops_per_sec"].as_f64().unwrap()
                / of(r, "rcas-spinlock")["ops_per_sec"].as_f64().unwrap()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let (nlock, spin) = (&of(&rounds, "nlock"), &of(&rounds, "rcas-spinlock"));
    assert_eq!(
        rounds[0]["lock"], "rcas-spinlock",
        "the spinlock's row first"
    );
    // Ratios of throughputs printed in JSON: equal up to the last bits of a double.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    for (key, want) in [
        ("vs_spinlock", ratios[1]),
        ("vs_spinlock_min", ratios[0]),
        ("vs_spinlock_max", ratios[2]),
    ] {
        let got = nlock[key].as_f64().unwrap();
        assert!(close(got, want), "{key}: {got} against {want}: {nlock}");
    }
    assert!(spin.get("vs_spinlock").is_none(), "{spin}");
    let one = run(&[]);
    assert!(
        one.iter().all(|r| r.get("rounds").is_none()),
        "one round, no spread"
    );
    let (nlock, spin) = (of(&one, "nlock"), of(&one, "rcas-spinlock"));
    assert_eq!(
        nlock["vs_spinlock"].as_f64().unwrap(),
        nlock["ops_per_sec"].as_f64().unwrap() / spin["ops_per_sec"].as_f64().unwrap()
    );
    assert!(nlock.get("vs_spinlock_min").is_none(), "{nlock}");
    // The same run with other locks (`--lock`).
    let with_locks = |locks: &str| {
        let args: Vec<&str> = SIM_LOCKS
            .iter()
            .map(|&a| if a == "nlock,rcas-spinlock" { locks } else { a })
            .chain(["--threads", "3"])
            .collect();
        json_lines(&loco(&args))
    };
    // Without the spinlock in the run there is nothing to divide by.
    let alone = with_locks("nlock");
    assert_eq!(alone.len(), 1);
    assert!(alone[0].get("vs_spinlock").is_none(), "{}", alone[0]);
    // The spinlock given twice: measured once, without a ratio (the repeat is dropped).
    let twice = with_locks("nlock,rcas-spinlock,rcas-spinlock");
    assert_eq!(twice.len(), 2);
    for r in &twice {
        assert_eq!(r.get("vs_spinlock").is_some(), r["lock"] == "nlock", "{r}");
    }
    let bad = loco(&["bench", "locks", "--rounds", "101"]);
    assert!(!bad.status.success());
}

/// `--backend verbs` in a build without the verbs backend says how to get it.
#[cfg(not(feature = "verbs"))]
#[test]
fn bench_locks_on_verbs_without_the_feature_says_how_to_build_it() {
    let out = loco(&[
        "bench",
        "locks",
        "--backend",
        "verbs",
        "--secs",
        "0.01",
        "--no-plot",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features verbs"), "{err}");
}

/// `loco bench locks --json | head -1`: once the reader has gone, the bench ends quietly with
/// the status of a SIGPIPE death (141), not a panic about a broken pipe.
#[test]
fn a_closed_stdout_ends_the_bench_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_loco"))
        .args([
            "bench",
            "locks",
            "--nodes",
            "2",
            "--threads",
            "1,2",
            "--secs",
            "0.2",
            "--json",
            "--no-plot",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with('{'), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

/// `--vs-sim` sets a device's figures beside the simulator's: on another backend, with one
/// node (it times put + wait from n0 to n1) or across processes it says what is wrong.
#[test]
fn bench_locks_vs_sim_refuses_what_it_cannot_compare() {
    for (args, says) in [
        (&["--vs-sim"][..], "needs --backend verbs, not soft"),
        (
            &["--vs-sim", "--backend", "sim"],
            "needs --backend verbs, not sim",
        ),
        (
            &["--vs-sim", "--backend", "verbs", "--nodes", "1,2"],
            "give --nodes of 2 or more",
        ),
    ] {
        let mut all = vec!["bench", "locks", "--secs", "0.01", "--no-plot"];
        all.extend_from_slice(args);
        let out = loco(&all);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--vs-raw` compares loco's path with the bare device calls: only the verbs backend has
/// them, and it is one comparison at a time.
#[test]
fn bench_ops_vs_raw_refuses_what_it_cannot_compare() {
    for (args, says) in [
        (&["--vs-raw"][..], "needs --backend verbs, not soft"),
        (
            &["--vs-raw", "--backend", "sim"],
            "needs --backend verbs, not sim",
        ),
        (
            &["--vs-raw", "--vs-perftest", "--backend", "verbs"],
            "one at a time",
        ),
    ] {
        let mut all = vec!["bench", "ops", "--iters", "10", "--no-plot"];
        all.extend_from_slice(args);
        let out = loco(&all);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = loco(&["bench", "ops", "--raw-block", "50", "--no-plot"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--raw-block applies only to --vs-raw"),
        "{err}"
    );
    let out = loco(&["bench", "ops", "--vs-raw", "--raw-block", "5"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("from 10 to 100000"), "{err}");
}

/// An option for another backend than the one chosen is a usage error, not silently dropped.
#[test]
fn bench_options_for_another_backend_are_refused() {
    for (args, says) in [
        (
            &["locks", "--profile", "rxe"][..],
            "--profile applies only to --backend sim or --vs-sim",
        ),
        (
            &["locks", "--backend", "soft", "--sim-us", "50"],
            "--sim-us applies only to --backend sim",
        ),
        (
            &["locks", "--backend", "sim", "--secs", "2"],
            "--secs applies only to --backend soft or verbs",
        ),
        (
            &["locks", "--profile-scale", "2"],
            "--profile-scale applies only to --backend sim",
        ),
        (
            &["ops", "--seed", "3"],
            "--seed applies only to --backend sim",
        ),
        (
            &["ops", "--rounds", "3"],
            "--rounds applies only to --vs-perftest",
        ),
    ] {
        let mut all = vec!["bench"];
        all.extend_from_slice(args);
        let out = loco(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Given where they apply, they run.
    let out = loco(&[
        "bench",
        "locks",
        "--backend",
        "sim",
        "--profile",
        "rxe",
        "--sim-us",
        "50",
        "--seed",
        "2",
        "--threads",
        "1",
        "--lock",
        "nlock",
        "--no-plot",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A negative number is refused by the option's own parser, which says what it takes; it used
/// to be read as an unknown flag (`unexpected argument '-1' found`).
#[test]
fn negative_numbers_are_refused_by_the_option_that_takes_them() {
    for (args, says) in [
        (
            &["bench", "locks", "--threads", "-1"][..],
            "expected a whole number from 1 to 256",
        ),
        (&["bench", "locks", "--secs", "-1"], "expected seconds"),
        (
            &["bench", "ops", "--warmup", "-1"],
            "expected a whole number from 0",
        ),
        (&["bench", "ops", "--sizes", "8,-8"], "a multiple of 8"),
        (&["litmus", "run", "--runs", "-5", "x.litmus"], "at least 1"),
        (&["doctor", "--memory", "-1"], "invalid value '-1'"),
    ] {
        let out = loco(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(says) && !err.contains("unexpected argument"),
            "{args:?}: {err}"
        );
    }
}

/// A usage error found after parsing (an option another backend takes, a repeat) shows the
/// subcommand's usage, as clap's own errors do, not the top level's `loco <COMMAND>`.
#[test]
fn a_usage_error_shows_the_usage_of_its_subcommand() {
    for (args, usage) in [
        (
            &["bench", "locks", "--profile", "rxe"][..],
            "bench locks [OPTIONS]",
        ),
        (&["bench", "ops", "--seed", "3"], "bench ops [OPTIONS]"),
        (
            &[
                "litmus",
                "run",
                "--backend",
                "verbs",
                "--schedule",
                "chaos",
                "x.litmus",
            ],
            "litmus run [OPTIONS] <FILES>...",
        ),
    ] {
        let out = loco(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(usage) && !err.contains("<COMMAND>"),
            "{args:?}: {err}"
        );
    }
}

/// `loco bench locks --help` documents its exit statuses, as `ops` and `litmus` do.
#[test]
fn bench_locks_help_documents_the_exit_codes() {
    let out = loco(&["bench", "locks", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for line in [
        "Exit status:",
        "0  measured",
        "2  bad command line",
        "5  the run failed",
    ] {
        assert!(help.contains(line), "{line} missing: {help}");
    }
}

/// `--secs` too short for a single critical section: a failure that says so (exit 5), never a
/// row of zeros with an infinite fairness and exit 0; and one that rounds to 0 ns is a usage
/// error.
#[test]
fn a_run_too_short_to_measure_is_not_a_row_of_zeros() {
    let base = [
        "bench",
        "locks",
        "--lock",
        "nlock",
        "--nodes",
        "1",
        "--threads",
        "1",
        "--json",
        "--no-plot",
        "--secs",
    ];
    let mut args = base.to_vec();
    args.push("0.000000001");
    let out = loco(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(5) => assert!(err.contains("no critical section completed"), "{err}"),
        Some(0) => {
            for v in json_lines(&out) {
                assert!(v["ops_per_sec"].as_f64().unwrap() > 0.0, "{v}");
            }
        }
        other => panic!("exit {other:?}: {err}"),
    }
    let mut args = base.to_vec();
    args.push("1e-12");
    let out = loco(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least 0.000000001"), "{err}");
}

/// A value repeated in a list option (`--threads 1,1`, `--nodes 2,2`, `--lock nlock,nlock`) is
/// measured once, in the order of its first occurrence: it used to measure the same
/// configuration twice.
#[test]
fn bench_locks_measures_a_repeated_value_once() {
    let args = [
        "bench",
        "locks",
        "--backend",
        "sim",
        "--sim-us",
        "60",
        "--nodes",
        "2,3,2",
        "--lock",
        "rcas-spinlock,nlock,rcas-spinlock",
        "--threads",
        "2,1,2",
        "--json",
        "--no-plot",
    ];
    let lines = json_lines(&loco(&args));
    let configs = configs(&lines, ["lock", "nodes", "threads"]);
    let mut want = Vec::new();
    for lock in ["rcas-spinlock", "nlock"] {
        for nodes in [2, 3] {
            for threads in [2, 1] {
                want.push((lock.to_string(), nodes, threads));
            }
        }
    }
    assert_eq!(configs, want);
}

/// A plot whose directory exists but where no file can be created (`/proc`, even for root) is
/// refused before anything is measured, not after the whole benchmark ran.
#[test]
fn bench_locks_refuses_a_plot_it_cannot_create_before_measuring() {
    let plot = "/proc/loco-bench-locks-test.svg";
    let mut args = SIM_LOCKS[..SIM_LOCKS.len() - 1].to_vec();
    args.extend(["--plot", plot]);
    let out = loco(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("cannot write the plot"), "{err}");
    assert!(out.stdout.is_empty(), "measured first: {err}");
    assert!(!std::path::Path::new(plot).exists());
}

/// A seed, an explorer budget or `doctor --memory` that is not a whole number says that it
/// wants one: they said only "invalid digit found in string" (clap's own parser) for `-1`,
/// `1e6` or `1MiB`.
#[test]
fn a_number_that_is_not_whole_says_a_whole_number_is_wanted() {
    for args in [
        &["bench", "locks", "--backend", "sim", "--seed", "-1"][..],
        &["bench", "ops", "--backend", "sim", "--seed", "1e6"],
        &["litmus", "run", "--seed", "-1", "x.litmus"],
        &["litmus", "check", "--max-states", "1e6", "x.litmus"],
        &["litmus", "show", "--max-memory", "1GiB", "x.litmus"],
        &["doctor", "--memory", "1MiB"],
    ] {
        let out = loco(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("expected a whole number from 0 to 18446744073709551615")
                && !err.contains("invalid digit"),
            "{args:?}: {err}"
        );
    }
}
