//! The coordinator's answers (classes Python constructs, re-exported by
//! `kafscale.groups.protocol`) and their encoding at the request's version: fields a version lacks are dropped, and
//! errors an old version has no field for are carried where Kafka carries them.

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{self as wire, GroupId, OffsetFetchRequest as WireFetchRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use pyo3::prelude::*;

use crate::control::text::{wire as text, wire_opt as optional};
use crate::protocol::topic_name;

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JoinGroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Vec<u8>,
}

#[pymethods]
impl JoinGroupMember {
    #[new]
    #[pyo3(signature = (member_id, group_instance_id, metadata))]
    fn new(member_id: String, group_instance_id: Option<String>, metadata: Vec<u8>) -> Self {
        JoinGroupMember {
            member_id,
            group_instance_id,
            metadata,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JoinGroupResponse {
    pub error_code: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    pub members: Vec<JoinGroupMember>,
    pub skip_assignment: bool,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl JoinGroupResponse {
    #[new]
    #[pyo3(signature = (error_code, generation_id = -1, protocol_type = None, protocol_name = None, leader = String::new(), member_id = String::new(), members = Vec::new(), skip_assignment = false, throttle_time_ms = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        error_code: i16,
        generation_id: i32,
        protocol_type: Option<String>,
        protocol_name: Option<String>,
        leader: String,
        member_id: String,
        members: Vec<JoinGroupMember>,
        skip_assignment: bool,
        throttle_time_ms: i32,
    ) -> Self {
        JoinGroupResponse {
            error_code,
            generation_id,
            protocol_type,
            protocol_name,
            leader,
            member_id,
            members,
            skip_assignment,
            throttle_time_ms,
        }
    }
}

pub(crate) fn join_group(answer: JoinGroupResponse, version: i16) -> wire::JoinGroupResponse {
    // The protocol name may be null only from v7; before, "no protocol" is "".
    let protocol_name = match answer.protocol_name {
        None if version < 7 => Some(StrBytes::default()),
        name => optional(name),
    };
    let members = answer.members.into_iter().map(|m| {
        JoinGroupResponseMember::default()
            .with_member_id(text(m.member_id))
            .with_group_instance_id(optional(m.group_instance_id))
            .with_metadata(m.metadata.into())
    });
    wire::JoinGroupResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_error_code(answer.error_code)
        .with_generation_id(answer.generation_id)
        .with_protocol_type(optional(answer.protocol_type))
        .with_protocol_name(protocol_name)
        .with_leader(text(answer.leader))
        // Only v9 (KIP-814) can tell the leader to skip the assignment.
        .with_skip_assignment(version >= 9 && answer.skip_assignment)
        .with_member_id(text(answer.member_id))
        .with_members(members.collect())
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyncGroupResponse {
    pub error_code: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Vec<u8>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl SyncGroupResponse {
    #[new]
    #[pyo3(signature = (error_code, protocol_type = None, protocol_name = None, assignment = Vec::new(), throttle_time_ms = 0))]
    fn new(
        error_code: i16,
        protocol_type: Option<String>,
        protocol_name: Option<String>,
        assignment: Vec<u8>,
        throttle_time_ms: i32,
    ) -> Self {
        SyncGroupResponse {
            error_code,
            protocol_type,
            protocol_name,
            assignment,
            throttle_time_ms,
        }
    }
}

/// The protocol type and name exist from v5; the codec leaves them out before.
pub(crate) fn sync_group(answer: SyncGroupResponse) -> wire::SyncGroupResponse {
    wire::SyncGroupResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_error_code(answer.error_code)
        .with_protocol_type(optional(answer.protocol_type))
        .with_protocol_name(optional(answer.protocol_name))
        .with_assignment(answer.assignment.into())
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeartbeatResponse {
    pub error_code: i16,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl HeartbeatResponse {
    #[new]
    #[pyo3(signature = (error_code, throttle_time_ms = 0))]
    fn new(error_code: i16, throttle_time_ms: i32) -> Self {
        HeartbeatResponse {
            error_code,
            throttle_time_ms,
        }
    }
}

pub(crate) fn heartbeat(answer: HeartbeatResponse) -> wire::HeartbeatResponse {
    wire::HeartbeatResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_error_code(answer.error_code)
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LeaveGroupMemberResult {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub error_code: i16,
}

#[pymethods]
impl LeaveGroupMemberResult {
    #[new]
    #[pyo3(signature = (member_id, group_instance_id, error_code))]
    fn new(member_id: String, group_instance_id: Option<String>, error_code: i16) -> Self {
        LeaveGroupMemberResult {
            member_id,
            group_instance_id,
            error_code,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LeaveGroupResponse {
    pub error_code: i16,
    pub members: Vec<LeaveGroupMemberResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl LeaveGroupResponse {
    #[new]
    #[pyo3(signature = (error_code, members = Vec::new(), throttle_time_ms = 0))]
    fn new(error_code: i16, members: Vec<LeaveGroupMemberResult>, throttle_time_ms: i32) -> Self {
        LeaveGroupResponse {
            error_code,
            members,
            throttle_time_ms,
        }
    }
}

pub(crate) fn leave_group(answer: LeaveGroupResponse, version: i16) -> wire::LeaveGroupResponse {
    let response =
        wire::LeaveGroupResponse::default().with_throttle_time_ms(answer.throttle_time_ms);
    if version <= 2 {
        // No per-member results before v3: the one member's error is the response's.
        let member_error = answer.members.first().map_or(0, |m| m.error_code);
        let error = if answer.error_code != 0 {
            answer.error_code
        } else {
            member_error
        };
        return response.with_error_code(error);
    }
    let members = answer.members.into_iter().map(|m| {
        MemberResponse::default()
            .with_member_id(text(m.member_id))
            .with_group_instance_id(optional(m.group_instance_id))
            .with_error_code(m.error_code)
    });
    response
        .with_error_code(answer.error_code)
        .with_members(members.collect())
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetCommitPartitionResult {
    pub partition_index: i32,
    pub error_code: i16,
}

#[pymethods]
impl OffsetCommitPartitionResult {
    #[new]
    #[pyo3(signature = (partition_index, error_code))]
    fn new(partition_index: i32, error_code: i16) -> Self {
        OffsetCommitPartitionResult {
            partition_index,
            error_code,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetCommitTopicResult {
    pub name: String,
    pub partitions: Vec<OffsetCommitPartitionResult>,
}

#[pymethods]
impl OffsetCommitTopicResult {
    #[new]
    #[pyo3(signature = (name, partitions))]
    fn new(name: String, partitions: Vec<OffsetCommitPartitionResult>) -> Self {
        OffsetCommitTopicResult { name, partitions }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetCommitResponse {
    pub topics: Vec<OffsetCommitTopicResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl OffsetCommitResponse {
    #[new]
    #[pyo3(signature = (topics, throttle_time_ms = 0))]
    fn new(topics: Vec<OffsetCommitTopicResult>, throttle_time_ms: i32) -> Self {
        OffsetCommitResponse {
            topics,
            throttle_time_ms,
        }
    }
}

pub(crate) fn offset_commit(answer: OffsetCommitResponse) -> wire::OffsetCommitResponse {
    let topics = answer.topics.into_iter().map(|t| {
        let partitions = t.partitions.into_iter().map(|p| {
            OffsetCommitResponsePartition::default()
                .with_partition_index(p.partition_index)
                .with_error_code(p.error_code)
        });
        OffsetCommitResponseTopic::default()
            .with_name(topic_name(&t.name))
            .with_partitions(partitions.collect())
    });
    wire::OffsetCommitResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_topics(topics.collect())
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetFetchPartitionResult {
    pub partition_index: i32,
    pub committed_offset: i64,
    pub committed_leader_epoch: i32,
    pub metadata: Option<String>,
    pub error_code: i16,
}

#[pymethods]
impl OffsetFetchPartitionResult {
    #[new]
    #[pyo3(signature = (partition_index, committed_offset = -1, committed_leader_epoch = -1, metadata = Some(String::new()), error_code = 0))]
    fn new(
        partition_index: i32,
        committed_offset: i64,
        committed_leader_epoch: i32,
        metadata: Option<String>,
        error_code: i16,
    ) -> Self {
        OffsetFetchPartitionResult {
            partition_index,
            committed_offset,
            committed_leader_epoch,
            metadata,
            error_code,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetFetchTopicResult {
    pub name: String,
    pub partitions: Vec<OffsetFetchPartitionResult>,
}

#[pymethods]
impl OffsetFetchTopicResult {
    #[new]
    #[pyo3(signature = (name, partitions))]
    fn new(name: String, partitions: Vec<OffsetFetchPartitionResult>) -> Self {
        OffsetFetchTopicResult { name, partitions }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetFetchGroupResult {
    pub group_id: String,
    pub error_code: i16,
    pub topics: Vec<OffsetFetchTopicResult>,
}

#[pymethods]
impl OffsetFetchGroupResult {
    #[new]
    #[pyo3(signature = (group_id, error_code, topics = Vec::new()))]
    fn new(group_id: String, error_code: i16, topics: Vec<OffsetFetchTopicResult>) -> Self {
        OffsetFetchGroupResult {
            group_id,
            error_code,
            topics,
        }
    }
}

/// One result per requested group, in the request's order.
#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetFetchResponse {
    pub groups: Vec<OffsetFetchGroupResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl OffsetFetchResponse {
    #[new]
    #[pyo3(signature = (groups, throttle_time_ms = 0))]
    fn new(groups: Vec<OffsetFetchGroupResult>, throttle_time_ms: i32) -> Self {
        OffsetFetchResponse {
            groups,
            throttle_time_ms,
        }
    }
}

/// A partition result as the wire type of one version range (v0–7 and v8+ name the same
/// fields by different types).
macro_rules! fetched_partition {
    ($wire:ty, $p:expr) => {{
        let p = $p;
        <$wire>::default()
            .with_partition_index(p.partition_index)
            .with_committed_offset(p.committed_offset)
            .with_committed_leader_epoch(p.committed_leader_epoch)
            .with_metadata(optional(p.metadata))
            .with_error_code(p.error_code)
    }};
}

/// `request` is what was asked. From v8 each group has its own result; before, the one group's
/// result is the response. v0–1 have no group-level error field, so a group error goes into
/// every partition result, and into one per requested partition if the answer has none.
pub(crate) fn offset_fetch(
    answer: OffsetFetchResponse,
    request: &WireFetchRequest,
    version: i16,
) -> wire::OffsetFetchResponse {
    let response =
        wire::OffsetFetchResponse::default().with_throttle_time_ms(answer.throttle_time_ms);
    if version >= 8 {
        let groups = answer.groups.into_iter().map(|g| {
            let topics = g.topics.into_iter().map(|t| {
                let partitions = t
                    .partitions
                    .into_iter()
                    .map(|p| fetched_partition!(OffsetFetchResponsePartitions, p));
                OffsetFetchResponseTopics::default()
                    .with_name(topic_name(&t.name))
                    .with_partitions(partitions.collect())
            });
            OffsetFetchResponseGroup::default()
                .with_group_id(GroupId(text(g.group_id)))
                .with_error_code(g.error_code)
                .with_topics(topics.collect())
        });
        return response.with_groups(groups.collect());
    }
    let group = answer.groups.into_iter().next().unwrap_or_else(|| {
        tracing::error!("the coordinator answered an OffsetFetch without its group");
        OffsetFetchGroupResult {
            group_id: String::new(),
            error_code: ResponseError::UnknownServerError.code(),
            topics: vec![],
        }
    });
    let group_error = group.error_code;
    let mut topics = group.topics;
    if version < 2 && group_error != 0 {
        if topics.is_empty() {
            topics = unanswered(request);
        }
        for partition in topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            partition.error_code = group_error;
        }
    }
    let topics = topics.into_iter().map(|t| {
        let partitions = t
            .partitions
            .into_iter()
            .map(|p| fetched_partition!(OffsetFetchResponsePartition, p));
        OffsetFetchResponseTopic::default()
            .with_name(topic_name(&t.name))
            .with_partitions(partitions.collect())
    });
    response
        .with_error_code(group_error)
        .with_topics(topics.collect())
}

/// Every partition the request named, with nothing committed (as Kafka reports them).
fn unanswered(request: &WireFetchRequest) -> Vec<OffsetFetchTopicResult> {
    let requested = request.topics.iter().flatten();
    requested
        .map(|t| OffsetFetchTopicResult {
            name: t.name.to_string(),
            partitions: t
                .partition_indexes
                .iter()
                .map(|&partition_index| OffsetFetchPartitionResult {
                    partition_index,
                    committed_offset: -1,
                    committed_leader_epoch: -1,
                    metadata: Some(String::new()),
                    error_code: 0,
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests;
