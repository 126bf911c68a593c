"""DeleteRecords and DescribeLogDirs through the admin clients that call them: confluent-kafka's
and kafka-python's ``delete_records``, kafka-python's ``describe_log_dirs``; error cases on
the wire."""

from __future__ import annotations

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import Msg, confluent_produce, counts, unique
from support.procs import settled

PARTITIONS = 2


@pytest.fixture(scope="module")
def rbroker(module_broker_factory):
    """Small segments (so that records span several) compacted at once."""
    return module_broker_factory(
        ["--default-partitions", str(PARTITIONS), "--segment-bytes", "1024"],
        name="records",
        env={"KAFSCALE_WAL_COMPACTION_AGE_MS": "1", "KAFSCALE_WAL_COMPACTION_INTERVAL_MS": "100"},
    )


def filled_topic(broker, n: int = 200) -> tuple[str, list[Msg]]:
    topic = unique("records")
    kw.ensure_topic(broker.bootstrap, topic, PARTITIONS)
    msgs = [Msg(i % PARTITIONS, None, f"v{i:04d}".encode() * 10, ()) for i in range(n)]
    for at in range(0, n, 20):  # one batch per partition each time: several segments
        confluent_produce(broker.bootstrap, topic, msgs[at : at + 20])
    return topic, msgs


def offsets(broker, topic: str, partition: int) -> tuple[int, int]:
    with kw.RawConnection.to(broker.bootstrap) as conn:
        return (
            kw.list_offsets(conn, topic, partition, kw.EARLIEST).offset,
            kw.list_offsets(conn, topic, partition, kw.LATEST).offset,
        )


def segment_bases(broker, topic: str, partition: int) -> list[int]:
    logs = sf.read_local_partitions(broker.data_dir, topic, from_zero=False)
    return [seg.base_offset for _name, seg, _index in logs[partition].segments]


def test_confluent_delete_records_moves_the_log_start_and_removes_segments(rbroker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic, msgs = filled_topic(rbroker)
    per_partition = counts(msgs)[0]

    def compacted() -> None:
        log = sf.read_local_partitions(rbroker.data_dir, topic, from_zero=False)[0]
        assert len(log.segments) > 3 and log.next_offset == per_partition

    settled(compacted)
    admin = AdminClient({"bootstrap.servers": rbroker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 60)], request_timeout=30)
    deleted = futures[TopicPartition(topic, 0, 60)].result(30)
    assert deleted.low_watermark == 60
    assert offsets(rbroker, topic, 0) == (60, per_partition)
    assert offsets(rbroker, topic, 1) == (0, per_partition), "other partitions untouched"

    # Every segment wholly below 60 is gone; the one holding 60 stays.
    def first_segment_holds_60() -> None:
        bases = segment_bases(rbroker, topic, 0)
        assert bases and 0 < bases[0] <= 60, bases

    settled(first_segment_holds_60)
    got = kw_fetch_values(rbroker, topic, 0, 60)
    assert got[0] == f"v{120:04d}".encode() * 10  # offset 60 of partition 0 is message 120
    # -1 deletes up to the high watermark.
    futures = admin.delete_records([TopicPartition(topic, 1, -1)], request_timeout=30)
    assert futures[TopicPartition(topic, 1, -1)].result(30).low_watermark == per_partition


def kw_fetch_values(broker, topic: str, partition: int, offset: int) -> list[bytes | None]:
    with kw.RawConnection.to(broker.bootstrap) as conn:
        res = kw.fetch(conn, topic, partition, offset)
    assert res.error_code == kw.NONE, res
    records = []
    data, pos = res.records or b"", 0
    while pos + sf.BATCH_LENGTH_OVERHEAD <= len(data):
        batch = sf.parse_batch(data, pos)
        records += [r for r in batch.records() if r.offset >= offset]
        pos += batch.size
    return [r.value for r in records]


def test_kafka_python_delete_records_and_its_errors(rbroker):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    topic, _ = filled_topic(rbroker, 40)
    admin = KafkaAdminClient(bootstrap_servers=rbroker.bootstrap)
    try:
        result = admin.delete_records({TopicPartition(topic, 0): 5})
        assert result[TopicPartition(topic, 0)]["low_watermark"] == 5
        # Not past the high watermark.
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({TopicPartition(topic, 1): 1000})
    finally:
        admin.close()
    assert offsets(rbroker, topic, 0)[0] == 5
    assert offsets(rbroker, topic, 1)[0] == 0


def test_kafka_python_describe_log_dirs_reports_what_each_partition_stores(rbroker):
    from kafka import KafkaAdminClient

    topic, _ = filled_topic(rbroker, 100)
    admin = KafkaAdminClient(bootstrap_servers=rbroker.bootstrap)
    try:
        described = admin.describe_log_dirs()
    finally:
        admin.close()
    text = repr(described)
    assert topic in text, text[:2000]
    sizes = find_partition_sizes(described, topic)
    assert set(sizes) == set(range(PARTITIONS)), sizes
    # Each partition stores its 50 values of 50 bytes and the batches' overhead.
    assert all(50 * 50 <= size < 1 << 20 for size in sizes.values()), sizes


def find_partition_sizes(described, topic: str) -> dict[int, int]:
    """{partition: size} from kafka-python's describe_log_dirs answer (a list of per-broker
    dicts of log dirs, topics and partitions, however nested)."""
    sizes: dict[int, int] = {}

    def walk(node, in_topic: bool) -> None:
        if isinstance(node, dict):
            name = node.get("name", node.get("topic"))
            here = in_topic or name == topic
            if here and "partition_index" in node:
                sizes[node["partition_index"]] = node["partition_size"]
            for value in node.values():
                walk(value, here if name is None else name == topic)
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item, in_topic)

    walk(described, False)
    return sizes


def test_confluent_list_offsets_max_timestamp_reads_segments_and_runs(rbroker):
    """OffsetSpec.max_timestamp() (ListOffsets v7+, KIP-734): the first record with the largest
    timestamp, wherever it is (compacted segments here), and only from the log start on."""
    import time

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = unique("maxts")
    kw.ensure_topic(rbroker.bootstrap, topic, PARTITIONS)
    now = int(time.time() * 1000)
    stamps = [now - 5000 + (37 * i) % 1000 for i in range(60)]
    stamps[17] = now  # the largest, twice: the first one is the answer
    stamps[41] = now
    msgs = [Msg(0, None, f"m{i}".encode() * 20, (), ts) for i, ts in enumerate(stamps)]
    for at in range(0, len(msgs), 10):  # several batches, several segments
        confluent_produce(rbroker.bootstrap, topic, msgs[at : at + 10])

    def compacted() -> None:
        log = sf.read_local_partitions(rbroker.data_dir, topic, from_zero=False)[0]
        assert log.next_offset == len(msgs)

    settled(compacted)
    admin = AdminClient({"bootstrap.servers": rbroker.bootstrap})

    def largest(partition: int) -> tuple[int, int]:
        tp = TopicPartition(topic, partition)
        got = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(30)
        return got.offset, got.timestamp

    assert largest(0) == (17, now)
    assert largest(1) == (-1, -1), "an empty partition has none"
    tp = TopicPartition(topic, 0, 20)
    admin.delete_records([tp], request_timeout=30)[tp].result(30)
    assert largest(0) == (41, now), "the first copy is below the log start now"
