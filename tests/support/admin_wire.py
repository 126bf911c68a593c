"""Raw wire requests of the ops/admin APIs, in the style of kafka_wire and group_wire, for what
the real clients cannot send or do not show: OffsetForLeaderEpoch v0-4, CreateTopics v0-7 with
duplicate names or -1 defaults (and the v5+ answers), DeleteTopics v0-6 with duplicates or
topic ids, DescribeConfigs v0-3 against one chosen broker, AlterConfigs v0-1 (pipelined behind
other requests), DescribeCluster v0-1 with any endpoint type, ApiVersions (the keys listed as
unsupported).

Layouts follow Kafka's message definitions (clients/src/main/resources/common/message/*.json)
and the protocol guide; nothing here comes from kafscale.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kafscale.api_keys import ApiKey
from kafscale.errors import ErrorCode

from .kafka_wire import RawConnection, Reader, Writer

# api keys
CREATE_TOPICS = ApiKey.CREATE_TOPICS
DELETE_TOPICS = ApiKey.DELETE_TOPICS
DESCRIBE_GROUPS = ApiKey.DESCRIBE_GROUPS
LIST_GROUPS = ApiKey.LIST_GROUPS
OFFSET_FOR_LEADER_EPOCH = ApiKey.OFFSET_FOR_LEADER_EPOCH
DESCRIBE_CONFIGS = ApiKey.DESCRIBE_CONFIGS
ALTER_CONFIGS = ApiKey.ALTER_CONFIGS
CREATE_PARTITIONS = ApiKey.CREATE_PARTITIONS
DELETE_GROUPS = ApiKey.DELETE_GROUPS
INCREMENTAL_ALTER_CONFIGS = ApiKey.INCREMENTAL_ALTER_CONFIGS
OFFSET_DELETE = ApiKey.OFFSET_DELETE
DESCRIBE_CLUSTER = ApiKey.DESCRIBE_CLUSTER

# error codes
NONE = ErrorCode.NONE
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
INVALID_TOPIC_EXCEPTION = ErrorCode.INVALID_TOPIC_EXCEPTION
TOPIC_ALREADY_EXISTS = ErrorCode.TOPIC_ALREADY_EXISTS
INVALID_PARTITIONS = ErrorCode.INVALID_PARTITIONS
INVALID_REPLICATION_FACTOR = ErrorCode.INVALID_REPLICATION_FACTOR
INVALID_REPLICA_ASSIGNMENT = ErrorCode.INVALID_REPLICA_ASSIGNMENT
INVALID_CONFIG = ErrorCode.INVALID_CONFIG
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
MISMATCHED_ENDPOINT_TYPE = ErrorCode.MISMATCHED_ENDPOINT_TYPE
UNSUPPORTED_ENDPOINT_TYPE = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
NON_EMPTY_GROUP = ErrorCode.NON_EMPTY_GROUP
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
FENCED_LEADER_EPOCH = ErrorCode.FENCED_LEADER_EPOCH
UNKNOWN_LEADER_EPOCH = ErrorCode.UNKNOWN_LEADER_EPOCH

# the ops APIs, served from v0 up to at least this version
OPS_APIS = {
    DESCRIBE_GROUPS: 5,
    LIST_GROUPS: 5,
    DELETE_GROUPS: 2,
    OFFSET_DELETE: 0,
    OFFSET_FOR_LEADER_EPOCH: 3,  # v4 too where advertised
    DESCRIBE_CONFIGS: 4,
    ALTER_CONFIGS: 2,
    INCREMENTAL_ALTER_CONFIGS: 1,
    CREATE_PARTITIONS: 3,
    CREATE_TOPICS: 7,
    DELETE_TOPICS: 6,
}

# APIs the broker does not serve, and so leaves out of ApiVersions (as Kafka does): replication
# internals (4-7), describing and listing transactions and AllocateProducerIds (65-67),
# partition reassignments and client quotas (45-46, 48-49), SCRAM credentials and KRaft
# quorum/partition internals (50-56), UpdateFeatures (57)
NOT_SERVED_KEYS = [4, 5, 6, 7, 45, 46, *range(52, 58), 67]

# ConfigResource types and DescribeConfigs config sources
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

NO_EPOCH = -1


# ---------------------------------------------------------------------------------------------
# OffsetForLeaderEpoch v0-4


@dataclass(frozen=True)
class EpochEndOffset:
    error_code: int
    leader_epoch: int  # v1+; -1 before
    end_offset: int


@dataclass(frozen=True)
class EpochQuery:
    partition: int
    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH  # v2+


def offset_for_leader_epoch(
    conn: RawConnection,
    queries: dict[str, list[EpochQuery]],
    *,
    version: int = 3,
    replica_id: int = -1,
) -> dict[tuple[str, int], EpochEndOffset]:
    """{(topic, partition): answer}; ask each partition once per request. v3 adds the replica
    id (-1: a consumer), v4 is flexible."""
    assert 0 <= version <= 4
    flexible = version >= 4
    w = Writer()
    if version >= 3:
        w.i32(replica_id)

    def array(n: int) -> None:
        if flexible:
            w.uvarint(n + 1)
        else:
            w.array_len(n)

    def string(s: str) -> None:
        if flexible:
            w.compact_string(s)
        else:
            w.string(s)

    array(len(queries))
    for topic, parts in queries.items():
        string(topic)
        array(len(parts))
        for q in parts:
            w.i32(q.partition)
            if version >= 2:
                w.i32(q.current_leader_epoch)
            w.i32(q.leader_epoch)
            if flexible:
                w.tagged_fields()
        if flexible:
            w.tagged_fields()
    if flexible:
        w.tagged_fields()
    r = conn.request(OFFSET_FOR_LEADER_EPOCH, version, w.done(), flexible=flexible)
    if version >= 2:
        r.i32()  # throttle
    out = {}
    n_topics = r.compact_array_len() if flexible else r.array_len()
    for _ in range(n_topics):
        topic = r.compact_string() if flexible else r.string()
        n_parts = r.compact_array_len() if flexible else r.array_len()
        for _ in range(n_parts):
            error, partition = r.i16(), r.i32()
            epoch = r.i32() if version >= 1 else -1
            end = r.i64()
            if flexible:
                r.skip_tagged_fields()
            assert (topic, partition) not in out, f"{topic}/{partition} answered twice"
            out[(topic, partition)] = EpochEndOffset(error, epoch, end)
        if flexible:
            r.skip_tagged_fields()
    if flexible:
        r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} bytes after OffsetForLeaderEpoch v{version}"
    return out


# ---------------------------------------------------------------------------------------------
# CreateTopics v0-7, DeleteTopics v0-6


@dataclass(frozen=True)
class NewTopicSpec:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str | None] = field(default_factory=dict)
    assignments: dict[int, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class CreatedConfig:
    """One config of a created topic (CreateTopics v5+)."""

    value: str | None
    read_only: bool
    source: int
    is_sensitive: bool


@dataclass(frozen=True)
class TopicError:
    name: str | None  # None: DeleteTopics v6 for an id no topic has
    error_code: int
    error_message: str | None = None
    topic_id: uuid.UUID | None = None  # CreateTopics v7, DeleteTopics v6 (None before)
    num_partitions: int | None = None  # CreateTopics v5+
    replication_factor: int | None = None  # CreateTopics v5+
    configs: dict[str, CreatedConfig] | None = None  # CreateTopics v5+


class _Wire:
    """Writes and reads the shapes of one version: compact (flexible) or classic."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible

    def array(self, w: Writer, n: int) -> None:
        if self.flexible:
            w.uvarint(n + 1)
        else:
            w.array_len(n)

    def string(self, w: Writer, s: str | None) -> None:
        if self.flexible:
            w.compact_string(s)
        else:
            w.string(s)

    def tags(self, w: Writer) -> None:
        if self.flexible:
            w.tagged_fields()

    def read_array(self, r: Reader) -> int:
        return r.compact_array_len() if self.flexible else r.array_len()

    def read_string(self, r: Reader) -> str | None:
        return r.compact_string() if self.flexible else r.string()

    def skip_tags(self, r: Reader) -> None:
        if self.flexible:
            r.skip_tagged_fields()


