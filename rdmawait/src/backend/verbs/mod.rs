//! The ibverbs backend: real RDMA devices (InfiniBand, RoCE, Soft-RoCE), through `sideway`.
//!
//! Build a cluster on it with [`ClusterBuilder::verbs`](crate::ClusterBuilder::verbs):
//!
//! ```no_run
//! use loco_rdmawait::backend::verbs::VerbsConfig;
//! use loco_rdmawait::{Cluster, NodeId, WorkId};
//!
//! // Device, port and GID from LOCO_RDMA_DEVICE, LOCO_RDMA_PORT, LOCO_GID_INDEX (all optional).
//! let cluster = Cluster::builder().nodes(2).verbs(VerbsConfig::from_env()?).build()?;
//! let x = cluster.alloc_word(NodeId(0))?;
//! let y = cluster.alloc_word(NodeId(1))?;
//! let ctx = cluster.context(NodeId(0))?;
//! ctx.store(&x, 42)?;
//! ctx.put(&y, &x, WorkId::new(1))?; // an RDMA WRITE on the device
//! ctx.wait(WorkId::new(1))?;
//! # Ok::<(), loco_rdmawait::Error>(())
//! ```
//!
//! # Two ways to connect nodes
//! - **In one process** (the default): every node of the cluster lives in this process, over one
//!   device, each with its own protection domain, memory region and queue pairs. A thread's queue
//!   pair towards node `n` is connected to a responder queue pair in `n`'s protection domain, so
//!   the traffic really crosses the device (a loop-back on one port). This is how the test suite
//!   runs against a single rxe device.
//! - **Across processes and hosts** ([`VerbsConfig::distributed`], or `LOCO_NODE_ID` and
//!   `LOCO_PEERS`): each process is one node. A small TCP rendezvous exchanges memory addresses,
//!   rkeys, GIDs, queue pair numbers and PSNs; a thread's queue pair towards another process is
//!   connected to a responder queue pair that process creates on request. The same TCP
//!   connections carry [`Process::barrier`] and tell a process when a peer dies.
//!
//! # Two ways to connect queue pairs across processes
//! [`VerbsConfig::bootstrap`] (`LOCO_BOOTSTRAP`) chooses who connects a thread's queue pair to
//! its responder in another process; membership (the cluster key, incarnations, heartbeats,
//! barriers, fencing, rejoin) is the TCP session's either way, with the same guarantees.
//! - [`Bootstrap::Tcp`] (default): the TCP session carries the queue pair numbers, PSNs, LIDs
//!   and GIDs both ways and every node's memory address and rkey; the backend walks the queue
//!   pairs through INIT, RTR and RTS itself.
//! - [`Bootstrap::RdmaCm`]: the RDMA connection manager resolves the peer's IP address to a
//!   path and connects each queue pair (REQ, REP, RTU), as `rping` does; the backend's own queue
//!   pairs get the manager's attributes plus its transport settings (`cm.rs`). Each process
//!   listens for rdma_cm on its entry of the peer list, which must then be an address of the
//!   interface its device runs over (not loopback). A node's memory address and rkey travel
//!   only in the private data of the manager's replies, MACed with the cluster key and bound to
//!   both incarnations, a request number used once and both queue pair numbers; requests that
//!   do not prove the key for a joined incarnation are rejected with the reason
//!   (`rendezvous::cmdata`). Dropping a thread's context disconnects its connections, and the
//!   peer destroys their responders.
//!
//! # Mapping
//! | rdmawait | verbs |
//! |---|---|
//! | node memory | one page-aligned block per node, one memory region with local write, remote read, remote write and remote atomic access |
//! | thread context | one completion queue, one RC queue pair per node (loop-back included) |
//! | `put` / `get` | RDMA WRITE / RDMA READ |
//! | `rcas` / `rfaa` | ATOMIC CMP_AND_SWP / ATOMIC FETCH_AND_ADD (8-byte aligned, checked before posting) |
//! | `rfence(n)` | the Fence flag on the thread's next request towards `n`; on Soft-RoCE, a software fence instead (see below) |
//! | `poll(n)`, `wait(d)` | completion-queue polling, completions sorted per queue pair |
//!
//! Every request is signalled, and a thread never has more requests outstanding on a queue pair
//! than its send queue holds, nor in total than its completion queue holds (both capacities read
//! back from the device): a post that would overflow waits for completions instead.
//!
//! # Errors
//! - No libibverbs, no device, no active port, a bad GID: [`Error::Backend`] saying what to
//!   install or how to create a Soft-RoCE device.
//! - A request that fails on the NIC (remote access error from a bad rkey or an address outside
//!   the target's memory, ...): [`Error::Completion`] from the poll or wait that reaches it; the
//!   queue pair is then in the error state and every later operation towards that node fails with
//!   [`Error::QpInError`] (open a new context to reconnect).
//! - A peer that stops answering: [`Error::PeerDead`], either when the transport gives up
//!   (`IBV_WC_RETRY_EXC_ERR`, after about `(retry_count + 1) × 4.096 µs × 2^ack_timeout`) or, across
//!   processes, as soon as the peer's TCP connection drops, or when nothing (not even a
//!   heartbeat) arrived from it for [`VerbsConfig::peer_timeout`]. Waits never hang: they end
//!   with [`Error::Timeout`] at the latest.
//!
//! # Failures across processes
//! - **Membership**: joining takes the cluster key ([`VerbsConfig::cluster_key`],
//!   `LOCO_CLUSTER_KEY`, from `loco keygen`), proven both ways by an HMAC-SHA256
//!   challenge-response over fresh nonces, node ids and direction; a node's address, rkey and
//!   responder queue pairs go only to authenticated, joined connections. Frames are decoded
//!   strictly (lengths, ranges, no trailing bytes); barrier numbers must advance one by one;
//!   every peer must register the same memory size. At most 32 connections may be in the
//!   handshake at once and each gets at most min(timeout, 10 s). Each process listens on its own
//!   entry of the peer list only.
//! - **Detection**: a joined peer whose connection ends without a goodbye is dead at once; one
//!   that goes silent (no FIN: power-off, partition, stopped process) is dead after the peer
//!   timeout (default 5 s; heartbeats every fifth of it). Death is final for that incarnation
//!   of the process. From then on every operation, wait and barrier that involves the node
//!   fails with [`Error::PeerDead`] naming it; threads opened afterwards still work with the
//!   other nodes (their link to the dead one is born failed). [`Cluster::check_alive`] sees it.
//! - **Fencing**: a peer declared dead is cut off: our connections with it are shut down and
//!   the responder queue pairs that served its threads are destroyed, so a process declared
//!   dead but still running (a partition that heals, SIGSTOP then SIGCONT) can no longer read
//!   or write this process's memory; its own operations fail. It cannot come back as it was
//!   (its incarnation is refused as stale): it must restart.
//! - **Rejoin**: every process draws a random incarnation at start, proven in the handshake. A
//!   process started again under the same node id (same `LOCO_NODE_ID`, `LOCO_PEERS` and key)
//!   is admitted as a new incarnation once the others have declared the old one dead (at once
//!   after `kill -9`, within the peer timeout otherwise; until then its join is retried, for at
//!   most twice the peer timeout and a second); a second process with the id of a live one is
//!   then refused as a duplicate.
//!   The others record its new memory (address, rkey), dial it back, and report it alive
//!   again; [`Cluster::incarnation`] changes. Its barrier count continues from theirs.
//! - **What survives a restart**: nothing of the dead incarnation's memory: the new process
//!   starts with zeroed memory, so values of SC locations, shared-variable copies and lock
//!   words that lived on it are lost, and it must create its objects (allocations, locks) in the
//!   same order as the others for layouts to agree. Thread contexts opened before the rejoin
//!   never reach the new incarnation: their operations towards it (and waits for requests
//!   posted before the death) keep failing with [`Error::PeerDead`], whose reason says the node
//!   restarted; open a new context to work with it. Requests of the dead incarnation never
//!   land: their queue pairs were destroyed.
//! - **Not covered**: frames after the handshake are not MACed one by one, so someone able to
//!   rewrite TCP segments on the path could tamper with them (as they could with RoCE packets).
//!
//! # Soft-RoCE and the Fence flag
//! On rxe (seen with Linux 6.1, rdma-core 44), a request posted with the Fence flag can stall
//! forever once several threads' queue pairs are busy: its completion never comes, and later
//! posts on that queue pair do not revive it (a few thousand fenced gets over three threads
//! suffice; without the flag, millions of requests pass). So on rxe the backend fences in
//! software: the request that follows an `rfence(n)` is posted, without the flag, only once the
//! earlier RDMA READs and atomics towards `n` have completed, which is what the Fence flag
//! promises (IBA 10.8.3.3). The posting thread waits for them instead of the NIC; other
//! devices use the flag. [`VerbsConfig::software_fence`] overrides the choice.
//!
//! # Implementation
//! Raw verbs calls (posting, polling, attribute queries) live in this module, each `unsafe` block
//! with its justification; registered memory is `crate::mem`, seen by Rust only as atomics.
//! A node's memory and its region are registered and deregistered with raw calls
//! (`region.rs`): the block is freed only once `ibv_dereg_mr` has succeeded, and leaked (with an
//! error in the log) if it fails. Queue pairs that can write a node's memory hold that node
//! until they are destroyed, and are moved to the error state first (`qp.rs`), so no drop order
//! frees memory the device may still write, and no `Drop` panics (docs/verbs-notes.md,
//! pitfall 8). Extended completion queues are avoided: on rdma-core < 55 polling one on rxe returns stale
//! completions (docs/verbs-notes.md, pitfall 1).

