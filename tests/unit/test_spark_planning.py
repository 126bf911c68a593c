"""The kafscale Spark data source without Spark or storage: option parsing and its error
messages, offset resolution, input-partition planning at segment boundaries, filter pruning and
the streaming offsets, over a fake SegmentSource."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import pairwise

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from kafscale.segment import kafka_schema
from kafscale.spark import (
    EARLIEST,
    LATEST,
    KafScaleDataSource,
    KafScaleOptionError,
    Pruning,
    ReadOptions,
    SegmentRange,
    readers,
    spark_schema,
)
from kafscale.spark.options import offsets_from_json, offsets_to_json, parse_offsets
from kafscale.spark.planning import (
    batch_ranges,
    list_partition_logs,
    rate_limited,
    split_at_segments,
)
from kafscale.spark.readers import (
    KafScaleBatchReader,
    KafScalePruningBatchReader,
    KafScaleStreamReader,
)
from kafscale.spark.schema import arrow_schema

BASE_TS = 1_700_000_000_000


@dataclass(frozen=True)
class FakeSegment:
    topic: str
    partition: int
    base_offset: int
    end_offset: int
    size: int


@dataclass(frozen=True)
class FakeBounds:
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True)
class FakeLog:
    topic: str
    partition: int
    log_start_offset: int
    end_offset: int
    segments: list[FakeSegment]
    runs: list[tuple[int, int, int]]


@dataclass
class FakeSource:
    """Segments given as boundaries per partition ({"t": {0: [0, 10, 25]}} = segments [0, 10)
    and [10, 25)); record timestamps BASE_TS + offset unless ``timestamps`` says otherwise."""

    layout: dict[str, dict[int, list[int]]]
    timestamps: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    # what the metadata says is committed, per topic (a partition it leaves out: empty log)
    committed: dict[str, dict[int, FakeBounds]] = field(default_factory=dict)
    metadata: str = "published"
    location: str = "/data/default"

    def topics(self) -> list[str]:
        return sorted(self.layout)

    def partitions(self, topic: str) -> list[int]:
        return sorted(self.layout.get(topic, {}))

    def segments(self, topic: str, partition: int) -> list[FakeSegment]:
        edges = self.layout.get(topic, {}).get(partition, [])
        return [FakeSegment(topic, partition, a, b, 100 * (b - a)) for a, b in pairwise(edges)]

    def log(self, topic: str, partition: int) -> FakeLog:
        """The segments' extent, or the committed bounds (segments outside them left out)."""
        segments = self.segments(topic, partition)
        start = segments[0].base_offset if segments else 0
        end = segments[-1].end_offset if segments else start
        if topic in self.committed:
            bounds = self.committed[topic].get(partition, FakeBounds(0, 0))
            start, end = bounds.log_start_offset, bounds.high_watermark
            segments = [s for s in segments if s.base_offset < end and s.end_offset > start]
        return FakeLog(topic, partition, start, end, segments, [])

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        edges = self.layout[topic][partition]
        stamps = self.timestamps.get((topic, partition))
        for offset in range(edges[0], edges[-1]):
            ts = stamps[offset - edges[0]] if stamps else BASE_TS + offset
            if ts >= timestamp_ms:
                return offset
        return None


@pytest.fixture
def data_dir(tmp_path):
    location = tmp_path / "data" / "default"
    location.mkdir(parents=True)
    return str(location)


def options(data_dir: str, *, streaming: bool = False, **given: str) -> ReadOptions:
    return ReadOptions.parse({"path": data_dir, **given}, streaming=streaming)


def option_error(data_dir: str, *, streaming: bool = False, **given: str) -> str:
    with pytest.raises(KafScaleOptionError) as info:
        options(data_dir, streaming=streaming, **given)
    return str(info.value)


def plan(source: FakeSource, opts: ReadOptions, pruning: Pruning | None = None):
    logs = list_partition_logs(source, opts)
    ranges = (pruning or Pruning()).apply(batch_ranges(logs, opts, source), source)
    segments = {tp: log.segments for tp, log in logs.items()}
    return split_at_segments(ranges, segments, opts.min_partitions)


