//! SC locations and the four SC operations (docs/model.md §5.6, Fig. 14).

use std::fmt;
use std::sync::Arc;

use loco_locks::{LockGuard, NLock, RawNLock};
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId};

use crate::object::Object;
use crate::protocol::{self, Access, Critical};
use crate::{Error, Result};

/// The node lock of a location, as the SC protocol's critical section on a thread context.
struct Held<'a> {
    lock: &'a NLock,
    guard: Option<LockGuard<'a, RawNLock>>,
}

impl<'a> Critical<&'a Ctx> for Held<'a> {
    type Error = Error;

    fn acquire(&mut self, m: &mut &'a Ctx) -> Result<()> {
        self.guard = Some(self.lock.acquire(m)?);
        Ok(())
    }

    fn release(&mut self, _: &mut &'a Ctx) -> Result<()> {
        match self.guard.take() {
            Some(g) => Ok(LockGuard::release(g)?),
            None => Err(loco_locks::Error::NotHeld.into()),
        }
    }
}

/// An SC location: an abstract 8-byte location whose [`Sc`] operations are sequentially
/// consistent (docs/model.md §5.6, Fig. 14).
///
/// Its word and its own node lock live on one node, chosen at creation ([`ScLoc::new_on`]) or
/// round-robin over the cluster's nodes ([`ScLoc::new`]); after that the caller never names a
/// node. Cheap to clone (a handle), `Send` and `Sync`: make it once, share it with every thread.
///
/// Memory: on the location's node, the word and its node lock's words (`tkt`, `rel`, 16 words
/// per cluster node for the lock's `held`/`waiting` announcements, and 16 abandon marks: see
/// `loco-locks`' Failures; [`RawNLock::bytes`] in all); on each thread's node, per location it touches, the scratch words
/// `a` and `b` of docs/model.md §5.6 and the lock's three private words (recycled when the
/// context goes, see `loco-locks`).
#[derive(Clone)]
pub struct ScLoc {
    obj: Arc<Object>,
}

impl ScLoc {
    /// A location holding `value`, placed on the next node round-robin.
    ///
    /// The initial value is written directly to node memory: make locations before the threads
    /// that use them start. In a cluster of several processes (the verbs backend), every process
    /// makes the same locations in the same order, and a nonzero initial value can only be
    /// written by the process of the location's node (the others fail with a backend error).
    /// A nonzero value on a dead node fails with `PeerDead` naming it, after the location was
    /// allocated: allocations are never given back, and this one is kept so that the next
    /// objects get the same locations as in a process where the call succeeded.
    pub fn new(cluster: &Cluster, value: u64) -> Result<ScLoc> {
        Self::make(cluster, None, value)
    }

    /// A location holding `value`, placed on `node`.
    pub fn new_on(cluster: &Cluster, node: NodeId, value: u64) -> Result<ScLoc> {
        Self::make(cluster, Some(node), value)
    }

    fn make(cluster: &Cluster, node: Option<NodeId>, value: u64) -> Result<ScLoc> {
        let obj = Object::new(cluster, node, 1)?;
        if value != 0 {
            cluster.poke(&obj.words, value)?;
        }
        Ok(ScLoc { obj: Arc::new(obj) })
    }

    /// The node the location lives on.
    pub fn node(&self) -> NodeId {
        self.obj.node()
    }

    /// The location's word in registered memory. Accessing it other than through [`Sc`] gives
    /// none of the SC guarantees: it is here for inspection with [`Cluster::peek`].
    pub fn loc(&self) -> Loc {
        self.obj.words
    }

    /// The current value, read directly from node memory (for inspection after
    /// [`Cluster::quiesce`]; not an SC read). `PeerDead` naming the location's node once that
    /// node has died, or restarted since the location was made (its word is gone).
    pub fn peek(&self, cluster: &Cluster) -> Result<u64> {
        self.obj.check_home(cluster)?;
        Ok(cluster.peek(&self.obj.words)?)
    }

    /// `acq; get|rcas|rfaa(x → a); rel; wait; r := load(a)` ([`protocol::fetch_sc`]).
    fn fetch(&self, ctx: &Ctx, access: Access<u64>) -> Result<u64> {
        let a = self.obj.scratch(ctx, 2)?.word(0)?;
        let mut lock = self.held();
        protocol::fetch_sc(&mut &*ctx, &mut lock, self.obj.words, a, access)
    }

    fn held(&self) -> Held<'_> {
        Held {
            lock: &self.obj.lock,
            guard: None,
        }
    }
}

