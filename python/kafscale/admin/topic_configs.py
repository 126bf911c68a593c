"""The topic configs KafScale honours, their validation, and the broker defaults they fall
back to.

The ops spec's whitelist (retention.ms, retention.bytes, segment.bytes) plus max.message.bytes
and the KIP-937 timestamp bounds message.timestamp.before.max.ms / after.max.ms, which the
core enforces too. Every other key is INVALID_CONFIG: a config that would be stored
but not applied is worse than a clear refusal.
"""

from __future__ import annotations

import re
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


@dataclass(frozen=True)
class TopicConfigRule:
    low: int
    high: int
    expected: str
    config_type: ConfigType
    # The broker setting a topic without an override follows.
    default_setting: str
    doc: str


CONFIG_RULES: Mapping[str, TopicConfigRule] = {
    "retention.ms": TopicConfigRule(
        -1,
        _INT64_MAX,
        "-1 (unlimited) or milliseconds >= 0",
        ConfigType.LONG,
        "retention_ms",
        "Segments whose newest record is older than this are deleted (-1: keep forever).",
    ),
    "retention.bytes": TopicConfigRule(
        -1,
        _INT64_MAX,
        "-1 (unlimited) or bytes >= 0",
        ConfigType.LONG,
        "retention_bytes",
        "Oldest segments are deleted while a partition is larger than this (-1: no limit).",
    ),
    "segment.bytes": TopicConfigRule(
        1,
        _INT32_MAX,
        "bytes > 0 (at most 2147483647)",
        ConfigType.INT,
        "segment_bytes",
        "A partition's buffer is sealed into a segment object at this size.",
    ),
    "max.message.bytes": TopicConfigRule(
        0,
        _INT32_MAX,
        "bytes >= 0 (at most 2147483647)",
        ConfigType.INT,
        "max_message_bytes",
        "Largest record batch the topic accepts.",
    ),
    "message.timestamp.before.max.ms": TopicConfigRule(
        0,
        _INT64_MAX,
        "milliseconds >= 0",
        ConfigType.LONG,
        "message_timestamp_before_max_ms",
        "A produce whose CreateTime record timestamp is older than this (against the broker's "
        "clock) is refused with INVALID_TIMESTAMP (KIP-937).",
    ),
    "message.timestamp.after.max.ms": TopicConfigRule(
        0,
        _INT64_MAX,
        "milliseconds >= 0",
        ConfigType.LONG,
        "message_timestamp_after_max_ms",
        "A produce whose CreateTime record timestamp is further than this in the future "
        "(against the broker's clock) is refused with INVALID_TIMESTAMP (KIP-937).",
    ),
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
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text) or not rule.low <= int(text) <= rule.high:
        raise Rejected(
            ErrorCode.INVALID_CONFIG,
            f"invalid value {value!r} for topic config {key!r}: expected {rule.expected}",
        )
    return str(int(text))


def default_value(key: str, broker: BrokerDefaults) -> str:
    """What a topic without an override of ``key`` uses: the broker's setting."""
    return str(getattr(broker, CONFIG_RULES[key].default_setting))
