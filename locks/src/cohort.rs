//! Cohorts: the threads of one node queue for a lock locally, and a holder hands the lock,
//! unreleased, to the next thread of its node (see [`Lock::set_cohort`](crate::Lock::set_cohort)).
//!
//! Only the thread at the front of its node's queue touches the network: it takes over a hold
//! parked by its predecessor, or acquires the lock on the network. A holder with local waiters
//! parks its hold ([`RawLock::hand_off`]: what the lock owes its next holder, then `mfence`),
//! at most `limit` times in a row; then it releases on the network, and the next local thread
//! queues on the network behind the other nodes' waiters.
//!
//! The queue is process memory (a mutex per node and lock): the threads of one node are the
//! threads of one process. No `Ctx` operation runs under its mutex, so a simulated thread is
//! never stopped while holding it; a waiter spins with [`Spin`] (a scheduling point under the
//! simulator) and stops at its deadline, at a shutdown, or when its node is reported dead.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use loco_rdmawait::{Ctx, NodeId};

use crate::lock::Hold;
use crate::thread::{Deadline, Spin};
use crate::{Error, RawLock, Result};

/// No thread of the node is at the front of its queue.
const NOBODY: u64 = u64::MAX;

/// The node queues of one lock, and its bound on local handovers in a row.
#[derive(Debug, Default)]
pub(crate) struct Cohorts {
    /// Most local handovers in a row; 0: no cohort (every acquire goes to the network).
    limit: AtomicU32,
    nodes: Mutex<HashMap<NodeId, Arc<NodeQueue>>>,
}

impl Cohorts {
    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The queue of `node`.
    pub(crate) fn queue(&self, node: NodeId) -> Arc<NodeQueue> {
        let mut m = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(node).or_default().clone()
    }
}

/// One node's queue for one lock.
#[derive(Debug)]
pub(crate) struct NodeQueue {
    state: Mutex<State>,
    /// The number at the front (`state.front`, or [`NOBODY`]), for the waiters' spin.
    front: AtomicU64,
}