def spans(ranges) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.start_offset, r.end_offset) for r in ranges]


SOURCE = FakeSource(
    {
        "orders": {0: [0, 10, 25, 40], 1: [0, 5], 2: [7, 20]},
        "orders-eu": {0: [0, 3]},
        "audit": {0: [0, 100, 200, 300, 400]},
    }
)


# --- options ------------------------------------------------------------------------------------


def test_defaults_follow_the_kafka_source(data_dir):
    batch = options(data_dir, subscribe="orders")
    assert (batch.starting.default, batch.ending.default) == (EARLIEST, LATEST)
    stream = options(data_dir, streaming=True, subscribe="orders")
    assert stream.starting.default == LATEST
    assert not batch.include_headers and batch.min_partitions is None
    assert batch.namespace == "default" and batch.etcd_endpoints is None


def test_option_names_are_case_insensitive_and_empty_means_unset(data_dir):
    opts = ReadOptions.parse(
        {"PATH": data_dir, "SUBSCRIBE": "a, b", "includeheaders": "TRUE", "assign": ""},
        streaming=False,
    )
    assert opts.subscription.topics == ("a", "b") and opts.include_headers


def test_subscription_is_required_and_unique(data_dir):
    assert "exactly one of the options subscribe" in option_error(data_dir)
    assert "none of them" in option_error(data_dir)
    both = option_error(data_dir, subscribe="a", assign='{"a": [0]}')
    assert "got subscribe, assign" in both


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"subscribe": " , "}, "subscribe names no topic"),
        ({"subscribePattern": "orders(["}, "not a valid regular expression"),
        ({"assign": "{orders: [0]}"}, "option assign is not valid JSON"),
        ({"assign": '{"orders": 0}'}, 'like {"orders": [0, 1]}'),
        ({"assign": '{"orders": [-1]}'}, "map topics to partition lists"),
    ],
)
def test_bad_subscriptions_say_what_is_expected(data_dir, given, expected):
    assert expected in option_error(data_dir, **given)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"orders": {"0": 12,}}', "option startingOffsets is not valid JSON"),
        ("earliestt", "option startingOffsets is not valid JSON"),
        ('{"orders": [12]}', "must map topics to {partition: offset} objects"),
        ('{"orders": {"x": 12}}', "must map topics to {partition: offset} objects"),
        ('{"orders": {"0": -3}}', "-2 = earliest, -1 = latest"),
        ('{"orders": {"0": "12"}}', "must map topics"),
    ],
)
def test_bad_starting_offsets_say_what_is_expected(data_dir, text, expected):
    assert expected in option_error(data_dir, subscribe="orders", startingOffsets=text)


def test_offsets_for_topics_outside_the_subscription_are_refused(data_dir):
    message = option_error(data_dir, subscribe="orders", endingOffsets='{"ordrs": {"0": 1}}')
    assert "endingOffsets names topics the query does not read: ordrs" in message
    # a pattern decides by matching
    opts = options(data_dir, subscribePattern="ord.*", startingOffsets='{"orders": {"0": 1}}')
    assert opts.starting.specific == {("orders", 0): 1}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"includeHeaders": "yes"}, "includeHeaders must be true or false"),
        ({"minPartitions": "0"}, "minPartitions must be a whole number of at least 1"),
        ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger must be a whole number"),
        (
            {"maxUncompressedBatchBytes": "0"},
            "maxUncompressedBatchBytes must be a whole number of at least 1",
        ),
        ({"startingTimestamp": "2024-01-01"}, "Unix timestamp in milliseconds"),
    ],
)
def test_bad_scalar_options_name_the_option(data_dir, given, expected):
    assert expected in option_error(data_dir, subscribe="orders", **given)


def test_a_stream_has_no_end(data_dir):
    for name in ("endingOffsets", "endingTimestamp"):
        message = option_error(data_dir, streaming=True, subscribe="o", **{name: "1"})
        assert f"option {name} applies to batch reads" in message


