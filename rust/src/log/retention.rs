//! Retention, applied by a partition's owner: whole segments older than retention.ms, or
//! beyond retention.bytes counted from the newest, leave the log; DeleteRecords moves the log
//! start where a client asks and removes the segments wholly below it the same way. The log start offset moves
//! forward in the metadata store first (readers stop asking for those offsets), then the
//! objects are deleted; a crash in between leaves objects below the log start, which the next
//! owner removes when it opens the partition.

use kafka_protocol::ResponseError;

use super::partition::Partition;
use super::segment::SegmentMeta;
use super::timestamps::segment_max_timestamp;
use super::LogContext;
use crate::meta::catalog::CatalogError;
use crate::store::SegmentObject;

/// A topic's limits; -1 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetentionLimits {
    pub retention_ms: i64,
    pub retention_bytes: i64,
}

/// Applies the limits to one owned partition; returns how many segments were removed.
pub(crate) async fn enforce(
    ctx: &LogContext,
    partition: &Partition,
    limits: RetentionLimits,
    now_ms: i64,
) -> usize {
    let unlimited = limits.retention_ms < 0 && limits.retention_bytes < 0;
    // An empty log has nothing to remove: no need to list its objects (a claim did not).
    if unlimited || partition.high_watermark() <= partition.log_start_offset() {
        return 0;
    }
    if partition.sync_segments(ctx).await.is_err() {
        return 0; // the objects cannot be listed now; retention tries again next round
    }
    let segments = partition.segments();
    let by_size = beyond_size(&segments, limits.retention_bytes);
    let mut expired = by_size;
    if limits.retention_ms >= 0 {
        for segment in &segments[by_size..] {
            match segment_max_timestamp(ctx, partition, segment).await {
                Ok(max) if max < now_ms - limits.retention_ms => expired += 1,
                Ok(_) => break,
                Err(_) => break, // unreadable now; retention tries again next round
            }
        }
    }
    let Some(last_expired) = expired.checked_sub(1).map(|i| &segments[i]) else {
        return 0;
    };
    let log_start = last_expired.last_offset + 1;
    let removed = match partition.advance_log_start(ctx, log_start).await {
        Ok(removed) => removed,
        Err(error) => {
            tracing::warn!(topic = %partition.topic, partition = partition.id, %error,
                "retention could not move the log start; retrying next round");
            return 0;
        }
    };
    remove_segments(ctx, partition, &removed).await;
    tracing::info!(topic = %partition.topic, partition = partition.id, log_start,
        segments = removed.len(), "retention removed old segments");
    removed.len()
}

/// DeleteRecords (KIP-107): moves an owned partition's log start to `offset` (-1: the high
/// watermark) and removes the segments wholly below it, as retention does. Returns the new
/// log start (the partition's low watermark).
pub(crate) async fn delete_records(
    ctx: &LogContext,
    partition: &Partition,
    offset: i64,
) -> Result<i64, ResponseError> {
    if !partition.is_leader() {
        return Err(ResponseError::NotLeaderOrFollower);
    }
    let end = partition.high_watermark();
    let log_start = match offset {
        -1 => end,
        offset if offset < 0 || offset > end => return Err(ResponseError::OffsetOutOfRange),
        offset => offset,
    };
    // Listed first, so that the segments below the new start are known and go now.
    partition.sync_segments(ctx).await?;
    let removed =
        partition
            .advance_log_start(ctx, log_start)
            .await
            .map_err(|error| match error {
                CatalogError::Fenced(..) => ResponseError::NotLeaderOrFollower,
                error => {
                    tracing::warn!(topic = %partition.topic, partition = partition.id, %error,
                    "deleting records failed");
                    ResponseError::KafkaStorageError
                }
            })?;
    remove_segments(ctx, partition, &removed).await;
    tracing::info!(topic = %partition.topic, partition = partition.id, log_start,
        segments = removed.len(), "records deleted below the new log start");
    Ok(partition.log_start_offset())
}

/// Deletes the objects of segments the log start has passed. One that cannot be deleted now
/// stays below the log start, where the next owner's first listing removes it.
async fn remove_segments(ctx: &LogContext, partition: &Partition, removed: &[SegmentMeta]) {
    for segment in removed {
        for kind in [SegmentObject::Data, SegmentObject::Index] {
            let path = partition.segment_object(ctx, segment, kind);
            if let Err(error) = ctx.store.delete(&path).await {
                tracing::warn!(object = %path, %error,
                    "deleting a segment below the log start failed; the next owner removes it");
            }
        }
    }
}

/// How many of the oldest segments must go so that the rest fit in `retention_bytes`
/// (Kafka's rule: drop a segment only while the log stays at least that large without it).
fn beyond_size(segments: &[SegmentMeta], retention_bytes: i64) -> usize {
    if retention_bytes < 0 {
        return 0;
    }
    let mut excess = segments.iter().map(|s| s.size as i64).sum::<i64>() - retention_bytes;
    let mut count = 0;
    for segment in segments {
        if excess - (segment.size as i64) < 0 {
            break;
        }
        excess -= segment.size as i64;
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(base: i64, size: u64) -> SegmentMeta {
        SegmentMeta {
            base_offset: base,
            last_offset: base + 9,
            generation: None,
            size,
            max_timestamp: None,
        }
    }

    #[test]
    fn size_retention_keeps_at_least_the_limit() {
        let segments = [segment(0, 100), segment(10, 100), segment(20, 100)];
        assert_eq!(beyond_size(&segments, -1), 0);
        assert_eq!(beyond_size(&segments, 300), 0);
        assert_eq!(beyond_size(&segments, 250), 0);
        assert_eq!(beyond_size(&segments, 200), 1);
        assert_eq!(beyond_size(&segments, 150), 1);
        assert_eq!(beyond_size(&segments, 0), 3);
    }
}
