//! Claiming partitions in bulk. The reconciler queues every partition it should take over;
//! one task drains the queue into transactions of as many claims as the metadata store takes
//! (`Catalog::claim_batches`), a few in flight at once, so taking over 100,000 partitions
//! after a restart is some thousand transactions, not 100,000 of them plus a LIST each.
//!
//! A transaction is all or none: when one of its partitions changed meanwhile, the batch is
//! halved and retried until the partitions that cannot be claimed stand alone; those are tried
//! once more on a fresh read of their record. A partition whose claim failed is looked at
//! again after its own backoff (a timer per failed batch), never by a periodic scan.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;

use super::ownership_events::Change;
use crate::broker::{Broker, Topic};
use crate::log::claimed_partition;
use crate::meta::catalog::{CatalogError, ClaimTarget, PartitionRecord, VersionedPartition};

/// Claim transactions in flight at once.
const TRANSACTIONS_IN_FLIGHT: usize = 8;
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Partitions waiting to be claimed, and how long each waits before its next try after a
/// failed one.
#[derive(Default)]
pub(crate) struct ClaimQueue {
    queued: Mutex<Vec<(Arc<Topic>, i32)>>,
    wake: Notify,
    backoff: Mutex<HashMap<(String, i32), Duration>>,
}

impl ClaimQueue {
    /// Queues a claim; the caller has marked the slot as changing.
    pub(crate) fn push(&self, topic: Arc<Topic>, id: i32) {
        lock(&self.queued).push((topic, id));
        self.wake.notify_one();
    }

    async fn take(&self) -> Vec<(Arc<Topic>, i32)> {
        loop {
            let queued = std::mem::take(&mut *lock(&self.queued));
            if !queued.is_empty() {
                return queued;
            }
            self.wake.notified().await;
        }
    }

    /// The wait before the next try of these partitions; doubles for each of them.
    fn next_retry(&self, partitions: &[(String, i32)]) -> Duration {
        let mut backoff = lock(&self.backoff);
        let mut wait = FIRST_RETRY;
        for partition in partitions {
            let entry = backoff.entry(partition.clone()).or_insert(FIRST_RETRY);
            wait = wait.max(*entry);
            *entry = (*entry * 2).min(MAX_RETRY);
        }
        wait
    }

    fn succeeded(&self, topic: &str, id: i32) {
        let mut backoff = lock(&self.backoff);
        if !backoff.is_empty() {
            backoff.remove(&(topic.to_string(), id));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A queued claim, with the record it is made on.
struct Claim {
    topic: Arc<Topic>,
    target: ClaimTarget,
}

/// Starts the task that claims what the reconciler queues.
pub(crate) fn spawn(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        loop {
            let queued = broker.ownership.claims.take().await;
            broker.claim_all(queued).await;
        }
    });
}

impl Broker {
    async fn claim_all(self: &Arc<Self>, queued: Vec<(Arc<Topic>, i32)>) {
        let state = self.cluster();
        let mut claims = Vec::with_capacity(queued.len());
        for (topic, id) in queued {
            let name = &topic.record.name;
            let view = state.view(name, id);
            // A partition without a record is claimed from the empty log, on the topic key
            // of the topic this slot belongs to (not one re-created under the same name).
            let same_topic = state.topics.get(name).map(|r| r.id) == Some(topic.record.id);
            let topic_revision = state.topic_revision(name).filter(|_| same_topic);
            match topic_revision.filter(|_| view.owner.is_none()) {
                Some(topic_revision) if !self.stopping.load(Ordering::Acquire) => {
                    // The committed end: the record's, or further on where the last owner's
                    // write-ahead manifests took it. The index holds every manifest the
                    // cluster view had when it showed the partition unowned, and the claim
                    // only holds if the record is still as that view saw it: the last owner
                    // committed nothing the index does not know about.
                    let mut record = view.record.clone().unwrap_or_else(PartitionRecord::empty);
                    let wal_end = self.log.wal.committed_end((topic.record.id, id));
                    record.high_watermark = record.high_watermark.max(wal_end.unwrap_or(0));
                    let current = VersionedPartition {
                        record,
                        revision: view.revision,
                        owner_revision: 0,
                        session: 0,
                    };
                    let target = ClaimTarget {
                        topic: name.clone(),
                        partition: id,
                        current,
                        topic_revision,
                    };
                    claims.push(Claim { topic, target });
                }
                // Owned meanwhile, gone, or this broker is stopping: look again.
                _ => self.claim_ended(&topic, id),
            }
        }
        let batches = self
            .log
            .catalog
            .claim_batches(claims, |claim| &claim.target);
        futures::stream::iter(batches)
            .for_each_concurrent(TRANSACTIONS_IN_FLIGHT, |batch| self.claim_batch(batch))
            .await;
        self.ownership.events.summarise();
    }

