//! The CPU half of the model: a thread's x86-TSO store buffer (docs/model.md §4.2), written once
//! for the soft NIC's `Chaos` schedule and the litmus explorer.
//!
//! CPU stores and posted remote operations enter one FIFO per thread, in program order. A load
//! reads the newest buffered store to its word, else memory. The oldest item may leave at any
//! time: a store goes to memory, a post to the tail of its queue pair's pipe, so posts reach the
//! NIC in program order and only after every store before them is visible. `mfence` and `cas`
//! need the buffer empty.
//!
//! The buffer is generic over what a post carries (`P`); both drivers use [`Post`], whose
//! [`StoreBuffer::flush`] routes the oldest item to memory or to a [`Qp`]. Which item leaves
//! *when* is the driver's choice (a random pick, or every branch of an exhaustive search). The
//! type is a plain `VecDeque` inside: cheap to clone and hashable, as the explorer's states need.

use std::collections::VecDeque;

use super::Qp;
use crate::backend::WorkRequest;
use crate::NodeId;

/// An item of a store buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SbItem<P> {
    /// A CPU store of `value` to the thread's local word `word`; it leaves for memory.
    Store {
        /// Local word.
        word: usize,
        /// Value stored.
        value: u64,
    },
    /// A posted remote operation; it leaves for the tail of its queue pair's pipe.
    Post(P),
}

/// A remote operation posted by a thread, as it waits in the thread's store buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Post {
    /// The node whose queue pair it goes to.
    pub target: NodeId,
    /// The request.
    pub wr: WorkRequest,
    /// Completion tag, passed to [`Qp::issue`] (the soft NIC, which completes by poll order,
    /// leaves it 0; the explorer tags it with the work id a `wait` looks for).
    pub tag: u32,
}

/// One thread's x86-TSO store buffer (docs/model.md §4.2); `P` is what a post carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreBuffer<P> {
    /// Oldest first.
    items: VecDeque<SbItem<P>>,
}

impl<P> Default for StoreBuffer<P> {
    fn default() -> Self {
        StoreBuffer {
            items: VecDeque::new(),
        }
    }
}

impl<P> StoreBuffer<P> {
    /// An empty store buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// `store(word, value)`: appends the store.
    pub fn store(&mut self, word: usize, value: u64) {
        self.items.push_back(SbItem::Store { word, value });
    }

    /// A post: appends the remote operation, behind every earlier store and post.
    pub fn post(&mut self, post: P) {
        self.items.push_back(SbItem::Post(post));
    }

    /// The value of the newest buffered store to `word`, if any (what TSO forwarding reads).
    pub fn forwarded(&self, word: usize) -> Option<u64> {
        self.items.iter().rev().find_map(|i| match *i {
            SbItem::Store { word: w, value } if w == word => Some(value),
            _ => None,
        })
    }

    /// `load(word)`: the newest buffered store to `word`, else `memory()` (called only then).
    pub fn load(&self, word: usize, memory: impl FnOnce() -> u64) -> u64 {
        self.forwarded(word).unwrap_or_else(memory)
    }

    /// Whether the buffer is empty: `mfence` and `cas` may run only then, and a thread is
    /// settled (docs/model.md §4.7) only then.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Number of buffered items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// The oldest item: the one that leaves next.
    pub fn front(&self) -> Option<&SbItem<P>> {
        self.items.front()
    }

    /// Removes and returns the oldest item; the caller sends it on (see [`StoreBuffer::flush`]
    /// for [`Post`]s).
    pub fn pop(&mut self) -> Option<SbItem<P>> {
        self.items.pop_front()
    }

    /// The buffered items, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &SbItem<P>> {
        self.items.iter()
    }

    /// The buffered posts, oldest first.
    pub fn posts(&self) -> impl Iterator<Item = &P> {
        self.items.iter().filter_map(|i| match i {
            SbItem::Post(p) => Some(p),
            SbItem::Store { .. } => None,
        })
    }

    /// The buffered stores as `(word, value)`, oldest first.
    pub fn stores(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.items.iter().filter_map(|i| match *i {
            SbItem::Store { word, value } => Some((word, value)),
            SbItem::Post(_) => None,
        })
    }

    /// Drops the posts for which `keep` is false (requests towards a dead node); stores stay.
    pub fn retain_posts(&mut self, mut keep: impl FnMut(&P) -> bool) {
        self.items.retain(|i| match i {
            SbItem::Post(p) => keep(p),
            SbItem::Store { .. } => true,
        });
    }

    /// Drops everything (the thread's node died).
    pub fn clear(&mut self) {
        self.items.clear();
    }
}

