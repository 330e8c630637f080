//! Porting sequential data structures: state on one node, every operation under that node's lock.
//!
//! docs/model.md §5.6 (ported structures): any sequential data structure becomes linearizable by
//! keeping its state on one node and running every operation inside that node's nlock. A [`Ported<S>`] keeps the
//! state of a [`Sequential`] structure `S` in a fixed number of words of registered memory on one
//! node; an operation by any thread, on any node,
//!
//! 1. acquires the node lock of that node (1 round trip uncontended: a remote FAA, and one get of
//!    the lock's `rel` word posted behind it; one more get per turn spent waiting behind other
//!    holders);
//! 2. fetches the state with gets, waited for (1 round trip per fetch: [`Words`]);
//! 3. runs the ordinary sequential Rust code on it;
//! 4. puts the changed words back (not waited for: no round trip);
//! 5. releases the lock (`rfence; put`: no round trip).
//!
//! By default step 2 fetches the whole state in one get and step 4 compares the re-encoded state
//! with it, so an operation costs **2 round trips** uncontended whatever it does. A structure that
//! needs only a few of its words per operation overrides [`Sequential::apply_words`] to fetch just
//! those, as the two ready structures do:
//!
//! | structure | operation | round trips (uncontended) |
//! |---|---|---|
//! | [`FixedHashMap`] | `get`, `insert`, `cas`, `remove` | 1 + ⌈probe length / 4⌉, usually 2 (4 buckets per get) |
//! | [`FixedHashMap`] | `len` | 2 |
//! | [`BoundedQueue`] | `push`, `len`; `pop` of an empty queue | 2 |
//! | [`BoundedQueue`] | `pop` | 3 (the header, then the slot it names) |
//! | any [`Sequential`] with the default | every operation | 2 (one get of the whole state) |
//!
//! The calling thread's own work (host memory and time) is likewise in proportion to the words
//! an operation fetches or writes, not to the layout: a map of a million buckets costs a `get`
//! no more than a map of eight. (The thread's buffer for the structure, in its node's
//! registered memory, has the layout's size; only the words fetched into it are touched.)
//!
//! # Guarantees
//! Operations on one ported structure are **linearizable** (docs/model.md §5.6, Fig. 14): each takes effect
//! at one instant between its call and its return, namely while its thread holds the node lock,
//! and the structure goes through the states of the sequential code. Linearizability is local, so
//! any number of ported structures and [`ScLoc`](crate::ScLoc)s together are linearizable too.
//! Why it holds: the node lock makes every operation towards its node inside one critical section
//! visible to the next holder (Fig. 8f), and all the state's words are on that node.
//!
//! An operation that fails (a full structure, a state that does not fit the layout, a fetch
//! error) writes nothing: the changed words are put back only when the sequential code returned
//! `Ok`. A thread that dies (or panics) inside its critical section may leave them put back in
//! part; the next operation is told, with [`Words::was_poisoned`] (see the crate's Failures).
//!
//! # Writing your own
//! Implement [`Sequential`]: a fixed-layout encoding ([`Sequential::encode`] with an
//! [`Encoder`], [`Sequential::decode`] with a [`Decoder`]) and the operation
//! ([`Sequential::apply`]), written as for one thread. The layout's size is fixed when the
//! structure is made, from the initial state ([`Sequential::words`]); a state that later needs
//! more words makes the operation fail with [`LayoutError::DoesNotFit`] and writes nothing.

mod map;
mod queue;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use loco_locks::LockGuard;
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WORD};

pub use map::{FixedHashMap, MapOp, MapRet, PortedHashMap};
pub use queue::{BoundedQueue, PortedQueue, QueueOp, QueueRet};

use crate::object::Object;
use crate::protocol::{SC_FETCH, SC_WRITE};
use crate::{LayoutError, Result};

