//! Idempotent producers' state in one partition, as Kafka keeps it (its ProducerStateManager):
//! per producer id the epoch and the last batches written, so that a retried batch is answered
//! with the offsets it got the first time and nothing is stored twice, and a batch that skips
//! sequence numbers or comes from a fenced epoch is refused.
//!
//! Rules (Kafka's `ProducerAppendInfo`): a batch of the remembered epoch whose first and last
//! sequence match one of the producer's last five batches is a duplicate. An older epoch is
//! INVALID_PRODUCER_EPOCH. A newer epoch must start at sequence 0. Within an epoch the first
//! sequence must follow the last one (wrapping after `i32::MAX`), else
//! OUT_OF_ORDER_SEQUENCE_NUMBER. A producer this partition does not know (never seen, or
//! expired after `producer.id.expiration.ms`) may start at any sequence, as Kafka accepts it
//! since 2.5 (KIP-360).
//!
//! Transactions (Kafka's `currentTxnFirstOffset`): a producer's first transactional batch in
//! this partition opens its transaction here at that batch's offset, and the marker the
//! transaction coordinator has the owner write closes it (`end_transaction`). The log's last
//! stable offset is the first offset of the oldest transaction still open (`first_unstable`).
//! A producer with a transaction open here never expires and is never forgotten.
//!
//! Pure state; `partition` decides when it applies (appends, commits, failed flushes) and
//! `producer_snapshots` stores it.

use std::collections::{HashMap, VecDeque};

use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};

use bytes::Bytes;

use super::batch::{BatchHeader, TRANSACTIONAL};
use super::markers::{is_control, marker_kind};

/// Batches remembered per producer: what Kafka keeps, and the most a client has in flight
/// (`max.in.flight.requests.per.connection` ≤ 5 with idempotence).
const REMEMBERED_BATCHES: usize = 5;

/// The producer fields of a batch an idempotent producer wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    /// Written in a transaction (attribute bit 4).
    pub transactional: bool,
}

impl ProducerBatch {
    /// None for a batch without producer id (a producer without idempotence).
    pub(crate) fn of(header: &BatchHeader) -> Option<ProducerBatch> {
        (header.producer_id >= 0).then(|| ProducerBatch {
            producer_id: header.producer_id,
            epoch: header.producer_epoch,
            first_seq: header.base_sequence,
            last_seq: add_sequence(header.base_sequence, header.last_offset_delta),
            transactional: header.attributes & TRANSACTIONAL != 0,
        })
    }
}

/// Sequence numbers wrap to 0 after `i32::MAX` (Kafka's `DefaultRecordBatch.incrementSequence`).
fn add_sequence(sequence: i32, increment: i32) -> i32 {
    let sum = sequence as i64 + increment as i64;
    if sum > i32::MAX as i64 {
        (sum - i32::MAX as i64 - 1) as i32
    } else {
        sum as i32
    }
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    next_seq as i64 == last_seq as i64 + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

/// One stored batch of a producer: its sequence range and where it is in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BatchPlace {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProducerEntry {
    pub epoch: i16,
    /// The last batches of this epoch, oldest first.
    pub batches: VecDeque<BatchPlace>,
    /// The broker's clock when the producer last wrote (expiry runs from it).
    pub last_write_ms: i64,
    /// The offset of this producer's first batch in its transaction open here, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn_first_offset: Option<i64>,
}

impl ProducerEntry {
    /// Whether the entry can be forgotten once its batches are gone or it stopped writing: not
    /// while its transaction is open here (the last stable offset depends on it).
    fn in_transaction(&self) -> bool {
        self.txn_first_offset.is_some()
    }
}

/// A transaction aborted in this partition: its producer, the offset of its first batch here
/// and the offset of its abort marker (what Fetch's aborted-transaction list is made of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// A stored snapshot (`producers-{end}.json`, named in the partition record): the producer
/// state of the log below `end` and its aborted transactions, which a new owner and the
/// readers outside the brokers start from.
#[derive(Serialize, Deserialize)]
pub(crate) struct ProducerSnapshot {
    pub end: i64,
    pub producers: ProducerStates,
    /// Absent in snapshots stored before transactions existed: none then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aborted: Vec<AbortedTxn>,
}

/// A transaction marker: its producer, the transaction's epoch, its offset and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    pub producer_id: i64,
    pub epoch: i16,
    pub offset: i64,
    pub commit: bool,
}