    /// Claims a batch in one transaction; halves it while a transaction fails its checks.
    async fn claim_batch(self: &Arc<Self>, batch: Vec<Claim>) {
        let catalog = &self.log.catalog;
        let me = self.config.broker_id;
        let mut work = vec![batch];
        while let Some(mut batch) = work.pop() {
            let targets: Vec<ClaimTarget> = batch.iter().map(|c| c.target.clone()).collect();
            match catalog.claim_partitions(&targets, me).await {
                Ok(Some(claimed)) => {
                    tracing::debug!(partitions = batch.len(), "claimed a batch of partitions");
                    for (claim, owned) in batch.into_iter().zip(claimed) {
                        self.install_claim(claim, owned).await;
                    }
                }
                Ok(None) if batch.len() > 1 => {
                    let second = batch.split_off(batch.len() / 2);
                    work.push(second);
                    work.push(batch);
                }
                Ok(None) => {
                    // The record this claim was made on is stale, or the partition is owned
                    // now. Not retried on a fresh read of the record: the committed end must
                    // come from a view that has every manifest written before that record
                    // (see `claim_all`); the mirror brings the change, and the claim is tried
                    // again after its backoff.
                    let claim = batch.remove(0);
                    let (topic, id) = (claim.target.topic.clone(), claim.target.partition);
                    self.claims_failed(vec![claim], &CatalogError::Fenced(topic, id));
                }
                Err(error) => self.claims_failed(batch, &error),
            }
        }
    }

    /// Puts a claimed partition's writable log in place, unless the topic went away or this
    /// broker is stopping meanwhile: then the claim is given back instead of keeping an owner
    /// key nobody writes under.
    async fn install_claim(self: &Arc<Self>, claim: Claim, owned: VersionedPartition) {
        let topic = &claim.topic;
        let id = claim.target.partition;
        if !self.serves(topic) || self.stopping.load(Ordering::Acquire) {
            let catalog = &self.log.catalog;
            let _ = catalog
                .release_partition(&topic.record.name, id, &owned)
                .await;
        } else {
            self.ownership
                .events
                .record(Change::TookOver, &topic.record.name, id);
            let limits = topic.limits.clone();
            let log = Arc::new(claimed_partition(&topic.record, id, limits, owned));
            let ctx = self.log.clone();
            let loading = log.clone();
            tokio::spawn(async move { loading.load_producers(&ctx).await });
            topic.partitions[id as usize].replace(log);
            self.ownership.claims.succeeded(&topic.record.name, id);
        }
        self.claim_ended(topic, id);
    }

    /// The reconciler looks at the partition again now that no claim is under way.
    fn claim_ended(self: &Arc<Self>, topic: &Topic, id: i32) {
        topic.partitions[id as usize].end_change();
        self.ownership.revisit(&topic.record.name, id);
    }

    /// Failed claims are looked at again after their backoff, not at once: the store may be
    /// down, or the change that made them fail is on its way through the mirror.
    fn claims_failed(self: &Arc<Self>, claims: Vec<Claim>, error: &CatalogError) {
        match error {
            CatalogError::Fenced(..) => tracing::debug!(%error, "claimed elsewhere"),
            error => tracing::warn!(partitions = claims.len(), %error,
                "taking over partitions failed; retrying"),
        }
        let partitions: Vec<(String, i32)> = claims
            .iter()
            .map(|c| (c.target.topic.clone(), c.target.partition))
            .collect();
        for claim in &claims {
            claim.topic.partitions[claim.target.partition as usize].end_change();
        }
        let wait = self.ownership.claims.next_retry(&partitions);
        let broker = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(broker) = broker.upgrade() {
                for (topic, id) in &partitions {
                    broker.ownership.revisit(topic, *id);
                }
            }
        });
    }
}
