//! What a flush does when its base offset is taken by an earlier owner's uncommitted segment
//! (see `crate::log::occupant`): commit that segment, then write its own batches after it.

use tokio::sync::oneshot;

use super::{AppendResult, Chunk, FlushError, Partition};
use crate::log::batch::REWRITTEN_PREFIX_LEN;
use crate::log::occupant;
use crate::log::segment::{BatchWalker, BuiltSegment, StoredBatch};
use crate::log::LogContext;
use crate::meta::catalog::VersionedPartition;
use crate::store::{SegmentObject, StoreError};

impl Partition {
    /// Commits the segment an earlier owner left at `base` (see `occupant`), then moves
    /// `requeued` and everything buffered after it to start at the new committed end.
    pub(super) async fn adopt_occupant(
        &self,
        ctx: &LogContext,
        base: i64,
        committed: VersionedPartition,
        requeued: Vec<Chunk>,
    ) {
        let data = self.segment_path(ctx, base, SegmentObject::Data);
        let index = self.segment_path(ctx, base, SegmentObject::Index);
        let adopted = match occupant::adopt(ctx, &data, &index, base).await {
            Ok(occupant) => {
                let end = occupant.meta.last_offset + 1;
                ctx.catalog
                    .commit_adopted(&self.topic, self.id, &committed, end, occupant.epoch)
                    .await
                    .map(|next| (next, occupant.meta))
                    .map_err(FlushError::from)
            }
            Err(message) => Err(FlushError::from(StoreError::Other(message))),
        };
        match adopted {
            Ok((next, meta)) => {
                tracing::warn!(topic = %self.topic, partition = self.id, base,
                    last = meta.last_offset,
                    "adopted a segment an earlier owner wrote but did not commit");
                let high_watermark = next.record.high_watermark;
                {
                    let mut state = self.state();
                    state.committed = next;
                    if let Some(segments) = state.segments.as_mut() {
                        segments.push(meta);
                    }
                    state.pending_bytes += requeued.iter().map(|c| c.bytes).sum::<usize>();
                    state.pending.splice(0..0, requeued);
                }
                self.high_watermark.send_replace(high_watermark);
                self.rebase_after_failure(false);
            }
            Err(error) => {
                if error.fenced {
                    tracing::warn!(topic = %self.topic, partition = self.id, base,
                        "fenced while adopting the object at the next base offset");
                } else {
                    tracing::error!(topic = %self.topic, partition = self.id, base,
                        error = %error.message,
                        "the object at the next base offset cannot be adopted");
                }
                for waiter in requeued.into_iter().filter_map(|c| c.waiter) {
                    let _ = waiter.send(Err(error.code));
                }
                self.rebase_after_failure(error.fenced);
            }
        }
    }
}

/// Splits a built segment back into the produce requests it came from (slices, no copies),
/// so they can be written again elsewhere.
pub(super) fn chunks_of(
    built: &BuiltSegment,
    replies: Vec<(Option<oneshot::Sender<AppendResult>>, i64)>,
) -> Vec<Chunk> {
    let area = built.batches();
    let mut batches = BatchWalker::new(&area)
        .filter_map(Result::ok)
        .map(|(position, header)| StoredBatch {
            prefix: area.slice(position..position + REWRITTEN_PREFIX_LEN),
            body: area.slice(position + REWRITTEN_PREFIX_LEN..position + header.size),
            base_offset: header.base_offset,
            offset_count: header.offset_count(),
            max_timestamp: header.max_timestamp,
        })
        .peekable();
    let starts: Vec<i64> = replies.iter().map(|(_, base)| *base).skip(1).collect();
    let mut chunks = Vec::with_capacity(replies.len());
    for (i, (waiter, _)) in replies.into_iter().enumerate() {
        let end = starts.get(i).copied().unwrap_or(i64::MAX);
        let mut stored = Vec::new();
        while let Some(batch) = batches.next_if(|b| b.base_offset < end) {
            stored.push(batch);
        }
        let bytes = stored.iter().map(StoredBatch::size).sum();
        chunks.push(Chunk {
            batches: stored,
            bytes,
            waiter,
        });
    }
    chunks
}
