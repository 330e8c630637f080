//! Clusters spanning processes on the verbs backend: each node is a child process (this test
//! binary run again, executing the ignored `child` test with a role in `LOCO_TEST_CHILD`), joined
//! by the TCP rendezvous on localhost and talking RDMA over the one device.
//!
//! - three processes doing remote FAAs and puts on each other get the exact totals;
//! - a process killed mid-run makes the others fail with `PeerDead` within a bounded time;
//! - two processes claiming the same node id are refused.
#![cfg(feature = "verbs")]

mod backend;

use std::io::{BufRead, BufReader};
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

/// Free localhost ports for `n` rendezvous listeners.
fn peers(n: usize) -> String {
    let listeners: Vec<_> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn spawn(role: &str, node: usize, peers: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
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
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
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

#[test]
fn three_processes_faa_and_put_exact_totals() {
    let peers = peers(3);
    let mut children: Vec<Child> = (0..3).map(|i| spawn("counter", i, &peers)).collect();
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
    let mut ready = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while ready < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, l)) => {
                ready += usize::from(l.ends_with("ready"));
                log.push(format!("n{i}: {l}"));
            }
            Err(_) => panic!("children never got ready:\n{}", log.join("\n")),
        }
    }
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

#[test]
fn a_duplicate_node_id_is_refused() {
    let peers = peers(2);
    // Two processes both claiming n1; n0 waits for a rendezvous that cannot complete cleanly.
    let mut children = vec![
        spawn("join-only", 0, &peers),
        spawn("join-only", 1, &peers),
        spawn("join-only", 1, &peers),
    ];
    let rx = watch(&mut children);
    let codes: Vec<_> = children
        .iter_mut()
        .map(|c| wait_exit(c, Duration::from_secs(60)))
        .collect();
    let log: Vec<String> = rx.try_iter().map(|(i, l)| format!("c{i}: {l}")).collect();
    let log = log.join("\n");
    assert!(
        codes.iter().any(|c| *c != Some(0)),
        "one of the two n1s must fail: {codes:?}\n{log}"
    );
    assert!(
        log.contains("already joined") || log.contains("cannot listen"),
        "{log}"
    );
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
    let config = backend::verbs_config();
    let n = std::env::var("LOCO_PEERS").unwrap().split(',').count();
    let cluster = Cluster::builder()
        .nodes(n)
        .memory_per_node(64 * 1024)
        .timeout(Duration::from_secs(20))
        .verbs(config)
        .build()?;
    let process = Process::of(&cluster)?;
    let me = process.node().expect("a multi-process cluster");
    let l = layout(&cluster);
    process.barrier()?;
    if role == "join-only" {
        println!("joined as {me}");
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
