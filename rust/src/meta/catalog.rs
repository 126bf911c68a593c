//! Typed metadata over the key-value store (docs/metadata.md):
//!
//! ```text
//! /kafscale/{cluster}/cluster-id                     cluster id
//! /kafscale/{cluster}/topics/{topic}                 TopicRecord
//! /kafscale/{cluster}/partitions/{topic}/{p}         PartitionRecord (from the first claim on)
//! /kafscale/{cluster}/partitions/{topic}/{p}/owner   owning broker id (ephemeral)
//! /kafscale/{cluster}/brokers/{id}                   BrokerRecord (ephemeral)
//! /kafscale/{cluster}/deletions/{topic}              PendingDeletion (objects still to delete)
//! ```

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use uuid::Uuid;

use super::kv::{Compare, KeyValue, KvStore, MetaError, Op};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TopicRecord {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
    pub created_ms: i64,
}

/// Where an epoch's writes begin: the first offset written under `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EpochStart {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartitionRecord {
    pub leader_epoch: i32,
    pub epoch_history: Vec<EpochStart>,
    pub log_start_offset: i64,
    /// The committed end as of the last write of this record (a claim or a compaction): a
    /// lower bound of the committed end, which write-ahead manifests carry further (see
    /// `log::wal`).
    pub high_watermark: i64,
    /// Offsets from the log start up to here are in committed `.kfs` segments; the rest of the
    /// committed log is in write-ahead objects. Absent in records older brokers wrote, whose
    /// whole log was in segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_end: Option<i64>,
    /// The offset of the idempotent producers' state the last compaction stored (at or above
    /// `segment_end`; see `log::partition::idempotence`). None while no producer state is
    /// stored: the write-ahead runs above the segment end hold all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer_snapshot: Option<i64>,
    /// What the cleaner of a compacted topic made of the log's segments; None until its first
    /// cleaning (and on topics never compacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaned: Option<CleanedLog>,
}

/// The cleaned part of a compacted log (`log::cleaner`): the segments from the log start up to
/// `end` are those the last cleaning wrote, named with its `generation`; compaction's follow
/// from `end` to the segment end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CleanedLog {
    /// A fresh random number each cleaning: the objects of a cleaning that never committed (a
    /// crash, a fenced owner) never carry the name of committed ones.
    pub generation: u64,
    /// A segment boundary at or below the segment end.
    pub end: i64,
    /// Records from here on were not yet compared with later ones (Kafka's cleaner
    /// checkpoint): the last cleaning's offset map ended here. At most `end`.
    pub dirty_from: i64,
}

impl PartitionRecord {
    /// Where the committed segments end (see `segment_end`).
    pub(crate) fn segment_end(&self) -> i64 {
        self.segment_end.unwrap_or(self.high_watermark)
    }

    /// A partition nobody has claimed yet has no record (a topic of any size is one key): it
    /// is this, an empty log at epoch 0. Its first claim stores the record.
    pub(crate) fn empty() -> PartitionRecord {
        PartitionRecord {
            leader_epoch: 0,
            epoch_history: vec![EpochStart {
                epoch: 0,
                start_offset: 0,
            }],
            log_start_offset: 0,
            high_watermark: 0,
            segment_end: Some(0),
            producer_snapshot: None,
            cleaned: None,
        }
    }
}

/// A partition record together with the revision it was read or written at; commits are
/// conditioned on that revision, so a broker acting on stale state cannot commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionedPartition {
    pub record: PartitionRecord,
    pub revision: i64,
    /// Revision of this broker's owner key (0 if it does not own the partition): commits also
    /// require the key to be unchanged, so a broker whose lease expired cannot commit.
    pub owner_revision: i64,
    /// The metadata session the owner key was written under (0 without one): what this
    /// broker writes for the partition is committed in that session or not at all.
    pub session: u64,
}

impl VersionedPartition {
    /// A partition without a record (revision 0: claims require the key to be absent).
    #[cfg(test)]
    pub(crate) fn never_claimed() -> VersionedPartition {
        VersionedPartition {
            record: PartitionRecord::empty(),
            revision: 0,
            owner_revision: 0,
            session: 0,
        }
    }
}

/// A live broker, as registered under its session: `host` and `port` are its first
/// listener's advertised endpoint, `endpoints` every listener's (none in a record written
/// before listeners: that one has only PLAINTEXT).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BrokerRecord {
    pub id: i32,
    pub host: String,
    pub port: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    /// Kafka's `broker.rack`: the zone the broker runs in (consumers of the same rack read
    /// through it, KIP-392).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

