//! The session of a cluster spanning processes: each process is one node, joined to the others
//! over the authenticated TCP rendezvous (`crate::backend::rendezvous`: wire format, handshake,
//! listener, per-peer state), which then carries queue pair requests, barriers and heartbeats.
//!
//! Failure detection: every process sends a `Ping` on its connection to each peer every
//! `peer_timeout / 5`; a peer whose connection ends without `Bye`, or on which nothing arrives
//! for `peer_timeout` (power-off, a stopped process, dropped packets: no FIN needed), is marked
//! dead for good. From then on every thread's next operation (or current wait) towards it, and
//! every barrier, fails with [`Error::PeerDead`] naming it; operations towards other nodes go on.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::qp::{self, Endpoint};
use super::{resolve, verbs_error, ProcessHandle, Shared};
use crate::backend::rendezvous::auth::ClusterKey;
use crate::backend::rendezvous::gate::{self, Gate, GateConfig};
use crate::backend::rendezvous::peers::Peers;
use crate::backend::rendezvous::wire::{read_msg, write_msg, Msg};
use crate::{Cluster, Error, NodeId, Result};

/// Connections in the handshake at once (strangers beyond it are closed at once).
const MAX_PENDING: usize = 32;
/// Longest a handshake may take (a silent stranger is dropped after it).
const MAX_HANDSHAKE: Duration = Duration::from_secs(10);
/// Responder queue pairs one peer may hold here (its threads × nodes; refused beyond).
const MAX_RESPONDERS_PER_PEER: usize = 4096;

/// Responder queue pairs serving other processes' threads, by (their node, our QPN).
pub(crate) type Responders = Mutex<HashMap<(u16, u32), qp::Qp>>;

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
    /// without a goodbye, or went silent for the peer timeout), with what was observed.
    pub fn peer_error(&self, node: NodeId) -> Option<Error> {
        self.shared
            .peers
            .dead(node)
            .map(|reason| Error::PeerDead { node, reason })
    }

    /// Blocks until every process of the cluster has called `barrier` as many times as this one,
    /// over the rendezvous connections (not RDMA: it orders nothing the NICs do). Fails with
    /// [`Error::PeerDead`] if a process dies first (within the peer timeout), or
    /// [`Error::Timeout`] after the cluster's timeout.
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

/// The listener, the heartbeat thread and the joined connections of this process.
pub(crate) struct Session {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    gate: Option<Gate>,
    heartbeat: Option<JoinHandle<()>>,
}

/// How the session authenticates and watches its peers.
pub(crate) struct SessionConfig {
    pub(crate) key: ClusterKey,
    pub(crate) peer_timeout: Duration,
}

