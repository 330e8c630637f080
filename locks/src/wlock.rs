//! The weak lock (Fig. 10, distributed ticket lock) and the strong lock built on it.
//!
//! | word | where | written by | read by |
//! |---|---|---|---|
//! | `tkt` | the ticket node | remote FAA (acquire), remote CAS (`try_acquire`) | remote FAA/CAS, get (`try_acquire`) |
//! | `slots` | the ticket node | remote FAA (a thread's first use: its `rel` slot) | — |
//! | `owners[j]`, one per slot | the ticket node | at a thread's first use: a put into the fresh slot's word, or a remote CAS taking a slot over (a slot handed back by another node's thread, or whose owner's incarnation is dead) | the get of a first use that finds every slot taken, looking for a dead owner's |
//! | `rel[j]`, one sv per slot | a copy on every node | thread j: `store` then `bcast` (release) | every thread: `load` of its node's copy (acquire) |
//! | `waiting[k][i]`, 16 slots per node | the ticket node | puts of a thread of node k, in its context's own slot: `TAKING` before its FAA or CAS on `tkt` (same queue pair, so it lands first), its ticket + 1 when it first has to wait, and `turn` (ticket + 1) when it enters, each with its node's incarnation tag (bits 54-61) | a waiter stalled at a ticket, when a node is dead or the stall lasts (one get of every slot) |
//! | `ab[K]` | the ticket node | remote CAS of a thread that gave its ticket up | gets of the waiting threads |
//! | `turn` | per thread, its own node | the FAA's (or CAS's) local write, then `store(turn, (t+1) | tag)` on entering | the thread; the hold put |

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loco_rdmawait::protocol::Machine;
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WORD};
use loco_rdmawaitrmw::Rmw;
use loco_sv::SharedVar;

use crate::cohort::{self, Cohorts, Hold, NetLock};
use crate::marks::{self, MARKS, POISON};
use crate::protocol::{self, NONE, WL_ACQ, WL_REL};
use crate::run::{Run, Spinner};
use crate::thread::{
    keep_claim, next_lock_id, reach, registered, take_claim, thread_lock, ClaimStep, Deadline,
    Freed, Home, OnDrop, Pace, SlotClaim, Spin, ThreadLock, WaitSlots, WAIT_SLOTS,
};
use crate::{Error, RawLock, Result};

/// How often a stalled waiter looks for an abandoned ticket (a round trip to the ticket node).
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// The weak lock's protocol (docs/model.md §5.3, Fig. 10): a distributed ticket lock.
///
/// A ticket dispenser `tkt` on a chosen node; per thread a private `turn` and a shared variable
/// `rel[t]`. Acquire: `rfaa(tkt, 1, ret=turn, d); wait(d)`, then spin over the local copies of
/// all `rel[*]` until one equals `turn`, then announce the hold (`put(held, turn)`, into the
/// thread's `waiting` slot, claimed before the FAA).
/// Release: `wait(d)` (the announcement), `store(rel[me], turn+1)` and `bcast(rel[me], all
/// other live nodes, d)`, not waited for. Both are [`protocol::wlock_acquire`]
/// and [`protocol::wlock_release`], the definitions the litmus explorer checks. See
/// [`WLock`](crate::WLock) for the guarantee, and for what happens when threads give up, die,
/// or come and go.
#[derive(Debug)]
pub struct RawWLock {
    id: u64,
    cluster: Cluster,
    tkt: Loc,
    slots: Loc,
    ab: Loc,
    waiting: Loc,
    owners: Loc,
    rel: Vec<SharedVar>,
    pool: Arc<SlotPool>,
    debts: Arc<marks::Debts>,
    wait_slots: Arc<WaitSlots>,
    home: Home,
    cohorts: Cohorts,
}

/// `rel` slots handed back by dropped contexts (process-local), with the last value their
/// owner stored: a new owner first checks that this value has landed on every live node it can
/// have reached, so that no late put of the old owner can overwrite the new owner's releases.
#[derive(Debug, Default)]
struct SlotPool {
    free: Mutex<Vec<Freed>>,
}

