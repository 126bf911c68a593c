"""Transactions for tests: the transactional producers and read_committed / read_uncommitted
consumers of the Python clients behind one small interface each, and what tests read with
them (end offsets under an isolation level, everything up to them, the records as placed and
as shown), and a bounded wait for an outcome.

Clients: ``PRODUCERS[client](bootstrap, transactional_id, **options)`` is a transactional
producer with the client's defaults plus the transactional id (and ``options``, in the
client's own names); ``CONSUMERS[client](bootstrap, topic, partitions, committed)`` a consumer
assigned those partitions from the beginning, read_committed or read_uncommitted (confluent's
read_committed is its default: nothing is set). Consumers say where they are (``positions``):
past a control batch or an aborted transaction too, so reading "up to the end" is reading until
every position reaches the end offsets, whatever the records there are.

The requests of the transactional protocol by hand are support.txn_wire's; this module
re-exports them, so ``transactions.end_txn`` and the like still work where tests import them
from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from . import kafka_wire as kw
from .clients import HANG_GUARD, Got, Msg, unique
from .txn_wire import ADD_OFFSETS_TO_TXN as ADD_OFFSETS_TO_TXN
from .txn_wire import ADD_PARTITIONS_TO_TXN as ADD_PARTITIONS_TO_TXN
from .txn_wire import CONCURRENT_TRANSACTIONS as CONCURRENT_TRANSACTIONS
from .txn_wire import CONTROL_FLAG as CONTROL_FLAG
from .txn_wire import DESCRIBE_TRANSACTIONS as DESCRIBE_TRANSACTIONS
from .txn_wire import END_TXN as END_TXN
from .txn_wire import FIND_COORDINATOR as FIND_COORDINATOR
from .txn_wire import GROUP_KEY as GROUP_KEY
from .txn_wire import INVALID_PRODUCER_ID_MAPPING as INVALID_PRODUCER_ID_MAPPING
from .txn_wire import INVALID_TRANSACTION_TIMEOUT as INVALID_TRANSACTION_TIMEOUT
from .txn_wire import LIST_TRANSACTIONS as LIST_TRANSACTIONS
from .txn_wire import NOT_ENOUGH_REPLICAS as NOT_ENOUGH_REPLICAS
from .txn_wire import OFFSET_FETCH as OFFSET_FETCH
from .txn_wire import OPERATION_NOT_ATTEMPTED as OPERATION_NOT_ATTEMPTED
from .txn_wire import PRODUCER_FENCED as PRODUCER_FENCED
from .txn_wire import READ_COMMITTED as READ_COMMITTED
from .txn_wire import READ_UNCOMMITTED as READ_UNCOMMITTED
from .txn_wire import TRANSACTION_KEY as TRANSACTION_KEY
from .txn_wire import TRANSACTIONAL_ID_NOT_FOUND as TRANSACTIONAL_ID_NOT_FOUND
from .txn_wire import TXN_OFFSET_COMMIT as TXN_OFFSET_COMMIT
from .txn_wire import UNSTABLE_OFFSET_COMMIT as UNSTABLE_OFFSET_COMMIT
from .txn_wire import Coordinator as Coordinator
from .txn_wire import DescribedTxn as DescribedTxn
from .txn_wire import Fetched as Fetched
from .txn_wire import InitProducerId as InitProducerId
from .txn_wire import ListedTxns as ListedTxns
from .txn_wire import StableOffset as StableOffset
from .txn_wire import add_offsets_to_txn as add_offsets_to_txn
from .txn_wire import add_partitions_to_txn as add_partitions_to_txn
from .txn_wire import describe_transactions as describe_transactions
from .txn_wire import end_txn as end_txn
from .txn_wire import fetch as fetch
from .txn_wire import find_coordinator as find_coordinator
from .txn_wire import init_producer_id as init_producer_id
from .txn_wire import list_offset as list_offset
from .txn_wire import list_transactions as list_transactions
from .txn_wire import offset_fetch_v7 as offset_fetch_v7
from .txn_wire import produce as produce
from .txn_wire import txn_offset_commit as txn_offset_commit

# ---------------------------------------------------------------------------------------------
# reading end offsets, waiting for an outcome


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
