//! The node lock (Fig. 13, centralised ticket lock on one node), with abandon marks and
//! holder announcements for failures.
//!
//! | word | where | written by | read by |
//! |---|---|---|---|
//! | `tkt` | node n | remote FAA (acquire), remote CAS (`try_acquire`) | remote FAA/CAS |
//! | `rel` | node n | put of the releaser's `loc` (= its ticket + 1, maybe with the poison bit); remote CAS of a thread passing an abandoned or dead ticket on | gets of the waiting threads; that CAS |
//! | `waiting[k][i]`, 16 slots per node | node n | puts of a thread of node k, in its context's own slot: `TAKING` before its FAA or CAS on `tkt` (same queue pair, so it lands first), its ticket + 1 when it first has to wait, and `loc` (ticket + 1) when it enters, each with its node's incarnation tag (bits 54-61) | a waiter stalled at a ticket, when a node is dead or the stall lasts (one get of every slot) |
//! | `ab[K]` | node n | remote CAS of a thread that gave its ticket up | gets of the waiting threads |
//! | `loc` | per thread, its own node | the FAA's / gets' local writes, then `store(loc, (t+1) | tag)` | the thread; the release and hold puts |

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use loco_rdmawait::{Cluster, Ctx, Loc, NodeId};
use loco_rdmawaitrmw::Rmw;

use crate::cohort::{self, Cohorts, Hold, NetLock};
use crate::marks::{self, MARKS, POISON};
use crate::protocol::{self, NLockWords, NL_ACQ, NL_REL};
use crate::run::{Run, Spinner};
use crate::thread::{
    next_lock_id, registered, thread_lock, Deadline, Home, Pace, Spin, ThreadLock, WaitSlots,
    WAIT_SLOTS,
};
use crate::{Error, RawLock, Result};

/// How often a stalled waiter looks for an abandoned or dead ticket (a round trip to n, plus one
/// per dead node).
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// The node lock's protocol (docs/model.md §5.5, Fig. 13): a centralised ticket lock on node n.
///
/// Acquire: `rfaa(tkt, 1, ret=loc, d)` and, right behind it, a first `get(scratch, rel, d)`;
/// `wait(d)`; unless that read the ticket, `get(loc, rel, d); wait(d)` until it reads the ticket
/// (one round trip for a free lock, where the paper's Fig. 13 takes two); keep `ticket+1` in `loc`, and announce the hold with `put(held, loc)` (not
/// waited; `held` is the thread's `waiting` slot, claimed before the FAA). Release: `rfence(n); rcas(rel, t, t+1, loc)`, not waited for (the paper's Fig. 13
/// puts; a CAS is what keeps the release on rxe, see [`protocol::nlock_release`]). Both are
/// [`protocol::nlock_acquire`] and [`protocol::nlock_release`], the definitions the litmus
/// explorer checks. See [`NLock`](crate::NLock) for the guarantee, and for what happens when
/// threads give up or die.
#[derive(Debug)]
pub struct RawNLock {
    id: u64,
    cluster: Cluster,
    tkt: Loc,
    rel: Loc,
    waiting: Loc,
    ab: Loc,
    debts: Arc<marks::Debts>,
    wait_slots: Arc<WaitSlots>,
    home: Home,
    cohorts: Cohorts,
}

impl RawNLock {
    /// Registered memory a node lock takes on its node, in bytes, in a cluster of `nodes` nodes:
    /// `tkt`, `rel`, 16 `waiting` slots per node and the [`MARKS`](crate::MARKS) abandon marks.
    /// A layer that allocates more words with a lock checks the node has room for both first.
    pub fn bytes(nodes: usize) -> u64 {
        (2 + MARKS)
            .saturating_add((nodes as u64).saturating_mul(WAIT_SLOTS))
            .saturating_mul(loco_rdmawait::WORD)
    }

    /// A node lock on `node`: its words live there, and it publishes the operations towards it.
    pub fn new(cluster: &Cluster, node: NodeId) -> Result<Self> {
        // Check the memory first: running out half-way would strand what was taken (allocations
        // are never freed).
        cluster.check_free(node, Self::bytes(cluster.nodes()))?;
        let tkt = cluster.alloc_word(node)?;
        let rel = cluster.alloc_word(node)?;
        let waiting = cluster.alloc_words(node, cluster.nodes() as u64 * WAIT_SLOTS)?;
        let ab = cluster.alloc_words(node, MARKS)?;
        Ok(RawNLock {
            id: next_lock_id(),
            cluster: cluster.clone(),
            tkt,
            rel,
            waiting,
            ab,
            debts: Default::default(),
            wait_slots: Default::default(),
            home: Home::new(cluster, node)?,
            cohorts: Cohorts::new(cluster.nodes()),
        })
    }

