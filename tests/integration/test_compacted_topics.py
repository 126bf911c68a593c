"""Compacted topics (cleanup.policy=compact) as Kafka clients see them: the last record of
each key stays at its offset, consumers see the gaps, a fetch from an offset cleaned away
starts at the next record, tombstones stay for delete.retention.ms after their first
cleaning, records without a key are refused, and the policy can be changed on a live topic.
The brokers here compact write-ahead data at once and clean every 200 ms."""

from __future__ import annotations

import runpy
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from prometheus_client.parser import text_string_to_metric_families
from support import jvm
from support.cli_runner import ok
from support.clients import (
    Msg,
    confluent_produce,
    kafka_python_produce,
    unique,
)
from support.procs import free_port, settled
from support.spark_session import local_spark

from kafscale.polars import scan_topic
from kafscale.segment import SegmentSource
from kafscale.spark import iceberg as ice

JOBS = Path(__file__).resolve().parents[2] / "spark"
CLEANER_ARGS = ["--log-cleaner-backoff-ms", "200", "--file-delete-delay-ms", "0"]
# Every dirty byte is worth a cleaning; small segments, so that the newest one (never cleaned
# while no write follows it, like Kafka's active segment) is not the whole log.
EAGER = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "segment.bytes": "1024",
}


def create(bootstrap: str, topic: str, configs: dict[str, str], partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs)
    admin.create_topics([new])[topic].result(timeout=30)


def read_all(bootstrap: str, topic: str, start: int = 0) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from ``start`` to the high watermark of partition
    0, as librdkafka's consumer in its defaults reads them."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique("read"), "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, start)])
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                if msg.error():
                    raise AssertionError(f"consumer error: {msg.error()}")
                got.append((msg.offset(), msg.key(), msg.value()))
            (position,) = consumer.position([TopicPartition(topic, 0)])
            if position.offset >= high:
                return got
        raise AssertionError(f"the consumer never reached the high watermark {high}: {got}")
    finally:
        consumer.close()


def segment_count(broker, topic: str) -> int:
    """Segments of partition 0 in the broker's data directory (compaction's and cleanings')."""
    return len(list((broker.data_dir / "default" / topic / "0").glob("*.kfs")))


def wait_until_in_segments(broker, topic: str, end: int) -> None:
    """Until compaction has put partition 0's offsets below ``end`` into segments."""
    source = SegmentSource.open(str(broker.data_dir / "default"))

    def compacted() -> None:
        segments = source.segments(topic, 0)
        assert segments and segments[-1].end_offset == end

    settled(compacted, timeout=30)


def wait_for_segments(broker, topic: str, count: int) -> None:
    def compacted() -> None:
        assert segment_count(broker, topic) == count

    settled(compacted, timeout=30)


def rounds(keys: int, rounds: int) -> list[Msg]:
    """``rounds`` values of each of ``keys`` keys, round after round."""
    return [
        Msg(0, f"k{k}".encode(), f"r{r}-k{k}".encode()) for r in range(rounds) for k in range(keys)
    ]


def latest(msgs: list[Msg]) -> dict[bytes, tuple[int, bytes | None]]:
    """Each key's last (offset, value) when ``msgs`` were stored from offset 0 in order."""
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, m in enumerate(msgs):
        assert m.key is not None
        out[m.key] = (offset, m.value)
    return out


def cleaned_view(msgs: list[Msg], tail: int) -> list[tuple[int, bytes, bytes | None]]:
    """What a consumer reads once everything but the last ``tail`` records is cleaned."""
    survivors = {offset for offset, _ in latest(msgs[: len(msgs) - tail]).values()}
    survivors |= set(range(len(msgs) - tail, len(msgs)))
    return [(o, m.key, m.value) for o, m in enumerate(msgs) if o in survivors]  # type: ignore[misc]


