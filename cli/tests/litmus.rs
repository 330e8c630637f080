//! The `loco litmus` command over the project's litmus tests (`tests/litmus/*.litmus` at the
//! repository root: a new file there is a new test).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn loco(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loco"))
        .args(args)
        .args(files)
        .output()
        .expect("running loco")
}

/// Every `.litmus` file of the repository's `tests/litmus/`, sorted.
fn litmus_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/litmus");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/litmus exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "litmus"))
        .collect();
    v.sort();
    assert!(
        v.len() >= 20,
        "expected the shared tests in {}",
        dir.display()
    );
    v
}

fn json(out: &Output) -> Vec<Value> {
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn temp_test(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("loco-{}-{name}.litmus", std::process::id()));
    std::fs::write(&p, text).expect("writing a temporary test");
    p
}

#[test]
fn smoke() {
    let files = litmus_files();
    let out = loco(&["litmus", "show"], &files[..1]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("allowed outcome"), "{text}");
}

#[test]
fn check_reproduces_every_verdict() {
    let files = litmus_files();
    let out = loco(&["litmus", "check", "--json"], &files);
    let rows = json(&out);
    assert_eq!(rows.len(), files.len());
    for r in &rows {
        assert_eq!(r["matches"], true, "{r:#}");
        // Every shipped test finishes in every execution: its threads release what they
        // acquire, so a stuck state is a waiter that never gets in (a ticket given up and never
        // passed on, say).
        assert_eq!(r["stuck"], 0, "a stuck execution: {r:#}");
        assert!(r["states"].as_u64().unwrap() > 0);
        assert!(r["outcomes"].as_u64().unwrap() > 0);
        eprintln!(
            "{:32} {:9} states {:>6} outcomes {} {} ms",
            r["name"].as_str().unwrap(),
            r["model"].as_str().unwrap(),
            r["states"],
            r["outcomes"],
            r["millis"]
        );
    }
    assert!(out.status.success());
    // The table says the same.
    let out = loco(&["litmus", "check"], &files);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("every verdict matches"));
}

#[test]
fn check_fails_with_a_counterexample_on_a_wrong_expectation() {
    let src = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/litmus/fig2b-two-puts-one-poll.litmus"),
    )
    .unwrap()
    .replace("expect allowed", "expect forbidden");
    let f = temp_test("wrong", &src);
    let out = loco(&["litmus", "check", "--json"], std::slice::from_ref(&f));
    assert_eq!(out.status.code(), Some(1));
    let rows = json(&out);
    assert_eq!(rows[0]["matches"], false);
    let trace = rows[0]["counterexample"]
        .as_array()
        .expect("a counterexample");
    assert!(
        trace
            .iter()
            .any(|l| l.as_str().unwrap().contains("nLR reads x@n0 = 1")),
        "{trace:#?}"
    );
    let out = loco(&["litmus", "check"], std::slice::from_ref(&f));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("MISMATCH") && text.contains("counterexample: x=1 y=1"),
        "{text}"
    );
    std::fs::remove_file(f).ok();
}

#[test]
fn check_reports_parse_errors_with_their_position() {
    let f = temp_test(
        "bad",
        "litmus bad\nloc x @n0\nthread t0 @n0 {\n  frob(x)\n}\nexists x = 0\nexpect allowed\n",
    );
    let out = loco(&["litmus", "check"], std::slice::from_ref(&f));
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:4:3: unknown operation `frob`", f.display())),
        "{err}"
    );
    std::fs::remove_file(f).ok();
}

