//! A bounded FIFO queue of u64 (a ring buffer).

use std::collections::VecDeque;

use loco_rdmawait::Ctx;

use super::{Decoder, Encoder, Ported, Sequential, Words};
use crate::{Error, LayoutError, Result};

/// Words before the slots: `head` (index of the oldest element), `len`.
const HEADER: usize = 2;

/// A bounded FIFO queue of `u64`: a ring buffer of `capacity` slots. Ported as
/// [`PortedQueue`].
///
/// Layout: `head`, `len`, then `capacity` slots. A push onto a full queue returns
/// [`QueueRet::Full`] ([`Error::QueueFull`] through the typed methods) and changes nothing.
///
/// ```
/// use loco_sc::{BoundedQueue, PortedQueue};
/// use loco_rdmawait::{Cluster, NodeId};
///
/// let cluster = Cluster::builder().nodes(2).build()?;
/// let q = PortedQueue::new_on(&cluster, NodeId(1), &BoundedQueue::new(2))?;
/// let ctx = cluster.context(NodeId(0))?;
/// q.push(&ctx, 1)?;
/// q.push(&ctx, 2)?;
/// assert!(matches!(q.push(&ctx, 3), Err(loco_sc::Error::QueueFull { capacity: 2 })));
/// assert_eq!(q.pop(&ctx)?, Some(1));
/// assert_eq!(q.len(&ctx)?, 1);
/// # Ok::<(), loco_sc::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BoundedQueue {
    capacity: usize,
    items: VecDeque<u64>,
}

/// An operation of a [`BoundedQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueOp {
    /// Appends a value at the back.
    Push(u64),
    /// Removes the value at the front.
    Pop,
    /// The number of values.
    Len,
}

/// What a [`QueueOp`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueRet {
    /// The push succeeded.
    Pushed,
    /// The push found the queue full; nothing changed.
    Full,
    /// The value popped (`None`: the queue was empty).
    Popped(Option<u64>),
    /// The number of values.
    Len(usize),
}

/// Why a layout without slots is refused: a queue of capacity 0 (its layout is a head, a
/// length and the slots).
const NO_SLOT: &str = "a queue needs a capacity of at least 1 (its layout is a head, a length \
                       and at least one slot)";

impl BoundedQueue {
    /// An empty queue of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        BoundedQueue {
            capacity,
            // Grown as values are pushed: a large capacity costs nothing until it is used (a
            // queue made only to be ported, say, whose memory check must come first).
            items: VecDeque::with_capacity(capacity.min(64)),
        }
    }

    /// The layout size of a queue of `capacity` slots, in words (`usize::MAX` if that does not
    /// fit a `usize`: no node has that much memory).
    pub fn words_for(capacity: usize) -> usize {
        capacity.saturating_add(HEADER)
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The values, front first.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.items.iter().copied()
    }
}

impl Sequential for BoundedQueue {
    type Op = QueueOp;
    type Ret = QueueRet;

    fn words(&self) -> usize {
        Self::words_for(self.capacity)
    }

    /// Canonical form: `head` 0, the values from slot 0, the other slots 0.
    fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError> {
        let mut e = Encoder::new(out);
        e.push(0);
        e.push(self.items.len() as u64);
        self.items.iter().for_each(|v| e.push(*v));
        e.pad(self.capacity.saturating_sub(self.items.len()));
        e.finish()
    }

    fn decode(words: &[u64]) -> Result<Self, LayoutError> {
        let mut d = Decoder::new(words);
        let capacity = words.len().saturating_sub(HEADER);
        if capacity == 0 {
            return Err(LayoutError::Invalid {
                word: words.len(),
                reason: NO_SLOT,
            });
        }
        let head = d.next_at_most(capacity - 1, "the queue's head is not a slot index")?;
        let len = d.next_at_most(capacity, "the queue's length exceeds its capacity")?;
        let slots = &words[HEADER..];
        let items = (0..len).map(|k| slots[(head + k) % capacity]).collect();
        Ok(BoundedQueue { capacity, items })
    }

    fn apply(&mut self, op: QueueOp) -> QueueRet {
        match op {
            QueueOp::Push(_) if self.items.len() >= self.capacity => QueueRet::Full,
            QueueOp::Push(v) => {
                self.items.push_back(v);
                QueueRet::Pushed
            }
            QueueOp::Pop => QueueRet::Popped(self.items.pop_front()),
            QueueOp::Len => QueueRet::Len(self.items.len()),
        }
    }