def test_location_must_be_given_and_exist(tmp_path):
    with pytest.raises(KafScaleOptionError, match=r"say where the segments are"):
        ReadOptions.parse({"subscribe": "orders"}, streaming=False)
    with pytest.raises(KafScaleOptionError, match=r"is not a directory"):
        ReadOptions.parse({"subscribe": "o", "path": str(tmp_path / "nope")}, streaming=False)


def test_namespace_and_storage_options(data_dir):
    s3 = ReadOptions.parse(
        {
            "path": "s3://bucket/team/ns",
            "subscribe": "orders",
            "endpoint": "http://127.0.0.1:9000",
            "accessKeyId": "AK",
            "secretAccessKey": "SK",
            "etcd.endpoints": "http://127.0.0.1:2379",
        },
        streaming=False,
    )
    assert s3.namespace == "team/ns"
    assert s3.storage == {
        "endpoint": "http://127.0.0.1:9000",
        "access_key_id": "AK",
        "secret_access_key": "SK",
    }
    with pytest.raises(KafScaleOptionError, match=r"names a bucket and a namespace"):
        ReadOptions.parse(
            {"path": "s3://bucket", "subscribe": "o", "etcd.endpoints": "h:2379"},
            streaming=False,
        )
    assert options(data_dir, subscribe="o", namespace="default").namespace == "default"
    with pytest.raises(KafScaleOptionError, match=r"is not the namespace of"):
        options(data_dir, subscribe="o", namespace="other")


def test_parse_offsets_plain_words_and_json():
    assert parse_offsets("startingOffsets", "Latest", EARLIEST).default == LATEST
    spec = parse_offsets("endingOffsets", '{"a": {"0": 5, "2": -2}}', LATEST)
    assert spec.default == LATEST and spec.specific == {("a", 0): 5, ("a", 2): EARLIEST}


def test_offsets_json_round_trips_in_one_canonical_order():
    positions = {("b", 10): 1, ("a", 2): 7, ("b", 9): 3}
    as_json = offsets_to_json(positions)
    assert list(as_json) == ["a", "b"] and list(as_json["b"]) == ["9", "10"]
    assert offsets_from_json(as_json) == positions


# --- batch planning -----------------------------------------------------------------------------


def test_subscribe_reads_every_partition_from_earliest_to_latest(data_dir):
    ranges = plan(SOURCE, options(data_dir, subscribe="orders"))
    assert spans(ranges) == [("orders", 0, 0, 40), ("orders", 1, 0, 5), ("orders", 2, 7, 20)]


def test_unknown_topics_read_nothing_and_say_why(data_dir, caplog):
    assert plan(SOURCE, options(data_dir, subscribe="nope")) == []
    assert "topic 'nope' does not exist in /data/default (topics there: audit," in caplog.text
    caplog.clear()
    bare = replace(SOURCE, metadata="segments")  # a cluster's bucket read without etcd
    assert plan(bare, options(data_dir, subscribe="nope")) == []
    assert "no segments of topic 'nope'" in caplog.text and "set etcd.endpoints" in caplog.text
    assert plan(SOURCE, options(data_dir, subscribePattern="nope.*")) == []
    assert plan(SOURCE, options(data_dir, assign='{"orders": [9]}')) == []


def test_pattern_and_assign_choose_partitions(data_dir):
    by_pattern = plan(SOURCE, options(data_dir, subscribePattern="orders.*"))
    assert {(r.topic, r.partition) for r in by_pattern} == {
        ("orders", 0),
        ("orders", 1),
        ("orders", 2),
        ("orders-eu", 0),
    }
    # fullmatch, like Java's Pattern.matches in the Kafka source
    assert plan(SOURCE, options(data_dir, subscribePattern="order")) == []
    assigned = plan(SOURCE, options(data_dir, assign='{"orders": [2, 0]}'))
    assert spans(assigned) == [("orders", 0, 0, 40), ("orders", 2, 7, 20)]


def test_starting_and_ending_offsets_per_partition_with_clamping(data_dir):
    opts = options(
        data_dir,
        subscribe="orders",
        startingOffsets='{"orders": {"0": 12, "2": 0}}',  # 2 starts at 7: clamped
        endingOffsets='{"orders": {"0": 30, "1": -2, "2": 999}}',  # 1 ends at earliest
    )
    assert spans(plan(SOURCE, opts)) == [("orders", 0, 12, 30), ("orders", 2, 7, 20)]
    latest = options(data_dir, subscribe="orders", startingOffsets="latest")
    assert plan(SOURCE, latest) == []