impl Session {
    /// Listens on this node's own address from the peer list, then joins every peer (retrying
    /// until the cluster's timeout while they start). On failure everything started is stopped
    /// again (port, threads), before the error is returned.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        peers: &[String],
        config: SessionConfig,
    ) -> Result<Session> {
        let me = shared
            .me
            .ok_or_else(|| verbs_error("a session needs this process's node id"))?;
        let own = resolve(&peers[me.index()])?;
        let nodes = shared.infos.len() as u16;
        let stop = Arc::new(AtomicBool::new(false));
        let gate_config = GateConfig {
            me: me.0,
            nodes,
            key: config.key.clone(),
            handshake_timeout: shared.timeout.min(MAX_HANDSHAKE),
            max_pending: MAX_PENDING,
        };
        let (sh, st) = (shared.clone(), stop.clone());
        let peer_timeout = config.peer_timeout;
        let on_join = Box::new(move |stream: TcpStream, from: u16| {
            serve(&sh, stream, NodeId(from), peer_timeout, &st);
        });
        let gate = Gate::start(own, gate_config, on_join).map_err(|e| Error::Backend {
            backend: "verbs",
            message: format!(
                "{me} cannot listen on {own} for the rendezvous (port in use? is {own} an \
                 address of this host? LOCO_PEERS)"
            ),
            source: Some(e),
        })?;
        let mut session = Session {
            shared: shared.clone(),
            stop: stop.clone(),
            gate: Some(gate),
            heartbeat: None,
        };
        let (sh, st) = (shared.clone(), stop.clone());
        let hb = std::thread::Builder::new()
            .name(format!("loco-heartbeat-{me}"))
            .spawn(move || heartbeat(&sh, peer_timeout, &st))
            .map_err(|e| io_error("cannot start the heartbeat thread", e))?;
        session.heartbeat = Some(hb);
        let listening = session.gate.as_ref().map(Gate::addr);
        tracing::debug!(target: "loco::rdmawait", %me, ?listening, "rendezvous listening");
        for (i, peer) in peers.iter().enumerate() {
            let node = NodeId(i as u16);
            if node != me {
                join(shared, &config.key, node, peer)?; // `session` drops: all stopped
            }
        }
        tracing::debug!(target: "loco::rdmawait", %me, "rendezvous complete");
        Ok(session)
    }

    /// Says bye to every peer, waits (up to the cluster's timeout) until every peer has said bye
    /// or died, then stops the rendezvous threads. Until then this process's memory stays
    /// registered for the peers still working on it.
    pub(crate) fn leave(mut self) {
        let shared = &self.shared;
        let Some(me) = shared.me else { return };
        for i in 0..shared.peers.nodes.len() {
            let node = NodeId(i as u16);
            if node != me && shared.peers.dead(node).is_none() {
                let _ = send(shared, node, &Msg::Bye);
            }
        }
        let r = shared.peers.wait_all(me, shared.timeout, "goodbye", |p| {
            p.bye.load(SeqCst) || Peers::is_dead(p)
        });
        if let Err(e) = r {
            tracing::warn!(target: "loco::rdmawait", %me, error = %e, "leaving without every peer's goodbye");
        }
        self.stop_all();
    }

    fn stop_all(&mut self) {
        self.stop.store(true, SeqCst);
        for p in &self.shared.peers.nodes {
            if let Some(c) = p.closer.get() {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
        if let Some(g) = self.gate.take() {
            g.stop();
        }
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
        self.shared.responders.lock().clear();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Connects to `peer`'s listener (retrying while it starts), proves the key, checks its proof,
/// then exchanges memory.
fn join(shared: &Shared, key: &ClusterKey, node: NodeId, peer: &str) -> Result<()> {
    let me = shared
        .me
        .ok_or_else(|| verbs_error("a session needs this process's node id"))?;
    let addr = resolve(peer)?;
    let deadline = Instant::now() + shared.timeout;
    let nodes = shared.infos.len() as u16;
    let failed = |e: io::Error| {
        let message = match e.kind() {
            io::ErrorKind::PermissionDenied => format!(
                "rendezvous with {node} at {peer} failed authentication: {e} (every process \
                 needs the same LOCO_CLUSTER_KEY)"
            ),
            io::ErrorKind::InvalidData => {
                format!("rendezvous with {node} at {peer} failed: it broke the protocol: {e}")
            }
            _ => format!(
                "{node} did not answer at {peer} within {:?}: is its process running with the \
                 same LOCO_PEERS?",
                shared.timeout
            ),
        };
        Error::Backend {
            backend: "verbs",
            message,
            source: Some(e),
        }
    };
    let mut stream =
        gate::dial(addr, deadline, key, nodes, me.0, node.0, shared.timeout).map_err(failed)?;
    let info = shared.info(me)?;
    let reply = write_msg(&mut stream, &Msg::Join { info })
        .and_then(|()| read_msg(&mut stream))
        .map_err(|e| Error::Backend {
            backend: "verbs",
            message: format!("rendezvous with {node} at {peer} failed"),
            source: Some(e),
        })?;
    match reply {
        Msg::Welcome { info: theirs } => record_info(shared, node, theirs, info.words)
            .map_err(|r| verbs_error(format!("{node} at {peer}: {r}")))?,
        Msg::Reject { reason } => {
            return Err(verbs_error(format!(
                "{node} at {peer} refused us: {reason}"
            )))
        }
        other => {
            return Err(verbs_error(format!(
                "{node} at {peer} answered Join with {}",
                other.name()
            )))
        }
    }
    let closer = stream
        .try_clone()
        .map_err(|e| io_error("cannot configure a rendezvous connection", e))?;
    let p = &shared.peers.nodes[node.index()];
    let _ = p.closer.set(closer);
    let _ = p.client.set(Mutex::new(stream));
    Ok(())
}

/// Checks and records the memory `node` announced: the size every process of the cluster
/// registers (`ours`), and the same announcement on both connections.
fn record_info(
    shared: &Shared,
    node: NodeId,
    info: super::NodeInfo,
    ours: u64,
) -> std::result::Result<(), String> {
    if info.words != ours {
        return Err(format!(
            "it registered {} words per node, this process {ours}: give every process the same \
             memory_per_node",
            info.words
        ));
    }
    let slot = &shared.infos[node.index()];
    if slot.set(info).is_err() && slot.get() != Some(&info) {
        return Err("it announced its memory twice, differently".to_string());
    }
    Ok(())
}

/// Serves a peer's authenticated connection: its `Join`, then its requests, until it ends.
fn serve(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    from: NodeId,
    peer_timeout: Duration,
    stop: &AtomicBool,
) {
    let Some(me) = shared.me else { return };
    let peers = &shared.peers;
    let Ok(ours) = shared.info(me) else { return };
    let info = match read_msg(&mut stream) {
        Ok(Msg::Join { info }) => info,
        _ => return, // it left before joining: nothing happened
    };
    let refuse = |stream: &mut TcpStream, reason: String| {
        tracing::warn!(target: "loco::rdmawait", %from, %reason, "rendezvous join refused");
        let _ = write_msg(stream, &Msg::reject(reason));
    };
    if peers.nodes[from.index()].joined.load(SeqCst) {
        // No side effect: the joined connection stays as it is.
        return refuse(
            &mut stream,
            format!(
                "{from} already joined; two processes with LOCO_NODE_ID={}?",
                from.0
            ),
        );
    }
    if let Err(r) = record_info(shared, from, info, ours.words) {
        return refuse(&mut stream, r);
    }
    if peers.nodes[from.index()].joined.swap(true, SeqCst) {
        return refuse(&mut stream, format!("{from} already joined"));
    }
    if write_msg(&mut stream, &Msg::Welcome { info: ours }).is_err() {
        peers.mark_dead(from, "its connection failed while joining".to_string());
        return;
    }
    // From here on, silence for `peer_timeout` means the peer is dead or cut off.
    let _ = stream.set_read_timeout(Some(peer_timeout));
    let _ = stream.set_write_timeout(Some(shared.timeout));
    let end = loop {
        let msg = match read_msg(&mut stream) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                break "its rendezvous connection ended without a goodbye: the process exited or \
                       was killed"
                    .to_string()
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break format!(
                    "no heartbeat for {peer_timeout:?} (LOCO_PEER_TIMEOUT_MS): its process is \
                     stopped or hung, its host is down, or the network is partitioned"
                )
            }
            Err(e) => break format!("its rendezvous connection failed: {e}"),
        };
        match msg {
            Msg::Ping => {}
            Msg::Connect { endpoint } => {
                let reply = match responder(shared, from, &endpoint) {
                    Ok(ep) => Msg::Accepted { endpoint: ep },
                    Err(e) => Msg::reject(e.to_string()),
                };
                if let Err(e) = write_msg(&mut stream, &reply) {
                    break format!("its rendezvous connection failed: {e}");
                }
            }
            Msg::Release { qpn } => {
                shared.responders.lock().remove(&(from.0, qpn));
            }
            Msg::Barrier { epoch } => {
                if let Err(r) = peers.barrier(from, epoch) {
                    break r;
                }
            }
            Msg::Bye => {
                peers.nodes[from.index()].bye.store(true, SeqCst);
                peers.notify();
            }
            other => break format!("it sent {} (protocol violation)", other.name()),
        }
    };
    let departed = peers.nodes[from.index()].bye.load(SeqCst);
    if !departed && !stop.load(SeqCst) {
        peers.mark_dead(from, end);
    }
    shared.responders.lock().retain(|(n, _), _| *n != from.0);
}

/// Sends a `Ping` to every live peer every `peer_timeout / 5` until `stop`.
fn heartbeat(shared: &Shared, peer_timeout: Duration, stop: &AtomicBool) {
    let every = (peer_timeout / 5).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let Some(me) = shared.me else { return };
    let mut next = Instant::now();
    while !stop.load(SeqCst) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(20)));
            continue;
        }
        next = now + every;
        for (i, p) in shared.peers.nodes.iter().enumerate() {
            let node = NodeId(i as u16);
            if node == me || Peers::is_dead(p) {
                continue;
            }
            let Some(c) = p.client.get() else { continue };
            // A request in flight holds the connection: its traffic is the heartbeat.
            let Some(mut s) = c.try_lock() else { continue };
            if let Err(e) = write_msg(&mut *s, &Msg::Ping) {
                drop(s);
                let _ = lost(shared, node, &e);
            }
        }
    }
}

