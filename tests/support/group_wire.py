"""Raw wire requests of the classic consumer group protocol, in the style of kafka_wire.

FindCoordinator v0-2, JoinGroup v1-5, SyncGroup v1-3, Heartbeat v1-3, LeaveGroup v1-3,
OffsetCommit v2-7, OffsetFetch v1-5, OffsetDelete v0 and DescribeGroups v0-4: every non-flexible
version from the first one with a throttle time (or the rebalance timeout) on; also a new
member's JoinGroup v6 (flexible), which can carry names of any length, and OffsetFetch v8-9
(flexible), which asks for several groups at once. The layouts follow Kafka's message definitions
(clients/src/main/resources/common/message/*.json); nothing here comes from kafscale. Also the
"consumer" protocol's subscription and assignment (ConsumerProtocolSubscription/Assignment v0),
the bytes a JoinGroup carries as protocol metadata and a SyncGroup as an assignment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafscale.api_keys import ApiKey
from kafscale.errors import ErrorCode

from .kafka_wire import RawConnection, Reader, Writer

# api keys
OFFSET_COMMIT = ApiKey.OFFSET_COMMIT
OFFSET_FETCH = ApiKey.OFFSET_FETCH
FIND_COORDINATOR = ApiKey.FIND_COORDINATOR
JOIN_GROUP = ApiKey.JOIN_GROUP
HEARTBEAT = ApiKey.HEARTBEAT
LEAVE_GROUP = ApiKey.LEAVE_GROUP
SYNC_GROUP = ApiKey.SYNC_GROUP
DESCRIBE_GROUPS = ApiKey.DESCRIBE_GROUPS
OFFSET_DELETE = ApiKey.OFFSET_DELETE
GROUP_APIS = (
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
)

# error codes
NONE = ErrorCode.NONE
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
MESSAGE_TOO_LARGE = ErrorCode.MESSAGE_TOO_LARGE
COORDINATOR_LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
INVALID_GROUP_ID = ErrorCode.INVALID_GROUP_ID
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
INVALID_SESSION_TIMEOUT = ErrorCode.INVALID_SESSION_TIMEOUT
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
FENCED_INSTANCE_ID = ErrorCode.FENCED_INSTANCE_ID
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
INVALID_COMMIT_OFFSET_SIZE = ErrorCode.INVALID_COMMIT_OFFSET_SIZE

# FindCoordinator key types
GROUP_KEY = 0
TRANSACTION_KEY = 1

NO_OFFSET = -1  # OffsetFetch: nothing committed for the partition


# ---------------------------------------------------------------------------------------------
# the "consumer" protocol type's payloads


def subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data."""
    w = Writer().i16(0).array_len(len(topics))
    for t in topics:
        w.string(t)
    return w.bytes_(user_data).done()


