"""Rack awareness (Kafka's broker.rack and KIP-392 fetch from follower) as the tests see it: the
racks Metadata lists, Fetch v11 naming a consumer's rack (with the preferred read replica of the
answer), a broker's traffic counters from its /metrics endpoint, consumer group members that keep
every record they read (confluent-kafka, and the Java client as Kafka's console consumer), and a
group's committed offsets.

Encodings follow the Kafka protocol guide, as support/kafka_wire does; nothing here comes from
kafscale.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from . import jvm
from . import kafka_wire as kw
from .clients import HANG_GUARD, unique

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
NO_REPLICA = -1  # preferred_read_replica when the broker answered the partition itself


# ---------------------------------------------------------------------------------------------
# Metadata: the brokers and their racks


def metadata_racks(conn: kw.RawConnection, version: int) -> dict[int, str | None]:
    """{broker id: rack} as Metadata ``version`` (1-12) lists the brokers, asking for no
    topic. Only the brokers array is read."""
    assert 1 <= version <= 12, version
    if version >= 9:
        w = kw.Writer().uvarint(1)  # compact array of no topics
        w.boolean(False)  # allow auto topic creation
        if version <= 10:
            w.boolean(False)  # include cluster authorized operations
        w.boolean(False)  # include topic authorized operations
        r = conn.request(kw.METADATA, version, w.tagged_fields().done(), flexible=True)
        r.i32()  # throttle
        out: dict[int, str | None] = {}
        for _ in range(r.compact_array_len()):
            node, _host, _port = r.i32(), r.compact_string(), r.i32()
            out[node] = r.compact_string()
            r.skip_tagged_fields()
        return out
    r = conn.request(kw.METADATA, version, kw.metadata_body(version, [], False))
    if version >= 3:
        r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        node, _host, _port = r.i32(), r.string(), r.i32()
        out[node] = r.string()
    return out


# ---------------------------------------------------------------------------------------------
# Fetch v11 with a rack id


@dataclass(frozen=True)
class RackFetch:
    """One partition of a Fetch v11 answer."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    preferred_read_replica: int
    records: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.records)


def fetch_v11_body(
    topic: str,
    partition: int,
    offset: int,
    rack_id: str,
    isolation_level: int,
    max_wait_ms: int,
) -> bytes:
    return (
        kw.Writer()
        .i32(-1)  # replica id: a consumer
        .i32(max_wait_ms)
        .i32(1)  # min bytes
        .i32(50 * 1024 * 1024)  # max bytes
        .i8(isolation_level)
        .i32(0)  # session id: no fetch session
        .i32(-1)  # session epoch: full fetch, no session
        .array_len(1)
        .string(topic)
        .array_len(1)
        .i32(partition)
        .i32(kw.NO_EPOCH)  # current leader epoch: not checked
        .i64(offset)
        .i64(-1)  # log start offset (followers only)
        .i32(10 * 1024 * 1024)  # partition max bytes
        .array_len(0)  # forgotten topics
        .string(rack_id)
        .done()
    )


def fetch_v11(
    conn: kw.RawConnection,
    topic: str,
    partition: int,
    offset: int = 0,
    *,
    rack_id: str = "",
    isolation_level: int = READ_UNCOMMITTED,
    client_id: str = "kafscale-tests",
    max_wait_ms: int = 100,
) -> RackFetch:
    """Fetch v11 of one partition from ``offset`` by a consumer in ``rack_id`` ("" for none)
    calling itself ``client_id``; its answer for the partition, preferred read replica
    included."""
    body = fetch_v11_body(topic, partition, offset, rack_id, isolation_level, max_wait_ms)
    r = conn.request(kw.FETCH, 11, body, client_id=client_id)
    r.i32()  # throttle
    error = r.i16()
    assert error == kw.NONE, f"Fetch v11 top-level error {error}"
    r.i32()  # session id
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            part, err, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
            r.i64()  # log start offset
            for _ in range(max(0, r.array_len())):  # aborted transactions
                r.i64()
                r.i64()
            preferred = r.i32()
            out[(name, part)] = RackFetch(err, hw, lso, preferred, r.bytes_() or b"")
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after Fetch v11"
    assert set(out) == {(topic, partition)}, out
    return out[(topic, partition)]


# ---------------------------------------------------------------------------------------------
# A broker's counters


