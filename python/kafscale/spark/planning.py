"""Driver side: what every subscribed partition holds (its segments and offsets) and the input
partitions a read is planned into, cut only at segment boundaries; the rate limit of streams."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from kafscale.spark.options import (
    OffsetsJson,
    ReadOptions,
    TopicPartition,
    offsets_to_json,
)

if TYPE_CHECKING:
    from kafscale.segment import SegmentInfo, SegmentSource

log = logging.getLogger("kafscale.spark")


@dataclass(frozen=True)
class PartitionLog:
    """What a partition holds right now: its segments and the offsets a read may cover,
    ``earliest <= offset < latest`` (the log start and the committed end: segments, then the
    committed write-ahead runs after them)."""

    topic: str
    partition: int
    segments: tuple[SegmentInfo, ...]
    earliest: int
    latest: int

    def clamp(self, offset: int) -> int:
        return min(max(offset, self.earliest), self.latest)


# --- listing ------------------------------------------------------------------------------------


def open_source(options: ReadOptions) -> SegmentSource:
    from kafscale.segment import DEFAULT_MAX_UNCOMPRESSED_BATCH_BYTES, SegmentSource

    return SegmentSource.open(
        options.location,
        max_uncompressed_batch_bytes=options.max_uncompressed_batch_bytes
        or DEFAULT_MAX_UNCOMPRESSED_BATCH_BYTES,
        etcd_endpoints=options.etcd_endpoints or None,
        isolation_level=options.isolation_level,
        **options.storage,
    )


def list_partition_logs(
    source: SegmentSource, options: ReadOptions
) -> dict[TopicPartition, PartitionLog]:
    """The current data of every partition the query subscribes to (partitions without data
    are left out)."""
    logs: dict[TopicPartition, PartitionLog] = {}
    for topic, partitions in options.subscription.select(source).items():
        if not partitions:
            # As Spark's Kafka source, a topic that is not there reads nothing - but says why.
            log.warning("kafscale: %s", nothing_found(source, topic))
        for partition in partitions:
            held = source.log(topic, partition)
            if held.end_offset > held.log_start_offset:
                logs[(topic, partition)] = PartitionLog(
                    topic,
                    partition,
                    tuple(held.segments),
                    held.log_start_offset,
                    held.end_offset,
                )
    return logs


def nothing_found(source: SegmentSource, topic: str) -> str:
    """Why ``topic`` has no partition at ``source``."""
    if source.metadata != "segments":
        there = ", ".join(source.topics()) or "none"
        return (
            f"topic {topic!r} does not exist in {source.location} (topics there: {there}); "
            "it reads no rows"
        )
    return (
        f"no segments of topic {topic!r} under {source.location}: a cluster's newest records "
        "stay in write-ahead objects until compaction; set etcd.endpoints to read them"
    )


def latest_offsets(options: Mapping[str, str]) -> OffsetsJson:
    """The end of every partition a batch read with these options would see, in the Kafka
    source's JSON shape (pass it as endingOffsets to pin a read, e.g. for incremental jobs)."""
    parsed = ReadOptions.parse(options, streaming=False)
    logs = list_partition_logs(open_source(parsed), parsed)
    return offsets_to_json({tp: log.latest for tp, log in logs.items()})


# --- planning -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentRange(InputPartition):
    """One Spark input partition: offsets ``start_offset <= offset < end_offset`` of one topic
    partition (the pieces of a split partition meet at segment boundaries)."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int

    @property
    def size(self) -> int:
        return self.end_offset - self.start_offset


def batch_ranges(
    logs: Mapping[TopicPartition, PartitionLog], options: ReadOptions, source: SegmentSource
) -> list[SegmentRange]:
    """One range per partition, from startingOffsets/Timestamp to endingOffsets/Timestamp."""
    ranges = []
    for (topic, partition), log in sorted(logs.items()):
        start = options.starting.resolve(log, source)
        end = options.ending.resolve(log, source)
        if start < end:
            ranges.append(SegmentRange(topic, partition, start, end))
    return ranges


def split_at_segments(
    ranges: Sequence[SegmentRange],
    segments_of: Mapping[TopicPartition, Sequence[SegmentInfo]],
    min_partitions: int | None,
) -> list[SegmentRange]:
    """Cut big ranges at segment boundaries until there are about ``min_partitions`` of them,
    each range getting pieces in proportion to its size (as Spark's Kafka source does with
    offsets). A segment is never split between input partitions: one task fetches each object."""
    if not min_partitions or min_partitions <= len(ranges):
        return list(ranges)
    total = sum(r.size for r in ranges)
    out: list[SegmentRange] = []
    for r in ranges:
        pieces = max(1, round(min_partitions * r.size / total))
        out.extend(_split_range(r, segments_of.get((r.topic, r.partition), ()), pieces))
    return out


def _split_range(
    r: SegmentRange, segments: Sequence[SegmentInfo], pieces: int
) -> list[SegmentRange]:
    boundaries = [s.base_offset for s in segments if r.start_offset < s.base_offset < r.end_offset]
    cuts: set[int] = set()
    if boundaries:
        for i in range(1, pieces):
            ideal = r.start_offset + r.size * i / pieces
            cuts.add(min(boundaries, key=lambda b: abs(b - ideal)))
    edges = [r.start_offset, *sorted(cuts), r.end_offset]
    return [replace(r, start_offset=a, end_offset=b) for a, b in pairwise(edges)]


def rate_limited(
    begin: Mapping[TopicPartition, int], until: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """Move each partition from ``begin`` towards ``until`` by at most ``limit`` offsets in all,
    shared in proportion to each partition's backlog (largest remainders get the leftover
    units, so the total is exactly ``limit`` when the backlog is larger)."""
    backlog = {tp: until[tp] - begin[tp] for tp in until if until[tp] > begin[tp]}
    total = sum(backlog.values())
    if total <= limit:
        return dict(until)
    granted = {tp: limit * lag // total for tp, lag in backlog.items()}
    leftover = limit - sum(granted.values())
    by_remainder = sorted(backlog, key=lambda tp: -(limit * backlog[tp] % total))
    for tp in by_remainder[:leftover]:
        granted[tp] += 1
    return {tp: begin[tp] + granted.get(tp, 0) for tp in until}