impl PartialEq for ScLoc {
    fn eq(&self, other: &Self) -> bool {
        self.obj.id == other.obj.id
    }
}

impl Eq for ScLoc {}

impl fmt::Debug for ScLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScLoc")
            .field("id", &self.obj.id)
            .field("word", &self.obj.words)
            .finish()
    }
}

/// The SC library's operations (docs/model.md §2: `read_sc`, `write_sc`, `cas_sc`, `faa_sc`) on a thread
/// context.
///
/// # Guarantees (docs/model.md §5.6, Fig. 14)
/// The operations of all threads on all [`ScLoc`]s are **sequentially consistent**: every
/// execution is explained by one interleaving of the threads' SC operations in program order,
/// each reading the value last written in that interleaving. They are also linearizable: each
/// takes effect inside its call, while the calling thread holds the location's node lock.
///
/// They do **not** order or complete the thread's earlier operations of other libraries: a plain
/// `put` before a `write_sc` to a location on another node may land after another thread has seen
/// the SC write (docs/model.md §5.6, "other libraries are not covered").
///
/// # Implementation
/// Exactly Fig. 14 over the node lock of the location's node (docs/model.md §5.6), as
/// [`protocol::write_sc`] and [`protocol::fetch_sc`] define it (the definitions the litmus
/// explorer checks):
/// - `write_sc(x, v)`: `acquire; store(b, v); put(x, b); release`, and no wait: the put reaches
///   the next holder through the lock's guarantee (Fig. 8f).
/// - `read_sc`/`cas_sc`/`faa_sc`: `acquire; get|rcas|rfaa(x, ret = a); release; wait`, and return
///   the fetched value.
///
/// `a` and `b` are scratch words per (thread, location), allocated on the thread's node on first
/// use. Round trips per operation, uncontended: `write_sc` 1 (the acquire's FAA, with the read
/// of the lock's `rel` posted behind it), the others 2.
///
/// # Errors
/// [`Error::ForeignLocation`] for a location of another cluster;
/// otherwise only failures of the layers below.
pub trait Sc {
    /// `read_sc(x)`: the value of `x`.
    #[doc(alias = "load")]
    fn read_sc(&self, x: &ScLoc) -> Result<u64>;

    /// `write_sc(x, v)`: sets `x` to `v`. Returns without waiting for the write to land; it is
    /// nevertheless seen by every SC operation that follows it in the SC order. If the calling
    /// thread's node dies before the write has landed, it is lost although the call returned
    /// `Ok` (see the crate's Failures): the thread's next operation on an object of `x`'s node
    /// returning, or a `gf` towards that node, says it has landed.
    #[doc(alias = "store")]
    fn write_sc(&self, x: &ScLoc, value: u64) -> Result<()>;

    /// `cas_sc(x, e, v)`: if `x` holds `expected`, sets it to `new`. Returns the old value (the
    /// swap happened iff it equals `expected`).
    fn cas_sc(&self, x: &ScLoc, expected: u64, new: u64) -> Result<u64>;

    /// `faa_sc(x, k)`: adds `add` to `x` (wrapping); returns the old value.
    fn faa_sc(&self, x: &ScLoc, add: u64) -> Result<u64>;
}

impl Sc for Ctx {
    fn read_sc(&self, x: &ScLoc) -> Result<u64> {
        let v = x.fetch(self, Access::Read)?;
        tracing::trace!(target: "loco::sc", node = %self.node(), loc = x.obj.id, v, "read_sc");
        Ok(v)
    }

    fn write_sc(&self, x: &ScLoc, value: u64) -> Result<()> {
        let b = x.obj.scratch(self, 2)?.word(1)?;
        let mut lock = x.held();
        protocol::write_sc(&mut &*self, &mut lock, x.obj.words, b, value)?;
        tracing::trace!(target: "loco::sc", node = %self.node(), loc = x.obj.id, value, "write_sc");
        Ok(())
    }

    fn cas_sc(&self, x: &ScLoc, expected: u64, new: u64) -> Result<u64> {
        let v = x.fetch(self, Access::Cas { expected, new })?;
        tracing::trace!(target: "loco::sc", node = %self.node(), loc = x.obj.id, expected, new, old = v, "cas_sc");
        Ok(v)
    }

    fn faa_sc(&self, x: &ScLoc, add: u64) -> Result<u64> {
        let v = x.fetch(self, Access::Faa { add })?;
        tracing::trace!(target: "loco::sc", node = %self.node(), loc = x.obj.id, add, old = v, "faa_sc");
        Ok(v)
    }
}
