//! The one table of control-plane APIs: the requests the core decodes and Python answers
//! (topic admin, consumer groups, configs, partitions).
//!
//! Each row declares an API once: its key (the `kafka_protocol` request type is named after
//! it), the versions served, how its decoded request becomes the object Python receives, the
//! answer Python gives and how that is encoded at the request's version, and the classes the
//! extension registers for it. Everything else is derived from the rows by the macro each user
//! passes in (the "x-macro" pattern): ApiVersions and routing (`SERVED`, read by
//! `server::apis`), the request body carried to Python (`body::ControlBody`),
//! the bridge's `body`/`respond`, class registration and `CONTROL_API_KEYS`
//! (`python::control`).
//!
//! The modules below hold each API's request as Python receives it (with the version rules of
//! decoding) and the answer Python gives (with the version rules of encoding), tested here in
//! Rust; `python::control` only moves them across.
//!
//! Adding a control API: its row here, its request and answer types in a module below, its
//! Python route (`kafscale.control`) and handler, its stub lines (`_core.pyi`) and its tests.

pub(crate) mod body;
pub(crate) mod bridge;
pub(crate) mod configs;
pub(crate) mod group_admin;
pub(crate) mod groups;
pub(crate) mod offset_delete;
pub(crate) mod partitions;
pub(crate) mod repeats;
pub(crate) mod screen;
#[cfg(test)]
pub(crate) mod testing;
mod text;
pub(crate) mod topics;

