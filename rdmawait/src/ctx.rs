//! Thread contexts: the rdmawait operations (docs/model.md §2) and the CPU's access to local words.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use crate::backend::{ThreadNic, WorkRequest};
use crate::error::TimeoutKind;
use crate::{Cluster, Error, Loc, NodeId, Result, WorkId};

/// A thread's binding to one node: its queue pairs (one towards every node, loop-back included),
/// its completion queue, and the work-id bookkeeping of `wait`.
///
/// Made by [`Cluster::context`] on the thread that uses it (a context is neither `Send` nor
/// `Sync`: its queue pairs and completion queue are the thread's own). Its methods take `&self`
/// so that guards of the layers above can hold it.
///
/// # Guarantees (docs/model.md §3)
/// - Operations towards one node are issued in program order, after every earlier CPU store of
///   the thread is visible; a put reads its source when the NIC gets to it ([`Ctx::put`]).
/// - `wait(d)` returns once the thread's earlier gets and RMWs tagged `d` have written their
///   results locally and its earlier puts tagged `d` have read their source. It does **not**
///   guarantee that a put's remote write has landed (Fig. 5); a global fence (`loco-sv`'s `gf`)
///   does.
/// - Operations towards different nodes are unordered; `rfence(n)` orders those towards `n`.
#[derive(Debug)]
pub struct Ctx {
    cluster: Cluster,
    node: NodeId,
    inner: RefCell<Inner>,
    /// Set when the context is dropped with nothing left in flight (see [`Ctx::settled`]).
    settled: Settled,
    extensions: RefCell<HashMap<TypeId, Rc<dyn Any>>>,
    /// What the layers above run when the context is dropped ([`Ctx::on_drop`]).
    drop_hooks: DropHooks,
}

/// A hook of [`Ctx::on_drop`].
type DropHook = Box<dyn FnOnce(&Ctx)>;

#[derive(Default)]
struct DropHooks(RefCell<Vec<DropHook>>);

impl std::fmt::Debug for DropHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DropHooks({})", self.0.borrow().len())
    }
}

/// Whether a context was dropped with every operation it posted complete, so that nothing can
/// still write its local words: what an extension that recycles words checks in its own `Drop`
/// (extensions are dropped after the context's queue pairs settle). Got from
/// [`Ctx::settled`]; false until the context is dropped.
#[derive(Clone, Debug, Default)]
pub struct Settled(Rc<Cell<bool>>);

impl Settled {
    /// True once the context was dropped with no operation left in flight.
    pub fn get(&self) -> bool {
        self.0.get()
    }
}

/// How long dropping a context may spend reaping its unpolled operations (also bounded by the
/// cluster's timeout). Unreaped ones keep [`Settled`] false: their words are leaked, never reused
/// under a late write.
pub const DROP_SETTLE: Duration = Duration::from_secs(1);

impl Drop for Ctx {
    fn drop(&mut self) {
        // The layers' own last work first, while the queue pairs still serve them.
        let hooks = std::mem::take(&mut *self.drop_hooks.0.borrow_mut());
        for hook in hooks {
            hook(self);
        }
        let budget = DROP_SETTLE.min(self.cluster.timeout());
        let settled = self.settle(budget);
        if !settled {
            tracing::debug!(target: "loco::rdmawait", node = %self.node,
                "context dropped with operations in flight: their words are not recycled");
        }
        self.settled.0.set(settled);
    }
}

#[derive(Debug)]
struct Inner {
    nic: Box<dyn ThreadNic>,
    /// Per target node: the work ids of the unpolled operations, in post order (Fig. 16).
    track: Vec<Track>,
    /// Network operations posted (puts, gets, RMWs; fences apart), for [`Ctx::posted`].
    posted: u64,
    /// Per node, its incarnation when the context was made: a node restarted since is never
    /// [`Ctx::fenced`] (the context's operations towards it fail, and a fence must say so).
    incarnations: Vec<u64>,
    /// Work ids whose pending operations a wait for another id forgot when their node was
    /// found dead, with that node and the reason: the next wait for one of them fails with
    /// `PeerDead` (once) instead of finding nothing pending. Kept for async operations
    /// (`aio`'s own work ids) and, on a context shared by async tasks ([`Inner::tasks`]), for
    /// every id: there the wait that met the failure may be another task's.
    lost: Vec<(WorkId, NodeId, String)>,
    /// The context is shared by the tasks of an `aio::AsyncCtx`.
    tasks: bool,
}

#[derive(Debug, Default)]
struct Track {
    /// Operations posted on this queue pair that complete (fences apart), and those polled:
    /// the unpolled ones are numbers `polled + 1 ..= posted`, polled in that order (the FIFO
    /// of Fig. 16, kept as two counters).
    posted: u64,
    polled: u64,
    /// Per work id, the number of its latest posted operation: `wait(d)` polls until `polled`
    /// reaches it (the earlier operations tagged `d` are polled on the way, in FIFO order). An
    /// entry at or below `polled` is spent; entries go when the queue pair has nothing
    /// unpolled, or when many ids are live ([`Track::PRUNE_AT`]).
    last: Vec<(WorkId, u64)>,
    /// A remote write of this queue pair may not have landed yet: set by a put or remote RMW,
    /// cleared by a later get of at least one word or a fence read (whose remote step waits for
    /// every earlier write on the queue pair to land, docs/model.md §5.2). See [`Ctx::fenced`].
    dirty: bool,
    /// A poll towards the node failed: from then on nothing is known of the queue pair (a get
    /// may not have read, a failure may not have consumed what it was counted against), for
    /// good.
    unknown: bool,
}

