//! The locks' protocols written once, over a machine (see [`loco_rdmawait::protocol`]).
//!
//! [`RawWLock`](crate::RawWLock), [`RawSLock`](crate::RawSLock) and
//! [`RawNLock`](crate::RawNLock) run these functions for `acquire` and `release`, on a thread
//! context; the litmus explorer's lowering runs the same functions to produce the instructions
//! it explores. A change here changes both.
//!
//! What the crate adds around them, and the explorer does not see: checking the caller's use
//! (`AlreadyHeld`, `NotHeld`), deadlines, and the failure paths of docs on the lock types
//! ("Failures"): a spin that gives up abandons its ticket, a waiter that finds the lock
//! released to an abandoned ticket or to a dead holder passes it on. Those run inside the
//! crate's implementation of the two spins ([`Machine::await_any`], [`Machine::get_until`]) and
//! only when a thread gives up or a node dies; a litmus test can express neither. A wait longer
//! than a millisecond also takes a slow path there (the waiter announces its ticket in
//! `waiting[me]` and reads abandon marks): it writes only words the protocols below never read,
//! so what they compute is unchanged. `try_acquire` is crate-only too (litmus tests have no try
//! form).

use loco_rdmawait::protocol::Machine;
use loco_rdmawait::{NodeId, WorkId};
use loco_rdmawaitrmw::RmwMachine;
use loco_sv::protocol::{bcast, gf, GfWords};

/// Work id of the weak lock's ticket operations (FAA, CAS, get of `tkt`).
pub const WL_ACQ: WorkId = WorkId::internal(0x4C4B_0001);
/// Work id of the weak lock's release broadcasts and hold announcements. A release's broadcast
/// is not waited for at release (docs/model.md §5.3): the thread's next acquire waits for it (see
/// [`wlock_acquire`]), so completions never pile up; the hold's announcement is waited for by
/// the release.
pub const WL_REL: WorkId = WorkId::internal(0x4C4B_0002);
/// Work id of the node lock's acquire operations (FAA, CAS, polling gets, marks).
pub const NL_ACQ: WorkId = WorkId::internal(0x4C4B_0011);
/// Work id of the node lock's release put and `held` announcement. Not waited for (the release
/// does not block the CPU); later operations on the same queue pair reap them.
pub const NL_REL: WorkId = WorkId::internal(0x4C4B_0012);

/// The bit of a released-to value (`rel`) that says the critical section before it did not
/// finish (a guard dropped during a panic, or a dead holder skipped).
pub const POISON: u64 = 1 << 63;

/// A weak lock's words as one thread uses them.
#[derive(Clone, Copy, Debug)]
pub struct WLockWords<W> {
    /// The ticket dispenser, on the ticket node.
    pub tkt: W,
    /// `held[k]` of the thread's node k, on the ticket node: where a thread announces its hold.
    pub held: W,
    /// The thread's private word, on its node.
    pub turn: W,
}

/// The weak lock's acquire (docs/model.md §5.3, Fig. 10); `copies` are the thread's node's
/// copies of every `rel[*]`.
///
/// `wait(WL_REL)` (the thread's previous release has read its source); `rfaa(tkt, 1, turn);
/// wait; t := load(turn)`; spin until some copy reads `t`; then announce the hold
/// ([`wlock_enter`]). Returns `t` and the value that let it in (with the poison bit, if the
/// previous holder's section did not finish).
pub fn wlock_acquire<M: RmwMachine>(
    m: &mut M,
    w: &WLockWords<M::Word>,
    copies: &[M::Word],
) -> Result<(M::Val, M::Val), M::Error> {
    m.wait(WL_REL)?;
    let one = m.constant(1);
    m.rfaa(w.tkt, one, w.turn, WL_ACQ)?;
    m.wait(WL_ACQ)?;
    let t = m.load(w.turn)?;
    let raw = m.await_any(copies, t)?;
    wlock_enter(m, w, t)?;
    Ok((t, raw))
}

/// Entering the weak lock with ticket `t`: `store(turn, t+1); put(held[me], turn)`, the hold's
/// announcement for waiters that find this node dead (beyond the paper; not waited for here:
/// the release's `wait(WL_REL)` retires it).
pub fn wlock_enter<M: Machine>(
    m: &mut M,
    w: &WLockWords<M::Word>,
    t: M::Val,
) -> Result<(), M::Error> {
    let v = m.plus(t, 1);
    m.store(w.turn, v)?;
    m.put(w.held, w.turn, WL_REL)
}

