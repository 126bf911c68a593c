//! Keeps this broker's partitions in line with the cluster view: it claims the partitions
//! assigned to it once nobody owns them, hands off the ones assigned elsewhere (flush, then
//! release), and drops at once the ones it lost (its owner key is gone: lease expired or a
//! new session). Runs on every metadata change, on session changes and once a second.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;

use std::collections::BTreeMap;
use std::ops::Range;

use super::state::ClusterState;
use crate::broker::{Broker, Slot, Topic};
use crate::config::BrokerConfig;
use crate::log::limits::TopicLimits;
use crate::log::partition::now_ms;
use crate::log::retention::{self, RetentionLimits};
use crate::log::{follower_partition, open_partition, OpenError};
use crate::meta::catalog::{CatalogError, TopicRecord};

/// Applies retention to the partitions this broker owns, every retention check interval.
pub fn spawn_retention(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        // Like Kafka, the first check comes one interval after start-up, not at once.
        let every = broker.config.retention_check_interval();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            for topic in broker.topics() {
                let limits = retention_limits(&topic.record.configs, &broker.config);
                for slot in &topic.partitions {
                    let partition = slot.current();
                    if partition.is_leader() {
                        retention::enforce(&broker.log, &partition, limits, now_ms()).await;
                    }
                }
            }
        }
    });
}

/// A topic's retention.ms / retention.bytes, falling back to the broker defaults.
fn retention_limits(configs: &BTreeMap<String, String>, config: &BrokerConfig) -> RetentionLimits {
    let value = |key: &str, default: i64| {
        configs
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    RetentionLimits {
        retention_ms: value("retention.ms", config.retention_ms),
        retention_bytes: value("retention.bytes", config.retention_bytes),
    }
}

/// Read-only logs for partitions `ids` of a topic, from their records in the cluster view;
/// None while one of them has no record there.
fn follower_slots(
    record: &TopicRecord,
    ids: Range<i32>,
    limits: &Arc<TopicLimits>,
    state: &ClusterState,
) -> Option<Vec<Arc<Slot>>> {
    ids.map(|id| {
        let view = state.partition(&record.name, id)?;
        let partition = view.record.clone()?;
        let log = follower_partition(record, id, limits.clone(), partition, view.revision);
        Some(Arc::new(Slot::new(log)))
    })
    .collect()
}

/// Starts the reconciliation loop.
pub fn spawn(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        let mut changes = broker.mirror.changes();
        let mut session = broker.log.catalog.kv().session();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                changed = session.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    broker.start_over().await;
                }
                _ = tick.tick() => {}
                _ = broker.reconcile_soon.notified() => {}
            }
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            broker.reconcile().await;
        }
    });
}

impl Broker {
    /// Brings topics and partition roles in line with the metadata store as mirrored now.
    pub async fn reconcile(self: &Arc<Self>) {
        let _one_at_a_time = self.reconciling.lock().await;
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        let root = self.log.catalog.root();
        let revision = self.mirror.revision();
        let entries = self.mirror.range(&format!("{root}/"));
        let state = Arc::new(ClusterState::from_entries(root, revision, &entries));
        self.sync_topics(&state);
        self.publish_cluster(state.clone());
        for topic in self.topics() {
            for (id, slot) in topic.partitions.iter().enumerate() {
                self.reconcile_partition(&topic, id as i32, slot, &state);
            }
        }
    }

    /// True if `topic` is still the topic of that name this broker serves (not deleted, maybe
    /// re-created, meanwhile; a newer record of the same topic shares its slots).
    fn serves(&self, topic: &Topic) -> bool {
        self.topic(&topic.record.name)
            .is_some_and(|current| current.record.id == topic.record.id)
    }

    /// Adds topics that appeared in the store (every partition starts as a follower), follows
    /// the ones whose record changed (configs, added partitions) and removes the ones deleted
    /// there, failing their buffered writes.
    fn sync_topics(&self, state: &ClusterState) {
        let mut topics = self.topics_map();
        topics.retain(|name, topic| {
            let alive = state
                .topics
                .get(name)
                .is_some_and(|record| record.id == topic.record.id);
            if !alive {
                for slot in &topic.partitions {
                    slot.current()
                        .abandon(ResponseError::UnknownTopicOrPartition);
                }
                self.metrics.forget_topic(name);
            }
            alive
        });
        let settings = &self.log.settings;
        for (name, record) in &state.topics {
            let followed = match topics.get(name) {
                Some(topic) if topic.record == *record => continue,
                Some(topic) => {
                    topic.limits.update(&record.configs, settings);
                    // Partitions are only ever added, by the same transaction as the record.
                    let known = topic.partitions.len() as i32;
                    let Some(added) =
                        follower_slots(record, known..record.partitions, &topic.limits, state)
                    else {
                        continue; // their records are not in this view yet
                    };
                    Topic {
                        record: record.clone(),
                        partitions: topic.partitions.iter().cloned().chain(added).collect(),
                        limits: topic.limits.clone(),
                    }
                }
                None => {
                    let limits = Arc::new(TopicLimits::new(&record.configs, settings));
                    let Some(partitions) =
                        follower_slots(record, 0..record.partitions, &limits, state)
                    else {
                        continue;
                    };
                    Topic {
                        record: record.clone(),
                        partitions,
                        limits,
                    }
                }
            };
            topics.insert(name.clone(), Arc::new(followed));
        }
    }