/// A file that does not parse is a file error in the summary (not a verdict mismatch), with
/// its own exit status; with a mismatch beside it the file error's status wins (the larger).
#[test]
fn a_parse_error_is_a_file_error_in_the_summary() {
    let bad = temp_test(
        "summary-bad",
        "litmus bad\nloc x @n0\nthread t0 @n0 {\n  frob(x)\n}\n",
    );
    let good = litmus_files()[0].clone();
    let out = loco(&["litmus", "check"], &[bad.clone(), good.clone()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("1 FILE ERROR(S)"), "{text}");
    assert!(!text.contains("DO NOT MATCH"), "{text}");
    assert!(text.contains("FILE ERROR (above)"), "{text}");
    // The JSON row says what kind of error.
    let rows = json(&loco(&["litmus", "check", "--json"], &[bad.clone(), good]));
    assert_eq!(rows[0]["kind"], "file", "{rows:#?}");
    assert_eq!(rows[1]["matches"], true, "{rows:#?}");
    // A mismatch too: still 3.
    let src = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/litmus/fig2d-put-wait.litmus"),
    )
    .unwrap()
    .replace("expect forbidden", "expect allowed");
    let wrong = temp_test("summary-wrong", &src);
    let out = loco(&["litmus", "check"], std::slice::from_ref(&wrong));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 VERDICT(S) DO NOT MATCH"));
    let out = loco(&["litmus", "check"], &[wrong.clone(), bad.clone()]);
    assert_eq!(out.status.code(), Some(3));
    // `run` and `show` count the file error the same way.
    let out = loco(
        &["litmus", "run", "--runs", "2"],
        std::slice::from_ref(&bad),
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 FILE ERROR(S)"));
    let out = loco(&["litmus", "show"], std::slice::from_ref(&bad));
    assert_eq!(out.status.code(), Some(3));
    let missing = PathBuf::from("/nonexistent/loco-missing.litmus");
    let out = loco(&["litmus", "check"], &[missing]);
    assert_eq!(out.status.code(), Some(3));
    for f in [bad, wrong] {
        std::fs::remove_file(f).ok();
    }
}

/// The explorer's budget: a clear message and exit status 4, for the state and memory limits.
#[test]
fn a_budget_reached_is_a_give_up() {
    let f =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/litmus/fig8b-wlock-puts.litmus");
    let out = loco(
        &["litmus", "check", "--max-states", "100"],
        std::slice::from_ref(&f),
    );
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(4), "{text}{err}");
    assert!(
        err.contains("gave up: budget reached after 100 states"),
        "{err}"
    );
    assert!(text.contains("1 GAVE UP (budget)"), "{text}");
    let out = loco(
        &["litmus", "check", "--max-memory", "0"],
        std::slice::from_ref(&f),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("gave up: budget reached after") && err.contains("memory limit"),
        "{err}"
    );
    let out = loco(
        &["litmus", "show", "--max-states", "10"],
        std::slice::from_ref(&f),
    );
    assert_eq!(out.status.code(), Some(4));
    let out = loco(
        &["litmus", "run", "--runs", "1", "--max-states", "10"],
        std::slice::from_ref(&f),
    );
    assert_eq!(out.status.code(), Some(4));
}

/// A test whose thread ends holding a lock that another thread acquires: `run` ends at once
/// with a clear error and the run-failure status.
#[test]
fn run_of_a_lock_held_at_the_end_ends() {
    let f = temp_test(
        "held",
        "litmus held\nlock l : wlock\nloc x @n0\nthread t0 @n0 {\n  acquire(l)\n  store(x, 1)\n}\n\
         thread t1 @n1 {\n  acquire(l)\n  release(l)\n}\nexists x = 1\nexpect allowed\n",
    );
    let start = std::time::Instant::now();
    let out = loco(&["litmus", "run", "--runs", "50"], std::slice::from_ref(&f));
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("ended in {:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("t0 ends holding lock `l`"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 RUN(S) FAILED"));
    // The model still has its outcomes (schedules where t1 goes first) and its stuck ones.
    let out = loco(&["litmus", "check"], std::slice::from_ref(&f));
    assert_eq!(out.status.code(), Some(0));
    std::fs::remove_file(f).ok();
}

