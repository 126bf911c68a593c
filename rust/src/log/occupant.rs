//! Segment objects are created once and never replaced above the high watermark: a flush
//! writes with conditional create, and if its base offset is already taken, whatever sits
//! there becomes the next part of the log ("adopted") instead of being deleted. Deleting it
//! would not be safe: the writer that finds it may itself be a stale owner that froze and
//! lost its lease, and the object may already be a new owner's committed segment. Adopting is:
//! the occupant is a complete segment object (atomic PUT, checked CRC) written by an earlier
//! owner of the same partition at the same base offset; committing it, under the same fencing
//! as any commit, makes records visible that their producer was never told were stored –
//! at-least-once, as Kafka itself allows – and never loses or overwrites anything.

use bytes::Bytes;
use object_store::path::Path;

use super::index::IndexBuilder;
use super::segment::{BatchWalker, ParsedSegment, SegmentMeta, SEGMENT_HEADER_LEN};
use super::LogContext;
use crate::store::StoreError;

/// What a conditional create found.
#[derive(Debug)]
pub enum PutOutcome {
    Created,
    /// Another object (different bytes) holds the name.
    Occupied,
}

/// Creates `path` with `object`; an existing object with the very same bytes counts as
/// created (a retried PUT whose first attempt went through).
pub async fn put_new(
    ctx: &LogContext,
    path: &Path,
    object: Bytes,
) -> Result<PutOutcome, StoreError> {
    let started = std::time::Instant::now();
    let put = ctx.store.put_new(path, object.clone()).await;
    ctx.metrics
        .upload_duration
        .observe(started.elapsed().as_secs_f64());
    if matches!(put, Err(ref e) if !matches!(e, StoreError::AlreadyExists(_))) {
        ctx.metrics.upload_errors.inc();
    }
    match put {
        Ok(()) => Ok(PutOutcome::Created),
        Err(StoreError::AlreadyExists(_)) if ctx.store.get(path).await? == object => {
            Ok(PutOutcome::Created)
        }
        Err(StoreError::AlreadyExists(_)) => Ok(PutOutcome::Occupied),
        Err(e) => Err(e),
    }
}

/// A checked segment found at a base offset, ready to be committed.
pub struct Occupant {
    pub meta: SegmentMeta,
    /// The leader epoch its batches were written under.
    pub epoch: i32,
}

/// Reads and checks the segment at `base` and makes sure its index object exists.
pub async fn adopt(
    ctx: &LogContext,
    data: &Path,
    index: &Path,
    base: i64,
) -> Result<Occupant, String> {
    let object = ctx.store.get(data).await.map_err(|e| e.to_string())?;
    let size = object.len() as u64;
    let parsed = ParsedSegment::parse(object).map_err(|e| format!("{data}: {e}"))?;
    if parsed.base_offset != base || parsed.last_offset < base {
        return Err(format!(
            "{data}: holds offsets {}..={}, not a segment starting at {base}",
            parsed.base_offset, parsed.last_offset
        ));
    }
    let mut builder = IndexBuilder::new(ctx.settings.index_interval);
    let mut max_timestamp = i64::MIN;
    let mut epoch = -1;
    for item in BatchWalker::new(&parsed.batches) {
        let (position, header) = item.map_err(|e| format!("{data}: {e}"))?;
        epoch = epoch.max(header.leader_epoch);
        let position = (SEGMENT_HEADER_LEN + position) as u32;
        builder.add_batch(header.base_offset, position, header.offset_count());
        max_timestamp = max_timestamp.max(header.max_timestamp);
    }
    // The index is derived from the data, so any index already there (the earlier owner's) is
    // the same; only a missing one needs writing.
    match ctx.store.put_new(index, builder.encode()).await {
        Ok(()) | Err(StoreError::AlreadyExists(_)) => {}
        Err(e) => return Err(e.to_string()),
    }
    let meta = SegmentMeta {
        base_offset: base,
        last_offset: parsed.last_offset,
        size,
        max_timestamp: Some(max_timestamp),
    };
    Ok(Occupant { meta, epoch })
}
