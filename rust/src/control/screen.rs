//! The authorizer's part in the control-plane APIs (the rows of `control_apis!`), decided here
//! before Python sees a request, with Kafka's rules (KafkaApis):
//!
//! - a request about one group the principal may not use is answered here, whole, with
//!   GROUP_AUTHORIZATION_FAILED ([`refusal`]);
//! - the items it may not touch (topics, groups, config resources) are taken out of the request
//!   ([`screen`]); Python answers the rest and each item taken out is added to the answer with
//!   its authorization error ([`Screened::complete`]) before it is encoded;
//! - answers that list what exists (ListGroups, OffsetFetch of all topics) leave out what the
//!   principal may not describe.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{self as wire, GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::body::ControlBody;
use crate::auth::acl::{Operation, ResourceType};
use crate::auth::authorizer::Access;
use crate::protocol::header::{encode_response as enc, WireError};
use crate::protocol::repeats::merge_by;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;

fn denied_topic() -> i16 {
    ResponseError::TopicAuthorizationFailed.code()
}

fn denied_group() -> i16 {
    ResponseError::GroupAuthorizationFailed.code()
}

/// What was taken out of a request, to be answered with authorization errors.
#[derive(Default)]
pub(crate) struct Screened {
    /// Topics by name, with the partitions the request named (echoed back).
    topics: Vec<(String, Vec<i32>)>,
    /// DeleteTopics v6 names topics by id too.
    topic_ids: Vec<(Option<String>, Uuid)>,
    groups: Vec<String>,
    /// OffsetFetch v8+: topics taken out of each group's request, by group.
    group_topics: HashMap<String, Vec<(String, Vec<i32>)>>,
    /// Config resources: type, name, error code.
    resources: Vec<(i8, String, i16)>,
    /// Set when the answer lists what exists: entries the principal may not describe go.
    listing: Option<Arc<Access>>,
}

/// The answer to a request the principal may not make at all (a group it may not use), every
/// item GROUP_AUTHORIZATION_FAILED; None when Python is to answer it.
pub(crate) fn refused_answer(
    body: &ControlBody,
    access: &Access,
    correlation_id: i32,
    version: i16,
) -> Option<Result<Bytes, WireError>> {
    let denied = |op: Operation, group: &GroupId| !access.allows_group(op, group);
    let code = denied_group();
    let answer = match body {
        ControlBody::JoinGroup(r) if denied(Operation::Read, &r.group_id) => enc(
            correlation_id,
            version,
            &wire::JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        ),
        ControlBody::SyncGroup(r) if denied(Operation::Read, &r.group_id) => enc(
            correlation_id,
            version,
            &wire::SyncGroupResponse::default().with_error_code(code),
        ),
        ControlBody::Heartbeat(r) if denied(Operation::Read, &r.group_id) => enc(
            correlation_id,
            version,
            &wire::HeartbeatResponse::default().with_error_code(code),
        ),
        ControlBody::LeaveGroup(r) if denied(Operation::Read, &r.group_id) => enc(
            correlation_id,
            version,
            &wire::LeaveGroupResponse::default().with_error_code(code),
        ),
        ControlBody::OffsetCommit(r) if denied(Operation::Read, &r.group_id) => {
            let topics = r.topics.iter().map(|t| {
                let partitions = t.partitions.iter().map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                });
                OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions.collect())
            });
            let response = wire::OffsetCommitResponse::default().with_topics(topics.collect());
            enc(correlation_id, version, &response)
        }
        // Kafka checks WRITE on the transactional id, then READ on the group.
        ControlBody::TxnOffsetCommit(r) => {
            let transaction = access.allows(
                Operation::Write,
                ResourceType::TransactionalId,
                &r.transactional_id,
            );
            let code = match (transaction, denied(Operation::Read, &r.group_id)) {
                (false, _) => ResponseError::TransactionalIdAuthorizationFailed.code(),
                (true, true) => code,
                (true, false) => return None,
            };
            let topics = r.topics.iter().map(|t| {
                let partitions = t.partitions.iter().map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                });
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions.collect())
            });
            let response = wire::TxnOffsetCommitResponse::default().with_topics(topics.collect());
            enc(correlation_id, version, &response)
        }
        ControlBody::OffsetDelete(r) if denied(Operation::Delete, &r.group_id) => enc(
            correlation_id,
            version,
            &wire::OffsetDeleteResponse::default().with_error_code(code),
        ),
        // v8+ (a list of groups) is screened group by group instead.
        ControlBody::OffsetFetch(r)
            if r.groups.is_empty() && denied(Operation::Describe, &r.group_id) =>
        {
            let topics = r.topics.iter().flatten().map(|t| {
                let partitions = t.partition_indexes.iter().map(|&p| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(-1)
                        .with_error_code(code)
                });
                OffsetFetchResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions.collect())
            });
            let response = wire::OffsetFetchResponse::default()
                .with_error_code(code)
                .with_topics(topics.collect());
            enc(correlation_id, version, &response)
        }
        _ => return None,
    };
    Some(answer)
}

