//! The transaction coordinator (Kafka's exactly-once producer): each transactional id's
//! record in the metadata store, the rules that move it (`coordinator`) and the reads and
//! compare-and-swap writes that apply them (`service`). The partitions' side – transactional
//! batches, markers, the last stable offset – is `log::partition::transactions`; the task
//! that writes markers and aborts transactions past their timeout is
//! `broker::transaction_markers`.

pub(crate) mod coordinator;
pub(crate) mod record;
pub(crate) mod service;

pub(crate) use record::{TxnPartition, TxnRecord, TxnState};
pub(crate) use service::Transactions;