def test_timestamps_pick_the_first_offset_at_or_after_them(data_dir):
    source = FakeSource(
        {"t": {0: [0, 4], 1: [0, 3]}},
        timestamps={("t", 0): [10, 30, 20, 40], ("t", 1): [5, 6, 7]},
    )
    opts = options(data_dir, subscribe="t", startingTimestamp="20", endingTimestamp="40")
    # partition 0: first ts >= 20 is offset 1, first ts >= 40 is offset 3
    # partition 1: nothing at or after 20: starts at its end, nothing read
    assert spans(plan(source, opts)) == [("t", 0, 1, 3)]
    # a timestamp wins over offsets, as in the Kafka source
    both = options(data_dir, subscribe="t", startingTimestamp="7", startingOffsets="latest")
    assert spans(plan(source, both)) == [("t", 0, 0, 4), ("t", 1, 2, 3)]


def test_every_read_is_bounded_by_the_committed_log(data_dir):
    committed = {0: FakeBounds(10, 25), 1: FakeBounds(0, 5)}  # partition 2 not committed
    source = replace(SOURCE, committed={"orders": committed})
    opts = options(data_dir, subscribe="orders", **{"etcd.endpoints": "127.0.0.1:2379"})
    assert spans(plan(source, opts)) == [("orders", 0, 10, 25), ("orders", 1, 0, 5)]
    logs = list_partition_logs(source, opts)
    # segments wholly below the log start or above the high watermark are not part of the log
    assert [s.base_offset for s in logs[("orders", 0)].segments] == [10]


def test_min_partitions_splits_only_at_segment_boundaries(data_dir):
    opts = options(data_dir, subscribe="audit,orders", minPartitions="8")
    ranges = plan(SOURCE, opts)
    bases = {
        (s.topic, s.partition, s.base_offset)
        for t in SOURCE.layout
        for p in SOURCE.layout[t]
        for s in SOURCE.segments(t, p)
    }
    for r in ranges:
        assert (r.topic, r.partition, r.start_offset) in bases
    # the big partition got the pieces, each made of whole segments, covering it exactly
    audit = [(r.start_offset, r.end_offset) for r in ranges if r.topic == "audit"]
    assert audit == [(0, 100), (100, 200), (200, 300), (300, 400)]
    assert len(ranges) > 4


def test_min_partitions_never_cuts_inside_a_segment(data_dir):
    source = FakeSource({"t": {0: [0, 1000]}})
    opts = options(data_dir, subscribe="t", minPartitions="10")
    assert spans(plan(source, opts)) == [("t", 0, 0, 1000)]


def test_splitting_a_range_that_starts_mid_segment():
    segments = SOURCE.segments("audit", 0)
    pieces = split_at_segments([SegmentRange("audit", 0, 150, 390)], {("audit", 0): segments}, 3)
    assert spans(pieces) == [("audit", 0, 150, 200), ("audit", 0, 200, 300), ("audit", 0, 300, 390)]


def test_min_partitions_below_the_partition_count_changes_nothing(data_dir):
    assert len(plan(SOURCE, options(data_dir, subscribe="orders", minPartitions="2"))) == 3


# --- filter pruning -----------------------------------------------------------------------------


def test_partition_and_offset_filters_prune_ranges(data_dir):
    pruning = Pruning.from_filters(
        [
            In(("partition",), (0, 2)),
            GreaterThan(("offset",), 9),
            LessThanOrEqual(("offset",), 14),
            StringStartsWith(("topic",), "ord"),  # not used for pruning
        ]
    )
    ranges = plan(SOURCE, options(data_dir, subscribe="orders"), pruning)
    assert spans(ranges) == [("orders", 0, 10, 15), ("orders", 2, 10, 15)]