#![allow(unsafe_code)]

mod cm;
mod device;
#[cfg(feature = "tokio")]
mod events;
mod nic;
mod qp;
mod region;
mod session;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::rendezvous::auth::ClusterKey;
use super::rendezvous::peers::Peers;
use super::{Backend, ThreadNic};
use crate::{Cluster, Error, NodeId, Result, WORD};

pub(crate) use crate::backend::rendezvous::wire::NodeInfo;
pub use device::{inventory, DeviceReport, GidReport, PortReport};
use region::RegisteredMemory;
pub use session::Process;

/// Fault injection for tests (`examples/fault_node --hello-and-leave`): connects to the
/// rendezvous listener at `addr` as node `from` of a cluster of `nodes` dialling node `to`,
/// proves the cluster key `key` (hex, as `LOCO_CLUSTER_KEY` holds it) under a fresh
/// incarnation, and leaves before its `Join`: a process that dies half-way through joining.
/// The listener's members must not notice (nothing is admitted before a `Join`). Returns the
/// listener's incarnation.
#[doc(hidden)]
pub fn hello_and_leave(
    addr: &str,
    key: &str,
    nodes: u16,
    from: u16,
    to: u16,
    timeout: Duration,
) -> Result<u64> {
    use super::rendezvous::{auth, gate};
    let key = ClusterKey::from_hex(key).map_err(verbs_error)?;
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| verbs_error(format!("{addr}: {e}")))?
        .next()
        .ok_or_else(|| verbs_error(format!("{addr}: no address")))?;
    let incarnation =
        auth::incarnation().map_err(|e| verbs_error(format!("no random incarnation: {e}")))?;
    let d = gate::Dial {
        nodes,
        from,
        to,
        incarnation,
    };
    let deadline = session::deadline_after(timeout);
    let (stream, theirs) = gate::dial(sock, deadline, &key, d, timeout)
        .map_err(|e| verbs_error(format!("hello to {addr}: {e}")))?;
    drop(stream);
    Ok(theirs)
}

/// Whether this host can use the rdma_cm bootstrap ([`Bootstrap::RdmaCm`]): librdmacm loads and
/// the kernel's connection manager answers (an event channel and an identifier are made and
/// dropped). The error says what to install or load (`loco doctor` shows it).
pub fn rdma_cm_available() -> Result<()> {
    let ch = cm::Channel::new().map_err(|e| verbs_error(e.to_string()))?;
    let missing = cm::missing_calls();
    if !missing.is_empty() {
        return Err(verbs_error(format!(
            "this librdmacm lacks {}: install a newer rdma-core (Debian 11 or later, Ubuntu \
             20.04 or later)",
            missing.join(", ")
        )));
    }
    ch.create_id()
        .map(drop)
        .map_err(|e| verbs_error(format!("the connection manager refused an identifier: {e}")))
}

