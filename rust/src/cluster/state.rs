//! The cluster as the metadata store describes it, kept in step with the in-memory mirror key
//! by key: live brokers, topics, partition records and their owners. Metadata requests and
//! the ownership reconciler read it without touching the store. Published copies share
//! everything that did not change (per-topic partition tables behind `Arc`s), so applying a
//! change costs the size of one topic, not of the cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::meta::catalog::{BrokerRecord, PartitionRecord, TopicRecord};
use crate::meta::kv::KeyValue;

use super::assignment::{coordinator_of, transaction_coordinator_of};
use super::placement::{Placement, TopicShape};

/// One partition as the store has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PartitionView {
    pub record: Option<PartitionRecord>,
    /// Revision of the partition record (0 if missing).
    pub revision: i64,
    /// The owning broker and the revision of its owner key.
    pub owner: Option<(i32, i64)>,
}

/// The view of a partition the store has no key of: never claimed, an empty log.
static NEVER_CLAIMED: PartitionView = PartitionView {
    record: None,
    revision: 0,
    owner: None,
};

/// A topic's partitions by id; None where the store has no key of that partition.
type PartitionTable = Vec<Option<Arc<PartitionView>>>;

#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterState {
    /// The store revision this state reflects.
    pub revision: i64,
    pub brokers: BTreeMap<i32, BrokerRecord>,
    pub topics: Arc<BTreeMap<String, TopicRecord>>,
    /// The store revision of each topic's key (every claim is conditioned on it).
    topic_revisions: Arc<HashMap<String, i64>>,
    partitions: Arc<HashMap<String, Arc<PartitionTable>>>,
    /// Who should own each partition, for the topics and live brokers as of the last
    /// `refresh_placement`.
    placement: Arc<Placement>,
}

/// What one key change was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touched {
    Broker,
    Topic(String),
    /// A partition's record (log start, epochs, ...).
    Partition(String, i32),
    /// A partition's owner key.
    Owner(String, i32),
    /// Another kind of key (cluster id, pending deletions), or one that does not parse.
    Other,
}