/// Where clients that come in on listener `listener` reach a broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Endpoint {
    pub listener: String,
    pub host: String,
    pub port: i32,
}

impl BrokerRecord {
    /// The endpoint this broker advertises for `listener`; None if it has no such listener
    /// (every broker of a cluster should have the same listener names, as in Kafka).
    pub(crate) fn endpoint(&self, listener: &str) -> Option<(&str, i32)> {
        if self.endpoints.is_empty() {
            return (listener == "PLAINTEXT").then_some((self.host.as_str(), self.port));
        }
        let endpoint = self.endpoints.iter().find(|e| e.listener == listener)?;
        Some((endpoint.host.as_str(), endpoint.port))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PendingDeletion {
    pub topic: String,
    pub topic_id: Uuid,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CatalogError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{0}' is still being deleted; retry shortly")]
    TopicBeingDeleted(String),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("no topic has the id {0}")]
    UnknownTopicId(Uuid),
    /// A partition count a topic cannot grow to.
    #[error("topic '{topic}' has {current} partition{}; {reason}", if *current == 1 { "" } else { "s" })]
    PartitionCount {
        topic: String,
        current: i32,
        reason: String,
    },
    /// The partition record or its owner key changed under us: another writer owns it now.
    #[error("partition {0}-{1} changed under this broker (fenced)")]
    Fenced(String, i32),
    #[error(
        "broker id {0} is already registered by a live broker ({1}); give every broker its \
         own KAFSCALE_BROKER_ID"
    )]
    BrokerIdTaken(i32, String),
}

/// A partition to claim, and its record as the claimant last saw it.
#[derive(Debug, Clone)]
pub(crate) struct ClaimTarget {
    pub topic: String,
    pub partition: i32,
    /// `revision` 0: the partition has no record yet (`PartitionRecord::empty()`).
    pub current: VersionedPartition,
    /// The revision of the topic key as the claimant saw it. A claim requires it unchanged,
    /// so no partition of a topic deleted meanwhile is claimed (its records stay until its
    /// owners let go, see `delete_topic`).
    pub topic_revision: i64,
}

impl ClaimTarget {
    /// About how many bytes its claim adds to a transaction request.
    fn approximate_size(&self) -> usize {
        const PER_EPOCH: usize = 40;
        const KEYS_AND_FIELDS: usize = 200;
        KEYS_AND_FIELDS + 2 * self.topic.len() + PER_EPOCH * self.current.record.epoch_history.len()
    }
}

/// Request bytes a batched transaction stays under (etcd takes 1.5 MiB by default).
const MAX_TXN_BYTES: usize = 1 << 20;

pub(crate) struct Catalog {
    kv: Arc<dyn KvStore>,
    root: String,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A name as one key segment: `%` and `/` percent-encoded, so any name is one segment and
/// different names differ (users, ACL fields, transactional ids).
pub(crate) fn key_segment(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

/// The name a key segment of `key_segment` stands for.
pub(crate) fn segment_name(segment: &str) -> String {
    segment.replace("%2F", "/").replace("%25", "%")
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("metadata records serialize"))
}

fn parse<T: DeserializeOwned>(kv: &KeyValue) -> Result<T, MetaError> {
    serde_json::from_slice(&kv.value).map_err(|e| MetaError::Corrupt {
        key: kv.key.clone(),
        reason: e.to_string(),
    })
}

impl Catalog {
    pub(crate) fn new(kv: Arc<dyn KvStore>, cluster: &str) -> Catalog {
        Catalog {
            kv,
            root: Catalog::root_of(cluster),
        }
    }

    /// Where every key of the cluster named `cluster` lives.
    pub(crate) fn root_of(cluster: &str) -> String {
        format!("/kafscale/{cluster}")
    }

    pub(crate) fn describe(&self) -> String {
        format!("{} under {}", self.kv.describe(), self.root)
    }

    fn topic_key(&self, topic: &str) -> String {
        format!("{}/topics/{topic}", self.root)
    }

    pub(crate) fn partition_key(&self, topic: &str, partition: i32) -> String {
        format!("{}/partitions/{topic}/{partition}", self.root)
    }

