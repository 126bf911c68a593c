//! Idempotent producers on the partition's owner. Each append is checked against the producer
//! state (`log::producers`). What buffered and in-flight batches add is kept apart from what
//! the committed log holds: a failed flush falls back to the committed state and fails every
//! buffered batch of an idempotent producer with it (the producer resends them in order; kept,
//! they would be stored after a gap in its sequence).
//!
//! A new owner rebuilds the state (`load_producers`) from the snapshot the last compaction
//! stored (the record's `producer_snapshot`, at or above its segment end) and the batch headers
//! of the write-ahead runs after it: the replay never reaches below the segment end, so it is
//! bounded by what compaction has not rewritten yet. Until then idempotent batches are refused
//! with the retriable NOT_LEADER_OR_FOLLOWER and the partition is not compacted (a compaction
//! writes the next snapshot from the state in memory, so that must be whole).

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::{now_ms, AppendResult, Partition};
use crate::log::batch::BatchHeader;
use crate::log::occupant::{self, PutOutcome};
use crate::log::producers::{
    close_transaction, replay_batch, AbortedTxn, BatchPlace, Marker, ProducerBatch,
    ProducerSnapshot, ProducerStates, Verdict,
};
use crate::log::LogContext;
use crate::store::SegmentObject;

/// The producer state of a partition this broker owns.
#[derive(Default)]
pub(super) struct Idempotence {
    /// False from a claim until the state is rebuilt from the log.
    pub loaded: bool,
    /// What the committed log below `committed_end` holds.
    committed: ProducerStates,
    committed_end: i64,
    /// The committed state plus what the buffered and in-flight batches add.
    current: ProducerStates,
    /// The transactions aborted in the committed log, by the offset of their marker (Fetch's
    /// aborted-transaction lists for read_committed consumers).
    aborted: Vec<AbortedTxn>,
    /// Retries of batches not committed yet: answered when the original is.
    duplicates: Vec<(BatchPlace, oneshot::Sender<AppendResult>)>,
}

/// An idempotent producer's batch, or a transaction marker, as appended: taken into the
/// committed state once its flush commits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Recorded {
    Batch {
        batch: ProducerBatch,
        base_offset: i64,
        last_offset: i64,
        at_ms: i64,
    },
    Marker {
        marker: Marker,
        at_ms: i64,
    },
}

/// What the producer state says about a partition's batches.
pub(super) enum Admission {
    /// Append them (the producers' batches among them, for `record`).
    Append(Vec<(usize, ProducerBatch)>),
    /// A retry of a stored batch: answer with where it went.
    Duplicate(BatchPlace),
}

impl Recorded {
    /// A transaction's batch or marker.
    pub(crate) fn is_transactional(&self) -> bool {
        match self {
            Recorded::Batch { batch, .. } => batch.transactional,
            Recorded::Marker { .. } => true,
        }
    }
}

impl Idempotence {
    /// For a partition whose log holds no producer state below `end`: nothing to rebuild.
    pub(super) fn empty_log(end: i64) -> Idempotence {
        Idempotence {
            loaded: true,
            committed_end: end,
            ..Idempotence::default()
        }
    }

    /// Checks the batches of one append in order (a later one may follow an earlier one of the
    /// same producer).
    pub(super) fn admit(
        &self,
        headers: impl Iterator<Item = BatchHeader>,
        expiration_ms: i64,
    ) -> Result<Admission, ResponseError> {
        let batches: Vec<(usize, ProducerBatch)> = headers
            .enumerate()
            .filter_map(|(i, header)| Some((i, ProducerBatch::of(&header)?)))
            .collect();
        if batches.is_empty() {
            return Ok(Admission::Append(batches));
        }
        if !self.loaded {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let now = now_ms();
        let verdict = match batches.as_slice() {
            [(_, one)] => self.current.check(one, now, expiration_ms)?,
            several => {
                let mut scratch = self.current.clone();
                let mut verdict = Verdict::Append;
                for (_, batch) in several {
                    verdict = scratch.check(batch, now, expiration_ms)?;
                    if verdict != Verdict::Append {
                        break;
                    }
                    scratch.record(batch, 0, 0, now);
                }
                verdict
            }
        };
        Ok(match verdict {
            Verdict::Append => Admission::Append(batches),
            Verdict::Duplicate(place) => Admission::Duplicate(place),
        })
    }

    /// Takes an admitted batch, stored at `base_offset..=last_offset`, into the current state.
    pub(super) fn record(
        &mut self,
        batch: ProducerBatch,
        base_offset: i64,
        last_offset: i64,
    ) -> Recorded {
        let at_ms = now_ms();
        self.current.record(&batch, base_offset, last_offset, at_ms);
        Recorded::Batch {
            batch,
            base_offset,
            last_offset,
            at_ms,
        }
    }

    /// Takes a marker of `producer_id`'s transaction, stored at `offset`, into the current
    /// state: its transaction here is closed.
    pub(super) fn record_marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        offset: i64,
        commit: bool,
    ) -> Recorded {
        let at_ms = now_ms();
        self.current.end_transaction(producer_id, epoch, at_ms);
        let marker = Marker {
            producer_id,
            epoch,
            offset,
            commit,
        };
        Recorded::Marker { marker, at_ms }
    }