/// A sequential data structure with a fixed-layout encoding, ready to be [`Ported`].
///
/// Implement the four required methods as for a single thread; [`Ported`] makes the result
/// linearizable over RDMA. Override [`Sequential::apply_words`] to fetch fewer words per operation.
///
/// ```
/// use loco_sc::{Decoder, Encoder, LayoutError, Ported, Sequential};
/// use loco_rdmawait::{Cluster, NodeId};
///
/// /// A counter with a high-water mark.
/// #[derive(Debug, PartialEq)]
/// struct Gauge { now: u64, max: u64 }
///
/// impl Sequential for Gauge {
///     type Op = i64;    // the change
///     type Ret = u64;   // the new value
///     fn words(&self) -> usize { 2 }
///     fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError> {
///         let mut e = Encoder::new(out);
///         e.push(self.now);
///         e.push(self.max);
///         e.finish()
///     }
///     fn decode(words: &[u64]) -> Result<Self, LayoutError> {
///         let mut d = Decoder::new(words);
///         Ok(Gauge { now: d.next()?, max: d.next()? })
///     }
///     fn apply(&mut self, delta: i64) -> u64 {
///         self.now = self.now.wrapping_add_signed(delta);
///         self.max = self.max.max(self.now);
///         self.now
///     }
/// }
///
/// let cluster = Cluster::builder().nodes(2).build()?;
/// let gauge = Ported::new(&cluster, &Gauge { now: 0, max: 0 })?;
/// let ctx = cluster.context(NodeId(0))?;
/// assert_eq!(gauge.apply(&ctx, 5)?, 5);
/// assert_eq!(gauge.apply(&ctx, -3)?, 2);
/// cluster.quiesce()?;
/// assert_eq!(gauge.peek(&cluster)?, Gauge { now: 2, max: 5 });
/// # Ok::<(), loco_sc::Error>(())
/// ```
pub trait Sequential: Sized {
    /// An operation, with its arguments.
    type Op;
    /// What an operation returns. Put the structure's own failures here (e.g. "full"): the
    /// operation then still succeeds as far as the network is concerned.
    type Ret;

    /// The size of the layout in words. It is fixed when a [`Ported`] structure is made, from the
    /// initial state; it must depend only on the structure's parameters (its capacity), not on its
    /// contents.
    fn words(&self) -> usize;

    /// Writes the state into `out` (exactly the layout's words). Fails with
    /// [`LayoutError::DoesNotFit`] if the state needs more words ([`Encoder::finish`] does that).
    fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError>;

    /// Reads a state from the layout's words.
    fn decode(words: &[u64]) -> Result<Self, LayoutError>;

    /// The operation: ordinary sequential code.
    fn apply(&mut self, op: Self::Op) -> Self::Ret;

    /// The operation on the remote words, inside the critical section.
    ///
    /// The default fetches the whole state in one get, decodes it, runs [`Sequential::apply`],
    /// encodes the result and writes back the words that changed. Override it to fetch only the
    /// words the operation needs; it must have the same effect and result as `apply` on the
    /// decoded state.
    fn apply_words(words: &mut Words<'_>, op: Self::Op) -> Result<Self::Ret> {
        let old = words.read_range(0..words.len())?;
        let mut state = Self::decode(&old)?;
        let ret = state.apply(op);
        let mut new = vec![0; old.len()];
        state.encode(&mut new)?;
        words.write_range(0, &new)?;
        Ok(ret)
    }
}

/// Writes a state into a layout, word by word; [`Encoder::finish`] reports a state that did not
/// fit.
#[derive(Debug)]
pub struct Encoder<'a> {
    out: &'a mut [u64],
    at: usize,
}

impl<'a> Encoder<'a> {
    /// An encoder filling `out` from word 0.
    pub fn new(out: &'a mut [u64]) -> Self {
        Encoder { out, at: 0 }
    }

    /// Appends one word. Past the end of the layout the word is dropped and counted: `finish`
    /// then fails.
    pub fn push(&mut self, word: u64) {
        if let Some(w) = self.out.get_mut(self.at) {
            *w = word;
        }
        self.at = self.at.saturating_add(1);
    }

    /// Appends `n` zero words (e.g. unused slots). Those past the end of the layout are only
    /// counted, however many (the count saturates at `usize::MAX`): `finish` then fails.
    pub fn pad(&mut self, n: usize) {
        let end = self.at.saturating_add(n);
        let inside = end.min(self.out.len());
        if self.at < inside {
            self.out[self.at..inside].fill(0);
        }
        self.at = end;
    }

    /// Words pushed so far (saturating at `usize::MAX`).
    pub fn position(&self) -> usize {
        self.at
    }

