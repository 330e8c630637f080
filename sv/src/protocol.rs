//! `bcast` and `gf` written once, over a [`Machine`]: [`SharedVar::bcast`](crate::SharedVar::bcast)
//! and [`GlobalFence::gf`](crate::GlobalFence::gf) run these functions on a thread context, the
//! litmus explorer records them (see [`loco_rdmawait::protocol`]). Callers check their input
//! (known, live nodes) first; [`gf`] still refuses a node its words do not cover.

use loco_rdmawait::protocol::Machine;
use loco_rdmawait::{NodeId, WorkId};

/// `bcast(s, N, d)` (docs/model.md §5.1): `put(s@n, s@me, d)` for each node n of `nodes` other
/// than the thread's own, in the order given. `copy(n)` is the variable's copy on node n.
pub fn bcast<M: Machine>(
    m: &mut M,
    copy: impl Fn(NodeId) -> M::Word,
    nodes: &[NodeId],
    wid: WorkId,
) -> Result<(), M::Error> {
    let me = m.node();
    let src = copy(me);
    for &n in nodes.iter().filter(|&&n| n != me) {
        m.put(copy(n), src, wid)?;
    }
    Ok(())
}

/// The words of the global fence, as seen by one thread.
#[derive(Clone, Debug)]
pub struct GfWords<W> {
    /// Per node (by index), the dummy word the fence's get reads there.
    pub dummy: Vec<W>,
    /// The thread's scratch word, where those gets land.
    pub scratch: W,
}

/// `gf(N)` (docs/model.md §5.2): for each node n of `nodes`, `rfence(n)` and a read of n's dummy
/// word tagged [`GF_WORK_ID`](crate::GF_WORK_ID) (the paper's get, or a remote CAS that cannot
/// succeed where that is cheaper: [`Machine::fence_read`]); then `wait` for them. A node the machine
/// knows to be fenced already ([`Machine::fenced`]: nothing of the thread's is on its way
/// there) is left out. If that leaves none of a non-empty set, an `mfence` stands in for the
/// wait, which would have drained the store buffer (the gets travel through it). An empty set
/// does nothing.
///
/// A node of `nodes` that `w` has no dummy word for is refused before anything is posted, with
/// the machine's [`Machine::unknown_node`] error (a context's: `UnknownNode`).
pub fn gf<M: Machine>(m: &mut M, w: &GfWords<M::Word>, nodes: &[NodeId]) -> Result<(), M::Error> {
    if let Some(&n) = nodes.iter().find(|n| n.index() >= w.dummy.len()) {
        return Err(m.unknown_node(n, w.dummy.len()));
    }
    let mut any = false;
    for &n in nodes {
        if m.fenced(n) {
            continue;
        }
        m.rfence(n)?;
        m.fence_read(w.scratch, w.dummy[n.index()], crate::GF_WORK_ID)?;
        any = true;
    }
    if any {
        m.wait(crate::GF_WORK_ID)
    } else if !nodes.is_empty() {
        m.mfence()
    } else {
        Ok(())
    }
}
