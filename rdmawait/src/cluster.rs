//! Clusters: nodes, their registered memory, and the thread contexts bound to them.

use std::any::{Any, TypeId};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::backend::soft::{Schedule, SoftBackend};
use crate::backend::Backend;
use crate::model::FailedCas;
use crate::{Ctx, Error, FenceRead, Loc, NodeId, Result, WORD};

static NEXT_CLUSTER: AtomicU32 = AtomicU32::new(1);

/// Default registered memory per node: 1 MiB.
pub const DEFAULT_MEMORY: u64 = 1 << 20;
/// Default timeout of waits and polls that are not given one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A cluster of nodes, each with registered memory, over one NIC backend.
///
/// Cheap to clone (a handle). Memory is allocated with [`Cluster::alloc`]; a thread binds to a
/// node with [`Cluster::context`] and does everything through the returned [`Ctx`].
///
/// ```
/// use loco_rdmawait::{Cluster, NodeId, WorkId};
/// let cluster = Cluster::builder().nodes(2).build()?;
/// let x = cluster.alloc_word(NodeId(0))?;
/// let y = cluster.alloc_word(NodeId(1))?;
/// let ctx = cluster.context(NodeId(0))?;
/// ctx.store(&x, 42)?;
/// ctx.put(&y, &x, WorkId::new(1))?;
/// ctx.wait(WorkId::new(1))?;
/// cluster.quiesce()?;
/// assert_eq!(cluster.peek(&y)?, 42);
/// # Ok::<(), loco_rdmawait::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Cluster {
    inner: Arc<Inner>,
}

/// A cluster's private memory ([`Cluster::alloc_private`]): the blocks handed out, and those
/// given back for reuse.
#[derive(Debug, Default)]
struct Private {
    /// Blocks handed out and not given back: length by (node, offset).
    live: HashMap<(NodeId, u64), u64>,
    /// Blocks given back: offsets by (node, length). A set, handed out lowest offset first,
    /// so that which block a caller gets does not depend on the order blocks were given back
    /// in: layers give back a dropped context's words in the order of their own maps (per-
    /// context extensions, per-lock and per-object words, kept in `HashMap`s whose order is
    /// random per map), and a LIFO list made the words later contexts got, and so a
    /// simulation's runs of one schedule, differ from run to run (`sim::Strategy::Exhaustive`
    /// failed with `Nondeterministic` on SC objects).
    free: HashMap<(NodeId, u64), BTreeSet<u64>>,
}

#[derive(Debug)]
struct Inner {
    id: u32,
    backend: Box<dyn Backend>,
    /// Registered memory size per node, in bytes.
    sizes: Vec<u64>,
    /// Next free byte per node (bump allocation).
    /// Per node: (next free byte from the bottom, first used byte of the private region at the
    /// top).
    next: Mutex<Vec<(u64, u64)>>,
    /// Private memory handed out and given back ([`Cluster::alloc_private`],
    /// [`Cluster::free_private`]).
    private: Mutex<Private>,
    timeout: Duration,
    extensions: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// Set by [`Cluster::shutdown`]: loops of the layers above (lock spins) check it.
    shut_down: std::sync::atomic::AtomicBool,
    /// How global fences read ([`Cluster::fence_read`]).
    fence_read: FenceRead,
    /// Per node, the dummy word global fences read there ([`Cluster::fence_word`]), once made.
    fence_words: Mutex<Vec<Option<Loc>>>,
}

/// The NIC backends a [`ClusterBuilder`] can be switched between at run time
/// ([`ClusterBuilder::backend`]), typically from the environment
/// ([`ClusterBuilder::backend_from_env`]), so that one program or test runs on the soft NIC by
/// default and on a real RDMA device when asked.
///
/// | `LOCO_BACKEND` | backend |
/// |---|---|
/// | unset, empty, `soft` | [`BackendKind::Soft`]: the soft NIC, with the builder's [`Schedule`] |
/// | `verbs` | [`BackendKind::Verbs`]: the ibverbs backend (feature `verbs`), configured by `VerbsConfig::from_env` (`LOCO_RDMA_DEVICE`, `LOCO_GID_INDEX`, ...) |
///
/// `LOCO_TEST_BACKEND`, its former name, is read when `LOCO_BACKEND` is unset.
///
/// ```
/// use loco_rdmawait::{BackendKind, Cluster, Schedule};
///
/// let kind = BackendKind::from_env()?; // Soft unless LOCO_BACKEND says otherwise
/// let cluster = Cluster::builder()
///     .nodes(2)
///     .soft(Schedule::Chaos { seed: 7 }) // used on the soft NIC, ignored on verbs
///     .backend(kind)?
///     .build()?;
/// assert_eq!(cluster.backend_name(), kind.name());
/// assert_eq!("verbs".parse::<BackendKind>()?, BackendKind::Verbs);
/// # Ok::<(), loco_rdmawait::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// The in-process soft NIC (the default).
    #[default]
    Soft,
    /// The ibverbs backend on a real RDMA device (needs the `verbs` feature).
    Verbs,
}

