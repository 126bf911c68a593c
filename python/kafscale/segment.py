"""KafScale topics read straight from object storage into Arrow, without a broker.

A topic's log lives in ``{namespace}/{topic}/{partition}/segment-{base}.kfs`` objects (with a
sparse ``.index`` beside each) and, for its newest records, in the write-ahead objects the
brokers commit before compaction turns them into segments; in S3 or in a single-node broker's
data directory. The core learns what is committed (from the cluster's etcd, or the metadata a
single-node broker publishes next to its data), lists, fetches, checks (segment and batch CRCs)
and decodes it; rows come out in the schema of Spark's Kafka source::

    source = SegmentSource.open("s3://bucket/namespace", endpoint="http://127.0.0.1:9000",
                                etcd_endpoints="http://127.0.0.1:2379")
    for batch in source.read("orders", 0, 0, 1_000):
        ...  # pyarrow.RecordBatch: key, value, topic, partition, offset, timestamp, ...
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache

import pyarrow as pa

from . import _core

SegmentError = _core.SegmentError

DEFAULT_BATCH_ROWS = 65_536
# Below glibc's largest mmap threshold (32 MiB), so freed batches' memory is reused.
DEFAULT_BATCH_BYTES = 16 * 1024 * 1024
# The broker's default --max-uncompressed-batch-bytes: no batch it accepted expands further.
DEFAULT_MAX_UNCOMPRESSED_BATCH_BYTES = 128 * 1024 * 1024
# What a reader sees of transactions, by the names of Kafka's isolation.level.
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


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
    generation: int | None = None
    """The cleaning of a compacted topic that wrote it (its offsets may have gaps); None for
    compaction's segments."""


@dataclass(frozen=True)
class SegmentObject:
    topic: str
    partition: int
    base_offset: int
    size: int
    generation: int | None = None
    """The cleaning of a compacted topic that wrote it; None for compaction's segments."""


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
    """The end a reader reads to: the committed end, every offset below it (and at or above the
    log start) readable; for a read_committed source, the last stable offset."""


@dataclass(frozen=True)
class PartitionLog:
    """What a reader may read of one partition right now: ``log_start_offset <= offset <
    end_offset``, in its committed segments and then the write-ahead runs after them."""

    topic: str
    partition: int
    log_start_offset: int
    end_offset: int
    segments: list[SegmentInfo]
    runs: list[RunInfo]


@dataclass(frozen=True)
class RunInfo:
    """A partition's committed batches in a write-ahead object (compaction later moves them
    into a segment)."""

    base_offset: int
    end_offset: int
    """Exclusive."""
    size: int
    object: str
    """The write-ahead object's key in the storage (namespace included)."""


def check_isolation_level(level: str) -> None:
    """Raises ValueError unless ``level`` is one of ``ISOLATION_LEVELS``."""
    if level not in ISOLATION_LEVELS:
        raise ValueError(
            f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, not {level!r} "
            "(read_committed, the default, leaves out open and aborted transactions)"
        )


def _endpoint_list(endpoints: str | Iterable[str]) -> list[str]:
    if isinstance(endpoints, str):
        return [e.strip() for e in endpoints.split(",") if e.strip()]
    return list(endpoints)


