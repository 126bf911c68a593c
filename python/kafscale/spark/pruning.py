"""Filter pushdown: what Spark's pushed-down filters on topic, partition, offset and timestamp
say about which input ranges (and which offsets of them) can hold matching rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from kafscale.spark.options import _is_int
from kafscale.spark.planning import SegmentRange

if TYPE_CHECKING:
    from kafscale.segment import SegmentSource


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The filters this module reads: each compares one column with a value. The rest (IsNull,
# StringStartsWith, ...) say nothing about where matching rows are, and Not has no column at all.
_COLUMN_FILTERS = (
    EqualTo,
    EqualNullSafe,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
    In,
)


@dataclass(frozen=True)
class IntRange:
    """Integers ``low <= v < high`` (None = unbounded), optionally only ``values``."""

    low: int | None = None
    high: int | None = None
    values: frozenset[int] | None = None

    def admits(self, value: int) -> bool:
        return (
            (self.low is None or value >= self.low)
            and (self.high is None or value < self.high)
            and (self.values is None or value in self.values)
        )

    def narrow(self, start: int, end: int) -> tuple[int, int]:
        low = start if self.low is None else max(start, self.low)
        high = end if self.high is None else min(end, self.high)
        if self.values:
            low, high = max(low, min(self.values)), min(high, max(self.values) + 1)
        return low, high

    def intersect(self, other: IntRange) -> IntRange:
        values = self.values if other.values is None else other.values
        if self.values is not None and other.values is not None:
            values = self.values & other.values
        return IntRange(
            _max_or_none(self.low, other.low), _min_or_none(self.high, other.high), values
        )


def _max_or_none(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min_or_none(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True)
class Pruning:
    """What pushed-down filters on topic, partition, offset and timestamp say about where the
    matching rows can be. Used to skip partitions and offsets only: Spark still applies every
    filter, so a bound too loose costs reading, never a wrong answer."""

    topics: frozenset[str] | None = None
    partitions: IntRange = IntRange()
    offsets: IntRange = IntRange()
    # Kafka timestamps need not grow with offsets, so only a lower bound prunes (through the
    # first offset at or after it); an upper bound says nothing about where later rows are.
    timestamp_from_ms: int | None = None

    @classmethod
    def from_filters(cls, filters: Iterable[Filter]) -> Pruning:
        pruning = cls()
        for f in filters:
            pruning = pruning._narrowed_by(f)
        return pruning

    def _narrowed_by(self, f: Filter) -> Pruning:
        if not isinstance(f, _COLUMN_FILTERS) or len(f.attribute) != 1:
            return self
        column = f.attribute[0]
        if column == "topic":
            names = _string_values(f)
            if names is None:
                return self
            return replace(self, topics=names if self.topics is None else self.topics & names)
        if column in ("partition", "offset"):
            bounds = _int_range(f)
            if bounds is None:
                return self
            if column == "partition":
                return replace(self, partitions=self.partitions.intersect(bounds))
            return replace(self, offsets=self.offsets.intersect(bounds))
        if column == "timestamp":
            from_ms = _timestamp_lower_bound_ms(f)
            if from_ms is None:
                return self
            current = self.timestamp_from_ms
            return replace(self, timestamp_from_ms=_max_or_none(current, from_ms))
        return self

    def apply(self, ranges: Iterable[SegmentRange], source: SegmentSource) -> list[SegmentRange]:
        out = []
        for r in ranges:
            if self.topics is not None and r.topic not in self.topics:
                continue
            if not self.partitions.admits(r.partition):
                continue
            start, end = self.offsets.narrow(r.start_offset, r.end_offset)
            if self.timestamp_from_ms is not None and start < end:
                found = source.offset_for_timestamp(r.topic, r.partition, self.timestamp_from_ms)
                start = end if found is None else max(start, found)
            if start < end:
                out.append(replace(r, start_offset=start, end_offset=end))
        return out


def _string_values(f: Filter) -> frozenset[str] | None:
    if isinstance(f, EqualTo | EqualNullSafe) and isinstance(f.value, str):
        return frozenset([f.value])
    if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
        return frozenset(f.value)
    return None


def _int_range(f: Filter) -> IntRange | None:
    if isinstance(f, In):
        if not f.value or not all(_is_int(v) for v in f.value):
            return None
        return IntRange(values=frozenset(f.value))
    value = getattr(f, "value", None)
    if not _is_int(value):
        return None
    if isinstance(f, EqualTo | EqualNullSafe):
        return IntRange(value, value + 1)
    if isinstance(f, GreaterThan):
        return IntRange(low=value + 1)
    if isinstance(f, GreaterThanOrEqual):
        return IntRange(low=value)
    if isinstance(f, LessThan):
        return IntRange(high=value)
    if isinstance(f, LessThanOrEqual):
        return IntRange(high=value + 1)
    return None


def _timestamp_lower_bound_ms(f: Filter) -> int | None:
    if isinstance(f, In):
        moments = [_epoch_ms(v) for v in f.value]
        known = [m for m in moments if m is not None]
        return None if not moments or len(known) < len(moments) else min(known)
    if isinstance(f, EqualTo | EqualNullSafe | GreaterThan | GreaterThanOrEqual):
        return _epoch_ms(f.value)
    return None


def _epoch_ms(value: object) -> int | None:
    """Milliseconds since the epoch, rounded down (records carry whole milliseconds, so every
    record at or after the filter's microsecond is at or after this millisecond)."""
    if not isinstance(value, datetime):
        return None
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)