impl SlotPool {
    fn take(&self) -> Option<Freed> {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Back at the far end, behind the slots handed back since.
    fn put_back(&self, f: Freed) {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(0, f);
    }
}

impl OnDrop for SlotPool {
    fn dropped(&self, freed: Freed, _dirty: bool) {
        // Also a thread of an incarnation that has died: its slot is then taken over as any
        // dead owner's (a CAS of its owner record), whether from here or by another process.
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(freed);
    }
}

/// The owner record of a `rel` slot (`owners[j]`): the node of the thread that holds it (its
/// index plus one, in bits 32-48) and the low 32 bits of the incarnation its context belongs
/// to. 0: none recorded (never claimed, or the record of a fresh slot not landed yet), which
/// nobody takes over.
fn record(node: NodeId, incarnation: u64) -> u64 {
    ((node.index() as u64 + 1) << 32) | (incarnation & 0xffff_ffff)
}

impl RawWLock {
    /// A weak lock for at most `max_threads` threads at a time, its ticket dispenser on
    /// `ticket_node`.
    ///
    /// Each thread that uses the lock takes one of the `max_threads` `rel` slots on first use;
    /// the slot goes back when the thread's context is dropped (or it calls
    /// [`RawLock::leave`]) and serves the process's next thread. The bound counts threads
    /// using the lock at once, over every process of the cluster (a slot handed back is reused
    /// by the same process only). A slot whose thread's node died (or restarted) since is
    /// taken over by a thread of any process once every slot has been taken. Acquire scans all
    /// slots' local copies, so pick the bound close to the real thread count.
    pub fn new(cluster: &Cluster, ticket_node: NodeId, max_threads: usize) -> Result<Self> {
        if max_threads == 0 {
            return Err(Error::NoThreads);
        }
        // Check the memory first: running out half-way would strand what was taken (allocations
        // are never freed). One `rel` word per thread on every node, and on the ticket node the
        // dispenser, the slot counter, the abandon marks, the `waiting` slots and one owner
        // record per thread.
        let per_node = (max_threads as u64).saturating_mul(WORD);
        for node in cluster.node_ids() {
            let extra = if node == ticket_node {
                ((2 + MARKS + WAIT_SLOTS * cluster.nodes() as u64) * WORD).saturating_add(per_node)
            } else {
                0
            };
            cluster.check_free(node, per_node.saturating_add(extra))?;
        }
        let tkt = cluster.alloc_word(ticket_node)?;
        let slots = cluster.alloc_word(ticket_node)?;
        let ab = cluster.alloc_words(ticket_node, MARKS)?;
        let waiting = cluster.alloc_words(ticket_node, cluster.nodes() as u64 * WAIT_SLOTS)?;
        let owners = cluster.alloc_words(ticket_node, max_threads as u64)?;
        let rel = (0..max_threads)
            .map(|_| SharedVar::new(cluster))
            .collect::<loco_sv::Result<Vec<_>>>()?;
        Ok(RawWLock {
            id: next_lock_id(),
            cluster: cluster.clone(),
            tkt,
            slots,
            ab,
            waiting,
            owners,
            rel,
            pool: Arc::default(),
            debts: Default::default(),
            wait_slots: Default::default(),
            home: Home::new(cluster, ticket_node)?,
            cohorts: Cohorts::new(cluster.nodes()),
        })
    }

    /// The node of the ticket dispenser.
    pub fn ticket_node(&self) -> NodeId {
        self.tkt.node()
    }

    /// The most threads that can use the lock at once.
    pub fn max_threads(&self) -> usize {
        self.rel.len()
    }

    /// The calling thread's state; on first use, takes a `rel` slot ([`Self::claim_slot`]).
    fn me(&self, ctx: &Ctx) -> Result<Rc<ThreadLock>> {
        self.me_by(ctx, &Deadline::after(self.cluster.timeout()))
    }

    /// The calling thread's state if it has used the lock, without taking a slot: for calls
    /// about its hold, which a thread that never acquired does not have.
    fn known(&self, ctx: &Ctx) -> Result<Option<Rc<ThreadLock>>> {
        registered(ctx, self.cluster.id(), self.id)
    }

    /// [`Self::me`], registering (on first use) within the caller's deadline `d`.
    fn me_by(&self, ctx: &Ctx, d: &Deadline) -> Result<Rc<ThreadLock>> {
        thread_lock(ctx, self.cluster.id(), self.id, |ctx| {
            let slot = self.claim_slot(ctx, d)?;
            // If the state cannot be made, the slot (its record names this thread) goes back.
            // Whatever earlier owners sent has landed or cannot land (see `claim_slot`).
            let give_back = || {
                let freed = Freed {
                    slot,
                    last: 0,
                    node: ctx.node(),
                    reach: reach(ctx),
                };
                self.pool.dropped(freed, false);
            };
            let rels = self
                .rel
                .iter()
                .map(|s| s.local(ctx))
                .collect::<loco_sv::Result<Vec<_>>>();
            let rels = match rels {
                Ok(r) => r,
                Err(e) => {
                    give_back();
                    return Err(e.into());
                }
            };
            let on_drop: Arc<dyn OnDrop> = self.pool.clone();
            let st = match ThreadLock::new(ctx, slot, rels, Some(on_drop)) {
                Ok(st) => st
                    .owing_to(self.debts.clone())
                    .announcing_in(self.wait_slots.clone()),
                Err(e) => {
                    give_back();
                    return Err(e);
                }
            };
            tracing::debug!(target: "loco::locks", lock = self.id, node = %ctx.node(), slot, "wlock: thread registered");
            Ok(st)
        })
    }

    /// A `rel` slot for the calling thread's first use of the lock, within `d`, its owner record
    /// (`owners[slot]`) naming the thread's node and incarnation. In order:
    /// - a claim that a call before gave up waiting for goes on (never a second one: it would
    ///   take another slot and lose the first);
    /// - a slot handed back in this process ([`Self::recycled`]);
    /// - a fresh slot: a remote FAA on `slots`, then the put of its record, waited for (one
    ///   round trip more than the FAA alone, once per thread);
    /// - once the FAA finds every slot taken, a slot whose owner's incarnation is dead
    ///   ([`Self::take_over`]); else [`Error::TooManyThreads`].
    ///
    /// The slot's earlier owners cannot overwrite the thread's releases: what a live one sent
    /// has landed ([`Self::check_landed`]), and a dead one's last writes have landed or been
    /// dropped (the failure detector is trusted, as for skipping a dead holder).
    fn claim_slot(&self, ctx: &Ctx, d: &Deadline) -> Result<usize> {
        let mine = record(ctx.node(), ctx.incarnation(ctx.node()).unwrap_or(0));
        if let Some(claim) = take_claim(ctx, self.cluster.id(), self.id)? {
            if let Ok(slot) = self.advance(ctx, claim, mine, d)? {
                return Ok(slot);
            }
        }
        if let Some(slot) = self.recycled(ctx, mine, d)? {
            return Ok(slot);
        }
        let st = ThreadLock::new(ctx, usize::MAX, Vec::new(), None)?;
        ctx.rfaa(&self.slots, 1, &st.word, WL_ACQ)?;
        let claim = SlotClaim {
            st,
            step: ClaimStep::Faa,
        };
        self.advance(ctx, claim, mine, d)?
            .map_err(|_| Error::TooManyThreads {
                max: self.rel.len(),
            })
    }

