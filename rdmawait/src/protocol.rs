//! The machine the libraries' protocols are written against: one definition of each protocol,
//! run by the crates and checked by the explorer.
//!
//! Every library above rdmawait (`bcast` and `gf` in loco-sv, the three locks in loco-locks, the
//! SC operations in loco-sc) writes its protocol once, as a generic function over a
//! [`Machine`]: the sequence of CPU accesses, posts and waits of docs/model.md §5. Two machines
//! run those functions:
//! - [`Ctx`] (and the locks' own wrapper around it) **executes** them on a NIC;
//! - the litmus explorer's lowering **records** them as the instructions it explores
//!   (`loco-litmus`, `lower.rs`), so the explorer checks exactly the protocol the crates run.
//!
//! A machine has two kinds of values: [`Machine::Word`], a word of node memory (on a [`Ctx`], a
//! [`Loc`]), and [`Machine::Val`], a value the thread computed (on a [`Ctx`], a `u64`; in the
//! explorer, a register plus a constant, known only when the thread runs). Protocols compute
//! with values only through [`Machine::constant`], [`Machine::plus`], [`Machine::or`] and
//! [`Machine::and`], pick a word of an array with [`Machine::index`], and decide with
//! [`Machine::branch`], so that the explorer can follow them symbolically (it lowers a branch
//! to a forward jump: protocols have no loops of their own, only the two spins below).
//!
//! What stays outside the shared definitions is what the model has no words for: checks of
//! the caller's input, timeouts, dead nodes, and the bookkeeping of tickets whose marks are
//! owed. Giving a lock ticket up and passing an abandoned ticket on are shared (a litmus test
//! gives a ticket up with `giveup(l)`). Each crate's docs say which of its steps are shared.
//!
//! The remote atomics are added by `loco-rdmawaitrmw` (`RmwMachine`), as the layers are.

use std::time::Instant;

use crate::{Ctx, Loc, NodeId, Result, WorkId};

/// How a [`Cond`] compares its two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Test {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a` is at least `k` places before `b` in ticket order: `b - a` (wrapping) is in
    /// `k..2^62` (tickets are compared this way, so that a counter that wraps still orders).
    Behind(u64),
}

impl Test {
    /// Whether the test holds of `a` and `b`.
    pub fn holds(self, a: u64, b: u64) -> bool {
        match self {
            Test::Eq => a == b,
            Test::Ne => a != b,
            Test::Behind(k) => (k..1 << 62).contains(&b.wrapping_sub(a)),
        }
    }
}

/// A condition a protocol branches on ([`Machine::branch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cond<V> {
    /// The left value.
    pub a: V,
    /// The comparison.
    pub test: Test,
    /// The right value.
    pub b: V,
}

impl<V> Cond<V> {
    /// `a == b`.
    pub fn eq(a: V, b: V) -> Self {
        Cond {
            a,
            test: Test::Eq,
            b,
        }
    }

    /// `a != b`.
    pub fn ne(a: V, b: V) -> Self {
        Cond {
            a,
            test: Test::Ne,
            b,
        }
    }

    /// `a` is at least `k` tickets before `b` ([`Test::Behind`]).
    pub fn behind(a: V, b: V, k: u64) -> Self {
        Cond {
            a,
            test: Test::Behind(k),
            b,
        }
    }
}

/// What a lock's spin does for a ticket it finds given up: `marks` is the lock's ring of
/// abandon marks (`marks[r mod len]` reads `r + 1` once ticket `r` is given up), `pass_on` the
/// protocol's step for a released-to value `raw` whose ticket may be marked; it returns the
/// mark it read. A machine calls `pass_on` when it finds the lock released to a ticket other
/// than its own and decides to look (the crates: on their slow path; the explorer: whenever the
/// mark is set).
pub struct Help<'a, M: Machine> {
    /// The first word of the ring of abandon marks.
    pub marks: M::Word,
    /// Words in the ring (a power of two).
    pub len: u64,
    /// The step for a released-to value.
    #[allow(clippy::type_complexity)]
    pub pass_on: &'a mut dyn FnMut(&mut M, M::Val) -> std::result::Result<M::Val, M::Error>,
}

