//! Transactions on the partition's owner: transactional batches, the markers that end their
//! transactions, and what read_committed readers may see.
//!
//! A producer's transactional batch is taken when its transaction is already open here at the
//! batch's epoch, or when the coordinator's record says the transaction is ongoing with this
//! partition added (the caller's `Verifier`, asked under the partition's lock). The lock is
//! what keeps a late batch of a decided transaction out: the marker task appends its marker
//! under the same lock after it saw the decision, and a verifier asked after that sees the
//! decision too (the metadata mirror only moves forward), so no batch can open a transaction
//! here that no marker will close.
//!
//! The last stable offset is where the oldest transaction still open in the committed log
//! began (else the high watermark); it only moves up, as transactions open at the committed
//! end and close in order of their markers.

use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::idempotence::Idempotence;
use super::{now_ms, stored_batch, AppendResult, Partition};
use crate::log::batch::IncomingBatch;
use crate::log::batch::TRANSACTIONAL;
use crate::log::markers::marker_batch;
use crate::log::producers::AbortedTxn;
use crate::log::wal::index::WalIndex;

/// Asked for a transactional batch whose transaction is not open here yet: Ok if the
/// coordinator's record has (producer id, epoch) ongoing with this partition added.
pub(crate) type Verifier<'a> = &'a dyn Fn(i64, i16) -> Result<(), ResponseError>;

/// The verifier of a request without a transactional id.
#[cfg(test)]
pub(super) fn no_transaction(_: i64, _: i16) -> Result<(), ResponseError> {
    Err(ResponseError::InvalidTxnState)
}

/// Checks each transactional batch of an append (see the module's comment).
pub(super) fn check_transactional(
    producers: &Idempotence,
    batches: &[IncomingBatch],
    verify: Verifier<'_>,
) -> Result<(), ResponseError> {
    let transactional = batches
        .iter()
        .map(|b| b.header)
        .filter(|h| h.attributes & TRANSACTIONAL != 0);
    for header in transactional {
        if !producers.loaded {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        match producers.open_transaction(header.producer_id) {
            Some((epoch, _)) if epoch == header.producer_epoch => {}
            Some((epoch, _)) if epoch > header.producer_epoch => {
                return Err(ResponseError::InvalidProducerEpoch)
            }
            _ => verify(header.producer_id, header.producer_epoch)?,
        }
    }
    Ok(())
}

/// What appending a marker did.
pub(crate) enum Marked {
    /// No transaction of the producer is open here: nothing to mark.
    Nothing,
    /// Buffered: the receiver completes once it is durable; the bytes buffered.
    Buffered(oneshot::Receiver<AppendResult>, usize),
}

impl Partition {
    /// Appends the marker that ends `producer_id`'s transaction (at the coordinator's `epoch`)
    /// if one is open here. Err when this broker cannot write it now (not the owner, or the
    /// producer state is not rebuilt yet): the marker task tries again.
    pub(crate) fn append_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<Marked, ResponseError> {
        let mut state = self.state();
        if let Some(error) = state.closed {
            return Err(error);
        }
        if !state.producers.loaded {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        if state.producers.open_transaction(producer_id).is_none() {
            return Ok(Marked::Nothing);
        }
        let marker = marker_batch(producer_id, epoch, commit, now_ms());
        let offset = state.next_offset;
        state.next_offset += 1;
        let recorded = state
            .producers
            .record_marker(producer_id, epoch, offset, commit);
        let leader_epoch = state.committed.record.leader_epoch;
        let bytes = marker.header.size;
        let stored = stored_batch(&marker, offset, leader_epoch);
        let receiver = state.buffer(vec![stored], bytes, vec![recorded]);
        Ok(Marked::Buffered(receiver, bytes))
    }

    /// The last stable offset (read_committed consumers read below it), or
    /// NOT_LEADER_OR_FOLLOWER where this broker does not own the partition: only the owner
    /// holds the producer state it is worked out from.
    pub(crate) fn last_stable_offset(&self) -> Result<i64, ResponseError> {
        let state = self.state();
        if state.committed.owner_revision == 0 || !state.producers.loaded {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        Ok(state.producers.last_stable(self.high_watermark()))
    }

    /// Whether the log is known, from the store alone, to hold no transaction: no producer
    /// state stored (a compaction stores one whenever producers or aborted transactions are
    /// left) and no transactional write-ahead run above the segments. Then its last stable
    /// offset is its end and it has no aborted transaction, and a broker that does not own it
    /// can answer read_committed fetches (the owner sends consumers of other racks there).
    pub(crate) fn free_of_transactions(&self, wal: &WalIndex) -> bool {
        let (snapshot, above_segments) = {
            let record = &self.state().committed.record;
            let above = record.segment_end().max(record.log_start_offset);
            (record.producer_snapshot, above)
        };
        snapshot.is_none()
            && wal.free_of_transactions_from((self.topic_id, self.id), above_segments)
    }

    /// The aborted transactions with records in `from..to` (Fetch's list for read_committed).
    pub(crate) fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.state().producers.aborted_between(from, to)
    }
}
