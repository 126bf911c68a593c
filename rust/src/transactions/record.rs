//! A transactional id's record in the metadata store (`transactions/{id}`, JSON): what
//! Kafka's transaction log keeps for it. Every change is a compare-and-swap on the record's
//! revision, so the record alone orders a transaction's steps, whichever broker takes them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Kafka's transaction states, by Kafka's names (DescribeTransactions and ListTransactions
/// report them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnRecord {
    /// The producer id and epoch the producer's next transaction runs with.
    pub(crate) fn next_producer(&self) -> (i64, i16) {
        match self.next_producer_id {
            Some(id) => (id, 0),
            None => (self.producer_id, self.epoch),
        }
    }

    /// The epoch the producer's transaction ran with: the record's, unless the decision
    /// bumped it (EndTxn v5 or a timeout: `previous`).
    pub(crate) fn transaction_epoch(&self) -> i16 {
        match self.previous {
            Some((id, epoch)) if self.state.preparing().is_some() && id == self.producer_id => {
                epoch
            }
            _ => self.epoch,
        }
    }

    /// Every marker of the decided transaction is written (and every group told).
    pub(crate) fn all_marked(&self) -> bool {
        self.unmarked.is_empty() && self.unmarked_groups.is_empty()
    }
}

impl TxnState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// Decided, with markers still to be written: Some(true) for a commit.
    pub(crate) fn preparing(self) -> Option<bool> {
        match self {
            TxnState::PrepareCommit => Some(true),
            TxnState::PrepareAbort => Some(false),
            _ => None,
        }
    }
}

/// A partition of a transaction, as (topic, partition).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct TxnPartition(pub String, pub i32);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TxnRecord {
    pub producer_id: i64,
    pub epoch: i16,
    /// The epoch the producer had before the coordinator fenced it by aborting its
    /// transaction (a timeout): InitProducerId with that epoch may still resume (KIP-360).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced_epoch: Option<i16>,
    /// The producer id and epoch that ended the last transaction of the second protocol
    /// (EndTxn v5, or a timeout), before the bump: a retried EndTxn v5 names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<(i64, i16)>,
    /// While a transaction decided with the last epoch of its producer id is marked: the id
    /// the producer goes on with (at epoch 0) once the transaction is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_producer_id: Option<i64>,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions the transaction wrote to (added by AddPartitionsToTxn).
    pub partitions: BTreeSet<TxnPartition>,
    /// While the transaction is decided: the partitions whose marker is not written yet.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unmarked: BTreeSet<TxnPartition>,
    /// The consumer groups whose offsets the transaction commits (AddOffsetsToTxn).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub groups: BTreeSet<String>,
    /// While the transaction is decided: the groups whose coordinator has not yet made the
    /// transaction's offsets committed (or dropped them).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unmarked_groups: BTreeSet<String>,
    /// Wall-clock ms the ongoing transaction began (its timeout counts from it), else -1.
    pub started_ms: i64,
    /// Wall-clock ms of the last change.
    pub updated_ms: i64,
}