def assert_a_cleaning_of(view: list[tuple[int, bytes, bytes | None]], stored: list[Msg]) -> None:
    """``view`` (what a consumer read) is ``stored`` (written from offset 0) cleaned: records
    at their offsets, unchanged, in order, and every key's last record among them."""
    offsets = [o for o, _, _ in view]
    assert offsets == sorted(set(offsets))
    assert all((stored[o].key, stored[o].value) == (k, v) for o, k, v in view)
    assert {offset for offset, _ in latest(stored).values()} <= set(offsets)


@pytest.mark.parametrize("producer", ["confluent", "kafka-python"])
def test_the_last_record_of_each_key_stays_at_its_offset(broker_factory, producer):
    port = free_port()
    broker = broker_factory([*CLEANER_ARGS, "--metrics-addr", f"127.0.0.1:{port}"])
    topic = unique(f"compact-{producer}")
    create(broker.bootstrap, topic, EAGER)
    msgs = rounds(keys=20, rounds=5)
    produce = confluent_produce if producer == "confluent" else kafka_python_produce
    produce(broker.bootstrap, topic, msgs)
    wait_until_in_segments(broker, topic, len(msgs))
    # One more record, in a segment of its own: the ones before it are then all cleanable.
    last = Msg(0, b"k0", b"last")
    produce(broker.bootstrap, topic, [last])
    everything = [*msgs, last]

    def cleaned() -> list[tuple[int, bytes, bytes | None]]:
        got = read_all(broker.bootstrap, topic)
        want = cleaned_view(everything, tail=1)
        assert got == want, f"{len(got)} records read, {len(want)} once cleaned"
        return got

    got = settled(cleaned, timeout=60)
    offsets = [o for o, _, _ in got]
    assert offsets[0] > 0 and offsets == sorted(offsets), "gaps where records went, in order"
    # a fetch from an offset cleaned away starts at the next record
    assert read_all(broker.bootstrap, topic, start=1)[0][0] == offsets[0]
    assert "cleaned a compacted partition" in broker.log_text()
    # the analytics readers read the same records, gaps and all, straight from storage
    location = str(broker.data_dir / "default")
    frame = scan_topic(location, topic).collect().sort("offset")
    assert list(zip(frame["offset"], frame["key"], frame["value"], strict=True)) == got
    source = SegmentSource.open(location)
    assert any(s.generation is not None for s in source.segments(topic, 0))
    verified = ok("segments", "verify", location, "--topic", topic, "--no-progress")
    assert "no problems" in verified.out
    # what the cleaner did, in the broker's metrics
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
        metrics = {
            (s.name, s.labels.get("topic")): s.value
            for family in text_string_to_metric_families(page.read().decode())
            for s in family.samples
        }
    assert metrics[("kafscale_cleaner_cleanings_total", None)] >= 1
    assert metrics[("kafscale_cleaner_records_removed_total", None)] >= 80
    assert metrics[("kafscale_cleaner_read_bytes_total", None)] > 0
    assert 0 <= metrics[("kafscale_cleaner_dirty_ratio", topic)] < 0.01
    assert metrics[("kafscale_cleaner_lag_seconds", topic)] >= 0


def test_spark_and_the_iceberg_job_read_a_cleaned_topic(broker_factory, tmp_path):
    """The Spark source and spark/topic_to_iceberg.py read what a consumer reads of a cleaned
    topic: the records at their offsets, the gaps skipped."""
    broker = broker_factory(CLEANER_ARGS)
    topic = unique("compact-spark")
    create(broker.bootstrap, topic, EAGER)
    msgs = rounds(keys=20, rounds=5)
    confluent_produce(broker.bootstrap, topic, msgs)
    wait_until_in_segments(broker, topic, len(msgs))
    confluent_produce(broker.bootstrap, topic, [Msg(0, b"k0", b"last")])
    want = cleaned_view([*msgs, Msg(0, b"k0", b"last")], tail=1)

    def cleaned() -> None:
        assert read_all(broker.bootstrap, topic) == want

    settled(cleaned, timeout=60)
    location = str(broker.data_dir / "default")

    def rows(table) -> list[tuple[int, bytes, bytes | None]]:
        got = zip(table["offset"], table["key"], table["value"], strict=True)
        return sorted((o.as_py(), k.as_py(), v.as_py()) for o, k, v in got)

    with local_spark("kafscale-compacted") as spark:
        frame = spark.read.format("kafscale").option("subscribe", topic).load(location)
        assert rows(frame.toArrow()) == want
        warehouse = str(tmp_path / "warehouse")
        job = runpy.run_path(str(JOBS / "topic_to_iceberg.py"))["main"]
        job([location, "--subscribe", topic, "--warehouse", warehouse])
    table = ice.open_catalog(warehouse).load_table(("kafscale", ice.table_name(topic)))
    assert rows(table.scan().to_arrow()) == want


