//! The cluster as the metadata store describes it, rebuilt from the in-memory mirror whenever
//! it changes: live brokers, topics, partition records and their owners. Metadata requests and
//! the ownership reconciler read it without touching the store.

use std::collections::{BTreeMap, HashMap};

use crate::meta::catalog::{BrokerRecord, PartitionRecord, TopicRecord};
use crate::meta::kv::KeyValue;

use super::assignment::{coordinator_of, owner_of};

/// One partition as the store has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionView {
    pub record: Option<PartitionRecord>,
    /// Revision of the partition record (0 if missing).
    pub revision: i64,
    /// The owning broker and the revision of its owner key.
    pub owner: Option<(i32, i64)>,
}

#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    /// The store revision this state reflects.
    pub revision: i64,
    pub brokers: BTreeMap<i32, BrokerRecord>,
    pub topics: BTreeMap<String, TopicRecord>,
    pub partitions: HashMap<(String, i32), PartitionView>,
}

impl ClusterState {
    /// Builds the state from every key under `root` (records that do not parse are skipped
    /// with a warning: one corrupt key must not take the whole cluster view down).
    pub fn from_entries<'a>(
        root: &str,
        revision: i64,
        entries: impl IntoIterator<Item = &'a KeyValue>,
    ) -> ClusterState {
        let mut state = ClusterState {
            revision,
            ..Default::default()
        };
        let prefix = format!("{root}/");
        for kv in entries {
            let Some(path) = kv.key.strip_prefix(&prefix) else {
                continue;
            };
            let parts: Vec<&str> = path.split('/').collect();
            let parsed = match parts.as_slice() {
                ["brokers", _] => parse::<BrokerRecord>(kv).map(|b| {
                    state.brokers.insert(b.id, b);
                }),
                ["topics", name] => parse::<TopicRecord>(kv).map(|t| {
                    state.topics.insert((*name).to_string(), t);
                }),
                ["partitions", topic, p] => partition_id(p).and_then(|p| {
                    let record = parse::<PartitionRecord>(kv)?;
                    let view = state.view_mut(topic, p);
                    view.record = Some(record);
                    view.revision = kv.mod_revision;
                    Some(())
                }),
                ["partitions", topic, p, "owner"] => partition_id(p).and_then(|p| {
                    let owner = std::str::from_utf8(&kv.value).ok()?.parse().ok()?;
                    state.view_mut(topic, p).owner = Some((owner, kv.mod_revision));
                    Some(())
                }),
                _ => Some(()),
            };
            if parsed.is_none() {
                tracing::warn!(
                    key = kv.key,
                    "skipping a metadata record that does not parse"
                );
            }
        }
        state
    }

    fn view_mut(&mut self, topic: &str, partition: i32) -> &mut PartitionView {
        self.partitions
            .entry((topic.to_string(), partition))
            .or_default()
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionView> {
        self.partitions.get(&(topic.to_string(), partition))
    }

    pub fn live_brokers(&self) -> Vec<i32> {
        self.brokers.keys().copied().collect()
    }

    /// The broker that should own the partition, given who is alive now.
    pub fn assigned_owner(&self, topic: &str, partition: i32) -> Option<i32> {
        owner_of(topic, partition, &self.live_brokers())
    }

    /// The live broker that coordinates consumer group `group_id`.
    pub fn coordinator(&self, group_id: &str) -> Option<&BrokerRecord> {
        coordinator_of(group_id, &self.live_brokers()).and_then(|id| self.brokers.get(&id))
    }

    /// Who clients should send writes to: the current owner if it is alive, otherwise the
    /// broker about to claim it (it answers NOT_LEADER_OR_FOLLOWER until it has).
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        match self.partition(topic, partition).and_then(|v| v.owner) {
            Some((owner, _)) if self.brokers.contains_key(&owner) => Some(owner),
            _ => self.assigned_owner(topic, partition),
        }
    }

    pub fn leader_epoch(&self, topic: &str, partition: i32) -> i32 {
        self.partition(topic, partition)
            .and_then(|v| v.record.as_ref())
            .map_or(-1, |r| r.leader_epoch)
    }
}

fn partition_id(text: &str) -> Option<i32> {
    text.parse().ok()
}

fn parse<T: serde::de::DeserializeOwned>(kv: &KeyValue) -> Option<T> {
    serde_json::from_slice(&kv.value).ok()
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
        let entries = [
            kv("/k/ns/brokers/1", r#"{"id":1,"host":"h","port":9}"#, 2),
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
}
