//! Clusters spanning processes on the verbs backend: each node is a child process (this test
//! binary run again, executing the ignored `child` test with a role in `LOCO_TEST_CHILD`), joined
//! by the TCP rendezvous on localhost and talking RDMA over the one device. With
//! `LOCO_BOOTSTRAP=rdma_cm`, `LOCO_TEST_PEER_HOST` (the device's interface address) and
//! `LOCO_CLUSTER_KEY` set, the same tests run with rdma_cm connecting the queue pairs
//! (`soft-roce-ci/run.sh` runs them both ways).
//!
//! - three processes doing remote FAAs and puts on each other get the exact totals;
//! - a process killed mid-run makes the others fail with `PeerDead` within a bounded time;
//! - two processes claiming the same node id are refused;
//! - processes with different cluster keys refuse each other;
//! - a process that stops (SIGSTOP: no FIN, no RDMA error, the kernel still answers its queue
//!   pairs) is found dead by the heartbeats within the peer timeout;
//! - a build that fails gives back its port and threads.
#![cfg(feature = "verbs")]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use loco_rdmawait::backend::verbs::Process;
use loco_rdmawait::{Cluster, Error, Loc, NodeId, WorkId};
use loco_rdmawaitrmw::Rmw;

const ROLE: &str = "LOCO_TEST_CHILD";
const OPS: u64 = 200;
const D: WorkId = WorkId::new(1);

/// Free ports for `n` rendezvous listeners, on localhost or on `LOCO_TEST_PEER_HOST` (the
/// address of an RDMA device's interface, for `LOCO_BOOTSTRAP=rdma_cm`, which cannot use
/// loopback; the suite then needs `LOCO_CLUSTER_KEY` too, which the children inherit).
fn peers(n: usize) -> String {
    let host = std::env::var("LOCO_TEST_PEER_HOST").unwrap_or_else(|_| "127.0.0.1".to_string());
    let listeners: Vec<_> = (0..n)
        .map(|_| TcpListener::bind((host.as_str(), 0)).unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn spawn(role: &str, node: usize, peers: &str) -> Child {
    spawn_with(role, node, peers, &[])
}

fn spawn_with(role: &str, node: usize, peers: &str, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env("LOCO_NODE_ID", node.to_string())
    .env("LOCO_PEERS", peers)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Collects each child's output lines (stdout and stderr) on a channel: (child, line).
fn watch(children: &mut [Child]) -> mpsc::Receiver<(usize, String)> {
    let (tx, rx) = mpsc::channel();
    for (i, c) in children.iter_mut().enumerate() {
        let out = c.stdout.take().unwrap();
        let err = c.stderr.take().unwrap();
        for pipe in [
            Box::new(out) as Box<dyn std::io::Read + Send>,
            Box::new(err),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send((i, line));
                }
            });
        }
    }
    rx
}

/// Collects the children's lines into `log` (as `{who}{i}: line`) until `n` of them satisfy
/// `done`; panics with the log, saying `what` never happened, after 60 s.
fn await_lines(
    rx: &mpsc::Receiver<(usize, String)>,
    log: &mut Vec<String>,
    who: &str,
    n: usize,
    done: impl Fn(&str) -> bool,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    while seen < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, l)) => {
                seen += usize::from(done(&l));
                log.push(format!("{who}{i}: {l}"));
            }
            Err(_) => panic!("{what}:\n{}", log.join("\n")),
        }
    }
}

/// Waits for a child's exit status, killing it after `limit`.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s.code().unwrap_or(-1));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A cluster key for the children (hex, as `loco keygen` prints it).
const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

#[test]
fn three_processes_faa_and_put_exact_totals() {
    let peers = peers(3);
    let env = [("LOCO_CLUSTER_KEY", KEY)];
    let mut children: Vec<Child> = (0..3)
        .map(|i| spawn_with("counter", i, &peers, &env))
        .collect();
    let rx = watch(&mut children);
    let codes: Vec<_> = children
        .iter_mut()
        .map(|c| wait_exit(c, Duration::from_secs(120)))
        .collect();
    let log: Vec<String> = rx.try_iter().map(|(i, l)| format!("n{i}: {l}")).collect();
    assert_eq!(
        codes,
        vec![Some(0); 3],
        "children failed:\n{}",
        log.join("\n")
    );
    for i in 0..3 {
        assert!(
            log.iter()
                .any(|l| l.starts_with(&format!("n{i}:")) && l.contains("totals ok")),
            "{}",
            log.join("\n")
        );
    }
}

