//! Requests for APIs (or versions) this broker does not serve get UNSUPPORTED_VERSION: in the
//! response's top-level error code where the schema has one, otherwise on every item the request
//! named (as Kafka's per-request error responses do). Broker-internal APIs, which no client
//! sends, close the connection.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};
use kafka_protocol::ResponseError;

use crate::protocol::header::{encode_response, Request};
use crate::server::dispatch::Reply;

fn with_error<T>(request: &Request, mut response: T, set: impl FnOnce(&mut T, i16)) -> Reply
where
    T: Encodable + HeaderVersion + Message,
{
    set(&mut response, ResponseError::UnsupportedVersion.code());
    let version = request.api_version.clamp(T::VERSIONS.min, T::VERSIONS.max);
    encode_response(request.correlation_id, version, &response).into()
}

pub fn handle(request: &Request) -> Reply {
    tracing::debug!(api = ?request.api_key, version = request.api_version, "unsupported request");
    let r = request;
    match request.api_key {
        ApiKey::JoinGroup => with_error(r, JoinGroupResponse::default(), |m, c| m.error_code = c),
        ApiKey::SyncGroup => with_error(r, SyncGroupResponse::default(), |m, c| m.error_code = c),
        ApiKey::Heartbeat => with_error(r, HeartbeatResponse::default(), |m, c| m.error_code = c),
        ApiKey::LeaveGroup => with_error(r, LeaveGroupResponse::default(), |m, c| m.error_code = c),
        ApiKey::ListGroups => with_error(r, ListGroupsResponse::default(), |m, c| m.error_code = c),
        ApiKey::InitProducerId => with_error(r, InitProducerIdResponse::default(), |m, c| {
            m.error_code = c
        }),
        ApiKey::SaslHandshake => {
            with_error(r, SaslHandshakeResponse::default(), |m, c| m.error_code = c)
        }
        ApiKey::SaslAuthenticate => with_error(r, SaslAuthenticateResponse::default(), |m, c| {
            m.error_code = c
        }),
        ApiKey::DescribeCluster => with_error(r, DescribeClusterResponse::default(), |m, c| {
            m.error_code = c
        }),
        ApiKey::EndTxn => with_error(r, EndTxnResponse::default(), |m, c| m.error_code = c),
        ApiKey::DescribeAcls => {
            with_error(r, DescribeAclsResponse::default(), |m, c| m.error_code = c)
        }
        ApiKey::DescribeClientQuotas => {
            with_error(r, DescribeClientQuotasResponse::default(), |m, c| {
                m.error_code = c
            })
        }
        other => per_item(request).unwrap_or_else(|| {
            Reply::Close(format!(
                "{other:?} v{} is not supported",
                request.api_version
            ))
        }),
    }
}