/// The operations of docs/model.md §1 and §2 that protocols are written in, plus the two spin
/// loops of the locks in their blocking form.
///
/// Names and argument order follow the paper: `put(x, y, d)` writes the remote word `x` from
/// the local word `y`; `get(y, x, d)` reads the remote `x` into the local `y`.
pub trait Machine {
    /// A word of node memory.
    type Word: Copy;
    /// A value computed by the thread.
    type Val: Copy;
    /// What an operation can fail with.
    type Error;

    /// The node of the calling thread.
    fn node(&self) -> NodeId;
    /// The node a word lives on.
    fn node_of(&self, w: Self::Word) -> NodeId;

    /// The constant `k`.
    fn constant(&mut self, k: u64) -> Self::Val;
    /// `v + k` (wrapping).
    fn plus(&mut self, v: Self::Val, k: u64) -> Self::Val;
    /// `v | bits`.
    fn or(&mut self, v: Self::Val, bits: u64) -> Self::Val;
    /// `v & mask`.
    fn and(&mut self, v: Self::Val, mask: u64) -> Self::Val;
    /// The word `base + (i mod len)` of an array of `len` words (`len` a power of two).
    fn index(
        &mut self,
        base: Self::Word,
        i: Self::Val,
        len: u64,
    ) -> Result<Self::Word, Self::Error>;
    /// `c ? then : otherwise`.
    fn select(&mut self, c: Cond<Self::Val>, then: Self::Val, otherwise: Self::Val) -> Self::Val;
    /// Runs `then` if `c` holds, `otherwise` if not.
    fn branch(
        &mut self,
        c: Cond<Self::Val>,
        then: impl FnOnce(&mut Self) -> Result<(), Self::Error>,
        otherwise: impl FnOnce(&mut Self) -> Result<(), Self::Error>,
    ) -> Result<(), Self::Error>
    where
        Self: Sized;

    /// `load(w)`: CPU load of a word of the thread's node.
    fn load(&mut self, w: Self::Word) -> Result<Self::Val, Self::Error>;
    /// `store(w, v)`: CPU store to a word of the thread's node.
    fn store(&mut self, w: Self::Word, v: Self::Val) -> Result<(), Self::Error>;
    /// `mfence`: the thread's buffered stores reach memory.
    fn mfence(&mut self) -> Result<(), Self::Error>;
    /// `put(remote, local, d)`.
    fn put(
        &mut self,
        remote: Self::Word,
        local: Self::Word,
        wid: WorkId,
    ) -> Result<(), Self::Error>;
    /// `get(local, remote, d)`.
    fn get(
        &mut self,
        local: Self::Word,
        remote: Self::Word,
        wid: WorkId,
    ) -> Result<(), Self::Error>;
    /// `get(local, remote, d)` made only to shorten a later [`Machine::get_until_from`] (the
    /// node lock's first look at `rel`, behind its FAA): the value is that spin's `first`.
    /// Contexts post the get. The explorer leaves it out and spins from a fresh read: that
    /// changes no outcome, as the read only decides when the spin ends (a read of `rel` that
    /// finds the thread's ticket means the same whenever it is made), and it orders nothing
    /// after it (docs/model.md §3.3: later writes may overtake a get's read; the wait that
    /// follows covers it).
    fn peek(
        &mut self,
        local: Self::Word,
        remote: Self::Word,
        wid: WorkId,
    ) -> Result<(), Self::Error> {
        self.get(local, remote, wid)
    }
    /// The global fence's read of `remote`, a dummy word that nothing else writes, into the
    /// scratch word `local` (docs/model.md §5.2, "The fence's read"): a get, or a remote CAS
    /// that cannot succeed, as [`FenceRead`](crate::FenceRead) says. The default is the get;
    /// contexts read as their cluster says ([`Ctx::fence_read`]), the explorer as the test says.
    fn fence_read(
        &mut self,
        local: Self::Word,
        remote: Self::Word,
        wid: WorkId,
    ) -> Result<(), Self::Error> {
        self.get(local, remote, wid)
    }
    /// Whether a global fence towards `node` would change nothing, so that `gf` may leave
    /// `node` out ([`Ctx::fenced`]: everything the thread issued towards it has completed and
    /// its remote writes have landed). The default, and the explorer, say no: the fence is
    /// then issued. That changes no outcome where a context says yes: the fence's `rfence`,
    /// get and wait would find nothing of the thread's left towards `node`, and they write only
    /// the fence's scratch word (docs/model.md §5.2).
    fn fenced(&mut self, node: NodeId) -> bool {
        let _ = node;
        false
    }
    /// `rfence(n)`.
    fn rfence(&mut self, node: NodeId) -> Result<(), Self::Error>;
    /// The error of a protocol handed per-node words (one a node, by index: loco-sv's
    /// `GfWords::dummy`) that stop short of `node`, covering `nodes` nodes only. Protocols check
    /// their words before posting anything, so that a caller's short array is this error, not
    /// a panic. A context's is [`Error::UnknownNode`](crate::Error::UnknownNode) (the words
    /// are of a cluster of `nodes` nodes). A machine whose operations cannot fail (an
    /// uninhabited `Error`, as the explorer's) has none to give: it must hand its protocols
    /// words for every node they name.
    fn unknown_node(&self, node: NodeId, nodes: usize) -> Self::Error;
    /// `wait(d)`.
    fn wait(&mut self, wid: WorkId) -> Result<(), Self::Error>;

