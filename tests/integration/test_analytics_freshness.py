"""Every reader (``kafscale.segment``, polars' ``scan_topic``, the Spark source, the Iceberg and
Parquet jobs in ``spark/``, ``kafscale segments``) sees every acknowledged record at once - long
before compaction turns it into segments - and, on a single node, still after the broker stopped
(SIGTERM or kill -9). The brokers here compact only after 10 minutes, so everything read comes
from the committed write-ahead objects; the oracle is what a consumer reads through the broker.

On a cluster the readers learn what is committed from etcd; a write-ahead object uploaded by a
broker that never committed it (a fenced zombie's) is never read."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import polars as pl
import pytest
from support.analytics_env import (
    NAMESPACE,
    PARTITIONS,
    SOURCE_KWARGS,
    S3Objects,
    arrow_rows,
    consume_rows,
    row_order,
    s3_options,
    without_headers,
)
from support.cli_runner import ok
from support.clients import Msg, confluent_produce, unique
from support.group_env import ClusterNodes, SingleNode
from support.spark_session import local_spark

from kafscale.polars import scan_topic
from kafscale.segment import SegmentSource
from kafscale.spark import iceberg as ice

# Nothing is compacted while a test runs: every record read is in a write-ahead object.
UNCOMPACTED = [
    "--default-partitions",
    str(PARTITIONS),
    "--wal-compaction-age-ms",
    "600000",
]
RECORDS = 240
# what a polars source's ValueError reaches the caller as: polars 1 wraps it in a ComputeError
POLARS_SOURCE_ERROR = (pl.exceptions.ComputeError, ValueError)
JOBS = Path(__file__).resolve().parents[2] / "spark"


@pytest.fixture(scope="module")
def spark():
    with local_spark("kafscale-freshness", **{"spark.sql.session.timeZone": "UTC"}) as session:
        yield session


def produce(env, topic: str, n: int, start: dict[int, int]) -> tuple[list, dict[int, int]]:
    """``n`` acknowledged records (acks=all), as a consumer reads them, and the new ends."""
    msgs = [
        Msg(i % PARTITIONS, f"k{i}".encode(), f"{topic}-{i}".encode(), (("i", b"%d" % i),))
        for i in range(n)
    ]
    confluent_produce(env.bootstrap(), topic, msgs)
    ends = dict(start)
    for m in msgs:
        ends[m.partition] += 1
    return consume_rows(env.bootstrap(), topic, start, ends), ends


def source_kwargs(options: dict[str, str]) -> dict[str, str]:
    """Spark's S3 option names as SegmentSource's and scan_topic's keyword arguments."""
    return {SOURCE_KWARGS[k]: v for k, v in options.items()}


def read_by_every_reader(spark, location: str, topic: str, etcd: str | None, options: dict):
    """{reader: its rows, sorted}: SegmentSource, polars and Spark, each with what a user gives
    it (the location, the S3 options, etcd for a cluster)."""
    kwargs = source_kwargs(options)
    source = SegmentSource.open(location, etcd_endpoints=etcd, **kwargs)
    direct = []
    for p in source.partitions(topic):
        log = source.log(topic, p)
        for batch in source.read(
            topic, p, log.log_start_offset, log.end_offset, include_headers=True
        ):
            direct += arrow_rows(batch)
    frame = scan_topic(location, topic, etcd_endpoints=etcd, **kwargs).collect()
    reader = spark.read.format("kafscale").options(**options).option("subscribe", topic)
    if etcd:
        reader = reader.option("etcd.endpoints", etcd)
    spark_rows = arrow_rows(reader.load(location).toArrow())
    return {
        "segment": sorted(direct, key=row_order),
        "polars": sorted(arrow_rows(frame.to_arrow()), key=row_order),
        "spark": sorted(spark_rows, key=row_order),
    }


def run_jobs(spark, location: str, topic: str, out: Path) -> dict[str, list]:
    """{job: the rows it wrote}: spark/topic_to_iceberg.py and spark/topic_to_parquet.py, run
    as a person runs them (in this process, on this session)."""
    base = [location, "--subscribe", topic]
    runpy.run_path(str(JOBS / "topic_to_iceberg.py"))["main"](
        [*base, "--warehouse", str(out / "warehouse")]
    )
    table = ice.open_catalog(str(out / "warehouse")).load_table(("kafscale", ice.table_name(topic)))
    runpy.run_path(str(JOBS / "topic_to_parquet.py"))["main"](
        [*base, "--output", str(out / "parquet")]
    )
    parquet = spark.read.parquet(str(out / "parquet")).drop("run")
    return {
        "iceberg": sorted(arrow_rows(table.scan().to_arrow()), key=row_order),
        "parquet": sorted(arrow_rows(parquet.toArrow()), key=row_order),
    }