impl Default for NodeQueue {
    fn default() -> Self {
        NodeQueue {
            state: Mutex::default(),
            front: AtomicU64::new(NOBODY),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// The next number to hand out.
    next: u64,
    /// Numbers waiting behind the front, in order.
    waiting: VecDeque<u64>,
    /// The number at the front: its thread holds the lock, or is taking it.
    front: Option<u64>,
    /// A hold the previous front left for the current one.
    parked: Option<Hold>,
    /// Local handovers since the last network acquire.
    handovers: u32,
}

impl NodeQueue {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_front(&self, s: &mut State, n: Option<u64>) {
        s.front = n;
        self.front.store(n.unwrap_or(NOBODY), Ordering::Release);
    }

    /// Joins the queue; returns the thread's number.
    pub(crate) fn enter(&self) -> u64 {
        let mut s = self.state();
        let n = s.next;
        s.next += 1;
        if s.front.is_none() && s.waiting.is_empty() {
            self.set_front(&mut s, Some(n));
        } else {
            s.waiting.push_back(n);
        }
        n
    }

    /// Joins the queue only at its front (nobody of the node holds or waits).
    pub(crate) fn try_enter(&self) -> Option<u64> {
        let mut s = self.state();
        if s.front.is_some() || !s.waiting.is_empty() {
            return None;
        }
        let n = s.next;
        s.next += 1;
        self.set_front(&mut s, Some(n));
        Some(n)
    }

    /// Spins until number `n` is at the front, bounded by `d`; stops with `Shutdown` after
    /// [`Cluster::shutdown`](loco_rdmawait::Cluster::shutdown) and with `PeerDead` once the
    /// thread's own node is reported dead. On an error the caller withdraws `n`.
    pub(crate) fn wait_turn(&self, ctx: &Ctx, n: u64, d: &Deadline) -> Result<()> {
        let mut spin = Spin::new();
        loop {
            if self.front.load(Ordering::Acquire) == n {
                return Ok(());
            }
            ctx.cluster().check_alive(ctx.node())?;
            if d.expired() {
                return Err(d.timeout());
            }
            spin.wait(ctx.cluster())?;
        }
    }

    /// Number `n` stops waiting: `true` if it had reached the front (then the caller must
    /// [`leave`] it).
    pub(crate) fn withdraw(&self, n: u64) -> bool {
        let mut s = self.state();
        if s.front == Some(n) {
            return true;
        }
        s.waiting.retain(|&w| w != n);
        false
    }

    /// The hold the previous front parked, if any; if none, the front acquires on the network
    /// and a new run of handovers starts.
    pub(crate) fn take_parked(&self) -> Option<Hold> {
        let mut s = self.state();
        let h = s.parked.take();
        if h.is_none() {
            s.handovers = 0;
        }
        h
    }

    /// Whether a releasing front should hand its hold over: a thread waits behind it and the
    /// run of handovers is below `limit`.
    fn wants(&self, limit: u32) -> bool {
        let s = self.state();
        !s.waiting.is_empty() && s.handovers < limit
    }

    fn park(&self, hold: Hold) {
        let mut s = self.state();
        s.handovers += 1;
        s.parked = Some(hold);
    }
}

/// A guard's place at the front of its node's queue.
#[derive(Debug)]
pub(crate) struct NodeTurn {
    pub(crate) q: Arc<NodeQueue>,
    pub(crate) n: u64,
    /// The lock's bound on handovers in a row, when the hold was taken.
    pub(crate) limit: u32,
}

impl NodeTurn {
    /// Releases the hold of the front thread: hands it to the next thread of the node if one
    /// waits and the run allows it, else releases it on the network; then lets the next thread
    /// to the front.
    pub(crate) fn release<R: RawLock + ?Sized>(self, raw: &R, ctx: &Ctx) -> Result<()> {
        let r = if self.q.wants(self.limit) {
            match raw.hand_off(ctx) {
                Ok(Some(hold)) => {
                    // The critical section's CPU stores reach the node's memory before the
                    // next thread is let in (the weak lock's whole guarantee, Fig. 8a).
                    let fenced = ctx.mfence();
                    self.q.park(hold);
                    fenced.map_err(Error::from)
                }
                Ok(None) => raw.release(ctx),
                Err(e) if matches!(raw.held(ctx), Ok(Some(_))) => {
                    tracing::debug!(target: "loco::locks", error = %e,
                        "no local handover: releasing on the network");
                    raw.release(ctx)
                }
                Err(e) => Err(e),
            }
        } else {
            raw.release(ctx)
        };
        self.leave(raw, ctx);
        r
    }

    /// Lets the next thread of the node to the front (without releasing anything: the caller
    /// has released or handed off, or never held).
    pub(crate) fn leave<R: RawLock + ?Sized>(self, raw: &R, ctx: &Ctx) {
        leave(raw, ctx, &self.q, self.n);
    }
}

/// Number `n`, at the front, leaves: the next waiter comes to the front; if none waits, a hold
/// parked for it (its waiter gave up) is released on the network here first.
pub(crate) fn leave<R: RawLock + ?Sized>(raw: &R, ctx: &Ctx, q: &NodeQueue, n: u64) {
    loop {
        let orphan = {
            let mut s = q.state();
            debug_assert_eq!(s.front, Some(n), "only the front leaves the front");
            if let Some(next) = s.waiting.pop_front() {
                q.set_front(&mut s, Some(next));
                return;
            }
            match s.parked.take() {
                Some(h) => h,
                None => {
                    q.set_front(&mut s, None);
                    return;
                }
            }
        };
        // Still at the front, so newcomers queue behind: nobody takes this hold now.
        let released = raw.take_over(ctx, orphan).and_then(|_| raw.release(ctx));
        if let Err(e) = released {
            tracing::error!(target: "loco::locks", error = %e, node = %ctx.node(),
                "releasing a hold no thread of the node took failed");
        }
    }
}