    /// Where `producer_id`'s transaction open here (with what is buffered) began, and at
    /// which epoch the producer writes.
    pub(super) fn open_transaction(&self, producer_id: i64) -> Option<(i16, i64)> {
        self.current.open_transaction(producer_id)
    }

    /// The last stable offset of a log committed up to `end`: where its oldest committed
    /// transaction still open began, else `end`.
    pub(super) fn last_stable(&self, end: i64) -> i64 {
        self.committed
            .first_unstable()
            .map_or(end, |first| first.min(end))
    }

    /// The aborted transactions with records in `from..to`, as Fetch lists them.
    pub(super) fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// Answers a retry once its original is committed (or fails it with the original).
    pub(super) fn await_original(&mut self, place: BatchPlace) -> oneshot::Receiver<AppendResult> {
        let (tx, rx) = oneshot::channel();
        self.duplicates.push((place, tx));
        rx
    }

    /// A flush committed `recorded`; the log is committed up to `end`.
    pub(super) fn commit(&mut self, recorded: &[Recorded], end: i64) {
        for r in recorded {
            apply(&mut self.committed, &mut self.aborted, r);
        }
        self.committed_end = self.committed_end.max(end);
        let (done, waiting) = std::mem::take(&mut self.duplicates)
            .into_iter()
            .partition(|(place, _)| place.last_offset < end);
        self.duplicates = waiting;
        for (place, waiter) in done {
            let _ = waiter.send(Ok(place.base_offset));
        }
    }

    /// A flush failed: back to the committed state; retries waiting for an original fail.
    pub(super) fn roll_back(&mut self, error: ResponseError) {
        self.current = self.committed.clone();
        for (_, waiter) in self.duplicates.drain(..) {
            let _ = waiter.send(Err(error));
        }
    }

    /// The log start moved to `log_start`: batches below it are forgotten.
    pub(super) fn truncate_below(&mut self, log_start: i64) {
        self.committed.truncate_below(log_start);
        self.current.truncate_below(log_start);
        self.aborted.retain(|a| a.last_offset >= log_start);
    }
}

/// Takes a committed batch or marker into `producers` (and an abort into `aborted`).
fn apply(producers: &mut ProducerStates, aborted: &mut Vec<AbortedTxn>, recorded: &Recorded) {
    match *recorded {
        Recorded::Batch {
            ref batch,
            base_offset,
            last_offset,
            at_ms,
        } => producers.record(batch, base_offset, last_offset, at_ms),
        Recorded::Marker { marker, at_ms } => close_transaction(producers, aborted, marker, at_ms),
    }
}

/// One producer as DescribeProducers lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_sequence: i32,
    pub last_write_ms: i64,
    /// Where its transaction open here began, if one is.
    pub txn_start_offset: Option<i64>,
}