    /// The key of a topic's record, for readers outside a broker.
    pub(crate) fn topic_record_key(cluster: &str, topic: &str) -> String {
        format!("{}/topics/{topic}", Catalog::root_of(cluster))
    }

    /// The prefix of a topic's partition records (readers outside a broker list it).
    pub(crate) fn partition_records_prefix(cluster: &str, topic: &str) -> String {
        format!("{}/partitions/{topic}/", Catalog::root_of(cluster))
    }

    pub(crate) fn owner_key(&self, topic: &str, partition: i32) -> String {
        format!("{}/partitions/{topic}/{partition}/owner", self.root)
    }

    fn broker_key(&self, id: i32) -> String {
        format!("{}/brokers/{id}", self.root)
    }

    /// The prefix under which all of this cluster's metadata lives.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// The prefix of the consumer groups' records, which the Python coordinator writes
    /// (through `GroupStore`) and nothing in the core reads.
    pub(crate) fn groups_root(&self) -> String {
        format!("{}/groups/", self.root)
    }

    /// The store underneath (for watching it).
    pub(crate) fn kv(&self) -> &Arc<dyn KvStore> {
        &self.kv
    }

    /// Registers this broker for as long as its session lives.
    pub(crate) async fn register_broker(&self, broker: &BrokerRecord) -> Result<(), CatalogError> {
        let key = self.broker_key(broker.id);
        let ops = vec![Op::PutEphemeral(key.clone(), encode(broker))];
        let compares = vec![Compare::ModRevision(key.clone(), 0)];
        if self.kv.txn(compares, ops).await?.is_some() {
            return Ok(());
        }
        let holder = match self.kv.get(&key).await? {
            Some(kv) => String::from_utf8_lossy(&kv.value).into_owned(),
            None => "it just left; retry".to_string(),
        };
        Err(CatalogError::BrokerIdTaken(broker.id, holder))
    }

    fn deletion_key(&self, topic: &str) -> String {
        format!("{}/deletions/{topic}", self.root)
    }

    /// The cluster id, created on first use.
    pub(crate) async fn cluster_id(&self) -> Result<String, MetaError> {
        let key = format!("{}/cluster-id", self.root);
        if let Some(kv) = self.kv.get(&key).await? {
            return Ok(String::from_utf8_lossy(&kv.value).into_owned());
        }
        let fresh = Uuid::new_v4().simple().to_string();
        let ops = vec![Op::Put(key.clone(), Bytes::from(fresh.clone()))];
        self.kv
            .txn(vec![Compare::ModRevision(key.clone(), 0)], ops)
            .await?;
        let stored = self.kv.get(&key).await?.expect("cluster id just written");
        Ok(String::from_utf8_lossy(&stored.value).into_owned())
    }

    #[cfg(test)]
    pub(crate) async fn topics(&self) -> Result<Vec<TopicRecord>, MetaError> {
        let prefix = format!("{}/topics/", self.root);
        self.kv
            .range(&prefix)
            .await?
            .kvs
            .iter()
            .map(parse)
            .collect()
    }

    /// Creates the topic: one key, whatever its partition count (partition records come with
    /// their first claim). Returns the record and revision.
    pub(crate) async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<(TopicRecord, i64), CatalogError> {
        if self.kv.get(&self.deletion_key(name)).await?.is_some() {
            return Err(CatalogError::TopicBeingDeleted(name.to_string()));
        }
        let record = TopicRecord {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions,
            configs,
            created_ms: now_ms(),
        };
        let ops = vec![Op::Put(self.topic_key(name), encode(&record))];
        let compares = vec![
            Compare::ModRevision(self.topic_key(name), 0),
            Compare::ModRevision(self.deletion_key(name), 0),
        ];
        match self.kv.txn(compares, ops).await? {
            Some(revision) => Ok((record, revision)),
            None => Err(CatalogError::TopicExists(name.to_string())),
        }
    }

    /// Replaces the topic's configs. Returns the new record and the revision.
    pub(crate) async fn alter_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(TopicRecord, i64), CatalogError> {
        self.update_topic(name, |record| {
            record.configs = configs.clone();
            Ok(())
        })
        .await
    }

