//! `loco bench ops`: JSON lines with the documented fields, a deterministic simulator, and
//! clear errors for bad options.

mod common;
use common::{configs, json_lines, loco};
use std::process::Command;

#[test]
fn bench_ops_prints_one_json_object_per_configuration() {
    let dir = std::env::temp_dir().join(format!("loco-bench-ops-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("ops.svg");
    let out = loco(&[
        "bench",
        "ops",
        "--sizes",
        "8,4096",
        "--outstanding",
        "1,4",
        "--iters",
        "20",
        "--warmup",
        "2",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let lines = json_lines(&out);
    // put and get at 2 sizes, rfaa and rcas at 8 bytes, each at 2 outstanding counts.
    assert_eq!(lines.len(), (2 * 2 + 2) * 2);
    for v in &lines {
        for field in [
            "op",
            "backend",
            "profile",
            "size",
            "outstanding",
            "p50_us",
            "p99_us",
            "mean_us",
            "ops_per_sec",
            "mib_per_sec",
        ] {
            assert!(v.get(field).is_some(), "{field} missing in {v}");
        }
        assert_eq!(v["backend"], "soft");
        assert!(v["ops_per_sec"].as_f64().unwrap() > 0.0, "{v}");
        let op = v["op"].as_str().unwrap();
        if op == "rfaa" || op == "rcas" {
            assert_eq!(v["size"], 8, "{v}");
            assert!(v["mib_per_sec"].is_null(), "{v}");
        } else {
            assert!(v["mib_per_sec"].as_f64().unwrap() > 0.0, "{v}");
        }
    }
    for op in ["put", "get", "rfaa", "rcas"] {
        assert!(lines.iter().any(|v| v["op"] == op), "{op} missing");
    }
    // One line per operation and outstanding count.
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert_eq!(svg.matches("<polyline").count(), 4 * 2, "{svg}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The help shows list defaults separated by spaces (`[default: put get rfaa rcas]`), so lists
/// are taken either way: `--op put get` as `--op put,get`.
#[test]
fn bench_ops_takes_lists_with_spaces_or_commas() {
    let rows = |args: &[&str]| {
        let mut all = vec!["bench", "ops", "--backend", "sim", "--iters", "5", "--json"];
        all.extend_from_slice(args);
        all.push("--no-plot");
        json_lines(&loco(&all))
            .iter()
            .map(|v| {
                (
                    v["op"].to_string(),
                    v["size"].clone(),
                    v["outstanding"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let spaces = rows(&[
        "--op",
        "put",
        "get",
        "--sizes",
        "8",
        "64",
        "--outstanding",
        "1",
        "2",
    ]);
    assert_eq!(spaces.len(), 2 * 2 * 2);
    assert_eq!(
        spaces,
        rows(&["--op", "put,get", "--sizes", "8,64", "--outstanding", "1,2"])
    );
}

#[test]
fn bench_ops_on_the_simulator_is_deterministic() {
    let args = [
        "bench",
        "ops",
        "--backend",
        "sim",
        "--profile",
        "rxe",
        "--sizes",
        "8,65536",
        "--outstanding",
        "1,2",
        "--iters",
        "10",
        "--warmup",
        "1",
        "--seed",
        "7",
        "--json",
        "--no-plot",
    ];
    let (a, b) = (json_lines(&loco(&args)), json_lines(&loco(&args)));
    assert_eq!(a.len(), (2 * 2 + 2) * 2);
    assert_eq!(a, b, "same seed, same figures");
    assert!(a
        .iter()
        .all(|v| v["backend"] == "sim" && v["profile"] == "rxe"));
}

#[test]
fn bench_ops_refuses_bad_options() {
    for bad in [
        &["--sizes", "0"][..],
        &["--sizes", "12"],
        &["--sizes", "2097152"],
        &["--sizes", "8,-8"],
        &["--outstanding", "0"],
        &["--outstanding", "129"],
        &["--iters", "0"],
        &["--iters", "18446744073709551616"],
        &["--warmup", "18446744073709551616"],
        &["--warmup", "-1"],
        &["--rounds", "0"],
        &["--op", "swap"],
        &["--backend", "tcp"],
        // Below 0.1 simulated time could stop moving; above 100 requests outlast timeouts.
        &["--profile-scale", "0"],
        &["--profile-scale", "0.05"],
        &["--profile-scale", "1e-9"],
        &["--profile-scale", "101"],
        &["--profile-scale", "NaN"],
    ] {
        let mut args = vec!["bench", "ops", "--no-plot"];
        args.extend_from_slice(bad);
        let out = loco(&args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error:") && !err.contains("panicked"), "{err}");
    }
}

#[test]
fn vs_perftest_needs_the_verbs_backend() {
    for backend in ["soft", "sim"] {
        let out = loco(&[
            "bench",
            "ops",
            "--backend",
            backend,
            "--vs-perftest",
            "--no-plot",
        ]);
        assert_eq!(out.status.code(), Some(5), "{backend}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--vs-perftest") && err.contains("--backend verbs"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
}

/// Across hosts (`LOCO_NODE_ID` set), `--vs-perftest` takes a cluster of exactly two processes:
/// a bad peer list is a clear error before any device or connection is touched (and a build
/// without the verbs backend says so).
#[test]
fn vs_perftest_across_hosts_wants_two_processes() {
    let out = Command::new(env!("CARGO_BIN_EXE_loco"))
        .args([
            "bench",
            "ops",
            "--backend",
            "verbs",
            "--vs-perftest",
            "--no-plot",
        ])
        .env("LOCO_NODE_ID", "0")
        .env("LOCO_PEERS", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
        .env("LOCO_CLUSTER_INSECURE", "1")
        .output()
        .expect("runs loco");
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = if cfg!(feature = "verbs") {
        "two processes"
    } else {
        "without the verbs backend"
    };
    assert!(err.contains(want) && !err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty());
}

/// A plot that cannot be written is reported before anything is measured (it used to be found
/// out after every configuration had run).
#[test]
fn an_unwritable_plot_is_refused_at_once() {
    for bench in ["ops", "locks"] {
        for plot in ["/nonexistent-loco-dir/x.svg", "/"] {
            let out = loco(&["bench", bench, "--plot", plot]);
            assert!(!out.status.success(), "{bench} {plot}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("cannot write the plot"),
                "{bench} {plot}: {err}"
            );
            assert!(out.stdout.is_empty(), "{bench} {plot}: measured first");
        }
    }
}

/// `--vs-perftest` on a loco built without the verbs backend says so first; it used to look
/// for the device's GID file and report that it could not read it.
#[test]
fn vs_perftest_without_the_verbs_backend_says_so() {
    if cfg!(feature = "verbs") {
        return; // a device may be there: the comparison would run
    }
    let out = Command::new(env!("CARGO_BIN_EXE_loco"))
        .args([
            "bench",
            "ops",
            "--backend",
            "verbs",
            "--vs-perftest",
            "--no-plot",
        ])
        .env_remove("LOCO_NODE_ID")
        .env("LOCO_RDMA_DEVICE", "loco-no-such-device")
        .output()
        .expect("runs loco");
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without the verbs backend") && !err.contains("/sys/class"),
        "{err}"
    );
}

/// A value repeated in a list option (`--op put,put`, `--sizes 8,8`, `--outstanding 1,1`) is
/// measured once, in the order of its first occurrence: it used to measure the same
/// configuration twice.
#[test]
fn bench_ops_measures_a_repeated_value_once() {
    let args = [
        "bench",
        "ops",
        "--backend",
        "sim",
        "--op",
        "get,rfaa,get",
        "--sizes",
        "64,8,64",
        "--outstanding",
        "2,1,2",
        "--iters",
        "10",
        "--warmup",
        "1",
        "--json",
        "--no-plot",
    ];
    let lines = json_lines(&loco(&args));
    let configs = configs(&lines, ["op", "size", "outstanding"]);
    let want: Vec<(String, u64, u64)> = [
        ("get", 64, 2),
        ("get", 64, 1),
        ("get", 8, 2),
        ("get", 8, 1),
        ("rfaa", 8, 2),
        ("rfaa", 8, 1),
    ]
    .iter()
    .map(|&(op, s, o)| (op.to_string(), s, o))
    .collect();
    assert_eq!(configs, want);
}

/// A plot whose directory exists but where no file can be created (`/proc`, even for root) is
/// refused before anything is measured, not after the whole benchmark ran.
#[test]
fn bench_ops_refuses_a_plot_it_cannot_create_before_measuring() {
    let plot = "/proc/loco-bench-ops-test.svg";
    let out = loco(&[
        "bench",
        "ops",
        "--backend",
        "sim",
        "--iters",
        "10",
        "--warmup",
        "1",
        "--sizes",
        "8",
        "--plot",
        plot,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("cannot write the plot"), "{err}");
    assert!(out.stdout.is_empty(), "measured first: {err}");
    assert!(!std::path::Path::new(plot).exists());
}
