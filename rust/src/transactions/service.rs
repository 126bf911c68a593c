//! The transaction coordinator's store side: reads a transactional id's record, takes the
//! coordinator's step (`coordinator`) and stores the result with a compare-and-swap on the
//! record's revision, again from the newer record when another write came first. So the
//! record alone orders a transaction's steps: two brokers that both think they coordinate it
//! (a moment of disagreement about the live brokers) never both move it.
//!
//! The data plane reads the records from the broker's mirror: a partition's owner checks a
//! transactional batch against it (`verify`) and writes the markers of decided transactions
//! (`broker::transaction_markers`), reporting them here (`marked`).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;

use super::coordinator::{self, End, Ending, Init, Members, Protocol, Step};
use super::record::{TxnPartition, TxnRecord, TxnState};
use crate::log::partition::now_ms;
use crate::meta::catalog::{encode, key_segment, segment_name, Catalog};
use crate::meta::kv::{Compare, MetaError, Op};
use crate::meta::mirror::Mirror;
use crate::meta::producer_ids::ProducerIds;

/// How long EndTxn waits for the markers before it answers (the decision is stored already;
/// the producer's next transaction waits for them with CONCURRENT_TRANSACTIONS).
const MARKERS_WAIT: Duration = Duration::from_secs(5);
/// Compare-and-swap attempts before a request is answered with a retriable error.
const ATTEMPTS: usize = 8;
/// How long an implicit add (`add_implicitly`) waits for the producer's last transaction to
/// be marked before it gives up (the request is then refused with a retriable error).
const IMPLICIT_ADD_WAIT: Duration = Duration::from_secs(1);

pub(crate) struct Transactions {
    catalog: Arc<Catalog>,
    mirror: Arc<Mirror>,
}

/// A transactional id and its record, as the mirror holds them.
pub(crate) type Mirrored = (String, TxnRecord);

impl Transactions {
    pub(crate) fn new(catalog: Arc<Catalog>, mirror: Arc<Mirror>) -> Transactions {
        Transactions { catalog, mirror }
    }

    fn prefix(&self) -> String {
        format!("{}/transactions/", self.catalog.root())
    }

    fn key(&self, transactional_id: &str) -> String {
        format!("{}{}", self.prefix(), key_segment(transactional_id))
    }

    /// Takes `step` from the stored record until its write holds (or it writes nothing).
    async fn apply<A>(
        &self,
        transactional_id: &str,
        mut step: impl FnMut(Option<&TxnRecord>) -> Step<A>,
    ) -> Result<A, ResponseError> {
        let key = self.key(transactional_id);
        let kv = self.catalog.kv();
        for _ in 0..ATTEMPTS {
            let stored = kv.get(&key).await.map_err(unavailable)?;
            let (current, revision) = match stored {
                None => (None, 0),
                Some(found) => (Some(parse(&key, &found.value)?), found.mod_revision),
            };
            let Step { write, answer } = step(current.as_ref());
            let Some(next) = write else {
                return answer;
            };
            let compares = vec![Compare::ModRevision(key.clone(), revision)];
            let ops = vec![Op::Put(key.clone(), encode(&next))];
            if let Some(written) = kv.txn(compares, ops).await.map_err(unavailable)? {
                // The broker that wrote a step sees it in its mirror before it answers, so its
                // next request (and its own marker task) starts from it.
                self.mirror.caught_up(written).await;
                return answer;
            }
        }
        Err(ResponseError::ConcurrentTransactions)
    }