def assignment(partitions: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data."""
    w = Writer().i16(0).array_len(len(partitions))
    for topic, parts in partitions.items():
        w.string(topic).array_len(len(parts))
        for p in parts:
            w.i32(p)
    return w.bytes_(user_data).done()


def parse_assignment(data: bytes) -> dict[str, list[int]]:
    if not data:
        return {}
    r = Reader(data)
    r.i16()  # version
    out = {}
    for _ in range(r.array_len()):
        topic = r.string()
        out[topic] = [r.i32() for _ in range(r.array_len())]
    return out


# ---------------------------------------------------------------------------------------------
# FindCoordinator v0-2


@dataclass
class Coordinator:
    error_code: int
    node_id: int
    host: str
    port: int
    error_message: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def find_coordinator(
    conn: RawConnection, key: str, key_type: int = GROUP_KEY, version: int = 2
) -> Coordinator:
    assert 0 <= version <= 2, "v3+ is flexible"
    w = Writer().string(key)
    if version >= 1:
        w.i8(key_type)
    r = conn.request(FIND_COORDINATOR, version, w.done())
    message = None
    if version >= 1:
        r.i32()  # throttle
    error = r.i16()
    if version >= 1:
        message = r.string()
    node, host, port = r.i32(), r.string(), r.i32()
    assert r.remaining() == 0, f"{r.remaining()} bytes after FindCoordinator v{version}"
    return Coordinator(error, node, host, port, message)


# ---------------------------------------------------------------------------------------------
# JoinGroup v1-5


@dataclass
class JoinGroupResult:
    error_code: int
    generation_id: int
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # (member id, group instance id, metadata)


def join_group(
    conn: RawConnection,
    group: str,
    member_id: str = "",
    *,
    protocols: list[tuple[str, bytes]],
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 10_000,
    group_instance_id: str | None = None,
    protocol_type: str = "consumer",
    version: int = 4,
    client_id: str | None = "kafscale-tests",
) -> JoinGroupResult:
    assert 1 <= version <= 5, "v0 has no rebalance timeout, v6+ is flexible"
    w = Writer().string(group).i32(session_timeout_ms).i32(rebalance_timeout_ms).string(member_id)
    if version >= 5:
        w.string(group_instance_id)
    else:
        assert group_instance_id is None, "group.instance.id needs JoinGroup v5"
    w.string(protocol_type).array_len(len(protocols))
    for name, metadata in protocols:
        w.string(name).bytes_(metadata)
    r = conn.request(JOIN_GROUP, version, w.done(), client_id=client_id)
    if version >= 2:
        r.i32()  # throttle
    error, generation, protocol, leader, me = r.i16(), r.i32(), r.string(), r.string(), r.string()
    members = []
    for _ in range(r.array_len()):
        mid = r.string()
        instance = r.string() if version >= 5 else None
        members.append((mid, instance, r.bytes_() or b""))
    assert r.remaining() == 0, f"{r.remaining()} bytes after JoinGroup v{version}"
    return JoinGroupResult(error, generation, protocol, leader, me, members)


def join_group_v6(
    conn: RawConnection,
    group: str,
    *,
    protocols: list[tuple[str, bytes]],
    group_instance_id: str | None = None,
    protocol_type: str = "consumer",
    session_timeout_ms: int = 10_000,
) -> tuple[int, str]:
    """A new member's JoinGroup v6 (flexible: compact strings, so names of any length);
    returns (error code, member id)."""
    w = Writer().compact_string(group).i32(session_timeout_ms).i32(session_timeout_ms)
    w.compact_string("").compact_string(group_instance_id).compact_string(protocol_type)
    w.uvarint(len(protocols) + 1)
    for name, metadata in protocols:
        w.compact_string(name).uvarint(len(metadata) + 1).raw(metadata).tagged_fields()
    r = conn.request(JOIN_GROUP, 6, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    error, _generation = r.i16(), r.i32()
    _protocol, _leader, member_id = r.compact_string(), r.compact_string(), r.compact_string()
    return error, member_id or ""


# ---------------------------------------------------------------------------------------------
# SyncGroup v1-3


@dataclass
class SyncGroupResult:
    error_code: int
    assignment: bytes


def sync_group(
    conn: RawConnection,
    group: str,
    generation_id: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    *,
    group_instance_id: str | None = None,
    version: int = 3,
) -> SyncGroupResult:
    assert 1 <= version <= 3, "v4+ is flexible"
    w = Writer().string(group).i32(generation_id).string(member_id)
    if version >= 3:
        w.string(group_instance_id)
    items = list((assignments or {}).items())
    w.array_len(len(items))
    for mid, data in items:
        w.string(mid).bytes_(data)
    r = conn.request(SYNC_GROUP, version, w.done())
    r.i32()  # throttle
    error, data = r.i16(), r.bytes_()
    assert r.remaining() == 0, f"{r.remaining()} bytes after SyncGroup v{version}"
    return SyncGroupResult(error, data or b"")


# ---------------------------------------------------------------------------------------------
# Heartbeat v1-3


def heartbeat(
    conn: RawConnection,
    group: str,
    generation_id: int,
    member_id: str,
    *,
    group_instance_id: str | None = None,
    version: int = 3,
) -> int:
    assert 1 <= version <= 3, "v4+ is flexible"
    w = Writer().string(group).i32(generation_id).string(member_id)
    if version >= 3:
        w.string(group_instance_id)
    r = conn.request(HEARTBEAT, version, w.done())
    r.i32()  # throttle
    error = r.i16()
    assert r.remaining() == 0, f"{r.remaining()} bytes after Heartbeat v{version}"
    return error


# ---------------------------------------------------------------------------------------------
# LeaveGroup v1-3


@dataclass
class LeaveGroupResult:
    error_code: int
    members: list[tuple[str, str | None, int]] = field(default_factory=list)


def leave_group(
    conn: RawConnection,
    group: str,
    members: list[tuple[str, str | None]],
    *,
    version: int = 3,
) -> LeaveGroupResult:
    """``members``: (member id, group instance id); v1-2 carry exactly one member id."""
    assert 1 <= version <= 3, "v4+ is flexible"
    w = Writer().string(group)
    if version >= 3:
        w.array_len(len(members))
        for mid, instance in members:
            w.string(mid).string(instance)
    else:
        assert len(members) == 1 and members[0][1] is None
        w.string(members[0][0])
    r = conn.request(LEAVE_GROUP, version, w.done())
    r.i32()  # throttle
    out = LeaveGroupResult(r.i16())
    if version >= 3:
        for _ in range(r.array_len()):
            out.members.append((r.string(), r.string(), r.i16()))
    assert r.remaining() == 0, f"{r.remaining()} bytes after LeaveGroup v{version}"
    return out


# ---------------------------------------------------------------------------------------------
# OffsetCommit v1-7


@dataclass(frozen=True)
class CommitOffset:
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1  # v6+
    commit_timestamp: int = -1  # v1 only (-1: the broker's time)


def offset_commit(
    conn: RawConnection,
    group: str,
    offsets: dict[tuple[str, int], CommitOffset],
    *,
    generation_id: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
    version: int = 7,
) -> dict[tuple[str, int], int]:
    """Commit ``offsets``; returns {(topic, partition): error code}. Generation -1 and no member
    id commit as a simple consumer (assign(), no group membership)."""
    assert 1 <= version <= 7, "v0 has no generation, v8+ is flexible"
    w = Writer().string(group).i32(generation_id).string(member_id)
    if version >= 7:
        w.string(group_instance_id)
    if 2 <= version <= 4:
        w.i64(-1)  # retention time: the broker's default
    by_topic: dict[str, list[tuple[int, CommitOffset]]] = {}
    for (topic, partition), c in offsets.items():
        by_topic.setdefault(topic, []).append((partition, c))
    w.array_len(len(by_topic))
    for topic, parts in by_topic.items():
        w.string(topic).array_len(len(parts))
        for partition, c in parts:
            w.i32(partition).i64(c.offset)
            if version == 1:
                w.i64(c.commit_timestamp)
            if version >= 6:
                w.i32(c.leader_epoch)
            w.string(c.metadata)
    r = conn.request(OFFSET_COMMIT, version, w.done())
    if version >= 3:
        r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            partition, error = r.i32(), r.i16()
            out[(topic, partition)] = error
    assert r.remaining() == 0, f"{r.remaining()} bytes after OffsetCommit v{version}"
    return out


# ---------------------------------------------------------------------------------------------
# OffsetFetch v1-5


@dataclass(frozen=True)
class FetchedOffset:
    offset: int
    leader_epoch: int
    metadata: str | None
    error_code: int


@dataclass
class OffsetFetchResult:
    error_code: int  # top level (v2+); v1 has none: NONE here
    partitions: dict[tuple[str, int], FetchedOffset]


def offset_fetch(
    conn: RawConnection,
    group: str,
    partitions: dict[str, list[int]] | None,
    *,
    version: int = 5,
) -> OffsetFetchResult:
    """``partitions`` None (v2+): every partition the group has committed."""
    assert 1 <= version <= 5, "v0 reads ZooKeeper offsets, v6+ is flexible"
    w = Writer().string(group)
    if partitions is None:
        assert version >= 2, "a null topic list needs OffsetFetch v2"
        w.array_len(None)
    else:
        w.array_len(len(partitions))
        for topic, parts in partitions.items():
            w.string(topic).array_len(len(parts))
            for p in parts:
                w.i32(p)
    r = conn.request(OFFSET_FETCH, version, w.done())
    if version >= 3:
        r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            partition, offset = r.i32(), r.i64()
            epoch = r.i32() if version >= 5 else -1
            metadata, error = r.string(), r.i16()
            out[(topic, partition)] = FetchedOffset(offset, epoch, metadata, error)
    top = r.i16() if version >= 2 else NONE
    assert r.remaining() == 0, f"{r.remaining()} bytes after OffsetFetch v{version}"
    return OffsetFetchResult(top, out)


def offset_fetch_groups(
    conn: RawConnection, groups: dict[str, dict[str, list[int]] | None], *, version: int = 8
) -> dict[str, OffsetFetchResult]:
    """OffsetFetch v8-9 (flexible): several groups in one request, each answered on its own.
    v9 sends a member id and epoch as a classic consumer does (none, -1)."""
    assert version in (8, 9)
    w = Writer().uvarint(len(groups) + 1)
    for group, partitions in groups.items():
        w.compact_string(group)
        if version >= 9:
            w.compact_string(None).i32(-1)
        if partitions is None:
            w.uvarint(0)
        else:
            w.uvarint(len(partitions) + 1)
            for topic, parts in partitions.items():
                w.compact_string(topic).uvarint(len(parts) + 1)
                for p in parts:
                    w.i32(p)
                w.tagged_fields()
        w.tagged_fields()
    w.boolean(False).tagged_fields()  # require_stable
    r = conn.request(OFFSET_FETCH, version, w.done(), flexible=True)
    r.i32()  # throttle
    out = {}
    for _ in range(r.compact_array_len()):
        group = r.compact_string()
        offsets = {}
        for _ in range(r.compact_array_len()):
            topic = r.compact_string()
            for _ in range(r.compact_array_len()):
                partition, offset, epoch = r.i32(), r.i64(), r.i32()
                metadata, error = r.compact_string(), r.i16()
                r.skip_tagged_fields()
                offsets[(topic, partition)] = FetchedOffset(offset, epoch, metadata, error)
            r.skip_tagged_fields()
        error = r.i16()
        r.skip_tagged_fields()
        assert group is not None
        out[group] = OffsetFetchResult(error, offsets)
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} bytes after OffsetFetch v{version}"
    return out


# ---------------------------------------------------------------------------------------------
# OffsetDelete v0


def offset_delete(
    conn: RawConnection, group: str, partitions: dict[str, list[int]]
) -> tuple[int, dict[tuple[str, int], int]]:
    """Deletes the group's committed offsets of ``partitions``; returns (top-level error code,
    {(topic, partition): error code})."""
    w = Writer().string(group).array_len(len(partitions))
    for topic, parts in partitions.items():
        w.string(topic).array_len(len(parts))
        for p in parts:
            w.i32(p)
    r = conn.request(OFFSET_DELETE, 0, w.done())
    error = r.i16()
    r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            partition = r.i32()
            out[(topic, partition)] = r.i16()
    assert r.remaining() == 0, f"{r.remaining()} bytes after OffsetDelete v0"
    return error, out


# ---------------------------------------------------------------------------------------------
# DescribeGroups v0-4


@dataclass
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str


@dataclass
class DescribedGroup:
    error_code: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[DescribedMember]


def describe_groups(
    conn: RawConnection, groups: list[str], *, version: int = 4
) -> list[DescribedGroup]:
    assert 0 <= version <= 4, "v5+ is flexible"
    w = Writer().array_len(len(groups))
    for g in groups:
        w.string(g)
    if version >= 3:
        w.boolean(False)  # authorized operations
    r = conn.request(DESCRIBE_GROUPS, version, w.done())
    if version >= 1:
        r.i32()  # throttle
    out = []
    for _ in range(r.array_len()):
        error, group, state, ptype, protocol = (
            r.i16(),
            r.string(),
            r.string(),
            r.string(),
            r.string(),
        )
        members = []
        for _ in range(r.array_len()):
            member_id = r.string()
            instance = r.string() if version >= 4 else None
            client_id, host = r.string(), r.string()
            r.bytes_(), r.bytes_()  # metadata, assignment
            members.append(DescribedMember(member_id, instance, client_id, host))
        if version >= 3:
            r.i32()  # authorized operations
        out.append(DescribedGroup(error, group, state, ptype, protocol, members))
    assert r.remaining() == 0, f"{r.remaining()} bytes after DescribeGroups v{version}"
    return out