def read_uuid(r: Reader) -> uuid.UUID | None:
    """A UUID field; None for the nil id."""
    raw = r.data[r.pos : r.pos + 16]
    r.pos += 16
    value = uuid.UUID(bytes=bytes(raw))
    return None if value.int == 0 else value


def create_topics(
    conn: RawConnection,
    topics: list[NewTopicSpec],
    *,
    timeout_ms: int = 30_000,
    validate_only: bool = False,
    version: int = 2,
) -> list[TopicError]:
    """One result per entry of the response, in its order (duplicates included as answered).
    v5+ are flexible and answer each topic's partitions, replication factor and configs; v7
    its id."""
    assert 0 <= version <= 7
    f = _Wire(version >= 5)
    w = Writer()
    f.array(w, len(topics))
    for t in topics:
        f.string(w, t.name)
        w.i32(t.num_partitions).i16(t.replication_factor)
        f.array(w, len(t.assignments))
        for partition, brokers in t.assignments.items():
            w.i32(partition)
            f.array(w, len(brokers))
            for b in brokers:
                w.i32(b)
            f.tags(w)
        f.array(w, len(t.configs))
        for key, value in t.configs.items():
            f.string(w, key)
            f.string(w, value)
            f.tags(w)
        f.tags(w)
    w.i32(timeout_ms)
    if version >= 1:
        w.boolean(validate_only)
    f.tags(w)
    r = conn.request(CREATE_TOPICS, version, w.done(), flexible=f.flexible)
    if version >= 2:
        r.i32()  # throttle
    out = []
    for _ in range(f.read_array(r)):
        name = f.read_string(r)
        topic_id = read_uuid(r) if version >= 7 else None
        error = r.i16()
        message = f.read_string(r) if version >= 1 else None
        partitions = replication = configs = None
        if version >= 5:
            partitions, replication = r.i32(), r.i16()
            n = r.compact_array_len()
            configs = None if n < 0 else {}
            for _ in range(max(n, 0)):
                key, value = r.compact_string(), r.compact_string()
                configs[key] = CreatedConfig(value, r.boolean(), r.i8(), r.boolean())
                r.skip_tagged_fields()
        f.skip_tags(r)
        out.append(TopicError(name, error, message, topic_id, partitions, replication, configs))
    f.skip_tags(r)
    assert r.remaining() == 0, f"{r.remaining()} bytes after CreateTopics v{version}"
    return out


