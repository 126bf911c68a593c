"""Transactions for tests: the requests of Kafka's transactional protocol by hand, and the
transactional producers and read_committed / read_uncommitted consumers of the Python clients
behind one small interface each.

Wire: FindCoordinator v1 (any key type), InitProducerId v0 with a transaction timeout,
AddPartitionsToTxn v0, EndTxn v0, Produce v3 / v8 with a transactional id, ListOffsets v4 and
Fetch v4 with an isolation level (Fetch's answer with its aborted-transaction list). Encodings
follow the Kafka protocol guide; nothing here comes from kafscale.

Clients: ``PRODUCERS[client](bootstrap, transactional_id, **options)`` is a transactional
producer with the client's defaults plus the transactional id (and ``options``, in the
client's own names); ``CONSUMERS[client](bootstrap, topic, partitions, committed)`` a consumer
assigned those partitions from the beginning, read_committed or read_uncommitted (confluent's
read_committed is its default: nothing is set). Consumers say where they are (``positions``):
past a control batch or an aborted transaction too, so reading "up to the end" is reading until
every position reaches the end offsets, whatever the records there are.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from . import kafka_wire as kw
from .clients import HANG_GUARD, Got, Msg, unique

# error codes of transactions (kafscale.errors names only what its Python side answers)
NOT_ENOUGH_REPLICAS = 19
CONCURRENT_TRANSACTIONS = 51
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90

FIND_COORDINATOR = 10
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
GROUP_KEY, TRANSACTION_KEY = 0, 1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

CONTROL_FLAG = 0x20  # record batch attributes bit 5: a transaction marker


# ---------------------------------------------------------------------------------------------
# wire


@dataclass(frozen=True)
class Coordinator:
    error_code: int
    message: str | None
    node_id: int
    host: str | None
    port: int


def find_coordinator(conn: kw.RawConnection, key: str, key_type: int) -> Coordinator:
    """FindCoordinator v1 (key type 0: a group, 1: a transactional id)."""
    r = conn.request(FIND_COORDINATOR, 1, kw.Writer().string(key).i8(key_type).done())
    r.i32()  # throttle
    found = Coordinator(r.i16(), r.string(), r.i32(), r.string(), r.i32())
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after FindCoordinator v1"
    return found


@dataclass(frozen=True)
class InitProducerId:
    error_code: int
    producer_id: int
    epoch: int


def init_producer_id(
    conn: kw.RawConnection, transactional_id: str | None, timeout_ms: int = 60_000
) -> InitProducerId:
    """InitProducerId v0."""
    body = kw.Writer().string(transactional_id).i32(timeout_ms).done()
    error, producer_id, epoch = kw.parse_init_producer_id_v0(
        conn.request(kw.INIT_PRODUCER_ID, 0, body)
    )
    return InitProducerId(error, producer_id, epoch)


def add_partitions_to_txn(
    conn: kw.RawConnection,
    transactional_id: str,
    producer: tuple[int, int],
    partitions: dict[str, list[int]],
) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0: {(topic, partition): error code}."""
    producer_id, epoch = producer
    w = kw.Writer().string(transactional_id).i64(producer_id).i16(epoch)
    w.array_len(len(partitions))
    for topic, indexes in partitions.items():
        w.string(topic).array_len(len(indexes))
        for index in indexes:
            w.i32(index)
    r = conn.request(ADD_PARTITIONS_TO_TXN, 0, w.done())
    r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        assert name is not None
        for _ in range(r.array_len()):
            index, error = r.i32(), r.i16()
            out[(name, index)] = error
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after AddPartitionsToTxn v0"
    return out


def end_txn(
    conn: kw.RawConnection, transactional_id: str, producer: tuple[int, int], commit: bool
) -> int:
    """EndTxn v0: its error code."""
    producer_id, epoch = producer
    body = kw.Writer().string(transactional_id).i64(producer_id).i16(epoch).boolean(commit)
    r = conn.request(END_TXN, 0, body.done())
    r.i32()  # throttle
    error = r.i16()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after EndTxn v0"
    return error


