"""Produce/consume through the real Kafka clients, with one record shape for all of them.

Consumers assign partitions explicitly (no consumer group), read from the beginning and stop
once they have seen the expected number of records per partition (or the hang guard fires).
``extra`` adds options in the client's own form (a librdkafka config dict, keyword arguments
for kafka-python and aiokafka, command-line arguments for kcat): security settings, say.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

HANG_GUARD = 40.0  # seconds; only to stop a hung client, never a performance limit


@dataclass(frozen=True)
class Msg:
    """A record to produce. ``timestamp`` None lets the client pick the create time."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True)
class Got:
    """A consumed record."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def counts(msgs: Iterable[Msg]) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in msgs:
        out[m.partition] = out.get(m.partition, 0) + 1
    return out


# ---------------------------------------------------------------------------------------------
# confluent-kafka (librdkafka)


def confluent_produce(
    bootstrap: str,
    topic: str,
    msgs: list[Msg],
    *,
    compression="none",
    acks="all",
    idempotent: bool | None = None,
    extra=None,
) -> list[tuple[int, int]]:
    """Produce and wait for every delivery report; returns (partition, offset) per message.
    ``idempotent=None`` leaves librdkafka's default (off)."""
    from confluent_kafka import KafkaException, Producer

    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": compression,
        "acks": str(acks),
        "linger.ms": 5,
        "message.timeout.ms": int(HANG_GUARD * 1000),
    }
    if idempotent is not None:
        conf["enable.idempotence"] = idempotent
    conf.update(extra or {})
    producer = Producer(conf)
    results: list[tuple[int, int] | None] = [None] * len(msgs)
    errors = []

    def report(i):
        def cb(err, msg):
            if err is not None:
                errors.append((i, err))
            else:
                results[i] = (msg.partition(), msg.offset())

        return cb

    for i, m in enumerate(msgs):
        kwargs = {"key": m.key, "value": m.value, "partition": m.partition}
        if m.headers:
            kwargs["headers"] = list(m.headers)
        if m.timestamp is not None:
            kwargs["timestamp"] = m.timestamp
        while True:
            try:
                producer.produce(topic, on_delivery=report(i), **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
    remaining = producer.flush(HANG_GUARD)
    if remaining:
        raise AssertionError(f"{remaining} messages still undelivered after {HANG_GUARD}s")
    if errors:
        raise KafkaException(errors[0][1])
    return results  # type: ignore[return-value]


def confluent_consume(
    bootstrap: str, topic: str, expected: dict[int, int], *, extra=None
) -> list[Got]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": unique("assign-only"),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
    }
    conf.update(extra or {})
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in expected])
        got: list[Got] = []
        seen = dict.fromkeys(expected, 0)
        deadline = time.monotonic() + HANG_GUARD
        while any(seen[p] < n for p, n in expected.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"confluent consumer saw {seen}, expected {expected}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise AssertionError(f"consumer error: {msg.error()}")
            headers = tuple((k, v) for k, v in (msg.headers() or []))
            got.append(
                Got(
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    headers,
                    msg.timestamp()[1],
                )
            )
            seen[msg.partition()] += 1
        return got
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------
# kafka-python


def kafka_python_produce(
    bootstrap: str,
    topic: str,
    msgs: list[Msg],
    *,
    compression="none",
    acks="all",
    idempotent: bool | None = None,
    extra=None,
) -> list[tuple[int, int]]:
    """``idempotent=None`` leaves kafka-python's default: idempotent with acks=all (3.0+)."""
    from kafka import KafkaProducer

    options = {} if idempotent is None else {"enable_idempotence": idempotent}
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        acks=acks,
        linger_ms=5,
        request_timeout_ms=int(HANG_GUARD * 1000),
        **options,
        **(extra or {}),
    )
    try:
        futures = [
            producer.send(
                topic,
                value=m.value,
                key=m.key,
                headers=list(m.headers) or None,
                partition=m.partition,
                timestamp_ms=m.timestamp,
            )
            for m in msgs
        ]
        producer.flush(timeout=HANG_GUARD)
        out = []
        for f in futures:
            md = f.get(timeout=HANG_GUARD)
            out.append((md.partition, md.offset))
        return out
    finally:
        producer.close(timeout=10)


def kafka_python_consume(
    bootstrap: str, topic: str, expected: dict[int, int], *, extra=None
) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **(extra or {}),
    )
    try:
        tps = [TopicPartition(topic, p) for p in expected]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[Got] = []
        seen = dict.fromkeys(expected, 0)
        deadline = time.monotonic() + HANG_GUARD
        while any(seen[p] < n for p, n in expected.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"kafka-python consumer saw {seen}, expected {expected}")
            for tp, records in consumer.poll(timeout_ms=200).items():
                for r in records:
                    got.append(
                        Got(
                            tp.partition,
                            r.offset,
                            r.key,
                            r.value,
                            tuple((k, v) for k, v in (r.headers or [])),
                            r.timestamp,
                        )
                    )
                    seen[tp.partition] += 1
        return got
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------
# aiokafka


