//! Node ids, work ids and location handles.

use std::fmt;

use crate::{Error, Result};

/// Bytes in a word, the unit of memory and of atomicity.
pub const WORD: u64 = 8;

/// A node of the cluster (`n0`, `n1`, ...): one machine with one RDMA NIC.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct NodeId(pub u16);

impl NodeId {
    /// The node's index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl From<u16> for NodeId {
    fn from(n: u16) -> Self {
        NodeId(n)
    }
}

/// A work id `d` (docs/model.md §1): a tag on remote operations; `wait(d)` waits for the thread's earlier
/// operations tagged `d`. Work ids are per thread.
///
/// User ids are made with [`WorkId::new`]; ids with the top bit set are reserved for the libraries
/// (see [`WorkId::internal`]) so that, say, a global fence never waits on a user's tag.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct WorkId(u64);

impl WorkId {
    const INTERNAL: u64 = 1 << 63;
    /// The ids an async context hands out, one per operation (`aio`): neither a user's nor a
    /// library's id can name them.
    const TASK: u64 = 1 << 62;

    /// A user work id.
    pub const fn new(id: u32) -> Self {
        WorkId(id as u64)
    }

    /// A work id reserved for a library layer (`tag` names the layer's use of it).
    pub const fn internal(tag: u32) -> Self {
        WorkId(Self::INTERNAL | tag as u64)
    }

    /// The id as a number (the top bit set for a library's id): for tools that keep work ids
    /// in their own tables, such as the litmus explorer.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whether this id is reserved for a library layer.
    pub const fn is_internal(self) -> bool {
        self.0 & Self::INTERNAL != 0
    }

    /// A fresh id of an async context (`aio`), the `n`th it hands out.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) const fn task(n: u32) -> Self {
        WorkId(Self::TASK | n as u64)
    }

    /// Whether this is a fresh id of an async context (`aio`).
    pub(crate) const fn is_task(self) -> bool {
        self.0 & Self::TASK != 0 && !self.is_internal()
    }

    /// The id of operations posted through the raw (rdmatso) layer, which have no work id.
    pub(crate) const RAW: WorkId = WorkId::internal(u32::MAX);
}

impl fmt::Display for WorkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_internal() {
            write!(f, "d#{}", self.0 & !Self::INTERNAL)
        } else if self.0 & Self::TASK != 0 {
            write!(f, "d@{}", self.0 & !Self::TASK)
        } else {
            write!(f, "d{}", self.0)
        }
    }
}

impl From<u32> for WorkId {
    fn from(id: u32) -> Self {
        WorkId::new(id)
    }
}

/// A location: `len` bytes at byte `offset` of a node's registered memory (docs/model.md §1).
///
/// Handles are cheap to copy. They are made by [`Cluster::alloc`](crate::Cluster::alloc) and
/// narrowed with [`Loc::word`] and [`Loc::slice`]; every access is checked against the node's
/// memory, so a handle can never reach outside it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Loc {
    pub(crate) cluster: u32,
    node: NodeId,
    offset: u64,
    len: u64,
}

impl Loc {
    pub(crate) fn new(cluster: u32, node: NodeId, offset: u64, len: u64) -> Self {
        Loc {
            cluster,
            node,
            offset,
            len,
        }
    }

    /// The node holding the location.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Byte offset in the node's registered memory.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the location is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of whole words.
    pub fn words(&self) -> u64 {
        self.len / WORD
    }

    /// Word `i` of this location ([`Error::OutOfRange`] past its end, for any `i`).
    pub fn word(&self, i: u64) -> Result<Loc> {
        match i.checked_mul(WORD) {
            Some(offset) => self.slice(offset, WORD),
            None => Err(self.out_of_range(u64::MAX, WORD)),
        }
    }

    /// `len` bytes from byte `offset` within this location ([`Error::Misaligned`] or
    /// [`Error::OutOfRange`] otherwise, for any arguments). A zero-length slice is allowed.
    pub fn slice(&self, offset: u64, len: u64) -> Result<Loc> {
        if offset % WORD != 0 || len % WORD != 0 {
            return Err(Error::Misaligned {
                offset: self.offset.saturating_add(offset),
                len,
            });
        }
        match (offset.checked_add(len), self.offset.checked_add(offset)) {
            (Some(end), Some(at)) if end <= self.len => {
                Ok(Loc::new(self.cluster, self.node, at, len))
            }
            _ => Err(self.out_of_range(offset, len)),
        }
    }