#[test]
fn a_killed_peer_fails_the_others_within_bounded_time() {
    let peers = peers(3);
    let mut children: Vec<Child> = (0..3).map(|i| spawn("long", i, &peers)).collect();
    let rx = watch(&mut children);
    let mut log = Vec::new();
    let ready = |l: &str| l.ends_with("ready");
    await_lines(&rx, &mut log, "n", 3, ready, "children never got ready");
    std::thread::sleep(Duration::from_millis(300)); // let them work
    children[2].kill().unwrap();
    let killed = Instant::now();
    let _ = children[2].wait();
    let codes: Vec<_> = children[..2]
        .iter_mut()
        .map(|c| wait_exit(c, Duration::from_secs(30)))
        .collect();
    let took = killed.elapsed();
    log.extend(rx.try_iter().map(|(i, l)| format!("n{i}: {l}")));
    let log = log.join("\n");
    assert_eq!(
        codes,
        vec![Some(3); 2],
        "survivors must fail with PeerDead:\n{log}"
    );
    for i in 0..2 {
        assert!(
            log.lines().any(|l| l.starts_with(&format!("n{i}:"))
                && l.contains("peer error: PeerDead { node: NodeId(2)")),
            "{log}"
        );
    }
    assert!(took < Duration::from_secs(10), "took {took:?}:\n{log}");
}

/// A second process claiming an id that already joined is refused by the rendezvous (here it
/// listens on a port of its own, so only the hello can catch it), and one that cannot take the
/// node's port fails at once; the rightful members are not disturbed.
#[test]
fn a_duplicate_node_id_is_refused() {
    let peers = peers(2);
    let hold = std::env::temp_dir().join(format!("loco-hold-{}", std::process::id()));
    let _ = std::fs::remove_file(&hold);
    let env = [("LOCO_TEST_HOLD_FILE", hold.to_str().unwrap())];
    let mut members = vec![
        spawn_with("hold", 0, &peers, &env),
        spawn_with("hold", 1, &peers, &env),
    ];
    let rx = watch(&mut members);
    let mut log = Vec::new();
    let joined = |l: &str| l.contains("joined as");
    await_lines(
        &rx,
        &mut log,
        "member",
        2,
        joined,
        "the members never joined",
    );
    // Same id, its own listening port: n0 refuses its hello.
    let other = peers.split(',').next().unwrap().to_string() + "," + &self::peers(1);
    let mut dup = spawn("join-only", 1, &other);
    // Same id and port as the member: it cannot even listen.
    let mut clash = spawn("join-only", 1, &peers);
    let mut intruders = [&mut dup, &mut clash]
        .map(|c| {
            let out = c.stdout.take().unwrap();
            let err = c.stderr.take().unwrap();
            std::thread::spawn(move || {
                let mut s = String::new();
                for mut pipe in [
                    Box::new(out) as Box<dyn std::io::Read + Send>,
                    Box::new(err),
                ] {
                    let _ = pipe.read_to_string(&mut s);
                }
                s
            })
        })
        .into_iter();
    let dup_code = wait_exit(&mut dup, Duration::from_secs(60));
    let clash_code = wait_exit(&mut clash, Duration::from_secs(60));
    let dup_log = intruders.next().unwrap().join().unwrap();
    let clash_log = intruders.next().unwrap().join().unwrap();
    assert_eq!(dup_code, Some(1), "{dup_log}");
    assert!(dup_log.contains("already joined"), "{dup_log}");
    assert_eq!(clash_code, Some(1), "{clash_log}");
    assert!(clash_log.contains("cannot listen"), "{clash_log}");
    std::fs::write(&hold, b"done").unwrap();
    let codes: Vec<_> = members
        .iter_mut()
        .map(|c| wait_exit(c, Duration::from_secs(60)))
        .collect();
    log.extend(rx.try_iter().map(|(i, l)| format!("member{i}: {l}")));
    let _ = std::fs::remove_file(&hold);
    assert_eq!(codes, vec![Some(0); 2], "{}", log.join("\n"));
}

