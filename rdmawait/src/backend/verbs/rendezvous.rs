//! The TCP rendezvous of a cluster spanning processes: each process is one node.
//!
//! Every process listens on the port its entry of the peer list names, and opens one connection
//! to every other process (its *client* connection to that peer). Over it:
//!
//! | message | reply | meaning |
//! |---|---|---|
//! | `Hello { nodes, from, info }` | `Welcome { info }` or `Reject { reason }` | join: cluster size, node ids and memory (address, rkey, words) checked and exchanged |
//! | `Connect { endpoint }` | `Accepted { endpoint }` or `Reject` | a thread of `from` opened a queue pair towards us: create a responder queue pair in our protection domain, connect it, return its QPN, PSN, LID, GID |
//! | `Release { qpn }` | none | that thread is gone: destroy the responder |
//! | `Barrier { epoch }` | none | `from` reached its barrier number `epoch` |
//! | `Bye` | none | `from` is leaving; its memory stays registered until every peer said bye |
//!
//! A client connection that drops without `Bye` means its process died: the peer is marked dead,
//! and every thread's next operation (or current wait) towards it fails with
//! [`Error::PeerDead`] within a few milliseconds, instead of after the transport's retries.
//!
//! Frames are a little-endian `u32` length and a body whose first byte is the message tag.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use sideway::ibverbs::queue_pair::BasicQueuePair;

use super::qp::{self, Endpoint};
use super::{resolve, verbs_error, NodeInfo, ProcessHandle, Shared};
use crate::error::TimeoutKind;
use crate::{Cluster, Error, NodeId, Result};

const MAGIC: u32 = 0x4c4f_434f; // "LOCO"
const VERSION: u16 = 1;
/// Largest frame accepted (a `Reject` reason is the longest message).
const MAX_FRAME: u32 = 64 * 1024;
/// How long a connection attempt to a peer may take before it is retried.
const CONNECT_ATTEMPT: Duration = Duration::from_millis(500);
/// Pause between connection attempts while a peer is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_millis(50);

/// Per-peer state shared by thread NICs, the rendezvous threads and [`Process`].
pub(crate) struct Peers {
    nodes: Vec<Peer>,
    /// Signalled whenever a peer reaches a barrier, says bye or dies.
    changed: Condvar,
    lock: Mutex<()>,
    /// This process's barrier count.
    epoch: AtomicU64,
    /// Responder queue pairs serving other processes' threads, by (their node, our QPN).
    responders: Mutex<HashMap<(u16, u32), BasicQueuePair>>,
}

#[derive(Default)]
struct Peer {
    dead: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Highest barrier number the peer announced.
    barrier: AtomicU64,
    bye: AtomicBool,
    /// A server connection from this peer has said hello (a second one is refused).
    joined: AtomicBool,
    /// Our connection to the peer's listener, for our requests.
    client: OnceLock<Mutex<TcpStream>>,
    /// Testing hook: the rkey new thread NICs use for this node (`u64::MAX`: none).
    rkey_override: AtomicU64,
    /// Testing hook: new thread NICs connect their queue pair towards this node to nowhere.
    unreachable: AtomicBool,
}

impl Peers {
    pub(crate) fn new(nodes: usize) -> Peers {
        Peers {
            nodes: (0..nodes)
                .map(|_| Peer {
                    rkey_override: AtomicU64::new(u64::MAX),
                    ..Peer::default()
                })
                .collect(),
            changed: Condvar::new(),
            lock: Mutex::new(()),
            epoch: AtomicU64::new(0),
            responders: Mutex::new(HashMap::new()),
        }
    }

    /// Why `node` is dead, if it is.
    pub(crate) fn dead(&self, node: NodeId) -> Option<String> {
        let p = self.nodes.get(node.index())?;
        if !p.dead.load(SeqCst) {
            return None;
        }
        Some(p.reason.lock().clone().unwrap_or_default())
    }

    fn mark_dead(&self, node: NodeId, reason: String) {
        let Some(p) = self.nodes.get(node.index()) else {
            return;
        };
        {
            let mut r = p.reason.lock();
            if r.is_none() {
                tracing::warn!(target: "loco::rdmawait", %node, %reason, "peer dead");
                *r = Some(reason);
            }
        }
        p.dead.store(true, SeqCst);
        self.notify();
    }

    fn notify(&self) {
        let _g = self.lock.lock();
        self.changed.notify_all();
    }

