"""The analytics readers (kafscale.segment, polars, Spark's kafscale source) read a topic with
transactions as a read_committed consumer does by default: nothing of a transaction still open
(they stop at the last stable offset), no record of an aborted one, never a marker;
``read_uncommitted`` reads every committed record but markers. Both on a single broker (the
metadata it publishes in its data directory) and on a 3-broker cluster (etcd and S3), with part
of the log compacted into segments (the producer snapshot carries the aborted transactions) and
part still in write-ahead runs.

The oracle is the broker itself: a read_committed and a read_uncommitted consumer of the same
topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from support import kafka_wire as kw
from support.clients import unique
from support.procs import S3_ENV
from support.spark_session import local_spark

from kafscale.polars import scan_topic
from kafscale.segment import SegmentSource

PARTITIONS = 2
# Compaction soon after each flush, so the first transactions end up in segments.
BROKER_ARGS = [
    "--default-partitions",
    str(PARTITIONS),
    "--wal-compaction-age-ms",
    "1",
    "--wal-compaction-interval-ms",
    "100",
]


@dataclass
class Where:
    bootstrap: str
    location: str
    source_kwargs: dict[str, Any]
    # the keyword polars and SegmentSource.open take the cluster's etcd by
    etcd_endpoints: str | None
    # the same as options of the Spark data source
    spark_options: dict[str, str]


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def where(request, module_broker_factory) -> Iterator[Where]:
    if request.param == "embedded":
        broker = module_broker_factory(BROKER_ARGS, name="txn-analytics", flush_interval_ms=50)
        yield Where(broker.bootstrap, str(broker.data_dir / "default"), {}, None, {})
        broker.cleanup()
    else:
        make = request.getfixturevalue("module_cluster")
        cluster = make(3, args=BROKER_ARGS, flush_interval_ms=50)
        storage = {
            "endpoint": cluster.moto.endpoint,
            "region": S3_ENV["AWS_REGION"],
            "access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"],
            "secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"],
        }
        yield Where(
            cluster.any_live().bootstrap,
            f"s3://{cluster.bucket}/default",
            storage,
            cluster.etcd.endpoint,
            {
                "endpoint": storage["endpoint"],
                "region": storage["region"],
                "accessKeyId": storage["access_key_id"],
                "secretAccessKey": storage["secret_access_key"],
                "etcd.endpoints": cluster.etcd.endpoint,
            },
        )


def produce_plain(bootstrap: str, topic: str, tag: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, key=f"{tag}{i}".encode(), value=f"{tag}{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0


def transaction(producer: Producer, topic: str, tag: str, n: int) -> None:
    producer.begin_transaction()
    for i in range(n):
        value = f"{tag}{i}".encode()
        producer.produce(topic, key=value, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def consumer_view(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record a confluent consumer of ``isolation`` reads,
    up to the end it is given (the last stable offset for read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("view"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    ends = {
        p.partition: consumer.get_watermark_offsets(p, timeout=10, cached=False)[1]
        for p in partitions
    }
    consumer.assign(partitions)
    rows = []
    deadline = time.monotonic() + 60
    try:
        while True:
            positions = {tp.partition: tp.offset for tp in consumer.position(consumer.assignment())}
            if all(positions.get(p, -1) >= end for p, end in ends.items()):
                break
            assert time.monotonic() < deadline, f"stuck at {positions}, ends {ends}"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                rows.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return sorted(r for r in rows if r[1] < ends[r[0]])


def source(where: Where, isolation: str) -> SegmentSource:
    return SegmentSource.open(
        where.location,
        etcd_endpoints=where.etcd_endpoints,
        isolation_level=isolation,
        **where.source_kwargs,
    )


def segment_view(where: Where, topic: str, isolation: str) -> list[tuple[int, int, bytes]]:
    src = source(where, isolation)
    bounds = src.bounds(topic)
    assert bounds is not None
    rows = []
    for partition, b in bounds.items():
        for batch in src.read(topic, partition, b.log_start_offset, b.high_watermark):
            table = batch.to_pydict()
            rows += zip(table["partition"], table["offset"], table["value"], strict=True)
    return sorted(rows)


def polars_view(where: Where, topic: str, isolation: str) -> list[tuple[int, int, bytes]]:
    frame = scan_topic(
        where.location,
        topic,
        etcd_endpoints=where.etcd_endpoints,
        isolation_level=isolation,
        **where.source_kwargs,
    ).collect()
    rows = frame.select("partition", "offset", "value").rows()
    return sorted((int(p), int(o), bytes(v)) for p, o, v in rows)


def spark_view(spark, where: Where, topic: str, isolation: str) -> list[tuple[int, int, bytes]]:
    frame = (
        spark.read.format("kafscale")
        .options(**where.spark_options)
        .option("subscribe", topic)
        .option("isolationLevel", isolation)
        .load(where.location)
    )
    rows = frame.select("partition", "offset", "value").collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


def wait_compacted(where: Where, topic: str) -> None:
    """Until some of the topic is in segments (so the snapshot path is read, not only runs)."""
    src = source(where, "read_uncommitted")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(src.log(topic, p).segments for p in range(PARTITIONS)):
            return
        time.sleep(0.2)
    pytest.fail("nothing of the topic was compacted into a segment within 60 s")


@pytest.fixture(scope="module")
def spark():
    with local_spark("kafscale-txn-analytics") as session:
        yield session


def test_readers_see_what_read_committed_and_read_uncommitted_consumers_see(where, spark):
    topic = unique("txn-analytics")
    kw.ensure_topic(where.bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": where.bootstrap, "transactional.id": unique("ta")})
    producer.init_transactions(30)
    produce_plain(where.bootstrap, topic, "p", 4)
    transaction(producer, topic, "c", 6)
    producer.commit_transaction(30)
    transaction(producer, topic, "a", 6)
    producer.abort_transaction(30)
    wait_compacted(where, topic)
    produce_plain(where.bootstrap, topic, "q", 4)
    transaction(producer, topic, "o", 4)  # left open: the last stable offset stays before it
    produce_plain(where.bootstrap, topic, "r", 2)

    for level in ("read_committed", "read_uncommitted"):
        expected = consumer_view(where.bootstrap, topic, level)
        assert segment_view(where, topic, level) == expected, level
        assert polars_view(where, topic, level) == expected, level
        assert spark_view(spark, where, topic, level) == expected, level
    committed = consumer_view(where.bootstrap, topic, "read_committed")
    assert {v[:1] for _, _, v in committed} == {b"p", b"c", b"q"}, "no a*, nothing from o* on"
    uncommitted = consumer_view(where.bootstrap, topic, "read_uncommitted")
    assert {v[:1] for _, _, v in uncommitted} == {b"p", b"c", b"a", b"q", b"o", b"r"}

    # Committed, the open transaction and what came after it are read too.
    producer.commit_transaction(30)
    expected = consumer_view(where.bootstrap, topic, "read_committed")
    assert {v[:1] for _, _, v in expected} == {b"p", b"c", b"q", b"o", b"r"}
    assert segment_view(where, topic, "read_committed") == expected
    assert polars_view(where, topic, "read_committed") == expected
    assert spark_view(spark, where, topic, "read_committed") == expected


def test_an_isolation_level_that_does_not_exist_is_refused(where):
    with pytest.raises(ValueError, match="isolation_level must be one of"):
        source(where, "read_everything")
    with pytest.raises(ValueError, match="isolation_level must be one of"):
        scan_topic(where.location, "t", isolation_level="nope", **where.source_kwargs)


def test_the_polars_frame_has_no_marker_rows(where):
    """Markers are control records: never rows, whatever the isolation level."""
    topic = unique("txn-markers")
    kw.ensure_topic(where.bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": where.bootstrap, "transactional.id": unique("tm")})
    producer.init_transactions(30)
    transaction(producer, topic, "c", 4)
    producer.commit_transaction(30)
    frame = scan_topic(
        where.location,
        topic,
        etcd_endpoints=where.etcd_endpoints,
        isolation_level="read_uncommitted",
        **where.source_kwargs,
    ).collect()
    assert sorted(frame["value"].to_list()) == [b"c0", b"c1", b"c2", b"c3"]
    assert frame.filter(pl.col("key").is_null()).height == 0