    /// Grows the topic to `count` partitions (at most `max`): rewrites the topic key only, the
    /// new partitions' records come with their first claims. Returns the new record and the
    /// revision.
    pub(crate) async fn add_partitions(
        &self,
        name: &str,
        count: i32,
        max: i32,
    ) -> Result<(TopicRecord, i64), CatalogError> {
        self.update_topic(name, |record| {
            let current = record.partitions;
            let refused = |reason: String| CatalogError::PartitionCount {
                topic: name.to_string(),
                current,
                reason,
            };
            if count <= current {
                return Err(refused(format!(
                    "partitions can only be added: ask for more than {current} (got {count})"
                )));
            }
            if count > max {
                return Err(refused(format!(
                    "a topic can have at most {max} partitions (got {count})"
                )));
            }
            record.partitions = count;
            Ok(())
        })
        .await
    }

    /// Read, change and write back a topic record, conditioned on its revision: a concurrent
    /// change is read again and `change` applied to it.
    async fn update_topic(
        &self,
        name: &str,
        mut change: impl FnMut(&mut TopicRecord) -> Result<(), CatalogError>,
    ) -> Result<(TopicRecord, i64), CatalogError> {
        let key = self.topic_key(name);
        loop {
            let Some(kv) = self.kv.get(&key).await? else {
                return Err(CatalogError::UnknownTopic(name.to_string()));
            };
            let mut record: TopicRecord = parse(&kv)?;
            change(&mut record)?;
            let ops = vec![Op::Put(key.clone(), encode(&record))];
            let compares = vec![Compare::ModRevision(key.clone(), kv.mod_revision)];
            if let Some(revision) = self.kv.txn(compares, ops).await? {
                return Ok((record, revision));
            }
        }
    }

    /// Removes the topic from the metadata and records that its objects are still to be
    /// deleted. Returns the revision. With `id`, only the topic of that id goes: a topic
    /// re-created under the name since the caller looked the id up stays.
    ///
    /// The partitions' keys stay for now: an owner key is the right to write the partition's
    /// objects, and a compaction under way may still upload a segment. Each owner gives its
    /// key up once it has stopped writing; the caller then removes the partition keys
    /// (`remove_partition_keys`), deletes the objects and calls `finish_deletion`. Until then
    /// the name cannot be used again, so nothing of a new topic is at the objects' names.
    pub(crate) async fn delete_topic(
        &self,
        name: &str,
        id: Option<Uuid>,
    ) -> Result<i64, CatalogError> {
        let missing = || match id {
            Some(id) => CatalogError::UnknownTopicId(id),
            None => CatalogError::UnknownTopic(name.to_string()),
        };
        let Some(kv) = self.kv.get(&self.topic_key(name)).await? else {
            return Err(missing());
        };
        let record: TopicRecord = parse(&kv)?;
        if id.is_some_and(|id| id != record.id) {
            return Err(missing());
        }
        let pending = PendingDeletion {
            topic: name.to_string(),
            topic_id: record.id,
        };
        let ops = vec![
            Op::Delete(self.topic_key(name)),
            Op::Put(self.deletion_key(name), encode(&pending)),
        ];
        let compares = vec![Compare::ModRevision(self.topic_key(name), kv.mod_revision)];
        match self.kv.txn(compares, ops).await? {
            Some(revision) => Ok(revision),
            None => Err(missing()),
        }
    }

    pub(crate) async fn pending_deletions(&self) -> Result<Vec<PendingDeletion>, MetaError> {
        let prefix = format!("{}/deletions/", self.root);
        self.kv
            .range(&prefix)
            .await?
            .kvs
            .iter()
            .map(parse)
            .collect()
    }

    /// The prefix of a topic's partition records and owner keys.
    pub(crate) fn partitions_prefix(&self, topic: &str) -> String {
        format!("{}/partitions/{topic}/", self.root)
    }

    /// Removes a deleted topic's partition records, once no owner key is left among them.
    pub(crate) async fn remove_partition_keys(&self, topic: &str) -> Result<(), MetaError> {
        let prefix = self.partitions_prefix(topic);
        self.kv.txn(vec![], vec![Op::DeletePrefix(prefix)]).await?;
        Ok(())
    }

    pub(crate) async fn finish_deletion(&self, topic: &str) -> Result<(), MetaError> {
        self.kv
            .txn(vec![], vec![Op::Delete(self.deletion_key(topic))])
            .await?;
        Ok(())
    }

    pub(crate) async fn partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<VersionedPartition>, MetaError> {
        let Some(kv) = self.kv.get(&self.partition_key(topic, partition)).await? else {
            return Ok(None);
        };
        Ok(Some(VersionedPartition {
            record: parse(&kv)?,
            revision: kv.mod_revision,
            owner_revision: 0,
            session: 0,
        }))
    }