impl Partition {
    /// The producers this partition remembers, as its owner (DescribeProducers).
    pub(crate) fn active_producers(&self) -> Result<Vec<ActiveProducer>, ResponseError> {
        let state = self.state();
        if state.committed.owner_revision == 0 || !state.producers.loaded {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let expiration_ms = self.limits.producer_id_expiration_ms();
        let now = now_ms();
        let mut active: Vec<ActiveProducer> = state
            .producers
            .current
            .iter()
            .filter(|(_, entry)| {
                now - entry.last_write_ms < expiration_ms || entry.txn_first_offset.is_some()
            })
            .map(|(producer_id, entry)| ActiveProducer {
                producer_id,
                epoch: entry.epoch,
                last_sequence: entry.batches.back().map_or(-1, |b| b.last_seq),
                last_write_ms: entry.last_write_ms,
                txn_start_offset: entry.txn_first_offset,
            })
            .collect();
        active.sort_by_key(|p| p.producer_id);
        Ok(active)
    }

    /// Rebuilds the producer state after a claim, retrying (with backoff) until it succeeds or
    /// the partition stops taking writes here.
    pub(crate) async fn load_producers(&self, ctx: &LogContext) {
        let mut backoff = std::time::Duration::from_millis(100);
        loop {
            if !self.is_leader() || self.state().producers.loaded {
                return;
            }
            match self.rebuild_producers(ctx).await {
                Ok(()) => return,
                Err(reason) => {
                    tracing::warn!(topic = %self.topic, partition = self.id, reason,
                        "rebuilding the producer state failed; idempotent producers wait");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                }
            }
        }
    }

    /// The stored snapshot (if any) plus the batch headers of the committed runs after it.
    /// Under the record lock: no compaction moves the segment end meanwhile.
    async fn rebuild_producers(&self, ctx: &LogContext) -> Result<(), String> {
        let _one_at_a_time = self.record_lock.lock().await;
        let Some(owned) = self.owned() else {
            return Ok(());
        };
        let record = &owned.record;
        let expiration_ms = self.limits.producer_id_expiration_ms();
        let (mut producers, mut aborted, from) = match record.producer_snapshot {
            Some(end) if end >= record.segment_end() => {
                let path = self.segment_path(ctx, end, SegmentObject::ProducerSnapshot);
                let bytes = ctx
                    .store
                    .get(&path)
                    .await
                    .map_err(|e| format!("{path}: {e}"))?;
                let snapshot: ProducerSnapshot = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("{path} is not a producer snapshot: {e}"))?;
                (snapshot.producers, snapshot.aborted, snapshot.end)
            }
            _ => (ProducerStates::default(), Vec::new(), record.segment_end()),
        };
        // Idempotent batches wait for this, so what commits meanwhile has no producer id:
        // replaying up to the end as of now takes in every producer batch.
        let end = self.high_watermark();
        if from < end {
            // Run by run: a log with much written since its snapshot (a backlog of
            // compaction) is never held in memory whole.
            let now = now_ms();
            let read = self.visit_committed_batches(ctx, from, end - 1, |batch, header| {
                let bytes = || batch.joined();
                replay_batch(&mut producers, &mut aborted, header, bytes, now);
            });
            if !read.await {
                return Err("the write-ahead runs after the snapshot cannot be read".into());
            }
        }
        producers.expire(now_ms(), expiration_ms);
        let mut state = self.state();
        let log_start = state.committed.record.log_start_offset;
        producers.truncate_below(log_start);
        aborted.retain(|a| a.last_offset >= log_start);
        tracing::debug!(topic = %self.topic, partition = self.id, producers = producers.len(),
            "producer state rebuilt");
        let rebuilt = &mut state.producers;
        rebuilt.committed = producers.clone();
        rebuilt.current = producers;
        rebuilt.aborted = aborted;
        rebuilt.committed_end = rebuilt.committed_end.max(end);
        rebuilt.loaded = true;
        Ok(())
    }

    /// Stores the committed producer state for a compaction: the offset it was stored at, or
    /// None when there is none to store (the runs above the segment end hold it all). Err if
    /// the state is not rebuilt yet or the upload failed.
    pub(super) async fn store_producer_snapshot(
        &self,
        ctx: &LogContext,
        stored: Option<i64>,
    ) -> Result<Option<i64>, ()> {
        let (end, bytes) = {
            let mut state = self.state();
            let expiration_ms = self.limits.producer_id_expiration_ms();
            let producers = &mut state.producers;
            if !producers.loaded {
                return Err(());
            }
            // Each compaction also bounds the memory the state holds to the producers that wrote
            // within the expiration time.
            let now = now_ms();
            producers.committed.expire(now, expiration_ms);
            producers.current.expire(now, expiration_ms);
            if producers.committed.is_empty() && producers.aborted.is_empty() {
                return Ok(None);
            }
            let end = producers.committed_end;
            if stored == Some(end) {
                return Ok(stored);
            }
            let snapshot = ProducerSnapshot {
                end,
                producers: producers.committed.clone(),
                aborted: producers.aborted.clone(),
            };
            (
                end,
                Bytes::from(serde_json::to_vec(&snapshot).map_err(|_| ())?),
            )
        };
        let path = self.segment_path(ctx, end, SegmentObject::ProducerSnapshot);
        match occupant::put_new(ctx, &path, bytes).await {
            // Occupied: stored by an earlier compaction that did not get to commit, of the
            // same committed log below `end`.
            Ok(PutOutcome::Created | PutOutcome::Occupied) => Ok(Some(end)),
            Err(error) => {
                tracing::warn!(object = %path, %error, "storing the producer state failed; compacting next round");
                Err(())
            }
        }
    }

    /// The snapshot at `end` was replaced by a newer one that is committed: it can go.
    pub(super) fn drop_producer_snapshot(&self, ctx: &LogContext, end: i64) {
        let store = ctx.store.clone();
        let path = self.segment_path(ctx, end, SegmentObject::ProducerSnapshot);
        tokio::spawn(async move {
            if let Err(error) = store.delete(&path).await {
                tracing::debug!(object = %path, %error, "an old producer snapshot stays behind");
            }
        });
    }
}
