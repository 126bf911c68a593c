"""Typed surface of the Rust core (`kafscale._core`).

The data plane (Produce, Fetch, ListOffsets, Metadata, ApiVersions) runs entirely in Rust.
Requests for control-plane APIs are decoded in Rust and handed to Python as typed objects
through `Broker.next_control_request()`; Python answers with `ControlRequest.respond()` and
Rust encodes the response at the request's version.

The extension's classes cannot be subclassed (``@final``), and their attributes can be read,
not assigned (``Final``: the pyclasses are frozen). ``stubtest`` (tests/run.sh) holds this stub
to the built module.
"""

import asyncio
import builtins
from typing import Final, Literal, Protocol, Self, TypeAlias, final, type_check_only

from kafscale.listeners import ListenerSpec, TlsFiles

# What the extension exports (stubtest holds the two equal); BrokerSettings is the type
# checker's only.
__all__ = [
    "CONTROL_API_KEYS",
    "AlterConfigsRequest",
    "AlterConfigsResource",
    "AlterConfigsResourceResult",
    "AlterConfigsResponse",
    "AlterableConfig",
    "ArrowBatch",
    "Broker",
    "ConfigSynonym",
    "ControlRequest",
    "CreatableTopic",
    "CreatableTopicResult",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreatePartitionsTopic",
    "CreatePartitionsTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeletableGroupResult",
    "DeletableTopic",
    "DeletableTopicResult",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResource",
    "DescribeConfigsResponse",
    "DescribeConfigsResult",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedConfig",
    "DescribedGroup",
    "DescribedGroupMember",
    "GroupStore",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupProtocol",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "KafkaApiError",
    "LeaveGroupMemberResult",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "LeavingMember",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListedGroup",
    "MetadataStoreError",
    "OffsetCommitPartition",
    "OffsetCommitPartitionResult",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetCommitTopic",
    "OffsetCommitTopicResult",
    "OffsetDeletePartitionResult",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
    "OffsetDeleteTopic",
    "OffsetDeleteTopicResult",
    "OffsetFetchGroup",
    "OffsetFetchGroupResult",
    "OffsetFetchPartitionResult",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetFetchTopic",
    "OffsetFetchTopicResult",
    "RecordBatchStream",
    "SegmentError",
    "SegmentSource",
    "StorageLocation",
    "StoredEntry",
    "SyncGroupAssignment",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TopicConfig",
    "TopicInfo",
    "TransactionView",
    "TxnOffsetCommitRequest",
    "committed_bounds",
    "empty_kafka_batch",
    "init_logging",
    "topic_configs",
]

class KafkaApiError(Exception):
    """A failure that maps onto a Kafka error code (`code`) with a human message."""

    def __init__(self, code: int, message: str) -> None: ...
    # Read-only properties over ``args`` (code, message) that the extension adds to the class.
    @property
    def code(self) -> int: ...
    @property
    def message(self) -> str: ...

