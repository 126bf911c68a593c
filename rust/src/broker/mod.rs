//! The broker: stores, catalog, the cluster view, the topics this broker serves (as owner or
//! reader of each partition), the write-ahead writer and the control bridge – opened together
//! and shut down together – and the tasks that keep its share of the cluster: ownership (with
//! its claims and read barrier), compaction and retention.

mod claims;
mod cleaner;
pub(crate) mod compaction;
#[cfg(test)]
mod fault_tests;
pub(crate) mod gauges;
pub(crate) mod health;
pub(crate) mod ownership;
mod ownership_events;
mod read_barrier;
mod retention;
pub(crate) mod served_topic;
pub(crate) mod startup;
#[cfg(test)]
pub(crate) mod tests;
pub(crate) mod topic_rules;
pub(crate) mod traffic;
mod transaction_markers;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kafka_protocol::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;

use crate::auth::authorizer::Authorizer;
use crate::cluster::state::ClusterState;
use crate::config::BrokerConfig;
use crate::control::bridge::ControlBridge;
use crate::error::ApiError;
use crate::log::cache::SegmentCache;
use crate::log::wal::writer::WalWriter;
use crate::log::LogContext;
use crate::meta::catalog::{Catalog, CatalogError, TopicRecord};
use crate::meta::embedded::EmbeddedStore;
use crate::meta::etcd::EtcdStore;
use crate::meta::kv::{KvStore, MetaError};
use crate::meta::metered::MeteredKv;
use crate::meta::mirror::Mirror;
use crate::meta::published::PublishedKv;
use crate::metrics::Metrics;
use crate::store::SegmentStore;
use ownership::Ownership;
pub(crate) use served_topic::{Slot, Topic};
use startup::OpenFailure;

pub(crate) struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub log: Arc<LogContext>,
    pub wal: Arc<WalWriter>,
    pub control: ControlBridge,
    pub metrics: Arc<Metrics>,
    pub(crate) producer_ids: crate::meta::producer_ids::ProducerIds,
    /// The transaction coordinator's records (every broker coordinates some ids).
    pub(crate) transactions: crate::transactions::Transactions,
    /// Everything under the cluster's metadata prefix, kept current by a watch.
    pub mirror: Arc<Mirror>,
    /// Decides what each connection's principal may do (every request asks it).
    pub(crate) authorizer: Arc<Authorizer>,
    /// The client quotas in force and what clients used of them.
    pub(crate) quotas: crate::quotas::Quotas,
    state: watch::Sender<Arc<ClusterState>>,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serialises topic creation and deletion (rare; keeps the registry and store in step).
    admin: tokio::sync::Mutex<()>,
    /// The ownership reconciler's state and work queues.
    pub(crate) ownership: Ownership,
    deletions_done: tokio::sync::Notify,
    pub(crate) stopping: AtomicBool,
    description: String,
}

/// How long a create waits for an earlier delete of the same name to finish.
const RECREATE_WAIT: Duration = Duration::from_secs(10);
/// How long a create waits for every new partition to have an owner before answering.
const OWNERS_WAIT: Duration = Duration::from_secs(10);
/// A partition by topic name and index.
type PartitionId = (String, i32);

/// The least time between two looks at whether start-up has taken over its partitions.
const SETTLE_CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// How long shutdown waits for claims and hand-offs under way (each is a few metadata-store
/// round trips, or a flush).
const OWNERSHIP_CHANGES_WAIT: Duration = Duration::from_secs(15);

impl Broker {
    /// Opens storage and metadata, joins the cluster and takes over this broker's share of
    /// the partitions. Errors name the setting at fault.
    pub(crate) async fn open(config: BrokerConfig) -> Result<Arc<Broker>, OpenFailure> {
        let location = config.storage().map_err(OpenFailure::Storage)?;
        // The data directory holds the embedded metadata store, or the segments.
        let uses_data_dir = config.etcd_endpoints.is_none()
            || matches!(location, crate::store::StorageLocation::LocalDir(_));
        if uses_data_dir {
            startup::check_data_dir(&config)?;
        }
        let store = SegmentStore::open(&location, &config.s3_namespace)
            .map_err(|e| OpenFailure::Storage(startup::store_not_opened(&config, e)))?;
        store
            .check()
            .await
            .map_err(|e| OpenFailure::Storage(startup::store_unusable(&config, e)))?;
        let metrics = Arc::new(Metrics::default());
        let kv: Arc<dyn KvStore> = match config.etcd_endpoints() {
            Some(endpoints) => Arc::new(MeteredKv::new(
                EtcdStore::connect(&endpoints, config.etcd_credentials(), config.lease_ttl())
                    .await
                    .map_err(|e| OpenFailure::Metadata(startup::etcd_unusable(&config, e)))?,
                "etcd",
                metrics.clone(),
            )),
            None => {
                let embedded = EmbeddedStore::open(&config.metadata_path())
                    .map_err(|e| OpenFailure::Metadata(startup::embedded_unusable(&config, &e)))?;
                let root = Catalog::root_of(&config.s3_namespace);
                let published = PublishedKv::open(embedded, &root, store.published_shelf()).await;
                Arc::new(MeteredKv::new(published, "embedded", metrics.clone()))
            }
        };
        Broker::open_over(config, store, kv, metrics).await
    }

