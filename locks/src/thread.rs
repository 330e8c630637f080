//! Per-(lock, thread) state, kept in the thread's context (its private words go back to the
//! cluster, [`Cluster::free_private`], when the context is dropped); the spin-wait helper;
//! deadlines.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use loco_rdmawait::{clock, Cluster, Ctx, Loc, MadeOn, NodeId, Settled, WorkId, WORD};

use crate::cohort::Hold;
use crate::marks::Debts;

use crate::{Error, Result};

static NEXT_LOCK: AtomicU64 = AtomicU64::new(1);

/// The incarnation of a lock's home node (the node lock's node, the weak lock's ticket node)
/// when the lock was made: a home that restarted since has lost the lock's words, and the lock
/// is refused from then on (a thread that waits or holds across the restart must not write
/// into the fresh words, where its old ticket means nothing).
#[derive(Debug)]
pub(crate) struct Home(MadeOn);

impl Home {
    pub(crate) fn new(cluster: &Cluster, node: NodeId) -> Result<Home> {
        Ok(Home(MadeOn::new(cluster, node)?))
    }

    /// [`Home::check`] before a release by `me`: if the home restarted, the hold went with its
    /// words, so it ends here (writing the release now would corrupt the fresh lock). So it
    /// does if the home is reported dead: a dead incarnation stays dead, and a lock whose home
    /// died is refused for good (every acquire fails, and so do the waits of its waiters), so
    /// there is nobody to release to; a thread kept holding could neither release (every
    /// attempt `PeerDead`) nor acquire again or leave (`AlreadyHeld`).
    ///
    /// So it does after [`Cluster::shutdown`]: nothing can be released any more, and nobody can
    /// take the lock again, so nobody waits for the release. The thread's later acquires then
    /// fail with `Shutdown`, as every thread's do, not with `AlreadyHeld` for a hold that cannot
    /// end (on an async context, whose tasks are one thread, another task's acquire would be
    /// told that it holds the lock).
    pub(crate) fn check_release(&self, cluster: &Cluster, me: &ThreadLock) -> Result<()> {
        self.check_hold(cluster, me)?;
        cluster.check_open().inspect_err(|_| me.end_hold())?;
        Ok(())
    }

    /// The part of [`Home::check_release`] that an acquire by a holder checks too: the home
    /// restarted or died (then the hold ends).
    fn check_hold(&self, cluster: &Cluster, me: &ThreadLock) -> Result<()> {
        self.check(cluster)
            .and_then(|()| Ok(cluster.check_alive(self.0.node())?))
            .inspect_err(|_| me.end_hold())
    }

    /// [`Error::AlreadyHeld`] if `me`, the calling thread, holds the lock, unless the home died
    /// or restarted since: then the hold is gone, and the acquire is refused as every acquire
    /// of the lock is (`PeerDead` naming the home, [`Home::check_release`]); or unless the
    /// thread's own node died since (a context of a dead incarnation): `PeerDead` naming it, as
    /// for the context's every call (the other threads skip its hold).
    pub(crate) fn check_not_held(
        &self,
        cluster: &Cluster,
        ctx: &Ctx,
        me: &ThreadLock,
    ) -> Result<()> {
        match me.held.get() {
            Some(ticket) => {
                self.check_hold(cluster, me)?;
                ctx.load(&me.word)?;
                Err(Error::AlreadyHeld { ticket })
            }
            None => Ok(()),
        }
    }

    /// `PeerDead` naming the home if it restarted since the lock was made.
    pub(crate) fn check(&self, cluster: &Cluster) -> Result<()> {
        Ok(self.0.check(cluster, "the lock")?)
    }
}

/// A process-unique id for a new lock (the key of its per-thread state).
pub(crate) fn next_lock_id() -> u64 {
    NEXT_LOCK.fetch_add(1, Ordering::Relaxed)
}

/// Words per node of a lock's `waiting` array: a waiting thread announces its ticket in a slot
/// of its own, so that every waiter of a node that dies can be skipped. Contexts of one node
/// beyond `WAIT_SLOTS - 1` at once share the last slot (only the latest of their announcements
/// is kept there).
pub(crate) const WAIT_SLOTS: u64 = 16;

/// A `waiting` slot's value while its thread takes a ticket (see [`ThreadLock::claim`]), with
/// its [`tag`]; never a ticket + 1 (tickets stay below 2^54).
pub(crate) const TAKING: u64 = 1 << 62;

/// A private `waiting` slot's value after a `try_acquire` that took no ticket, or once its
/// context is gone: claims nothing (untagged).
pub(crate) const IDLE: u64 = 0;

/// The bits of a `waiting` slot's value that name a ticket (ticket + 1): tickets stay below
/// 2^54 (57 years at 10 M acquires per second).
pub(crate) const SLOT_TICKET: u64 = (1 << TAG_SHIFT) - 1;

/// Where a `waiting` slot's value carries its writer's [`tag`].
const TAG_SHIFT: u32 = 54;

/// The bits of a `waiting` slot's value that carry its writer's [`tag`] (bits 54-61: below
/// [`TAKING`], bit 62, and the poison bit, 63).
pub(crate) const SLOT_TAG: u64 = 0xff << TAG_SHIFT;

/// The tag a context of `node`'s incarnation `incarnation` ([`Cluster::incarnation`]) puts
/// into what it writes into its `waiting` slot (its claim, its ticket's announcements): the
/// incarnation modulo 256, in bits [`SLOT_TAG`]. A slot of a live node whose tag is not the
/// node's current incarnation's was written by an earlier, dead incarnation, and claims
/// nothing ([`ThreadLock::claims`]).
pub(crate) fn tag(incarnation: u64) -> u64 {
    (incarnation & 0xff) << TAG_SHIFT
}

