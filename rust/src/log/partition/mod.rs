//! One partition's log on this broker: offset assignment into a write buffer, the group-commit
//! flush (segment upload → high-watermark commit → acks), and the committed segment list the
//! read path works from.
//!
//! Invariants: every offset below the high watermark is in a committed segment; a produce is
//! acknowledged only after the segment holding it is uploaded and its high watermark committed;
//! a failed flush acknowledges nothing and the still-buffered batches are re-based onto the
//! committed end, so offsets never have gaps.

mod adoption;
mod roles;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kafka_protocol::ResponseError;
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use super::batch::{rewritten_prefix, IncomingBatch, REWRITTEN_PREFIX_LEN};
use super::limits::TopicLimits;
use super::occupant::{self, PutOutcome};
use super::segment::{build_segment, BuiltSegment, SegmentMeta, StoredBatch};
use super::LogContext;
use crate::meta::catalog::{CatalogError, VersionedPartition};
use crate::store::{SegmentObject, StoreError};

/// Result of a produce once its flush finished: the base offset of its first batch.
pub type AppendResult = Result<i64, ResponseError>;

struct Chunk {
    batches: Vec<StoredBatch>,
    bytes: usize,
    /// `None` for acks=0 produce requests.
    waiter: Option<oneshot::Sender<AppendResult>>,
}

struct State {
    next_offset: i64,
    committed: VersionedPartition,
    pending: Vec<Chunk>,
    pending_bytes: usize,
    /// The committed segments, or None until the partition's objects were listed: a claim
    /// does not list them, the first read or retention pass does (`roles::sync_segments`).
    segments: Option<Vec<SegmentMeta>>,
    /// Set when the partition stops taking writes (topic deleted, broker shutting down).
    closed: Option<ResponseError>,
}

pub struct Partition {
    pub topic: Arc<str>,
    pub topic_id: Uuid,
    pub id: i32,
    /// The topic's current size limits, read at each produce and flush.
    limits: Arc<TopicLimits>,
    state: Mutex<State>,
    high_watermark: watch::Sender<i64>,
    flush_lock: tokio::sync::Mutex<()>,
    /// Set by the append that schedules a flush, cleared when a flush starts: appends after
    /// that schedule the next one.
    flush_scheduled: AtomicBool,
    urgent_flush_scheduled: AtomicBool,
}

/// What a fetch needs to know, taken under the lock in one go.
pub struct ReadView {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub leader_epoch: i32,
    /// Committed segments from the one holding the requested offset onward (at most `limit`).
    pub segments: Vec<SegmentMeta>,
}

