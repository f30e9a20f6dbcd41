//! Block-id and task-id bitmaps in the byte format of Java's `Roaring64NavigableMap`.
//!
//! Uniffle clients exchange 64-bit id sets (`GetShuffleResult*Response.serializedBitmap`,
//! `GetMemoryShuffleDataRequest.serializedExpectedTaskIdsBitmap`, the Netty memory-read
//! request) as `Roaring64NavigableMap.serialize(DataOutput)` of RoaringBitmap 0.9.15, the
//! version every Uniffle release pins. That "legacy" layout is:
//!
//! ```text
//! u8      signedLongs (0 for the maps Uniffle builds; 1 only changes the key order)
//! i32 BE  number of high buckets N
//! N x {   i32 BE high 32 bits of the values in this bucket,
//!         32-bit RoaringBitmap of the low 32 bits, in the portable (little-endian) format }
//! ```
//!
//! croaring's `Treemap` calls this format `JvmLegacy`; we use it to write. Reading is framed
//! here by hand (only the 32-bit bodies go to croaring) so that malformed input becomes a
//! typed error instead of a silently empty set, and so that the signed flag 1 is accepted.
//! The croaring type stays private: callers see [`IdBitmap`] only.

use croaring::{Bitmap, JvmLegacy, Portable, Treemap};

/// Why a serialized bitmap could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitmapError {
    /// The flag byte was neither 0 nor 1.
    #[error("invalid signedLongs flag {0:#04x} (expected 0 or 1)")]
    InvalidSignedFlag(u8),
    /// The input ended inside the map header (flag + bucket count).
    #[error("bitmap truncated in its header")]
    TruncatedHeader,
    /// The input ended before the high key of bucket `bucket`.
    #[error("bitmap truncated before the high key of bucket {bucket}")]
    TruncatedBucket {
        /// Index of the bucket being read.
        bucket: u32,
    },
    /// The 32-bit Roaring body of a bucket is not a valid portable bitmap.
    #[error("invalid 32-bit roaring body in bucket {bucket} (high key {high:#x})")]
    InvalidBucket {
        /// Index of the bucket.
        bucket: u32,
        /// Its high key.
        high: u32,
    },
    /// The same high key appeared twice; Java never writes that.
    #[error("duplicate high key {0:#x}")]
    DuplicateHighKey(u32),
    /// Bytes were left after the last bucket.
    #[error("{0} trailing bytes after the bitmap")]
    TrailingBytes(usize),
}

/// A set of 64-bit ids (block ids or encoded task attempt ids) that serializes exactly like
/// Java's `Roaring64NavigableMap` (see the module docs).
///
/// Ids are Java `long`s on the wire; `i64` helpers reinterpret the bits, so negative values
/// round-trip (they sort after every non-negative id, as in an unsigned Java map).
#[derive(Clone, Default)]
pub struct IdBitmap {
    ids: Ids,
}

/// Most ids kept as a sorted list before the set becomes a roaring map.
/// A partition's reported block ids are often a handful (one block per map
/// task that wrote to it), and a `Treemap`'s first node alone costs some
/// 500 bytes: at a million partitions held that was half a gigabyte.
const SMALL_MAX: usize = 16;

#[derive(Clone)]
enum Ids {
    /// At most [`SMALL_MAX`] ids, sorted and unique.
    Small(Vec<u64>),
    Large(Treemap),
}

impl Default for Ids {
    fn default() -> Self {
        Ids::Small(Vec::new())
    }
}

/// A set's ids in ascending order, whichever form it has.
enum Iter<'a> {
    Small(std::slice::Iter<'a, u64>),
    Large(croaring::treemap::TreemapIterator<'a>),
}

impl Iterator for Iter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match self {
            Iter::Small(i) => i.next().copied(),
            Iter::Large(i) => i.next(),
        }
    }
}

impl PartialEq for IdBitmap {
    /// Set equality, whichever form either side has.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for IdBitmap {}

impl std::fmt::Debug for IdBitmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl IdBitmap {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an id.
    pub fn insert(&mut self, id: u64) {
        match &mut self.ids {
            Ids::Small(v) => {
                let Err(at) = v.binary_search(&id) else {
                    return;
                };
                if v.len() < SMALL_MAX {
                    v.insert(at, id);
                } else {
                    let mut map: Treemap = v.iter().copied().collect();
                    map.add(id);
                    self.ids = Ids::Large(map);
                }
            }
            Ids::Large(map) => map.add(id),
        }
    }