/// How long the lock must stay released to one ticket before a waiter asks whether anyone
/// claims it ([`ThreadLock::claims`]): the claim check reads every node's slots, so it is kept
/// off the path of an ordinary hand-over.
pub(crate) const UNCLAIMED_AFTER: Duration = Duration::from_millis(4);

/// Work id of the read of a thread's slot when its context is dropped
/// ([`ThreadLock::land_slot_at_drop`]).
const LAND: WorkId = WorkId::internal(0x4C4B_0021);

/// How long a dropped context waits for that read (at most the cluster's timeout): a round
/// trip.
const LAND_AT_DROP: Duration = Duration::from_millis(200);

/// Whose a ticket the lock is stalled at is ([`ThreadLock::claims`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// A thread of this node, reported dead, announced waiting for it or holding it.
    Dead(NodeId),
    /// A live thread may hold it, or be about to.
    Live,
    /// No live thread can hold it: its taker died before naming it, or its context was
    /// dropped.
    Nobody,
}

/// The `waiting` slots this process's contexts hold, per node (bit i: slot i taken).
#[derive(Debug, Default)]
pub(crate) struct WaitSlots(Mutex<HashMap<NodeId, u64>>);

impl WaitSlots {
    fn take(&self, node: NodeId) -> u64 {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let bits = m.entry(node).or_default();
        match (0..WAIT_SLOTS - 1).find(|i| *bits & (1 << i) == 0) {
            Some(i) => {
                *bits |= 1 << i;
                i
            }
            None => WAIT_SLOTS - 1, // shared
        }
    }

    /// The slots of `node` taken now (bit i: slot i).
    #[cfg(test)]
    pub(crate) fn taken(&self, node: NodeId) -> u64 {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&node).copied().unwrap_or(0)
    }

    fn give(&self, node: NodeId, slot: u64) {
        if slot < WAIT_SLOTS - 1 {
            let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(bits) = m.get_mut(&node) {
                *bits &= !(1 << slot);
            }
        }
    }
}

/// A `waiting` slot that announces a hold its owner handed to another context of its node (a
/// local handover, [`Lock::set_cohort`](crate::Lock::set_cohort)). The hold's ticket stays
/// named there until the hold is released on the network, even if the owner's context goes
/// first: a waiter that finds no live slot claiming the ticket it is stalled at would skip it
/// while a thread of the cohort is inside.
#[derive(Debug)]
pub(crate) struct Pin {
    node: NodeId,
    slot: u64,
    slots: Arc<WaitSlots>,
    state: Mutex<PinState>,
}

#[derive(Debug, Default)]
struct PinState {
    /// The hold was released on the network (or is gone): the slot may change.
    released: bool,
    /// The owner's context went, its writes into the slot landed: the slot goes back to the
    /// pool at the release.
    orphaned: bool,
}

impl Pin {
    fn state(&self) -> std::sync::MutexGuard<'_, PinState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the hold the slot names has been released.
    pub(crate) fn is_released(&self) -> bool {
        self.state().released
    }

    /// The hold was released on the network: if its owner's context went meanwhile, the slot
    /// goes back to the pool now.
    fn release(&self) {
        let mut s = self.state();
        s.released = true;
        if s.orphaned {
            self.slots.give(self.node, self.slot);
        }
    }

    /// The owner's context goes, with its writes into the slot landed: the slot goes back at
    /// the release (now, if that has happened).
    fn orphan(&self) {
        let mut s = self.state();
        if s.released {
            self.slots.give(self.node, self.slot);
        } else {
            s.orphaned = true;
        }
    }
}

/// The hold's end of a [`Pin`], carried from context to context with the hold: dropped when
/// the hold is released on the network (or lost with its node), which unpins the slot.
#[derive(Debug)]
pub(crate) struct PinRef(Arc<Pin>);

