//! The error types of `loco-sc`.

/// A state that does not fit a structure's fixed layout, or words that do not encode a state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// Encoding the state needs more words than the layout has (a value too big for the
    /// structure, e.g. one element more than its capacity).
    #[error("the state needs {needed} words, but the layout has {words}")]
    DoesNotFit {
        /// Words the encoding needs.
        needed: usize,
        /// Words the layout has.
        words: usize,
    },
    /// The words are not a valid encoding of the state.
    #[error("word {word} of the layout is not a valid encoding: {reason}")]
    Invalid {
        /// Index of the offending word.
        word: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An access to a word outside the layout.
    #[error("word {index} is outside the layout of {words} words")]
    OutOfLayout {
        /// The word asked for (of a range, the first one outside the layout).
        index: usize,
        /// Words the layout has.
        words: usize,
    },
    /// A range of words that starts after it ends, such as `2..1` (an empty range `i..i`
    /// inside the layout is no error: it reads nothing).
    #[error(
        "the word range {start}..{end} is backwards (it starts after it ends): give a range \
         start..end with start <= end <= {words} (the layout's words); start..start is empty"
    )]
    BackwardsRange {
        /// The range's start.
        start: usize,
        /// The range's end, less than its start.
        end: usize,
        /// Words the layout has.
        words: usize,
    },
    /// A layout of zero words: there is nothing to keep on the node.
    #[error("a layout needs at least one word")]
    Empty,
}

/// Everything that can go wrong with an SC location or a ported structure: bad input (a handle of
/// another cluster, a value that does not fit the layout, a full structure) or a failure of the
/// layers below.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the rdmawait layer (network, memory, timeouts of waits).
    #[error(transparent)]
    Rdma(#[from] loco_rdmawait::Error),
    /// An error of the node lock other than an rdmawait one.
    #[error(transparent)]
    Lock(loco_locks::Error),
    /// A location or structure made on one cluster, used with a context of another.
    #[error("location belongs to cluster #{loc}, not to the context's cluster #{cluster}")]
    ForeignLocation {
        /// Cluster that made the location or structure.
        loc: u32,
        /// Cluster of the context it was used with.
        cluster: u32,
    },
    /// A state that does not fit, or cannot be read from, the structure's layout.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A push onto a full [`BoundedQueue`](crate::BoundedQueue). Nothing was written.
    #[error("the queue is full (capacity {capacity})")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// An insert of a new key into a full [`FixedHashMap`](crate::FixedHashMap). Nothing was
    /// written.
    #[error("the map is full ({buckets} buckets, all taken)")]
    MapFull {
        /// The map's bucket count.
        buckets: usize,
    },
}

impl From<loco_locks::Error> for Error {
    fn from(e: loco_locks::Error) -> Self {
        match e {
            loco_locks::Error::Rdma(e) => Error::Rdma(e),
            other => Error::Lock(other),
        }
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl loco_rdmawait::RdmaCause for Error {
    fn rdma(&self) -> Option<&loco_rdmawait::Error> {
        match self {
            Error::Rdma(e) => Some(e),
            Error::Lock(e) => e.rdma(),
            _ => None,
        }
    }
}
