//! The error type of `loco-rdmawait` (and of the layers that add no failure modes of their own).

use std::time::Duration;

use crate::{NodeId, WorkId};

/// Everything a caller of the rdmawait layer can get wrong, and everything the network can do to it.
///
/// No operation panics or blocks forever on what a caller can cause: each failure is one of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The node is not part of the cluster.
    #[error("unknown node {node} (the cluster has {})", NodeCount(*nodes))]
    UnknownNode {
        /// The node asked for.
        node: NodeId,
        /// How many nodes the cluster has.
        nodes: usize,
    },
    /// An offset or length that is not a multiple of 8 bytes: memory is accessed in 8-byte words.
    #[error("misaligned location: offset {offset} and length {len} must be multiples of 8 bytes")]
    Misaligned {
        /// Byte offset of the location.
        offset: u64,
        /// Byte length of the location.
        len: u64,
    },
    /// The location does not fit in the node's registered memory, or (from [`Loc::word`] and
    /// [`Loc::slice`]) in the location it was cut from.
    ///
    /// [`Loc::word`]: crate::Loc::word
    /// [`Loc::slice`]: crate::Loc::slice
    #[error(
        "location [{offset}, {offset}+{len}) on {node} is out of range: it must end by byte \
         {size} (the end of the node's registered memory, or of the location it was cut from \
         with Loc::word or Loc::slice)"
    )]
    OutOfRange {
        /// Node of the location.
        node: NodeId,
        /// Byte offset.
        offset: u64,
        /// Byte length.
        len: u64,
        /// The byte the location had to end by: the size of the node's registered memory, or
        /// for [`Loc::word`](crate::Loc::word) and [`Loc::slice`](crate::Loc::slice) the end of
        /// the location narrowed.
        size: u64,
    },
    /// A word access (CPU `load`, `store`, `cas`; remote `rcas`, `rfaa`; a global fence's
    /// read; `Cluster::peek` and `poke`) on something other than one 8-byte word.
    #[error(
        "a word access (load, store, cas, rcas, rfaa, peek, poke) needs exactly one 8-byte \
         word, got {len} bytes: take one with Loc::word(i)"
    )]
    NotAWord {
        /// Byte length of the location given.
        len: u64,
    },
    /// An empty location (length 0) where data must move.
    #[error("empty location: nothing to transfer")]
    Empty,
    /// Source and destination of a put or get differ in length.
    #[error("length mismatch: destination has {dst} bytes, source {src}")]
    LengthMismatch {
        /// Destination length in bytes.
        dst: u64,
        /// Source length in bytes.
        src: u64,
    },
    /// A location on another node where the operation needs one on the thread's own node.
    #[error("location on {loc} is not local to this thread, which runs on {thread}")]
    NotLocal {
        /// Node of the location given.
        loc: NodeId,
        /// Node of the calling thread.
        thread: NodeId,
    },
    /// A location handle made by another cluster.
    #[error("location belongs to cluster #{loc}, not to this cluster #{cluster}")]
    ForeignLocation {
        /// Cluster that made the handle.
        loc: u32,
        /// Cluster it was used with.
        cluster: u32,
    },
    /// [`Cluster::free_private`](crate::Cluster::free_private) was given private memory that is
    /// not a whole block handed out by `alloc_private` and not given back yet.
    #[error(
        "free_private: {len} bytes at offset {offset} of {node} are not a block alloc_private \
         handed out and not given back yet (a second free, or a part of a block)"
    )]
    NotAPrivateBlock {
        /// Node of the location.
        node: NodeId,
        /// Its offset.
        offset: u64,
        /// Its length in bytes.
        len: u64,
    },
    /// A node's registered memory is exhausted.
    #[error("out of registered memory on {node}: asked for {requested} bytes, {free} free")]
    OutOfMemory {
        /// Node allocated on.
        node: NodeId,
        /// Bytes asked for.
        requested: u64,
        /// Bytes still free.
        free: u64,
    },
    /// `poll(n)` with no unpolled operation towards `n`: it would block forever.
    #[error("nothing to poll: no unpolled operation towards {node}")]
    NothingPending {
        /// Target node of the poll.
        node: NodeId,
    },
    /// A wait or poll did not finish in time; nothing was consumed, it can be retried.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What was waited for.
        what: TimeoutKind,
        /// The timeout that expired.
        after: Duration,
    },
    /// A work request completed with an error status (remote access error, bad rkey, ...).
    #[error("work request towards {node} failed: {status}")]
    Completion {
        /// Target node of the failed request.
        node: NodeId,
        /// The NIC's completion status.
        status: String,
    },
    /// The queue pair towards a node is in the error state; every later request on it fails.
    #[error("queue pair towards {node} is in the error state")]
    QpInError {
        /// Target node of the queue pair.
        node: NodeId,
    },
    /// A peer stopped responding.
    #[error("peer {node} is not responding: {reason}")]
    PeerDead {
        /// The unresponsive node.
        node: NodeId,
        /// What was observed.
        reason: String,
    },
    /// The cluster was shut down; its contexts can no longer post.
    #[error("the cluster was shut down")]
    Shutdown,
    /// A backend name that is neither `soft` nor `verbs` (from [`BackendKind::from_env`] or
    /// [`str::parse`]).
    ///
    /// [`BackendKind::from_env`]: crate::BackendKind::from_env
    #[error("unknown backend `{name}`{}: expected `soft` or `verbs`", .var.map(|v| format!(" in {v}")).unwrap_or_default())]
    UnknownBackend {
        /// The name given.
        name: String,
        /// The environment variable it came from, if any.
        var: Option<&'static str>,
    },
    /// A backend this build does not contain: its cargo feature is off.
    #[error("the {backend} backend is not in this build: enable the `{feature}` feature of loco-rdmawait (e.g. `--features loco-rdmawait/{feature}`, or the `{feature}` feature of any loco crate)")]
    BackendNotBuilt {
        /// The backend asked for (`verbs`).
        backend: &'static str,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// The backend could not be set up or used (device missing, library missing, ...).
    #[error("{backend} backend: {message}")]
    Backend {
        /// Backend name (`soft`, `verbs`).
        backend: &'static str,
        /// What went wrong, and what to do about it.
        message: String,
        /// The underlying OS error, where there is one.
        #[source]
        source: Option<std::io::Error>,
    },
}

