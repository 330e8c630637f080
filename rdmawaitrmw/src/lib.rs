//! Remote compare-and-swap and fetch-and-add: the paper's **rdmawait+RMW** library (docs/model.md §2).
//!
//! [`Rmw`] adds [`rcas`](Rmw::rcas) and [`rfaa`](Rmw::rfaa) to every [`Ctx`]. Like puts and gets
//! they are tagged with a work id; the old value lands in a local word once `wait(d)` returns.
//!
//! ```
//! use loco_rdmawait::{Cluster, NodeId, WorkId};
//! use loco_rdmawaitrmw::Rmw;
//!
//! let cluster = Cluster::builder().nodes(2).build()?;
//! let counter = cluster.alloc_word(NodeId(1))?;
//! let old = cluster.alloc_word(NodeId(0))?;
//! let ctx = cluster.context(NodeId(0))?;
//! let d = WorkId::new(1);
//! ctx.rfaa(&counter, 5, &old, d)?;
//! ctx.rcas(&counter, 5, 9, &old, d)?;
//! ctx.wait(d)?;
//! assert_eq!(ctx.load(&old)?, 5);       // the CAS saw 5 ...
//! cluster.quiesce()?;
//! assert_eq!(cluster.peek(&counter)?, 9); // ... and swapped in 9
//! # Ok::<(), loco_rdmawait::Error>(())
//! ```
//!
//! Section and rule numbers cited here (`docs/model.md §5.2`, `rule 6`) are those of the
//! project's [model page][loco-model]; the [docs index][loco-docs] lists the other reference
//! pages.
//!
//! [loco-model]: https://github.com/loco-rs/loco-rs/blob/main/docs/model.md
//! [loco-docs]: https://github.com/loco-rs/loco-rs/blob/main/docs/README.md
//!
//! # Guarantees (docs/model.md §3.4, Figs. 6 and 7b)
//! - A remote RMW is atomic **only against other remote RMWs** towards the same node: the NIC of
//!   the target node holds a remote-atomic lock from the RMW's read to its write (Fig. 6c).
//! - It is **not** atomic against CPU stores or puts: one that lands between the read and the
//!   write is lost (Figs. 6a, 6b). Do not mix CPU stores or puts with RMWs on a word unless that
//!   loss is acceptable.
//! - The RMW's read cannot be overtaken by a later remote write on the same queue pair (Fig. 7b),
//!   unlike a get's (Fig. 7a).
//! - **On Soft-RoCE a failed CAS writes too**: rxe writes the value it read back, under the same
//!   lock, so a put or store landing inside a *failing* CAS is lost as well (docs/verbs-notes.md,
//!   pitfall 9; outside the model's rule 9). Code meant for rxe should write a word that CASes
//!   contend on only with RMWs (release a CAS spinlock with a CAS, not a put), and can be checked
//!   that way: `atomics rxe` in a litmus test, `FailedCas::WritesBack` on the soft NIC and in the
//!   simulator.
//!
//! # Errors
//! The target and the return word must each be exactly one 8-byte aligned word
//! ([`Error::NotAWord`], [`Error::Misaligned`]) of this cluster ([`Error::ForeignLocation`]);
//! the return word must be on the calling thread's node ([`Error::NotLocal`]). These are checked
//! before anything is posted. So is the target's node: one known dead fails the post at once
//! with [`Error::PeerDead`] naming it, as does every RMW of a context whose own node died
//! (naming that node) or whose target restarted since the context was opened; after
//! [`Cluster::shutdown`](loco_rdmawait::Cluster::shutdown) posts fail with [`Error::Shutdown`].
//! Any operand values are fine: `rfaa` wraps, and `rcas` compares and swaps all 64 bits.
//!
//! The return word may be the target itself (a loop-back RMW on the thread's own node), but
//! the word then ends up holding either the old value or the RMW's result, which one is not
//! specified: the write of the old value into the return word is a local write like a get's,
//! and the RMW is not atomic against it (see the Guarantees above). Use another word.
//!
//! # Failures
//! An RMW is a request like a put or a get, and fails the same ways (see `loco-rdmawait`'s
//! Failures): towards a node that died, its `wait` returns [`Error::PeerDead`] naming it, and
//! whether the RMW took effect there is unknown (a dead node's memory is gone with it anyway);
//! a `wait` that times out ([`Error::Timeout`]) can be repeated, and the old value lands in the
//! return word whenever the RMW completes, so that word must not be reused until it has; a queue
//! pair in error fails it with [`Error::QpInError`]. Nothing is retried behind the caller's
//! back: an RMW is never applied twice.