/// `loco litmus --help` documents the exit statuses.
#[test]
fn help_documents_the_exit_codes() {
    let out = loco(&["litmus", "--help"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for line in [
        "1  a verdict does not match",
        "3  a file error",
        "4  the explorer gave up",
        "5  a run failed",
    ] {
        assert!(text.contains(line), "{text}");
    }
    // A bad command line is clap's 2.
    assert_eq!(loco(&["litmus", "check"], &[]).status.code(), Some(2));
}

/// `loco litmus run --backend soft` (Chaos schedule), 200 seeded runs of every test: no outcome
/// the model forbids.
#[test]
fn run_on_soft_shows_no_forbidden_outcome() {
    let files = litmus_files();
    let out = loco(
        &[
            "litmus",
            "run",
            "--backend",
            "soft",
            "--runs",
            "200",
            "--seed",
            "1",
            "--json",
        ],
        &files,
    );
    let rows = json(&out);
    assert_eq!(rows.len(), files.len());
    for r in &rows {
        assert!(
            r.get("error").is_none() && r.get("skipped").is_none(),
            "{r:#}"
        );
        assert_eq!(r["forbidden_seen"], 0, "{r:#}");
        if r["expect"] == "forbidden" {
            assert_eq!(r["exists_seen"], false, "{r:#}");
        }
    }
    assert!(out.status.success());
}

/// `loco litmus run --backend soft --until-exists`: the `exists` outcome of every allowed test is
/// observed within a budget of 60000 seeded runs. The rarest, fig7a, needs the reader to run
/// between two of the writer's steps; with the default `--noise` (its start stagger) it took
/// 137 to 13130 runs over 12 seeds, and without it tens of thousands or more than the budget
/// (this test failed that way).
#[test]
fn run_on_soft_sees_every_allowed_exists_outcome() {
    let files: Vec<_> = litmus_files()
        .into_iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .contains("expect allowed")
        })
        .collect();
    let out = loco(
        &[
            "litmus",
            "run",
            "--backend",
            "soft",
            "--runs",
            "60000",
            "--seed",
            "7",
            "--until-exists",
            "--json",
        ],
        &files,
    );
    let rows = json(&out);
    assert_exists_seen(&rows);
    assert!(out.status.success());
}

/// Every row of a `--until-exists` run saw its `exists` outcome and no forbidden one; prints
/// the runs each needed.
fn assert_exists_seen(rows: &[serde_json::Value]) {
    for r in rows {
        eprintln!(
            "{:32} seen after {} runs",
            r["name"].as_str().unwrap(),
            r["runs"]
        );
        assert_eq!(r["exists_seen"], true, "{r:#}");
        assert_eq!(r["forbidden_seen"], 0, "{r:#}");
    }
}

/// `loco litmus run --schedule sim`: under the deterministic simulator the `exists` outcome of
/// every allowed test shows up within 10 000 runs (issue 11 asks for that bound; fig7a, the
/// rarest, needs a few hundred), and no forbidden one in 100 runs of each forbidden test.
#[test]
fn run_under_the_simulator_sees_every_allowed_outcome_and_no_forbidden_one() {
    let (allowed, forbidden): (Vec<_>, Vec<_>) = litmus_files().into_iter().partition(|f| {
        std::fs::read_to_string(f)
            .unwrap()
            .contains("expect allowed")
    });
    let run = |files: &[PathBuf], extra: &[&str]| {
        let mut args = vec!["litmus", "run", "--schedule", "sim", "--json"];
        args.extend_from_slice(extra);
        json(&loco(&args, files))
    };
    assert_exists_seen(&run(&allowed, &["--runs", "10000", "--until-exists"]));
    for r in run(&forbidden, &["--runs", "100"]) {
        assert_eq!(r["exists_seen"], false, "{r:#}");
        assert_eq!(r["forbidden_seen"], 0, "{r:#}");
    }
}

#[test]
fn run_on_the_threaded_soft_nic() {
    let files = litmus_files();
    let out = loco(
        &[
            "litmus",
            "run",
            "--schedule",
            "threaded",
            "--runs",
            "5",
            "--json",
        ],
        &files,
    );
    let rows = json(&out);
    assert!(rows.iter().all(|r| r["forbidden_seen"] == 0), "{rows:#?}");
    assert!(out.status.success());
}

