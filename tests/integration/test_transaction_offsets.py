"""Offsets in transactions (KIP-98's sendOffsetsToTransaction, KIP-447's require_stable) and
the transactions' admin requests, on one broker and on a 3-broker cluster (etcd + S3).

What is checked: a consume-transform-produce app of each Python client (a group consumer with
auto commit off, a transactional producer with the client's defaults plus the transactional
id, some rounds aborted and the consumer rewound to the group's committed offsets) puts every
input record in the output exactly once as a read_committed consumer sees it, and leaves the
group's committed offsets at the input's end; offsets sent to an open transaction are not the
group's (OffsetFetch answers the previous ones, with require_stable UNSTABLE_OFFSET_COMMIT, and
librdkafka's read_committed consumer waits), those of an aborted transaction never become the
group's and those of a committed one do, by the time the transaction is complete; a
transaction of offsets alone commits them; the offsets of an open transaction survive the
group coordinator's restart (one broker) or loss (a cluster) and are the group's once it
commits; DescribeTransactions and ListTransactions describe and list transactions as they go.

Wire requests (AddOffsetsToTxn, TxnOffsetCommit, OffsetFetch v7, DescribeTransactions,
ListTransactions) come from support.transactions; the clients' transactional producers too.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

import pytest
from support import group_wire as gw
from support import kafka_wire as kw
from support import transactions as tx
from support import txn_wire_v2 as v2
from support.clients import HANG_GUARD, Got, Msg, confluent_produce, unique
from support.cluster import Cluster, create_topic
from support.procs import Broker, assert_no_panic

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
    tx.CONCURRENT_TRANSACTIONS,
}

T = TypeVar("T")


@pytest.fixture(scope="module")
def tbroker(module_broker_factory: Callable[..., Broker]) -> Broker:
    return module_broker_factory(BROKER_ARGS, name="txn-offsets")


@pytest.fixture(autouse=True)
def _broker_survives(request: pytest.FixtureRequest) -> Any:
    yield
    if "tbroker" in request.fixturenames:
        assert_no_panic(request.getfixturevalue("tbroker"))


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
) -> dict[int, tx.StableOffset]:
    """OffsetFetch v7 of every partition of ``topic`` (retried while the coordinator is not
    ready)."""
    with kw.RawConnection.to(bootstrap) as conn:
        top, parts = retried(
            lambda: tx.offset_fetch_v7(conn, group, topic, ALL, require_stable),
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
                assert got.error_code == tx.UNSTABLE_OFFSET_COMMIT, (p, got)
        if all(got.error_code == kw.NONE for got in parts.values()):
            return {p: got.offset for p, got in parts.items()}
        if time.monotonic() > deadline:
            raise AssertionError(f"offsets of {group} still unstable after {HANG_GUARD}s")
        time.sleep(0.05)


def input_records(bootstrap: str, topic: str, n: int) -> dict[int, list[bytes]]:
    """``n`` records spread over the partitions (produced outside any transaction): {partition:
    values in offset order}."""
    msgs = [Msg(i % PARTITIONS, f"k{i}".encode(), f"in-{i}".encode()) for i in range(n)]
    delivered = confluent_produce(bootstrap, topic, msgs)
    out: dict[int, list[bytes]] = {p: [] for p in ALL}
    for m, (p, _) in sorted(zip(msgs, delivered, strict=True), key=lambda md: md[1]):
        assert m.value is not None
        out[p].append(m.value)
    return out


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

BATCH = 7  # records per transaction at most
INPUT_RECORDS = 60


def run_app(app: App, output: str, ends: dict[int, int]) -> list[list[Got]]:
    """Rounds of read a batch, write it transformed to ``output`` in a transaction, send the
    consumer's positions to it, commit (every third round, from the second on: abort, and
    rewind to the group's committed offsets), until the offsets of the committed rounds reach
    ``ends``. The batches of the aborted rounds."""
    aborted: list[list[Got]] = []
    done: dict[int, int] = {}  # the offsets of the committed rounds
    rounds = 0
    deadline = time.monotonic() + 2 * HANG_GUARD
    while done != ends:
        assert time.monotonic() < deadline, f"{rounds} rounds, committed {done}, ends {ends}"
        batch = app.poll(BATCH)
        if not batch:
            continue
        app.producer.begin()
        out = [Msg(g.partition, g.key, b"out:" + (g.value or b"")) for g in batch]
        app.producer.send(output, out)
        offsets = app.positions()
        assert offsets, "records polled, no position"
        app.send_offsets(offsets)
        if rounds % 3 == 1:
            app.producer.abort()
            app.rewind()
            aborted.append(batch)
        else:
            app.producer.commit()
            done.update(offsets)
        rounds += 1
    return aborted


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_transform_produce_is_exactly_once(tbroker: Broker, client: str) -> None:
    """60 input records over 3 partitions through a consume-transform-produce app, 7 records
    a transaction, every third one aborted (and the consumer rewound to the committed
    offsets): a read_committed consumer of the output shows each input record transformed
    exactly once, in its partition's order; a read_uncommitted one shows the aborted rounds'
    records too; the group's committed offsets are the input's end offsets, as the app's
    consumer and OffsetFetch (with and without require_stable) tell them."""
    bs = tbroker.bootstrap
    source, output = new_topic(bs), new_topic(bs)
    values = input_records(bs, source, INPUT_RECORDS)
    ends = {p: len(values[p]) for p in ALL}
    assert tx.ends(bs, source, ALL, tx.READ_UNCOMMITTED) == ends
    group = unique("ctp")
    app = APPS[client](bs, source, group, unique("tx"))
    try:
        aborted = run_app(app, output, ends)
        assert aborted, "no round was aborted"
        # the last commit's offsets may still be on their way to the group (the transaction
        # completes after EndTxn is answered): the stable offsets, then the consumer's view
        assert stable(bs, group, source, [ends]) == ends
        assert app.committed() == ends, "the group's committed offsets, as the consumer tells"
    finally:
        app.close()
    assert committed(bs, group, source) == ends
    # the output: each input record once (read_committed), the aborted rounds' too (uncommitted)
    out_ends = tx.ends(bs, output, ALL, tx.READ_UNCOMMITTED)
    assert tx.ends(bs, output, ALL, tx.READ_COMMITTED) == out_ends, "an open transaction"
    shown = tx.read_all("confluent", bs, output, out_ends, committed=True)
    want = {p: [b"out:" + v for v in values[p]] for p in ALL}
    assert {p: [g.value for g in shown if g.partition == p] for p in ALL} == want
    everything = tx.read_all("confluent", bs, output, out_ends, committed=False)
    assert len(everything) == INPUT_RECORDS + sum(len(batch) for batch in aborted)


# ---------------------------------------------------------------------------------------------
# offsets of open, aborted and committed transactions


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
                assert got_.error_code == tx.UNSTABLE_OFFSET_COMMIT, (p, got_)
            else:
                assert (got_.error_code, got_.offset) == (kw.NONE, before[p]), (p, got_)
        time.sleep(0.1)


def described(bootstrap: str, transactional_id: str) -> tx.DescribedTxn:
    with kw.RawConnection.to(bootstrap) as conn:
        return tx.describe_transactions(conn, [transactional_id])[transactional_id]


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


@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_are_the_groups_only_when_their_transaction_commits(
    tbroker: Broker, client: str
) -> None:
    """The group has offsets 2, 3 and none committed. A transaction writes records and sends
    offsets 10, 11, 12: while it is open OffsetFetch answers 2, 3, none, and with
    require_stable UNSTABLE_OFFSET_COMMIT; it aborts: once it is complete the offsets are 2, 3,
    none, stable, and they were never anything else. The next transaction sends 20, 21 and
    commits: the same while open; after EndTxn OffsetFetch answers the previous offsets or
    the new ones, and by the time the transaction is complete (DescribeTransactions) the new
    ones, stable."""
    bs = tbroker.bootstrap
    topic, output = new_topic(bs), new_topic(bs)
    group = unique("grp")
    first = {(topic, 0): gw.CommitOffset(2), (topic, 1): gw.CommitOffset(3)}
    with kw.RawConnection.to(bs) as conn:
        answer = gw.offset_commit(conn, group, first)
    assert set(answer.values()) == {kw.NONE}, answer
    before = {0: 2, 1: 3, 2: -1}
    assert committed(bs, group, topic) == before
    transactional_id = unique("tx")
    producer = tx.PRODUCERS[client](bs, transactional_id)
    try:
        producer.init()
        producer.begin()
        producer.send(output, tx.records("aborted", 3, PARTITIONS))
        send_offsets(producer, bs, topic, group, {0: 10, 1: 11, 2: 12})
        assert_not_visible(bs, group, topic, before, pending={0, 1, 2})
        assert described(bs, transactional_id).state == "Ongoing"
        producer.abort()
        watch_decision(bs, transactional_id, group, topic, before, before, "CompleteAbort")

        producer.begin()
        producer.send(output, tx.records("committed", 3, PARTITIONS))
        send_offsets(producer, bs, topic, group, {0: 20, 1: 21})
        assert_not_visible(bs, group, topic, before, pending={0, 1})
        producer.commit()
        after = {0: 20, 1: 21, 2: -1}
        watch_decision(bs, transactional_id, group, topic, before, after, "CompleteCommit")
    finally:
        producer.close()
    assert committed(bs, group, topic) == after


def test_a_read_committed_consumer_waits_for_offsets_of_an_open_transaction(
    tbroker: Broker,
) -> None:
    """librdkafka's read_committed consumer asks OffsetFetch with require_stable: while a
    transaction with offsets of the group is open, its committed() waits (times out); a
    read_uncommitted consumer's answers the previous offset at once. A committed() under way
    when the transaction commits answers the transaction's offset."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    bs = tbroker.bootstrap
    topic = new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx")
    tp = [TopicPartition(topic, 0)]

    def consumer(isolation: str) -> Any:
        conf = {"bootstrap.servers": bs, "group.id": group, "isolation.level": isolation}
        return Consumer({**conf, "enable.auto.commit": False})

    with kw.RawConnection.to(bs) as conn:
        answer = gw.offset_commit(conn, group, {(topic, 0): gw.CommitOffset(5)})
        assert answer == {(topic, 0): kw.NONE}
        producer = open_offsets(conn, transactional_id, group, {(topic, 0): 10})
        stable_reader, reader = consumer("read_committed"), consumer("read_uncommitted")
        try:
            with pytest.raises(KafkaException) as waited:
                stable_reader.committed(tp, 2)
            assert waited.value.args[0].code() == KafkaError._TIMED_OUT, waited.value
            assert [t.offset for t in reader.committed(tp, 10)] == [5]
            pending: dict[str, Any] = {}

            def ask() -> None:
                try:
                    pending["answer"] = stable_reader.committed(tp, HANG_GUARD)
                except KafkaException as exc:
                    pending["answer"] = exc

            asking = threading.Thread(target=ask)
            asking.start()
            try:
                time.sleep(1.0)  # the question is under way (still answered UNSTABLE)
                assert "answer" not in pending, pending
                assert tx.end_txn(conn, transactional_id, producer, True) == kw.NONE
            finally:
                asking.join(HANG_GUARD + 5)
            answered = pending["answer"]
            assert not isinstance(answered, Exception), answered
            assert [t.offset for t in answered] == [10]
            assert [t.offset for t in reader.committed(tp, 10)] == [10]
        finally:
            stable_reader.close()
            reader.close()