def test_equal_filters_on_topic_partition_offset(data_dir):
    pruning = Pruning.from_filters(
        [EqualTo(("topic",), "orders"), EqualTo(("partition",), 0), EqualTo(("offset",), 39)]
    )
    ranges = plan(SOURCE, options(data_dir, subscribePattern=".*"), pruning)
    assert spans(ranges) == [("orders", 0, 39, 40)]


def test_contradicting_filters_prune_everything(data_dir):
    pruning = Pruning.from_filters([EqualTo(("partition",), 0), EqualTo(("partition",), 1)])
    assert plan(SOURCE, options(data_dir, subscribe="orders"), pruning) == []
    offsets = Pruning.from_filters([LessThan(("offset",), 5), GreaterThanOrEqual(("offset",), 5)])
    assert plan(SOURCE, options(data_dir, subscribe="orders"), offsets) == []


def test_timestamp_filters_only_prune_from_below(data_dir):
    at = datetime.fromtimestamp((BASE_TS + 12) / 1000, tz=UTC)
    lower = Pruning.from_filters([GreaterThanOrEqual(("timestamp",), at)])
    assert lower.timestamp_from_ms == BASE_TS + 12
    ranges = plan(SOURCE, options(data_dir, subscribe="orders"), lower)
    # partition 1 ends at offset 5 < 12: no record is that late
    assert spans(ranges) == [("orders", 0, 12, 40), ("orders", 2, 12, 20)]
    # timestamps need not grow with offsets: an upper bound prunes nothing
    upper = Pruning.from_filters([LessThan(("timestamp",), at)])
    assert upper == Pruning()


def test_filters_of_unknown_shape_prune_nothing():
    pruning = Pruning.from_filters(
        [
            EqualTo(("offset",), "12"),
            EqualTo(("partition",), 1.5),
            EqualTo(("headers", "key"), "a"),
            GreaterThan(("value",), b"x"),
            # `partition <> 1`: Not names no column of its own (it used to raise AttributeError)
            Not(EqualTo(("partition",), 1)),
        ]
    )
    assert pruning == Pruning()


def test_push_filters_hands_every_filter_back_to_spark(data_dir):
    reader = KafScalePruningBatchReader(options(data_dir, subscribe="orders"))
    filters = [EqualTo(("partition",), 1), GreaterThan(("offset",), 3)]
    returned = list(reader.pushFilters(filters))
    assert all(a is b for a, b in zip(returned, filters, strict=True))
    assert reader.pruning.partitions.admits(1) and not reader.pruning.partitions.admits(0)


def test_the_pruning_reader_is_only_given_to_the_pushdown_planner(data_dir):
    source = KafScaleDataSource({"path": data_dir, "subscribe": "orders"})
    plain = source.reader(spark_schema())
    assert type(plain) is KafScaleBatchReader
    planner = {"__name__": "pyspark.sql.worker.data_source_pushdown_filters", "ds": source}
    exec("reader = ds.reader(None)", planner)
    assert type(planner["reader"]) is KafScalePruningBatchReader


# --- streaming ----------------------------------------------------------------------------------


def test_rate_limit_shares_the_budget_by_backlog():
    begin = {("t", 0): 0, ("t", 1): 10, ("t", 2): 5}
    until = {("t", 0): 300, ("t", 1): 110, ("t", 2): 5}
    limited = rate_limited(begin, until, 40)
    assert limited == {("t", 0): 30, ("t", 1): 20, ("t", 2): 5}
    odd = rate_limited({("t", 0): 0, ("t", 1): 0}, {("t", 0): 5, ("t", 1): 5}, 3)
    assert sum(odd.values()) == 3 and all(v <= 5 for v in odd.values())
    assert rate_limited(begin, until, 10_000) == until


def stream_reader(monkeypatch, source: FakeSource, data_dir: str, **given: str):
    monkeypatch.setattr(readers, "open_source", lambda opts: source)
    return KafScaleStreamReader(options(data_dir, streaming=True, subscribe="t", **given))


