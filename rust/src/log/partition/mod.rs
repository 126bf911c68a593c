//! One partition's log on this broker: offset assignment into a write buffer, hand-over of
//! buffered batches to the broker's write-ahead flush (`log::wal::writer`), and the committed
//! segment list the read path works from.
//!
//! Invariants: every offset below the high watermark is committed (in a `.kfs` segment below
//! the record's `segment_end`, in a write-ahead run above it); a produce is acknowledged only
//! after the object holding it is uploaded and its manifest committed; a failed flush
//! acknowledges nothing and the still-buffered batches are re-based onto the committed end,
//! so offsets never have gaps.

mod cleaning;
pub(crate) mod compaction;
mod idempotence;
mod roles;
mod transactions;

pub(crate) use compaction::Compacted;
pub(crate) use idempotence::Recorded;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use kafka_protocol::ResponseError;
use smallvec::smallvec;
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use super::batch::{rewritten_prefix, IncomingBatch, REWRITTEN_PREFIX_LEN};
use super::limits::TopicLimits;
use super::segment::{SegmentMeta, StoredBatch};
use super::LogContext;
use crate::meta::catalog::{CatalogError, VersionedPartition};
use crate::store::SegmentObject;
use idempotence::{Admission, Idempotence};
pub(crate) use transactions::{Marked, Verifier};

/// Result of a produce once its flush finished: the base offset of its first batch.
pub(crate) type AppendResult = Result<i64, ResponseError>;

/// Who to answer about a produce request, and the base offset it got.
pub(crate) type Reply = (oneshot::Sender<AppendResult>, i64);

/// Buffered batches a flush took, in offset order, and what is owed for them.
pub(crate) struct Taken {
    /// Given up to the object built of them.
    pub batches: Vec<StoredBatch>,
    pub bytes: usize,
    pub leader_epoch: i32,
    /// Some of them are a transaction's batches or markers (the manifest says so, for the
    /// readers outside the brokers that work out which transactions are open or aborted).
    pub transactional: bool,
    /// Kept until the object is committed or failed.
    pub owed: Owed,
}

/// What a flush owes for the batches it took, once their object is committed or failed.
pub(crate) struct Owed {
    replies: Vec<Reply>,
    /// The idempotent producers' batches among them.
    recorded: Vec<Recorded>,
}

struct Chunk {
    batches: Vec<StoredBatch>,
    bytes: usize,
    /// Told once the batches are durable or failed (an acks=0 request's handler waits for
    /// it too: its bytes stay charged to the budgets until then).
    waiter: oneshot::Sender<AppendResult>,
    /// The idempotent producers' batches among `batches`.
    recorded: Vec<Recorded>,
}

/// What an append did.
pub(crate) enum Appended {
    /// Buffered: the receiver completes once the batches are durable; the bytes buffered.
    Buffered(oneshot::Receiver<AppendResult>, usize),
    /// A producer's retry of batches stored already, at this base offset.
    Stored(i64),
}

#[cfg(test)]
impl Appended {
    /// What a batch without producer id gets: buffered.
    pub(crate) fn buffered(self) -> (oneshot::Receiver<AppendResult>, usize) {
        match self {
            Appended::Buffered(ack, bytes) => (ack, bytes),
            Appended::Stored(at) => panic!("a retry answered with offset {at}"),
        }
    }
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
    producers: Idempotence,
}

