//! The locks' protocols written once, over a machine (see [`loco_rdmawait::protocol`]).
//!
//! [`RawWLock`](crate::RawWLock), [`RawSLock`](crate::RawSLock) and
//! [`RawNLock`](crate::RawNLock) run these functions for `acquire` and `release`, on a thread
//! context; the litmus explorer's lowering runs the same functions to produce the instructions
//! it explores. A change here changes both.
//!
//! Giving a ticket up is shared too: [`nlock_give_up`] (a thread whose acquire fails after
//! its FAA marks its ticket abandoned, or passes the lock on if it was handed to it) and
//! [`nlock_pass_on`] (a waiter that finds the lock released to a marked ticket passes it on),
//! with the ring of marks of [`mark`]. A litmus test gives a ticket up with `giveup(l)`.
//!
//! What the crate adds around them, and the explorer does not see: checking the caller's use
//! (`AlreadyHeld`, `NotHeld`), deadlines, when a spin looks for marks (after a millisecond of
//! waiting; the explorer: whenever one is set), marks owed because the ring was full, and
//! dead nodes: a waiter that finds the lock released to a dead holder passes it on (poisoned).
//! Those run inside the crate's implementation of the two spins ([`Machine::await_any`],
//! [`Machine::get_until`]) and only when a thread gives up or a node dies. A thread that has to
//! wait also announces its ticket in `waiting[me]`: a word the protocols below never read, so
//! what they compute is unchanged. `try_acquire` is crate-only too (litmus tests
//! have no try form).

use loco_rdmawait::protocol::{Cond, Help, Machine};
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
/// Work id of the node lock's release CAS and hold announcement. Not waited for (the release
/// does not block the CPU); later operations on the same queue pair reap them.
pub const NL_REL: WorkId = WorkId::internal(0x4C4B_0012);

/// The bit of a released-to value (`rel`) that says the critical section before it did not
/// finish (a guard dropped during a panic, or a dead holder skipped).
pub const POISON: u64 = 1 << 63;

/// Words in a lock's ring of abandon marks: ticket `u`'s mark is `ab[u mod MARKS] = u + 1`.
pub const MARKS: u64 = 16;

/// The ticket part of a released-to value (without the poison bit).
fn ticket<M: Machine>(m: &mut M, raw: M::Val) -> M::Val {
    m.and(raw, !POISON)
}

/// `get(scratch, src); wait(wid); load(scratch)`.
fn read<M: Machine>(
    m: &mut M,
    scratch: M::Word,
    src: M::Word,
    wid: WorkId,
) -> Result<M::Val, M::Error> {
    m.get(scratch, src, wid)?;
    m.wait(wid)?;
    m.load(scratch)
}

/// Marks ticket `u` abandoned in the ring `ab` (on the lock's node), then runs `marked`:
/// `m := ab[u mod K]` (a get); unless it already reads `u+1`, `rcas(ab[u mod K], m, u+1)`, which
/// fails only if another thread wrote the word meanwhile: then `owe` runs instead of `marked`
/// (the mark is owed, paid later by the crate).
///
/// The caller has checked that the lock is released to some `r` with `u - K < r < u`: every
/// other ticket of the same ring word is then `<= u - K < r`, done, and its mark stale. Marks
/// are written only with remote RMWs, so they are atomic against each other, and a stale RMW
/// (one whose wait timed out) can only fail, being a CAS from the exact value read.
pub fn mark<M: RmwMachine>(
    m: &mut M,
    ab: M::Word,
    scratch: M::Word,
    u: M::Val,
    wid: WorkId,
    marked: impl Fn(&mut M) -> Result<(), M::Error>,
    owe: impl FnOnce(&mut M) -> Result<(), M::Error>,
) -> Result<(), M::Error> {
    let slot = m.index(ab, u, MARKS)?;
    let seen = read(m, scratch, slot, wid)?;
    let next = m.plus(u, 1);
    m.branch(Cond::eq(seen, next), &marked, |m| {
        m.rcas(slot, seen, next, scratch, wid)?;
        m.wait(wid)?;
        let old = m.load(scratch)?;
        m.branch(Cond::eq(old, seen), &marked, owe)
    })
}