    fn reconcile_partition(
        self: &Arc<Self>,
        topic: &Arc<Topic>,
        id: i32,
        slot: &Slot,
        state: &ClusterState,
    ) {
        let name = &topic.record.name;
        let Some(view) = state.partition(name, id) else {
            return;
        };
        if slot.is_changing() {
            return; // a claim or hand-off decides this partition's role right now
        }
        let me = self.config.broker_id;
        let assigned_here = state.assigned_owner(name, id) == Some(me);
        let current = slot.current();
        match current.owned() {
            Some(owned) => {
                let key_is_ours = view.owner == Some((me, owned.owner_revision));
                let mirror_saw_claim = state.revision >= owned.owner_revision;
                if (!key_is_ours && mirror_saw_claim) || !current.is_leader() {
                    self.drop_ownership(topic, id, slot, key_is_ours);
                } else if key_is_ours && !assigned_here && slot.begin_change() {
                    self.spawn_hand_off(topic.clone(), id);
                }
            }
            None => {
                if let Some(record) = &view.record {
                    current.follow(record, view.revision);
                }
                if assigned_here && view.owner.is_none() && slot.begin_change() {
                    self.spawn_claim(topic.clone(), id);
                }
            }
        }
    }

    /// The partition is no longer ours (or can no longer be written): answer its buffered
    /// writes with NOT_LEADER_OR_FOLLOWER and serve reads only. If the owner key is still
    /// ours (the log was closed by a failed commit), release it so it can be claimed again.
    fn drop_ownership(
        self: &Arc<Self>,
        topic: &Arc<Topic>,
        id: i32,
        slot: &Slot,
        key_is_ours: bool,
    ) {
        let current = slot.current();
        tracing::warn!(topic = %topic.record.name, partition = id,
            "lost ownership of the partition; serving reads only");
        current.abandon(ResponseError::NotLeaderOrFollower);
        slot.replace(current.to_follower());
        if let (true, Some(owned)) = (key_is_ours, current.owned()) {
            let broker = self.clone();
            let name = topic.record.name.clone();
            tokio::spawn(async move {
                let _ = broker
                    .log
                    .catalog
                    .release_partition(&name, id, &owned)
                    .await;
            });
        }
    }

    fn spawn_claim(self: &Arc<Self>, topic: Arc<Topic>, id: i32) {
        let broker = self.clone();
        tokio::spawn(async move {
            let record = &topic.record;
            let me = broker.config.broker_id;
            let limits = topic.limits.clone();
            match open_partition(&broker.log, record, id, limits, me).await {
                Ok(partition)
                    if !broker.serves(&topic) || broker.stopping.load(Ordering::Acquire) =>
                {
                    // The topic was deleted (and maybe re-created) meanwhile, or this broker
                    // is shutting down: give the claim back instead of keeping an owner key
                    // nobody writes under.
                    if let Some(owned) = partition.owned() {
                        let catalog = &broker.log.catalog;
                        let _ = catalog.release_partition(&record.name, id, &owned).await;
                    }
                }
                Ok(partition) => {
                    tracing::info!(
                        topic = record.name,
                        partition = id,
                        epoch = partition.leader_epoch(),
                        "took over the partition"
                    );
                    topic.partitions[id as usize].replace(partition);
                }
                Err(OpenError::Catalog(CatalogError::Fenced(..))) => {
                    tracing::debug!(topic = record.name, partition = id, "claimed elsewhere");
                }
                Err(error) => {
                    tracing::warn!(topic = record.name, partition = id, %error,
                        "taking over the partition failed; retrying");
                }
            }
            topic.partitions[id as usize].end_change();
            broker.reconcile_soon.notify_one();
        });
    }

    /// Graceful hand-off to the broker the partition is assigned to now: stop taking writes,
    /// flush and acknowledge what is buffered, then release the owner key.
    fn spawn_hand_off(self: &Arc<Self>, topic: Arc<Topic>, id: i32) {
        let broker = self.clone();
        tokio::spawn(async move {
            let slot = &topic.partitions[id as usize];
            let partition = slot.current();
            partition.close(ResponseError::NotLeaderOrFollower);
            broker.flusher.flush_all(vec![partition.clone()]).await;
            if let Some(owned) = partition.owned() {
                let released = broker
                    .log
                    .catalog
                    .release_partition(&topic.record.name, id, &owned)
                    .await;
                if let Err(error) = released {
                    tracing::warn!(topic = topic.record.name, partition = id, %error,
                        "releasing the partition failed; it moves when the lease expires");
                }
            }
            slot.replace(partition.to_follower());
            tracing::info!(
                topic = topic.record.name,
                partition = id,
                "handed the partition off"
            );
            slot.end_change();
            broker.reconcile_soon.notify_one();
        });
    }

    /// The session was lost (lease expired while this broker could not renew it): every
    /// owner key it held is gone. Drop all ownership and register again under the new one.
    async fn start_over(self: &Arc<Self>) {
        tracing::warn!("metadata session lost; giving up every partition and rejoining");
        for topic in self.topics() {
            for slot in &topic.partitions {
                let current = slot.current();
                if current.owned().is_some() {
                    current.abandon(ResponseError::NotLeaderOrFollower);
                    slot.replace(current.to_follower());
                }
            }
        }
        let mut backoff = Duration::from_millis(100);
        while let Err(error) = self.register().await {
            tracing::warn!(%error, "rejoining the cluster failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}