/// Calls `$consumer!` with every row. A row reads
/// `Key { versions: MIN..=MAX, request: WireRequest, python: |wire, version| -> object,
/// answer: |answer: AnswerType, wire, version| -> wire response, classes: [PyClass, ...] }`.
macro_rules! control_apis {
    ($consumer:ident) => {
        $consumer! {
            // v4+ may ask for the broker defaults (-1, KIP-464), v5+ answer with the topic's
            // configs and partitions, v7 with its id.
            CreateTopics {
                versions: 0..=7,
                request: CreateTopicsRequest,
                python: |wire, _| crate::control::topics::CreateTopicsRequest::from(wire),
                answer: |a: crate::control::topics::CreateTopicsResponse, _, _| {
                    kafka_protocol::messages::CreateTopicsResponse::from(a)
                },
                classes: [
                    crate::control::topics::CreatableTopic,
                    crate::control::topics::CreateTopicsRequest,
                    crate::control::topics::CreatableTopicResult,
                    crate::control::configs::DescribedConfig,
                    crate::control::configs::ConfigSynonym,
                ],
            }
            // v6 names topics by name or by id.
            DeleteTopics {
                versions: 0..=6,
                request: DeleteTopicsRequest,
                python: |wire, _| crate::control::topics::DeleteTopicsRequest::from(wire),
                answer: |a: crate::control::topics::DeleteTopicsResponse, _, _| {
                    kafka_protocol::messages::DeleteTopicsResponse::from(a)
                },
                classes: [
                    crate::control::topics::DeletableTopic,
                    crate::control::topics::DeleteTopicsRequest,
                    crate::control::topics::DeletableTopicResult,
                ],
            }
            JoinGroup {
                versions: 0..=9,
                request: JoinGroupRequest,
                python: |wire, v| crate::control::groups::requests::JoinGroupRequest::new(wire, v),
                answer: |a: crate::control::groups::answers::JoinGroupResponse, _, v| {
                    crate::control::groups::answers::join_group(a, v)
                },
                classes: [
                    crate::control::groups::requests::JoinGroupProtocol,
                    crate::control::groups::requests::JoinGroupRequest,
                    crate::control::groups::answers::JoinGroupMember,
                ],
            }
            SyncGroup {
                versions: 0..=5,
                request: SyncGroupRequest,
                python: |wire, _| crate::control::groups::requests::SyncGroupRequest::new(wire),
                answer: |a: crate::control::groups::answers::SyncGroupResponse, _, _| {
                    crate::control::groups::answers::sync_group(a)
                },
                classes: [
                    crate::control::groups::requests::SyncGroupAssignment,
                    crate::control::groups::requests::SyncGroupRequest,
                ],
            }
            Heartbeat {
                versions: 0..=4,
                request: HeartbeatRequest,
                python: |wire, _| crate::control::groups::requests::HeartbeatRequest::new(wire),
                answer: |a: crate::control::groups::answers::HeartbeatResponse, _, _| {
                    crate::control::groups::answers::heartbeat(a)
                },
                classes: [crate::control::groups::requests::HeartbeatRequest],
            }
            LeaveGroup {
                versions: 0..=5,
                request: LeaveGroupRequest,
                python: |wire, v| crate::control::groups::requests::LeaveGroupRequest::new(wire, v),
                answer: |a: crate::control::groups::answers::LeaveGroupResponse, _, v| {
                    crate::control::groups::answers::leave_group(a, v)
                },
                classes: [
                    crate::control::groups::requests::LeavingMember,
                    crate::control::groups::requests::LeaveGroupRequest,
                    crate::control::groups::answers::LeaveGroupMemberResult,
                ],
            }
            // v9 (KIP-848) reads the generation as the member epoch of the new consumer
            // protocol's groups; for classic groups, the only ones here, it is the generation.
            OffsetCommit {
                versions: 0..=9,
                request: OffsetCommitRequest,
                python: |wire, _| crate::control::groups::requests::OffsetCommitRequest::new(wire),
                answer: |a: crate::control::groups::answers::OffsetCommitResponse, _, _| {
                    crate::control::groups::answers::offset_commit(a)
                },
                classes: [
                    crate::control::groups::requests::OffsetCommitPartition,
                    crate::control::groups::requests::OffsetCommitTopic,
                    crate::control::groups::requests::OffsetCommitRequest,
                    crate::control::groups::answers::OffsetCommitTopicResult,
                    crate::control::groups::answers::OffsetCommitPartitionResult,
                ],
            }
            // Offsets of a transaction, committed with it (v3 adds the member, KIP-447; v5 is
            // the second transaction protocol's, KIP-890).
            TxnOffsetCommit {
                versions: 0..=5,
                request: TxnOffsetCommitRequest,
                python: |wire, v| {
                    crate::control::groups::txn_offsets::TxnOffsetCommitRequest::new(wire, v)
                },
                answer: |a: crate::control::groups::answers::OffsetCommitResponse, _, _| {
                    crate::control::groups::txn_offsets::answer(a)
                },
                classes: [crate::control::groups::txn_offsets::TxnOffsetCommitRequest],
            }
            // v8+ batch several groups in one request, each answered on its own.
            OffsetFetch {
                versions: 0..=9,
                request: OffsetFetchRequest,
                python: |wire, v| crate::control::groups::requests::OffsetFetchRequest::new(wire, v),
                answer: |a: crate::control::groups::answers::OffsetFetchResponse, wire, v| {
                    crate::control::groups::answers::offset_fetch(a, wire, v)
                },
                classes: [
                    crate::control::groups::requests::OffsetFetchTopic,
                    crate::control::groups::requests::OffsetFetchGroup,
                    crate::control::groups::requests::OffsetFetchRequest,
                    crate::control::groups::answers::OffsetFetchGroupResult,
                    crate::control::groups::answers::OffsetFetchTopicResult,
                    crate::control::groups::answers::OffsetFetchPartitionResult,
                ],
            }
            DescribeGroups {
                versions: 0..=5,
                request: DescribeGroupsRequest,
                python: |wire, _| crate::control::group_admin::DescribeGroupsRequest::new(wire),
                answer: |a: crate::control::group_admin::DescribeGroupsResponse, _, v| {
                    crate::control::group_admin::describe_groups(a, v)
                },
                classes: [
                    crate::control::group_admin::DescribeGroupsRequest,
                    crate::control::group_admin::DescribedGroup,
                    crate::control::group_admin::DescribedGroupMember,
                ],
            }
            ListGroups {
                versions: 0..=5,
                request: ListGroupsRequest,
                python: |wire, _| crate::control::group_admin::ListGroupsRequest::new(wire),
                answer: |a: crate::control::group_admin::ListGroupsResponse, _, v| {
                    crate::control::group_admin::list_groups(a, v)
                },
                classes: [
                    crate::control::group_admin::ListGroupsRequest,
                    crate::control::group_admin::ListedGroup,
                ],
            }
            DeleteGroups {
                versions: 0..=2,
                request: DeleteGroupsRequest,
                python: |wire, _| crate::control::group_admin::DeleteGroupsRequest::new(wire),
                answer: |a: crate::control::group_admin::DeleteGroupsResponse, _, _| {
                    crate::control::group_admin::delete_groups(a)
                },
                classes: [
                    crate::control::group_admin::DeleteGroupsRequest,
                    crate::control::group_admin::DeletableGroupResult,
                ],
            }
            // KIP-496: committed offsets of partitions a group no longer consumes.
            OffsetDelete {
                versions: 0..=0,
                request: OffsetDeleteRequest,
                python: |wire, _| crate::control::offset_delete::OffsetDeleteRequest::new(wire),
                answer: |a: crate::control::offset_delete::OffsetDeleteResponse, _, _| {
                    crate::control::offset_delete::offset_delete(a)
                },
                classes: [
                    crate::control::offset_delete::OffsetDeleteTopic,
                    crate::control::offset_delete::OffsetDeleteRequest,
                    crate::control::offset_delete::OffsetDeleteTopicResult,
                    crate::control::offset_delete::OffsetDeletePartitionResult,
                ],
            }
            DescribeConfigs {
                versions: 0..=4,
                request: DescribeConfigsRequest,
                python: |wire, _| crate::control::configs::DescribeConfigsRequest::new(wire),
                answer: |a: crate::control::configs::DescribeConfigsResponse, _, v| {
                    crate::control::configs::describe_configs(a, v)
                },
                classes: [
                    crate::control::configs::DescribeConfigsResource,
                    crate::control::configs::DescribeConfigsRequest,
                    crate::control::configs::DescribeConfigsResult,
                    crate::control::configs::DescribedConfig,
                    crate::control::configs::ConfigSynonym,
                ],
            }
            AlterConfigs {
                versions: 0..=2,
                request: AlterConfigsRequest,
                python: |wire, _| crate::control::configs::AlterConfigsRequest::new(wire),
                answer: |a: crate::control::configs::AlterConfigsResponse, _, _| {
                    crate::control::configs::alter_configs(a)
                },
                classes: [
                    crate::control::configs::AlterableConfig,
                    crate::control::configs::AlterConfigsResource,
                    crate::control::configs::AlterConfigsRequest,
                    crate::control::configs::AlterConfigsResourceResult,
                ],
            }
            // Python sees it as an AlterConfigs request whose configs carry an operation, and
            // answers it the same way.
            IncrementalAlterConfigs {
                versions: 0..=1,
                request: IncrementalAlterConfigsRequest,
                python: |wire, _| {
                    crate::control::configs::AlterConfigsRequest::incremental(wire)
                },
                answer: |a: crate::control::configs::AlterConfigsResponse, _, _| {
                    crate::control::configs::incremental_alter_configs(a)
                },
                classes: [],
            }
            CreatePartitions {
                versions: 0..=3,
                request: CreatePartitionsRequest,
                python: |wire, _| crate::control::partitions::CreatePartitionsRequest::new(wire),
                answer: |a: crate::control::partitions::CreatePartitionsResponse, _, _| {
                    crate::control::partitions::create_partitions(a)
                },
                classes: [
                    crate::control::partitions::CreatePartitionsTopic,
                    crate::control::partitions::CreatePartitionsRequest,
                    crate::control::partitions::CreatePartitionsTopicResult,
                ],
            }
        }
    };
}

pub(crate) use control_apis;

/// The served version range of each control API, for ApiVersions.
macro_rules! served_ranges {
    ($($key:ident { versions: $min:literal..=$max:literal, $($rest:tt)* })*) => {
        &[$(crate::protocol::versions::SupportedApi {
            key: kafka_protocol::messages::ApiKey::$key,
            min: $min,
            max: $max,
        },)*]
    };
}

pub(crate) const SERVED: &[crate::protocol::versions::SupportedApi] = control_apis!(served_ranges);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::body::ControlBody;

    #[test]
    fn every_row_is_routed_to_the_control_plane_and_nothing_else_is() {
        for api in SERVED {
            assert!(ControlBody::serves(api.key), "{:?}", api.key);
            assert!(api.min <= api.max, "{:?}", api.key);
        }
        for key in [
            kafka_protocol::messages::ApiKey::Produce,
            kafka_protocol::messages::ApiKey::Fetch,
            kafka_protocol::messages::ApiKey::Metadata,
            kafka_protocol::messages::ApiKey::FindCoordinator,
        ] {
            assert!(!ControlBody::serves(key), "{key:?}");
        }
    }
}