impl Track {
    /// How many work ids `last` holds before a new one makes it drop the spent entries.
    const PRUNE_AT: usize = 16;

    /// What a post of `wr` tells about the queue pair's remote writes.
    #[inline]
    fn posted(&mut self, wr: &WorkRequest) {
        match *wr {
            // A read of no words need not touch memory, so it need not flush writes.
            WorkRequest::Read { words, .. } => self.dirty &= words == 0,
            WorkRequest::Write { .. }
            | WorkRequest::CompareSwap { .. }
            | WorkRequest::FetchAdd { .. } => self.dirty = true,
            WorkRequest::Fence => {}
        }
    }

    /// A poll failed (the request consumed, per [`ThreadNic::poll`]): nothing is known of the
    /// queue pair any more.
    fn failed(&mut self) {
        self.pop();
        self.unknown = true;
    }

    /// Nothing of the thread's can still be on its way on this queue pair.
    fn fenced(&self) -> bool {
        self.is_empty() && !self.dirty && !self.unknown
    }

    /// No operation is unpolled.
    #[inline]
    fn is_empty(&self) -> bool {
        self.polled == self.posted
    }

    /// The number of unpolled operations.
    fn unpolled(&self) -> usize {
        usize::try_from(self.posted - self.polled).unwrap_or(usize::MAX)
    }

    /// A completing operation tagged `wid` was posted.
    #[inline]
    fn push(&mut self, wid: WorkId) {
        self.posted += 1;
        let n = self.posted;
        match self.last.iter_mut().find(|(w, _)| *w == wid) {
            Some(e) => e.1 = n,
            None => {
                if self.last.len() >= Self::PRUNE_AT {
                    let polled = self.polled;
                    self.last.retain(|&(_, s)| s > polled);
                }
                self.last.push((wid, n));
            }
        }
    }

    /// The number `polled` must reach for no operation tagged `wid` to be unpolled, if one is.
    #[inline]
    fn until(&self, wid: WorkId) -> Option<u64> {
        self.last
            .iter()
            .find(|(w, _)| *w == wid)
            .map(|&(_, n)| n)
            .filter(|&n| n > self.polled)
    }

    /// Whether an operation tagged `wid` is unpolled.
    #[cfg(test)]
    fn count_any(&self, wid: WorkId) -> bool {
        self.until(wid).is_some()
    }

    /// Removes the earliest operation: a poll completed it.
    #[inline]
    fn pop(&mut self) {
        if self.polled < self.posted {
            self.polled += 1;
            if self.polled == self.posted {
                self.last.clear();
            }
        }
    }
}

/// Takes the failure kept for `wid` out of `lost`, if there is one.
fn take_lost(lost: &mut Vec<(WorkId, NodeId, String)>, wid: WorkId) -> Option<Error> {
    let i = lost.iter().position(|&(w, _, _)| w == wid)?;
    let (_, node, reason) = lost.swap_remove(i);
    Some(Error::PeerDead { node, reason })
}

impl Ctx {
    pub(crate) fn new(
        cluster: Cluster,
        node: NodeId,
        nic: Box<dyn ThreadNic>,
        incarnations: Vec<u64>,
    ) -> Ctx {
        let track = (0..cluster.nodes()).map(|_| Track::default()).collect();
        Ctx {
            cluster,
            node,
            inner: RefCell::new(Inner {
                nic,
                track,
                posted: 0,
                incarnations,
                lost: Vec::new(),
                tasks: false,
            }),
            settled: Settled::default(),
            extensions: RefCell::new(HashMap::new()),
            drop_hooks: DropHooks::default(),
        }
    }

    /// The node this thread runs on.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// `node`'s incarnation ([`Cluster::incarnation`]) when the context was made, `None` for an
    /// unknown node: the context belongs to its own node's, and what it posts towards `node`
    /// reaches no other (see [`Cluster::restart`]).
    pub fn incarnation(&self, node: NodeId) -> Option<u64> {
        self.inner.borrow().incarnations.get(node.index()).copied()
    }

    fn local_word(&self, x: &Loc) -> Result<usize> {
        self.check_local(x)?;
        self.cluster.check_word(x)
    }

    /// Checks that `x` is on this thread's node.
    #[inline]
    pub fn check_local(&self, x: &Loc) -> Result<()> {
        if x.node() != self.node {
            return Err(Error::NotLocal {
                loc: x.node(),
                thread: self.node,
            });
        }
        Ok(())
    }

    // ----- CPU (x86-TSO) on local words -----

    /// CPU load of a local word.
    pub fn load(&self, x: &Loc) -> Result<u64> {
        let w = self.local_word(x)?;
        self.inner.borrow_mut().nic.load(w)
    }

    /// CPU store to a local word. Under TSO it may sit in the store buffer for a while: a later
    /// load of another location may be served first.
    pub fn store(&self, x: &Loc, value: u64) -> Result<()> {
        let w = self.local_word(x)?;
        self.inner.borrow_mut().nic.store(w, value)
    }

