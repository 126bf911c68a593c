"""Transactions under faults: a consume-transform-produce app that recovers from errors the
way real applications do, and the checks it and support/txn_workload's randomized workload end
with (what read_committed consumers show, no
transaction left open, the transaction markers in the log).

Everything here drives confluent-kafka (librdkafka) with its defaults plus what the test is
about (``transactional.id``; a group with auto commit off), and reads the outcome through the
raw wire helpers of support/transactions (ListOffsets with an isolation level to each
partition's owner, Fetch, DescribeTransactions, ListTransactions, FindCoordinator).

``CtpApp``: rounds of consume a batch of the input, write each record transformed to the same
partition of the output in a transaction, send the records' next offsets with
``consumer.consumer_group_metadata()``, commit. On an error it does what librdkafka's
documentation prescribes: retry the call when the error is retriable, abort the transaction and
rewind the consumer to the group's committed offsets when the transaction requires an abort, and
re-create the producer and the consumer (then rewind) when the error is fatal. A commit that
failed fatally is in doubt: the group's committed offsets (stable ones: librdkafka's
read_committed consumer asks with require_stable) say what it did. ``hook(round, phase,
partitions)`` lets a test inject a fault at a point of a round: "produced" (its records
written and acknowledged), "offsets" (its offsets sent too) or "committed"; ``partitions``
are the output partitions the round writes to.

``TxnWorkload`` (support/txn_workload) uses the same error handling and checks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from . import kafka_wire as kw
from . import transactions as tx
from .clients import HANG_GUARD
from .cluster import Cluster, whole_batches

LIVENESS = 120.0  # seconds: a guard against a hang, never a performance limit
UNFINISHED = ("Ongoing", "PrepareCommit", "PrepareAbort")
FINISHED = ("Empty", "CompleteCommit", "CompleteAbort")
ABORT_MARKER, COMMIT_MARKER = 0, 1  # a control record's key: version int16, type int16


def kafka_error(exc: BaseException) -> Any:
    """The KafkaError of a confluent-kafka exception (None for anything else)."""
    from confluent_kafka import KafkaException

    if isinstance(exc, KafkaException) and exc.args:
        return exc.args[0]
    return None


# ---------------------------------------------------------------------------------------------
# the outcome, as the brokers tell it


def retrying(call: Callable[[], Any], noted: Callable[[Any, bool], None]) -> Any:
    """``call()`` again while it fails with a retriable error (for up to ``LIVENESS``), as
    librdkafka's documentation prescribes; Abortable or Fatal for the errors that need an
    abort or a new producer. ``noted(error, retried)`` hears of each error."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + LIVENESS
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = kafka_error(exc)
            again = not (err.fatal() or err.txn_requires_abort())
            again = again and err.retriable() and time.monotonic() <= deadline
            noted(err, again)
            if err.fatal():
                raise Fatal(str(err)) from exc
            if err.txn_requires_abort():
                raise Abortable(str(err)) from exc
            if not again:
                raise


def owner_of(c: Cluster, topic: str, partition: int) -> str:
    """The bootstrap address of the partition's owner (a live broker)."""
    return c.brokers[c.leaders(topic)[partition].broker_id].bootstrap