impl Drop for PinRef {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A weak or strong lock's `rel` slot handed back by a thread (its context dropped, or its
/// registration failed after taking the slot).
#[derive(Debug)]
pub(crate) struct Freed {
    /// The slot.
    pub(crate) slot: usize,
    /// The last value the thread stored in the slot (0 if none): its puts of that value may
    /// still be on their way.
    pub(crate) last: u64,
    /// The thread's node.
    pub(crate) node: NodeId,
    /// Every node's incarnation when the thread's context was made ([`reach`]): its own, and
    /// the only ones its puts reach.
    pub(crate) reach: Vec<u64>,
}

/// What a lock does with a thread's state when its context is dropped (the weak lock hands its
/// `rel` slot back).
pub(crate) trait OnDrop: std::fmt::Debug {
    /// Called with the slot the thread hands back, and whether the thread left operations in
    /// flight.
    fn dropped(&self, freed: Freed, dirty: bool);
}

/// Every node's incarnation when `ctx` was made ([`Ctx::incarnation`]; 0 where unknown).
pub(crate) fn reach(ctx: &Ctx) -> Vec<u64> {
    ctx.cluster()
        .node_ids()
        .map(|k| ctx.incarnation(k).unwrap_or(0))
        .collect()
}

/// What one thread keeps for one lock.
#[derive(Debug)]
pub(crate) struct ThreadLock {
    /// The thread's private word on its own node: `turn` (wlock) or `loc` (nlock).
    pub(crate) word: Loc,
    /// A second private word: the destination of the abandon and recovery operations.
    pub(crate) scratch: Loc,
    /// A third private word: the source of the thread's `waiting` slot puts (its claim, its
    /// waiting announcement; both locks).
    pub(crate) note: Loc,
    /// The thread's slot in the `rel[*]` array (wlock); 0 for an nlock.
    pub(crate) slot: usize,
    /// The local copies of every `rel[*]` (wlock); empty for an nlock.
    pub(crate) rels: Vec<Loc>,
    /// The ticket of the thread's current hold.
    pub(crate) held: Cell<Option<u64>>,
    /// Whether the current hold was handed over by a critical section that did not finish (a
    /// guard dropped while panicking, or a dead holder skipped).
    pub(crate) poisoned: Cell<bool>,
    /// The last value the thread stored in its `rel` slot (wlock; 0 if none): kept by the
    /// machine's stores ([`crate::run::Run`]), for whoever reuses the slot.
    pub(crate) last_rel: Cell<u64>,
    /// The ticket FAA timed out: its result will land in `word` later; the next call reads it
    /// and abandons that ticket.
    pub(crate) pending_faa: Cell<bool>,
    /// A `try_acquire`'s ticket CAS (expecting this ticket) timed out: the next call reads its
    /// result and abandons the ticket if the CAS took it.
    pub(crate) pending_cas: Cell<Option<u64>>,
    /// Some operation of this thread whose local write targets `word` or `scratch` may still be
    /// in flight (a wait timed out): the words are not recycled.
    pub(crate) dirty: Cell<bool>,
    /// A put that reads a private word (a release or `held` put, a `waiting` announcement) may
    /// not have read it yet: the words are not recycled (see
    /// [`RawLock::leave`](crate::RawLock::leave)).
    pub(crate) unreaped: Cell<bool>,
    pub(crate) on_drop: Option<Arc<dyn OnDrop>>,
    /// Whether the context was dropped with nothing in flight: then every word comes back,
    /// whatever timed out, and a ticket taken by a timed-out FAA or CAS is owed to `debts`.
    settled: Settled,
    /// Where a ticket left behind by a dropped context is owed (the lock's [`Debts`]).
    debts: Option<Arc<Debts>>,
    /// This thread's slot of the lock's `waiting` array, taken when it first claims it.
    wait_slot: Cell<Option<u64>>,
    /// The slot's word, once taken.
    slot_word: Cell<Option<Loc>>,
    /// The [`tag`] of the thread's node's incarnation when the state was made (the context's
    /// own: a context never outlives its incarnation's calls), or-ed into every claim and
    /// ticket announcement the thread writes into its slot.
    tag: u64,
    /// Every node's incarnation when the context was made ([`reach`]).
    reach: Vec<u64>,
    /// Whether every write of this thread into its slot is known to have landed (a get of the
    /// slot completed after it): only then does the slot go back to the pool, so that no late
    /// write of this thread can overwrite its next owner's claim (a put's completion says that
    /// it read its source, not that its remote write landed).
    slot_landed: Cell<bool>,
    wait_slots: Option<Arc<WaitSlots>>,
    /// A buffer for reading every node's `waiting` slots ([`ThreadLock::claims`]), made when
    /// needed.
    scan: Cell<Option<Loc>>,
    /// The thread's slot announces a hold it handed to another context of its node, until
    /// that hold is released on the network.
    pin: RefCell<Option<Arc<Pin>>>,
    /// The pin of the hold this thread took over from another context of its node (its
    /// announcement is that context's slot): released with the hold, passed on with it.
    carried: RefCell<Option<PinRef>>,
    /// A node lock's hold taken over: whether the value of `rel` it entered on had the poison
    /// bit (the release's CAS expects it; the holder is not told, its predecessor finished).
    pub(crate) carried_poison: Cell<bool>,
    /// The thread's number at the front of its node's queue for the lock (cohorts): from its
    /// acquire through its node's queue to its release.
    pub(crate) turn: Cell<Option<u64>>,
    /// When the thread's hold through its node's queue began (cohorts: taken over, or acquired
    /// on the network), to tell a short hold at its release.
    pub(crate) turn_since: Cell<Option<std::time::Instant>>,
    cluster: loco_rdmawait::Cluster,
}

impl ThreadLock {
    pub(crate) fn new(
        ctx: &Ctx,
        slot: usize,
        rels: Vec<Loc>,
        on_drop: Option<Arc<dyn OnDrop>>,
    ) -> Result<Self> {
        // Private words: fresh, or handed back by an earlier context.
        let c = ctx.cluster();
        let take = || c.alloc_private(ctx.node(), WORD);
        let word = take()?;
        let scratch = take().inspect_err(|_| {
            let _ = c.free_private(word);
        })?;
        let note = take().inspect_err(|_| {
            let _ = c.free_private(word);
            let _ = c.free_private(scratch);
        })?;
        ctx.store(&word, 0)?;
        ctx.store(&scratch, 0)?;
        ctx.store(&note, 0)?;
        // Read after the context's stores succeeded: the incarnation it belongs to or, had the
        // node restarted meanwhile, a later one (a dead context's claims then read as live,
        // which only holds waiters up; never the reverse).
        let tag = tag(c.incarnation(ctx.node())?);
        Ok(ThreadLock {
            word,
            scratch,
            note,
            slot,
            rels,
            held: Cell::new(None),
            poisoned: Cell::new(false),
            last_rel: Cell::new(0),
            pending_faa: Cell::new(false),
            pending_cas: Cell::new(None),
            dirty: Cell::new(false),
            unreaped: Cell::new(false),
            on_drop,
            settled: ctx.settled(),
            debts: None,
            wait_slot: Cell::new(None),
            slot_word: Cell::new(None),
            tag,
            reach: reach(ctx),
            slot_landed: Cell::new(true),
            wait_slots: None,
            scan: Cell::new(None),
            pin: RefCell::new(None),
            carried: RefCell::new(None),
            carried_poison: Cell::new(false),
            turn: Cell::new(None),
            turn_since: Cell::new(None),
            cluster: ctx.cluster().clone(),
        })
    }

    /// The thread's hold ends (released, or gone with its lock's node): what it carried goes.
    pub(crate) fn end_hold(&self) {
        self.held.set(None);
        self.poisoned.set(false);
        self.carried_poison.set(false);
        drop(self.carried.borrow_mut().take());
    }