impl ClusterState {
    /// Builds the state from every key under `root` (records that do not parse are skipped
    /// with a warning: one corrupt key must not take the whole cluster view down).
    pub(crate) fn from_entries<'a>(
        root: &str,
        revision: i64,
        entries: impl IntoIterator<Item = &'a KeyValue>,
    ) -> ClusterState {
        let mut state = ClusterState {
            revision,
            ..Default::default()
        };
        for kv in entries {
            state.apply(root, &kv.key, Some(kv));
        }
        state.refresh_placement();
        state
    }

    /// Places the partitions again after topics, live brokers or owners changed (`apply`
    /// leaves that to its caller, once per batch of changes); the topics whose placement
    /// changed.
    pub(crate) fn refresh_placement(&mut self) -> Vec<String> {
        let live = |owner: Option<(i32, i64)>| {
            owner
                .map(|(id, _)| id)
                .filter(|id| self.brokers.contains_key(id))
        };
        let shapes: Vec<TopicShape<'_>> = self
            .topics
            .values()
            .map(|t| {
                let table = self.partitions.get(&t.name);
                TopicShape {
                    name: &t.name,
                    owners: (0..t.partitions.max(0) as usize)
                        .map(|id| live(table.and_then(|t| t.get(id)?.as_ref()?.owner)))
                        .collect(),
                }
            })
            .collect();
        let (placement, moved) = self.placement.recompute(&shapes, &self.live_brokers());
        self.placement = Arc::new(placement);
        moved
    }

    /// Takes in the current value of one key under `root` (None: deleted).
    pub(crate) fn apply(&mut self, root: &str, key: &str, value: Option<&KeyValue>) -> Touched {
        let Some(path) = key.strip_prefix(root).and_then(|p| p.strip_prefix('/')) else {
            return Touched::Other;
        };
        let parts: Vec<&str> = path.split('/').collect();
        let touched = match parts.as_slice() {
            ["brokers", id] => id.parse().ok().map(|id: i32| {
                match value.and_then(|kv| parse::<BrokerRecord>(key, kv)) {
                    Some(record) => self.brokers.insert(id, record),
                    None => self.brokers.remove(&id),
                };
                Touched::Broker
            }),
            ["topics", name] => {
                let topics = Arc::make_mut(&mut self.topics);
                let revisions = Arc::make_mut(&mut self.topic_revisions);
                match value.and_then(|kv| parse::<TopicRecord>(key, kv).zip(Some(kv))) {
                    Some((record, kv)) => {
                        topics.insert((*name).to_string(), record);
                        revisions.insert((*name).to_string(), kv.mod_revision);
                    }
                    None => {
                        topics.remove(*name);
                        revisions.remove(*name);
                    }
                };
                Some(Touched::Topic((*name).to_string()))
            }
            ["partitions", topic, p] => partition_id(p).map(|id| {
                let record = value.and_then(|kv| parse::<PartitionRecord>(key, kv));
                let revision = value
                    .filter(|_| record.is_some())
                    .map_or(0, |kv| kv.mod_revision);
                self.update_view(topic, id, |view| {
                    view.record = record;
                    view.revision = revision;
                });
                Touched::Partition((*topic).to_string(), id)
            }),
            ["partitions", topic, p, "owner"] => partition_id(p).map(|id| {
                let owner = value.and_then(|kv| {
                    let owner = std::str::from_utf8(&kv.value).ok()?.parse().ok();
                    if owner.is_none() {
                        warn_unparsed(key);
                    }
                    Some((owner?, kv.mod_revision))
                });
                self.update_view(topic, id, |view| view.owner = owner);
                Touched::Owner((*topic).to_string(), id)
            }),
            _ => None,
        };
        touched.unwrap_or(Touched::Other)
    }

    fn update_view(&mut self, topic: &str, id: i32, change: impl FnOnce(&mut PartitionView)) {
        let tables = Arc::make_mut(&mut self.partitions);
        let table = Arc::make_mut(tables.entry(topic.to_string()).or_default());
        let index = id as usize;
        if table.len() <= index {
            table.resize(index + 1, None);
        }
        let mut view = table[index].as_deref().cloned().unwrap_or_default();
        change(&mut view);
        if view != PartitionView::default() {
            table[index] = Some(Arc::new(view));
            return;
        }
        // Trailing empty entries go, and a topic without keys with them (as when it is
        // deleted), each entry once: deleting a big topic key by key stays linear.
        table[index] = None;
        while matches!(table.last(), Some(None)) {
            table.pop();
        }
        if table.is_empty() {
            tables.remove(topic);
        }
    }

    pub(crate) fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionView> {
        let index = usize::try_from(partition).ok()?;
        self.partitions.get(topic)?.get(index)?.as_deref()
    }

    /// The partition as the store has it; a partition it has no key of (yet) is an empty log
    /// nobody owns. Only meaningful for partitions of an existing topic.
    pub(crate) fn view(&self, topic: &str, partition: i32) -> &PartitionView {
        self.partition(topic, partition).unwrap_or(&NEVER_CLAIMED)
    }

    /// The revision of the topic's key (None: no such topic).
    pub(crate) fn topic_revision(&self, topic: &str) -> Option<i64> {
        self.topic_revisions.get(topic).copied()
    }

    /// Every partition of every topic, with or without keys in the store.
    pub(crate) fn partitions(&self) -> impl Iterator<Item = (&str, i32, &PartitionView)> {
        self.topics.iter().flat_map(move |(name, record)| {
            let table = self.partitions.get(name);
            (0..record.partitions).map(move |id| {
                let view = table.and_then(|t| t.get(id as usize)?.as_deref());
                (name.as_str(), id, view.unwrap_or(&NEVER_CLAIMED))
            })
        })
    }

    /// Partitions of existing topics that no live broker owns (never claimed yet, or the
    /// owner key names a broker that is gone).
    pub(crate) fn partitions_without_owner(&self) -> usize {
        let live = |id: &i32| self.brokers.contains_key(id);
        self.partitions()
            .filter(|(_, _, view)| !view.owner.is_some_and(|(id, _)| live(&id)))
            .count()
    }

    pub(crate) fn live_brokers(&self) -> Vec<i32> {
        self.brokers.keys().copied().collect()
    }

    /// The broker that should own the partition, given who is alive now.
    pub(crate) fn assigned_owner(&self, topic: &str, partition: i32) -> Option<i32> {
        self.placement.owner(topic, partition)
    }

    /// The live broker that coordinates consumer group `group_id`.
    pub(crate) fn coordinator(&self, group_id: &str) -> Option<&BrokerRecord> {
        coordinator_of(group_id, &self.live_brokers()).and_then(|id| self.brokers.get(&id))
    }

    /// The live broker that coordinates `transactional_id`'s transactions.
    pub(crate) fn transaction_coordinator(&self, transactional_id: &str) -> Option<&BrokerRecord> {
        transaction_coordinator_of(transactional_id, &self.live_brokers())
            .and_then(|id| self.brokers.get(&id))
    }

    /// Who clients should send writes to: the current owner if it is alive, otherwise the
    /// broker about to claim it (it answers NOT_LEADER_OR_FOLLOWER until it has).
    pub(crate) fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        match self.partition(topic, partition).and_then(|v| v.owner) {
            Some((owner, _)) if self.brokers.contains_key(&owner) => Some(owner),
            _ => self.assigned_owner(topic, partition),
        }
    }

    /// The partition's leader epoch; 0 before its first claim (`PartitionRecord::empty`).
    pub(crate) fn leader_epoch(&self, topic: &str, partition: i32) -> i32 {
        self.partition(topic, partition)
            .and_then(|v| v.record.as_ref())
            .map_or(0, |r| r.leader_epoch)
    }
}

