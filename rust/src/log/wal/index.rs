//! Every committed write-ahead run in the cluster, by partition: what the read path serves
//! above a partition's segments, what a claim takes the committed end from, and what
//! compaction and the object sweep work through. Kept in step with the manifests in the
//! metadata store (the mirror's changes), and at once with this broker's own commits.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use uuid::Uuid;

use crate::meta::wal::{WalManifest, WalRun};

/// A run and the object it lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexedRun {
    pub object: Arc<str>,
    pub created_ms: i64,
    pub run: WalRun,
    /// It holds a transaction's batches or markers.
    pub transactional: bool,
}

impl IndexedRun {
    /// The cache key of the run's bytes.
    pub(crate) fn cache_key(&self) -> String {
        run_cache_key(&self.object, self.run.position)
    }
}

/// The cache key of the run at `position` of write-ahead object `object`: the writer caches
/// what it uploads under it, the read path looks it up.
pub(crate) fn run_cache_key(object: &str, position: u64) -> String {
    format!("{object}@{position}")
}

/// A partition of a topic incarnation.
pub(crate) type PartitionKey = (Uuid, i32);

#[derive(Default)]
struct Inner {
    partitions: HashMap<PartitionKey, BTreeMap<i64, IndexedRun>>,
    manifests: HashMap<String, Arc<WalManifest>>,
}

impl Inner {
    fn insert(&mut self, key: &str, manifest: WalManifest) -> Vec<Extended> {
        if self.manifests.contains_key(key) {
            return Vec::new();
        }
        let object: Arc<str> = manifest.object.as_str().into();
        let mut extended = Vec::new();
        for topic in &manifest.topics {
            for run in &topic.runs {
                let runs = self
                    .partitions
                    .entry((topic.id, run.partition))
                    .or_default();
                let indexed = IndexedRun {
                    object: object.clone(),
                    created_ms: manifest.created_ms,
                    run: *run,
                    transactional: topic.transactional.contains(&run.partition),
                };
                runs.insert(run.base_offset, indexed);
                extended.push(Extended {
                    topic: topic.topic.clone(),
                    topic_id: topic.id,
                    partition: run.partition,
                    end: run.last_offset + 1,
                });
            }
        }
        self.manifests.insert(key.to_string(), Arc::new(manifest));
        extended
    }

    fn remove(&mut self, key: &str) {
        let Some(manifest) = self.manifests.remove(key) else {
            return;
        };
        for topic in &manifest.topics {
            let id = topic.id;
            for run in &topic.runs {
                let Some(runs) = self.partitions.get_mut(&(id, run.partition)) else {
                    continue;
                };
                if runs
                    .get(&run.base_offset)
                    .is_some_and(|r| *r.object == *manifest.object)
                {
                    runs.remove(&run.base_offset);
                }
                if runs.is_empty() {
                    self.partitions.remove(&(id, run.partition));
                }
            }
        }
    }
}

/// A partition whose committed end moved with a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extended {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub end: i64,
}

#[derive(Default)]
pub(crate) struct WalIndex {
    inner: RwLock<Inner>,
}

impl WalIndex {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in a committed manifest (again: a no-op). Returns the partitions it extends.
    pub(crate) fn insert(&self, key: &str, manifest: WalManifest) -> Vec<Extended> {
        self.write().insert(key, manifest)
    }

    /// Forgets a manifest that was deleted (its runs live in segments by now).
    pub(crate) fn remove(&self, key: &str) {
        self.write().remove(key);
    }

    /// Replaces everything with the manifests listed now (the mirror was read afresh). The
    /// new index is built aside and swapped in whole: a reader in between (a claim taking a
    /// partition's committed end) sees the old index or the new one, never a part of it.
    pub(crate) fn replace_all(&self, manifests: impl IntoIterator<Item = (String, WalManifest)>) {
        let mut replaced = Inner::default();
        for (key, manifest) in manifests {
            replaced.insert(&key, manifest);
        }
        *self.write() = replaced;
    }

    /// One past the last offset of the partition's last committed run, if it has any.
    pub(crate) fn committed_end(&self, partition: PartitionKey) -> Option<i64> {
        let inner = self.read();
        let runs = inner.partitions.get(&partition)?;
        runs.values().next_back().map(|r| r.run.last_offset + 1)
    }

    /// The partitions with runs in the index: the only ones compaction has anything to do for.
    pub(crate) fn partitions_with_runs(&self) -> Vec<PartitionKey> {
        self.read().partitions.keys().copied().collect()
    }

    /// The partition's runs that hold offsets at or above `offset`, in offset order.
    pub(crate) fn runs_from(&self, partition: PartitionKey, offset: i64) -> Vec<IndexedRun> {
        let inner = self.read();
        let Some(runs) = inner.partitions.get(&partition) else {
            return Vec::new();
        };
        let first = runs
            .range(..=offset)
            .next_back()
            .filter(|(_, r)| r.run.last_offset >= offset)
            .map_or(offset, |(base, _)| *base);
        runs.range(first..).map(|(_, r)| r.clone()).collect()
    }