#![forbid(unsafe_code)]

use loco_rdmawait::{Ctx, Loc, WorkId, WorkRequest};
pub use loco_rdmawait::{Error, Result};

/// Remote RMWs on a thread context.
pub trait Rmw {
    /// `rcas(y, e, v, ret=x, d)`: if the remote word `target` equals `expected`, replace it with
    /// `new`; the old value is written to the local word `ret`. A failed CAS writes nothing
    /// remotely in the model; on Soft-RoCE it writes the old value back (see the crate docs).
    #[doc(alias = "ATOMIC_CMP_AND_SWP")]
    fn rcas(&self, target: &Loc, expected: u64, new: u64, ret: &Loc, wid: WorkId) -> Result<()>;

    /// `rfaa(y, k, ret=x, d)`: add `add` (wrapping) to the remote word `target`; the old value is
    /// written to the local word `ret`.
    #[doc(alias = "ATOMIC_FETCH_AND_ADD")]
    fn rfaa(&self, target: &Loc, add: u64, ret: &Loc, wid: WorkId) -> Result<()>;
}

/// Checks the operands of an RMW; returns (remote word, local word).
fn operands(ctx: &Ctx, target: &Loc, ret: &Loc) -> Result<(usize, usize)> {
    let remote = ctx.cluster().check_word(target)?;
    ctx.check_local(ret)?;
    let local = ctx.cluster().check_word(ret)?;
    Ok((remote, local))
}

impl Rmw for Ctx {
    fn rcas(&self, target: &Loc, expected: u64, new: u64, ret: &Loc, wid: WorkId) -> Result<()> {
        let (remote, local) = operands(self, target, ret)?;
        // Both words were just checked against their nodes' memory.
        self.post_checked(
            target.node(),
            WorkRequest::CompareSwap {
                remote,
                expected,
                new,
                local,
            },
            wid,
        )
    }

    fn rfaa(&self, target: &Loc, add: u64, ret: &Loc, wid: WorkId) -> Result<()> {
        let (remote, local) = operands(self, target, ret)?;
        // Both words were just checked against their nodes' memory.
        self.post_checked(
            target.node(),
            WorkRequest::FetchAdd { remote, add, local },
            wid,
        )
    }
}

/// The [`Machine`](loco_rdmawait::protocol::Machine) of rdmawait, with the remote RMWs: what the
/// protocols of the locks and of the SC library are written against (see
/// [`loco_rdmawait::protocol`]).
pub trait RmwMachine: loco_rdmawait::protocol::Machine {
    /// `rcas(remote, expected, new, ret=local, d)`.
    fn rcas(
        &mut self,
        remote: Self::Word,
        expected: Self::Val,
        new: Self::Val,
        local: Self::Word,
        wid: WorkId,
    ) -> std::result::Result<(), Self::Error>;

    /// `rfaa(remote, add, ret=local, d)`.
    fn rfaa(
        &mut self,
        remote: Self::Word,
        add: Self::Val,
        local: Self::Word,
        wid: WorkId,
    ) -> std::result::Result<(), Self::Error>;
}

impl RmwMachine for &Ctx {
    fn rcas(
        &mut self,
        remote: Loc,
        expected: u64,
        new: u64,
        local: Loc,
        wid: WorkId,
    ) -> Result<()> {
        Rmw::rcas(*self, &remote, expected, new, &local, wid)
    }

    fn rfaa(&mut self, remote: Loc, add: u64, local: Loc, wid: WorkId) -> Result<()> {
        Rmw::rfaa(*self, &remote, add, &local, wid)
    }
}
