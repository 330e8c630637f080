//! The machine the locks run their protocols on ([`crate::protocol`]): a thread context, with
//! every wait bounded by the call's deadline, the thread's bookkeeping of operations in flight,
//! and each lock's own spin (with its failure paths).

use loco_rdmawait::protocol::{Cond, Help, Machine};
use loco_rdmawait::{Ctx, Loc, NodeId, WorkId};
use loco_rdmawaitrmw::{Rmw, RmwMachine};

use crate::nlock::RawNLock;
use crate::protocol::{NL_ACQ, NL_REL, WL_ACQ, WL_REL};
use crate::thread::{Deadline, ThreadLock};
use crate::wlock::RawWLock;
use crate::{Error, Result};

/// The end of a lock's spin for ticket `t`: if it failed, the ticket is abandoned first
/// (`abandon`), unless it was skipped (passed on already) or the thread's own node is reported
/// dead (it writes nothing more; the others skip its ticket).
pub(crate) fn spun(ctx: &Ctx, r: Result<u64>, abandon: impl FnOnce()) -> Result<u64> {
    match &r {
        Err(Error::Skipped { .. }) => {}
        Err(Error::Rdma(loco_rdmawait::Error::PeerDead { node, .. })) if *node == ctx.node() => {}
        Err(_) => abandon(),
        Ok(_) => {}
    }
    r
}

/// Whose protocol the machine runs: its work ids, its home node, and its spin.
pub(crate) enum Spinner<'a> {
    /// The weak lock's `await_any`.
    W(&'a RawWLock),
    /// The node lock's `get_until`.
    N(&'a RawNLock),
}

impl Spinner<'_> {
    /// (acquire work id, release work id, home node).
    fn ids(&self) -> (WorkId, WorkId, NodeId) {
        match self {
            Spinner::W(l) => (WL_ACQ, WL_REL, l.ticket_node()),
            Spinner::N(l) => (NL_ACQ, NL_REL, l.node()),
        }
    }
}

/// A thread context running one lock call.
pub(crate) struct Run<'a> {
    pub(crate) ctx: &'a Ctx,
    pub(crate) me: &'a ThreadLock,
    pub(crate) d: &'a Deadline,
    /// The lock's acquire work id: a failed wait for it leaves operations in flight on the
    /// thread's private words.
    acq: WorkId,
    /// The lock's release work id: its operations (not waited for by the protocol) may still
    /// read the thread's private words until a wait for it succeeds.
    rel: WorkId,
    /// The node of the lock's words (the node lock's node, the weak lock's ticket node).
    home: NodeId,
    /// The ticket whose spin succeeded, if one did: the caller abandons it if a later step of
    /// the acquire fails.
    spun: Option<u64>,
    spinner: Spinner<'a>,
    /// An FAA is posted and not yet waited for: if its wait fails, the ticket it took is
    /// unknown, and the next call must read and abandon it.
    faa_out: bool,
}

impl<'a> Run<'a> {
    /// Whether `node` is neither the thread's own nor the lock's home: its death leaves the lock
    /// usable (what was sent towards it is simply gone).
    fn elsewhere(&self, node: NodeId) -> bool {
        node != self.ctx.node() && node != self.home
    }

    /// `r`, unless it failed only because a node [`elsewhere`](Self::elsewhere) is dead: an
    /// operation towards a dead node has nothing left to do (its memory is gone), so a
    /// release's broadcast or fence goes on with the live nodes.
    fn towards_live(&self, r: loco_rdmawait::Result<()>) -> Result<()> {
        match r {
            Err(loco_rdmawait::Error::PeerDead { node, .. }) if self.elsewhere(node) => Ok(()),
            r => Ok(r?),
        }
    }

    /// The acquire's operations were left in flight (a wait or a post failed): they may still
    /// write the thread's private words, and if an FAA is among them, the ticket it took is
    /// unknown: the next call reads and abandons it.
    fn left_in_flight(&self) {
        self.me.dirty.set(true);
        if self.faa_out {
            self.me.pending_faa.set(true);
        }
    }

    /// The node lock's spin (its own slow path, which passes marked tickets on with the same
    /// step as the protocol's `help`, [`crate::protocol::nlock_pass_on`], and skips dead
    /// holders too), from the pipelined `first` read if there is one; a weak lock's machine
    /// has none, and spins as a plain context.
    fn node_spin(
        &mut self,
        local: Loc,
        remote: Loc,
        wid: WorkId,
        until: u64,
        first: Option<u64>,
    ) -> Result<u64> {
        match self.spinner {
            Spinner::N(l) => {
                let raw = l.spin(self.ctx, self.me, local, remote, until, first, self.d)?;
                self.spun = Some(until);
                Ok(raw)
            }
            Spinner::W(_) => Ok(match first {
                Some(first) => {
                    Machine::get_until_from(&mut self.ctx, local, remote, wid, until, first, None)?
                }
                None => Machine::get_until(&mut self.ctx, local, remote, wid, until, None)?,
            }),
        }
    }

    /// The ticket whose spin succeeded (the lock is released to it), if one did.
    pub(crate) fn spun(&self) -> Option<u64> {
        self.spun
    }

    pub(crate) fn new(
        ctx: &'a Ctx,
        me: &'a ThreadLock,
        d: &'a Deadline,
        spinner: Spinner<'a>,
    ) -> Self {
        let (acq, rel, home) = spinner.ids();
        Run {
            ctx,
            me,
            d,
            acq,
            rel,
            home,
            spun: None,
            spinner,
            faa_out: false,
        }
    }
}