@type_check_only
class BrokerSettings(Protocol):
    """What the core reads from the Python settings object (attribute names must match; the
    fields of ``BrokerConfig`` in rust/src/config.rs). Read-only: the core only reads them, and
    ``kafscale.config.Settings`` is a frozen dataclass."""

    @property
    def listener_specs(self) -> list[ListenerSpec]: ...
    @property
    def tls(self) -> TlsFiles | None: ...
    @property
    def sasl_enabled_mechanisms(self) -> str: ...
    @property
    def sasl_users_file(self) -> str | None: ...
    @property
    def connections_max_reauth_ms(self) -> int: ...
    @property
    def sasl_server_max_receive_size(self) -> int: ...
    @property
    def connection_failed_authentication_delay_ms(self) -> int: ...
    @property
    def authorizer(self) -> str: ...
    @property
    def super_users(self) -> str: ...
    @property
    def allow_everyone_if_no_acl_found(self) -> bool: ...
    @property
    def broker_id(self) -> int: ...
    @property
    def broker_rack(self) -> str | None: ...
    @property
    def data_dir(self) -> str: ...
    @property
    def s3_bucket(self) -> str | None: ...
    @property
    def s3_region(self) -> str | None: ...
    @property
    def s3_endpoint(self) -> str | None: ...
    @property
    def s3_namespace(self) -> str: ...
    @property
    def use_memory_s3(self) -> bool: ...
    @property
    def etcd_endpoints(self) -> str | None: ...
    @property
    def etcd_username(self) -> str | None: ...
    @property
    def etcd_password(self) -> str | None: ...
    @property
    def lease_ttl_ms(self) -> int: ...
    @property
    def retention_ms(self) -> int: ...
    @property
    def retention_bytes(self) -> int: ...
    @property
    def retention_check_interval_ms(self) -> int: ...
    @property
    def segment_bytes(self) -> int: ...
    @property
    def flush_interval_ms(self) -> int: ...
    @property
    def flush_mode(self) -> str: ...
    @property
    def wal_object_max_bytes(self) -> int: ...
    @property
    def wal_compaction_age_ms(self) -> int: ...
    @property
    def wal_compaction_interval_ms(self) -> int: ...
    @property
    def cache_bytes(self) -> int: ...
    @property
    def readahead_segments(self) -> int: ...
    @property
    def auto_create_topics(self) -> bool: ...
    @property
    def default_partitions(self) -> int: ...
    @property
    def max_request_bytes(self) -> int: ...
    @property
    def max_message_bytes(self) -> int: ...
    # Not read by BrokerConfig: kafscale.log hands these two to init_logging. Declared here all
    # the same, so that the settings' field order follows this list (tests/unit/test_config.py).
    @property
    def log_level(self) -> str: ...
    @property
    def log_format(self) -> str: ...
    @property
    def metrics_addr(self) -> str | None: ...
    @property
    def metrics_tls(self) -> bool: ...
    @property
    def metrics_token_file(self) -> str | None: ...
    @property
    def metrics_max_connections(self) -> int: ...
    @property
    def metrics_header_read_timeout_ms(self) -> int: ...
    @property
    def metrics_idle_timeout_ms(self) -> int: ...
    @property
    def max_connections(self) -> int: ...
    @property
    def max_connections_per_ip(self) -> int: ...
    @property
    def connections_max_idle_ms(self) -> int: ...
    @property
    def request_read_timeout_ms(self) -> int: ...
    @property
    def connection_max_inflight_bytes(self) -> int: ...
    @property
    def queued_max_request_bytes(self) -> int: ...
    @property
    def fetch_max_bytes(self) -> int: ...
    @property
    def message_timestamp_before_max_ms(self) -> int: ...
    @property
    def message_timestamp_after_max_ms(self) -> int: ...
    @property
    def max_uncompressed_batch_bytes(self) -> int: ...
    @property
    def producer_id_expiration_ms(self) -> int: ...
    @property
    def log_roll_ms(self) -> int: ...
    @property
    def log_cleaner_min_cleanable_ratio(self) -> float: ...
    @property
    def log_cleaner_min_compaction_lag_ms(self) -> int: ...
    @property
    def log_cleaner_max_compaction_lag_ms(self) -> int: ...
    @property
    def log_cleaner_delete_retention_ms(self) -> int: ...
    @property
    def log_cleaner_dedupe_buffer_size(self) -> int: ...
    @property
    def log_cleaner_backoff_ms(self) -> int: ...
    @property
    def file_delete_delay_ms(self) -> int: ...
    @property
    def transaction_max_timeout_ms(self) -> int: ...
    @property
    def transactional_id_expiration_ms(self) -> int: ...
    @property
    def setting_names(self) -> dict[str, str]: ...

@final
class TopicInfo:
    name: Final[str]
    topic_id: Final[str]
    partitions: Final[int]
    configs: Final[dict[str, str]]

# --- topic admin: requests as the core decodes them (answers: below) ---------------------------

@final
class CreatableTopic:
    name: Final[str]
    num_partitions: Final[int]
    replication_factor: Final[int]
    assignments: Final[list[tuple[int, list[int]]]]
    configs: Final[dict[str, str | None]]

@final
class CreateTopicsRequest:
    topics: Final[list[CreatableTopic]]
    timeout_ms: Final[int]
    validate_only: Final[bool]
    """v1+; False before."""

@final
class DeletableTopic:
    """v0-5 name every topic; v6 names each by name or by id (one of the two, when valid)."""

    name: Final[str | None]
    topic_id: Final[str | None]
    """The text of a ``TopicInfo.topic_id``; None for the nil id."""

@final
class DeleteTopicsRequest:
    topics: Final[list[DeletableTopic]]
    timeout_ms: Final[int]

# --- consumer groups: requests as the core decodes them (answers: below) -----------------------

@final
class JoinGroupProtocol:
    name: Final[str]
    metadata: Final[bytes]

@final
class JoinGroupRequest:
    group_id: Final[str]
    session_timeout_ms: Final[int]
    rebalance_timeout_ms: Final[int]
    """v0 has none: the session timeout, as Kafka uses it then."""
    member_id: Final[str]
    group_instance_id: Final[str | None]
    protocol_type: Final[str]
    protocols: Final[list[JoinGroupProtocol]]
    reason: Final[str | None]

@final
class SyncGroupAssignment:
    member_id: Final[str]
    assignment: Final[bytes]

@final
class SyncGroupRequest:
    group_id: Final[str]
    generation_id: Final[int]
    member_id: Final[str]
    group_instance_id: Final[str | None]
    protocol_type: Final[str | None]
    protocol_name: Final[str | None]
    assignments: Final[list[SyncGroupAssignment]]