/// Fault injection for tests (`examples/fault_node --cm-stranger`): sends connect requests to
/// the rdma_cm listener at `addr` that its members must refuse, and returns the reason each
/// refusal gave: no private data, random bytes, a request MACed with a wrong key, and (when
/// `key`, as hex, is the cluster's) well-formed requests of node `from` under an incarnation
/// that never joined and under incarnation 0 (the listener's incarnation is learnt by an
/// authenticated hello). An accepted request is an error.
#[doc(hidden)]
pub fn cm_stranger(
    addr: &str,
    key: &str,
    nodes: u16,
    from: u16,
    to: u16,
    timeout: Duration,
) -> Result<Vec<String>> {
    use super::rendezvous::cmdata;
    let dst = resolve(addr)?;
    let server_incarnation = hello_and_leave(addr, key, nodes, from, to, timeout)?;
    let key = ClusterKey::from_hex(key).map_err(verbs_error)?;
    let link = |seq, client_incarnation| cmdata::Link {
        nodes,
        from,
        to,
        client_incarnation,
        server_incarnation,
        seq,
        client_qpn: 0x11,
    };
    let never = 0x5eed_0000_0000_0001;
    let wrong = ClusterKey::new(&[0x42; 32]).map_err(verbs_error)?;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("no private data", Vec::new()),
        (
            "random bytes",
            (0..cmdata::REQUEST_LEN).map(|_| rand::random()).collect(),
        ),
        ("a wrong key", link(1, never).request(&wrong).to_vec()),
        (
            "an incarnation that never joined",
            link(2, never).request(&key).to_vec(),
        ),
        // What a node that has not joined reads as: never a real incarnation.
        ("incarnation 0", link(3, 0).request(&key).to_vec()),
    ];
    let ch = cm::Channel::new().map_err(|e| io_source("rdma_cm is not available", e))?;
    let mut reasons = Vec::new();
    for (what, private) in cases {
        let r = cm::Request {
            src: SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0),
            dst,
            device: "",
            port: 0,
            qp_num: 0x11,
            private: &private,
        };
        let t = cm::Tuning {
            timeout: 14,
            retry_count: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        };
        match cm::connect(&ch, &r, &t, session::deadline_after(timeout)) {
            Err(cm::Failed::Refused(reason)) => reasons.push(format!("{what}: {reason}")),
            Ok(_) => {
                return Err(verbs_error(format!(
                    "{addr} accepted a connect request with {what}"
                )))
            }
            Err(e) => {
                return Err(verbs_error(format!(
                    "connect request with {what} to {addr}: {e:?}"
                )))
            }
        }
    }
    Ok(reasons)
}

/// Default send-queue depth asked for per queue pair (the device may grant more).
pub const DEFAULT_SEND_QUEUE_DEPTH: u32 = 256;

/// Configuration of the verbs backend: which device, port and GID, queue sizes, transport
/// timeouts, and (for a cluster spanning processes) this process's node id and its peers.
///
/// [`VerbsConfig::from_env`] reads the environment variables each setter names.
#[derive(Clone, Debug)]
#[must_use]
pub struct VerbsConfig {
    device: Option<String>,
    port: Option<u8>,
    gid_index: Option<u32>,
    send_queue_depth: u32,
    ack_timeout: u8,
    retry_count: u8,
    software_fence: Option<bool>,
    fence_read: Option<crate::FenceRead>,
    distributed: Option<Distributed>,
    cluster_key: Option<Secret>,
    allow_no_key: bool,
    peer_timeout: Duration,
    bootstrap: Bootstrap,
}

/// How the queue pairs of a multi-process cluster are connected ([`VerbsConfig::bootstrap`],
/// `LOCO_BOOTSTRAP`). Either way, processes join each other over the authenticated TCP session
/// (cluster key, incarnations, heartbeats, barriers: see the [module docs](self)); what
/// changes is who connects the queue pairs and carries the memory keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bootstrap {
    /// The TCP session carries everything: each queue pair's number, PSN, LID and GID both
    /// ways, and every node's memory address and rkey; the backend moves the queue pairs
    /// through INIT, RTR and RTS itself (`LOCO_BOOTSTRAP=tcp`, the default).
    #[default]
    Tcp,
    /// The RDMA connection manager (librdmacm) resolves every peer's address to a path
    /// and connects each queue pair (REQ, REP, RTU), as `rping` and perftest's `-R` do
    /// (`LOCO_BOOTSTRAP=rdma_cm`). The peer list's addresses must then be IP addresses of the
    /// network interfaces the RDMA devices run over (not loopback); each process listens for
    /// rdma_cm on the same address and port as for the TCP session. The memory keys travel
    /// only in the connection manager's private data, authenticated by the cluster key
    /// (HMAC-SHA256 over both processes' incarnations, a request number used once and the
    /// queue pair numbers). Needs librdmacm (Debian/Ubuntu: `librdmacm1`) and the
    /// `rdma_ucm` kernel module.
    RdmaCm,
}

impl Bootstrap {
    /// The name `LOCO_BOOTSTRAP` takes.
    pub fn name(self) -> &'static str {
        match self {
            Bootstrap::Tcp => "tcp",
            Bootstrap::RdmaCm => "rdma_cm",
        }
    }
}

impl fmt::Display for Bootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Bootstrap {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Bootstrap, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(Bootstrap::Tcp),
            "rdma_cm" | "rdmacm" | "rdma-cm" | "cm" => Ok(Bootstrap::RdmaCm),
            other => Err(format!("unknown bootstrap {other:?}: want tcp or rdma_cm")),
        }
    }
}

/// What [`VerbsConfig::selected`] picks.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Selected {
    /// The device's name.
    pub device: String,
    /// The port, from 1.
    pub port: u8,
    /// The source GID index (`None`: InfiniBand without a global route header).
    pub gid_index: Option<u32>,
}

/// Default of [`VerbsConfig::peer_timeout`].
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// Key bytes; `Debug` never shows them.
#[derive(Clone)]
struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes, redacted>", self.0.len())
    }
}

#[derive(Clone, Debug)]
struct Distributed {
    node: NodeId,
    peers: Vec<String>,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            device: None,
            port: None,
            gid_index: None,
            send_queue_depth: DEFAULT_SEND_QUEUE_DEPTH,
            ack_timeout: 14,
            retry_count: 7,
            software_fence: None,
            fence_read: None,
            distributed: None,
            cluster_key: None,
            allow_no_key: false,
            peer_timeout: DEFAULT_PEER_TIMEOUT,
            bootstrap: Bootstrap::Tcp,
        }
    }
}