    /// Zeroes the unused rest of the layout; fails with [`LayoutError::DoesNotFit`] if more
    /// words were pushed than the layout has.
    pub fn finish(self) -> Result<(), LayoutError> {
        if self.at > self.out.len() {
            return Err(LayoutError::DoesNotFit {
                needed: self.at,
                words: self.out.len(),
            });
        }
        self.out[self.at..].fill(0);
        Ok(())
    }
}

/// Reads a state from a layout, word by word.
#[derive(Debug)]
pub struct Decoder<'a> {
    words: &'a [u64],
    at: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder reading `words` from word 0.
    pub fn new(words: &'a [u64]) -> Self {
        Decoder { words, at: 0 }
    }

    /// The next word; [`LayoutError::OutOfLayout`] past the end.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<u64, LayoutError> {
        let w = *self.words.get(self.at).ok_or(LayoutError::OutOfLayout {
            index: self.at,
            words: self.words.len(),
        })?;
        self.at += 1;
        Ok(w)
    }

    /// The next word as a count or index no greater than `max`; [`LayoutError::Invalid`] if it
    /// is greater.
    pub fn next_at_most(&mut self, max: usize, reason: &'static str) -> Result<usize, LayoutError> {
        let word = self.at;
        let v = self.next()?;
        if v > max as u64 {
            return Err(LayoutError::Invalid { word, reason });
        }
        Ok(v as usize)
    }

    /// Index of the next word.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Words not read yet.
    pub fn remaining(&self) -> usize {
        self.words.len() - self.at
    }
}

/// The words of a ported structure's state, as one operation sees them inside its critical
/// section: fetched from the structure's node on first read, written back when the operation
/// succeeds.
///
/// Reads of words not fetched yet cost one round trip per call ([`Words::read`],
/// [`Words::read_range`], [`Words::prefetch`]: one get of the whole run, then a wait). Writes are
/// kept locally and put back in runs of consecutive changed words after the operation returns
/// `Ok`; a write of the value a fetched word already holds is no change. The host memory and
/// time an operation spends on them follow the words it touches, not the layout (they are kept
/// in an array the layout's size only once they are an eighth of it or more).
pub struct Words<'a> {
    ctx: &'a Ctx,
    state: Loc,
    buf: Loc,
    /// Words in the layout.
    len: usize,
    /// The words fetched or written so far.
    known: Known,
    round_trips: usize,
    poisoned: bool,
}

impl<'a> Words<'a> {
    fn new(ctx: &'a Ctx, state: Loc, buf: Loc, poisoned: bool) -> Self {
        Words {
            ctx,
            state,
            buf,
            len: state.words() as usize,
            known: Known::Sparse {
                vals: BTreeMap::new(),
                dirty: BTreeSet::new(),
            },
            round_trips: 0,
            poisoned,
        }
    }

