//! The NIC interface under the rdmawait layer, and its implementations.
//!
//! A [`Backend`] is the NICs of a cluster: it owns every node's registered memory and opens, for a
//! thread bound to a node, a [`ThreadNic`]: one queue pair towards every node (loop-back included)
//! and one completion queue. The layers above ([`Ctx`](crate::Ctx) and everything built on it) talk
//! to this interface only, so a new NIC plugs in without changing them.
//!
//! Backends: [`soft`] (an in-process NIC that executes the operational model of docs/model.md §4, the
//! default) and, with the `verbs` feature, the ibverbs backend.
//!
//! Addresses here are word indices into a node's registered memory. [`Ctx`](crate::Ctx) checks
//! range, alignment and locality before posting; a backend must still refuse (not index) a word
//! outside a node's memory, since [`ThreadNic`] is public too ([`WorkRequest::check_ranges`]).

use std::fmt;
use std::time::Duration;

use crate::{NodeId, Result};

pub mod soft;
#[cfg(feature = "verbs")]
pub mod verbs;
// The verbs backend's rendezvous parts that need no device (wire format, handshake, listener),
// built without the feature too so that their tests run where there is no RDMA.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
#[path = "verbs/rendezvous/mod.rs"]
pub(crate) mod rendezvous;

/// One work request, as a NIC executes it (docs/model.md §2, phases of remote operations). Word indices;
/// `local` is in the posting thread's node, `remote` in the target node's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkRequest {
    /// RDMA WRITE: NIC local read of `words` words at `local` (nLR), then remote write at `remote`
    /// (nRW). The local read happens when the NIC gets to the request, not at post time.
    Write {
        /// First local source word.
        local: usize,
        /// First remote destination word.
        remote: usize,
        /// Number of words.
        words: usize,
    },
    /// RDMA READ: NIC remote read at `remote` (nRR), then local write at `local` (nLW).
    Read {
        /// First local destination word.
        local: usize,
        /// First remote source word.
        remote: usize,
        /// Number of words.
        words: usize,
    },
    /// ATOMIC CMP_AND_SWP on the word `remote`; the old value is written to `local`.
    CompareSwap {
        /// Remote target word.
        remote: usize,
        /// Expected value.
        expected: u64,
        /// Value written if the old value equals `expected`.
        new: u64,
        /// Local word receiving the old value.
        local: usize,
    },
    /// ATOMIC FETCH_AND_ADD (wrapping) on the word `remote`; the old value is written to `local`.
    FetchAdd {
        /// Remote target word.
        remote: usize,
        /// Addend.
        add: u64,
        /// Local word receiving the old value.
        local: usize,
    },
    /// Remote fence: every earlier request towards the node is ordered before every later one
    /// (docs/model.md rule 1). Produces no completion.
    Fence,
}

impl WorkRequest {
    /// The operation's name: `put`, `get`, `rcas`, `rfaa` or `rfence`.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkRequest::Write { .. } => "put",
            WorkRequest::Read { .. } => "get",
            WorkRequest::CompareSwap { .. } => "rcas",
            WorkRequest::FetchAdd { .. } => "rfaa",
            WorkRequest::Fence => "rfence",
        }
    }

    /// Whether the request produces a completion (everything but [`WorkRequest::Fence`]).
    pub fn completes(&self) -> bool {
        !matches!(self, WorkRequest::Fence)
    }

    /// The words the request touches: `(first local word, first remote word, word count)`;
    /// `None` for a fence.
    pub fn span(&self) -> Option<(usize, usize, usize)> {
        match *self {
            WorkRequest::Write {
                local,
                remote,
                words,
            }
            | WorkRequest::Read {
                local,
                remote,
                words,
            } => Some((local, remote, words)),
            WorkRequest::CompareSwap { remote, local, .. }
            | WorkRequest::FetchAdd { remote, local, .. } => Some((local, remote, 1)),
            WorkRequest::Fence => None,
        }
    }

    /// Checks every word range of the request: its local words against the `local_words` words
    /// of the posting thread's node `from`, its remote words against the `remote_words` words of
    /// the target node `to`. Fails with [`Error::OutOfRange`](crate::Error::OutOfRange) (byte
    /// offsets, saturated) on a range that leaves the node's memory or whose end overflows.
    pub fn check_ranges(
        &self,
        from: NodeId,
        local_words: usize,
        to: NodeId,
        remote_words: usize,
    ) -> Result<()> {
        match self.span() {
            Some((local, remote, words)) => {
                Self::check_range(from, local, words, local_words)?;
                Self::check_range(to, remote, words, remote_words)
            }
            None => Ok(()),
        }
    }

    /// Checks that words `first .. first + count` lie within `size` words of `node`.
    pub(crate) fn check_range(node: NodeId, first: usize, count: usize, size: usize) -> Result<()> {
        match first.checked_add(count) {
            Some(end) if end <= size => Ok(()),
            _ => {
                let bytes = |w: usize| (w as u64).saturating_mul(crate::WORD);
                Err(crate::Error::OutOfRange {
                    node,
                    offset: bytes(first),
                    len: bytes(count),
                    size: bytes(size),
                })
            }
        }
    }
}

