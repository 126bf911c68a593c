//! What the Python group coordinator sees of transactions: a transactional id's record as the
//! broker's mirror holds it, so it can make a transaction's offsets committed, or drop them,
//! once the transaction is decided (TxnOffsetCommit's offsets wait for it).

use pyo3::prelude::*;

use crate::transactions::TxnRecord;

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(super) struct TransactionView {
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    /// The epoch the transaction ran with (its offsets were committed with): the record's,
    /// unless the decision bumped it (the second transaction protocol, a timeout).
    transaction_epoch: i16,
    /// Kafka's name of its state ("Ongoing", "PrepareCommit", …).
    state: String,
    /// The groups whose offsets it commits.
    groups: Vec<String>,
    /// While it is decided: the groups not yet told.
    unmarked_groups: Vec<String>,
}

impl TransactionView {
    pub(super) fn new(transactional_id: &str, record: &TxnRecord) -> Self {
        TransactionView {
            transactional_id: transactional_id.to_string(),
            producer_id: record.producer_id,
            producer_epoch: record.epoch,
            transaction_epoch: record.transaction_epoch(),
            state: record.state.name().to_string(),
            groups: record.groups.iter().cloned().collect(),
            unmarked_groups: record.unmarked_groups.iter().cloned().collect(),
        }
    }
}