/// `store(rel[me], raw); bcast(rel[me], nodes, WL_REL)`: what a weak-lock release publishes
/// (also a forwarding release, on the crate's failure paths). `mine(n)` is the copy on node n
/// of the thread's own `rel` slot.
pub fn wlock_publish<M: Machine>(
    m: &mut M,
    mine: impl Fn(NodeId) -> M::Word,
    nodes: &[NodeId],
    raw: M::Val,
) -> Result<(), M::Error> {
    let me = m.node();
    m.store(mine(me), raw)?;
    bcast(m, mine, nodes, WL_REL)
}

/// The released-to value of ticket `t`: `t + 1`, with the poison bit if the section did not
/// finish.
fn next<M: Machine>(m: &mut M, t: M::Val, poison: bool) -> M::Val {
    let v = m.plus(t, 1);
    if poison {
        m.or(v, POISON)
    } else {
        v
    }
}

/// The weak lock's release of ticket `t` (Fig. 10): `wait(WL_REL)`, then publish `t + 1` to
/// every node of `nodes`, not waited for.
///
/// The wait (beyond the paper) retires the hold's announcement ([`wlock_enter`]), so that no
/// operation reads the thread's private word once it has released: a context dropped after a
/// release hands its words back. It is usually free (the announcement completed during the
/// critical section); it never waits for the critical section's own operations, whose work ids
/// are the caller's.
pub fn wlock_release<M: Machine>(
    m: &mut M,
    mine: impl Fn(NodeId) -> M::Word,
    nodes: &[NodeId],
    t: M::Val,
    poison: bool,
) -> Result<(), M::Error> {
    m.wait(WL_REL)?;
    let v = next(m, t, poison);
    wlock_publish(m, mine, nodes, v)
}

/// The strong lock's release (docs/model.md §5.4): `gf(nodes)`, then the weak release.
pub fn slock_release<M: Machine>(
    m: &mut M,
    fence: &GfWords<M::Word>,
    mine: impl Fn(NodeId) -> M::Word,
    nodes: &[NodeId],
    t: M::Val,
    poison: bool,
) -> Result<(), M::Error> {
    gf(m, fence, nodes)?;
    wlock_release(m, mine, nodes, t, poison)
}

/// A node lock's words as one thread uses them.
#[derive(Clone, Copy, Debug)]
pub struct NLockWords<W> {
    /// The ticket dispenser, on the lock's node.
    pub tkt: W,
    /// The released-to word, on the lock's node.
    pub rel: W,
    /// `held[k]` of the thread's node k, on the lock's node: where a thread announces its hold.
    pub held: W,
    /// The thread's private word, on its node.
    pub loc: W,
}

/// The node lock's acquire (docs/model.md §5.5, Fig. 13): `rfaa(tkt, 1, loc); wait; t :=
/// load(loc)`; `get(loc, rel); wait` until it reads `t`; `store(loc, t+1)` (for the release's
/// put) and `put(held[me], loc)` (the hold's announcement, for waiters that find this node dead;
/// not waited for). Returns `t` and the value of `rel` that let it in.
pub fn nlock_acquire<M: RmwMachine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
) -> Result<(M::Val, M::Val), M::Error> {
    let one = m.constant(1);
    m.rfaa(w.tkt, one, w.loc, NL_ACQ)?;
    m.wait(NL_ACQ)?;
    let t = m.load(w.loc)?;
    let raw = m.get_until(w.loc, w.rel, NL_ACQ, t)?;
    nlock_enter(m, w, t)?;
    Ok((t, raw))
}

/// Entering the node lock with ticket `t`: `store(loc, t+1)` (for the release's put) and
/// `put(held[me], loc)` (the hold's announcement; not waited for).
pub fn nlock_enter<M: Machine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
    t: M::Val,
) -> Result<(), M::Error> {
    let v = m.plus(t, 1);
    m.store(w.loc, v)?;
    m.put(w.held, w.loc, NL_REL)
}

/// The node lock's release of ticket `t` (Fig. 13): `rfence(n); put(rel, loc)`, not waited for.
/// `loc` holds `t + 1` since the acquire; a poisoned release stores it again with the poison
/// bit first.
pub fn nlock_release<M: Machine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
    t: M::Val,
    poison: bool,
) -> Result<(), M::Error> {
    if poison {
        let v = next(m, t, true);
        m.store(w.loc, v)?;
    }
    let n = m.node_of(w.rel);
    m.rfence(n)?;
    m.put(w.rel, w.loc, NL_REL)
}
