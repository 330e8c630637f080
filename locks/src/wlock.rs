//! The weak lock (Fig. 10, distributed ticket lock) and the strong lock built on it.
//!
//! | word | where | written by | read by |
//! |---|---|---|---|
//! | `tkt` | the ticket node | remote FAA (acquire), remote CAS (`try_acquire`) | remote FAA/CAS, get (`try_acquire`) |
//! | `slots` | the ticket node | remote FAA (a thread's first use: its `rel` slot) | — |
//! | `rel[j]`, one sv per slot | a copy on every node | thread j: `store` then `bcast` (release) | every thread: `load` of its node's copy (acquire) |
//! | `turn` | per thread, its own node | the FAA's (or CAS's) local write | the thread |

use std::rc::Rc;

use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WorkId};
use loco_rdmawaitrmw::Rmw;
use loco_sv::{GlobalFence, SharedVar};

use crate::thread::{next_lock_id, thread_lock, Spin, ThreadLock};
use crate::{Error, RawLock, Result};

/// Work id of the weak lock's ticket operations (FAA, CAS, get of `tkt`).
const WL_ACQ: WorkId = WorkId::internal(0x4C4B_0001);
/// Work id of the weak lock's release broadcasts. They are not waited for at release (spec §5);
/// the thread's next acquire of any weak lock reaps them, so completions never pile up.
const WL_REL: WorkId = WorkId::internal(0x4C4B_0002);

/// The weak lock's protocol (spec §5 **wlock**, Fig. 10): a distributed ticket lock.
///
/// A ticket dispenser `tkt` on a chosen node; per thread a private `turn` and a shared variable
/// `rel[t]`. Acquire: `rfaa(tkt, 1, ret=turn, d); wait(d)`, then spin over the local copies of
/// all `rel[*]` until one equals `turn`. Release: `store(rel[me], turn+1)` and
/// `bcast(rel[me], all other nodes, d)`, not waited for. See [`WLock`](crate::WLock) for the
/// guarantee.
#[derive(Debug)]
pub struct RawWLock {
    id: u64,
    cluster: Cluster,
    tkt: Loc,
    slots: Loc,
    rel: Vec<SharedVar>,
}

impl RawWLock {
    /// A weak lock for at most `max_threads` threads, its ticket dispenser on `ticket_node`.
    ///
    /// Each thread that uses the lock takes one of the `max_threads` `rel` slots on first use,
    /// for good (the bound counts threads ever used, over every process of the cluster). Acquire
    /// scans all slots' local copies, so pick the bound close to the real thread count.
    pub fn new(cluster: &Cluster, ticket_node: NodeId, max_threads: usize) -> Result<Self> {
        if max_threads == 0 {
            return Err(Error::NoThreads);
        }
        let tkt = cluster.alloc_word(ticket_node)?;
        let slots = cluster.alloc_word(ticket_node)?;
        let rel = (0..max_threads)
            .map(|_| SharedVar::new(cluster))
            .collect::<loco_sv::Result<Vec<_>>>()?;
        Ok(RawWLock {
            id: next_lock_id(),
            cluster: cluster.clone(),
            tkt,
            slots,
            rel,
        })
    }

    /// The node of the ticket dispenser.
    pub fn ticket_node(&self) -> NodeId {
        self.tkt.node()
    }

    /// The most threads that can use the lock.
    pub fn max_threads(&self) -> usize {
        self.rel.len()
    }

