//! What this process knows about the other processes of its cluster: alive or dead (and why),
//! which incarnation of each is the current one, their memory, barrier counts, whether they
//! said goodbye, and our connections to each.
//!
//! # Incarnations
//! Each process draws a random incarnation number at start ([`super::auth::incarnation`]). The
//! first connection of a node fixes its incarnation here; from then on a connection claiming
//! that node is
//! - the **same incarnation**: a duplicate while it is joined (refused), else its second
//!   direction (accepted once);
//! - an incarnation **declared dead** here (kept in a bounded list): stale, refused;
//! - a **new incarnation** while the current one is alive: refused for now (`Retry`), since a
//!   process that is not known to be dead must not be replaced (it may still write into our
//!   memory); once the current one is declared dead (and fenced out), the new one is admitted:
//!   a **rejoin**. The node stays dead for every caller until the rejoin is complete (both
//!   connections up, memory exchanged), then it is alive again under the new incarnation.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::wire::NodeInfo;
use crate::error::TimeoutKind;
use crate::{Error, NodeId, Result};

/// Incarnations per node remembered as dead, to refuse them (a process that was declared dead
/// and comes back as it was). Older ones are forgotten; 64 restarts of one node is plenty.
const DEAD_INCARNATIONS: usize = 64;

/// Per-peer state shared by thread NICs, the rendezvous threads and the process handle.
pub(crate) struct Peers {
    pub(crate) nodes: Vec<Peer>,
    /// Signalled whenever a peer reaches a barrier, says bye, dies or rejoins.
    changed: Condvar,
    lock: Mutex<()>,
    /// This process's barrier count.
    pub(crate) epoch: AtomicU64,
    /// Bumped after every change of a peer's `dead` or `incarnation` ([`Peers::changes`]).
    changes: AtomicU64,
}

/// Our connection to a peer's listener (for our requests and heartbeats), bound to the peer
/// incarnation it reached.
pub(crate) struct Client {
    pub(crate) incarnation: u64,
    pub(crate) stream: Mutex<TcpStream>,
    /// A clone of `stream`, to shut it down (ending a blocked request) without its lock.
    closer: TcpStream,
}

impl Client {
    pub(crate) fn new(incarnation: u64, stream: TcpStream) -> std::io::Result<Client> {
        Ok(Client {
            incarnation,
            closer: stream.try_clone()?,
            stream: Mutex::new(stream),
        })
    }
}

/// One peer.
#[derive(Default)]
pub(crate) struct Peer {
    dead: AtomicBool,
    reason: Mutex<Option<String>>,
    /// The current incarnation (0: none joined yet). Changes only when a rejoin is admitted.
    incarnation: AtomicU64,
    /// How many incarnations of this node were admitted after the first (restarts seen).
    pub(crate) rejoins: AtomicU64,
    member: Mutex<Member>,
    /// Highest barrier number the peer announced.
    pub(crate) barrier: AtomicU64,
    pub(crate) bye: AtomicBool,
    client: Mutex<Option<Arc<Client>>>,
    /// A clone of the joined connection from the peer (served by a rendezvous thread), to end
    /// it when the peer is declared dead.
    server: Mutex<Option<(u64, TcpStream)>>,
    /// Testing hook: the rkey new thread NICs use for this node (`u64::MAX`: none).
    rkey_override: AtomicU64,
    /// Testing hook: new thread NICs connect their queue pair towards this node to nowhere.
    unreachable: AtomicBool,
}

/// Membership of one peer, changed under its lock.
#[derive(Default)]
struct Member {
    /// A connection from the current incarnation has joined (a second one is refused).
    joined: bool,
    /// The current incarnation's memory.
    info: Option<NodeInfo>,
    /// Incarnations declared dead, oldest first (at most [`DEAD_INCARNATIONS`]).
    dead: Vec<u64>,
    /// A rejoin was admitted and is not complete yet.
    rejoining: bool,
}