impl VerbsConfig {
    /// The defaults: the first device with an active port, its best GID (RoCE v2 over IPv4 where
    /// there is one), all nodes in this process.
    pub fn new() -> Self {
        VerbsConfig::default()
    }

    /// The defaults, overridden by the environment: `LOCO_RDMA_DEVICE` (device name, e.g.
    /// `rxe0`), `LOCO_RDMA_PORT` (port number, from 1), `LOCO_GID_INDEX`, and, for a cluster
    /// spanning processes, `LOCO_NODE_ID` with `LOCO_PEERS` (see [`VerbsConfig::distributed`]),
    /// `LOCO_CLUSTER_KEY` (hex, see [`VerbsConfig::cluster_key`]), `LOCO_CLUSTER_INSECURE=1`
    /// ([`VerbsConfig::allow_no_key`]) and `LOCO_PEER_TIMEOUT_MS`
    /// ([`VerbsConfig::peer_timeout`]), `LOCO_BOOTSTRAP` (`tcp` or `rdma_cm`,
    /// [`VerbsConfig::bootstrap`]), `LOCO_FENCE_READ` (`get` or `cas`,
    /// [`VerbsConfig::fence_read`]). Fails on values that do not parse.
    pub fn from_env() -> Result<Self> {
        let mut c = VerbsConfig::new();
        if let Some(v) = env("LOCO_RDMA_DEVICE") {
            c = c.device(v);
        }
        if let Some(v) = env("LOCO_RDMA_PORT") {
            c = c.port(parse_env("LOCO_RDMA_PORT", &v)?);
        }
        if let Some(v) = env("LOCO_GID_INDEX") {
            c = c.gid_index(parse_env("LOCO_GID_INDEX", &v)?);
        }
        match (env("LOCO_NODE_ID"), env("LOCO_PEERS")) {
            (None, None) => {}
            (Some(id), Some(peers)) => {
                let id: u16 = parse_env("LOCO_NODE_ID", &id)?;
                let peers = crate::peer_list::parse(&peers)
                    .map_err(|e| verbs_error(format!("LOCO_PEERS={peers:?}: {e}")))?;
                c = c.distributed(NodeId(id), peers);
            }
            _ => {
                return Err(verbs_error(
                    "LOCO_NODE_ID and LOCO_PEERS go together: set both (multi-process cluster) or neither",
                ))
            }
        }
        if let Some(v) = env("LOCO_CLUSTER_KEY") {
            let key = ClusterKey::from_hex(&v)
                .map_err(|e| verbs_error(format!("LOCO_CLUSTER_KEY: {e}")))?;
            c.cluster_key = Some(Secret(key.bytes().to_vec()));
        }
        if let Some(v) = env("LOCO_CLUSTER_INSECURE") {
            c = c.allow_no_key(matches!(v.trim(), "1" | "true" | "yes"));
        }
        if let Some(v) = env("LOCO_PEER_TIMEOUT_MS") {
            let ms: u64 = parse_env("LOCO_PEER_TIMEOUT_MS", &v)?;
            c = c.peer_timeout(Duration::from_millis(ms));
        }
        if let Some(v) = env("LOCO_BOOTSTRAP") {
            c = c.bootstrap(parse_env("LOCO_BOOTSTRAP", &v)?);
        }
        if let Some(v) = env("LOCO_FENCE_READ") {
            let read = crate::FenceRead::by_name(v.trim()).ok_or_else(|| {
                verbs_error(format!("LOCO_FENCE_READ: `{v}` is neither `get` nor `cas`"))
            })?;
            c = c.fence_read(read);
        }
        Ok(c)
    }