/// Creates, connects and keeps a responder queue pair for a thread of `from`.
fn responder(shared: &Shared, from: NodeId, remote: &Endpoint) -> Result<Endpoint> {
    let me = shared
        .me
        .ok_or_else(|| verbs_error("a session needs this process's node id"))?;
    let held = shared
        .responders
        .lock()
        .keys()
        .filter(|(n, _)| *n == from.0)
        .count();
    if held >= MAX_RESPONDERS_PER_PEER {
        return Err(verbs_error(format!(
            "{from} already holds {held} queue pairs here"
        )));
    }
    let home = shared
        .local(me)
        .ok_or_else(|| verbs_error("this process's node is not local"))?;
    let device = &shared.device;
    let (mut qp, _) = qp::create(device, home, &home.responder_cq, 1)?;
    let local = qp::endpoint(device, &qp, qp::random_psn());
    qp::connect(device, &mut qp, &local, remote, shared.transport)?;
    shared.responders.lock().insert((from.0, local.qpn), qp);
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
            "{target} answered a connect request with {}",
            other.name()
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

/// Sends a request and reads its reply (skipping nothing: the server sends only replies).
fn request(shared: &Shared, target: NodeId, msg: &Msg) -> Result<Msg> {
    let c = client(shared, target)?;
    let mut s = c.lock();
    let r = write_msg(&mut *s, msg).and_then(|()| read_msg(&mut *s));
    r.map_err(|e| lost(shared, target, &e))
}

/// A rendezvous connection failed: the peer is taken for dead (unless it was already, for
/// another reason, which then stays).
fn lost(shared: &Shared, target: NodeId, e: &io::Error) -> Error {
    shared
        .peers
        .mark_dead(target, format!("its rendezvous connection failed: {e}"));
    Error::PeerDead {
        node: target,
        reason: shared.peers.dead(target).unwrap_or_default(),
    }
}

fn io_error(message: &str, e: io::Error) -> Error {
    Error::Backend {
        backend: "verbs",
        message: message.to_string(),
        source: Some(e),
    }
}

/// Whether every address of the peer list is a loopback address (a cluster confined to this
/// host, where running without a key is tolerated).
pub(crate) fn all_loopback(peers: &[String]) -> bool {
    peers
        .iter()
        .all(|p| resolve(p).is_ok_and(|a: SocketAddr| a.ip().is_loopback()))
}
