"""The topic configs KafScale honours, their validation, and the broker defaults they fall
back to.

The configs are declared once, in the core's table (``kafscale._core.topic_configs()``: name,
type, bounds, broker default, doc), which the data plane reads topic records by too. Every
other key is INVALID_CONFIG: a config that would be stored but not applied is worse than a
clear refusal.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kafscale._core import TopicConfig, topic_configs
from kafscale.admin.protocol import ConfigType
from kafscale.errors import ErrorCode

__all__ = ["CONFIG_RULES", "Rejected", "TopicConfigRule", "default_value", "normalise"]


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
    """Kafka's list of ``delete`` and ``compact`` (either, or both in any order); written back
    as Kafka writes it: ``delete``, ``compact`` or ``compact,delete``."""

    expected: str
    doc: str
    config_type: ConfigType = ConfigType.LIST

    def normalise(self, key: str, value: str) -> str:
        policies = {p.strip() for p in value.split(",")}
        if not policies or not policies <= {"delete", "compact"}:
            raise Rejected(
                ErrorCode.INVALID_CONFIG,
                f"invalid value {value!r} for topic config {key!r}: expected {self.expected}",
            )
        return ",".join(sorted(policies))

    def default(self, broker: BrokerDefaults) -> str:
        return "delete"


@dataclass(frozen=True)
class _Fraction(TopicConfigRule):
    """A number from 0 to 1 whose default is a broker setting."""

    expected: str
    default_setting: str
    doc: str
    config_type: ConfigType = ConfigType.DOUBLE

    def normalise(self, key: str, value: str) -> str:
        try:
            number = float(value.strip())
        except ValueError:
            number = -1.0
        if not 0.0 <= number <= 1.0:
            raise Rejected(
                ErrorCode.INVALID_CONFIG,
                f"invalid value {value!r} for topic config {key!r}: expected {self.expected}",
            )
        return repr(number)

    def default(self, broker: BrokerDefaults) -> str:
        return repr(float(getattr(broker, self.default_setting)))


@dataclass(frozen=True)
class _TimestampType(TopicConfigRule):
    """Kafka's ``CreateTime`` or ``LogAppendTime``; batches are stored as their producers sent
    them, so ``CreateTime`` is the one value accepted (and the default)."""

    expected: str
    doc: str
    config_type: ConfigType = ConfigType.STRING

    def normalise(self, key: str, value: str) -> str:
        word = value.strip()
        if word == self.expected:
            return word
        if word == "LogAppendTime":
            raise Rejected(
                ErrorCode.INVALID_CONFIG,
                f"{key}={value!r} is not supported: KafScale stores batches with the "
                f"timestamps their producers gave them; only {key}={self.expected} is supported",
            )
        raise Rejected(
            ErrorCode.INVALID_CONFIG,
            f"invalid value {value!r} for topic config {key!r}: expected {self.expected}",
        )

    def default(self, broker: BrokerDefaults) -> str:
        return self.expected


def _rule(config: TopicConfig) -> TopicConfigRule:
    if config.kind == "list":
        return _CleanupPolicy(expected=config.expected, doc=config.doc)
    if config.kind == "double":
        return _Fraction(config.expected, config.broker_setting, config.doc)
    if config.kind == "string":
        return _TimestampType(expected=config.expected, doc=config.doc)
    return _Bounded(
        config.low,
        config.high,
        config.expected,
        ConfigType.INT if config.kind == "int" else ConfigType.LONG,
        config.broker_setting,
        config.doc,
    )


CONFIG_RULES: Mapping[str, TopicConfigRule] = {c.name: _rule(c) for c in topic_configs()}


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