    /// The weak lock's spin (Fig. 10): repeats CPU loads of `words` (of the thread's node) until
    /// one reads `until`; returns the value read. With `help`, a round that finds the highest
    /// value read marked may pass it on ([`Help`]; the explorer: a round fires only then, or
    /// once some word reads `until`).
    fn await_any(
        &mut self,
        words: &[Self::Word],
        until: Self::Val,
        help: Option<Help<'_, Self>>,
    ) -> Result<Self::Val, Self::Error>
    where
        Self: Sized;

    /// The node lock's spin (Fig. 13): repeats `get(local, remote, d); wait(d)` until `local`
    /// reads `until`; returns the value read. With `help`, a round that reads another value
    /// may pass it on ([`Help`]). (The explorer lets the get's remote read fire only when the
    /// remote word holds `until`, or a value whose mark is set: the same executions, without
    /// the rounds that change nothing.)
    fn get_until(
        &mut self,
        local: Self::Word,
        remote: Self::Word,
        wid: WorkId,
        until: Self::Val,
        help: Option<Help<'_, Self>>,
    ) -> Result<Self::Val, Self::Error>
    where
        Self: Sized;

    /// [`Machine::get_until`] whose first round's read was issued and waited for already (the
    /// node lock's acquire pipelines it behind its FAA): `first` is the value it read. If it
    /// reads `until` the spin ends at once, with no operation; otherwise the spin goes on as
    /// `get_until` does from that value (`help` may pass it on first).
    fn get_until_from(
        &mut self,
        local: Self::Word,
        remote: Self::Word,
        wid: WorkId,
        until: Self::Val,
        first: Self::Val,
        help: Option<Help<'_, Self>>,
    ) -> Result<Self::Val, Self::Error>
    where
        Self: Sized;
}

/// A thread context executes protocols directly; its spins give up after the cluster's timeout
/// ([`Error::Timeout`](crate::Error::Timeout)).
impl Machine for &Ctx {
    type Word = Loc;
    type Val = u64;
    type Error = crate::Error;

    fn node(&self) -> NodeId {
        Ctx::node(self)
    }

    fn node_of(&self, w: Loc) -> NodeId {
        w.node()
    }

    fn constant(&mut self, k: u64) -> u64 {
        k
    }

    fn plus(&mut self, v: u64, k: u64) -> u64 {
        v.wrapping_add(k)
    }

    fn or(&mut self, v: u64, bits: u64) -> u64 {
        v | bits
    }

    fn and(&mut self, v: u64, mask: u64) -> u64 {
        v & mask
    }

    fn index(&mut self, base: Loc, i: u64, len: u64) -> Result<Loc> {
        base.word(i % len.max(1))
    }

    fn select(&mut self, c: Cond<u64>, then: u64, otherwise: u64) -> u64 {
        if c.test.holds(c.a, c.b) {
            then
        } else {
            otherwise
        }
    }