impl Partition {
    pub fn new(
        topic: Arc<str>,
        topic_id: Uuid,
        id: i32,
        limits: Arc<TopicLimits>,
        committed: VersionedPartition,
        segments: Option<Vec<SegmentMeta>>,
    ) -> Partition {
        let high_watermark = committed.record.high_watermark;
        // Without an owner key this broker only serves reads of what others committed.
        let closed = (committed.owner_revision == 0).then_some(ResponseError::NotLeaderOrFollower);
        Partition {
            topic,
            topic_id,
            id,
            limits,
            state: Mutex::new(State {
                next_offset: high_watermark,
                committed,
                pending: Vec::new(),
                pending_bytes: 0,
                segments,
                closed,
            }),
            high_watermark: watch::Sender::new(high_watermark),
            flush_lock: tokio::sync::Mutex::new(()),
            flush_scheduled: AtomicBool::new(false),
            urgent_flush_scheduled: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// The largest record batch a produce may carry now (the topic's `max.message.bytes`).
    pub fn max_message_bytes(&self) -> usize {
        self.limits.max_message_bytes()
    }

    /// What a produce arriving now is checked against (the topic's current limits).
    pub fn produce_rules(&self) -> crate::log::validate::ProduceRules {
        self.limits.produce_rules(now_ms())
    }

    /// The size segments are cut at now (the topic's `segment.bytes`): each flush writes
    /// segments of about this size, and a buffer that reaches it is flushed at once.
    pub fn segment_bytes(&self) -> usize {
        self.limits.segment_bytes()
    }

    /// Wakes every fetch waiting for this log to grow (it is being replaced).
    pub fn wake_readers(&self) {
        self.high_watermark.send_modify(|_| {});
    }

    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.state().committed.record.leader_epoch
    }

    pub fn log_start_offset(&self) -> i64 {
        self.state().committed.record.log_start_offset
    }

    /// Takes validated batches into the write buffer, assigning their offsets. Returns the
    /// receiver that completes when they are durable (if an ack is wanted) and the buffered
    /// byte count, so the caller can ask for an early flush.
    pub fn append(
        &self,
        batches: Vec<IncomingBatch>,
        want_ack: bool,
    ) -> Result<(Option<oneshot::Receiver<AppendResult>>, usize), ResponseError> {
        let mut state = self.state();
        if let Some(error) = state.closed {
            return Err(error);
        }
        let epoch = state.committed.record.leader_epoch;
        let mut stored = Vec::with_capacity(batches.len());
        let mut bytes = 0;
        for batch in batches {
            let base_offset = state.next_offset;
            state.next_offset += batch.header.offset_count();
            bytes += batch.header.size;
            stored.push(StoredBatch {
                prefix: rewritten_prefix(base_offset, batch.header.size, epoch),
                body: batch.bytes.slice(REWRITTEN_PREFIX_LEN..),
                base_offset,
                offset_count: batch.header.offset_count(),
                max_timestamp: batch.header.max_timestamp,
            });
        }
        let (waiter, receiver) = if want_ack {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        state.pending.push(Chunk {
            batches: stored,
            bytes,
            waiter,
        });
        state.pending_bytes += bytes;
        Ok((receiver, state.pending_bytes))
    }

    /// Notes that a flush is on its way; true if none was (the caller schedules one).
    pub fn schedule_flush(&self) -> bool {
        !self.flush_scheduled.swap(true, Ordering::AcqRel)
    }

    /// Like `schedule_flush`, for a flush that starts at once (the buffer is a segment's worth).
    pub fn schedule_urgent_flush(&self) -> bool {
        !self.urgent_flush_scheduled.swap(true, Ordering::AcqRel)
    }

    /// Retention: moves the log start to `log_start` (a segment boundary) and forgets the
    /// segments below it. Runs under the flush lock, so it never races a commit. Returns the
    /// segments that are no longer part of the log (their objects can go).
    pub async fn advance_log_start(
        &self,
        ctx: &LogContext,
        log_start: i64,
    ) -> Result<Vec<SegmentMeta>, CatalogError> {
        let _one_at_a_time = self.flush_lock.lock().await;
        let committed = match self.owned() {
            Some(committed) if committed.record.log_start_offset < log_start => committed,
            _ => return Ok(Vec::new()),
        };
        let next = ctx
            .catalog
            .commit_log_start(&self.topic, self.id, &committed, log_start)
            .await?;
        let mut state = self.state();
        state.committed = next;
        let Some(segments) = state.segments.as_mut() else {
            return Ok(Vec::new());
        };
        let keep = segments.partition_point(|s| s.last_offset < log_start);
        Ok(segments.drain(..keep).collect())
    }

    /// Stops taking writes; buffered data is still flushed by a later `flush`.
    pub fn close(&self, error: ResponseError) {
        self.state().closed = Some(error);
    }

    /// Fails every buffered write without flushing it (the topic is gone).
    pub fn abandon(&self, error: ResponseError) {
        let chunks = {
            let mut state = self.state();
            state.closed = Some(error);
            state.pending_bytes = 0;
            std::mem::take(&mut state.pending)
        };
        for chunk in chunks {
            if let Some(waiter) = chunk.waiter {
                let _ = waiter.send(Err(error));
            }
        }
    }

    /// Writes what is buffered when it starts and commits it, one flush at a time per
    /// partition. A backlog larger than the topic's segment size (as it is when the flush
    /// starts) becomes several segments, each ending
    /// at the first produce request boundary at or after the limit. Writes appended meanwhile
    /// are left to the flush they scheduled: a partition under steady load must not keep one
    /// flush (and its upload slot) busy forever. False if a segment failed to commit.
    pub async fn flush(&self, ctx: &LogContext) -> bool {
        let _one_at_a_time = self.flush_lock.lock().await;
        self.flush_scheduled.store(false, Ordering::Release);
        self.urgent_flush_scheduled.store(false, Ordering::Release);
        let end = self.state().next_offset;
        let segment_bytes = self.segment_bytes();
        while let Some((chunks, committed)) = self.take_segment(segment_bytes, end) {
            if !self.write_segment(ctx, chunks, committed).await {
                // The rest was re-based onto the committed end; the caller retries it.
                return false;
            }
        }
        true
    }

    /// True while appended batches wait for a flush.
    pub fn has_pending(&self) -> bool {
        !self.state().pending.is_empty()
    }

    /// The buffered chunks below `end` that make the next segment, and the state they commit
    /// on top of.
    fn take_segment(
        &self,
        segment_bytes: usize,
        end: i64,
    ) -> Option<(Vec<Chunk>, VersionedPartition)> {
        let mut state = self.state();
        let mut bytes = 0;
        let count = state
            .pending
            .iter()
            .take_while(|chunk| chunk.batches[0].base_offset < end)
            .take_while(|chunk| {
                let room = bytes < segment_bytes;
                bytes += chunk.bytes;
                room
            })
            .count();
        if count == 0 {
            return None;
        }
        let chunks: Vec<Chunk> = state.pending.drain(..count).collect();
        state.pending_bytes -= chunks.iter().map(|c| c.bytes).sum::<usize>();
        Some((chunks, state.committed.clone()))
    }

    /// Uploads and commits one segment, then answers its producers. False if it failed.
    async fn write_segment(
        &self,
        ctx: &LogContext,
        chunks: Vec<Chunk>,
        committed: VersionedPartition,
    ) -> bool {
        // Keep only who to answer; the request bytes are freed once the segment holds a copy.
        let mut batches = Vec::new();
        let mut replies = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            replies.push((chunk.waiter, chunk.batches[0].base_offset));
            batches.extend(chunk.batches);
        }
        let built = build_segment(&batches, now_ms(), ctx.settings.index_interval);
        drop(batches);
        let started = std::time::Instant::now();
        match self.upload_and_commit(ctx, &built, &committed).await {
            Ok(next) => {
                let high_watermark = next.record.high_watermark;
                tracing::debug!(
                    topic = %self.topic, partition = self.id,
                    base = built.meta.base_offset, high_watermark,
                    bytes = built.meta.size, ms = started.elapsed().as_millis() as u64,
                    "segment committed"
                );
                ctx.cache
                    .insert_segment(self.object_key(built.meta.base_offset), &built);
                {
                    let mut state = self.state();
                    state.committed = next;
                    // Unlisted: the listing will find it among the committed objects.
                    if let Some(segments) = state.segments.as_mut() {
                        segments.push(built.meta.clone());
                    }
                }
                self.high_watermark.send_replace(high_watermark);
                for (waiter, base_offset) in replies {
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(Ok(base_offset));
                    }
                }
                true
            }
            Err(error) if error.occupied => {
                // Nothing of ours was written: the batches go back, after the occupant.
                let requeued = adoption::chunks_of(&built, replies);
                self.adopt_occupant(ctx, built.meta.base_offset, committed, requeued)
                    .await;
                false
            }
            Err(error) => {
                tracing::warn!(
                    topic = %self.topic, partition = self.id,
                    base = built.meta.base_offset, error = %error.message,
                    "segment flush failed; nothing in it was acknowledged"
                );
                self.rebase_after_failure(error.fenced);
                // The segment object may exist by now, and whoever next writes this base
                // offset adopts it (see `occupant`): "possibly persisted", never "not written".
                for waiter in replies.into_iter().filter_map(|(waiter, _)| waiter) {
                    let _ = waiter.send(Err(ResponseError::RequestTimedOut));
                }
                false
            }
        }
    }