    /// Use the device with this name (`LOCO_RDMA_DEVICE`; default: the first with an active
    /// port).
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.device = Some(name.into());
        self
    }

    /// Use this port of the device, from 1 (`LOCO_RDMA_PORT`; default: the first active one).
    pub fn port(mut self, port: u8) -> Self {
        self.port = Some(port);
        self
    }

    /// Use this GID index as the source address (`LOCO_GID_INDEX`; default on RoCE: a RoCE v2
    /// GID with an IPv4 address if there is one; on InfiniBand: none, LIDs are used). On rxe
    /// created over an interface with an IPv4 address, index 1 is the RoCE v2 IPv4 GID. Under
    /// [`Bootstrap::RdmaCm`], queue pairs towards other processes use the GID the connection
    /// manager's route picks for the peer list's address instead; this one serves the
    /// process's own loop-back queue pairs.
    pub fn gid_index(mut self, index: u32) -> Self {
        self.gid_index = Some(index);
        self
    }

    /// Send-queue entries to ask for per queue pair (default
    /// [`DEFAULT_SEND_QUEUE_DEPTH`]); capped at the device's maximum, and the device may round
    /// it up. A thread posting more unpolled requests to one node than this waits for
    /// completions.
    pub fn send_queue_depth(mut self, depth: u32) -> Self {
        self.send_queue_depth = depth.max(1);
        self
    }

    /// Local ACK timeout exponent (default 14: 4.096 µs × 2^14 ≈ 67 ms per try), and retries
    /// (default 7, at most 7) before a request towards an unresponsive peer fails with
    /// [`Error::PeerDead`].
    pub fn transport_timeout(mut self, ack_timeout: u8, retry_count: u8) -> Self {
        self.ack_timeout = ack_timeout.min(31);
        self.retry_count = retry_count.min(7);
        self
    }

    /// Implement `rfence` in software (the request after the fence is posted once the earlier
    /// RDMA READs and atomics on its queue pair have completed) rather than with the verbs Fence
    /// flag. Default: on for Soft-RoCE (rxe), whose driver can stall a fenced request forever
    /// (see the [module docs](crate::backend::verbs)), off for other devices.
    pub fn software_fence(mut self, on: bool) -> Self {
        self.software_fence = Some(on);
        self
    }

    /// How global fences read a node's dummy word (`LOCO_FENCE_READ`; see
    /// [`FenceRead`](crate::FenceRead)). Default: a remote CAS on Soft-RoCE, whose responder
    /// defers reads to a tasklet and runs atomics inline, a get on other devices.
    /// [`ClusterBuilder::fence_read`](crate::ClusterBuilder::fence_read) overrides it.
    pub fn fence_read(mut self, read: crate::FenceRead) -> Self {
        self.fence_read = Some(read);
        self
    }

    /// Makes the cluster span processes: this process is node `node`, and `peers[i]` is the
    /// `host:port` where node `i`'s process listens for the rendezvous (`LOCO_NODE_ID`, and
    /// `LOCO_PEERS` as a comma-separated list). The cluster has `peers.len()` nodes; this
    /// process listens on `peers[node]` itself (that address only, not every interface) and
    /// builds once every peer has answered and proven the cluster key (within the cluster's
    /// timeout; see [`VerbsConfig::cluster_key`]).
    pub fn distributed(mut self, node: NodeId, peers: Vec<String>) -> Self {
        self.distributed = Some(Distributed { node, peers });
        self
    }

    /// The secret every process of a multi-process cluster must hold to join it
    /// (`LOCO_CLUSTER_KEY`, as hex; at least 16 bytes, `loco keygen` prints 32 random ones).
    /// Joining is a mutual HMAC-SHA256 challenge-response over fresh nonces; nothing about this
    /// process's memory or queue pairs is sent to a connection that has not proven the key.
    ///
    /// Without a key, a cluster whose peer list names only loopback addresses still runs (with a
    /// warning: any local user could join it); one that spans hosts is refused unless
    /// [`VerbsConfig::allow_no_key`] is set.
    pub fn cluster_key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.cluster_key = Some(Secret(key.as_ref().to_vec()));
        self
    }

    /// Lets a multi-process cluster spanning hosts run without a cluster key
    /// (`LOCO_CLUSTER_INSECURE=1`): anyone who can reach its ports can join it and then read
    /// and write its memory. For trusted, isolated networks only.
    pub fn allow_no_key(mut self, allow: bool) -> Self {
        self.allow_no_key = allow;
        self
    }

    /// How long a peer process may stay silent (no heartbeat, no message) on its rendezvous
    /// connection before it is taken for dead (`LOCO_PEER_TIMEOUT_MS`; default
    /// [`DEFAULT_PEER_TIMEOUT`], at least 50 ms). Heartbeats go out every fifth of it. A peer
    /// whose connection closes without a goodbye is dead at once; this bounds the detection of
    /// the ones that vanish without closing (power-off, a stopped process, a partition).
    pub fn peer_timeout(mut self, timeout: Duration) -> Self {
        self.peer_timeout = timeout.max(Duration::from_millis(50));
        self
    }

    /// How a multi-process cluster connects its queue pairs (`LOCO_BOOTSTRAP`; default
    /// [`Bootstrap::Tcp`]). [`Bootstrap::RdmaCm`] needs [`VerbsConfig::distributed`] (a
    /// cluster in one process has nothing to connect across hosts) with peer addresses on the
    /// RDMA devices' interfaces; the cluster key and failure handling are the same either way.
    pub fn bootstrap(mut self, bootstrap: Bootstrap) -> Self {
        self.bootstrap = bootstrap;
        self
    }

    /// The bootstrap chosen ([`VerbsConfig::bootstrap`]).
    pub fn bootstrap_kind(&self) -> Bootstrap {
        self.bootstrap
    }

    /// The device, port and GID index a cluster built with this configuration would use
    /// (opening the device, as `build` does, and closing it again): the same choice and the
    /// same errors, for diagnostics (`loco doctor`).
    pub fn selected(&self) -> Result<Selected> {
        let d = device::open(self)?;
        Ok(Selected {
            device: d.name.clone(),
            port: d.port,
            gid_index: d.gid_index.map(u32::from),
        })
    }

    /// The node id and peers of a multi-process configuration ([`VerbsConfig::distributed`]).
    pub fn peers(&self) -> Option<(NodeId, &[String])> {
        self.distributed
            .as_ref()
            .map(|d| (d.node, d.peers.as_slice()))
    }

    /// Whether a cluster key is set ([`VerbsConfig::cluster_key`], `LOCO_CLUSTER_KEY`).
    pub fn has_cluster_key(&self) -> bool {
        self.cluster_key.is_some()
    }

    /// Whether running a multi-process cluster without a key is allowed
    /// ([`VerbsConfig::allow_no_key`]).
    pub fn allows_no_key(&self) -> bool {
        self.allow_no_key
    }

    /// The cluster key to use, or why the configuration may not run.
    fn key(&self, peers: &[String]) -> Result<ClusterKey> {
        if let Some(Secret(bytes)) = &self.cluster_key {
            return ClusterKey::new(bytes).map_err(verbs_error);
        }
        if self.allow_no_key {
            tracing::warn!(target: "loco::rdmawait", "multi-process cluster without a cluster key \
                (allow_no_key): anyone who reaches its ports can join it");
        } else if session::all_loopback(peers) {
            tracing::warn!(target: "loco::rdmawait", "multi-process cluster without a cluster key \
                (LOCO_CLUSTER_KEY): any local user can join it; generate one with `loco keygen`");
        } else {
            return Err(verbs_error(
                "a multi-process cluster spanning hosts needs a cluster key: give every process \
                 the same LOCO_CLUSTER_KEY (generate one with `loco keygen`), or opt out with \
                 LOCO_CLUSTER_INSECURE=1 on a trusted network",
            ));
        }
        Ok(ClusterKey::none())
    }

    fn transport(&self) -> qp::Transport {
        qp::Transport {
            timeout: self.ack_timeout,
            retry_count: self.retry_count,
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn parse_env<T: std::str::FromStr>(name: &str, v: &str) -> Result<T>
where
    T::Err: fmt::Display,
{
    v.trim()
        .parse()
        .map_err(|e| verbs_error(format!("{name}={v:?} does not parse: {e}")))
}

/// The verbs backend: one device, the registered memory of this process's nodes, and the
/// rendezvous with other processes if the cluster spans several.
///
/// Usually built through [`ClusterBuilder::verbs`](crate::ClusterBuilder::verbs); build it
/// directly to drive [`ThreadNic`]s without the rdmawait bookkeeping (tests do).
pub struct VerbsBackend {
    shared: Arc<Shared>,
    session: Option<session::Session>,
}

impl fmt::Debug for VerbsBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsBackend")
            .field("device", &self.shared.device.name)
            .field("port", &self.shared.device.port)
            .field("nodes", &self.shared.infos.len())
            .field("this_node", &self.shared.me)
            .finish()
    }
}

