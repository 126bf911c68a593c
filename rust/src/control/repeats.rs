//! Control-plane requests that name one thing more than once (`protocol::repeats`): the
//! repeats Kafka merges are merged here, before the authorizer screens the request and Python
//! answers it, so neither works on, nor answers, a name twice.
//!
//! - DescribeConfigs: a resource (type and name) is described once, with every key any of its
//!   entries asks for (all of them if one asks for all). Kafka answers every entry in full,
//!   which is how 273 KiB naming one topic 40,000 times drew a 43.7 MiB answer; refusing
//!   repeats instead would fail a request Kafka answers, and a client reads one answer per
//!   resource anyway.
//! - DeleteTopics: each distinct entry once (Kafka's ZooKeeper-era set); the topic is deleted
//!   once.
//! - OffsetCommit, TxnOffsetCommit, OffsetDelete, OffsetFetch: each topic-partition once, the last entry of a
//!   commit winning (Kafka reads them into a map); OffsetFetch v8+ each group once, with the
//!   topics of all its entries.
//! - DescribeGroups, DeleteGroups: each group once.
//!
//! Refused, not merged, as Kafka refuses them (Python answers each repeated name
//! INVALID_REQUEST, `kafscale.admin`): a topic repeated in CreateTopics or CreatePartitions and
//! a resource repeated in AlterConfigs or IncrementalAlterConfigs.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;

use crate::control::body::ControlBody;
use crate::protocol::repeats::{dedup, merge_by, merge_topics};

pub(crate) fn merge(body: &mut ControlBody) {
    match body {
        ControlBody::DescribeConfigs(r) => {
            let resource = |r: &DescribeConfigsResource| (r.resource_type, r.resource_name.clone());
            merge_by(&mut r.resources, resource, |first, later| {
                match (&mut first.configuration_keys, later.configuration_keys) {
                    (Some(keys), Some(more)) => keys.extend(more),
                    (keys, _) => *keys = None,
                }
            });
            let keys = r.resources.iter_mut();
            keys.filter_map(|r| r.configuration_keys.as_mut())
                .for_each(dedup);
        }
        ControlBody::DeleteTopics(r) => {
            dedup(&mut r.topic_names);
            merge_by(&mut r.topics, |t| (t.name.clone(), t.topic_id), |_, _| ());
        }
        ControlBody::OffsetCommit(r) => merge_topics(&mut r.topics),
        ControlBody::TxnOffsetCommit(r) => merge_topics(&mut r.topics),
        ControlBody::OffsetDelete(r) => merge_topics(&mut r.topics),
        ControlBody::OffsetFetch(r) => {
            let group = |g: &OffsetFetchRequestGroup| g.group_id.clone();
            merge_by(&mut r.groups, group, |first, later| {
                match (&mut first.topics, later.topics) {
                    (Some(topics), Some(more)) => topics.extend(more),
                    (topics, _) => *topics = None,
                }
            });
            let groups = r.groups.iter_mut();
            groups
                .filter_map(|g| g.topics.as_mut())
                .for_each(merge_topics);
            r.topics.iter_mut().for_each(merge_topics);
        }
        ControlBody::DescribeGroups(r) => dedup(&mut r.groups),
        ControlBody::DeleteGroups(r) => dedup(&mut r.groups_names),
        ControlBody::CreateTopics(_)
        | ControlBody::CreatePartitions(_)
        | ControlBody::AlterConfigs(_)
        | ControlBody::IncrementalAlterConfigs(_)
        | ControlBody::JoinGroup(_)
        | ControlBody::SyncGroup(_)
        | ControlBody::Heartbeat(_)
        | ControlBody::LeaveGroup(_)
        | ControlBody::ListGroups(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
    use kafka_protocol::messages::{
        self as wire, DescribeConfigsRequest, GroupId, OffsetFetchRequest,
    };
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::protocol::topic_name;

    fn text(s: &'static str) -> StrBytes {
        StrBytes::from_static_str(s)
    }

    #[test]
    fn a_resource_described_again_is_described_once_with_every_key_asked() {
        let resource = |kind: i8, name: &'static str, keys: Option<&[&'static str]>| {
            DescribeConfigsResource::default()
                .with_resource_type(kind)
                .with_resource_name(text(name))
                .with_configuration_keys(keys.map(|k| k.iter().map(|&k| text(k)).collect()))
        };
        let (topic, broker) = (2, 4);
        let resources = vec![
            resource(topic, "t", Some(&["a"])),
            resource(broker, "t", Some(&["a"])),
            resource(topic, "u", Some(&["a"])),
            resource(topic, "t", Some(&["b", "a"])),
            resource(topic, "u", None),
            resource(topic, "u", Some(&["c"])),
        ];
        let mut body = ControlBody::DescribeConfigs(
            DescribeConfigsRequest::default().with_resources(resources),
        );
        merge(&mut body);
        let ControlBody::DescribeConfigs(merged) = body else {
            unreachable!()
        };
        let merged: Vec<(i8, &str, Option<Vec<&str>>)> = merged
            .resources
            .iter()
            .map(|r| {
                let keys = r.configuration_keys.as_ref();
                let keys = keys.map(|k| k.iter().map(|k| k.as_str()).collect());
                (r.resource_type, r.resource_name.as_str(), keys)
            })
            .collect();
        let expected = [
            (topic, "t", Some(vec!["a", "b"])),
            (broker, "t", Some(vec!["a"])),
            (topic, "u", None),
        ];
        assert_eq!(merged, expected);
    }

    #[test]
    fn a_group_or_partition_fetched_again_is_fetched_once() {
        let topics = |named: &[(&str, &[i32])]| {
            let topics = named.iter().map(|&(name, partitions)| {
                OffsetFetchRequestTopics::default()
                    .with_name(topic_name(name))
                    .with_partition_indexes(partitions.to_vec())
            });
            Some(topics.collect::<Vec<_>>())
        };
        let group = |id: &'static str, topics| {
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(text(id)))
                .with_topics(topics)
        };
        let groups = vec![
            group("g", topics(&[("t", &[0])])),
            group("every", topics(&[("t", &[0])])),
            group("g", topics(&[("t", &[1, 0]), ("u", &[0])])),
            group("every", None),
        ];
        let mut body = ControlBody::OffsetFetch(OffsetFetchRequest::default().with_groups(groups));
        merge(&mut body);
        let ControlBody::OffsetFetch(merged) = body else {
            unreachable!()
        };
        type Topics<'a> = Option<Vec<(&'a str, Vec<i32>)>>;
        let merged: Vec<(&str, Topics)> = merged
            .groups
            .iter()
            .map(|g| {
                let topics = g.topics.as_ref().map(|topics| {
                    let topics = topics.iter();
                    topics
                        .map(|t| (t.name.as_str(), t.partition_indexes.clone()))
                        .collect()
                });
                (g.group_id.as_str(), topics)
            })
            .collect();
        let expected = [
            ("g", Some(vec![("t", vec![0, 1]), ("u", vec![0])])),
            ("every", None),
        ];
        assert_eq!(merged, expected);

        let groups = ["g", "h", "g"].map(|g| GroupId(text(g))).to_vec();
        let mut body =
            ControlBody::DescribeGroups(wire::DescribeGroupsRequest::default().with_groups(groups));
        merge(&mut body);
        let ControlBody::DescribeGroups(merged) = body else {
            unreachable!()
        };
        assert_eq!(merged.groups, ["g", "h"].map(|g| GroupId(text(g))));
    }
}
