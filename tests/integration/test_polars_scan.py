"""kafscale.polars.scan_topic: a lazy polars scan of the brokers' segments gives what a consumer
reads, with projection, filters (pruned to the partitions and offsets they allow), head(),
offset arguments and, on the cluster, the committed high watermark from etcd.

Filters are checked against the same polars expression applied to the consumer's rows, so the
oracle never goes through the scan's pruning. Which ranges the scan reads is seen through a spy
around SegmentSource.read.
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from support import analytics_env
from support import segment_format as sf
from support.analytics_env import (
    EPOCH,
    PARTITIONS,
    AnalyticsData,
    Row,
    arrow_rows,
    without_headers,
)

import kafscale.polars as kafscale_polars
from kafscale.polars import scan_topic
from kafscale.segment import SegmentSource

analytics = analytics_env.analytics
cluster_analytics = analytics_env.cluster_analytics

SCHEMA = {
    "key": pl.Binary,
    "value": pl.Binary,
    "topic": pl.String,
    "partition": pl.Int32,
    "offset": pl.Int64,
    "timestamp": pl.Datetime("ms", "UTC"),
    "timestampType": pl.Int32,
}
HEADERS = pl.List(pl.Struct({"key": pl.String, "value": pl.Binary}))


def scan(data: AnalyticsData, **kw) -> pl.LazyFrame:
    return scan_topic(data.location, data.topic, **data.source_kwargs, **kw)


def rows_of(frame: pl.DataFrame) -> list[Row]:
    return arrow_rows(frame.to_arrow())


def expected_frame(rows: list[Row]) -> pl.DataFrame:
    """The consumer's rows as a DataFrame in the scan's schema (with headers)."""
    frame = pl.DataFrame(
        {
            "key": [r.key for r in rows],
            "value": [r.value for r in rows],
            "topic": [r.topic for r in rows],
            "partition": [r.partition for r in rows],
            "offset": [r.offset for r in rows],
            "timestamp": [r.timestamp_ms for r in rows],
            "timestampType": [r.timestamp_type for r in rows],
            "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in rows],
        },
        schema={**SCHEMA, "timestamp": pl.Int64, "headers": HEADERS},
    )
    return frame.with_columns(pl.col("timestamp").cast(SCHEMA["timestamp"]))


class ReadSpy:
    """Stands in for SegmentSource in kafscale.polars and records every read's range."""

    def __init__(self) -> None:
        self.reads: list[tuple[int, int, int]] = []

    def open(self, *args, **kwargs):
        spy = self

        class Spied:
            def __init__(self, real: SegmentSource) -> None:
                self.real = real

            def __getattr__(self, name):
                return getattr(self.real, name)

            def read(self, topic, partition, start, end, **kw):
                spy.reads.append((partition, start, end))
                return self.real.read(topic, partition, start, end, **kw)

        return Spied(SegmentSource.open(*args, **kwargs))


@pytest.fixture
def spy(monkeypatch) -> ReadSpy:
    spy = ReadSpy()
    monkeypatch.setattr(kafscale_polars, "SegmentSource", spy)
    return spy


def middle_timestamp_ms(data: AnalyticsData) -> int:
    stamps = sorted(r.timestamp_ms for r in data.expected)
    return stamps[len(stamps) // 2]


def middle_timestamp(data: AnalyticsData) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=middle_timestamp_ms(data))


def test_schema(analytics):
    assert scan(analytics).collect_schema() == pl.Schema(SCHEMA)
    with_headers = scan(analytics, include_headers=True).collect_schema()
    assert with_headers == pl.Schema({**SCHEMA, "headers": HEADERS})


def test_scan_equals_what_a_consumer_reads(analytics):
    assert rows_of(scan(analytics, include_headers=True).collect()) == analytics.expected


def test_scan_without_headers(analytics):
    frame = scan(analytics).collect()
    assert frame.columns == list(SCHEMA)
    assert rows_of(frame) == without_headers(analytics.expected)


def test_projection(analytics):
    frame = scan(analytics, include_headers=True).select("offset", "headers", "partition")
    got = frame.collect()
    assert got.columns == ["offset", "headers", "partition"]
    want = expected_frame(analytics.expected).select("offset", "headers", "partition")
    assert got.equals(want)
    assert scan(analytics).select(pl.len()).collect().item() == len(analytics.expected)