def stable_ends(c: Cluster, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """{partition: (high watermark, last stable offset)}: ListOffsets latest read_uncommitted
    and read_committed, both asked of the partition's owner."""
    out = {}
    for p in range(partitions):
        with kw.RawConnection.to(owner_of(c, topic, p)) as conn:
            high = tx.list_offset(conn, topic, p, tx.READ_UNCOMMITTED)
            lso = tx.list_offset(conn, topic, p, tx.READ_COMMITTED)
        assert high.error_code == lso.error_code == kw.NONE, (topic, p, high, lso)
        out[p] = (high.offset, lso.offset)
    return out


def wait_all_stable(c: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Waits (bounded) until every partition's last stable offset is its high watermark (no
    transaction open in it); {partition: high watermark}."""
    seen: dict[int, tuple[int, int]] = {}

    def check() -> str | None:
        nonlocal seen
        try:
            seen = stable_ends(c, topic, partitions)
        except (OSError, kw.ConnectionClosed, AssertionError) as exc:
            return f"ListOffsets: {exc!r}"
        open_ = {p: e for p, e in seen.items() if e[0] != e[1]}
        return f"{topic}: (end, last stable) {open_}" if open_ else None

    tx.wait_for(check, LIVENESS)
    return {p: high for p, (high, _) in seen.items()}


def coordinator_of(c: Cluster, transactional_id: str) -> int:
    """The broker id a live broker names as the transactional id's coordinator (retried
    while there is none, or it names a broker that is not live)."""
    found: list[int] = []

    def check() -> str | None:
        try:
            with kw.RawConnection.to(c.any_live().bootstrap) as conn:
                answer = tx.find_coordinator(conn, transactional_id, tx.TRANSACTION_KEY)
        except (OSError, kw.ConnectionClosed) as exc:
            return repr(exc)
        if answer.error_code != kw.NONE or answer.node_id not in c.live_ids:
            return f"FindCoordinator: {answer}"
        found[:] = [answer.node_id]
        return None

    tx.wait_for(check, LIVENESS)
    return found[0]


def described(c: Cluster, transactional_id: str) -> tx.DescribedTxn:
    """DescribeTransactions of the id, asked of its coordinator (retried while the broker
    asked is not it yet)."""
    answers: list[tx.DescribedTxn] = []

    def check() -> str | None:
        node = coordinator_of(c, transactional_id)
        try:
            with kw.RawConnection.to(c.brokers[node].bootstrap) as conn:
                got = tx.describe_transactions(conn, [transactional_id])[transactional_id]
        except (OSError, kw.ConnectionClosed) as exc:
            return repr(exc)
        if got.error_code != kw.NONE:
            return f"broker{node}: {got}"
        answers[:] = [got]
        return None

    tx.wait_for(check, LIVENESS)
    return answers[0]


def wait_finished(c: Cluster, transactional_id: str) -> tx.DescribedTxn:
    """Waits (bounded) until DescribeTransactions says the id's transaction is finished
    (Empty, CompleteCommit or CompleteAbort); that answer."""
    last: list[tx.DescribedTxn] = []

    def check() -> str | None:
        last[:] = [described(c, transactional_id)]
        return None if last[0].state in FINISHED else f"described {last[0]}"

    tx.wait_for(check, LIVENESS)
    return last[0]


def listed_unfinished(c: Cluster, transactional_id: str) -> dict[int, str | None]:
    """{broker id: state} of every live broker whose ListTransactions lists the id as
    Ongoing, PrepareCommit or PrepareAbort."""
    out = {}
    for b in c.live:
        assert b.broker_id is not None
        with kw.RawConnection.to(b.bootstrap) as conn:
            listed = tx.list_transactions(conn, list(UNFINISHED))
        assert listed.error_code == kw.NONE, (b.name, listed)
        if transactional_id in listed.transactions:
            out[b.broker_id] = listed.transactions[transactional_id][1]
    return out


def txn_record(c: Cluster, transactional_id: str) -> dict[str, Any] | None:
    """The id's record in the metadata store (transactions/{id}), as stored."""
    escaped = transactional_id.replace("%", "%25").replace("/", "%2F")
    raw = c.meta.client.get(f"{c.meta.root}/transactions/{escaped}")
    return None if raw is None else dict(json.loads(raw))


@dataclass(frozen=True)
class Marker:
    offset: int
    producer_id: int
    epoch: int
    commit: bool


def markers(bootstrap: str, topic: str, partition: int, end: int) -> list[Marker]:
    """The transaction markers (control batches) in [0, end) of a partition, as ``bootstrap``
    serves them (Fetch v4, read_uncommitted)."""
    out = []
    offset = 0
    deadline = time.monotonic() + LIVENESS
    with kw.RawConnection.to(bootstrap) as conn:
        while offset < end:
            assert time.monotonic() < deadline, f"{topic}/{partition}: stuck at {offset}/{end}"
            fetched = tx.fetch(conn, topic, partition, offset, tx.READ_UNCOMMITTED)
            assert fetched.error_code == kw.NONE, (topic, partition, offset, fetched)
            for batch in whole_batches(fetched.records):
                if batch.last_offset < offset:
                    continue
                if batch.attributes & tx.CONTROL_FLAG:
                    (record,) = batch.records()
                    assert record.key is not None and len(record.key) == 4, record
                    kind = int.from_bytes(record.key[2:4], "big")
                    assert kind in (ABORT_MARKER, COMMIT_MARKER), record
                    commit = kind == COMMIT_MARKER
                    m = Marker(batch.base_offset, batch.producer_id, batch.producer_epoch, commit)
                    out.append(m)
                offset = batch.last_offset + 1
    return out


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's stable committed offsets (-1: none), as a read_committed confluent-kafka
    consumer of the group fetches them (require_stable: it waits for a pending transaction)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, HANG_GUARD)}
    finally:
        consumer.close()