/// Takes out of `body` what the principal may not touch; the rest goes to Python.
///
/// `topic_name` names a topic by its id (DeleteTopics v6 may name topics only by id).
pub(crate) fn screen(
    body: &mut ControlBody,
    access: &Arc<Access>,
    topic_name: impl Fn(Uuid) -> Option<String>,
) -> Screened {
    let mut out = Screened::default();
    let topic = |op: Operation, name: &str| denied(access.allows_topic(op, name));
    let group = |op: Operation, name: &str| denied(access.allows_group(op, name));
    match body {
        ControlBody::CreateTopics(r) => {
            let cluster = access.allows_cluster(Operation::Create);
            keep_allowed(
                &mut r.topics,
                |t| topic(Operation::Create, &t.name).filter(|()| !cluster),
                |t, ()| out.topics.push((t.name.to_string(), Vec::new())),
            );
        }
        ControlBody::DeleteTopics(r) => {
            keep_allowed(
                &mut r.topic_names,
                |name| topic(Operation::Delete, name),
                |name, ()| out.topics.push((name.to_string(), Vec::new())),
            );
            keep_allowed(
                &mut r.topics,
                |t| {
                    let name = match &t.name {
                        Some(name) => Some(name.to_string()),
                        None => topic_name(t.topic_id),
                    };
                    // An id no topic has is left to Python (UNKNOWN_TOPIC_ID).
                    topic(Operation::Delete, name.as_deref()?)
                },
                |t, ()| {
                    let name = t.name.as_ref().map(|n| n.to_string());
                    out.topic_ids.push((name, t.topic_id));
                },
            );
        }
        ControlBody::CreatePartitions(r) => keep_allowed(
            &mut r.topics,
            |t| topic(Operation::Alter, &t.name),
            |t, ()| out.topics.push((t.name.to_string(), Vec::new())),
        ),
        ControlBody::OffsetCommit(r) => keep_allowed(
            &mut r.topics,
            |t| topic(Operation::Read, &t.name),
            |t, ()| {
                let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                out.topics.push((t.name.to_string(), partitions));
            },
        ),
        ControlBody::TxnOffsetCommit(r) => keep_allowed(
            &mut r.topics,
            |t| topic(Operation::Read, &t.name),
            |t, ()| {
                let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                out.topics.push((t.name.to_string(), partitions));
            },
        ),
        ControlBody::OffsetDelete(r) => keep_allowed(
            &mut r.topics,
            |t| topic(Operation::Read, &t.name),
            |t, ()| {
                let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                out.topics.push((t.name.to_string(), partitions));
            },
        ),
        ControlBody::OffsetFetch(r) => {
            out.listing = Some(access.clone());
            if let Some(topics) = r.topics.as_mut() {
                keep_allowed(
                    topics,
                    |t| topic(Operation::Describe, &t.name),
                    |t, ()| {
                        let partitions = t.partition_indexes.clone();
                        out.topics.push((t.name.to_string(), partitions));
                    },
                );
            }
            keep_allowed(
                &mut r.groups,
                |g| group(Operation::Describe, &g.group_id),
                |g, ()| out.groups.push(g.group_id.to_string()),
            );
            for group in &mut r.groups {
                let Some(topics) = group.topics.as_mut() else {
                    continue;
                };
                let refused = out
                    .group_topics
                    .entry(group.group_id.to_string())
                    .or_default();
                keep_allowed(
                    topics,
                    |t| topic(Operation::Describe, &t.name),
                    |t, ()| refused.push((t.name.to_string(), t.partition_indexes.clone())),
                );
            }
        }
        ControlBody::DescribeGroups(r) => keep_allowed(
            &mut r.groups,
            |g| group(Operation::Describe, g),
            |g, ()| out.groups.push(g.to_string()),
        ),
        ControlBody::DeleteGroups(r) => keep_allowed(
            &mut r.groups_names,
            |g| group(Operation::Delete, g),
            |g, ()| out.groups.push(g.to_string()),
        ),
        ControlBody::ListGroups(_) => {
            if !access.allows_cluster(Operation::Describe) {
                out.listing = Some(access.clone());
            }
        }
        ControlBody::DescribeConfigs(r) => keep_allowed(
            &mut r.resources,
            |res| config_refusal(access, res.resource_type, &res.resource_name, false),
            |res, code| {
                let name = res.resource_name.to_string();
                out.resources.push((res.resource_type, name, code));
            },
        ),
        ControlBody::AlterConfigs(r) => keep_allowed(
            &mut r.resources,
            |res| config_refusal(access, res.resource_type, &res.resource_name, true),
            |res, code| {
                let name = res.resource_name.to_string();
                out.resources.push((res.resource_type, name, code));
            },
        ),
        ControlBody::IncrementalAlterConfigs(r) => keep_allowed(
            &mut r.resources,
            |res| config_refusal(access, res.resource_type, &res.resource_name, true),
            |res, code| {
                let name = res.resource_name.to_string();
                out.resources.push((res.resource_type, name, code));
            },
        ),
        ControlBody::JoinGroup(_)
        | ControlBody::SyncGroup(_)
        | ControlBody::Heartbeat(_)
        | ControlBody::LeaveGroup(_) => {}
    }
    // A topic CreateTopics or CreatePartitions names twice is answered once (the others'
    // repeats are merged before the screen), refused or not.
    merge_by(&mut out.topics, |(name, _)| name.clone(), |_, _| ());
    out
}