    /// The thread hands its hold of ticket `ticket` to another context of its node: the pin
    /// that keeps the hold's announcement in place goes with it (the one it carried, or a new
    /// one on its own slot; none for the shared slot, whose claims count as live anyway), and
    /// `poison` (a node lock's: the poison bit of the `rel` value it entered on). Its own hold
    /// ends.
    pub(crate) fn hand_off(&self, ticket: u64, poison: bool) -> Hold {
        let carried = self.carried.borrow_mut().take();
        let pin = carried.or_else(|| {
            let slots = self.wait_slots.as_ref()?;
            let slot = self.wait_slot.get().filter(|s| *s < WAIT_SLOTS - 1)?;
            let pin = Arc::new(Pin {
                node: self.word.node(),
                slot,
                slots: slots.clone(),
                state: Mutex::default(),
            });
            *self.pin.borrow_mut() = Some(pin.clone());
            Some(PinRef(pin))
        });
        self.end_hold();
        Hold {
            ticket,
            poison,
            pin,
        }
    }

    /// The thread takes over a hold of ticket `t` from another context of its node.
    pub(crate) fn take_over(&self, t: u64, pin: Option<PinRef>, poison: bool) {
        self.held.set(Some(t));
        self.poisoned.set(false);
        self.carried_poison.set(poison);
        *self.carried.borrow_mut() = pin;
    }

    /// Whether the thread's slot still announces a hold it handed over.
    fn pinned(&self) -> bool {
        self.pin.borrow().as_ref().is_some_and(|p| !p.is_released())
    }

    /// This thread announces its waits in a slot of its own, taken from `slots`.
    pub(crate) fn announcing_in(mut self, slots: Arc<WaitSlots>) -> Self {
        self.wait_slots = Some(slots);
        self
    }

    /// The word of `waiting` (the lock's array, [`WAIT_SLOTS`] per node) where this thread
    /// announces the ticket it waits for.
    pub(crate) fn waiting_word(&self, waiting: &Loc) -> Result<Loc> {
        let node = self.word.node();
        let slot = match (self.wait_slot.get(), &self.wait_slots) {
            (Some(s), _) => s,
            (None, Some(slots)) => {
                let s = slots.take(node);
                self.wait_slot.set(Some(s));
                s
            }
            (None, None) => WAIT_SLOTS - 1,
        };
        let w = waiting.word(node.index() as u64 * WAIT_SLOTS + slot)?;
        self.slot_word.set(Some(w));
        Ok(w)
    }

    /// The [`tag`] of the thread's incarnation, for what it writes into its slot.
    pub(crate) fn tag(&self) -> u64 {
        self.tag
    }

    /// `put_slot(w, (t + 1) | tag)`: the thread announces that it waits for ticket `t`.
    pub(crate) fn announce(&self, ctx: &Ctx, w: &Loc, t: u64, wid: WorkId) -> Result<()> {
        self.put_slot(ctx, w, t.wrapping_add(1) | self.tag, wid)
    }

    /// `store(note, v); put(w, note, wid)`: the thread writes `v` into its slot `w` (see
    /// [`ThreadLock::waiting_word`]); the write may land late ([`ThreadLock::wrote_slot`]).
    pub(crate) fn put_slot(&self, ctx: &Ctx, w: &Loc, v: u64, wid: WorkId) -> Result<()> {
        ctx.store(&self.note, v)?;
        ctx.put(w, &self.note, wid)?;
        self.wrote_slot();
        Ok(())
    }

    /// A put into the thread's slot was posted: its write may land late (see `slot_landed`).
    pub(crate) fn wrote_slot(&self) {
        self.slot_landed.set(false);
    }

    /// Whether `remote` is the thread's `waiting` slot.
    pub(crate) fn is_slot(&self, remote: &Loc) -> bool {
        self.slot_word.get().as_ref() == Some(remote)
    }

    /// Before the thread is done with the lock: one get of its slot (into `scratch`; nothing
    /// else may be in flight), which reads only once the thread's earlier writes on that queue
    /// pair have landed (a NIC read flushes the queue pair's earlier remote writes); then the
    /// slot can go back to the pool. `wait` is the lock's wait for `wid`.
    pub(crate) fn land_slot(
        &self,
        ctx: &Ctx,
        wid: WorkId,
        wait: impl Fn() -> Result<()>,
    ) -> Result<()> {
        if let (false, Some(w)) = (self.slot_landed.get(), self.slot_word.get()) {
            ctx.get(&self.scratch, &w, wid)?;
            wait()?;
            self.slot_landed.set(true);
        }
        Ok(())
    }

    /// As the context is dropped ([`Ctx::on_drop`]), unless the thread holds the lock: its
    /// private slot is cleared (`put(slot, IDLE)`: a thread that holds nothing claims nothing
    /// any more; a ticket a timed-out FAA of its took is owed as a mark or, never learnt, is
    /// nobody's, and a `TAKING` left behind would hold up the claim check for good), then read
    /// back as [`ThreadLock::land_slot`] does, within `budget`, so that a context dropped
    /// without [`RawLock::leave`] hands its slot back too. Returns whether the read completed;
    /// if not, the slot (and the words) are kept.
    ///
    /// [`RawLock::leave`]: crate::RawLock::leave
    fn land_slot_at_drop(&self, ctx: &Ctx, budget: Duration) -> bool {
        if self.slot_landed.get() || self.held.get().is_some() {
            return true;
        }
        let Some(w) = self.slot_word.get() else {
            return true;
        };
        // A pinned slot keeps naming the hold it announced: only read back.
        let pinned = self.pinned();
        let landed = || -> Result<()> {
            if !pinned && self.wait_slot.get().is_some_and(|s| s < WAIT_SLOTS - 1) {
                self.put_slot(ctx, &w, IDLE, LAND)?;
            }
            // The read's value is not used: `scratch` goes back only if the context settles.
            ctx.get(&self.scratch, &w, LAND)?;
            Ok(ctx.wait_timeout(LAND, budget)?)
        };
        match landed() {
            Ok(()) => {
                self.slot_landed.set(true);
                true
            }
            Err(_) => {
                self.dirty.set(true);
                false
            }
        }
    }

