//! The read path: committed batches for Fetch from the cache or object storage – segments
//! (ranged GETs from the sparse index position, readahead of the following ones), then
//! write-ahead runs (ranged GETs, several at once) – and timestamp search for ListOffsets.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use kafka_protocol::ResponseError;
use object_store::path::Path;

use super::cache::{CachedBatches, Loading};
use super::partition::Partition;
use super::segment::{SegmentMeta, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use super::wal::index::IndexedRun;
use super::LogContext;
use crate::log::index::SparseIndex;
use crate::store::{SegmentObject, StoreError};

/// Write-ahead runs a fetch loads at once (a partition of a busy broker has a short run in
/// every object, so a catching-up consumer reads many of them per fetch).
const RUNS_IN_PARALLEL: usize = 8;

pub(crate) struct ReadResult {
    /// The record batches read, as slices of the objects they are in (in order).
    pub records: Vec<Bytes>,
    /// Records in the batches read.
    pub record_count: u64,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// The offset after the last batch read (the fetch offset if none was).
    pub next_offset: i64,
}

/// Batches taken into a fetch response so far.
struct Collected {
    slices: Vec<Bytes>,
    records: u64,
    total: usize,
    next: i64,
    max_bytes: usize,
    must_progress: bool,
    /// No batch starting here or later is taken (a read_committed fetch's last stable offset).
    limit: i64,
}

impl Collected {
    /// Takes the batches of `batches` that hold `next` and later, while they fit. False once
    /// the response is full. A batch that starts past `next` means the view skipped part of
    /// the log (offsets are contiguous): it is refused, never served as if nothing was there;
    /// unless `gaps`, a cleaned segment's, whose cleaning removed the records between.
    fn take(&mut self, batches: &CachedBatches, gaps: bool) -> Result<bool, TakeError> {
        for item in batches.batches() {
            let (batch, header) = item.map_err(|_| TakeError::Malformed)?;
            if header.last_offset() < self.next {
                continue;
            }
            if header.base_offset >= self.limit {
                return Ok(false);
            }
            if header.base_offset > self.next && !gaps {
                return Err(TakeError::Gap {
                    expected: self.next,
                    found: header.base_offset,
                });
            }
            let fits = self.total + header.size <= self.max_bytes;
            let first_of_response = self.must_progress && self.total == 0;
            if !(fits || first_of_response) {
                return Ok(false);
            }
            self.slices.extend(batch.into_pieces());
            self.records += header.record_count.max(0) as u64;
            self.total += header.size;
            self.next = header.last_offset() + 1;
        }
        Ok(true)
    }
}

/// Why batches could not be taken into a response.
#[derive(Debug, PartialEq)]
enum TakeError {
    Malformed,
    /// The next batch starts at `found`, past the `expected` offset.
    Gap {
        expected: i64,
        found: i64,
    },
}

/// Reads committed batches starting at the one holding `offset`, up to `max_bytes` — but at
/// least one whole batch when `must_progress` (KIP-74), so a big batch never blocks a consumer.
/// Reads segments below the segment end, then write-ahead runs, as many of each as fill it.
///
/// A run whose object is gone was compacted into a segment, and its object collected, after
/// this broker's view of the log was taken (the view follows the metadata store a moment
/// behind). The read then brings the view up to date and reads again. So does a read whose
/// segment list lags the segment end it knows (a follower's listing overtaken by the next
/// compaction is not taken), or whose view of the log has a hole: it lists the segments again.
pub(crate) async fn read(
    ctx: &Arc<LogContext>,
    partition: &Arc<Partition>,
    offset: i64,
    max_bytes: usize,
    must_progress: bool,
) -> Result<ReadResult, ResponseError> {
    read_below(ctx, partition, (offset, i64::MAX), max_bytes, must_progress).await
}

/// `read`, of the batches that start below `limit` only (a read_committed fetch reads below
/// the last stable offset).
pub(crate) async fn read_below(
    ctx: &Arc<LogContext>,
    partition: &Arc<Partition>,
    (offset, limit): (i64, i64),
    max_bytes: usize,
    must_progress: bool,
) -> Result<ReadResult, ResponseError> {
    let mut attempts = 0;
    let wanted = Wanted {
        offset,
        limit,
        max_bytes,
        must_progress,
    };
    loop {
        let failure = match read_once(ctx, partition, &wanted).await {
            Ok(result) => return Ok(result),
            Err(ReadFailure::Error(e)) => return Err(e),
            Err(failure) => failure,
        };
        let retried = attempts < STALE_VIEW_RETRIES
            && match failure {
                ReadFailure::Gap { expected, found } => {
                    tracing::warn!(topic = %partition.topic, partition = partition.id, offset,
                        expected, found, "this broker's view of the log skips offsets; listing \
                         the partition's segments again");
                    relist(ctx, partition).await
                }
                ReadFailure::Stale {
                    segments_lag: true, ..
                } => relist(ctx, partition).await,
                ReadFailure::Stale { segment_end, .. } => {
                    catch_up(ctx, partition, segment_end).await
                }
                ReadFailure::SegmentGone => refresh_cleaned(ctx, partition).await,
                ReadFailure::Error(_) => unreachable!("returned above"),
            };
        if !retried {
            tracing::error!(topic = %partition.topic, partition = partition.id, offset,
                reason = failure.reason(), "this broker's view of the log did not catch up with \
                 storage; answering KAFKA_STORAGE_ERROR");
            return Err(ResponseError::KafkaStorageError);
        }
        attempts += 1;
    }
}

/// Lists the partition's segments again for its committed record; false if that failed.
async fn relist(ctx: &LogContext, partition: &Partition) -> bool {
    let (record, _) = partition.committed_record();
    partition.relist_segments(ctx, &record).await.is_ok()
}

/// A segment the view named is gone: a cleaning replaced it. The record that says so comes
/// through the watch, or else from the metadata store; then the segments are listed again.
async fn refresh_cleaned(ctx: &LogContext, partition: &Partition) -> bool {
    if partition.owned().is_none() {
        match ctx.catalog.partition(&partition.topic, partition.id).await {
            Ok(Some(current)) => partition.follow(&current.record, current.revision),
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!(topic = %partition.topic, partition = partition.id, error = %e,
                    "reading the partition record after a segment was cleaned away failed");
                return false;
            }
        }
    }
    relist(ctx, partition).await
}