impl BackendKind {
    /// The environment variable [`BackendKind::from_env`] reads: `LOCO_BACKEND`.
    pub const ENV: &'static str = "LOCO_BACKEND";
    /// Its former name, read when [`BackendKind::ENV`] is unset: `LOCO_TEST_BACKEND`.
    pub const LEGACY_ENV: &'static str = "LOCO_TEST_BACKEND";

    /// The backend `LOCO_BACKEND` (or else `LOCO_TEST_BACKEND`) names; [`BackendKind::Soft`]
    /// when neither is set or the value is empty. Fails with [`Error::UnknownBackend`] on other
    /// names. Whether this build has the backend is checked by [`ClusterBuilder::backend`].
    pub fn from_env() -> Result<BackendKind> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<BackendKind> {
        for var in [Self::ENV, Self::LEGACY_ENV] {
            if let Some(value) = lookup(var) {
                return Self::parse_from(&value, Some(var));
            }
        }
        Ok(BackendKind::Soft)
    }

    fn parse_from(value: &str, var: Option<&'static str>) -> Result<BackendKind> {
        match value.trim() {
            "" | "soft" => Ok(BackendKind::Soft),
            "verbs" => Ok(BackendKind::Verbs),
            other => Err(Error::UnknownBackend {
                name: other.to_owned(),
                var,
            }),
        }
    }

