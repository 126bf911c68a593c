"""The admin APIs' answers as plain values (CreateTopics, DeleteTopics, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, CreatePartitions).

The core decodes these requests into the typed objects of ``kafscale._core`` and reads these
answers back by attribute name, encoding them at the request's version (fields a version lacks
are dropped; DescribeConfigs v0 derives ``is_default`` from ``config_source``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class ResourceType(IntEnum):
    """ConfigResource types on the wire."""

    TOPIC = 2
    BROKER = 4


class ConfigSource(IntEnum):
    """DescribeConfigs v1+ ``config_source``."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """DescribeConfigs v3+ ``config_type``."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigOperation(IntEnum):
    """IncrementalAlterConfigs ``config_operation``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class DescribedConfig:
    name: str
    value: str | None
    read_only: bool
    config_source: int
    is_sensitive: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)
    config_type: int = ConfigType.UNKNOWN
    documentation: str | None = None


@dataclass(frozen=True)
class DescribeConfigsResult:
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    configs: list[DescribedConfig] = field(default_factory=list)


@dataclass(frozen=True)
class DescribeConfigsResponse:
    results: list[DescribeConfigsResult]
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class AlterConfigsResourceResult:
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str


@dataclass(frozen=True)
class AlterConfigsResponse:
    """The answer to AlterConfigs and to IncrementalAlterConfigs (same shape)."""

    responses: list[AlterConfigsResourceResult]
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class CreatePartitionsTopicResult:
    name: str
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True)
class CreatePartitionsResponse:
    results: list[CreatePartitionsTopicResult]
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class CreatableTopicResult:
    """v5+ carry the topic as created (or as validate_only would create it): its partitions,
    replication factor and every config as DescribeConfigs lists it (read by attribute:
    ``name``, ``value``, ``read_only``, ``config_source``, ``is_sensitive``); v7 its id.
    A topic that failed keeps the defaults."""

    name: str
    error_code: int
    error_message: str | None = None
    topic_id: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: list[DescribedConfig] = field(default_factory=list)


@dataclass(frozen=True)
class CreateTopicsResponse:
    topics: list[CreatableTopicResult]
    throttle_time_ms: int = 0


@dataclass(frozen=True)
class DeletableTopicResult:
    """``name`` is None only for an id no topic has (v6); the message is v5+, the id v6."""

    name: str | None
    error_code: int
    error_message: str | None = None
    topic_id: str | None = None


@dataclass(frozen=True)
class DeleteTopicsResponse:
    responses: list[DeletableTopicResult]
    throttle_time_ms: int = 0
