"""The admin APIs' answers (CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, CreatePartitions) and the wire enums they carry.

The answers are classes of ``kafscale._core`` (one description, in the core, typed by its stub):
Python constructs them and the core encodes them at the request's version (fields a version
lacks are dropped; DescribeConfigs v0 derives ``is_default`` from ``config_source``).
"""

from __future__ import annotations

from kafscale._core import (
    AlterConfigsResourceResult,
    AlterConfigsResponse,
    ConfigSynonym,
    CreatableTopicResult,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribedConfig,
)

__all__ = [
    "AlterConfigsResourceResult",
    "AlterConfigsResponse",
    "ConfigOperation",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "CreatableTopicResult",
    "CreatePartitionsResponse",
    "CreatePartitionsTopicResult",
    "CreateTopicsResponse",
    "DeletableTopicResult",
    "DeleteTopicsResponse",
    "DescribeConfigsResponse",
    "DescribeConfigsResult",
    "DescribedConfig",
    "ResourceType",
]

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
