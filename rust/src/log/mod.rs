//! Partition logs: write buffer and group commit, segment/index formats, the read path.

pub(crate) mod batch;
pub(crate) mod cache;
pub(crate) mod checksum;
pub(crate) mod cleaner;
#[cfg(test)]
mod compaction_tests;
pub(crate) mod compress;
pub(crate) mod decompress;
#[cfg(test)]
mod idempotence_tests;
pub(crate) mod index;
pub(crate) mod limits;
pub(crate) mod markers;
pub(crate) mod occupant;
pub(crate) mod partition;
mod pieces;
pub(crate) mod producers;
pub(crate) mod reader;
pub(crate) mod records;
mod rejection;
pub(crate) mod retention;
pub(crate) mod segment;
#[cfg(test)]
mod tests;
pub(crate) mod timestamps;
pub(crate) mod topic_config;
#[cfg(test)]
mod transaction_tests;
pub(crate) mod validate;
pub(crate) mod wal;

use std::sync::Arc;
use std::time::Duration;

use crate::meta::catalog::{Catalog, PartitionRecord, TopicRecord, VersionedPartition};
use crate::metrics::Metrics;
use crate::store::{ListedSegment, SegmentObject, SegmentStore};
use cache::SegmentCache;
use limits::TopicLimits;
use partition::Partition;
use segment::SegmentMeta;

#[derive(Debug, Clone)]
pub(crate) struct LogSettings {
    /// The broker default; a topic's `segment.bytes` overrides it (see `limits`).
    pub segment_bytes: usize,
    /// The broker default; a topic's `max.message.bytes` overrides it.
    pub max_message_bytes: usize,
    /// The broker defaults of `message.timestamp.before.max.ms` and `.after.max.ms`.
    pub message_timestamp_before_max_ms: i64,
    pub message_timestamp_after_max_ms: i64,
    /// Largest size a compressed batch may expand to (a broker setting only).
    pub max_uncompressed_batch_bytes: usize,
    /// How long a partition remembers an idempotent producer that wrote nothing.
    pub producer_id_expiration_ms: i64,
    pub flush_interval: Duration,
    /// A flush starts as soon as a write is buffered, at most once per `flush_interval`
    /// (instead of `flush_interval` after the first write buffered since the last).
    pub flush_on_arrival: bool,
    pub readahead_segments: usize,
    pub index_interval: i32,
    /// A write-ahead object is cut when the buffered bytes reach this (before the interval).
    pub wal_object_max_bytes: usize,
    /// Compaction rewrites a partition's write-ahead runs into a segment once they hold
    /// `segment.bytes`, or once the oldest is this old.
    pub wal_compaction_age: Duration,
    /// How often the owner looks for partitions to compact.
    pub wal_compaction_interval: Duration,
    /// The broker default of `segment.ms` (Kafka's `log.roll.ms`).
    pub log_roll_ms: i64,
}

impl LogSettings {
    /// How long the cache holds a committed run for its compaction (`cache`): past the age at
    /// which even a slow partition's runs are compacted, and two rounds more.
    pub(crate) fn uncompacted_hold(&self) -> Duration {
        self.wal_compaction_age + 2 * self.wal_compaction_interval
    }
}

/// What every partition needs to flush and read.
pub(crate) struct LogContext {
    pub settings: LogSettings,
    pub store: Arc<SegmentStore>,
    pub catalog: Arc<Catalog>,
    pub cache: SegmentCache,
    pub metrics: Arc<Metrics>,
    /// Every committed write-ahead run in the cluster.
    pub wal: Arc<wal::index::WalIndex>,
    /// The write path's metadata writes, paced.
    pub meta_writes: wal::pace::MetaWritePace,
    /// Partitions with a segment's worth of committed runs, compacted without waiting for the
    /// next compaction interval.
    pub compaction_due: partition::compaction::CompactionDue,
}

/// The writable log of a partition this broker just claimed (`Catalog::claim_partitions`,
/// which took the committed end over from the write-ahead manifests). Nothing is read from
/// the object store here: the segments of a log with data are listed when a read or
/// retention first needs them (a log without segments has none).
pub(crate) fn claimed_partition(
    topic: &TopicRecord,
    id: i32,
    limits: Arc<TopicLimits>,
    claimed: VersionedPartition,
) -> Partition {
    let record = &claimed.record;
    let no_segments = record.segment_end() <= record.log_start_offset;
    let end = record.high_watermark;
    Partition::new(
        topic.name.as_str().into(),
        topic.id,
        id,
        limits,
        claimed,
        end,
        no_segments.then(Vec::new),
    )
}

/// A read-only view of a partition another broker owns, committed up to `committed_end`; its
/// segments are listed when a fetch first needs them.
pub(crate) fn follower_partition(
    topic: &TopicRecord,
    id: i32,
    limits: Arc<TopicLimits>,
    record: PartitionRecord,
    revision: i64,
    committed_end: i64,
) -> Partition {
    let committed = VersionedPartition {
        record,
        revision,
        owner_revision: 0,
        session: 0,
    };
    Partition::new(
        topic.name.as_str().into(),
        topic.id,
        id,
        limits,
        committed,
        committed_end,
        None,
    )
}

/// The committed segments among a partition's listed objects: data objects below the segment
/// end whose offsets reach the log start, each ending where the next one begins. Below the
/// cleaned end they are the last cleaning's (its generation), above it compaction's.
pub(crate) fn committed_segments(
    listed: &[ListedSegment],
    record: &PartitionRecord,
) -> Vec<SegmentMeta> {
    let segment_end = record.segment_end();
    let current = |s: &ListedSegment| match record.cleaned {
        Some(cleaned) if s.base_offset < cleaned.end => s.generation == Some(cleaned.generation),
        _ => s.generation.is_none(),
    };
    let data: Vec<_> = listed
        .iter()
        .filter(|s| s.kind == SegmentObject::Data && s.base_offset < segment_end && current(s))
        .collect();
    data.iter()
        .enumerate()
        .map(|(i, s)| SegmentMeta {
            base_offset: s.base_offset,
            last_offset: data
                .get(i + 1)
                .map_or(segment_end - 1, |next| next.base_offset - 1),
            generation: s.generation,
            size: s.size,
            max_timestamp: None,
        })
        .filter(|s| s.last_offset >= record.log_start_offset)
        .collect()
}