ZONES = ("same", "cross", "unknown")


class BrokerMetrics:
    """The /metrics endpoint of one broker (its --metrics-addr)."""

    def __init__(self, addr: str) -> None:
        self.url = f"http://{addr}/metrics"

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample, keyed by (name, sorted labels)."""
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            body = answer.read().decode()
        families = text_string_to_metric_families(body)  # type: ignore[no-untyped-call]
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in families
            for s in family.samples
        }

    def traffic(self, topic: str) -> Traffic:
        """The counters the rack tests read, at one instant."""
        samples = self.samples()

        def get(name: str, **labels: str) -> float:
            return samples.get((name, tuple(sorted(labels.items()))), 0.0)

        return Traffic(
            fetch_bytes=get("kafscale_fetch_bytes_total", topic=topic),
            produce_bytes=get("kafscale_produce_bytes_total", topic=topic),
            zone_fetch={z: get("kafscale_zone_fetch_bytes_total", zone=z) for z in ZONES},
            zone_produce={z: get("kafscale_zone_produce_bytes_total", zone=z) for z in ZONES},
        )


@dataclass(frozen=True)
class Traffic:
    """One broker's counters: bytes of one topic fetched and produced (per-topic counters),
    and the zone counters (every topic) by zone."""

    fetch_bytes: float
    produce_bytes: float
    zone_fetch: dict[str, float]
    zone_produce: dict[str, float]

    def __sub__(self, before: Traffic) -> Traffic:
        return Traffic(
            self.fetch_bytes - before.fetch_bytes,
            self.produce_bytes - before.produce_bytes,
            {z: v - before.zone_fetch[z] for z, v in self.zone_fetch.items()},
            {z: v - before.zone_produce[z] for z, v in self.zone_produce.items()},
        )


def traffic(metrics: dict[int, BrokerMetrics], topic: str) -> dict[int, Traffic]:
    """Each broker's counters: {broker id: Traffic}."""
    return {bid: m.traffic(topic) for bid, m in metrics.items()}


def grown(after: dict[int, Traffic], before: dict[int, Traffic]) -> dict[int, Traffic]:
    """What each broker of ``after`` counted since ``before``."""
    return {bid: t - before[bid] for bid, t in after.items()}


# ---------------------------------------------------------------------------------------------
# A consumer group member (confluent-kafka) keeping what it reads


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    value: bytes | None