    /// The node the lock is bound to.
    pub fn node(&self) -> NodeId {
        self.tkt.node()
    }

    fn run<'a>(&'a self, ctx: &'a Ctx, me: &'a ThreadLock, d: &'a Deadline) -> Run<'a> {
        Run::new(ctx, me, d, Spinner::N(self))
    }

    /// The lock's words as the calling thread uses them.
    fn words(&self, me: &ThreadLock) -> Result<NLockWords<Loc>> {
        Ok(NLockWords {
            tkt: self.tkt,
            rel: self.rel,
            held: me.waiting_word(&self.waiting)?,
            ab: self.ab,
            loc: me.word,
            scratch: me.scratch,
            tag: me.tag(),
        })
    }

    fn me(&self, ctx: &Ctx) -> Result<Rc<ThreadLock>> {
        thread_lock(ctx, self.cluster.id(), self.id, |ctx| {
            Ok(ThreadLock::new(ctx, 0, Vec::new(), None)?
                .owing_to(self.debts.clone())
                .announcing_in(self.wait_slots.clone()))
        })
    }

    /// The calling thread's state if it has used the lock, without making it: for calls about
    /// its hold, which a thread that never acquired does not have.
    fn known(&self, ctx: &Ctx) -> Result<Option<Rc<ThreadLock>>> {
        registered(ctx, self.cluster.id(), self.id)
    }

    /// `wait(d)` for the acquire's operations; a failure leaves them in flight (`dirty`).
    fn wait_acq(ctx: &Ctx, me: &ThreadLock, d: &Deadline) -> Result<()> {
        match d.wait(ctx, NL_ACQ) {
            Ok(()) => {
                me.dirty.set(false);
                Ok(())
            }
            Err(e) => {
                me.dirty.set(true);
                Err(e)
            }
        }
    }

    /// `get(dst, rel); wait`: the current value of `rel`, raw (poison bit included).
    fn read_rel(&self, ctx: &Ctx, me: &ThreadLock, dst: &Loc, d: &Deadline) -> Result<u64> {
        Self::read(ctx, me, dst, &self.rel, d)
    }

    /// `get(dst, src); wait; load(dst)`.
    fn read(ctx: &Ctx, me: &ThreadLock, dst: &Loc, src: &Loc, d: &Deadline) -> Result<u64> {
        ctx.get(dst, src, NL_ACQ)?;
        Self::wait_acq(ctx, me, d)?;
        Ok(ctx.load(dst)?)
    }