async def _aiokafka_produce(bootstrap, topic, msgs, compression, acks, idempotent, extra):
    from aiokafka import AIOKafkaProducer

    options = {} if idempotent is None else {"enable_idempotence": idempotent}
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        acks=acks,
        linger_ms=5,
        request_timeout_ms=int(HANG_GUARD * 1000),
        **options,
        **(extra or {}),
    )
    await asyncio.wait_for(producer.start(), HANG_GUARD)
    try:
        futures = [
            await producer.send(
                topic,
                value=m.value,
                key=m.key,
                partition=m.partition,
                headers=list(m.headers) or None,
                timestamp_ms=m.timestamp,
            )
            for m in msgs
        ]
        mds = await asyncio.wait_for(asyncio.gather(*futures), HANG_GUARD)
        # with acks=0 aiokafka resolves each send with None: nothing is known
        return [
            (m.partition, -1) if md is None else (md.partition, md.offset)
            for m, md in zip(msgs, mds, strict=True)
        ]
    finally:
        await producer.stop()


def aiokafka_produce(
    bootstrap: str,
    topic: str,
    msgs: list[Msg],
    *,
    compression="none",
    acks="all",
    idempotent: bool | None = None,
    extra=None,
) -> list[tuple[int, int]]:
    """``idempotent=None`` leaves aiokafka's default (off). ``extra`` may hold an
    ``ssl_context``: make a new one for every call (a context belongs to one client)."""
    return asyncio.run(
        _aiokafka_produce(bootstrap, topic, msgs, compression, acks, idempotent, extra)
    )


async def _aiokafka_consume(bootstrap, topic, expected, extra):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **(extra or {}),
    )
    await asyncio.wait_for(consumer.start(), HANG_GUARD)
    try:
        tps = [TopicPartition(topic, p) for p in expected]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[Got] = []
        seen = dict.fromkeys(expected, 0)
        deadline = time.monotonic() + HANG_GUARD
        while any(seen[p] < n for p, n in expected.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"aiokafka consumer saw {seen}, expected {expected}")
            batches = await consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                for r in records:
                    got.append(
                        Got(
                            tp.partition,
                            r.offset,
                            r.key,
                            r.value,
                            tuple((k, v) for k, v in (r.headers or ())),
                            r.timestamp,
                        )
                    )
                    seen[tp.partition] += 1
        return got
    finally:
        await consumer.stop()


def aiokafka_consume(
    bootstrap: str, topic: str, expected: dict[int, int], *, extra=None
) -> list[Got]:
    return asyncio.run(_aiokafka_consume(bootstrap, topic, expected, extra))


# ---------------------------------------------------------------------------------------------
# kcat (librdkafka CLI from Debian)

KCAT_KEY_DELIMITER = "\t"


def kcat_produce(
    bootstrap: str,
    topic: str,
    msgs: list[Msg],
    *,
    compression="none",
    acks="all",
    extra: list[str] | None = None,
) -> None:
    """One kcat run per partition; lines are ``key<TAB>value`` or just ``value`` (null key).

    kcat can set neither timestamps nor per-message headers, so every message of a run gets the
    headers of the first message of that partition and ``timestamp`` must be None."""
    by_partition: dict[int, list[Msg]] = {}
    for m in msgs:
        if m.timestamp is not None or m.value is None:
            raise ValueError("kcat cannot produce explicit timestamps or null values")
        by_partition.setdefault(m.partition, []).append(m)
    for partition, pmsgs in by_partition.items():
        lines = []
        for m in pmsgs:
            if m.headers != pmsgs[0].headers:
                raise ValueError("kcat sends the same headers with every message")
            value = m.value.decode()
            if "\n" in value or KCAT_KEY_DELIMITER in value:
                raise ValueError("kcat values must be single-line text")
            lines.append(value if m.key is None else m.key.decode() + KCAT_KEY_DELIMITER + value)
        argv = [
            "kcat",
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(partition),
            "-K",
            KCAT_KEY_DELIMITER,
            "-z",
            compression,
            "-X",
            f"acks={acks}",
            "-X",
            "linger.ms=5",
            "-X",
            "enable.idempotence=false",
            *(extra or []),
        ]
        for hk, hv in pmsgs[0].headers:
            argv += ["-H", f"{hk}={(hv or b'').decode()}"]
        proc = subprocess.run(
            argv,
            input=("\n".join(lines) + "\n").encode(),
            capture_output=True,
            timeout=HANG_GUARD,
        )
        if proc.returncode != 0:
            raise AssertionError(f"kcat produce failed ({proc.returncode}): {proc.stderr!r}")


def kcat_consume(
    bootstrap: str, topic: str, expected: dict[int, int], *, extra: list[str] | None = None
) -> list[Got]:
    got: list[Got] = []
    for partition, n in expected.items():
        argv = [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(partition),
            "-o",
            "beginning",
            "-c",
            str(n),
            "-J",
            "-q",
            *(extra or []),
        ]
        proc = subprocess.run(argv, capture_output=True, timeout=HANG_GUARD)
        if proc.returncode != 0:
            raise AssertionError(f"kcat consume failed ({proc.returncode}): {proc.stderr!r}")
        for line in proc.stdout.decode().splitlines():
            if not line.strip():
                continue
            doc = json.loads(line)
            raw_headers = doc.get("headers") or []
            headers = tuple(
                (name, None if value is None else value.encode())
                for name, value in zip(raw_headers[::2], raw_headers[1::2], strict=True)
            )
            key = doc.get("key")
            payload = doc.get("payload")
            got.append(
                Got(
                    doc["partition"],
                    doc["offset"],
                    None if key is None else key.encode(),
                    None if payload is None else payload.encode(),
                    headers,
                    doc["ts"],
                )
            )
    return got


PRODUCERS = {
    "confluent": confluent_produce,
    "kafka-python": kafka_python_produce,
    "aiokafka": aiokafka_produce,
}
CONSUMERS = {
    "confluent": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
    "kcat": kcat_consume,
}
