//! A hash map with a fixed bucket count, u64 keys and values (linear probing).

use std::collections::BTreeMap;
use std::convert::Infallible;

use loco_rdmawait::Ctx;

use super::{Decoder, Encoder, Ported, Sequential, Words};
use crate::{Error, LayoutError, Result};

/// Words per bucket: tag (0 empty, 1 full), key, value.
const BUCKET: usize = 3;
/// Buckets fetched per get while probing.
const PROBE_CHUNK: usize = 4;

/// A hash map from `u64` to `u64` with a fixed number of buckets, one entry each: open addressing
/// with linear probing and backward-shift deletion (no tombstones). Ported as
/// [`PortedHashMap`].
///
/// Layout: 3 words per bucket (tag, key, value); a key's home bucket is a fixed multiplicative
/// hash of the key, the same in every process. Inserting a new key into a map whose buckets are
/// all taken returns [`MapRet::Full`] ([`Error::MapFull`] through the typed methods).
///
/// ```
/// use loco_sc::{FixedHashMap, PortedHashMap};
/// use loco_rdmawait::{Cluster, NodeId};
///
/// let cluster = Cluster::builder().nodes(3).build()?;
/// let map = PortedHashMap::new(&cluster, &FixedHashMap::with_buckets(8))?;
/// let ctx = cluster.context(NodeId(1))?;
/// assert_eq!(map.insert(&ctx, 7, 70)?, None);
/// assert_eq!(map.cas(&ctx, 7, 70, 71)?, Some(70)); // swapped
/// assert_eq!(map.get(&ctx, 7)?, Some(71));
/// assert_eq!(map.remove(&ctx, 7)?, Some(71));
/// assert_eq!(map.len(&ctx)?, 0);
/// # Ok::<(), loco_sc::Error>(())
/// ```
///
/// Two maps are equal (`==`, and they hash alike) when they have the same number of buckets
/// and the same entries, wherever linear probing put them: the same keys inserted in another
/// order may sit in other buckets, so [`FixedHashMap::iter`]'s order and the encoding can
/// differ between equal maps, but every operation returns the same on both.
#[derive(Clone, Debug)]
pub struct FixedHashMap {
    buckets: usize,
    /// The full buckets, by index: a map costs host memory for its entries, not its buckets.
    slots: BTreeMap<usize, (u64, u64)>,
}

impl FixedHashMap {
    /// The entries, by key: what equality and hashing look at.
    fn by_key(&self) -> Vec<(u64, u64)> {
        let mut e: Vec<_> = self.slots.values().copied().collect();
        e.sort_unstable();
        e
    }
}

impl PartialEq for FixedHashMap {
    fn eq(&self, other: &Self) -> bool {
        self.buckets == other.buckets
            && self.slots.len() == other.slots.len()
            && (self.slots == other.slots || self.by_key() == other.by_key())
    }
}

impl Eq for FixedHashMap {}

impl std::hash::Hash for FixedHashMap {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.buckets.hash(state);
        self.by_key().hash(state);
    }
}

/// An operation of a [`FixedHashMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapOp {
    /// The value of a key.
    Get(u64),
    /// Sets a key's value; returns the old one.
    Insert(u64, u64),
    /// Removes a key; returns its value.
    Remove(u64),
    /// If the key is present with value `expected`, sets it to `new`. Returns the value seen.
    Cas {
        /// The key.
        key: u64,
        /// The value expected.
        expected: u64,
        /// The value to set.
        new: u64,
    },
    /// The number of entries.
    Len,
}

/// What a [`MapOp`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapRet {
    /// The key's value before the operation (`None`: absent).
    Value(Option<u64>),
    /// An insert of a new key found every bucket taken; nothing changed.
    Full,
    /// The number of entries.
    Len(usize),
}

impl FixedHashMap {
    /// An empty map with `buckets` buckets (at most `buckets` entries). A map of 0 buckets holds
    /// nothing (every insert of a new key is [`MapRet::Full`]) and cannot be ported (its layout
    /// has no words). Nothing is allocated for the buckets, only for the entries as they are
    /// inserted: a map of any number of buckets can be made, and one made to be ported is
    /// checked against its node's memory ([`Error::Rdma`] with `OutOfMemory`) before its layout
    /// is built in host memory.
    pub fn with_buckets(buckets: usize) -> Self {
        FixedHashMap {
            buckets,
            slots: BTreeMap::new(),
        }
    }