def test_stream_starts_at_latest_and_reads_what_comes_next(monkeypatch, data_dir):
    source = FakeSource({"t": {0: [0, 10], 1: [0, 4]}})
    reader = stream_reader(monkeypatch, source, data_dir)
    initial = reader.initialOffset()
    assert initial == {"t": {"0": 10, "1": 4}}
    source.layout["t"][0].append(15)  # more data arrives
    assert reader.initialOffset() == initial  # memoized: Spark asks again for the first batch
    latest = reader.latestOffset()
    assert latest == {"t": {"0": 15, "1": 4}}
    assert spans(reader.partitions(initial, latest)) == [("t", 0, 10, 15)]


def test_stream_batches_respect_max_offsets_per_trigger(monkeypatch, data_dir):
    source = FakeSource({"t": {0: [0, 10, 20, 30], 1: [0, 10]}})
    reader = stream_reader(
        monkeypatch, source, data_dir, startingOffsets="earliest", maxOffsetsPerTrigger="8"
    )
    start = reader.initialOffset()
    seen = []
    while (end := reader.latestOffset()) != start:
        ranges = reader.partitions(start, end)
        assert sum(r.size for r in ranges) <= 8
        seen.extend((r.partition, o) for r in ranges for o in range(r.start_offset, r.end_offset))
        start = end
    assert sorted(seen) == [(0, o) for o in range(30)] + [(1, o) for o in range(10)]


def test_stream_restart_continues_from_the_checkpoint_and_finds_new_partitions(
    monkeypatch, data_dir
):
    source = FakeSource({"t": {0: [0, 10]}})
    first = stream_reader(monkeypatch, source, data_dir, startingOffsets="earliest")
    checkpointed = first.latestOffset()
    first.partitions(first.initialOffset(), checkpointed)
    # restart: a new reader; Spark replays the checkpoint's last offsets through partitions()
    source.layout["t"][0].append(12)
    source.layout["t"][1] = [0, 3]
    again = stream_reader(monkeypatch, source, data_dir, startingOffsets="earliest")
    assert again.partitions(checkpointed, checkpointed) == []
    latest = again.latestOffset()
    assert latest == {"t": {"0": 12, "1": 3}}
    assert spans(again.partitions(checkpointed, latest)) == [("t", 0, 10, 12), ("t", 1, 0, 3)]


def test_stream_splits_batches_by_min_partitions(monkeypatch, data_dir):
    source = FakeSource({"t": {0: [0, 10, 20, 30, 40]}})
    reader = stream_reader(
        monkeypatch, source, data_dir, startingOffsets="earliest", minPartitions="4"
    )
    ranges = reader.partitions(reader.initialOffset(), reader.latestOffset())
    assert spans(ranges) == [("t", 0, 0, 10), ("t", 0, 10, 20), ("t", 0, 20, 30), ("t", 0, 30, 40)]


# --- what travels to the executors --------------------------------------------------------------


def test_input_partitions_and_readers_pickle(data_dir):
    part = SegmentRange("orders", 1, 10, 20)
    assert pickle.loads(pickle.dumps(part)) == part
    reader = KafScaleBatchReader(options(data_dir, subscribe="orders", minPartitions="3"))
    assert pickle.loads(pickle.dumps(reader)).options == reader.options


def test_spark_schema_is_the_kafka_source_schema():
    assert spark_schema().simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert spark_schema(include_headers=True).fields[-1].simpleString() == (
        "headers:array<struct<key:string,value:binary>>"
    )


@pytest.mark.parametrize("include_headers", [False, True])
def test_the_arrow_schema_is_the_spark_schema_and_takes_the_segment_readers_batches(
    include_headers,
):
    arrow = arrow_schema(include_headers)
    assert arrow.names == spark_schema(include_headers).names
    assert all(f.nullable for f in arrow)
    assert arrow.field("timestamp").type == pa.timestamp("us", tz="UTC")
    # what the segment reader hands out casts to it (milliseconds become microseconds)
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "key": None,
                "value": b"v",
                "topic": "t",
                "partition": 0,
                "offset": 7,
                "timestamp": 1_700_000_000_123,
                "timestampType": 0,
                **({"headers": [{"key": "h", "value": b"x"}]} if include_headers else {}),
            }
        ],
        schema=kafka_schema(include_headers),
    )
    cast = batch.cast(arrow)
    assert cast.column("timestamp")[0].value == 1_700_000_000_123_000