@final
class HeartbeatRequest:
    group_id: Final[str]
    generation_id: Final[int]
    member_id: Final[str]
    group_instance_id: Final[str | None]

@final
class LeavingMember:
    member_id: Final[str]
    group_instance_id: Final[str | None]
    reason: Final[str | None]

@final
class LeaveGroupRequest:
    group_id: Final[str]
    members: Final[list[LeavingMember]]
    """v0-2 name one member (its member_id); v3+ carry a list."""

@final
class OffsetCommitPartition:
    partition_index: Final[int]
    committed_offset: Final[int]
    committed_leader_epoch: Final[int]
    committed_metadata: Final[str | None]
    commit_timestamp: Final[int]
    """Only v1 carries it; -1 otherwise."""

@final
class OffsetCommitTopic:
    name: Final[str]
    partitions: Final[list[OffsetCommitPartition]]

@final
class OffsetCommitRequest:
    group_id: Final[str]
    generation_id: Final[int]
    """-1 for v0 (and for simple consumers using assign())."""
    member_id: Final[str]
    group_instance_id: Final[str | None]
    retention_time_ms: Final[int]
    topics: Final[list[OffsetCommitTopic]]

@final
class TxnOffsetCommitRequest:
    """TxnOffsetCommit: offsets a transactional producer commits for a group, in force once its
    transaction commits."""

    transactional_id: Final[str]
    group_id: Final[str]
    producer_id: Final[int]
    producer_epoch: Final[int]
    generation_id: Final[int]
    """-1 before v3 (KIP-447), and for producers that do not name the group's member."""
    member_id: Final[str]
    group_instance_id: Final[str | None]
    topics: Final[list[OffsetCommitTopic]]
    """Each partition's ``commit_timestamp`` is -1."""
    adds_group: Final[bool]
    """v5 (the second transaction protocol): the group is to be added to the transaction
    first (``Broker.transaction_add_group``)."""

@final
class TransactionView:
    """A transactional id's record as the broker's copy of the metadata store holds it."""

    transactional_id: Final[str]
    producer_id: Final[int]
    producer_epoch: Final[int]
    transaction_epoch: Final[int]
    """The epoch the transaction ran with (its offsets were committed with): the record's,
    unless the decision bumped it (the second transaction protocol, a timeout)."""
    state: Final[str]
    """Kafka's name of the state: Empty, Ongoing, PrepareCommit, PrepareAbort,
    CompleteCommit, CompleteAbort."""
    groups: Final[list[str]]
    """The groups whose offsets the transaction commits."""
    unmarked_groups: Final[list[str]]
    """While it is decided: the groups whose coordinator has not yet made its offsets
    committed (or dropped them)."""

@final
class OffsetFetchTopic:
    name: Final[str]
    partition_indexes: Final[list[int]]

@final
class OffsetFetchGroup:
    group_id: Final[str]
    topics: Final[list[OffsetFetchTopic] | None]
    """None (v2+): every partition the group has committed."""

@final
class OffsetFetchRequest:
    groups: Final[list[OffsetFetchGroup]]
    """One group before v8; v8+ may ask for several."""
    require_stable: Final[bool]

@final
class StoredEntry:
    key: Final[str]
    """Relative to the group store's root."""
    value: Final[bytes]
    mod_revision: Final[int]

class MetadataStoreError(Exception):
    """The metadata store could not be reached or answered with an error."""

@final
class GroupStore:
    """The metadata store under ``/kafscale/{namespace}/groups/`` (etcd in a cluster, the
    embedded store on a single node). Keys are relative to that root.

    Like the awaitable methods of ``Broker``, each method returns an ``asyncio.Future`` of the
    running loop (pyo3-async-runtimes' ``future_into_py``), not a coroutine: await it or pass
    it to ``asyncio.wait``, but ``asyncio.create_task`` refuses it."""

    def get(self, key: str) -> asyncio.Future[StoredEntry | None]: ...
    # ``builtins.list``: in this class body, ``list`` is the method.
    def list(self, prefix: str) -> asyncio.Future[builtins.list[StoredEntry]]:
        """Every key starting with ``prefix``, in key order."""
    def commit(
        self,
        expect: builtins.list[tuple[str, int]],
        put: builtins.list[tuple[str, bytes]],
        delete: builtins.list[str],
        delete_prefixes: builtins.list[str],
    ) -> asyncio.Future[int | None]:
        """Atomically applies the puts and deletes if every ``(key, mod_revision)`` in
        ``expect`` holds (revision 0: the key must not exist). Returns the new store revision,
        or None when an expectation failed (nothing written). Raises MetadataStoreError."""

# --- ops APIs: requests as the core decodes them (answers: below) ------------------------------

@final
class DescribeGroupsRequest:
    groups: Final[list[str]]
    include_authorized_operations: Final[bool]

