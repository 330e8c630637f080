//! The `loco` command as a new user meets it: defects found by trying it out, one test each.

mod common;

use std::path::PathBuf;

use common::loco;

/// A test of the repository's `tests/litmus/`.
fn litmus_file(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/litmus")
        .join(name)
        .display()
        .to_string()
}

/// `loco litmus run --backend verbs` in a build without the verbs backend says once how to
/// build it, and explores no model first: it said only "loco-litmus was built without the
/// `verbs` feature" (a crate the user did not build), per file, each after exploring the file
/// (here the explorer's give-up, status 4, came instead of the backend's error).
#[cfg(not(feature = "verbs"))]
#[test]
fn litmus_run_on_verbs_without_the_feature_says_how_to_build_it() {
    let file = litmus_file("fig5-sb-put-wait.litmus");
    let out = loco(&[
        "litmus",
        "run",
        "--backend",
        "verbs",
        "--max-states",
        "1",
        &file,
        &file,
    ]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cargo build -p loco-cli --features verbs"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("gave up"), "{err}");

    // With --json, standard output is still the usual array, one row per file.
    let out = loco(&["litmus", "run", "--backend", "verbs", "--json", &file]);
    assert_eq!(out.status.code(), Some(5));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["kind"], "run");
    assert!(rows[0]["error"]
        .as_str()
        .is_some_and(|e| e.contains("--features verbs")));
}