def assert_every_reader_reads(got: dict[str, list], expected: list) -> None:
    for reader, rows in got.items():
        # Spark and polars here read without headers (their default)
        want = expected if reader == "segment" else without_headers(expected)
        assert rows == want, f"{reader}: {len(rows)} rows, a consumer read {len(want)}"


def segment_objects(data_dir, topic: str) -> list:
    return sorted((data_dir / NAMESPACE / topic).rglob("*.kfs"))


@pytest.mark.parametrize("stop", ["sigterm", "kill -9"])
def test_a_single_node_is_read_at_once_and_after_it_stopped(broker_factory, spark, stop, tmp_path):
    broker = broker_factory(UNCOMPACTED)
    env = SingleNode(broker)
    topic = env.new_topic(unique("fresh"), PARTITIONS)
    location = str(broker.data_dir / NAMESPACE)
    expected, ends = produce(env, topic, RECORDS, dict.fromkeys(range(PARTITIONS), 0))
    assert segment_objects(broker.data_dir, topic) == [], "nothing is compacted yet"
    got = read_by_every_reader(spark, location, topic, None, {})
    assert_every_reader_reads(got, expected)
    more, _ = produce(env, topic, RECORDS // 2, ends)
    expected = sorted([*expected, *more], key=row_order)
    if stop == "sigterm":
        broker.terminate()
    else:
        broker.kill()
    got = read_by_every_reader(spark, location, topic, None, {})
    got |= run_jobs(spark, location, topic, tmp_path)
    assert_every_reader_reads(got, expected)
    # the CLI lists the committed runs, and dumps them
    listed = ok("segments", "ls", location, "--topic", topic, "-o", "json").json()
    assert {(r["partition"], r["end_offset"]) for r in listed} >= set(ends_of(expected).items())
    assert all("!wal/" in r["object"] for r in listed), "all in write-ahead objects"
    dumped = ok("segments", "dump", location, "--topic", topic, "--partition", "0", "-o", "json")
    offsets = [json.loads(line)["offset"] for line in dumped.out.splitlines()]
    assert offsets == [r.offset for r in expected if r.partition == 0]


def ends_of(rows: list) -> dict[int, int]:
    """{partition: its last row's offset + 1}."""
    ends: dict[int, int] = {}
    for r in rows:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
    return ends


def test_a_reader_that_finds_nothing_says_why(broker_factory):
    broker = broker_factory(UNCOMPACTED)
    env = SingleNode(broker)
    topic = env.new_topic(unique("known"), PARTITIONS)
    location = str(broker.data_dir / NAMESPACE)
    with pytest.raises(POLARS_SOURCE_ERROR, match=f"does not exist in .*there: {topic}"):
        scan_topic(location, "no-such-topic").collect()
    data_dir = str(broker.data_dir)
    names_the_namespace = f"{data_dir} is a broker's data directory.*pass {location}$"
    with pytest.raises(ValueError, match=names_the_namespace):
        SegmentSource.open(data_dir)
    with pytest.raises(POLARS_SOURCE_ERROR, match="is a broker's data directory"):
        scan_topic(data_dir, topic).collect()
    source = SegmentSource.open(location)
    assert source.metadata == "published"
    assert topic in source.topics(), "a topic with no segment yet is listed"


def test_a_cluster_is_read_right_after_the_acks_and_never_an_uncommitted_object(cluster, spark):
    nodes = cluster(3, args=UNCOMPACTED)
    env = ClusterNodes(nodes)
    topic = env.new_topic(unique("fresh"), PARTITIONS)
    expected, _ = produce(env, topic, RECORDS, dict.fromkeys(range(PARTITIONS), 0))
    store = S3Objects(nodes.moto, nodes.bucket)
    assert not [k for k in store.keys(f"{NAMESPACE}/{topic}/") if k.endswith(".kfs")]
    # A zombie's upload: a committed object's bytes under a name no manifest has.
    committed = next(k for k in store.keys(f"{NAMESPACE}/!wal/") if k.endswith(".wal"))
    store.write(f"{NAMESPACE}/!wal/99/00000000000000aa-000000000001.wal", store.read(committed))
    options = s3_options(nodes.moto)
    location = f"s3://{nodes.bucket}/{NAMESPACE}"
    got = read_by_every_reader(spark, location, topic, nodes.etcd.endpoint, options)
    assert_every_reader_reads(got, expected)
    # Without etcd a cluster's bucket shows only compacted segments: none yet, and it says so.
    without = scan_topic(location, topic, **source_kwargs(options))
    with pytest.raises(POLARS_SOURCE_ERROR, match="give etcd_endpoints to read them"):
        without.collect()