/// The NICs of a cluster.
///
/// Implementations must give, per queue pair, the ordering of docs/model.md §3 and §4: a weaker
/// NIC breaks the guarantees every layer above documents.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Short name (`soft`, `verbs`).
    fn name(&self) -> &'static str;
    /// Number of nodes.
    fn nodes(&self) -> usize;
    /// Size of a node's registered memory in words.
    fn words(&self, node: NodeId) -> usize;
    /// Whether this process can open threads on, and read the memory of, `node` (false for the
    /// nodes of other processes in a multi-process cluster).
    fn is_local(&self, node: NodeId) -> bool {
        let _ = node;
        true
    }
    /// How a global fence should read a node's dummy word on this backend, unless the cluster's
    /// builder says otherwise ([`ClusterBuilder::fence_read`](crate::ClusterBuilder::fence_read)):
    /// the cheaper of the two where they differ. Default: a get.
    fn fence_read(&self) -> crate::FenceRead {
        crate::FenceRead::Get
    }
    /// Opens a thread's NIC on `node`: one queue pair towards every node and one completion queue.
    fn open(&self, node: NodeId) -> Result<Box<dyn ThreadNic>>;
    /// Blocks until every posted operation of every thread has fully taken effect in memory
    /// (completion notices excepted), or the timeout expires.
    fn quiesce(&self, timeout: Duration) -> Result<()>;
    /// Reads a word of a local node's memory directly, bypassing NICs and store buffers.
    fn peek(&self, node: NodeId, word: usize) -> Result<u64>;
    /// Writes a word of a local node's memory directly, bypassing NICs and store buffers.
    fn poke(&self, node: NodeId, word: usize, value: u64) -> Result<()>;
    /// Stops the NICs; later posts fail with [`Error::Shutdown`](crate::Error::Shutdown).
    fn shutdown(&self);
    /// Why `node` is considered dead (its process was killed, it was partitioned away, it stopped
    /// answering), or `None` while it is alive. Once dead, an incarnation stays dead; the node
    /// may come back as a new one ([`Backend::incarnation`], [`Backend::restart`]).
    fn dead(&self, node: NodeId) -> Option<String> {
        let _ = node;
        None
    }
    /// An identifier of `node`'s current incarnation, as this backend knows it: it changes
    /// when the node restarts and rejoins, and is never reused for the same node. 0 while
    /// unknown. Backends without restarts keep one incarnation per node.
    fn incarnation(&self, node: NodeId) -> u64 {
        let _ = node;
        1
    }
    /// Fault injection: brings dead `node` back as a new incarnation, with fresh (zeroed)
    /// memory, as if its process had been started again. Backends that cannot fail with
    /// [`Error::Backend`](crate::Error::Backend).
    fn restart(&self, node: NodeId) -> Result<()> {
        Err(crate::Error::Backend {
            backend: self.name(),
            message: format!("cannot restart {node}: this backend has no fault injection"),
            source: None,
        })
    }
    /// Fault injection: makes `node` dead, as if its process had been killed. Backends that
    /// cannot simulate it fail with [`Error::Backend`](crate::Error::Backend).
    fn kill(&self, node: NodeId) -> Result<()> {
        Err(crate::Error::Backend {
            backend: self.name(),
            message: format!("cannot kill {node}: this backend has no fault injection"),
            source: None,
        })
    }
}

