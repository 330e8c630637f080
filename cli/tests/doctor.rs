//! `loco doctor` where there is no RDMA device (this test's build has no verbs backend, or the
//! machine has no device): every problem is a failed check with a fix, the exit status is 1,
//! and the checks that need no device (locked memory, peers, cluster key) still run. The checks
//! on a real device (a healthy rxe, a wrong GID index, low memlock, no link) run on Soft-RoCE in
//! `soft-roce-ci/run.sh`.

use std::net::TcpListener;
use std::process::Command;

use serde_json::Value;

fn doctor(args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loco"));
    cmd.arg("doctor").arg("--json").args(args);
    for v in [
        "LOCO_PEERS",
        "LOCO_NODE_ID",
        "LOCO_CLUSTER_KEY",
        "LOCO_GID_INDEX",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("runs loco");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn find<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no `{name}` check in {v:#}"))
}

#[test]
fn without_a_device_doctor_fails_with_advice() {
    let (code, v) = doctor(&[], &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["ok"], false);
    let failed: Vec<&Value> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .collect();
    assert!(!failed.is_empty());
    for c in failed {
        assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "{c:#}");
    }
    assert!(["pass", "warn", "fail"].contains(&find(&v, "memlock")["status"].as_str().unwrap()));
}

#[test]
fn peers_and_the_cluster_key_are_checked() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap().to_string();
    // A port nothing listens on any more.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let peers = format!("{open},{closed}");
    let (code, v) = doctor(&["--peers", &peers], &[]);
    assert_eq!(code, 1);
    assert_eq!(find(&v, &format!("peer {open}"))["status"], "pass", "{v:#}");
    let c = find(&v, &format!("peer {closed}"));
    assert_eq!(c["status"], "fail", "{v:#}");
    assert!(c["fix"].as_str().unwrap().contains("firewall"));
    // No key, every peer on this host: the cluster starts, with a warning (as the bootstrap
    // does); a peer elsewhere makes it refuse to start.
    let c = find(&v, "cluster key");
    assert_eq!(c["status"], "warn", "{v:#}");
    assert!(c["fix"].as_str().unwrap().contains("keygen"));
    // (A peer elsewhere is the unit test `no_key_fails_with_a_peer_elsewhere`: from here the
    // doctor would try to connect to it, and test traffic stays on loopback.)
    assert_eq!(find(&v, "peer list")["status"], "pass", "{v:#}");
    // One address for two nodes: refused, as the backend refuses it.
    let (code, v) = doctor(&["--peers", &format!("{open},{open}")], &[]);
    assert_eq!(code, 1);
    let c = find(&v, "peer list");
    assert_eq!(c["status"], "fail", "{v:#}");
    assert!(
        c["detail"]
            .as_str()
            .is_some_and(|d| d.contains("n0 and n1")),
        "{c:#}"
    );
    // LOCO_PEERS as the verbs backend reads it: a blank entry (which would renumber the nodes
    // after it) or a list of commas fails the peer list check, saying which entry.
    for (list, says) in [
        (
            format!("{open},,{open}"),
            "entry 1 of the peer list is empty",
        ),
        (",,".to_string(), "the peer list is empty"),
    ] {
        let (code, v) = doctor(&[], &[("LOCO_PEERS", &list)]);
        assert_eq!(code, 1, "{list}");
        let c = find(&v, "peer list");
        assert_eq!(c["status"], "fail", "{v:#}");
        assert!(
            c["detail"].as_str().is_some_and(|d| d.contains(says)),
            "{c:#}"
        );
    }
    // The key set: that check passes (LOCO_PEERS is read when --peers is not given).
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let (_, v) = doctor(&[], &[("LOCO_PEERS", &open), ("LOCO_CLUSTER_KEY", key)]);
    assert_eq!(find(&v, "cluster key")["status"], "pass", "{v:#}");
    assert_eq!(find(&v, &format!("peer {open}"))["status"], "pass");
}

#[test]
fn text_output_names_every_check_and_the_fixes() {
    let out = Command::new(env!("CARGO_BIN_EXE_loco"))
        .args(["doctor", "--no-smoke"])
        .env_remove("LOCO_PEERS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fail"), "{text}");
    assert!(text.contains("fix: "), "{text}");
    assert!(text.contains("memlock"), "{text}");
    assert!(
        text.lines().last().unwrap().starts_with("loco doctor: "),
        "{text}"
    );
}