/// Keeps the items `refusal` has nothing against and hands each other one, with its
/// refusal, to `refused`.
fn keep_allowed<T, R>(
    items: &mut Vec<T>,
    refusal: impl Fn(&T) -> Option<R>,
    mut refused: impl FnMut(&T, R),
) {
    items.retain(|item| match refusal(item) {
        None => true,
        Some(reason) => {
            refused(item, reason);
            false
        }
    });
}

/// A refusal (with nothing more to say) unless `allowed`.
fn denied(allowed: bool) -> Option<()> {
    (!allowed).then_some(())
}

/// The error for a config resource the principal may not describe (or alter); None if it may.
/// Resource types the broker does not know are left to Python to refuse.
fn config_refusal(access: &Access, kind: i8, name: &str, alter: bool) -> Option<i16> {
    let op = if alter {
        Operation::AlterConfigs
    } else {
        Operation::DescribeConfigs
    };
    match kind {
        TOPIC if !access.allows_topic(op, name) => Some(denied_topic()),
        BROKER | BROKER_LOGGER if !access.allows_cluster(op) => {
            Some(ResponseError::ClusterAuthorizationFailed.code())
        }
        _ => None,
    }
}

fn message(code: i16) -> Option<StrBytes> {
    let what = if code == denied_group() {
        "the group"
    } else if code == denied_topic() {
        "the topic"
    } else {
        "the cluster"
    };
    Some(StrBytes::from_string(format!(
        "not authorized: the principal has no ACL that allows this on {what}"
    )))
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn group_id(name: &str) -> GroupId {
    GroupId(StrBytes::from_string(name.to_string()))
}

/// Adds what was screened out to Python's answer (each control API's response type).
pub(crate) trait Complete {
    fn complete(&mut self, screened: &Screened);
}

impl Screened {
    pub(crate) fn complete<T: Complete>(&self, mut response: T) -> T {
        response.complete(self);
        response
    }
}

macro_rules! nothing_screened {
    ($($response:ty),*) => {
        $(impl Complete for $response {
            fn complete(&mut self, _: &Screened) {}
        })*
    };
}

nothing_screened!(
    wire::JoinGroupResponse,
    wire::SyncGroupResponse,
    wire::HeartbeatResponse,
    wire::LeaveGroupResponse
);

impl Complete for wire::CreateTopicsResponse {
    fn complete(&mut self, s: &Screened) {
        self.topics.extend(s.topics.iter().map(|(name, _)| {
            CreatableTopicResult::default()
                .with_name(topic_name(name))
                .with_error_code(denied_topic())
                .with_error_message(message(denied_topic()))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
        }));
    }
}

impl Complete for wire::DeleteTopicsResponse {
    fn complete(&mut self, s: &Screened) {
        let by_name = s
            .topics
            .iter()
            .map(|(name, _)| (Some(name.clone()), Uuid::nil()));
        let results = by_name
            .chain(s.topic_ids.iter().cloned())
            .map(|(name, id)| {
                DeletableTopicResult::default()
                    .with_name(name.as_deref().map(topic_name))
                    .with_topic_id(id)
                    .with_error_code(denied_topic())
                    .with_error_message(message(denied_topic()))
            });
        self.responses.extend(results);
    }
}

impl Complete for wire::CreatePartitionsResponse {
    fn complete(&mut self, s: &Screened) {
        self.results.extend(s.topics.iter().map(|(name, _)| {
            CreatePartitionsTopicResult::default()
                .with_name(topic_name(name))
                .with_error_code(denied_topic())
                .with_error_message(message(denied_topic()))
        }));
    }
}

impl Complete for wire::OffsetCommitResponse {
    fn complete(&mut self, s: &Screened) {
        self.topics
            .extend(s.topics.iter().map(|(name, partitions)| {
                let partitions = partitions.iter().map(|&p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(denied_topic())
                });
                OffsetCommitResponseTopic::default()
                    .with_name(topic_name(name))
                    .with_partitions(partitions.collect())
            }));
    }
}