    pub(crate) fn override_rkey(&self, node: NodeId, rkey: u32) {
        if let Some(p) = self.nodes.get(node.index()) {
            p.rkey_override.store(u64::from(rkey), SeqCst);
        }
    }

    pub(crate) fn make_unreachable(&self, node: NodeId) {
        if let Some(p) = self.nodes.get(node.index()) {
            p.unreachable.store(true, SeqCst);
        }
    }

    pub(crate) fn unreachable(&self, node: NodeId) -> bool {
        self.nodes
            .get(node.index())
            .is_some_and(|p| p.unreachable.load(SeqCst))
    }

    pub(crate) fn rkey_override(&self, node: NodeId) -> Option<u32> {
        let v = self.nodes.get(node.index())?.rkey_override.load(SeqCst);
        u32::try_from(v).ok()
    }

    /// Waits until `done(peer)` holds for every other node, failing if one dies first.
    fn wait_all(
        &self,
        me: NodeId,
        timeout: Duration,
        what: &'static str,
        done: impl Fn(&Peer) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut g = self.lock.lock();
        loop {
            let mut all = true;
            for (i, p) in self.nodes.iter().enumerate() {
                let node = NodeId(i as u16);
                if node == me || done(p) {
                    continue;
                }
                if let Some(reason) = self.dead(node) {
                    return Err(Error::PeerDead { node, reason });
                }
                all = false;
            }
            if all {
                return Ok(());
            }
            if self.changed.wait_until(&mut g, deadline).timed_out() {
                return Err(Error::Timeout {
                    what: TimeoutKind::Other(what),
                    after: timeout,
                });
            }
        }
    }
}

/// This process's membership in a verbs cluster: its node, its device, and a barrier over all
/// processes. Get it with [`Process::of`].
///
/// In a cluster whose nodes all live in one process, there is nothing to coordinate:
/// [`Process::node`] is `None` and [`Process::barrier`] returns at once.
pub struct Process {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("node", &self.shared.me)
            .field("device", &self.shared.device.name)
            .finish()
    }
}

impl Process {
    pub(crate) fn new(shared: Arc<Shared>) -> Process {
        Process { shared }
    }

    /// The process handle of a cluster built on the verbs backend; an error for other backends.
    pub fn of(cluster: &Cluster) -> Result<Arc<Process>> {
        let h = cluster.extension::<ProcessHandle>(|c| {
            Err(verbs_error(format!(
                "the cluster runs on the {} backend, not on verbs",
                c.backend_name()
            )))
        })?;
        Ok(h.0.clone())
    }

    /// This process's node in a multi-process cluster; `None` when all nodes are in this process.
    pub fn node(&self) -> Option<NodeId> {
        self.shared.me
    }

    /// Name of the RDMA device in use (e.g. `rxe0`).
    pub fn device(&self) -> &str {
        &self.shared.device.name
    }

    /// Whether the process of `node` is known to be dead (its rendezvous connection dropped
    /// without a goodbye), with what was observed.
    pub fn peer_error(&self, node: NodeId) -> Option<Error> {
        self.shared
            .peers
            .dead(node)
            .map(|reason| Error::PeerDead { node, reason })
    }

    /// Blocks until every process of the cluster has called `barrier` as many times as this one,
    /// over the rendezvous connections (not RDMA: it orders nothing the NICs do). Fails with
    /// [`Error::PeerDead`] if a process dies first, or [`Error::Timeout`] after the cluster's
    /// timeout.
    pub fn barrier(&self) -> Result<()> {
        let Some(me) = self.shared.me else {
            return Ok(());
        };
        let peers = &self.shared.peers;
        let epoch = peers.epoch.fetch_add(1, SeqCst) + 1;
        for i in 0..peers.nodes.len() {
            let node = NodeId(i as u16);
            if node != me {
                send(&self.shared, node, &Msg::Barrier { epoch })?;
            }
        }
        peers.wait_all(me, self.shared.timeout, "barrier", |p| {
            p.barrier.load(SeqCst) >= epoch
        })
    }
}