def assert_no_open_transaction(
    c: Cluster, transactional_id: str, topics: Iterable[tuple[str, int]]
) -> tx.DescribedTxn:
    """Every partition of ``topics`` ((name, partitions)) has its last stable offset at its
    high watermark, DescribeTransactions tells the id finished, no broker's
    ListTransactions lists it unfinished, and its record in the store is not decided
    with markers left. The description."""
    for topic, partitions in topics:
        wait_all_stable(c, topic, partitions)
    done = wait_finished(c, transactional_id)
    assert not listed_unfinished(c, transactional_id), listed_unfinished(c, transactional_id)
    record = txn_record(c, transactional_id)
    assert record is not None, f"no record of {transactional_id} in the store"
    assert record["state"] in FINISHED, record
    assert not record.get("unmarked") and not record.get("unmarked_groups"), record
    return done


# ---------------------------------------------------------------------------------------------
# a consume-transform-produce app

Hook = Callable[[int, str, set[int]], None]  # (round, phase, output partitions)


def transform(value: bytes) -> bytes:
    return b"out:" + value


@dataclass
class CtpStats:
    rounds: int = 0  # transactions begun
    commits: int = 0
    aborts: int = 0  # abortable errors: transaction aborted, consumer rewound
    recreated: int = 0  # fatal errors: producer and consumer re-created
    retried: int = 0  # retriable errors: the call made again
    in_doubt: int = 0  # rounds ended by a fatal error (a commit under way then is in doubt)
    errors: list[str] = field(default_factory=list)


class Fatal(Exception):
    """A fatal producer error: the producer must be re-created."""


class Abortable(Exception):
    """The transaction must be aborted."""