/// How often a read starts again after finding its view of the log outdated.
const STALE_VIEW_RETRIES: usize = 3;
/// How long a read waits for the metadata store's watch to bring the compaction it missed
/// before asking the store itself (a busy broker's watch can lag behind, e.g. when every
/// broker compacts at once after an outage).
const WATCH_CATCH_UP: Duration = Duration::from_millis(300);

/// Whether the partition's segment end moves past `segment_end`: through the watch, or else
/// from the partition record read from the metadata store (a follower takes it in as it would
/// from the watch; an owner's view moves only with its own compactions).
async fn catch_up(ctx: &LogContext, partition: &Partition, segment_end: i64) -> bool {
    if moved_past(partition, segment_end, WATCH_CATCH_UP).await {
        return true;
    }
    match ctx.catalog.partition(&partition.topic, partition.id).await {
        Ok(Some(current)) => partition.follow(&current.record, current.revision),
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!(topic = %partition.topic, partition = partition.id, error = %e,
                "reading the partition record to catch up a stale read failed");
            return false;
        }
    }
    moved_past(partition, segment_end, WATCH_CATCH_UP).await
}

/// Whether the partition's segment end moves past `segment_end` within `wait`.
async fn moved_past(partition: &Partition, segment_end: i64, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if partition.segment_end() > segment_end {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Why one read attempt failed: the view it was made from no longer matches storage, or an
/// error for the client.
enum ReadFailure {
    /// A write-ahead run's object is gone. The view had this segment end; `segments_lag`: its
    /// segment list ended below it, so the run was one the known segments already hold.
    Stale {
        segment_end: i64,
        segments_lag: bool,
    },
    /// The view's segments and runs do not join up: offsets `expected..found` are missing.
    Gap {
        expected: i64,
        found: i64,
    },
    /// A segment's object is gone: a cleaning replaced it after the view was taken.
    SegmentGone,
    Error(ResponseError),
}

impl ReadFailure {
    fn reason(&self) -> &'static str {
        match self {
            ReadFailure::Stale {
                segments_lag: true, ..
            } => {
                "a write-ahead object is gone and listing the segments did not bring the \
                 segments that hold it"
            }
            ReadFailure::Stale { .. } => {
                "a write-ahead object is gone and the partition's segment end did not move"
            }
            ReadFailure::Gap { .. } => "the log has a hole that listing storage did not fill",
            ReadFailure::SegmentGone => {
                "a segment is gone and the partition record does not name its replacement"
            }
            ReadFailure::Error(_) => "an error for the client",
        }
    }
}

impl From<ResponseError> for ReadFailure {
    fn from(e: ResponseError) -> Self {
        ReadFailure::Error(e)
    }
}

/// What one read asks for.
struct Wanted {
    offset: i64,
    limit: i64,
    max_bytes: usize,
    must_progress: bool,
}

async fn read_once(
    ctx: &Arc<LogContext>,
    partition: &Arc<Partition>,
    wanted: &Wanted,
) -> Result<ReadResult, ReadFailure> {
    partition.sync_segments(ctx).await?;
    let view = partition.read_view(wanted.offset)?;
    let mut collected = Collected {
        slices: Vec::new(),
        records: 0,
        total: 0,
        next: wanted.offset,
        max_bytes: wanted.max_bytes,
        must_progress: wanted.must_progress,
        limit: wanted.limit,
    };
    let mut full = false;
    for (i, segment) in view.segments.iter().enumerate() {
        let batches = match load_from(ctx, partition, segment, collected.next).await {
            Ok(batches) => batches,
            Err(SegmentLoadError::Gone) => return Err(ReadFailure::SegmentGone),
            Err(SegmentLoadError::Failed(e)) => return Err(e.into()),
        };
        let gaps = segment.generation.is_some();
        full = !collected.take(&batches, gaps).map_err(|e| match e {
            TakeError::Malformed => corrupt(partition, segment).into(),
            TakeError::Gap { expected, found } => ReadFailure::Gap { expected, found },
        })?;
        readahead(ctx, partition, &view.segments[i + 1..]);
        if full {
            break;
        }
        if gaps {
            // Its last records may have been cleaned away: the next segment starts the rest.
            collected.next = collected.next.max(segment.last_offset + 1);
        }
    }
    if !full && collected.next < view.high_watermark {
        let runs = ctx
            .wal
            .runs_from((partition.topic_id, partition.id), collected.next);
        let mut loads = futures::stream::iter(runs)
            .map(|run| load_run(ctx, run))
            .buffered(RUNS_IN_PARALLEL);
        while let Some(loaded) = loads.next().await {
            let (run, batches) = match loaded {
                Ok(loaded) => loaded,
                Err(RunLoadError::Collected) => {
                    return Err(ReadFailure::Stale {
                        segment_end: view.segment_end,
                        segments_lag: collected.next < view.segment_end,
                    })
                }
                Err(RunLoadError::Failed(e)) => return Err(e.into()),
            };
            if run.run.base_offset >= view.high_watermark {
                break;
            }
            let taken = collected.take(&batches, false).map_err(|e| match e {
                TakeError::Malformed => {
                    tracing::error!(object = %run.object, position = run.run.position,
                        "write-ahead run is malformed");
                    ReadFailure::Error(ResponseError::KafkaStorageError)
                }
                TakeError::Gap { expected, found } => ReadFailure::Gap { expected, found },
            })?;
            if !taken {
                break;
            }
        }
    }
    Ok(ReadResult {
        records: collected.slices,
        record_count: collected.records,
        high_watermark: view.high_watermark,
        log_start_offset: view.log_start_offset,
        next_offset: collected.next,
    })
}

/// Why a write-ahead run could not be loaded.
#[derive(Debug)]
pub(crate) enum RunLoadError {
    /// Its object is gone: compaction collected it once the run was in a committed segment.
    Collected,
    Failed(ResponseError),
}

/// Why a segment's batches could not be loaded.
#[derive(Debug)]
pub(crate) enum SegmentLoadError {
    /// Its object is gone: a cleaning of the compacted topic replaced it.
    Gone,
    Failed(ResponseError),
}

/// For the callers that do not retry (timestamp search, retention): a retriable error.
impl From<SegmentLoadError> for ResponseError {
    fn from(e: SegmentLoadError) -> Self {
        match e {
            SegmentLoadError::Gone => ResponseError::KafkaStorageError,
            SegmentLoadError::Failed(e) => e,
        }
    }
}

/// For the callers that do not retry (timestamp search): a retriable error to the client.
impl From<RunLoadError> for ResponseError {
    fn from(e: RunLoadError) -> Self {
        match e {
            RunLoadError::Collected => ResponseError::KafkaStorageError,
            RunLoadError::Failed(e) => e,
        }
    }
}

/// A write-ahead run's batch bytes, from the cache or with a ranged GET.
pub(crate) async fn load_run(
    ctx: &LogContext,
    run: IndexedRun,
) -> Result<(IndexedRun, CachedBatches), RunLoadError> {
    let key = run.cache_key();
    let _loading = match look_up(ctx, &key, |_| true).await {
        Lookup::Cached(cached) => return Ok((run, cached)),
        Lookup::Missed(loading) => loading,
    };
    let path = Path::parse(&*run.object).map_err(|e| {
        tracing::error!(object = %run.object, error = %e, "manifest names an unusable path");
        RunLoadError::Failed(ResponseError::KafkaStorageError)
    })?;
    let range = run.run.position..run.run.position + run.run.length;
    match read_into_cache(ctx, &path, range, key).await {
        Ok(loaded) => Ok((run, loaded)),
        Err(StoreError::NotFound(_)) => Err(RunLoadError::Collected),
        Err(e) => Err(RunLoadError::Failed(read_failed(&path, e))),
    }
}

/// Reads `range` of an object into the cache under `key`, holding room for it in the cache
/// while the read is in flight (`SegmentCache::reserve`).
async fn read_into_cache(
    ctx: &LogContext,
    path: &Path,
    range: Range<u64>,
    key: String,
) -> Result<CachedBatches, StoreError> {
    let room = ctx
        .cache
        .reserve(range.end.saturating_sub(range.start) as usize)
        .await;
    let start = range.start;
    let pieces = ctx.store.get_range_pieces(path, range).await?;
    let loaded = CachedBatches::pieces(start, pieces);
    room.fill(key, loaded.clone());
    Ok(loaded)
}

pub(super) fn corrupt(partition: &Partition, segment: &SegmentMeta) -> ResponseError {
    tracing::error!(
        topic = %partition.topic, partition = partition.id, base = segment.base_offset,
        "segment batches are malformed"
    );
    ResponseError::KafkaStorageError
}

/// What a look-up of the cache found.
enum Lookup {
    Cached(CachedBatches),
    /// Not there: the caller reads it from the object store, holding the claim on the key so
    /// that others missing meanwhile wait for this read (None if a read began meanwhile: the
    /// caller reads anyway).
    Missed(Option<Loading>),
}

/// What the cache holds under `key`, if `usable`, after waiting for a read of it in flight
/// (readahead, another consumer, compaction, a producer-state rebuild); else the claim to
/// read it. An object is read once at a time, not once per reader that missed it. Counts the
/// hit or the miss.
async fn look_up(ctx: &LogContext, key: &str, usable: impl Fn(&CachedBatches) -> bool) -> Lookup {
    let cached = || ctx.cache.get(key).filter(|cached| usable(cached));
    let found = match cached() {
        Some(hit) => Some(hit),
        None if ctx.cache.loaded(key).await => cached(),
        None => None,
    };
    match found {
        Some(hit) => {
            ctx.metrics.cache_hits.inc();
            Lookup::Cached(hit)
        }
        None => {
            ctx.metrics.cache_misses.inc();
            Lookup::Missed(ctx.cache.begin_loading(key))
        }
    }
}

/// Batch bytes of `segment` that start at or before the batch holding `offset`.
pub(super) async fn load_from(
    ctx: &LogContext,
    partition: &Partition,
    segment: &SegmentMeta,
    offset: i64,
) -> Result<CachedBatches, SegmentLoadError> {
    let key = partition.segment_key(segment);
    let covers = |cached: &CachedBatches| {
        cached.start == SEGMENT_HEADER_LEN as u64
            || cached
                .first_header()
                .is_some_and(|h| h.base_offset <= offset)
    };
    let _loading = match look_up(ctx, &key, covers).await {
        Lookup::Cached(cached) => return Ok(cached),
        Lookup::Missed(loading) => loading,
    };
    let start = if offset > segment.base_offset {
        index_position(ctx, partition, segment, offset).await?
    } else {
        SEGMENT_HEADER_LEN as u64
    };
    fetch_batches(ctx, partition, segment, start, key).await
}

async fn index_position(
    ctx: &LogContext,
    partition: &Partition,
    segment: &SegmentMeta,
    offset: i64,
) -> Result<u64, SegmentLoadError> {
    let path = partition.segment_object(ctx, segment, SegmentObject::Index);
    let bytes = ctx
        .store
        .get(&path)
        .await
        .map_err(|e| segment_load_failed(&path, e))?;
    match SparseIndex::parse(&bytes) {
        Ok(index) => Ok(index
            .position_for(offset)
            .map_or(SEGMENT_HEADER_LEN as u64, u64::from)),
        Err(e) => {
            // A damaged index only costs a longer read: scan from the first batch.
            tracing::warn!(object = %path, error = %e, "index unusable; reading whole segment");
            Ok(SEGMENT_HEADER_LEN as u64)
        }
    }
}

/// Reads the batches of `segment` from byte `start` on into the cache under `key`.
async fn fetch_batches(
    ctx: &LogContext,
    partition: &Partition,
    segment: &SegmentMeta,
    start: u64,
    key: String,
) -> Result<CachedBatches, SegmentLoadError> {
    let path = partition.segment_object(ctx, segment, SegmentObject::Data);
    let end = segment.size - SEGMENT_FOOTER_LEN as u64;
    read_into_cache(ctx, &path, start..end, key)
        .await
        .map_err(|e| segment_load_failed(&path, e))
}

/// A segment read that failed: gone (a cleaning replaced it), or as `read_failed`.
fn segment_load_failed(path: &object_store::path::Path, error: StoreError) -> SegmentLoadError {
    match error {
        StoreError::NotFound(_) => SegmentLoadError::Gone,
        error => SegmentLoadError::Failed(read_failed(path, error)),
    }
}

/// A read that failed: logged with the object, answered with a retriable storage error.
fn read_failed(path: &object_store::path::Path, error: StoreError) -> ResponseError {
    tracing::warn!(object = %path, %error, "object storage read failed");
    ResponseError::KafkaStorageError
}

/// Loads the next segments in the background so a sequential consumer finds them cached.
fn readahead(ctx: &Arc<LogContext>, partition: &Arc<Partition>, following: &[SegmentMeta]) {
    for segment in following.iter().take(ctx.settings.readahead_segments) {
        let key = partition.segment_key(segment);
        let Some(loading) = ctx.cache.begin_loading(&key) else {
            continue;
        };
        let (ctx, partition, segment) = (ctx.clone(), partition.clone(), segment.clone());
        tokio::spawn(async move {
            let start = SEGMENT_HEADER_LEN as u64;
            // A failed read is retried by the fetch that needs it.
            let _ = fetch_batches(&ctx, &partition, &segment, start, key).await;
            drop(loading); // wakes the fetches waiting for this segment
        });
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
