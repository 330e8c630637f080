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

/// `--seed` without `--schedule chaos` is refused: the other schedules take no seed, and
/// `./run-demo.sh --seed 7` ran the same threaded demo as without it, saying nothing.
#[test]
fn quickstart_refuses_a_seed_its_schedule_does_not_take() {
    let o = example("quickstart", "", &["--seed", "7", "--faas", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("add --schedule chaos"), "{err}");
    assert!(err.contains("Usage: quickstart"), "{err}");
    assert!(o.stdout.is_empty());
    let o = example(
        "quickstart",
        "",
        &["--schedule", "chaos", "--seed", "7", "--faas", "1"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("Chaos { seed: 7 }"), "{}", stdout(&o));
}

/// `--runs` past a million is refused up front: `--runs 18446744073709551615` was taken, and
/// the fenced program's check then ran for ever, keeping a hash of every run, printing nothing.
#[test]
fn sim_bug_hunt_refuses_more_runs_than_it_can_finish() {
    let o = example("sim_bug_hunt", "", &["--runs", "1000001"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("1..=1000000"), "{err}");
    assert!(o.stdout.is_empty());
}

/// `--servers` takes host:port as its help says, the host a name too: `localhost:PORT` was
/// refused as "invalid socket address syntax" (IP addresses only). Something that is not
/// host:port says what to give.
#[cfg(feature = "tokio")]
#[test]
fn kv_service_client_takes_a_host_name() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let server = format!("localhost:{port}");
    let o = example(
        "kv_service",
        "tokio",
        &["client", "--servers", &server, "--conns", "1", "--ops", "1"],
    );
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("0 ok,"), "{out}");
    let o = example("kv_service", "tokio", &["client", "--servers", "nonsense"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("expected host:port"), "{err}");
}

/// A directory of fake commands for `scripts/ensure-rust.sh`: `cargo` (so that no toolchain is
/// fetched), `env`, and with `apt` an `apt-get` that logs its arguments to `apt.log` and, on
/// `install`, puts a `cc` beside itself, and a `sudo` that runs its command. No `cc`, no `curl`.
#[cfg(unix)]
fn fake_bin(name: &str, apt: bool) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("loco-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mut tools = vec![("cargo", "#!/bin/sh\nexit 0\n".to_string())];
    if apt {
        tools.push((
            "apt-get",
            format!(
                "#!/bin/sh\necho \"$@\" >> {log}\ncase \"$*\" in *install*) printf \
                 '#!/bin/sh\\n' > {bin}/cc; /bin/chmod +x {bin}/cc ;; esac\n",
                log = dir.join("apt.log").display(),
                bin = bin.display()
            ),
        ));
        tools.push(("sudo", "#!/bin/sh\nexec \"$@\"\n".to_string()));
    }
    for (tool, text) in tools {
        let path = bin.join(tool);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::os::unix::fs::symlink("/usr/bin/env", bin.join("env")).unwrap();
    dir
}

/// Sources `scripts/ensure-rust.sh` (as `run-demo.sh` and `run-tests.sh` do) with `dir/bin` as
/// the whole PATH, then says READY.
#[cfg(unix)]
fn ensure_rust(dir: &std::path::Path) -> Output {
    Command::new("/bin/bash")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["-c", ". scripts/ensure-rust.sh && echo READY"])
        .env("PATH", dir.join("bin"))
        .env("HOME", dir)
        .output()
        .expect("runs bash")
}

/// On a fresh Debian or Ubuntu machine, which has no C compiler, `./run-demo.sh` installs one
/// before building: rustc links with `cc`, and the demo's first build failed with "linker `cc`
/// not found" after rustup had been installed, the README's one command not enough.
#[cfg(unix)]
#[test]
fn run_demo_installs_the_c_compiler_a_fresh_machine_lacks() {
    let dir = fake_bin("ensure-rust-apt", true);
    let o = ensure_rust(&dir);
    let out = stdout(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("installing gcc libc6-dev"), "{out}{err}");
    assert!(out.ends_with("READY\n"), "{out}{err}");
    let log = std::fs::read_to_string(dir.join("apt.log")).expect("apt-get was run");
    assert!(log.contains("update"), "{log}");
    assert!(
        log.contains("install -y -q --no-install-recommends gcc libc6-dev"),
        "{log}"
    );
    // With cargo and cc there, nothing is installed.
    let again = ensure_rust(&dir);
    assert!(stdout(&again).starts_with("READY"), "{}", stdout(&again));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without apt-get, the missing C compiler is named, with what to install, before any build.
#[cfg(unix)]
#[test]
fn run_demo_without_apt_names_the_packages_to_install() {
    let dir = fake_bin("ensure-rust-noapt", false);
    let o = ensure_rust(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("apt-get install gcc libc6-dev"), "{err}");
    assert!(!stdout(&o).contains("READY"));
    let _ = std::fs::remove_dir_all(&dir);
}
