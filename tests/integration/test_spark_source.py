"""The kafscale Spark data source and the spark/ jobs against what a Kafka consumer reads through
the broker.

Batch: spark.read.format("kafscale") over the brokers' segments gives the consumer's rows, row
for row (every client and codec, headers, null keys), with the options of Spark's Kafka source,
filters that prune input partitions but never a matching row, and on the cluster the bound of
the committed high watermark. Streaming: micro-batches of at most maxOffsetsPerTrigger offsets,
stopped and restarted from the checkpoint while the topic grows and gains a partition, deliver
every record exactly once. Jobs: topic → Parquet run twice (the second run reads only what is
new), the streaming aggregation restarted from its checkpoint.

Everything shares one SparkSession (local[2]) and one ``analytics`` data set per flavour (one
broker with local segments; three brokers with etcd and moto S3): both are slow to start.
"""

from __future__ import annotations

import datetime as dt
import json
import runpy
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from support import analytics_env
from support import segment_format as sf
from support.admin_env import open_admin
from support.analytics_env import (
    EPOCH,
    AnalyticsData,
    Row,
    arrow_rows,
    consume_rows,
    row_order,
    without_headers,
)
from support.clients import Msg, confluent_produce
from support.spark_session import local_spark

from kafscale.segment import kafka_schema
from kafscale.spark import KafScaleDataSource, spark_schema
from kafscale.spark.schema import arrow_schema

analytics = analytics_env.analytics
cluster_analytics = analytics_env.cluster_analytics

JOBS = Path(__file__).resolve().parents[2] / "spark"
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"  # off by default in Spark 4.1


@pytest.fixture(scope="module")
def spark():
    conf = {"spark.sql.session.timeZone": "UTC", PUSHDOWN: "true"}
    with local_spark("kafscale-spark-tests", **conf) as session:
        yield session


def read(spark: SparkSession, data: AnalyticsData, **options: str) -> DataFrame:
    """A batch read of ``data``'s topic (unless the options subscribe otherwise)."""
    reader = spark.read.format("kafscale").options(**data.options)
    if not {"subscribe", "subscribePattern", "assign"} & set(options):
        reader = reader.option("subscribe", data.topic)
    return reader.options(**options).load(data.location)


def rows(frame: DataFrame) -> list[Row]:
    return sorted(arrow_rows(frame.toArrow()), key=row_order)


def between(data: AnalyticsData, starts: dict[int, int], ends: dict[int, int]) -> list[Row]:
    """The consumer's rows (without headers) with starts[p] <= offset < ends[p]."""
    chosen = [r for r in data.expected if starts[r.partition] <= r.offset < ends[r.partition]]
    return without_headers(chosen)


def first_offsets_at_or_after(data: AnalyticsData, timestamp_ms: int) -> dict[int, int]:
    """Per partition, the first offset whose timestamp is >= timestamp_ms (else its end)."""
    found = data.end_offsets()
    for r in reversed(data.expected):
        if r.timestamp_ms >= timestamp_ms:
            found[r.partition] = r.offset
    return found