/// A weak lock's words as one thread uses them.
#[derive(Clone, Copy, Debug)]
pub struct WLockWords<W> {
    /// The ticket dispenser, on the ticket node.
    pub tkt: W,
    /// Where the thread announces its hold, on the ticket node (the crate: its `waiting` slot).
    pub held: W,
    /// The ring of [`MARKS`] abandon marks, on the ticket node (its first word).
    pub ab: W,
    /// The thread's private word, on its node.
    pub turn: W,
    /// The thread's scratch word, on its node: the give-up and pass-on steps read into it.
    pub scratch: W,
    /// Bits or-ed into the hold's announcement ([`wlock_enter`]), which no protocol step reads:
    /// the crate's tag of the thread's node's incarnation (bits 54-61), so that a waiter can
    /// tell an announcement of a dead incarnation; 0 in the explorer (then nothing is or-ed).
    pub tag: u64,
}

/// Where a weak-lock thread publishes a release: `mine(n)` is the copy on node n of its own
/// `rel` slot, `nodes` the nodes it publishes to.
#[derive(Clone, Copy)]
pub struct Publish<'a, W> {
    /// The thread's `rel` slot's copy on a node.
    pub mine: &'a dyn Fn(NodeId) -> W,
    /// The nodes to publish to.
    pub nodes: &'a [NodeId],
}

/// No copy reads the ticket looked for ([`wlock_scan`]).
pub const NONE: u64 = u64::MAX;

/// The weak lock's acquire (docs/model.md §5.3, Fig. 10); `copies` are the thread's node's
/// copies of every `rel[*]`, `publish` where the thread's own slot is.
///
/// `wait(WL_REL)` (the thread's previous release has read its source); take a ticket `t`
/// ([`wlock_take`]); spin until some copy reads `t`, passing on marked tickets it finds released
/// to ([`wlock_pass_on`]); then announce the hold ([`wlock_enter`]). Returns `t` and the value
/// that let it in (with the poison bit, if the previous holder's section did not finish).
pub fn wlock_acquire<M: RmwMachine>(
    m: &mut M,
    w: &WLockWords<M::Word>,
    copies: &[M::Word],
    publish: Publish<'_, M::Word>,
) -> Result<(M::Val, M::Val), M::Error> {
    m.wait(WL_REL)?;
    let t = wlock_take(m, w)?;
    let help = Help {
        marks: w.ab,
        len: MARKS,
        pass_on: &mut |m: &mut M, raw| wlock_pass_on(m, w, publish, raw),
    };
    let raw = m.await_any(copies, t, Some(help))?;
    wlock_enter(m, w, t)?;
    Ok((t, raw))
}

/// Taking a weak-lock ticket: `rfaa(tkt, 1, turn); wait; t := load(turn)`.
pub fn wlock_take<M: RmwMachine>(m: &mut M, w: &WLockWords<M::Word>) -> Result<M::Val, M::Error> {
    let one = m.constant(1);
    m.rfaa(w.tkt, one, w.turn, WL_ACQ)?;
    m.wait(WL_ACQ)?;
    m.load(w.turn)
}

/// CPU loads of the thread's node's `copies` of every `rel[*]`, in order: the value of one whose
/// ticket is `t` ([`NONE`] if none is), and the highest value read (in ticket order).
pub fn wlock_scan<M: Machine>(
    m: &mut M,
    copies: &[M::Word],
    t: M::Val,
) -> Result<(M::Val, M::Val), M::Error> {
    let mut hit = m.constant(NONE);
    let mut high: Option<(M::Val, M::Val)> = None;
    for &c in copies {
        let v = m.load(c)?;
        let tv = ticket(m, v);
        hit = m.select(Cond::eq(tv, t), v, hit);
        high = Some(match high {
            None => (v, tv),
            Some((h, ht)) => {
                let up = Cond::behind(ht, tv, 1);
                (m.select(up, v, h), m.select(up, tv, ht))
            }
        });
    }
    let high = match high {
        Some((h, _)) => h,
        None => m.constant(NONE),
    };
    Ok((hit, high))
}

/// A waiter found the weak lock released to `raw` (ticket `r`, the highest copy on its node, not
/// its own): if `ab[r mod K]` reads `r + 1` (ticket `r` was given up), release to `r + 1` on its
/// behalf from its own slot ([`wlock_publish`], the poison bit kept). Returns the mark read.
/// Several waiters may do so: they publish the same value.
pub fn wlock_pass_on<M: RmwMachine>(
    m: &mut M,
    w: &WLockWords<M::Word>,
    publish: Publish<'_, M::Word>,
    raw: M::Val,
) -> Result<M::Val, M::Error> {
    if_marked(m, w.ab, w.scratch, raw, WL_ACQ, |m| {
        wlock_pass_over(m, publish, raw)
    })
}