    /// The calling thread's state; on first use, takes a `rel` slot with a remote FAA on `slots`.
    fn me(&self, ctx: &Ctx) -> Result<Rc<ThreadLock>> {
        thread_lock(ctx, self.cluster.id(), self.id, |ctx| {
            let word = ctx.cluster().alloc_private(ctx.node(), 8)?;
            ctx.rfaa(&self.slots, 1, &word, WL_ACQ)?;
            ctx.wait(WL_ACQ)?;
            let slot = ctx.load(&word)? as usize;
            if slot >= self.rel.len() {
                return Err(Error::TooManyThreads {
                    max: self.rel.len(),
                });
            }
            let rels = self
                .rel
                .iter()
                .map(|s| s.local(ctx))
                .collect::<loco_sv::Result<Vec<_>>>()?;
            tracing::debug!(target: "loco::locks", lock = self.id, node = %ctx.node(), slot, "wlock: thread registered");
            Ok(ThreadLock {
                word,
                slot,
                rels,
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

    /// Whether some local copy of `rel[*]` reads `t`: ticket `t` may enter.
    fn released_to(ctx: &Ctx, me: &ThreadLock, t: u64) -> Result<bool> {
        for r in &me.rels {
            if ctx.load(r)? == t {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl RawLock for RawWLock {
    fn acquire(&self, ctx: &Ctx) -> Result<u64> {
        let me = self.me(ctx)?;
        Self::check_not_held(&me)?;
        ctx.wait(WL_REL)?;
        ctx.rfaa(&self.tkt, 1, &me.word, WL_ACQ)?;
        ctx.wait(WL_ACQ)?;
        let t = ctx.load(&me.word)?;
        let mut spin = Spin::new(self.cluster.timeout());
        while !Self::released_to(ctx, &me, t)? {
            spin.wait("wlock acquire");
        }
        me.held.set(Some(t));
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "wlock acquired");
        Ok(t)
    }

    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>> {
        let me = self.me(ctx)?;
        Self::check_not_held(&me)?;
        ctx.wait(WL_REL)?;
        // The next ticket; it may enter at once if some rel copy already reads it.
        ctx.get(&me.word, &self.tkt, WL_ACQ)?;
        ctx.wait(WL_ACQ)?;
        let v = ctx.load(&me.word)?;
        if !Self::released_to(ctx, &me, v)? {
            return Ok(None);
        }
        // Take ticket v only if nobody took it meanwhile: no ticket is ever left behind.
        ctx.rcas(&self.tkt, v, v + 1, &me.word, WL_ACQ)?;
        ctx.wait(WL_ACQ)?;
        if ctx.load(&me.word)? != v {
            return Ok(None);
        }
        me.held.set(Some(v));
        Ok(Some(v))
    }

    fn release(&self, ctx: &Ctx) -> Result<()> {
        let me = self.me(ctx)?;
        let t = me.held.get().ok_or(Error::NotHeld)?;
        let rel = &self.rel[me.slot];
        rel.store(ctx, t + 1)?;
        rel.bcast(ctx, self.cluster.node_ids(), WL_REL)?;
        me.held.set(None);
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "wlock released");
        Ok(())
    }

    fn held(&self, ctx: &Ctx) -> Result<Option<u64>> {
        Ok(self.me(ctx)?.held.get())
    }
}

/// The strong lock's protocol (spec §5 **slock**): acquire as [`RawWLock`]; release =
/// `gf(all nodes)`, then the weak release. See [`SLock`](crate::SLock) for the guarantee.
#[derive(Debug)]
pub struct RawSLock {
    w: RawWLock,
}

impl RawSLock {
    /// A strong lock for at most `max_threads` threads, its ticket dispenser on `ticket_node`
    /// (see [`RawWLock::new`]).
    pub fn new(cluster: &Cluster, ticket_node: NodeId, max_threads: usize) -> Result<Self> {
        Ok(RawSLock {
            w: RawWLock::new(cluster, ticket_node, max_threads)?,
        })
    }

    /// The node of the ticket dispenser.
    pub fn ticket_node(&self) -> NodeId {
        self.w.ticket_node()
    }

    /// The most threads that can use the lock.
    pub fn max_threads(&self) -> usize {
        self.w.max_threads()
    }
}

impl RawLock for RawSLock {
    fn acquire(&self, ctx: &Ctx) -> Result<u64> {
        self.w.acquire(ctx)
    }

    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>> {
        self.w.try_acquire(ctx)
    }

    fn release(&self, ctx: &Ctx) -> Result<()> {
        // Check first: a thread that does not hold the lock must not even fence.
        if self.w.held(ctx)?.is_none() {
            return Err(Error::NotHeld);
        }
        ctx.gf_all()?;
        self.w.release(ctx)
    }

    fn held(&self, ctx: &Ctx) -> Result<Option<u64>> {
        self.w.held(ctx)
    }
}