/// Everything thread NICs and the rendezvous threads share.
pub(crate) struct Shared {
    device: device::Device,
    /// This process's node in a multi-process cluster (`None`: all nodes are local).
    me: Option<NodeId>,
    /// Nodes whose memory lives in this process.
    locals: Vec<Option<Arc<LocalNode>>>,
    /// The memory of this process's nodes as remote requests address it (the other
    /// processes' nodes: `peers`, where a rejoin can replace it). One entry per node.
    infos: Vec<OnceLock<NodeInfo>>,
    /// This process's incarnation (random, drawn at start): a restarted process rejoins with
    /// a new one.
    incarnation: u64,
    transport: qp::Transport,
    send_depth: u32,
    timeout: Duration,
    /// `rfence` waits for earlier READs and atomics instead of setting the Fence flag.
    software_fence: bool,
    /// How global fences read (the backend's [`Backend::fence_read`]).
    fence_read: crate::FenceRead,
    shutdown: AtomicBool,
    peers: Peers,
    /// Responder queue pairs serving other processes' threads.
    responders: session::Responders,
    /// Live thread NICs, for `quiesce`.
    nics: Mutex<Vec<std::sync::Weak<Mutex<nic::State>>>>,
    /// The rdma_cm bootstrap, when chosen.
    cm: Option<CmConfig>,
}

/// What the rdma_cm bootstrap needs ([`Bootstrap::RdmaCm`]).
pub(crate) struct CmConfig {
    key: ClusterKey,
    /// Numbers this process's connect requests (each used once: `rendezvous::cmdata`).
    seq: AtomicU64,
    /// Every node's address (the peer list), this process's own included.
    addrs: Vec<SocketAddr>,
}

/// A node whose memory lives in this process: its protection domain, registered memory and the
/// completion queue of the responder queue pairs serving other threads.
///
/// Every queue pair in `pd` holds an `Arc` of its node ([`qp::Qp`]), so the memory is
/// deregistered only once no queue pair can write it any more, in whatever order the backend,
/// its thread NICs and responders are dropped.
pub(crate) struct LocalNode {
    id: NodeId,
    /// Holds its own `Arc` of `pd`: deregistered before the protection domain goes.
    mem: RegisteredMemory,
    pd: Arc<ProtectionDomain>,
    /// Responder queue pairs never post, so nothing ever arrives here; verbs needs one anyway.
    responder_cq: qp::Cq,
}

impl LocalNode {
    fn new(device: &device::Device, id: NodeId, words: usize) -> Result<LocalNode> {
        let pd = device
            .ctx
            .alloc_pd()
            .map_err(|e| verbs_source("ibv_alloc_pd failed", e))?;
        let mem = RegisteredMemory::register(&pd, id, words)?;
        let responder_cq = device
            .ctx
            .create_cq_builder()
            .setup_cqe(16)
            .build()
            .map_err(|e| verbs_source("ibv_create_cq failed", e))?;
        Ok(LocalNode {
            id,
            mem,
            pd,
            responder_cq: qp::Cq::new(responder_cq),
        })
    }
}

impl Shared {
    fn local(&self, node: NodeId) -> Option<&Arc<LocalNode>> {
        self.locals.get(node.index()).and_then(Option::as_ref)
    }

    fn info(&self, node: NodeId) -> Result<NodeInfo> {
        self.infos
            .get(node.index())
            .and_then(OnceLock::get)
            .copied()
            .or_else(|| self.peers.info(node))
            .ok_or_else(|| verbs_error(format!("{node} is unknown (rendezvous incomplete)")))
    }

    /// What this process tells joining peers about `node`'s memory: under rdma_cm the size
    /// only (address and rkey go in the connection manager's authenticated private data; a
    /// zero address marks the bootstrap, so that a peer configured otherwise is refused).
    fn advertised(&self, node: NodeId) -> Result<NodeInfo> {
        let mut info = self.info(node)?;
        if self.cm.is_some() {
            info.addr = 0;
            info.rkey = 0;
        }
        Ok(info)
    }

    /// Whether a peer's `Join` or `Welcome` shows the same bootstrap as ours (see
    /// [`Shared::advertised`]); the error says what to fix.
    fn same_bootstrap(&self, node: NodeId, theirs: &NodeInfo) -> std::result::Result<(), String> {
        let (ours, them) = match (self.cm.is_some(), theirs.addr == 0) {
            (true, false) => ("rdma_cm", "tcp"),
            (false, true) => ("tcp", "rdma_cm"),
            _ => return Ok(()),
        };
        Err(format!(
            "{node} connects queue pairs with LOCO_BOOTSTRAP={them}, this process with {ours}: \
             give every process the same LOCO_BOOTSTRAP"
        ))
    }

    /// The connection manager's settings on top of its own attributes (see `cm::Tuning`).
    fn tuning(&self) -> cm::Tuning {
        cm::Tuning {
            timeout: self.transport.timeout,
            retry_count: self.transport.retry_count,
            max_rd_atomic: self.device.max_rd_atomic,
            max_dest_rd_atomic: self.device.max_dest_rd_atomic,
        }
    }

    /// The incarnation of `node` as this process knows it (0: not joined yet).
    fn incarnation(&self, node: NodeId) -> u64 {
        if self.local(node).is_some() {
            self.incarnation
        } else {
            self.peers.incarnation(node)
        }
    }
}