    /// CPU compare-and-swap on a local word; returns the old value. Atomic against CPU accesses,
    /// but not against remote RMWs, which do not take part in it (docs/model.md §4).
    pub fn cas(&self, x: &Loc, expected: u64, new: u64) -> Result<u64> {
        let w = self.local_word(x)?;
        self.inner.borrow_mut().nic.cas(w, expected, new)
    }

    /// CPU memory fence: every earlier store is visible before any later access.
    pub fn mfence(&self) -> Result<()> {
        self.inner.borrow_mut().nic.mfence()
    }

    // ----- rdmawait -----

    /// `put(dst, src, d)`: copies local `src` to `dst` (on any node) by RDMA WRITE.
    ///
    /// The NIC reads `src` when it gets to the request, so a later CPU store to `src` may be what
    /// is sent, unless the thread waits for `d` first (Fig. 2).
    #[doc(alias = "RDMA_WRITE")]
    pub fn put(&self, dst: &Loc, src: &Loc, wid: WorkId) -> Result<()> {
        let (local, remote, words) = self.transfer(src, dst, dst, src)?;
        self.post_checked(
            dst.node(),
            WorkRequest::Write {
                local,
                remote,
                words,
            },
            wid,
        )
    }

    /// The read a global fence makes of `dummy`, a word on the fenced node, into the local word
    /// `scratch`, tagged `wid`, as the cluster's [`FenceRead`](crate::FenceRead) says: a get, or
    /// a remote CAS that expects [`FENCE_CAS_EXPECTED`](crate::FENCE_CAS_EXPECTED) (docs/model.md
    /// §5.2, "The fence's read"). Either reads `dummy` on the NIC only once every earlier write
    /// of this queue pair has landed, and counts as such a read for [`Ctx::fenced`] once polled.
    ///
    /// `dummy` must be a word that nothing but fence reads ever writes and that never holds
    /// `FENCE_CAS_EXPECTED`, as [`Cluster::fence_word`](crate::Cluster::fence_word) is: then the
    /// CAS never succeeds, and where a device writes a failed CAS's value back (Soft-RoCE) it
    /// writes the value the word already had. `scratch` receives the word's value (ignore it). Both must be single
    /// 8-byte-aligned words (`Misaligned`, `NotAWord`, `OutOfRange`, `NotLocal` otherwise).
    pub fn fence_read(&self, scratch: &Loc, dummy: &Loc, wid: WorkId) -> Result<()> {
        self.check_local(scratch)?;
        let local = self.cluster.check_word(scratch)?;
        let remote = self.cluster.check_word(dummy)?;
        let wr = match self.cluster.fence_read() {
            crate::FenceRead::Get => WorkRequest::Read {
                local,
                remote,
                words: 1,
            },
            crate::FenceRead::Cas => WorkRequest::CompareSwap {
                remote,
                expected: crate::FENCE_CAS_EXPECTED,
                new: crate::FENCE_CAS_EXPECTED,
                local,
            },
        };
        self.post_checked(dummy.node(), wr, wid)?;
        // The CAS, like the get, read only once the queue pair's earlier writes had landed, and
        // it writes nothing that changes memory.
        self.inner.borrow_mut().track[dummy.node().index()].dirty = false;
        Ok(())
    }

    /// `get(dst, src, d)`: copies `src` (on any node) to local `dst` by RDMA READ. The value is in
    /// `dst` once `wait(d)` returns.
    #[doc(alias = "RDMA_READ")]
    pub fn get(&self, dst: &Loc, src: &Loc, wid: WorkId) -> Result<()> {
        let (local, remote, words) = self.transfer(dst, src, dst, src)?;
        self.post_checked(
            src.node(),
            WorkRequest::Read {
                local,
                remote,
                words,
            },
            wid,
        )
    }