    /// The layout size of a map with `buckets` buckets, in words (`usize::MAX` if that does
    /// not fit a `usize`: no node has that much memory).
    pub fn words_for(buckets: usize) -> usize {
        buckets.saturating_mul(BUCKET)
    }

    /// The number of buckets.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        let b = self.buckets();
        (0..b)
            .map(|d| self.slots.get(&((home(key, b) + d) % b)).copied())
            .take_while(Option::is_some)
            .flatten()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The entries, in bucket order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots.values().copied()
    }
}

/// The home bucket of `key` (Fibonacci hashing: the same in every process); 0 in a map of no
/// buckets, where every probe sequence is empty (a new key is [`MapRet::Full`]).
fn home(key: u64, buckets: usize) -> usize {
    if buckets == 0 {
        return 0;
    }
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) % buckets as u64) as usize
}

/// The buckets, wherever they are: the sequential algorithm below runs on a local
/// [`FixedHashMap`] and on the remote words alike.
trait Table {
    type E;
    fn buckets(&self) -> usize;
    fn slot(&mut self, i: usize) -> Result<Option<(u64, u64)>, Self::E>;
    fn set_slot(&mut self, i: usize, slot: Option<(u64, u64)>) -> Result<(), Self::E>;
    /// The number of entries (a full scan where it is not kept).
    fn count(&mut self) -> Result<usize, Self::E>;
    /// Tells the table the count changed by `delta` (where it is kept).
    fn counted(&mut self, delta: isize);
}

impl Table for FixedHashMap {
    type E = Infallible;
    fn buckets(&self) -> usize {
        self.buckets
    }
    fn slot(&mut self, i: usize) -> Result<Option<(u64, u64)>, Infallible> {
        Ok(self.slots.get(&i).copied())
    }
    fn set_slot(&mut self, i: usize, slot: Option<(u64, u64)>) -> Result<(), Infallible> {
        match slot {
            Some(kv) => self.slots.insert(i, kv),
            None => self.slots.remove(&i),
        };
        Ok(())
    }
    fn count(&mut self) -> Result<usize, Infallible> {
        Ok(self.slots.len())
    }
    fn counted(&mut self, _: isize) {}
}

/// The buckets as remote words: fetched [`PROBE_CHUNK`] buckets at a time.
struct Remote<'a, 'w> {
    words: &'a mut Words<'w>,
}

impl Table for Remote<'_, '_> {
    type E = Error;
    fn buckets(&self) -> usize {
        self.words.len() / BUCKET
    }
    fn slot(&mut self, i: usize) -> Result<Option<(u64, u64)>> {
        // The PROBE_CHUNK buckets from i on, cyclically: one or two gets, one round trip.
        let b = self.buckets();
        let end = i + PROBE_CHUNK.min(b);
        if self.words.is_known(i * BUCKET) {
            // Fetched with an earlier chunk (or written): no round trip.
        } else if end <= b {
            self.words.prefetch(i * BUCKET..end * BUCKET)?;
        } else {
            self.words
                .prefetch_all(&[i * BUCKET..b * BUCKET, 0..(end - b) * BUCKET])?;
        }
        let w = self.words.read_range(i * BUCKET..(i + 1) * BUCKET)?;
        Ok(decode_slot(i * BUCKET, &w)?)
    }
    fn set_slot(&mut self, i: usize, slot: Option<(u64, u64)>) -> Result<()> {
        let w = match slot {
            Some((k, v)) => [1, k, v],
            None => [0, 0, 0],
        };
        self.words.write_range(i * BUCKET, &w)
    }
    fn count(&mut self) -> Result<usize> {
        let all = self.words.read_range(0..self.words.len())?;
        let mut n = 0;
        for (i, w) in all.chunks(BUCKET).enumerate() {
            n += decode_slot(i * BUCKET, w)?.is_some() as usize;
        }
        Ok(n)
    }
    fn counted(&mut self, _: isize) {}
}

fn decode_slot(at: usize, w: &[u64]) -> Result<Option<(u64, u64)>, LayoutError> {
    match w[0] {
        0 if w[1] == 0 && w[2] == 0 => Ok(None),
        0 => Err(LayoutError::Invalid {
            word: at + 1,
            reason: "an empty bucket with a key or value",
        }),
        1 => Ok(Some((w[1], w[2]))),
        _ => Err(LayoutError::Invalid {
            word: at,
            reason: "a bucket tag other than 0 (empty) or 1 (full)",
        }),
    }
}

