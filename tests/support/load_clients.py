"""The client threads of a ``Workload`` (support/load.py): producers sending unique values
round-robin at a steady rate and recording every acknowledgement, from confluent-kafka (with or
without idempotence) and from kafka-python (its defaults, idempotent), and a consumer reading
every partition along."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass


def producer_config(bootstrap: str, retries: bool, idempotent: bool = False) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": idempotent,
        "linger.ms": 5,
        # a stalled request fails (single-shot) or is retried (retrying) after 5 s; a message
        # is given up after 30 s, far longer than any fault here lasts
        "request.timeout.ms": 5000,
        "message.timeout.ms": 30000,
        "message.send.max.retries": 2_147_483_647 if retries else 0,
        "retry.backoff.ms": 100,
        "retry.backoff.max.ms": 1000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 1000,
        "error_cb": lambda err: None,  # transport errors are expected under faults
    }


class LoadProducer:
    """A producer thread sending ``rate`` unique values per second round-robin."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        name: str,
        retries: bool,
        rate: int,
        idempotent: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.name = name
        self.retries = retries
        self.idempotent = idempotent
        self.rate = rate
        self.lock = threading.Lock()
        self.sent: dict[bytes, int] = {}  # value -> partition
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed: dict[bytes, str] = {}  # value -> delivery error
        self.acks_per_partition: dict[int, int] = defaultdict(int)
        self.unresolved = 0
        self.crash: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{name}", daemon=True)

    def start(self) -> LoadProducer:
        self._thread.start()
        return self

    def _on_delivery(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.value()] = (msg.partition(), msg.offset())
                self.acks_per_partition[msg.partition()] += 1
            else:
                self.failed[msg.value()] = err.name()

    def _run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(producer_config(self.bootstrap, self.retries, self.idempotent))
            i = 0
            t0 = time.monotonic()
            while not self._stop.is_set():
                due = int((time.monotonic() - t0) * self.rate)
                if due - i > self.rate:  # fell behind (client queue full): do not burst
                    t0 += (due - i - self.rate) / self.rate
                while i < due:
                    value, partition = self.next_value(i)
                    try:
                        producer.produce(
                            self.topic,
                            value=value,
                            partition=partition,
                            on_delivery=self._on_delivery,
                        )
                    except BufferError:
                        break
                    with self.lock:
                        self.sent[value] = partition
                    i += 1
                producer.poll(0.005)
            self.unresolved = producer.flush(45)
        except BaseException as exc:  # reported by stop()
            self.crash = exc

    def next_value(self, i: int) -> tuple[bytes, int]:
        """The ``i``-th value sent and its partition (round-robin)."""
        return f"{self.name}-{i:07d}".encode(), i % self.partitions

    def stop(self) -> None:
        """Stop sending, wait for every delivery report (message.timeout.ms bounds it)."""
        self._stop.set()
        self._thread.join(90)
        assert not self._thread.is_alive(), f"producer {self.name} did not stop"
        if self.crash is not None:
            raise AssertionError(f"producer {self.name} crashed: {self.crash!r}")

    def counts(self) -> dict[int, int]:
        with self.lock:
            return dict(self.acks_per_partition)


