"""Offsets in transactions, for test_transaction_offsets.py and
test_transaction_coordinators.py: each Python client's consume-transform-produce app (a group
consumer and a transactional producer, ``APPS``); the group's offsets as OffsetFetch v7 answers
them (committed, stable once a transaction is decided, not yet visible while it is open); a
client producer's send_offsets_to_transaction for a group without a consumer in it; a
transaction of offsets opened over the wire; and watching a decided transaction's offsets
become the group's.

Requests the coordinators answer while loading, moving, or copying a transaction record are
retried (``RETRIABLE``) within the hang guard.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from . import group_wire as gw
from . import kafka_wire as kw
from . import transactions as tx
from . import txn_wire as tw
from .clients import HANG_GUARD, Got, unique

PARTITIONS = 3
ALL = range(PARTITIONS)
CLIENTS = list(tx.PRODUCERS)
# the group coordinator's first rebalance at once (the 3 s default only slows the tests)
BROKER_ARGS = ["--default-partitions", str(PARTITIONS), "--group-initial-rebalance-delay-ms", "0"]
# group coordinator answers a producer or consumer retries (it is loading, moved, or the
# transaction record's copy lags a moment)
RETRIABLE = {
    gw.COORDINATOR_LOAD_IN_PROGRESS,
    gw.COORDINATOR_NOT_AVAILABLE,
    gw.NOT_COORDINATOR,
    tw.CONCURRENT_TRANSACTIONS,
}

T = TypeVar("T")


def new_topic(bootstrap: str) -> str:
    topic = unique("txo")
    kw.ensure_topic(bootstrap, topic, PARTITIONS)
    return topic


def retried(call: Callable[[], T], error_of: Callable[[T], int], what: str) -> T:
    """``call()`` until its answer's error is not a retriable one (within the hang guard)."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        answer = call()
        if error_of(answer) not in RETRIABLE:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {answer} after {HANG_GUARD}s")
        time.sleep(0.05)


def first_retriable(errors: dict[tuple[str, int], int]) -> int:
    """A retriable error among a request's per-partition ``errors`` (else any of them)."""
    return next((e for e in errors.values() if e in RETRIABLE), max(errors.values()))


def fetch_offsets(
    bootstrap: str, group: str, topic: str, require_stable: bool
) -> dict[int, tw.StableOffset]:
    """OffsetFetch v7 of every partition of ``topic`` (retried while the coordinator is not
    ready)."""
    with kw.RawConnection.to(bootstrap) as conn:
        top, parts = retried(
            lambda: tw.offset_fetch_v7(conn, group, topic, ALL, require_stable),
            lambda answer: answer[0],
            f"OffsetFetch {group}",
        )
    assert top == kw.NONE, (top, parts)
    assert set(parts) == set(ALL), parts
    return parts


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch without require_stable; -1: none)."""
    parts = fetch_offsets(bootstrap, group, topic, require_stable=False)
    assert all(p.error_code == kw.NONE for p in parts.values()), parts
    return {p: o.offset for p, o in parts.items()}


def stable(bootstrap: str, group: str, topic: str, allowed: list[dict[int, int]]) -> dict[int, int]:
    """Polls OffsetFetch with require_stable until no partition is UNSTABLE_OFFSET_COMMIT (a
    bounded wait for the transaction's outcome): the stable offsets. Every partition that
    answers an offset on the way answers one of ``allowed``'s for it."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        parts = fetch_offsets(bootstrap, group, topic, require_stable=True)
        for p, got in parts.items():
            if got.error_code == kw.NONE:
                assert got.offset in [a[p] for a in allowed], (p, got, allowed)
            else:
                assert got.error_code == tw.UNSTABLE_OFFSET_COMMIT, (p, got)
        if all(got.error_code == kw.NONE for got in parts.values()):
            return {p: got.offset for p, got in parts.items()}
        if time.monotonic() > deadline:
            raise AssertionError(f"offsets of {group} still unstable after {HANG_GUARD}s")
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# consume-transform-produce apps: a group consumer and a transactional producer of one client


class App(Protocol):
    """A client's group consumer of the input (auto commit off, read_committed) and its
    transactional producer (``producer``: the client's defaults plus the transactional id)."""

    @property
    def producer(self) -> tx.TxnProducer: ...

    def poll(self, max_records: int) -> list[Got]:
        """The next records, at most ``max_records`` (none while it joins the group)."""
        ...

    def positions(self) -> dict[int, int]:
        """{partition: the next offset the app reads} of its assigned partitions (once
        known)."""
        ...

    def send_offsets(self, offsets: dict[int, int]) -> None:
        """send_offsets_to_transaction as the client's users write it."""
        ...

    def committed(self) -> dict[int, int]:
        """The group's committed offsets as the consumer fetches them (-1: none)."""
        ...

    def rewind(self) -> None:
        """Back to the group's committed offsets (after an abort)."""
        ...

    def close(self) -> None: ...


def got(partition: int, offset: int, key: Any, value: Any) -> Got:
    return Got(partition, offset, key, value, (), 0)


class ConfluentApp:
    """confluent-kafka: offsets with ``consumer.consumer_group_metadata()``."""

    def __init__(self, bootstrap: str, topic: str, group: str, transactional_id: str) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.producer = tx.ConfluentTxnProducer(bootstrap, transactional_id)
        self.producer.init()
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }  # read_committed: librdkafka's default
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])

    def poll(self, max_records: int) -> list[Got]:
        out = []
        for msg in self.consumer.consume(max_records, 0.5):
            assert msg.error() is None, f"consumer error: {msg.error()}"
            out.append(got(msg.partition(), msg.offset(), msg.key(), msg.value()))
        return out

    def positions(self) -> dict[int, int]:
        tps = self.consumer.position(self.consumer.assignment())
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}

    def send_offsets(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        metadata = self.consumer.consumer_group_metadata()
        self.producer.producer.send_offsets_to_transaction(tps, metadata, HANG_GUARD)

    def committed(self) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.topic, p) for p in ALL]
        return {tp.partition: max(tp.offset, -1) for tp in self.consumer.committed(tps, 30)}

    def rewind(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        for tp in self.consumer.committed(self.consumer.assignment(), 30):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.producer.close()


class KafkaPythonApp:
    """kafka-python: offsets with ``consumer.group_metadata()``."""

    def __init__(self, bootstrap: str, topic: str, group: str, transactional_id: str) -> None:
        from kafka import KafkaConsumer

        self.topic = topic
        self.producer = tx.KafkaPythonTxnProducer(bootstrap, transactional_id)
        self.producer.init()
        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )

    def poll(self, max_records: int) -> list[Got]:
        out = []
        for tp, records in self.consumer.poll(timeout_ms=500, max_records=max_records).items():
            out += [got(tp.partition, r.offset, r.key, r.value) for r in records]
        return out

    def positions(self) -> dict[int, int]:
        return {tp.partition: self.consumer.position(tp) for tp in self.consumer.assignment()}

    def send_offsets(self, offsets: dict[int, int]) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        sent = {
            TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()
        }
        self.producer.producer.send_offsets_to_transaction(sent, self.consumer.group_metadata())

    def committed(self) -> dict[int, int]:
        from kafka import TopicPartition

        out = {}
        for p in ALL:
            offset = self.consumer.committed(TopicPartition(self.topic, p))
            out[p] = -1 if offset is None else offset
        return out

    def rewind(self) -> None:
        for tp in self.consumer.assignment():
            offset = self.consumer.committed(tp)
            if offset is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.producer.close()