/// The long version: 20000 seeded Chaos runs of every test (minutes; `cargo test -p loco-cli
/// --release -- --ignored`).
#[test]
#[ignore = "long: 20000 runs per test"]
fn run_on_soft_long() {
    let files = litmus_files();
    let out = loco(
        &[
            "litmus",
            "run",
            "--backend",
            "soft",
            "--runs",
            "20000",
            "--seed",
            "1000",
            "--json",
        ],
        &files,
    );
    let rows = json(&out);
    for r in &rows {
        assert_eq!(r["forbidden_seen"], 0, "{r:#}");
        assert_eq!(r["exists_seen"], r["expect"] == "allowed", "{r:#}");
    }
    assert!(out.status.success());
}

/// `loco litmus run` refuses counts that cannot work (`--runs 0` ran nothing and reported no
/// forbidden outcome; `--noise` beyond 1000 made a run unstoppable), and its errors say what
/// happened once: an error is not called a panic, and a message is not repeated by its cause.
#[test]
fn run_refuses_bad_counts_and_reports_errors_once() {
    let file = |name: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/litmus/{name}.litmus"))
    };
    for args in [
        &["litmus", "run", "--runs", "0"][..],
        &["litmus", "run", "--noise", "1001"],
        &["litmus", "run", "--noise", "4294967295"],
        &["litmus", "run", "--timeout", "0"],
        &["litmus", "run", "--timeout", "-1"],
        &["litmus", "run", "--timeout", "1e-12"],
        &["litmus", "run", "--timeout", "3601"],
        &["litmus", "run", "--timeout", "nan"],
    ] {
        let out = loco(args, &[file("fig5-sb-put-gf")]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    // A lock that cannot be taken within 1 ns (deterministic under the simulator): an error
    // of the run, reported once, and not as a panic.
    let out = loco(
        &sim_with_1ns_locks(&["--runs", "2"]),
        &[file("nlock-giveup-two")],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("not acquired within").count(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `loco litmus run --schedule sim` with `more` options and a lock timeout of 1 ns, which no
/// contended acquire meets (deterministically, under the simulator).
fn sim_with_1ns_locks<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "litmus",
        "run",
        "--schedule",
        "sim",
        "--timeout",
        "0.000000001",
    ];
    args.extend_from_slice(more);
    args
}

/// A test thread's error under `--schedule sim` names the test's thread once, as the other
/// schedules do (it said "thread t3: thread t2, line 12: ...": the simulator's number for the
/// thread, then the test's), and the trace says which simulated thread runs which test thread.
#[test]
fn a_simulated_thread_error_names_the_test_thread_once() {
    // t0 only loads, so the simulator's numbers (t1 for the test's t0) differ from the test's.
    let f = temp_test(
        "sim-error",
        "litmus sim-thread-error
lock l : nlock @n1
loc x @n0
thread t0 @n0 {
  r0 = load(x)
}
thread t1 @n1 {
  acquire(l)
  release(l)
}
thread t2 @n0 {
  acquire(l)
  release(l)
}
exists t0:r0 = 1
expect forbidden
",
    );
    // A lock that cannot be taken within 1 ns: some run's second acquire fails (seed 1 and
    // later runs, deterministically under the simulator).
    let out = loco(
        &sim_with_1ns_locks(&["--runs", "20", "--seed", "0"]),
        std::slice::from_ref(&f),
    );
    std::fs::remove_file(&f).ok();
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    let head = err
        .lines()
        .find(|l| l.contains("error:"))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    assert_eq!(head.matches("thread ").count(), 1, "{err}");
    assert!(
        head.ends_with("thread t1, line 8: lock not acquired within 1ns")
            || head.ends_with("thread t2, line 12: lock not acquired within 1ns"),
        "{err}"
    );
    assert!(
        err.contains("the simulator's t1, t2, t3 are the test's t0, t1, t2"),
        "{err}"
    );
}

/// `-` reads a test from standard input (`check`, `run`, `show`); it used to be taken for a
/// file named `-` ("cannot read -: No such file or directory"). Twice is a usage error.
#[test]
fn a_dash_reads_the_test_from_standard_input() {
    use std::io::Write as _;
    use std::process::Stdio;
    let file = litmus_files()
        .into_iter()
        .find(|f| f.ends_with("fig5-sb-put-gf.litmus"))
        .expect("the shared test fig5-sb-put-gf");
    let text = std::fs::read(&file).unwrap();
    let with_stdin = |args: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_loco"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running loco");
        // A usage error exits before reading standard input, so the write may meet a closed
        // pipe; the exit status and stderr are what the test checks.
        match child.stdin.take().unwrap().write_all(&text) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(e) => panic!("writing loco's standard input: {e}"),
        }
        child.wait_with_output().unwrap()
    };
    for args in [
        &["litmus", "check", "--json", "-"][..],
        &["litmus", "run", "--runs", "5", "--json", "-"],
    ] {
        let out = with_stdin(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = json(&out);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["name"], "fig5-sb-put-gf", "{args:?}");
    }
    let out = with_stdin(&["litmus", "show", "--json", "-"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "fig5-sb-put-gf");
    // Nothing on standard input: a parse error of `<stdin>`, a file error.
    let out = loco(&["litmus", "check", "-"], &[]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("<stdin>"), "{err}");
    let out = with_stdin(&["litmus", "check", "-", "-"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standard input"), "{err}");
}

/// `--schedule` is the soft NIC's: given with `--backend verbs` it is a usage error, as the
/// bench's options for another backend are, not silently dropped.
#[test]
fn run_refuses_a_schedule_for_the_verbs_backend() {
    let file = &litmus_files()[0];
    let out = loco(
        &["litmus", "run", "--backend", "verbs", "--schedule", "sim"],
        std::slice::from_ref(file),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--schedule applies only to --backend soft") && err.contains("litmus run"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// A FIFO (named pipe) given as a test file is refused as not a regular file, with a file
/// error (status 3): it used to block for ever, opening a pipe that no one writes. (The guard
/// below only keeps a regression from hanging the test suite: it asserts no timing.)
#[test]
fn a_fifo_is_refused_not_waited_for() {
    let dir = std::env::temp_dir().join(format!("loco-fifo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("pipe.litmus");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    for sub in [&["check"][..], &["show"], &["run", "--runs", "1"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_loco"))
            .arg("litmus")
            .args(sub)
            .arg(&fifo)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running loco");
        let mut waited = 0;
        while child.try_wait().expect("try_wait").is_none() && waited < 600 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            waited += 1;
        }
        if child.try_wait().expect("try_wait").is_none() {
            // Unblock it (a writer that closes at once) and end it.
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
            let _ = child.kill();
            let _ = child.wait();
            std::fs::remove_dir_all(&dir).ok();
            panic!("loco litmus {sub:?} blocked on a FIFO");
        }
        let out = child.wait_with_output().expect("output");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{sub:?}: {err}");
        assert!(err.contains("not a regular file"), "{sub:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A directory is refused as not a regular file too (it used to say only "Is a directory"
/// after opening it), with a file error.
#[test]
fn a_directory_is_refused_as_not_a_regular_file() {
    let dir = std::env::temp_dir();
    let out = loco(&["litmus", "check"], &[dir]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
}

/// The exit statuses are documented under each `loco litmus` subcommand's help too, and an
/// invalid test is the same file error (3) as a file that does not parse.
#[test]
fn every_litmus_subcommand_documents_the_exit_codes() {
    for sub in ["check", "run", "show"] {
        let out = loco(&["litmus", sub, "--help"], &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success());
        assert!(text.contains("Exit status:"), "{sub}: {text}");
        assert!(
            text.contains("3  a file error") && text.contains("not a valid test"),
            "{sub}: {text}"
        );
    }
}