class CtpApp:
    """The app: ``run(ends)`` returns once the group's committed offsets are ``ends``."""

    def __init__(
        self,
        bootstrap: str,
        source: str,
        output: str,
        group: str,
        transactional_id: str,
        *,
        batch: int = 100,
        hook: Hook | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.source = source
        self.output = output
        self.group = group
        self.transactional_id = transactional_id
        self.batch = batch
        self.hook = hook or (lambda _round, _phase, _partitions: None)
        self.stats = CtpStats()
        self.committed: dict[int, int] = {}  # the group's, as far as the app knows
        self.producer: Any = None
        self.consumer: Any = None
        self.delivery_errors: list[Any] = []

    # --- clients -----------------------------------------------------------------------------

    def _start_producer(self) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id}
        )
        self._retrying(lambda: self.producer.init_transactions(HANG_GUARD), "init_transactions")

    def _start_consumer(self) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )  # read_committed: librdkafka's default
        self.consumer.subscribe([self.source])

    def close(self) -> None:
        from confluent_kafka import KafkaException

        if self.consumer is not None:
            try:
                self.consumer.close()
            except (KafkaException, RuntimeError) as exc:
                self.stats.errors.append(f"consumer close: {exc!r}")
        if self.producer is not None:
            try:
                self.producer.flush(0)
            except KafkaException as exc:
                self.stats.errors.append(f"producer close: {exc!r}")

    def _recreate(self) -> None:
        """After a fatal error: a new producer (init_transactions fences the old one and
        aborts what it left open) and a new consumer, which starts from the committed
        offsets."""
        self.stats.recreated += 1
        self.close()
        self.producer = self.consumer = None
        self._start_producer()
        self._start_consumer()
        self.committed = self._fetch_committed()

    def _retrying(self, call: Callable[[], Any], what: str) -> Any:
        def noted(err: Any, retried: bool) -> None:
            self.stats.errors.append(f"{what}: {err}")
            self.stats.retried += retried

        return retrying(call, noted)

    def _fetch_committed(self) -> dict[int, int]:
        """The group's committed offsets (stable), retried while the group's coordinator
        does not answer."""
        from confluent_kafka import KafkaException, TopicPartition

        deadline = time.monotonic() + LIVENESS
        while True:
            meta = self.consumer.list_topics(self.source, HANG_GUARD)
            parts = sorted(meta.topics[self.source].partitions)
            try:
                tps = self.consumer.committed(
                    [TopicPartition(self.source, p) for p in parts], HANG_GUARD
                )
            except KafkaException as exc:
                self.stats.errors.append(f"committed: {kafka_error(exc)}")
                if time.monotonic() > deadline:
                    raise
                continue
            return {tp.partition: tp.offset for tp in tps}

    def _rewind(self) -> None:
        """Back to the group's committed offsets (a new consumer if a seek is refused)."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        self.committed = self._fetch_committed()
        try:
            for tp in self.consumer.assignment():
                offset = self.committed.get(tp.partition, -1)
                start = offset if offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, start))
        except KafkaException as exc:
            self.stats.errors.append(f"seek: {kafka_error(exc)}: a new consumer")
            self.consumer.close()
            self._start_consumer()

    def _abort(self) -> None:
        self.stats.aborts += 1
        try:
            self._retrying(lambda: self.producer.abort_transaction(HANG_GUARD), "abort")
        except (Fatal, Abortable):
            self._recreate()
            return
        self._rewind()

    # --- rounds ------------------------------------------------------------------------------

    def _poll(self) -> list[Any]:
        """The next records of the input (errors the consumer recovers from are noted)."""
        from confluent_kafka import KafkaException

        out = []
        for msg in self.consumer.consume(self.batch, 0.5):
            err = msg.error()
            if err is None:
                out.append(msg)
            elif err.fatal():
                raise KafkaException(err)
            else:
                self.stats.errors.append(f"consume: {err}")
        return out

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.delivery_errors.append(err)

    def _round(self, msgs: list[Any]) -> None:
        """One transaction: the batch transformed, its offsets, the commit. Raises Abortable
        or Fatal (the commit is then in doubt if it got that far)."""
        from confluent_kafka import KafkaException, TopicPartition

        n = self.stats.rounds
        self.stats.rounds += 1
        self.delivery_errors.clear()
        self._retrying(self.producer.begin_transaction, "begin")
        offsets: dict[int, int] = {}
        for msg in msgs:
            try:
                self.producer.produce(
                    self.output,
                    key=msg.key(),
                    value=transform(msg.value()),
                    partition=msg.partition(),
                    on_delivery=self._delivered,
                )
            except KafkaException as exc:  # the transaction is in an error state already
                self.stats.errors.append(f"produce: {kafka_error(exc)}")
                raise Abortable(str(kafka_error(exc))) from exc
            offsets[msg.partition()] = msg.offset() + 1
        self.producer.flush(HANG_GUARD)
        if self.delivery_errors:
            raise Abortable(f"delivery failed: {self.delivery_errors[0]}")
        self.hook(n, "produced", set(offsets))
        tps = [TopicPartition(self.source, p, o) for p, o in sorted(offsets.items())]
        self._retrying(
            lambda: self.producer.send_offsets_to_transaction(
                tps, self.consumer.consumer_group_metadata(), HANG_GUARD
            ),
            "send_offsets",
        )
        self.hook(n, "offsets", set(offsets))
        self._retrying(lambda: self.producer.commit_transaction(HANG_GUARD), "commit")
        self.stats.commits += 1
        self.committed.update(offsets)
        self.hook(n, "committed", set(offsets))

    def run(self, ends: dict[int, int]) -> CtpStats:
        """Rounds until the group's committed offsets are ``ends``."""
        self._start_producer()
        self._start_consumer()
        deadline = time.monotonic() + 4 * LIVENESS
        while self.committed != ends:
            assert time.monotonic() < deadline, f"not done: {self.stats}, at {self.committed}"
            msgs = self._poll()
            if not msgs:
                continue
            try:
                self._round(msgs)
            except Abortable:
                self._abort()
            except Fatal:
                self.stats.in_doubt += 1
                self._recreate()
        return self.stats
