//! The cleaner of compacted topics (`cleanup.policy=compact`), run by a partition's owner:
//! Kafka's log cleaner over segments in object storage.
//!
//! A partition's log is its cleaned part (the segments of the last cleaning, from the log
//! start to `CleanedLog::end`) and the segments compaction made after it; the write-ahead runs
//! above the segment end are the active tail and are never cleaned, nor is the newest segment
//! while no run follows it (Kafka's active segment): the log's last record always stays, so
//! a consumer's position reaches the high watermark. Records from
//! `CleanedLog::dirty_from` on are dirty: not yet compared with later records of their key.
//! A cleaning is due once the dirty segments old enough to clean (`min.compaction.lag.ms`)
//! hold `min.cleanable.dirty.ratio` of the segments' bytes, or once the oldest dirty segment
//! is `max.compaction.lag.ms` old. It then
//!
//! 1. reads the dirty segments into an offset map (each key's last offset), until the map's
//!    memory (a broker setting) is full: the cleaning covers what it took in, the rest stays
//!    dirty for the next one;
//! 2. copies every segment from the log start through the one where the map ended, keeping
//!    each record that is its key's last (or whose key the map does not hold, for those
//!    before the dirty part) at its offset, dropping records without a key (as Kafka does) and
//!    tombstones past their delete horizon (`batch`), into new segments of about
//!    `segment.bytes` named with a fresh generation;
//! 3. commits the new cleaned part under the owner's key, as every change of the partition
//!    record (a fenced owner's cleaning is never committed, and it removes its uploads);
//! 4. deletes the replaced objects after a delay, so that reads that listed them finish.
//!
//! Produce never waits for it: it only reads committed segments and writes objects of its own;
//! only its commit takes the partition record's lock, as compaction and retention do.

mod batch;
mod offset_map;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use smallvec::smallvec;

use super::batch::BatchHeader;
use super::partition::Partition;
use super::reader::load_from;
use super::records::walk_batch;
use super::segment::{build_cleaned_segment, BuiltSegment, SegmentMeta, StoredBatch};
use super::timestamps::segment_max_timestamp;
use super::LogContext;
use crate::meta::catalog::{CatalogError, CleanedLog};
use crate::store::SegmentObject;
use batch::{clean_batch, CleanedBatch, TombstoneClock};
use offset_map::{key_digest, OffsetMap};

/// A compacted topic's cleaning rules: its configs, or the broker defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CleaningRules {
    pub min_cleanable_dirty_ratio: f64,
    pub min_compaction_lag_ms: i64,
    pub max_compaction_lag_ms: i64,
    pub delete_retention_ms: i64,
    pub segment_bytes: usize,
}

/// The broker's cleaner settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CleanerSettings {
    /// Memory of one cleaning's offset map.
    pub map_bytes: usize,
    /// How long the objects a cleaning replaced stay for reads that listed them.
    pub delete_delay: Duration,
}

/// How dirty a partition's segments are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Dirt {
    /// Bytes of the segments below the dirty part.
    pub clean_bytes: u64,
    /// Bytes of the dirty segments old enough to clean.
    pub dirty_bytes: u64,
    /// The newest record timestamp of the oldest dirty segment, if any is dirty.
    pub oldest_dirty_ms: Option<i64>,
}

impl Dirt {
    pub(crate) fn ratio(&self) -> f64 {
        let all = self.clean_bytes + self.dirty_bytes;
        if all == 0 {
            return 0.0;
        }
        self.dirty_bytes as f64 / all as f64
    }

    /// Whether a cleaning is due under `rules` at `now_ms`.
    fn due(&self, rules: &CleaningRules, now_ms: i64) -> bool {
        if self.dirty_bytes == 0 {
            return false;
        }
        let overdue = self
            .oldest_dirty_ms
            .is_some_and(|oldest| now_ms.saturating_sub(oldest) > rules.max_compaction_lag_ms);
        self.ratio() >= rules.min_cleanable_dirty_ratio || overdue
    }
}

/// What a cleaning did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Cleaning {
    /// The log's segments read and written, in bytes.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Records removed: superseded, without key, or tombstones past their horizon.
    pub records_removed: u64,
    pub segments_replaced: usize,
    pub segments_written: usize,
    /// What the record says now.
    pub cleaned: Option<CleanedLog>,
}

