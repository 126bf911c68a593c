"""Typed surface of the Rust core (`kafscale._core`).

The data plane (Produce, Fetch, ListOffsets, Metadata, ApiVersions) runs entirely in Rust.
Requests for control-plane APIs are decoded in Rust and handed to Python as typed objects
through `Broker.next_control_request()`; Python answers with `ControlRequest.respond()` and
Rust encodes the response at the request's version.
"""

from typing import Protocol

class KafkaApiError(Exception):
    """A failure that maps onto a Kafka error code (`code`) with a human message."""

    code: int
    message: str
    def __init__(self, code: int, message: str) -> None: ...

class BrokerSettings(Protocol):
    """What the core reads from the Python settings object (attribute names must match)."""

    broker_addr: str
    broker_host: str
    broker_port: int
    broker_id: int
    data_dir: str
    s3_bucket: str | None
    s3_region: str | None
    s3_endpoint: str | None
    s3_namespace: str
    use_memory_s3: bool
    etcd_endpoints: str | None
    etcd_username: str | None
    etcd_password: str | None
    lease_ttl_ms: int
    retention_ms: int
    retention_bytes: int
    retention_check_interval_ms: int
    segment_bytes: int
    flush_interval_ms: int
    cache_bytes: int
    readahead_segments: int
    auto_create_topics: bool
    default_partitions: int
    max_request_bytes: int
    max_message_bytes: int
    log_level: str
    log_format: str

class TopicInfo:
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str]

class CreatableTopic:
    name: str
    num_partitions: int
    replication_factor: int
    assignments: list[tuple[int, list[int]]]
    configs: dict[str, str | None]

class CreateTopicsRequest:
    topics: list[CreatableTopic]
    timeout_ms: int
    validate_only: bool

class CreatableTopicResult:
    def __init__(
        self, name: str, error_code: int = 0, error_message: str | None = None
    ) -> None: ...

class CreateTopicsResponse:
    def __init__(self, topics: list[CreatableTopicResult], throttle_time_ms: int = 0) -> None: ...

class DeleteTopicsRequest:
    topic_names: list[str]
    timeout_ms: int

class DeletableTopicResult:
    def __init__(self, name: str, error_code: int = 0) -> None: ...

class DeleteTopicsResponse:
    def __init__(
        self, responses: list[DeletableTopicResult], throttle_time_ms: int = 0
    ) -> None: ...

class ControlRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: CreateTopicsRequest | DeleteTopicsRequest
    def respond(self, response: CreateTopicsResponse | DeleteTopicsResponse) -> None:
        """Send the response. A request dropped without a response closes its connection."""

class Broker:
    def __init__(self, settings: BrokerSettings) -> None:
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
    async def next_control_request(self) -> ControlRequest | None:
        """The next control-plane request; None once the broker has shut down."""
    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        """Create a topic in the metadata store. Raises KafkaApiError with
        TOPIC_ALREADY_EXISTS (36), INVALID_TOPIC_EXCEPTION (17), INVALID_PARTITIONS (37)."""
    async def delete_topic(self, name: str) -> None:
        """Delete a topic and its segments. KafkaApiError UNKNOWN_TOPIC_OR_PARTITION (3)."""
    async def topic(self, name: str) -> TopicInfo | None: ...
    async def list_topics(self) -> list[TopicInfo]: ...
    def shutdown(self) -> None:
        """Stop accepting, flush every buffer, close stores. Blocks (GIL released)."""

def init_logging(level: str, format: str) -> None:
    """Install the tracing subscriber (text or json) used by the core."""