class AiokafkaApp:
    """aiokafka: offsets with the group id; consumer and producer on the producer's loop."""

    def __init__(self, bootstrap: str, topic: str, group: str, transactional_id: str) -> None:
        from aiokafka import AIOKafkaConsumer

        self.topic = topic
        self.group = group
        self.producer = tx.AiokafkaTxnProducer(bootstrap, transactional_id)
        self.producer.init()
        self.consumer: Any = None

        async def start() -> Any:
            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
            )
            await consumer.start()
            return consumer

        self.consumer = self._run(start())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.producer.loop.run_until_complete(asyncio.wait_for(coro, HANG_GUARD))

    def poll(self, max_records: int) -> list[Got]:
        batches = self._run(self.consumer.getmany(timeout_ms=500, max_records=max_records))
        out = []
        for tp, records in batches.items():
            out += [got(tp.partition, r.offset, r.key, r.value) for r in records]
        return out

    def positions(self) -> dict[int, int]:
        async def positions() -> dict[int, int]:
            return {
                tp.partition: await self.consumer.position(tp) for tp in self.consumer.assignment()
            }

        return self._run(positions())

    def send_offsets(self, offsets: dict[int, int]) -> None:
        from aiokafka import TopicPartition

        sent = {TopicPartition(self.topic, p): o for p, o in offsets.items()}
        self._run(self.producer.producer.send_offsets_to_transaction(sent, self.group))

    def committed(self) -> dict[int, int]:
        from aiokafka import TopicPartition

        async def fetch() -> dict[int, int]:
            out = {}
            for p in ALL:
                offset = await self.consumer.committed(TopicPartition(self.topic, p))
                out[p] = -1 if offset is None else offset
            return out

        return self._run(fetch())

    def rewind(self) -> None:
        async def rewind() -> None:
            for tp in self.consumer.assignment():
                offset = await self.consumer.committed(tp)
                if offset is None:
                    await self.consumer.seek_to_beginning(tp)
                else:
                    self.consumer.seek(tp, offset)

        self._run(rewind())

    def close(self) -> None:
        try:
            if self.consumer is not None:
                self._run(self.consumer.stop())
        finally:
            self.producer.close()