/// Why a cleaning stopped without committing; the log stays as it was.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CleanError {
    #[error("reading a segment failed ({0:?})")]
    Read(kafka_protocol::ResponseError),
    #[error("segment batch at offset {offset} cannot be cleaned: {problem}")]
    Batch {
        offset: i64,
        problem: batch::BatchProblem,
    },
    #[error("uploading a cleaned segment failed: {0}")]
    Upload(crate::store::StoreError),
    #[error("committing the cleaning failed: {0}")]
    Commit(#[from] CatalogError),
}

impl From<kafka_protocol::ResponseError> for CleanError {
    fn from(e: kafka_protocol::ResponseError) -> Self {
        CleanError::Read(e)
    }
}

impl From<super::reader::SegmentLoadError> for CleanError {
    fn from(e: super::reader::SegmentLoadError) -> Self {
        CleanError::Read(e.into())
    }
}

/// The partition's segments and how dirty they are under `rules` at `now_ms`: the dirty
/// segments old enough to clean, and the bytes below them. Reads a segment only to learn the
/// max timestamp the lag rules need.
pub(crate) async fn dirt(
    ctx: &LogContext,
    partition: &Partition,
    rules: &CleaningRules,
    now_ms: i64,
) -> Result<(Dirt, Vec<SegmentMeta>), CleanError> {
    partition.sync_segments(ctx).await?;
    let (record, _) = partition.committed_record();
    let mut segments = partition.segments();
    if segments
        .last()
        .is_some_and(|s| s.last_offset + 1 >= partition.high_watermark())
    {
        segments.pop(); // the active segment: it holds the log's last record
    }
    let dirty_from = dirty_from(&record);
    let mut dirt = Dirt::default();
    let mut cleanable = Vec::new();
    for segment in segments {
        if segment.last_offset < dirty_from {
            dirt.clean_bytes += segment.size;
            continue;
        }
        let lags = rules.min_compaction_lag_ms > 0 || rules.max_compaction_lag_ms < i64::MAX;
        if lags {
            let newest = segment_max_timestamp(ctx, partition, &segment).await?;
            if now_ms.saturating_sub(newest) < rules.min_compaction_lag_ms {
                break; // this one and the later ones are too young
            }
            dirt.oldest_dirty_ms.get_or_insert(newest);
        }
        dirt.dirty_bytes += segment.size;
        cleanable.push(segment);
    }
    Ok((dirt, cleanable))
}

/// Where the dirty part of the log begins.
fn dirty_from(record: &crate::meta::catalog::PartitionRecord) -> i64 {
    let start = record.log_start_offset;
    record.cleaned.map_or(start, |c| c.dirty_from).max(start)
}

/// Cleans the partition if a cleaning is due (see the module's comment). None when none was.
pub(crate) async fn clean(
    ctx: &Arc<LogContext>,
    partition: &Arc<Partition>,
    rules: CleaningRules,
    settings: CleanerSettings,
    now_ms: i64,
) -> Result<Option<Cleaning>, CleanError> {
    let (dirt, dirty) = dirt(ctx, partition, &rules, now_ms).await?;
    if !dirt.due(&rules, now_ms) {
        return Ok(None);
    }
    let Some(owned) = partition.owned() else {
        return Ok(None);
    };
    let record = owned.record;
    let from = dirty_from(&record);
    let mut cleaning = Cleaning::default();
    let (map, map_end) = offset_map(ctx, partition, &dirty, from, settings.map_bytes).await?;
    if map_end <= from {
        tracing::warn!(topic = %partition.topic, partition = partition.id,
            "the cleaner's offset map holds no key of the next batch: raise its memory");
        return Ok(None);
    }
    // Every segment up to the one where the map ended is copied, and at least the whole
    // cleaned part (it ends in the segment where the last map ended, so it always is: the
    // segments of the last cleaning's generation are all replaced, none left unread).
    let segments = partition.segments();
    let cleaned_end = record.cleaned.map_or(0, |c| c.end);
    let last = map_end.max(cleaned_end) - 1;
    let upto = segments.partition_point(|s| s.last_offset < last);
    let Some(last) = segments.get(upto) else {
        return Ok(None); // the log moved meanwhile (retention): the next round starts again
    };
    let end = last.last_offset + 1;
    let sources = &segments[..=upto];
    let generation = uuid::Uuid::new_v4().as_u64_pair().0;
    let clock = TombstoneClock {
        now_ms,
        delete_retention_ms: rules.delete_retention_ms,
    };
    let copier = Copier {
        ctx,
        partition,
        map: &map,
        log_start: record.log_start_offset,
        clock,
        generation,
        segment_bytes: rules.segment_bytes,
        now_ms,
    };
    let written = match copier.run(sources, end, &mut cleaning).await {
        Ok(written) => written,
        Err((uploaded, error)) => {
            remove(ctx, partition, &uploaded).await;
            return Err(error);
        }
    };
    let cleaned = CleanedLog {
        generation,
        end,
        dirty_from: map_end,
    };
    let replaced = match partition
        .commit_cleaning(ctx, &record, cleaned, written.clone())
        .await
    {
        Ok(Some(replaced)) => replaced,
        Ok(None) => {
            remove(ctx, partition, &written).await;
            return Ok(None);
        }
        Err(error) => {
            // Fenced (the lease is gone) or unknown: nothing refers to the uploads if it did
            // not land; if it did, the record taken in later names them and this deletes
            // nothing it needs (`adopt_landed_record` lists again).
            if matches!(error, CatalogError::Fenced(..)) {
                remove(ctx, partition, &written).await;
            }
            return Err(error.into());
        }
    };
    cleaning.segments_replaced = replaced.len();
    cleaning.segments_written = written.len();
    cleaning.cleaned = Some(cleaned);
    remove_later(ctx, partition, replaced, settings.delete_delay);
    Ok(Some(cleaning))
}