    /// Whether the partition's runs from `offset` on are known to hold no transaction's
    /// batches or markers: none is transactional and they follow each other without a gap from
    /// `offset` on (a gap at the start: the caller's `offset`, a segment end, is older than the
    /// runs the index still has; one between: a manifest not seen yet).
    pub(crate) fn free_of_transactions_from(&self, partition: PartitionKey, offset: i64) -> bool {
        let mut next = offset;
        for indexed in self.runs_from(partition, offset) {
            if indexed.transactional || indexed.run.base_offset > next {
                return false;
            }
            next = indexed.run.last_offset + 1;
        }
        true
    }

    /// Every committed manifest, by key.
    pub(crate) fn manifests(&self) -> Vec<(String, Arc<WalManifest>)> {
        let inner = self.read();
        let all = inner.manifests.iter();
        all.map(|(k, m)| (k.clone(), m.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::wal::TopicRuns;

    fn manifest(object: &str, id: Uuid, runs: &[(i32, i64, i64)]) -> WalManifest {
        let runs = runs
            .iter()
            .map(|&(partition, base_offset, last_offset)| WalRun {
                partition,
                leader_epoch: 1,
                base_offset,
                last_offset,
                position: 24,
                length: 10,
                max_timestamp: 0,
            });
        WalManifest {
            object: object.into(),
            broker: 0,
            created_ms: 1,
            size: 100,
            topics: vec![TopicRuns {
                topic: "t".into(),
                id,
                runs: runs.collect(),
                transactional: Vec::new(),
            }],
        }
    }

    #[test]
    fn runs_are_found_by_offset_and_forgotten_with_their_manifest() {
        let index = WalIndex::default();
        let id = Uuid::new_v4();
        let grown = index.insert("a", manifest("o1", id, &[(0, 0, 4), (1, 0, 0)]));
        assert_eq!(grown.len(), 2);
        index.insert("b", manifest("o2", id, &[(0, 5, 9)]));
        assert!(index
            .insert("b", manifest("o2", id, &[(0, 5, 9)]))
            .is_empty());
        assert_eq!(index.committed_end((id, 0)), Some(10));
        assert_eq!(index.committed_end((id, 2)), None);
        let bases = |from| -> Vec<i64> {
            let runs = index.runs_from((id, 0), from);
            runs.iter().map(|r| r.run.base_offset).collect()
        };
        assert_eq!(bases(0), vec![0, 5]);
        assert_eq!(bases(3), vec![0, 5]);
        assert_eq!(bases(5), vec![5]);
        assert_eq!(bases(10), Vec::<i64>::new());
        let mut with_runs = index.partitions_with_runs();
        with_runs.sort();
        assert_eq!(with_runs, vec![(id, 0), (id, 1)]);
        index.remove("a");
        assert_eq!(bases(0), vec![5]);
        assert_eq!(index.committed_end((id, 1)), None);
        // compaction looks only at partitions with runs: partition 1 is idle now
        assert_eq!(index.partitions_with_runs(), vec![(id, 0)]);
        assert_eq!(index.manifests().len(), 1);
        // another incarnation of the topic is another partition
        assert_eq!(index.committed_end((Uuid::new_v4(), 0)), None);
    }

    #[test]
    fn a_reader_during_replace_all_sees_the_whole_old_index() {
        let index = WalIndex::default();
        let id = Uuid::new_v4();
        index.insert("a", manifest("o1", id, &[(0, 0, 4)]));
        index.insert("b", manifest("o2", id, &[(0, 5, 9)]));
        // The listing is read one manifest at a time; between any two, a reader (a claim
        // taking the committed end) must see the old index whole, not a part of the new one.
        let listed = vec![
            ("a".to_string(), manifest("o1", id, &[(0, 0, 4)])),
            ("b".to_string(), manifest("o2", id, &[(0, 5, 9)])),
        ];
        let mut seen = Vec::new();
        index.replace_all(listed.into_iter().inspect(|_| {
            seen.push(index.committed_end((id, 0)));
        }));
        assert_eq!(seen, vec![Some(10), Some(10)]);
        assert_eq!(index.committed_end((id, 0)), Some(10));
    }

    #[test]
    fn runs_are_free_of_transactions_only_when_none_is_and_none_is_missing() {
        let index = WalIndex::default();
        let id = Uuid::new_v4();
        index.insert("a", manifest("o1", id, &[(0, 0, 4)]));
        index.insert("b", manifest("o2", id, &[(0, 5, 9)]));
        assert!(index.free_of_transactions_from((id, 0), 0));
        assert!(index.free_of_transactions_from((id, 0), 7));
        // nothing above: nothing to hold a transaction
        assert!(index.free_of_transactions_from((id, 0), 10));
        assert!(index.free_of_transactions_from((id, 1), 0));
        // a segment end older than the runs the index has: the runs between are unknown
        index.remove("a");
        assert!(!index.free_of_transactions_from((id, 0), 0));
        assert!(index.free_of_transactions_from((id, 0), 5));
        // a manifest not seen yet between two runs
        index.insert("d", manifest("o4", id, &[(0, 15, 19)]));
        assert!(!index.free_of_transactions_from((id, 0), 5));
        let mut transactional = manifest("o3", id, &[(0, 10, 14)]);
        transactional.topics[0].transactional = vec![0];
        index.insert("c", transactional);
        assert!(!index.free_of_transactions_from((id, 0), 5));
        assert!(index.free_of_transactions_from((id, 0), 15));
    }
}