impl Complete for wire::TxnOffsetCommitResponse {
    fn complete(&mut self, s: &Screened) {
        self.topics
            .extend(s.topics.iter().map(|(name, partitions)| {
                let partitions = partitions.iter().map(|&p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(denied_topic())
                });
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic_name(name))
                    .with_partitions(partitions.collect())
            }));
    }
}

impl Complete for wire::OffsetDeleteResponse {
    fn complete(&mut self, s: &Screened) {
        self.topics
            .extend(s.topics.iter().map(|(name, partitions)| {
                let partitions = partitions.iter().map(|&p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(denied_topic())
                });
                OffsetDeleteResponseTopic::default()
                    .with_name(topic_name(name))
                    .with_partitions(partitions.collect())
            }));
    }
}

impl Complete for wire::OffsetFetchResponse {
    fn complete(&mut self, s: &Screened) {
        let described = |name: &str| {
            s.listing
                .as_ref()
                .is_none_or(|a| a.allows_topic(Operation::Describe, name))
        };
        // all topics asked for: those the principal may not describe are not listed
        self.topics.retain(|t| described(&t.name));
        self.topics
            .extend(s.topics.iter().map(|(name, partitions)| {
                let partitions = partitions.iter().map(|&p| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(-1)
                        .with_error_code(denied_topic())
                });
                OffsetFetchResponseTopic::default()
                    .with_name(topic_name(name))
                    .with_partitions(partitions.collect())
            }));
        for group in &mut self.groups {
            group.topics.retain(|t| described(&t.name));
            let refused = s
                .group_topics
                .get(group.group_id.as_str())
                .into_iter()
                .flatten();
            group.topics.extend(refused.map(|(name, partitions)| {
                let partitions = partitions.iter().map(|&p| {
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(p)
                        .with_committed_offset(-1)
                        .with_error_code(denied_topic())
                });
                OffsetFetchResponseTopics::default()
                    .with_name(topic_name(name))
                    .with_partitions(partitions.collect())
            }));
        }
        self.groups.extend(s.groups.iter().map(|g| {
            OffsetFetchResponseGroup::default()
                .with_group_id(group_id(g))
                .with_error_code(denied_group())
        }));
    }
}

impl Complete for wire::DescribeGroupsResponse {
    fn complete(&mut self, s: &Screened) {
        self.groups.extend(s.groups.iter().map(|g| {
            DescribedGroup::default()
                .with_group_id(group_id(g))
                .with_error_code(denied_group())
        }));
    }
}

