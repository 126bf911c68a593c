"""MirrorMaker 2 (4.3, tests/jvm/connect's Maven module) in its dedicated mode, copying a topic
from one KafScale cluster to another as Kafka's example ``connect-mirror-maker.properties``
sets it up: the records arrive in the target's ``source.<topic>`` with their keys, values and
order, and MirrorMaker keeps its configs, offsets and statuses in compacted topics of the
clusters."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from support import jvm
from support.clients import HANG_GUARD, Msg, confluent_produce, unique

MIRROR_MAKER = "org.apache.kafka.connect.mirror.MirrorMaker"
WAIT_S = 120.0  # liveness guard: MirrorMaker's start and the copy


def read(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record of partition 0 of ``topic`` so far (none if it does not
    exist yet)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("mirror-read"),
            "enable.auto.commit": False,
        }
    )
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return []
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + HANG_GUARD
        while len(got) < high and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


def test_mirror_maker_copies_a_topic_between_two_clusters(broker_factory, tmp_path: Path):
    source = broker_factory(name="source")
    target = broker_factory(name="target")
    topic = unique("mirrored")
    msgs = [Msg(0, b"k%d" % (i % 17), b"value-%d" % i) for i in range(200)]
    confluent_produce(source.bootstrap, topic, msgs)
    config = tmp_path / "mm2.properties"
    config.write_text(
        "\n".join(
            [
                "clusters = source, target",
                f"source.bootstrap.servers = {source.bootstrap}",
                f"target.bootstrap.servers = {target.bootstrap}",
                "source->target.enabled = true",
                f"source->target.topics = {topic}",
                "replication.factor = 1",
                "checkpoints.topic.replication.factor = 1",
                "heartbeats.topic.replication.factor = 1",
                "offset-syncs.topic.replication.factor = 1",
                "offset.storage.replication.factor = 1",
                "status.storage.replication.factor = 1",
                "config.storage.replication.factor = 1",
                "refresh.topics.interval.seconds = 1",
                "sync.topic.acls.enabled = false",
                "",
            ]
        )
    )
    expected = [(m.key, m.value) for m in msgs]
    mirrored = f"source.{topic}"
    with jvm.stopped_after(jvm.CONNECT.command(MIRROR_MAKER, [str(config)]), WAIT_S) as alive:
        while (got := read(target.bootstrap, mirrored)) != expected:
            alive(f"{len(got)} of {len(expected)} mirrored")
            time.sleep(0.5)
    # its state: compacted topics it created on the target
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    internal = [t for t in admin.list_topics(timeout=10).topics if t.startswith("mm2-")]
    assert internal, "MirrorMaker's internal topics"
    resources = [ConfigResource("topic", t) for t in internal]
    policies = {
        r.name: configs["cleanup.policy"].value
        for r, future in admin.describe_configs(resources).items()
        for configs in [future.result(timeout=30)]
    }
    assert set(policies.values()) == {"compact"}, policies