    #[cfg(test)]
    /// Takes over writing a partition: creates its owner key under this broker's session and
    /// starts a new leader epoch at the committed end, in one transaction. Fails with `Fenced`
    /// while another broker still owns it.
    pub(crate) async fn claim_partition(
        &self,
        topic: &str,
        partition: i32,
        broker_id: i32,
    ) -> Result<VersionedPartition, CatalogError> {
        let unknown = || CatalogError::UnknownTopic(topic.to_string());
        let topic_kv = self
            .kv
            .get(&self.topic_key(topic))
            .await?
            .ok_or_else(unknown)?;
        let record: TopicRecord = parse(&topic_kv)?;
        if !(0..record.partitions).contains(&partition) {
            return Err(unknown());
        }
        let current = self
            .partition(topic, partition)
            .await?
            .unwrap_or_else(VersionedPartition::never_claimed);
        let target = ClaimTarget {
            topic: topic.to_string(),
            partition,
            current,
            topic_revision: topic_kv.mod_revision,
        };
        match self.claim_partitions(&[target], broker_id).await? {
            Some(mut claimed) => Ok(claimed.remove(0)),
            None => Err(CatalogError::Fenced(topic.to_string(), partition)),
        }
    }

    /// Claims every target in one transaction, all or none (see `claim_partition`): each
    /// target's owner key must be absent and its record unchanged since `current` – or still
    /// absent, and then its topic key unchanged too (one compare per topic). Returns the
    /// claimed states in the order of `targets`, or None if any target failed its check
    /// (nothing was written). Callers split their work with `claim_batches`.
    pub(crate) async fn claim_partitions(
        &self,
        targets: &[ClaimTarget],
        broker_id: i32,
    ) -> Result<Option<Vec<VersionedPartition>>, CatalogError> {
        let owner_value = Bytes::from(broker_id.to_string());
        // The owner keys are ephemeral: they belong to the session they are written under.
        let session = *self.kv.session().borrow();
        let mut compares = vec![Compare::Session(session)];
        let mut ops = Vec::with_capacity(targets.len() * 2);
        let mut records = Vec::with_capacity(targets.len());
        let mut topics_checked = HashSet::new();
        for target in targets {
            // The topic as the claimer saw it: a deleted topic keeps its partition records
            // until its owners let go (see `delete_topic`), and none may be claimed again.
            if topics_checked.insert(target.topic.as_str()) {
                let topic = self.topic_key(&target.topic);
                compares.push(Compare::ModRevision(topic, target.topic_revision));
            }
            let mut record = target.current.record.clone();
            record.leader_epoch += 1;
            record.epoch_history.push(EpochStart {
                epoch: record.leader_epoch,
                start_offset: record.high_watermark,
            });
            let key = self.partition_key(&target.topic, target.partition);
            let owner = self.owner_key(&target.topic, target.partition);
            compares.push(Compare::ModRevision(key.clone(), target.current.revision));
            compares.push(Compare::ModRevision(owner.clone(), 0));
            ops.push(Op::Put(key, encode(&record)));
            ops.push(Op::PutEphemeral(owner, owner_value.clone()));
            records.push(record);
        }
        let Some(revision) = self.kv.txn(compares, ops).await? else {
            return Ok(None);
        };
        let claimed = records.into_iter().map(|record| VersionedPartition {
            record,
            revision,
            owner_revision: revision,
            session,
        });
        Ok(Some(claimed.collect()))
    }

    /// Splits claims into transactions the store takes: at most its operation limit of
    /// compares and of ops (two of each per claim, and a compare per topic) and about
    /// `MAX_TXN_BYTES` of records each.
    pub(crate) fn claim_batches<T>(
        &self,
        claims: Vec<T>,
        target: impl Fn(&T) -> &ClaimTarget,
    ) -> Vec<Vec<T>> {
        let max_ops = self.kv.max_txn_ops().max(3);
        let mut batches: Vec<Vec<T>> = Vec::new();
        let (mut bytes, mut compares) = (0, 0);
        let mut topics_checked: HashSet<String> = HashSet::new();
        for claim in claims {
            let (size, topic) = {
                let claimed = target(&claim);
                (claimed.approximate_size(), claimed.topic.clone())
            };
            let topic_compare = !topics_checked.contains(&topic);
            let fits = |batch: &Vec<T>| {
                2 * (batch.len() + 1) <= max_ops
                    && compares + 2 + usize::from(topic_compare) <= max_ops
                    && bytes + size <= MAX_TXN_BYTES
            };
            match batches.last_mut() {
                Some(batch) if fits(batch) => batch.push(claim),
                _ => {
                    (bytes, compares) = (0, 0);
                    topics_checked.clear();
                    batches.push(vec![claim]);
                }
            }
            bytes += size;
            compares += 2 + usize::from(topics_checked.insert(topic));
        }
        batches
    }