    /// Waits (within `d`) for what `claim` posted, then takes its next step, until the slot is
    /// the thread's. `Err(claim)`: a CAS taking a slot over read another record (somebody else
    /// took it). A wait that runs out of time keeps the claim for the thread's next call.
    fn advance(
        &self,
        ctx: &Ctx,
        mut claim: SlotClaim,
        mine: u64,
        d: &Deadline,
    ) -> Result<std::result::Result<usize, SlotClaim>> {
        loop {
            if let Err(e) = d.wait(ctx, WL_ACQ) {
                claim.st.dirty.set(true);
                if matches!(e, Error::Timeout { .. }) {
                    // Still on its way (an FAA still takes a slot): the next call waits for it.
                    keep_claim(ctx, self.cluster.id(), self.id, claim)?;
                }
                return Err(e);
            }
            claim.st.dirty.set(false);
            let v = ctx.load(&claim.st.word)?;
            match claim.step {
                ClaimStep::Faa => {
                    let Some(slot) = usize::try_from(v).ok().filter(|&j| j < self.rel.len()) else {
                        return self.take_over(ctx, claim, mine, d).map(Ok);
                    };
                    // A fresh slot: its record, so that it can be taken over once this thread's
                    // incarnation has died.
                    ctx.store(&claim.st.note, mine)?;
                    ctx.put(&self.owners.word(slot as u64)?, &claim.st.note, WL_ACQ)?;
                    claim.step = ClaimStep::Record { slot };
                }
                ClaimStep::Record { slot } => return Ok(Ok(slot)),
                ClaimStep::Adopt { slot, from } if v == from => return Ok(Ok(slot)),
                ClaimStep::Adopt { .. } => return Ok(Err(claim)),
            }
        }
    }

    /// Every slot has been taken (the FAA of `claim` read past the bound): takes over one whose
    /// owner record names a dead incarnation ([`Self::owner_dead`]) with a remote CAS of the
    /// record to `mine`. First reads every record: one get, into a private buffer of
    /// `max_threads` words on the thread's node, given back after. [`Error::TooManyThreads`]
    /// if no slot's owner is dead.
    fn take_over(&self, ctx: &Ctx, mut claim: SlotClaim, mine: u64, d: &Deadline) -> Result<usize> {
        let buf = self.cluster.alloc_private(ctx.node(), self.owners.len())?;
        let read = ctx
            .get(&buf, &self.owners, WL_ACQ)
            .map_err(Error::from)
            .and_then(|()| d.wait(ctx, WL_ACQ));
        if let Err(e) = read {
            // The get may still write the buffer: kept (leaked), which is safe.
            claim.st.dirty.set(true);
            return Err(e);
        }
        let records = (0..self.rel.len() as u64)
            .map(|j| Ok(ctx.load(&buf.word(j)?)?))
            .collect::<Result<Vec<u64>>>();
        let _ = self.cluster.free_private(buf);
        // Looked at after the get completed, as the claim check does: a record names an
        // incarnation this process knew by then.
        for (slot, from) in records?.into_iter().enumerate() {
            if !self.owner_dead(from) {
                continue;
            }
            ctx.rcas(
                &self.owners.word(slot as u64)?,
                from,
                mine,
                &claim.st.word,
                WL_ACQ,
            )?;
            claim.step = ClaimStep::Adopt { slot, from };
            match self.advance(ctx, claim, mine, d)? {
                Ok(slot) => {
                    tracing::debug!(target: "loco::locks", lock = self.id, node = %ctx.node(), slot,
                        "wlock: took over the rel slot of a dead incarnation's thread");
                    return Ok(slot);
                }
                Err(back) => claim = back,
            }
        }
        Err(Error::TooManyThreads {
            max: self.rel.len(),
        })
    }

    /// Whether the owner record `rec` names an incarnation that is dead: its node is reported
    /// dead, or has another incarnation now (as this process knows it; it learnt of an
    /// incarnation before that one had a context, so before its record). That thread writes
    /// nothing more. A record from an incarnation whose low 32 bits a later one shares reads as
    /// live: its slot is kept (lost), never taken from a live owner. 0 (no record) is nobody's.
    fn owner_dead(&self, rec: u64) -> bool {
        let Some(node) = (rec >> 32)
            .checked_sub(1)
            .and_then(|i| u16::try_from(i).ok())
            .map(NodeId)
            .filter(|&n| self.cluster.check_node(n).is_ok())
        else {
            return false;
        };
        if !self.cluster.is_alive(node) {
            return true;
        }
        match self.cluster.incarnation(node) {
            Ok(now) if now != 0 => now & 0xffff_ffff != rec & 0xffff_ffff,
            _ => false,
        }
    }

