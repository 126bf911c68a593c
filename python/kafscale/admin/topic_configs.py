"""The topic configs KafScale honours, their validation, and the broker defaults they fall
back to.

The ops spec's whitelist (retention.ms, retention.bytes, segment.bytes) plus max.message.bytes,
the KIP-937 timestamp bounds message.timestamp.before.max.ms / after.max.ms, which the core
enforces too, and cleanup.policy, whose one value here is delete (retention deletes old
segments; there is no log compaction). Every other key is INVALID_CONFIG: a config that would be
stored but not applied is worse than a clear refusal.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kafscale.admin.protocol import ConfigType
from kafscale.errors import ErrorCode

__all__ = ["CONFIG_RULES", "Rejected", "TopicConfigRule", "default_value", "normalise"]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class Rejected(Exception):
    """A request item refused with a Kafka error code and a message for the person."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class BrokerDefaults(Protocol):
    """The broker settings a topic without an override follows (read only)."""

    @property
    def retention_ms(self) -> int: ...
    @property
    def retention_bytes(self) -> int: ...
    @property
    def segment_bytes(self) -> int: ...
    @property
    def max_message_bytes(self) -> int: ...
    @property
    def message_timestamp_before_max_ms(self) -> int: ...
    @property
    def message_timestamp_after_max_ms(self) -> int: ...


class TopicConfigRule(ABC):
    """How one topic config is checked, typed, documented and defaulted."""

    config_type: ConfigType
    # What a valid value looks like, for messages.
    expected: str
    doc: str

    @abstractmethod
    def normalise(self, key: str, value: str) -> str:
        """The value in canonical form; raises Rejected (INVALID_CONFIG)."""

    @abstractmethod
    def default(self, broker: BrokerDefaults) -> str:
        """What a topic without an override uses."""


@dataclass(frozen=True)
class _Bounded(TopicConfigRule):
    """An integer within [low, high] whose default is a broker setting."""

    low: int
    high: int
    expected: str
    config_type: ConfigType
    default_setting: str
    doc: str

    def normalise(self, key: str, value: str) -> str:
        text = value.strip()
        if not re.fullmatch(r"[+-]?\d+", text) or not self.low <= int(text) <= self.high:
            raise Rejected(
                ErrorCode.INVALID_CONFIG,
                f"invalid value {value!r} for topic config {key!r}: expected {self.expected}",
            )
        return str(int(text))

    def default(self, broker: BrokerDefaults) -> str:
        return str(getattr(broker, self.default_setting))


@dataclass(frozen=True)
class _CleanupPolicy(TopicConfigRule):
    """Kafka's list of ``delete`` and ``compact``; only ``delete`` is implemented, so it is the
    one value accepted (and the default)."""

    config_type: ConfigType = ConfigType.LIST
    expected: str = "delete"
    doc: str = (
        "delete: segments go by retention.ms and retention.bytes. KafScale has no log "
        "compaction, so compact is refused."
    )

    def normalise(self, key: str, value: str) -> str:
        policies = {p.strip() for p in value.split(",")}
        if policies == {"delete"}:
            return "delete"
        if policies <= {"delete", "compact"}:
            raise Rejected(
                ErrorCode.INVALID_CONFIG,
                f"{key}={value!r} is not supported: KafScale has no log compaction; only "
                f"{key}=delete is supported",
            )
        raise Rejected(
            ErrorCode.INVALID_CONFIG,
            f"invalid value {value!r} for topic config {key!r}: only delete is supported",
        )

    def default(self, broker: BrokerDefaults) -> str:
        return "delete"


CONFIG_RULES: Mapping[str, TopicConfigRule] = {
    "retention.ms": _Bounded(
        -1,
        _INT64_MAX,
        "-1 (unlimited) or milliseconds >= 0",
        ConfigType.LONG,
        "retention_ms",
        "Segments whose newest record is older than this are deleted (-1: keep forever).",
    ),
    "retention.bytes": _Bounded(
        -1,
        _INT64_MAX,
        "-1 (unlimited) or bytes >= 0",
        ConfigType.LONG,
        "retention_bytes",
        "Oldest segments are deleted while a partition is larger than this (-1: no limit).",
    ),
    "segment.bytes": _Bounded(
        1,
        _INT32_MAX,
        "bytes > 0 (at most 2147483647)",
        ConfigType.INT,
        "segment_bytes",
        "A partition's buffer is sealed into a segment object at this size.",
    ),
    "max.message.bytes": _Bounded(
        0,
        _INT32_MAX,
        "bytes >= 0 (at most 2147483647)",
        ConfigType.INT,
        "max_message_bytes",
        "Largest record batch the topic accepts.",
    ),
    "message.timestamp.before.max.ms": _Bounded(
        0,
        _INT64_MAX,
        "milliseconds >= 0",
        ConfigType.LONG,
        "message_timestamp_before_max_ms",
        "A produce whose CreateTime record timestamp is older than this (against the broker's "
        "clock) is refused with INVALID_TIMESTAMP (KIP-937).",
    ),
    "message.timestamp.after.max.ms": _Bounded(
        0,
        _INT64_MAX,
        "milliseconds >= 0",
        ConfigType.LONG,
        "message_timestamp_after_max_ms",
        "A produce whose CreateTime record timestamp is further than this in the future "
        "(against the broker's clock) is refused with INVALID_TIMESTAMP (KIP-937).",
    ),
    "cleanup.policy": _CleanupPolicy(),
}


def normalise(key: str, value: str | None) -> str:
    """The value of a topic config in canonical form; raises Rejected (INVALID_CONFIG)."""
    rule = CONFIG_RULES.get(key)
    if rule is None:
        raise Rejected(
            ErrorCode.INVALID_CONFIG,
            f"unsupported topic config {key!r}; KafScale accepts only {', '.join(CONFIG_RULES)}",
        )
    if value is None:
        raise Rejected(
            ErrorCode.INVALID_CONFIG,
            f"topic config {key!r} has no value; give one ({rule.expected}) or leave it out",
        )
    return rule.normalise(key, value)


def default_value(key: str, broker: BrokerDefaults) -> str:
    """What a topic without an override of ``key`` uses."""
    return CONFIG_RULES[key].default(broker)
