//! LRU cache of segment batch bytes, bounded in bytes (`KAFSCALE_CACHE_BYTES`). Filled by this
//! broker's own flushes, by readahead and by reads that missed.
//!
//! The runs this broker commits are what its compaction reads next: they are held apart,
//! oldest first, and evicted only when nothing else is left to evict, until compaction takes
//! them (their segment replaces them) or they are older than the hold (their partition moved,
//! or compaction is behind: from then on they are ordinary entries, evicted first). Reading
//! them back from the object store would cost a GET per run and partition.
//!
//! The bound covers reads on their way in too: a read from the object store first reserves
//! room for the bytes it asks for (evicting what it must), and waits while reads in flight hold
//! all of it. Otherwise many consumers missing at once, and their readahead, would each hold a
//! segment outside any bound until it arrived.
//!
//! An object (a segment, a write-ahead run) is read from the object store once at a time: a
//! reader that misses while another read of the same key is in flight (a consumer reaching the
//! segment its readahead is loading, two consumers of one partition, a consumer and compaction
//! or the producer-state rebuild reading the same run) waits for that read instead of making
//! its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lru::LruCache;
use tokio::sync::{watch, Semaphore, SemaphorePermit};

use super::batch::BatchHeader;
use super::pieces::PieceWalker;
use super::segment::{BuiltSegment, SEGMENT_HEADER_LEN};

/// Batch bytes of one segment (or write-ahead run) from byte `start` of its object on, in the
/// pieces they were written or read in (`log::pieces`): a run this broker wrote is cached as
/// the slices of the produce requests, a segment it compacted as the slices of its runs.
#[derive(Debug, Clone)]
pub(crate) struct CachedBatches {
    pub start: u64,
    pieces: Arc<[Bytes]>,
}

impl CachedBatches {
    pub(crate) fn pieces(start: u64, pieces: impl Into<Arc<[Bytes]>>) -> CachedBatches {
        CachedBatches {
            start,
            pieces: pieces.into(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }

    /// The header of the first batch, if there is one.
    pub(crate) fn first_header(&self) -> Option<BatchHeader> {
        Some(self.batches().next()?.ok()?.1)
    }

    /// Every batch with its header, in order (see `PieceWalker`).
    pub(crate) fn batches(&self) -> PieceWalker<'_> {
        PieceWalker::new(&self.pieces)
    }
}

struct Inner {
    entries: LruCache<String, CachedBatches>,
    /// Runs this broker committed and has not compacted yet, oldest first, with when they
    /// came (`insert_uncompacted`).
    uncompacted: LruCache<String, (CachedBatches, Instant)>,
    bytes: usize,
}

impl Inner {
    /// Evicts until the entries fit `room`: uncompacted runs past the hold first, then the
    /// least recently used entries, then the oldest uncompacted runs.
    fn evict_beyond(&mut self, room: usize, hold: Duration) {
        while self.bytes > room {
            let expired = self
                .uncompacted
                .peek_lru()
                .is_some_and(|(_, (_, since))| since.elapsed() > hold);
            let evicted = if expired || self.entries.is_empty() {
                self.uncompacted.pop_lru().map(|(_, (entry, _))| entry)
            } else {
                self.entries.pop_lru().map(|(_, entry)| entry)
            };
            match evicted {
                Some(entry) => self.bytes -= entry.len(),
                None => break,
            }
        }
    }