    /// A slot handed back in this process, if one is usable now. Unless its owner's
    /// incarnation is dead, its owner's last release must have landed first
    /// ([`Self::check_landed`]); a slot not usable yet goes back to the far end of the pool. A
    /// slot another incarnation or node handed back is the thread's only once a remote CAS has
    /// moved its owner record from that owner's to `mine`: a thread taking it over as a dead
    /// owner's (of any process) may have been first, and then it leaves the pool.
    fn recycled(&self, ctx: &Ctx, mine: u64, d: &Deadline) -> Result<Option<usize>> {
        while let Some(f) = self.pool.take() {
            let then = f.reach.get(f.node.index()).copied().unwrap_or(0);
            let same = f.node == ctx.node() && Some(then) == ctx.incarnation(ctx.node());
            let from = record(f.node, then);
            if same || !self.owner_dead(from) {
                if let Err(e) = self.check_landed(ctx, &f, d) {
                    tracing::debug!(target: "loco::locks", lock = self.id, slot = f.slot, error = %e,
                        "wlock: a recycled slot is not usable yet");
                    self.pool.put_back(f);
                    return Ok(None);
                }
            }
            if same {
                return Ok(Some(f.slot));
            }
            let posted = ThreadLock::new(ctx, usize::MAX, Vec::new(), None).and_then(|st| {
                let w = self.owners.word(f.slot as u64)?;
                ctx.rcas(&w, from, mine, &st.word, WL_ACQ)?;
                Ok(st)
            });
            let st = match posted {
                Ok(st) => st,
                Err(e) => {
                    self.pool.put_back(f);
                    return Err(e);
                }
            };
            let step = ClaimStep::Adopt { slot: f.slot, from };
            match self.advance(ctx, SlotClaim { st, step }, mine, d)? {
                Ok(slot) => return Ok(Some(slot)),
                Err(_) => {
                    tracing::debug!(target: "loco::locks", lock = self.id, slot = f.slot,
                        "wlock: a slot handed back was taken over meanwhile")
                }
            }
        }
        Ok(None)
    }

    /// Before reusing the slot `f` handed back: every live node's copy of `rel[f.slot]` holds
    /// `f.last`, its owner's last value. Each of its releases was reaped (source read) before
    /// the next one stored, so only its last release's puts carry that value, and puts towards
    /// a node land in order: once a copy reads it, no put of the old owner towards that node
    /// is in flight. A node that has restarted since the owner's context was made is not
    /// waited for: nothing of that context reaches the new incarnation (whose copy reads 0
    /// until a release reaches it).
    fn check_landed(&self, ctx: &Ctx, f: &Freed, d: &Deadline) -> Result<()> {
        if f.last == 0 {
            return Ok(());
        }
        let tmp = ThreadLock::new(ctx, usize::MAX, Vec::new(), None)?;
        let mut spin = Spin::new();
        for k in self.cluster.node_ids() {
            let then = f.reach.get(k.index()).copied().unwrap_or(0);
            let restarted = || then != 0 && self.cluster.incarnation(k).is_ok_and(|i| i != then);
            loop {
                if !self.cluster.is_alive(k) || restarted() {
                    break;
                }
                ctx.get(&tmp.word, &self.rel[f.slot].copy(k)?, WL_ACQ)?;
                if let Err(e) = d.wait(ctx, WL_ACQ) {
                    tmp.dirty.set(true);
                    return Err(e);
                }
                if ctx.load(&tmp.word)? == f.last {
                    break;
                }
                if d.expired() {
                    return Err(d.timeout());
                }
                spin.wait(&self.cluster)?;
            }
        }
        Ok(())
    }

    /// Whether some local copy of `rel[*]` reads `t` (poison bit aside): ticket `t` may enter.
    /// Returns the raw value found, and otherwise the highest ticket released to.
    fn released_to(ctx: &Ctx, me: &ThreadLock, t: u64) -> Result<std::result::Result<u64, u64>> {
        Self::released_in(ctx, &me.rels, t)
    }

    /// [`Self::released_to`] over the copies `rels`.
    fn released_in(ctx: &Ctx, rels: &[Loc], t: u64) -> Result<std::result::Result<u64, u64>> {
        let mut high = 0;
        let mut any = false;
        for r in rels {
            let raw = ctx.load(r)?;
            if marks::ticket(raw) == t {
                return Ok(Ok(raw));
            }
            let v = marks::ticket(raw);
            if !any || v.wrapping_sub(high) < 1 << 62 {
                high = v;
                any = true;
            }
        }
        Ok(Err(high))
    }

    /// The nodes a release publishes to: every live node (a dead node's copies are gone, and
    /// its threads wait no more).
    fn live_nodes(&self) -> Vec<NodeId> {
        self.cluster
            .node_ids()
            .filter(|&n| self.cluster.is_alive(n))
            .collect()
    }

    /// Stores `raw` in the thread's own `rel` slot and broadcasts it to every live node
    /// ([`protocol::wlock_publish`]): a forwarding release of an abandoned ticket.
    fn publish(&self, ctx: &Ctx, me: &ThreadLock, raw: u64, d: &Deadline) -> Result<()> {
        let copies = self.rel[me.slot].copies();
        protocol::wlock_publish(
            &mut self.run(ctx, me, d),
            |n| copies[n.index()],
            &self.live_nodes(),
            raw,
        )
    }

    /// The lock's words as the calling thread uses them.
    fn words(&self, me: &ThreadLock) -> Result<protocol::WLockWords<Loc>> {
        Ok(protocol::WLockWords {
            tkt: self.tkt,
            held: me.waiting_word(&self.waiting)?,
            ab: self.ab,
            turn: me.word,
            scratch: me.scratch,
            tag: me.tag(),
        })
    }