    /// Claims the thread's slot of `waiting` before it takes a ticket: `store(note, TAKING);
    /// put(slot, note, wid)`, posted before the FAA or CAS on `tkt` on the same queue pair (the
    /// slots live on the ticket's node), so it lands before the ticket is taken
    /// (docs/model.md §3.3). From then until the thread's next claim, its slot reads
    /// [`TAKING`] or names the ticket it took (waiting or holding); see [`ThreadLock::claims`].
    /// `wid` is the acquire's work id: the ticket's wait reaps the put.
    pub(crate) fn claim(&self, ctx: &Ctx, waiting: &Loc, wid: WorkId) -> Result<()> {
        if self.pinned() {
            return Err(Error::HandedOff);
        }
        *self.pin.borrow_mut() = None;
        let w = self.waiting_word(waiting)?;
        self.put_slot(ctx, &w, TAKING | self.tag, wid)?;
        // In flight until the ticket's wait: the slot and words are not recycled before.
        self.dirty.set(true);
        Ok(())
    }

    /// A `try_acquire` that took no ticket clears its claim (`put(slot, IDLE)`, with the
    /// lock's release work id `wid`), so that its [`TAKING`] does not hold up the inference of
    /// an unclaimed ticket. Only in a slot of its own: the shared slot may hold another
    /// context's claim.
    pub(crate) fn unclaim(&self, ctx: &Ctx, waiting: &Loc, wid: WorkId) -> Result<()> {
        if self.wait_slot.get().is_none_or(|s| s >= WAIT_SLOTS - 1) {
            return Ok(());
        }
        let w = self.waiting_word(waiting)?;
        self.put_slot(ctx, &w, IDLE, wid)?;
        self.unreaped.set(true);
        Ok(())
    }

    /// Whether the lock, released to ticket `r` for `stalled`, may skip it: only if no live
    /// thread can hold it, by [`ThreadLock::claims`] (read when a node is dead, or after
    /// [`UNCLAIMED_AFTER`]), and an unclaimed ticket only after that stall. `None`: wait on.
    pub(crate) fn skippable(
        &self,
        ctx: &Ctx,
        waiting: &Loc,
        r: u64,
        stalled: Duration,
        wid: WorkId,
        wait: impl Fn() -> Result<()>,
    ) -> Result<Option<Claim>> {
        let any_dead = self.cluster.node_ids().any(|k| !self.cluster.is_alive(k));
        if !any_dead && stalled < UNCLAIMED_AFTER {
            return Ok(None);
        }
        Ok(match self.claims(ctx, waiting, r, wid, wait)? {
            Claim::Live => None,
            Claim::Nobody if stalled < UNCLAIMED_AFTER => None,
            c => Some(c),
        })
    }

    /// Whose ticket `r` is, from every node's `waiting` slots (the lock's array, one get of
    /// [`WAIT_SLOTS`] words per node into a buffer, then `wait`, the lock's wait for `wid`
    /// that keeps `dirty`):
    /// - [`Claim::Dead`]: a node reported dead announced waiting for `r` or holding it;
    /// - [`Claim::Live`]: a live node's slot, tagged with the node's current incarnation
    ///   ([`tag`]), reads [`TAKING`] or names `r`, or is its shared slot and has been used
    ///   (whose claims other contexts overwrite): `r` may be a live thread's;
    /// - [`Claim::Nobody`]: neither. Then `r`'s thread is not live: every thread claims its
    ///   slot before taking a ticket, and its slot reads `TAKING` or names that ticket until its
    ///   next claim, which comes after its release; a slot goes back to the pool only with no
    ///   hold and once its owner's writes are known to have landed
    ///   ([`ThreadLock::land_slot`]); a ticket a dropped context left is owed as a mark, or
    ///   cleared from its slot as nobody's; a slot tagged otherwise was written by an earlier
    ///   incarnation of its node, which is dead. The ticket was taken before the caller's own (which
    ///   it precedes), so its claim landed before the caller's FAA and this get sees it or a
    ///   later value of that slot.
    pub(crate) fn claims(
        &self,
        ctx: &Ctx,
        waiting: &Loc,
        r: u64,
        wid: WorkId,
        wait: impl Fn() -> Result<()>,
    ) -> Result<Claim> {
        let buf = match self.scan.get() {
            Some(b) => b,
            None => {
                let b = self
                    .cluster
                    .alloc_private(self.word.node(), waiting.len())?;
                self.scan.set(Some(b));
                b
            }
        };
        ctx.get(&buf, waiting, wid)?;
        wait()?;
        let mut live = false;
        for k in self.cluster.node_ids() {
            // Read after the get completed: every incarnation whose write it saw had made its
            // contexts by then, so it is this one or an earlier (dead) one.
            let alive = self.cluster.is_alive(k);
            let current = tag(self.cluster.incarnation(k)?);
            for i in 0..WAIT_SLOTS {
                let v = ctx.load(&buf.word(k.index() as u64 * WAIT_SLOTS + i)?)?;
                let names_r = v & SLOT_TICKET == r.wrapping_add(1) & SLOT_TICKET;
                if !alive && names_r {
                    return Ok(Claim::Dead(k));
                }
                // Written by an earlier incarnation of a live node: claims nothing.
                let fresh = v & SLOT_TAG == current;
                let taking = v & !SLOT_TAG == TAKING;
                if alive && fresh && (taking || names_r || (i == WAIT_SLOTS - 1 && v != IDLE)) {
                    live = true;
                }
            }
        }
        Ok(if live { Claim::Live } else { Claim::Nobody })
    }