class KafkaPythonLoadProducer(LoadProducer):
    """The same load from kafka-python with its defaults (an idempotent producer since 3.0),
    and the same fault-tolerance timings as ``producer_config``."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, name: str, rate: int):
        super().__init__(
            bootstrap, topic, partitions, name=name, retries=True, rate=rate, idempotent=True
        )

    def _acked(self, value: bytes, md) -> None:
        with self.lock:
            self.acked[value] = (md.partition, md.offset)
            self.acks_per_partition[md.partition] += 1

    def _failed(self, value: bytes, exc: BaseException) -> None:
        with self.lock:
            self.failed[value] = type(exc).__name__

    def _run(self) -> None:
        from kafka import KafkaProducer

        try:
            producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                linger_ms=5,
                request_timeout_ms=5000,
                delivery_timeout_ms=30000,
                retry_backoff_ms=100,
                reconnect_backoff_ms=50,
                reconnect_backoff_max_ms=500,
                metadata_max_age_ms=1000,
            )
            i = 0
            t0 = time.monotonic()
            while not self._stop.is_set():
                due = int((time.monotonic() - t0) * self.rate)
                if due - i > self.rate:  # fell behind: do not burst
                    t0 += (due - i - self.rate) / self.rate
                while i < due:
                    value, partition = self.next_value(i)
                    with self.lock:
                        self.sent[value] = partition
                    future = producer.send(self.topic, value=value, partition=partition)
                    future.add_callback(self._acked, value).add_errback(self._failed, value)
                    i += 1
                time.sleep(0.005)
            producer.flush(45)
            producer.close(timeout=10)
            with self.lock:
                self.unresolved = len(self.sent) - len(self.acked) - len(self.failed)
        except BaseException as exc:  # reported by stop()
            self.crash = exc


@dataclass
class Seen:
    offset: int
    value: bytes | None


# librdkafka (up to at least 2.12) can deadlock a consumer inside itself when a broker it has an
# OffsetForLeaderEpoch request in flight to leaves the cluster (confluentinc/librdkafka#5476: a
# lock-order inversion between its handle lock and a partition lock). The consumer then delivers
# nothing, ever. The live consumer is there to watch the broker, so a consumer that delivers
# nothing while behind (or no statistics at all) for STALL_S is replaced by a new one reading on
# from where it was; more than MAX_STALLS of them is an error (a broker that serves nothing).
STALL_S = 10.0
MAX_STALLS = 3
STATS_INTERVAL_MS = 500


class LiveConsumer:
    """Reads every partition from the beginning while the test runs (assign, no group)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.lock = threading.Lock()
        self.seen: dict[int, list[Seen]] = defaultdict(list)
        self.rewinds: list[tuple[int, int, int]] = []  # (partition, after offset, got offset)
        # the largest high watermark a fetch answered per partition, and each time one
        # answered a lower one: (partition, before, now)
        self.high_watermarks: dict[int, int] = {}
        self.watermarks_back: list[tuple[int, int, int]] = []
        self.errors: list[str] = []
        # why a consumer was replaced (see STALL_S)
        self.stalls: list[str] = []
        self.crash: BaseException | None = None
        self._stats_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-consumer", daemon=True)

    def start(self) -> LiveConsumer:
        self._thread.start()
        return self

    def _consumer(self):
        """A consumer assigned every partition at the next offset it has not seen."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"live-{self.topic}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                # it starts at the beginning: an offset out of range is the broker's
                # doing (a high watermark that went back), reported, never reset
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.max.ms": 500,
                "error_cb": lambda err: None,
                # the partitions' high watermarks as the fetch answers gave them, through poll
                # (get_watermark_offsets holds the GIL while it waits for librdkafka's locks)
                "statistics.interval.ms": STATS_INTERVAL_MS,
                "stats_cb": self._note_stats,
            }
        )
        at = self.positions()
        consumer.assign(
            [
                TopicPartition(self.topic, p, at.get(p, OFFSET_BEGINNING))
                for p in range(self.partitions)
            ]
        )
        return consumer

    def _run(self) -> None:
        try:
            consumer = self._consumer()
            delivered = time.monotonic()
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    if time.monotonic() - delivered > STALL_S and self._stalled():
                        consumer = self._replace(consumer)
                        delivered = time.monotonic()
                    continue
                delivered = time.monotonic()
                with self.lock:
                    if msg.error():
                        self.errors.append(msg.error().name())
                        continue
                    recs = self.seen[msg.partition()]
                    if recs and msg.offset() <= recs[-1].offset:
                        self.rewinds.append((msg.partition(), recs[-1].offset, msg.offset()))
                    recs.append(Seen(msg.offset(), msg.value()))
            consumer.close()
        except BaseException as exc:
            self.crash = exc

    def _stalled(self) -> bool:
        """Behind a high watermark it knows of, or no statistics from it for a while."""
        if time.monotonic() - self._stats_at > STALL_S:
            return True
        at = self.positions()
        with self.lock:
            return any(high > at.get(p, 0) for p, high in self.high_watermarks.items())

    def _replace(self, stuck):
        """A new consumer in place of one that delivers nothing; the old one is closed on a
        thread of its own (a deadlocked one never returns from it)."""
        with self.lock:
            self.stalls.append(
                f"nothing delivered for {STALL_S:.0f} s at {self.positions_locked()}"
            )
            if len(self.stalls) > MAX_STALLS:
                self.errors.append(f"live consumer stalled {len(self.stalls)} times")
        threading.Thread(target=stuck.close, name="load-consumer-closing", daemon=True).start()
        with self.lock:
            # a new client: its watermarks are compared with its own
            self.high_watermarks.clear()
        self._stats_at = time.monotonic()
        return self._consumer()

    def _note_stats(self, stats_json: str) -> None:
        """The high watermark of each partition as the latest fetch answers gave it (a
        librdkafka statistics report, delivered by poll)."""
        import json

        self._stats_at = time.monotonic()
        topic = json.loads(stats_json).get("topics", {}).get(self.topic, {})
        with self.lock:
            for key, part in topic.get("partitions", {}).items():
                partition, high = int(key), part.get("hi_offset", -1)
                if partition < 0 or high < 0:
                    continue
                before = self.high_watermarks.get(partition, -1)
                if high < before:
                    self.watermarks_back.append((partition, before, high))
                self.high_watermarks[partition] = max(before, high)

    def positions(self) -> dict[int, int]:
        """{partition: next offset to see}."""
        with self.lock:
            return self.positions_locked()

    def positions_locked(self) -> dict[int, int]:
        return {p: (recs[-1].offset + 1 if recs else 0) for p, recs in self.seen.items()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "live consumer did not stop"
        if self.crash is not None:
            raise AssertionError(f"live consumer crashed: {self.crash!r}")