def produce(
    conn: kw.RawConnection,
    transactional_id: str | None,
    topic: str,
    partition: int,
    batch: bytes,
    version: int = 8,
) -> kw.ProduceV8Result:
    """Produce v3 or v8 of one batch, with ``transactional_id`` in the request (v3's answer
    has no record errors and no error message: empty and None)."""
    body = (
        kw.Writer()
        .string(transactional_id)
        .i16(-1)  # acks: all
        .i32(30_000)
        .array_len(1)
        .string(topic)
        .array_len(1)
        .i32(partition)
        .bytes_(batch)
        .done()
    )
    r = conn.request(kw.PRODUCE, version, body)
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            index, error, base = r.i32(), r.i16(), r.i64()
            r.i64()  # log append time
            if version < 5:
                out[(name, index)] = kw.ProduceV8Result(error, base, [], None)
                continue
            r.i64()  # log start offset
            errors = [(r.i32(), r.string()) for _ in range(r.array_len())]
            out[(name, index)] = kw.ProduceV8Result(error, base, errors, r.string())
    r.i32()  # throttle
    assert set(out) == {(topic, partition)}, out
    return out[(topic, partition)]


def list_offset(
    conn: kw.RawConnection, topic: str, partition: int, isolation: int, timestamp: int = kw.LATEST
) -> kw.ListOffsetsResult:
    """ListOffsets v4 with an isolation level: latest under READ_COMMITTED is the last stable
    offset."""
    w = kw.Writer().i32(-1).i8(isolation)  # replica id, isolation level
    w.array_len(1).string(topic).array_len(1).i32(partition)
    w.i32(-1).i64(timestamp)  # current leader epoch: unknown; the timestamp
    r = conn.request(kw.LIST_OFFSETS, 4, w.done())
    r.i32()  # throttle
    results = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            index, error, ts, offset = r.i32(), r.i16(), r.i64(), r.i64()
            r.i32()  # leader epoch
            results[(name, index)] = kw.ListOffsetsResult(error, ts, offset)
    assert set(results) == {(topic, partition)}, results
    return results[(topic, partition)]


