//! LRU cache of segment batch bytes, bounded in bytes (`KAFSCALE_CACHE_BYTES`). Filled by this
//! broker's own flushes, by readahead and by reads that missed.
//!
//! The bound covers reads on their way in too: a read from the object store first reserves
//! room for the bytes it asks for (evicting what it must), and waits while reads in flight hold
//! all of it. Otherwise many consumers missing at once, and their readahead, would each hold a
//! segment outside any bound until it arrived.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lru::LruCache;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::batch::BatchHeader;
use super::pieces::PieceWalker;
use super::segment::{BuiltSegment, SEGMENT_HEADER_LEN};

/// Batch bytes of one segment (or write-ahead run) from byte `start` of its object on, in the
/// pieces they were written or read in (`log::pieces`): a run this broker wrote is cached as
/// the slices of the produce requests, a segment it compacted as the slices of its runs.
#[derive(Debug, Clone)]
pub struct CachedBatches {
    pub start: u64,
    pieces: Arc<[Bytes]>,
}

impl CachedBatches {
    pub fn pieces(start: u64, pieces: impl Into<Arc<[Bytes]>>) -> CachedBatches {
        CachedBatches {
            start,
            pieces: pieces.into(),
        }
    }

    pub fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }

    /// The header of the first batch, if there is one.
    pub fn first_header(&self) -> Option<BatchHeader> {
        Some(self.batches().next()?.ok()?.1)
    }

    /// Every batch with its header, in order (see `PieceWalker`).
    pub fn batches(&self) -> PieceWalker<'_> {
        PieceWalker::new(&self.pieces)
    }
}

struct Inner {
    entries: LruCache<String, CachedBatches>,
    bytes: usize,
    /// Room held by reads in flight (`Reservation`): entries get at most the rest.
    reserved: usize,
}

impl Inner {
    /// Evicts least recently used entries until entries and reservations fit `capacity`.
    fn evict_beyond(&mut self, capacity: usize) {
        while self.bytes + self.reserved > capacity {
            match self.entries.pop_lru() {
                Some((_, evicted)) => self.bytes -= evicted.len(),
                None => break,
            }
        }
    }
}

pub struct SegmentCache {
    capacity: usize,
    inner: Mutex<Inner>,
    /// One permit per byte of capacity; a read in flight holds as many as it asks for.
    room: Semaphore,
    /// Keys being loaded by readahead, so two fetches don't load the same segment twice.
    loading: Mutex<HashSet<String>>,
}

impl SegmentCache {
    pub fn new(capacity: usize) -> SegmentCache {
        SegmentCache {
            capacity,
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
                reserved: 0,
            }),
            room: Semaphore::new(capacity.min(Semaphore::MAX_PERMITS)),
            loading: Mutex::new(HashSet::new()),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.inner().bytes
    }

    pub fn get(&self, key: &str) -> Option<CachedBatches> {
        self.inner().entries.get(key).cloned()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.inner().entries.contains(key)
    }

    pub fn insert(&self, key: String, batches: CachedBatches) {
        let size = batches.len();
        if size > self.capacity {
            return;
        }
        let mut inner = self.inner();
        if let Some(old) = inner.entries.put(key, batches) {
            inner.bytes -= old.len();
        }
        inner.bytes += size;
        inner.evict_beyond(self.capacity);
    }

    /// Room for `bytes` about to be read from the object store, waiting while reads in flight
    /// hold it all. A read larger than the whole cache reserves all of it (and is then not
    /// cached: `insert` refuses it).
    pub async fn reserve(&self, bytes: usize) -> Reservation<'_> {
        let bytes = bytes.min(self.capacity).min(u32::MAX as usize);
        let permit = self
            .room
            .acquire_many(bytes as u32)
            .await
            .expect("the cache never closes its semaphore");
        let mut inner = self.inner();
        inner.reserved += bytes;
        inner.evict_beyond(self.capacity);
        Reservation {
            cache: self,
            bytes,
            _permit: permit,
        }
    }

    /// Moves an entry to another key, if it is still cached (a segment uploaded under a
    /// pending name, once its commit made it part of the log).
    pub fn rename(&self, from: &str, to: String) {
        if let Some(entry) = self.take(from) {
            self.insert(to, entry);
        }
    }

    /// Caches a segment this broker just wrote (the slices it was uploaded from, no copy).
    pub fn insert_segment(&self, key: String, built: &BuiltSegment) {
        let batches = CachedBatches::pieces(SEGMENT_HEADER_LEN as u64, built.batches());
        self.insert(key, batches);
    }

    /// Drops an entry (write-ahead runs now cached as part of their segment).
    pub fn remove(&self, key: &str) {
        self.take(key);
    }

    /// Takes an entry out, uncounted.
    fn take(&self, key: &str) -> Option<CachedBatches> {
        let mut inner = self.inner();
        let entry = inner.entries.pop(key)?;
        inner.bytes -= entry.len();
        Some(entry)
    }

    /// Claims a key for loading; false if it is cached or already being loaded.
    pub fn begin_loading(&self, key: &str) -> bool {
        !self.contains(key)
            && self
                .loading
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.to_string())
    }

    pub fn end_loading(&self, key: &str) {
        self.loading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    pub fn used_bytes(&self) -> usize {
        self.inner().bytes
    }
}

