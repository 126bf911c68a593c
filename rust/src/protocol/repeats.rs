//! Requests that name one thing more than once. A client names each topic, partition, group or
//! config resource once; repeating a name asks for nothing new, but every repeat would cost a
//! look-up and a copy of its answer: one DescribeConfigs naming a topic 40,000 times in
//! 273 KiB was answered with 43.7 MiB after 7.9 s of CPU. Each API either merges the repeats
//! (answered once, where Kafka reads the request into a map or a set) or refuses them (where
//! Kafka answers them INVALID_REQUEST); its handler says which. These are the two tools.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use kafka_protocol::messages::{
    delete_records_request, describe_log_dirs_request, describe_producers_request,
    offset_commit_request, offset_delete_request, offset_fetch_request, txn_offset_commit_request,
    TopicName,
};

/// Keeps the first entry of each key, where it is, and folds every later entry with the same
/// key into it with `fold(first, later)`.
pub(crate) fn merge_by<T, K: Eq + Hash>(
    items: &mut Vec<T>,
    key: impl Fn(&T) -> K,
    mut fold: impl FnMut(&mut T, T),
) {
    let mut first: HashMap<K, usize> = HashMap::with_capacity(items.len());
    let mut kept: Vec<T> = Vec::with_capacity(items.len());
    for item in items.drain(..) {
        match first.entry(key(&item)) {
            Entry::Occupied(at) => fold(&mut kept[*at.get()], item),
            Entry::Vacant(slot) => {
                slot.insert(kept.len());
                kept.push(item);
            }
        }
    }
    *items = kept;
}

/// Keeps the first of equal entries.
pub(crate) fn dedup<T: Eq + Hash + Clone>(items: &mut Vec<T>) {
    merge_by(items, T::clone, |_, _| ());
}

/// The keys that occur more than once.
pub(crate) fn repeated<K: Eq + Hash + Clone>(keys: impl IntoIterator<Item = K>) -> HashSet<K> {
    let mut seen = HashSet::new();
    keys.into_iter()
        .filter(|k| !seen.insert(k.clone()))
        .collect()
}

/// A request's entry for one topic with the partitions it names.
pub(crate) trait TopicEntry {
    type Partition;
    fn topic(&self) -> &TopicName;
    fn partitions(&mut self) -> &mut Vec<Self::Partition>;
    fn index(partition: &Self::Partition) -> i32;
}

/// One entry per topic, one per partition in it, as Kafka's map of topic-partitions reads a
/// request: a partition named again replaces what was asked for it (a later offset wins), in
/// the place where it was first named.
pub(crate) fn merge_topics<T: TopicEntry>(topics: &mut Vec<T>) {
    merge_by(
        topics,
        |t| t.topic().clone(),
        |first, mut later| first.partitions().append(later.partitions()),
    );
    for topic in topics {
        merge_by(topic.partitions(), T::index, |first, later| *first = later);
    }
}

macro_rules! topic_entries {
    ($($entry:ty { $topic:ident, $partitions:ident: $partition:ty, |$p:ident| $index:expr })*) => {
        $(impl TopicEntry for $entry {
            type Partition = $partition;
            fn topic(&self) -> &TopicName {
                &self.$topic
            }
            fn partitions(&mut self) -> &mut Vec<$partition> {
                &mut self.$partitions
            }
            fn index($p: &$partition) -> i32 {
                $index
            }
        })*
    };
}

topic_entries! {
    delete_records_request::DeleteRecordsTopic {
        name, partitions: delete_records_request::DeleteRecordsPartition, |p| p.partition_index
    }
    describe_log_dirs_request::DescribableLogDirTopic { topic, partitions: i32, |p| *p }
    describe_producers_request::TopicRequest { name, partition_indexes: i32, |p| *p }
    offset_commit_request::OffsetCommitRequestTopic {
        name, partitions: offset_commit_request::OffsetCommitRequestPartition,
        |p| p.partition_index
    }
    offset_delete_request::OffsetDeleteRequestTopic {
        name, partitions: offset_delete_request::OffsetDeleteRequestPartition,
        |p| p.partition_index
    }
    offset_fetch_request::OffsetFetchRequestTopic { name, partition_indexes: i32, |p| *p }
    offset_fetch_request::OffsetFetchRequestTopics { name, partition_indexes: i32, |p| *p }
    txn_offset_commit_request::TxnOffsetCommitRequestTopic {
        name, partitions: txn_offset_commit_request::TxnOffsetCommitRequestPartition,
        |p| p.partition_index
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };

    use super::*;
    use crate::protocol::topic_name;

    fn topic(name: &str, offsets: &[(i32, i64)]) -> DeleteRecordsTopic {
        let partitions = offsets.iter().map(|&(index, offset)| {
            DeleteRecordsPartition::default()
                .with_partition_index(index)
                .with_offset(offset)
        });
        DeleteRecordsTopic::default()
            .with_name(topic_name(name))
            .with_partitions(partitions.collect())
    }

    #[test]
    fn repeats_merge_where_first_named_and_the_last_value_wins() {
        let mut topics = vec![
            topic("a", &[(0, 1), (1, 1)]),
            topic("b", &[(0, 5)]),
            topic("a", &[(2, 3), (0, 9)]),
        ];
        merge_topics(&mut topics);
        let merged: Vec<(&str, Vec<(i32, i64)>)> = topics
            .iter()
            .map(|t| {
                let partitions = t.partitions.iter();
                let offsets = partitions.map(|p| (p.partition_index, p.offset)).collect();
                (t.name.as_str(), offsets)
            })
            .collect();
        let expected = [("a", vec![(0, 9), (1, 1), (2, 3)]), ("b", vec![(0, 5)])];
        assert_eq!(merged, expected);

        let mut names = vec!["x", "y", "x", "z", "y"];
        dedup(&mut names);
        assert_eq!(names, ["x", "y", "z"]);
        assert_eq!(repeated([1, 2, 1, 3, 1]), HashSet::from([1]));
    }
}