def test_the_java_client_produces_and_reads_a_cleaned_topic(broker_factory):
    """The Java producer (idempotent, acks=all) writes the rounds; once the broker has cleaned
    them, the Java consumer reads the last value of each key at its offset, gaps skipped, and
    its position reaches the end offset."""
    broker = broker_factory(CLEANER_ARGS)
    topic = unique("compact-java")
    create(broker.bootstrap, topic, EAGER)
    produced = jvm.run("CompactedChecks", ["produce", broker.bootstrap, topic, "20", "5"], 240)
    assert produced == {"acked": 101}
    everything = [*rounds(keys=20, rounds=5), Msg(0, b"k0", b"last")]

    def cleaned() -> list[tuple[int, bytes, bytes | None]]:
        # The Java producer sends a batch a record, so the newest segment (never cleaned
        # while no write follows it) holds the last dozen records: at most 40 are left.
        got = read_all(broker.bootstrap, topic)
        assert len(got) <= 40, f"{len(got)} records left"
        return got

    view = settled(cleaned, timeout=60)
    assert_a_cleaning_of(view, everything)
    got = jvm.run("CompactedChecks", ["consume", broker.bootstrap, topic], 240)
    java = [(o, k.encode(), v.encode()) for o, k, v in got["records"]]
    assert_a_cleaning_of(java, everything)
    # (a later cleaning may have gone further meanwhile: it only ever removes records)
    assert set(java) <= set(view), "the Java consumer read what librdkafka read, or less"
    assert got["position"] == got["end"] == len(everything)


def test_tombstones_go_delete_retention_after_their_first_cleaning(broker_factory):
    broker = broker_factory(CLEANER_ARGS)
    topic = unique("compact-tombstones")
    create(broker.bootstrap, topic, {**EAGER, "delete.retention.ms": "3000"})
    msgs = [Msg(0, b"a", b"a0"), Msg(0, b"b", b"b1"), Msg(0, b"a", None)]
    confluent_produce(broker.bootstrap, topic, msgs)
    # In a segment of their own before the next write (a few records fill no segment.bytes).
    wait_for_segments(broker, topic, 1)
    confluent_produce(broker.bootstrap, topic, [Msg(0, b"c", b"c3")])

    def tombstone_kept():
        got = read_all(broker.bootstrap, topic)
        assert got == [(1, b"b", b"b1"), (2, b"a", None), (3, b"c", b"c3")]

    settled(tombstone_kept, timeout=60)
    kept_at = time.monotonic()
    # later writes make the log dirty again: past the horizon a cleaning removes it
    for i in range(4, 40):
        confluent_produce(broker.bootstrap, topic, [Msg(0, b"d", b"d%d" % i)])
        got = read_all(broker.bootstrap, topic)
        if (2, b"a", None) not in got:
            break
        time.sleep(0.25)
    assert (2, b"a", None) not in got, "the tombstone outlived its horizon"
    assert time.monotonic() - kept_at >= 2.5, "removed before delete.retention.ms"
    assert got[0] == (1, b"b", b"b1") and (3, b"c", b"c3") in got


