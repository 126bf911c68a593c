//! A topic's log as storage and the metadata hold it: its committed segments and write-ahead
//! runs, end offsets, and the offset of a timestamp. Reads never go through a broker.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::OnceCell;

use super::error::ReadError;
use super::metadata::{Metadata, RunRef, TopicSnapshot};
use super::records::first_offset_at_or_after;
use super::scan::{BatchCursor, SegmentRef};
use super::transactions::{self, Committed};
use crate::log::committed_segments;
use crate::log::segment::{FOOTER_MAGIC, SEGMENT_FOOTER_LEN};
use crate::meta::catalog::PartitionRecord;
use crate::store::{ListedSegment, SegmentObject, SegmentStore};

pub(crate) struct TopicReader {
    store: Arc<SegmentStore>,
    /// Where what is committed comes from; unless given, looked at on first use.
    metadata: OnceCell<Metadata>,
    /// Largest size one Kafka batch's records may decompress to: a segment holding a bigger
    /// batch (a decompression bomb) fails the read instead of allocating.
    max_uncompressed: usize,
    /// Reads as a read_committed consumer does: below the last stable offset, without the
    /// records of aborted transactions (`transactions`). Needs the metadata: without it the
    /// segments are read as they are.
    read_committed: bool,
}

/// What a reader may read of one partition: `log_start..end`, in its committed segments and
/// then the committed write-ahead runs above them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PartitionLog {
    pub log_start: i64,
    pub segments: Vec<SegmentRef>,
    pub runs: Vec<RunRef>,
    pub end: i64,
    /// Read committed: the transactions aborted in it (its end is the last stable offset).
    pub committed: Committed,
}

impl TopicReader {
    /// Without `metadata`, the first read looks for what a single-node broker publishes in
    /// the storage, and reads segments only if there is none.
    pub(crate) fn new(
        store: SegmentStore,
        metadata: Option<Metadata>,
        max_uncompressed: usize,
        read_committed: bool,
    ) -> TopicReader {
        TopicReader {
            store: Arc::new(store),
            metadata: OnceCell::new_with(metadata),
            max_uncompressed,
            read_committed,
        }
    }

    pub(crate) async fn metadata(&self) -> Result<&Metadata, ReadError> {
        let found = || async {
            Ok(match self.store.has_published().await? {
                true => Metadata::Published,
                false => Metadata::SegmentsOnly,
            })
        };
        self.metadata.get_or_try_init(found).await
    }

    /// What is committed of `topic` now; None without metadata, or when it knows no such topic.
    pub(crate) async fn snapshot(&self, topic: &str) -> Result<Option<TopicSnapshot>, ReadError> {
        self.metadata().await?.snapshot(&self.store, topic).await
    }

    /// The partition's log as `snapshot` has it (the storage listed now): segments below its
    /// segment end, then the runs that carry it on (`TopicSnapshot::runs_after_segments`; a
    /// gap means a compaction came between the snapshot and the listing: `ReadError::Moved`).
    /// The first run may begin below the segment end; its batches there are read from the
    /// segment. Without a snapshot, the segments the listing holds, each up to its footer.
    pub(crate) async fn log(
        &self,
        topic: &str,
        partition: i32,
        snapshot: Option<&TopicSnapshot>,
    ) -> Result<PartitionLog, ReadError> {
        let Some(snapshot) = snapshot else {
            let segments = self.segments(topic, partition).await?;
            let log_start = segments.first().map_or(0, |s| s.base_offset);
            let end = segments.last().map_or(log_start, |s| s.end_offset);
            return Ok(PartitionLog {
                log_start,
                segments,
                runs: Vec::new(),
                end,
                committed: Committed::default(),
            });
        };
        let Some(record) = snapshot.records.get(&partition) else {
            return Ok(PartitionLog::default());
        };
        let listed = self.store.list_partition(topic, partition).await?;
        let indexed = indexed(&listed);
        let segments = committed_segments(&listed, record)
            .into_iter()
            .map(|s| SegmentRef {
                base_offset: s.base_offset,
                end_offset: s.last_offset + 1,
                size: s.size,
                has_index: indexed.contains(&(s.base_offset, s.generation)),
                generation: s.generation,
            })
            .collect();
        let (runs, gap) = snapshot.runs_after_segments(partition);
        if gap {
            return Err(ReadError::Moved {
                topic: topic.to_string(),
                partition,
            });
        }
        let end = runs.last().map_or(record.segment_end(), |r| r.end_offset);
        let committed = self.committed(topic, partition, record, &runs).await?;
        let end = committed.first_unstable.map_or(end, |first| first.min(end));
        Ok(PartitionLog {
            log_start: record.log_start_offset,
            segments,
            runs,
            end: end.max(record.log_start_offset),
            committed,
        })
    }