/// A committed marker closes its producer's transaction; an abort joins `aborted`.
pub(crate) fn close_transaction(
    producers: &mut ProducerStates,
    aborted: &mut Vec<AbortedTxn>,
    marker: Marker,
    now_ms: i64,
) {
    let first = producers.end_transaction(marker.producer_id, marker.epoch, now_ms);
    if let (Some(first_offset), false) = (first, marker.commit) {
        aborted.push(AbortedTxn {
            producer_id: marker.producer_id,
            first_offset,
            last_offset: marker.offset,
        });
    }
}

/// Replays one committed batch of a log into its producer state and aborted transactions (a
/// new owner's rebuild, the readers outside the brokers): a marker by its kind (`bytes`, the
/// whole batch, is read only for a control batch), a producer's batch by its sequence range.
pub(crate) fn replay_batch(
    producers: &mut ProducerStates,
    aborted: &mut Vec<AbortedTxn>,
    header: &BatchHeader,
    bytes: impl FnOnce() -> Bytes,
    now_ms: i64,
) {
    if is_control(header) {
        if let Some(commit) = marker_kind(header, &bytes()) {
            let marker = Marker {
                producer_id: header.producer_id,
                epoch: header.producer_epoch,
                offset: header.base_offset,
                commit,
            };
            close_transaction(producers, aborted, marker, now_ms);
        }
    } else if let Some(batch) = ProducerBatch::of(header) {
        producers.record(&batch, header.base_offset, header.last_offset(), now_ms);
    }
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Append,
    /// Stored already: answer with where it went.
    Duplicate(BatchPlace),
}

