//! The broker: stores, catalog, the topics this broker serves, the flusher and the control
//! bridge, opened together and shut down together.

pub mod control;
pub mod topics;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::log::cache::SegmentCache;
use crate::log::flusher::Flusher;
use crate::log::partition::Partition;
use crate::log::{open_partition, LogContext, OpenError};
use crate::meta::catalog::{Catalog, CatalogError, TopicRecord};
use crate::meta::embedded::EmbeddedStore;
use crate::store::SegmentStore;
use control::ControlBridge;

/// A topic as this broker serves it.
pub struct Topic {
    pub record: TopicRecord,
    pub partitions: Vec<Arc<Partition>>,
}

pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub log: Arc<LogContext>,
    pub flusher: Arc<Flusher>,
    pub control: ControlBridge,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serialises topic creation and deletion (rare; keeps the registry and store in step).
    admin: tokio::sync::Mutex<()>,
    deletions_done: tokio::sync::Notify,
    description: String,
}

/// How long a create waits for an earlier delete of the same name to finish.
const RECREATE_WAIT: Duration = Duration::from_secs(10);

impl Broker {
    /// Opens storage and metadata, recovers every topic. Errors name the setting at fault.
    pub async fn open(config: BrokerConfig) -> Result<Arc<Broker>, String> {
        let location = config.storage()?;
        let store = SegmentStore::open(&location, &config.s3_namespace)?;
        store.probe().await.map_err(|e| {
            format!(
                "object storage {} is not usable: {e}. Check KAFSCALE_S3_ENDPOINT, \
                 KAFSCALE_S3_BUCKET, KAFSCALE_S3_REGION and the AWS credentials",
                store.describe()
            )
        })?;
        let kv = EmbeddedStore::open(&config.metadata_path())?;
        let catalog = Arc::new(Catalog::new(Arc::new(kv), &config.s3_namespace));
        let cluster_id = catalog
            .cluster_id()
            .await
            .map_err(|e| format!("metadata store: {e}"))?;
        let description = format!(
            "storage: {}; metadata: {}",
            store.describe(),
            catalog.describe()
        );
        let log = Arc::new(LogContext {
            settings: config.log_settings(),
            store: Arc::new(store),
            catalog,
            cache: SegmentCache::new(config.cache_bytes),
        });
        let broker = Arc::new(Broker {
            flusher: Flusher::new(log.clone()),
            log,
            cluster_id,
            control: ControlBridge::default(),
            topics: RwLock::new(HashMap::new()),
            admin: tokio::sync::Mutex::new(()),
            deletions_done: tokio::sync::Notify::new(),
            description,
            config,
        });
        broker.recover().await?;
        Ok(broker)
    }

    /// Which storage and metadata this broker uses, for the start-up line.
    pub fn describe_stores(&self) -> &str {
        &self.description
    }

    async fn recover(self: &Arc<Self>) -> Result<(), String> {
        let records = self
            .log
            .catalog
            .topics()
            .await
            .map_err(|e| format!("metadata store: {e}"))?;
        for record in records {
            let topic = self
                .open_topic(record)
                .await
                .map_err(|e| format!("recovering topics: {e}"))?;
            self.insert_topic(topic);
        }
        for pending in self
            .log
            .catalog
            .pending_deletions()
            .await
            .unwrap_or_default()
        {
            self.spawn_object_deletion(pending.topic, Vec::new());
        }
        Ok(())
    }

    async fn open_topic(&self, record: TopicRecord) -> Result<Arc<Topic>, OpenError> {
        let max_bytes = topics::max_message_bytes(&record.configs, self.config.max_message_bytes);
        let mut partitions = Vec::with_capacity(record.partitions as usize);
        for id in 0..record.partitions {
            partitions.push(Arc::new(
                open_partition(&self.log, &record, id, max_bytes).await?,
            ));
        }
        Ok(Arc::new(Topic { record, partitions }))
    }

    fn insert_topic(&self, topic: Arc<Topic>) {
        self.topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.record.name.clone(), topic);
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|t| t.record.id == id)
            .cloned()
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
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

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, ApiError> {
        topics::validate_topic_name(name)?;
        topics::validate_partition_count(partitions)?;
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
                Ok(record) => {
                    let topic = self.open_topic(record).await.map_err(storage_error)?;
                    self.insert_topic(topic.clone());
                    tracing::info!(topic = name, partitions, "topic created");
                    return Ok(topic);
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

    /// Creates a topic a client asked for implicitly (Metadata with auto-creation allowed);
    /// a concurrent creation of the same name is fine.
    pub async fn auto_create_topic(&self, name: &str) -> Result<Arc<Topic>, ApiError> {
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

    /// Removes the topic at once; its objects are deleted in the background, to completion,
    /// and resumed after a restart.
    pub async fn delete_topic(self: &Arc<Self>, name: &str) -> Result<(), ApiError> {
        let _admin = self.admin.lock().await;
        self.log
            .catalog
            .delete_topic(name)
            .await
            .map_err(catalog_error)?;
        let removed = self
            .topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        let partitions = removed.map(|t| t.partitions.clone()).unwrap_or_default();
        for partition in &partitions {
            partition.abandon(ResponseError::UnknownTopicOrPartition);
        }
        tracing::info!(topic = name, "topic deleted; removing its segments");
        self.spawn_object_deletion(name.to_string(), partitions);
        Ok(())
    }

    fn spawn_object_deletion(self: &Arc<Self>, topic: String, partitions: Vec<Arc<Partition>>) {
        let broker = self.clone();
        tokio::spawn(async move {
            // A flush already under way may still upload; wait for it so nothing is left behind.
            for partition in &partitions {
                partition.wait_for_flush().await;
            }
            let mut backoff = Duration::from_millis(100);
            loop {
                let deleted = broker.log.store.delete_topic_objects(&topic).await;
                let finished = match deleted {
                    Ok(count) => broker
                        .log
                        .catalog
                        .finish_deletion(&topic)
                        .await
                        .map(|()| count)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match finished {
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

    /// SIGTERM: stop taking writes, flush every buffer, close the control plane.
    pub async fn shutdown(&self) {
        let partitions: Vec<_> = self
            .topics()
            .iter()
            .flat_map(|topic| topic.partitions.iter().cloned())
            .collect();
        for partition in &partitions {
            partition.close(ResponseError::NotLeaderOrFollower);
        }
        self.flusher.flush_all(partitions).await;
        self.control.close();
        tracing::info!("all buffers flushed; broker stopped");
    }
}

fn storage_error(e: OpenError) -> ApiError {
    ApiError::new(ResponseError::KafkaStorageError, e.to_string())
}

fn catalog_error(e: CatalogError) -> ApiError {
    let code = match &e {
        CatalogError::TopicExists(_) | CatalogError::TopicBeingDeleted(_) => {
            ResponseError::TopicAlreadyExists
        }
        CatalogError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
        CatalogError::Fenced(..) => ResponseError::NotLeaderOrFollower,
        CatalogError::Meta(_) => ResponseError::KafkaStorageError,
    };
    ApiError::new(code, e.to_string())
}
