//! LRU cache of segment batch bytes, bounded in bytes (`KAFSCALE_CACHE_BYTES`). Filled by this
//! broker's own flushes, by readahead and by reads that missed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lru::LruCache;

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
    /// Batches read or written in one piece.
    pub fn whole(start: u64, bytes: Bytes) -> CachedBatches {
        CachedBatches {
            start,
            pieces: Arc::new([bytes]),
        }
    }

    pub fn pieces(start: u64, pieces: &[Bytes]) -> CachedBatches {
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
}

pub struct SegmentCache {
    capacity: usize,
    inner: Mutex<Inner>,
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
            }),
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
        while inner.bytes > self.capacity {
            match inner.entries.pop_lru() {
                Some((_, evicted)) => inner.bytes -= evicted.len(),
                None => break,
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: usize) -> CachedBatches {
        CachedBatches::whole(32, Bytes::from(vec![0u8; n]))
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
        cache.insert("pieces".into(), CachedBatches::pieces(32, &pieces));
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
}
