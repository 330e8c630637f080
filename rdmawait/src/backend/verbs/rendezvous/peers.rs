//! What this process knows about the other processes of its cluster: alive or dead (and why),
//! their barrier counts, whether they said goodbye, and our connection to each.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::TimeoutKind;
use crate::{Error, NodeId, Result};

/// Per-peer state shared by thread NICs, the rendezvous threads and the process handle.
pub(crate) struct Peers {
    pub(crate) nodes: Vec<Peer>,
    /// Signalled whenever a peer reaches a barrier, says bye or dies.
    changed: Condvar,
    lock: Mutex<()>,
    /// This process's barrier count.
    pub(crate) epoch: AtomicU64,
}

/// One peer.
#[derive(Default)]
pub(crate) struct Peer {
    dead: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Highest barrier number the peer announced.
    pub(crate) barrier: AtomicU64,
    pub(crate) bye: AtomicBool,
    /// An authenticated connection from this peer has joined (a second one is refused).
    pub(crate) joined: AtomicBool,
    /// Our connection to the peer's listener, for our requests and heartbeats.
    pub(crate) client: OnceLock<Mutex<TcpStream>>,
    /// A clone of `client`, to shut it down (ending a blocked request) without its lock.
    pub(crate) closer: OnceLock<TcpStream>,
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

    /// Marks `node` dead for good (the first reason stays), ends any request blocked on our
    /// connection to it, and wakes every waiter.
    pub(crate) fn mark_dead(&self, node: NodeId, reason: String) {
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
        if let Some(c) = p.closer.get() {
            let _ = c.shutdown(Shutdown::Both);
        }
        self.notify();
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
}