    /// After a failed flush the offsets it held were never committed: buffered batches that
    /// were appended meanwhile move down to start at the committed end again.
    fn rebase_after_failure(&self, fenced: bool) {
        if fenced {
            // Another broker owns the partition now: nothing buffered here can ever commit.
            self.abandon(ResponseError::NotLeaderOrFollower);
            return;
        }
        let mut state = self.state();
        let epoch = state.committed.record.leader_epoch;
        let mut next = state.committed.record.high_watermark;
        for chunk in &mut state.pending {
            for batch in &mut chunk.batches {
                batch.base_offset = next;
                batch.prefix = rewritten_prefix(next, batch.size(), epoch);
                next += batch.offset_count;
            }
        }
        state.next_offset = next;
    }

    async fn upload_and_commit(
        &self,
        ctx: &LogContext,
        built: &BuiltSegment,
        committed: &VersionedPartition,
    ) -> Result<VersionedPartition, FlushError> {
        let base = built.meta.base_offset;
        let data = self.segment_path(ctx, base, SegmentObject::Data);
        let index = self.segment_path(ctx, base, SegmentObject::Index);
        if let PutOutcome::Occupied = occupant::put_new(ctx, &data, built.object.clone()).await? {
            return Err(FlushError::occupied(base));
        }
        if let PutOutcome::Occupied = occupant::put_new(ctx, &index, built.index.clone()).await? {
            // Our data object was new, so no other writer can have produced this index.
            return Err(FlushError::from(StoreError::Other(format!(
                "{index} exists with other contents than the segment just written"
            ))));
        }
        let high_watermark = built.meta.last_offset + 1;
        ctx.catalog
            .commit_high_watermark(&self.topic, self.id, committed, high_watermark)
            .await
            .map_err(FlushError::from)
    }