    /// InitProducerId with a transactional id; `max_timeout_ms`: the broker's
    /// `transaction.max.timeout.ms`.
    pub(crate) async fn init_producer_id(
        &self,
        transactional_id: &str,
        (timeout_ms, max_timeout_ms): (i32, i32),
        expected: Option<(i64, i16)>,
        ids: &ProducerIds,
    ) -> Result<(i64, i16), ResponseError> {
        if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        // A producer id is taken before the record is read when it may be needed (a first
        // init); one not used is lost, which costs nothing (ids are 63-bit).
        let current = self.mirrored(transactional_id);
        let mut fresh_id = None;
        if coordinator::needs_producer_id(current.as_ref()) {
            fresh_id = Some(ids.next().await.map_err(unavailable)?);
        }
        self.apply(transactional_id, |current| {
            let init = Init {
                timeout_ms,
                expected,
                fresh_id,
                now_ms: now_ms(),
            };
            coordinator::init(current, init)
        })
        .await
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn.
    pub(crate) async fn add(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        members: Members<'_>,
    ) -> Result<(), ResponseError> {
        self.apply(transactional_id, |current| {
            coordinator::add(current, producer, members, now_ms())
        })
        .await
    }

    /// The second protocol's implicit add (Produce v12+, TxnOffsetCommit v5): the broker a
    /// producer's batch or offsets reach adds the partition or group to the transaction
    /// itself, as AddPartitionsToTxn or AddOffsetsToTxn would. Nothing is written when this
    /// broker's mirror shows them added already. While the producer's last transaction is
    /// still being marked (CONCURRENT_TRANSACTIONS) it waits for the mirror to change and
    /// tries again, for up to a second, as Kafka's brokers retry.
    pub(crate) async fn add_implicitly(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        members: Members<'_>,
    ) -> Result<(), ResponseError> {
        let added = |r: &TxnRecord| {
            (r.producer_id, r.epoch) == producer
                && r.state == TxnState::Ongoing
                && members.in_record(r)
        };
        if self.mirrored(transactional_id).is_some_and(|r| added(&r)) {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + IMPLICIT_ADD_WAIT;
        let mut changes = self.mirror.changes();
        loop {
            match self.add(transactional_id, producer, members).await {
                Err(ResponseError::ConcurrentTransactions)
                    if tokio::time::Instant::now() < deadline =>
                {
                    let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
                }
                other => return other,
            }
        }
    }

    /// AddPartitionsToTxn v4+ with VerifyOnly: whether each partition is in the producer's
    /// ongoing transaction, as the store has it (`coordinator::check`).
    pub(crate) async fn check(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        partitions: &[TxnPartition],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.apply(transactional_id, |current| Step {
            write: None,
            answer: coordinator::check(current, producer, partitions),
        })
        .await
    }

    /// EndTxn: stores the decision, then waits (a while) for the markers to be written, so a
    /// read_committed consumer usually sees a committed transaction once its producer heard
    /// of the commit. Answers the producer id and epoch of the producer's next transaction.
    pub(crate) async fn end(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        commit: bool,
        protocol: Protocol,
        ids: &ProducerIds,
    ) -> Result<(i64, i16), ResponseError> {
        let mut fresh_id = None;
        if protocol == Protocol::BumpEpoch
            && coordinator::ending_needs_producer_id(self.mirrored(transactional_id).as_ref())
        {
            fresh_id = Some(ids.next().await.map_err(unavailable)?);
        }
        let ended = self
            .apply(transactional_id, |current| {
                let end = End {
                    producer,
                    commit,
                    protocol,
                    fresh_id,
                    now_ms: now_ms(),
                };
                coordinator::end(current, end)
            })
            .await?;
        if ended.ending == Ending::Decided {
            let settled = || {
                self.mirrored(transactional_id).is_none_or(|r| {
                    r.state.preparing().is_none() || (r.producer_id, r.epoch) != ended.marking
                })
            };
            let mut changes = self.mirror.changes();
            let _ = tokio::time::timeout(MARKERS_WAIT, async {
                while !settled() {
                    if changes.changed().await.is_err() {
                        return;
                    }
                }
            })
            .await;
        }
        Ok(ended.next)
    }

    /// Aborts the transaction if it is past its timeout (as the coordinator's sweep does).
    pub(crate) async fn abort_if_expired(
        &self,
        transactional_id: &str,
    ) -> Result<(), ResponseError> {
        self.apply(transactional_id, |current| Step {
            write: current.and_then(|r| coordinator::expire(r, now_ms())),
            answer: Ok(()),
        })
        .await
    }

    /// Removes the record of a transactional id unused for `expiration_ms` with no transaction
    /// under way (Kafka's `transactional.id.expiration.ms`), if it still is when removed.
    pub(crate) async fn remove_if_idle(
        &self,
        transactional_id: &str,
        expiration_ms: i64,
    ) -> Result<(), ResponseError> {
        let key = self.key(transactional_id);
        let kv = self.catalog.kv();
        let Some(found) = kv.get(&key).await.map_err(unavailable)? else {
            return Ok(());
        };
        if coordinator::idle(&parse(&key, &found.value)?, now_ms(), expiration_ms) {
            let compares = vec![Compare::ModRevision(key.clone(), found.mod_revision)];
            kv.txn(compares, vec![Op::Delete(key)])
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// The markers of `done` are written (or its group told) for the decided transaction of
    /// `producer`.
    pub(crate) async fn marked(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        done: Members<'_>,
    ) -> Result<(), ResponseError> {
        self.apply(transactional_id, |current| Step {
            write: current.and_then(|r| coordinator::marked(r, producer, done, now_ms())),
            answer: Ok(()),
        })
        .await
    }

    /// The record as the mirror holds it.
    pub(crate) fn mirrored(&self, transactional_id: &str) -> Option<TxnRecord> {
        let key = self.key(transactional_id);
        let found = self
            .mirror
            .range(&key)
            .into_iter()
            .find(|kv| kv.key == key)?;
        parse(&key, &found.value).ok()
    }

    /// Every record the mirror holds.
    pub(crate) fn all(&self) -> Vec<Mirrored> {
        let prefix = self.prefix();
        self.mirror
            .range(&prefix)
            .into_iter()
            .filter_map(|kv| {
                let segment = kv.key.strip_prefix(&prefix)?;
                let record = parse(&kv.key, &kv.value).ok()?;
                Some((segment_name(segment), record))
            })
            .collect()
    }

    /// Whether a transactional batch of (`producer_id`, `epoch`) may open its transaction in
    /// `partition`: the record must have that producer's transaction ongoing with the
    /// partition added. A record that says the producer was fenced is final
    /// (INVALID_PRODUCER_EPOCH); anything else may be this broker's mirror lagging behind the
    /// coordinator's write, so the producer is told to retry (NOT_ENOUGH_REPLICAS, as Kafka
    /// answers a verification it could not finish).
    pub(crate) fn verify(
        &self,
        transactional_id: &str,
        (producer_id, epoch): (i64, i16),
        partition: &TxnPartition,
    ) -> Result<(), ResponseError> {
        let record = self.mirrored(transactional_id);
        match record {
            Some(r) if r.producer_id == producer_id && r.epoch > epoch => {
                Err(ResponseError::InvalidProducerEpoch)
            }
            // The producer went on with a new id (its epochs were used up).
            Some(r)
                if r.producer_id != producer_id
                    && r.previous.is_some_and(|p| p.0 == producer_id) =>
            {
                Err(ResponseError::InvalidProducerEpoch)
            }
            Some(r)
                if r.producer_id == producer_id
                    && r.epoch == epoch
                    && r.state == TxnState::Ongoing
                    && r.partitions.contains(partition) =>
            {
                Ok(())
            }
            _ => Err(ResponseError::NotEnoughReplicas),
        }
    }
}

fn parse(key: &str, value: &[u8]) -> Result<TxnRecord, ResponseError> {
    serde_json::from_slice(value).map_err(|e| {
        tracing::error!(key, error = %e, "a transaction record is unreadable");
        ResponseError::UnknownServerError
    })
}

fn unavailable(error: MetaError) -> ResponseError {
    tracing::warn!(%error, "the transaction coordinator cannot reach the metadata store");
    ResponseError::CoordinatorNotAvailable
}