@pytest.mark.parametrize("ended_by", ["timeout", "fencing"])
def test_offsets_of_a_transaction_the_coordinator_aborts_are_dropped(
    tbroker: Broker, ended_by: str
) -> None:
    """Offsets 10, 11 over committed 3 in a transaction the coordinator aborts: past its 2 s
    timeout, or when a new producer with the same transactional id initialises. Once the
    transaction is complete (DescribeTransactions: CompleteAbort; or the new producer's
    InitProducerId answered) the offsets are 3, none, stable; the old
    producer's next TxnOffsetCommit is refused (INVALID_PRODUCER_EPOCH or PRODUCER_FENCED)
    and changes nothing."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx")
    before = {0: 3, 1: -1, 2: -1}
    with kw.RawConnection.to(bs) as conn:
        answer = gw.offset_commit(conn, group, {(topic, 0): gw.CommitOffset(3)})
        assert answer == {(topic, 0): kw.NONE}, answer
        timeout_ms = 2000 if ended_by == "timeout" else 60_000
        old = open_offsets(
            conn, transactional_id, group, {(topic, 0): 10, (topic, 1): 11}, timeout_ms
        )
        assert_not_visible(bs, group, topic, before, pending={0, 1}, duration=0.2)
        if ended_by == "fencing":
            init = retried(
                lambda: tx.init_producer_id(conn, transactional_id),
                lambda a: a.error_code,
                "InitProducerId",
            )
            assert init.error_code == kw.NONE and init.epoch > old[1], init

    if ended_by == "timeout":

        def aborted() -> str | None:
            d = described(bs, transactional_id)
            return None if d.state == "CompleteAbort" else f"described {d}"

        tx.wait_for(aborted)
    # else the new producer's InitProducerId answered once the abort was complete
    parts = fetch_offsets(bs, group, topic, require_stable=True)
    assert {p: (o.error_code, o.offset) for p, o in parts.items()} == {
        p: (kw.NONE, o) for p, o in before.items()
    }
    with kw.RawConnection.to(bs) as conn:
        late = tx.txn_offset_commit(conn, transactional_id, group, old, {(topic, 0): 12})
    assert late[(topic, 0)] in (kw.INVALID_PRODUCER_EPOCH, tx.PRODUCER_FENCED), late
    assert stable(bs, group, topic, [before]) == before


def test_a_later_plain_commit_outlives_an_earlier_transactional_one(tbroker: Broker) -> None:
    """As Kafka's group coordinator keeps the most recent of a transactional and a plain
    commit: TxnOffsetCommit 10 for partitions 0 and 1, then a plain OffsetCommit of 15 for
    partition 0 while the transaction is open (answered at once: 15 is the group's); the
    transaction commits: partition 0 stays at 15 (the later commit), partition 1 is 10."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx")
    with kw.RawConnection.to(bs) as conn:
        producer = open_offsets(conn, transactional_id, group, {(topic, 0): 10, (topic, 1): 10})
        answer = gw.offset_commit(conn, group, {(topic, 0): gw.CommitOffset(15)})
        assert answer == {(topic, 0): kw.NONE}, answer
        assert committed(bs, group, topic) == {0: 15, 1: -1, 2: -1}
        assert tx.end_txn(conn, transactional_id, producer, True) == kw.NONE

    def complete() -> str | None:
        d = described(bs, transactional_id)
        return None if d.state == "CompleteCommit" else f"described {d}"

    tx.wait_for(complete)
    assert stable(bs, group, topic, [{0: 15, 1: 10, 2: -1}]) == {0: 15, 1: 10, 2: -1}