    /// Words in the layout.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the layout is empty (never, for a made structure).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The calling thread's context.
    pub fn ctx(&self) -> &'a Ctx {
        self.ctx
    }

    /// Whether the critical section before this one did not finish: the thread that ran it died
    /// (its node was reported dead, and the lock skipped it) or panicked inside it. Its changed
    /// words may then have been put back in part, so the state may be one the sequential code
    /// never made; the ready structures' typed operations go on regardless (a state their
    /// layout cannot hold is an error, [`LayoutError::Invalid`]), an operation written with
    /// [`Ported::with`] can check this and repair the state. Told once: to the next operation
    /// only, whichever thread runs it (see `loco_locks::LockGuard::was_poisoned`).
    pub fn was_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Round trips spent fetching so far in this operation.
    pub fn round_trips(&self) -> usize {
        self.round_trips
    }

    /// `range` as the range methods take it: like a slice's, an empty range inside the layout
    /// (`i..i`, `i <= len`) is nothing to do, one that starts after it ends is
    /// [`LayoutError::BackwardsRange`], and one that reaches past the layout is
    /// [`LayoutError::OutOfLayout`] naming its first word outside the layout.
    fn check(&self, range: &Range<usize>) -> Result<(), LayoutError> {
        let words = self.len();
        if range.start > range.end {
            return Err(LayoutError::BackwardsRange {
                start: range.start,
                end: range.end,
                words,
            });
        }
        if range.end > words {
            return Err(LayoutError::OutOfLayout {
                index: range.start.max(words),
                words,
            });
        }
        Ok(())
    }

    /// Fetches the words of `range` not fetched or written yet, with one get (one round trip),
    /// or none if there are none. An empty range inside the layout (`i..i`, `i <= len`) fetches
    /// nothing; a range that starts after it ends (`2..1`) is [`LayoutError::BackwardsRange`],
    /// one that reaches past the layout [`LayoutError::OutOfLayout`].
    pub fn prefetch(&mut self, range: Range<usize>) -> Result<()> {
        self.prefetch_all(&[range])
    }

    /// Fetches the words of several ranges not fetched or written yet: one get per range, all
    /// posted before one wait, so one round trip in all (none if nothing is missing). Each range
    /// is checked as by [`Words::prefetch`], all before anything is fetched.
    pub fn prefetch_all(&mut self, ranges: &[Range<usize>]) -> Result<()> {
        let mut spans = Vec::with_capacity(ranges.len());
        for range in ranges {
            self.check(range)?;
            let missing = |i: &usize| !self.known.contains(*i);
            if let (Some(lo), Some(hi)) = (
                range.clone().find(missing),
                range.clone().rev().find(missing),
            ) {
                spans.push(lo..hi + 1);
            }
        }
        if spans.is_empty() {
            return Ok(());
        }
        let fetched = spans.iter().map(Range::len).fold(0, usize::saturating_add);
        self.known.reserve(fetched, self.len);
        for span in &spans {
            let (off, len) = (span.start as u64 * WORD, span.len() as u64 * WORD);
            self.ctx.get(
                &self.buf.slice(off, len)?,
                &self.state.slice(off, len)?,
                SC_FETCH,
            )?;
        }
        self.ctx.wait(SC_FETCH)?;
        self.round_trips += 1;
        for span in spans {
            for i in span {
                if !self.known.contains(i) {
                    let v = self.ctx.load(&self.buf.word(i as u64)?)?;
                    self.known.fetched(i, v);
                }
            }
        }
        Ok(())
    }

    /// Whether word `i` has been fetched or written in this operation (reading it costs nothing).
    pub fn is_known(&self, i: usize) -> bool {
        i < self.len && self.known.contains(i)
    }

    /// Word `i` (fetched if needed: one round trip).
    pub fn read(&mut self, i: usize) -> Result<u64> {
        // Saturating: an index at the end of `usize` is outside any layout, not an overflow.
        self.prefetch(i..i.saturating_add(1))?;
        Ok(self.known.get(i).expect("fetched"))
    }

    /// The words of `range` (those not fetched yet in one get: one round trip). As with a
    /// slice, an empty range inside the layout (`i..i`, `i <= len`) gives an empty `Vec`; a
    /// range that starts after it ends (`2..1`) is [`LayoutError::BackwardsRange`], one that
    /// reaches past the layout [`LayoutError::OutOfLayout`].
    pub fn read_range(&mut self, range: Range<usize>) -> Result<Vec<u64>> {
        self.prefetch(range.clone())?;
        Ok(range.map(|i| self.known.get(i).expect("fetched")).collect())
    }

    /// Sets word `i` to `value`, to be put back when the operation succeeds. No round trip.
    pub fn write(&mut self, i: usize, value: u64) -> Result<()> {
        self.check(&(i..i.saturating_add(1)))?;
        self.known.reserve(1, self.len);
        self.known.write(i, value);
        Ok(())
    }

    /// Sets the words from `start` on to `values` (none for an empty `values` and a `start` at
    /// most the layout's length); [`LayoutError::OutOfLayout`] if they reach past the layout,
    /// and then nothing is written.
    pub fn write_range(&mut self, start: usize, values: &[u64]) -> Result<()> {
        self.check(&(start..start.saturating_add(values.len())))?;
        self.known.reserve(values.len(), self.len);
        for (k, v) in values.iter().enumerate() {
            self.write(start + k, *v)?;
        }
        Ok(())
    }

    /// Puts every run of changed words back (store into the thread's buffer, then one put per
    /// run, not waited for). Returns the number of puts.
    fn commit(self) -> Result<usize> {
        let mut puts = 0;
        for run in self.known.dirty_runs() {
            for i in run.clone() {
                let v = self.known.get(i).expect("a written word has a value");
                self.ctx.store(&self.buf.word(i as u64)?, v)?;
            }
            let (off, len) = (run.start as u64 * WORD, run.len() as u64 * WORD);
            self.ctx.put(
                &self.state.slice(off, len)?,
                &self.buf.slice(off, len)?,
                SC_WRITE,
            )?;
            puts += 1;
        }
        Ok(puts)
    }
}