    fn run<'a>(&'a self, ctx: &'a Ctx, me: &'a ThreadLock, d: &'a Deadline) -> Run<'a> {
        Run::new(ctx, me, d, Spinner::W(self))
    }

    /// The lock is released to `r` (some copy on this node reads `raw`, ticket `r`) and nobody
    /// has entered: if `r` is marked abandoned, or no live thread can hold it (a dead node's
    /// thread announced it, or, once the copies have stopped at it for `stalled` >=
    /// [`UNCLAIMED_AFTER`](crate::thread::UNCLAIMED_AFTER), no live thread claims it: [`ThreadLock::claims`]), release to
    /// `r + 1` on its behalf (poisoned unless it was given up). Returns whether it did.
    fn forward(
        &self,
        ctx: &Ctx,
        me: &ThreadLock,
        raw: u64,
        stalled: Duration,
        d: &Deadline,
    ) -> Result<bool> {
        let r = marks::ticket(raw);
        let w = self.words(me)?;
        // A marked ticket: the protocol's step, which the explorer checks (what it stores in
        // the thread's slot is noted by the machine, for the slot's next owner).
        let seen = self.with_publish(me, |publish| {
            protocol::wlock_pass_on(&mut self.run(ctx, me, d), &w, publish, raw)
        });
        if seen? == r + 1 {
            tracing::debug!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = r,
                "wlock: passed an abandoned ticket on");
            return Ok(true);
        }
        // Only a thread that cannot be live is skipped: a live holder is waited for.
        let wait = || self.run(ctx, me, d).wait(WL_ACQ);
        let Some(whose) = me.skippable(ctx, &self.waiting, r, stalled, WL_ACQ, wait)? else {
            return Ok(false);
        };
        // The copies still stop at r after the claims were read. Should r's holder have
        // released and claimed anew meanwhile (its release's puts read before its claim, but
        // may land here later), this forward only publishes r+1 once more: r+1 still enters
        // once, told of a poisoning that did not happen (conservative).
        if Self::released_in(ctx, &me.rels, NONE)? != Err(r) {
            return Ok(true);
        }
        // Our previous broadcast must have read its source before we store again.
        self.run(ctx, me, d).wait(WL_REL)?;
        self.publish(ctx, me, (r + 1) | POISON, d)?;
        whose.report("wlock", self.id, ctx.node(), r);
        Ok(true)
    }

    /// Runs `f` with where the thread publishes a release: its own slot's copies, to every
    /// live node.
    fn with_publish<T>(
        &self,
        me: &ThreadLock,
        f: impl FnOnce(protocol::Publish<'_, Loc>) -> T,
    ) -> T {
        let copies = self.rel[me.slot].copies();
        let nodes = self.live_nodes();
        let mine = |n: NodeId| copies[n.index()];
        f(protocol::Publish {
            mine: &mine,
            nodes: &nodes,
        })
    }

    /// The raw copy value that releases to `r`, if some local copy does.
    fn copy_of(ctx: &Ctx, me: &ThreadLock, r: u64) -> Result<Option<u64>> {
        Ok(Self::released_to(ctx, me, r)?.ok())
    }

    /// The protocol's spin ([`Machine::await_any`]):
    /// until one of the copies `rels` reads ticket `t` (poison bit aside), with the failure
    /// paths: abandoned tickets are passed on, and a waiter that gives up abandons its ticket.
    /// Returns the value read.
    pub(crate) fn spin(
        &self,
        ctx: &Ctx,
        me: &ThreadLock,
        rels: &[Loc],
        t: u64,
        d: &Deadline,
    ) -> Result<u64> {
        let r = self.wait_turn(ctx, me, rels, t, d);
        crate::run::spun(ctx, r, || self.abandon(ctx, me, t))
    }

    fn wait_turn(
        &self,
        ctx: &Ctx,
        me: &ThreadLock,
        rels: &[Loc],
        t: u64,
        d: &Deadline,
    ) -> Result<u64> {
        let mut spin = Spin::new();
        let mut pace = Pace::default();
        let mut looked = loco_rdmawait::clock::now();
        let mut announced = false;
        // Since when the copies have stopped at the same ticket.
        let mut stall = (NONE, loco_rdmawait::clock::now());
        // Tickets from the released-to one to ours.
        let mut ahead;
        loop {
            match Self::released_in(ctx, rels, t)? {
                Ok(raw) => {
                    // A thread of a node reported dead does not enter (the others may skip it).
                    self.cluster.check_alive(ctx.node())?;
                    return Ok(raw);
                }
                Err(high) => {
                    if high != stall.0 {
                        stall = (high, loco_rdmawait::clock::now());
                    }
                    pace.saw(high, loco_rdmawait::clock::now(), None);
                    ahead = t.wrapping_sub(high);
                    if !announced {
                        // A waiter announces its ticket as soon as it has to wait (not waited
                        // for): if it dies from then on, the others can skip its ticket.
                        let w = me.waiting_word(&self.waiting)?;
                        me.announce(ctx, &w, t, WL_REL)?;
                        me.unreaped.set(true);
                        announced = true;
                    }
                    if loco_rdmawait::clock::now().saturating_duration_since(looked) >= LOOK_EVERY
                        && high.wrapping_sub(t) >= 1 << 62
                    {
                        looked = loco_rdmawait::clock::now();
                        // A thread of a node reported dead stops (as its process would have).
                        self.cluster.check_alive(ctx.node())?;
                        self.cluster.check_alive(self.ticket_node())?;
                        self.home.check(&self.cluster)?;
                        self.pay_debts(ctx, me, d);
                        let stalled = looked.saturating_duration_since(stall.1);
                        if let Some(raw) = Self::copy_of(ctx, me, high)? {
                            if self.forward(ctx, me, raw, stalled, d)? {
                                continue;
                            }
                        }
                    }
                }
            }
            if d.expired() {
                return Err(d.timeout());
            }
            // Behind other waiters, stay off the CPU for a part of the time their holds take,
            // as the node lock's waiters stay off the network (DSLR's waiting in proportion to
            // the place in the queue; the next in line only spins): on a host with more threads
            // than CPUs the holder and, on Soft-RoCE, the NIC need the CPU these looks take.
            if ahead < 1 << 62 {
                spin.pause(&self.cluster, pace.pause_for(ahead).min(d.remaining()))?;
            }
            spin.wait(&self.cluster)?;
        }
    }

    /// Gives ticket `u` up (see [`marks::Debts::abandon`]).
    fn abandon(&self, ctx: &Ctx, me: &ThreadLock, u: u64) {
        // A ticket of a home that restarted means nothing in its fresh words: nothing to mark.
        if self.home.check(&self.cluster).is_err() {
            return;
        }
        self.debts.abandon(self.id, "wlock", ctx.node(), u, |d| {
            self.try_abandon(ctx, me, u, d)
        });
    }

    /// Marks the tickets given up earlier in this process that could not be marked then.
    fn pay_debts(&self, ctx: &Ctx, me: &ThreadLock, within: &Deadline) {
        if self.home.check(&self.cluster).is_err() {
            return;
        }
        self.debts
            .pay(within, |u, d| self.try_abandon(ctx, me, u, d));
    }

    /// Gives ticket `u` up with the protocol's step ([`protocol::wlock_give_up`]); returns
    /// whether it is done (false: the mark is owed).
    fn try_abandon(&self, ctx: &Ctx, me: &ThreadLock, u: u64, d: &Deadline) -> Result<bool> {
        let w = self.words(me)?;
        let owed = std::cell::Cell::new(false);
        let r = self.with_publish(me, |publish| {
            protocol::wlock_give_up(&mut self.run(ctx, me, d), &w, &me.rels, publish, u, |_| {
                owed.set(true);
                Ok(())
            })
        });
        r?;
        Ok(!owed.get())
    }

    fn settle(&self, ctx: &Ctx, me: &ThreadLock, d: &Deadline) -> Result<()> {
        if me.pending_faa.get() || me.pending_cas.get().is_some() {
            d.wait(ctx, WL_ACQ)?;
            me.dirty.set(false);
            let u = ctx.load(&me.word)?;
            let ours = me.pending_faa.get() || me.pending_cas.get() == Some(u);
            me.pending_faa.set(false);
            me.pending_cas.set(None);
            if ours {
                self.abandon(ctx, me, u);
            }
        }
        self.pay_debts(ctx, me, d);
        Ok(())
    }

    fn enter(&self, ctx: &Ctx, me: &ThreadLock, t: u64, raw: u64) -> u64 {
        me.held.set(Some(t));
        me.poisoned.set(marks::poisoned(raw));
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "wlock acquired");
        t
    }