    /// Fetches the header (one get), then for a pop the slot it names (one more get); writes
    /// only the header words and the pushed slot.
    fn apply_words(words: &mut Words<'_>, op: QueueOp) -> Result<QueueRet> {
        let capacity = words.len().saturating_sub(HEADER);
        if capacity == 0 {
            return Err(LayoutError::Invalid {
                word: words.len(),
                reason: NO_SLOT,
            }
            .into());
        }
        let hw = words.read_range(0..HEADER)?;
        let mut header = Decoder::new(&hw);
        let head = header.next_at_most(capacity - 1, "the queue's head is not a slot index")?;
        let len = header.next_at_most(capacity, "the queue's length exceeds its capacity")?;
        Ok(match op {
            QueueOp::Push(_) if len >= capacity => QueueRet::Full,
            QueueOp::Push(v) => {
                words.write(HEADER + (head + len) % capacity, v)?;
                words.write(1, len as u64 + 1)?;
                QueueRet::Pushed
            }
            QueueOp::Pop if len == 0 => QueueRet::Popped(None),
            QueueOp::Pop => {
                let v = words.read(HEADER + head)?;
                words.write(0, ((head + 1) % capacity) as u64)?;
                words.write(1, len as u64 - 1)?;
                QueueRet::Popped(Some(v))
            }
            QueueOp::Len => QueueRet::Len(len),
        })
    }
}

/// A [`BoundedQueue`] ported to RDMA: its ring on one node, every operation under that node's
/// lock; linearizable.
pub type PortedQueue = Ported<BoundedQueue>;

impl Ported<BoundedQueue> {
    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.words() - HEADER
    }

    /// Appends `value` at the back. Fails with [`Error::QueueFull`] if the queue is full (nothing
    /// is written then).
    pub fn push(&self, ctx: &Ctx, value: u64) -> Result<()> {
        match self.apply(ctx, QueueOp::Push(value))? {
            QueueRet::Pushed => Ok(()),
            QueueRet::Full => Err(Error::QueueFull {
                capacity: self.capacity(),
            }),
            other => unreachable!("Push returned {other:?}"),
        }
    }

    /// Removes the value at the front (`None`: the queue is empty).
    pub fn pop(&self, ctx: &Ctx) -> Result<Option<u64>> {
        match self.apply(ctx, QueueOp::Pop)? {
            QueueRet::Popped(v) => Ok(v),
            other => unreachable!("Pop returned {other:?}"),
        }
    }

    /// The number of values.
    pub fn len(&self, ctx: &Ctx) -> Result<usize> {
        match self.apply(ctx, QueueOp::Len)? {
            QueueRet::Len(n) => Ok(n),
            other => unreachable!("Len returned {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_queue_is_fifo_and_bounded() {
        let mut q = BoundedQueue::new(2);
        assert_eq!(q.apply(QueueOp::Push(1)), QueueRet::Pushed);
        assert_eq!(q.apply(QueueOp::Push(2)), QueueRet::Pushed);
        assert_eq!(q.apply(QueueOp::Push(3)), QueueRet::Full);
        assert_eq!(q.apply(QueueOp::Pop), QueueRet::Popped(Some(1)));
        assert_eq!(q.apply(QueueOp::Push(4)), QueueRet::Pushed);
        assert_eq!(q.iter().collect::<Vec<_>>(), [2, 4]);
        let mut w = vec![0; q.words()];
        q.encode(&mut w).unwrap();
        assert_eq!(w, [0, 2, 2, 4]);
        assert_eq!(BoundedQueue::decode(&w).unwrap(), q);
    }

    #[test]
    fn decode_follows_the_ring_and_rejects_bad_headers() {
        let q = BoundedQueue::decode(&[2, 2, 30, 0, 10]).unwrap();
        assert_eq!(q.iter().collect::<Vec<_>>(), [10, 30]);
        assert!(matches!(
            BoundedQueue::decode(&[3, 0, 0, 0, 0]),
            Err(LayoutError::Invalid { word: 0, .. })
        ));
        assert!(matches!(
            BoundedQueue::decode(&[0, 4, 0, 0, 0]),
            Err(LayoutError::Invalid { word: 1, .. })
        ));
        assert!(BoundedQueue::decode(&[0, 0]).is_err());
    }

    #[test]
    fn a_state_bigger_than_the_layout_does_not_fit() {
        let mut q = BoundedQueue::new(1);
        q.items.push_back(1);
        q.items.push_back(2); // behind the sequential code's back
        let mut w = vec![0; q.words()];
        assert_eq!(
            q.encode(&mut w),
            Err(LayoutError::DoesNotFit {
                needed: 4,
                words: 3
            })
        );
    }
}