impl Complete for wire::DeleteGroupsResponse {
    fn complete(&mut self, s: &Screened) {
        self.results.extend(s.groups.iter().map(|g| {
            DeletableGroupResult::default()
                .with_group_id(group_id(g))
                .with_error_code(denied_group())
        }));
    }
}

impl Complete for wire::ListGroupsResponse {
    fn complete(&mut self, s: &Screened) {
        if let Some(access) = &s.listing {
            self.groups
                .retain(|g| access.allows_group(Operation::Describe, &g.group_id));
        }
    }
}

impl Complete for wire::DescribeConfigsResponse {
    fn complete(&mut self, s: &Screened) {
        self.results
            .extend(s.resources.iter().map(|(kind, name, code)| {
                DescribeConfigsResult::default()
                    .with_resource_type(*kind)
                    .with_resource_name(StrBytes::from_string(name.clone()))
                    .with_error_code(*code)
                    .with_error_message(message(*code))
            }));
    }
}

/// AlterConfigs and IncrementalAlterConfigs answer with the same entries.
fn altered(
    s: &Screened,
) -> impl Iterator<Item = wire::alter_configs_response::AlterConfigsResourceResponse> + '_ {
    s.resources.iter().map(|(kind, name, code)| {
        wire::alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(*kind)
            .with_resource_name(StrBytes::from_string(name.clone()))
            .with_error_code(*code)
            .with_error_message(message(*code))
    })
}

impl Complete for wire::AlterConfigsResponse {
    fn complete(&mut self, s: &Screened) {
        self.responses.extend(altered(s));
    }
}

impl Complete for wire::IncrementalAlterConfigsResponse {
    fn complete(&mut self, s: &Screened) {
        self.responses.extend(altered(s).map(|r| {
            wire::incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(r.error_code)
                .with_error_message(r.error_message)
        }));
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::list_groups_response::ListedGroup;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;

    use super::*;
    use crate::auth::acl::{Operation::*, ResourceType};
    use crate::server::handlers::testing::{alice, allow};

    fn topic_acl(name: &str, op: Operation) -> crate::auth::acl::AclBinding {
        allow(ResourceType::Topic, name, op)
    }

    fn group_acl(name: &str, op: Operation) -> crate::auth::acl::AclBinding {
        allow(ResourceType::Group, name, op)
    }

    /// The broker's topic names by id, as the control handler gives them to `screen`.
    fn topic_names(broker: &crate::broker::Broker) -> impl Fn(Uuid) -> Option<String> + '_ {
        |id| broker.topic_by_id(id).map(|t| t.record.name.to_string())
    }