def delete_topics(
    conn: RawConnection,
    names: list[str | uuid.UUID],
    *,
    timeout_ms: int = 30_000,
    version: int = 1,
) -> list[TopicError]:
    """``names``: topic names, or (v6) topic ids. v4+ are flexible, v5+ answer an error
    message, v6 names or ids and answers both."""
    assert 0 <= version <= 6
    f = _Wire(version >= 4)
    w = Writer()
    f.array(w, len(names))
    for n in names:
        if version >= 6:
            by_id = isinstance(n, uuid.UUID)
            w.compact_string(None if by_id else str(n))
            w.raw(n.bytes if isinstance(n, uuid.UUID) else bytes(16))
            w.tagged_fields()
        else:
            assert isinstance(n, str), "topic ids need DeleteTopics v6"
            f.string(w, n)
    w.i32(timeout_ms)
    f.tags(w)
    r = conn.request(DELETE_TOPICS, version, w.done(), flexible=f.flexible)
    if version >= 1:
        r.i32()  # throttle
    out = []
    for _ in range(f.read_array(r)):
        name = f.read_string(r)
        topic_id = read_uuid(r) if version >= 6 else None
        error = r.i16()
        message = r.compact_string() if version >= 5 else None
        f.skip_tags(r)
        out.append(TopicError(name, error, message, topic_id))
    f.skip_tags(r)
    assert r.remaining() == 0, f"{r.remaining()} bytes after DeleteTopics v{version}"
    return out


# ---------------------------------------------------------------------------------------------
# DescribeCluster v0-1 (flexible)


@dataclass(frozen=True)
class ClusterDescription:
    error_code: int
    error_message: str | None
    endpoint_type: int | None  # v1
    cluster_id: str | None
    controller_id: int
    brokers: list[tuple[int, str, int, str | None]]  # (id, host, port, rack)
    authorized_operations: int


def describe_cluster(
    conn: RawConnection, *, version: int = 1, endpoint_type: int = 1
) -> ClusterDescription:
    assert 0 <= version <= 1
    w = Writer().boolean(False)  # include cluster authorized operations
    if version >= 1:
        w.i8(endpoint_type)
    w.tagged_fields()
    r = conn.request(DESCRIBE_CLUSTER, version, w.done(), flexible=True)
    r.i32()  # throttle
    error, message = r.i16(), r.compact_string()
    endpoint = r.i8() if version >= 1 else None
    cluster_id, controller = r.compact_string(), r.i32()
    brokers = []
    for _ in range(r.compact_array_len()):
        node, host, port, rack = r.i32(), r.compact_string(), r.i32(), r.compact_string()
        assert host is not None
        brokers.append((node, host, port, rack))
        r.skip_tagged_fields()
    operations = r.i32()
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} bytes after DescribeCluster v{version}"
    return ClusterDescription(error, message, endpoint, cluster_id, controller, brokers, operations)