/// Error responses that repeat the request's items, each with UNSUPPORTED_VERSION.
fn per_item(r: &Request) -> Option<Reply> {
    let code = ResponseError::UnsupportedVersion.code();
    let reason = || {
        Some(StrBytes::from_static_str(
            "not supported by this KafScale version",
        ))
    };
    let reply = match r.api_key {
        // v5+ (v0–4 are served): one result per key.
        ApiKey::FindCoordinator => mirror(r, |q: FindCoordinatorRequest| {
            FindCoordinatorResponse::default().with_coordinators(
                q.coordinator_keys
                    .into_iter()
                    .map(|key| {
                        find_coordinator_response::Coordinator::default()
                            .with_key(key)
                            .with_node_id(BrokerId(-1))
                            .with_port(-1)
                            .with_error_code(code)
                            .with_error_message(reason())
                    })
                    .collect(),
            )
        }),
        ApiKey::OffsetCommit => mirror(r, |q: OffsetCommitRequest| {
            OffsetCommitResponse::default().with_topics(
                q.topics
                    .into_iter()
                    .map(|t| {
                        let partitions = t.partitions.iter().map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        });
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(partitions.collect())
                    })
                    .collect(),
            )
        }),
        ApiKey::OffsetFetch if (2..=7).contains(&r.api_version) => {
            mirror(r, |_: OffsetFetchRequest| {
                OffsetFetchResponse::default().with_error_code(code)
            })
        }
        ApiKey::OffsetFetch if r.api_version >= 8 => mirror(r, |q: OffsetFetchRequest| {
            OffsetFetchResponse::default().with_groups(
                q.groups
                    .into_iter()
                    .map(|g| {
                        OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        }),
        ApiKey::DescribeGroups => mirror(r, |q: DescribeGroupsRequest| {
            DescribeGroupsResponse::default().with_groups(
                q.groups
                    .into_iter()
                    .map(|g| {
                        DescribedGroup::default()
                            .with_group_id(g)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        }),
        ApiKey::DeleteGroups => mirror(r, |q: DeleteGroupsRequest| {
            DeleteGroupsResponse::default().with_results(
                q.groups_names
                    .into_iter()
                    .map(|g| {
                        DeletableGroupResult::default()
                            .with_group_id(g)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        }),
        ApiKey::DescribeConfigs => mirror(r, |q: DescribeConfigsRequest| {
            DescribeConfigsResponse::default().with_results(
                q.resources
                    .into_iter()
                    .map(|c| {
                        DescribeConfigsResult::default()
                            .with_error_code(code)
                            .with_error_message(reason())
                            .with_resource_type(c.resource_type)
                            .with_resource_name(c.resource_name)
                    })
                    .collect(),
            )
        }),
        ApiKey::AlterConfigs => mirror(r, |q: AlterConfigsRequest| {
            AlterConfigsResponse::default().with_responses(
                q.resources
                    .into_iter()
                    .map(|c| {
                        alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_error_code(code)
                            .with_error_message(reason())
                            .with_resource_type(c.resource_type)
                            .with_resource_name(c.resource_name)
                    })
                    .collect(),
            )
        }),
        ApiKey::IncrementalAlterConfigs => mirror(r, |q: IncrementalAlterConfigsRequest| {
            IncrementalAlterConfigsResponse::default().with_responses(
                q.resources
                    .into_iter()
                    .map(|c| {
                        incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_error_code(code)
                            .with_error_message(reason())
                            .with_resource_type(c.resource_type)
                            .with_resource_name(c.resource_name)
                    })
                    .collect(),
            )
        }),
        ApiKey::CreatePartitions => mirror(r, |q: CreatePartitionsRequest| {
            CreatePartitionsResponse::default().with_results(
                q.topics
                    .into_iter()
                    .map(|t| {
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name)
                            .with_error_code(code)
                            .with_error_message(reason())
                    })
                    .collect(),
            )
        }),
        ApiKey::OffsetForLeaderEpoch => mirror(r, |q: OffsetForLeaderEpochRequest| {
            OffsetForLeaderEpochResponse::default().with_topics(
                q.topics
                    .into_iter()
                    .map(|t| {
                        let partitions = t.partitions.iter().map(|p| {
                            offset_for_leader_epoch_response::EpochEndOffset::default()
                                .with_partition(p.partition)
                                .with_error_code(code)
                        });
                        offset_for_leader_epoch_response::OffsetForLeaderTopicResult::default()
                            .with_topic(t.topic)
                            .with_partitions(partitions.collect())
                    })
                    .collect(),
            )
        }),
        _ => return None,
    };
    Some(reply)
}

/// Decodes the request as `Q` and encodes `answer(request)` at the same version.
fn mirror<Q, S>(request: &Request, answer: impl FnOnce(Q) -> S) -> Reply
where
    Q: Decodable + Message,
    S: Encodable + HeaderVersion,
{
    match request.body::<Q>() {
        Ok(body) => {
            encode_response(request.correlation_id, request.api_version, &answer(body)).into()
        }
        Err(reason) => Reply::Close(reason),
    }
}
