//! The session of a cluster spanning processes: each process is one node, joined to the others
//! over the authenticated TCP rendezvous (`crate::backend::rendezvous`: wire format, handshake,
//! listener, per-peer state), which then carries queue pair requests, barriers and heartbeats.
//!
//! Failure detection: every process sends a `Ping` on its connection to each peer every
//! `peer_timeout / 5`; a peer whose connection ends without `Bye`, or on which nothing arrives
//! for `peer_timeout` (power-off, a stopped process, dropped packets: no FIN needed), is marked
//! dead. From then on every thread's next operation (or current wait) towards it, and every
//! barrier, fails with [`Error::PeerDead`] naming it; operations towards other nodes go on.
//!
//! Fencing: when a peer is declared dead, our connections with it are shut down and the
//! responder queue pairs serving its threads are destroyed, so that a process declared dead
//! but still running (a healed partition, SIGSTOP then SIGCONT) can no longer read or write
//! this process's memory: the lock recovery above relies on a dead node staying silent.
//!
//! Rejoin: a restarted process comes back under its node id with a new incarnation
//! (`rendezvous::peers`). Once its previous incarnation is declared dead here, its join is
//! admitted: its new memory is recorded, and this process dials it back (its old connection
//! died with it); when that connection has joined too, the node is alive again. Thread NICs
//! opened before keep failing towards it with `PeerDead` (their queue pairs led to the dead
//! incarnation); contexts opened afterwards reach the new one.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::cm;
use super::qp::{self, Endpoint};
use super::{resolve, verbs_error, NodeInfo, ProcessHandle, Shared};
use crate::backend::rendezvous::auth::ClusterKey;
use crate::backend::rendezvous::cmdata;
use crate::backend::rendezvous::gate::{self, Dial, Gate, GateConfig};
use crate::backend::rendezvous::peers::{Admit, Client, Peers};
use crate::backend::rendezvous::wire::{read_msg, write_msg, Msg};
use crate::{Cluster, Error, NodeId, Result};
use sideway::ibverbs::queue_pair::QueuePair;

/// Connections in the handshake at once (strangers beyond it are closed at once).
const MAX_PENDING: usize = 32;
/// Longest a handshake may take (a silent stranger is dropped after it).
const MAX_HANDSHAKE: Duration = Duration::from_secs(10);
/// Responder queue pairs one peer may hold here (its threads × nodes; refused beyond).
const MAX_RESPONDERS_PER_PEER: usize = 4096;
/// Pause before a join refused for now (`Retry`) is tried again.
const RETRY_JOIN: Duration = Duration::from_millis(100);

/// How long a join refused for now (`Retry`: the peer still sees an earlier incarnation of us
/// alive) is tried again: the peer declares that incarnation dead within its peer timeout, so
/// twice ours and a second of slack. Past that, another live process holds our node id.
fn retry_for(peer_timeout: Duration) -> Duration {
    peer_timeout
        .saturating_mul(2)
        .saturating_add(Duration::from_secs(1))
}

/// `now + timeout`, capped at a year from now: a [`Duration::MAX`] timeout (documented as "no
/// timeout") must not overflow [`Instant`].
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
    Instant::now() + timeout.min(FAR)
}

/// Responder queue pairs serving other processes' threads, by (their node, its incarnation, our
/// QPN).
pub(crate) type Responders = Mutex<HashMap<(u16, u64, u32), Responder>>;

/// A responder queue pair, and under rdma_cm the connection that connected it.
pub(crate) struct Responder {
    // Dropped in this order: the queue pair stops, then the connection ends.
    _qp: qp::Qp,
    _cm: Option<cm::Id>,
}