    /// Adds a Java `long` id.
    pub fn insert_i64(&mut self, id: i64) {
        self.insert(id as u64);
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u64) -> bool {
        match &self.ids {
            Ids::Small(v) => v.binary_search(&id).is_ok(),
            Ids::Large(map) => map.contains(id),
        }
    }

    /// Whether the Java `long` `id` is in the set.
    pub fn contains_i64(&self, id: i64) -> bool {
        self.contains(id as u64)
    }

    /// Number of ids.
    pub fn len(&self) -> u64 {
        match &self.ids {
            Ids::Small(v) => v.len() as u64,
            Ids::Large(map) => map.cardinality(),
        }
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds every id of `other`.
    pub fn union_with(&mut self, other: &IdBitmap) {
        match (&mut self.ids, &other.ids) {
            (Ids::Large(mine), Ids::Large(theirs)) => mine.or_inplace(theirs),
            (_, Ids::Small(theirs)) => theirs.iter().for_each(|&id| self.insert(id)),
            (Ids::Small(mine), Ids::Large(theirs)) => {
                let mut map = theirs.clone();
                map.extend(mine.iter().copied());
                self.ids = Ids::Large(map);
            }
        }
    }

    /// Ids in ascending unsigned order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        match &self.ids {
            Ids::Small(v) => Iter::Small(v.iter()),
            Ids::Large(map) => Iter::Large(map.iter()),
        }
    }

    /// Ids as Java `long`s, in ascending unsigned order.
    pub fn iter_i64(&self) -> impl Iterator<Item = i64> + '_ {
        self.iter().map(|id| id as i64)
    }

    /// Serializes in the Java legacy layout, with signedLongs = 0 as Uniffle writes it.
    /// The empty set is the 5 bytes `00 00000000`.
    pub fn to_java_bytes(&self) -> Vec<u8> {
        match &self.ids {
            Ids::Small(v) => v.iter().copied().collect::<Treemap>(),
            Ids::Large(map) => map.clone(),
        }
        .serialize::<JvmLegacy>()
    }

    /// Reads the Java legacy layout. Empty input is the empty set: the Java client
    /// (`RssUtils.deserializeBitMap`) and server both treat missing bytes that way.
    pub fn from_java_bytes(bytes: &[u8]) -> Result<Self, BitmapError> {
        let Some((&flag, mut rest)) = bytes.split_first() else {
            return Ok(Self::new());
        };
        // signedLongs = 1 only changes Java's iteration order; the stored
        // (high, low) split of every value is the same.
        if flag > 1 {
            return Err(BitmapError::InvalidSignedFlag(flag));
        }
        let count = read_be_u32(&mut rest).ok_or(BitmapError::TruncatedHeader)?;
        let mut inner = Treemap::new();
        for bucket in 0..count {
            let high = read_be_u32(&mut rest).ok_or(BitmapError::TruncatedBucket { bucket })?;
            let low = Bitmap::try_deserialize::<Portable>(rest)
                .ok_or(BitmapError::InvalidBucket { bucket, high })?;
            let used = low.get_serialized_size_in_bytes::<Portable>();
            // croaring validated the body within `rest`, so `used` fits; checked anyway so
            // a disagreement between its parser and its size estimate cannot panic.
            rest = rest
                .get(used..)
                .ok_or(BitmapError::InvalidBucket { bucket, high })?;
            if inner.map.contains_key(&high) {
                return Err(BitmapError::DuplicateHighKey(high));
            }
            // An empty bucket adds no ids; dropping it keeps equality a pure set comparison.
            if !low.is_empty() {
                inner.map.insert(high, low);
            }
        }
        if !rest.is_empty() {
            return Err(BitmapError::TrailingBytes(rest.len()));
        }
        Ok(Self {
            ids: Ids::Large(inner),
        })
    }
}

impl FromIterator<u64> for IdBitmap {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut set = Self::new();
        set.extend(iter);
        set
    }
}

impl FromIterator<i64> for IdBitmap {
    fn from_iter<I: IntoIterator<Item = i64>>(iter: I) -> Self {
        iter.into_iter().map(|id| id as u64).collect()
    }
}