def test_txn_offset_commit_of_a_group_member_is_checked(tbroker: Broker) -> None:
    """TxnOffsetCommit v3 names the consumer the offsets come from (KIP-447): the group's one
    member, in its generation, commits offset 7 for partition 0; an unknown member id is
    UNKNOWN_MEMBER_ID and a generation other than the group's ILLEGAL_GENERATION, and their
    offsets for partition 1 are kept nowhere: once the transaction commits partition 0 is at
    7, partition 1 has none."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx")
    protocols = [("range", gw.subscription([topic]))]
    with kw.RawConnection.to(bs) as conn:
        first = gw.join_group(conn, group, protocols=protocols)
        assert first.error_code == gw.MEMBER_ID_REQUIRED, first
        joined = gw.join_group(conn, group, first.member_id, protocols=protocols)
        assert joined.error_code == kw.NONE, joined
        member, generation = joined.member_id, joined.generation_id
        assignment = {member: gw.assignment({topic: list(ALL)})}
        synced = gw.sync_group(conn, group, generation, member, assignment)
        assert synced.error_code == kw.NONE, synced

        init = tx.init_producer_id(conn, transactional_id)
        assert init.error_code == kw.NONE, init
        producer = (init.producer_id, init.epoch)
        assert tx.add_offsets_to_txn(conn, transactional_id, producer, group) == kw.NONE

        def commit(offsets: dict[tuple[str, int], int], gen: int, who: str) -> int:
            answer = retried(
                lambda: v2.txn_offset_commit(
                    conn,
                    3,
                    transactional_id,
                    group,
                    producer,
                    offsets,
                    generation_id=gen,
                    member_id=who,
                ),
                first_retriable,
                "TxnOffsetCommit v3",
            )
            assert set(answer) == set(offsets), answer
            assert len(set(answer.values())) == 1, answer
            return next(iter(answer.values()))

        assert commit({(topic, 1): 99}, generation, "nobody") == gw.UNKNOWN_MEMBER_ID
        assert commit({(topic, 1): 99}, generation + 1, member) == gw.ILLEGAL_GENERATION
        assert commit({(topic, 0): 7}, generation, member) == kw.NONE
        nothing = dict.fromkeys(ALL, -1)
        assert_not_visible(bs, group, topic, nothing, pending={0}, duration=0.2)
        assert tx.end_txn(conn, transactional_id, producer, True) == kw.NONE
    after = {0: 7, 1: -1, 2: -1}
    watch_decision(bs, transactional_id, group, topic, nothing, after, "CompleteCommit")


# ---------------------------------------------------------------------------------------------
# a transaction of offsets alone


@pytest.mark.parametrize("client", CLIENTS)
def test_a_transaction_of_offsets_alone_commits_them(tbroker: Broker, client: str) -> None:
    """begin, send_offsets_to_transaction, commit, with no record produced: the offsets are
    the group's once the transaction is complete (and an aborted one of offsets alone leaves
    them as they were)."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx")
    nothing = dict.fromkeys(ALL, -1)
    producer = tx.PRODUCERS[client](bs, transactional_id)
    try:
        producer.init()
        producer.begin()
        send_offsets(producer, bs, topic, group, {0: 4, 1: 5, 2: 6})
        producer.abort()
        watch_decision(bs, transactional_id, group, topic, nothing, nothing, "CompleteAbort")
        producer.begin()
        send_offsets(producer, bs, topic, group, {0: 7, 2: 9})
        assert_not_visible(bs, group, topic, nothing, pending={0, 2}, duration=0.3)
        producer.commit()
        after = {0: 7, 1: -1, 2: 9}
        watch_decision(bs, transactional_id, group, topic, nothing, after, "CompleteCommit")
    finally:
        producer.close()
    # no record anywhere: the topic is as empty as it was
    assert tx.ends(bs, topic, ALL, tx.READ_UNCOMMITTED) == dict.fromkeys(ALL, 0)


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
        lambda: tx.init_producer_id(conn, transactional_id, timeout_ms),
        lambda a: a.error_code,
        "InitProducerId",
    )
    assert init.error_code == kw.NONE, init
    producer = (init.producer_id, init.epoch)
    added = retried(
        lambda: tx.add_offsets_to_txn(conn, transactional_id, producer, group),
        lambda e: e,
        "AddOffsetsToTxn",
    )
    assert added == kw.NONE, added
    answer = retried(
        lambda: tx.txn_offset_commit(conn, transactional_id, group, producer, offsets),
        first_retriable,
        "TxnOffsetCommit",
    )
    assert answer == dict.fromkeys(offsets, kw.NONE), answer
    return producer