    fn branch(
        &mut self,
        c: Cond<u64>,
        then: impl FnOnce(&mut Self) -> Result<()>,
        otherwise: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        if c.test.holds(c.a, c.b) {
            then(self)
        } else {
            otherwise(self)
        }
    }

    fn load(&mut self, w: Loc) -> Result<u64> {
        Ctx::load(self, &w)
    }

    fn store(&mut self, w: Loc, v: u64) -> Result<()> {
        Ctx::store(self, &w, v)
    }

    fn put(&mut self, remote: Loc, local: Loc, wid: WorkId) -> Result<()> {
        Ctx::put(self, &remote, &local, wid)
    }

    fn get(&mut self, local: Loc, remote: Loc, wid: WorkId) -> Result<()> {
        Ctx::get(self, &local, &remote, wid)
    }

    fn fence_read(&mut self, local: Loc, remote: Loc, wid: WorkId) -> Result<()> {
        Ctx::fence_read(self, &local, &remote, wid)
    }

    fn fenced(&mut self, node: NodeId) -> bool {
        Ctx::fenced(self, node)
    }

    fn mfence(&mut self) -> Result<()> {
        Ctx::mfence(self)
    }

    fn rfence(&mut self, node: NodeId) -> Result<()> {
        Ctx::rfence(self, node)
    }

    fn unknown_node(&self, node: NodeId, nodes: usize) -> crate::Error {
        crate::Error::UnknownNode { node, nodes }
    }

    fn wait(&mut self, wid: WorkId) -> Result<()> {
        Ctx::wait(self, wid)
    }

    fn await_any(
        &mut self,
        words: &[Loc],
        until: u64,
        mut help: Option<Help<'_, Self>>,
    ) -> Result<u64> {
        let end = Spinning::start();
        loop {
            let mut high = None;
            for w in words {
                let v = Ctx::load(self, w)?;
                if v == until {
                    return Ok(until);
                }
                if high.is_none_or(|h: u64| Test::Behind(1).holds(h, v)) {
                    high = Some(v);
                }
            }
            if let (Some(h), Some(high)) = (&mut help, high) {
                (h.pass_on)(self, high)?;
            }
            end.check(self)?;
        }
    }

    fn get_until(
        &mut self,
        local: Loc,
        remote: Loc,
        wid: WorkId,
        until: u64,
        mut help: Option<Help<'_, Self>>,
    ) -> Result<u64> {
        let end = Spinning::start();
        loop {
            Ctx::get(self, &local, &remote, wid)?;
            Ctx::wait(self, wid)?;
            let v = Ctx::load(self, &local)?;
            if v == until {
                return Ok(until);
            }
            if let Some(h) = &mut help {
                (h.pass_on)(self, v)?;
            }
            end.check(self)?;
        }
    }

    fn get_until_from(
        &mut self,
        local: Loc,
        remote: Loc,
        wid: WorkId,
        until: u64,
        first: u64,
        mut help: Option<Help<'_, Self>>,
    ) -> Result<u64> {
        if first == until {
            return Ok(until);
        }
        if let Some(h) = &mut help {
            (h.pass_on)(self, first)?;
        }
        Machine::get_until(self, local, remote, wid, until, help)
    }
}

/// A spin of a plain context: bounded by the cluster's timeout, backing off between rounds.
struct Spinning {
    start: Instant,
    backoff: crossbeam_utils::Backoff,
}

impl Spinning {
    fn start() -> Spinning {
        Spinning {
            start: crate::clock::now(),
            backoff: crossbeam_utils::Backoff::new(),
        }
    }

