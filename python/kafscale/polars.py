"""Read a KafScale topic's segments into polars, lazily.

``scan_topic`` returns a ``pl.LazyFrame`` over the segment objects of one topic (S3 or a local
data dir) with the columns of Spark's Kafka source: key, value, topic, partition, offset,
timestamp (datetime[ms, UTC]), timestampType and, when asked, headers. Nothing is listed or read
until the frame is collected, and then only what the query needs:

- projection: only the selected columns are handed to polars;
- ``head(n)``: reading stops after n rows;
- filters on ``partition`` and ``offset`` skip partitions and offset ranges, and a lower bound
  on ``timestamp`` starts each partition at the first offset with that timestamp (the segment
  index makes both cheap). Every batch is still filtered with the full predicate, so pruning
  only saves work and never changes the result.

The scan reads each partition's committed log as it is when the frame is collected: its
segments and the write-ahead runs after them, from its log start up to its high watermark -
with ``etcd_endpoints`` as the cluster's etcd has it, in a single-node broker's data directory
as the broker published it (see :class:`kafscale.segment.SegmentSource`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import polars as pl
from polars.io.plugins import register_io_source

from kafscale._core import StorageLocation
from kafscale.segment import (
    DEFAULT_MAX_UNCOMPRESSED_BATCH_BYTES,
    SegmentSource,
    check_isolation_level,
    kafka_schema,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["scan_topic"]

DEFAULT_BATCH_ROWS = 65_536
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# the columns whose bounds turn into less reading
PRUNABLE = ("partition", "offset", "timestamp")
# comparison operator -> the same comparison with its operands swapped (literal op column)
MIRRORED = {"Eq": "Eq", "Lt": "Gt", "LtEq": "GtEq", "Gt": "Lt", "GtEq": "LtEq"}


def scan_topic(
    path: str,
    topic: str,
    *,
    partitions: Iterable[int] | None = None,
    starting_offsets: Mapping[int, int] | None = None,
    ending_offsets: Mapping[int, int] | None = None,
    include_headers: bool = False,
    etcd_endpoints: str | list[str] | None = None,
    namespace: str | None = None,
    endpoint: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    max_uncompressed_batch_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BATCH_BYTES,
    isolation_level: str = "read_committed",
) -> pl.LazyFrame:
    """A LazyFrame over ``topic`` in ``path`` (``s3://bucket/namespace`` or a local
    ``<data_dir>/<namespace>`` directory).

    ``partitions`` limits the scan to those partitions; ``starting_offsets`` (inclusive) and
    ``ending_offsets`` (exclusive) map a partition to where to start and stop, the rest reads
    from its log start to its high watermark. ``etcd_endpoints`` names the cluster's etcd
    (needed for a cluster's bucket: without it only compacted segments are read);
    ``namespace``, if given, must be the last part of ``path``.
    The S3 settings default to the usual AWS environment variables.
    ``max_uncompressed_batch_bytes`` bounds what one compressed batch may expand to (see
    :meth:`kafscale.segment.SegmentSource.open`): past it the scan raises SegmentError.
    ``isolation_level`` ``"read_committed"`` (the default) reads as a read_committed consumer:
    nothing of an open transaction, no record of an aborted one; ``"read_uncommitted"`` reads
    every committed record."""
    check_isolation_level(isolation_level)
    location_namespace = StorageLocation(path).namespace
    if namespace is not None and namespace != location_namespace:
        raise ValueError(
            f"namespace {namespace!r} is not the namespace of {path} ({location_namespace!r}): "
            "the cluster's metadata is under the namespace its storage is"
        )
    scan = TopicScan(
        path=path,
        topic=topic,
        partitions=None if partitions is None else frozenset(partitions),
        starting_offsets=dict(starting_offsets or {}),
        ending_offsets=dict(ending_offsets or {}),
        include_headers=include_headers,
        etcd_endpoints=etcd_endpoints,
        max_uncompressed_batch_bytes=max_uncompressed_batch_bytes,
        isolation_level=isolation_level,
        storage={
            "endpoint": endpoint,
            "region": region,
            "access_key_id": access_key_id,
            "secret_access_key": secret_access_key,
            "session_token": session_token,
        },
    )
    return register_io_source(scan.batches, schema=scan.schema())


# ---------------------------------------------------------------------------------------------
# what a predicate says about partition, offset and timestamp


@dataclasses.dataclass(frozen=True)
class Span:
    """Integers a column may hold in rows that pass a predicate: ``lo <= x < hi`` and, when
    ``values`` is set, ``x in values``; None means no limit that way."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    def __and__(self, other: Span) -> Span:
        return Span(
            _pick(max, self.lo, other.lo, keep_none=False),
            _pick(min, self.hi, other.hi, keep_none=False),
            _pick(frozenset.intersection, self.values, other.values, keep_none=False),
        )

    def __or__(self, other: Span) -> Span:
        return Span(
            _pick(min, self.lo, other.lo, keep_none=True),
            _pick(max, self.hi, other.hi, keep_none=True),
            _pick(frozenset.union, self.values, other.values, keep_none=True),
        )

    def allows(self, x: int) -> bool:
        return (
            (self.lo is None or x >= self.lo)
            and (self.hi is None or x < self.hi)
            and (self.values is None or x in self.values)
        )

    def clip(self, start: int, end: int) -> tuple[int, int]:
        """[start, end) narrowed to this span (its values only by their hull)."""
        if self.lo is not None:
            start = max(start, self.lo)
        if self.hi is not None:
            end = min(end, self.hi)
        if self.values is not None:
            start = max(start, min(self.values, default=end))
            end = min(end, max(self.values, default=start - 1) + 1)
        return start, end


_L = TypeVar("_L")


def _pick(fn: Callable[[_L, _L], _L], a: _L | None, b: _L | None, *, keep_none: bool) -> _L | None:
    """fn(a, b) of two optional limits: None (no limit) wins for a union, loses for an
    intersection."""
    if a is None or b is None:
        return None if keep_none else (b if a is None else a)
    return fn(a, b)


Bounds = dict[str, Span]


def meet(a: Bounds, b: Bounds) -> Bounds:
    """Both hold: every limit of either applies."""
    return {col: a.get(col, Span()) & b.get(col, Span()) for col in a.keys() | b.keys()}


def join(a: Bounds, b: Bounds) -> Bounds:
    """One of them holds: only columns limited on both sides stay limited."""
    return {col: a[col] | b[col] for col in a.keys() & b.keys()}


def predicate_bounds(predicate: pl.Expr | None) -> Bounds:
    """Limits on partition, offset and timestamp (epoch ms) that every row passing
    ``predicate`` meets. Only the shapes understood below count; anything else limits nothing,
    which is always safe."""
    if predicate is None:
        return {}
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # a predicate polars cannot write as JSON: no pruning
        return {}
    return node_bounds(tree)


def node_bounds(node: object) -> Bounds:
    if not isinstance(node, dict):
        return {}
    if "BinaryExpr" in node:
        binary = node["BinaryExpr"]
        return binary_bounds(binary["left"], binary["op"], binary["right"])
    if "Function" in node:
        return function_bounds(node["Function"])
    return {}


def binary_bounds(left: object, op: str, right: object) -> Bounds:
    if op in ("And", "LogicalAnd"):
        return meet(node_bounds(left), node_bounds(right))
    if op in ("Or", "LogicalOr"):
        return join(node_bounds(left), node_bounds(right))
    if op not in MIRRORED:
        return {}
    column = column_name(left)
    if column is None:
        column, op, right = column_name(right), MIRRORED[op], left
    value = constant(right)
    if column is None or value is None:
        return {}
    span = comparison_span(column, op, value)
    return {} if span is None else {column: span}


def function_bounds(function: dict[str, Any]) -> Bounds:
    kind = function.get("function")
    inputs = function.get("input") or []
    if not isinstance(kind, dict) or not inputs:
        return {}
    boolean = kind.get("Boolean")
    column = column_name(inputs[0])
    if column is None or not isinstance(boolean, dict):
        return {}
    if "IsIn" in boolean and len(inputs) == 2:
        return in_bounds(column, constant(inputs[1]))
    if "IsBetween" in boolean and len(inputs) == 3:
        return between_bounds(column, inputs[1], inputs[2], boolean["IsBetween"].get("closed"))
    return {}


def in_bounds(column: str, values: object) -> Bounds:
    if isinstance(values, pl.Series):
        values = values.to_list()
    if not isinstance(values, list) or any(v is None for v in values):
        return {}
    if column == "timestamp":
        moments = [m for m in map(timestamp_ms, values) if m is not None]
        if len(moments) < len(values):
            return {}
        # the rows' timestamps are at least the smallest listed one
        return {column: Span(lo=math.ceil(min(moments)))} if moments else {}
    keys = [k for k in map(integer, values) if k is not None]
    if len(keys) < len(values):
        return {}
    return {column: Span(values=frozenset(keys))}


def between_bounds(column: str, low: object, high: object, closed: str | None) -> Bounds:
    low_value, high_value = constant(low), constant(high)
    if low_value is None or high_value is None:
        return {}
    lower_op = "GtEq" if closed in ("Both", "Left") else "Gt"
    upper_op = "LtEq" if closed in ("Both", "Right") else "Lt"
    spans = [comparison_span(column, lower_op, low_value)]
    spans.append(comparison_span(column, upper_op, high_value))
    return meet(*({column: s} if s is not None else {} for s in spans))


def comparison_span(column: str, op: str, value: object) -> Span | None:
    """The span of ``column op value``. Timestamps are not ordered along the log, so only
    their lower limits help (as the first offset with such a timestamp)."""
    if column == "timestamp":
        moment = timestamp_ms(value)
        if moment is None:
            return None
        if op == "Gt":
            return Span(lo=math.floor(moment) + 1)
        if op in ("GtEq", "Eq"):
            return Span(lo=math.ceil(moment))
        return None
    key = integer(value)
    if key is None:
        return None
    if op == "Eq":
        return Span(values=frozenset({key}))
    return {
        "Lt": Span(hi=key),
        "LtEq": Span(hi=key + 1),
        "Gt": Span(lo=key + 1),
        "GtEq": Span(lo=key),
    }[op]


def timestamp_ms(value: object) -> float | None:
    """``value`` in the domain of timestamp: epoch milliseconds (maybe fractional); None when it
    is not a datetime with a time zone."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    return (value - EPOCH) / dt.timedelta(milliseconds=1)


def integer(value: object) -> int | None:
    """``value`` in the domain of partition and offset; None when it is not an int (a bool is
    not)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def column_name(node: object) -> str | None:
    """The prunable column ``node`` reads, directly or widened to Int64 (a lossless cast of
    partition/offset that polars adds for ``is_in``)."""
    if not isinstance(node, dict):
        return None
    if "Column" in node:
        name = node["Column"]
        return name if name in PRUNABLE else None
    cast = node.get("Cast")
    if isinstance(cast, dict) and cast.get("dtype") == {"Literal": "Int64"}:
        inner = column_name(cast.get("expr"))
        return inner if inner in ("partition", "offset") else None
    return None


def constant(node: object) -> object:
    """The value of a column-free sub-expression (evaluated by polars itself, so every literal
    form it has is understood); None when it reads a column or cannot be evaluated."""
    text = json.dumps(node)
    if '"Column"' in text:
        return None
    try:
        expr = pl.Expr.deserialize(io.StringIO(text), format="json")
        series = pl.select(expr).to_series()
    except Exception:  # not a self-contained expression: no pruning from it
        return None
    return series.item() if series.len() == 1 else None


# ---------------------------------------------------------------------------------------------
# the scan


@dataclasses.dataclass(frozen=True)
class Range:
    partition: int
    start: int
    end: int  # exclusive


@dataclasses.dataclass(frozen=True)
class TopicScan:
    path: str
    topic: str
    partitions: frozenset[int] | None
    starting_offsets: dict[int, int]
    ending_offsets: dict[int, int]
    include_headers: bool
    etcd_endpoints: str | list[str] | None
    max_uncompressed_batch_bytes: int
    isolation_level: str
    storage: dict[str, str | None]

    def schema(self) -> pl.Schema:
        return _frame(kafka_schema(self.include_headers).empty_table()).schema

    def batches(
        self,
        with_columns: list[str] | None,
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[pl.DataFrame]:
        """The io source polars calls at collect time: frames of at most ``batch_size`` rows,
        filtered by ``predicate``, with only ``with_columns``, ``n_rows`` in all at most."""
        # opened here, on the thread that collects, rather than when the frame is built
        source = SegmentSource.open(
            self.path,
            max_uncompressed_batch_bytes=self.max_uncompressed_batch_bytes,
            etcd_endpoints=self.etcd_endpoints,
            isolation_level=self.isolation_level,
            **self.storage,
        )
        remaining = n_rows
        for rng in self.ranges(source, predicate_bounds(predicate)):
            for batch in source.read(
                self.topic,
                rng.partition,
                rng.start,
                rng.end,
                include_headers=self.include_headers,
                batch_rows=batch_size or DEFAULT_BATCH_ROWS,
            ):
                frame = _frame(batch)
                if predicate is not None:
                    frame = frame.filter(predicate)
                if with_columns is not None:
                    frame = frame.select(with_columns)
                if remaining is not None:
                    frame = frame.head(remaining)
                    remaining -= frame.height
                if frame.height:
                    yield frame
                if remaining == 0:
                    return

    def ranges(self, source: SegmentSource, bounds: Bounds) -> list[Range]:
        """What to read of each partition: its committed log, cut by the requested offsets and
        what the predicate allows."""
        partition_span = bounds.get("partition", Span())
        out = []
        for p in self.partition_ids(source):
            if self.partitions is not None and p not in self.partitions:
                continue
            if not partition_span.allows(p):
                continue
            log = source.log(self.topic, p)
            start = max(log.log_start_offset, self.starting_offsets.get(p, 0))
            end = min(log.end_offset, self.ending_offsets.get(p, log.end_offset))
            start, end = bounds.get("offset", Span()).clip(start, end)
            start = self.first_at_timestamp(source, p, start, end, bounds.get("timestamp"))
            if start < end:
                out.append(Range(p, start, end))
        return out

    def partition_ids(self, source: SegmentSource) -> list[int]:
        """The topic's partitions. Finding none is an error that says why: a topic the
        metadata does not know (naming the topics there), or - without metadata, a cluster's
        bucket read without its etcd - a topic with no segment yet."""
        partitions = source.partitions(self.topic)
        if partitions:
            return partitions
        if source.metadata != "segments":
            raise ValueError(
                f"topic {self.topic!r} does not exist in {self.path} "
                f"(topics there: {', '.join(source.topics()) or 'none'})"
            )
        raise ValueError(
            f"no segments of topic {self.topic!r} under {self.path}: a cluster's newest records "
            "stay in write-ahead objects until compaction; give etcd_endpoints to read them"
        )

    def first_at_timestamp(
        self, source: SegmentSource, partition: int, start: int, end: int, span: Span | None
    ) -> int:
        """``start``, moved up to the first offset whose timestamp passes the predicate's lower
        timestamp limit (``end`` when no record has such a timestamp)."""
        if span is None or span.lo is None or start >= end:
            return start
        found = source.offset_for_timestamp(self.topic, partition, span.lo)
        return end if found is None else max(start, found)


def _frame(data: pa.Table | pa.RecordBatch) -> pl.DataFrame:
    """``pl.from_arrow`` of a pyarrow table or record batch: always a DataFrame (a Series comes
    only from an array), but polars declares DataFrame | Series, since pyarrow has no types to
    overload on (polars' own note at ``from_arrow``)."""
    return cast(pl.DataFrame, pl.from_arrow(data))