    /// Tickets this thread leaves behind when its context is dropped are owed to `debts`.
    pub(crate) fn owing_to(mut self, debts: Arc<Debts>) -> Self {
        self.debts = Some(debts);
        self
    }

    /// The ticket a timed-out FAA or `try_acquire` CAS took, once it has landed in `word`.
    fn left_ticket(&self) -> Option<u64> {
        let u = self.cluster.peek(&self.word).ok()?;
        (self.pending_faa.get() || self.pending_cas.get() == Some(u)).then_some(u)
    }
}

impl Claim {
    /// Logs that `kind` lock `lock` skipped ticket `r` of this claim, from node `node`.
    pub(crate) fn report(self, kind: &str, lock: u64, node: NodeId, r: u64) {
        match self {
            Claim::Dead(k) => {
                tracing::warn!(target: "loco::locks", kind, lock, %node, ticket = r, dead = %k,
                "skipped the ticket of a dead holder; the next holder is told (poisoned)")
            }
            _ => tracing::warn!(target: "loco::locks", kind, lock, %node, ticket = r,
                "skipped a ticket no live thread claims (its taker died before naming it); the next holder is told (poisoned)"),
        }
    }
}

impl Drop for ThreadLock {
    fn drop(&mut self) {
        if let Some(ticket) = self.held.get() {
            tracing::error!(target: "loco::locks", ticket, node = %self.word.node(),
                "a context was dropped while holding a lock: the lock stays held until its node is reported dead");
            // Keep the slot and words, and the pin of a hold taken over: the hold is not over,
            // and its announcement must stay.
            std::mem::forget(self.carried.take());
            return;
        }
        // Dropped with every operation complete (the context reaped them): nothing can write
        // the words any more, and a ticket a timed-out operation took is known.
        let settled = self.settled.get();
        if settled {
            if let (Some(u), Some(debts)) = (self.left_ticket(), &self.debts) {
                tracing::debug!(target: "loco::locks", ticket = u, node = %self.word.node(),
                    "a dropped context left a ticket: owed, given up by the next caller");
                debts.push(u);
            }
        }
        let dirty = !settled
            && (self.dirty.get() || self.pending_faa.get() || self.pending_cas.get().is_some());
        if let Some(d) = &self.on_drop {
            let freed = Freed {
                slot: self.slot,
                last: self.last_rel.get(),
                node: self.word.node(),
                reach: std::mem::take(&mut self.reach),
            };
            d.dropped(freed, dirty);
        }
        // The scan buffer is written only by waited gets; the other words also by the puts an
        // unreaped release or announcement may still be reading.
        if let Some(buf) = self.scan.get().filter(|_| !dirty) {
            let _ = self.cluster.free_private(buf);
        }
        if !settled && (dirty || self.unreaped.get()) {
            return; // leaked, which is safe
        }
        let pin = self.pin.borrow_mut().take();
        if let (Some(slot), Some(slots)) = (self.wait_slot.get(), &self.wait_slots) {
            if let Some(pin) = pin.filter(|p| !p.is_released()) {
                // It names a hold another context of this node holds now: it goes back when
                // that hold is released (kept for good if our last write may not have landed).
                if self.slot_landed.get() {
                    pin.orphan();
                }
            } else if self.slot_landed.get() {
                slots.give(self.word.node(), slot);
            } else {
                // A write of ours into it may still be on its way: kept (leaked), which is safe.
                tracing::debug!(target: "loco::locks", node = %self.word.node(), slot,
                    "a context's waiting slot is kept: its last write may not have landed (call leave to hand it back)");
            }
        }
        for w in [self.word, self.scratch, self.note] {
            let _ = self.cluster.free_private(w);
        }
    }
}

/// The per-thread lock states of a context, keyed by lock id.
///
/// Ordered by id (the order the locks were made): when the context goes, every lock's slot is
/// cleared and its words go back, each with network operations, in this order. A `HashMap`'s
/// order is random per map, so the same program made other operations in another order from
/// run to run, and the simulator's exhaustive search (`sim::Strategy::Exhaustive`) failed
/// with `Nondeterministic` on any program whose threads used two locks (or SC objects).
#[derive(Debug, Default)]
struct Registry {
    locks: RefCell<BTreeMap<u64, Rc<ThreadLock>>>,
    /// A weak or strong lock's `rel` slot claim whose wait ran out of time, by lock id: the
    /// next call waits for it rather than starting another, which would take a second slot and
    /// lose the first.
    claims: RefCell<BTreeMap<u64, SlotClaim>>,
}

/// A weak or strong lock's `rel` slot claim on its way: the operation its step posted (with
/// the lock's acquire work id) has not been waited for.
#[derive(Debug)]
pub(crate) struct SlotClaim {
    /// Private words: `word` receives the FAA's or CAS's result, `note` is the source of the
    /// owner record's put.
    pub(crate) st: ThreadLock,
    pub(crate) step: ClaimStep,
}

/// What a [`SlotClaim`] has posted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ClaimStep {
    /// The FAA on `slots` (a fresh slot, if its result is below the bound).
    Faa,
    /// The put of the owner record of slot `slot`, which the FAA gave this thread.
    Record { slot: usize },
    /// The CAS of slot `slot`'s owner record from `from` (an owner that is dead, or handed the
    /// slot back) to this thread's: the slot is this thread's if the CAS read `from`.
    Adopt { slot: usize, from: u64 },
}

/// The calling thread's `rel` slot claim for lock `id` that a call before gave up waiting for
/// ([`keep_claim`]), taken out of the context.
pub(crate) fn take_claim(ctx: &Ctx, cluster: u32, id: u64) -> Result<Option<SlotClaim>> {
    Ok(registry(ctx, cluster)?.claims.borrow_mut().remove(&id))
}

