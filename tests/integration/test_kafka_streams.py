"""Kafka Streams (kafka-streams 4.4, pinned in tests/jvm/pom.xml) against a broker, in its
defaults (at-least-once, offsets committed on close): tests/jvm's StreamsChecks runs a topology
until it has handled the records expected, then closes; these tests check its output topic.

A stateful topology needs a changelog topic, which Kafka Streams creates compacted
(``cleanup.policy=compact``). KafScale does not compact topics yet and refuses that config
(INVALID_CONFIG), so the stateful application stops at start-up: the test of it pins down
exactly that failure, and is to be turned into a check of the counts once compacted topics
exist.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from support import jvm
from support.clients import HANG_GUARD, unique

BATCH = 120  # records per run; every fourth is one the stateless topology drops


@pytest.fixture(scope="module")
def sbroker(module_broker_factory):
    return module_broker_factory(["--default-partitions", "2"])


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i % 5}", value=value)
    assert producer.flush(HANG_GUARD) == 0


def consume_all(bootstrap: str, topic: str, n: int) -> list[str]:
    """The values of the first ``n`` records of ``topic`` (a bounded wait for them)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + HANG_GUARD
    try:
        while len(values) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def streams(kind: str, bootstrap: str, app: str, src: str, dst: str, tmp, n: int) -> dict[str, Any]:
    args = [kind, bootstrap, app, src, dst, str(tmp / "state"), str(n)]
    return jvm.run("StreamsChecks", args, timeout=240)


def test_a_stateless_topology_handles_each_record_once_across_a_restart(sbroker, tmp_path):
    """Filter and map, run twice under one application id with records written before each
    run: the second run starts from the offsets the first committed, so the output holds each
    kept record once, transformed."""
    b = sbroker.bootstrap
    src, dst, app = unique("streams-in"), unique("streams-out"), unique("streams-app")
    first = [("skip" if i % 4 == 0 else "keep") + f"-{i}" for i in range(BATCH)]
    second = [("skip" if i % 4 == 0 else "keep") + f"-{i}" for i in range(BATCH, 2 * BATCH)]
    kept = BATCH * 3 // 4
    produce(b, src, first)
    got = streams("stateless", b, app, src, dst, tmp_path, kept)
    assert got == {"state": "NOT_RUNNING", "handled": kept, "error": None}
    produce(b, src, second)
    got = streams("stateless", b, app, src, dst, tmp_path, kept)
    assert got == {"state": "NOT_RUNNING", "handled": kept, "error": None}

    values = sorted(consume_all(b, dst, 2 * kept))
    expected = sorted(v.upper() for v in first + second if v.startswith("keep"))
    assert values == expected


def test_a_stateful_topology_stops_at_its_compacted_changelog_topic(sbroker, tmp_path):
    """Counts per key: Kafka Streams asks for its changelog topic with cleanup.policy=compact,
    the broker answers INVALID_CONFIG (topics are not compacted yet), and the application
    stops with that error before handling a record."""
    b = sbroker.bootstrap
    src, dst, app = unique("streams-in"), unique("streams-out"), unique("streams-count")
    produce(b, src, [f"word-{i % 7}" for i in range(BATCH)])
    got = streams("stateful", b, app, src, dst, tmp_path, BATCH)
    assert (got["state"], got["handled"]) == ("ERROR", 0), got
    assert re.search(
        r"Could not create topic \S+-changelog\b.*InvalidConfigurationException: "
        r"cleanup.policy='compact' is not supported: KafScale has no log compaction",
        got["error"],
    ), got["error"]