/// `--noise` under `--schedule sim` is a usage error, as the bench's options for another
/// backend are: the runner drops the noise under the simulator, and `--noise 8` was accepted
/// and ignored. `--noise 0` (off, what the simulator does) stays accepted.
#[test]
fn litmus_run_refuses_noise_under_the_simulator() {
    let file = litmus_file("fig5-sb-put-wait.litmus");
    let run = |more: &[&str]| {
        let mut args = vec!["litmus", "run", "--runs", "2"];
        args.extend_from_slice(more);
        args.push(&file);
        loco(&args)
    };
    let out = run(&["--schedule", "sim", "--noise", "8"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--noise applies only to OS threads"), "{err}");
    assert!(out.stdout.is_empty());
    for ok in [
        &["--schedule", "sim", "--noise", "0"][..],
        &["--schedule", "sim"],
        &["--schedule", "threaded", "--noise", "8"],
    ] {
        let out = run(ok);
        assert!(
            out.status.success(),
            "{ok:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `loco bench locks --backend verbs` in a build without the verbs backend says so without
/// blaming a configuration: it said "rcas-spinlock on 3 nodes, 1 threads: this loco was built
/// without the verbs backend", the spinlock being measured first, whatever `--lock` listed
/// first.
#[cfg(not(feature = "verbs"))]
#[test]
fn bench_locks_on_verbs_without_the_feature_blames_no_configuration() {
    let out = loco(&[
        "bench",
        "locks",
        "--backend",
        "verbs",
        "--lock",
        "nlock",
        "--no-plot",
    ]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        "loco bench locks: this loco was built without the verbs backend: cargo build -p \
         loco-cli --features verbs"
    );
}

/// `--plot FILE --no-plot` is a usage error in both benchmarks: the plot was silently not
/// written where `--plot` asked for it.
#[test]
fn bench_refuses_plot_with_no_plot() {
    let plot = std::env::temp_dir().join(format!("loco-review-{}.svg", std::process::id()));
    let plot = plot.display().to_string();
    for args in [
        &["bench", "locks", "--backend", "sim", "--sim-us", "10"][..],
        &["bench", "ops", "--iters", "1", "--sizes", "8"],
    ] {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--plot", &plot, "--no-plot"]);
        let out = loco(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--no-plot") && err.contains("--plot"), "{err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        // Either alone is fine.
        let mut alone = args.to_vec();
        alone.push("--no-plot");
        assert!(loco(&alone).status.success(), "{alone:?}");
    }
    assert!(!std::path::Path::new(&plot).exists());
}

/// Under the simulator, a span too short for a single critical section fails and says so
/// (exit 5), as `--secs` does on the soft NIC: it printed a row of zeros (0 ops/s, fairness
/// null) with exit status 0. With `rxe` a hundred times slower, the threads' setup alone
/// outlasts 1 µs (simulated time: the same every run).
#[test]
fn a_simulated_run_too_short_to_measure_is_not_a_row_of_zeros() {
    let out = loco(&[
        "bench",
        "locks",
        "--backend",
        "sim",
        "--profile",
        "rxe",
        "--profile-scale",
        "100",
        "--sim-us",
        "1",
        "--lock",
        "nlock",
        "--threads",
        "2",
        "--nodes",
        "2",
        "--json",
        "--no-plot",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("no critical section completed") && err.contains("--sim-us"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// `loco doctor` checks LOCO_NODE_ID against the peer list, as the verbs backend takes them:
/// an id past the list, one that is not a number, or LOCO_PEERS without LOCO_NODE_ID passed
/// every peer check ("peer list: 2 nodes, each at its own address") and the cluster then
/// refused to start.
#[test]
fn doctor_checks_the_node_id_against_the_peer_list() {
    // Ports that refuse: the peer checks fail alike with and without a good id.
    let peers = "127.0.0.1:1,127.0.0.1:2";
    let node_id = |id: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_loco"));
        cmd.args(["doctor", "--json", "--no-smoke"])
            .env("LOCO_PEERS", peers)
            .env_remove("LOCO_NODE_ID")
            .env_remove("LOCO_CLUSTER_KEY");
        if let Some(id) = id {
            cmd.env("LOCO_NODE_ID", id);
        }
        let out = cmd.output().expect("runs loco");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        let c = v["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["check"] == "node id")
            .unwrap_or_else(|| panic!("no `node id` check in {v:#}"))
            .clone();
        (c["status"].as_str().unwrap().to_string(), c)
    };
    for (id, says) in [
        (
            Some("2"),
            "n2 (LOCO_NODE_ID) but the peer list has 2 entries",
        ),
        (Some("one"), "not a node number"),
        (None, "LOCO_NODE_ID is not"),
    ] {
        let (status, c) = node_id(id);
        assert_eq!(status, "fail", "{c:#}");
        assert!(c["detail"].as_str().unwrap().contains(says), "{c:#}");
        assert!(c["fix"].as_str().unwrap().contains("LOCO_NODE_ID"), "{c:#}");
    }
    let (status, c) = node_id(Some("1"));
    assert_eq!(status, "pass", "{c:#}");
    assert!(
        c["detail"].as_str().unwrap().contains("127.0.0.1:2"),
        "{c:#}"
    );
}

/// A plot named for another format (`--plot out.png`) is refused before anything is measured:
/// the plot is SVG, and it was written as SVG into `out.png`, which image viewers then fail to
/// open. A name ending in `.svg` (any case) or with no extension is taken.
#[test]
fn bench_refuses_a_plot_named_for_another_format() {
    let dir = std::env::temp_dir().join(format!("loco-plot-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for cmd in [["bench", "locks"], ["bench", "ops"]] {
        let png = dir.join("out.png");
        let png = png.to_str().unwrap();
        let mut args = cmd.to_vec();
        args.extend(["--backend", "sim", "--plot", png]);
        let out = loco(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{cmd:?}: {err}");
        assert!(err.contains("plots are SVG"), "{cmd:?}: {err}");
        assert!(out.stdout.is_empty(), "{cmd:?}: measured first: {err}");
        assert!(!std::path::Path::new(png).exists());
    }
    // Upper-case `.SVG` is an SVG name.
    let svg = dir.join("out.SVG");
    let svg = svg.to_str().unwrap();
    let out = loco(&[
        "bench",
        "locks",
        "--backend",
        "sim",
        "--threads",
        "1",
        "--nodes",
        "2",
        "--lock",
        "nlock",
        "--sim-us",
        "50",
        "--plot",
        svg,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::path::Path::new(svg).exists());
    let _ = std::fs::remove_dir_all(&dir);
}