@final
class ListGroupsRequest:
    states_filter: Final[list[str]]
    """v4+; empty: every state."""
    types_filter: Final[list[str]]
    """v5+; empty: every type."""

@final
class DeleteGroupsRequest:
    groups_names: Final[list[str]]

@final
class OffsetDeleteTopic:
    name: Final[str]
    partitions: Final[list[int]]

@final
class OffsetDeleteRequest:
    group_id: Final[str]
    topics: Final[list[OffsetDeleteTopic]]

@final
class DescribeConfigsResource:
    resource_type: Final[int]
    resource_name: Final[str]
    configuration_keys: Final[list[str] | None]
    """None: every config of the resource."""

@final
class DescribeConfigsRequest:
    resources: Final[list[DescribeConfigsResource]]
    include_synonyms: Final[bool]
    include_documentation: Final[bool]

@final
class AlterableConfig:
    name: Final[str]
    value: Final[str | None]
    config_operation: Final[int]
    """IncrementalAlterConfigs: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT; AlterConfigs: always 0."""

@final
class AlterConfigsResource:
    resource_type: Final[int]
    resource_name: Final[str]
    configs: Final[list[AlterableConfig]]

@final
class AlterConfigsRequest:
    """AlterConfigs (``incremental`` False: the given configs replace the resource's whole set)
    and IncrementalAlterConfigs (``incremental`` True: each config is one operation)."""

    resources: Final[list[AlterConfigsResource]]
    validate_only: Final[bool]
    incremental: Final[bool]

@final
class CreatePartitionsTopic:
    name: Final[str]
    count: Final[int]
    assignments: Final[list[list[int]] | None]

@final
class CreatePartitionsRequest:
    topics: Final[list[CreatePartitionsTopic]]
    timeout_ms: Final[int]
    validate_only: Final[bool]

CONTROL_API_KEYS: Final[list[int]]
"""The API keys of every control-plane request the core hands to Python, one per API."""

@final
class ControlRequest:
    api_key: Final[int]
    api_version: Final[int]
    correlation_id: Final[int]
    client_id: Final[str | None]
    client_host: Final[str]
    """The client's IP address, as the connection's peer."""
    connection_id: Final[int]
    """The client's connection, unique in the process. A connection's requests are handed over
    one at a time, in the order it sent them, each once the one before is answered; the control
    plane serves them in that order too (``kafscale.control.ConnectionOrder``)."""
    body: Final[
        CreateTopicsRequest
        | DeleteTopicsRequest
        # the group APIs
        | JoinGroupRequest
        | SyncGroupRequest
        | HeartbeatRequest
        | LeaveGroupRequest
        | OffsetCommitRequest
        | TxnOffsetCommitRequest
        | OffsetFetchRequest
        # the ops APIs
        | DescribeGroupsRequest
        | ListGroupsRequest
        | DeleteGroupsRequest
        | OffsetDeleteRequest
        | DescribeConfigsRequest
        | AlterConfigsRequest
        | CreatePartitionsRequest
    ]
    """The request's API's class (``api_key`` says which)."""
    def respond(self, response: ControlAnswer) -> None:
        """Encode the answer at the request's version and send it: the request's own answer
        class (JoinGroupResponse for JoinGroupRequest, AlterConfigsResponse for both config
        alterations, ...). Raises TypeError naming the class expected, RuntimeError when
        already answered. A request dropped without a response closes its connection."""