    /// The backend's name, as [`Cluster::backend_name`] reports it (`soft`, `verbs`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Soft => "soft",
            BackendKind::Verbs => "verbs",
        }
    }

    /// Whether this build contains the backend (`verbs` needs the `verbs` feature).
    pub fn is_built(self) -> bool {
        match self {
            BackendKind::Soft => true,
            BackendKind::Verbs => cfg!(feature = "verbs"),
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = Error;

    /// `soft` or `verbs` (an empty string is `soft`).
    fn from_str(s: &str) -> Result<BackendKind> {
        BackendKind::parse_from(s, None)
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds a [`Cluster`]; got from [`Cluster::builder`].
#[derive(Debug)]
#[must_use]
pub struct ClusterBuilder {
    nodes: usize,
    memory: u64,
    schedule: Schedule,
    failed_cas: FailedCas,
    timeout: Duration,
    /// The fence read asked for (`None`: the backend's choice).
    fence_read: Option<FenceRead>,
    /// The verbs backend's configuration, when it replaces the soft NIC.
    #[cfg(feature = "verbs")]
    verbs: Option<crate::backend::verbs::VerbsConfig>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            nodes: 2,
            memory: DEFAULT_MEMORY,
            schedule: Schedule::default(),
            failed_cas: FailedCas::Reads,
            timeout: DEFAULT_TIMEOUT,
            fence_read: None,
            #[cfg(feature = "verbs")]
            verbs: None,
        }
    }
}

impl ClusterBuilder {
    /// Number of nodes (default 2).
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// Registered memory per node in bytes, rounded up to whole words (default 1 MiB). A size
    /// the backend cannot allocate makes [`ClusterBuilder::build`] fail.
    pub fn memory_per_node(mut self, bytes: u64) -> Self {
        // Sizes within a word of u64::MAX round down instead (build refuses them anyway).
        self.memory = bytes
            .div_ceil(WORD)
            .checked_mul(WORD)
            .unwrap_or(u64::MAX / WORD * WORD);
        self
    }

    /// Use the soft NIC with this schedule (the default backend, with [`Schedule::Immediate`]).
    pub fn soft(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// What a failed remote CAS does on the soft NIC: the model's rule 9 (the default), or
    /// Soft-RoCE's write-back ([`FailedCas::WritesBack`]; see
    /// [`SoftBackend::with_failed_cas`] for which schedules show it). Ignored on verbs, where
    /// the device decides.
    pub fn failed_cas(mut self, mode: FailedCas) -> Self {
        self.failed_cas = mode;
        self
    }

    /// Timeout of [`Ctx::wait`], [`Ctx::rdmatso`] polls and [`Cluster::quiesce`] (default 30 s).
    /// [`Duration::MAX`] (or any timeout beyond what the clock can represent) means no timeout:
    /// those calls then wait as long as needed (a shutdown or a dead peer still ends them).
    /// [`Duration::ZERO`] is accepted and makes every wait that uses this default a
    /// non-blocking look: it fails with [`Error::Timeout`] unless the work is already done (a
    /// contended lock acquire, for one, then fails at once, every time). It is meant for tests
    /// of the timeout paths, not for a running cluster.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How global fences read a node's dummy word ([`FenceRead`], docs/model.md §5.2). Both
    /// give the same guarantee; by default the backend picks the cheaper: a remote CAS on
    /// Soft-RoCE, a get on other devices and on the soft NIC.
    pub fn fence_read(mut self, read: FenceRead) -> Self {
        self.fence_read = Some(read);
        self
    }

    /// Use the ibverbs backend on a real RDMA device instead of the soft NIC (feature `verbs`;
    /// see [`crate::backend::verbs`]). The schedule set with [`ClusterBuilder::soft`] is ignored.
    #[cfg(feature = "verbs")]
    pub fn verbs(mut self, config: crate::backend::verbs::VerbsConfig) -> Self {
        self.verbs = Some(config);
        self
    }

    /// Use the backend `kind`: the soft NIC, with the schedule set by [`ClusterBuilder::soft`]
    /// (this undoes an earlier `ClusterBuilder::verbs`), or the verbs backend configured by
    /// `VerbsConfig::from_env`.
    ///
    /// Fails with [`Error::BackendNotBuilt`] for `verbs` in a build without the `verbs` feature,
    /// and with the verbs configuration's error when the environment's device settings do not
    /// parse. Whether a device is there shows when the cluster is built.
    pub fn backend(self, kind: BackendKind) -> Result<Self> {
        match kind {
            #[cfg(feature = "verbs")]
            BackendKind::Soft => Ok(ClusterBuilder {
                verbs: None,
                ..self
            }),
            #[cfg(not(feature = "verbs"))]
            BackendKind::Soft => Ok(self),
            #[cfg(feature = "verbs")]
            BackendKind::Verbs => Ok(self.verbs(crate::backend::verbs::VerbsConfig::from_env()?)),
            #[cfg(not(feature = "verbs"))]
            BackendKind::Verbs => Err(Error::BackendNotBuilt {
                backend: "verbs",
                feature: "verbs",
            }),
        }
    }

    /// Use the backend the environment names: [`BackendKind::from_env`], then
    /// [`ClusterBuilder::backend`]. With neither `LOCO_BACKEND` nor `LOCO_TEST_BACKEND` set, this
    /// changes nothing (the soft NIC).
    pub fn backend_from_env(self) -> Result<Self> {
        self.backend(BackendKind::from_env()?)
    }

    /// Builds the cluster on the soft backend (or the verbs backend, if chosen).
    ///
    /// Fails with [`Error::Backend`] for 0 or more than 65535 nodes, for memory that cannot be
    /// allocated (on the soft NIC: more than [`MAX_SOFT_MEMORY`](crate::MAX_SOFT_MEMORY) over
    /// all nodes, or more than the machine gives; nothing is touched before the allocation
    /// succeeds), and when an engine thread cannot be started.
    pub fn build(self) -> Result<Cluster> {
        #[cfg(feature = "verbs")]
        let backend = if self.verbs.is_some() {
            "verbs"
        } else {
            "soft"
        };
        #[cfg(not(feature = "verbs"))]
        let backend = "soft";
        let words = usize::try_from(self.memory / WORD).map_err(|_| Error::Backend {
            backend,
            message: format!(
                "{} bytes of registered memory per node do not fit this machine's address space",
                self.memory
            ),
            source: None,
        })?;
        #[cfg(feature = "verbs")]
        if let Some(config) = self.verbs {
            return crate::backend::verbs::build_cluster(
                self.nodes,
                words,
                self.timeout,
                config,
                self.fence_read,
            );
        }
        let backend =
            SoftBackend::with_failed_cas(self.nodes, words, self.schedule, self.failed_cas)?;
        Ok(Cluster::assemble(
            Box::new(backend),
            self.timeout,
            self.fence_read,
        ))
    }
}

impl Cluster {
    /// A builder with the defaults: 2 nodes, 1 MiB each, soft NIC, [`Schedule::Immediate`].
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// A cluster over any backend (this is how the verbs backend, or your own, plugs in).
    pub fn with_backend(backend: Box<dyn Backend>, timeout: Duration) -> Cluster {
        Cluster::assemble(backend, timeout, None)
    }

    /// A cluster over `backend`, whose fences read as `fence_read` says (`None`: as the backend
    /// prefers).
    pub(crate) fn assemble(
        backend: Box<dyn Backend>,
        timeout: Duration,
        fence_read: Option<FenceRead>,
    ) -> Cluster {
        let fence_read = fence_read.unwrap_or_else(|| backend.fence_read());
        let n = backend.nodes();
        let sizes: Vec<u64> = (0..n)
            .map(|i| (backend.words(NodeId(i as u16)) as u64).saturating_mul(WORD))
            .collect();
        let mut sizes_for_next: Vec<(u64, u64)> = sizes.iter().map(|&s| (0, s)).collect();
        let id = NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed);
        // Where nodes live in other processes, every process reserves the top word of every
        // node as its fence word before anything else is allocated, so that all of them read the
        // same word, which nobody's private memory can be (a fence's CAS may write it back).
        let spread = (0..n).any(|i| !backend.is_local(NodeId(i as u16)));
        let fence_words = (0..n)
            .map(|i| {
                let top = &mut sizes_for_next[i].1;
                (spread && *top >= WORD).then(|| {
                    *top -= WORD;
                    Loc::new(id, NodeId(i as u16), *top, WORD)
                })
            })
            .collect();
        Cluster {
            inner: Arc::new(Inner {
                id,
                backend,
                sizes,
                next: Mutex::new(sizes_for_next),
                private: Mutex::new(Private::default()),
                timeout,
                extensions: Mutex::new(HashMap::new()),
                shut_down: std::sync::atomic::AtomicBool::new(false),
                fence_read,
                fence_words: Mutex::new(fence_words),
            }),
        }
    }

    /// How this cluster's global fences read a node's dummy word ([`Ctx::fence_read`]).
    pub fn fence_read(&self) -> FenceRead {
        self.inner.fence_read
    }

    /// The dummy word on `node` that global fences read ([`Ctx::fence_read`]): nothing else
    /// uses it, so it holds 0 for good. In a cluster spread over processes it is the node's top
    /// word, reserved by every process when the cluster is made, so that all of them read (and,
    /// with a CAS that writes back, write) the same word and none of their private words; in
    /// one process it is a private word made on first use. The same word on every call.
    pub fn fence_word(&self, node: NodeId) -> Result<Loc> {
        self.check_node(node)?;
        if let Some(w) = self.inner.fence_words.lock()[node.index()] {
            return Ok(w);
        }
        let w = self.alloc_private(node, WORD)?;
        let first = *self.inner.fence_words.lock()[node.index()].get_or_insert(w);
        if first != w {
            // Another thread made one meanwhile: the first stays, this one goes back unused.
            let _ = self.free_private(w);
        }
        Ok(first)
    }

    /// This cluster's id, unique in the process (location handles carry it).
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Number of nodes.
    #[inline]
    pub fn nodes(&self) -> usize {
        self.inner.sizes.len()
    }

    /// All node ids, in order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes() as u16).map(NodeId)
    }

    /// The backend's name (`soft`, `verbs`).
    pub fn backend_name(&self) -> &'static str {
        self.inner.backend.name()
    }

    /// The default timeout of waits and polls.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Registered memory of `node` in words (0 for an unknown node).
    pub(crate) fn words_of(&self, node: NodeId) -> usize {
        self.inner
            .sizes
            .get(node.index())
            .map_or(0, |&b| usize::try_from(b / WORD).unwrap_or(usize::MAX))
    }

    /// Checks that `node` exists.
    #[inline]
    pub fn check_node(&self, node: NodeId) -> Result<()> {
        if node.index() < self.nodes() {
            Ok(())
        } else {
            Err(Error::UnknownNode {
                node,
                nodes: self.nodes(),
            })
        }
    }

    /// Allocates `bytes` (rounded up to whole words) of zeroed registered memory on `node`.
    ///
    /// Allocation is a bump pointer: memory is never freed before the cluster is dropped, and
    /// processes that allocate in the same order get the same locations (which is how the nodes of
    /// a multi-process cluster agree on addresses).
    pub fn alloc(&self, node: NodeId, bytes: u64) -> Result<Loc> {
        self.alloc_in(node, bytes, false)
    }

    /// Allocates `bytes` (rounded up to whole words) of zeroed registered memory on `node` for
    /// one process's own use: scratch words, per-thread lock state. (A global fence's dummy
    /// word is [`Cluster::fence_word`]: in a cluster spread over processes, one process's
    /// private word on a remote node may be another's.)
    ///
    /// Private words come from the top of the node's memory, downwards, so they never shift the
    /// offsets [`Cluster::alloc`] hands out: in a multi-process cluster, each process may allocate
    /// private words lazily (when a thread first needs them) and shared objects still get the same
    /// locations in every process.
    ///
    /// Memory given back with [`Cluster::free_private`] is reused first (zeroed again): of the
    /// blocks of the size asked for, the one at the lowest offset, whatever order they were
    /// given back in (so a program that gives back the same blocks gets the same ones again).
    pub fn alloc_private(&self, node: NodeId, bytes: u64) -> Result<Loc> {
        self.check_node(node)?;
        if let Some(len) = bytes.div_ceil(WORD).checked_mul(WORD).filter(|&l| l > 0) {
            let reused = self
                .inner
                .private
                .lock()
                .free
                .get_mut(&(node, len))
                .and_then(BTreeSet::pop_first);
            if let Some(at) = reused {
                let loc = Loc::new(self.inner.id, node, at, len);
                let zeroed = (0..len / WORD).try_for_each(|k| self.poke(&loc.word(k)?, 0));
                let mut private = self.inner.private.lock();
                // On a dead node the words cannot be zeroed, nor read or written by anyone,
                // and a restart zeroes the node's memory: handed out as they are, so that the
                // node's death does not fail the caller (a global fence's words are made on
                // every node, dead ones included).
                if zeroed.is_ok() || !self.is_alive(node) {
                    private.live.insert((node, at), len);
                    return Ok(loc);
                }
                // Not handed out: back on the free list for a later try.
                private.free.entry((node, len)).or_default().insert(at);
                return zeroed.map(|_| loc);
            }
        }
        let loc = self.alloc_in(node, bytes, true)?;
        if !loc.is_empty() {
            self.inner
                .private
                .lock()
                .live
                .insert((node, loc.offset()), loc.len());
        }
        Ok(loc)
    }

    /// Gives private memory (from [`Cluster::alloc_private`]) back, for a later `alloc_private`
    /// of the same size on the same node. Only for memory that no operation can still read or
    /// write: a context's scratch words once [`Ctx::settled`](crate::Ctx::settled) says it was
    /// dropped with nothing in flight. Only private memory of this process's own nodes is
    /// reused (it is zeroed on reuse, which needs local access); other memory given back (shared
    /// memory from [`Cluster::alloc`], another process's node) is ignored.
    ///
    /// A private location that is not a whole block `alloc_private` handed out and not yet given
    /// back (a second free of it, or a part of a block) is refused with
    /// [`Error::NotAPrivateBlock`]: taking it back would hand the same words out twice.
    pub fn free_private(&self, loc: Loc) -> Result<()> {
        self.check(&loc)?;
        let private_from = self.inner.next.lock()[loc.node().index()].1;
        if loc.offset() >= private_from
            && !loc.is_empty()
            && self.inner.backend.is_local(loc.node())
        {
            let mut private = self.inner.private.lock();
            let key = (loc.node(), loc.offset());
            if private.live.get(&key) != Some(&loc.len()) {
                return Err(Error::NotAPrivateBlock {
                    node: loc.node(),
                    offset: loc.offset(),
                    len: loc.len(),
                });
            }
            private.live.remove(&key);
            private
                .free
                .entry((loc.node(), loc.len()))
                .or_default()
                .insert(loc.offset());
        }
        Ok(())
    }

    /// Allocates one word on every node, all or nothing (a shared variable's copies): when one
    /// node is out of memory, nothing is taken on any node.
    pub fn alloc_word_on_each(&self) -> Result<Vec<Loc>> {
        let mut next = self.inner.next.lock();
        if let Some((i, &(low, high))) = next.iter().enumerate().find(|(_, (l, h))| h - l < WORD) {
            return Err(Error::OutOfMemory {
                node: NodeId(i as u16),
                requested: WORD,
                free: high - low,
            });
        }
        Ok(next
            .iter_mut()
            .enumerate()
            .map(|(i, (low, _))| {
                *low += WORD;
                Loc::new(self.inner.id, NodeId(i as u16), *low - WORD, WORD)
            })
            .collect())
    }

    /// Bytes of `node`'s registered memory not yet allocated (shared or private): a layer that
    /// makes many allocations checks it first, so that running out half-way does not strand
    /// what was taken before (allocations are never freed).
    pub fn free_bytes(&self, node: NodeId) -> Result<u64> {
        self.check_node(node)?;
        let (low, high) = self.inner.next.lock()[node.index()];
        Ok(high - low)
    }

    /// Fails with [`Error::OutOfMemory`] unless `node` has `bytes` of registered memory not yet
    /// allocated ([`Cluster::free_bytes`]): what a layer about to make several allocations
    /// checks first.
    pub fn check_free(&self, node: NodeId, bytes: u64) -> Result<()> {
        let free = self.free_bytes(node)?;
        if bytes > free {
            return Err(Error::OutOfMemory {
                node,
                requested: bytes,
                free,
            });
        }
        Ok(())
    }

    fn alloc_in(&self, node: NodeId, bytes: u64, private: bool) -> Result<Loc> {
        self.check_node(node)?;
        let mut next = self.inner.next.lock();
        let (low, high) = &mut next[node.index()];
        let free = *high - *low;
        let len = match bytes.div_ceil(WORD).checked_mul(WORD) {
            Some(len) if len <= free => len,
            _ => {
                return Err(Error::OutOfMemory {
                    node,
                    requested: bytes,
                    free,
                })
            }
        };
        let at = if private {
            *high -= len;
            *high
        } else {
            *low += len;
            *low - len
        };
        Ok(Loc::new(self.inner.id, node, at, len))
    }

    /// Allocates one zeroed word on `node`.
    pub fn alloc_word(&self, node: NodeId) -> Result<Loc> {
        self.alloc(node, WORD)
    }

    /// Allocates `n` zeroed words on `node`.
    pub fn alloc_words(&self, node: NodeId, n: u64) -> Result<Loc> {
        // More than u64::MAX bytes is out of memory as surely as u64::MAX bytes.
        self.alloc(node, n.saturating_mul(WORD))
    }

    /// Binds a thread context to `node`: one queue pair towards every node and one completion
    /// queue. Create one per thread; a context is not shared between threads.
    ///
    /// Fails with [`Error::PeerDead`] if `node` itself is dead; dead *other* nodes do not matter
    /// here (operations towards them fail when they are made).
    pub fn context(&self, node: NodeId) -> Result<Ctx> {
        self.check_node(node)?;
        // Read before the queue pairs are made, and again after: a node that restarted in
        // between may have had some of them connected to its new incarnation, which the
        // context would take for the old one (so, to `Cluster::restart`'s promise, it could
        // reach an incarnation newer than it knows). Incarnations are never reused, so equal
        // readings mean no restart in between; otherwise the queue pairs are made again. After
        // a few tries (restarts in a tight loop), the readings before are kept: the context
        // then takes a node that restarted for restarted (see `Ctx::fenced`), never the other
        // way round.
        let read = || -> Vec<u64> {
            self.node_ids()
                .map(|n| self.inner.backend.incarnation(n))
                .collect()
        };
        let mut tries = 0;
        let (incarnations, nic) = loop {
            let before = read();
            let nic = self.inner.backend.open(node)?;
            tries += 1;
            if read() == before || tries == 3 {
                break (before, nic);
            }
        };
        tracing::debug!(target: "loco::rdmawait", cluster = self.inner.id, %node, "context opened");
        Ok(Ctx::new(self.clone(), node, nic, incarnations))
    }

    /// Blocks until every posted operation of every thread has fully taken effect in memory,
    /// with the cluster's default timeout. Use it before inspecting final values with
    /// [`Cluster::peek`].
    ///
    /// Work towards or from a dead node does not count (it failed); after [`Cluster::shutdown`]
    /// a quiesce that would block fails with [`Error::Shutdown`].
    pub fn quiesce(&self) -> Result<()> {
        self.quiesce_timeout(self.inner.timeout)
    }

    /// [`Cluster::quiesce`] with its own timeout ([`Duration::MAX`]: as long as needed;
    /// [`Duration::ZERO`]: only checks).
    pub fn quiesce_timeout(&self, timeout: Duration) -> Result<()> {
        self.inner.backend.quiesce(timeout)
    }

    /// Reads the word at `loc` directly from node memory, bypassing NICs and store buffers (for
    /// set-up and inspection, typically after [`Cluster::quiesce`]).
    pub fn peek(&self, loc: &Loc) -> Result<u64> {
        let (node, w) = self.word_of(loc)?;
        self.inner.backend.peek(node, w)
    }

    /// Reads every word of `loc` directly from node memory.
    pub fn peek_words(&self, loc: &Loc) -> Result<Vec<u64>> {
        let (w, n) = self.check(loc)?;
        self.local_node(loc.node())?;
        (w..w + n)
            .map(|i| self.inner.backend.peek(loc.node(), i))
            .collect()
    }

    /// Writes the word at `loc` directly to node memory, bypassing NICs and store buffers (for
    /// initial values, before threads start).
    pub fn poke(&self, loc: &Loc, value: u64) -> Result<()> {
        let (node, w) = self.word_of(loc)?;
        self.inner.backend.poke(node, w, value)
    }

    /// Fails with [`Error::PeerDead`] naming `node` if the cluster considers it dead (see
    /// [`Cluster::kill`] and, for a cluster spanning processes, the verbs backend's failure
    /// detection); [`Error::UnknownNode`] if there is no such node.
    pub fn check_alive(&self, node: NodeId) -> Result<()> {
        self.check_node(node)?;
        match self.inner.backend.dead(node) {
            None => Ok(()),
            Some(reason) => Err(Error::PeerDead { node, reason }),
        }
    }

    /// Whether `node` exists and is not known to be dead.
    pub fn is_alive(&self, node: NodeId) -> bool {
        self.check_alive(node).is_ok()
    }

    /// Fault injection: `node` dies, as if its process had been killed (`kill -9`). From then on
    /// [`Cluster::check_alive`] reports it, and operations that depend on it fail with
    /// [`Error::PeerDead`] naming it. Supported by the soft NIC; other backends fail with
    /// [`Error::Backend`].
    ///
    /// # Failures (soft NIC)
    /// - **Detected**: immediately, by every call made after `kill` returns, on every schedule.
    /// - **Towards the dead node**: posts (`put`, `get`, `rfence`, RMWs, and so `bcast` and `gf`)
    ///   fail at once with `PeerDead`, posting nothing. Requests posted earlier that had not
    ///   reached it when it died complete in error, as on a real NIC: the `wait` or `poll` for
    ///   them fails with `PeerDead` instead of blocking (one that is already blocked returns),
    ///   and a `wait` then forgets every other pending request towards that node (on a
    ///   context shared by async tasks, module `aio`, the next wait for a forgotten request's
    ///   work id still fails with `PeerDead`, once: it may be another task's). Requests
    ///   that had completed before the kill are still reported as completed.
    /// - **On the dead node**: every operation of its contexts fails with `PeerDead`, and no new
    ///   context opens there; [`Cluster::peek`] and [`Cluster::poke`] of its memory fail too.
    ///   Its RMWs that held another node's remote-atomic lock release it.
    /// - **Unaffected**: everything between live nodes, including `wait`s of a thread that also
    ///   has requests towards the dead node (under other work ids), and [`Cluster::quiesce`],
    ///   which no longer waits for failed work.
    /// - **Not recovered**: the dead incarnation stays dead; what its threads held (locks,
    ///   half-done updates) is the business of the layers above. The node may come back as a
    ///   new incarnation with [`Cluster::restart`].
    pub fn kill(&self, node: NodeId) -> Result<()> {
        self.check_node(node)?;
        tracing::warn!(target: "loco::rdmawait", cluster = self.inner.id, %node, "fault injection: node killed");
        self.inner.backend.kill(node)
    }

    /// The current incarnation of `node`, as this process knows it: a number that changes each
    /// time the node restarts and rejoins (and is never reused for it), so that a caller can
    /// tell "the node I worked with" from "the node now under that id". The soft NIC counts
    /// from 1 ([`Cluster::restart`]); the verbs backend draws a random number per process start
    /// (0 while a peer has not joined yet).
    pub fn incarnation(&self, node: NodeId) -> Result<u64> {
        self.check_node(node)?;
        Ok(self.inner.backend.incarnation(node))
    }

    /// Fault injection: dead `node` (see [`Cluster::kill`]) comes back as a new incarnation,
    /// as if its process had been started again and had rejoined. Supported by the soft NIC;
    /// other backends fail with [`Error::Backend`] (on the verbs backend, start the process
    /// again: it rejoins by itself). A live node is refused with [`Error::Backend`].
    ///
    /// # What survives (soft NIC; the verbs backend behaves alike)
    /// - **Memory**: the node's memory is zeroed. The values of shared variables, SC
    ///   locations and lock words that lived there are lost; the objects allocated on it stay
    ///   allocated (in a multi-process cluster, the new process re-creates them in the same
    ///   order, so that layouts agree).
    /// - **Work of or towards the dead incarnation** never lands in the new one.
    /// - **Contexts** opened before the restart never reach the new incarnation: on the
    ///   restarted node every call fails with [`Error::PeerDead`]; on other nodes every post and
    ///   poll towards it fails with `PeerDead` (its reason says it restarted), the rest works.
    ///   Open a new context to work with the new incarnation: not reporting the restart would
    ///   let a thread mix state of two incarnations silently.
    /// - [`Cluster::check_alive`] reports the node alive again and [`Cluster::incarnation`]
    ///   changes.
    ///
    /// A fault-injection hook: a post from an old context that is under way at the very moment
    /// of the restart (past its incarnation check, not yet at the NIC's liveness check) may
    /// still reach the new incarnation; on the verbs backend this cannot happen (an old queue
    /// pair leads to the dead process).
    pub fn restart(&self, node: NodeId) -> Result<()> {
        self.check_node(node)?;
        tracing::warn!(target: "loco::rdmawait", cluster = self.inner.id, %node, "fault injection: node restarted");
        self.inner.backend.restart(node)
    }

    /// Fails with [`Error::Shutdown`] once [`Cluster::shutdown`] was called: loops that only
    /// read local memory (a lock's spin) check it so that a shutdown frees them.
    pub fn check_open(&self) -> Result<()> {
        if self.inner.shut_down.load(Ordering::SeqCst) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Stops the NICs: later posts fail with [`Error::Shutdown`], and so does every wait, poll
    /// or quiesce that would block (one already blocked returns promptly). Completions that are
    /// already there are still delivered.
    pub fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::SeqCst);
        self.inner.backend.shutdown();
    }

    /// The per-cluster state of type `T` of a library layer, created by `init` on first use.
    ///
    /// Layers above rdmawait keep their cluster-wide words here (e.g. the global fence's target
    /// words), so that they are allocated once per cluster.
    pub fn extension<T: Any + Send + Sync>(
        &self,
        init: impl FnOnce(&Cluster) -> Result<T>,
    ) -> Result<Arc<T>> {
        let key = TypeId::of::<T>();
        let mut map = self.inner.extensions.lock();
        if let Some(v) = map.get(&key) {
            return Ok(v
                .clone()
                .downcast::<T>()
                .expect("extension keyed by its TypeId"));
        }
        let v = Arc::new(init(self)?);
        map.insert(key, v.clone());
        Ok(v)
    }

    /// Checks that `loc` belongs to this cluster, names a known node and lies within its memory;
    /// returns (first word, word count).
    #[inline]
    pub fn check(&self, loc: &Loc) -> Result<(usize, usize)> {
        if loc.cluster != self.inner.id {
            return Err(Error::ForeignLocation {
                loc: loc.cluster,
                cluster: self.inner.id,
            });
        }
        self.check_node(loc.node())?;
        loc.word_range(self.inner.sizes[loc.node().index()])
    }

    /// Checks `loc` as [`Cluster::check`] and that it is exactly one word; returns its index.
    #[inline]
    pub fn check_word(&self, loc: &Loc) -> Result<usize> {
        let (w, n) = self.check(loc)?;
        if n != 1 {
            return Err(Error::NotAWord { len: loc.len() });
        }
        Ok(w)
    }

    fn word_of(&self, loc: &Loc) -> Result<(NodeId, usize)> {
        let w = self.check_word(loc)?;
        self.local_node(loc.node())?;
        Ok((loc.node(), w))
    }

    fn local_node(&self, node: NodeId) -> Result<()> {
        if self.inner.backend.is_local(node) {
            Ok(())
        } else {
            Err(Error::Backend {
                backend: self.inner.backend.name(),
                message: format!(
                    "{node} belongs to another process; its memory cannot be read directly"
                ),
                source: None,
            })
        }
    }
}