/// If the ticket of the released-to value `raw` is marked abandoned (`ab[r mod K]` reads
/// `r + 1`, a get into `scratch`), runs `pass`; returns the mark read.
fn if_marked<M: RmwMachine>(
    m: &mut M,
    ab: M::Word,
    scratch: M::Word,
    raw: M::Val,
    wid: WorkId,
    pass: impl FnOnce(&mut M) -> Result<(), M::Error>,
) -> Result<M::Val, M::Error> {
    let r = ticket(m, raw);
    let slot = m.index(ab, r, MARKS)?;
    let seen = read(m, scratch, slot, wid)?;
    let next = m.plus(r, 1);
    m.branch(Cond::eq(seen, next), pass, |_| Ok(()))?;
    Ok(seen)
}

/// `wait(WL_REL)` (the thread's previous publication has read its source), then publish
/// `raw + 1`: the ticket released to in `raw` is passed on unused, the poison bit kept.
fn wlock_pass_over<M: Machine>(
    m: &mut M,
    publish: Publish<'_, M::Word>,
    raw: M::Val,
) -> Result<(), M::Error> {
    m.wait(WL_REL)?;
    let v = m.plus(raw, 1);
    wlock_publish(m, publish.mine, publish.nodes, v)
}

/// Gives weak-lock ticket `u` up (the thread took it with [`wlock_take`] and will not enter),
/// looking at its node's `copies`: if one reads `u`, pass it on at once
/// (`wlock_pass_over`); if the highest is an earlier ticket, mark `u` ([`mark`]), then look
/// again and pass it on if it was handed to `u` meanwhile (a waiter that saw the mark may pass
/// it on too: both publish `u + 1`). If the highest is past `u`, somebody passed it on already.
/// `owe` runs when the mark cannot be written now: `u` is [`MARKS`] or more tickets ahead, or
/// the ring word changed under the CAS.
pub fn wlock_give_up<M: RmwMachine>(
    m: &mut M,
    w: &WLockWords<M::Word>,
    copies: &[M::Word],
    publish: Publish<'_, M::Word>,
    u: M::Val,
    owe: impl Fn(&mut M) -> Result<(), M::Error>,
) -> Result<(), M::Error> {
    let none = m.constant(NONE);
    let (hit, high) = wlock_scan(m, copies, u)?;
    let h = ticket(m, high);
    let marked = |m: &mut M| {
        let (hit, _) = wlock_scan(m, copies, u)?;
        m.branch(
            Cond::ne(hit, none),
            |m| wlock_pass_over(m, publish, hit),
            |_| Ok(()),
        )
    };
    m.branch(
        Cond::ne(hit, none),
        |m| wlock_pass_over(m, publish, hit),
        |m| {
            m.branch(
                Cond::behind(h, u, 1),
                |m| {
                    m.branch(Cond::behind(h, u, MARKS), &owe, |m| {
                        mark(m, w.ab, w.scratch, u, WL_ACQ, marked, &owe)
                    })
                },
                |_| Ok(()),
            )
        },
    )
}

/// The announcement of a hold of ticket `t`: `t + 1`, with `tag` (nothing or-ed if 0).
fn announced<M: Machine>(m: &mut M, t: M::Val, tag: u64) -> M::Val {
    let v = m.plus(t, 1);
    if tag == 0 {
        v
    } else {
        m.or(v, tag)
    }
}

