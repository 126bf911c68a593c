"""The group APIs' answers.

They are classes of ``kafscale._core`` (one description, in the core, typed by its stub): the
coordinator constructs them and the core encodes them at the request's version (fields a version
does not carry are dropped, and a group-level error is copied into every partition where an old
version has no top-level error field).
"""

from __future__ import annotations

from kafscale._core import (
    DeletableGroupResult,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitPartitionResult,
    OffsetCommitResponse,
    OffsetCommitTopicResult,
    OffsetDeletePartitionResult,
    OffsetDeleteResponse,
    OffsetDeleteTopicResult,
    OffsetFetchGroupResult,
    OffsetFetchPartitionResult,
    OffsetFetchResponse,
    OffsetFetchTopicResult,
    SyncGroupResponse,
)

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "DeletableGroupResult",
    "DeleteGroupsResponse",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedGroupMember",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupResponse",
    "LeaveGroupMemberResult",
    "LeaveGroupResponse",
    "ListGroupsResponse",
    "ListedGroup",
    "OffsetCommitPartitionResult",
    "OffsetCommitResponse",
    "OffsetCommitTopicResult",
    "OffsetDeletePartitionResult",
    "OffsetDeleteResponse",
    "OffsetDeleteTopicResult",
    "OffsetFetchGroupResult",
    "OffsetFetchPartitionResult",
    "OffsetFetchResponse",
    "OffsetFetchTopicResult",
    "SyncGroupResponse",
]

# --- group ops (DescribeGroups, ListGroups, DeleteGroups) -----------------------------------------

# DescribeGroups v3+: authorized operations are not computed (no ACLs): Kafka's "omitted" value.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