/// The incarnation a node had when an object was made on it ([`Cluster::incarnation`]): an
/// object whose words live on a node that restarted since has lost them (they came back
/// zeroed), and the layers above refuse it from then on rather than read the zeroes as its
/// state or write into them.
#[derive(Debug)]
pub struct MadeOn {
    node: NodeId,
    /// 0 until the backend knows the node's incarnation (a verbs peer not joined yet): then the
    /// first check fixes it.
    incarnation: AtomicU64,
}

impl MadeOn {
    /// Notes `node`'s incarnation now; [`Error::UnknownNode`] if there is no such node.
    pub fn new(cluster: &Cluster, node: NodeId) -> Result<MadeOn> {
        Ok(MadeOn {
            node,
            incarnation: AtomicU64::new(cluster.incarnation(node)?),
        })
    }

    /// The node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// [`Error::PeerDead`] naming the node if it restarted since: its reason says that `what`
    /// (e.g. "the lock") lost its words and that the caller should make it again.
    pub fn check(&self, cluster: &Cluster, what: &str) -> Result<()> {
        let now = cluster.incarnation(self.node)?;
        let made =
            match self
                .incarnation
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => now,
                Err(made) => made,
            };
        if now != made {
            return Err(Error::PeerDead {
                node: self.node,
                reason: format!(
                    "restarted since {what} was made (incarnation {made}, now {now}): its \
                     words came back zeroed; make {what} again"
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_env` over a fake environment.
    fn kind(env: &[(&str, &str)]) -> Result<BackendKind> {
        BackendKind::from_lookup(|var| {
            env.iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn backend_kind_from_the_environment() {
        assert_eq!(kind(&[]).unwrap(), BackendKind::Soft);
        assert_eq!(kind(&[("LOCO_BACKEND", "")]).unwrap(), BackendKind::Soft);
        assert_eq!(
            kind(&[("LOCO_BACKEND", "soft")]).unwrap(),
            BackendKind::Soft
        );
        assert_eq!(
            kind(&[("LOCO_BACKEND", "verbs")]).unwrap(),
            BackendKind::Verbs
        );
        assert_eq!(
            kind(&[("LOCO_BACKEND", " verbs\n")]).unwrap(),
            BackendKind::Verbs
        );
        // The former name, when the new one is unset; the new one wins.
        assert_eq!(
            kind(&[("LOCO_TEST_BACKEND", "verbs")]).unwrap(),
            BackendKind::Verbs
        );
        assert_eq!(
            kind(&[("LOCO_BACKEND", "soft"), ("LOCO_TEST_BACKEND", "verbs")]).unwrap(),
            BackendKind::Soft
        );
        let e = kind(&[("LOCO_TEST_BACKEND", "rxe")]).unwrap_err();
        assert!(
            matches!(&e, Error::UnknownBackend { name, var: Some("LOCO_TEST_BACKEND") } if name == "rxe"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "unknown backend `rxe` in LOCO_TEST_BACKEND: expected `soft` or `verbs`"
        );
    }

    #[test]
    fn backend_kind_parses_and_names() {
        for k in [BackendKind::Soft, BackendKind::Verbs] {
            assert_eq!(k.name().parse::<BackendKind>().unwrap(), k);
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(BackendKind::default(), BackendKind::Soft);
        let e = "Verbs".parse::<BackendKind>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown backend `Verbs`: expected `soft` or `verbs`"
        );
        assert!(BackendKind::Soft.is_built());
        assert_eq!(BackendKind::Verbs.is_built(), cfg!(feature = "verbs"));
    }

    #[test]
    fn the_soft_backend_keeps_the_builder_as_it_was() {
        let c = Cluster::builder()
            .nodes(3)
            .memory_per_node(64)
            .soft(Schedule::Chaos { seed: 1 })
            .backend(BackendKind::Soft)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!((c.backend_name(), c.nodes()), ("soft", 3));
        assert!(c.alloc_words(NodeId(2), 8).is_ok());
        assert!(
            c.alloc_word(NodeId(2)).is_err(),
            "64 bytes per node, as set"
        );
    }

    #[test]
    fn killed_nodes_are_reported_dead_and_shutdown_is_seen() {
        let c = Cluster::builder().nodes(3).build().unwrap();
        assert!(c.check_alive(NodeId(1)).is_ok() && c.is_alive(NodeId(2)));
        c.kill(NodeId(1)).unwrap();
        let e = c.check_alive(NodeId(1)).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::PeerDead {
                    node: NodeId(1),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(c.is_alive(NodeId(0)) && !c.is_alive(NodeId(1)));
        assert!(matches!(c.kill(NodeId(3)), Err(Error::UnknownNode { .. })));
        assert!(!c.is_alive(NodeId(9)));
        assert!(c.check_open().is_ok());
        c.shutdown();
        assert!(matches!(c.check_open(), Err(Error::Shutdown)));
    }

    #[cfg(not(feature = "verbs"))]
    #[test]
    fn verbs_without_the_feature_is_a_typed_error() {
        let e = Cluster::builder().backend(BackendKind::Verbs).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BackendNotBuilt {
                    backend: "verbs",
                    feature: "verbs"
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("enable the `verbs` feature"), "{e}");
    }

    #[cfg(feature = "verbs")]
    #[test]
    fn verbs_then_soft_builds_on_the_soft_nic() {
        // Choosing verbs reads the environment's device settings but opens no device; switching
        // back to soft undoes it.
        if crate::VerbsConfig::from_env().is_err() {
            return; // bad LOCO_RDMA_* settings in this environment: not what is tested here
        }
        let b = Cluster::builder().backend(BackendKind::Verbs).unwrap();
        assert!(format!("{b:?}").contains("verbs: Some"));
        let c = b.backend(BackendKind::Soft).unwrap().build().unwrap();
        assert_eq!(c.backend_name(), "soft");
    }
}