impl Machine for Run<'_> {
    type Word = Loc;
    type Val = u64;
    type Error = Error;

    fn node(&self) -> NodeId {
        self.ctx.node()
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
        Ok(base.word(i % len.max(1))?)
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
        Ok(self.ctx.load(&w)?)
    }

    fn store(&mut self, w: Loc, v: u64) -> Result<()> {
        self.ctx.store(&w, v)?;
        // A weak-lock thread's own `rel` slot (its local copy, the source of the broadcast that
        // follows): the value whose puts the slot's next owner makes sure have landed.
        if self.me.rels.get(self.me.slot) == Some(&w) {
            self.me.last_rel.set(v);
        }
        Ok(())
    }

    fn mfence(&mut self) -> Result<()> {
        Ok(self.ctx.mfence()?)
    }

    fn put(&mut self, remote: Loc, local: Loc, wid: WorkId) -> Result<()> {
        self.towards_live(self.ctx.put(&remote, &local, wid))?;
        if self.me.is_slot(&remote) {
            self.me.wrote_slot();
        }
        let private = [self.me.word, self.me.scratch, self.me.note].contains(&local);
        if wid == self.rel && private {
            self.me.unreaped.set(true);
        }
        Ok(())
    }

    fn get(&mut self, local: Loc, remote: Loc, wid: WorkId) -> Result<()> {
        let r = self.towards_live(self.ctx.get(&local, &remote, wid));
        if r.is_err() && self.faa_out {
            // Posted behind an FAA (the node lock's first look at `rel`), before its wait.
            self.left_in_flight();
        }
        r
    }

    fn fence_read(&mut self, local: Loc, remote: Loc, wid: WorkId) -> Result<()> {
        self.towards_live(self.ctx.fence_read(&local, &remote, wid))
    }

    fn fenced(&mut self, node: NodeId) -> bool {
        self.ctx.fenced(node)
    }

    fn rfence(&mut self, node: NodeId) -> Result<()> {
        self.towards_live(self.ctx.rfence(node))
    }

    fn unknown_node(&self, node: NodeId, nodes: usize) -> Error {
        Error::Rdma(loco_rdmawait::Error::UnknownNode { node, nodes })
    }

    fn wait(&mut self, wid: WorkId) -> Result<()> {
        let mut r = self.d.wait(self.ctx, wid);
        // A node other than the thread's own and the lock's home died with some of these
        // requests towards it (a release's broadcast, a fence): they are gone, and the context
        // has forgotten them; wait for the others. Bounded: each node is reported once.
        for _ in 0..self.ctx.cluster().nodes() {
            match &r {
                Err(Error::Rdma(loco_rdmawait::Error::PeerDead { node, .. }))
                    if self.elsewhere(*node) =>
                {
                    r = self.d.wait(self.ctx, wid);
                }
                _ => break,
            }
        }
        if wid == self.rel && r.is_ok() {
            self.me.unreaped.set(false);
        }
        if wid == self.acq {
            match &r {
                Ok(()) => {
                    self.me.dirty.set(false);
                    if std::mem::take(&mut self.faa_out) {
                        // The FAA completed: so did every earlier operation of the queue pair
                        // to the lock's node (completions are in order), release CASes included.
                        self.me.unreaped.set(false);
                    }
                }
                Err(_) => self.left_in_flight(),
            }
        }
        r
    }

    /// The weak lock's spin runs its own slow path, which passes marked tickets on with the
    /// same step as `help` ([`crate::protocol::wlock_pass_on`]) and skips dead holders too.
    fn await_any(
        &mut self,
        words: &[Loc],
        until: u64,
        _help: Option<Help<'_, Self>>,
    ) -> Result<u64> {
        match self.spinner {
            Spinner::W(l) => {
                let raw = l.spin(self.ctx, self.me, words, until, self.d)?;
                self.spun = Some(until);
                Ok(raw)
            }
            // No node-lock protocol spins this way: the context's plain spin.
            Spinner::N(_) => Ok(Machine::await_any(&mut self.ctx, words, until, None)?),
        }
    }

    /// The node lock's spin ([`Run::node_spin`]).
    fn get_until(
        &mut self,
        local: Loc,
        remote: Loc,
        wid: WorkId,
        until: u64,
        _help: Option<Help<'_, Self>>,
    ) -> Result<u64> {
        self.node_spin(local, remote, wid, until, None)
    }

    /// The node lock's spin from its pipelined first read ([`Run::node_spin`]).
    fn get_until_from(
        &mut self,
        local: Loc,
        remote: Loc,
        wid: WorkId,
        until: u64,
        first: u64,
        _help: Option<Help<'_, Self>>,
    ) -> Result<u64> {
        self.node_spin(local, remote, wid, until, Some(first))
    }
}

impl RmwMachine for Run<'_> {
    fn rcas(
        &mut self,
        remote: Loc,
        expected: u64,
        new: u64,
        local: Loc,
        wid: WorkId,
    ) -> Result<()> {
        Ok(self.ctx.rcas(&remote, expected, new, &local, wid)?)
    }

    fn rfaa(&mut self, remote: Loc, add: u64, local: Loc, wid: WorkId) -> Result<()> {
        self.ctx.rfaa(&remote, add, &local, wid)?;
        self.faa_out = true;
        Ok(())
    }
}