pub(crate) struct Partition {
    pub topic: Arc<str>,
    pub topic_id: Uuid,
    pub id: i32,
    /// The topic's current size limits, read at each produce and flush.
    limits: Arc<TopicLimits>,
    state: Mutex<State>,
    /// The committed end (owner: moved by its commits; follower: by what the store reports).
    high_watermark: watch::Sender<i64>,
    /// Serialises the changes of the partition record this broker makes as owner (retention,
    /// compaction), so each is conditioned on the last.
    record_lock: Arc<tokio::sync::Mutex<()>>,
    /// Set while the partition is on the write-ahead writer's list of partitions to flush.
    queued: AtomicBool,
    /// Bytes of the runs above the segment end as this owner counts them: each commit adds
    /// its run, each compaction counts what it left (`compaction`).
    uncompacted_bytes: AtomicU64,
    /// Set while the partition is on the list of those due for compaction.
    compaction_queued: AtomicBool,
    /// The read-only log that replaced this one when the broker gave the partition up
    /// (`to_follower`): commits settled after that are passed on to it.
    successor: Mutex<Weak<Partition>>,
}

/// What a fetch needs to know, taken under the lock in one go.
pub(crate) struct ReadView {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Where the committed segments end and the write-ahead runs take over.
    pub segment_end: i64,
    /// Committed segments from the one holding the requested offset onward.
    pub segments: Vec<SegmentMeta>,
}