    fn take(&mut self, key: &str) -> Option<CachedBatches> {
        let entry = match self.entries.pop(key) {
            Some(entry) => entry,
            None => self.uncompacted.pop(key)?.0,
        };
        self.bytes -= entry.len();
        Some(entry)
    }
}

/// Reads in flight by key; a waiter learns that one ended when its sender is dropped.
type InFlight = Arc<Mutex<HashMap<String, watch::Receiver<()>>>>;

pub(crate) struct SegmentCache {
    capacity: usize,
    /// How long an uncompacted run is held before it is an ordinary entry.
    hold: Duration,
    inner: Mutex<Inner>,
    /// One permit per byte of capacity; a read in flight holds as many as it asks for
    /// (`Reservation`), and entries get at most the permits left.
    room: Semaphore,
    loading: InFlight,
}

impl SegmentCache {
    /// A cache of `capacity` bytes that holds uncompacted runs for `hold` at most.
    pub(crate) fn new(capacity: usize, hold: Duration) -> SegmentCache {
        SegmentCache {
            capacity,
            hold,
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                uncompacted: LruCache::unbounded(),
                bytes: 0,
            }),
            room: Semaphore::new(capacity.min(Semaphore::MAX_PERMITS)),
            loading: InFlight::default(),
        }
    }

    /// What entries may hold now: the capacity less the room reads in flight hold.
    fn room_for_entries(&self) -> usize {
        let reserved = self.capacity.min(Semaphore::MAX_PERMITS) - self.room.available_permits();
        self.capacity - reserved
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Bytes held now.
    pub(crate) fn bytes(&self) -> usize {
        self.inner().bytes
    }

    pub(crate) fn get(&self, key: &str) -> Option<CachedBatches> {
        let mut inner = self.inner();
        if let Some(entry) = inner.entries.get(key) {
            return Some(entry.clone());
        }
        // (a read does not make an uncompacted run younger: it goes when compacted)
        inner.uncompacted.peek(key).map(|(entry, _)| entry.clone())
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        let inner = self.inner();
        inner.entries.contains(key) || inner.uncompacted.contains(key)
    }

    pub(crate) fn insert(&self, key: String, batches: CachedBatches) {
        self.insert_as(key, batches, false);
    }

    /// Caches a run this broker committed, held for its compaction (see the module's notes).
    pub(crate) fn insert_uncompacted(&self, key: String, batches: CachedBatches) {
        self.insert_as(key, batches, true);
    }

    fn insert_as(&self, key: String, batches: CachedBatches, uncompacted: bool) {
        let size = batches.len();
        if size > self.capacity {
            return;
        }
        let mut inner = self.inner();
        inner.take(&key);
        if uncompacted {
            inner.uncompacted.put(key, (batches, Instant::now()));
        } else {
            inner.entries.put(key, batches);
        }
        inner.bytes += size;
        inner.evict_beyond(self.room_for_entries(), self.hold);
    }

    /// Room for `bytes` about to be read from the object store, waiting while reads in flight
    /// hold it all. A read larger than the whole cache reserves all of it (and is then not
    /// cached: `insert` refuses it).
    pub(crate) async fn reserve(&self, bytes: usize) -> Reservation<'_> {
        let bytes = bytes.min(self.capacity).min(u32::MAX as usize);
        let permit = self
            .room
            .acquire_many(bytes as u32)
            .await
            .expect("the cache never closes its semaphore");
        self.inner()
            .evict_beyond(self.room_for_entries(), self.hold);
        Reservation {
            cache: self,
            _permit: permit,
        }
    }

    /// Moves an entry to another key, if it is still cached (a segment uploaded under a
    /// pending name, once its commit made it part of the log).
    pub(crate) fn rename(&self, from: &str, to: String) {
        if let Some(entry) = self.take(from) {
            self.insert(to, entry);
        }
    }

    /// Caches a segment this broker just wrote (the slices it was uploaded from, no copy).
    pub(crate) fn insert_segment(&self, key: String, built: &BuiltSegment) {
        let batches = CachedBatches::pieces(SEGMENT_HEADER_LEN as u64, built.batches());
        self.insert(key, batches);
    }

    /// Drops an entry (write-ahead runs now cached as part of their segment).
    pub(crate) fn remove(&self, key: &str) {
        self.take(key);
    }

    /// Takes an entry out, uncounted.
    fn take(&self, key: &str) -> Option<CachedBatches> {
        self.inner().take(key)
    }

    /// Claims `key` for a read from the object store, until the returned `Loading` is
    /// dropped. None if it is cached, or another read of it is in flight (see `loaded`).
    pub(crate) fn begin_loading(&self, key: &str) -> Option<Loading> {
        if self.contains(key) {
            return None;
        }
        let mut loading = lock(&self.loading);
        if loading.contains_key(key) {
            return None;
        }
        let (done, waiting) = watch::channel(());
        loading.insert(key.to_string(), waiting);
        Some(Loading {
            loading: self.loading.clone(),
            key: key.to_string(),
            _done: done,
        })
    }

    /// Waits for the read of `key` in flight to end, if there is one: true if it waited.
    /// (It may have failed, or read less than the waiter needs: the waiter looks again.)
    pub(crate) async fn loaded(&self, key: &str) -> bool {
        let Some(mut waiting) = lock(&self.loading).get(key).cloned() else {
            return false;
        };
        // Nothing is ever sent: this returns once the reader drops its sender.
        let _ = waiting.changed().await;
        true
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Room in the cache held for a read in flight (its semaphore permits), given back when
/// dropped (the read failed or was cancelled) or when its bytes take its place (`fill`).
pub(crate) struct Reservation<'a> {
    cache: &'a SegmentCache,
    _permit: SemaphorePermit<'a>,
}

impl Reservation<'_> {
    /// Caches what the read brought in place of the room held for it.
    pub(crate) fn fill(self, key: String, batches: CachedBatches) {
        let cache = self.cache;
        drop(self);
        cache.insert(key, batches);
    }
}

/// A key claimed for reading (`SegmentCache::begin_loading`); dropping it, whether the read
/// succeeded, failed or was cancelled, ends the claim and wakes the readers waiting on it.
pub(crate) struct Loading {
    loading: InFlight,
    key: String,
    _done: watch::Sender<()>,
}

