use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

use super::*;
use crate::control::testing::{advertised, on_the_wire};

fn s(text: &str) -> String {
    text.to_string()
}

fn join_answer(protocol_name: Option<&str>) -> JoinGroupResponse {
    JoinGroupResponse {
        error_code: 0,
        generation_id: 3,
        protocol_type: Some(s("consumer")),
        protocol_name: protocol_name.map(s),
        leader: s("m-1"),
        member_id: s("m-2"),
        members: vec![JoinGroupMember {
            member_id: s("m-1"),
            group_instance_id: Some(s("static-1")),
            metadata: vec![1, 2, 3],
        }],
        skip_assignment: true,
        throttle_time_ms: 5,
    }
}

#[test]
fn join_group_at_every_version() {
    for v in advertised(ApiKey::JoinGroup) {
        let wire = on_the_wire(&join_group(join_answer(Some("range")), v), v);
        assert_eq!((wire.error_code, wire.generation_id), (0, 3));
        assert_eq!(wire.throttle_time_ms, if v >= 2 { 5 } else { 0 });
        assert_eq!(wire.protocol_name.as_deref(), Some("range"));
        let protocol_type = wire.protocol_type.as_deref();
        assert_eq!(protocol_type, (v >= 7).then_some("consumer"), "v{v}");
        assert_eq!(
            (wire.leader.as_str(), wire.member_id.as_str()),
            ("m-1", "m-2")
        );
        assert_eq!(wire.skip_assignment, v >= 9);
        let member = &wire.members[0];
        assert_eq!(member.member_id.as_str(), "m-1");
        assert_eq!(member.metadata.as_ref(), [1, 2, 3]);
        let instance = member.group_instance_id.as_deref();
        assert_eq!(instance, (v >= 5).then_some("static-1"), "v{v}");
    }
}

#[test]
fn join_group_without_a_protocol_is_empty_until_v7_then_null() {
    for v in advertised(ApiKey::JoinGroup) {
        let answer = JoinGroupResponse {
            error_code: ResponseError::UnknownMemberId.code(),
            members: vec![],
            ..join_answer(None)
        };
        let wire = on_the_wire(&join_group(answer, v), v);
        let expected = if v < 7 { Some("") } else { None };
        assert_eq!(wire.protocol_name.as_deref(), expected, "v{v}");
        assert_eq!(wire.error_code, ResponseError::UnknownMemberId.code());
    }
}

#[test]
fn sync_group_at_every_version() {
    for v in advertised(ApiKey::SyncGroup) {
        let answer = SyncGroupResponse {
            error_code: 0,
            protocol_type: Some(s("consumer")),
            protocol_name: Some(s("range")),
            assignment: vec![9, 8],
            throttle_time_ms: 5,
        };
        let wire = on_the_wire(&sync_group(answer), v);
        assert_eq!(wire.assignment.as_ref(), [9, 8]);
        assert_eq!(wire.throttle_time_ms, if v >= 1 { 5 } else { 0 });
        assert_eq!(
            wire.protocol_type.as_deref(),
            (v >= 5).then_some("consumer")
        );
        assert_eq!(wire.protocol_name.as_deref(), (v >= 5).then_some("range"));
    }
}

#[test]
fn heartbeat_at_every_version() {
    for v in advertised(ApiKey::Heartbeat) {
        let rebalancing = ResponseError::RebalanceInProgress.code();
        let answer = HeartbeatResponse {
            error_code: rebalancing,
            throttle_time_ms: 5,
        };
        let wire = on_the_wire(&heartbeat(answer), v);
        assert_eq!(wire.error_code, rebalancing);
        assert_eq!(wire.throttle_time_ms, if v >= 1 { 5 } else { 0 });
    }
}