    /// Runs `f`, holding back the doorbells of the requests it posts: on the verbs backend a
    /// batch's requests towards one node go to the device together, in one `ibv_post_send`
    /// (one doorbell), and only the last of them asks for a completion (RC completes a queue
    /// pair's requests in order, so its completion stands for the others'). On the soft NIC
    /// and the simulator it changes nothing.
    ///
    /// Nothing changes in what the operations do: no NIC rule of the model has to fire by any
    /// time, so a posted request may wait in its pipe as long as it likes before the NIC takes
    /// it (docs/model.md §4.4); work ids,
    /// `wait`, errors and post order per queue pair are as without a batch. What changes is
    /// when the requests leave: at the end of the batch (also on a panic or an error in `f`),
    /// or before any other operation of this context inside it that goes to the NIC (a `wait`
    /// or poll with something to wait for, a CPU load, store, CAS or fence sends what is held
    /// first, so a batch never waits for itself; a `wait` on a work id with nothing pending
    /// returns at once and sends nothing). So do not block inside a batch on anything but this
    /// context: a request another thread waits for would not have left yet. The same goes for
    /// async tasks sharing a context (module `aio`, feature `tokio`): a task that suspends inside a batch
    /// holds back the other tasks' posts until it resumes and ends it ([`Cluster::quiesce`] does not see requests a batch still
    /// holds either). Batches nest; the outermost one sends. A request the
    /// device refuses at the end of a batch fails when it is waited for, with
    /// [`Error::Backend`] (or [`Error::QpInError`]), and its queue pair fails from then on.
    ///
    /// ```
    /// # use loco_rdmawait::{Cluster, NodeId, WorkId};
    /// let cluster = Cluster::builder().nodes(2).memory_per_node(4096).build()?;
    /// let ctx = cluster.context(NodeId(0))?;
    /// let (dst, src) = (cluster.alloc_words(NodeId(1), 16)?, cluster.alloc_words(NodeId(0), 16)?);
    /// let d = WorkId::new(1);
    /// ctx.batch(|| {
    ///     for i in 0..16 {
    ///         ctx.put(&dst.slice(i * 8, 8)?, &src.slice(i * 8, 8)?, d)?;
    ///     }
    ///     Ok::<_, loco_rdmawait::Error>(())
    /// })?;
    /// ctx.wait(d)?; // all 16 have landed
    /// # Ok::<(), loco_rdmawait::Error>(())
    /// ```
    pub fn batch<R, E>(
        &self,
        f: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        /// Closes the batch when `f` returns or unwinds.
        struct End<'a>(&'a Ctx);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                if let Ok(mut inner) = self.0.inner.try_borrow_mut() {
                    inner.nic.batch_end();
                }
            }
        }
        self.inner.borrow_mut().nic.batch_begin();
        let _end = End(self);
        f()
    }

    /// Checks the two sides of a transfer (`local` must be on this node); returns the first local
    /// word, the first remote word and the word count.
    fn transfer(
        &self,
        local: &Loc,
        remote: &Loc,
        dst: &Loc,
        src: &Loc,
    ) -> Result<(usize, usize, usize)> {
        self.check_local(local)?;
        let (l, words) = self.cluster.check(local)?;
        let (r, _) = self.cluster.check(remote)?;
        if dst.len() != src.len() {
            return Err(Error::LengthMismatch {
                dst: dst.len(),
                src: src.len(),
            });
        }
        if words == 0 {
            return Err(Error::Empty);
        }
        Ok((l, r, words))
    }

    /// `rfence(n)`: every earlier operation of this thread towards `n` is ordered before every
    /// later one towards `n`. Does not block the CPU.
    pub fn rfence(&self, node: NodeId) -> Result<()> {
        self.cluster.check_node(node)?;
        let mut inner = self.inner.borrow_mut();
        tracing::trace!(target: "loco::rdmawait", from = %self.node, to = %node, "rfence");
        inner.nic.post(node, WorkRequest::Fence)
    }

    /// `wait(d)` with the cluster's default timeout: blocks until every earlier operation of this
    /// thread tagged `d` has completed (see the type's guarantees).
    pub fn wait(&self, wid: WorkId) -> Result<()> {
        self.wait_timeout(wid, self.cluster.timeout())
    }

    /// `wait(d)`, giving up with [`Error::Timeout`] after `timeout` (nothing is lost: a timed-out
    /// wait can be repeated). [`Duration::MAX`] waits as long as needed; [`Duration::ZERO`]
    /// returns at once, with `Timeout` if the operations are not complete yet.
    ///
    /// Fails with [`Error::PeerDead`] if one of the operations goes towards a node that died
    /// before it got there (see [`Cluster::kill`]): the operations pending towards that node are
    /// then all forgotten (they failed). Operations towards live nodes are not affected. On a
    /// context shared by async tasks (module `aio`), the next wait for the work id of a
    /// forgotten operation fails with `PeerDead` too, once (the wait that met the failure may
    /// have been another task's).
    ///
    /// Implemented over polls (docs/model.md §5.7, Fig. 16): it polls the queue pairs towards every node
    /// with unpolled operations tagged `d`, and every polled operation leaves the bookkeeping of
    /// its own work id, so a later wait on another id never waits for it again.
    pub fn wait_timeout(&self, wid: WorkId, timeout: Duration) -> Result<()> {
        #[cfg(feature = "tokio")]
        if crate::aio::in_task() && !timeout.is_zero() {
            return self.look_in_task(timeout, || self.wait_now(wid, Duration::ZERO));
        }
        self.wait_now(wid, timeout)
    }

    /// The context is shared by the tasks of an async context (`aio`): a wait that forgets
    /// operations of another id towards a dead node keeps their failure for that id's wait.
    #[cfg(feature = "tokio")]
    pub(crate) fn shared_by_tasks(&self) {
        self.inner.borrow_mut().tasks = true;
    }

    /// Forgets the failure kept for `wid` (an async operation nobody awaits any more).
    #[cfg(feature = "tokio")]
    pub(crate) fn forget_lost(&self, wid: WorkId) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            let _ = take_lost(&mut inner.lost, wid);
        }
    }

    /// A blocking `wait` or `poll` inside an async task's coroutine ([`crate::aio`]): `look` (the
    /// call with a zero timeout) is repeated, the task suspended between looks (the context is
    /// not borrowed while it is suspended, so the thread's other tasks can use it), until it
    /// does not time out; after `timeout`, its timeout error is returned with `timeout` in it.
    #[cfg(feature = "tokio")]
    fn look_in_task(&self, timeout: Duration, mut look: impl FnMut() -> Result<()>) -> Result<()> {
        let start = crate::clock::now();
        let deadline = start.checked_add(timeout);
        loop {
            match look() {
                Err(Error::Timeout { what, .. }) => {
                    if crate::clock::now().saturating_duration_since(start) >= timeout {
                        return Err(Error::Timeout {
                            what,
                            after: timeout,
                        });
                    }
                    crate::aio::suspend(crate::aio::Park::Completion(deadline), Some(self));
                }
                r => return r,
            }
        }
    }

    /// Blocks until every operation this thread has posted before the call, whatever its work
    /// id, has completed (in an async task, not those the context's other tasks post while it
    /// waits): `wait(d)` for every `d` at once (docs/model.md §5.7), within the cluster's
    /// timeout. For code that runs operations it did not tag itself, such as a lock's combiner
    /// (`loco-locks`' `Lock::combine`), which must know that the critical sections it ran
    /// for other threads are done (their puts have read their sources, their gets written their
    /// destinations) before it tells those threads.
    pub fn wait_all(&self) -> Result<()> {
        self.wait_all_timeout(self.cluster.timeout())
    }

    /// [`Ctx::wait_all`], giving up with [`Error::Timeout`] after `timeout` (as
    /// [`Ctx::wait_timeout`] does: nothing is lost, it can be repeated).
    pub fn wait_all_timeout(&self, timeout: Duration) -> Result<()> {
        #[cfg(feature = "tokio")]
        if crate::aio::in_task() && !timeout.is_zero() {
            // What is posted now, per node: the wait looks again after each suspension, and
            // what the context's other tasks post meanwhile comes later in the thread's
            // program (waiting for it too could last as long as they keep posting, or fail on
            // a request towards a node this thread's earlier ones never touched). Without
            // suspensions nothing else posts while the wait runs.
            let posted: Vec<u64> = self.inner.borrow().track.iter().map(|t| t.posted).collect();
            let until = |n: usize, t: &Track| {
                Some(posted.get(n).map_or(t.posted, |&p| p.min(t.posted))).filter(|&p| p > t.polled)
            };
            return self.look_in_task(timeout, || {
                self.wait_until(TimeoutKind::Other("wait_all"), Duration::ZERO, None, until)
            });
        }
        self.wait_until(TimeoutKind::Other("wait_all"), timeout, None, |_, t| {
            Some(t.posted).filter(|&p| p > t.polled)
        })
    }

    fn wait_now(&self, wid: WorkId, timeout: Duration) -> Result<()> {
        self.wait_until(TimeoutKind::Wait(wid), timeout, Some(wid), |_, t| {
            t.until(wid)
        })
    }

    /// Polls, per node, until the polled count reaches `until` of the node's track (nothing to
    /// do where it gives `None`); `what` names the wait in its timeout. `wid` is the work id
    /// waited for, if one is (`wait_all` has none: the failures kept for forgotten operations
    /// stay for their own ids' waits).
    fn wait_until(
        &self,
        what: TimeoutKind,
        timeout: Duration,
        wid: Option<WorkId>,
        until: impl Fn(usize, &Track) -> Option<u64>,
    ) -> Result<()> {
        // The clock is read only once a request has not completed by the time the wait looks
        // (`ThreadNic::try_poll`; on Soft-RoCE an atomic's completion is there as soon as its
        // post returns), then for every later poll to compute the time left.
        let mut start = None;
        let mut inner = self.inner.borrow_mut();
        let Inner {
            nic,
            track,
            lost,
            tasks,
            ..
        } = &mut *inner;
        if let Some(e) = wid.and_then(|wid| take_lost(lost, wid)) {
            return Err(e);
        }
        for (n, t) in track.iter_mut().enumerate() {
            let Some(until) = until(n, t) else {
                continue;
            };
            while t.polled < until {
                let node = NodeId(n as u16);
                let polled = match nic.try_poll(node) {
                    Some(r) => r,
                    None => {
                        let left = match start {
                            None => {
                                start = Some(crate::clock::now());
                                timeout
                            }
                            Some(s) => timeout
                                .saturating_sub(crate::clock::now().saturating_duration_since(s)),
                        };
                        nic.poll(node, left)
                    }
                };
                match polled {
                    Ok(()) => t.pop(),
                    Err(Error::Timeout { .. }) => {
                        tracing::debug!(target: "loco::rdmawait", node = %self.node, %what, ?timeout, "wait timed out");
                        return Err(Error::Timeout {
                            what,
                            after: timeout,
                        });
                    }
                    Err(e) => {
                        match &e {
                            // The node is gone for good: every request still pending towards
                            // it failed (later posts towards it fail at once).
                            Error::PeerDead { node, reason } if node.index() == n => {
                                // Other tasks' operations among them fail too: their tasks
                                // must hear it, not find them gone.
                                for &(w, s) in &t.last {
                                    if s > t.polled
                                        && Some(w) != wid
                                        && (w.is_task() || *tasks)
                                        && !lost.iter().any(|&(l, _, _)| l == w)
                                    {
                                        lost.push((w, *node, reason.clone()));
                                    }
                                }
                                *t = Track {
                                    unknown: true,
                                    ..Track::default()
                                };
                            }
                            _ => t.failed(),
                        }
                        tracing::debug!(target: "loco::rdmawait", node = %self.node, %what, error = %e, "wait failed");
                        return Err(e);
                    }
                }
            }
        }
        tracing::trace!(target: "loco::rdmawait", node = %self.node, %what, elapsed = ?start.map(|s| crate::clock::now().saturating_duration_since(s)), "wait done");
        Ok(())
    }

    /// Drains the store buffer (an mfence: the thread's last stores reach memory, its posts
    /// the NIC), then polls every unpolled operation, oldest first per node, within `budget`;
    /// true if none is left (each either completed or failed: either way the NIC is done with
    /// it) and no store of the thread can land later.
    fn settle(&self, budget: Duration) -> bool {
        let start = crate::clock::now();
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return false;
        };
        let Inner { nic, track, .. } = &mut *inner;
        if nic.mfence().is_err() {
            return false;
        }
        for (n, t) in track.iter_mut().enumerate() {
            while !t.is_empty() {
                let left =
                    budget.saturating_sub(crate::clock::now().saturating_duration_since(start));
                match nic.poll(NodeId(n as u16), left) {
                    // A failed completion is done with too.
                    Ok(()) => t.pop(),
                    Err(Error::Completion { .. }) | Err(Error::QpInError { .. }) => t.failed(),
                    Err(_) => return false,
                }
            }
        }
        true
    }

    /// Whether this context, once dropped, left nothing in flight ([`Settled`]): for extensions
    /// ([`Ctx::extension`]) that hand words back to a pool when the context goes.
    pub fn settled(&self) -> Settled {
        self.settled.clone()
    }

    /// Network operations this context has posted so far: puts, gets and remote RMWs, whatever
    /// layer posted them (a library's internal operations included); `rfence` is not counted
    /// (it sends nothing). For measuring what an operation costs on the network, e.g. a lock's
    /// round trips per acquire.
    pub fn posted(&self) -> u64 {
        self.inner.borrow().posted
    }

    /// The completion channel of this context's completion queue, if its backend has one.
    #[cfg(feature = "tokio")]
    pub(crate) fn completion_events(
        &self,
    ) -> Option<std::sync::Arc<dyn crate::backend::CompletionEvents>> {
        self.inner.borrow().nic.completion_events()
    }

    /// Whether a global fence towards `node` (`loco-sv`'s `gf`) would change nothing there:
    /// every operation this thread posted towards `node` has been polled, and none of them
    /// wrote remotely (put, rCAS, rFAA) after the last get (or [`Ctx::fence_read`]) towards
    /// `node`. That read's remote step waited for every earlier write of the queue pair to land
    /// (docs/model.md §5.2), so nothing the thread issued towards `node` is still on its way
    /// but, after a fence read by CAS on a device that writes a failed CAS back, that CAS's
    /// write of the fence word's own value, which changes nothing. A put that was only waited
    /// for is not enough: its completion does not mean it landed (Fig. 5).
    ///
    /// False for an unknown node, after any failed poll towards `node`, and once `node` has
    /// restarted since the context was made.
    pub fn fenced(&self, node: NodeId) -> bool {
        let inner = self.inner.borrow();
        let i = node.index();
        inner.track.get(i).is_some_and(Track::fenced)
            && inner.incarnations.get(i).copied() == self.cluster.incarnation(node).ok()
    }

    /// Whether something this thread posted towards `node` may still be on its way there: an
    /// operation not polled yet, or a remote write (put, rCAS, rFAA) not followed by a get or
    /// [`Ctx::fence_read`] towards `node` (see [`Ctx::fenced`]). Unlike `!fenced(node)`, false
    /// after a failed poll when nothing was posted since that could be, and towards a node
    /// restarted since the context was made (nothing of the context's reaches the new
    /// incarnation): what a global fence towards `node` would have to wait for, where it can.
    /// False for an unknown node.
    pub fn in_flight(&self, node: NodeId) -> bool {
        let inner = self.inner.borrow();
        let i = node.index();
        inner.track.get(i).is_some_and(|t| !t.is_empty() || t.dirty)
            && inner.incarnations.get(i).copied() == self.cluster.incarnation(node).ok()
    }

    /// Number of operations towards `node` posted and not yet polled.
    pub fn unpolled(&self, node: NodeId) -> Result<usize> {
        self.cluster.check_node(node)?;
        Ok(self.inner.borrow().track[node.index()].unpolled())
    }

    /// The layer below rdmawait, the paper's **rdmatso**: puts and gets without work ids, and
    /// `poll(n)` (docs/model.md §2).
    pub fn rdmatso(&self) -> RdmaTso<'_> {
        RdmaTso { ctx: self }
    }

    /// The old name of [`Ctx::rdmatso`] (it clashed with `Lock::raw` of `loco-locks`, a lock's
    /// protocol object).
    #[deprecated(since = "0.1.0", note = "renamed to `Ctx::rdmatso`")]
    pub fn raw(&self) -> RdmaTso<'_> {
        self.rdmatso()
    }

    /// Posts a work request towards `target`, tagged `wid` (for layers that add operations, such
    /// as `loco-rdmawaitrmw`). Every word range of `wr` is checked against the memory of its node
    /// (local words: this thread's node; remote words: `target`), failing with
    /// [`Error::OutOfRange`]; which words a layer may touch is its own business (check
    /// locations with [`Cluster::check`] first).
    pub fn post(&self, target: NodeId, wr: WorkRequest, wid: WorkId) -> Result<()> {
        self.check_request(target, &wr)?;
        self.post_checked(target, wr, wid)
    }

    /// [`Ctx::post`] for a request whose words were taken from locations checked with
    /// [`Cluster::check`] (or [`Cluster::check_word`]) against `target` and, for the local
    /// words, this thread's node: the range check is not made again. For the operations that
    /// have just checked their locations (`put`, `get`, the fence read, and `rcas`/`rfaa` of
    /// loco-rdmawaitrmw), on the hot path. Nothing unsafe follows from a request
    /// that is out of range anyway: the NIC refuses local words outside the node's memory, and
    /// remote ones fail at the target (a remote access error).
    #[doc(hidden)]
    #[inline]
    pub fn post_checked(&self, target: NodeId, wr: WorkRequest, wid: WorkId) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        tracing::trace!(target: "loco::rdmawait", from = %self.node, to = %target, ?wr, %wid, "post");
        if let Err(e) = inner.nic.post(target, wr) {
            tracing::debug!(target: "loco::rdmawait", from = %self.node, to = %target, error = %e, "post failed");
            return Err(e);
        }
        let t = &mut inner.track[target.index()];
        t.posted(&wr);
        if wr.completes() {
            t.push(wid);
        }
        if !matches!(wr, WorkRequest::Fence) {
            inner.posted += 1;
        }
        Ok(())
    }

    /// Checks that `target` exists and that `wr`'s words lie within the memory of this
    /// thread's node (local words) and of `target` (remote words).
    fn check_request(&self, target: NodeId, wr: &WorkRequest) -> Result<()> {
        self.cluster.check_node(target)?;
        wr.check_ranges(
            self.node,
            self.cluster.words_of(self.node),
            target,
            self.cluster.words_of(target),
        )
    }

    /// Benchmark support, outside the model ([`ThreadNic::raw_requests`]): `n` requests `wr`
    /// towards `target` as bare verbs calls issue them (post, then poll the completion queue
    /// until the completion is there), on this context's own queue pair, timed from one
    /// completion to the next; each one's nanoseconds. `loco bench ops --vs-raw` alternates
    /// them with the same requests through [`Ctx::post`] and [`Ctx::wait`], so that their
    /// ratio is what this library's path costs over the device's, on one host at one moment.
    ///
    /// Fails with [`Error::Backend`] on a backend without a bare path (only verbs has one) or
    /// while this context has unpolled operations; the addresses are checked as for a post.
    #[doc(hidden)]
    pub fn raw_requests(&self, target: NodeId, wr: WorkRequest, n: usize) -> Result<Vec<u64>> {
        self.check_request(target, &wr)?;
        let mut inner = self.inner.borrow_mut();
        if inner.track.iter().any(|t| !t.is_empty()) {
            return Err(Error::Backend {
                backend: self.cluster.backend_name(),
                message: "bare requests need a context with no unpolled operation".into(),
                source: None,
            });
        }
        let timeout = self.cluster.timeout();
        inner
            .nic
            .raw_requests(target, wr, n, timeout)
            .unwrap_or_else(|| {
                Err(Error::Backend {
                    backend: self.cluster.backend_name(),
                    message: "no bare request path (only the verbs backend has one)".into(),
                    source: None,
                })
            })
    }

    /// Runs `f` with this context when it is dropped, before it reaps what is left in flight
    /// and before its extensions are dropped: a layer's chance to finish work of its own (e.g.
    /// read back a word it wrote, so that it can be recycled). Hooks run in the order they were
    /// added; they should bound their waits (the context's [`DROP_SETTLE`] follows them).
    pub fn on_drop(&self, f: impl FnOnce(&Ctx) + 'static) {
        self.drop_hooks.0.borrow_mut().push(Box::new(f));
    }

    /// The per-thread state of type `T` of a library layer, created by `init` on first use (e.g.
    /// scratch words in registered memory of this thread's node).
    pub fn extension<T: Any>(&self, init: impl FnOnce(&Ctx) -> Result<T>) -> Result<Rc<T>> {
        let key = TypeId::of::<T>();
        if let Some(v) = self.extensions.borrow().get(&key) {
            return Ok(v
                .clone()
                .downcast::<T>()
                .expect("extension keyed by its TypeId"));
        }
        let v = Rc::new(init(self)?);
        self.extensions.borrow_mut().insert(key, v.clone());
        Ok(v)
    }
}