/// Reads the dirty segments from `from` on into an offset map of `map_bytes`; returns it and
/// the first offset it did not take in.
async fn offset_map(
    ctx: &LogContext,
    partition: &Partition,
    dirty: &[SegmentMeta],
    from: i64,
    map_bytes: usize,
) -> Result<(OffsetMap, i64), CleanError> {
    let mut map = OffsetMap::with_memory(map_bytes);
    let mut end = from;
    let max_uncompressed = ctx.settings.max_uncompressed_batch_bytes;
    for segment in dirty {
        let batches = load_from(ctx, partition, segment, segment.base_offset).await?;
        for item in batches.batches() {
            let (stored, header) = item.map_err(|_| super::reader::corrupt(partition, segment))?;
            if header.last_offset() < from {
                continue;
            }
            if batch::in_transaction(&header) {
                end = header.last_offset() + 1;
                continue;
            }
            // A batch is taken in whole, or not at all once the map may not hold its keys.
            if header.record_count.max(0) as usize > map.room() && end > from {
                return Ok((map, end));
            }
            let mut full_at = None;
            walk_batch(&header, &stored.joined(), max_uncompressed, |record| {
                let offset = header.base_offset + i64::from(record.offset_delta);
                if let (Some(key), None) = (record.key, full_at) {
                    if offset >= from && !map.insert(key_digest(key), offset) {
                        full_at = Some(offset);
                    }
                }
                Ok::<_, batch::BatchProblem>(())
            })
            .map_err(|problem| CleanError::Batch {
                offset: header.base_offset,
                problem,
            })?;
            if let Some(offset) = full_at {
                return Ok((map, offset.max(from)));
            }
            end = header.last_offset() + 1;
        }
        // Its last records may have been cleaned away: the segment is taken in to its end.
        end = end.max(segment.last_offset + 1);
    }
    Ok((map, end))
}

/// Copies segments into a cleaning's new ones.
struct Copier<'a> {
    ctx: &'a LogContext,
    partition: &'a Partition,
    map: &'a OffsetMap,
    log_start: i64,
    clock: TombstoneClock,
    generation: u64,
    segment_bytes: usize,
    now_ms: i64,
}

/// The batches of one new segment so far.
#[derive(Default)]
struct Group {
    batches: Vec<StoredBatch>,
    bytes: usize,
    records: i64,
}