impl VerbsBackend {
    /// Opens the device and registers `words` words of memory for each of `nodes` nodes (only
    /// this process's node in a multi-process cluster, after the rendezvous). `timeout` bounds
    /// the rendezvous and waits for send-queue space.
    pub fn new(
        nodes: usize,
        words: usize,
        timeout: Duration,
        config: VerbsConfig,
    ) -> Result<VerbsBackend> {
        if nodes == 0 || nodes > u16::MAX as usize {
            return Err(verbs_error(format!(
                "a cluster needs 1..=65535 nodes, not {nodes}"
            )));
        }
        if let Some(d) = &config.distributed {
            crate::peer_list::check(&d.peers)
                .map_err(|e| verbs_error(format!("{e} (LOCO_PEERS)")))?;
            if d.peers.len() != nodes {
                return Err(verbs_error(format!(
                    "the peer list (LOCO_PEERS) names {} processes but the cluster has {nodes} \
                     nodes; give the builder .nodes({})",
                    d.peers.len(),
                    d.peers.len()
                )));
            }
            if d.node.index() >= nodes {
                return Err(verbs_error(format!(
                    "this process is {} (LOCO_NODE_ID) but the peer list has {nodes} entries",
                    d.node
                )));
            }
        }
        let key = match &config.distributed {
            Some(d) => Some(config.key(&d.peers)?),
            None => None,
        };
        let cm =
            match (&config.distributed, &key, config.bootstrap) {
                (_, _, Bootstrap::Tcp) => None,
                (Some(d), Some(key), Bootstrap::RdmaCm) => Some(CmConfig {
                    key: key.clone(),
                    seq: AtomicU64::new(0),
                    addrs: cm_addresses(&d.peers)?,
                }),
                _ => return Err(verbs_error(
                    "LOCO_BOOTSTRAP=rdma_cm connects the processes of a multi-process cluster: \
                     set LOCO_NODE_ID and LOCO_PEERS too (the nodes of a cluster in one process \
                     are connected within the device)",
                )),
            };
        let device = device::open(&config)?;
        let send_depth = config.send_queue_depth.min(device.max_qp_wr);
        tracing::debug!(target: "loco::rdmawait", device = %device.name, port = device.port,
            gid_index = ?device.gid_index, nodes, words, "verbs backend opening");
        let me = config.distributed.as_ref().map(|d| d.node);
        let mut locals = Vec::with_capacity(nodes);
        let infos: Vec<OnceLock<NodeInfo>> = (0..nodes).map(|_| OnceLock::new()).collect();
        for (i, info) in infos.iter().enumerate() {
            let id = NodeId(i as u16);
            if me.is_some_and(|m| m != id) {
                locals.push(None);
                continue;
            }
            let node = LocalNode::new(&device, id, words)?;
            let _ = info.set(node.mem.info());
            locals.push(Some(Arc::new(node)));
        }
        let software_fence = config.software_fence.unwrap_or(device.soft_roce);
        let fence_read = config.fence_read.unwrap_or(if device.soft_roce {
            crate::FenceRead::Cas
        } else {
            crate::FenceRead::Get
        });
        tracing::debug!(target: "loco::rdmawait", device = %device.name, software_fence, ?fence_read, "rfence and fence read chosen");
        let incarnation = super::rendezvous::auth::incarnation()
            .map_err(|e| io_source("cannot draw this process's incarnation", e))?;
        let shared = Arc::new(Shared {
            incarnation,
            software_fence,
            fence_read,
            device,
            me,
            locals,
            infos,
            transport: config.transport(),
            send_depth,
            timeout,
            shutdown: AtomicBool::new(false),
            peers: Peers::new(nodes),
            responders: Mutex::new(std::collections::HashMap::new()),
            nics: Mutex::new(Vec::new()),
            cm,
        });
        let session = match (&config.distributed, key) {
            (Some(d), Some(key)) => {
                let sc = session::SessionConfig {
                    key,
                    peer_timeout: config.peer_timeout,
                };
                Some(session::Session::start(&shared, &d.peers, sc)?)
            }
            _ => None,
        };
        Ok(VerbsBackend { shared, session })
    }

    /// Name of the device in use (e.g. `rxe0`).
    pub fn device_name(&self) -> &str {
        &self.shared.device.name
    }

    /// This process's node in a multi-process cluster; `None` when every node is in this process.
    pub fn this_node(&self) -> Option<NodeId> {
        self.shared.me
    }

    /// The process-level services of this backend (barrier, node id).
    pub fn process(&self) -> Arc<Process> {
        Arc::new(Process::new(self.shared.clone()))
    }

    /// Testing hook: from now on, newly opened thread NICs address `node`'s memory with `rkey`
    /// instead of the real key (to provoke remote access errors). Not for production use.
    #[doc(hidden)]
    pub fn override_rkey_for_tests(&self, node: NodeId, rkey: u32) {
        self.shared.peers.override_rkey(node, rkey);
    }

    /// Testing hook: from now on, newly opened thread NICs connect their queue pair towards
    /// `node` to a queue pair number nobody has, so requests go unanswered (a peer that stopped
    /// responding). Not for production use.
    #[doc(hidden)]
    pub fn make_unreachable_for_tests(&self, node: NodeId) {
        self.shared.peers.make_unreachable(node);
    }
}

/// Builds a cluster on the verbs backend (what [`ClusterBuilder::verbs`](crate::ClusterBuilder::verbs)
/// calls). The cluster carries a [`Process`] handle: [`Process::of`].
pub(crate) fn build_cluster(
    nodes: usize,
    words: usize,
    timeout: Duration,
    config: VerbsConfig,
    fence_read: Option<crate::FenceRead>,
) -> Result<Cluster> {
    let backend = VerbsBackend::new(nodes, words, timeout, config)?;
    let process = backend.process();
    let cluster = Cluster::assemble(Box::new(backend), timeout, fence_read);
    cluster.extension(|_| Ok(ProcessHandle(process)))?;
    Ok(cluster)
}

/// How a cluster keeps its [`Process`] (the extension map is keyed by type).
pub(crate) struct ProcessHandle(pub(crate) Arc<Process>);

impl Backend for VerbsBackend {
    fn name(&self) -> &'static str {
        "verbs"
    }

    /// As configured ([`VerbsConfig::fence_read`]); by default a remote CAS on Soft-RoCE (its
    /// responder defers reads to a tasklet and runs atomics inline: an 8-byte get + wait costs
    /// 1.6-1.8 times an rFAA + wait there), a get elsewhere.
    fn fence_read(&self) -> crate::FenceRead {
        self.shared.fence_read
    }

    fn nodes(&self) -> usize {
        self.shared.infos.len()
    }

    fn words(&self, node: NodeId) -> usize {
        self.shared.info(node).map_or(0, |i| i.words as usize)
    }

    fn is_local(&self, node: NodeId) -> bool {
        self.shared.local(node).is_some()
    }

    fn open(&self, node: NodeId) -> Result<Box<dyn ThreadNic>> {
        if self.shared.shutdown.load(SeqCst) {
            return Err(Error::Shutdown);
        }
        Ok(Box::new(nic::VerbsNic::open(&self.shared, node)?))
    }

    fn quiesce(&self, timeout: Duration) -> Result<()> {
        nic::quiesce(&self.shared, timeout)
    }

    fn peek(&self, node: NodeId, word: usize) -> Result<u64> {
        Ok(local_word(&self.shared, node, word)?.load(SeqCst))
    }

    fn poke(&self, node: NodeId, word: usize, value: u64) -> Result<()> {
        local_word(&self.shared, node, word)?.store(value, SeqCst);
        Ok(())
    }

    fn dead(&self, node: NodeId) -> Option<String> {
        self.shared.peers.dead(node)
    }

    fn incarnation(&self, node: NodeId) -> u64 {
        self.shared.incarnation(node)
    }

    fn shutdown(&self) {
        self.shared.shutdown.store(true, SeqCst);
    }
}

