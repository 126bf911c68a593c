"""Kafka Streams (kafka-streams 4.4, pinned in tests/jvm/pom.xml) against a broker, in its
defaults (at-least-once, offsets committed on close): tests/jvm's StreamsChecks runs a topology
until it has handled the records expected, then closes; these tests check its output topic.

A stateful topology keeps its state in a changelog topic, which Kafka Streams creates
compacted (``cleanup.policy=compact``): the broker here cleans it eagerly (small segments, a
cleaner round every 200 ms), and the application's second run restores its counts from the
cleaned changelog into a fresh state directory.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from support import jvm
from support.clients import HANG_GUARD, unique
from support.procs import settled

BATCH = 120  # records per run; every fourth is one the stateless topology drops


@pytest.fixture(scope="module")
def sbroker(module_broker_factory):
    cleaner = [
        "--segment-bytes",
        "2048",
        "--log-cleaner-backoff-ms",
        "200",
        "--log-cleaner-min-cleanable-ratio",
        "0.01",
    ]
    return module_broker_factory(["--default-partitions", "2", *cleaner])


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i % 5}", value=value)
    assert producer.flush(HANG_GUARD) == 0


def consume_all(bootstrap: str, topic: str, n: int) -> list[tuple[str, str]]:
    """(key, value) of the first ``n`` records of ``topic``, in each partition's order (a
    bounded wait for them)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    records: list[tuple[str, str]] = []
    deadline = time.monotonic() + HANG_GUARD
    try:
        while len(records) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records.append((msg.key().decode(), msg.value().decode()))
    finally:
        consumer.close()
    return records


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

    values = sorted(value for _, value in consume_all(b, dst, 2 * kept))
    expected = sorted(v.upper() for v in first + second if v.startswith("keep"))
    assert values == expected


def test_a_stateful_topology_restores_its_counts_from_its_cleaned_changelog(sbroker, tmp_path):
    """Counts per word, run twice under one application id with records written before each
    run; the second run starts with an empty state directory, so its counts come back from
    the changelog topic, which the broker has cleaned meanwhile. Every count the topology
    writes is then the running total of its word."""
    b = sbroker.bootstrap
    src, dst, app = unique("streams-in"), unique("streams-out"), unique("streams-count")
    words = [f"word-{i % 7}" for i in range(2 * BATCH)]
    # The first half in two runs: the changelog then has a segment older than its newest
    # (which the cleaner leaves while nothing follows it) in each partition.
    half = BATCH // 2
    for chunk in (words[:half], words[half:BATCH]):
        produce(b, src, chunk)
        got = streams("stateful", b, app, src, dst, tmp_path / "first", half)
        assert got == {"state": "NOT_RUNNING", "handled": half, "error": None}

    def changelog_cleaned() -> None:
        cleaned = re.findall(r'cleaned a compacted partition topic="?([^" ]+)', sbroker.log_text())
        assert any(t.startswith(app) and t.endswith("-changelog") for t in cleaned), cleaned

    settled(changelog_cleaned, timeout=60)
    produce(b, src, words[BATCH:])
    got = streams("stateful", b, app, src, dst, tmp_path / "second", BATCH)
    assert got == {"state": "NOT_RUNNING", "handled": BATCH, "error": None}

    counts = consume_all(b, dst, 2 * BATCH)
    assert len(counts) == 2 * BATCH
    seen: dict[str, int] = {}
    for word, count in counts:
        seen[word] = seen.get(word, 0) + 1
        assert int(count) == seen[word], f"{word}: count {count} where {seen[word]} was due"
    assert seen == {w: words.count(w) for w in set(words)}