impl StoreBuffer<Post> {
    /// The oldest item leaves the buffer: a store is handed to `write(word, value)`, a post is
    /// issued at the tail of the pipe of `qps[target]` (the thread's queue pairs, indexed by
    /// target node). False if the buffer was empty.
    pub fn flush(&mut self, qps: &mut [Qp], write: impl FnOnce(usize, u64)) -> bool {
        match self.items.pop_front() {
            Some(SbItem::Store { word, value }) => write(word, value),
            Some(SbItem::Post(Post { target, wr, tag })) => {
                let qp = &mut qps[target.index()];
                debug_assert_eq!(qp.remote_node, target, "queue pairs indexed by target");
                qp.issue(wr, tag);
            }
            None => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Entry;

    fn put(target: u16, tag: u32) -> Post {
        Post {
            target: NodeId(target),
            wr: WorkRequest::Write {
                local: 0,
                remote: 0,
                words: 1,
            },
            tag,
        }
    }

    #[test]
    fn loads_forward_the_newest_own_store_else_read_memory() {
        let mut sb = StoreBuffer::<u32>::new();
        assert_eq!(sb.load(3, || 7), 7, "empty: memory");
        sb.store(3, 1);
        sb.post(9);
        sb.store(4, 2);
        sb.store(3, 5);
        assert_eq!(sb.forwarded(3), Some(5), "the newest store to the word");
        assert_eq!(sb.load(4, || 7), 2);
        assert_eq!(
            sb.load(6, || 7),
            7,
            "no store to the word: memory (posts do not forward)"
        );
        let mut read = false;
        sb.load(3, || {
            read = true;
            0
        });
        assert!(!read, "memory is not read when a store forwards");
    }

    #[test]
    fn items_leave_in_program_order() {
        let mut sb = StoreBuffer::new();
        sb.store(0, 1);
        sb.post(10);
        sb.store(0, 2);
        sb.post(11);
        assert_eq!(sb.posts().copied().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(sb.stores().collect::<Vec<_>>(), [(0, 1), (0, 2)]);
        assert_eq!(sb.front(), Some(&SbItem::Store { word: 0, value: 1 }));
        let mut out = Vec::new();
        while let Some(i) = sb.pop() {
            out.push(i);
        }
        assert_eq!(
            out,
            [
                SbItem::Store { word: 0, value: 1 },
                SbItem::Post(10),
                SbItem::Store { word: 0, value: 2 },
                SbItem::Post(11),
            ]
        );
    }

    #[test]
    fn flush_sends_stores_to_memory_and_posts_to_their_pipes_in_order() {
        let mut qps: Vec<Qp> = (0..2).map(|n| Qp::new(NodeId(0), NodeId(n))).collect();
        let mut mem = [0u64; 4];
        let mut sb = StoreBuffer::new();
        sb.post(put(1, 1));
        sb.store(2, 8);
        sb.post(Post {
            target: NodeId(1),
            wr: WorkRequest::Fence,
            tag: 0,
        });
        sb.post(put(0, 3));
        sb.post(put(1, 4));
        assert!(sb.flush(&mut qps, |w, v| mem[w] = v));
        assert_eq!(qps[1].pipe.len(), 1, "the first post reached its pipe ...");
        assert_eq!(mem[2], 0, "... before the store behind it was visible");
        assert!(sb.flush(&mut qps, |w, v| mem[w] = v));
        assert_eq!(mem[2], 8);
        while sb.flush(&mut qps, |w, v| mem[w] = v) {}
        assert!(sb.is_empty());
        let tags = |q: &Qp| q.pipe.iter().map(Entry::tag).collect::<Vec<_>>();
        assert_eq!(tags(&qps[1]), [Some(1), None, Some(4)], "FIFO per pipe");
        assert_eq!(tags(&qps[0]), [Some(3)]);
        assert!(!sb.flush(&mut qps, |_, _| unreachable!()), "nothing left");
    }

    #[test]
    fn a_fence_needs_an_empty_buffer() {
        let mut sb = StoreBuffer::new();
        assert!(sb.is_empty());
        sb.post(put(1, 0));
        assert!(!sb.is_empty(), "a buffered post holds a fence back too");
        sb.store(0, 1);
        assert_eq!(sb.len(), 2);
        let mut qps: Vec<Qp> = (0..2).map(|n| Qp::new(NodeId(0), NodeId(n))).collect();
        assert!(sb.flush(&mut qps, |_, _| {}));
        assert!(!sb.is_empty());
        assert!(sb.flush(&mut qps, |_, _| {}));
        assert!(sb.is_empty(), "drained: mfence and cas may run");
    }

    #[test]
    fn dropping_posts_keeps_the_stores_and_the_order() {
        let mut sb = StoreBuffer::new();
        sb.post(put(1, 1));
        sb.store(0, 1);
        sb.post(put(2, 2));
        sb.store(1, 2);
        sb.retain_posts(|p| p.target != NodeId(1));
        assert_eq!(
            sb.iter().cloned().collect::<Vec<_>>(),
            [
                SbItem::Store { word: 0, value: 1 },
                SbItem::Post(put(2, 2)),
                SbItem::Store { word: 1, value: 2 },
            ]
        );
        sb.clear();
        assert!(sb.is_empty());
    }
}