impl Drop for VerbsBackend {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(session) = self.session.take() {
            session.leave();
        }
    }
}

fn local_word(shared: &Shared, node: NodeId, word: usize) -> Result<&AtomicU64> {
    let local = shared.local(node).ok_or_else(|| {
        verbs_error(format!(
            "{node} belongs to another process; its memory cannot be accessed directly"
        ))
    })?;
    let words = local.mem.words();
    words.as_slice().get(word).ok_or_else(|| Error::OutOfRange {
        node,
        offset: word as u64 * WORD,
        len: WORD,
        size: words.len() as u64 * WORD,
    })
}

pub(crate) fn verbs_error(message: impl Into<String>) -> Error {
    Error::Backend {
        backend: "verbs",
        message: message.into(),
        source: None,
    }
}

/// A verbs failure: `message`, then the chain of sideway's error (whose last link shows the errno).
pub(crate) fn verbs_source(message: impl Into<String>, e: impl std::error::Error) -> Error {
    let mut message = message.into();
    let mut cur: Option<&dyn std::error::Error> = Some(&e);
    while let Some(err) = cur {
        message.push_str(": ");
        message.push_str(&err.to_string());
        cur = err.source();
    }
    Error::Backend {
        backend: "verbs",
        message,
        source: None,
    }
}

fn io_source(message: &str, e: std::io::Error) -> Error {
    Error::Backend {
        backend: "verbs",
        message: message.to_string(),
        source: Some(e),
    }
}

/// The peer list's addresses for rdma_cm: each must name an interface an RDMA device runs
/// over, which a loopback or wildcard address cannot.
fn cm_addresses(peers: &[String]) -> Result<Vec<SocketAddr>> {
    let addrs = peers
        .iter()
        .map(|p| resolve(p))
        .collect::<Result<Vec<_>>>()?;
    for (i, a) in addrs.iter().enumerate() {
        let what = if a.ip().is_loopback() {
            "a loopback address"
        } else if a.ip().is_unspecified() {
            "a wildcard address"
        } else {
            continue;
        };
        return Err(verbs_error(format!(
            "LOCO_BOOTSTRAP=rdma_cm: the peer list (LOCO_PEERS) gives n{i} as {a}, {what}; \
             rdma_cm resolves addresses to RDMA devices, so list the IP address of the network \
             interface the device runs over (for Soft-RoCE: the netdev of `rdma link add rxe0 \
             type rxe netdev IFACE`)"
        )));
    }
    Ok(addrs)
}

/// Resolves `host:port` for the rendezvous.
pub(crate) fn resolve(peer: &str) -> Result<SocketAddr> {
    peer.to_socket_addrs()
        .map_err(|e| Error::Backend {
            backend: "verbs",
            message: format!("peer address {peer:?} does not resolve (want host:port)"),
            source: Some(e),
        })?
        .next()
        .ok_or_else(|| verbs_error(format!("peer address {peer:?} resolves to nothing")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_names_round_trip() {
        for b in [Bootstrap::Tcp, Bootstrap::RdmaCm] {
            assert_eq!(b.name().parse::<Bootstrap>(), Ok(b));
            assert_eq!(b.to_string(), b.name());
        }
        assert_eq!(" RDMA_CM ".parse::<Bootstrap>(), Ok(Bootstrap::RdmaCm));
        assert_eq!("rdmacm".parse::<Bootstrap>(), Ok(Bootstrap::RdmaCm));
        let e = "udp".parse::<Bootstrap>().unwrap_err();
        assert!(e.contains("tcp or rdma_cm"), "{e}");
        assert_eq!(VerbsConfig::new().bootstrap_kind(), Bootstrap::Tcp);
    }

    /// What a build refuses before it opens any device (so these need none).
    fn build_error(config: VerbsConfig, nodes: usize) -> String {
        VerbsBackend::new(nodes, 64, Duration::from_secs(1), config)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_peer_list_naming_one_address_twice_is_refused() {
        let peers = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7001"];
        let config = VerbsConfig::new()
            .distributed(NodeId(0), peers.iter().map(|s| s.to_string()).collect());
        let e = build_error(config, 3);
        assert!(
            e.contains("gives n0 and n2 the same address 127.0.0.1:7001"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_peer_list_or_a_blank_entry_is_refused() {
        let peers = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = build_error(VerbsConfig::new().distributed(NodeId(0), Vec::new()), 1);
        assert!(e.contains("the peer list is empty"), "{e}");
        let e = build_error(
            VerbsConfig::new().distributed(NodeId(0), peers(&["127.0.0.1:7001", " "])),
            2,
        );
        assert!(e.contains("entry 1 of the peer list is empty"), "{e}");
    }

    #[test]
    fn rdma_cm_needs_a_multi_process_cluster() {
        let e = build_error(VerbsConfig::new().bootstrap(Bootstrap::RdmaCm), 2);
        assert!(e.contains("LOCO_NODE_ID and LOCO_PEERS"), "{e}");
    }

    #[test]
    fn rdma_cm_refuses_loopback_and_wildcard_peers() {
        let peers = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = build_error(
            VerbsConfig::new()
                .bootstrap(Bootstrap::RdmaCm)
                .distributed(NodeId(0), peers(&["127.0.0.1:7001", "127.0.0.1:7002"])),
            2,
        );
        assert!(
            e.contains("n0 as 127.0.0.1:7001, a loopback address"),
            "{e}"
        );
        let e = build_error(
            VerbsConfig::new()
                .bootstrap(Bootstrap::RdmaCm)
                .cluster_key([7u8; 32])
                .distributed(NodeId(1), peers(&["192.0.2.1:7001", "0.0.0.0:7002"])),
            2,
        );
        assert!(e.contains("n1 as 0.0.0.0:7002, a wildcard address"), "{e}");
        // Across hosts, the key is asked for first, as over TCP.
        let e = build_error(
            VerbsConfig::new()
                .bootstrap(Bootstrap::RdmaCm)
                .distributed(NodeId(0), peers(&["192.0.2.1:7001", "192.0.2.2:7001"])),
            2,
        );
        assert!(e.contains("LOCO_CLUSTER_KEY"), "{e}");
    }
}
