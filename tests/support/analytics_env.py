"""Reference data for the analytics path (segment reader, polars, Spark): a 3-partition topic
written by every client and codec, read back through the broker, and where its segments live.

The ``analytics`` fixture (module scope) runs twice: "embedded" = one broker keeping segments in
its local data dir (no S3, no etcd), "cluster" = three brokers sharing etcd and a moto bucket.
Either way it yields an ``AnalyticsData``: the location and options a reader needs, and
``expected``, the rows a consumer reads through the broker (the oracle every reader must match).

The topic is written by kcat, confluent-kafka, kafka-python and aiokafka (side by side) with
each of none/gzip/snappy/lz4/zstd; records carry null keys, null and empty values, headers
(repeated names, empty and null values) and explicit or client-chosen timestamps. Brokers flush
every ``FLUSH_MS``, and confluent-kafka sends small batches, so segments hold many batches and
the bigger ones have several index entries.

``cluster_analytics`` is the cluster flavour alone (the same instance as ``analytics``'s), for
tests of what only a cluster has. Tests that produce more use ``AnalyticsData.fresh(n)``, a new
topic on the same brokers, so that the shared topic and its ``expected`` never change. Test
modules import the fixtures they use: ``analytics = analytics_env.analytics``.
"""

from __future__ import annotations

import datetime as dt
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import pytest

from . import segment_format as sf
from .clients import (
    HANG_GUARD,
    Msg,
    aiokafka_produce,
    confluent_produce,
    kafka_python_produce,
    kcat_produce,
    unique,
)
from .cluster import segment_base
from .group_env import ClusterNodes, GroupEnv, SingleNode
from .load import wait_for
from .procs import S3_ENV, MotoServer

PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
NAMESPACE = "default"  # the broker's default --s3-namespace (and local data-dir subfolder)
FLUSH_MS = 100  # long enough for one produce run to land in few segments of many batches
# Readers scan segments: compaction turns every write-ahead run into one at once.
BROKER_ARGS = [
    "--default-partitions",
    str(PARTITIONS),
    "--wal-compaction-age-ms",
    "1",
    "--wal-compaction-interval-ms",
    "100",
]
# records per (client, codec) run; confluent writes more so some segments span index entries
RUN_SIZES = {"confluent": 360, "kafka-python": 45, "aiokafka": 45, "kcat": 30}
# confluent-kafka: many small batches per produce request, all inside one flush interval
SMALL_BATCHES = {"batch.num.messages": 7, "linger.ms": 20}
SETTLE_S = 30.0  # liveness guard only
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Spark's Kafka source: timestampType 0 = CreateTime, 1 = LogAppendTime; librdkafka reports
# TIMESTAMP_CREATE_TIME = 1, TIMESTAMP_LOG_APPEND_TIME = 2 (0 = not available).
SPARK_TIMESTAMP_TYPE = {1: 0, 2: 1}
# the option names Spark takes -> SegmentSource.open keyword arguments
SOURCE_KWARGS = {
    "endpoint": "endpoint",
    "region": "region",
    "accessKeyId": "access_key_id",
    "secretAccessKey": "secret_access_key",
}