APPS: dict[str, Callable[[str, str, str, str], App]] = {
    "confluent": ConfluentApp,
    "kafka-python": KafkaPythonApp,
    "aiokafka": AiokafkaApp,
}


# ---------------------------------------------------------------------------------------------
# offsets sent to a transaction, and the group's offsets once it is decided


def send_offsets(
    producer: tx.TxnProducer, bootstrap: str, topic: str, group: str, offsets: dict[int, int]
) -> None:
    """send_offsets_to_transaction of ``producer`` (any client's) for ``group``, without a
    consumer in the group (confluent: the metadata of a consumer that has not joined it)."""
    if isinstance(producer, tx.ConfluentTxnProducer):
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
            metadata = consumer.consumer_group_metadata()
            producer.producer.send_offsets_to_transaction(tps, metadata, HANG_GUARD)
        finally:
            consumer.close()
    elif isinstance(producer, tx.KafkaPythonTxnProducer):
        from kafka import OffsetAndMetadata
        from kafka import TopicPartition as KTopicPartition

        sent = {KTopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        producer.producer.send_offsets_to_transaction(sent, group)
    else:
        assert isinstance(producer, tx.AiokafkaTxnProducer), producer
        from aiokafka import TopicPartition as ATopicPartition

        sent_a = {ATopicPartition(topic, p): o for p, o in offsets.items()}
        producer._run(producer.producer.send_offsets_to_transaction(sent_a, group))


def assert_not_visible(
    bs: str,
    group: str,
    topic: str,
    before: dict[int, int],
    pending: set[int],
    duration: float = 1.0,
) -> None:
    """For ``duration`` seconds: OffsetFetch answers ``before`` (the previous committed
    offsets), with require_stable UNSTABLE_OFFSET_COMMIT for the partitions in ``pending``
    and ``before`` for the others."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert committed(bs, group, topic) == before, "offsets of an open transaction"
        parts = fetch_offsets(bs, group, topic, require_stable=True)
        for p, got_ in parts.items():
            if p in pending:
                assert got_.error_code == tw.UNSTABLE_OFFSET_COMMIT, (p, got_)
            else:
                assert (got_.error_code, got_.offset) == (kw.NONE, before[p]), (p, got_)
        time.sleep(0.1)


def described(bootstrap: str, transactional_id: str) -> tw.DescribedTxn:
    with kw.RawConnection.to(bootstrap) as conn:
        return tw.describe_transactions(conn, [transactional_id])[transactional_id]


def watch_decision(
    bs: str,
    transactional_id: str,
    group: str,
    topic: str,
    before: dict[int, int],
    after: dict[int, int],
    state: str,
    coordinator: str | None = None,
) -> None:
    """After EndTxn, until DescribeTransactions (to ``coordinator``, default ``bs``) tells
    ``state`` (CompleteCommit or CompleteAbort; a bounded wait): the group's offsets
    (OffsetFetch) are ``before`` or ``after``, never ``before`` again once ``after`` showed;
    once the transaction is complete they are ``after``, stable (require_stable answers them,
    no UNSTABLE_OFFSET_COMMIT)."""
    seen_after = False
    deadline = time.monotonic() + HANG_GUARD
    while True:
        complete = described(coordinator or bs, transactional_id).state == state
        now = committed(bs, group, topic)
        assert now in (before, after), now
        assert now == after or not seen_after, "the new offsets went away again"
        seen_after = now == after
        if complete:
            break
        assert time.monotonic() < deadline, f"not {state} within {HANG_GUARD}s"
        time.sleep(0.02)
    assert now == after, f"{state}, and the group's offsets are {now}"
    parts = fetch_offsets(bs, group, topic, require_stable=True)
    assert {p: (o.error_code, o.offset) for p, o in parts.items()} == {
        p: (kw.NONE, o) for p, o in after.items()
    }


def open_offsets(
    conn: kw.RawConnection,
    transactional_id: str,
    group: str,
    offsets: dict[tuple[str, int], int],
    timeout_ms: int = 60_000,
) -> tuple[int, int]:
    """InitProducerId, AddOffsetsToTxn and TxnOffsetCommit over the wire (the transaction's
    coordinator and the group's are ``conn``'s broker): the producer (id, epoch) of the open
    transaction."""
    init = retried(
        lambda: tw.init_producer_id(conn, transactional_id, timeout_ms),
        lambda a: a.error_code,
        "InitProducerId",
    )
    assert init.error_code == kw.NONE, init
    producer = (init.producer_id, init.epoch)
    added = retried(
        lambda: tw.add_offsets_to_txn(conn, transactional_id, producer, group),
        lambda e: e,
        "AddOffsetsToTxn",
    )
    assert added == kw.NONE, added
    answer = retried(
        lambda: tw.txn_offset_commit(conn, transactional_id, group, producer, offsets),
        first_retriable,
        "TxnOffsetCommit",
    )
    assert answer == dict.fromkeys(offsets, kw.NONE), answer
    return producer