/// Where `key` is (`Ok`), or the empty bucket where it would go (`Err(Some)`), or neither in a
/// full table (`Err(None)`).
fn find<T: Table>(t: &mut T, key: u64) -> Result<Result<usize, Option<usize>>, T::E> {
    let b = t.buckets();
    let h = home(key, b);
    for d in 0..b {
        let i = (h + d) % b;
        match t.slot(i)? {
            None => return Ok(Err(Some(i))),
            Some((k, _)) if k == key => return Ok(Ok(i)),
            Some(_) => {}
        }
    }
    Ok(Err(None))
}

/// Whether `h` lies cyclically in `(lo, hi]`.
fn between(lo: usize, h: usize, hi: usize) -> bool {
    if lo <= hi {
        lo < h && h <= hi
    } else {
        lo < h || h <= hi
    }
}

/// The map's operations: ordinary sequential code over a [`Table`].
fn run<T: Table>(t: &mut T, op: MapOp) -> Result<MapRet, T::E> {
    let value = |s: Option<(u64, u64)>| s.map(|(_, v)| v);
    Ok(match op {
        MapOp::Get(key) => match find(t, key)? {
            Ok(i) => MapRet::Value(value(t.slot(i)?)),
            Err(_) => MapRet::Value(None),
        },
        MapOp::Insert(key, v) => match find(t, key)? {
            Ok(i) => {
                let old = value(t.slot(i)?);
                t.set_slot(i, Some((key, v)))?;
                MapRet::Value(old)
            }
            Err(Some(i)) => {
                t.set_slot(i, Some((key, v)))?;
                t.counted(1);
                MapRet::Value(None)
            }
            Err(None) => MapRet::Full,
        },
        MapOp::Cas { key, expected, new } => match find(t, key)? {
            Ok(i) => {
                let old = value(t.slot(i)?);
                if old == Some(expected) {
                    t.set_slot(i, Some((key, new)))?;
                }
                MapRet::Value(old)
            }
            Err(_) => MapRet::Value(None),
        },
        MapOp::Remove(key) => match find(t, key)? {
            Ok(i) => {
                let old = value(t.slot(i)?);
                // Backward-shift deletion (Knuth's Algorithm R): move later entries of the run
                // into the hole unless their home lies cyclically after the hole.
                let b = t.buckets();
                let mut hole = i;
                let mut j = i;
                loop {
                    j = (j + 1) % b;
                    if j == i {
                        break;
                    }
                    let Some((k, v)) = t.slot(j)? else { break };
                    if !between(hole, home(k, b), j) {
                        t.set_slot(hole, Some((k, v)))?;
                        hole = j;
                    }
                }
                t.set_slot(hole, None)?;
                t.counted(-1);
                MapRet::Value(old)
            }
            Err(_) => MapRet::Value(None),
        },
        MapOp::Len => MapRet::Len(t.count()?),
    })
}

impl Sequential for FixedHashMap {
    type Op = MapOp;
    type Ret = MapRet;

    fn words(&self) -> usize {
        Self::words_for(self.buckets())
    }

    fn encode(&self, out: &mut [u64]) -> Result<(), LayoutError> {
        let mut e = Encoder::new(out);
        // The empty buckets before each full one are padding (counted, however many).
        let mut next = 0;
        for (&i, &(k, v)) in &self.slots {
            e.pad((i - next).saturating_mul(BUCKET));
            [1, k, v].into_iter().for_each(|w| e.push(w));
            next = i + 1;
        }
        e.pad((self.buckets - next).saturating_mul(BUCKET));
        e.finish()
    }

    fn decode(words: &[u64]) -> Result<Self, LayoutError> {
        if words.len() % BUCKET != 0 {
            return Err(LayoutError::Invalid {
                word: words.len(),
                reason: "a hash map's layout is a whole number of 3-word buckets",
            });
        }
        let mut d = Decoder::new(words);
        let mut slots = BTreeMap::new();
        while d.remaining() > 0 {
            let at = d.position();
            if let Some(kv) = decode_slot(at, &[d.next()?, d.next()?, d.next()?])? {
                slots.insert(at / BUCKET, kv);
            }
        }
        Ok(FixedHashMap {
            buckets: words.len() / BUCKET,
            slots,
        })
    }