def middle_timestamp_ms(data: AnalyticsData) -> int:
    stamps = sorted(r.timestamp_ms for r in data.expected)
    return stamps[len(stamps) // 2]


def timestamp_at(data: AnalyticsData, partition: int, offset: int) -> int:
    (row,) = [r for r in data.expected if (r.partition, r.offset) == (partition, offset)]
    return row.timestamp_ms


def source_options(data: AnalyticsData) -> dict[str, str]:
    """Storage options, plus the etcd bound where there is etcd."""
    options = dict(data.options)
    if data.etcd_endpoints:
        options["etcd.endpoints"] = data.etcd_endpoints
    return options


def job(name: str) -> Callable[[list[str]], None]:
    return runpy.run_path(str(JOBS / name))["main"]


# --- batch --------------------------------------------------------------------------------------


def test_the_batches_read_hands_spark_have_the_spark_schema(spark):
    for headers in (False, True):
        # what read() does to every batch of the segment reader: only the timestamp unit
        # changes (ms → µs); Spark's own Arrow conversion gives back the Kafka source's schema
        row = {"key": b"k", "value": b"v", "topic": "t", "partition": 0, "offset": 0}
        row |= {"timestamp": 1_700_000_000_000, "timestampType": 0}
        if headers:
            row["headers"] = [{"key": "h", "value": b"x"}]
        table = pa.Table.from_pylist([row], schema=kafka_schema(headers))
        frame = spark.createDataFrame(table.cast(arrow_schema(headers)))
        assert frame.schema == spark_schema(headers)


def test_batch_read_equals_what_a_consumer_reads(spark, analytics):
    frame = read(
        spark, analytics, includeHeaders="true", startingOffsets="earliest", endingOffsets="latest"
    )
    assert frame.schema == spark_schema(include_headers=True)
    assert rows(frame) == analytics.expected


def test_without_headers_the_schema_is_the_kafka_sources(spark, analytics):
    frame = read(spark, analytics)
    assert frame.schema == spark_schema()
    assert rows(frame) == without_headers(analytics.expected)


def test_assign_and_subscribe_pattern(spark, analytics):
    topic = analytics.topic
    assigned = read(spark, analytics, assign=json.dumps({topic: [0, 2]}))
    assert rows(assigned) == [r for r in without_headers(analytics.expected) if r.partition != 1]
    pattern = f"(?:{topic[:-4]}.{{4}}|no-such-topic.*)"  # this topic and no other
    by_pattern = read(spark, analytics, subscribePattern=pattern)
    assert rows(by_pattern) == without_headers(analytics.expected)


def test_starting_and_ending_offsets(spark, analytics):
    topic, ends = analytics.topic, analytics.end_offsets()
    frame = read(
        spark,
        analytics,
        startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),  # 2: earliest by default
        endingOffsets=json.dumps({topic: {"0": 40, "2": 17}}),  # 1: latest by default
    )
    assert rows(frame) == between(analytics, {0: 5, 1: 0, 2: 0}, {0: 40, 1: ends[1], 2: 17})
    assert read(spark, analytics, startingOffsets="latest").count() == 0


def test_starting_and_ending_timestamps(spark, analytics):
    # timestamps do not grow along this log: "the first offset at or after" is what counts
    start_ms = middle_timestamp_ms(analytics)
    end_ms = max(r.timestamp_ms for r in analytics.expected)
    frame = read(spark, analytics, startingTimestamp=str(start_ms), endingTimestamp=str(end_ms))
    starts = first_offsets_at_or_after(analytics, start_ms)
    ends = first_offsets_at_or_after(analytics, end_ms)
    assert rows(frame) == between(analytics, starts, ends)


def test_min_partitions_splits_at_segment_boundaries(spark, analytics):
    def planned(**options: str):
        given = {"path": analytics.location, "subscribe": analytics.topic, **options}
        source = KafScaleDataSource(given | analytics.options)
        return source.reader(source.schema()).partitions()

    assert len(planned()) == 3  # one input partition per topic partition
    ranges = planned(minPartitions="12")
    assert len(ranges) > 3
    segments = analytics.open_source()
    for p, end in analytics.end_offsets().items():
        bases = {s.base_offset for s in segments.segments(analytics.topic, p)}
        edges = sorted((r.start_offset, r.end_offset) for r in ranges if r.partition == p)
        assert edges[0][0] == 0 and edges[-1][1] == end
        for (_, stop), (start, _) in pairwise(edges):
            assert stop == start and start in bases, f"p{p}: {edges} cuts a segment"

    split = read(spark, analytics, minPartitions="12", includeHeaders="true")
    assert split.rdd.getNumPartitions() == len(ranges)
    assert rows(split) == analytics.expected