/// The listener and server threads of this process's rendezvous.
pub(crate) struct Session {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Server-side connections, shut down to end their threads.
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Session {
    /// Listens on this node's port, then joins every peer (retrying until the cluster's timeout
    /// while they start).
    pub(crate) fn start(shared: &Arc<Shared>, peers: &[String]) -> Result<Session> {
        let me = shared
            .me
            .expect("a session is only started for a multi-process cluster");
        let own = resolve(&peers[me.index()])?;
        let any: IpAddr = match own {
            SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let bind = SocketAddr::new(any, own.port());
        let listener = TcpListener::bind(bind).map_err(|e| Error::Backend {
            backend: "verbs",
            message: format!(
                "{me} cannot listen on {bind} for the rendezvous (port in use? LOCO_PEERS)"
            ),
            source: Some(e),
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| io_error("cannot configure the rendezvous listener", e))?;
        let session = Session {
            shared: shared.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Arc::new(Mutex::new(Vec::new())),
            conns: Arc::new(Mutex::new(Vec::new())),
        };
        let (sh, stop, threads, conns) = (
            shared.clone(),
            session.stop.clone(),
            session.threads.clone(),
            session.conns.clone(),
        );
        let accept = std::thread::Builder::new()
            .name(format!("loco-rendezvous-{me}"))
            .spawn(move || accept_loop(&sh, &listener, &stop, &threads, &conns))
            .map_err(|e| io_error("cannot start the rendezvous thread", e))?;
        session.threads.lock().push(accept);
        tracing::debug!(target: "loco::rdmawait", %me, %bind, "rendezvous listening");
        for (i, peer) in peers.iter().enumerate() {
            let node = NodeId(i as u16);
            if node != me {
                join(shared, node, peer)?;
            }
        }
        tracing::debug!(target: "loco::rdmawait", %me, "rendezvous complete");
        Ok(session)
    }

    /// Says bye to every peer, waits (up to the cluster's timeout) until every peer has said bye
    /// or died, then stops the rendezvous threads. Until then this process's memory stays
    /// registered for the peers still working on it.
    pub(crate) fn leave(self) {
        let shared = &self.shared;
        let me = shared.me.expect("multi-process cluster");
        for i in 0..shared.peers.nodes.len() {
            let node = NodeId(i as u16);
            if node != me && shared.peers.dead(node).is_none() {
                let _ = send(shared, node, &Msg::Bye);
            }
        }
        let r = shared.peers.wait_all(me, shared.timeout, "goodbye", |p| {
            p.bye.load(SeqCst) || p.dead.load(SeqCst)
        });
        if let Err(e) = r {
            tracing::warn!(target: "loco::rdmawait", %me, error = %e, "leaving without every peer's goodbye");
        }
        self.stop.store(true, SeqCst);
        for c in self.conns.lock().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        for p in &shared.peers.nodes {
            if let Some(c) = p.client.get() {
                let _ = c.lock().shutdown(Shutdown::Both);
            }
        }
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
        shared.peers.responders.lock().clear();
    }
}

/// Connects to `peer` (retrying while it starts), says hello and records its memory.
fn join(shared: &Shared, node: NodeId, peer: &str) -> Result<()> {
    let me = shared.me.expect("multi-process cluster");
    let addr = resolve(peer)?;
    let deadline = Instant::now() + shared.timeout;
    let mut stream = loop {
        match TcpStream::connect_timeout(&addr, CONNECT_ATTEMPT) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                tracing::trace!(target: "loco::rdmawait", %node, %addr, error = %e, "peer not up yet");
                std::thread::sleep(CONNECT_RETRY);
            }
            Err(e) => {
                return Err(Error::Backend {
                    backend: "verbs",
                    message: format!(
                        "{node} did not answer at {peer} within {:?}: is its process running \
                         with the same LOCO_PEERS?",
                        shared.timeout
                    ),
                    source: Some(e),
                })
            }
        }
    };
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(shared.timeout))?;
        s.set_write_timeout(Some(shared.timeout))
    };
    setup(&stream).map_err(|e| io_error("cannot configure a rendezvous connection", e))?;
    let info = shared.info(me)?;
    let hello = Msg::Hello {
        nodes: shared.infos.len() as u16,
        from: me.0,
        info,
    };
    let reply = write_msg(&mut stream, &hello)
        .and_then(|()| read_msg(&mut stream))
        .map_err(|e| Error::Backend {
            backend: "verbs",
            message: format!("rendezvous with {node} at {peer} failed"),
            source: Some(e),
        })?;
    match reply {
        Msg::Welcome { info } => {
            if shared.infos[node.index()].set(info).is_err()
                && shared.infos[node.index()].get() != Some(&info)
            {
                return Err(verbs_error(format!(
                    "{node} announced its memory twice, differently"
                )));
            }
        }
        Msg::Reject { reason } => {
            return Err(verbs_error(format!(
                "{node} at {peer} refused us: {reason}"
            )))
        }
        other => {
            return Err(verbs_error(format!(
                "{node} at {peer} answered hello with {other:?}"
            )))
        }
    }
    let _ = shared.peers.nodes[node.index()]
        .client
        .set(Mutex::new(stream));
    Ok(())
}