    fn check(&self, ctx: &Ctx) -> Result<()> {
        ctx.cluster().check_open()?;
        let after = ctx.cluster().timeout();
        if crate::clock::now().saturating_duration_since(self.start) >= after {
            return Err(crate::Error::Timeout {
                what: crate::TimeoutKind::Other("a spin loop"),
                after,
            });
        }
        if crate::clock::cooperative() {
            crate::clock::pause();
        } else {
            self.backoff.snooze();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cluster, Error, Schedule};
    use std::time::Duration;

    fn cluster() -> Cluster {
        Cluster::builder()
            .nodes(2)
            .soft(Schedule::Threaded)
            .timeout(Duration::from_millis(50))
            .build()
            .unwrap()
    }

    #[test]
    fn a_context_runs_the_spins() -> Result<()> {
        let c = cluster();
        let (a, b) = (c.alloc_word(NodeId(0))?, c.alloc_word(NodeId(0))?);
        let remote = c.alloc_word(NodeId(1))?;
        c.poke(&b, 7)?;
        c.poke(&remote, 9)?;
        let ctx = c.context(NodeId(0))?;
        let mut m = &ctx;
        assert_eq!(m.await_any(&[a, b], 7, None)?, 7);
        assert_eq!(m.get_until(a, remote, WorkId::new(1), 9, None)?, 9);
        assert_eq!(ctx.load(&a)?, 9, "the get landed in the local word");
        let v = m.constant(5);
        let v = m.plus(v, 1);
        assert_eq!(m.or(v, 1 << 63), (1 << 63) | 6);
        assert_eq!(m.and((1 << 63) | 6, !(1 << 63)), 6);
        assert_eq!(m.node_of(remote), NodeId(1));
        let ring = c.alloc_words(NodeId(1), 16)?;
        assert_eq!(m.index(ring, 17, 16)?, ring.word(1)?, "the ring wraps");
        assert!(
            m.index(a, 1, 16).is_err(),
            "a word past the array is an error"
        );
        assert_eq!(m.select(Cond::eq(1, 1), 4, 5), 4);
        assert_eq!(m.select(Cond::ne(1, 1), 4, 5), 5);
        let mut taken = Vec::new();
        m.branch(
            Cond::behind(3, 5, 2),
            |_| {
                taken.push("then");
                Ok(())
            },
            |_| Ok(()),
        )?;
        assert_eq!(taken, ["then"]);
        Ok(())
    }

    /// Ticket order wraps: `Behind(k)` holds when b is k to 2^62 places after a.
    #[test]
    fn tests_compare_tickets_in_wrapping_order() {
        assert!(Test::Behind(1).holds(u64::MAX, 0));
        assert!(!Test::Behind(1).holds(0, u64::MAX));
        assert!(!Test::Behind(1).holds(4, 4));
        assert!(Test::Behind(16).holds(0, 16));
        assert!(!Test::Behind(16).holds(0, 15));
        assert!(!Test::Behind(1).holds(0, 1 << 62));
        assert!(Test::Eq.holds(3, 3) && Test::Ne.holds(3, 4));
    }

    /// A spin with help calls it with every other value read, until the awaited one comes.
    #[test]
    fn a_spin_asks_its_helper_about_other_values() -> Result<()> {
        let c = cluster();
        let a = c.alloc_word(NodeId(0))?;
        let remote = c.alloc_word(NodeId(1))?;
        c.poke(&remote, 3)?;
        let ctx = c.context(NodeId(0))?;
        let mut m = &ctx;
        let mut seen = Vec::new();
        let mut pass_on = |_: &mut &Ctx, v: u64| -> Result<u64> {
            seen.push(v);
            c.poke(&remote, v + 1)?; // passes 3 on, then 4
            Ok(v + 1)
        };
        let help = Help {
            marks: a,
            len: 16,
            pass_on: &mut pass_on,
        };
        assert_eq!(m.get_until(a, remote, WorkId::new(1), 5, Some(help))?, 5);
        assert_eq!(seen, [3, 4]);
        Ok(())
    }

    /// A spin whose value never comes gives up after the cluster's timeout, with an error.
    #[test]
    fn a_spin_that_never_ends_times_out() -> Result<()> {
        let c = cluster();
        let a = c.alloc_word(NodeId(0))?;
        let remote = c.alloc_word(NodeId(1))?;
        let ctx = c.context(NodeId(0))?;
        let mut m = &ctx;
        assert!(matches!(
            m.await_any(&[a], 1, None),
            Err(Error::Timeout { .. })
        ));
        assert!(matches!(
            m.get_until(a, remote, WorkId::new(1), 1, None),
            Err(Error::Timeout { .. })
        ));
        Ok(())
    }
}