impl Partition {
    pub(crate) fn new(
        topic: Arc<str>,
        topic_id: Uuid,
        id: i32,
        limits: Arc<TopicLimits>,
        committed: VersionedPartition,
        committed_end: i64,
        segments: Option<Vec<SegmentMeta>>,
    ) -> Partition {
        let high_watermark = committed_end.max(committed.record.high_watermark);
        // Without an owner key this broker only serves reads of what others committed.
        let closed = (committed.owner_revision == 0).then_some(ResponseError::NotLeaderOrFollower);
        // A log with nothing in it, and none in a snapshot, has no producer state to rebuild.
        let producers = if high_watermark <= committed.record.log_start_offset
            && committed.record.producer_snapshot.is_none()
        {
            Idempotence::empty_log(high_watermark)
        } else {
            Idempotence::default()
        };
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
                producers,
            }),
            high_watermark: watch::Sender::new(high_watermark),
            record_lock: Arc::default(),
            queued: AtomicBool::new(false),
            uncompacted_bytes: AtomicU64::new(0),
            compaction_queued: AtomicBool::new(false),
            successor: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// Moves the committed end up to `end` (never down), waking readers if it moved.
    fn raise_high_watermark(&self, end: i64) {
        self.high_watermark.send_if_modified(|current| {
            let moved = end > *current;
            *current = (*current).max(end);
            moved
        });
    }

    /// The largest record batch a produce may carry now (the topic's `max.message.bytes`).
    #[cfg(test)]
    pub(crate) fn max_message_bytes(&self) -> usize {
        self.limits.max_message_bytes()
    }

    /// What a produce arriving now is checked against (the topic's current limits).
    pub(crate) fn produce_rules(&self) -> crate::log::validate::ProduceRules {
        self.limits.produce_rules(now_ms())
    }

    /// The size segments are cut at now (the topic's `segment.bytes`): each flush writes
    /// segments of about this size, and a buffer that reaches it is flushed at once.
    pub(crate) fn segment_bytes(&self) -> usize {
        self.limits.segment_bytes()
    }

    /// Wakes every fetch waiting for this log to grow (it is being replaced).
    pub(crate) fn wake_readers(&self) {
        self.high_watermark.send_modify(|_| {});
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// How many readers follow the committed end (tests wait for a fetch to reach its wait).
    #[cfg(test)]
    pub(crate) fn readers(&self) -> usize {
        self.high_watermark.receiver_count()
    }

    pub(crate) fn leader_epoch(&self) -> i32 {
        self.state().committed.record.leader_epoch
    }

    pub(crate) fn log_start_offset(&self) -> i64 {
        self.state().committed.record.log_start_offset
    }

    /// Takes validated batches into the write buffer, assigning their offsets, once the
    /// producer state admits them. Returns the receiver that completes when they are durable
    /// and the bytes appended, for the write-ahead writer's accounting; or, for a retry of
    /// stored batches, where they are (without `want_ack`, acks=0, also for a retry of
    /// batches still buffered).
    #[cfg(test)]
    pub(crate) fn append(
        &self,
        batches: Vec<IncomingBatch>,
        want_ack: bool,
    ) -> Result<Appended, ResponseError> {
        self.append_verified(batches, want_ack, &transactions::no_transaction)
    }

    /// `append`, for a request whose transactional batches `verify` checks against the
    /// transaction coordinator's record (under the partition's lock, so no marker of the
    /// same transaction slips in between; `transactions`).
    pub(crate) fn append_verified(
        &self,
        batches: Vec<IncomingBatch>,
        want_ack: bool,
        verify: Verifier<'_>,
    ) -> Result<Appended, ResponseError> {
        let mut state = self.state();
        if let Some(error) = state.closed {
            return Err(error);
        }
        transactions::check_transactional(&state.producers, &batches, verify)?;
        let expiration_ms = self.limits.producer_id_expiration_ms();
        let admitted = state
            .producers
            .admit(batches.iter().map(|b| b.header), expiration_ms)?;
        let mut producer_batches = match admitted {
            Admission::Append(producer_batches) => producer_batches.into_iter().peekable(),
            Admission::Duplicate(place)
                if place.last_offset < self.high_watermark() || !want_ack =>
            {
                return Ok(Appended::Stored(place.base_offset));
            }
            Admission::Duplicate(place) => {
                let receiver = state.producers.await_original(place);
                return Ok(Appended::Buffered(receiver, 0));
            }
        };
        let epoch = state.committed.record.leader_epoch;
        let mut stored = Vec::with_capacity(batches.len());
        let mut recorded = Vec::new();
        let mut bytes = 0;
        for (i, batch) in batches.into_iter().enumerate() {
            let base_offset = state.next_offset;
            state.next_offset += batch.header.offset_count();
            bytes += batch.header.size;
            if let Some((_, producer)) = producer_batches.next_if(|(at, _)| *at == i) {
                let last_offset = batch.header.last_offset_delta as i64 + base_offset;
                recorded.push(state.producers.record(producer, base_offset, last_offset));
            }
            stored.push(stored_batch(&batch, base_offset, epoch));
        }
        let receiver = state.buffer(stored, bytes, recorded);
        Ok(Appended::Buffered(receiver, bytes))
    }

    /// Puts the partition on the writer's list; true if it was not on it (the caller adds it).
    pub(crate) fn enqueue(&self) -> bool {
        !self.queued.swap(true, Ordering::AcqRel)
    }

    /// Takes the partition off the writer's list (before its buffer is taken, so an append
    /// that comes after puts it back).
    pub(crate) fn dequeue(&self) {
        self.queued.store(false, Ordering::Release);
    }

    /// Retention: moves the log start to `log_start` (a segment boundary) and forgets the
    /// segments below it. Runs under the flush lock, so it never races a commit. Returns the
    /// segments that are no longer part of the log (their objects can go).
    pub(crate) async fn advance_log_start(
        &self,
        ctx: &LogContext,
        log_start: i64,
    ) -> Result<Vec<SegmentMeta>, CatalogError> {
        let _one_at_a_time = self.record_lock.lock().await;
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
        state.producers.truncate_below(log_start);
        let Some(segments) = state.segments.as_mut() else {
            return Ok(Vec::new());
        };
        let keep = segments.partition_point(|s| s.last_offset < log_start);
        Ok(segments.drain(..keep).collect())
    }

    /// Stops taking writes; buffered data is still flushed by a later `flush`.
    pub(crate) fn close(&self, error: ResponseError) {
        self.state().closed = Some(error);
    }

    /// Fails every buffered write without flushing it (the topic is gone).
    pub(crate) fn abandon(&self, error: ResponseError) {
        let chunks = {
            let mut state = self.state();
            state.closed = Some(error);
            state.pending_bytes = 0;
            state.producers.roll_back(error);
            std::mem::take(&mut state.pending)
        };
        for chunk in chunks {
            let _ = chunk.waiter.send(Err(error));
        }
    }

    /// True while appended batches wait for a flush.
    pub(crate) fn has_pending(&self) -> bool {
        !self.state().pending.is_empty()
    }

    /// Bytes appended and not yet taken by a flush.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.state().pending_bytes
    }

    /// Takes buffered produce requests for a write-ahead object, oldest first, while the total
    /// is below `budget` (the one that reaches it included, so an object the size cap brought
    /// holds at least the cap). None if nothing is buffered.
    pub(crate) fn take_for_flush(&self, budget: usize) -> Option<Taken> {
        let mut state = self.state();
        let mut bytes = 0;
        let count = state
            .pending
            .iter()
            .take_while(|chunk| {
                let fits = bytes == 0 || bytes < budget;
                bytes += chunk.bytes;
                fits
            })
            .count();
        if count == 0 {
            return None;
        }
        let chunks: Vec<Chunk> = state.pending.drain(..count).collect();
        let bytes = chunks.iter().map(|c| c.bytes).sum::<usize>();
        state.pending_bytes -= bytes;
        let mut batches = Vec::new();
        let mut replies = Vec::with_capacity(chunks.len());
        let mut recorded = Vec::new();
        for chunk in chunks {
            replies.push((chunk.waiter, chunk.batches[0].base_offset));
            batches.extend(chunk.batches);
            recorded.extend(chunk.recorded);
        }
        Some(Taken {
            batches,
            bytes,
            leader_epoch: state.committed.record.leader_epoch,
            transactional: recorded.iter().any(Recorded::is_transactional),
            owed: Owed { replies, recorded },
        })
    }

    /// The taken batches are committed: the log ends after them now; answers their producers.
    pub(crate) fn complete_flush(&self, owed: Owed, end: i64) {
        // Settled after the partition was given up (its session ended while the commit's
        // outcome was unknown): the log that replaced this one learns the end first, so a
        // reader shown it here finds it there too.
        let successor = self
            .successor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade();
        if let Some(successor) = successor {
            successor.observe_end(end);
        }
        self.raise_high_watermark(end);
        self.state().producers.commit(&owed.recorded, end);
        for (waiter, base_offset) in owed.replies {
            let _ = waiter.send(Ok(base_offset));
        }
    }

    /// The taken batches were not committed: their producers get `error`, and what was
    /// appended meanwhile moves down to the committed end (or, `fenced`, is failed too).
    pub(crate) fn fail_flush(&self, owed: Owed, error: ResponseError, fenced: bool) {
        for (waiter, _) in owed.replies {
            let _ = waiter.send(Err(error));
        }
        self.rebase_after_failure(error, fenced);
    }

    /// After a failed flush the offsets it held were never committed: buffered batches that
    /// were appended meanwhile move down to start at the committed end again. Those of
    /// idempotent producers fail instead: their producers resend them after the failed ones.
    fn rebase_after_failure(&self, error: ResponseError, fenced: bool) {
        if fenced {
            // This broker may not commit for the partition any more: nothing buffered can.
            self.abandon(ResponseError::NotLeaderOrFollower);
            return;
        }
        let mut state = self.state();
        state.producers.roll_back(error);
        let (failed, kept): (Vec<Chunk>, Vec<Chunk>) = std::mem::take(&mut state.pending)
            .into_iter()
            .partition(|chunk| !chunk.recorded.is_empty());
        state.pending = kept;
        state.pending_bytes -= failed.iter().map(|c| c.bytes).sum::<usize>();
        for chunk in failed {
            let _ = chunk.waiter.send(Err(error));
        }
        let epoch = state.committed.record.leader_epoch;
        let mut next = self.high_watermark();
        for chunk in &mut state.pending {
            for batch in &mut chunk.batches {
                batch.base_offset = next;
                batch.prefix = rewritten_prefix(next, batch.size(), epoch);
                next += batch.offset_count;
            }
        }
        state.next_offset = next;
    }

    /// Where one of this partition's segment objects lives.
    pub(crate) fn segment_path(
        &self,
        ctx: &LogContext,
        base_offset: i64,
        kind: SegmentObject,
    ) -> object_store::path::Path {
        ctx.store
            .segment_path(&self.topic, self.id, base_offset, kind)
    }

    /// Where one of the objects of a committed segment lives (compaction's or a cleaning's).
    pub(crate) fn segment_object(
        &self,
        ctx: &LogContext,
        segment: &SegmentMeta,
        kind: SegmentObject,
    ) -> object_store::path::Path {
        let (base, generation) = (segment.base_offset, segment.generation);
        ctx.store
            .object_path(&self.topic, self.id, base, generation, kind)
    }

    /// The cache key of compaction's segment at `base_offset`; the topic id keeps a re-created
    /// topic from seeing the old one's cached bytes.
    pub(crate) fn object_key(&self, base_offset: i64) -> String {
        format!("{}/{}/{}/{base_offset}", self.topic, self.topic_id, self.id)
    }

    /// The cache key of a committed segment (a cleaning's carry its generation).
    pub(crate) fn segment_key(&self, segment: &SegmentMeta) -> String {
        let key = self.object_key(segment.base_offset);
        match segment.generation {
            None => key,
            Some(generation) => format!("{key}-{generation:016x}"),
        }
    }

    /// Committed segments starting with the one that holds `offset`, or the reason the offset
    /// cannot be read.
    pub(crate) fn read_view(&self, offset: i64) -> Result<ReadView, ResponseError> {
        let state = self.state();
        let record = &state.committed.record;
        let high_watermark = self.high_watermark();
        if offset < record.log_start_offset || offset > high_watermark {
            return Err(ResponseError::OffsetOutOfRange);
        }
        let segments = state.segments.as_deref().unwrap_or_default();
        let first = segments.partition_point(|s| s.last_offset < offset);
        Ok(ReadView {
            high_watermark,
            log_start_offset: record.log_start_offset,
            segment_end: record.segment_end(),
            segments: segments[first..].to_vec(),
        })
    }

    /// Where the committed segments end, as this broker knows it now.
    pub(crate) fn segment_end(&self) -> i64 {
        self.state().committed.record.segment_end()
    }

    /// Every committed segment (for timestamp searches).
    pub(crate) fn segments(&self) -> Vec<SegmentMeta> {
        self.state().segments.clone().unwrap_or_default()
    }

    /// Remembers a segment's max timestamp once a search has read it.
    pub(crate) fn learn_max_timestamp(&self, base_offset: i64, max_timestamp: i64) {
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

/// `batch` as buffered at `base_offset`, in leader epoch `epoch`.
fn stored_batch(batch: &IncomingBatch, base_offset: i64, epoch: i32) -> StoredBatch {
    StoredBatch {
        prefix: rewritten_prefix(base_offset, batch.header.size, epoch),
        body: smallvec![batch.bytes.slice(REWRITTEN_PREFIX_LEN..)],
        base_offset,
        offset_count: batch.header.offset_count(),
        max_timestamp: batch.header.max_timestamp,
    }
}

impl State {
    /// Puts appended batches in the write buffer; the receiver completes once they are
    /// durable or failed.
    fn buffer(
        &mut self,
        batches: Vec<StoredBatch>,
        bytes: usize,
        recorded: Vec<Recorded>,
    ) -> oneshot::Receiver<AppendResult> {
        let (waiter, receiver) = oneshot::channel();
        self.pending.push(Chunk {
            batches,
            bytes,
            waiter,
            recorded,
        });
        self.pending_bytes += bytes;
        receiver
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Partition {
    /// Returns once no retention or compaction change of this partition is under way.
    pub(crate) async fn wait_for_record_changes(&self) {
        let _ = self.record_lock.lock().await;
    }
}