FILTERS: dict[str, Callable[[AnalyticsData], tuple[Column, Callable[[Row], bool]]]] = {
    "partition": lambda d: (F.col("partition") == 1, lambda r: r.partition == 1),
    "offsets": lambda d: (
        F.col("offset").between(30, 90) & F.col("partition").isin(0, 2),
        lambda r: 30 <= r.offset <= 90 and r.partition in (0, 2),
    ),
    "timestamp": lambda d: (
        F.col("timestamp") >= F.timestamp_millis(F.lit(middle_timestamp_ms(d))),
        lambda r: r.timestamp_ms >= middle_timestamp_ms(d),
    ),
    "timestamp and offset": lambda d: (
        (F.col("timestamp") > F.timestamp_millis(F.lit(timestamp_at(d, 0, 100))))
        & (F.col("offset") < 400),
        lambda r: r.timestamp_ms > timestamp_at(d, 0, 100) and r.offset < 400,
    ),
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_filters_prune_but_never_drop_a_matching_row(spark, analytics, name):
    condition, matches = FILTERS[name](analytics)
    want = [r for r in analytics.expected if matches(r)]
    assert want, "the filter should match some rows"
    assert rows(read(spark, analytics, includeHeaders="true").where(condition)) == want


def test_partition_filters_leave_out_input_partitions_and_pushdown_is_optional(spark, analytics):
    condition = F.col("partition").isin(0, 2)
    assert read(spark, analytics).where(condition).rdd.getNumPartitions() == 2
    spark.conf.set(PUSHDOWN, "false")  # Spark's default: the source works, without pruning
    try:
        frame = read(spark, analytics).where(condition)
        assert frame.rdd.getNumPartitions() == 3
        assert rows(frame) == [r for r in without_headers(analytics.expected) if r.partition != 1]
    finally:
        spark.conf.set(PUSHDOWN, "true")


def test_option_errors_say_what_to_do(spark, analytics):
    with pytest.raises(Exception, match="give exactly one of the options subscribe"):
        spark.read.format("kafscale").load(analytics.location)
    with pytest.raises(Exception, match="option startingOffsets is not valid JSON"):
        read(spark, analytics, startingOffsets="{orders: 1}")
    with pytest.raises(Exception, match="is not a directory"):
        spark.read.format("kafscale").option("subscribe", "x").load("/no/such/data/dir")
    # like Spark's Kafka source: a topic that does not exist has no rows
    assert read(spark, analytics, subscribe="no-such-topic").count() == 0


def test_etcd_bound_hides_objects_above_the_committed_high_watermark(spark, cluster_analytics):
    """An object a broker wrote but never committed (a zombie's leftover) sits right above
    partition 0's high watermark: a read without etcd sees it, a read bounded by etcd does
    not."""
    data = cluster_analytics.fresh(9)
    high_watermark = data.end_offsets()[0]
    leftover = [(b"zombie", b"uncommitted-%d" % i, []) for i in range(3)]
    batch = sf.build_record_batch(leftover, base_offset=high_watermark)
    key = f"{data.namespace}/{data.topic}/0/segment-{high_watermark:020d}"
    data.store.write(f"{key}.kfs", sf.build_segment([batch]))
    data.store.write(f"{key}.index", sf.build_index([(high_watermark, sf.SEGMENT_HEADER.size)]))

    unbounded = rows(read(spark, data))
    assert [r.value for r in unbounded if r.key == b"zombie"] == [v for _, v, _ in leftover]
    bounded = read(spark, data, **{"etcd.endpoints": data.etcd_endpoints})
    assert rows(bounded) == without_headers(data.expected)


# --- streaming ----------------------------------------------------------------------------------


def add_partition(data: AnalyticsData, n: int) -> list[Row]:
    """Grow the topic to 4 partitions and write ``n`` records to the new one; returns them as
    a consumer reads them."""
    with open_admin(data.env, "confluent") as admin:
        assert admin.create_partitions({data.topic: 4}) == {data.topic: 0}
    msgs = [Msg(3, b"new-%d" % i, b"in the new partition %d" % i) for i in range(n)]
    confluent_produce(data.bootstrap, data.topic, msgs)
    return consume_rows(data.bootstrap, data.topic, {3: 0}, {3: n})


def test_stream_restarts_from_its_checkpoint_without_loss_or_duplicates(spark, analytics, tmp_path):
    data = analytics.fresh(30)
    output, checkpoint = tmp_path / "records", tmp_path / "checkpoint"
    per_trigger = 20

    def start(**trigger):
        records = (
            spark.readStream.format("kafscale")
            .options(**source_options(data))
            .option("subscribe", data.topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("maxOffsetsPerTrigger", str(per_trigger))
            .load(data.location)
        )
        writer = records.writeStream.format("parquet").option("path", str(output))
        return writer.option("checkpointLocation", str(checkpoint)).trigger(**trigger).start()

    first = start(once=True)  # one micro-batch, then stop: the stream is left mid-way
    first.awaitTermination()

    data.produce_more(9)
    in_new_partition = add_partition(data, 5)
    second = start(processingTime="0 seconds")
    try:
        second.processAllAvailable()
        batches = [p["numInputRows"] for p in second.recentProgress if p["numInputRows"]]
    finally:
        second.stop()
    # 10 + 9 + 5 left after the first run's 20: two batches
    assert batches == [per_trigger, 4]
    got = sorted(arrow_rows(spark.read.parquet(str(output)).toArrow()), key=row_order)
    assert got == sorted([*data.expected, *in_new_partition], key=row_order)


# --- the spark/ jobs ----------------------------------------------------------------------------


def test_topic_to_parquet_job_is_incremental(spark, analytics, tmp_path):
    data = analytics.fresh(24)
    output = tmp_path / "table"
    options = [f"--option={key}={value}" for key, value in source_options(data).items()]
    argv = [data.location, "--subscribe", data.topic, "--output", str(output), *options]
    argv += ["--option", "includeHeaders=true"]
    main = job("topic_to_parquet.py")

    main(argv)
    added = data.produce_more(12)
    main(argv)
    main(argv)  # nothing new: no run=3

    def table(path: Path) -> list[Row]:
        frame = spark.read.parquet(str(path)).drop("run")
        return sorted(arrow_rows(frame.toArrow()), key=row_order)

    assert table(output) == data.expected  # nothing twice, nothing lost
    assert table(output / "run=2") == added  # the second run read only what was new
    assert sorted(p.name for p in output.iterdir()) == ["_kafscale_offsets.json", "run=1", "run=2"]
    state = json.loads((output / "_kafscale_offsets.json").read_text())
    ends = {str(p): end for p, end in data.end_offsets().items()}
    assert state == {"run": 2, "offsets": {data.topic: ends}}


def window_counts(rows: list[Row], window_ms: int) -> Counter:
    """{(window start ms, key as text): records}: what the job's table must hold."""
    return Counter(
        (r.timestamp_ms - r.timestamp_ms % window_ms, None if r.key is None else r.key.decode())
        for r in rows
    )


def table_counts(spark: SparkSession, path: Path) -> Counter:
    counts: Counter = Counter()
    for row in spark.read.parquet(str(path)).toArrow().to_pylist():
        assert row["window_end"] - row["window_start"] == dt.timedelta(minutes=1)
        start_ms = (row["window_start"] - EPOCH) // dt.timedelta(milliseconds=1)
        counts[(start_ms, row["key"])] += row["count"]
    return counts


def test_stream_counts_job_restarts_from_its_checkpoint(spark, analytics, tmp_path):
    data = analytics.fresh(27)
    output = tmp_path / "counts"
    options = [f"--option={key}={value}" for key, value in source_options(data).items()]
    argv = [data.location, "--subscribe", data.topic, "--window", "1 minute", *options]
    argv += ["--checkpoint", str(tmp_path / "checkpoint"), "--output", str(output)]
    argv += ["--trigger-seconds", "0", "--shuffle-partitions", "2", "--until-caught-up"]
    main = job("stream_counts.py")

    main(argv)
    assert table_counts(spark, output) == window_counts(data.expected, 60_000)
    data.produce_more(9)
    main(argv)  # the same checkpoint: the new records are added to the counts, once
    assert table_counts(spark, output) == window_counts(data.expected, 60_000)