# ---------------------------------------------------------------------------------------------
# the group's coordinator restarts or goes away between TxnOffsetCommit and EndTxn


@pytest.mark.parametrize(
    ("via", "hard"),
    [("wire", False), ("wire", True), ("confluent", True)],
    ids=["wire-sigterm", "wire-sigkill", "confluent-sigkill"],
)
def test_pending_offsets_survive_a_restart(
    broker_factory: Callable[..., Broker], via: str, hard: bool
) -> None:
    """One broker (the transaction's and the group's coordinator): offsets 10, 11, 12 over
    committed 3 in an open transaction (over the wire: AddOffsetsToTxn, TxnOffsetCommit; or
    confluent-kafka's producer, which also writes 6 records); the broker restarts on its data
    dir (SIGTERM or SIGKILL): the offsets are still pending (require_stable:
    UNSTABLE_OFFSET_COMMIT; without: 3, none, none) and the transaction Ongoing; EndTxn (the
    producer's commit) commits: the offsets are the group's, the records readable."""
    broker = broker_factory(BROKER_ARGS, name="restarted")
    bs = broker.bootstrap
    topic, output = new_topic(bs), new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx")
    with kw.RawConnection.to(bs) as conn:
        answer = gw.offset_commit(conn, group, {(topic, 0): gw.CommitOffset(3)})
    assert answer == {(topic, 0): kw.NONE}, answer
    before = {0: 3, 1: -1, 2: -1}
    after = {0: 10, 1: 11, 2: 12}
    client: tx.TxnProducer | None = None
    written: list[tuple[int, int, bytes | None]] = []
    try:
        if via == "wire":
            pending = {(topic, p): o for p, o in after.items()}
            with kw.RawConnection.to(bs) as conn:
                wire = open_offsets(conn, transactional_id, group, pending)
        else:
            client = tx.PRODUCERS[via](bs, transactional_id)
            client.init()
            client.begin()
            msgs = tx.records(via, 6, PARTITIONS)
            written = tx.placed(msgs, client.send(output, msgs))
            send_offsets(client, bs, topic, group, after)
        assert_not_visible(bs, group, topic, before, pending=set(ALL), duration=0.2)
        broker.restart(hard=hard)
        assert_not_visible(bs, group, topic, before, pending=set(ALL), duration=0.2)
        assert described(bs, transactional_id).state == "Ongoing"
        if client is None:
            with kw.RawConnection.to(bs) as conn:
                ended = retried(
                    lambda: tx.end_txn(conn, transactional_id, wire, True), lambda e: e, "EndTxn"
                )
            assert ended == kw.NONE, ended
        else:
            client.commit()
        watch_decision(bs, transactional_id, group, topic, before, after, "CompleteCommit")
    finally:
        if client is not None:
            client.close()
    if written:
        ends = tx.ends(bs, output, ALL, tx.READ_UNCOMMITTED)
        assert tx.ends(bs, output, ALL, tx.READ_COMMITTED) == ends
        shown = tx.read_all("confluent", bs, output, ends, committed=True)
        assert tx.shown(shown) == written
    assert_no_panic(broker)