fn partition_id(text: &str) -> Option<i32> {
    text.parse().ok()
}

/// The record in `kv`, or None with a warning (a record that does not parse counts as absent).
fn parse<T: serde::de::DeserializeOwned>(key: &str, kv: &KeyValue) -> Option<T> {
    let parsed = serde_json::from_slice(&kv.value).ok();
    if parsed.is_none() {
        warn_unparsed(key);
    }
    parsed
}

fn warn_unparsed(key: &str) {
    tracing::warn!(key, "skipping a metadata record that does not parse");
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn kv(key: &str, value: &str, revision: i64) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: Bytes::from(value.to_string()),
            mod_revision: revision,
        }
    }

    #[test]
    fn parses_brokers_topics_partitions_and_owners() {
        let record =
            r#"{"leader_epoch":3,"epoch_history":[],"log_start_offset":0,"high_watermark":9}"#;
        let topic = r#"{"name":"t","id":"00000000-0000-0000-0000-000000000001","partitions":2,"configs":{},"created_ms":0}"#;
        let entries = [
            kv("/k/ns/brokers/1", r#"{"id":1,"host":"h","port":9}"#, 2),
            kv("/k/ns/topics/t", topic, 3),
            kv("/k/ns/partitions/t/0", record, 5),
            kv("/k/ns/partitions/t/0/owner", "1", 5),
            kv("/k/ns/partitions/t/1", record, 6),
            kv("/k/ns/partitions/t/1/owner", "7", 6),
            kv("/k/ns/partitions/t/x", "garbage", 6),
        ];
        let state = ClusterState::from_entries("/k/ns", 9, &entries);
        assert_eq!(state.live_brokers(), vec![1]);
        let view = state.partition("t", 0).unwrap();
        assert_eq!(view.owner, Some((1, 5)));
        assert_eq!(view.record.as_ref().unwrap().high_watermark, 9);
        assert_eq!(state.leader("t", 0), Some(1));
        // an owner that is not alive any more is not reported; the next one is
        assert_eq!(state.leader("t", 1), Some(1));
        assert_eq!(state.leader_epoch("t", 1), 3);
        assert_eq!(state.coordinator("any group").map(|b| b.port), Some(9));
        assert!(ClusterState::default().coordinator("any group").is_none());
    }

    #[test]
    fn partitions_without_keys_are_empty_logs_of_their_topic() {
        let topic = r#"{"name":"t","id":"00000000-0000-0000-0000-000000000001","partitions":3,"configs":{},"created_ms":0}"#;
        let record =
            r#"{"leader_epoch":2,"epoch_history":[],"log_start_offset":0,"high_watermark":4}"#;
        let entries = [
            kv("/k/ns/brokers/1", r#"{"id":1,"host":"h","port":9}"#, 1),
            kv("/k/ns/topics/t", topic, 2),
            kv("/k/ns/partitions/t/1", record, 5),
        ];
        let state = ClusterState::from_entries("/k/ns", 5, &entries);
        let listed: Vec<_> = state
            .partitions()
            .map(|(t, id, view)| (t.to_string(), id, view.revision))
            .collect();
        let expected = [
            ("t".to_string(), 0, 0),
            ("t".to_string(), 1, 5),
            ("t".to_string(), 2, 0),
        ];
        assert_eq!(listed, expected);
        assert_eq!(state.view("t", 2), &PartitionView::default());
        assert_eq!(
            (state.leader_epoch("t", 2), state.leader_epoch("t", 1)),
            (0, 2)
        );
        assert_eq!(state.leader("t", 2), Some(1));
        assert_eq!(state.partitions_without_owner(), 3);
        let mut state = state;
        state.apply(
            "/k/ns",
            "/k/ns/partitions/t/0/owner",
            Some(&kv("/k/ns/partitions/t/0/owner", "1", 6)),
        );
        state.apply(
            "/k/ns",
            "/k/ns/partitions/t/1/owner",
            Some(&kv("/k/ns/partitions/t/1/owner", "7", 7)),
        );
        assert_eq!(state.partitions_without_owner(), 2, "broker 7 is not alive");
        assert_eq!(state.topic_revision("t"), Some(2));
        assert_eq!(state.topic_revision("u"), None);
    }

    #[test]
    fn changes_apply_key_by_key_and_published_copies_keep_theirs() {
        let record =
            r#"{"leader_epoch":1,"epoch_history":[],"log_start_offset":0,"high_watermark":0}"#;
        let topic = r#"{"name":"t","id":"00000000-0000-0000-0000-000000000001","partitions":2,"configs":{},"created_ms":0}"#;
        let entries = [
            kv("/k/ns/brokers/1", r#"{"id":1,"host":"h","port":9}"#, 1),
            kv("/k/ns/topics/t", topic, 2),
            kv("/k/ns/partitions/t/0", record, 2),
            kv("/k/ns/partitions/t/1", record, 2),
        ];
        let mut state = ClusterState::from_entries("/k/ns", 2, &entries);
        let published = state.clone();
        let owner = kv("/k/ns/partitions/t/1/owner", "1", 3);
        let touched = state.apply("/k/ns", &owner.key, Some(&owner));
        assert_eq!(touched, Touched::Owner("t".into(), 1));
        assert_eq!(state.partition("t", 1).unwrap().owner, Some((1, 3)));
        assert_eq!(published.partition("t", 1).unwrap().owner, None);
        assert_eq!(
            state.apply("/k/ns", "/k/ns/brokers/2", None),
            Touched::Broker
        );
        assert_eq!(
            state.apply("/k/ns", "/k/ns/cluster-id", None),
            Touched::Other
        );
        assert_eq!(
            state.apply("/k/ns", "/other/topics/t", None),
            Touched::Other
        );
        // deleting a topic's keys leaves nothing behind
        assert_eq!(
            state.apply("/k/ns", "/k/ns/topics/t", None),
            Touched::Topic("t".into())
        );
        for key in [
            "/k/ns/partitions/t/0",
            "/k/ns/partitions/t/1",
            "/k/ns/partitions/t/1/owner",
        ] {
            state.apply("/k/ns", key, None);
        }
        assert!(state.topics.is_empty());
        assert_eq!(state.partitions().count(), 0);
        assert_eq!(published.partitions().count(), 2);
        assert_eq!(published.topics.len(), 1);
    }
}