    fn acquire_deadline(&self, ctx: &Ctx, d: &Deadline) -> Result<u64> {
        let me = self.me_by(ctx, d)?;
        self.home.check_not_held(&self.cluster, ctx, &me)?;
        self.cluster.check_open()?;
        self.settle(ctx, &me, d)?;
        self.cluster.check_alive(self.ticket_node())?;
        self.home.check(&self.cluster)?;
        let w = self.words(&me)?;
        let mut run = self.run(ctx, &me, d);
        // Claimed before the ticket is taken (so that a ticket is never nobody's), and after
        // the thread's last release has read its source.
        run.wait(WL_REL)?;
        me.claim(ctx, &self.waiting, WL_ACQ)?;
        let acquired = self.with_publish(&me, |publish| {
            protocol::wlock_acquire(&mut run, &w, &me.rels, publish)
        });
        match acquired {
            Ok((t, raw)) => Ok(self.enter(ctx, &me, t, raw)),
            // Released to us, but entering failed: pass the ticket on rather than strand it.
            Err(e) => match run.spun() {
                Some(t) => crate::run::spun(ctx, Err(e), || self.abandon(ctx, &me, t)),
                None => Err(e),
            },
        }
    }

    fn try_acquire_deadline(&self, ctx: &Ctx, d: &Deadline) -> Result<Option<u64>> {
        let me = self.me_by(ctx, d)?;
        self.home.check_not_held(&self.cluster, ctx, &me)?;
        self.cluster.check_open()?;
        self.run(ctx, &me, d).wait(WL_REL)?;
        self.settle(ctx, &me, d)?;
        self.home.check(&self.cluster)?;
        for _ in 0..=MARKS {
            // The next ticket; it may enter at once if some rel copy already reads it.
            ctx.get(&me.word, &self.tkt, WL_ACQ)?;
            if let Err(e) = d.wait(ctx, WL_ACQ) {
                me.dirty.set(true);
                return Err(e);
            }
            me.dirty.set(false);
            let v = ctx.load(&me.word)?;
            let raw = match Self::released_to(ctx, &me, v)? {
                Ok(raw) => raw,
                Err(high) => {
                    // Free after all if the tickets in between were given up.
                    match Self::copy_of(ctx, &me, high)? {
                        Some(raw)
                            if high.wrapping_sub(v) >= 1 << 62
                                && self.forward(ctx, &me, raw, Duration::ZERO, d)? =>
                        {
                            continue
                        }
                        _ => return Ok(None),
                    }
                }
            };
            // Take ticket v only if nobody took it meanwhile: no ticket is ever left behind.
            me.claim(ctx, &self.waiting, WL_ACQ)?;
            ctx.rcas(&self.tkt, v, v + 1, &me.word, WL_ACQ)?;
            if let Err(e) = d.wait(ctx, WL_ACQ) {
                // Whether the CAS took the ticket is unknown: read it on the next call.
                me.dirty.set(true);
                me.pending_cas.set(Some(v));
                return Err(e);
            }
            if ctx.load(&me.word)? != v {
                // Took nothing: the claim goes.
                me.unclaim(ctx, &self.waiting, WL_REL)?;
                return Ok(None);
            }
            let w = self.words(&me)?;
            if let Err(e) = protocol::wlock_enter(&mut self.run(ctx, &me, d), &w, v) {
                // Ticket v is ours and released to: pass it on rather than strand it.
                return crate::run::spun(ctx, Err(e), || self.abandon(ctx, &me, v)).map(Some);
            }
            return Ok(Some(self.enter(ctx, &me, v, raw)));
        }
        Ok(None)
    }