    /// Entered with ticket `t` (the protocol has stored `t+1` in `loc` and announced the hold):
    /// the thread's bookkeeping.
    fn enter(&self, ctx: &Ctx, me: &ThreadLock, t: u64, poisoned: bool) -> u64 {
        me.held.set(Some(t));
        me.poisoned.set(poisoned);
        if poisoned {
            tracing::warn!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t,
                "nlock acquired after a critical section that did not finish (poisoned)");
        }
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "nlock acquired");
        t
    }

    /// The lock is released to `raw` and nobody has entered: if that ticket is marked
    /// abandoned, or no live thread can hold it (a dead node's thread announced it, or, once
    /// the lock has been released to it for `stalled` >= [`UNCLAIMED_AFTER`](crate::thread::UNCLAIMED_AFTER), no live thread
    /// claims it: [`ThreadLock::claims`]), pass the lock on with `rcas(rel, raw, raw+1)`
    /// (poisoned unless the ticket was given up). Returns whether `rel` changed (by us or
    /// anyone), i.e. whether to read it again.
    fn pass_on(
        &self,
        ctx: &Ctx,
        me: &ThreadLock,
        raw: u64,
        stalled: Duration,
        d: &Deadline,
    ) -> Result<bool> {
        let r = marks::ticket(raw);
        let w = self.words(me)?;
        // A marked ticket: the protocol's step, which the explorer checks.
        if protocol::nlock_pass_on(&mut self.run(ctx, me, d), &w, raw)? == r + 1 {
            tracing::debug!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = r,
                "nlock: passed an abandoned ticket on");
            return Ok(true);
        }
        // Only a thread that cannot be live is skipped: a live holder is waited for.
        let wait = || Self::wait_acq(ctx, me, d);
        let Some(whose) = me.skippable(ctx, &self.waiting, r, stalled, NL_ACQ, wait)? else {
            return Ok(false);
        };
        ctx.rcas(&self.rel, raw, (r + 1) | POISON, &me.scratch, NL_ACQ)?;
        Self::wait_acq(ctx, me, d)?;
        if ctx.load(&me.scratch)? == raw {
            whose.report("nlock", self.id, ctx.node(), r);
        }
        Ok(true)
    }

    /// The protocol's spin ([`Machine::get_until`](loco_rdmawait::protocol::Machine::get_until)):
    /// `get(local, remote); wait` until it reads ticket `t` (poison bit aside), with the
    /// failure paths: a waiter that gives up abandons its ticket. Returns the value read.
    /// `first`: the value of a first read made already (pipelined behind the FAA,
    /// [`protocol::nlock_take`]), which the spin starts from.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn spin(
        &self,
        ctx: &Ctx,
        me: &ThreadLock,
        local: Loc,
        remote: Loc,
        t: u64,
        first: Option<u64>,
        d: &Deadline,
    ) -> Result<u64> {
        let r = self.wait_turn(ctx, me, &local, &remote, t, first, d);
        crate::run::spun(ctx, r, || self.abandon(ctx, me, t))
    }

    /// Waits until `rel` (read into `local`) reads ticket `t`; returns the value read. `first`:
    /// a first read made already.
    #[allow(clippy::too_many_arguments)]
    fn wait_turn(
        &self,
        ctx: &Ctx,
        me: &ThreadLock,
        local: &Loc,
        rel: &Loc,
        t: u64,
        mut first: Option<u64>,
        d: &Deadline,
    ) -> Result<u64> {
        let mut spin = Spin::new();
        let mut pace = Pace::default();
        let mut looked = loco_rdmawait::clock::now();
        let mut announced = false;
        // Since when the lock has been released to the same value.
        let mut stall = (u64::MAX, loco_rdmawait::clock::now());
        loop {
            // The value, and when its read started (none for the pipelined first read).
            let (raw, started) = match first.take() {
                Some(raw) => (raw, None),
                None => {
                    let start = loco_rdmawait::clock::now();
                    (Self::read(ctx, me, local, rel, d)?, Some(start))
                }
            };
            let now = loco_rdmawait::clock::now();
            let took = started.map(|start| now.saturating_duration_since(start));
            if raw != stall.0 {
                stall = (raw, now);
            }
            let r = marks::ticket(raw);
            pace.saw(r, now, took);
            if r == t {
                // A thread of a node reported dead does not enter (the others may skip it).
                self.cluster.check_alive(ctx.node())?;
                return Ok(raw);
            }
            if r.wrapping_sub(t) < 1 << 62 {
                // Released past our ticket: someone passed it on, which happens only when this
                // node was reported dead.
                return Err(Error::Skipped { ticket: t });
            }
            self.cluster.check_alive(self.node())?;
            self.home.check(&self.cluster)?;
            // A thread of a node reported dead stops here (as its process would have), leaving
            // its ticket for the others to skip.
            self.cluster.check_alive(ctx.node())?;
            if !announced {
                // A waiter announces its ticket as soon as it has to wait (not waited for): if
                // it dies from then on, the others can skip its ticket.
                let w = me.waiting_word(&self.waiting)?;
                me.announce(ctx, &w, t, NL_REL)?;
                me.unreaped.set(true);
                announced = true;
            }
            if loco_rdmawait::clock::now().saturating_duration_since(looked) >= LOOK_EVERY {
                looked = loco_rdmawait::clock::now();
                self.pay_debts(ctx, me, d);
                let stalled = looked.saturating_duration_since(stall.1);
                if self.pass_on(ctx, me, raw, stalled, d)? {
                    continue;
                }
            }
            if d.expired() {
                return Err(d.timeout());
            }
            let ahead = t.wrapping_sub(r);
            spin.pause(&self.cluster, pace.pause_for(ahead).min(d.remaining()))?;
            spin.wait_behind(&self.cluster, ahead)?;
        }
    }

    /// Gives ticket `u` up: if the lock is already released to it, pass it on at once;
    /// otherwise leave its abandon mark (see [`marks::Debts::abandon`]).
    fn abandon(&self, ctx: &Ctx, me: &ThreadLock, u: u64) {
        // A ticket of a home that restarted means nothing in its fresh words: nothing to mark.
        if self.home.check(&self.cluster).is_err() {
            return;
        }
        self.debts.abandon(self.id, "nlock", ctx.node(), u, |d| {
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

    /// Gives ticket `u` up with the protocol's step ([`protocol::nlock_give_up`]); returns
    /// whether it is done (false: the mark is owed).
    fn try_abandon(&self, ctx: &Ctx, me: &ThreadLock, u: u64, d: &Deadline) -> Result<bool> {
        // Earlier operations (a timed-out poll) first: their local writes target `loc`.
        Self::wait_acq(ctx, me, d)?;
        let w = self.words(me)?;
        let owed = std::cell::Cell::new(false);
        protocol::nlock_give_up(&mut self.run(ctx, me, d), &w, u, |_| {
            owed.set(true);
            Ok(())
        })?;
        Ok(!owed.get())
    }

    /// Pays what earlier calls left behind: the ticket of this thread's FAA that timed out, the
    /// process's owed marks.
    fn settle(&self, ctx: &Ctx, me: &ThreadLock, d: &Deadline) -> Result<()> {
        if me.pending_faa.get() || me.pending_cas.get().is_some() {
            Self::wait_acq(ctx, me, d)?;
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

    pub(crate) fn acquire_deadline(&self, ctx: &Ctx, d: &Deadline) -> Result<u64> {
        let me = self.me(ctx)?;
        self.home.check_not_held(&self.cluster, ctx, &me)?;
        self.settle(ctx, &me, d)?;
        self.cluster.check_open()?;
        self.cluster.check_alive(self.node())?;
        self.home.check(&self.cluster)?;
        let w = self.words(&me)?;
        // Claimed before the ticket is taken, so that a ticket is never nobody's.
        me.claim(ctx, &self.waiting, NL_ACQ)?;
        let mut run = self.run(ctx, &me, d);
        match protocol::nlock_acquire(&mut run, &w) {
            Ok((t, raw)) => Ok(self.enter(ctx, &me, t, marks::poisoned(raw))),
            // Released to us, but entering failed: pass the ticket on rather than strand it.
            Err(e) => match run.spun() {
                Some(t) => crate::run::spun(ctx, Err(e), || self.abandon(ctx, &me, t)),
                None => Err(e),
            },
        }
    }

    pub(crate) fn try_acquire_deadline(&self, ctx: &Ctx, d: &Deadline) -> Result<Option<u64>> {
        let me = self.me(ctx)?;
        self.home.check_not_held(&self.cluster, ctx, &me)?;
        self.settle(ctx, &me, d)?;
        self.cluster.check_open()?;
        self.cluster.check_alive(self.node())?;
        self.home.check(&self.cluster)?;
        // At most one pass per abandoned ticket ahead; bounded by the ring.
        for _ in 0..=MARKS {
            let raw = self.read_rel(ctx, &me, &me.word, d)?;
            let r = marks::ticket(raw);
            // Free iff tkt == rel: take ticket r only if nobody holds or waits for one.
            me.claim(ctx, &self.waiting, NL_ACQ)?;
            ctx.rcas(&self.tkt, r, r + 1, &me.word, NL_ACQ)?;
            if let Err(e) = Self::wait_acq(ctx, &me, d) {
                // Whether the CAS took ticket r is unknown: the next call finds out.
                me.pending_cas.set(Some(r));
                return Err(e);
            }
            me.unreaped.set(false);
            if ctx.load(&me.word)? == r {
                // tkt was r, so rel (which read r) is still r: ours, poison bit included.
                let w = self.words(&me)?;
                let mut run = self.run(ctx, &me, d);
                if let Err(e) = protocol::nlock_enter(&mut run, &w, r) {
                    // Ticket r is ours and released to: pass it on rather than strand it.
                    return crate::run::spun(ctx, Err(e), || self.abandon(ctx, &me, r)).map(Some);
                }
                return Ok(Some(self.enter(ctx, &me, r, marks::poisoned(raw))));
            }
            // Took nothing: the claim goes.
            me.unclaim(ctx, &self.waiting, NL_REL)?;
            // Taken: free only if ticket r was given up (or its holder died).
            if !self.pass_on(ctx, &me, raw, Duration::ZERO, d)? {
                return Ok(None);
            }
        }
        Ok(None)
    }

    pub(crate) fn release_with(&self, ctx: &Ctx, poison: bool) -> Result<()> {
        let me = self.me(ctx)?;
        let t = me.held.get().ok_or(Error::NotHeld)?;
        self.home.check_release(&self.cluster, &me)?;
        let w = self.words(&me)?;
        let d = Deadline::after(self.cluster.timeout());
        // The value of `rel` that let this hold in: the ticket, and the poison bit it came with.
        let raw = if me.poisoned.get() || me.carried_poison.get() {
            t | POISON
        } else {
            t
        };
        protocol::nlock_release(&mut self.run(ctx, &me, &d), &w, t, raw, poison)?;
        me.end_hold();
        me.unreaped.set(true);
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, poison, "nlock released");
        Ok(())
    }

    /// A local handover ([`protocol::nlock_hand_off`]: `gf([n])`).
    fn hand_off_now(&self, ctx: &Ctx) -> Result<Hold> {
        let me = self.me(ctx)?;
        let t = me.held.get().ok_or(Error::NotHeld)?;
        self.home.check_release(&self.cluster, &me)?;
        let d = Deadline::after(self.cluster.timeout());
        let fence = loco_sv::gf_words(ctx, &[])?;
        protocol::nlock_hand_off(&mut self.run(ctx, &me, &d), &fence, self.node())?;
        let poison = me.poisoned.get() || me.carried_poison.get();
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "nlock handed off");
        Ok(me.hand_off(t, poison))
    }

    /// Reaps this thread's release CAS, so that its words can be recycled.
    pub(crate) fn leave_now(&self, ctx: &Ctx) -> Result<()> {
        // A thread that has not used the lock (or left it already) has nothing to hand back.
        let Some(me) = self.known(ctx)? else {
            return Ok(());
        };
        self.home.check_not_held(&self.cluster, ctx, &me)?;
        let d = Deadline::after(self.cluster.timeout());
        self.settle(ctx, &me, &d)?;
        d.wait(ctx, NL_REL)?;
        Self::wait_acq(ctx, &me, &d)?;
        me.land_slot(ctx, NL_ACQ, || Self::wait_acq(ctx, &me, &d))?;
        me.unreaped.set(false);
        Ok(())
    }
}

impl NetLock for RawNLock {
    fn prepare(&self, ctx: &Ctx, _: &Deadline) -> Result<Rc<ThreadLock>> {
        let me = self.me(ctx)?;
        self.home.check_not_held(&self.cluster, ctx, &me)?;
        Ok(me)
    }

    fn acquire(&self, ctx: &Ctx, d: &Deadline) -> Result<u64> {
        self.acquire_deadline(ctx, d)
    }

    fn try_acquire(&self, ctx: &Ctx, d: &Deadline) -> Result<Option<u64>> {
        self.try_acquire_deadline(ctx, d)
    }

    fn release(&self, ctx: &Ctx, poison: bool) -> Result<()> {
        self.release_with(ctx, poison)
    }

    fn hand_off(&self, ctx: &Ctx) -> Result<Hold> {
        self.hand_off_now(ctx)
    }

    fn take_over(&self, ctx: &Ctx, hold: Hold) -> Result<u64> {
        let me = self.me(ctx)?;
        let t = cohort::take_over(ctx, &me, &self.home, &self.cluster, hold)?;
        tracing::trace!(target: "loco::locks", lock = self.id, node = %ctx.node(), ticket = t, "nlock taken over");
        Ok(t)
    }
}

impl RawLock for RawNLock {
    fn name(&self) -> &'static str {
        "nlock"
    }

    fn acquire(&self, ctx: &Ctx) -> Result<u64> {
        let d = Deadline::after(self.cluster.timeout());
        self.cohorts.acquire(self, ctx, &d)
    }

    fn try_acquire(&self, ctx: &Ctx) -> Result<Option<u64>> {
        let d = Deadline::after(self.cluster.timeout());
        self.cohorts.try_acquire(self, ctx, &d)
    }

    fn release(&self, ctx: &Ctx) -> Result<()> {
        let me = self.known(ctx)?.ok_or(Error::NotHeld)?;
        self.cohorts.release(self, ctx, &me, false)
    }

    fn held(&self, ctx: &Ctx) -> Result<Option<u64>> {
        crate::thread::held(ctx, self.known(ctx)?)
    }

    fn acquire_until(&self, ctx: &Ctx, deadline: std::time::Instant) -> Result<u64> {
        self.cohorts.acquire(self, ctx, &Deadline::at(deadline))
    }

    fn try_acquire_until(&self, ctx: &Ctx, deadline: std::time::Instant) -> Result<Option<u64>> {
        self.cohorts.try_acquire(self, ctx, &Deadline::at(deadline))
    }

    fn release_poisoned(&self, ctx: &Ctx) -> Result<()> {
        let me = self.known(ctx)?.ok_or(Error::NotHeld)?;
        self.cohorts.release(self, ctx, &me, true)
    }

    fn poisoned(&self, ctx: &Ctx) -> Result<bool> {
        Ok(self
            .known(ctx)?
            .is_some_and(|me| me.held.get().is_some() && me.poisoned.get()))
    }

    fn leave(&self, ctx: &Ctx) -> Result<()> {
        self.leave_now(ctx)?;
        crate::thread::forget(ctx, self.id);
        Ok(())
    }

    /// The release's `rfence(n)` without the release (its CAS): the next local holder's
    /// operations towards n (on the same queue pair) do not overtake this critical section's
    /// reads there, as the network release's fence ensures for the next holder
    /// (docs/model.md §5.5).
    fn hand_over_locally(&self, ctx: &Ctx) -> Result<()> {
        ctx.rfence(self.node())?;
        Ok(())
    }

    fn set_cohort(&self, max_handovers: u32) {
        self.cohorts.set_limit(max_handovers);
    }

    fn cohort(&self) -> u32 {
        self.cohorts.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loco_rdmawait::Schedule;

    /// Contexts that come and go, 20 of them on one node, each acquiring and releasing once
    /// (a slot write, its claim and hold, may not have landed at its release): each hands its
    /// `waiting` slot back, by `leave` or by being dropped (the slot is read back first), so
    /// no slot stays taken and none of them had to share the last slot.
    #[test]
    fn contexts_hand_their_waiting_slots_back() {
        for (seed, leave) in [(1, false), (2, false), (3, true)] {
            let c = Cluster::builder()
                .nodes(3)
                .memory_per_node(1 << 14)
                .soft(Schedule::Chaos { seed })
                .build()
                .unwrap();
            let l = crate::NLock::new(&c, NodeId(2)).unwrap();
            for _ in 0..20 {
                let (l, c) = (l.clone(), c.clone());
                std::thread::spawn(move || {
                    let ctx = c.context(NodeId(0)).unwrap();
                    crate::LockGuard::release(l.acquire(&ctx).unwrap()).unwrap();
                    if leave {
                        l.leave(&ctx).unwrap();
                    }
                })
                .join()
                .unwrap();
            }
            assert_eq!(
                l.raw().wait_slots.taken(NodeId(0)),
                0,
                "seed {seed}, leave {leave}: waiting slots kept"
            );
        }
    }

    /// A context whose ticket FAA timed out (the lock's node stalled, as by a partition no
    /// detector has noticed) and that is then dropped clears its claim: once the traffic
    /// flows, its slot does not read `TAKING`, so the ticket its FAA took, which nobody will
    /// ever enter with, is skipped (poisoned) by the next caller instead of blocking the lock.
    #[test]
    fn a_dropped_contexts_claim_does_not_outlive_it() {
        use loco_rdmawait::SoftBackend;
        for s in [Schedule::Threaded, Schedule::Chaos { seed: 4 }] {
            let b = Arc::new(SoftBackend::try_new(3, 4096, s).unwrap());
            let c = Cluster::with_backend(Box::new(b.clone()), Duration::from_secs(60));
            let l = crate::NLock::new(&c, NodeId(2)).unwrap();
            b.stall(NodeId(2), true).unwrap();
            let (l1, c1) = (l.clone(), c.clone());
            let r = std::thread::spawn(move || {
                let ctx = c1.context(NodeId(0)).unwrap();
                l1.acquire_timeout(&ctx, Duration::from_millis(50))
                    .map(|_| ())
            })
            .join()
            .unwrap();
            assert!(matches!(r, Err(Error::Timeout { .. })), "{s:?}: {r:?}");
            b.stall(NodeId(2), false).unwrap();
            c.quiesce().unwrap();
            let slot = l.raw().waiting.word(0).unwrap();
            assert_eq!(
                c.peek(&slot).unwrap(),
                crate::thread::IDLE,
                "{s:?}: the slot"
            );
            let ctx = c.context(NodeId(1)).unwrap();
            let g = l.acquire_timeout(&ctx, Duration::from_secs(30)).unwrap();
            assert_eq!(crate::LockGuard::ticket(&g), 1, "{s:?}");
            assert!(
                crate::LockGuard::was_poisoned(&g),
                "{s:?}: the next holder is told"
            );
        }
    }
}