/// Two processes with different keys: each refuses the other, neither joins.
#[test]
fn processes_with_different_keys_refuse_each_other() {
    let peers = peers(2);
    let other = KEY.replace('0', "f");
    let mut children = vec![
        spawn_with("join-only", 0, &peers, &[("LOCO_CLUSTER_KEY", KEY)]),
        spawn_with("join-only", 1, &peers, &[("LOCO_CLUSTER_KEY", &other)]),
    ];
    let rx = watch(&mut children);
    let codes: Vec<_> = children
        .iter_mut()
        .map(|c| wait_exit(c, Duration::from_secs(60)))
        .collect();
    let log: Vec<String> = rx.try_iter().map(|(i, l)| format!("n{i}: {l}")).collect();
    let log = log.join("\n");
    assert_eq!(codes, vec![Some(1); 2], "{log}");
    assert!(!log.contains("joined as"), "{log}");
    assert!(log.contains("authentication"), "{log}");
}

/// A process that stops answering without closing anything (SIGSTOP): its queue pairs still
/// work (the kernel serves them), so only the heartbeats can tell. The others fail with
/// `PeerDead` naming it within the peer timeout (1 s here; bound checked generously, measured
/// time printed).
#[test]
fn a_silent_peer_is_found_dead_by_heartbeats() {
    let peers = peers(3);
    let env = [("LOCO_PEER_TIMEOUT_MS", "1000"), ("LOCO_CLUSTER_KEY", KEY)];
    let mut children: Vec<Child> = (0..3)
        .map(|i| spawn_with("long", i, &peers, &env))
        .collect();
    let rx = watch(&mut children);
    let mut log = Vec::new();
    let ready = |l: &str| l.ends_with("ready");
    await_lines(&rx, &mut log, "n", 3, ready, "children never got ready");
    std::thread::sleep(Duration::from_millis(300));
    let pid = children[2].id().to_string();
    let stopped = Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    assert!(stopped.success());
    let t = Instant::now();
    let codes: Vec<_> = children[..2]
        .iter_mut()
        .map(|c| wait_exit(c, Duration::from_secs(60)))
        .collect();
    let took = t.elapsed();
    let _ = children[2].kill();
    let _ = children[2].wait();
    log.extend(rx.try_iter().map(|(i, l)| format!("n{i}: {l}")));
    let log = log.join("\n");
    eprintln!("silent peer detected by the survivors {took:.2?} after SIGSTOP (peer timeout 1 s)");
    assert_eq!(
        codes,
        vec![Some(3); 2],
        "survivors must fail with PeerDead:\n{log}"
    );
    for i in 0..2 {
        assert!(
            log.lines().any(|l| l.starts_with(&format!("n{i}:"))
                && l.contains("PeerDead { node: NodeId(2)")
                && l.contains("heartbeat")),
            "{log}"
        );
    }
}

/// Names of this process's threads that belong to a rendezvous.
fn rendezvous_threads() -> Vec<String> {
    let mut names = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(n) = std::fs::read_to_string(t.path().join("comm")) {
            if n.starts_with("loco-rendezvous")
                || n.starts_with("loco-heartbeat")
                || n.starts_with("loco-cm")
            {
                names.push(n.trim().to_string());
            }
        }
    }
    names
}

/// A build whose peer never answers fails, and gives back its port and threads: the same
/// build can listen again at once.
#[test]
fn a_failed_build_releases_its_port_and_threads() {
    let peers: Vec<String> = self::peers(2).split(',').map(String::from).collect();
    for attempt in 0..2 {
        let t = Instant::now();
        let r = Cluster::builder()
            .nodes(2)
            .memory_per_node(64 * 1024)
            .timeout(Duration::from_secs(1))
            .verbs(
                common::verbs_config()
                    .cluster_key([7u8; 32])
                    .distributed(NodeId(0), peers.clone()),
            )
            .build();
        let Err(e) = r else {
            panic!("a peer that never answers must fail the build")
        };
        assert!(
            e.to_string().contains("did not answer"),
            "attempt {attempt}: {e}"
        );
        eprintln!("attempt {attempt}: failed in {:.2?}: {e}", t.elapsed());
        // The build joined its threads, but a joined thread can still be listed for a moment
        // (the kernel wakes the joiner before it drops the task): look again for a while.
        let gone = Instant::now() + Duration::from_secs(5);
        let mut left = rendezvous_threads();
        while !left.is_empty() && Instant::now() < gone {
            std::thread::sleep(Duration::from_millis(10));
            left = rendezvous_threads();
        }
        assert!(left.is_empty(), "threads left behind: {left:?}");
        drop(TcpListener::bind(&peers[0]).expect("the port was given back"));
    }
}

// ----- the child side -----