class GroupReader:
    """A confluent-kafka consumer in a group of its own, in librdkafka's defaults plus
    ``conf``, subscribed to ``topic`` from the earliest offset. ``read_until`` polls until the
    topic's partitions have been read up to given ends; ``reads`` keeps every record in the
    order the application got it, ``errors`` every error event (librdkafka reports a broker
    going away as one; a fatal one fails at once)."""

    def __init__(self, bootstrap: str, topic: str, conf: dict[str, Any] | None = None) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("rack-group"),
                "auto.offset.reset": "earliest",
                **(conf or {}),
            }
        )
        self.consumer.subscribe([topic])
        self.reads: dict[int, list[Read]] = defaultdict(list)
        self.errors: list[str] = []

    def next_offset(self, partition: int) -> int:
        """The offset after the last record read from ``partition`` (0 if none)."""
        got = self.reads.get(partition)
        return got[-1].offset + 1 if got else 0

    def read_until(self, ends: dict[int, int], timeout: float = HANG_GUARD) -> None:
        """Poll until every partition of ``ends`` has been read up to its end."""
        deadline = time.monotonic() + timeout
        while any(self.next_offset(p) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                have = {p: self.next_offset(p) for p in ends}
                raise AssertionError(
                    f"read up to {have} of {ends} in {timeout}s; errors: {self.errors[-10:]}"
                )
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise AssertionError(f"fatal consumer error: {err}")
                self.errors.append(str(err))
                continue
            self.reads[msg.partition()].append(Read(msg.partition(), msg.offset(), msg.value()))

    def commit(self) -> None:
        """Commits the offsets of what the application has read (synchronously)."""
        self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> GroupReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def offset_problems(reads: list[Read], start: int = 0) -> list[str]:
    """Where a partition's reads, in the order they came, are not ``start``, ``start + 1``,
    ...: a gap (an offset skipped) or a step back (an offset read again)."""
    problems = []
    expected = start
    for r in reads:
        if r.offset > expected:
            problems.append(f"offsets {expected}..{r.offset - 1} skipped")
        elif r.offset < expected:
            problems.append(f"offset {r.offset} read again after {expected - 1}")
        expected = r.offset + 1
    return problems


# ---------------------------------------------------------------------------------------------
# A consumer group member (the Java client: Kafka's console consumer) keeping what it reads


CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
# what the console consumer prints of a record with print.partition and print.offset
_PRINTED = re.compile(r"Partition:(\d+)\tOffset:(\d+)\t(.*)")


class ConsoleReader:
    """Kafka's console consumer (the Java KafkaConsumer in its defaults plus ``props``) in group
    ``group``, subscribed to ``topic`` from the earliest offset, printing each record's
    partition, offset and value until it has printed ``max_messages`` records, then closing
    (which commits what it read) and exiting. A thread collects its stdout lines as they come;
    ``read_until`` takes them until the topic's partitions have been read up to given ends,
    ``reads`` keeps every record in the order the consumer printed it. Its stderr (the client's
    warnings) goes to ``stderr``."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        max_messages: int,
        props: dict[str, str],
        stderr: Path,
    ) -> None:
        args = [
            *("--bootstrap-server", bootstrap, "--topic", topic, "--group", group),
            *("--from-beginning", "--max-messages", str(max_messages)),
            *("--formatter-property", "print.partition=true"),
            *("--formatter-property", "print.offset=true"),
        ]
        for name, setting in props.items():
            args += ["--command-property", f"{name}={setting}"]
        self.stderr_path = stderr
        self._stderr: IO[str] = stderr.open("w")
        self.proc = subprocess.Popen(
            jvm.command(CONSOLE_CONSUMER, args),
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read_stdout, daemon=True)
        self._pump.start()
        self.reads: dict[int, list[Read]] = defaultdict(list)
        self.other: list[str] = []  # stdout lines that are not a printed record (notices)
        self.exited = False

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _take(self, line: str) -> None:
        printed = _PRINTED.fullmatch(line)
        if printed is None:
            self.other.append(line)
            return
        p, offset = int(printed.group(1)), int(printed.group(2))
        self.reads[p].append(Read(p, offset, printed.group(3).encode()))

    def stderr(self) -> str:
        self._stderr.flush()
        return "\n".join(self.stderr_path.read_text().splitlines()[-30:])

    def next_offset(self, partition: int) -> int:
        """The offset after the last record read from ``partition`` (0 if none)."""
        got = self.reads.get(partition)
        return got[-1].offset + 1 if got else 0

    def read_until(self, ends: dict[int, int], timeout: float = HANG_GUARD) -> None:
        """Take printed records until every partition of ``ends`` has been read up to its end;
        fails if the consumer exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while any(self.next_offset(p) < end for p, end in ends.items()):
            have = {p: self.next_offset(p) for p in ends}
            if self.exited:
                raise AssertionError(
                    f"the console consumer exited {self.proc.wait()} having read up to {have} "
                    f"of {ends}; other output {self.other[-5:]}\n{self.stderr()}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"read up to {have} of {ends} in {timeout}s; other output {self.other[-5:]}"
                    f"\n{self.stderr()}"
                )
            try:
                line = self._lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:
                self.exited = True
            else:
                self._take(line)

    def finish(self, timeout: float = HANG_GUARD) -> int:
        """Waits for the consumer to exit (it has printed ``max_messages`` records) and takes
        the rest of its output; its exit code."""
        code = self.proc.wait(timeout)
        self._pump.join(timeout)
        while not self.exited:
            line = self._lines.get_nowait()
            if line is None:
                self.exited = True
            else:
                self._take(line)
        return code

    def close(self) -> None:
        """kill -9 if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._pump.join(10)
        self._stderr.close()

    def __enter__(self) -> ConsoleReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """``group``'s committed offsets of ``topic``'s partitions (-1: none), as its coordinator
    answers OffsetFetch to a librdkafka client that does not join the group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        asked = [TopicPartition(topic, p) for p in range(partitions)]
        answered = consumer.committed(asked, HANG_GUARD)
    finally:
        consumer.close()
    return {tp.partition: max(tp.offset, -1) for tp in answered}