/// A node count as [`Error::UnknownNode`] writes it: "1 node, n0", "3 nodes, n0 to n2".
struct NodeCount(usize);

impl std::fmt::Display for NodeCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => f.write_str("no nodes"),
            1 => f.write_str("1 node, n0"),
            n => write!(f, "{n} nodes, n0 to n{}", n - 1),
        }
    }
}

/// What a [`Error::Timeout`] was waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutKind {
    /// `wait(d)` on this work id.
    Wait(WorkId),
    /// `poll(n)` towards this node.
    Poll(NodeId),
    /// `Cluster::quiesce`.
    Quiesce,
    /// Something else, named.
    Other(&'static str),
}

impl std::fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimeoutKind::Wait(d) => write!(f, "wait({d})"),
            TimeoutKind::Poll(n) => write!(f, "poll({n})"),
            TimeoutKind::Quiesce => write!(f, "quiesce"),
            TimeoutKind::Other(s) => f.write_str(s),
        }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of a layer built on rdmawait that may come from the rdmawait layer itself (an
/// unknown node, a shutdown, a dead peer...): each layer's `Error` implements it, so that code
/// over several layers can ask the same question of all of them.
///
/// ```
/// use loco_rdmawait::{Cluster, Error, NodeId, RdmaCause};
/// let cluster = Cluster::builder().nodes(1).build()?;
/// let e = cluster.context(NodeId(7)).unwrap_err();
/// assert!(matches!(e.rdma(), Some(Error::UnknownNode { .. })));
/// # Ok::<(), Error>(())
/// ```
pub trait RdmaCause {
    /// The rdmawait error this error is, or wraps; `None` for an error of the layer's own.
    fn rdma(&self) -> Option<&Error>;
}

impl RdmaCause for Error {
    fn rdma(&self) -> Option<&Error> {
        Some(self)
    }
}