    /// A read_committed reader's view of the partition's transactions (none for one reading
    /// uncommitted, or a partition without transactions).
    async fn committed(
        &self,
        topic: &str,
        partition: i32,
        record: &PartitionRecord,
        runs: &[RunRef],
    ) -> Result<Committed, ReadError> {
        if !(self.read_committed && transactions::may_hold_transactions(record, runs)) {
            return Ok(Committed::default());
        }
        transactions::committed(&self.store, (topic, partition), record, runs).await
    }

    /// (partition, log start, end) of each partition of `topic` (the committed end; for a
    /// read_committed reader the last stable offset), from a fresh snapshot, taken again while
    /// a compaction moves the log meanwhile (an object the snapshot named is gone: the run a
    /// transaction's state is read from, a producer snapshot replaced). None when the metadata
    /// knows no such topic.
    pub(crate) async fn bounds(
        &self,
        topic: &str,
    ) -> Result<Option<Vec<(i32, i64, i64)>>, ReadError> {
        again_if_moved(|| async {
            let Some(snapshot) = self.snapshot(topic).await? else {
                return Ok(None);
            };
            let mut bounds = Vec::with_capacity(snapshot.records.len());
            for (&partition, record) in &snapshot.records {
                let end = snapshot.committed_end(partition);
                let (runs, _) = snapshot.runs_after_segments(partition);
                let committed = self.committed(topic, partition, record, &runs).await?;
                let end = committed.first_unstable.map_or(end, |first| first.min(end));
                let start = record.log_start_offset;
                bounds.push((partition, start, end.max(start)));
            }
            Ok(Some(bounds))
        })
        .await
    }

