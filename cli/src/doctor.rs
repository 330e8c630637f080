//! `loco doctor`: why nothing connects. Each check prints pass, warn or fail, what it found and,
//! where something is wrong, the command that fixes it; the exit status is 1 if any check
//! fails. What an RDMA newcomer otherwise learns from `ibv_devinfo -v`, `rdma link`, `ulimit -l`
//! and a first failed run: libibverbs and a provider, devices and ports, the GID table, remote
//! atomics, locked-memory limits, Soft-RoCE, the peers' rendezvous ports, LOCO_NODE_ID against
//! the peer list and the cluster key, and a loop-back smoke test (one put, get, rfaa and rcas
//! on the device).

use std::fmt;
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use loco_rdmawait::peer_list::{self, PeerListError};
use serde_json::{json, Value};

/// `loco doctor` options.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Peers whose rendezvous ports to try, `host:port` comma-separated (default: LOCO_PEERS).
    #[arg(long, value_delimiter = ',', value_parser = peer)]
    peers: Vec<String>,
    /// Nodes this process hosts, for the locked-memory check (1-65535; default: 1 with peers,
    /// else 2).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65535))]
    nodes: Option<u64>,
    /// Registered memory per node in bytes, for the locked-memory check (default: 1 MiB, the
    /// cluster builder's default).
    #[arg(long, value_parser = crate::bench::whole)]
    memory: Option<u64>,
    /// Skip the loop-back smoke test on the device.
    #[arg(long)]
    no_smoke: bool,
    /// One JSON object: the checks and the devices found.
    #[arg(long)]
    json: bool,
}

/// A peer of `--peers` (command-line parser): not empty (`--peers a:1,,b:2` has a hole).
fn peer(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("an empty peer: expected host:port entries separated by commas".into());
    }
    Ok(s.to_string())
}

/// A check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Fine.
    Pass,
    /// Works, but not as well as it could, or not safely.
    Warn,
    /// Nothing will connect (or a cluster cannot be built) until it is fixed.
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        })
    }
}

/// One check's outcome.
#[derive(Debug)]
pub struct Check {
    name: String,
    status: Status,
    detail: String,
    fix: Option<String>,
}

