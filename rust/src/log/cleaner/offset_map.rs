//! The cleaner's offset map: for each key of the dirty part of a log, the offset of its last
//! record. Keys are held as 128-bit digests (the first half of their SHA-256, as Kafka holds
//! their MD5): two keys share one only by a collision no log meets. The map's memory is bounded
//! by a setting: it grows with the keys it holds (a table made whole up front would touch
//! every page of it, and a cleaning of few keys would pay for them all), and once it holds as
//! many as the setting allows, the cleaning stops taking records in and cleans up to where it
//! got (`OffsetMap::insert`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use ring::digest::{digest, SHA256};

/// Bytes one entry may take: 24 of digest and offset and one control byte, in a table that
/// keeps an eighth of its slots free and doubles when it grows (so up to 57 bytes a key).
pub(crate) const ENTRY_BYTES: usize = 64;

/// A key's digest.
pub(crate) type KeyDigest = u128;

pub(crate) fn key_digest(key: &[u8]) -> KeyDigest {
    let sum = digest(&SHA256, key);
    u128::from_be_bytes(sum.as_ref()[..16].try_into().expect("SHA-256 has 32 bytes"))
}

/// The digests are already spread evenly: the table uses their low bits as they are.
#[derive(Default)]
pub(crate) struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u128 keys are hashed here (`write_u128`); fold anything else in.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(word);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

pub(crate) struct OffsetMap {
    offsets: HashMap<KeyDigest, i64, BuildHasherDefault<DigestHasher>>,
    capacity: usize,
}

impl OffsetMap {
    /// A map of at most `memory_bytes` (at least one entry).
    pub(crate) fn with_memory(memory_bytes: usize) -> OffsetMap {
        OffsetMap {
            offsets: HashMap::default(),
            capacity: (memory_bytes / ENTRY_BYTES).max(1),
        }
    }

    /// How many more distinct keys fit.
    pub(crate) fn room(&self) -> usize {
        self.capacity - self.offsets.len()
    }

    /// Records `offset` as the last one of `key` so far (offsets come in order). False, and
    /// nothing recorded, when the key is new and the map is full.
    pub(crate) fn insert(&mut self, key: KeyDigest, offset: i64) -> bool {
        if let Some(last) = self.offsets.get_mut(&key) {
            *last = offset;
            return true;
        }
        if self.offsets.len() == self.capacity {
            return false;
        }
        self.offsets.insert(key, offset);
        true
    }

    /// The offset of the last record of `key` the map took in.
    pub(crate) fn get(&self, key: KeyDigest) -> Option<i64> {
        self.offsets.get(&key).copied()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.offsets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_offset_of_each_key_is_kept_and_a_full_map_takes_no_new_key() {
        let mut map = OffsetMap::with_memory(3 * ENTRY_BYTES);
        let (a, b, c, d) = (
            key_digest(b"a"),
            key_digest(b"b"),
            key_digest(b"c"),
            key_digest(b"d"),
        );
        assert!(map.insert(a, 0) && map.insert(b, 1) && map.insert(a, 2));
        assert_eq!(
            (map.get(a), map.get(b), map.len(), map.room()),
            (Some(2), Some(1), 2, 1)
        );
        assert!(map.insert(c, 3));
        assert_eq!(map.room(), 0);
        assert!(!map.insert(d, 4), "full: a new key is refused");
        assert_eq!(map.get(d), None);
        assert!(map.insert(b, 5), "a key it holds still moves on");
        assert_eq!(map.get(b), Some(5));
    }

    #[test]
    fn keys_are_told_apart_by_their_digest() {
        assert_ne!(key_digest(b"k1"), key_digest(b"k2"));
        assert_ne!(key_digest(b""), key_digest(b"\0"));
        assert_eq!(key_digest(b"same"), key_digest(b"same"));
    }
}