    #[tokio::test]
    async fn topics_the_principal_may_not_create_are_answered_with_their_error() {
        let t = crate::broker::tests::broker(1 << 20).await;
        let access = alice(vec![topic_acl("mine", Create)]);
        let mut body = ControlBody::CreateTopics(
            wire::CreateTopicsRequest::default().with_topics(
                // a refused topic named twice is answered once, as Python answers its own
                ["mine", "theirs", "theirs"]
                    .map(|n| CreatableTopic::default().with_name(topic_name(n)))
                    .to_vec(),
            ),
        );
        assert!(refused_answer(&body, &access, 7, 5).is_none());
        let screened = screen(&mut body, &access, topic_names(&t.broker));
        let ControlBody::CreateTopics(asked) = &body else {
            unreachable!()
        };
        let names: Vec<&str> = asked.topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["mine"], "only what Python may do reaches it");
        let python =
            wire::CreateTopicsResponse::default().with_topics(vec![CreatableTopicResult::default(
            )
            .with_name(topic_name("mine"))]);
        let answer = screened.complete(python);
        let codes: Vec<(&str, i16)> = answer
            .topics
            .iter()
            .map(|t| (t.name.as_str(), t.error_code))
            .collect();
        assert_eq!(codes, [("mine", 0), ("theirs", 29)]);
        // Create on the cluster covers every topic
        let admin = alice(vec![allow(ResourceType::Cluster, "kafka-cluster", Create)]);
        let mut body =
            ControlBody::CreateTopics(wire::CreateTopicsRequest::default().with_topics(vec![
                CreatableTopic::default().with_name(topic_name("theirs")),
            ]));
        assert!(screen(&mut body, &admin, topic_names(&t.broker))
            .topics
            .is_empty());
    }

    #[test]
    fn a_group_the_principal_may_not_read_is_refused_whole() {
        let access = alice(vec![group_acl("g", Read)]);
        let join = |g: &str| {
            ControlBody::JoinGroup(wire::JoinGroupRequest::default().with_group_id(group_id(g)))
        };
        assert!(refused_answer(&join("g"), &access, 7, 5).is_none());
        let body = join("other");
        let frame = refused_answer(&body, &access, 7, 5)
            .expect("refused")
            .unwrap();
        let (_, read): (_, wire::JoinGroupResponse) =
            crate::protocol::header::testing::read_response(frame, 5);
        assert_eq!(read.error_code, 30);
        // a commit to a group it may read, for a topic it may not: that topic is refused
        let commit = wire::OffsetCommitRequest::default()
            .with_group_id(group_id("g"))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic_name("secret"))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_partition_index(3)
                ])]);
        let mut body = ControlBody::OffsetCommit(commit);
        assert!(refused_answer(&body, &access, 7, 5).is_none());
        let t = tokio::runtime::Runtime::new().unwrap();
        let broker = t.block_on(crate::broker::tests::broker(1 << 20));
        let screened = screen(&mut body, &access, topic_names(&broker.broker));
        let answer = screened.complete(wire::OffsetCommitResponse::default());
        assert_eq!(answer.topics[0].partitions[0].partition_index, 3);
        assert_eq!(answer.topics[0].partitions[0].error_code, 29);
    }

    #[tokio::test]
    async fn listings_leave_out_what_the_principal_may_not_describe() {
        let t = crate::broker::tests::broker(1 << 20).await;
        let access = alice(vec![group_acl("g", Describe), topic_acl("seen", Read)]);
        let mut body = ControlBody::ListGroups(wire::ListGroupsRequest::default());
        let screened = screen(&mut body, &access, topic_names(&t.broker));
        let groups = ["g", "other"].map(|g| ListedGroup::default().with_group_id(group_id(g)));
        let listed =
            screened.complete(wire::ListGroupsResponse::default().with_groups(groups.to_vec()));
        assert_eq!(listed.groups.len(), 1);
        assert_eq!(listed.groups[0].group_id.as_str(), "g");
        // OffsetFetch of every topic: committed offsets of undescribable topics are not shown
        let mut body = ControlBody::OffsetFetch(
            wire::OffsetFetchRequest::default()
                .with_group_id(group_id("g"))
                .with_topics(None),
        );
        let screened = screen(&mut body, &access, topic_names(&t.broker));
        let topics = ["seen", "hidden"]
            .map(|n| OffsetFetchResponseTopic::default().with_name(topic_name(n)));
        let fetched =
            screened.complete(wire::OffsetFetchResponse::default().with_topics(topics.to_vec()));
        let names: Vec<&str> = fetched.topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["seen"]);
        // named topics it may not describe are answered with the error
        let mut body = ControlBody::OffsetFetch(
            wire::OffsetFetchRequest::default()
                .with_group_id(group_id("g"))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(topic_name("hidden"))
                    .with_partition_indexes(vec![0, 1])])),
        );
        let screened = screen(&mut body, &access, topic_names(&t.broker));
        let fetched = screened.complete(wire::OffsetFetchResponse::default());
        let codes: Vec<i16> = fetched.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(codes, [29, 29]);
    }

    #[tokio::test]
    async fn config_resources_need_their_config_permission() {
        let t = crate::broker::tests::broker(1 << 20).await;
        let access = alice(vec![topic_acl("t", AlterConfigs)]);
        let resources = [(TOPIC, "t"), (TOPIC, "u"), (BROKER, "1")].map(|(kind, name)| {
            wire::describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(kind)
                .with_resource_name(StrBytes::from_static_str(name))
        });
        let mut body = ControlBody::DescribeConfigs(
            wire::DescribeConfigsRequest::default().with_resources(resources.to_vec()),
        );
        let screened = screen(&mut body, &access, topic_names(&t.broker));
        let answer = screened.complete(wire::DescribeConfigsResponse::default());
        let refused: Vec<(&str, i16)> = answer
            .results
            .iter()
            .map(|r| (r.resource_name.as_str(), r.error_code))
            .collect();
        // DescribeConfigs on t is implied by AlterConfigs
        assert_eq!(refused, [("u", 29), ("1", 31)]);
    }
}