fn check(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Per-node allowance for queue and completion buffers in the locked-memory estimate.
const QUEUE_OVERHEAD: u64 = 256 << 10;
/// How long the peer check waits for each TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub fn main(args: &DoctorArgs) -> ExitCode {
    let mut checks = Vec::new();
    let (peers, list_error) = peers(args);
    let devices = verbs::checks(args, &mut checks);
    checks.push(memlock(args, !peers.is_empty()));
    if !peers.is_empty() || list_error.is_some() {
        checks.push(peer_list_check(&peers, list_error));
    }
    if let Some(c) = node_id_check(&peers, args.peers.is_empty()) {
        checks.push(c);
    }
    if !peers.is_empty() {
        checks.extend(peer_checks(&peers));
        checks.push(verbs::key_check(&peers));
    }
    if let Some(c) = verbs::bootstrap_check(&peers) {
        checks.push(c);
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
    if args.json {
        let rows: Vec<Value> = checks
            .iter()
            .map(|c| {
                json!({"check": c.name, "status": c.status.to_string(), "detail": c.detail,
                       "fix": c.fix})
            })
            .collect();
        let out = json!({"ok": failed == 0, "checks": rows, "devices": devices});
        crate::ops::out(&serde_json::to_string_pretty(&out).expect("json"));
    } else {
        let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &checks {
            crate::ops::out(&format!(
                "{:<4}  {:<width$}  {}",
                c.status, c.name, c.detail
            ));
            if let Some(fix) = &c.fix {
                crate::ops::out(&format!("{:<4}  {:<width$}  fix: {fix}", "", ""));
            }
        }
        crate::ops::out(&format!(
            "loco doctor: {} checks, {failed} failed, {warned} warning(s)",
            checks.len()
        ));
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--peers`, else LOCO_PEERS, and what is wrong with the list if anything is
/// ([`loco_rdmawait::peer_list`], as the verbs backend reads it). A list that does not pass
/// still gives its non-blank entries, so that the other checks try them.
fn peers(args: &DoctorArgs) -> (Vec<String>, Option<PeerListError>) {
    if !args.peers.is_empty() {
        return (args.peers.clone(), peer_list::check(&args.peers).err());
    }
    match std::env::var("LOCO_PEERS") {
        Err(_) => (Vec::new(), None),
        Ok(v) => match peer_list::parse(&v) {
            Ok(peers) => (peers, None),
            Err(e) => {
                let mut peers = peer_list::entries(&v);
                peers.retain(|p| !p.is_empty());
                (peers, Some(e))
            }
        },
    }
}

/// The peer list names every node once, in node order, without blanks (the verbs backend
/// refuses any other list), each entry as `host:port` (a malformed entry fails here, naming
/// it, as well as in its own peer check).
fn peer_list_check(peers: &[String], error: Option<PeerListError>) -> Check {
    let name = "peer list";
    match error {
        Some(e) => check(name, Status::Fail, e.to_string()).fix(
            "give LOCO_PEERS (or --peers) one host:port per node, in node order, separated by \
             commas, each node at its own address",
        ),
        None => {
            let bad: Vec<String> = peers
                .iter()
                .enumerate()
                .filter_map(|(i, p)| malformed(p).map(|why| format!("n{i} `{p}`: {why}")))
                .collect();
            if bad.is_empty() {
                check(
                    name,
                    Status::Pass,
                    format!("{} nodes, each at its own address", peers.len()),
                )
            } else {
                check(
                    name,
                    Status::Fail,
                    format!(
                        "{} of {} entries not host:port: {}",
                        bad.len(),
                        peers.len(),
                        bad.join("; ")
                    ),
                )
                .fix(PEER_FORM_FIX)
            }
        }
    }
}

/// LOCO_NODE_ID against the peer list, as the verbs backend takes them: a number below the
/// list's length, set together with LOCO_PEERS. The cluster refuses to start otherwise, and
/// nothing else here looks at the id. `peers_from_env`: the list is LOCO_PEERS' (not
/// `--peers`, which probes peers from a machine that need not be one of them).
fn node_id_check(peers: &[String], peers_from_env: bool) -> Option<Check> {
    let name = "node id";
    let fix = |n: usize| match n {
        0 => "export LOCO_NODE_ID=<this process's node> and LOCO_PEERS=<host:port of every \
              node, in node order>, or unset both"
            .to_string(),
        n => format!(
            "export LOCO_NODE_ID=<this process's node, 0 to {}>: its position in LOCO_PEERS",
            n - 1
        ),
    };
    let with_env_peers = peers_from_env && std::env::var_os("LOCO_PEERS").is_some();
    let Some(id) = std::env::var_os("LOCO_NODE_ID") else {
        return with_env_peers.then(|| {
            check(
                name,
                Status::Fail,
                "LOCO_PEERS is set but LOCO_NODE_ID is not: they go together",
            )
            .fix(fix(peers.len()))
        });
    };
    let id = id.to_string_lossy();
    if peers.is_empty() {
        let detail = format!("LOCO_NODE_ID={id} is set but LOCO_PEERS is not: they go together");
        return Some(check(name, Status::Fail, detail).fix(fix(0)));
    }
    Some(match id.trim().parse::<u16>() {
        Err(_) => check(
            name,
            Status::Fail,
            format!("LOCO_NODE_ID=`{id}` is not a node number"),
        )
        .fix(fix(peers.len())),
        Ok(i) if usize::from(i) >= peers.len() => check(
            name,
            Status::Fail,
            format!(
                "this process is n{i} (LOCO_NODE_ID) but the peer list has {} entries",
                peers.len()
            ),
        )
        .fix(fix(peers.len())),
        Ok(i) => check(
            name,
            Status::Pass,
            format!(
                "this process is n{i} of {}, at {}",
                peers.len(),
                peers[usize::from(i)]
            ),
        ),
    })
}

/// The locked-memory limit against what the configured cluster registers.
fn memlock(args: &DoctorArgs, distributed: bool) -> Check {
    let nodes = args.nodes.unwrap_or(if distributed { 1 } else { 2 });
    let memory = args.memory.unwrap_or(loco_rdmawait::DEFAULT_MEMORY);
    // In 128 bits: `--nodes 65535 --memory 18446744073709551615` saturated at 2^64 bytes and
    // printed that as the product.
    let need = (u128::from(nodes) * (u128::from(memory) + u128::from(QUEUE_OVERHEAD))).max(1);
    let fix = "`ulimit -l unlimited` in the shell that starts the program (as root), or a \
        `<user> - memlock unlimited` line in /etc/security/limits.conf and a new login; in a \
        container: `docker run --ulimit memlock=-1` (or `--cap-add IPC_LOCK`)";
    let name = "memlock";
    let want = format!(
        "{nodes} node(s) x ({} + {} KiB queues) = {}",
        bytes(memory.into()),
        QUEUE_OVERHEAD >> 10,
        bytes(need)
    );
    if has_cap_ipc_lock() {
        return check(
            name,
            Status::Pass,
            format!("CAP_IPC_LOCK: no limit on registered memory (needs {want})"),
        );
    }
    match locked_memory_limit() {
        None => check(
            name,
            Status::Warn,
            format!("cannot read the limit from /proc/self/limits (needs {want})"),
        ),
        Some(None) => check(name, Status::Pass, format!("unlimited (needs {want})")),
        Some(Some(limit)) if u128::from(limit) >= need => check(
            name,
            Status::Pass,
            format!("{} (needs {want})", bytes(limit.into())),
        ),
        Some(Some(limit)) => check(
            name,
            Status::Fail,
            format!(
                "`ulimit -l` is {}, below the {want} the cluster registers: registration fails \
                 with ENOMEM",
                bytes(limit.into())
            ),
        )
        .fix(fix),
    }
}

fn bytes(b: u128) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// `Some(None)`: unlimited; `None`: unreadable.
fn locked_memory_limit() -> Option<Option<u64>> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(None)
    } else {
        soft.parse().ok().map(Some)
    }
}

/// CAP_IPC_LOCK (bit 14) in the effective set: registration ignores `ulimit -l`.
fn has_cap_ipc_lock() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0)
}

/// A TCP connection to each peer's rendezvous port, closed at once (the rendezvous drops a
/// connection that never says Hello). The peers are tried at once, each on its own thread, and
/// a peer whose name resolution or connection has not answered by [`PEERS_DEADLINE`] fails as
/// such: an unreachable host costs the connection timeout once, not once per peer.
fn peer_checks(peers: &[String]) -> Vec<Check> {
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, p) in peers.iter().enumerate() {
        let (tx, p) = (tx.clone(), p.clone());
        // Not joined: a thread stuck in the resolver is left behind when the doctor exits.
        std::thread::spawn(move || {
            let _ = tx.send((i, peer_check(&p)));
        });
    }
    drop(tx);
    let deadline = std::time::Instant::now() + PEERS_DEADLINE;
    let mut out: Vec<Option<Check>> = peers.iter().map(|_| None).collect();
    while out.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, c)) => out[i] = Some(c),
            Err(_) => break,
        }
    }
    out.into_iter()
        .zip(peers)
        .map(|(c, p)| {
            c.unwrap_or_else(|| {
                check(
                    format!("peer {p}"),
                    Status::Fail,
                    format!(
                        "no answer within {} s (its name does not resolve in time, or the \
                         connection hangs)",
                        PEERS_DEADLINE.as_secs()
                    ),
                )
                .fix("check the name (DNS or /etc/hosts) and that the host is up and reachable")
            })
        })
        .collect()
}

/// How long the peer checks take at most, all peers together.
const PEERS_DEADLINE: Duration = Duration::from_secs(5);

/// One peer: its address, then a TCP connection to it.
fn peer_check(p: &str) -> Check {
    let name = format!("peer {p}");
    let addr = match resolve(p) {
        Ok(a) => a,
        Err((detail, fix)) => return check(name, Status::Fail, detail).fix(fix),
    };
    match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(_) => check(name, Status::Pass, format!("{addr} accepts connections")),
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::TimedOut {
                format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())
            } else {
                e.to_string()
            };
            check(name, Status::Fail, format!("{addr}: {why}")).fix(format!(
                "start that node's process (it listens on its own address from LOCO_PEERS), \
                 or open TCP port {} in its firewall",
                addr.port()
            ))
        }
    }
}

/// How to write a peer (the fix for an entry that is not `host:port`).
const PEER_FORM_FIX: &str = "list peers as `host:port`, e.g. 10.0.0.2:7470 or [fe80::1]:7470 \
    (LOCO_PEERS or --peers)";

/// What is wrong with the form of a peer entry, if anything: no port, a port that is not
/// 1-65535, no host, an IPv6 address without (or with unbalanced) brackets. Nothing is
/// resolved.
fn malformed(p: &str) -> Option<String> {
    let Some((host, port)) = p.rsplit_once(':') else {
        return Some("no port".into());
    };
    if host.is_empty() {
        return Some("the host is missing".into());
    }
    if !matches!(port.parse::<u16>(), Ok(1..)) {
        return Some(format!("port `{port}` is not a number from 1 to 65535"));
    }
    let bracketed = host.starts_with('[') && host.ends_with(']');
    if !bracketed && (host.contains('[') || host.contains(']')) {
        return Some("the brackets around the IPv6 address do not match".into());
    }
    if host.contains(':') && !bracketed {
        return Some(format!("an IPv6 address takes brackets: [{host}]:{port}"));
    }
    None
}

/// A peer's first address, or what is wrong with the entry (the detail, and the fix): not of
/// the form `host:port` ([`malformed`]), or a host that does not resolve.
fn resolve(p: &str) -> Result<std::net::SocketAddr, (String, String)> {
    if let Some(why) = malformed(p) {
        return Err((format!("not host:port: {why}"), PEER_FORM_FIX.to_string()));
    }
    let host = p.rsplit_once(':').map_or(p, |(h, _)| h);
    match p.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err((
            format!("host `{host}` resolves to no address"),
            "check the name (DNS or /etc/hosts), or give an IP address".into(),
        )),
        Err(e) => Err((
            format!("host `{host}` does not resolve: {e}"),
            "check the name (DNS or /etc/hosts), or give an IP address".into(),
        )),
    }
}

#[cfg(not(feature = "verbs"))]
mod verbs {
    use super::*;

    pub(super) fn checks(_: &DoctorArgs, out: &mut Vec<Check>) -> Value {
        out.push(
            check(
                "verbs",
                Status::Fail,
                "this `loco` was built without the `verbs` feature: it cannot look at RDMA \
                 devices",
            )
            .fix(
                "cargo build --release -p loco-cli --features verbs && target/release/loco doctor",
            ),
        );
        json!([])
    }

    pub(super) fn bootstrap_check(_: &[String]) -> Option<Check> {
        None
    }

    pub(super) fn key_check(peers: &[String]) -> Check {
        super::key_check_plain(peers)
    }
}

/// The cluster key check by the variable alone: set or not.
fn key_check_plain(peers: &[String]) -> Check {
    match std::env::var("LOCO_CLUSTER_KEY") {
        Ok(_) => check("cluster key", Status::Pass, "LOCO_CLUSTER_KEY is set"),
        Err(_) => no_key(peers),
    }
}

/// No key and nothing that allows it: a cluster confined to this host (every peer a loopback
/// address) starts with a warning, any other refuses to start.
fn no_key(peers: &[String]) -> Check {
    let fix = "export LOCO_CLUSTER_KEY=$(loco keygen), the same key on every node";
    if all_loopback(peers) {
        check(
            "cluster key",
            Status::Warn,
            "LOCO_CLUSTER_KEY is not set: every peer is on this host, so the cluster starts, \
             but any local user can join it",
        )
        .fix(fix)
    } else {
        check(
            "cluster key",
            Status::Fail,
            "LOCO_CLUSTER_KEY is not set: a multi-process cluster refuses to start without it",
        )
        .fix(fix)
    }
}

/// Whether every peer resolves to a loopback address (its first, as the verbs backend's
/// bootstrap decides whether it may run without a key), within [`PEERS_DEADLINE`]: a name
/// whose resolution hangs counts as not loopback (the check then says what a cluster across
/// hosts needs) instead of hanging the doctor.
fn all_loopback(peers: &[String]) -> bool {
    use std::net::ToSocketAddrs;
    if peers.is_empty() {
        return false;
    }
    let peers = peers.to_vec();
    let (tx, rx) = std::sync::mpsc::channel();
    // Not joined: a thread stuck in the resolver is left behind when the doctor exits.
    std::thread::spawn(move || {
        let loopback = peers.iter().all(|p| {
            p.to_socket_addrs()
                .is_ok_and(|mut a| a.next().is_some_and(|a| a.ip().is_loopback()))
        });
        let _ = tx.send(loopback);
    });
    rx.recv_timeout(PEERS_DEADLINE).unwrap_or(false)
}

#[cfg(feature = "verbs")]
mod verbs;

#[cfg(test)]
mod tests {
    use super::*;

    /// No key: a warning where every peer is on loopback, a failure where one is elsewhere
    /// (an address literal: nothing is resolved or contacted).
    #[test]
    fn no_key_fails_with_a_peer_elsewhere() {
        let peers = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let local = no_key(&peers(&["127.0.0.1:7470", "127.0.0.1:7471"]));
        assert_eq!(local.status, Status::Warn);
        let mixed = no_key(&peers(&["127.0.0.1:7470", "192.0.2.1:7470"]));
        assert_eq!(mixed.status, Status::Fail);
        assert!(mixed.fix.is_some_and(|f| f.contains("keygen")));
        assert_eq!(no_key(&[]).status, Status::Fail);
    }
}