    /// The weak release ([`protocol::wlock_release`]) or, with `strong`, the strong one
    /// ([`protocol::slock_release`]: a global fence first), to every live node.
    fn release_with(&self, ctx: &Ctx, poison: bool, strong: bool) -> Result<()> {
        let me = self.me(ctx)?;
        // Checked first: a thread that does not hold the lock must not even fence.
        let t = me.held.get().ok_or(Error::NotHeld)?;
        self.home.check_release(&self.cluster, &me)?;
        let nodes = self.live_nodes();
        let copies = self.rel[me.slot].copies();
        let mine = |n: NodeId| copies[n.index()];
        let d = Deadline::after(self.cluster.timeout());
        let mut run = self.run(ctx, &me, &d);
        if strong {
            // The fence's words only (no node to check): a node that dies after `live_nodes` is
            // dropped from the fence by the machine, as from the broadcast.
            let fence = loco_sv::gf_words(ctx, &[])?;
            protocol::slock_release(&mut run, &fence, mine, &nodes, t, poison)?;
        } else {
            protocol::wlock_release(&mut run, mine, &nodes, t, poison)?;
        }
        me.end_hold();
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, poison, strong, "wlock released");
        Ok(())
    }

    /// A local handover ([`protocol::wlock_hand_off`], or with `strong`
    /// [`protocol::slock_hand_off`]: a global fence over the live nodes first).
    fn hand_off_with(&self, ctx: &Ctx, strong: bool) -> Result<Hold> {
        let me = self.me(ctx)?;
        let t = me.held.get().ok_or(Error::NotHeld)?;
        self.home.check_release(&self.cluster, &me)?;
        let d = Deadline::after(self.cluster.timeout());
        let mut run = self.run(ctx, &me, &d);
        if strong {
            let fence = loco_sv::gf_words(ctx, &[])?;
            protocol::slock_hand_off(&mut run, &fence, &self.live_nodes())?;
        } else {
            protocol::wlock_hand_off(&mut run)?;
        }
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, strong, "wlock handed off");
        Ok(me.hand_off(t, false))
    }

    /// Takes over a hold handed off by another thread of this node.
    fn take_over_hold(&self, ctx: &Ctx, hold: Hold) -> Result<u64> {
        let me = self.me(ctx)?;
        let t = cohort::take_over(ctx, &me, &self.home, &self.cluster, hold)?;
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "wlock taken over");
        Ok(t)
    }

    /// The strong release's fence (`gf` over the live nodes) by the holding thread, without
    /// releasing.
    fn fence_held(&self, ctx: &Ctx) -> Result<()> {
        let me = self.me(ctx)?;
        me.held.get().ok_or(Error::NotHeld)?;
        self.home.check_release(&self.cluster, &me)?;
        let nodes = self.live_nodes();
        let d = Deadline::after(self.cluster.timeout());
        let fence = loco_sv::gf_words(ctx, &[])?;
        let mut run = self.run(ctx, &me, &d);
        loco_sv::protocol::gf(&mut run, &fence, &nodes)?;
        Ok(())
    }

    fn leave_now(&self, ctx: &Ctx) -> Result<()> {
        // A thread that has not used the lock (or left it already) has nothing to hand back.
        let Some(me) = self.known(ctx)? else {
            return Ok(());
        };
        self.home.check_not_held(&self.cluster, ctx, &me)?;
        let d = Deadline::after(self.cluster.timeout());
        self.settle(ctx, &me, &d)?;
        let mut run = self.run(ctx, &me, &d);
        run.wait(WL_REL)?;
        run.wait(WL_ACQ)?;
        me.land_slot(ctx, WL_ACQ, || self.run(ctx, &me, &d).wait(WL_ACQ))?;
        drop(me);
        crate::thread::forget(ctx, self.id);
        Ok(())
    }
}

/// The weak lock's (or, with `strong`, the strong lock's) protocol on the network, under its
/// cohorts.
struct Net<'a> {
    w: &'a RawWLock,
    strong: bool,
}