FILTERS = {
    "partition": lambda d: pl.col("partition") == 1,
    "offset range": lambda d: pl.col("offset").is_between(100, 250),
    "partitions and offsets": lambda d: pl.col("partition").is_in([0, 2])
    & (pl.col("offset") > d.end_offsets()[0] - 100),
    "either": lambda d: ((pl.col("partition") == 1) & (pl.col("offset") < 5))
    | ((pl.col("partition") == 2) & (pl.col("offset") >= d.end_offsets()[2] - 10)),
    "timestamp": lambda d: pl.col("timestamp") >= middle_timestamp(d),
    "null key, low offsets": lambda d: pl.col("key").is_null() & (pl.col("offset") < 300),
    "empty value": lambda d: pl.col("value") == b"",
    "not": lambda d: ~(pl.col("offset") > 5),
    "nothing": lambda d: pl.col("offset") < 0,
}


@pytest.mark.parametrize("name", FILTERS)
def test_filters(analytics, name):
    expr = FILTERS[name](analytics)
    got = scan(analytics, include_headers=True).filter(expr).collect()
    want = expected_frame(analytics.expected).filter(expr)
    assert want.height > 0 or name == "nothing", "a filter that keeps no row tests little"
    assert rows_of(got) == rows_of(want)


def test_partition_and_offset_filters_prune_reads(analytics, spy):
    ends = analytics.end_offsets()
    scan(analytics).filter(
        (pl.col("partition") == 1) & pl.col("offset").is_between(100, 250)
    ).collect()
    assert spy.reads == [(1, 100, 251)]

    spy.reads.clear()
    scan(analytics).filter(pl.col("partition").is_in([0, 2]) & (pl.col("offset") > 700)).collect()
    assert spy.reads == [(0, 701, ends[0]), (2, 701, ends[2])]


def test_timestamp_filter_starts_at_the_first_such_offset(analytics, spy):
    since_ms = middle_timestamp_ms(analytics)
    scan(analytics).filter(pl.col("timestamp") >= middle_timestamp(analytics)).collect()
    want = []
    for p, end in analytics.end_offsets().items():
        rows = [r for r in analytics.expected if r.partition == p]
        later = [r.offset for r in rows if r.timestamp_ms >= since_ms]
        if later:
            want.append((p, later[0], end))
    assert spy.reads == want


def test_head_stops_reading(analytics, spy):
    got = scan(analytics, include_headers=True).head(7).collect()
    assert rows_of(got) == analytics.expected[:7]
    assert spy.reads == [(0, 0, analytics.end_offsets()[0])]


def test_partitions_and_offset_arguments(analytics):
    only = scan(analytics, partitions=[2], starting_offsets={2: 10}, ending_offsets={2: 20})
    assert [(r.partition, r.offset) for r in rows_of(only.collect())] == [
        (2, o) for o in range(10, 20)
    ]
    start = analytics.end_offsets()[0] - 5
    tail = scan(analytics, include_headers=True, starting_offsets={0: start}).collect()
    assert rows_of(tail) == [r for r in analytics.expected if r.partition > 0 or r.offset >= start]


def test_scan_is_lazy(analytics):
    """Segments are listed when the frame is collected, not when it is built."""
    fresh = analytics.fresh(3)
    frame = scan(fresh, include_headers=True)
    fresh.produce_more(6)
    assert rows_of(frame.collect()) == fresh.expected
    assert len(fresh.expected) == 9


def test_etcd_bounds_the_scan_by_the_committed_high_watermark(cluster_analytics):
    """An object above the committed high watermark (an uncommitted leftover of a broker that
    lost its partition) is read from the bucket alone, never with etcd."""
    data = cluster_analytics.fresh(3 * PARTITIONS)
    end = data.end_offsets()[0]
    leftover = sf.build_record_batch(
        [(b"k", b"uncommitted", [])], base_offset=end, partition_leader_epoch=1
    )
    key = f"{data.namespace}/{data.topic}/0/segment-{end:020d}"
    data.store.write(f"{key}.kfs", sf.build_segment([leftover]))
    data.store.write(f"{key}.index", sf.build_index([(end, sf.SEGMENT_HEADER.size)]))

    bucket_only = rows_of(scan(data).collect())
    assert [r.value for r in bucket_only if r.offset == end and r.partition == 0] == [
        b"uncommitted"
    ]
    committed = scan(data, include_headers=True, etcd_endpoints=data.etcd_endpoints).collect()
    assert rows_of(committed) == data.expected