def test_a_record_without_a_key_is_refused_as_kafka_refuses_it(broker_factory):
    broker = broker_factory(CLEANER_ARGS)
    topic = unique("compact-nokey")
    create(broker.bootstrap, topic, {"cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as refused:
        confluent_produce(broker.bootstrap, topic, [Msg(0, None, b"v")], extra={"retries": 0})
    assert refused.value.args[0].name() == "INVALID_RECORD"
    assert confluent_produce(broker.bootstrap, topic, [Msg(0, b"k", b"v")]) == [(0, 0)]
    # DeleteRecords on a topic compacted alone: POLICY_VIOLATION, as Kafka answers
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (deleting,) = admin.delete_records([TopicPartition(topic, 0, 1)]).values()
    with pytest.raises(KafkaException) as policy:
        deleting.result(timeout=30)
    assert policy.value.args[0].name() == "POLICY_VIOLATION"


def test_the_policy_changes_on_a_live_topic(broker_factory):
    broker = broker_factory(CLEANER_ARGS)
    topic = unique("compact-alter")
    create(broker.bootstrap, topic, {"min.cleanable.dirty.ratio": "0.01", "segment.bytes": "1024"})
    msgs = rounds(keys=5, rounds=4)
    confluent_produce(broker.bootstrap, topic, msgs)
    wait_for_segments(broker, topic, 1)
    confluent_produce(broker.bootstrap, topic, [Msg(0, b"k0", b"last")])
    time.sleep(1.0)  # five cleaner rounds: a delete topic is never cleaned
    assert len(read_all(broker.bootstrap, topic)) == len(msgs) + 1
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    change = ConfigEntry(
        "cleanup.policy", "compact,delete", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource("topic", topic, incremental_configs=[change])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    described = admin.describe_configs([ConfigResource("topic", topic)])
    (configs,) = [f.result(timeout=30) for f in described.values()]
    assert configs["cleanup.policy"].value == "compact,delete"

    def cleaned():
        got = read_all(broker.bootstrap, topic)
        assert got == cleaned_view([*msgs, Msg(0, b"k0", b"last")], tail=1)

    settled(cleaned, timeout=60)
    described = ok("topics", "describe", topic, "--bootstrap-server", broker.bootstrap).out
    (policy,) = [line for line in described.splitlines() if line.split()[:1] == ["cleanup.policy"]]
    assert "compact,delete" in policy and "topic" in policy, policy


def test_an_owner_killed_while_cleaning_loses_nothing_and_resurrects_no_key(cluster):
    """Three brokers (etcd, S3), the topic's owner cleaning every 100 ms: after it has cleaned
    at least once it is killed -9 while rounds of writes (some of them tombstones) go on
    through the next owner. Every record a consumer then reads is the one acknowledged at its
    offset, and each key's last record read is its last one acknowledged: nothing lost, no
    older value back in place of a later one or of a tombstone."""
    c = cluster(3, args=["--log-cleaner-backoff-ms", "100", "--file-delete-delay-ms", "500"])
    topic = unique("compact-kill")
    create(c.bootstrap(), topic, EAGER)
    acked: dict[int, Msg] = {}

    def write(round_: int) -> None:
        msgs = [
            Msg(0, f"k{k}".encode(), None if (k + round_) % 7 == 0 else b"r%d-k%d" % (round_, k))
            for k in range(30)
        ]
        offsets = confluent_produce(c.bootstrap(), topic, msgs, idempotent=True)
        acked.update({offset: m for (_, offset), m in zip(offsets, msgs, strict=True)})

    for round_ in range(4):
        write(round_)
    owner = c.owner(topic, 0)

    def cleaned_once() -> None:
        assert "cleaned a compacted partition" in owner.log_text()

    settled(cleaned_once, timeout=60)
    owner.kill()
    for round_ in range(4, 10):
        write(round_)
    stored = [acked[o] for o in sorted(acked)]
    assert sorted(acked) == list(range(len(stored))), "every offset acknowledged once"
    next_owner = c.owner(topic, 0)
    assert next_owner is not owner

    def cleaned_again() -> list[tuple[int, bytes, bytes | None]]:
        assert "cleaned a compacted partition" in next_owner.log_text()
        return read_all(c.bootstrap(), topic)

    view = settled(cleaned_again, timeout=60)
    assert_a_cleaning_of(view, stored)
    last_read = {k: (o, v) for o, k, v in view}
    assert last_read == latest(stored), "each key's last record acknowledged is its last read"