    fn apply(&mut self, op: MapOp) -> MapRet {
        match run(self, op) {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// Fetches only the probed buckets, 4 per get (cyclically), from the key's home bucket
    /// on (the whole layout for [`MapOp::Len`]).
    fn apply_words(words: &mut Words<'_>, op: MapOp) -> Result<MapRet> {
        run(&mut Remote { words }, op)
    }
}

/// A [`FixedHashMap`] ported to RDMA: its buckets on one node, every operation under that node's
/// lock; linearizable.
pub type PortedHashMap = Ported<FixedHashMap>;

impl Ported<FixedHashMap> {
    /// The number of buckets.
    pub fn buckets(&self) -> usize {
        self.words() / BUCKET
    }

    /// The value of `key`.
    pub fn get(&self, ctx: &Ctx, key: u64) -> Result<Option<u64>> {
        self.value(ctx, MapOp::Get(key))
    }

    /// Sets `key` to `value`; returns the old value. Fails with [`Error::MapFull`] if the key is
    /// new and every bucket is taken (nothing is written then).
    pub fn insert(&self, ctx: &Ctx, key: u64, value: u64) -> Result<Option<u64>> {
        self.value(ctx, MapOp::Insert(key, value))
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, ctx: &Ctx, key: u64) -> Result<Option<u64>> {
        self.value(ctx, MapOp::Remove(key))
    }

    /// If `key` is present with value `expected`, sets it to `new`. Returns the value seen
    /// (`None`: absent); the swap happened iff it is `Some(expected)`.
    pub fn cas(&self, ctx: &Ctx, key: u64, expected: u64, new: u64) -> Result<Option<u64>> {
        self.value(ctx, MapOp::Cas { key, expected, new })
    }

    /// The number of entries (fetches the whole layout: one get).
    pub fn len(&self, ctx: &Ctx) -> Result<usize> {
        match self.apply(ctx, MapOp::Len)? {
            MapRet::Len(n) => Ok(n),
            other => unreachable!("Len returned {other:?}"),
        }
    }

    fn value(&self, ctx: &Ctx, op: MapOp) -> Result<Option<u64>> {
        match self.apply(ctx, op)? {
            MapRet::Value(v) => Ok(v),
            MapRet::Full => Err(Error::MapFull {
                buckets: self.buckets(),
            }),
            MapRet::Len(_) => unreachable!("only Len returns Len"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn sequential_map_matches_std_and_round_trips_its_encoding() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for buckets in [1, 2, 5, 8] {
            let mut m = FixedHashMap::with_buckets(buckets);
            let mut std = std::collections::HashMap::new();
            for _ in 0..2000 {
                let k = rng.random_range(0..12u64);
                let v = rng.random_range(0..100u64);
                let op = match rng.random_range(0..4) {
                    0 => MapOp::Get(k),
                    1 => MapOp::Insert(k, v),
                    2 => MapOp::Remove(k),
                    _ => MapOp::Cas {
                        key: k,
                        expected: v % 3,
                        new: v,
                    },
                };
                let want = match op {
                    MapOp::Get(k) => MapRet::Value(std.get(&k).copied()),
                    MapOp::Insert(k, _) if std.len() == buckets && !std.contains_key(&k) => {
                        MapRet::Full
                    }
                    MapOp::Insert(k, v) => MapRet::Value(std.insert(k, v)),
                    MapOp::Remove(k) => MapRet::Value(std.remove(&k)),
                    MapOp::Cas { key, expected, new } => {
                        let old = std.get(&key).copied();
                        if old == Some(expected) {
                            std.insert(key, new);
                        }
                        MapRet::Value(old)
                    }
                    MapOp::Len => unreachable!(),
                };
                assert_eq!(m.apply(op), want, "{op:?}");
                assert_eq!(m.apply(MapOp::Len), MapRet::Len(std.len()));
                for (k, v) in &std {
                    assert_eq!(m.get(*k), Some(*v));
                }
                let mut w = vec![0; m.words()];
                m.encode(&mut w).unwrap();
                let back = FixedHashMap::decode(&w).unwrap();
                assert_eq!(back, m);
                assert!(back.iter().eq(m.iter()), "the same buckets");
            }
        }
    }

    #[test]
    fn bad_encodings_are_rejected() {
        assert!(matches!(
            FixedHashMap::decode(&[2, 0, 0]),
            Err(LayoutError::Invalid { word: 0, .. })
        ));
        assert!(matches!(
            FixedHashMap::decode(&[0, 5, 0]),
            Err(LayoutError::Invalid { word: 1, .. })
        ));
        assert!(matches!(
            FixedHashMap::decode(&[0, 0]),
            Err(LayoutError::Invalid { .. })
        ));
    }
}