/// Keeps `claim`, a `rel` slot claim for lock `id` still in flight, for the calling thread's
/// next call ([`take_claim`]).
pub(crate) fn keep_claim(ctx: &Ctx, cluster: u32, id: u64, claim: SlotClaim) -> Result<()> {
    registry(ctx, cluster)?
        .claims
        .borrow_mut()
        .insert(id, claim);
    Ok(())
}

/// The calling thread's state for lock `id` of cluster `cluster`, registered with `init` on first
/// use.
pub(crate) fn thread_lock(
    ctx: &Ctx,
    cluster: u32,
    id: u64,
    init: impl FnOnce(&Ctx) -> Result<ThreadLock>,
) -> Result<Rc<ThreadLock>> {
    let reg = registry(ctx, cluster)?;
    if let Some(st) = reg.locks.borrow().get(&id) {
        return Ok(st.clone());
    }
    let st = Rc::new(init(ctx)?);
    reg.locks.borrow_mut().insert(id, st.clone());
    Ok(st)
}

/// The ticket of the calling thread's hold (`RawLock::held`), `me` its state if it has used the
/// lock. `PeerDead` naming the thread's own node once that node is reported dead, or for a
/// context of an incarnation that has died since (the node restarted): as every other call
/// of the context says, and as the other threads see it, a dead node's hold is no longer its
/// thread's (they skip its ticket). Posts nothing.
pub(crate) fn held(ctx: &Ctx, me: Option<Rc<ThreadLock>>) -> Result<Option<u64>> {
    ctx.cluster().check_alive(ctx.node())?;
    match me {
        Some(me) => match me.held.get() {
            Some(ticket) => {
                // A CPU load of the thread's private word fails on a context of a dead
                // incarnation (which `check_alive` of the restarted node does not tell).
                ctx.load(&me.word)?;
                Ok(Some(ticket))
            }
            None => Ok(None),
        },
        None => Ok(None),
    }
}

/// The calling thread's state for lock `id` of cluster `cluster` if it has used the lock (and
/// not left it since), without registering it: for the calls that only look at the thread's
/// hold (`held`, `release`, `leave`), which must neither take a weak lock's `rel` slot nor
/// touch the network for a thread that never acquired.
pub(crate) fn registered(ctx: &Ctx, cluster: u32, id: u64) -> Result<Option<Rc<ThreadLock>>> {
    Ok(registry(ctx, cluster)?.locks.borrow().get(&id).cloned())
}

/// The context's registry of lock states ([`Error::ForeignContext`] for a context of another
/// cluster than `cluster`, the lock's).
fn registry(ctx: &Ctx, cluster: u32) -> Result<Rc<Registry>> {
    if ctx.cluster().id() != cluster {
        return Err(Error::ForeignContext {
            ctx: ctx.cluster().id(),
            lock: cluster,
        });
    }
    ctx.extension::<Registry>(|ctx| {
        // Before the context goes: every lock's slot is cleared and read back, so that it can
        // be reused. The reads share a work id: after one that does not complete (a stalled
        // or dead node), the others would wait for it too, so they are not tried.
        ctx.on_drop(|ctx| {
            let budget = LAND_AT_DROP.min(ctx.cluster().timeout());
            if let Ok(reg) = ctx.extension::<Registry>(|_| Ok(Registry::default())) {
                for st in reg.locks.borrow().values() {
                    if !st.land_slot_at_drop(ctx, budget) {
                        break;
                    }
                }
            }
        });
        Ok(Registry::default())
    })
    .map_err(Error::from)
}

/// Drops the calling thread's state for lock `id` (its slot and words go back).
pub(crate) fn forget(ctx: &Ctx, id: u64) {
    if let Ok(reg) = ctx.extension::<Registry>(|_| Ok(Registry::default())) {
        reg.locks.borrow_mut().remove(&id);
    }
}

/// When a timed call must give up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    end: Instant,
    /// The timeout the caller asked for (reported in [`Error::Timeout`]).
    pub(crate) after: Duration,
}

impl Deadline {
    /// `after` from now; a duration too large for an [`Instant`] (`Duration::MAX`) is capped at
    /// about a century.
    pub(crate) fn after(after: Duration) -> Self {
        let now = clock::now();
        let end = now
            .checked_add(after)
            .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
            .unwrap_or(now);
        Deadline { end, after }
    }

    /// At `end` (reported as the time left from now).
    pub(crate) fn at(end: Instant) -> Self {
        Deadline {
            end,
            after: end.saturating_duration_since(clock::now()),
        }
    }

    pub(crate) fn end(&self) -> Instant {
        self.end
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.end.saturating_duration_since(clock::now())
    }

    pub(crate) fn expired(&self) -> bool {
        clock::now() >= self.end
    }

    pub(crate) fn timeout(&self) -> Error {
        Error::Timeout { after: self.after }
    }