/// Every known producer of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// The verdict on `batch` arriving at `now_ms`: append it, answer it as a duplicate, or
    /// refuse it with the error Kafka gives.
    pub(crate) fn check(
        &self,
        batch: &ProducerBatch,
        now_ms: i64,
        expiration_ms: i64,
    ) -> Result<Verdict, ResponseError> {
        let Some(entry) = self
            .producers
            .get(&batch.producer_id)
            .filter(|entry| now_ms - entry.last_write_ms < expiration_ms)
        else {
            return Ok(Verdict::Append);
        };
        if batch.epoch == entry.epoch {
            if let Some(stored) = entry
                .batches
                .iter()
                .find(|b| b.first_seq == batch.first_seq && b.last_seq == batch.last_seq)
            {
                return Ok(Verdict::Duplicate(*stored));
            }
        }
        if batch.epoch < entry.epoch {
            return Err(ResponseError::InvalidProducerEpoch);
        }
        let follows = match entry.batches.back() {
            _ if batch.epoch > entry.epoch => batch.first_seq == 0,
            Some(last) => in_sequence(last.last_seq, batch.first_seq),
            None => true,
        };
        if follows {
            Ok(Verdict::Append)
        } else {
            Err(ResponseError::OutOfOrderSequenceNumber)
        }
    }

    /// Remembers `batch`, stored at `base_offset..=last_offset`.
    pub(crate) fn record(
        &mut self,
        batch: &ProducerBatch,
        base_offset: i64,
        last_offset: i64,
        now_ms: i64,
    ) {
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: batch.epoch,
                batches: VecDeque::new(),
                last_write_ms: now_ms,
                txn_first_offset: None,
            });
        if entry.epoch != batch.epoch {
            entry.epoch = batch.epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == REMEMBERED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchPlace {
            first_seq: batch.first_seq,
            last_seq: batch.last_seq,
            base_offset,
            last_offset,
        });
        entry.last_write_ms = entry.last_write_ms.max(now_ms);
        if batch.transactional && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(base_offset);
        }
    }

    /// A transaction marker of `producer_id` at `epoch` (the coordinator's, never older than
    /// the producer's) closes its open transaction here: returns where that began, if one was
    /// open. A newer epoch fences the producer's older one, as Kafka's marker append does.
    pub(crate) fn end_transaction(
        &mut self,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
    ) -> Option<i64> {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch,
                batches: VecDeque::new(),
                last_write_ms: now_ms,
                txn_first_offset: None,
            });
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.last_write_ms = entry.last_write_ms.max(now_ms);
        entry.txn_first_offset.take()
    }

    /// Where `producer_id`'s transaction open here began, if one is.
    pub(crate) fn open_transaction(&self, producer_id: i64) -> Option<(i16, i64)> {
        let entry = self.producers.get(&producer_id)?;
        Some((entry.epoch, entry.txn_first_offset?))
    }

    /// The first offset of the oldest transaction still open here: the last stable offset,
    /// unless the log ends before it.
    pub(crate) fn first_unstable(&self) -> Option<i64> {
        self.producers
            .values()
            .filter_map(|entry| entry.txn_first_offset)
            .min()
    }

    /// Forgets the producers that wrote nothing for `expiration_ms` (not one whose
    /// transaction is open here).
    pub(crate) fn expire(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.retain(|_, entry| {
            now_ms - entry.last_write_ms < expiration_ms || entry.in_transaction()
        });
    }

    /// Forgets every batch below `log_start` (DeleteRecords, retention): a producer whose
    /// batches are all gone is forgotten, as Kafka does when it moves the log start.
    pub(crate) fn truncate_below(&mut self, log_start: i64) {
        self.producers.retain(|_, entry| {
            entry.batches.retain(|b| b.last_offset >= log_start);
            !entry.batches.is_empty() || entry.in_transaction()
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Every producer, for DescribeProducers.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, entry)| (*id, entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;

    fn batch(producer_id: i64, epoch: i16, first_seq: i32, count: i32) -> ProducerBatch {
        ProducerBatch {
            producer_id,
            epoch,
            first_seq,
            last_seq: add_sequence(first_seq, count - 1),
            transactional: false,
        }
    }

    /// Checks and records like an append would; returns the verdict.
    fn append(
        states: &mut ProducerStates,
        b: ProducerBatch,
        base: i64,
        now: i64,
    ) -> Result<Verdict, ResponseError> {
        let verdict = states.check(&b, now, DAY)?;
        if verdict == Verdict::Append {
            let count = (b.last_seq as i64 - b.first_seq as i64).rem_euclid(1 << 31) + 1;
            states.record(&b, base, base + count - 1, now);
        }
        Ok(verdict)
    }

    #[test]
    fn a_retried_batch_is_a_duplicate_with_its_first_place() {
        let mut states = ProducerStates::default();
        assert_eq!(
            append(&mut states, batch(7, 0, 0, 10), 100, 0),
            Ok(Verdict::Append)
        );
        assert_eq!(
            append(&mut states, batch(7, 0, 10, 5), 110, 0),
            Ok(Verdict::Append)
        );
        let first = BatchPlace {
            first_seq: 0,
            last_seq: 9,
            base_offset: 100,
            last_offset: 109,
        };
        assert_eq!(
            append(&mut states, batch(7, 0, 0, 10), 500, 0),
            Ok(Verdict::Duplicate(first))
        );
        // The same sequence range from another producer is no duplicate.
        assert_eq!(
            append(&mut states, batch(8, 0, 0, 10), 115, 0),
            Ok(Verdict::Append)
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut states = ProducerStates::default();
        for i in 0..6 {
            append(&mut states, batch(1, 0, i, 1), i as i64, 0).unwrap();
        }
        // Batch 0 fell out: a retry of it is now out of order, as in Kafka.
        assert_eq!(
            append(&mut states, batch(1, 0, 0, 1), 9, 0),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert!(matches!(
            append(&mut states, batch(1, 0, 1, 1), 9, 0),
            Ok(Verdict::Duplicate(_))
        ));
    }

    #[test]
    fn a_gap_or_an_overlap_is_out_of_order() {
        let mut states = ProducerStates::default();
        append(&mut states, batch(1, 0, 0, 10), 0, 0).unwrap();
        for wrong in [batch(1, 0, 11, 1), batch(1, 0, 5, 10), batch(1, 0, 0, 5)] {
            assert_eq!(
                append(&mut states, wrong, 10, 0),
                Err(ResponseError::OutOfOrderSequenceNumber)
            );
        }
        assert_eq!(
            append(&mut states, batch(1, 0, 10, 1), 10, 0),
            Ok(Verdict::Append)
        );
    }

    #[test]
    fn sequences_wrap_after_the_largest() {
        let mut states = ProducerStates::default();
        append(&mut states, batch(1, 0, i32::MAX - 1, 2), 0, 0).unwrap();
        assert_eq!(batch(1, 0, i32::MAX, 3).last_seq, 1);
        assert_eq!(
            append(&mut states, batch(1, 0, 0, 3), 2, 0),
            Ok(Verdict::Append)
        );
    }

    #[test]
    fn epochs_fence_older_ones_and_a_new_epoch_starts_at_zero() {
        let mut states = ProducerStates::default();
        append(&mut states, batch(1, 3, 0, 10), 0, 0).unwrap();
        assert_eq!(
            append(&mut states, batch(1, 2, 10, 1), 10, 0),
            Err(ResponseError::InvalidProducerEpoch)
        );
        assert_eq!(
            append(&mut states, batch(1, 4, 10, 1), 10, 0),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            append(&mut states, batch(1, 4, 0, 1), 10, 0),
            Ok(Verdict::Append)
        );
        // The old epoch's batches are forgotten with it: no duplicate across epochs.
        assert_eq!(
            append(&mut states, batch(1, 3, 0, 10), 11, 0),
            Err(ResponseError::InvalidProducerEpoch)
        );
    }

    #[test]
    fn an_unknown_producer_may_start_anywhere() {
        let mut states = ProducerStates::default();
        assert_eq!(
            append(&mut states, batch(9, 5, 1234, 2), 0, 0),
            Ok(Verdict::Append)
        );
        assert_eq!(
            append(&mut states, batch(9, 5, 1236, 1), 2, 0),
            Ok(Verdict::Append)
        );
    }

    #[test]
    fn producers_expire_after_the_expiration_time() {
        let mut states = ProducerStates::default();
        append(&mut states, batch(1, 0, 0, 10), 0, 0).unwrap();
        append(&mut states, batch(2, 0, 0, 10), 10, 12 * HOUR).unwrap();
        // Expired producers count as unknown at once, and are dropped by `expire`.
        assert_eq!(
            append(&mut states, batch(1, 0, 50, 1), 20, DAY),
            Ok(Verdict::Append)
        );
        states.expire(DAY + 13 * HOUR, DAY);
        assert_eq!(states.len(), 1);
        assert!(states.iter().all(|(id, _)| id == 1));
    }

    #[test]
    fn moving_the_log_start_forgets_batches_below_it() {
        let mut states = ProducerStates::default();
        append(&mut states, batch(1, 0, 0, 10), 0, 0).unwrap();
        append(&mut states, batch(2, 0, 0, 10), 10, 0).unwrap();
        append(&mut states, batch(1, 0, 10, 10), 20, 0).unwrap();
        states.truncate_below(25);
        assert_eq!(states.len(), 1);
        assert_eq!(
            append(&mut states, batch(1, 0, 0, 10), 30, 0),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
    }

    #[test]
    fn headers_give_the_sequence_range() {
        let header = |producer_id, base_sequence| BatchHeader {
            base_offset: 0,
            size: 70,
            leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: 4,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: 2,
            base_sequence,
            record_count: 5,
        };
        assert_eq!(ProducerBatch::of(&header(-1, -1)), None);
        assert_eq!(
            ProducerBatch::of(&header(42, 10)),
            Some(batch(42, 2, 10, 5))
        );
    }

    #[test]
    fn a_transaction_stays_open_from_its_first_batch_to_its_marker_and_keeps_its_producer() {
        let mut states = ProducerStates::default();
        let txn = |first_seq, count| ProducerBatch {
            transactional: true,
            ..batch(1, 0, first_seq, count)
        };
        append(&mut states, txn(0, 2), 10, 0).unwrap();
        append(&mut states, txn(2, 2), 14, 0).unwrap();
        append(&mut states, batch(2, 0, 0, 1), 16, 0).unwrap();
        assert_eq!(states.open_transaction(1), Some((0, 10)));
        assert_eq!(states.first_unstable(), Some(10));
        // Neither expiry nor a log start past its batches forgets a producer mid-transaction.
        states.expire(10 * DAY, DAY);
        states.truncate_below(100);
        assert_eq!(states.first_unstable(), Some(10));
        // The marker closes it; a newer epoch in the marker fences the producer's old one.
        assert_eq!(states.end_transaction(1, 1, 0), Some(10));
        assert_eq!(states.first_unstable(), None);
        assert_eq!(states.end_transaction(1, 1, 0), None, "closed already");
        assert_eq!(
            states.check(&txn(4, 1), 0, DAY),
            Err(ResponseError::InvalidProducerEpoch)
        );
    }
}
