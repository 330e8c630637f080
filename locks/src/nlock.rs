//! The node lock (Fig. 13, centralised ticket lock on one node).
//!
//! | word | where | written by | read by |
//! |---|---|---|---|
//! | `tkt` | node n | remote FAA (acquire), remote CAS (`try_acquire`) | remote FAA/CAS |
//! | `rel` | node n | put of the releaser's `loc` (= its ticket + 1) | gets of the waiting threads |
//! | `loc` | per thread, its own node | the FAA's / gets' local writes, then `store(loc, t+1)` | the thread; the release put |

use std::rc::Rc;

use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WorkId};
use loco_rdmawaitrmw::Rmw;

use crate::thread::{next_lock_id, thread_lock, Spin, ThreadLock};
use crate::{Error, RawLock, Result};

/// Work id of the node lock's acquire operations (FAA, CAS, polling gets).
const NL_ACQ: WorkId = WorkId::internal(0x4C4B_0011);
/// Work id of the node lock's release put. Not waited for (the release does not block the CPU);
/// the next acquire of a node lock on the same node polls the same queue pair and reaps it.
const NL_REL: WorkId = WorkId::internal(0x4C4B_0012);

/// The node lock's protocol (spec §5 **nlock@n**, Fig. 13): a centralised ticket lock on node n.
///
/// `tkt` and `rel` on n. Acquire: `rfaa(tkt, 1, ret=loc, d); wait(d)`, then `get(loc, rel, d);
/// wait(d)` until `loc` reads the ticket; keep `ticket+1` in `loc`. Release: `rfence(n);
/// put(rel, loc)`, not waited for. See [`NLock`](crate::NLock) for the guarantee.
#[derive(Debug)]
pub struct RawNLock {
    id: u64,
    cluster: Cluster,
    tkt: Loc,
    rel: Loc,
}

impl RawNLock {
    /// A node lock on `node`: its words live there, and it publishes the operations towards it.
    pub fn new(cluster: &Cluster, node: NodeId) -> Result<Self> {
        let tkt = cluster.alloc_word(node)?;
        let rel = cluster.alloc_word(node)?;
        Ok(RawNLock {
            id: next_lock_id(),
            cluster: cluster.clone(),
            tkt,
            rel,
        })
    }

    /// The node the lock is bound to.
    pub fn node(&self) -> NodeId {
        self.tkt.node()
    }

    fn me(&self, ctx: &Ctx) -> Result<Rc<ThreadLock>> {
        thread_lock(ctx, self.cluster.id(), self.id, |ctx| {
            Ok(ThreadLock {
                word: ctx.cluster().alloc_private(ctx.node(), 8)?,
                slot: 0,
                rels: Vec::new(),
                held: Default::default(),
            })
        })
    }

    fn check_not_held(me: &ThreadLock) -> Result<()> {
        match me.held.get() {
            Some(ticket) => Err(Error::AlreadyHeld { ticket }),
            None => Ok(()),
        }
    }

    /// `get(loc, rel); wait`: the current value of `rel`.
    fn read_rel(&self, ctx: &Ctx, me: &ThreadLock) -> Result<u64> {
        ctx.get(&me.word, &self.rel, NL_ACQ)?;
        ctx.wait(NL_ACQ)?;
        Ok(ctx.load(&me.word)?)
    }

    /// Entered with ticket `t`: keep `t+1` in `loc` for the release put.
    fn enter(&self, ctx: &Ctx, me: &ThreadLock, t: u64) -> Result<u64> {
        ctx.store(&me.word, t + 1)?;
        me.held.set(Some(t));
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "nlock acquired");
        Ok(t)
    }
}

impl RawLock for RawNLock {
    fn acquire(&self, ctx: &Ctx) -> Result<u64> {
        let me = self.me(ctx)?;
        Self::check_not_held(&me)?;
        ctx.rfaa(&self.tkt, 1, &me.word, NL_ACQ)?;
        ctx.wait(NL_ACQ)?;
        let t = ctx.load(&me.word)?;
        let mut spin = Spin::new(self.cluster.timeout());
        loop {
            let r = self.read_rel(ctx, &me)?;
            if r == t {
                break;
            }
            spin.wait_behind(t.wrapping_sub(r), "nlock acquire");
        }
        self.enter(ctx, &me, t)
    }

    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>> {
        let me = self.me(ctx)?;
        Self::check_not_held(&me)?;
        let r = self.read_rel(ctx, &me)?;
        // Free iff tkt == rel: take ticket r only if nobody holds or waits for one.
        ctx.rcas(&self.tkt, r, r + 1, &me.word, NL_ACQ)?;
        ctx.wait(NL_ACQ)?;
        if ctx.load(&me.word)? != r {
            return Ok(None);
        }
        self.enter(ctx, &me, r).map(Some)
    }

    fn release(&self, ctx: &Ctx) -> Result<()> {
        let me = self.me(ctx)?;
        let t = me.held.get().ok_or(Error::NotHeld)?;
        ctx.rfence(self.node())?;
        ctx.put(&self.rel, &me.word, NL_REL)?;
        me.held.set(None);
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "nlock released");
        Ok(())
    }

    fn held(&self, ctx: &Ctx) -> Result<Option<u64>> {
        Ok(self.me(ctx)?.held.get())
    }
}