/// The words an operation has fetched or written, with those written with a new value (dirty):
/// a map of them while they are few, an array the layout's size once they are an eighth of it
/// or more. Either way the host memory and time an operation spends follow the words it
/// touches, not the layout (an array per operation made a `get` on a map of a million buckets
/// allocate 53 MB), and an operation on the whole state is not slowed by the map.
#[derive(Debug)]
enum Known {
    Sparse {
        vals: BTreeMap<usize, u64>,
        dirty: BTreeSet<usize>,
    },
    Dense {
        vals: Vec<Option<u64>>,
        dirty: Vec<bool>,
    },
}

impl Known {
    fn get(&self, i: usize) -> Option<u64> {
        match self {
            Known::Sparse { vals, .. } => vals.get(&i).copied(),
            Known::Dense { vals, .. } => vals.get(i).copied().flatten(),
        }
    }

    fn contains(&self, i: usize) -> bool {
        self.get(i).is_some()
    }

    /// Word `i` as fetched: `v`, unless it is known already (a word written first keeps the
    /// value written).
    fn fetched(&mut self, i: usize, v: u64) {
        match self {
            Known::Sparse { vals, .. } => {
                vals.entry(i).or_insert(v);
            }
            Known::Dense { vals, .. } => {
                vals[i].get_or_insert(v);
            }
        }
    }

    /// Word `i` written with `v`: dirty unless it already held `v`.
    fn write(&mut self, i: usize, v: u64) {
        match self {
            Known::Sparse { vals, dirty } => {
                if vals.insert(i, v) != Some(v) {
                    dirty.insert(i);
                }
            }
            Known::Dense { vals, dirty } => {
                if vals[i].replace(v) != Some(v) {
                    dirty[i] = true;
                }
            }
        }
    }

    /// Before up to `more` words are added in a layout of `len`: an array once the words known
    /// would be an eighth of the layout or more (its cost is then at most 8 times theirs).
    fn reserve(&mut self, more: usize, len: usize) {
        let Known::Sparse { vals, dirty } = self else {
            return;
        };
        if vals.len().saturating_add(more).saturating_mul(8) < len {
            return;
        }
        let mut dense_vals = vec![None; len];
        let mut dense_dirty = vec![false; len];
        for (&i, &v) in vals.iter() {
            dense_vals[i] = Some(v);
        }
        for &i in dirty.iter() {
            dense_dirty[i] = true;
        }
        *self = Known::Dense {
            vals: dense_vals,
            dirty: dense_dirty,
        };
    }

    /// The runs of consecutive dirty words, in order.
    fn dirty_runs(&self) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut add = |i: usize| match runs.last_mut() {
            Some(r) if r.end == i => r.end += 1,
            _ => runs.push(i..i + 1),
        };
        match self {
            Known::Sparse { dirty, .. } => dirty.iter().for_each(|&i| add(i)),
            Known::Dense { dirty, .. } => (0..dirty.len()).filter(|&i| dirty[i]).for_each(add),
        }
        runs
    }
}

impl fmt::Debug for Words<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Words")
            .field("state", &self.state)
            .field("known", &self.known)
            .finish()
    }
}

/// A [`Sequential`] structure ported to RDMA: its state on one node, every operation under that
/// node's lock. See the [module docs](self) for the guarantee and the cost model.
///
/// Cheap to clone (a handle), `Send` and `Sync`: make it once, share it with every thread.
/// Memory: the layout's words plus its node lock's ([`RawNLock::bytes`](loco_locks::RawNLock::bytes))
/// on the structure's node, and a buffer of the layout's size on each thread's node that uses it.
pub struct Ported<S> {
    obj: Arc<Object>,
    _state: PhantomData<fn() -> S>,
}

impl<S> Clone for Ported<S> {
    fn clone(&self) -> Self {
        Ported {
            obj: self.obj.clone(),
            _state: PhantomData,
        }
    }
}