    /// Where one of this partition's segment objects lives.
    pub fn segment_path(
        &self,
        ctx: &LogContext,
        base_offset: i64,
        kind: SegmentObject,
    ) -> object_store::path::Path {
        ctx.store
            .segment_path(&self.topic, self.id, base_offset, kind)
    }

    /// The segment's cache key; the topic id keeps a re-created topic from seeing the old one's
    /// cached bytes.
    pub fn object_key(&self, base_offset: i64) -> String {
        format!("{}/{}/{}/{base_offset}", self.topic, self.topic_id, self.id)
    }

    /// Committed segments starting with the one that holds `offset`, or the reason the offset
    /// cannot be read.
    pub fn read_view(&self, offset: i64, limit: usize) -> Result<ReadView, ResponseError> {
        let state = self.state();
        let record = &state.committed.record;
        if offset < record.log_start_offset || offset > record.high_watermark {
            return Err(ResponseError::OffsetOutOfRange);
        }
        let segments = state.segments.as_deref().unwrap_or_default();
        let first = segments.partition_point(|s| s.last_offset < offset);
        let end = (first + limit).min(segments.len());
        Ok(ReadView {
            high_watermark: record.high_watermark,
            log_start_offset: record.log_start_offset,
            leader_epoch: record.leader_epoch,
            segments: segments[first..end].to_vec(),
        })
    }

    /// Every committed segment (for timestamp searches).
    pub fn segments(&self) -> Vec<SegmentMeta> {
        self.state().segments.clone().unwrap_or_default()
    }

    /// Remembers a segment's max timestamp once a search has read it.
    pub fn learn_max_timestamp(&self, base_offset: i64, max_timestamp: i64) {
        let mut state = self.state();
        if let Some(segment) = state
            .segments
            .iter_mut()
            .flatten()
            .find(|s| s.base_offset == base_offset)
        {
            segment.max_timestamp = Some(max_timestamp);
        }
    }
}

/// Why a flush failed, and the retriable error its producers get.
#[derive(Debug)]
struct FlushError {
    code: ResponseError,
    fenced: bool,
    /// The base offset was taken by an earlier owner's uncommitted segment.
    occupied: bool,
    message: String,
}

impl FlushError {
    fn occupied(base: i64) -> FlushError {
        FlushError {
            code: ResponseError::KafkaStorageError,
            fenced: false,
            occupied: true,
            message: format!("base offset {base} is taken by an uncommitted segment"),
        }
    }
}

impl From<StoreError> for FlushError {
    fn from(e: StoreError) -> Self {
        FlushError {
            code: ResponseError::KafkaStorageError,
            fenced: false,
            occupied: false,
            message: e.to_string(),
        }
    }
}

impl From<CatalogError> for FlushError {
    fn from(e: CatalogError) -> Self {
        let fenced = matches!(e, CatalogError::Fenced(..));
        FlushError {
            code: if fenced {
                ResponseError::NotLeaderOrFollower
            } else {
                ResponseError::KafkaStorageError
            },
            fenced,
            occupied: false,
            message: e.to_string(),
        }
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Partition {
    /// Returns once no flush of this partition is under way.
    pub async fn wait_for_flush(&self) {
        let _ = self.flush_lock.lock().await;
    }
}