impl Extend<u64> for IdBitmap {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, iter: I) {
        iter.into_iter().for_each(|id| self.insert(id));
    }
}

fn read_be_u32(input: &mut &[u8]) -> Option<u32> {
    let (head, rest) = input.split_first_chunk::<4>()?;
    *input = rest;
    Some(u32::from_be_bytes(*head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // Captured from Java RoaringBitmap 0.9.15 (see docs/uniffle-protocol.md section 3.7).
    const JAVA_0_4_9: &str =
        "00 00000001 00000000 3a300000 01000000 0000 0200 10000000 0000 0400 0900";

    #[test]
    fn serializes_like_java() {
        let map: IdBitmap = [0u64, 4, 9].into_iter().collect();
        assert_eq!(map.to_java_bytes(), hex(JAVA_0_4_9));
    }

    #[test]
    fn deserializes_java_bytes() {
        let map = IdBitmap::from_java_bytes(&hex(JAVA_0_4_9)).unwrap();
        assert_eq!(map.iter().collect::<Vec<_>>(), vec![0, 4, 9]);
    }

    #[test]
    fn empty_set_is_five_bytes_and_empty_input_is_empty_set() {
        assert_eq!(IdBitmap::new().to_java_bytes(), hex("00 00000000"));
        assert!(IdBitmap::from_java_bytes(&[]).unwrap().is_empty());
        assert!(IdBitmap::from_java_bytes(&hex("00 00000000"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn accepts_signed_flag() {
        let mut bytes = hex(JAVA_0_4_9);
        bytes[0] = 1;
        let map = IdBitmap::from_java_bytes(&bytes).unwrap();
        assert_eq!(map.iter().collect::<Vec<_>>(), vec![0, 4, 9]);
    }

    // Captured from Java RoaringBitmap 0.9.15 (Roaring64NavigableMap,
    // `serialize(DataOutputStream)`); larger outputs are pinned by length + CRC-32.
    const JAVA_MULTI: &str = "00 00000004 \
        00000000 3a300000 01000000 0000 0000 10000000 0700 \
        00000001 3a300000 01000000 0000 0000 10000000 0300 \
        00000005 3a300000 02000000 0000 0000 ffff 0000 18000000 1a000000 0100 ffff \
        ffffffff 3a300000 01000000 ffff 0000 10000000 ffff";
    // `new Roaring64NavigableMap(true)` with {-1, 5, Long.MIN_VALUE}: flag 1, signed key order.
    const JAVA_SIGNED: &str = "01 00000003 \
        80000000 3a300000 01000000 0000 0000 10000000 0000 \
        ffffffff 3a300000 01000000 ffff 0000 10000000 ffff \
        00000000 3a300000 01000000 0000 0000 10000000 0500";

    fn java_pinned(map: &IdBitmap, len: usize, crc: u32) {
        let bytes = map.to_java_bytes();
        assert_eq!((bytes.len(), crc32fast::hash(&bytes)), (len, crc));
        assert_eq!(&IdBitmap::from_java_bytes(&bytes).unwrap(), map);
    }

    #[test]
    fn matches_java_for_multiple_high_keys() {
        let map: IdBitmap = [
            7u64,
            (1 << 32) | 3,
            (5 << 32) | 0xFFFF_FFFF,
            (5 << 32) | 1,
            u64::MAX,
        ]
        .into_iter()
        .collect();
        assert_eq!(map.to_java_bytes(), hex(JAVA_MULTI));
        assert_eq!(IdBitmap::from_java_bytes(&hex(JAVA_MULTI)).unwrap(), map);
    }

    #[test]
    fn reads_java_signed_maps() {
        let map = IdBitmap::from_java_bytes(&hex(JAVA_SIGNED)).unwrap();
        let expected: IdBitmap = [-1i64, 5, i64::MIN].into_iter().collect();
        assert_eq!(map, expected);
    }

    #[test]
    fn matches_java_for_bitmap_containers() {
        let big: IdBitmap = (0..5000u64).map(|i| i * 3).chain([1 << 40]).collect();
        java_pinned(&big, 8239, 0x7dd3_7dc2);
    }

    #[test]
    fn matches_java_for_uniffle_block_ids() {
        // seq << 42 | partition << 22 | task: the default Spark layout (21/20/22 bits).
        let ids = (0..3u64).flat_map(|seq| {
            (0..50u64).flat_map(move |p| (0..40u64).map(move |t| seq << 42 | p << 22 | t))
        });
        java_pinned(&ids.collect(), 13241, 0x1711_fdc9);
    }

    #[test]
    fn negative_java_longs_round_trip() {
        let map: IdBitmap = [-1i64, 0, 42, i64::MIN].into_iter().collect();
        let back = IdBitmap::from_java_bytes(&map.to_java_bytes()).unwrap();
        assert!(back.contains_i64(-1) && back.contains_i64(i64::MIN) && back.contains_i64(42));
        assert_eq!(
            back.iter_i64().collect::<Vec<_>>(),
            vec![0, 42, i64::MIN, -1]
        );
    }

    #[test]
    fn malformed_input_is_an_error() {
        let good = hex(JAVA_0_4_9);
        assert_eq!(
            IdBitmap::from_java_bytes(&[2, 0, 0, 0, 0]),
            Err(BitmapError::InvalidSignedFlag(2))
        );
        assert_eq!(
            IdBitmap::from_java_bytes(&[0, 0, 0]),
            Err(BitmapError::TruncatedHeader)
        );
        assert_eq!(
            IdBitmap::from_java_bytes(&good[..7]),
            Err(BitmapError::TruncatedBucket { bucket: 0 })
        );
        assert!(matches!(
            IdBitmap::from_java_bytes(&good[..good.len() - 1]),
            Err(BitmapError::InvalidBucket { bucket: 0, high: 0 })
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(
            IdBitmap::from_java_bytes(&trailing),
            Err(BitmapError::TrailingBytes(1))
        );
        // Two buckets with the same key.
        let body = &good[9..];
        let mut dup = hex("00 00000002");
        for _ in 0..2 {
            dup.extend_from_slice(&[0, 0, 0, 0]);
            dup.extend_from_slice(body);
        }
        assert_eq!(
            IdBitmap::from_java_bytes(&dup),
            Err(BitmapError::DuplicateHighKey(0))
        );
        // A huge bucket count with no data must fail fast, not allocate.
        assert_eq!(
            IdBitmap::from_java_bytes(&hex("00 7fffffff")),
            Err(BitmapError::TruncatedBucket { bucket: 0 })
        );
    }

    proptest! {
        #[test]
        fn round_trip(ids in proptest::collection::vec(
            prop_oneof![
                any::<u64>(),
                0u64..70_000,
                (0u64..4, 0u64..70_000).prop_map(|(h, l)| (h << 32) | l),
            ],
            0..600,
        )) {
            let map: IdBitmap = ids.iter().copied().collect();
            let bytes = map.to_java_bytes();
            let back = IdBitmap::from_java_bytes(&bytes).unwrap();
            prop_assert_eq!(&back, &map);
            let mut expected = ids.clone();
            expected.sort_unstable();
            expected.dedup();
            prop_assert_eq!(back.iter().collect::<Vec<_>>(), expected);
            // Re-serializing what we read gives the same bytes.
            prop_assert_eq!(back.to_java_bytes(), bytes);
        }

        /// Both forms (a short sorted list, a roaring map past
        /// `SMALL_MAX` ids) behave as one set: inserts, unions in every
        /// combination, membership, order and the bytes written.
        #[test]
        fn small_and_large_forms_are_one_set(
            a in proptest::collection::vec(0u64..64, 0..40),
            b in proptest::collection::vec(0u64..64, 0..40),
        ) {
            let mut set: IdBitmap = a.iter().copied().collect();
            let other: IdBitmap = b.iter().copied().collect();
            set.union_with(&other);
            let model: std::collections::BTreeSet<u64> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(set.len(), model.len() as u64);
            prop_assert!(set.iter().eq(model.iter().copied()));
            for id in 0..64 {
                prop_assert_eq!(set.contains(id), model.contains(&id));
            }
            let read = IdBitmap::from_java_bytes(&set.to_java_bytes()).unwrap();
            prop_assert_eq!(&read, &set);
            let mut via_large = read.clone();
            via_large.union_with(&other);
            prop_assert_eq!(&via_large, &set);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = IdBitmap::from_java_bytes(&bytes);
        }
    }
}