    /// `open` once storage and the metadata store are open (tests give a store of their own).
    pub(crate) async fn open_over(
        config: BrokerConfig,
        store: SegmentStore,
        kv: Arc<dyn KvStore>,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Broker>, OpenFailure> {
        let catalog = Arc::new(Catalog::new(kv.clone(), &config.s3_namespace));
        // The first request that needs a login (etcd grants a lease without one).
        let cluster_id = catalog
            .cluster_id()
            .await
            .map_err(|e| OpenFailure::Metadata(startup::metadata_unusable(&config, &e)))?;
        let sweep_mark = catalog
            .sweep_mark(config.broker_id)
            .await
            .map_err(|e| OpenFailure::Metadata(startup::metadata_unusable(&config, &e)))?;
        // Group records change with every offset commit and only the Python coordinator
        // reads them: mirroring them would rebuild the cluster view on each commit.
        let mirror = Mirror::start(
            kv,
            &format!("{}/", catalog.root()),
            &[catalog.groups_root()],
        )
        .await
        .map_err(|e| OpenFailure::Metadata(format!("metadata store: {e}")))?;
        let description = format!(
            "storage: {}; metadata: {}",
            store.describe(),
            catalog.describe()
        );
        let settings = config.log_settings();
        let log = Arc::new(LogContext {
            cache: SegmentCache::new(config.cache_bytes, settings.uncompacted_hold()),
            settings,
            store: Arc::new(store),
            catalog,
            metrics: metrics.clone(),
            meta_writes: Default::default(),
            wal: Arc::default(),
            compaction_due: Default::default(),
        });
        let broker = Arc::new(Broker {
            wal: WalWriter::start(log.clone(), log.wal.clone(), config.broker_id, sweep_mark),
            producer_ids: crate::meta::producer_ids::ProducerIds::new(log.catalog.clone()),
            transactions: crate::transactions::Transactions::new(
                log.catalog.clone(),
                mirror.clone(),
            ),
            log,
            quotas: crate::quotas::Quotas::new(metrics.clone()),
            metrics,
            cluster_id,
            control: ControlBridge::default(),
            mirror,
            authorizer: Arc::new(Authorizer::new(config.authorizer_settings())),
            state: watch::Sender::new(Arc::new(ClusterState::default())),
            topics: RwLock::new(HashMap::new()),
            admin: tokio::sync::Mutex::new(()),
            ownership: Ownership::default(),
            deletions_done: tokio::sync::Notify::new(),
            stopping: AtomicBool::new(false),
            description,
            config,
        });
        broker.register().await?;
        broker.reconcile().await;
        broker.resume_deletions().await;
        ownership::spawn(&broker);
        retention::spawn(&broker);
        compaction::spawn(&broker);
        cleaner::spawn(&broker);
        transaction_markers::spawn(&broker);
        broker.wait_for_assigned_partitions().await;
        Ok(broker)
    }

    /// Start-up waits (bounded) until this broker owns the partitions assigned to it, so the
    /// first requests after a restart find them writable. A crashed predecessor's ownership
    /// only ends with its lease, so this may take up to the lease TTL. Each look checks only
    /// the partitions the previous one found unsettled (all of them again if the live brokers
    /// changed), at most every `SETTLE_CHECK_INTERVAL`.
    async fn wait_for_assigned_partitions(&self) {
        let me = self.config.broker_id;
        let deadline = tokio::time::Instant::now() + self.config.lease_ttl() * 2;
        let mut cluster = self.subscribe_cluster();
        // The partitions still unsettled at the last look, and the live brokers then.
        let mut unsettled: Option<(Vec<i32>, Vec<PartitionId>)> = None;
        loop {
            let state = cluster.borrow_and_update().clone();
            // Until the view shows this broker registered, it assigns nothing to it.
            if state.brokers.contains_key(&me) {
                let brokers = state.live_brokers();
                let candidates = match unsettled.take() {
                    Some((seen, left)) if seen == brokers => left,
                    _ => state
                        .partitions()
                        .filter(|(topic, id, _)| state.assigned_owner(topic, *id) == Some(me))
                        .map(|(topic, id, _)| (topic.to_string(), id))
                        .collect(),
                };
                let left: Vec<_> = candidates
                    .into_iter()
                    .filter(|(topic, id)| !self.writable_here(&state, topic, *id))
                    .collect();
                if left.is_empty() {
                    return;
                }
                unsettled = Some((brokers, left));
            }
            match tokio::time::timeout_at(deadline, cluster.changed()).await {
                Ok(Ok(())) => tokio::time::sleep(SETTLE_CHECK_INTERVAL).await,
                _ => {
                    tracing::warn!(
                        "some partitions assigned to this broker are still owned elsewhere"
                    );
                    return;
                }
            }
        }
    }

    /// This broker owns the partition and its log here takes writes.
    fn writable_here(&self, state: &ClusterState, topic: &str, partition: i32) -> bool {
        let owner = state.partition(topic, partition).and_then(|v| v.owner);
        owner.is_some_and(|(owner, _)| owner == self.config.broker_id)
            && self.writable_where_owned(state, topic, partition)
    }

    /// Which storage and metadata this broker uses, for the start-up line.
    pub(crate) fn describe_stores(&self) -> &str {
        &self.description
    }

    /// Announces this broker under its session. A restarted broker may find its previous
    /// registration until that session's lease runs out, so it waits that long before giving up.
    pub(crate) async fn register(&self) -> Result<(), OpenFailure> {
        let record = self.config.broker_record();
        let deadline = tokio::time::Instant::now() + self.config.lease_ttl() * 2;
        loop {
            match self.log.catalog.register_broker(&record).await {
                Ok(()) => return Ok(()),
                Err(CatalogError::BrokerIdTaken(..)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => return Err(OpenFailure::Joining(e)),
            }
        }
    }

    /// The latest cluster view.
    pub(crate) fn cluster(&self) -> Arc<ClusterState> {
        self.state.borrow().clone()
    }

    pub(crate) fn publish_cluster(&self, state: Arc<ClusterState>) {
        self.state.send_replace(state);
    }

    pub(crate) fn subscribe_cluster(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.state.subscribe()
    }

    pub(crate) fn topics_map(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(crate) fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|t| t.record.id == id)
            .cloned()
    }

    /// Puts the ACLs of this broker's copy of the metadata store in force.
    pub(crate) fn reload_acls(&self) {
        let acls = crate::auth::store::mirrored(&self.log.catalog, &self.mirror);
        self.authorizer.replace(acls);
    }

    /// Puts the client quotas the mirror holds in force.
    pub(crate) fn reload_quotas(&self) {
        let quotas = crate::quotas::store::mirrored(&self.log.catalog, &self.mirror);
        self.quotas.replace(quotas);
    }

    /// Every topic, by id.
    pub(crate) fn topics_by_id(&self) -> HashMap<Uuid, Arc<Topic>> {
        let topics = self.topics.read().unwrap_or_else(|p| p.into_inner());
        topics.values().map(|t| (t.record.id, t.clone())).collect()
    }

    /// Every topic, sorted by name.
    pub(crate) fn topics(&self) -> Vec<Arc<Topic>> {
        let mut all: Vec<_> = self
            .topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        all
    }

    /// Brings the local view up to `revision` of the metadata store (read-your-writes).
    async fn catch_up(self: &Arc<Self>, revision: i64) {
        self.mirror.caught_up(revision).await;
        self.reconcile().await;
    }

    pub(crate) async fn create_topic(
        self: &Arc<Self>,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, ApiError> {
        topic_rules::validate_topic_name(name)?;
        topic_rules::validate_partition_count(partitions)?;
        let deadline = tokio::time::Instant::now() + RECREATE_WAIT;
        loop {
            let deletion_finished = self.deletions_done.notified();
            let admin_guard = self.admin.lock().await;
            match self
                .log
                .catalog
                .create_topic(name, partitions, configs.clone())
                .await
            {
                Ok((record, revision)) => {
                    drop(admin_guard);
                    self.catch_up(revision).await;
                    self.wait_for_owners(&record).await;
                    tracing::info!(topic = name, partitions, "topic created");
                    return self.topic(name).ok_or_else(deleted_meanwhile);
                }
                Err(CatalogError::TopicBeingDeleted(_))
                    if tokio::time::Instant::now() < deadline =>
                {
                    drop(admin_guard);
                    let _ = tokio::time::timeout_at(deadline, deletion_finished).await;
                }
                Err(e) => return Err(catalog_error(e)),
            }
        }
    }

    /// Replaces the topic's configs in the metadata store. Every broker follows once its view
    /// has the new record: retention, segment size and max message size use the new values.
    pub(crate) async fn alter_topic_configs(
        self: &Arc<Self>,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, ApiError> {
        let (_, revision) = self
            .log
            .catalog
            .alter_topic_configs(name, configs.clone())
            .await
            .map_err(catalog_error)?;
        self.catch_up(revision).await;
        tracing::info!(topic = name, ?configs, "topic configs changed");
        self.topic(name).ok_or_else(deleted_meanwhile)
    }

    /// Grows the topic to `count` partitions, then waits (bounded) until the new ones have
    /// owners that take writes.
    pub(crate) async fn create_partitions(
        self: &Arc<Self>,
        name: &str,
        count: i32,
    ) -> Result<Arc<Topic>, ApiError> {
        let (record, revision) = self
            .log
            .catalog
            .add_partitions(name, count, topic_rules::MAX_PARTITIONS)
            .await
            .map_err(catalog_error)?;
        self.catch_up(revision).await;
        self.wait_for_owners(&record).await;
        tracing::info!(topic = name, partitions = count, "partitions added");
        self.topic(name).ok_or_else(deleted_meanwhile)
    }

    /// Waits (bounded) until every partition of a topic has an owner that takes writes, so
    /// clients that produce right after CreateTopics or CreatePartitions are not turned away.
    async fn wait_for_owners(&self, record: &TopicRecord) {
        let ready = |state: &Arc<ClusterState>| {
            (0..record.partitions).all(|p| self.writable_where_owned(state, &record.name, p))
        };
        let mut cluster = self.subscribe_cluster();
        if tokio::time::timeout(OWNERS_WAIT, cluster.wait_for(ready))
            .await
            .is_err()
        {
            tracing::warn!(topic = record.name, "new partitions still have no owner");
        }
    }

    /// The partition has an owner, and if that is this broker, its log here takes writes.
    fn writable_where_owned(&self, state: &ClusterState, topic: &str, partition: i32) -> bool {
        match state.partition(topic, partition).and_then(|v| v.owner) {
            Some((owner, _)) if owner == self.config.broker_id => self
                .topic(topic)
                .and_then(|t| t.partitions.get(partition as usize).map(|s| s.current()))
                .is_some_and(|p| p.is_leader()),
            Some(_) => true,
            None => false,
        }
    }

    /// Creates a topic a client asked for implicitly (Metadata with auto-creation allowed);
    /// a concurrent creation of the same name is fine.
    pub(crate) async fn auto_create_topic(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<Arc<Topic>, ApiError> {
        match self
            .create_topic(name, self.config.default_partitions, BTreeMap::new())
            .await
        {
            Err(e) if e.code == ResponseError::TopicAlreadyExists => self
                .topic(name)
                .ok_or_else(|| ApiError::new(ResponseError::LeaderNotAvailable, e.message)),
            other => other,
        }
    }

    /// Removes the topic at once (only if it has this `id`, when given); its objects are
    /// deleted in the background, to completion, and resumed after a restart.
    pub(crate) async fn delete_topic(
        self: &Arc<Self>,
        name: &str,
        id: Option<uuid::Uuid>,
    ) -> Result<(), ApiError> {
        let _admin = self.admin.lock().await;
        let revision = self
            .log
            .catalog
            .delete_topic(name, id)
            .await
            .map_err(catalog_error)?;
        self.catch_up(revision).await;
        tracing::info!(topic = name, "topic deleted; removing its segments");
        self.spawn_object_deletion(name.to_string());
        Ok(())
    }

    async fn resume_deletions(self: &Arc<Self>) {
        match self.log.catalog.pending_deletions().await {
            Ok(pending) => {
                for deletion in pending {
                    self.spawn_object_deletion(deletion.topic);
                }
            }
            Err(error) => tracing::warn!(%error, "could not list pending topic deletions"),
        }
    }

    /// Deletes a deleted topic's objects once its owners stopped writing, then its partition
    /// keys and the deletion marker (see `Catalog::delete_topic`). Write-ahead objects are not
    /// the topic's: the sweep deletes them.
    fn spawn_object_deletion(self: &Arc<Self>, topic: String) {
        let broker = self.clone();
        tokio::spawn(async move {
            broker.owners_let_go(&topic).await;
            let mut backoff = Duration::from_millis(100);
            loop {
                match broker.remove_deleted_topic(&topic).await {
                    Ok(count) => {
                        tracing::info!(topic, objects = count, "topic segments removed");
                        broker.deletions_done.notify_waiters();
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(topic, %error, "removing topic segments failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
        });
    }

    /// Waits until no owner key of the deleted topic is left: each owner gives its key up once
    /// it stopped writing (`spawn_let_go`), or loses it with its session. No claim can make a
    /// new one (claims require the topic key), so the copy of the store decides.
    async fn owners_let_go(&self, topic: &str) {
        let prefix = self.log.catalog.partitions_prefix(topic);
        let mut changes = self.mirror.changes();
        loop {
            let keys = self.mirror.range(&prefix);
            if !keys.iter().any(|kv| kv.key.ends_with("/owner")) {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), changes.changed()).await;
        }
    }

    /// The partition keys, the objects (how many), then the deletion marker.
    async fn remove_deleted_topic(&self, topic: &str) -> Result<usize, DeletionError> {
        let catalog = &self.log.catalog;
        catalog.remove_partition_keys(topic).await?;
        let count = self.log.store.delete_topic_objects(topic).await?;
        catalog.finish_deletion(topic).await?;
        Ok(count)
    }

    /// SIGTERM, first part: stop taking writes and flush every buffer. The server then sends
    /// the responses it owes, and only after that does `leave` end the session: a client that
    /// saw this broker leave the cluster before its answers arrived would drop the connection
    /// and send again records that were stored.
    pub(crate) async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        // Wait for a reconciliation under way; none starts after this.
        let _no_more_changes = self.ownership.pass.lock().await;
        // Claims and hand-offs it started run on their own: let them finish (a claim that
        // lands now gives the partition back) before collecting what to flush. A claim that
        // installed a writable log after this point would take writes that no flush below
        // commits: its producers would wait in vain for an answer.
        self.wait_for_ownership_changes().await;
        let partitions: Vec<_> = self
            .topics()
            .iter()
            .flat_map(|topic| topic.partitions.iter().map(|s| s.current()))
            .collect();
        for partition in &partitions {
            partition.close(ResponseError::NotLeaderOrFollower);
        }
        self.wal.drain(&partitions).await;
        self.control.close();
    }

    /// SIGTERM, last part: ends the session – which releases every partition and the
    /// registration at once, so the others take over without waiting for a lease to expire.
    pub(crate) async fn leave(&self) {
        if let Err(error) = self.log.catalog.kv().end_session().await {
            tracing::warn!(%error, "could not end the metadata session; partitions move after the lease expires");
        }
        tracing::info!("all buffers flushed and partitions released; broker stopped");
    }

    async fn wait_for_ownership_changes(&self) {
        let deadline = tokio::time::Instant::now() + OWNERSHIP_CHANGES_WAIT;
        loop {
            let changing = self
                .topics()
                .iter()
                .flat_map(|t| t.partitions.iter())
                .filter(|slot| slot.is_changing())
                .count();
            if changing == 0 {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    changing,
                    "partition claims or hand-offs still under way at shutdown; not waiting longer"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Why a deleted topic's keys and objects are not all removed yet (retried).
#[derive(Debug, thiserror::Error)]
enum DeletionError {
    #[error("metadata store: {0}")]
    Metadata(#[from] MetaError),
    #[error("object store: {0}")]
    Store(#[from] crate::store::StoreError),
}

fn deleted_meanwhile() -> ApiError {
    ApiError::new(ResponseError::UnknownTopicOrPartition, "deleted meanwhile")
}

fn catalog_error(e: CatalogError) -> ApiError {
    let code = match &e {
        CatalogError::TopicExists(_) | CatalogError::TopicBeingDeleted(_) => {
            ResponseError::TopicAlreadyExists
        }
        CatalogError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
        CatalogError::UnknownTopicId(_) => ResponseError::UnknownTopicId,
        CatalogError::PartitionCount { .. } => ResponseError::InvalidPartitions,
        CatalogError::Fenced(..) => ResponseError::NotLeaderOrFollower,
        // Kafka answers a request beyond its own metadata limits (more than 10,000 partitions
        // in one CreateTopics or CreatePartitions) with POLICY_VIOLATION and says so; a limit
        // of the metadata store is the same kind of refusal, not a storage failure to retry.
        CatalogError::Meta(MetaError::Limit(_)) => ResponseError::PolicyViolation,
        CatalogError::Meta(_) => ResponseError::KafkaStorageError,
        CatalogError::BrokerIdTaken(..) => ResponseError::UnknownServerError,
    };
    ApiError::new(code, e.to_string())
}