@dataclass(frozen=True)
class Fetched:
    """One partition of a Fetch v4 answer."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None  # (producer id, first offset); None: a null list
    records: bytes = field(repr=False)


def fetch(
    conn: kw.RawConnection, topic: str, partition: int, offset: int, isolation: int
) -> Fetched:
    """Fetch v4 of one partition from ``offset`` with an isolation level (answered at once)."""
    w = kw.Writer().i32(-1).i32(0).i32(1).i32(50 * 1024 * 1024)  # replica, wait, min, max bytes
    w.i8(isolation).array_len(1).string(topic).array_len(1)
    w.i32(partition).i64(offset).i32(10 * 1024 * 1024)
    r = conn.request(kw.FETCH, 4, w.done())
    r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            index, error, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
            n = r.array_len()
            aborted = None if n < 0 else [(r.i64(), r.i64()) for _ in range(n)]
            out[(name, index)] = Fetched(error, hw, lso, aborted, r.bytes_() or b"")
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after Fetch v4"
    assert set(out) == {(topic, partition)}, out
    return out[(topic, partition)]


def ends(bootstrap: str, topic: str, partitions: Iterable[int], isolation: int) -> dict[int, int]:
    """{partition: ListOffsets latest} under ``isolation`` (read_committed: the last stable
    offset)."""
    out = {}
    with kw.RawConnection.to(bootstrap) as conn:
        for p in partitions:
            res = list_offset(conn, topic, p, isolation)
            assert res.error_code == kw.NONE, (topic, p, res)
            out[p] = res.offset
    return out


def wait_for(check: Callable[[], str | None], timeout: float = HANG_GUARD) -> None:
    """Polls until ``check()`` returns None (else it says what is still off): a bounded wait
    for an outcome, never a timing assertion."""
    deadline = time.monotonic() + timeout
    problem = check()
    while problem is not None:
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {problem}")
        time.sleep(0.1)
        problem = check()


# ---------------------------------------------------------------------------------------------
# transactional producers


class TxnProducer(Protocol):
    """A transactional producer of one client. ``send`` produces and waits until every record
    is acknowledged (in the open transaction: written, not committed); (partition, offset)
    per record."""

    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, topic: str, msgs: list[Msg]) -> list[tuple[int, int]]: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...


class ConfluentTxnProducer:
    """confluent-kafka: its defaults plus ``transactional.id`` (and ``options``)."""

    def __init__(self, bootstrap: str, transactional_id: str, **options: Any) -> None:
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
        self.producer = Producer({**conf, **options})

    def init(self) -> None:
        self.producer.init_transactions(HANG_GUARD)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, msgs: list[Msg]) -> list[tuple[int, int]]:
        from confluent_kafka import KafkaException

        results: list[tuple[int, int] | None] = [None] * len(msgs)
        errors: list[Any] = []

        def report(i: int) -> Callable[[Any, Any], None]:
            def delivered(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    results[i] = (msg.partition(), msg.offset())

            return delivered

        for i, m in enumerate(msgs):
            self.producer.produce(
                topic, key=m.key, value=m.value, partition=m.partition, on_delivery=report(i)
            )
        remaining = self.producer.flush(HANG_GUARD)
        assert remaining == 0, f"{remaining} records undelivered after {HANG_GUARD}s"
        if errors:
            raise KafkaException(errors[0])
        return [r for r in results if r is not None]

    def commit(self) -> None:
        self.producer.commit_transaction(HANG_GUARD)

    def abort(self) -> None:
        self.producer.abort_transaction(HANG_GUARD)

    def close(self) -> None:
        from confluent_kafka import KafkaException

        # what is still queued goes (a fenced producer raises its fatal error here again)
        with contextlib.suppress(KafkaException):
            self.producer.flush(0)


class KafkaPythonTxnProducer:
    """kafka-python: ``KafkaProducer(transactional_id=...)`` (and ``options``)."""

    def __init__(self, bootstrap: str, transactional_id: str, **options: Any) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=transactional_id, **options
        )

    def init(self) -> None:
        self.producer.init_transactions()

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, msgs: list[Msg]) -> list[tuple[int, int]]:
        futures = [
            self.producer.send(topic, key=m.key, value=m.value, partition=m.partition) for m in msgs
        ]
        self.producer.flush(timeout=HANG_GUARD)
        out = []
        for f in futures:
            md = f.get(timeout=HANG_GUARD)
            out.append((md.partition, md.offset))
        return out

    def commit(self) -> None:
        self.producer.commit_transaction()

    def abort(self) -> None:
        self.producer.abort_transaction()

    def close(self) -> None:
        self.producer.close(timeout=5)


T = TypeVar("T")


class AiokafkaTxnProducer:
    """aiokafka: ``AIOKafkaProducer(transactional_id=...)`` (and ``options``), driven on an event
    loop of its own; ``init`` is its ``start`` (which initialises the transactional id)."""

    def __init__(self, bootstrap: str, transactional_id: str, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.options = options
        self.producer: Any = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, HANG_GUARD))

    def init(self) -> None:
        from aiokafka import AIOKafkaProducer

        async def make() -> Any:  # on the loop: aiokafka takes the running one
            return AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                transactional_id=self.transactional_id,
                **self.options,
            )

        self.producer = self._run(make())
        self._run(self.producer.start())  # stopped by close() even when this fails

    def begin(self) -> None:
        self._run(self.producer.begin_transaction())

    def send(self, topic: str, msgs: list[Msg]) -> list[tuple[int, int]]:
        async def send_all() -> list[tuple[int, int]]:
            futures = [
                await self.producer.send(topic, key=m.key, value=m.value, partition=m.partition)
                for m in msgs
            ]
            return [(md.partition, md.offset) for md in await asyncio.gather(*futures)]

        return self._run(send_all())

    def commit(self) -> None:
        self._run(self.producer.commit_transaction())

    def abort(self) -> None:
        self._run(self.producer.abort_transaction())

    def close(self) -> None:
        try:
            if self.producer is not None:
                self._run(self.producer.stop())
        finally:
            self.loop.close()


PRODUCERS: dict[str, Callable[..., TxnProducer]] = {
    "confluent": ConfluentTxnProducer,
    "kafka-python": KafkaPythonTxnProducer,
    "aiokafka": AiokafkaTxnProducer,
}


# ---------------------------------------------------------------------------------------------
# consumers


class TxnConsumer(Protocol):
    """A consumer assigned some partitions of one topic from the beginning."""

    def poll(self) -> list[Got]:
        """What one poll (at most a fraction of a second) returns."""
        ...

    def positions(self) -> dict[int, int]:
        """{partition: the next offset it reads} (-1 while it knows none)."""
        ...

    def close(self) -> None: ...


def _got(partition: int, offset: int, key: Any, value: Any, ts: int) -> Got:
    return Got(partition, offset, key, value, (), ts)


class ConfluentConsumer:
    def __init__(self, bootstrap: str, topic: str, partitions: list[int], committed: bool) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": unique("assign-only"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
        if not committed:
            conf["isolation.level"] = "read_uncommitted"  # read_committed: the default
        self.topic = topic
        self.partitions = partitions
        self.consumer = Consumer(conf)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

    def poll(self) -> list[Got]:
        out = []
        for msg in self.consumer.consume(100, 0.2):
            assert msg.error() is None, f"consumer error: {msg.error()}"
            out.append(
                _got(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1])
            )
        return out

    def positions(self) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        tps = self.consumer.position([TopicPartition(self.topic, p) for p in self.partitions])
        return {tp.partition: max(tp.offset, -1) for tp in tps}

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonConsumer:
    def __init__(self, bootstrap: str, topic: str, partitions: list[int], committed: bool) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed" if committed else "read_uncommitted",
        )
        self.tps = [TopicPartition(topic, p) for p in partitions]
        self.consumer.assign(self.tps)
        self.consumer.seek_to_beginning(*self.tps)

    def poll(self) -> list[Got]:
        out = []
        for tp, records in self.consumer.poll(timeout_ms=200).items():
            out += [_got(tp.partition, r.offset, r.key, r.value, r.timestamp) for r in records]
        return out

    def positions(self) -> dict[int, int]:
        return {tp.partition: self.consumer.position(tp) for tp in self.tps}

    def close(self) -> None:
        self.consumer.close()


class AiokafkaConsumer:
    def __init__(self, bootstrap: str, topic: str, partitions: list[int], committed: bool) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        self.loop = asyncio.new_event_loop()
        self.tps = [TopicPartition(topic, p) for p in partitions]

        async def start() -> Any:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed" if committed else "read_uncommitted",
            )
            await consumer.start()
            consumer.assign(self.tps)
            await consumer.seek_to_beginning(*self.tps)
            return consumer

        self.consumer = self._run(start())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, HANG_GUARD))

    def poll(self) -> list[Got]:
        out = []
        for tp, records in self._run(self.consumer.getmany(timeout_ms=200)).items():
            out += [_got(tp.partition, r.offset, r.key, r.value, r.timestamp) for r in records]
        return out

    def positions(self) -> dict[int, int]:
        async def positions() -> dict[int, int]:
            return {tp.partition: await self.consumer.position(tp) for tp in self.tps}

        return self._run(positions())

    def close(self) -> None:
        try:
            self._run(self.consumer.stop())
        finally:
            self.loop.close()


CONSUMERS: dict[str, Callable[[str, str, list[int], bool], TxnConsumer]] = {
    "confluent": ConfluentConsumer,
    "kafka-python": KafkaPythonConsumer,
    "aiokafka": AiokafkaConsumer,
}


def read_until(consumer: TxnConsumer, ends: dict[int, int]) -> list[Got]:
    """Polls until every position reaches ``ends`` (fails if one goes past it, or nothing
    gets there within the hang guard); every record polled on the way, in order."""
    got: list[Got] = []
    deadline = time.monotonic() + HANG_GUARD
    while True:
        got += consumer.poll()
        positions = consumer.positions()
        past = {p: o for p, o in positions.items() if o > ends[p]}
        assert not past, f"positions {positions} past the ends {ends}"
        if all(positions[p] == end for p, end in ends.items()):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"positions {positions}, wanted {ends}; read {got}")


def read_all(
    client: str, bootstrap: str, topic: str, ends: dict[int, int], committed: bool
) -> list[Got]:
    """Everything a new consumer of ``client`` reads up to ``ends``."""
    consumer = CONSUMERS[client](bootstrap, topic, sorted(ends), committed)
    try:
        return read_until(consumer, ends)
    finally:
        consumer.close()


def shown(got: Iterable[Got]) -> list[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of each record, sorted: what a consumer showed."""
    return sorted((g.partition, g.offset, g.value) for g in got)