fn leave_answer(error_code: i16, member_errors: &[i16]) -> LeaveGroupResponse {
    LeaveGroupResponse {
        error_code,
        members: member_errors
            .iter()
            .enumerate()
            .map(|(i, &error_code)| LeaveGroupMemberResult {
                member_id: format!("m-{i}"),
                group_instance_id: None,
                error_code,
            })
            .collect(),
        throttle_time_ms: 0,
    }
}

#[test]
fn leave_group_carries_the_member_error_at_the_top_before_v3() {
    let unknown = ResponseError::UnknownMemberId.code();
    let not_coordinator = ResponseError::NotCoordinator.code();
    for v in advertised(ApiKey::LeaveGroup) {
        let wire = on_the_wire(&leave_group(leave_answer(0, &[unknown]), v), v);
        if v <= 2 {
            assert_eq!(wire.error_code, unknown, "v{v}");
            assert!(wire.members.is_empty());
        } else {
            assert_eq!(wire.error_code, 0, "v{v}");
            assert_eq!(wire.members.len(), 1);
            assert_eq!(wire.members[0].member_id.as_str(), "m-0");
            assert_eq!(wire.members[0].error_code, unknown);
        }
        // a group-level error wins, and shows at every version
        let answer = leave_answer(not_coordinator, &[unknown]);
        let wire = on_the_wire(&leave_group(answer, v), v);
        assert_eq!(wire.error_code, not_coordinator, "v{v}");
        let wire = on_the_wire(&leave_group(leave_answer(0, &[]), v), v);
        assert_eq!(wire.error_code, 0, "v{v}");
    }
}

#[test]
fn offset_commit_at_every_version() {
    let answer = OffsetCommitResponse {
        topics: vec![OffsetCommitTopicResult {
            name: s("orders"),
            partitions: vec![
                OffsetCommitPartitionResult {
                    partition_index: 0,
                    error_code: 0,
                },
                OffsetCommitPartitionResult {
                    partition_index: 1,
                    error_code: ResponseError::IllegalGeneration.code(),
                },
            ],
        }],
        throttle_time_ms: 5,
    };
    for v in advertised(ApiKey::OffsetCommit) {
        let wire = on_the_wire(&offset_commit(answer.clone()), v);
        assert_eq!(wire.throttle_time_ms, if v >= 3 { 5 } else { 0 });
        let topic = &wire.topics[0];
        assert_eq!(topic.name.as_str(), "orders");
        let results: Vec<_> = topic
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code))
            .collect();
        assert_eq!(
            results,
            [(0, 0), (1, ResponseError::IllegalGeneration.code())]
        );
    }
}

fn fetch_request() -> WireFetchRequest {
    let topic = OffsetFetchRequestTopic::default()
        .with_name(topic_name("orders"))
        .with_partition_indexes(vec![0, 1]);
    WireFetchRequest::default().with_topics(Some(vec![topic]))
}

fn fetched(partition_index: i32, committed_offset: i64) -> OffsetFetchPartitionResult {
    OffsetFetchPartitionResult {
        partition_index,
        committed_offset,
        committed_leader_epoch: 4,
        metadata: Some(s("meta")),
        error_code: 0,
    }
}

fn one_group(error_code: i16, topics: Vec<OffsetFetchTopicResult>) -> OffsetFetchResponse {
    OffsetFetchResponse {
        groups: vec![OffsetFetchGroupResult {
            group_id: s("g"),
            error_code,
            topics,
        }],
        throttle_time_ms: 5,
    }
}

fn orders(partitions: Vec<OffsetFetchPartitionResult>) -> Vec<OffsetFetchTopicResult> {
    vec![OffsetFetchTopicResult {
        name: s("orders"),
        partitions,
    }]
}

