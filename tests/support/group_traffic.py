"""Traffic for the metrics tests: records on two partitions, and a consumer group that read
and committed them (so that its lag shows once more records arrive)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from confluent_kafka import Consumer, Producer


def produce(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records of 100 bytes, alternating between partitions 0 and 1."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=str(i % 2).encode(), value=b"v" * 100, partition=i % 2)
    assert producer.flush(30) == 0


@contextlib.contextmanager
def consumed_and_committed(bootstrap: str, topic: str, group: str, count: int) -> Iterator:
    """A member of ``group`` that has read ``count`` records of ``topic`` from the start and
    committed; it stays in the group until the block ends."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        seen, deadline = 0, time.monotonic() + 60
        while seen < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == count
        consumer.commit(asynchronous=False)
        yield consumer
    finally:
        consumer.close()