fn accept_loop(
    shared: &Arc<Shared>,
    listener: &TcpListener,
    stop: &Arc<AtomicBool>,
    threads: &Mutex<Vec<JoinHandle<()>>>,
    conns: &Mutex<Vec<TcpStream>>,
) {
    while !stop.load(SeqCst) {
        match listener.accept() {
            Ok((stream, from)) => {
                let ok = stream.set_nonblocking(false).is_ok() && stream.set_nodelay(true).is_ok();
                let Ok(clone) = stream.try_clone() else {
                    continue;
                };
                if !ok {
                    continue;
                }
                conns.lock().push(clone);
                let (sh, stop) = (shared.clone(), stop.clone());
                let spawned = std::thread::Builder::new()
                    .name("loco-rendezvous-conn".to_string())
                    .spawn(move || serve(&sh, stream, from, &stop));
                if let Ok(h) = spawned {
                    threads.lock().push(h);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Serves one peer's client connection until it closes.
fn serve(shared: &Arc<Shared>, mut stream: TcpStream, addr: SocketAddr, stop: &AtomicBool) {
    let me = shared.me.expect("multi-process cluster");
    let _ = stream.set_read_timeout(Some(shared.timeout));
    let _ = stream.set_write_timeout(Some(shared.timeout));
    let from = match read_msg(&mut stream) {
        Ok(Msg::Hello {
            nodes,
            from,
            info: _,
        }) => {
            let n = shared.infos.len();
            let reject = if nodes as usize != n {
                Some(format!(
                    "cluster size mismatch: {me} has {n} nodes, {addr} says {nodes}"
                ))
            } else if from as usize >= n || from == me.0 {
                Some(format!(
                    "{addr} claims node id n{from}, which is invalid or ours ({me})"
                ))
            } else if shared.peers.nodes[from as usize].joined.swap(true, SeqCst) {
                Some(format!(
                    "node n{from} already joined; two processes with LOCO_NODE_ID={from}?"
                ))
            } else {
                None
            };
            if let Some(reason) = reject {
                tracing::warn!(target: "loco::rdmawait", %addr, %reason, "rendezvous refused");
                let _ = write_msg(&mut stream, &Msg::Reject { reason });
                return;
            }
            let Ok(info) = shared.info(me) else { return };
            if write_msg(&mut stream, &Msg::Welcome { info }).is_err() {
                return;
            }
            NodeId(from)
        }
        _ => return,
    };
    let _ = stream.set_read_timeout(None);
    let peers = &shared.peers;
    let end = loop {
        let msg = match read_msg(&mut stream) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break "connection closed".into(),
            Err(e) => break e.to_string(),
        };
        match msg {
            Msg::Connect { endpoint } => {
                let reply = match responder(shared, from, &endpoint) {
                    Ok(ep) => Msg::Accepted { endpoint: ep },
                    Err(e) => Msg::Reject {
                        reason: e.to_string(),
                    },
                };
                if let Err(e) = write_msg(&mut stream, &reply) {
                    break e.to_string();
                }
            }
            Msg::Release { qpn } => {
                peers.responders.lock().remove(&(from.0, qpn));
            }
            Msg::Barrier { epoch } => {
                peers.nodes[from.index()].barrier.fetch_max(epoch, SeqCst);
                peers.notify();
            }
            Msg::Bye => {
                peers.nodes[from.index()].bye.store(true, SeqCst);
                peers.notify();
            }
            other => break format!("unexpected message {other:?}"),
        }
    };
    let departed = peers.nodes[from.index()].bye.load(SeqCst);
    if !departed && !stop.load(SeqCst) {
        peers.mark_dead(
            from,
            format!("its rendezvous connection ended without a goodbye ({end}): the process exited or was killed"),
        );
    }
    peers.responders.lock().retain(|(n, _), _| *n != from.0);
}

/// Creates, connects and keeps a responder queue pair for a thread of `from`.
fn responder(shared: &Shared, from: NodeId, remote: &Endpoint) -> Result<Endpoint> {
    let me = shared.me.expect("multi-process cluster");
    let home = shared.local(me).expect("this process's node is local");
    let device = &shared.device;
    let (mut qp, _) = qp::create(device, &home.pd, &home.responder_cq, 1)?;
    let local = qp::endpoint(device, &qp, qp::random_psn());
    qp::connect(device, &mut qp, &local, remote, shared.transport)?;
    shared
        .peers
        .responders
        .lock()
        .insert((from.0, local.qpn), qp);
    Ok(local)
}

/// Asks `target`'s process for a responder queue pair connected to `local`.
pub(crate) fn connect_qp(shared: &Shared, target: NodeId, local: &Endpoint) -> Result<Endpoint> {
    let reply = request(shared, target, &Msg::Connect { endpoint: *local })?;
    match reply {
        Msg::Accepted { endpoint } => Ok(endpoint),
        Msg::Reject { reason } => Err(verbs_error(format!(
            "{target} could not connect a queue pair: {reason}"
        ))),
        other => Err(verbs_error(format!(
            "{target} answered a connect request with {other:?}"
        ))),
    }
}

/// Tells `target`'s process that our queue pair `qpn`'s responder is no longer needed.
pub(crate) fn release_qp(shared: &Shared, target: NodeId, qpn: u32) {
    if shared.peers.dead(target).is_none() {
        let _ = send(shared, target, &Msg::Release { qpn });
    }
}

fn client(shared: &Shared, target: NodeId) -> Result<&Mutex<TcpStream>> {
    if let Some(reason) = shared.peers.dead(target) {
        return Err(Error::PeerDead {
            node: target,
            reason,
        });
    }
    shared
        .peers
        .nodes
        .get(target.index())
        .and_then(|p| p.client.get())
        .ok_or_else(|| verbs_error(format!("no rendezvous connection to {target}")))
}

/// Sends a message that has no reply.
fn send(shared: &Shared, target: NodeId, msg: &Msg) -> Result<()> {
    let c = client(shared, target)?;
    let r = write_msg(&mut *c.lock(), msg);
    r.map_err(|e| lost(shared, target, &e))
}

/// Sends a request and reads its reply.
fn request(shared: &Shared, target: NodeId, msg: &Msg) -> Result<Msg> {
    let c = client(shared, target)?;
    let mut s = c.lock();
    let r = write_msg(&mut *s, msg).and_then(|()| read_msg(&mut *s));
    r.map_err(|e| lost(shared, target, &e))
}

/// A rendezvous connection failed: the peer is taken for dead.
fn lost(shared: &Shared, target: NodeId, e: &io::Error) -> Error {
    let reason = format!("its rendezvous connection failed: {e}");
    shared.peers.mark_dead(target, reason.clone());
    Error::PeerDead {
        node: target,
        reason,
    }
}

fn io_error(message: &str, e: io::Error) -> Error {
    Error::Backend {
        backend: "verbs",
        message: message.to_string(),
        source: Some(e),
    }
}

// ----- wire format -----

#[derive(Debug, Clone, PartialEq, Eq)]
enum Msg {
    Hello {
        nodes: u16,
        from: u16,
        info: NodeInfo,
    },
    Welcome {
        info: NodeInfo,
    },
    Reject {
        reason: String,
    },
    Connect {
        endpoint: Endpoint,
    },
    Accepted {
        endpoint: Endpoint,
    },
    Release {
        qpn: u32,
    },
    Barrier {
        epoch: u64,
    },
    Bye,
}

fn write_msg(w: &mut impl Write, msg: &Msg) -> io::Result<()> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&[0; 4]);
    match msg {
        Msg::Hello { nodes, from, info } => {
            b.push(1);
            b.extend_from_slice(&MAGIC.to_le_bytes());
            b.extend_from_slice(&VERSION.to_le_bytes());
            b.extend_from_slice(&nodes.to_le_bytes());
            b.extend_from_slice(&from.to_le_bytes());
            put_info(&mut b, info);
        }
        Msg::Welcome { info } => {
            b.push(2);
            put_info(&mut b, info);
        }
        Msg::Reject { reason } => {
            b.push(3);
            let r = reason.as_bytes();
            let r = &r[..r.len().min(MAX_FRAME as usize / 2)];
            b.extend_from_slice(r);
        }
        Msg::Connect { endpoint } => {
            b.push(4);
            put_endpoint(&mut b, endpoint);
        }
        Msg::Accepted { endpoint } => {
            b.push(5);
            put_endpoint(&mut b, endpoint);
        }
        Msg::Release { qpn } => {
            b.push(6);
            b.extend_from_slice(&qpn.to_le_bytes());
        }
        Msg::Barrier { epoch } => {
            b.push(7);
            b.extend_from_slice(&epoch.to_le_bytes());
        }
        Msg::Bye => b.push(8),
    }
    let len = (b.len() - 4) as u32;
    b[..4].copy_from_slice(&len.to_le_bytes());
    w.write_all(&b)?;
    w.flush()
}

fn read_msg(r: &mut impl Read) -> io::Result<Msg> {
    let mut len = [0; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len == 0 || len > MAX_FRAME {
        return Err(bad(format!("bad frame length {len}")));
    }
    let mut body = vec![0; len as usize];
    r.read_exact(&mut body)?;
    let mut c = Cursor(&body[1..]);
    let msg = match body[0] {
        1 => {
            let magic = c.u32()?;
            let version = c.u16()?;
            if magic != MAGIC || version != VERSION {
                return Err(bad(format!(
                    "not a loco rendezvous peer, or another version (magic {magic:#x}, version {version})"
                )));
            }
            Msg::Hello {
                nodes: c.u16()?,
                from: c.u16()?,
                info: c.info()?,
            }
        }
        2 => Msg::Welcome { info: c.info()? },
        3 => Msg::Reject {
            reason: String::from_utf8_lossy(c.0).into_owned(),
        },
        4 => Msg::Connect {
            endpoint: c.endpoint()?,
        },
        5 => Msg::Accepted {
            endpoint: c.endpoint()?,
        },
        6 => Msg::Release { qpn: c.u32()? },
        7 => Msg::Barrier { epoch: c.u64()? },
        8 => Msg::Bye,
        t => return Err(bad(format!("unknown message tag {t}"))),
    };
    Ok(msg)
}

fn put_info(b: &mut Vec<u8>, i: &NodeInfo) {
    b.extend_from_slice(&i.addr.to_le_bytes());
    b.extend_from_slice(&i.rkey.to_le_bytes());
    b.extend_from_slice(&i.words.to_le_bytes());
}

fn put_endpoint(b: &mut Vec<u8>, e: &Endpoint) {
    b.extend_from_slice(&e.qpn.to_le_bytes());
    b.extend_from_slice(&e.psn.to_le_bytes());
    b.extend_from_slice(&e.lid.to_le_bytes());
    b.extend_from_slice(&e.gid);
    b.push(e.mtu);
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        if self.0.len() < N {
            return Err(bad("truncated message".to_string()));
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("split at N"))
    }

    fn u16(&mut self) -> io::Result<u16> {
        self.take().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> io::Result<u32> {
        self.take().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> io::Result<u64> {
        self.take().map(u64::from_le_bytes)
    }

    fn info(&mut self) -> io::Result<NodeInfo> {
        Ok(NodeInfo {
            addr: self.u64()?,
            rkey: self.u32()?,
            words: self.u64()?,
        })
    }

    fn endpoint(&mut self) -> io::Result<Endpoint> {
        Ok(Endpoint {
            qpn: self.u32()?,
            psn: self.u32()?,
            lid: self.u16()?,
            gid: self.take()?,
            mtu: {
                let [m] = self.take()?;
                m
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let info = NodeInfo {
            addr: 0x7f00_dead_b000,
            rkey: 0x1234,
            words: 1 << 17,
        };
        let endpoint = Endpoint {
            qpn: 17,
            psn: 0xabcdef,
            lid: 3,
            gid: [7; 16],
            mtu: 5,
        };
        for m in [
            Msg::Hello {
                nodes: 3,
                from: 2,
                info,
            },
            Msg::Welcome { info },
            Msg::Reject {
                reason: "no".into(),
            },
            Msg::Connect { endpoint },
            Msg::Accepted { endpoint },
            Msg::Release { qpn: 9 },
            Msg::Barrier { epoch: 4 },
            Msg::Bye,
        ] {
            let mut buf = Vec::new();
            write_msg(&mut buf, &m).unwrap();
            assert_eq!(read_msg(&mut &buf[..]).unwrap(), m);
        }
    }

    #[test]
    fn garbage_is_refused() {
        assert!(read_msg(&mut &[0u8, 0, 0, 0][..]).is_err());
        assert!(read_msg(&mut &[1u8, 0, 0, 0, 99][..]).is_err());
        assert!(read_msg(&mut &[255u8, 255, 255, 255][..]).is_err());
        let mut hello = Vec::new();
        write_msg(
            &mut hello,
            &Msg::Hello {
                nodes: 1,
                from: 0,
                info: NodeInfo {
                    addr: 0,
                    rkey: 0,
                    words: 0,
                },
            },
        )
        .unwrap();
        hello[5] ^= 0xff; // corrupt the magic
        assert!(read_msg(&mut &hello[..]).is_err());
    }
}