/// Not a test of its own: the body of the child processes the tests above start.
#[test]
#[ignore = "run in child processes by the multi-process tests"]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let code = match run_child(&role) {
        Ok(()) => 0,
        Err(e @ Error::PeerDead { .. }) => {
            println!("peer error: {e:?}");
            3
        }
        Err(e) => {
            println!("error: {e:?}");
            1
        }
    };
    std::process::exit(code);
}

struct Layout {
    counters: Vec<Loc>,
    slots: Vec<Loc>,
    scratch: Vec<Loc>,
}

fn layout(c: &Cluster) -> Layout {
    let n = c.nodes() as u64;
    let ids: Vec<NodeId> = c.node_ids().collect();
    Layout {
        counters: ids.iter().map(|&i| c.alloc_word(i).unwrap()).collect(),
        slots: ids.iter().map(|&i| c.alloc_words(i, n).unwrap()).collect(),
        scratch: ids
            .iter()
            .map(|&i| c.alloc_words(i, 2 * n).unwrap())
            .collect(),
    }
}

fn stamp(from: NodeId, to: NodeId) -> u64 {
    1000 * (from.0 as u64 + 1) + to.0 as u64
}

fn run_child(role: &str) -> loco_rdmawait::Result<()> {
    let config = common::verbs_config();
    let n = std::env::var("LOCO_PEERS").unwrap().split(',').count();
    let cluster = Cluster::builder()
        .nodes(n)
        .memory_per_node(64 * 1024)
        .timeout(Duration::from_secs(20))
        .verbs(config)
        .build()?;
    // Every process reads the same fence word on every node, the top one, whatever it took
    // privately first: none is another process's private word (a fence's CAS may write it).
    for q in cluster.node_ids() {
        let private = cluster.alloc_private(q, 8)?;
        let f = cluster.fence_word(q)?;
        assert_eq!(f.offset(), 64 * 1024 - 8, "{q}'s fence word");
        assert_ne!(private.offset(), f.offset(), "{q}'s fence word is private");
        cluster.free_private(private)?;
    }
    let process = Process::of(&cluster)?;
    let me = process.node().expect("a multi-process cluster");
    let l = layout(&cluster);
    process.barrier()?;
    if role == "join-only" || role == "hold" {
        println!("joined as {me}");
        if role == "hold" {
            // Stay a member while the intruders try to join: until the test says so.
            let file = std::env::var("LOCO_TEST_HOLD_FILE").unwrap();
            let start = Instant::now();
            while !std::path::Path::new(&file).exists()
                && start.elapsed() < Duration::from_secs(120)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        return Ok(());
    }
    let ctx = cluster.context(me)?;
    let others: Vec<NodeId> = cluster.node_ids().filter(|&q| q != me).collect();
    let rounds = if role == "long" { u64::MAX } else { OPS };
    let started = Instant::now();
    for k in 0..rounds {
        for &q in &others {
            let ret = l.scratch[me.index()].word(q.0 as u64)?;
            ctx.rfaa(&l.counters[q.index()], 1, &ret, D)?;
        }
        if k % 16 == 15 {
            ctx.wait(D)?;
        }
        if role == "long" {
            if k == 0 {
                println!("ready");
            }
            if started.elapsed() > Duration::from_secs(60) {
                println!("nobody died");
                return Ok(());
            }
        }
    }
    for &q in &others {
        let src = l.scratch[me.index()].word(n as u64 + q.0 as u64)?;
        ctx.store(&src, stamp(me, q))?;
        ctx.put(&l.slots[q.index()].word(me.0 as u64)?, &src, D)?;
    }
    ctx.wait(D)?;
    // Global fence: a get after an rfence completes only once the earlier writes have landed.
    for &q in &others {
        ctx.rfence(q)?;
        let tmp = l.scratch[me.index()].word(q.0 as u64)?;
        ctx.get(&tmp, &l.counters[q.index()], D)?;
    }
    ctx.wait(D)?;
    process.barrier()?;
    let total = cluster.peek(&l.counters[me.index()])?;
    assert_eq!(total, OPS * others.len() as u64, "counter of {me}");
    for &q in &others {
        let got = cluster.peek(&l.slots[me.index()].word(q.0 as u64)?)?;
        assert_eq!(got, stamp(q, me), "slot of {q} on {me}");
    }
    println!("totals ok: {me} counter {total}");
    process.barrier()?;
    Ok(())
}
