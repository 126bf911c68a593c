"""The group APIs' answers as plain values.

The core decodes group requests into the typed objects of ``kafscale._core`` (see its stub) and
reads these answers back by attribute name, encoding them at the request's version: fields a
version does not carry are dropped, and a group-level error is copied into every partition where
an old version has no top-level error field. Nothing here imports the extension, so the
coordinator is unit-tested without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafscale.errors import ErrorCode


@dataclass(frozen=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResponse:
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupMember] = field(default_factory=list)
    skip_assignment: bool = False
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class SyncGroupResponse:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class HeartbeatResponse:
    error_code: int
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class LeaveGroupMemberResult:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True)
class LeaveGroupResponse:
    error_code: int
    members: list[LeaveGroupMemberResult] = field(default_factory=list)
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class OffsetCommitPartitionResult:
    partition_index: int
    error_code: int


@dataclass(frozen=True)
class OffsetCommitTopicResult:
    name: str
    partitions: list[OffsetCommitPartitionResult]


@dataclass(frozen=True)
class OffsetCommitResponse:
    topics: list[OffsetCommitTopicResult]
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class OffsetFetchPartitionResult:
    partition_index: int
    committed_offset: int = -1
    committed_leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = ErrorCode.NONE


@dataclass(frozen=True)
class OffsetFetchTopicResult:
    name: str
    partitions: list[OffsetFetchPartitionResult]


@dataclass(frozen=True)
class OffsetFetchGroupResult:
    group_id: str
    error_code: int
    topics: list[OffsetFetchTopicResult] = field(default_factory=list)


@dataclass(frozen=True)
class OffsetFetchResponse:
    """One result per requested group, in the request's order (v8+ ask for several)."""

    groups: list[OffsetFetchGroupResult]
    throttle_time_ms: int = 0


# --- group ops (DescribeGroups, ListGroups, DeleteGroups) -----------------------------------------

# DescribeGroups v3+: authorized operations are not computed (no ACLs): Kafka's "omitted" value.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@dataclass(frozen=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    error_code: int
    group_id: str
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedGroupMember] = field(default_factory=list)
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED


@dataclass(frozen=True)
class DescribeGroupsResponse:
    groups: list[DescribedGroup]
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = "classic"


@dataclass(frozen=True)
class ListGroupsResponse:
    error_code: int
    groups: list[ListedGroup] = field(default_factory=list)
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class DeletableGroupResult:
    group_id: str
    error_code: int


@dataclass(frozen=True)
class DeleteGroupsResponse:
    results: list[DeletableGroupResult]
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class OffsetDeletePartitionResult:
    partition_index: int
    error_code: int


@dataclass(frozen=True)
class OffsetDeleteTopicResult:
    name: str
    partitions: list[OffsetDeletePartitionResult]


@dataclass(frozen=True)
class OffsetDeleteResponse:
    """A group-level ``error_code`` comes with no topics, as Kafka answers it."""

    error_code: int
    topics: list[OffsetDeleteTopicResult] = field(default_factory=list)
    throttle_time_ms: int = 0
