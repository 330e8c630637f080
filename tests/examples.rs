//! The examples as a new user runs them, with edge arguments: what they print must say what
//! happened. Each runs through `cargo run` (the test binary's own cargo, the same target
//! directory), so the example is built as it is run by hand.

use std::process::{Command, Output};

/// Runs `cargo run --example name` with `features` and `args`; its output, status and all.
#[allow(dead_code)] // every test using it may be behind a feature
fn example(name: &str, features: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--example", name]);
    if !features.is_empty() {
        cmd.args(["--features", features]);
    }
    cmd.arg("--").args(args);
    cmd.output()
        .unwrap_or_else(|e| panic!("cargo run --example {name}: {e}"))
}

#[allow(dead_code)]
fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A demo whose load is too small to ask for one of n2's keys after the kill cannot check
/// their refusal: it fails, and says that this is why (it printed a bare `FAILED` after two
/// load lines without an error).
#[cfg(feature = "tokio")]
#[test]
fn kv_service_demo_says_why_it_failed() {
    let o = example(
        "kv_service",
        "tokio",
        &["demo", "--conns", "1", "--ops", "1", "--keys", "1"],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("demo: FAILED: no request after the kill asked for a key of n2"),
        "{out}"
    );
}

/// A client whose server refuses every connection sent nothing: its rate is 0 requests/s,
/// not the requests it never sent over the microseconds it took to be refused.
#[cfg(feature = "tokio")]
#[test]
fn kv_service_client_counts_only_answered_requests() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let server = format!("127.0.0.1:{port}");
    let o = example(
        "kv_service",
        "tokio",
        &[
            "client",
            "--servers",
            &server,
            "--conns",
            "2",
            "--ops",
            "100000",
        ],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("0 ok,"), "{out}");
    assert!(out.contains("; 0 requests/s,"), "{out}");
}

/// On the soft NIC, where a request completes inside its post, the async benchmark's goals
/// (throughput of overlapping puts, local handover's saved round trips) cannot be met: the
/// output says so instead of printing ratios under "goal >= 3" as if the async layer failed.
#[cfg(feature = "tokio")]
#[test]
fn aio_bench_on_the_soft_nic_says_its_goals_are_for_devices() {
    let o = example(
        "aio_bench",
        "tokio",
        &["--iters", "16", "--rounds", "1", "--tasks", "2"],
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.starts_with("backend soft,"), "{out}");
    assert!(
        out.contains("the goals are for an RDMA device, across hosts"),
        "{out}"
    );
}