# ---------------------------------------------------------------------------------------------
# DescribeConfigs v0-3


@dataclass(frozen=True)
class DescribedValue:
    value: str | None
    read_only: bool
    source: int  # v1+; v0: SOURCE_DEFAULT when is_default, else -1
    is_sensitive: bool


@dataclass(frozen=True)
class DescribedResource:
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    configs: dict[str, DescribedValue]


def describe_configs(
    conn: RawConnection,
    resources: list[tuple[int, str, list[str] | None]],
    *,
    version: int = 1,
) -> list[DescribedResource]:
    """``resources``: (resource type, name, config keys or None for all)."""
    assert 0 <= version <= 3, "v4 is flexible"
    w = Writer().array_len(len(resources))
    for rtype, name, keys in resources:
        w.i8(rtype).string(name)
        if keys is None:
            w.array_len(None)
        else:
            w.array_len(len(keys))
            for k in keys:
                w.string(k)
    if version >= 1:
        w.boolean(False)  # include synonyms
    if version >= 3:
        w.boolean(False)  # include documentation
    r = conn.request(DESCRIBE_CONFIGS, version, w.done())
    r.i32()  # throttle
    out = []
    for _ in range(r.array_len()):
        error, message, rtype, name = r.i16(), r.string(), r.i8(), r.string()
        configs = {}
        for _ in range(r.array_len()):
            key, value, read_only = r.string(), r.string(), r.boolean()
            source = r.i8() if version >= 1 else (SOURCE_DEFAULT if r.boolean() else -1)
            sensitive = r.boolean()
            if version >= 1:
                for _ in range(max(0, r.array_len())):  # synonyms
                    r.string()
                    r.string()
                    r.i8()
            if version >= 3:
                r.i8()  # config type
                r.string()  # documentation
            configs[key] = DescribedValue(value, read_only, source, sensitive)
        out.append(DescribedResource(error, message, rtype, name, configs))
    assert r.remaining() == 0, f"{r.remaining()} bytes after DescribeConfigs v{version}"
    return out


# ---------------------------------------------------------------------------------------------
# AlterConfigs v0-1


def alter_configs(
    conn: RawConnection,
    resources: list[tuple[int, str, dict[str, str | None]]],
    *,
    validate_only: bool = False,
    version: int = 1,
) -> list[tuple[int, str | None, int, str]]:
    """The legacy AlterConfigs: ``resources`` are (resource type, name, the whole config set);
    returns (error code, error message, resource type, name) per resource."""
    assert 0 <= version <= 1, "v2 answers the same; the tests send v0-1"
    w = Writer().array_len(len(resources))
    for rtype, name, configs in resources:
        w.i8(rtype).string(name).array_len(len(configs))
        for key, value in configs.items():
            w.string(key).string(value)
    w.boolean(validate_only)
    r = conn.request(ALTER_CONFIGS, version, w.done())
    r.i32()  # throttle
    out = []
    for _ in range(r.array_len()):
        error, message, rtype, name = r.i16(), r.string(), r.i8(), r.string()
        assert name is not None
        out.append((error, message, rtype, name))
    assert r.remaining() == 0, f"{r.remaining()} bytes after AlterConfigs v{version}"
    return out


# ---------------------------------------------------------------------------------------------
# ApiVersions v3, every entry as listed (kafka_wire's parser keeps one per key)


def api_versions_entries(conn: RawConnection, version: int = 0) -> list[tuple[int, int, int]]:
    """[(api key, min, max)] in the order the broker listed them (v0 or v3)."""
    if version == 0:
        r = conn.request(18, 0, b"")
        error = r.i16()
        entries = [(r.i16(), r.i16(), r.i16()) for _ in range(r.array_len())]
    else:
        body = Writer().compact_string("kafscale-tests").compact_string("1.0").tagged_fields()
        r = conn.request(18, 3, body.done(), flexible=True, response_flexible_header=False)
        error = r.i16()
        entries = []
        for _ in range(r.compact_array_len()):
            entries.append((r.i16(), r.i16(), r.i16()))
            r.skip_tagged_fields()
        r.i32()  # throttle
        r.skip_tagged_fields()
    assert error == NONE, f"ApiVersions v{version}: error {error}"
    assert r.remaining() == 0, f"{r.remaining()} bytes after ApiVersions v{version}"
    return entries