class SegmentSource:
    """The topics under one location: ``s3://bucket/namespace[?region=…&endpoint=…]`` or a
    local ``<data dir>/<namespace>`` directory (``file://`` optional; see
    :class:`kafscale._core.StorageLocation`).

    What is committed comes from the cluster's etcd when ``etcd_endpoints`` is given (its
    namespace is the location's last part), else from the metadata a single-node broker
    publishes in its data (``<data dir>/<namespace>/!meta``); either way a read sees every
    record committed when it starts, and nothing a broker uploaded without committing. Without
    either (a cluster's bucket read without its etcd) only the segments are read, each up to
    its end: the newest records, not yet compacted, are not seen.

    With the metadata, reads are those of a read_committed consumer by default: below the last
    stable offset (nothing of a transaction still open) and without the records of aborted
    transactions; ``isolation_level="read_uncommitted"`` reads every committed record, as a
    read_uncommitted consumer does. Transaction markers are never rows."""

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
        etcd_endpoints: str | Iterable[str] | None = None,
        isolation_level: str = "read_committed",
    ) -> SegmentSource:
        """S3 settings not given here come from the location's URL, else from the standard AWS
        environment variables (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION /
        AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); the
        region defaults to us-east-1.

        ``max_uncompressed_batch_bytes`` (default 128 MiB, the broker's default
        ``--max-uncompressed-batch-bytes``) bounds what one compressed Kafka batch may expand
        to: a batch that expands further (a decompression bomb) raises SegmentError instead of
        allocating. Raise it only for segments written by a broker with a larger setting."""
        check_isolation_level(isolation_level)
        if max_uncompressed_batch_bytes < 1:
            raise ValueError(
                f"max_uncompressed_batch_bytes must be a positive number of bytes, "
                f"not {max_uncompressed_batch_bytes}"
            )
        core = _core.SegmentSource(
            location,
            max_uncompressed_batch_bytes=max_uncompressed_batch_bytes,
            endpoint=endpoint or None,
            region=region or None,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
            etcd_endpoints=None if etcd_endpoints is None else _endpoint_list(etcd_endpoints),
            read_committed=isolation_level == "read_committed",
        )
        return cls(core)

    @property
    def location(self) -> str:
        return self._core.location

    @property
    def metadata(self) -> str:
        """Where what is committed comes from: ``"etcd"``, ``"published"`` (a single-node
        broker's data) or ``"segments"`` (nothing: segments only)."""
        return self._core.metadata

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's committed log now (see :class:`PartitionLog`)."""
        start, end, segments, runs = self._core.log(topic, partition)
        return PartitionLog(
            topic,
            partition,
            start,
            end,
            [SegmentInfo(topic, partition, *segment) for segment in segments],
            [RunInfo(*run) for run in runs],
        )

    def bounds(self, topic: str) -> dict[int, PartitionBounds] | None:
        """Each partition's log start and end (the committed end; reading committed, the last
        stable offset); None without metadata (then the segments are all there is) or when the
        metadata knows no such topic."""
        bounds = self._core.committed_bounds(topic)
        if bounds is None:
            return None
        return {p: PartitionBounds(start, end) for p, start, end in bounds}

    def topics(self) -> list[str]:
        """Topics with at least one segment."""
        return self._core.topics()

    def partitions(self, topic: str) -> list[int]:
        return self._core.partitions(topic)

    def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        return [
            SegmentInfo(topic, partition, *segment)
            for segment in self._core.segments(topic, partition)
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
            SegmentObject(topic, partition, base, size, generation)
            for base, size, generation in self._core.segment_objects(topic, partition)
        ]

    def verify(
        self, topic: str, partition: int, base_offset: int, generation: int | None = None
    ) -> SegmentCheck:
        """Checks one segment (a cleaning's of a compacted topic: of that ``generation``) and
        its index end to end - header, every batch's CRC, offsets inside the segment, footer,
        segment CRC, index entries - and reports every problem found. Raises OSError only
        when storage cannot be read."""
        obj, base, first, last, batches, records, problems = self._core.verify(
            topic, partition, base_offset, generation
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
        """Records with ``start_offset <= offset < end_offset`` in offset order (within the
        committed log), as record batches of about ``batch_rows`` rows (cut between Kafka
        batches). Raises SegmentError for a corrupt or truncated segment, OSError when storage
        or the metadata cannot be read."""
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
    """Each partition's log start offset and committed end (its high watermark), read from the
    etcd of the cluster whose namespace is ``namespace`` (empty for a topic it does not know).
    A reader bounded by them never returns a record that is not committed. It reads etcd
    alone, so it cannot tell where open transactions begin: a read_committed reader's bounds
    come from :meth:`SegmentSource.bounds`."""
    return {
        partition: PartitionBounds(start, high)
        for partition, start, high in _core.committed_bounds(
            _endpoint_list(etcd_endpoints), namespace, topic
        )
    }
