//! Partition logs: write buffer and group commit, segment/index formats, the read path.

pub mod batch;
pub mod cache;
pub mod checksum;
pub mod decompress;
pub mod flusher;
pub mod index;
pub mod limits;
pub mod occupant;
pub mod partition;
pub mod reader;
mod record_reader;
pub mod retention;
pub mod segment;
#[cfg(test)]
mod tests;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use crate::meta::catalog::{
    Catalog, CatalogError, PartitionRecord, TopicRecord, VersionedPartition,
};
use crate::metrics::Metrics;
use crate::store::{ListedSegment, SegmentObject, SegmentStore};
use cache::SegmentCache;
use limits::TopicLimits;
use partition::Partition;
use segment::SegmentMeta;

#[derive(Debug, Clone)]
pub struct LogSettings {
    /// The broker default; a topic's `segment.bytes` overrides it (see `limits`).
    pub segment_bytes: usize,
    /// The broker default; a topic's `max.message.bytes` overrides it.
    pub max_message_bytes: usize,
    /// The broker defaults of `message.timestamp.before.max.ms` and `.after.max.ms`.
    pub message_timestamp_before_max_ms: i64,
    pub message_timestamp_after_max_ms: i64,
    /// Largest size a compressed batch may expand to (a broker setting only).
    pub max_uncompressed_batch_bytes: usize,
    pub flush_interval: Duration,
    pub readahead_segments: usize,
    pub index_interval: i32,
    pub max_concurrent_flushes: usize,
}

/// What every partition needs to flush and read.
pub struct LogContext {
    pub settings: LogSettings,
    pub store: Arc<SegmentStore>,
    pub catalog: Arc<Catalog>,
    pub cache: SegmentCache,
    pub metrics: Arc<Metrics>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("listing segments of {topic}-{partition}: {source}")]
    Store {
        topic: String,
        partition: i32,
        source: crate::store::StoreError,
    },
}

/// Opens a partition for writing on this broker: claims it (owner key + new leader epoch) and
/// finds the committed segments. Uncommitted objects above them stay: the first flush at their
/// base offset adopts them (see `occupant`).
pub async fn open_partition(
    ctx: &LogContext,
    topic: &TopicRecord,
    id: i32,
    limits: Arc<TopicLimits>,
    broker_id: i32,
) -> Result<Partition, OpenError> {
    let mut claimed = ctx
        .catalog
        .claim_partition(&topic.name, id, broker_id)
        .await?;
    let store_error = |source| OpenError::Store {
        topic: topic.name.clone(),
        partition: id,
        source,
    };
    let listed = ctx
        .store
        .list_partition(&topic.name, id)
        .await
        .map_err(store_error)?;
    let mut segments = committed_segments(&listed, &claimed.record);
    // Segments a crashed or fenced owner wrote but did not commit become part of the log now
    // (see `occupant`), so the log is settled before the first write.
    loop {
        let end = claimed.record.high_watermark;
        let found = listed
            .iter()
            .any(|o| o.base_offset == end && o.kind == SegmentObject::Data);
        if !found {
            break;
        }
        let data = ctx
            .store
            .segment_path(&topic.name, id, end, SegmentObject::Data);
        let index = ctx
            .store
            .segment_path(&topic.name, id, end, SegmentObject::Index);
        let occupant = occupant::adopt(ctx, &data, &index, end)
            .await
            .map_err(|e| store_error(crate::store::StoreError::Other(e)))?;
        claimed = ctx
            .catalog
            .commit_adopted(
                &topic.name,
                id,
                &claimed,
                occupant.meta.last_offset + 1,
                occupant.epoch,
            )
            .await?;
        tracing::warn!(
            topic = topic.name,
            partition = id,
            base = end,
            last = occupant.meta.last_offset,
            "adopted a segment the previous owner wrote but did not commit"
        );
        segments.push(occupant.meta);
    }
    // Objects below the first kept segment are what retention dropped (a crash came between
    // moving the log start and deleting them): nobody writes below the high watermark, so
    // deleting them is safe. Objects at or above it are never deleted (see `occupant`).
    let first_kept = segments
        .first()
        .map_or(claimed.record.high_watermark, |s| s.base_offset);
    for object in listed.iter().filter(|o| o.base_offset < first_kept) {
        let path = ctx
            .store
            .segment_path(&topic.name, id, object.base_offset, object.kind);
        tracing::info!(object = %path, "removing a segment below the log start");
        ctx.store.delete(&path).await.map_err(store_error)?;
    }
    Ok(Partition::new(
        topic.name.as_str().into(),
        topic.id,
        id,
        limits,
        claimed,
        segments,
    ))
}

/// A read-only view of a partition another broker owns; its segments are listed when a fetch
/// first needs them.
pub fn follower_partition(
    topic: &TopicRecord,
    id: i32,
    limits: Arc<TopicLimits>,
    record: PartitionRecord,
    revision: i64,
) -> Partition {
    let committed = VersionedPartition {
        record,
        revision,
        owner_revision: 0,
    };
    Partition::new(
        topic.name.as_str().into(),
        topic.id,
        id,
        limits,
        committed,
        Vec::new(),
    )
}

/// The committed segments among a partition's listed objects: data objects below the high
/// watermark whose offsets reach the log start, each ending where the next one begins.
pub fn committed_segments(listed: &[ListedSegment], record: &PartitionRecord) -> Vec<SegmentMeta> {
    let high_watermark = record.high_watermark;
    let data: Vec<_> = listed
        .iter()
        .filter(|s| s.kind == SegmentObject::Data && s.base_offset < high_watermark)
        .collect();
    data.iter()
        .enumerate()
        .map(|(i, s)| SegmentMeta {
            base_offset: s.base_offset,
            last_offset: data
                .get(i + 1)
                .map_or(high_watermark - 1, |next| next.base_offset - 1),
            size: s.size,
            max_timestamp: None,
        })
        .filter(|s| s.last_offset >= record.log_start_offset)
        .collect()
}