/// (partition, offset, error, leader epoch) of every partition result of the response
/// (v0–7) or of its first group (v8+), with the group's error.
fn results(wire: &wire::OffsetFetchResponse, v: i16) -> (i16, Vec<(i32, i64, i16, i32)>) {
    if v >= 8 {
        let group = &wire.groups[0];
        assert_eq!(group.group_id.as_str(), "g");
        let partitions = group.topics.iter().flat_map(|t| &t.partitions);
        let partitions = partitions.map(|p| {
            assert_eq!(p.metadata.as_deref(), Some("meta"));
            let epoch = p.committed_leader_epoch;
            (p.partition_index, p.committed_offset, p.error_code, epoch)
        });
        return (group.error_code, partitions.collect());
    }
    let partitions = wire.topics.iter().flat_map(|t| &t.partitions);
    let partitions = partitions.map(|p| {
        let epoch = p.committed_leader_epoch;
        (p.partition_index, p.committed_offset, p.error_code, epoch)
    });
    (wire.error_code, partitions.collect())
}

#[test]
fn offset_fetch_at_every_version() {
    let answer = one_group(0, orders(vec![fetched(0, 42), fetched(1, -1)]));
    for v in advertised(ApiKey::OffsetFetch) {
        let wire = on_the_wire(&offset_fetch(answer.clone(), &fetch_request(), v), v);
        assert_eq!(wire.throttle_time_ms, if v >= 3 { 5 } else { 0 });
        let epoch = if v >= 5 { 4 } else { -1 };
        let expected = vec![(0, 42, 0, epoch), (1, -1, 0, epoch)];
        assert_eq!(results(&wire, v), (0, expected), "v{v}");
    }
}

#[test]
fn offset_fetch_group_error_goes_into_partitions_before_v2() {
    let loading = ResponseError::CoordinatorLoadInProgress.code();
    let without_topics = one_group(loading, vec![]);
    let with_topics = one_group(loading, orders(vec![fetched(0, 42)]));
    for v in advertised(ApiKey::OffsetFetch) {
        let wire = on_the_wire(
            &offset_fetch(without_topics.clone(), &fetch_request(), v),
            v,
        );
        let wire_with = on_the_wire(&offset_fetch(with_topics.clone(), &fetch_request(), v), v);
        let epoch = if v >= 5 { 4 } else { -1 };
        if v < 2 {
            // the requested partitions, each with the error (v0-1 have no group error)
            let none = vec![(0, -1, loading, -1), (1, -1, loading, -1)];
            assert_eq!(results(&wire, v), (0, none), "v{v}");
            let with = vec![(0, 42, loading, epoch)];
            assert_eq!(results(&wire_with, v), (0, with), "v{v}");
        } else {
            assert_eq!(results(&wire, v), (loading, vec![]), "v{v}");
            let with = vec![(0, 42, 0, epoch)];
            assert_eq!(results(&wire_with, v), (loading, with), "v{v}");
        }
    }
}

#[test]
fn offset_fetch_answers_each_group_from_v8() {
    let not_coordinator = ResponseError::NotCoordinator.code();
    let answer = OffsetFetchResponse {
        groups: vec![
            OffsetFetchGroupResult {
                group_id: s("a"),
                error_code: 0,
                topics: orders(vec![fetched(3, 7)]),
            },
            OffsetFetchGroupResult {
                group_id: s("b"),
                error_code: not_coordinator,
                topics: vec![],
            },
        ],
        throttle_time_ms: 0,
    };
    for v in [8, 9] {
        let wire = on_the_wire(&offset_fetch(answer.clone(), &fetch_request(), v), v);
        let groups: Vec<_> = wire
            .groups
            .iter()
            .map(|g| {
                let offsets = g.topics.iter().flat_map(|t| &t.partitions);
                let offsets = offsets.map(|p| (p.partition_index, p.committed_offset));
                (
                    g.group_id.as_str(),
                    g.error_code,
                    offsets.collect::<Vec<_>>(),
                )
            })
            .collect();
        let expected = [("a", 0, vec![(3, 7)]), ("b", not_coordinator, vec![])];
        assert_eq!(groups, expected, "v{v}");
    }
}
