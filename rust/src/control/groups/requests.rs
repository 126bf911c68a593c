//! Group requests as the Python coordinator sees them: one shape per API whatever the version,
//! with what an old version lacks filled in the way Kafka reads it.

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    HeartbeatRequest as WireHeartbeat, JoinGroupRequest as WireJoin,
    LeaveGroupRequest as WireLeave, OffsetCommitRequest as WireCommit,
    OffsetFetchRequest as WireFetch, SyncGroupRequest as WireSync, TopicName,
};
use pyo3::prelude::*;

use crate::control::text::{read as text, read_opt as optional};

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct JoinGroupProtocol {
    name: String,
    metadata: Vec<u8>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct JoinGroupRequest {
    group_id: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    member_id: String,
    group_instance_id: Option<String>,
    protocol_type: String,
    protocols: Vec<JoinGroupProtocol>,
    reason: Option<String>,
}

impl JoinGroupRequest {
    pub(crate) fn new(wire: &WireJoin, version: i16) -> Self {
        JoinGroupRequest {
            group_id: text(&wire.group_id),
            session_timeout_ms: wire.session_timeout_ms,
            // v0 has no rebalance timeout: Kafka bounds the rebalance by the session timeout.
            rebalance_timeout_ms: if version == 0 {
                wire.session_timeout_ms
            } else {
                wire.rebalance_timeout_ms
            },
            member_id: text(&wire.member_id),
            group_instance_id: optional(&wire.group_instance_id),
            protocol_type: text(&wire.protocol_type),
            protocols: wire
                .protocols
                .iter()
                .map(|p| JoinGroupProtocol {
                    name: text(&p.name),
                    metadata: p.metadata.to_vec(),
                })
                .collect(),
            reason: optional(&wire.reason),
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct SyncGroupAssignment {
    member_id: String,
    assignment: Vec<u8>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct SyncGroupRequest {
    group_id: String,
    generation_id: i32,
    member_id: String,
    group_instance_id: Option<String>,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    assignments: Vec<SyncGroupAssignment>,
}

impl SyncGroupRequest {
    pub(crate) fn new(wire: &WireSync) -> Self {
        SyncGroupRequest {
            group_id: text(&wire.group_id),
            generation_id: wire.generation_id,
            member_id: text(&wire.member_id),
            group_instance_id: optional(&wire.group_instance_id),
            protocol_type: optional(&wire.protocol_type),
            protocol_name: optional(&wire.protocol_name),
            assignments: wire
                .assignments
                .iter()
                .map(|a| SyncGroupAssignment {
                    member_id: text(&a.member_id),
                    assignment: a.assignment.to_vec(),
                })
                .collect(),
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct HeartbeatRequest {
    group_id: String,
    generation_id: i32,
    member_id: String,
    group_instance_id: Option<String>,
}

impl HeartbeatRequest {
    pub(crate) fn new(wire: &WireHeartbeat) -> Self {
        HeartbeatRequest {
            group_id: text(&wire.group_id),
            generation_id: wire.generation_id,
            member_id: text(&wire.member_id),
            group_instance_id: optional(&wire.group_instance_id),
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LeavingMember {
    member_id: String,
    group_instance_id: Option<String>,
    reason: Option<String>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct LeaveGroupRequest {
    group_id: String,
    members: Vec<LeavingMember>,
}

impl LeaveGroupRequest {
    pub(crate) fn new(wire: &WireLeave, version: i16) -> Self {
        // v0–2 name the one leaving member; v3+ (KIP-345) a batch of them.
        let members = if version <= 2 {
            vec![LeavingMember {
                member_id: text(&wire.member_id),
                group_instance_id: None,
                reason: None,
            }]
        } else {
            wire.members
                .iter()
                .map(|m| LeavingMember {
                    member_id: text(&m.member_id),
                    group_instance_id: optional(&m.group_instance_id),
                    reason: optional(&m.reason),
                })
                .collect()
        };
        LeaveGroupRequest {
            group_id: text(&wire.group_id),
            members,
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct OffsetCommitPartition {
    pub(super) partition_index: i32,
    pub(super) committed_offset: i64,
    pub(super) committed_leader_epoch: i32,
    pub(super) committed_metadata: Option<String>,
    pub(super) commit_timestamp: i64,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct OffsetCommitTopic {
    pub(super) name: String,
    pub(super) partitions: Vec<OffsetCommitPartition>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct OffsetCommitRequest {
    group_id: String,
    generation_id: i32,
    member_id: String,
    group_instance_id: Option<String>,
    retention_time_ms: i64,
    topics: Vec<OffsetCommitTopic>,
}

impl OffsetCommitRequest {
    /// The codec already fills what a version lacks as Kafka does: generation -1 and no member
    /// (v0), commit timestamp -1 (all but v1), retention -1 (all but v2–4), epoch -1 (< v6).
    pub(crate) fn new(wire: &WireCommit) -> Self {
        OffsetCommitRequest {
            group_id: text(&wire.group_id),
            generation_id: wire.generation_id_or_member_epoch,
            member_id: text(&wire.member_id),
            group_instance_id: optional(&wire.group_instance_id),
            retention_time_ms: wire.retention_time_ms,
            topics: wire
                .topics
                .iter()
                .map(|t| OffsetCommitTopic {
                    name: text(&t.name),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| OffsetCommitPartition {
                            partition_index: p.partition_index,
                            committed_offset: p.committed_offset,
                            committed_leader_epoch: p.committed_leader_epoch,
                            committed_metadata: optional(&p.committed_metadata),
                            commit_timestamp: p.commit_timestamp,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetFetchTopic {
    name: String,
    partition_indexes: Vec<i32>,
}

/// One group's part of an OffsetFetch (v8+ ask for several groups in one request).
#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetFetchGroup {
    group_id: String,
    topics: Option<Vec<OffsetFetchTopic>>,
}

/// v9's member id and epoch are left out: they fence the new consumer protocol's (KIP-848)
/// members, and a classic group, the only kind here, ignores them as Kafka's does.
#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct OffsetFetchRequest {
    groups: Vec<OffsetFetchGroup>,
    require_stable: bool,
}

impl OffsetFetchRequest {
    pub(crate) fn new(wire: &WireFetch, version: i16) -> Self {
        let topic = |name: &TopicName, partition_indexes: &Vec<i32>| OffsetFetchTopic {
            name: text(name),
            partition_indexes: partition_indexes.clone(),
        };
        let groups = if version >= 8 {
            let group = |g: &OffsetFetchRequestGroup| OffsetFetchGroup {
                group_id: text(&g.group_id),
                topics: g.topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .map(|t| topic(&t.name, &t.partition_indexes))
                        .collect()
                }),
            };
            wire.groups.iter().map(group).collect()
        } else {
            let topics = wire.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .map(|t| topic(&t.name, &t.partition_indexes))
                    .collect()
            });
            vec![OffsetFetchGroup {
                group_id: text(&wire.group_id),
                // "Every committed partition" (null) exists from v2; before, null means none.
                topics: if version < 2 {
                    Some(topics.unwrap_or_default())
                } else {
                    topics
                },
            }]
        };
        OffsetFetchRequest {
            groups,
            require_stable: wire.require_stable,
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::{ApiKey, GroupId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::control::body::ControlBody;
    use crate::control::testing::decoded;
    use crate::protocol::header::testing::request;
    use crate::protocol::topic_name;

    fn s(text: &'static str) -> StrBytes {
        StrBytes::from_static_str(text)
    }

    #[test]
    fn join_group_fills_the_rebalance_timeout_of_v0() {
        for v in [0, 1, 5, 6, 8, 9] {
            let wire = WireJoin::default()
                .with_group_id(GroupId(s("g")))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(if v >= 1 { 60_000 } else { -1 })
                .with_member_id(s("m-1"))
                .with_group_instance_id((v >= 5).then(|| s("static")))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(bytes::Bytes::from_static(b"\x00\x01"))])
                .with_reason((v >= 8).then(|| s("rejoining")));
            let ControlBody::JoinGroup(body) = decoded(ApiKey::JoinGroup, v, &wire) else {
                panic!("v{v} decoded as another API");
            };
            let request = JoinGroupRequest::new(&body, v);
            assert_eq!(request.group_id, "g");
            assert_eq!(request.session_timeout_ms, 10_000);
            let rebalance = if v == 0 { 10_000 } else { 60_000 };
            assert_eq!(request.rebalance_timeout_ms, rebalance, "v{v}");
            assert_eq!(request.member_id, "m-1");
            assert_eq!(request.group_instance_id.is_some(), v >= 5);
            assert_eq!(request.protocol_type, "consumer");
            assert_eq!(request.protocols[0].name, "range");
            assert_eq!(request.protocols[0].metadata, [0, 1]);
            assert_eq!(request.reason.as_deref(), (v >= 8).then_some("rejoining"));
        }
    }

    #[test]
    fn sync_group_and_heartbeat() {
        for v in [0, 3, 4, 5] {
            let wire = WireSync::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(2)
                .with_member_id(s("m-1"))
                .with_group_instance_id((v >= 3).then(|| s("static")))
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")))
                .with_assignments(vec![SyncGroupRequestAssignment::default()
                    .with_member_id(s("m-1"))
                    .with_assignment(bytes::Bytes::from_static(b"\x07"))]);
            let ControlBody::SyncGroup(body) = decoded(ApiKey::SyncGroup, v, &wire) else {
                panic!("v{v} decoded as another API");
            };
            let request = SyncGroupRequest::new(&body);
            assert_eq!(
                (request.generation_id, request.member_id.as_str()),
                (2, "m-1")
            );
            assert_eq!(request.group_instance_id.is_some(), v >= 3);
            // only v5 carries the protocol
            assert_eq!(
                request.protocol_name.as_deref(),
                (v >= 5).then_some("range")
            );
            assert_eq!(
                request.protocol_type.as_deref(),
                (v >= 5).then_some("consumer")
            );
            assert_eq!(request.assignments[0].member_id, "m-1");
            assert_eq!(request.assignments[0].assignment, [7]);
        }
        for v in [0, 3, 4] {
            let wire = WireHeartbeat::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(2)
                .with_member_id(s("m-1"))
                .with_group_instance_id((v >= 3).then(|| s("static")));
            let ControlBody::Heartbeat(body) = decoded(ApiKey::Heartbeat, v, &wire) else {
                panic!("v{v} decoded as another API");
            };
            let request = HeartbeatRequest::new(&body);
            assert_eq!((request.group_id.as_str(), request.generation_id), ("g", 2));
            assert_eq!(request.group_instance_id.is_some(), v >= 3);
        }
    }

    #[test]
    fn leave_group_is_a_list_of_members_at_every_version() {
        for v in [0, 2] {
            let wire = WireLeave::default()
                .with_group_id(GroupId(s("g")))
                .with_member_id(s("m-1"));
            let ControlBody::LeaveGroup(body) = decoded(ApiKey::LeaveGroup, v, &wire) else {
                panic!("v{v} decoded as another API");
            };
            let request = LeaveGroupRequest::new(&body, v);
            let only = LeavingMember {
                member_id: "m-1".into(),
                group_instance_id: None,
                reason: None,
            };
            assert_eq!(request.members, [only]);
        }
        for v in [3, 5] {
            let member = |id, instance| {
                MemberIdentity::default()
                    .with_member_id(s(id))
                    .with_group_instance_id(Some(s(instance)))
                    .with_reason((v >= 5).then(|| s("shutting down")))
            };
            let wire = WireLeave::default()
                .with_group_id(GroupId(s("g")))
                .with_members(vec![member("m-1", "a"), member("m-2", "b")]);
            let ControlBody::LeaveGroup(body) = decoded(ApiKey::LeaveGroup, v, &wire) else {
                panic!("v{v} decoded as another API");
            };
            let request = LeaveGroupRequest::new(&body, v);
            assert_eq!(request.group_id, "g");
            let ids: Vec<_> = request
                .members
                .iter()
                .map(|m| m.member_id.as_str())
                .collect();
            assert_eq!(ids, ["m-1", "m-2"]);
            assert_eq!(request.members[1].group_instance_id.as_deref(), Some("b"));
            let reason = request.members[0].reason.as_deref();
            assert_eq!(reason, (v >= 5).then_some("shutting down"));
        }
    }

    #[test]
    fn offset_commit_fills_what_old_versions_lack() {
        for v in [0, 1, 2, 6, 7, 8] {
            let partition = OffsetCommitRequestPartition::default()
                .with_partition_index(3)
                .with_committed_offset(42)
                .with_committed_leader_epoch(5)
                .with_commit_timestamp(if v == 1 { 1_000 } else { -1 })
                .with_committed_metadata(Some(s("meta")));
            let wire = WireCommit::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id_or_member_epoch(4)
                .with_member_id(s("m-1"))
                .with_group_instance_id((v >= 7).then(|| s("static")))
                .with_retention_time_ms(60_000)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(topic_name("orders"))
                    .with_partitions(vec![partition])]);
            let ControlBody::OffsetCommit(body) = decoded(ApiKey::OffsetCommit, v, &wire) else {
                panic!("v{v} decoded as another API");
            };
            let request = OffsetCommitRequest::new(&body);
            let generation = if v == 0 { -1 } else { 4 };
            assert_eq!(request.generation_id, generation, "v{v}");
            assert_eq!(request.member_id, if v == 0 { "" } else { "m-1" });
            assert_eq!(request.group_instance_id.is_some(), v >= 7);
            let retention = if (2..=4).contains(&v) { 60_000 } else { -1 };
            assert_eq!(request.retention_time_ms, retention, "v{v}");
            assert_eq!(request.topics[0].name, "orders");
            let p = &request.topics[0].partitions[0];
            assert_eq!((p.partition_index, p.committed_offset), (3, 42));
            assert_eq!(p.committed_leader_epoch, if v >= 6 { 5 } else { -1 });
            assert_eq!(p.commit_timestamp, if v == 1 { 1_000 } else { -1 });
            assert_eq!(p.committed_metadata.as_deref(), Some("meta"));
        }
    }

    fn orders(partition_indexes: Vec<i32>) -> OffsetFetchTopic {
        OffsetFetchTopic {
            name: "orders".into(),
            partition_indexes,
        }
    }

    #[test]
    fn offset_fetch_of_every_partition_only_from_v2() {
        let orders_wire = OffsetFetchRequestTopic::default()
            .with_name(topic_name("orders"))
            .with_partition_indexes(vec![0, 2]);
        for v in [0, 1, 2, 6, 7] {
            for topics in [Some(vec![orders_wire.clone()]), None] {
                let wire = WireFetch::default()
                    .with_group_id(GroupId(s("g")))
                    .with_topics(topics.clone())
                    .with_require_stable(v >= 7);
                let ControlBody::OffsetFetch(body) = decoded(ApiKey::OffsetFetch, v, &wire) else {
                    panic!("v{v} decoded as another API");
                };
                let request = OffsetFetchRequest::new(&body, v);
                assert_eq!(request.require_stable, v >= 7);
                let expected = match topics {
                    Some(_) => Some(vec![orders(vec![0, 2])]),
                    None if v < 2 => Some(vec![]),
                    None => None,
                };
                let group = OffsetFetchGroup {
                    group_id: "g".into(),
                    topics: expected,
                };
                assert_eq!(request.groups, [group], "v{v}");
            }
        }
    }

    #[test]
    fn offset_fetch_asks_for_several_groups_from_v8() {
        let orders_wire = OffsetFetchRequestTopics::default()
            .with_name(topic_name("orders"))
            .with_partition_indexes(vec![1]);
        let groups = vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("a")))
                .with_topics(Some(vec![orders_wire])),
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("b")))
                .with_member_id(Some(s("member-1")))
                .with_member_epoch(3)
                .with_topics(None),
        ];
        for v in [8, 9] {
            let wire = WireFetch::default()
                .with_groups(groups.clone())
                .with_require_stable(true);
            let ControlBody::OffsetFetch(body) = decoded(ApiKey::OffsetFetch, v, &wire) else {
                panic!("v{v} decoded as another API");
            };
            let request = OffsetFetchRequest::new(&body, v);
            assert!(request.require_stable);
            let expected = [
                OffsetFetchGroup {
                    group_id: "a".into(),
                    topics: Some(vec![orders(vec![1])]),
                },
                OffsetFetchGroup {
                    group_id: "b".into(),
                    topics: None,
                },
            ];
            assert_eq!(request.groups, expected, "v{v}");
        }
    }

    #[test]
    fn undecodable_bodies_are_errors_not_panics() {
        let wire = WireJoin::default()
            .with_group_id(GroupId(s("g")))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default().with_name(s("range"))
            ]);
        let whole = request(ApiKey::JoinGroup, 9, &wire);
        for cut in 0..whole.body.len() {
            let mut truncated = whole.clone();
            truncated.body = whole.body.slice(..cut);
            assert!(
                ControlBody::decode(&truncated).is_err(),
                "{cut} bytes decoded"
            );
        }
        let mut garbage = whole.clone();
        garbage.body = bytes::Bytes::from_static(&[0xff; 64]);
        assert!(ControlBody::decode(&garbage).is_err());
        let mut other = whole;
        other.api_key = ApiKey::Produce;
        assert!(
            ControlBody::decode(&other).is_err(),
            "not a control-plane API"
        );
    }
}
