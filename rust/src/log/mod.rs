//! Partition logs: write buffer and group commit, segment/index formats, the read path.

pub mod batch;
pub mod cache;
pub mod checksum;
pub mod flusher;
pub mod index;
pub mod partition;
pub mod reader;
pub mod segment;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use crate::meta::catalog::{Catalog, CatalogError, TopicRecord};
use crate::store::{SegmentObject, SegmentStore};
use cache::SegmentCache;
use partition::Partition;
use segment::SegmentMeta;

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub segment_bytes: usize,
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

/// Opens a partition for writing on this broker: claims a new leader epoch, finds the committed
/// segments, and removes uncommitted leftovers (objects at or above the high watermark).
pub async fn open_partition(
    ctx: &LogContext,
    topic: &TopicRecord,
    id: i32,
    max_message_bytes: usize,
) -> Result<Partition, OpenError> {
    let claimed = ctx.catalog.claim_partition(&topic.name, id).await?;
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
    let high_watermark = claimed.record.high_watermark;
    for leftover in listed.iter().filter(|s| s.base_offset >= high_watermark) {
        let path = ctx
            .store
            .segment_path(&topic.name, id, leftover.base_offset, leftover.kind);
        tracing::info!(object = %path, high_watermark, "removing uncommitted leftover");
        ctx.store.delete(&path).await.map_err(store_error)?;
    }
    let data: Vec<_> = listed
        .iter()
        .filter(|s| s.kind == SegmentObject::Data && s.base_offset < high_watermark)
        .collect();
    let segments = data
        .iter()
        .enumerate()
        .map(|(i, s)| SegmentMeta {
            base_offset: s.base_offset,
            last_offset: data
                .get(i + 1)
                .map_or(high_watermark - 1, |next| next.base_offset - 1),
            size: s.size,
            max_timestamp: None,
        })
        .filter(|s| s.last_offset >= claimed.record.log_start_offset)
        .collect();
    Ok(Partition::new(
        topic.name.as_str().into(),
        topic.id,
        id,
        max_message_bytes,
        claimed,
        segments,
    ))
}