/// One thread's view of the NICs: its queue pairs (one per target node) and its completion queue,
/// plus the CPU's access to its own node's memory (which a backend may model, as the soft NIC's
/// store buffer does).
pub trait ThreadNic: Send + fmt::Debug {
    /// Posts `wr` to the queue pair towards `target`. Requests on one queue pair are issued in
    /// post order, after every earlier CPU store of this thread is visible (docs/model.md §4).
    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()>;
    /// Blocks until the earliest unpolled request towards `target` has completed and consumes its
    /// completion (docs/model.md §2 `poll(n)`); the caller guarantees there is one. A completion is
    /// reported only after the request's local writes are visible to this thread.
    ///
    /// On [`Error::Timeout`](crate::Error::Timeout) nothing was consumed; on any other error the
    /// request is consumed (it failed).
    fn poll(&mut self, target: NodeId, timeout: Duration) -> Result<()>;
    /// [`ThreadNic::poll`] without waiting and without reading the clock: `Some` with what
    /// `poll` would return once the earliest unpolled request towards `target` has completed
    /// (or failed), `None` if it has not yet, or if the backend cannot tell more cheaply than
    /// by polling (the default; the caller then polls). For `wait`, whose request has often
    /// completed by the time it looks (Soft-RoCE completes atomics inside the post).
    fn try_poll(&mut self, target: NodeId) -> Option<Result<()>> {
        let _ = target;
        None
    }
    /// Benchmark support, outside the model: `n` requests `wr` towards `target`, one at a time,
    /// each posted and polled for with the bare device calls and nothing of this library in
    /// between (no bookkeeping, no peer checks, no work ids), timed from one completion to the
    /// next on [`crate::clock::now`]; each request's time in nanoseconds. What `loco bench ops
    /// --vs-raw` compares loco's own post + wait with, on the same queue pair in the same
    /// process. `None` where the backend has no bare path (the default). Refused while this
    /// thread has requests in flight. Each poll gives up after `timeout`.
    #[doc(hidden)]
    fn raw_requests(
        &mut self,
        target: NodeId,
        wr: WorkRequest,
        n: usize,
        timeout: Duration,
    ) -> Option<Result<Vec<u64>>> {
        let _ = (target, wr, n, timeout);
        None
    }
    /// CPU load of a local word (x86-TSO: newest own buffered store, else memory).
    fn load(&mut self, word: usize) -> Result<u64>;
    /// CPU store to a local word.
    fn store(&mut self, word: usize, value: u64) -> Result<()>;
    /// CPU compare-and-swap on a local word; returns the old value. Atomic on memory, it ignores
    /// the remote-atomic lock (docs/model.md §4).
    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64>;
    /// CPU memory fence: drains the store buffer.
    fn mfence(&mut self) -> Result<()>;

    /// Opens a batch (batches nest): until the matching [`ThreadNic::batch_end`], requests
    /// towards one node may wait and go to the device together (one doorbell), as long as the
    /// thread only posts; any other operation sends them first. Requests keep their post
    /// order per queue pair and a post's checks are the same, but the device's refusal of a
    /// held request surfaces when it is polled, not at the post. The default does nothing:
    /// every request goes at once.
    fn batch_begin(&mut self) {}

    /// Closes a batch; the outermost one sends every request still waiting. A request that
    /// cannot be sent then fails when it is polled (with the queue pair's failure).
    fn batch_end(&mut self) {}

    /// The completion channel of this thread's completion queue, for async tasks to sleep on
    /// ([`crate::aio`]); `None` where completions come only from polling (the soft NIC).
    #[cfg(feature = "tokio")]
    fn completion_events(&self) -> Option<std::sync::Arc<dyn CompletionEvents>> {
        None
    }
}

/// A shared backend is a backend: keep an `Arc` of a backend you give to
/// [`Cluster::with_backend`](crate::Cluster::with_backend), to reach its own methods later (e.g.
/// the soft NIC's fault injection in tests).
impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn nodes(&self) -> usize {
        (**self).nodes()
    }
    fn words(&self, node: NodeId) -> usize {
        (**self).words(node)
    }
    fn is_local(&self, node: NodeId) -> bool {
        (**self).is_local(node)
    }
    fn open(&self, node: NodeId) -> Result<Box<dyn ThreadNic>> {
        (**self).open(node)
    }
    fn quiesce(&self, timeout: Duration) -> Result<()> {
        (**self).quiesce(timeout)
    }
    fn peek(&self, node: NodeId, word: usize) -> Result<u64> {
        (**self).peek(node, word)
    }
    fn poke(&self, node: NodeId, word: usize, value: u64) -> Result<()> {
        (**self).poke(node, word, value)
    }
    fn shutdown(&self) {
        (**self).shutdown()
    }
    fn dead(&self, node: NodeId) -> Option<String> {
        (**self).dead(node)
    }
    fn incarnation(&self, node: NodeId) -> u64 {
        (**self).incarnation(node)
    }
    fn restart(&self, node: NodeId) -> Result<()> {
        (**self).restart(node)
    }
    fn kill(&self, node: NodeId) -> Result<()> {
        (**self).kill(node)
    }
}

/// A completion channel: a file descriptor that becomes readable when a completion arrives on
/// an armed completion queue (ibverbs' `ibv_comp_channel`). Used by [`crate::aio`].
#[cfg(feature = "tokio")]
pub trait CompletionEvents: Send + Sync {
    /// The channel's file descriptor (non-blocking).
    fn fd(&self) -> std::os::fd::RawFd;
    /// Arms the completion queue: the next completion added to it makes `fd` readable
    /// (`ibv_req_notify_cq`). Completions already in the queue do not.
    fn arm(&self) -> Result<()>;
    /// Reads and acknowledges every event waiting on the channel (`ibv_get_cq_event`,
    /// `ibv_ack_cq_events`); returns how many there were.
    fn drain(&self) -> Result<usize>;
}