/// Removes the responders `which` selects, and destroys them after the lock is released:
/// destroying an rdma_cm identifier may wait for the listener thread, which takes the lock.
fn remove_responders(shared: &Shared, which: impl Fn(&(u16, u64, u32)) -> bool) {
    let gone: Vec<Responder> = {
        let mut r = shared.responders.lock();
        let keys: Vec<_> = r.keys().filter(|k| which(k)).copied().collect();
        keys.iter().filter_map(|k| r.remove(k)).collect()
    };
    drop(gone);
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
    /// The rdma_cm listener (bootstrap `rdma_cm` only).
    cm: Option<CmListener>,
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
            incarnation: shared.incarnation,
            nodes,
            key: config.key.clone(),
            handshake_timeout: shared.timeout.min(MAX_HANDSHAKE),
            max_pending: MAX_PENDING,
        };
        // Under rdma_cm, the listener runs before any peer can have joined us (and so before
        // any of them connects a queue pair).
        let cm = match &shared.cm {
            Some(c) => Some(CmListener::start(shared, c.addrs[me.index()])?),
            None => None,
        };
        let (sh, st) = (shared.clone(), stop.clone());
        let peer_timeout = config.peer_timeout;
        let redial = Arc::new(Redial {
            key: config.key.clone(),
            peers: peers.to_vec(),
            peer_timeout,
        });
        let on_join = Box::new(move |stream: TcpStream, from: u16, inc: u64| {
            serve(&sh, stream, NodeId(from), inc, peer_timeout, &st, &redial);
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
            cm,
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
                // On error, `session` drops: all stopped.
                join(
                    shared,
                    &config.key,
                    node,
                    peer,
                    None,
                    retry_for(peer_timeout),
                )?;
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
        self.shared.peers.shutdown_all();
        if let Some(g) = self.gate.take() {
            g.stop();
        }
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
        if let Some(l) = self.cm.take() {
            l.stop();
        }
        remove_responders(&self.shared, |_| true);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// What a rendezvous thread needs to dial a rejoined peer back.
struct Redial {
    key: ClusterKey,
    peers: Vec<String>,
    peer_timeout: Duration,
}

/// Connects to `peer`'s listener (retrying while it starts, or while it has not declared our
/// previous incarnation dead yet), proves the key, checks its proof, then exchanges memory and
/// keeps the connection as our client connection to `node`. `rejoin`: the incarnation of
/// `node` that rejoined us, which must be the one that answers (we dial it back). `retry_for`:
/// how long a `Retry` answer is tried again (see [`retry_for`]).
fn join(
    shared: &Shared,
    key: &ClusterKey,
    node: NodeId,
    peer: &str,
    rejoin: Option<u64>,
    retry_for: Duration,
) -> Result<()> {
    let me = shared
        .me
        .ok_or_else(|| verbs_error("a session needs this process's node id"))?;
    let addr = resolve(peer)?;
    let deadline = deadline_after(shared.timeout);
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
    let info = shared.advertised(me)?;
    let dial = Dial {
        nodes,
        from: me.0,
        to: node.0,
        incarnation: shared.incarnation,
    };
    let mut first_retry: Option<Instant> = None;
    let (stream, theirs) = loop {
        let (mut stream, theirs) =
            gate::dial(addr, deadline, key, dial, shared.timeout).map_err(failed)?;
        let reply = write_msg(&mut stream, &Msg::Join { info })
            .and_then(|()| read_msg(&mut stream))
            .map_err(|e| Error::Backend {
                backend: "verbs",
                message: format!("rendezvous with {node} at {peer} failed"),
                source: Some(e),
            })?;
        match reply {
            Msg::Welcome {
                info: their_info,
                epoch,
            } => {
                shared
                    .same_bootstrap(node, &their_info)
                    .map_err(|r| verbs_error(format!("{node} at {peer}: {r}")))?;
                if rejoin.is_some_and(|r| r != theirs) {
                    return Err(verbs_error(format!(
                        "{node} at {peer} answered as incarnation {theirs:#x}, not as the one \
                         that rejoined"
                    )));
                }
                shared
                    .peers
                    .learn(node, theirs, their_info, info.words)
                    .map_err(|r| verbs_error(format!("{node} at {peer}: {r}")))?;
                if rejoin.is_none() && epoch > 0 {
                    // We are a restarted process: barrier counts continue from the peer's (it
                    // passed barriers already, and counts ours from its own).
                    let p = &shared.peers.nodes[node.index()];
                    p.barrier.fetch_max(epoch, SeqCst);
                    shared.peers.epoch.fetch_max(epoch, SeqCst);
                }
                break (stream, theirs);
            }
            Msg::Retry { reason }
                if Instant::now() < deadline
                    && first_retry.get_or_insert_with(Instant::now).elapsed() < retry_for =>
            {
                tracing::debug!(target: "loco::rdmawait", %node, %reason, "join refused for now; retrying");
                std::thread::sleep(RETRY_JOIN);
            }
            Msg::Retry { reason } | Msg::Reject { reason } => {
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
    };
    let client = Client::new(theirs, stream)
        .map_err(|e| io_error("cannot configure a rendezvous connection", e))?;
    shared
        .peers
        .set_client(node, client)
        .map_err(|r| verbs_error(format!("{node} at {peer}: {r}")))
}

/// Serves a peer's authenticated connection: its `Join`, then its requests, until it ends.
/// A join of a new incarnation (a restarted process) is admitted once the previous one is
/// declared dead here; we then dial it back before it counts as alive.
fn serve(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    from: NodeId,
    inc: u64,
    peer_timeout: Duration,
    stop: &AtomicBool,
    redial: &Redial,
) {
    let Some(me) = shared.me else { return };
    let peers = &shared.peers;
    let Ok(ours) = shared.advertised(me) else {
        return;
    };
    let info = match read_msg(&mut stream) {
        Ok(Msg::Join { info }) => info,
        _ => return, // it left before joining: nothing happened
    };
    let refuse = |stream: &mut TcpStream, msg: Msg, reason: &str| {
        tracing::warn!(target: "loco::rdmawait", %from, incarnation = inc, %reason, "rendezvous join refused");
        let _ = write_msg(stream, &msg);
    };
    if let Err(r) = shared.same_bootstrap(from, &info) {
        return refuse(&mut stream, Msg::reject(r.clone()), &r);
    }
    let admit = peers.admit(from, inc, info, ours.words);
    let rejoin = match admit {
        Admit::Join => false,
        Admit::Rejoin { old } => {
            // Nothing of the dead incarnation may reach our memory any more.
            fence(shared, from, old);
            true
        }
        // No side effect: a joined connection stays as it is.
        Admit::Refuse(r) => return refuse(&mut stream, Msg::reject(r.clone()), &r),
        Admit::Retry(r) => return refuse(&mut stream, Msg::retry(r.clone()), &r),
    };
    if let Ok(c) = stream.try_clone() {
        peers.set_server(from, inc, c);
    }
    // A restarted process continues from our barrier count; at the first start every process
    // counts from 0 (and barriers may already be on their way: nothing is adopted).
    let epoch = if rejoin { peers.epoch.load(SeqCst) } else { 0 };
    if write_msg(&mut stream, &Msg::Welcome { info: ours, epoch }).is_err() {
        peers.mark_dead_of(from, inc, "its connection failed while joining".to_string());
        fence(shared, from, inc);
        return;
    }
    if rejoin {
        // Its old connection from us died with it: dial the new incarnation back.
        let peer = redial.peers.get(from.index()).map_or("", String::as_str);
        let retry = retry_for(redial.peer_timeout);
        match join(shared, &redial.key, from, peer, Some(inc), retry) {
            Ok(()) => {
                peers.rejoined(from, inc, epoch);
            }
            Err(e) => {
                peers.mark_dead_of(
                    from,
                    inc,
                    format!("it restarted, but dialing it back failed: {e}"),
                );
                fence(shared, from, inc);
                return;
            }
        }
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
                let reply = match responder(shared, from, inc, &endpoint) {
                    Ok(ep) => Msg::Accepted { endpoint: ep },
                    Err(e) => Msg::reject(e.to_string()),
                };
                if let Err(e) = write_msg(&mut stream, &reply) {
                    break format!("its rendezvous connection failed: {e}");
                }
            }
            Msg::Release { qpn } => {
                remove_responders(shared, |k| *k == (from.0, inc, qpn));
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
        peers.mark_dead_of(from, inc, end);
    }
    fence(shared, from, inc);
}

/// Fences incarnation `inc` of `node` out of this process's memory: destroys the responder
/// queue pairs serving its threads (its requests then fail; nothing more lands here).
fn fence(shared: &Shared, node: NodeId, inc: u64) {
    remove_responders(shared, |(n, i, _)| *n == node.0 && *i == inc);
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
            let Some(c) = shared.peers.client(node) else {
                continue;
            };
            // A request in flight holds the connection: its traffic is the heartbeat.
            let Some(mut s) = c.stream.try_lock() else {
                continue;
            };
            if let Err(e) = write_msg(&mut *s, &Msg::Ping) {
                drop(s);
                let _ = lost(shared, node, &c, &e);
            }
        }
    }
}

/// Whether `from` may have one more responder queue pair here (at most
/// [`MAX_RESPONDERS_PER_PEER`]); the error says how many it holds.
fn responder_room(shared: &Shared, from: NodeId) -> std::result::Result<(), String> {
    let held = shared
        .responders
        .lock()
        .keys()
        .filter(|(n, _, _)| *n == from.0)
        .count();
    if held >= MAX_RESPONDERS_PER_PEER {
        return Err(format!("{from} already holds {held} queue pairs here"));
    }
    Ok(())
}

/// Creates, connects and keeps a responder queue pair for a thread of `from`'s incarnation
/// `inc`.
fn responder(shared: &Shared, from: NodeId, inc: u64, remote: &Endpoint) -> Result<Endpoint> {
    let me = shared
        .me
        .ok_or_else(|| verbs_error("a session needs this process's node id"))?;
    responder_room(shared, from).map_err(verbs_error)?;
    let home = shared
        .local(me)
        .ok_or_else(|| verbs_error("this process's node is not local"))?;
    let device = &shared.device;
    let mut qp = qp::create(device, home, &home.responder_cq, 1)?.qp;
    let local = qp::endpoint(device, &qp, qp::random_psn());
    qp::connect(device, &mut qp, &local, remote, shared.transport)?;
    let mut responders = shared.responders.lock();
    if shared.peers.incarnation(from) != inc || shared.peers.dead(from).is_some() {
        // Declared dead (and fenced) while we connected: this one goes too.
        return Err(verbs_error(format!("{from} was declared dead")));
    }
    responders.insert((from.0, inc, local.qpn), Responder { _qp: qp, _cm: None });
    Ok(local)
}

/// Asks `target`'s process (incarnation `inc`) for a responder queue pair connected to
/// `local`.
pub(crate) fn connect_qp(
    shared: &Shared,
    target: NodeId,
    inc: u64,
    local: &Endpoint,
) -> Result<Endpoint> {
    let reply = request(shared, target, inc, &Msg::Connect { endpoint: *local })?;
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

/// Tells `target`'s process (incarnation `inc`) that our queue pair `qpn`'s responder is no
/// longer needed. Nothing to say to a dead or replaced incarnation.
pub(crate) fn release_qp(shared: &Shared, target: NodeId, inc: u64, qpn: u32) {
    if shared.peers.dead(target).is_none() && shared.peers.incarnation(target) == inc {
        let _ = send_to(shared, target, Some(inc), &Msg::Release { qpn });
    }
}

/// Our connection to `target`, if it is alive (and, given `inc`, still that incarnation).
fn client(shared: &Shared, target: NodeId, inc: Option<u64>) -> Result<Arc<Client>> {
    if let Some(reason) = shared.peers.dead(target) {
        return Err(Error::PeerDead {
            node: target,
            reason,
        });
    }
    let c = shared
        .peers
        .client(target)
        .ok_or_else(|| verbs_error(format!("no rendezvous connection to {target}")))?;
    match inc {
        Some(i) if i != c.incarnation => Err(Error::PeerDead {
            node: target,
            reason: restarted(target, i, c.incarnation),
        }),
        _ => Ok(c),
    }
}

/// Why a request for incarnation `old` of `node` cannot go to its incarnation `new`.
pub(crate) fn restarted(node: NodeId, old: u64, new: u64) -> String {
    format!(
        "{node} restarted: its incarnation {old:#x}, which this context's queue pair led to, \
         died, and incarnation {new:#x} rejoined with fresh memory; open a new context to reach \
         it (Cluster::incarnation)"
    )
}

/// Sends a message that has no reply.
fn send(shared: &Shared, target: NodeId, msg: &Msg) -> Result<()> {
    send_to(shared, target, None, msg)
}

fn send_to(shared: &Shared, target: NodeId, inc: Option<u64>, msg: &Msg) -> Result<()> {
    let c = client(shared, target, inc)?;
    let r = write_msg(&mut *c.stream.lock(), msg);
    r.map_err(|e| lost(shared, target, &c, &e))
}

/// Sends a request and reads its reply (skipping nothing: the server sends only replies).
fn request(shared: &Shared, target: NodeId, inc: u64, msg: &Msg) -> Result<Msg> {
    let c = client(shared, target, Some(inc))?;
    let mut s = c.stream.lock();
    let r = write_msg(&mut *s, msg).and_then(|()| read_msg(&mut *s));
    drop(s);
    r.map_err(|e| lost(shared, target, &c, &e))
}

/// Our connection `c` to `target` failed: that incarnation is taken for dead (unless it was
/// already, for another reason, which then stays) and fenced out.
fn lost(shared: &Shared, target: NodeId, c: &Client, e: &io::Error) -> Error {
    shared.peers.mark_dead_of(
        target,
        c.incarnation,
        format!("its rendezvous connection failed: {e}"),
    );
    fence(shared, target, c.incarnation);
    Error::PeerDead {
        node: target,
        reason: shared
            .peers
            .dead(target)
            .unwrap_or_else(|| restarted(target, c.incarnation, shared.peers.incarnation(target))),
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

/// Connect requests the rdma_cm listener queues before it picks them up.
const CM_BACKLOG: i32 = 128;
/// How often the rdma_cm listener looks at its stop flag.
const CM_TICK: Duration = Duration::from_millis(100);

/// The passive side of the rdma_cm bootstrap: a thread that listens on this node's address
/// of the peer list, accepts the connect requests of joined peers' threads (each gets a
/// responder queue pair, as a TCP `Connect` would) and destroys a responder when its
/// connection ends.
struct CmListener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CmListener {
    fn start(shared: &Arc<Shared>, own: SocketAddr) -> Result<CmListener> {
        let me = shared
            .me
            .ok_or_else(|| verbs_error("a session needs this process's node id"))?;
        let failed = |what: &str, e: io::Error| Error::Backend {
            backend: "verbs",
            message: format!("{me} cannot listen for rdma_cm on {own}: {what}"),
            source: Some(e),
        };
        let ch = cm::Channel::new().map_err(|e| failed("no event channel", e))?;
        let id = ch.create_id().map_err(|e| failed("no identifier", e))?;
        id.bind(own).map_err(|e| {
            failed(
                "the address is taken, or not an address of this host (LOCO_PEERS)",
                e,
            )
        })?;
        let device = &shared.device;
        match id.device() {
            Some((name, port)) if name == device.name && port == device.port => {}
            Some((name, port)) => {
                return Err(verbs_error(format!(
                    "{me}: rdma_cm serves {own} through {name} port {port}, but this process \
                     uses {} port {}: set LOCO_RDMA_DEVICE={name} LOCO_RDMA_PORT={port}",
                    device.name, device.port
                )))
            }
            None => {
                return Err(verbs_error(format!(
                    "{me}: {} is not the address of a network interface an RDMA device runs \
                     over, so rdma_cm cannot serve it (LOCO_PEERS; for Soft-RoCE: `rdma link \
                     add rxe0 type rxe netdev IFACE`, then list IFACE's address)",
                    own.ip()
                )))
            }
        }
        id.listen(CM_BACKLOG)
            .map_err(|e| failed("rdma_listen failed", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (sh, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("loco-cm-{me}"))
            .spawn(move || cm_serve(&sh, &ch, id, &st))
            .map_err(|e| io_error("cannot start the rdma_cm listener thread", e))?;
        tracing::debug!(target: "loco::rdmawait", %me, %own, "rdma_cm listening");
        Ok(CmListener {
            stop,
            thread: Some(thread),
        })
    }

    fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for CmListener {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The listener thread: one event at a time, until `stop`.
fn cm_serve(shared: &Shared, ch: &Arc<cm::Channel>, listener: cm::Id, stop: &AtomicBool) {
    use cm::kind;
    // Request numbers used, per client incarnation.
    let mut seen: HashMap<(u16, u64), cmdata::Seen> = HashMap::new();
    // Which responder each accepted connection serves (by identifier address).
    let mut served: HashMap<usize, (u16, u64, u32)> = HashMap::new();
    // Reading events failed last time (warned once, until it works again).
    let mut failing = false;
    while !stop.load(SeqCst) {
        let ev = match ch.next(CM_TICK) {
            Ok(Some(ev)) => {
                failing = false;
                ev
            }
            Ok(None) => continue,
            Err(e) => {
                if !failing {
                    tracing::warn!(target: "loco::rdmawait", error = %e, "rdma_cm listener: no events");
                }
                failing = true;
                std::thread::sleep(CM_TICK);
                continue;
            }
        };
        match ev.kind {
            kind::RDMA_CM_EVENT_CONNECT_REQUEST => {
                // SAFETY: the identifier of a connect request read from `ch`, adopted once.
                let Some(id) = (unsafe { cm::Id::adopt(ev.id, ch) }) else {
                    continue;
                };
                let key = id.key();
                match cm_request(shared, &ev, id, &mut seen) {
                    Ok(responder) => {
                        // Forget what no longer matters: responders fenced or released, request
                        // numbers of incarnations gone (only for proven requests: strangers
                        // cost no more than a MAC).
                        {
                            let r = shared.responders.lock();
                            served.retain(|_, k| r.contains_key(k));
                        }
                        seen.retain(|(n, i), _| shared.peers.incarnation(NodeId(*n)) == *i);
                        served.insert(key, responder);
                    }
                    Err(refusal) => {
                        if refusal.proven {
                            tracing::warn!(target: "loco::rdmawait", reason = %refusal.reason, "rdma_cm connect request refused");
                        } else {
                            // Anyone who reaches the port can send these: not worth a warning each.
                            tracing::debug!(target: "loco::rdmawait", reason = %refusal.reason, "rdma_cm connect request without the key refused");
                        }
                        let reason = cmdata::reject_reason(&refusal.reason);
                        if let Some(Err(e)) = refusal.id.map(|id| id.reject(reason)) {
                            tracing::debug!(target: "loco::rdmawait", error = %e, "rdma_reject failed");
                        }
                    }
                }
            }
            kind::RDMA_CM_EVENT_DISCONNECTED
            | kind::RDMA_CM_EVENT_CONNECT_ERROR
            | kind::RDMA_CM_EVENT_UNREACHABLE
            | kind::RDMA_CM_EVENT_REJECTED => {
                // The thread that connected is gone (or never completed): so is its responder.
                if let Some(k) = served.remove(&ev.id) {
                    remove_responders(shared, |r| *r == k);
                }
            }
            kind::RDMA_CM_EVENT_DEVICE_REMOVAL if ev.id == listener.key() => {
                tracing::error!(target: "loco::rdmawait", "the RDMA device went away: rdma_cm stops listening");
                break;
            }
            _ => {}
        }
    }
}

/// A connect request refused: the identifier to reject it with (`None`: it was accepted, then
/// found moot and disconnected), why, and whether the request had proven the cluster key.
struct Refusal {
    id: Option<cm::Id>,
    reason: String,
    proven: bool,
}

/// Checks a connect request and accepts it with a new responder queue pair.
fn cm_request(
    shared: &Shared,
    ev: &cm::Event,
    id: cm::Id,
    seen: &mut HashMap<(u16, u64), cmdata::Seen>,
) -> std::result::Result<(u16, u64, u32), Refusal> {
    let mut proven = false;
    macro_rules! refuse {
        ($($t:tt)*) => {
            return Err(Refusal { id: Some(id), reason: format!($($t)*), proven })
        };
    }
    let (Some(me), Some(c)) = (shared.me, shared.cm.as_ref()) else {
        refuse!("this process does not take rdma_cm connections");
    };
    let req = match cmdata::Request::parse(&ev.private) {
        Ok(r) => r,
        Err(e) => refuse!("{e}"),
    };
    let nodes = shared.infos.len() as u16;
    let link = cmdata::Link {
        nodes,
        from: req.from,
        to: me.0,
        client_incarnation: req.client_incarnation,
        server_incarnation: shared.incarnation,
        seq: req.seq,
        client_qpn: ev.qp_num,
    };
    // The proof first: a stranger learns nothing about the members.
    if req.from >= nodes || req.from == me.0 || !req.verify(&c.key, &link) {
        refuse!("the request does not prove the cluster key (LOCO_CLUSTER_KEY), or is stale");
    }
    proven = true;
    let from = NodeId(req.from);
    let inc = req.client_incarnation;
    let joined = shared.peers.incarnation(from);
    // Only the incarnation that joined us over the session may connect (never 0: no real
    // incarnation is 0, and 0 is what a node that never joined reads as).
    if joined == 0 || joined != inc {
        refuse!("incarnation {inc:#x} of {from} has not joined {me}");
    }
    if let Some(reason) = shared.peers.dead(from) {
        if shared.peers.rejoining(from) {
            // A restarted process, admitted; we are dialing it back (over TCP its connect
            // requests wait for that): it may ask again.
            refuse!("{}{from} is still rejoining here", cmdata::RETRY);
        }
        refuse!("{from} is dead here ({reason})");
    }
    if !seen.entry((req.from, inc)).or_default().fresh(req.seq) {
        refuse!(
            "request number {} of {from} was used already (a replay)",
            req.seq
        );
    }
    if let Err(r) = responder_room(shared, from) {
        refuse!("{r}");
    }
    let Some(home) = shared.local(me) else {
        refuse!("this process's node is not local");
    };
    let Ok(info) = shared.info(me) else {
        refuse!("this process's memory is not registered");
    };
    let qp = match qp::create(&shared.device, home, &home.responder_cq, 1) {
        Ok(c) => c.qp,
        Err(e) => refuse!("no responder queue pair: {e}"),
    };
    let t = shared.tuning();
    if let Err(e) = id.ready(&qp, &t) {
        refuse!("{e}");
    }
    let qpn = qp.qp_number();
    let reply = link.reply(&c.key, qpn, &info);
    if let Err(e) = id.accept(qpn, &reply, &t) {
        refuse!("{e}");
    }
    let mut responders = shared.responders.lock();
    if shared.peers.incarnation(from) != inc || shared.peers.dead(from).is_some() {
        // Declared dead (and fenced) while we accepted: this one goes too (after the lock).
        drop(responders);
        drop(qp);
        id.disconnect();
        return Err(Refusal {
            id: None,
            reason: format!("{from} was declared dead"),
            proven,
        });
    }
    responders.insert(
        (from.0, inc, qpn),
        Responder {
            _qp: qp,
            _cm: Some(id),
        },
    );
    Ok((from.0, inc, qpn))
}

/// The active side: connects this thread's queue pair `qp` (in INIT) to a new responder of
/// `target`'s incarnation `inc` through rdma_cm, and returns the connection (which must live
/// as long as the queue pair is used: dropping it disconnects, and the peer then destroys the
/// responder) and `target`'s memory from the reply. Retries while nothing listens yet, until
/// the cluster's timeout.
pub(crate) fn cm_connect(
    shared: &Shared,
    target: NodeId,
    inc: u64,
    qp: &sideway::ibverbs::queue_pair::BasicQueuePair,
    ch: &Arc<cm::Channel>,
) -> Result<(cm::Id, NodeInfo)> {
    let (Some(me), Some(c)) = (shared.me, shared.cm.as_ref()) else {
        return Err(verbs_error("rdma_cm needs a multi-process cluster"));
    };
    let (src, dst) = (c.addrs[me.index()], c.addrs[target.index()]);
    let deadline = deadline_after(shared.timeout);
    // A listener that is not up yet is waited for this long at most (it starts before its
    // process joins anyone, so this is slack, not a wait for a slow start).
    let mut listener_deadline: Option<Instant> = None;
    let t = shared.tuning();
    // Whether `target` is gone: dead, or replaced by a new incarnation (whose listener would
    // take our requests, bound to the old one, for forgeries).
    let gone = || {
        if let Some(reason) = shared.peers.dead(target) {
            return Some(Error::PeerDead {
                node: target,
                reason,
            });
        }
        let now = shared.peers.incarnation(target);
        (now != inc).then(|| Error::PeerDead {
            node: target,
            reason: restarted(target, inc, now),
        })
    };
    loop {
        if let Some(e) = gone() {
            return Err(e);
        }
        let link = cmdata::Link {
            nodes: shared.infos.len() as u16,
            from: me.0,
            to: target.0,
            client_incarnation: shared.incarnation,
            server_incarnation: inc,
            seq: c.seq.fetch_add(1, SeqCst) + 1,
            client_qpn: qp.qp_number(),
        };
        let request = link.request(&c.key);
        let failed = |why: String| {
            verbs_error(format!(
                "rdma_cm connection of {me} to {target} at {dst} failed: {why}"
            ))
        };
        let r = cm::Request {
            src,
            dst,
            device: &shared.device.name,
            port: shared.device.port,
            qp_num: qp.qp_number(),
            private: &request,
        };
        match cm::connect(ch, &r, &t, deadline) {
            Ok(answer) => {
                let info = link
                    .open_reply(&c.key, answer.qp_num, &answer.private)
                    .map_err(&failed)?;
                answer.id.ready(qp, &t).map_err(|e| failed(e.to_string()))?;
                answer.id.establish().map_err(|e| failed(e.to_string()))?;
                return Ok((answer.id, info));
            }
            Err(cm::Failed::NoListener(why))
                if Instant::now()
                    < *listener_deadline
                        .get_or_insert_with(|| deadline.min(Instant::now() + MAX_HANDSHAKE)) =>
            {
                tracing::debug!(target: "loco::rdmawait", %target, %why, "rdma_cm: no listener yet; retrying");
                std::thread::sleep(RETRY_JOIN);
            }
            Err(cm::Failed::NoListener(why) | cm::Failed::Other(why)) => return Err(failed(why)),
            Err(cm::Failed::Refused(why))
                if why.starts_with(cmdata::RETRY) && Instant::now() < deadline =>
            {
                tracing::debug!(target: "loco::rdmawait", %target, %why, "rdma_cm: asked to retry");
                std::thread::sleep(RETRY_JOIN);
            }
            Err(cm::Failed::Refused(why)) => {
                return Err(gone().unwrap_or_else(|| failed(format!("{target} refused it: {why}"))))
            }
            Err(cm::Failed::TimedOut) => {
                return Err(gone()
                    .unwrap_or_else(|| failed(format!("no answer within {:?}", shared.timeout))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_timeouts_do_not_overflow() {
        assert_eq!(retry_for(Duration::MAX), Duration::MAX);
        assert_eq!(retry_for(Duration::from_secs(2)), Duration::from_secs(5));
        assert!(deadline_after(Duration::MAX) > Instant::now() + Duration::from_secs(3600));
        let soon = deadline_after(Duration::from_millis(10));
        assert!(soon <= Instant::now() + Duration::from_millis(10));
    }
}