/// Options that describe no cluster are command-line errors (exit 2), not a passing check: no
/// nodes, more than a cluster can have, an empty entry in the peer list.
#[test]
fn impossible_options_are_refused() {
    for args in [
        &["--nodes", "0"][..],
        &["--nodes", "65536"],
        &["--peers", ",,,"],
        &["--peers", "127.0.0.1:1,,127.0.0.1:2"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_loco"))
            .arg("doctor")
            .args(args)
            .output()
            .expect("runs loco");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
}

/// A peer that is not `host:port` says what is wrong with it (no port, a port out of range, no
/// host, an IPv6 address without brackets); all of it used to read "does not resolve". Nothing
/// here is resolved or contacted.
#[test]
fn a_malformed_peer_says_what_is_wrong() {
    let peers = "foo,10.0.0.1:99999,:7470,10.0.0.2:0,::1:7470,10.0.0.3:x";
    let (code, v) = doctor(&["--peers", peers, "--no-smoke"], &[]);
    assert_eq!(code, 1, "{v:#}");
    for (peer, says) in [
        ("foo", "no port"),
        (
            "10.0.0.1:99999",
            "port `99999` is not a number from 1 to 65535",
        ),
        (":7470", "the host is missing"),
        ("10.0.0.2:0", "port `0`"),
        ("::1:7470", "[::1]:7470"),
        ("10.0.0.3:x", "port `x`"),
    ] {
        let c = find(&v, &format!("peer {peer}"));
        assert_eq!(c["status"], "fail", "{c:#}");
        let detail = c["detail"].as_str().unwrap();
        assert!(
            detail.contains("not host:port") && detail.contains(says),
            "{peer}: {detail}"
        );
        assert!(
            c["fix"].as_str().is_some_and(|f| f.contains("host:port")),
            "{c:#}"
        );
    }
    // The peer list check fails too, naming each malformed entry (it used to pass with "6
    // nodes, each at its own address").
    let c = find(&v, "peer list");
    assert_eq!(c["status"], "fail", "{c:#}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("6 of 6 entries not host:port"),
        "{detail}"
    );
    for entry in [
        "n0 `foo`: no port",
        "n1 `10.0.0.1:99999`",
        "n2 `:7470`",
        "n3 `10.0.0.2:0`",
        "n4 `::1:7470`",
        "n5 `10.0.0.3:x`",
    ] {
        assert!(detail.contains(entry), "{entry}: {detail}");
    }
    assert!(
        c["fix"].as_str().is_some_and(|f| f.contains("host:port")),
        "{c:#}"
    );
    // One malformed entry among good ones: only it is named.
    let (code, v) = doctor(&["--peers", "127.0.0.1:1,127.0.0.1", "--no-smoke"], &[]);
    assert_eq!(code, 1, "{v:#}");
    let c = find(&v, "peer list");
    assert_eq!(c["status"], "fail", "{c:#}");
    let detail = c["detail"].as_str().unwrap();
    assert_eq!(
        detail, "1 of 2 entries not host:port: n1 `127.0.0.1`: no port",
        "{c:#}"
    );
}

/// `loco doctor | head -0` and `loco keygen` into a closed pipe end quietly with the status of
/// a SIGPIPE death (141), as the other subcommands do; they used to panic ("failed printing to
/// stdout") with a backtrace.
#[test]
fn a_closed_stdout_ends_doctor_and_keygen_quietly() {
    use std::process::Stdio;
    for args in [
        &["doctor", "--no-smoke"][..],
        &["doctor", "--json"],
        &["keygen"],
    ] {
        // A pipe whose reader has gone: `true` reads nothing and exits, and its end is closed.
        let mut reader = Command::new("true")
            .stdin(Stdio::piped())
            .spawn()
            .expect("runs true");
        let write_end = reader.stdin.take().expect("a pipe");
        reader.wait().expect("true exits");
        let out = Command::new(env!("CARGO_BIN_EXE_loco"))
            .args(args)
            .env_remove("LOCO_PEERS")
            .stdout(Stdio::from(write_end))
            .stderr(Stdio::piped())
            .output()
            .expect("runs loco");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(141), "{args:?}: {err}");
    }
}

/// Errors printed on a closed stderr (a pipe whose reader has gone, `loco ... 2>&1 | head -0`)
/// do not panic ("failed printing to stderr", exit 101): the message is lost and the command
/// ends with its usual status. A usage error (clap's, and one of loco's own), a file that
/// cannot be read, a bench that cannot run.
#[test]
fn a_closed_stderr_keeps_the_usual_exit_status() {
    use std::process::Stdio;
    for (args, code) in [
        (&["litmus", "frobnicate"][..], 2),
        (&["litmus", "check", "-", "-"], 2),
        (&["doctor", "--nodes", "0"], 2),
        (&["litmus", "check", "/nonexistent/loco-missing.litmus"], 3),
        (
            &[
                "bench",
                "ops",
                "--backend",
                "soft",
                "--vs-perftest",
                "--no-plot",
            ],
            5,
        ),
    ] {
        let mut reader = Command::new("true")
            .stdin(Stdio::piped())
            .spawn()
            .expect("runs true");
        let write_end = reader.stdin.take().expect("a pipe");
        reader.wait().expect("true exits");
        let out = Command::new(env!("CARGO_BIN_EXE_loco"))
            .args(args)
            .env_remove("LOCO_PEERS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(write_end))
            .output()
            .expect("runs loco");
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// The locked memory the cluster needs is the product of `--nodes` and `--memory` (plus the
/// queues) even where that passes 2^64 bytes: it printed 2^64 bytes (17592186044416.0 MiB) for
/// 2 nodes of 2^64 - 1 bytes, as for one, the product saturated.
#[test]
fn the_memory_needed_is_not_cut_at_64_bits() {
    let (_, v) = doctor(
        &[
            "--no-smoke",
            "--nodes",
            "2",
            "--memory",
            &u64::MAX.to_string(),
        ],
        &[],
    );
    let detail = find(&v, "memlock")["detail"].as_str().unwrap().to_string();
    // 2 x (2^64 - 1 + 256 KiB) bytes = 2^45 + 0.5 MiB, less 2 bytes.
    assert!(
        detail
            .contains("2 node(s) x (17592186044416.0 MiB + 256 KiB queues) = 35184372088832.5 MiB"),
        "{detail}"
    );
}
