"""Topics of any size: a topic is one metadata key whatever its partition count, and partition
records come with the first claim. Before, every partition record was written in the topic's
own transaction: on etcd (128 operations per transaction) a topic of 128 partitions or more, or
CreatePartitions past that, failed with KAFKA_STORAGE_ERROR "metadata store unavailable".

Both the embedded default and a 3-broker cluster on etcd: CreateTopics of 10,000 partitions and
CreatePartitions from 100 to 3,000 through confluent-kafka's AdminClient, records produced to
and consumed from the highest partitions, and Metadata lists every partition with a leader.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from support.clients import Msg, confluent_consume, confluent_produce, unique
from support.load import wait_for

BIG = 10_000
GROWN_FROM, GROWN_TO = 100, 3_000


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, topic: str, partitions: int) -> None:
    client = admin(bootstrap)  # kept alive until the answer is in
    futures = client.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=60)
    futures[topic].result(timeout=120)


def grow(bootstrap: str, topic: str, partitions: int) -> None:
    client = admin(bootstrap)
    futures = client.create_partitions([NewPartitions(topic, partitions)], operation_timeout=60)
    futures[topic].result(timeout=120)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: leader} as Metadata reports it, after checking every partition's error."""
    client = admin(bootstrap)
    described = client.list_topics(topic, timeout=60).topics[topic]
    assert described.error is None, described.error
    for p in described.partitions.values():
        assert p.error is None, f"partition {p.id}: {p.error}"
    return {p.id: p.leader for p in described.partitions.values()}


def round_trip(bootstrap: str, topic: str, partitions: list[int]) -> None:
    msgs = [Msg(p, f"k{p}".encode(), f"v{p}-{i}".encode()) for p in partitions for i in range(2)]
    delivered = confluent_produce(bootstrap, topic, msgs)
    assert sorted(delivered) == sorted((p, i) for p in partitions for i in range(2))
    got = confluent_consume(bootstrap, topic, dict.fromkeys(partitions, 2))
    assert sorted((g.partition, g.offset, g.value) for g in got) == sorted(
        (m.partition, i % 2, m.value) for i, m in enumerate(msgs)
    )


def check_topics_of_any_size(bootstrap: str, live: set[int]) -> None:
    big, grown = unique("big"), unique("grown")
    create(bootstrap, big, BIG)
    create(bootstrap, grown, GROWN_FROM)
    grow(bootstrap, grown, GROWN_TO)

    assert set(leaders(bootstrap, big)) == set(range(BIG))
    led = leaders(bootstrap, grown)
    assert set(led) == set(range(GROWN_TO))
    assert set(led.values()) <= live, set(led.values()) - live
    round_trip(bootstrap, big, [0, BIG - 2, BIG - 1])
    round_trip(bootstrap, grown, [GROWN_FROM - 1, GROWN_FROM, GROWN_TO - 1])


def test_topics_of_any_size_on_the_embedded_store(broker):
    check_topics_of_any_size(broker.bootstrap, {0})


@pytest.mark.parametrize("brokers", [3])
def test_topics_of_any_size_on_etcd(cluster, brokers):
    c = cluster(brokers)
    check_topics_of_any_size(c.bootstrap(), c.live_ids)
    # the records of the claimed partitions are in etcd now; none beyond the topic's count
    client = admin(c.bootstrap())
    big = next(t for t in client.list_topics(timeout=30).topics if "big" in t)
    assert max(c.meta.partitions(big)) == BIG - 1
    # and deleting it removes the topic at once, then, once every owner has let go of its
    # partitions (each removes its owner keys), the 10,000 records (one etcd delete-range)
    deleted = client.delete_topics([big], operation_timeout=60)[big]
    deleted.result(timeout=120)
    assert c.meta.topic(big) is None
    started = time.monotonic()
    wait_for(
        lambda: c.meta.client.range(f"{c.meta.root}/partitions/{big}/") == {},
        120,
        f"the partition keys of {big} removed",
    )
    print(f"partition keys of {BIG} partitions removed in {time.monotonic() - started:.1f} s")