    /// Gives a partition up (graceful hand-off): removes the owner key if it is still ours.
    pub(crate) async fn release_partition(
        &self,
        topic: &str,
        partition: i32,
        owned: &VersionedPartition,
    ) -> Result<(), CatalogError> {
        self.release_owner_key(topic, partition, owned.owner_revision)
            .await
    }

    /// Removes the partition's owner key if it is still the one written at `owner_revision`.
    pub(crate) async fn release_owner_key(
        &self,
        topic: &str,
        partition: i32,
        owner_revision: i64,
    ) -> Result<(), CatalogError> {
        let owner = self.owner_key(topic, partition);
        let compares = vec![Compare::ModRevision(owner.clone(), owner_revision)];
        match self.kv.txn(compares, vec![Op::Delete(owner)]).await? {
            Some(_) => Ok(()),
            None => Err(CatalogError::Fenced(topic.to_string(), partition)),
        }
    }

    /// Removes owner keys of `topic`, each if it is still the one written at its revision, as
    /// many per transaction as the store takes. A transaction refused because one key moved is
    /// split until that key stands alone (and is left: it is not ours any more).
    pub(crate) async fn release_owner_keys(
        &self,
        topic: &str,
        owned: Vec<(i32, i64)>,
    ) -> Result<(), MetaError> {
        let per_txn = self.kv.max_txn_ops().max(1);
        let mut work: Vec<Vec<(i32, i64)>> = owned.chunks(per_txn).map(<[_]>::to_vec).collect();
        while let Some(mut chunk) = work.pop() {
            let keys = chunk
                .iter()
                .map(|&(p, revision)| (self.owner_key(topic, p), revision));
            let (compares, ops) = keys
                .map(|(key, revision)| {
                    (Compare::ModRevision(key.clone(), revision), Op::Delete(key))
                })
                .unzip();
            if self.kv.txn(compares, ops).await?.is_none() && chunk.len() > 1 {
                let second = chunk.split_off(chunk.len() / 2);
                work.push(second);
                work.push(chunk);
            }
        }
        Ok(())
    }

    /// Moves the log start forward (retention), under the same fencing as a commit.
    pub(crate) async fn commit_log_start(
        &self,
        topic: &str,
        partition: i32,
        current: &VersionedPartition,
        log_start_offset: i64,
    ) -> Result<VersionedPartition, CatalogError> {
        let mut record = current.record.clone();
        record.log_start_offset = log_start_offset;
        self.swap_partition(topic, partition, current, record).await
    }

    /// Replaces the cleaned part of the log (an owner's cleaning), fenced like every change.
    pub(crate) async fn commit_cleaning(
        &self,
        topic: &str,
        partition: i32,
        current: &VersionedPartition,
        cleaned: CleanedLog,
    ) -> Result<VersionedPartition, CatalogError> {
        let mut record = current.record.clone();
        record.cleaned = Some(cleaned);
        self.swap_partition(topic, partition, current, record).await
    }

    async fn swap_partition(
        &self,
        topic: &str,
        partition: i32,
        current: &VersionedPartition,
        record: PartitionRecord,
    ) -> Result<VersionedPartition, CatalogError> {
        let key = self.partition_key(topic, partition);
        let mut compares = vec![Compare::ModRevision(key.clone(), current.revision)];
        if current.owner_revision != 0 {
            let owner = self.owner_key(topic, partition);
            compares.push(Compare::ModRevision(owner, current.owner_revision));
        }
        let ops = vec![Op::Put(key, encode(&record))];
        match self.kv.txn(compares, ops).await? {
            Some(revision) => Ok(VersionedPartition {
                record,
                revision,
                owner_revision: current.owner_revision,
                session: current.session,
            }),
            None => Err(CatalogError::Fenced(topic.to_string(), partition)),
        }
    }
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