/// Entering the weak lock with ticket `t`: `store(turn, (t+1) | tag); put(held, turn)`, the
/// hold's announcement for waiters that find this node dead (beyond the paper; not waited for
/// here: the release's `wait(WL_REL)` retires it).
pub fn wlock_enter<M: Machine>(
    m: &mut M,
    w: &WLockWords<M::Word>,
    t: M::Val,
) -> Result<(), M::Error> {
    let v = announced(m, t, w.tag);
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

/// The weak lock's **local handover**: the holder passes its hold, unreleased, to another
/// thread of its node (a cohort, `Lock::set_cohort`), which enters without a network acquire.
/// `wait(WL_REL)` retires the hold's announcement. A weak release publishes only the CPU
/// accesses of the critical section (Fig. 8a); between threads of one node they travel through
/// the node's memory, and the crate fences the CPU (`mfence`) before the next thread is let in.
pub fn wlock_hand_off<M: Machine>(m: &mut M) -> Result<(), M::Error> {
    m.wait(WL_REL)
}

/// The strong lock's local handover: `gf(nodes)`, then [`wlock_hand_off`]. The next holder's
/// operations travel on its own queue pairs, which nothing orders after the holder's, so every
/// operation of the critical section must have completed first (Fig. 8e), as at a release.
pub fn slock_hand_off<M: Machine>(
    m: &mut M,
    fence: &GfWords<M::Word>,
    nodes: &[NodeId],
) -> Result<(), M::Error> {
    gf(m, fence, nodes)?;
    wlock_hand_off(m)
}

/// The node lock's local handover on node `n`: `gf([n])`, then `wait(NL_REL)` (the hold's
/// announcement). The network release needs only `rfence(n)`, because its CAS and the next
/// holder's read of `rel` order the rest; a local successor reads n on its own queue pairs, so
/// the critical section's operations towards n must have completed before it enters (Fig. 8f).
pub fn nlock_hand_off<M: Machine>(
    m: &mut M,
    fence: &GfWords<M::Word>,
    n: NodeId,
) -> Result<(), M::Error> {
    gf(m, fence, &[n])?;
    m.wait(NL_REL)
}

/// A node lock's words as one thread uses them.
#[derive(Clone, Copy, Debug)]
pub struct NLockWords<W> {
    /// The ticket dispenser, on the lock's node.
    pub tkt: W,
    /// The released-to word, on the lock's node.
    pub rel: W,
    /// Where the thread announces its hold, on the lock's node (the crate: its `waiting` slot).
    pub held: W,
    /// The ring of [`MARKS`] abandon marks, on the lock's node (its first word).
    pub ab: W,
    /// The thread's private word, on its node.
    pub loc: W,
    /// The thread's scratch word, on its node: the give-up and pass-on steps read into it.
    pub scratch: W,
    /// Bits or-ed into the hold's announcement ([`nlock_enter`]), as [`WLockWords::tag`].
    pub tag: u64,
}

/// The node lock's acquire (docs/model.md §5.5, Fig. 13): take a ticket `t` and read `rel` in
/// one round trip ([`nlock_take`]); unless `rel` read `t`, `get(loc, rel); wait` until it reads
/// `t`, passing on marked tickets it finds released to ([`nlock_pass_on`]); `store(loc, t+1)`
/// (for the announcement) and `put(held, loc)` (the hold's announcement, for waiters that find
/// this node dead; not waited for). Returns `t` and the value of `rel` that let it in.
///
/// Uncontended, that is one round trip (the FAA and the first read of `rel` travel together)
/// where the paper's Fig. 13 takes two (the read waits for the FAA's result). A read of `rel`
/// that returns `t` means the lock is released to `t` whenever it was made (tickets are
/// unique), so the first read decides as the spin's reads do; posted behind the FAA on the
/// same queue pair (docs/model.md §3.3), it is made after the ticket was taken, so it finds a
/// free lock free. Under contention it costs one get more than the paper's acquire.
pub fn nlock_acquire<M: RmwMachine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
) -> Result<(M::Val, M::Val), M::Error> {
    let (t, first) = nlock_take(m, w)?;
    let help = Help {
        marks: w.ab,
        len: MARKS,
        pass_on: &mut |m: &mut M, raw| nlock_pass_on(m, w, raw),
    };
    let raw = m.get_until_from(w.loc, w.rel, NL_ACQ, t, first, Some(help))?;
    nlock_enter(m, w, t)?;
    Ok((t, raw))
}

/// Taking a node-lock ticket, with a first look at `rel`: `rfaa(tkt, 1, loc); get(scratch,
/// rel); wait; t := load(loc)`; returns `t` and what the get read (the get is a
/// [`Machine::peek`]: the explorer leaves it out).
pub fn nlock_take<M: RmwMachine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
) -> Result<(M::Val, M::Val), M::Error> {
    let one = m.constant(1);
    m.rfaa(w.tkt, one, w.loc, NL_ACQ)?;
    m.peek(w.scratch, w.rel, NL_ACQ)?;
    m.wait(NL_ACQ)?;
    let t = m.load(w.loc)?;
    let first = m.load(w.scratch)?;
    Ok((t, first))
}

/// Entering the node lock with ticket `t`: `store(loc, (t+1) | tag)` (the announcement's
/// source) and `put(held, loc)` (the hold's announcement; not waited for).
pub fn nlock_enter<M: Machine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
    t: M::Val,
) -> Result<(), M::Error> {
    let v = announced(m, t, w.tag);
    m.store(w.loc, v)?;
    m.put(w.held, w.loc, NL_REL)
}

