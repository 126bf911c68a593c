"""A restarted broker takes over every partition it owned, a few thousand of them, after SIGKILL
and after SIGTERM (issue 12: claims go in batched transactions and read nothing from S3; the
reconciler is woken by the owner keys' deletions, not by a periodic scan)."""

from __future__ import annotations

import random
import time

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import unique

TOPICS = 30
# A topic's partitions are seeded in one etcd transaction (at most 128 operations).
PER_TOPIC = 100
TAKEOVER_TIMEOUT = 120.0  # liveness guard only


def create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, PER_TOPIC, 1) for n in names], operation_timeout=60)
    for future in futures.values():
        future.result(timeout=120)


def epochs_owned_by(meta, topics: list[str], broker_id: int) -> dict[tuple[str, int], int]:
    """{(topic, partition): leader epoch} of the partitions ``broker_id`` owns."""
    out = {}
    for topic in topics:
        owners = meta.owners(topic)
        for p, record in meta.partitions(topic).items():
            if owners.get(p) == broker_id:
                out[(topic, p)] = record.leader_epoch
    return out


def wait_for(check, what: str) -> None:
    deadline = time.monotonic() + TAKEOVER_TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.parametrize("stop", ["sigkill", "sigterm"])
def test_restarted_broker_takes_over_thousands_of_partitions(cluster, stop):
    c = cluster(1, lease_ttl_ms=3000)
    broker = c.brokers[1]
    topics = [unique("takeover") for _ in range(TOPICS)]
    create_topics(broker.bootstrap, topics)
    total = TOPICS * PER_TOPIC
    wait_for(
        lambda: len(epochs_owned_by(c.meta, topics, 1)) == total,
        "the broker did not claim every new partition",
    )
    before = epochs_owned_by(c.meta, topics, 1)

    if stop == "sigterm":
        assert broker.terminate() == 0
    else:
        broker.kill()
    broker.start()

    def taken_over() -> bool:
        now = epochs_owned_by(c.meta, topics, 1)
        return len(now) == total and all(now[k] > before[k] for k in before)

    wait_for(taken_over, f"not every one of {total} partitions was claimed again")
    rng = random.Random(12)
    sample = rng.sample(sorted(before), 30)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        for topic, p in sample:
            batch = sf.build_record_batch([(None, b"after-restart", [])])
            result = kw.produce(conn, topic, p, batch)
            assert (result.error_code, result.base_offset) == (kw.NONE, 0), (topic, p, result)