def placed(
    msgs: list[Msg], delivered: list[tuple[int, int]]
) -> list[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of each record as its producer was told it was stored."""
    assert [p for p, _ in delivered] == [m.partition for m in msgs], delivered
    return sorted((p, o, m.value) for m, (p, o) in zip(msgs, delivered, strict=True))


def records(tag: str, n: int, partitions: int) -> list[Msg]:
    """``n`` records spread round-robin over ``partitions``, values ``tag-i``."""
    return [Msg(i % partitions, f"k{i}".encode(), f"{tag}-{i}".encode()) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# offsets in transactions, DescribeTransactions, ListTransactions (wire)

OFFSET_FETCH = 9
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
TRANSACTIONAL_ID_NOT_FOUND = 105
UNSTABLE_OFFSET_COMMIT = 88


def add_offsets_to_txn(
    conn: kw.RawConnection, transactional_id: str, producer: tuple[int, int], group: str
) -> int:
    """AddOffsetsToTxn v0: its error code."""
    producer_id, epoch = producer
    body = kw.Writer().string(transactional_id).i64(producer_id).i16(epoch).string(group)
    r = conn.request(ADD_OFFSETS_TO_TXN, 0, body.done())
    r.i32()  # throttle
    error = r.i16()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after AddOffsetsToTxn v0"
    return error


def txn_offset_commit(
    conn: kw.RawConnection,
    transactional_id: str,
    group: str,
    producer: tuple[int, int],
    offsets: dict[tuple[str, int], int],
) -> dict[tuple[str, int], int]:
    """TxnOffsetCommit v2 (no member: the offsets of a producer, not of a group member):
    {(topic, partition): error code}."""
    producer_id, epoch = producer
    w = kw.Writer().string(transactional_id).string(group).i64(producer_id).i16(epoch)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    w.array_len(len(by_topic))
    for topic, parts in by_topic.items():
        w.string(topic).array_len(len(parts))
        for partition, offset in parts:
            w.i32(partition).i64(offset).i32(-1).string(None)  # leader epoch, metadata
    r = conn.request(TXN_OFFSET_COMMIT, 2, w.done())
    r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        assert name is not None
        for _ in range(r.array_len()):
            index, error = r.i32(), r.i16()
            out[(name, index)] = error
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after TxnOffsetCommit v2"
    return out


@dataclass(frozen=True)
class StableOffset:
    """One partition of an OffsetFetch v7 answer (offset -1: none committed)."""

    offset: int
    error_code: int


def offset_fetch_v7(
    conn: kw.RawConnection, group: str, topic: str, partitions: Iterable[int], require_stable: bool
) -> tuple[int, dict[int, StableOffset]]:
    """OffsetFetch v7 (flexible, with require_stable): (top-level error code,
    {partition: StableOffset})."""
    parts = list(partitions)
    w = kw.Writer().compact_string(group).uvarint(2).compact_string(topic).uvarint(len(parts) + 1)
    for p in parts:
        w.i32(p)
    w.tagged_fields().boolean(require_stable).tagged_fields()
    r = conn.request(OFFSET_FETCH, 7, w.done(), flexible=True)
    r.i32()  # throttle
    out = {}
    for _ in range(r.compact_array_len()):
        name = r.compact_string()
        for _ in range(r.compact_array_len()):
            index, offset = r.i32(), r.i64()
            r.i32()  # leader epoch
            r.compact_string()  # metadata
            error = r.i16()
            r.skip_tagged_fields()
            assert name == topic, name
            out[index] = StableOffset(offset, error)
        r.skip_tagged_fields()
    top = r.i16()
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after OffsetFetch v7"
    return top, out


@dataclass(frozen=True)
class DescribedTxn:
    """One transaction of a DescribeTransactions v0 answer."""

    error_code: int
    transactional_id: str | None
    state: str | None
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: dict[str, list[int]]


def describe_transactions(
    conn: kw.RawConnection, transactional_ids: list[str]
) -> dict[str | None, DescribedTxn]:
    """DescribeTransactions v0 (flexible): {transactional id: DescribedTxn}."""
    w = kw.Writer().uvarint(len(transactional_ids) + 1)
    for wanted in transactional_ids:
        w.compact_string(wanted)
    r = conn.request(DESCRIBE_TRANSACTIONS, 0, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    out: dict[str | None, DescribedTxn] = {}
    for _ in range(r.compact_array_len()):
        error, tid, state = r.i16(), r.compact_string(), r.compact_string()
        timeout, start, producer_id, epoch = r.i32(), r.i64(), r.i64(), r.i16()
        partitions: dict[str, list[int]] = {}
        for _ in range(r.compact_array_len()):
            name = r.compact_string()
            assert name is not None
            partitions[name] = [r.i32() for _ in range(r.compact_array_len())]
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        out[tid] = DescribedTxn(error, tid, state, timeout, start, producer_id, epoch, partitions)
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after DescribeTransactions v0"
    return out


@dataclass(frozen=True)
class ListedTxns:
    """A ListTransactions answer: {transactional id: (producer id, state)}."""

    error_code: int
    unknown_state_filters: list[str | None]
    transactions: dict[str | None, tuple[int, str | None]]


def list_transactions(
    conn: kw.RawConnection,
    states: list[str],
    producer_ids: list[int] | None = None,
    duration_ms: int | None = None,
) -> ListedTxns:
    """ListTransactions v0, or v1 when ``duration_ms`` is given (flexible)."""
    w = kw.Writer().uvarint(len(states) + 1)
    for name in states:
        w.compact_string(name)
    w.uvarint(len(producer_ids or []) + 1)
    for pid in producer_ids or []:
        w.i64(pid)
    version = 0
    if duration_ms is not None:
        version = 1
        w.i64(duration_ms)
    r = conn.request(LIST_TRANSACTIONS, version, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    error = r.i16()
    unknown = [r.compact_string() for _ in range(r.compact_array_len())]
    listed: dict[str | None, tuple[int, str | None]] = {}
    for _ in range(r.compact_array_len()):
        tid, producer_id, state = r.compact_string(), r.i64(), r.compact_string()
        r.skip_tagged_fields()
        listed[tid] = (producer_id, state)
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after ListTransactions"
    return ListedTxns(error, unknown, listed)