    fn out_of_range(&self, offset: u64, len: u64) -> Error {
        Error::OutOfRange {
            node: self.node,
            offset: self.offset.saturating_add(offset),
            len,
            size: self.offset.saturating_add(self.len),
        }
    }

    /// The location's first word index and word count, after checking alignment and that it
    /// lies within `size_bytes`.
    #[inline]
    pub(crate) fn word_range(&self, size_bytes: u64) -> Result<(usize, usize)> {
        if self.offset % WORD != 0 || self.len % WORD != 0 {
            return Err(Error::Misaligned {
                offset: self.offset,
                len: self.len,
            });
        }
        match self.offset.checked_add(self.len) {
            Some(end) if end <= size_bytes => match (
                usize::try_from(self.offset / WORD),
                usize::try_from(self.len / WORD),
            ) {
                (Ok(first), Ok(words)) => Ok((first, words)),
                _ => Err(Error::OutOfRange {
                    node: self.node,
                    offset: self.offset,
                    len: self.len,
                    size: size_bytes,
                }),
            },
            _ => Err(Error::OutOfRange {
                node: self.node,
                offset: self.offset,
                len: self.len,
                size: size_bytes,
            }),
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{:#x}[{}]", self.node, self.offset, self.len)
    }
}

/// How the global fence reads a node's dummy word (docs/model.md §5.2, "The fence's read"):
/// what [`Ctx::fence_read`](crate::Ctx::fence_read) posts.
///
/// Both give the fence its guarantee: the read's remote step waits until every earlier write of
/// the queue pair has landed (a get: rule 6; a remote CAS that fails: rule 9, the same premise
/// plus the target's remote-atomic lock), so once its completion is polled they all have. They
/// differ in cost only. On hardware NICs a read is as cheap as anything; on Soft-RoCE the
/// responder defers every RDMA READ to a kernel tasklet and runs atomics inline, so a get
/// costs 1.6-1.8 times a remote CAS there (docs/simulation.md §3).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum FenceRead {
    /// A get of the word (the paper's fence).
    #[default]
    Get,
    /// A remote CAS of the word that cannot succeed: it expects
    /// [`FENCE_CAS_EXPECTED`], which the dummy word never holds, so it
    /// reads the word and writes nothing (rule 9); on Soft-RoCE, which writes a failed CAS's
    /// value back, it writes the word's own value, which changes nothing.
    Cas,
}

impl FenceRead {
    /// `get` or `cas`.
    pub fn name(self) -> &'static str {
        match self {
            FenceRead::Get => "get",
            FenceRead::Cas => "cas",
        }
    }

    /// The fence read named `get` or `cas`.
    pub fn by_name(name: &str) -> Option<FenceRead> {
        match name {
            "get" => Some(FenceRead::Get),
            "cas" => Some(FenceRead::Cas),
            _ => None,
        }
    }
}

/// The value a [`FenceRead::Cas`] expects (and would write): a fence's dummy word never holds
/// it.
pub const FENCE_CAS_EXPECTED: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_ids_user_and_internal_do_not_collide() {
        assert!(!WorkId::new(u32::MAX).is_internal());
        assert!(WorkId::internal(0).is_internal());
        assert_ne!(WorkId::new(3), WorkId::internal(3));
        assert_eq!(WorkId::new(3).to_string(), "d3");
        assert_eq!(WorkId::internal(3).to_string(), "d#3");
        assert_eq!(WorkId::task(3).to_string(), "d@3");
        assert!(!WorkId::task(3).is_internal());
        assert_ne!(WorkId::task(3), WorkId::new(3));
    }

    #[test]
    fn slices_stay_inside_their_location() {
        let l = Loc::new(1, NodeId(2), 64, 32);
        assert_eq!(l.word(3).unwrap(), Loc::new(1, NodeId(2), 88, 8));
        assert!(matches!(l.word(4), Err(Error::OutOfRange { .. })));
        assert!(matches!(l.slice(8, 4), Err(Error::Misaligned { .. })));
        assert_eq!(l.slice(8, 16).unwrap().words(), 2);
        assert_eq!(l.to_string(), "n2+0x40[32]");
    }

    #[test]
    fn word_range_checks_memory_size() {
        let l = Loc::new(1, NodeId(0), 64, 16);
        assert_eq!(l.word_range(80).unwrap(), (8, 2));
        assert!(matches!(
            l.word_range(72),
            Err(Error::OutOfRange { size: 72, .. })
        ));
        assert!(matches!(
            Loc::new(1, NodeId(0), 4, 8).word_range(80),
            Err(Error::Misaligned { .. })
        ));
    }
}