impl NetLock for Net<'_> {
    fn prepare(&self, ctx: &Ctx, d: &Deadline) -> Result<Rc<ThreadLock>> {
        let me = self.w.me_by(ctx, d)?;
        self.w.home.check_not_held(&self.w.cluster, ctx, &me)?;
        Ok(me)
    }

    fn acquire(&self, ctx: &Ctx, d: &Deadline) -> Result<u64> {
        self.w.acquire_deadline(ctx, d)
    }

    fn try_acquire(&self, ctx: &Ctx, d: &Deadline) -> Result<Option<u64>> {
        self.w.try_acquire_deadline(ctx, d)
    }

    fn release(&self, ctx: &Ctx, poison: bool) -> Result<()> {
        self.w.release_with(ctx, poison, self.strong)
    }

    fn hand_off(&self, ctx: &Ctx) -> Result<Hold> {
        self.w.hand_off_with(ctx, self.strong)
    }

    fn take_over(&self, ctx: &Ctx, hold: Hold) -> Result<u64> {
        self.w.take_over_hold(ctx, hold)
    }
}

impl RawWLock {
    fn net(&self, strong: bool) -> Net<'_> {
        Net { w: self, strong }
    }

    /// Acquire through the node's queue (cohorts), within `d`.
    fn acquire_in(&self, ctx: &Ctx, d: &Deadline, strong: bool) -> Result<u64> {
        self.cohorts.acquire(&self.net(strong), ctx, d)
    }

    fn try_acquire_in(&self, ctx: &Ctx, d: &Deadline, strong: bool) -> Result<Option<u64>> {
        self.cohorts.try_acquire(&self.net(strong), ctx, d)
    }

    /// Release through the node's queue: handed over, or released on the network.
    fn release_in(&self, ctx: &Ctx, poison: bool, strong: bool) -> Result<()> {
        let me = self.known(ctx)?.ok_or(Error::NotHeld)?;
        self.cohorts.release(&self.net(strong), ctx, &me, poison)
    }
}

impl RawLock for RawWLock {
    fn name(&self) -> &'static str {
        "wlock"
    }

    fn acquire(&self, ctx: &Ctx) -> Result<u64> {
        self.acquire_in(ctx, &Deadline::after(self.cluster.timeout()), false)
    }

    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>> {
        self.try_acquire_in(ctx, &Deadline::after(self.cluster.timeout()), false)
    }

    fn release(&self, ctx: &Ctx) -> Result<()> {
        self.release_in(ctx, false, false)
    }

    fn held(&self, ctx: &Ctx) -> Result<Option<u64>> {
        crate::thread::held(ctx, self.known(ctx)?)
    }

    fn acquire_until(&self, ctx: &Ctx, deadline: Instant) -> Result<u64> {
        self.acquire_in(ctx, &Deadline::at(deadline), false)
    }

    fn try_acquire_until(&self, ctx: &Ctx, deadline: Instant) -> Result<Option<u64>> {
        self.try_acquire_in(ctx, &Deadline::at(deadline), false)
    }

    fn release_poisoned(&self, ctx: &Ctx) -> Result<()> {
        self.release_in(ctx, true, false)
    }

    fn poisoned(&self, ctx: &Ctx) -> Result<bool> {
        Ok(self
            .known(ctx)?
            .is_some_and(|me| me.held.get().is_some() && me.poisoned.get()))
    }

    fn leave(&self, ctx: &Ctx) -> Result<()> {
        self.leave_now(ctx)
    }

    fn set_cohort(&self, max_handovers: u32) {
        self.cohorts.set_limit(max_handovers);
    }

    fn cohort(&self) -> u32 {
        self.cohorts.limit()
    }
}

/// The strong lock's protocol (docs/model.md §5.4): acquire as [`RawWLock`]; release =
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

impl RawSLock {
    fn release_with(&self, ctx: &Ctx, poison: bool) -> Result<()> {
        self.w.release_in(ctx, poison, true)
    }
}

impl RawLock for RawSLock {
    fn name(&self) -> &'static str {
        "slock"
    }

    fn acquire(&self, ctx: &Ctx) -> Result<u64> {
        let d = Deadline::after(self.w.cluster.timeout());
        self.w.acquire_in(ctx, &d, true)
    }

    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>> {
        let d = Deadline::after(self.w.cluster.timeout());
        self.w.try_acquire_in(ctx, &d, true)
    }

    fn release(&self, ctx: &Ctx) -> Result<()> {
        self.release_with(ctx, false)
    }

    fn held(&self, ctx: &Ctx) -> Result<Option<u64>> {
        self.w.held(ctx)
    }

    fn acquire_until(&self, ctx: &Ctx, deadline: Instant) -> Result<u64> {
        self.w.acquire_in(ctx, &Deadline::at(deadline), true)
    }

    fn try_acquire_until(&self, ctx: &Ctx, deadline: Instant) -> Result<Option<u64>> {
        self.w.try_acquire_in(ctx, &Deadline::at(deadline), true)
    }

    fn release_poisoned(&self, ctx: &Ctx) -> Result<()> {
        self.release_with(ctx, true)
    }

    fn poisoned(&self, ctx: &Ctx) -> Result<bool> {
        self.w.poisoned(ctx)
    }

    fn leave(&self, ctx: &Ctx) -> Result<()> {
        self.w.leave(ctx)
    }

    /// The release's global fence, without the release (see [`RawLock::hand_over_locally`]).
    fn hand_over_locally(&self, ctx: &Ctx) -> Result<()> {
        self.w.fence_held(ctx)
    }

    fn set_cohort(&self, max_handovers: u32) {
        self.w.set_cohort(max_handovers);
    }

    fn cohort(&self) -> u32 {
        self.w.cohort()
    }
}