/// A waiter found the node lock released to `raw` (ticket `r`, not its own): if `ab[r mod K]`
/// reads `r + 1` (ticket `r` was given up), pass the lock on with `rcas(rel, raw, raw + 1)`
/// (the poison bit kept). Returns the mark read. One CAS wins among the threads that try,
/// and only while `rel` still reads `raw`: the lock is released to each ticket once.
pub fn nlock_pass_on<M: RmwMachine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
    raw: M::Val,
) -> Result<M::Val, M::Error> {
    if_marked(m, w.ab, w.scratch, raw, NL_ACQ, |m| {
        nlock_pass_over(m, w, raw)
    })
}

/// `rcas(rel, raw, raw + 1); wait`: the ticket `rel` is released to (in `raw`) is passed on
/// unused, the poison bit kept.
fn nlock_pass_over<M: RmwMachine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
    raw: M::Val,
) -> Result<(), M::Error> {
    let new = m.plus(raw, 1);
    m.rcas(w.rel, raw, new, w.scratch, NL_ACQ)?;
    m.wait(NL_ACQ)
}

/// Gives node-lock ticket `u` up (the thread took it with [`nlock_take`] and will not enter):
/// `raw := rel` (a get); if the lock is released to `u`, pass it on at once
/// (`nlock_pass_over`); if it is released to an earlier ticket, mark `u` ([`mark`]), then read
/// `rel` again and pass it on if it was handed to `u` meanwhile (a waiter that saw the mark may
/// race us: one CAS wins). If `rel` is past `u`, somebody passed it on already. `owe` runs
/// when the mark cannot be written now: `u` is [`MARKS`] or more tickets ahead, or the ring
/// word changed under the CAS.
pub fn nlock_give_up<M: RmwMachine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
    u: M::Val,
    owe: impl Fn(&mut M) -> Result<(), M::Error>,
) -> Result<(), M::Error> {
    let raw = read(m, w.scratch, w.rel, NL_ACQ)?;
    let r = ticket(m, raw);
    let marked = |m: &mut M| {
        let raw = read(m, w.scratch, w.rel, NL_ACQ)?;
        let r = ticket(m, raw);
        m.branch(Cond::eq(r, u), |m| nlock_pass_over(m, w, raw), |_| Ok(()))
    };
    m.branch(
        Cond::eq(r, u),
        |m| nlock_pass_over(m, w, raw),
        |m| {
            m.branch(
                Cond::behind(r, u, 1),
                |m| {
                    m.branch(Cond::behind(r, u, MARKS), &owe, |m| {
                        mark(m, w.ab, w.scratch, u, NL_ACQ, marked, &owe)
                    })
                },
                |_| Ok(()),
            )
        },
    )
}

/// The node lock's release of ticket `t`, entered on `raw` (the value of `rel` that let it in:
/// `t`, with the poison bit if the section before did not finish): `rfence(n); rcas(rel, raw,
/// t + 1, loc)`, not waited for (the poison bit is set in the new value if `poison`).
///
/// The paper's Fig. 13 releases with `put(rel, loc)`. The CAS keeps its guarantee and more: like
/// the put, it starts only once the critical section's operations towards n have left the pipe
/// (the rfence), and it reads `rel` only once their writes have landed (rules 9-11 wait for an
/// empty `Br`, where the put's write queued behind them). It is needed on rxe, where a pass-on
/// CAS that fails writes back the value it read (docs/verbs-notes.md, pitfall 9): a put release
/// landing in between would be lost, and every later ticket stuck
/// (`tests/litmus/nlock-rxe-pass-on-race.litmus`). Remote RMWs exclude each other, so a CAS
/// release cannot be lost. While ticket `t` holds, nothing else changes `rel` (pass-on CASes
/// expect earlier tickets), so the CAS succeeds, except when a waiter skipped this thread as
/// dead (its node was declared dead): then it fails and writes nothing the lock relies on.
pub fn nlock_release<M: RmwMachine>(
    m: &mut M,
    w: &NLockWords<M::Word>,
    t: M::Val,
    raw: M::Val,
    poison: bool,
) -> Result<(), M::Error> {
    let v = next(m, t, poison);
    let n = m.node_of(w.rel);
    m.rfence(n)?;
    m.rcas(w.rel, raw, v, w.loc, NL_REL)
}
