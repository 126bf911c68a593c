//! LRU cache of segment batch bytes, bounded in bytes (`KAFSCALE_CACHE_BYTES`). Filled by this
//! broker's own flushes, by readahead and by reads that missed.

use std::collections::HashSet;
use std::sync::Mutex;

use bytes::Bytes;
use lru::LruCache;

use super::segment::{BuiltSegment, SEGMENT_HEADER_LEN};

/// Batch bytes of one segment from byte `start` of the `.kfs` object to the footer.
#[derive(Debug, Clone)]
pub struct CachedBatches {
    pub start: u64,
    pub bytes: Bytes,
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
        let size = batches.bytes.len();
        if size > self.capacity {
            return;
        }
        let mut inner = self.inner();
        if let Some(old) = inner.entries.put(key, batches) {
            inner.bytes -= old.bytes.len();
        }
        inner.bytes += size;
        while inner.bytes > self.capacity {
            match inner.entries.pop_lru() {
                Some((_, evicted)) => inner.bytes -= evicted.bytes.len(),
                None => break,
            }
        }
    }

    /// Moves an entry to another key, if it is still cached (a segment uploaded under a
    /// pending name, once its commit made it part of the log).
    pub fn rename(&self, from: &str, to: String) {
        let entry = {
            let mut inner = self.inner();
            let entry = inner.entries.pop(from);
            if let Some(entry) = &entry {
                inner.bytes -= entry.bytes.len();
            }
            entry
        };
        if let Some(entry) = entry {
            self.insert(to, entry);
        }
    }

    /// Caches a segment this broker just wrote (a slice of the uploaded object, no copy).
    pub fn insert_segment(&self, key: String, built: &BuiltSegment) {
        self.insert(
            key,
            CachedBatches {
                start: SEGMENT_HEADER_LEN as u64,
                bytes: built.batches(),
            },
        );
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
        CachedBatches {
            start: 32,
            bytes: Bytes::from(vec![0u8; n]),
        }
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