impl Copier<'_> {
    /// Copies `sources` (from the log's first segment on) into new segments ending at `end`,
    /// each made of whole source segments and cut once it holds `segment_bytes`. Returns the
    /// new segments, uploaded; on failure, those uploaded so far with the error.
    async fn run(
        &self,
        sources: &[SegmentMeta],
        end: i64,
        cleaning: &mut Cleaning,
    ) -> Result<Vec<SegmentMeta>, (Vec<SegmentMeta>, CleanError)> {
        let mut written = Vec::new();
        let mut group = Group::default();
        let mut group_start = sources.first().map_or(end, |s| s.base_offset);
        for source in sources {
            if group.bytes >= self.segment_bytes {
                let built = self.build(&group, group_start..source.base_offset);
                match self.upload(built).await {
                    Ok(meta) => written.push(meta),
                    Err(error) => return Err((written, error)),
                }
                group = Group::default();
                group_start = source.base_offset;
            }
            if let Err(error) = self.copy_segment(source, &mut group, cleaning).await {
                return Err((written, error));
            }
        }
        let built = self.build(&group, group_start..end);
        match self.upload(built).await {
            Ok(meta) => written.push(meta),
            Err(error) => return Err((written, error)),
        }
        cleaning.bytes_written = written.iter().map(|s| s.size).sum();
        Ok(written)
    }

    /// The kept records of `source` into `group`.
    async fn copy_segment(
        &self,
        source: &SegmentMeta,
        group: &mut Group,
        cleaning: &mut Cleaning,
    ) -> Result<(), CleanError> {
        let (ctx, partition) = (self.ctx, self.partition);
        let batches = load_from(ctx, partition, source, source.base_offset).await?;
        cleaning.bytes_read += source.size;
        let max_uncompressed = ctx.settings.max_uncompressed_batch_bytes;
        for item in batches.batches() {
            let (stored, header) = item.map_err(|_| super::reader::corrupt(partition, source))?;
            if header.last_offset() < self.log_start {
                cleaning.records_removed += header.record_count.max(0) as u64;
                continue; // below the log start: no reader may see it
            }
            let joined = stored.joined();
            let latest = |offset: i64, key: Option<&[u8]>| {
                let Some(key) = key else {
                    return false; // a compacted log keeps keyed records only, as Kafka's
                };
                offset >= self.log_start
                    && self
                        .map
                        .get(key_digest(key))
                        .is_none_or(|last| last <= offset)
            };
            let cleaned = clean_batch(&header, &joined, max_uncompressed, self.clock, latest)
                .map_err(|problem| CleanError::Batch {
                    offset: header.base_offset,
                    problem,
                })?;
            let kept = match cleaned {
                CleanedBatch::Unchanged => Some((stored, header)),
                CleanedBatch::Rewritten(bytes) => {
                    let header = BatchHeader::parse(&bytes).expect("a batch just encoded");
                    Some((stored_batch(bytes, &header), header))
                }
                CleanedBatch::Removed => None,
            };
            let held = kept.as_ref().map_or(0, |(_, h)| h.record_count.max(0));
            cleaning.records_removed += (header.record_count.max(0) - held) as u64;
            if let Some((stored, header)) = kept {
                group.bytes += header.size;
                group.records += i64::from(header.record_count);
                group.batches.push(stored);
            }
        }
        Ok(())
    }

    fn build(&self, group: &Group, offsets: std::ops::Range<i64>) -> BuiltSegment {
        let interval = self.ctx.settings.index_interval;
        let (records, generation) = (group.records, self.generation);
        build_cleaned_segment(
            &group.batches,
            offsets,
            records,
            generation,
            self.now_ms,
            interval,
        )
    }

    /// Uploads a new segment (its data, then its index); its metadata once both are stored.
    async fn upload(&self, built: BuiltSegment) -> Result<SegmentMeta, CleanError> {
        let partition = self.partition;
        let data = partition.segment_object(self.ctx, &built.meta, SegmentObject::Data);
        let index = partition.segment_object(self.ctx, &built.meta, SegmentObject::Index);
        let store = &self.ctx.store;
        store
            .put_new(&data, built.payload())
            .await
            .map_err(CleanError::Upload)?;
        store
            .put_new(&index, built.index.clone())
            .await
            .map_err(CleanError::Upload)?;
        Ok(built.meta)
    }
}

/// A batch read back or rewritten, as a stored batch.
fn stored_batch(bytes: Bytes, header: &BatchHeader) -> StoredBatch {
    StoredBatch {
        prefix: Bytes::new(),
        body: smallvec![bytes],
        base_offset: header.base_offset,
        offset_count: header.offset_count(),
        max_timestamp: header.max_timestamp,
    }
}

/// Deletes the objects of `segments` (failures are logged: a superseded object is removed by
/// the next owner's first listing).
async fn remove(ctx: &LogContext, partition: &Partition, segments: &[SegmentMeta]) {
    for segment in segments {
        for kind in [SegmentObject::Data, SegmentObject::Index] {
            let path = partition.segment_object(ctx, segment, kind);
            if let Err(error) = ctx.store.delete(&path).await {
                tracing::warn!(object = %path, %error,
                    "deleting a segment a cleaning replaced failed; the next owner removes it");
            }
        }
    }
}

/// `remove` after `delay`: reads that listed the replaced segments before the commit finish
/// first (a read that still misses one lists the partition again).
fn remove_later(
    ctx: &Arc<LogContext>,
    partition: &Arc<Partition>,
    segments: Vec<SegmentMeta>,
    delay: Duration,
) {
    if segments.is_empty() {
        return;
    }
    let (ctx, partition) = (ctx.clone(), partition.clone());
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        remove(&ctx, &partition, &segments).await;
    });
}