/// The rdmatso layer of a context (docs/model.md §2): completion by polling the earliest
/// operation of a queue pair rather than by work id.
#[derive(Debug, Clone, Copy)]
pub struct RdmaTso<'a> {
    ctx: &'a Ctx,
}

/// The old name of [`RdmaTso`].
#[deprecated(since = "0.1.0", note = "renamed to `RdmaTso`")]
pub type Raw<'a> = RdmaTso<'a>;

impl RdmaTso<'_> {
    /// `put(dst, src)`: RDMA WRITE of local `src` to `dst`.
    pub fn put(&self, dst: &Loc, src: &Loc) -> Result<()> {
        self.ctx.put(dst, src, WorkId::RAW)
    }

    /// `get(dst, src)`: RDMA READ of `src` into local `dst`.
    pub fn get(&self, dst: &Loc, src: &Loc) -> Result<()> {
        self.ctx.get(dst, src, WorkId::RAW)
    }

    /// `poll(n)` with the cluster's default timeout.
    pub fn poll(&self, node: NodeId) -> Result<()> {
        self.poll_timeout(node, self.ctx.cluster.timeout())
    }

    /// `poll(n)`: blocks until the **earliest** unpolled operation towards `n` completes (whatever
    /// its work id) and consumes it. Fails with [`Error::NothingPending`] when there is none, as
    /// the model's poll would block forever.
    pub fn poll_timeout(&self, node: NodeId, timeout: Duration) -> Result<()> {
        #[cfg(feature = "tokio")]
        if crate::aio::in_task() && !timeout.is_zero() {
            return self
                .ctx
                .look_in_task(timeout, || self.poll_now(node, Duration::ZERO));
        }
        self.poll_now(node, timeout)
    }

    fn poll_now(&self, node: NodeId, timeout: Duration) -> Result<()> {
        self.ctx.cluster.check_node(node)?;
        let mut inner = self.ctx.inner.borrow_mut();
        let Inner { nic, track, .. } = &mut *inner;
        let t = &mut track[node.index()];
        if t.is_empty() {
            return Err(Error::NothingPending { node });
        }
        match nic.poll(node, timeout) {
            Ok(()) => {
                t.pop();
                Ok(())
            }
            Err(e @ Error::Timeout { .. }) => Err(e),
            Err(e) => {
                t.failed();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn track_follows_each_work_id_and_pops_in_order() {
        let (a, b) = (WorkId::new(1), WorkId::new(2));
        let mut t = Track::default();
        t.push(a);
        t.push(b);
        t.push(a);
        assert_eq!((t.until(a), t.until(b)), (Some(3), Some(2)));
        t.pop(); // the earliest, an `a`
        assert_eq!(
            (t.until(a), t.until(b), t.unpolled()),
            (Some(3), Some(2), 2)
        );
        t.pop(); // the `b`
        assert!(t.count_any(a) && !t.count_any(b));
        t.pop();
        assert!(!t.count_any(a) && !t.count_any(b));
        assert!(t.last.is_empty() && t.is_empty());
        t.pop(); // popping an empty track is harmless
        assert_eq!(t.unpolled(), 0);
    }

    /// Many work ids live at once: spent ones are dropped, live ones kept.
    #[test]
    fn track_prunes_spent_work_ids_only() {
        let mut t = Track::default();
        for i in 0..100u32 {
            t.push(WorkId::new(i));
            if i % 2 == 0 {
                t.pop();
            }
        }
        assert!(
            t.last.len() <= t.unpolled() + Track::PRUNE_AT,
            "{}",
            t.last.len()
        );
        assert_eq!(t.unpolled(), 50);
        // The unpolled ones are the last 50 posted, whatever their ids.
        for i in 0..100u32 {
            assert_eq!(t.count_any(WorkId::new(i)), i >= 50, "{i}");
        }
        assert_eq!(t.until(WorkId::new(99)), Some(100));
    }

    /// `post_checked` skips the context's range check, not the NIC's: words outside a node's
    /// memory, and a word index at the end of `usize`, are refused, never executed.
    #[test]
    fn post_checked_out_of_range_words_are_refused_by_the_nic() {
        for schedule in [
            crate::Schedule::Immediate,
            crate::Schedule::Chaos { seed: 1 },
            crate::Schedule::Threaded,
        ] {
            let c = Cluster::builder()
                .nodes(2)
                .memory_per_node(64)
                .soft(schedule)
                .build()
                .unwrap();
            let ctx = c.context(NodeId(0)).unwrap();
            let d = WorkId::new(1);
            for (local, remote, words) in [(8, 0, 1), (0, 8, 1), (0, 0, 9), (usize::MAX, 0, 1)] {
                let wr = WorkRequest::Write {
                    local,
                    remote,
                    words,
                };
                assert!(ctx.post_checked(NodeId(1), wr, d).is_err(), "{wr:?}");
            }
            for (remote, local) in [(8, 0), (0, 8), (usize::MAX, 0), (0, usize::MAX)] {
                let rmw = WorkRequest::FetchAdd {
                    remote,
                    add: 1,
                    local,
                };
                assert!(ctx.post_checked(NodeId(1), rmw, d).is_err(), "{rmw:?}");
            }
            assert_eq!(ctx.unpolled(NodeId(1)).unwrap(), 0);
            ctx.wait(d).unwrap();
        }
    }

    #[test]
    fn extensions_are_created_once_per_thread() {
        let c = Cluster::builder()
            .nodes(1)
            .memory_per_node(64)
            .build()
            .unwrap();
        let ctx = c.context(NodeId(0)).unwrap();
        let mut made = 0;
        for _ in 0..3 {
            let w = ctx
                .extension(|ctx| {
                    made += 1;
                    ctx.cluster().alloc_word(ctx.node())
                })
                .unwrap();
            assert_eq!(w.offset(), 0);
        }
        assert_eq!(made, 1);
    }
}