def owner_ends(c: Cluster, topic: str, isolation: int) -> dict[int, int]:
    """ListOffsets latest of each partition, asked of its owner."""
    out = {}
    for p in ALL:
        with kw.RawConnection.to(c.owner(topic, p).bootstrap) as conn:
            res = tx.list_offset(conn, topic, p, isolation)
        assert res.error_code == kw.NONE, (p, res)
        out[p] = res.offset
    return out


@pytest.mark.parametrize("via", ["wire", *CLIENTS])
def test_pending_offsets_survive_the_group_coordinators_loss(
    cluster: Callable[..., Cluster], via: str
) -> None:
    """3 brokers; the transaction's coordinator is not the group's. The group has offset 3
    committed; offsets 10, 11 go to a transaction (over the wire: InitProducerId,
    AddOffsetsToTxn, TxnOffsetCommit; or a client's producer, which also writes 6 records);
    the group's coordinator is killed: the group's new coordinator answers
    UNSTABLE_OFFSET_COMMIT (require_stable) and the previous offsets. EndTxn (or the client's
    commit) commits: once the transaction is complete the new coordinator answers 10, 11, and
    a read_committed consumer reads the records. DescribeTransactions is answered by the
    transaction's coordinator (NOT_COORDINATOR elsewhere)."""
    c = cluster(3, args=BROKER_ARGS[2:])
    topic, output = unique("txo-cl"), unique("txo-out")
    for name in (topic, output):
        create_topic(c.bootstrap(), name, PARTITIONS)
    c.wait_converged([topic, output], dict.fromkeys((topic, output), PARTITIONS), until=c.claimed)
    group = unique("grp")
    with kw.RawConnection.to(c.any_live().bootstrap) as conn:
        group_coordinator = gw.find_coordinator(conn, group)
        assert group_coordinator.error_code == kw.NONE, group_coordinator
        for _ in range(100):  # a transactional id another broker coordinates
            transactional_id = unique("tx")
            found = tx.find_coordinator(conn, transactional_id, tx.TRANSACTION_KEY)
            assert found.error_code == kw.NONE, found
            if found.node_id != group_coordinator.node_id:
                break
        else:
            raise AssertionError("every transactional id on the group's coordinator")
    group_broker = c.brokers[group_coordinator.node_id]
    txn_broker = c.brokers[found.node_id]
    assert f"{found.host}:{found.port}" == txn_broker.bootstrap, found
    with kw.RawConnection.to(group_broker.bootstrap) as conn:
        answer = gw.offset_commit(conn, group, {(topic, 0): gw.CommitOffset(3)})
        assert answer == {(topic, 0): kw.NONE}, answer
    before = {0: 3, 1: -1, 2: -1}
    after = {0: 10, 1: 11, 2: -1}
    wire: tuple[int, int] | None = None
    client: tx.TxnProducer | None = None
    written: list[tuple[int, int, bytes | None]] = []
    try:
        if via == "wire":
            with (
                kw.RawConnection.to(txn_broker.bootstrap) as txn_conn,
                kw.RawConnection.to(group_broker.bootstrap) as group_conn,
            ):
                init = tx.init_producer_id(txn_conn, transactional_id)
                assert init.error_code == kw.NONE, init
                wire = (init.producer_id, init.epoch)
                added = tx.add_offsets_to_txn(txn_conn, transactional_id, wire, group)
                assert added == kw.NONE, added
                pending = {(topic, 0): 10, (topic, 1): 11}
                answer = retried(
                    lambda: tx.txn_offset_commit(
                        group_conn, transactional_id, group, wire, pending
                    ),
                    first_retriable,
                    "TxnOffsetCommit",
                )
                assert answer == dict.fromkeys(pending, kw.NONE), answer
        else:
            client = tx.PRODUCERS[via](c.bootstrap(), transactional_id)
            client.init()
            client.begin()
            msgs = tx.records(via, 6, PARTITIONS)
            written = tx.placed(msgs, client.send(output, msgs))
            send_offsets(client, c.bootstrap(), topic, group, {0: 10, 1: 11})
        # DescribeTransactions: the transaction's coordinator only
        for b in c.live:
            with kw.RawConnection.to(b.bootstrap) as conn:
                txn = tx.describe_transactions(conn, [transactional_id])[transactional_id]
            if b is txn_broker:
                assert (txn.error_code, txn.state) == (kw.NONE, "Ongoing"), txn
            else:
                assert txn.error_code == gw.NOT_COORDINATOR, (b.name, txn)
        assert_not_visible(group_broker.bootstrap, group, topic, before, {0, 1}, 0.2)
        group_broker.kill()
        c.wait_converged()
        # the group's new coordinator: the offsets still pending
        with kw.RawConnection.to(txn_broker.bootstrap) as conn:
            moved = gw.find_coordinator(conn, group)
        assert moved.error_code == kw.NONE and moved.node_id in c.live_ids, moved
        new_bs = c.brokers[moved.node_id].bootstrap
        assert_not_visible(new_bs, group, topic, before, pending={0, 1}, duration=0.2)
        if wire is not None:
            with kw.RawConnection.to(txn_broker.bootstrap) as conn:
                assert tx.end_txn(conn, transactional_id, wire, True) == kw.NONE
        else:
            assert client is not None
            client.commit()
        txn_bs = txn_broker.bootstrap
        watch_decision(
            new_bs, transactional_id, group, topic, before, after, "CompleteCommit", txn_bs
        )
    finally:
        if client is not None:
            client.close()
    assert stable(new_bs, group, topic, [after]) == after
    if written:
        ends = owner_ends(c, output, tx.READ_UNCOMMITTED)
        assert owner_ends(c, output, tx.READ_COMMITTED) == ends
        shown = tx.read_all("confluent", c.bootstrap(), output, ends, committed=True)
        assert tx.shown(shown) == written
    for b in c.live:
        assert_no_panic(b)


