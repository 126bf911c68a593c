//! The broker's part in transactions it does not coordinate as well as those it does: for every
//! decided transaction (PrepareCommit or PrepareAbort in its record), the owner of each of its
//! partitions writes the marker through the write-ahead path and, once that is committed,
//! reports it to the record (`Transactions::marked`); the last report completes the
//! transaction. The coordinator of a transactional id also aborts its transaction once it has
//! run past its timeout, and removes the id once it has been idle past
//! `--transactional-id-expiration-ms`.
//!
//! Rounds run one at a time, each waiting for the markers it appended to be committed or
//! failed before the next: so a round never mistakes a marker still in flight for one
//! written. A partition whose transaction is not open here (its marker committed before an
//! owner change, or nothing was written to it) needs none and is reported at once. A failed
//! flush rolls the marker back with the rest; the next round writes it again. A partition of
//! a topic that no longer exists is reported by the transaction's coordinator.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use super::Broker;
use crate::log::partition::{now_ms, AppendResult, Marked, Partition};
use crate::transactions::coordinator::{self, Members};
use crate::transactions::{TxnPartition, TxnRecord};

/// The longest a round waits for a change to the mirror before looking again (timeouts are
/// checked on this beat, and markers an owner could not write yet are tried again).
const BEAT: Duration = Duration::from_millis(200);

pub(super) fn spawn(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        let mut changes = broker.mirror.changes();
        loop {
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            broker.transactions_round().await;
            let _ = tokio::time::timeout(BEAT, changes.changed()).await;
        }
    });
}

/// One decided transaction's markers this broker writes in a round.
struct Marking {
    id: String,
    record: TxnRecord,
    /// Written (or not needed) already.
    done: Vec<TxnPartition>,
    /// Appended: reported once committed.
    appended: Vec<(TxnPartition, tokio::sync::oneshot::Receiver<AppendResult>)>,
}

impl Broker {
    /// One round: aborts the transactions this broker coordinates that ran past their timeout,
    /// then writes the markers of decided transactions in the partitions it owns.
    pub(crate) async fn transactions_round(&self) {
        let all = self.transactions.all();
        let expiration_ms = self.config.transactional_id_expiration_ms;
        for (id, record) in &all {
            let now = now_ms();
            let overdue = coordinator::expire(record, now).is_some();
            let idle = coordinator::idle(record, now, expiration_ms);
            if !(overdue || idle) || !self.coordinates(id) {
                continue;
            }
            let done = if overdue {
                tracing::info!(transactional_id = %id, producer_id = record.producer_id,
                    "aborting a transaction past its timeout");
                self.transactions.abort_if_expired(id).await
            } else {
                self.transactions.remove_if_idle(id, expiration_ms).await
            };
            if let Err(error) = done {
                tracing::warn!(transactional_id = %id, %error,
                    "aborting or expiring a transactional id failed; trying again");
            }
        }
        let markings: Vec<Marking> = all
            .into_iter()
            .filter_map(|(id, record)| self.start_marking(id, record))
            .collect();
        if markings.iter().any(|m| !m.appended.is_empty()) {
            self.wal.flush_soon();
        }
        for marking in markings {
            self.finish_marking(marking).await;
        }
    }

    fn coordinates(&self, transactional_id: &str) -> bool {
        let cluster = self.cluster();
        let coordinator = cluster.transaction_coordinator(transactional_id);
        coordinator.is_some_and(|b| b.id == self.config.broker_id)
    }

    /// Appends the markers of a decided transaction in the partitions this broker owns; None
    /// if it has none to write or report.
    fn start_marking(&self, id: String, record: TxnRecord) -> Option<Marking> {
        let commit = record.state.preparing()?;
        let mut marking = Marking {
            id,
            record: record.clone(),
            done: Vec::new(),
            appended: Vec::new(),
        };
        for partition in &record.unmarked {
            let TxnPartition(topic, index) = partition;
            let Some(log) = self.owned_log(topic, *index) else {
                if self.topic(topic).is_none() && self.coordinates(&marking.id) {
                    marking.done.push(partition.clone());
                }
                continue;
            };
            match log.append_marker(record.producer_id, record.epoch, commit) {
                Ok(Marked::Nothing) => marking.done.push(partition.clone()),
                Ok(Marked::Buffered(receiver, bytes)) => {
                    self.wal.note_append(&log, bytes);
                    marking.appended.push((partition.clone(), receiver));
                }
                // Not writable here now (a hand-off, the producer state still loading).
                Err(_) => {}
            }
        }
        (!marking.done.is_empty() || !marking.appended.is_empty()).then_some(marking)
    }

    /// Waits for a transaction's appended markers and reports those committed.
    async fn finish_marking(&self, marking: Marking) {
        let Marking {
            id,
            record,
            mut done,
            appended,
        } = marking;
        let (partitions, receivers): (Vec<_>, Vec<_>) = appended.into_iter().unzip();
        let outcomes = join_all(receivers).await;
        for (partition, outcome) in partitions.into_iter().zip(outcomes) {
            match outcome {
                Ok(Ok(_)) => done.push(partition),
                other => tracing::debug!(transactional_id = %id, ?partition, ?other,
                    "a transaction marker was not written; writing it again"),
            }
        }
        if done.is_empty() {
            return;
        }
        let producer = (record.producer_id, record.epoch);
        if let Err(error) = self
            .transactions
            .marked(&id, producer, Members::Partitions(&done))
            .await
        {
            tracing::warn!(transactional_id = %id, %error,
                "reporting transaction markers failed; reporting them again");
        }
    }

    /// This broker's log of a partition it owns and writes now.
    fn owned_log(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        let topic = self.topic(topic)?;
        let slot = topic.partitions.get(usize::try_from(index).ok()?)?;
        let log = slot.current();
        log.is_leader().then_some(log)
    }
}