impl<S> fmt::Debug for Ported<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ported")
            .field("id", &self.obj.id)
            .field("words", &self.obj.words)
            .finish()
    }
}

impl<S: Sequential> Ported<S> {
    /// The structure with state `initial`, placed on the next node round-robin.
    ///
    /// The initial state is written directly to node memory: make structures before the threads
    /// that use them start. In a cluster of several processes, every process makes the same
    /// structures in the same order; a state with nonzero words can only be written by the
    /// process of the structure's node. Fails with [`LayoutError::DoesNotFit`] if `initial` does not fit the
    /// layout it asks for, and [`LayoutError::Empty`] for a layout of no words.
    pub fn new(cluster: &Cluster, initial: &S) -> Result<Self> {
        Self::make(cluster, None, initial)
    }

    /// The structure with state `initial`, placed on `node`.
    pub fn new_on(cluster: &Cluster, node: NodeId, initial: &S) -> Result<Self> {
        Self::make(cluster, Some(node), initial)
    }

    fn make(cluster: &Cluster, node: Option<NodeId>, initial: &S) -> Result<Self> {
        let n = initial.words();
        if n == 0 {
            return Err(LayoutError::Empty.into());
        }
        // The node's memory is checked before the layout is built in host memory: a layout far
        // larger than the node would otherwise cost its size in this process first.
        let node = Object::place(cluster, node)?;
        Object::check_memory(cluster, node, n)?;
        let mut words = vec![0; n];
        initial.encode(&mut words)?;
        S::decode(&words)?; // a layout the structure cannot read back is no layout
        let obj = Object::new(cluster, Some(node), n)?;
        for (i, w) in words.iter().enumerate() {
            if *w != 0 {
                cluster.poke(&obj.words.word(i as u64)?, *w)?;
            }
        }
        Ok(Ported {
            obj: Arc::new(obj),
            _state: PhantomData,
        })
    }

    /// Runs `op` on the structure (linearizable; see the [module docs](self)).
    pub fn apply(&self, ctx: &Ctx, op: S::Op) -> Result<S::Ret> {
        self.with(ctx, |w| S::apply_words(w, op))
    }

    /// Runs `f` on the structure's words inside one critical section: the building block of
    /// [`Ported::apply`], for operations that are not [`Sequential::Op`]s (several operations at
    /// once, say). The words `f` changes are put back only if it returns `Ok`.
    pub fn with<R>(&self, ctx: &Ctx, f: impl FnOnce(&mut Words<'_>) -> Result<R>) -> Result<R> {
        let buf = self.obj.scratch(ctx, self.words())?;
        let g = self.obj.lock.acquire(ctx)?;
        let poisoned = LockGuard::was_poisoned(&g);
        let mut words = Words::new(ctx, self.obj.words, buf, poisoned);
        let r = f(&mut words).and_then(|r| words.commit().map(|_| r));
        match (r, LockGuard::release(g)) {
            (Ok(r), Ok(())) => Ok(r),
            (Err(e), Ok(())) => Err(e),
            (Ok(_), Err(e)) => Err(e.into()),
            (Err(e), Err(release)) => {
                tracing::error!(target: "loco::sc", error = %release, "release after a failed operation failed");
                Err(e)
            }
        }
    }

    /// The node the structure lives on.
    pub fn node(&self) -> NodeId {
        self.obj.node()
    }

    /// Words in the layout.
    pub fn words(&self) -> usize {
        self.obj.words.words() as usize
    }

    /// The structure's words in registered memory. Accessing them other than through the
    /// structure's operations gives no guarantee: they are here for inspection and set-up with
    /// [`Cluster::peek_words`] and [`Cluster::poke`].
    pub fn loc(&self) -> Loc {
        self.obj.words
    }

    /// The current state, decoded directly from node memory (for inspection after
    /// [`Cluster::quiesce`]; not an operation of the structure). `PeerDead` naming the
    /// structure's node once that node has died, or restarted since the structure was made
    /// (its words are gone).
    pub fn peek(&self, cluster: &Cluster) -> Result<S> {
        self.obj.check_home(cluster)?;
        Ok(S::decode(&cluster.peek_words(&self.obj.words)?)?)
    }
}
