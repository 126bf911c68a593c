"""KafScale segments read straight from object storage into Arrow, without a broker.

A topic's log lives in ``{namespace}/{topic}/{partition}/segment-{base}.kfs`` objects (with a
sparse ``.index`` beside each), in S3 or in a single-node broker's data directory. The core
lists, fetches, checks (segment and batch CRCs) and decodes them; rows come out in the schema
of Spark's Kafka source::

    source = SegmentSource.open("s3://bucket/namespace", endpoint="http://127.0.0.1:9000")
    for batch in source.read("orders", 0, 0, 1_000):
        ...  # pyarrow.RecordBatch: key, value, topic, partition, offset, timestamp, ...
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache

import pyarrow as pa

from . import _core

SegmentError = _core.SegmentError

DEFAULT_REGION = "us-east-1"
DEFAULT_BATCH_ROWS = 65_536
# Below glibc's largest mmap threshold (32 MiB), so freed batches' memory is reused.
DEFAULT_BATCH_BYTES = 16 * 1024 * 1024
# The broker's default --max-uncompressed-batch-bytes: no batch it accepted expands further.
DEFAULT_MAX_UNCOMPRESSED_BATCH_BYTES = 128 * 1024 * 1024


@cache
def kafka_schema(include_headers: bool = False) -> pa.Schema:
    """key binary, value binary, topic string, partition int32, offset int64, timestamp
    (milliseconds, UTC), timestampType int32 and, when asked, headers as a list of
    (key string, value binary) structs."""
    return pa.record_batch(_core.empty_kafka_batch(include_headers)).schema


@dataclass(frozen=True)
class SegmentInfo:
    topic: str
    partition: int
    base_offset: int
    end_offset: int
    """Exclusive: the next segment's base offset, or the last one's last offset + 1."""
    size: int


@dataclass(frozen=True)
class SegmentObject:
    topic: str
    partition: int
    base_offset: int
    size: int


@dataclass(frozen=True)
class SegmentProblem:
    object: str
    """The segment (.kfs) or index object it was found in."""
    offset: int | None
    """The Kafka offset it concerns, when known."""
    byte: int | None
    """Byte position in the object, when known."""
    message: str


@dataclass(frozen=True)
class SegmentCheck:
    object: str
    base_offset: int
    first_offset: int | None
    """First and last offsets of the batches that could be walked (None: no batch could)."""
    last_offset: int | None
    batches: int
    records: int
    problems: list[SegmentProblem]


@dataclass(frozen=True)
class PartitionBounds:
    log_start_offset: int
    high_watermark: int


def _first_set(*values: str | None) -> str | None:
    return next((v for v in values if v), None)


class SegmentSource:
    """The segments under one location: ``s3://bucket/namespace`` or a local
    ``<data dir>/<namespace>`` directory."""

    def __init__(self, core: _core.SegmentSource) -> None:
        self._core = core

    @classmethod
    def open(
        cls,
        location: str,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        max_uncompressed_batch_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BATCH_BYTES,
    ) -> SegmentSource:
        """S3 settings not given come from the standard AWS environment variables
        (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION / AWS_DEFAULT_REGION,
        AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).

        ``max_uncompressed_batch_bytes`` (default 128 MiB, the broker's default
        ``--max-uncompressed-batch-bytes``) bounds what one compressed Kafka batch may expand
        to: a batch that expands further (a decompression bomb) raises SegmentError instead of
        allocating. Raise it only for segments written by a broker with a larger setting."""
        if max_uncompressed_batch_bytes < 1:
            raise ValueError(
                f"max_uncompressed_batch_bytes must be a positive number of bytes, "
                f"not {max_uncompressed_batch_bytes}"
            )
        env = os.environ.get
        core = _core.SegmentSource(
            location,
            max_uncompressed_batch_bytes=max_uncompressed_batch_bytes,
            endpoint=_first_set(endpoint, env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL")),
            region=_first_set(region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"))
            or DEFAULT_REGION,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
        )
        return cls(core)

    @property
    def location(self) -> str:
        return self._core.location

    def topics(self) -> list[str]:
        """Topics with at least one segment."""
        return self._core.topics()

    def partitions(self, topic: str) -> list[int]:
        return self._core.partitions(topic)

    def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        return [
            SegmentInfo(topic, partition, base, end, size)
            for base, end, size in self._core.segments(topic, partition)
        ]

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is at or after ``timestamp_ms`` (what
        ListOffsets answers); None when every record is older."""
        return self._core.offset_for_timestamp(topic, partition, timestamp_ms)

    def segment_objects(self, topic: str, partition: int) -> list[SegmentObject]:
        """The partition's segment objects in offset order, from the listing alone: unlike
        :meth:`segments` nothing is read, so a damaged newest segment hides nothing (what
        ``kafscale segments verify`` walks)."""
        return [
            SegmentObject(topic, partition, base, size)
            for base, size in self._core.segment_objects(topic, partition)
        ]

    def verify(self, topic: str, partition: int, base_offset: int) -> SegmentCheck:
        """Checks one segment and its index end to end - header, every batch's CRC, offsets
        inside the segment, footer, segment CRC, index entries - and reports every problem
        found. Raises OSError only when storage cannot be read."""
        obj, base, first, last, batches, records, problems = self._core.verify(
            topic, partition, base_offset
        )
        return SegmentCheck(
            obj, base, first, last, batches, records, [SegmentProblem(*p) for p in problems]
        )

    def orphan_indexes(self, topic: str, partition: int) -> list[SegmentProblem]:
        """The partition's ``.index`` objects whose segment is gone, as problems (from the
        listing alone; :meth:`verify` checks the indexes that have their segment)."""
        return [SegmentProblem(*p) for p in self._core.orphan_indexes(topic, partition)]

    def read(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        end_offset: int,
        *,
        include_headers: bool = False,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> Iterator[pa.RecordBatch]:
        """Records with ``start_offset <= offset < end_offset`` in offset order, as record
        batches of about ``batch_rows`` rows (cut between Kafka batches). Raises SegmentError
        for a corrupt or truncated segment, OSError when storage cannot be read."""
        if start_offset >= end_offset:
            return
        stream = self._core.scan(
            topic,
            partition,
            start_offset,
            end_offset,
            include_headers=include_headers,
            batch_rows=batch_rows,
            batch_bytes=batch_bytes,
        )
        for batch in stream:
            yield pa.record_batch(batch)


def committed_bounds(
    etcd_endpoints: str | Iterable[str], namespace: str, topic: str
) -> dict[int, PartitionBounds]:
    """Each partition's log start offset and the end of its committed segments, read from the
    etcd of the cluster whose namespace is ``namespace``. A reader bounded by them never
    returns a record that is not committed. Segment readers see the log up to where
    compaction has reached: the committed tail above it sits in write-ahead objects for at
    most the broker's ``wal_compaction_age_ms`` plus one ``wal_compaction_interval_ms``."""
    endpoints = (
        [e.strip() for e in etcd_endpoints.split(",") if e.strip()]
        if isinstance(etcd_endpoints, str)
        else list(etcd_endpoints)
    )
    return {
        partition: PartitionBounds(start, high)
        for partition, start, high in _core.committed_bounds(endpoints, namespace, topic)
    }
