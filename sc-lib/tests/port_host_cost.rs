//! The host cost of a ported structure's operation follows the words it touches, not the
//! layout: a map of a million buckets or a queue of four million slots costs a `get` or a
//! `push` a few small allocations on the calling thread, not tens of megabytes (each
//! operation used to allocate and initialise two arrays the layout's size, so that a large
//! map's every operation took tens of milliseconds and the `kv_service` demo with
//! `--buckets 1048576` seemed to hang).
//!
//! Measured by counting the bytes the calling thread allocates (this file's global allocator),
//! not by timing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use loco_rdmawait::{Cluster, NodeId, Schedule};
use loco_sc::{BoundedQueue, FixedHashMap, PortedHashMap, PortedQueue};

/// Forwards to the system allocator, counting the bytes each thread asks for.
struct Counting;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with`: nothing to count in a thread that is being torn down.
    let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(bytes as u64)));
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract; the
// counting touches only a thread-local `Cell` with a const initialiser (it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's guarantees for `layout`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as for `dealloc`, and the caller's guarantees for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes the calling thread allocates while running `f`.
fn allocated_by<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = ALLOCATED.with(Cell::get);
    let r = f();
    (r, ALLOCATED.with(Cell::get) - before)
}

/// An operation to measure, returning a value to check.
type Op<'a> = Box<dyn Fn() -> u64 + 'a>;

/// At most this much host memory per operation (a small fraction of the layouts here, which
/// are 24 and 32 MiB, and of the arrays an operation used to allocate for them).
const PER_OPERATION: u64 = 256 << 10;

#[test]
fn an_operation_on_a_large_structure_allocates_little() {
    const BUCKETS: usize = 1 << 20;
    const SLOTS: usize = 1 << 22;
    let c = Cluster::builder()
        .nodes(2)
        .memory_per_node(80 << 20)
        .soft(Schedule::Immediate)
        .build()
        .unwrap();
    let map = PortedHashMap::new_on(&c, NodeId(1), &FixedHashMap::with_buckets(BUCKETS)).unwrap();
    let q = PortedQueue::new_on(&c, NodeId(1), &BoundedQueue::new(SLOTS)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    // First uses: the thread's buffers and lock state are made.
    map.insert(&ctx, 0, 0).unwrap();
    q.push(&ctx, 0).unwrap();
    let ops: [(&str, Op<'_>); 6] = [
        (
            "map insert",
            Box::new(|| map.insert(&ctx, 7, 70).unwrap().unwrap_or(0)),
        ),
        ("map get", Box::new(|| map.get(&ctx, 7).unwrap().unwrap())),
        (
            "map cas",
            Box::new(|| map.cas(&ctx, 7, 70, 71).unwrap().unwrap()),
        ),
        (
            "map remove",
            Box::new(|| map.remove(&ctx, 7).unwrap().unwrap()),
        ),
        (
            "queue push",
            Box::new(|| q.push(&ctx, u64::MAX).map(|()| 0).unwrap()),
        ),
        ("queue pop", Box::new(|| q.pop(&ctx).unwrap().unwrap())),
    ];
    let mut seen = Vec::new();
    for (what, op) in &ops {
        let (v, bytes) = allocated_by(op);
        assert!(
            bytes <= PER_OPERATION,
            "{what} allocated {bytes} bytes on a {BUCKETS}-bucket map / {SLOTS}-slot queue"
        );
        seen.push(v);
    }
    // The operations did what they say (the pop returns the first value pushed, 0).
    assert_eq!(seen, [0, 70, 70, 71, 0, 0]);
    assert_eq!(map.get(&ctx, 0).unwrap(), Some(0));
    assert_eq!(q.pop(&ctx).unwrap(), Some(u64::MAX));
    assert_eq!(q.pop(&ctx).unwrap(), None);
}

/// An operation that writes a few words and then reads the whole layout (past the point where
/// the words known are kept in an array): the written values win over the fetched ones, and
/// exactly the written words are put back.
#[test]
fn a_few_writes_then_the_whole_layout() {
    let c = Cluster::builder()
        .nodes(2)
        .soft(Schedule::Immediate)
        .build()
        .unwrap();
    let q = PortedQueue::new_on(&c, NodeId(1), &BoundedQueue::new(1000)).unwrap();
    let ctx = c.context(NodeId(0)).unwrap();
    q.push(&ctx, 5).unwrap();
    let all = q
        .with(&ctx, |w| {
            w.write(900, 9)?; // an unused slot
            w.write(3, 0)?; // already 0: no change
            assert!(w.is_known(900) && !w.is_known(2) && !w.is_known(usize::MAX));
            w.read_range(0..w.len())
        })
        .unwrap();
    assert_eq!(&all[..4], &[0, 1, 5, 0]);
    assert_eq!(all[900], 9);
    assert_eq!(all.iter().filter(|&&v| v != 0).count(), 3);
    c.quiesce().unwrap();
    let words = c.peek_words(&q.loc()).unwrap();
    assert_eq!(words[900], 9);
    assert_eq!(words.iter().filter(|&&v| v != 0).count(), 3);
    assert_eq!(q.pop(&ctx).unwrap(), Some(5));
}