    /// `log` from a fresh snapshot, taken again while a compaction moves the log meanwhile.
    pub(crate) async fn current_log(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionLog, ReadError> {
        again_if_moved(|| async {
            let snapshot = self.snapshot(topic).await?;
            self.log(topic, partition, snapshot.as_ref()).await
        })
        .await
    }

    pub(crate) fn max_uncompressed(&self) -> usize {
        self.max_uncompressed
    }

    pub(crate) fn store(&self) -> &Arc<SegmentStore> {
        &self.store
    }

    /// The topics the metadata knows; without metadata, those with at least one object (the
    /// write-ahead and published-metadata folders are no topic's).
    pub(crate) async fn topics(&self) -> Result<Vec<String>, ReadError> {
        if let Some(mut known) = self.metadata().await?.topics(&self.store).await? {
            known.sort();
            return Ok(known);
        }
        let mut folders = self.store.list_folders("").await?;
        folders.retain(|f| !f.starts_with('!'));
        Ok(folders)
    }

    /// The topic's partitions as the metadata has them (none for a topic it does not know);
    /// without metadata, those with at least one object.
    pub(crate) async fn partitions(&self, topic: &str) -> Result<Vec<i32>, ReadError> {
        if *self.metadata().await? != Metadata::SegmentsOnly {
            let snapshot = self.snapshot(topic).await?;
            return Ok(snapshot.map_or_else(Vec::new, |s| s.records.keys().copied().collect()));
        }
        let folders = self.store.list_folders(topic).await?;
        let mut ids: Vec<i32> = folders.iter().filter_map(|f| f.parse().ok()).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// The partition's segments in offset order, from the listing alone (no metadata). Each
    /// ends where the next begins; the last one's end comes from its footer (one 16-byte
    /// ranged read). A compacted topic's cleaned segments come first, up to where the last of
    /// them ends; compaction's older objects below that wait for their deletion.
    pub(crate) async fn segments(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<SegmentRef>, ReadError> {
        let listed = self.store.list_partition(topic, partition).await?;
        let indexed = indexed(&listed);
        let data: Vec<_> = listed
            .iter()
            .filter(|s| s.kind == SegmentObject::Data)
            .collect();
        let mut generations: Vec<u64> = data.iter().filter_map(|s| s.generation).collect();
        generations.sort_unstable();
        generations.dedup();
        let mut chosen: Vec<&ListedSegment> = match generations[..] {
            [] => data,
            [generation] => data
                .into_iter()
                .filter(|s| s.generation == Some(generation))
                .collect(),
            _ => {
                return Err(ReadError::Metadata(format!(
                    "partition {partition} of {topic} holds segments of more than one cleaning \
                     (a compacted topic whose old segments are not deleted yet): read it with \
                     the cluster's metadata (etcd endpoints), or again in a minute"
                )))
            }
        };
        if let Some(last) = chosen.last().filter(|s| s.generation.is_some()) {
            let cleaned_end = self
                .footer_end(
                    topic,
                    partition,
                    last.base_offset,
                    last.generation,
                    last.size,
                )
                .await?;
            let after = listed.iter().filter(|s| {
                s.kind == SegmentObject::Data
                    && s.generation.is_none()
                    && s.base_offset >= cleaned_end
            });
            chosen.extend(after);
        }
        let mut segments = Vec::with_capacity(chosen.len());
        for (i, listed) in chosen.iter().enumerate() {
            let (base, generation) = (listed.base_offset, listed.generation);
            let end_offset = match chosen.get(i + 1) {
                Some(next) => next.base_offset,
                None => {
                    self.footer_end(topic, partition, base, generation, listed.size)
                        .await?
                }
            };
            segments.push(SegmentRef {
                base_offset: base,
                end_offset,
                size: listed.size,
                has_index: indexed.contains(&(base, generation)),
                generation,
            });
        }
        Ok(segments)
    }

    async fn footer_end(
        &self,
        topic: &str,
        partition: i32,
        base: i64,
        generation: Option<u64>,
        size: u64,
    ) -> Result<i64, ReadError> {
        let path = self
            .store
            .object_path(topic, partition, base, generation, SegmentObject::Data);
        let corrupt = |reason: &str| ReadError::corrupt(path.as_ref(), base, reason);
        if size < SEGMENT_FOOTER_LEN as u64 {
            return Err(corrupt("the object is shorter than a segment footer"));
        }
        let footer = self.store.get_range(&path, size - 16..size).await?;
        if &footer[12..16] != FOOTER_MAGIC {
            return Err(corrupt(
                "the footer does not end in END! (truncated upload?)",
            ));
        }
        Ok(i64::from_be_bytes(footer[4..12].try_into().unwrap()) + 1)
    }

    /// The first offset whose record timestamp is at or after `timestamp` (what ListOffsets
    /// answers for a timestamp); `None` when every record is older. Batch headers carry each
    /// batch's max timestamp, so only the matching batch is decompressed.
    pub(crate) async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<i64>, ReadError> {
        again_if_moved(|| async {
            let log = self.current_log(topic, partition).await?;
            self.search(topic, partition, &log, timestamp).await
        })
        .await
    }

    async fn search(
        &self,
        topic: &str,
        partition: i32,
        log: &PartitionLog,
        timestamp: i64,
    ) -> Result<Option<i64>, ReadError> {
        let mut scratch = Vec::new();
        // Offsets below `from` were searched already (a run may begin inside the last segment).
        let mut from = log.log_start;
        for piece in log.pieces() {
            let wanted = from..log.end;
            let fetched = piece.fetch(&self.store, topic, partition, &wanted).await?;
            let mut cursor = BatchCursor::new(fetched, self.max_uncompressed);
            while let Some(batch) = cursor.next_batch()? {
                if batch.header.last_offset() < from {
                    continue;
                }
                if batch.header.base_offset >= log.end {
                    return Ok(None);
                }
                let wanted = from..log.end;
                from = batch.header.last_offset() + 1;
                if batch.header.max_timestamp < timestamp {
                    continue;
                }
                let records = cursor.records_of(&batch, &mut scratch)?;
                let found = first_offset_at_or_after(&batch.header, records, &wanted, timestamp)
                    .map_err(|e| cursor.corrupt_at(&batch, &e.to_string()))?;
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
        Ok(None)
    }
}

/// How often a read takes a new snapshot because a compaction moved the log meanwhile.
pub(crate) const MOVED_RETRIES: usize = 3;

/// `attempt` again, up to MOVED_RETRIES times, while a compaction moved the log under it.
async fn again_if_moved<T, F, Fut>(mut attempt: F) -> Result<T, ReadError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ReadError>>,
{
    let mut attempts = 0;
    loop {
        match attempt().await {
            Err(ReadError::Moved { .. }) if attempts < MOVED_RETRIES => attempts += 1,
            result => return result,
        }
    }
}

/// The base offsets and generations of the listed segments that have an index.
fn indexed(listed: &[ListedSegment]) -> HashSet<(i64, Option<u64>)> {
    listed
        .iter()
        .filter(|s| s.kind == SegmentObject::Index)
        .map(|s| (s.base_offset, s.generation))
        .collect()
}