# ---------------------------------------------------------------------------------------------
# DescribeTransactions, ListTransactions


def test_describe_and_list_transactions(tbroker: Broker) -> None:
    """A transaction with two partitions of a topic and a 45 s timeout: DescribeTransactions
    tells it Ongoing with them, its timeout, producer id and epoch, and a start time of now;
    ListTransactions lists it under Ongoing (and its producer id, and a duration filter it
    passes; not under CompleteCommit, another producer id, or a duration it does not pass) and
    reports unknown state names; once committed it is CompleteCommit. An unknown
    transactional id is TRANSACTIONAL_ID_NOT_FOUND."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    transactional_id = unique("tx")
    unknown = unique("never")
    with kw.RawConnection.to(bs) as conn:
        init = tx.init_producer_id(conn, transactional_id, 45_000)
        assert init.error_code == kw.NONE, init
        producer = (init.producer_id, init.epoch)
        started = int(time.time() * 1000)
        added = tx.add_partitions_to_txn(conn, transactional_id, producer, {topic: [0, 2]})
        assert added == {(topic, 0): kw.NONE, (topic, 2): kw.NONE}, added
        now = int(time.time() * 1000)

        answer = tx.describe_transactions(conn, [transactional_id, unknown])
        assert set(answer) == {transactional_id, unknown}, answer
        ongoing = answer[transactional_id]
        assert ongoing.error_code == kw.NONE, ongoing
        assert ongoing.state == "Ongoing"
        assert ongoing.timeout_ms == 45_000
        assert (ongoing.producer_id, ongoing.producer_epoch) == producer
        assert ongoing.partitions == {topic: [0, 2]}
        assert started - 1000 <= ongoing.start_time_ms <= now + 1000, (started, ongoing, now)
        assert answer[unknown].error_code == tx.TRANSACTIONAL_ID_NOT_FOUND, answer[unknown]

        listed = tx.list_transactions(conn, ["Ongoing", "NoSuchState"])
        assert listed.error_code == kw.NONE, listed
        assert listed.unknown_state_filters == ["NoSuchState"]
        assert listed.transactions.get(transactional_id) == (producer[0], "Ongoing"), listed
        assert all(state == "Ongoing" for _, state in listed.transactions.values()), listed
        everything = tx.list_transactions(conn, [])
        assert everything.unknown_state_filters == []
        assert everything.transactions.get(transactional_id) == (producer[0], "Ongoing")
        by_producer = tx.list_transactions(conn, [], [producer[0]])
        assert by_producer.transactions == {transactional_id: (producer[0], "Ongoing")}
        other_producer = tx.list_transactions(conn, ["Ongoing"], [producer[0] + 1_000_000])
        assert transactional_id not in other_producer.transactions
        not_yet = tx.list_transactions(conn, ["CompleteCommit"])
        assert transactional_id not in not_yet.transactions
        # v1: transactions running longer than the duration filter (this one: a while now)
        time.sleep(0.02)
        assert transactional_id in tx.list_transactions(conn, [], duration_ms=0).transactions
        long = tx.list_transactions(conn, [], duration_ms=3_600_000)
        assert long.error_code == kw.NONE, long
        assert transactional_id not in long.transactions, long

        assert tx.end_txn(conn, transactional_id, producer, True) == kw.NONE

    def complete() -> str | None:
        d = described(bs, transactional_id)
        return None if d.state == "CompleteCommit" else f"described {d}"

    tx.wait_for(complete)
    done = described(bs, transactional_id)
    assert done.error_code == kw.NONE
    assert (done.producer_id, done.timeout_ms) == (producer[0], 45_000), done
    assert done.partitions == {}, "a complete transaction has no partitions (as in Kafka)"
    with kw.RawConnection.to(bs) as conn:
        listed = tx.list_transactions(conn, ["CompleteCommit"])
        assert listed.transactions.get(transactional_id) == (producer[0], "CompleteCommit")
        assert transactional_id not in tx.list_transactions(conn, ["Ongoing"]).transactions