impl Drop for Loading {
    fn drop(&mut self) {
        lock(&self.loading).remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    const HOLD: Duration = Duration::from_secs(60);

    fn entry(n: usize) -> CachedBatches {
        CachedBatches::pieces(32, vec![Bytes::from(vec![0u8; n])])
    }

    #[test]
    fn evicts_least_recently_used_to_stay_under_capacity() {
        let cache = SegmentCache::new(100, HOLD);
        cache.insert("a".into(), entry(40));
        cache.insert("b".into(), entry(40));
        assert!(cache.get("a").is_some()); // a is now more recent than b
        cache.insert("c".into(), entry(40));
        assert!(cache.contains("a") && cache.contains("c") && !cache.contains("b"));
        assert_eq!(cache.bytes(), 80);
        cache.insert("huge".into(), entry(101));
        assert!(!cache.contains("huge"));
    }

    #[test]
    fn runs_awaiting_compaction_go_last_until_their_hold_ends() {
        let cache = SegmentCache::new(100, HOLD);
        cache.insert_uncompacted("run".into(), entry(40));
        cache.insert("a".into(), entry(40));
        cache.insert("b".into(), entry(40));
        assert!(cache.contains("run") && !cache.contains("a") && cache.contains("b"));
        assert!(cache.get("run").is_some(), "readable like any entry");
        // only runs left to evict: the oldest goes
        cache.insert_uncompacted("run2".into(), entry(40));
        cache.insert_uncompacted("run3".into(), entry(40));
        assert!(!cache.contains("b") && !cache.contains("run"));
        assert!(cache.contains("run2") && cache.contains("run3"));
        // compacted: removed like any entry
        cache.remove("run2");
        assert_eq!(cache.bytes(), 40);

        // past the hold (none here) a run goes before the entries read lately
        let cache = SegmentCache::new(100, Duration::ZERO);
        cache.insert("a".into(), entry(40));
        cache.insert_uncompacted("run".into(), entry(40));
        cache.insert("b".into(), entry(40));
        assert!(cache.contains("a") && !cache.contains("run") && cache.contains("b"));
    }

    #[test]
    fn an_entry_in_pieces_counts_them_all_and_a_removed_one_nothing() {
        let cache = SegmentCache::new(100, HOLD);
        let pieces = [Bytes::from(vec![0u8; 30]), Bytes::from(vec![0u8; 20])];
        cache.insert("pieces".into(), CachedBatches::pieces(32, &pieces[..]));
        assert_eq!(cache.bytes(), 50);
        cache.remove("pieces");
        cache.remove("never there");
        assert_eq!(cache.bytes(), 0);
        assert!(!cache.contains("pieces"));
    }

    #[test]
    fn a_renamed_entry_keeps_its_bytes_under_the_new_key() {
        let cache = SegmentCache::new(100, HOLD);
        cache.insert("pending".into(), entry(40));
        cache.rename("pending", "segment".into());
        assert!(!cache.contains("pending") && cache.contains("segment"));
        assert_eq!(cache.bytes(), 40);
        // gone meanwhile (evicted): nothing to move
        cache.rename("pending", "other".into());
        assert!(!cache.contains("other"));
    }

    #[tokio::test]
    async fn reads_in_flight_hold_room_that_entries_give_way_to() {
        let cache = SegmentCache::new(100, HOLD);
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
        assert_eq!(cache.bytes(), 40);
        // Reads may not reserve more than the cache holds in all: the next one waits.
        let second = cache.reserve(60).await;
        assert!(!cache.contains("c"));
        assert!(cache.reserve(20).now_or_never().is_none());
        first.fill("loaded".into(), entry(30));
        assert!(cache.contains("loaded"));
        assert_eq!(cache.bytes(), 30);
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

    #[tokio::test]
    async fn a_key_is_read_once_at_a_time_and_waiters_wake_when_the_read_ends() {
        let cache = Arc::new(SegmentCache::new(100, HOLD));
        assert!(!cache.loaded("a").await, "nothing in flight: no wait");
        let reading = cache.begin_loading("a").expect("claimed");
        assert!(cache.begin_loading("a").is_none(), "claimed already");
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.loaded("a").await.then(|| cache.contains("a")) }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "waits for the read in flight");
        cache.insert("a".into(), entry(10));
        drop(reading);
        assert_eq!(waiter.await.unwrap(), Some(true), "woken, finds it cached");
        assert!(
            cache.begin_loading("a").is_none(),
            "cached: nothing to read"
        );

        // A read that fails (or is cancelled) wakes its waiters too, and frees the key.
        let failing = cache.begin_loading("b").expect("claimed");
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.loaded("b").await }
        });
        tokio::task::yield_now().await;
        drop(failing);
        assert!(waiter.await.unwrap());
        assert!(cache.begin_loading("b").is_some());
    }
}
