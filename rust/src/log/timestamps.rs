//! Timestamp searches over a partition's committed log (ListOffsets, retention): the first
//! record at or after a timestamp, and the first record with the log's largest timestamp
//! (KIP-734). Batch headers carry each batch's largest timestamp, so whole batches, segments
//! (remembered once read) and write-ahead runs (their manifest says) are skipped or compared
//! without decoding records; only the batches that matter are decoded.

use std::sync::Arc;

use kafka_protocol::ResponseError;

use super::batch::BatchHeader;
use super::cache::CachedBatches;
use super::partition::Partition;
use super::reader::{corrupt, load_from, load_run};
use super::records::walk_batch;
use super::segment::{SegmentMeta, StoredBatch};
use super::validate::Rejection;
use super::LogContext;

/// A segment's largest batch timestamp (read once, then remembered on the partition).
pub(crate) async fn segment_max_timestamp(
    ctx: &LogContext,
    partition: &Partition,
    segment: &SegmentMeta,
) -> Result<i64, ResponseError> {
    if let Some(known) = segment.max_timestamp {
        return Ok(known);
    }
    let batches = load_from(ctx, partition, segment, segment.base_offset).await?;
    let mut max = i64::MIN;
    for item in batches.batches() {
        let (_, header) = item.map_err(|_| corrupt(partition, segment))?;
        max = max.max(header.max_timestamp);
    }
    partition.learn_max_timestamp(segment.base_offset, max);
    Ok(max)
}

/// The first offset whose record timestamp is at or after `timestamp`, with that record's
/// timestamp; `None` if every record is older.
pub(crate) async fn offset_for_timestamp(
    ctx: &Arc<LogContext>,
    partition: &Arc<Partition>,
    timestamp: i64,
) -> Result<Option<(i64, i64)>, ResponseError> {
    partition.sync_segments(ctx).await?;
    let log_start = partition.log_start_offset();
    let mut segment_end = log_start;
    for segment in partition.segments() {
        segment_end = segment.last_offset + 1;
        if segment.max_timestamp.is_some_and(|max| max < timestamp) {
            continue;
        }
        let batches = load_from(ctx, partition, &segment, segment.base_offset).await?;
        let (hit, segment_max) = first_at_or_after(ctx, partition, &batches, timestamp, log_start)
            .map_err(|()| corrupt(partition, &segment))?;
        if hit.is_some() {
            return Ok(hit);
        }
        partition.learn_max_timestamp(segment.base_offset, segment_max);
    }
    let end = partition.high_watermark();
    let runs = ctx
        .wal
        .runs_from((partition.topic_id, partition.id), segment_end);
    for run in runs {
        if run.run.max_timestamp < timestamp || run.run.base_offset >= end {
            continue;
        }
        let (run, batches) = load_run(ctx, run).await?;
        let (hit, _) =
            first_at_or_after(ctx, partition, &batches, timestamp, log_start).map_err(|()| {
                tracing::error!(object = %run.object, "write-ahead run is malformed");
                ResponseError::KafkaStorageError
            })?;
        if hit.is_some() {
            return Ok(hit);
        }
    }
    Ok(None)
}

/// The first record of `batches` at or after `timestamp` (and the log start), with its
/// timestamp; and the largest batch timestamp seen.
fn first_at_or_after(
    ctx: &LogContext,
    partition: &Partition,
    batches: &CachedBatches,
    timestamp: i64,
    log_start: i64,
) -> Result<(Option<(i64, i64)>, i64), ()> {
    let mut max = i64::MIN;
    for item in batches.batches() {
        let (batch, header) = item.map_err(|_| ())?;
        max = max.max(header.max_timestamp);
        if header.max_timestamp < timestamp || header.last_offset() < log_start {
            continue;
        }
        let records = record_timestamps(ctx, partition, &batch, &header)?;
        let hit = records
            .into_iter()
            .find(|&(offset, t)| t >= timestamp && offset >= log_start);
        if hit.is_some() {
            return Ok((hit, max));
        }
    }
    Ok((None, max))
}

/// The first record with the log's largest timestamp, with that timestamp (ListOffsets
/// MAX_TIMESTAMP, -3); `None` for an empty log. Only records from the log start on count: in
/// the segment or run that holds the log start the batch across it is decoded.
pub(crate) async fn max_timestamp_record(
    ctx: &Arc<LogContext>,
    partition: &Arc<Partition>,
) -> Result<Option<(i64, i64)>, ResponseError> {
    partition.sync_segments(ctx).await?;
    let log_start = partition.log_start_offset();
    let end = partition.high_watermark();
    let mut max = i64::MIN;
    let mut segment_end = log_start;
    for segment in partition.segments() {
        segment_end = segment.last_offset + 1;
        let segment_max = if segment.base_offset < log_start {
            let batches = load_from(ctx, partition, &segment, log_start).await?;
            largest_from(ctx, partition, &batches, log_start)
                .map_err(|()| corrupt(partition, &segment))?
        } else {
            segment_max_timestamp(ctx, partition, &segment).await?
        };
        max = max.max(segment_max);
    }
    let key = (partition.topic_id, partition.id);
    for run in ctx.wal.runs_from(key, segment_end.max(log_start)) {
        if run.run.base_offset >= end {
            break;
        }
        if run.run.base_offset >= log_start {
            max = max.max(run.run.max_timestamp);
            continue;
        }
        let (run, batches) = load_run(ctx, run).await?;
        max = max.max(
            largest_from(ctx, partition, &batches, log_start).map_err(|()| {
                tracing::error!(object = %run.object, "write-ahead run is malformed");
                ResponseError::KafkaStorageError
            })?,
        );
    }
    if max == i64::MIN {
        return Ok(None);
    }
    offset_for_timestamp(ctx, partition, max).await
}

/// The largest timestamp of the records of `batches` at or after `log_start`.
fn largest_from(
    ctx: &LogContext,
    partition: &Partition,
    batches: &CachedBatches,
    log_start: i64,
) -> Result<i64, ()> {
    let mut max = i64::MIN;
    for item in batches.batches() {
        let (batch, header) = item.map_err(|_| ())?;
        if header.last_offset() < log_start {
            continue;
        }
        if header.base_offset >= log_start {
            max = max.max(header.max_timestamp);
            continue;
        }
        let records = record_timestamps(ctx, partition, &batch, &header)?;
        let kept = records
            .into_iter()
            .filter(|&(offset, _)| offset >= log_start);
        max = max.max(kept.map(|(_, t)| t).max().unwrap_or(i64::MIN));
    }
    Ok(max)
}

/// The offset and timestamp of each record of one batch, in order; a batch that does not
/// decode is logged.
fn record_timestamps(
    ctx: &LogContext,
    partition: &Partition,
    batch: &StoredBatch,
    header: &BatchHeader,
) -> Result<Vec<(i64, i64)>, ()> {
    let mut records = Vec::new();
    let limit = ctx.settings.max_uncompressed_batch_bytes;
    walk_batch(header, &batch.joined(), limit, |record| {
        let offset = header.base_offset + i64::from(record.offset_delta);
        records.push((offset, header.record_timestamp(record.timestamp_delta)));
        Ok::<(), Rejection>(())
    })
    .map_err(|e| {
        tracing::error!(topic = %partition.topic, partition = partition.id, error = e.message,
            "batch could not be decoded for a timestamp search");
    })?;
    Ok(records)
}
