//! Clusters: nodes, their registered memory, and the thread contexts bound to them.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::backend::soft::{Schedule, SoftBackend};
use crate::backend::Backend;
use crate::{Ctx, Error, Loc, NodeId, Result, WORD};

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
    timeout: Duration,
    extensions: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

/// Builds a [`Cluster`]; got from [`Cluster::builder`].
#[derive(Debug)]
#[must_use]
pub struct ClusterBuilder {
    nodes: usize,
    memory: u64,
    schedule: Schedule,
    timeout: Duration,
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
            timeout: DEFAULT_TIMEOUT,
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

    /// Registered memory per node in bytes, rounded up to whole words (default 1 MiB).
    pub fn memory_per_node(mut self, bytes: u64) -> Self {
        self.memory = bytes.div_ceil(WORD) * WORD;
        self
    }

    /// Use the soft NIC with this schedule (the default backend, with [`Schedule::Immediate`]).
    pub fn soft(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// Timeout of [`Ctx::wait`], [`Ctx::raw`] polls and [`Cluster::quiesce`] (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Use the ibverbs backend on a real RDMA device instead of the soft NIC (feature `verbs`;
    /// see [`crate::backend::verbs`]). The schedule set with [`ClusterBuilder::soft`] is ignored.
    #[cfg(feature = "verbs")]
    pub fn verbs(mut self, config: crate::backend::verbs::VerbsConfig) -> Self {
        self.verbs = Some(config);
        self
    }

    /// Builds the cluster on the soft backend (or the verbs backend, if chosen).
    pub fn build(self) -> Result<Cluster> {
        #[cfg(feature = "verbs")]
        if let Some(config) = self.verbs {
            let words = (self.memory / WORD) as usize;
            return crate::backend::verbs::build_cluster(self.nodes, words, self.timeout, config);
        }
        if self.nodes == 0 || self.nodes > u16::MAX as usize {
            return Err(Error::Backend {
                backend: "soft",
                message: format!("a cluster needs 1..=65535 nodes, not {}", self.nodes),
                source: None,
            });
        }
        let words = (self.memory / WORD) as usize;
        let backend = SoftBackend::new(self.nodes, words, self.schedule);
        Ok(Cluster::with_backend(Box::new(backend), self.timeout))
    }
}

impl Cluster {
    /// A builder with the defaults: 2 nodes, 1 MiB each, soft NIC, [`Schedule::Immediate`].
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// A cluster over any backend (this is how the verbs backend, or your own, plugs in).
    pub fn with_backend(backend: Box<dyn Backend>, timeout: Duration) -> Cluster {
        let n = backend.nodes();
        let sizes: Vec<u64> = (0..n)
            .map(|i| backend.words(NodeId(i as u16)) as u64 * WORD)
            .collect();
        let sizes_for_next = sizes.iter().map(|&s| (0, s)).collect();
        Cluster {
            inner: Arc::new(Inner {
                id: NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed),
                backend,
                sizes,
                next: Mutex::new(sizes_for_next),
                timeout,
                extensions: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// This cluster's id, unique in the process (location handles carry it).
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Number of nodes.
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

    /// Checks that `node` exists.
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
    /// one process's own use: scratch words, per-thread lock state, dummy words that are only
    /// read.
    ///
    /// Private words come from the top of the node's memory, downwards, so they never shift the
    /// offsets [`Cluster::alloc`] hands out: in a multi-process cluster, each process may allocate
    /// private words lazily (when a thread first needs them) and shared objects still get the same
    /// locations in every process.
    pub fn alloc_private(&self, node: NodeId, bytes: u64) -> Result<Loc> {
        self.alloc_in(node, bytes, true)
    }

    fn alloc_in(&self, node: NodeId, bytes: u64, private: bool) -> Result<Loc> {
        self.check_node(node)?;
        let len = bytes.div_ceil(WORD) * WORD;
        let mut next = self.inner.next.lock();
        let (low, high) = &mut next[node.index()];
        let free = *high - *low;
        if len > free {
            return Err(Error::OutOfMemory {
                node,
                requested: len,
                free,
            });
        }
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
        self.alloc(node, n * WORD)
    }

    /// Binds a thread context to `node`: one queue pair towards every node and one completion
    /// queue. Create one per thread; a context is not shared between threads.
    pub fn context(&self, node: NodeId) -> Result<Ctx> {
        self.check_node(node)?;
        let nic = self.inner.backend.open(node)?;
        tracing::debug!(target: "loco::rdmawait", cluster = self.inner.id, %node, "context opened");
        Ok(Ctx::new(self.clone(), node, nic))
    }

    /// Blocks until every posted operation of every thread has fully taken effect in memory,
    /// with the cluster's default timeout. Use it before inspecting final values with
    /// [`Cluster::peek`].
    pub fn quiesce(&self) -> Result<()> {
        self.inner.backend.quiesce(self.inner.timeout)
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

    /// Stops the NICs: later posts fail with [`Error::Shutdown`].
    pub fn shutdown(&self) {
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