class Row(NamedTuple):
    """One record as a Kafka consumer sees it; timestamp_type in Spark's convention."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int
    headers: list[tuple[str, bytes | None]]


# ---------------------------------------------------------------------------------------------
# where the segment objects are


class LocalObjects:
    """Objects of the local-dir store: key ``{namespace}/{topic}/...`` under the data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir

    def keys(self, prefix: str) -> list[str]:
        base = self.root / prefix
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def read_tail(self, key: str, n: int) -> bytes:
        with open(self.root / key, "rb") as f:
            f.seek(-n, 2)
            return f.read()

    def write(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class S3Objects:
    """Objects in a moto bucket."""

    def __init__(self, moto: MotoServer, bucket: str) -> None:
        self.bucket = bucket
        self.moto = moto
        self.s3 = moto.client()

    def keys(self, prefix: str) -> list[str]:
        return sorted(self.moto.listing(self.bucket, prefix, self.s3))

    def read(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def read_tail(self, key: str, n: int) -> bytes:
        obj = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=-{n}")
        return obj["Body"].read()

    def write(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)


# ---------------------------------------------------------------------------------------------
# the data set


@dataclass
class AnalyticsData:
    location: str  # what SegmentSource.open / Spark's .load() takes
    options: dict[str, str]  # S3 options (Spark names); empty for the local dir
    etcd_endpoints: str | None
    namespace: str
    bootstrap: str
    topic: str
    expected: list[Row]  # sorted by (partition, offset)
    kind: str  # "embedded" or "cluster"
    env: GroupEnv = field(repr=False)
    store: LocalObjects | S3Objects = field(repr=False)

    @property
    def source_kwargs(self) -> dict[str, str]:
        """``options`` as keyword arguments of SegmentSource.open."""
        return {SOURCE_KWARGS[k]: v for k, v in self.options.items()}

    def open_source(self):
        from kafscale.segment import SegmentSource

        return SegmentSource.open(self.location, **self.source_kwargs)

    def end_offsets(self) -> dict[int, int]:
        """{partition: offset after the last expected row} (0 for an empty partition)."""
        ends = dict.fromkeys(range(PARTITIONS), 0)
        for row in self.expected:
            ends[row.partition] = max(ends[row.partition], row.offset + 1)
        return ends

    def fresh(self, n: int) -> AnalyticsData:
        """The same brokers and store with a new 3-partition topic holding ``n`` rows: for
        tests that produce more (the shared topic's ``expected`` must not change)."""
        topic = self.env.new_topic(unique("analytics-fresh"), PARTITIONS)
        data = replace(self, topic=topic, expected=[])
        if n:
            data.produce_more(n)
        return data

    def produce_more(self, n: int, compression: str = "none") -> list[Row]:
        """Append ``n`` records (confluent-kafka, round-robin) to ``topic``; returns their rows
        as a consumer reads them and adds them to ``expected``. They are in segments on
        return."""
        starts = self.end_offsets()
        tag = unique("more")
        msgs = [
            Msg(i % PARTITIONS, f"k{i % 9}".encode(), f"{tag}-{i}".encode(), (("n", b"%d" % i),))
            for i in range(n)
        ]
        confluent_produce(self.bootstrap, self.topic, msgs, compression=compression)
        ends = dict(starts)
        for m in msgs:
            ends[m.partition] += 1
        rows = consume_rows(self.bootstrap, self.topic, starts, ends)
        self.expected = sorted([*self.expected, *rows], key=row_order)
        self.segments_settled()
        return rows

    def segment_keys(self) -> dict[int, list[str]]:
        """{partition: its .kfs object keys in offset order}."""
        out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
        for key in self.store.keys(f"{self.namespace}/{self.topic}/"):
            parsed = segment_base(key)
            if parsed is not None and parsed[2] == "kfs":
                out[parsed[0]].append(key)
        return out

    def objects(self) -> dict[str, bytes]:
        """{key: bytes} of every segment and index object of ``topic``."""
        keys = self.store.keys(f"{self.namespace}/{self.topic}/")
        return {key: self.store.read(key) for key in keys}

    def segments_settled(self) -> None:
        """Wait until the segments of every partition end where ``expected`` ends: acked data
        is committed in write-ahead objects before the ack, and compaction (every 100 ms
        here) turns it into segments."""
        want = self.end_offsets()
        wait_for(
            lambda: self.segment_ends() == want,
            SETTLE_S,
            f"segments of {self.topic} to end at {want} (they end at {self.segment_ends()})",
        )

    def segment_ends(self) -> dict[int, int]:
        """{partition: last offset + 1 of its newest segment, from the footer}."""
        ends = {}
        for p, keys in self.segment_keys().items():
            if not keys:
                ends[p] = 0
                continue
            footer = self.store.read_tail(keys[-1], sf.SEGMENT_FOOTER.size)
            _, last_offset, _ = sf.SEGMENT_FOOTER.unpack(footer)
            ends[p] = last_offset + 1
        return ends


def row_order(row: Row) -> tuple[int, int]:
    return (row.partition, row.offset)


def arrow_rows(data) -> list[Row]:
    """Rows of a pyarrow Table/RecordBatch in the Kafka schema (the reader's, or polars'
    ``to_arrow()``), in their order; without a headers column every row gets ``[]``."""
    rows = []
    for rec in data.to_pylist():
        headers = [(h["key"], h["value"]) for h in rec.get("headers") or []]
        timestamp_ms = (rec["timestamp"] - EPOCH) // dt.timedelta(milliseconds=1)
        rows.append(
            Row(
                rec["topic"],
                rec["partition"],
                rec["offset"],
                rec["key"],
                rec["value"],
                timestamp_ms,
                rec["timestampType"],
                headers,
            )
        )
    return rows


def without_headers(rows: list[Row]) -> list[Row]:
    return [row._replace(headers=[]) for row in rows]


# ---------------------------------------------------------------------------------------------
# reading through the broker


def consume_rows(
    bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int]
) -> list[Row]:
    """Records [starts[p], ends[p]) of every partition through a confluent-kafka consumer
    (assign, no group), sorted by (partition, offset)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("analytics-reference"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    try:
        wanted = {p for p in ends if ends[p] > starts[p]}
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in wanted])
        rows: list[Row] = []
        next_offset = {p: starts[p] for p in wanted}
        deadline = time.monotonic() + HANG_GUARD
        while any(next_offset[p] < ends[p] for p in wanted):
            if time.monotonic() > deadline:
                raise AssertionError(f"consumer reached {next_offset}, wanted {ends}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise AssertionError(f"consumer error: {msg.error()}")
            if msg.offset() >= ends[msg.partition()]:
                continue
            rows.append(to_row(msg))
            next_offset[msg.partition()] = msg.offset() + 1
        return sorted(rows, key=row_order)
    finally:
        consumer.close()


def to_row(msg) -> Row:
    ts_type, ts = msg.timestamp()
    assert ts_type in SPARK_TIMESTAMP_TYPE, f"no timestamp on {msg.partition()}@{msg.offset()}"
    return Row(
        msg.topic(),
        msg.partition(),
        msg.offset(),
        msg.key(),
        msg.value(),
        ts,
        SPARK_TIMESTAMP_TYPE[ts_type],
        list(msg.headers() or []),
    )


# ---------------------------------------------------------------------------------------------
# writing the reference topic


def client_messages(client: str, codec: str, n: int, base_ts: int) -> list[Msg]:
    """Records for one (client, codec) run: null keys, null (not kcat) and empty values,
    compressible long values, headers with repeated names and empty or null values (kafka-python
    refuses null header values: it gets empty ones), every fourth with an explicit timestamp
    (never for kcat)."""
    if client == "kcat":
        return kcat_messages(codec, n)
    msgs = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i % 17}".encode()
        if i % 11 == 3 and key is not None:
            value = None
        elif i % 13 == 4:
            value = b""
        elif i % 7 == 1:
            value = (f"{client}-{codec}-{i}-" + "abcdefgh" * 100).encode()
        else:
            value = f"{client}-{codec}-{i}".encode()
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 1:
            headers = (("client", client.encode()), ("dup", b"1"), ("dup", b"2"))
        elif i % 3 == 2:
            headers = (("empty", b""), ("null", b"" if client == "kafka-python" else None))
        timestamp = base_ts + i if i % 4 == 0 else None
        msgs.append(Msg(i % PARTITIONS, key, value, headers, timestamp))
    return msgs


def kcat_messages(codec: str, n: int) -> list[Msg]:
    """What kcat can send: text lines, key or null key, one header set for every message."""
    headers = (("client", b"kcat"), ("codec", codec.encode()))
    msgs = []
    for i in range(n):
        key = None if i % 4 == 0 else f"key-{i % 17}".encode()
        value = f"kcat-{codec}-{i}" + ("-abcdefgh" * 50 if i % 3 == 1 else "")
        msgs.append(Msg(i % PARTITIONS, key, value.encode(), headers))
    return msgs


def produce_run(bootstrap: str, topic: str, client: str, codec: str, msgs: list[Msg]) -> None:
    if client == "kcat":
        kcat_produce(bootstrap, topic, msgs, compression=codec)
    elif client == "confluent":
        confluent_produce(bootstrap, topic, msgs, compression=codec, extra=SMALL_BATCHES)
    elif client == "kafka-python":
        kafka_python_produce(bootstrap, topic, msgs, compression=codec)
    else:
        aiokafka_produce(bootstrap, topic, msgs, compression=codec)


def client_runs(bootstrap: str, topic: str, client: str, base_ts: int) -> list[Msg]:
    """One client's runs, one per codec, in order; returns what it sent."""
    sent = []
    for codec in CODECS:
        msgs = client_messages(client, codec, RUN_SIZES[client], base_ts)
        produce_run(bootstrap, topic, client, codec, msgs)
        sent += msgs
    return sent


def write_reference(env: GroupEnv, topic: str) -> dict[int, int]:
    """Every (client, codec) run into ``topic``, the clients side by side (so segments mix
    clients and codecs, and there are fewer of them); returns {partition: records written}."""
    # explicit timestamps a few minutes back: older than the client-chosen ones, so timestamps
    # are not monotonic along the log, yet far from any retention limit
    base_ts = int(time.time() * 1000) - 300_000
    with ThreadPoolExecutor(len(RUN_SIZES)) as pool:
        runs = [
            pool.submit(client_runs, env.bootstrap(), topic, client, base_ts)
            for client in RUN_SIZES
        ]
        sent = [m for run in runs for m in run.result()]
    written = dict.fromkeys(range(PARTITIONS), 0)
    for m in sent:
        written[m.partition] += 1
    return written


def build(kind: str, env: GroupEnv, location: str, options, etcd, store) -> AnalyticsData:
    topic = env.new_topic(unique("analytics"), PARTITIONS)
    written = write_reference(env, topic)
    starts = dict.fromkeys(written, 0)
    expected = consume_rows(env.bootstrap(), topic, starts, written)
    data = AnalyticsData(
        location=location,
        options=options,
        etcd_endpoints=etcd,
        namespace=NAMESPACE,
        bootstrap=env.bootstrap(),
        topic=topic,
        expected=expected,
        kind=kind,
        env=env,
        store=store,
    )
    data.segments_settled()
    return data


# The cluster data set of each test module, built once: shared by ``analytics["cluster"]`` and
# ``cluster_analytics`` (pytest would build a second one for an indirect parametrization).
_CLUSTER_DATA: dict[str, AnalyticsData] = {}


def s3_options(moto: MotoServer) -> dict[str, str]:
    """The options a Spark read (in Spark's names) takes to reach the moto bucket."""
    return {
        "endpoint": moto.endpoint,
        "region": S3_ENV["AWS_REGION"],
        "accessKeyId": S3_ENV["AWS_ACCESS_KEY_ID"],
        "secretAccessKey": S3_ENV["AWS_SECRET_ACCESS_KEY"],
    }


def cluster_data(request) -> AnalyticsData:
    module = request.module.__name__
    if module not in _CLUSTER_DATA:
        make = request.getfixturevalue("module_cluster")
        cluster = make(3, args=BROKER_ARGS, flush_interval_ms=FLUSH_MS)
        options = s3_options(cluster.moto)
        location = f"s3://{cluster.bucket}/{NAMESPACE}"
        store = S3Objects(cluster.moto, cluster.bucket)
        env = ClusterNodes(cluster)
        _CLUSTER_DATA[module] = build(
            "cluster", env, location, options, cluster.etcd.endpoint, store
        )
    return _CLUSTER_DATA[module]


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def analytics(request, module_broker_factory):
    """The reference topic on one broker with local segments, or on three brokers with etcd
    and moto S3."""
    if request.param == "embedded":
        broker = module_broker_factory(BROKER_ARGS, name="analytics", flush_interval_ms=FLUSH_MS)
        location = str(broker.data_dir / NAMESPACE)
        store = LocalObjects(broker.data_dir)
        yield build("embedded", SingleNode(broker), location, {}, None, store)
        broker.cleanup()
    else:
        yield cluster_data(request)


@pytest.fixture(scope="module")
def cluster_analytics(request):
    """The cluster flavour of ``analytics`` alone (the same instance), for tests of what only
    a cluster has (etcd)."""
    return cluster_data(request)