/// Room in the cache held for a read in flight, given back when dropped (the read failed or
/// was cancelled) or when its bytes take its place (`fill`).
pub struct Reservation<'a> {
    cache: &'a SegmentCache,
    bytes: usize,
    _permit: SemaphorePermit<'a>,
}

impl Reservation<'_> {
    /// Caches what the read brought in place of the room held for it.
    pub fn fill(self, key: String, batches: CachedBatches) {
        let cache = self.cache;
        drop(self);
        cache.insert(key, batches);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.cache.inner().reserved -= self.bytes;
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn entry(n: usize) -> CachedBatches {
        CachedBatches::pieces(32, vec![Bytes::from(vec![0u8; n])])
    }

    #[test]
    fn evicts_least_recently_used_to_stay_under_capacity() {
        let cache = SegmentCache::new(100);
        cache.insert("a".into(), entry(40));
        cache.insert("b".into(), entry(40));
        assert!(cache.get("a").is_some()); // a is now more recent than b
        cache.insert("c".into(), entry(40));
        assert!(cache.contains("a") && cache.contains("c") && !cache.contains("b"));
        assert_eq!(cache.used_bytes(), 80);
        cache.insert("huge".into(), entry(101));
        assert!(!cache.contains("huge"));
    }

    #[test]
    fn an_entry_in_pieces_counts_them_all_and_a_removed_one_nothing() {
        let cache = SegmentCache::new(100);
        let pieces = [Bytes::from(vec![0u8; 30]), Bytes::from(vec![0u8; 20])];
        cache.insert("pieces".into(), CachedBatches::pieces(32, &pieces[..]));
        assert_eq!(cache.used_bytes(), 50);
        cache.remove("pieces");
        cache.remove("never there");
        assert_eq!(cache.used_bytes(), 0);
        assert!(!cache.contains("pieces"));
    }

    #[test]
    fn a_renamed_entry_keeps_its_bytes_under_the_new_key() {
        let cache = SegmentCache::new(100);
        cache.insert("pending".into(), entry(40));
        cache.rename("pending", "segment".into());
        assert!(!cache.contains("pending") && cache.contains("segment"));
        assert_eq!(cache.used_bytes(), 40);
        // gone meanwhile (evicted): nothing to move
        cache.rename("pending", "other".into());
        assert!(!cache.contains("other"));
    }

    #[tokio::test]
    async fn reads_in_flight_hold_room_that_entries_give_way_to() {
        let cache = SegmentCache::new(100);
        cache.insert("a".into(), entry(40));
        cache.insert("b".into(), entry(40));
        let first = cache.reserve(30).await;
        assert!(
            !cache.contains("a") && cache.contains("b"),
            "the oldest entry made room"
        );
        // An insert leaves the reserved room free too.
        cache.insert("c".into(), entry(40));
        assert!(!cache.contains("b") && cache.contains("c"));
        assert_eq!(cache.used_bytes(), 40);
        // Reads may not reserve more than the cache holds in all: the next one waits.
        let second = cache.reserve(60).await;
        assert!(!cache.contains("c"));
        assert!(cache.reserve(20).now_or_never().is_none());
        first.fill("loaded".into(), entry(30));
        assert!(cache.contains("loaded"));
        assert_eq!(cache.used_bytes(), 30);
        drop(second); // a read that failed gives its room back
        let third = cache.reserve(70).await;
        assert!(cache.contains("loaded"));
        // A read larger than the cache takes all of it, and is not kept.
        drop(third);
        let huge = cache.reserve(500).await;
        assert!(!cache.contains("loaded"));
        huge.fill("huge".into(), entry(500));
        assert!(!cache.contains("huge"));
        assert!(cache.reserve(100).now_or_never().is_some());
    }
}