@final
class Broker:
    """The methods returning ``asyncio.Future`` need a running event loop: the work runs on the
    broker's own Tokio runtime and the future of the calling loop completes with its result."""

    def __new__(cls, settings: BrokerSettings) -> Self:
        """Validate settings; raises ValueError naming the bad setting (KAFSCALE_* name)."""
    def start(self) -> None:
        """Open metadata and object stores, recover partitions, bind the listener.

        Raises RuntimeError with a message naming the setting at fault when storage
        (e.g. an unreachable S3 endpoint) or the listen address cannot be used."""
    @property
    def listen_addr(self) -> str:
        """The bound address (host:port), useful when the port was 0."""
    def describe(self) -> str:
        """One line: where it listens, advertised address, storage and metadata in use."""
    def next_control_request(self) -> asyncio.Future[ControlRequest | None]:
        """The next control-plane request; None once the broker has shut down."""
    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str]
    ) -> asyncio.Future[TopicInfo]:
        """Create a topic in the metadata store. Raises KafkaApiError with
        TOPIC_ALREADY_EXISTS (36), INVALID_TOPIC_EXCEPTION (17), INVALID_PARTITIONS (37)."""
    def delete_topic(self, name: str, topic_id: str | None = None) -> asyncio.Future[None]:
        """Delete a topic and its segments; with ``topic_id``, only if the topic has that id.
        KafkaApiError UNKNOWN_TOPIC_OR_PARTITION (3), or UNKNOWN_TOPIC_ID (100) when
        ``topic_id`` is given."""
    def topic(self, name: str) -> asyncio.Future[TopicInfo | None]: ...
    def topic_by_id(self, topic_id: str) -> asyncio.Future[TopicInfo | None]:
        """The topic whose ``topic_id`` this is. ValueError when it is not a UUID."""
    def list_topics(self) -> asyncio.Future[list[TopicInfo]]: ...
    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> asyncio.Future[TopicInfo]:
        """Replace the topic's configs with ``configs`` (validated by the caller) in the metadata
        store. Every broker follows at once: retention, segment size and max message size of
        the topic use the new values. KafkaApiError UNKNOWN_TOPIC_OR_PARTITION (3)."""
    def create_partitions(self, name: str, count: int) -> asyncio.Future[TopicInfo]:
        """Grow the topic to ``count`` partitions and wait (bounded) until the new ones have
        owners that take writes. KafkaApiError UNKNOWN_TOPIC_OR_PARTITION (3),
        INVALID_PARTITIONS (37) when ``count`` is not more than now or above the limit."""
    def coordinator_for(self, group_id: str) -> int | None:
        """The broker that coordinates ``group_id``: rendezvous hashing of the group id over
        the live brokers of this broker's cluster view (what FindCoordinator answers). None
        while no live broker is known."""
    def transaction(self, transactional_id: str) -> TransactionView | None:
        """The transactional id's record as this broker's copy of the metadata store holds
        it (it may lag the store by the watch's delay); None if there is none."""
    def decided_transactions(self) -> list[TransactionView]:
        """The decided transactions (PrepareCommit, PrepareAbort) with groups still to be
        told."""
    def transaction_add_group(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> asyncio.Future[None]:
        """Adds ``group_id`` to the producer's transaction (TxnOffsetCommit v5), as
        AddOffsetsToTxn does; what could not be added, the record then shows."""
    def transaction_group_marked(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> asyncio.Future[None]:
        """Reports that ``group_id``'s coordinator made the decided transaction's offsets
        committed, or dropped them. KafkaApiError when the record could not be updated."""
    def group_store(self) -> GroupStore: ...
    def publish_group_metrics(
        self, groups: list[tuple[str, str, int, list[tuple[str, int, int]]]]
    ) -> None:
        """The coordinator's groups as ``(group_id, state, members, [(topic, partition,
        committed offset)])``; /metrics derives the group and lag gauges from the latest."""
    def shutdown(self) -> None:
        """Stop accepting, flush every buffer, close stores. Blocks (GIL released)."""

def init_logging(level: str, format: str) -> None:
    """Install the tracing subscriber (text or json) used by the core."""
@final
class TopicConfig:
    """One topic config KafScale honours (the core's table, declared once)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> Literal["int", "long", "list", "string", "double"]: ...
    @property
    def low(self) -> int:
        """The smallest value accepted (numbers only)."""
    @property
    def high(self) -> int:
        """The largest value accepted (numbers only)."""
    @property
    def expected(self) -> str:
        """What a valid value looks like, for messages."""
    @property
    def broker_setting(self) -> str:
        """The broker setting a topic without its own value follows ("" for cleanup.policy)."""
    @property
    def doc(self) -> str: ...

def topic_configs() -> list[TopicConfig]:
    """Every topic config KafScale honours, in the order the docs list them."""

# --- control-plane answers: what Python answers each request with; the core encodes it at the
# request's version (fields a version lacks are dropped) ---------------------------------------

@final
class CreatePartitionsTopicResult:
    def __new__(cls, name: str, error_code: int, error_message: str | None = None) -> Self: ...
    name: Final[str]
    error_code: Final[int]
    error_message: Final[str | None]

@final
class CreatePartitionsResponse:
    def __new__(
        cls, results: list[CreatePartitionsTopicResult], throttle_time_ms: int = 0
    ) -> Self: ...
    results: Final[list[CreatePartitionsTopicResult]]
    throttle_time_ms: Final[int]

@final
class OffsetDeletePartitionResult:
    def __new__(cls, partition_index: int, error_code: int) -> Self: ...
    partition_index: Final[int]
    error_code: Final[int]

@final
class OffsetDeleteTopicResult:
    def __new__(cls, name: str, partitions: list[OffsetDeletePartitionResult]) -> Self: ...
    name: Final[str]
    partitions: Final[list[OffsetDeletePartitionResult]]

@final
class OffsetDeleteResponse:
    """A group-level ``error_code`` comes with no topics, as Kafka answers it."""

    def __new__(
        cls, error_code: int, topics: list[OffsetDeleteTopicResult] = ..., throttle_time_ms: int = 0
    ) -> Self: ...
    error_code: Final[int]
    topics: Final[list[OffsetDeleteTopicResult]]
    throttle_time_ms: Final[int]

@final
class DescribedGroupMember:
    def __new__(
        cls,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        member_metadata: bytes,
        member_assignment: bytes,
    ) -> Self: ...
    member_id: Final[str]
    group_instance_id: Final[str | None]
    client_id: Final[str]
    client_host: Final[str]
    member_metadata: Final[bytes]
    member_assignment: Final[bytes]

@final
class DescribedGroup:
    def __new__(
        cls,
        error_code: int,
        group_id: str,
        group_state: str = ...,
        protocol_type: str = ...,
        protocol_data: str = ...,
        members: list[DescribedGroupMember] = ...,
        authorized_operations: int = ...,
    ) -> Self: ...
    error_code: Final[int]
    group_id: Final[str]
    group_state: Final[str]
    protocol_type: Final[str]
    protocol_data: Final[str]
    members: Final[list[DescribedGroupMember]]
    authorized_operations: Final[int]

@final
class DescribeGroupsResponse:
    def __new__(cls, groups: list[DescribedGroup], throttle_time_ms: int = 0) -> Self: ...
    groups: Final[list[DescribedGroup]]
    throttle_time_ms: Final[int]

@final
class ListedGroup:
    def __new__(
        cls, group_id: str, protocol_type: str, group_state: str, group_type: str = ...
    ) -> Self: ...
    group_id: Final[str]
    protocol_type: Final[str]
    group_state: Final[str]
    group_type: Final[str]

@final
class ListGroupsResponse:
    def __new__(
        cls, error_code: int, groups: list[ListedGroup] = ..., throttle_time_ms: int = 0
    ) -> Self: ...
    error_code: Final[int]
    groups: Final[list[ListedGroup]]
    throttle_time_ms: Final[int]

@final
class DeletableGroupResult:
    def __new__(cls, group_id: str, error_code: int) -> Self: ...
    group_id: Final[str]
    error_code: Final[int]

@final
class DeleteGroupsResponse:
    def __new__(cls, results: list[DeletableGroupResult], throttle_time_ms: int = 0) -> Self: ...
    results: Final[list[DeletableGroupResult]]
    throttle_time_ms: Final[int]

@final
class CreatableTopicResult:
    """v5+ carry the topic as created (or as validate_only would create it): its partitions,
    replication factor and every config as DescribeConfigs lists it (of each DescribedConfig
    the name, value, read_only, config_source and is_sensitive); v7 its id. A topic that
    failed keeps the defaults (no id, -1 partitions and replication factor, no configs)."""

    def __new__(
        cls,
        name: str,
        error_code: int,
        error_message: str | None = None,
        topic_id: str | None = ...,
        num_partitions: int = ...,
        replication_factor: int = ...,
        configs: list[DescribedConfig] = ...,
    ) -> Self: ...
    name: Final[str]
    error_code: Final[int]
    error_message: Final[str | None]
    topic_id: Final[str | None]
    num_partitions: Final[int]
    replication_factor: Final[int]
    configs: Final[list[DescribedConfig]]

@final
class CreateTopicsResponse:
    def __new__(cls, topics: list[CreatableTopicResult], throttle_time_ms: int = 0) -> Self: ...
    topics: Final[list[CreatableTopicResult]]
    throttle_time_ms: Final[int]

@final
class DeletableTopicResult:
    """``name`` is None only for an id no topic has (v6); the message is v5+, the id v6."""

    def __new__(
        cls,
        name: str | None,
        error_code: int,
        error_message: str | None = None,
        topic_id: str | None = ...,
    ) -> Self: ...
    name: Final[str | None]
    error_code: Final[int]
    error_message: Final[str | None]
    topic_id: Final[str | None]

@final
class DeleteTopicsResponse:
    def __new__(cls, responses: list[DeletableTopicResult], throttle_time_ms: int = 0) -> Self: ...
    responses: Final[list[DeletableTopicResult]]
    throttle_time_ms: Final[int]

@final
class JoinGroupMember:
    def __new__(cls, member_id: str, group_instance_id: str | None, metadata: bytes) -> Self: ...
    member_id: Final[str]
    group_instance_id: Final[str | None]
    metadata: Final[bytes]

@final
class JoinGroupResponse:
    def __new__(
        cls,
        error_code: int,
        generation_id: int = ...,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        leader: str = ...,
        member_id: str = ...,
        members: list[JoinGroupMember] = ...,
        skip_assignment: bool = False,
        throttle_time_ms: int = 0,
    ) -> Self: ...
    error_code: Final[int]
    generation_id: Final[int]
    protocol_type: Final[str | None]
    protocol_name: Final[str | None]
    leader: Final[str]
    member_id: Final[str]
    members: Final[list[JoinGroupMember]]
    skip_assignment: Final[bool]
    throttle_time_ms: Final[int]

@final
class SyncGroupResponse:
    def __new__(
        cls,
        error_code: int,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        assignment: bytes = ...,
        throttle_time_ms: int = 0,
    ) -> Self: ...
    error_code: Final[int]
    protocol_type: Final[str | None]
    protocol_name: Final[str | None]
    assignment: Final[bytes]
    throttle_time_ms: Final[int]

@final
class HeartbeatResponse:
    def __new__(cls, error_code: int, throttle_time_ms: int = 0) -> Self: ...
    error_code: Final[int]
    throttle_time_ms: Final[int]

@final
class LeaveGroupMemberResult:
    def __new__(cls, member_id: str, group_instance_id: str | None, error_code: int) -> Self: ...
    member_id: Final[str]
    group_instance_id: Final[str | None]
    error_code: Final[int]

@final
class LeaveGroupResponse:
    def __new__(
        cls, error_code: int, members: list[LeaveGroupMemberResult] = ..., throttle_time_ms: int = 0
    ) -> Self: ...
    error_code: Final[int]
    members: Final[list[LeaveGroupMemberResult]]
    throttle_time_ms: Final[int]

@final
class OffsetCommitPartitionResult:
    def __new__(cls, partition_index: int, error_code: int) -> Self: ...
    partition_index: Final[int]
    error_code: Final[int]

@final
class OffsetCommitTopicResult:
    def __new__(cls, name: str, partitions: list[OffsetCommitPartitionResult]) -> Self: ...
    name: Final[str]
    partitions: Final[list[OffsetCommitPartitionResult]]

@final
class OffsetCommitResponse:
    def __new__(cls, topics: list[OffsetCommitTopicResult], throttle_time_ms: int = 0) -> Self: ...
    topics: Final[list[OffsetCommitTopicResult]]
    throttle_time_ms: Final[int]

@final
class OffsetFetchPartitionResult:
    def __new__(
        cls,
        partition_index: int,
        committed_offset: int = ...,
        committed_leader_epoch: int = ...,
        metadata: str | None = ...,
        error_code: int = 0,
    ) -> Self: ...
    partition_index: Final[int]
    committed_offset: Final[int]
    committed_leader_epoch: Final[int]
    metadata: Final[str | None]
    error_code: Final[int]

@final
class OffsetFetchTopicResult:
    def __new__(cls, name: str, partitions: list[OffsetFetchPartitionResult]) -> Self: ...
    name: Final[str]
    partitions: Final[list[OffsetFetchPartitionResult]]

@final
class OffsetFetchGroupResult:
    def __new__(
        cls, group_id: str, error_code: int, topics: list[OffsetFetchTopicResult] = ...
    ) -> Self: ...
    group_id: Final[str]
    error_code: Final[int]
    topics: Final[list[OffsetFetchTopicResult]]

@final
class OffsetFetchResponse:
    """One result per requested group, in the request's order (v8+ ask for several)."""

    def __new__(cls, groups: list[OffsetFetchGroupResult], throttle_time_ms: int = 0) -> Self: ...
    groups: Final[list[OffsetFetchGroupResult]]
    throttle_time_ms: Final[int]

@final
class ConfigSynonym:
    def __new__(cls, name: str, value: str | None, source: int) -> Self: ...
    name: Final[str]
    value: Final[str | None]
    source: Final[int]

@final
class DescribedConfig:
    def __new__(
        cls,
        name: str,
        value: str | None,
        read_only: bool,
        config_source: int,
        is_sensitive: bool = False,
        synonyms: list[ConfigSynonym] = ...,
        config_type: int = 0,
        documentation: str | None = None,
    ) -> Self: ...
    name: Final[str]
    value: Final[str | None]
    read_only: Final[bool]
    config_source: Final[int]
    is_sensitive: Final[bool]
    synonyms: Final[list[ConfigSynonym]]
    config_type: Final[int]
    documentation: Final[str | None]

@final
class DescribeConfigsResult:
    def __new__(
        cls,
        error_code: int,
        error_message: str | None,
        resource_type: int,
        resource_name: str,
        configs: list[DescribedConfig] = ...,
    ) -> Self: ...
    error_code: Final[int]
    error_message: Final[str | None]
    resource_type: Final[int]
    resource_name: Final[str]
    configs: Final[list[DescribedConfig]]

@final
class DescribeConfigsResponse:
    def __new__(cls, results: list[DescribeConfigsResult], throttle_time_ms: int = 0) -> Self: ...
    results: Final[list[DescribeConfigsResult]]
    throttle_time_ms: Final[int]

@final
class AlterConfigsResourceResult:
    def __new__(
        cls, error_code: int, error_message: str | None, resource_type: int, resource_name: str
    ) -> Self: ...
    error_code: Final[int]
    error_message: Final[str | None]
    resource_type: Final[int]
    resource_name: Final[str]

@final
class AlterConfigsResponse:
    """The answer to AlterConfigs and to IncrementalAlterConfigs (same shape)."""

    def __new__(
        cls, responses: list[AlterConfigsResourceResult], throttle_time_ms: int = 0
    ) -> Self: ...
    responses: Final[list[AlterConfigsResourceResult]]
    throttle_time_ms: Final[int]

# What Python answers a control-plane request with: the request's own answer class.
ControlAnswer: TypeAlias = (
    CreateTopicsResponse
    | DeleteTopicsResponse
    | JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | DescribeGroupsResponse
    | ListGroupsResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
    | DescribeConfigsResponse
    | AlterConfigsResponse
    | CreatePartitionsResponse
)

# --- analytics path: segments straight from object storage -----------------------------------

@final
class StorageLocation:
    """A storage URL parsed (the one parser the broker's settings, the CLI, polars and Spark
    use): ``s3://BUCKET/NAMESPACE?region=REGION&endpoint=URL``, ``file:///DIR/NAMESPACE`` (or
    the path ``DIR/NAMESPACE``) or ``memory://NAMESPACE``. ValueError says what is wrong."""

    def __new__(cls, url: str) -> Self: ...
    @property
    def scheme(self) -> Literal["s3", "file", "memory"]: ...
    @property
    def namespace(self) -> str: ...
    @property
    def bucket(self) -> str | None: ...
    @property
    def region(self) -> str | None:
        """The region the URL names, if any."""
    @property
    def endpoint(self) -> str | None:
        """The S3-compatible server the URL names, if any."""
    @property
    def directory(self) -> str | None:
        """A local location's data directory (the namespace directory is in it)."""

class SegmentError(Exception):
    """A segment object is corrupt or truncated: no row of it is returned. The message names the
    object and offset."""

@final
class ArrowBatch:
    """One record batch; pyarrow and polars take it through ``__arrow_c_array__``."""
    @property
    def num_rows(self) -> int: ...
    def __arrow_c_array__(
        self, requested_schema: object | None = None
    ) -> tuple[object, object]: ...

@final
class RecordBatchStream:
    """The record batches of one partition range, in offset order."""
    def __iter__(self) -> RecordBatchStream: ...
    def __next__(self) -> ArrowBatch: ...

@final
class SegmentSource:
    """A topic's log at a storage location (see StorageLocation; not memory://): committed
    segments and the write-ahead runs after them. S3 settings not given come from the URL,
    else from the AWS environment variables (region: us-east-1). Every call blocks with the
    GIL released; storage and metadata failures raise OSError."""
    def __new__(
        cls,
        location: str,
        *,
        max_uncompressed_batch_bytes: int,
        region: str | None = None,
        endpoint: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        etcd_endpoints: list[str] | None = None,
        read_committed: bool = True,
    ) -> Self: ...
    @property
    def location(self) -> str: ...
    @property
    def metadata(self) -> str:
        """Where what is committed comes from: "etcd", "published" or "segments"."""
    def log(
        self, topic: str, partition: int
    ) -> tuple[int, int, list[tuple[int, int, int, int | None]], list[tuple[int, int, int, str]]]:
        """(log start, end, [(base, end, size, cleaning generation)] segments,
        [(base, end, length, object)] runs)."""
    def committed_bounds(self, topic: str) -> list[tuple[int, int, int]] | None:
        """(partition, log start, committed end) of each partition; None without metadata
        or for a topic it does not know."""
    def topics(self) -> list[str]: ...
    def partitions(self, topic: str) -> list[int]: ...
    def segments(self, topic: str, partition: int) -> list[tuple[int, int, int, int | None]]:
        """(base offset, end offset exclusive, size in bytes, cleaning generation) of each
        segment."""
    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None: ...
    def segment_objects(self, topic: str, partition: int) -> list[tuple[int, int, int | None]]:
        """(base offset, size in bytes, cleaning generation) of each segment object, from the
        listing alone."""
    def verify(
        self, topic: str, partition: int, base_offset: int, generation: int | None
    ) -> tuple[
        str,
        int,
        int | None,
        int | None,
        int,
        int,
        list[tuple[str, int | None, int | None, str]],
    ]:
        """(object, base offset, first offset, last offset, batches, records,
        [(object, offset, byte, message)]): every problem of one segment and its index."""
    def orphan_indexes(
        self, topic: str, partition: int
    ) -> list[tuple[str, int | None, int | None, str]]:
        """[(object, offset, byte, message)]: the partition's index objects without a segment."""
    def scan(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        end_offset: int,
        *,
        include_headers: bool,
        batch_rows: int,
        batch_bytes: int,
    ) -> RecordBatchStream: ...

def empty_kafka_batch(include_headers: bool) -> ArrowBatch:
    """No rows, in the schema of Spark's Kafka source."""

def committed_bounds(
    endpoints: list[str], namespace: str, topic: str
) -> list[tuple[int, int, int]]:
    """(partition, log start offset, committed end) of each partition, read from etcd."""