    /// `wait(d)` for at most the time left; a wait that runs out is this deadline's
    /// [`Error::Timeout`].
    pub(crate) fn wait(&self, ctx: &Ctx, wid: WorkId) -> Result<()> {
        match ctx.wait_timeout(wid, self.remaining()) {
            Ok(()) => Ok(()),
            Err(loco_rdmawait::Error::Timeout { .. }) => Err(self.timeout()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A pause of at least this long sleeps rather than yields ([`Spin::pause`]).
const PAUSE_SLEEP: Duration = Duration::from_micros(100);

/// The longest a ticket-lock waiter stays off the network in one go (so that its checks for
/// abandoned and dead tickets, every millisecond, keep their pace).
const PACE_MAX: Duration = Duration::from_micros(500);

/// How long a ticket lock takes to serve one ticket, as a waiter sees it, so that a waiter
/// `ahead` tickets back can stay off the network for a part of the time `ahead - 1` of them
/// take before it reads the lock again (waiting in proportion to its place in the queue, as
/// DSLR's waiters do):
/// reads that cannot succeed yet would only load the lock's node, whose NIC the holder's
/// operations and release go through. Estimated from the changes of the released-to ticket
/// the waiter reads, and never less than one of its own reads (a handover takes at least a
/// round trip). With no estimate yet (the released-to ticket has not moved), no pause.
#[derive(Default)]
pub(crate) struct Pace {
    /// The released-to ticket last read, and when it was first read.
    seen: Option<(u64, Instant)>,
    /// Time per ticket served (the shortest seen).
    per_ticket: Option<Duration>,
    /// The round trip of the last read.
    read: Duration,
}

impl Pace {
    /// A read that took `took` found the lock released to ticket `r` at `at`.
    pub(crate) fn saw(&mut self, r: u64, at: Instant, took: Option<Duration>) {
        if let Some(took) = took {
            self.read = took;
        }
        match self.seen {
            Some((old, since)) if old != r => {
                // Forward by `moved` tickets (not 0: `r` differs; a wrapped-around difference,
                // `rel` read from before an earlier value, is no sample).
                let moved = r.wrapping_sub(old);
                if let Ok(moved) = u32::try_from(moved) {
                    let sample = at.saturating_duration_since(since) / moved;
                    // The fastest seen: an estimate that only shrinks cannot feed on the
                    // delays its own pauses cause (a waiter that wakes late leaves the lock
                    // idle, which would make the next estimate longer still).
                    self.per_ticket = Some(self.per_ticket.map_or(sample, |p| p.min(sample)));
                }
                self.seen = Some((r, at));
            }
            Some(_) => {}
            None => self.seen = Some((r, at)),
        }
    }

    /// How long a waiter `ahead` tickets back stays off the network before its next read.
    pub(crate) fn pause_for(&self, ahead: u64) -> Duration {
        let Some(per) = self.per_ticket else {
            return Duration::ZERO;
        };
        // A quarter of the estimate, then a fresh read: a waiter whose estimate is up to four
        // times too long still wakes before its turn (the estimate's error grows with the
        // tickets ahead), and the reads per acquire grow with the logarithm of the queue.
        let behind = ahead.saturating_sub(1).min(1 << 16) as u32;
        (per.max(self.read).saturating_mul(behind) / 4).min(PACE_MAX)
    }
}

/// Backoff for spin loops on a machine that may have fewer cores than spinning threads: spin
/// briefly, then yield ([`Backoff`]), then, past 50 ms (a slow or dead holder), sleep a little.
/// Every round checks that the cluster is still open ([`Cluster::check_open`]), so that a
/// shutdown frees the spinning thread.
pub(crate) struct Spin {
    backoff: Backoff,
    start: Instant,
}

impl Spin {
    pub(crate) fn new() -> Self {
        Spin {
            backoff: Backoff::new(),
            start: clock::now(),
        }
    }

    /// Waits for a ticket lock's turn with `ahead` holders still before us: proportional
    /// backoff (each of them needs at least a network round trip), so that waiting threads do
    /// not flood the NICs with polls that cannot succeed yet.
    pub(crate) fn wait_behind(&mut self, cluster: &Cluster, ahead: u64) -> Result<()> {
        if !clock::simulated() {
            for _ in 1..ahead.min(64) {
                clock::yield_now();
            }
        }
        self.wait(cluster)
    }

    /// Stays off the network (or the CPU) for `d` (see [`Pace`]): simulated, lets virtual time
    /// pass; on an OS thread, sleeps if `d` is at least [`PAUSE_SLEEP`]; otherwise yields the
    /// CPU (or suspends the async task) until `d` has passed (a short sleep would oversleep by
    /// tens of microseconds).
    pub(crate) fn pause(&mut self, cluster: &Cluster, d: Duration) -> Result<()> {
        // In an untimed simulation a measured pace means nothing (and a pause would move
        // every thread's clock on).
        if d.is_zero() || !clock::timed() {
            return Ok(());
        }
        cluster.check_open()?;
        // Simulated, or an async task's blocking call whose pause is long enough for a timer
        // (tokio's are in milliseconds): sleep, the task suspended meanwhile.
        if clock::simulated() || (clock::cooperative() && d >= Duration::from_millis(1)) {
            clock::sleep(d);
            return Ok(());
        }
        if d >= PAUSE_SLEEP && !clock::cooperative() {
            // An OS thread's pause long enough that a sleep's overshoot (tens of microseconds)
            // matters little, and the CPU is left to the holder (and, on Soft-RoCE, the NIC)
            // meanwhile: yielding in a loop keeps it on a host with more threads than CPUs,
            // where a yield mostly returns at once. On the 2-vCPU VM, 8 threads: 3-12% more
            // sections per second (docs/performance.md §5).
            std::thread::sleep(d);
            return Ok(());
        }
        let end = clock::now() + d;
        while clock::now() < end {
            clock::yield_now();
        }
        Ok(())
    }

    pub(crate) fn wait(&mut self, cluster: &Cluster) -> Result<()> {
        cluster.check_open()?;
        let waited = clock::now().saturating_duration_since(self.start);
        if clock::simulated() {
            // Simulated: a scheduling point that lets the holder run (virtual time).
            if waited < Duration::from_millis(50) {
                clock::pause();
            } else {
                clock::sleep(Duration::from_micros(200));
            }
        } else if clock::cooperative() {
            // An async task's blocking call: the holder may be another task of this thread,
            // which runs only while this one is suspended; a long wait sleeps on a timer.
            if waited < Duration::from_millis(50) {
                clock::yield_now();
            } else {
                clock::sleep(Duration::from_millis(1));
            }
        } else if !self.backoff.is_completed() {
            self.backoff.snooze();
        } else if waited < Duration::from_millis(50) {
            std::thread::yield_now();
        } else {
            // A long wait (a slow or dead holder): stop burning a core.
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}