impl Member {
    fn bury(&mut self, incarnation: u64) {
        if incarnation != 0 && !self.dead.contains(&incarnation) {
            if self.dead.len() >= DEAD_INCARNATIONS {
                self.dead.remove(0);
            }
            self.dead.push(incarnation);
        }
    }
}

/// What to do with a connection of `node` claiming an incarnation ([`Peers::admit`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The node's first incarnation (or its other direction): go on.
    Join,
    /// A new incarnation replacing one declared dead: go on, then reconnect to it.
    Rejoin {
        /// The dead incarnation it replaces.
        old: u64,
    },
    /// Refuse, for good, saying why.
    Refuse(String),
    /// Refuse for now: the current incarnation is not declared dead yet.
    Retry(String),
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
            changes: AtomicU64::new(0),
        }
    }

    /// A count that has moved on whenever a peer was declared dead, came back or changed its
    /// incarnation since it was last read: a reader that sees the same count as before has
    /// nothing new to look at in [`Peers::dead`] and [`Peers::incarnation`] (the count is
    /// bumped after the change, so one that sees the new count sees the change).
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(SeqCst)
    }

    /// Why `node` is dead, if it is (its current incarnation died, and no new one has
    /// completed a rejoin).
    pub(crate) fn dead(&self, node: NodeId) -> Option<String> {
        let p = self.nodes.get(node.index())?;
        if !p.dead.load(SeqCst) {
            return None;
        }
        Some(p.reason.lock().clone().unwrap_or_default())
    }

    /// Whether a new incarnation of `node` was admitted and is not yet alive again here (we are
    /// dialing it back).
    pub(crate) fn rejoining(&self, node: NodeId) -> bool {
        self.nodes
            .get(node.index())
            .is_some_and(|p| p.member.lock().rejoining)
    }

    /// The current incarnation of `node` (0: none has joined yet).
    pub(crate) fn incarnation(&self, node: NodeId) -> u64 {
        self.nodes
            .get(node.index())
            .map_or(0, |p| p.incarnation.load(SeqCst))
    }

    /// The memory of `node`'s current incarnation, once known.
    pub(crate) fn info(&self, node: NodeId) -> Option<NodeInfo> {
        self.nodes.get(node.index())?.member.lock().info
    }

    /// Our connection to `node`'s listener, if there is one.
    pub(crate) fn client(&self, node: NodeId) -> Option<Arc<Client>> {
        self.nodes.get(node.index())?.client.lock().clone()
    }

    /// Marks the current incarnation of `node` dead (see [`Peers::mark_dead_of`]).
    #[cfg(test)]
    pub(crate) fn mark_dead(&self, node: NodeId, reason: String) {
        let inc = self.incarnation(node);
        self.mark_dead_of(node, inc, reason);
    }

    /// Marks incarnation `incarnation` of `node` dead (the first reason stays), if it is still
    /// the current one (a connection of a dead incarnation that ends late must not kill the
    /// one that rejoined since); ends our connections with it (so that requests blocked on
    /// them return and its rendezvous thread here stops), and wakes every waiter.
    pub(crate) fn mark_dead_of(&self, node: NodeId, incarnation: u64, reason: String) {
        let Some(p) = self.nodes.get(node.index()) else {
            return;
        };
        {
            let mut m = p.member.lock();
            if p.incarnation.load(SeqCst) != incarnation {
                return;
            }
            let mut r = p.reason.lock();
            if r.is_none() || m.rejoining {
                tracing::warn!(target: "loco::rdmawait", %node, incarnation, %reason, "peer dead");
                *r = Some(reason);
            }
            m.rejoining = false;
            p.dead.store(true, SeqCst);
            self.changes.fetch_add(1, SeqCst);
            m.bury(incarnation);
        }
        if let Some(c) = p.client.lock().as_ref() {
            let _ = c.closer.shutdown(Shutdown::Both);
        }
        if let Some((_, s)) = p.server.lock().as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.notify();
    }

    /// Decides on a connection from `node` claiming `incarnation` and announcing `info` (see
    /// the [module docs](self)); `ours` is the memory size every process registers. On
    /// [`Admit::Join`] and [`Admit::Rejoin`] the incarnation is joined and its memory
    /// recorded; nothing changes otherwise.
    pub(crate) fn admit(&self, node: NodeId, incarnation: u64, info: NodeInfo, ours: u64) -> Admit {
        let Some(p) = self.nodes.get(node.index()) else {
            return Admit::Refuse(format!("{node} is not in the cluster"));
        };
        if info.words != ours {
            return Admit::Refuse(format!(
                "it registered {} words per node, this process {ours}: give every process the \
                 same memory_per_node",
                info.words
            ));
        }
        let mut m = p.member.lock();
        if m.dead.contains(&incarnation) {
            return Admit::Refuse(format!(
                "incarnation {incarnation:#x} of {node} was declared dead here: a process \
                 declared dead must restart to rejoin"
            ));
        }
        let cur = p.incarnation.load(SeqCst);
        if cur == 0 || cur == incarnation {
            if m.joined {
                return Admit::Refuse(format!(
                    "{node} already joined; two processes with LOCO_NODE_ID={}?",
                    node.0
                ));
            }
            if m.info.is_some_and(|i| i != info) {
                return Admit::Refuse("it announced its memory twice, differently".to_string());
            }
            p.incarnation.store(incarnation, SeqCst);
            self.changes.fetch_add(1, SeqCst);
            m.joined = true;
            m.info = Some(info);
            return Admit::Join;
        }
        if !p.dead.load(SeqCst) {
            return Admit::Retry(format!(
                "{node} already joined as incarnation {cur:#x}, which is alive here: two \
                 processes with LOCO_NODE_ID={}? (a restarted process is admitted once its \
                 previous incarnation is declared dead, within the peer timeout, \
                 LOCO_PEER_TIMEOUT_MS)",
                node.0
            ));
        }
        // The rejoin: the node stays dead for every caller until `rejoined`.
        m.bury(cur);
        m.rejoining = true;
        let old_reason = p.reason.lock().clone().unwrap_or_default();
        *p.reason.lock() = Some(format!(
            "restarted as incarnation {incarnation:#x}, rejoining (its previous incarnation \
             {cur:#x} died: {old_reason})"
        ));
        p.incarnation.store(incarnation, SeqCst);
        self.changes.fetch_add(1, SeqCst);
        m.joined = true;
        m.info = Some(info);
        drop(m);
        *p.client.lock() = None;
        Admit::Rejoin { old: cur }
    }

    /// Records what our own join to `node` learned: its incarnation and memory. Fails (with
    /// why) when they contradict what its connection to us said.
    pub(crate) fn learn(
        &self,
        node: NodeId,
        incarnation: u64,
        info: NodeInfo,
        ours: u64,
    ) -> std::result::Result<(), String> {
        let p = self
            .nodes
            .get(node.index())
            .ok_or_else(|| format!("{node} is not in the cluster"))?;
        if info.words != ours {
            return Err(format!(
                "it registered {} words per node, this process {ours}: give every process the \
                 same memory_per_node",
                info.words
            ));
        }
        let mut m = p.member.lock();
        if m.dead.contains(&incarnation) {
            return Err(format!(
                "incarnation {incarnation:#x} of {node} was declared dead here"
            ));
        }
        let cur = p.incarnation.load(SeqCst);
        if cur != 0 && cur != incarnation {
            return Err(format!(
                "it answered as incarnation {incarnation:#x}, its connection to us as {cur:#x}"
            ));
        }
        if m.info.is_some_and(|i| i != info) {
            return Err("it announced its memory twice, differently".to_string());
        }
        p.incarnation.store(incarnation, SeqCst);
        self.changes.fetch_add(1, SeqCst);
        m.info = Some(info);
        Ok(())
    }

    /// Keeps our connection to `node`'s incarnation `client.incarnation`. Fails if that is no
    /// longer the current incarnation.
    pub(crate) fn set_client(
        &self,
        node: NodeId,
        client: Client,
    ) -> std::result::Result<(), String> {
        let p = self
            .nodes
            .get(node.index())
            .ok_or_else(|| format!("{node} is not in the cluster"))?;
        let _m = p.member.lock();
        if p.incarnation.load(SeqCst) != client.incarnation {
            return Err(format!("{node} changed incarnation meanwhile"));
        }
        *p.client.lock() = Some(Arc::new(client));
        Ok(())
    }

    /// Keeps a clone of the joined connection from `node`'s incarnation `incarnation`.
    pub(crate) fn set_server(&self, node: NodeId, incarnation: u64, stream: TcpStream) {
        if let Some(p) = self.nodes.get(node.index()) {
            *p.server.lock() = Some((incarnation, stream));
        }
    }

    /// Ends the rejoin of `node`'s incarnation `incarnation` (both connections are up): it is
    /// alive again, its barrier count continues from ours (`epoch`), and waiters are woken.
    /// Returns false if the incarnation is no longer current (it died meanwhile).
    pub(crate) fn rejoined(&self, node: NodeId, incarnation: u64, epoch: u64) -> bool {
        let Some(p) = self.nodes.get(node.index()) else {
            return false;
        };
        {
            let mut m = p.member.lock();
            if p.incarnation.load(SeqCst) != incarnation || !m.rejoining {
                return false;
            }
            m.rejoining = false;
            p.barrier.store(epoch, SeqCst);
            p.bye.store(false, SeqCst);
            *p.reason.lock() = None;
            p.rejoins.fetch_add(1, SeqCst);
            p.dead.store(false, SeqCst);
            self.changes.fetch_add(1, SeqCst);
        }
        tracing::warn!(target: "loco::rdmawait", %node, incarnation, "peer rejoined (restarted)");
        self.notify();
        true
    }

    /// Ends our connections with every peer (on leave).
    pub(crate) fn shutdown_all(&self) {
        for p in &self.nodes {
            if let Some(c) = p.client.lock().as_ref() {
                let _ = c.closer.shutdown(Shutdown::Both);
            }
        }
    }

    pub(crate) fn notify(&self) {
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

    /// Records barrier number `epoch` of `node`. A peer counts its barriers one by one, so
    /// anything but the next number is a protocol violation (`Err` with what was seen).
    pub(crate) fn barrier(&self, node: NodeId, epoch: u64) -> std::result::Result<(), String> {
        let p = self
            .nodes
            .get(node.index())
            .ok_or_else(|| format!("{node} is not in the cluster"))?;
        let prev = p.barrier.load(SeqCst);
        if prev.checked_add(1) != Some(epoch) {
            return Err(format!(
                "announced barrier {epoch} after barrier {prev} (protocol violation)"
            ));
        }
        p.barrier.store(epoch, SeqCst);
        self.notify();
        Ok(())
    }

    /// Waits until `done(peer)` holds for every other node, failing if one dies first.
    pub(crate) fn wait_all(
        &self,
        me: NodeId,
        timeout: Duration,
        what: &'static str,
        done: impl Fn(&Peer) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now().checked_add(timeout);
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
            let timed_out = match deadline {
                Some(d) => self.changed.wait_until(&mut g, d).timed_out(),
                None => {
                    self.changed.wait(&mut g);
                    false
                }
            };
            if timed_out {
                return Err(Error::Timeout {
                    what: TimeoutKind::Other(what),
                    after: timeout,
                });
            }
        }
    }

    /// Whether `p` is dead (for `wait_all` predicates).
    pub(crate) fn is_dead(p: &Peer) -> bool {
        p.dead.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barriers_advance_one_by_one() {
        let p = Peers::new(3);
        p.barrier(NodeId(1), 1).unwrap();
        assert!(p.barrier(NodeId(1), 1).is_err(), "repeat");
        assert!(p.barrier(NodeId(1), 3).is_err(), "jump");
        assert!(p.barrier(NodeId(1), u64::MAX).is_err());
        p.barrier(NodeId(1), 2).unwrap();
        assert!(p.barrier(NodeId(7), 1).is_err(), "unknown node");
    }

    #[test]
    fn a_dead_peer_ends_waits_with_its_name() {
        let p = std::sync::Arc::new(Peers::new(3));
        let q = p.clone();
        let t = std::thread::spawn(move || {
            q.wait_all(NodeId(0), Duration::from_secs(60), "test", |x| {
                x.barrier.load(SeqCst) >= 1
            })
        });
        p.barrier(NodeId(1), 1).unwrap();
        p.mark_dead(NodeId(2), "gone".into());
        p.mark_dead(NodeId(2), "second reason".into());
        match t.join().unwrap() {
            Err(Error::PeerDead { node, reason }) => {
                assert_eq!(node, NodeId(2));
                assert_eq!(reason, "gone");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p.dead(NodeId(1)), None);
    }

    fn info(words: u64) -> NodeInfo {
        NodeInfo {
            addr: 4096,
            rkey: 7,
            words,
        }
    }

    #[test]
    fn incarnations_join_once_and_duplicates_are_refused() {
        let p = Peers::new(3);
        let n = NodeId(1);
        assert!(
            matches!(p.admit(n, 10, info(8), 16), Admit::Refuse(r) if r.contains("memory_per_node"))
        );
        assert_eq!(p.incarnation(n), 0, "a refused join changes nothing");
        assert_eq!(p.admit(n, 10, info(8), 8), Admit::Join);
        assert_eq!(p.incarnation(n), 10);
        assert_eq!(p.info(n), Some(info(8)));
        // The same live incarnation again: a duplicate.
        assert!(
            matches!(p.admit(n, 10, info(8), 8), Admit::Refuse(r) if r.contains("already joined"))
        );
        // Another incarnation while this one lives: not now (it may still write our memory).
        assert!(matches!(p.admit(n, 11, info(8), 8), Admit::Retry(_)));
        assert_eq!(p.incarnation(n), 10);
        assert_eq!(p.dead(n), None);
        // Our own join learns the same incarnation; another one is a contradiction.
        p.learn(n, 10, info(8), 8).unwrap();
        assert!(p.learn(n, 12, info(8), 8).is_err());
        let other = NodeInfo { rkey: 9, ..info(8) };
        assert!(
            p.learn(n, 10, other, 8).is_err(),
            "memory announced twice, differently"
        );
    }

    #[test]
    fn a_restarted_node_rejoins_only_after_its_death_and_stale_ones_stay_out() {
        let p = Peers::new(3);
        let n = NodeId(2);
        assert_eq!(p.admit(n, 10, info(8), 8), Admit::Join);
        p.barrier(n, 1).unwrap();
        p.epoch.store(1, SeqCst);
        p.mark_dead_of(n, 10, "killed".into());
        assert_eq!(p.dead(n).as_deref(), Some("killed"));
        // The dead incarnation itself may not come back.
        assert!(
            matches!(p.admit(n, 10, info(8), 8), Admit::Refuse(r) if r.contains("declared dead"))
        );
        // A new one is admitted, with its new memory; the node stays dead until the rejoin ends.
        let fresh = NodeInfo {
            addr: 8192,
            ..info(8)
        };
        assert_eq!(p.admit(n, 20, fresh, 8), Admit::Rejoin { old: 10 });
        assert_eq!(p.incarnation(n), 20);
        assert_eq!(p.info(n), Some(fresh));
        assert!(p.dead(n).unwrap().contains("rejoining"));
        // A late end of the dead incarnation's connection does not touch the new one.
        p.mark_dead_of(n, 10, "late".into());
        assert!(p.rejoined(n, 20, 1));
        assert_eq!(p.dead(n), None);
        assert_eq!(p.nodes[2].rejoins.load(SeqCst), 1);
        // Barrier counts continue from ours: the rejoined node's next barrier is 2.
        assert!(p.barrier(n, 1).is_err());
        p.barrier(n, 2).unwrap();
        // The same new incarnation again: a duplicate; the old one: stale.
        assert!(
            matches!(p.admit(n, 20, fresh, 8), Admit::Refuse(r) if r.contains("already joined"))
        );
        assert!(
            matches!(p.admit(n, 10, info(8), 8), Admit::Refuse(r) if r.contains("declared dead"))
        );
        // A rejoin that fails (dialing back) leaves the node dead, with that reason.
        p.mark_dead_of(n, 20, "killed again".into());
        assert_eq!(p.admit(n, 30, info(8), 8), Admit::Rejoin { old: 20 });
        p.mark_dead_of(n, 30, "dialing back failed".into());
        assert_eq!(p.dead(n).as_deref(), Some("dialing back failed"));
        assert!(!p.rejoined(n, 30, 1), "a dead rejoin does not come alive");
        assert!(p.learn(n, 30, info(8), 8).is_err(), "it is dead");
    }

    /// `Peers::changes` moves whenever what a link's check reads (`dead`, `incarnation`) has
    /// changed: a link that sees the same count skips the check (`Link::refresh`), so a change
    /// without a bump would leave it blind to a dead or restarted peer.
    #[test]
    fn every_change_a_link_checks_moves_the_count() {
        let p = Peers::new(3);
        let n = NodeId(2);
        let look = |p: &Peers| {
            let seen: Vec<_> = (0..3)
                .map(|i| (p.dead(NodeId(i)), p.incarnation(NodeId(i))))
                .collect();
            (seen, p.changes())
        };
        let mut before = look(&p);
        let mut step = |what: &str, f: &dyn Fn(&Peers)| {
            f(&p);
            let after = look(&p);
            if after.0 != before.0 {
                assert_ne!(
                    after.1, before.1,
                    "{what} changed {:?} without a bump",
                    after.0
                );
            }
            before = after;
        };
        step("a join", &|p| {
            assert_eq!(p.admit(n, 10, info(8), 8), Admit::Join)
        });
        step("a refused join", &|p| {
            assert!(matches!(p.admit(n, 11, info(8), 8), Admit::Retry(_)))
        });
        step("our own join", &|p| {
            p.learn(NodeId(1), 5, info(8), 8).unwrap()
        });
        step("a death", &|p| p.mark_dead_of(n, 10, "killed".into()));
        step("a rejoin", &|p| {
            assert_eq!(p.admit(n, 20, info(8), 8), Admit::Rejoin { old: 10 })
        });
        step("a stale death", &|p| p.mark_dead_of(n, 10, "late".into()));
        step("the rejoin's end", &|p| assert!(p.rejoined(n, 20, 0)));
        step("a second death", &|p| p.mark_dead_of(n, 20, "again".into()));
        let bumps = p.changes();
        assert!(bumps >= 5, "{bumps}");
    }

    #[test]
    fn dead_incarnations_are_remembered_up_to_a_bound() {
        let p = Peers::new(2);
        let n = NodeId(1);
        assert_eq!(p.admit(n, 1, info(8), 8), Admit::Join);
        for inc in 1..=(DEAD_INCARNATIONS as u64 + 5) {
            p.mark_dead_of(n, inc, "gone".into());
            assert_eq!(p.admit(n, inc + 1, info(8), 8), Admit::Rejoin { old: inc });
            assert!(p.rejoined(n, inc + 1, 0));
        }
        assert!(p.nodes[1].member.lock().dead.len() <= DEAD_INCARNATIONS);
    }
}
