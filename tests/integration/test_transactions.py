"""Transactions (KIP-98) through the real Python clients, on one broker and on a 3-broker
cluster (etcd + S3).

Each client's transactional producer (confluent-kafka, kafka-python, aiokafka) runs with its
defaults plus the transactional id; its records are read back by a read_committed and a
read_uncommitted consumer of every client (confluent-kafka's read_committed is its default,
kafka-python's and aiokafka's are asked for), from the beginning until each consumer's position
reaches the partition's end (past the transaction markers): so a consumer shows everything it
would, nothing is missed and nothing stops the reading early.

What is checked: a committed transaction over several partitions is read once, in order, at the
offsets its producer was told; an aborted one is never shown to read_committed consumers (and is
to read_uncommitted ones), with committed and aborted transactions interleaved, and Fetch lists
the aborted ones; a read_committed consumer stops at an open transaction and the last stable
offset (ListOffsets latest, read_committed; Fetch's last_stable_offset) stays at its first
offset until it commits; a second producer with the same transactional id fences the first,
whose open transaction is aborted; a transaction past its timeout is aborted by the coordinator
and its producer's commit fails (both also on the cluster); and the same commit/abort rules
across brokers, where the coordinator and the partitions' owners are different brokers.

Not covered here: offsets sent to a transaction (send_offsets_to_transaction: AddOffsetsToTxn,
TxnOffsetCommit), DescribeTransactions, ListTransactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pytest
from support import kafka_wire as kw
from support import transactions as tx
from support.clients import Got, Msg, unique
from support.cluster import Cluster, create_topic
from support.procs import Broker, assert_no_panic

PARTITIONS = 3
CLIENTS = list(tx.PRODUCERS)
ALL = range(PARTITIONS)

Row = tuple[int, int, bytes | None]  # (partition, offset, value)


@pytest.fixture(scope="module")
def tbroker(module_broker_factory: Callable[..., Broker]) -> Broker:
    return module_broker_factory(["--default-partitions", str(PARTITIONS)], name="transactions")


def new_topic(bootstrap: str) -> str:
    topic = unique("txn")
    kw.ensure_topic(bootstrap, topic, PARTITIONS)
    return topic


@dataclass(frozen=True)
class Where:
    """One broker or the 3-broker cluster: where clients connect, how a topic is made, and
    whom the ends of a partition are asked (its owner: the last stable offset is the owner's
    to tell)."""

    bootstrap: str
    new_topic: Callable[[], str]
    owner_of: Callable[[str, int], str]

    def ends(self, topic: str, isolation: int, partitions: Iterable[int] = ALL) -> dict[int, int]:
        out = {}
        for p in partitions:
            with kw.RawConnection.to(self.owner_of(topic, p)) as conn:
                res = tx.list_offset(conn, topic, p, isolation)
            assert res.error_code == kw.NONE, (topic, p, res)
            out[p] = res.offset
        return out


@pytest.fixture(params=["one broker", "three brokers"])
def where(request: pytest.FixtureRequest) -> Iterator[Where]:
    """The fencing and timeout tests run on one broker and on the 3-broker cluster, where the
    transactional id's coordinator and the partitions' owners are spread over the brokers."""
    if request.param == "one broker":
        b: Broker = request.getfixturevalue("tbroker")
        yield Where(b.bootstrap, lambda: new_topic(b.bootstrap), lambda _t, _p: b.bootstrap)
        assert_no_panic(b)
        return
    c: Cluster = request.getfixturevalue("tcluster")

    def cluster_topic() -> str:
        topic = unique("txn")
        create_topic(c.bootstrap(), topic, PARTITIONS)
        c.wait_converged([topic], {topic: PARTITIONS}, until=c.claimed)
        return topic

    yield Where(c.bootstrap(), cluster_topic, lambda t, p: c.owner(t, p).bootstrap)
    for b in c.live:
        assert_no_panic(b)


def in_order(got: list[Got]) -> dict[int, list[Row]]:
    """What a consumer showed, per partition, in the order it showed it."""
    out: dict[int, list[Row]] = {}
    for g in got:
        out.setdefault(g.partition, []).append((g.partition, g.offset, g.value))
    return out


def by_partition(rows: list[Row]) -> dict[int, list[Row]]:
    """Rows per partition in offset order (what a consumer should show, in that order)."""
    out: dict[int, list[Row]] = {}
    for row in sorted(rows):
        out.setdefault(row[0], []).append(row)
    return out


def assert_reads(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    committed: list[Row],
    everything: list[Row],
) -> None:
    """Every client's read_committed consumer shows exactly ``committed``, its
    read_uncommitted one exactly ``everything``: once each, in offset order per partition."""
    for client in tx.CONSUMERS:
        for read_committed, want in ((True, committed), (False, everything)):
            got = in_order(tx.read_all(client, bootstrap, topic, ends, read_committed))
            what = f"{client} {'read_committed' if read_committed else 'read_uncommitted'}"
            assert got == by_partition(want), what


def first_offsets(delivered: list[tuple[int, int]]) -> dict[int, int]:
    """{partition: the lowest offset a record was stored at}."""
    out: dict[int, int] = {}
    for p, o in delivered:
        out[p] = min(o, out.get(p, o))
    return out


def fenced(client: str, error: BaseException) -> bool:
    """Whether ``error`` is the client's way of saying its producer was fenced: a newer
    epoch (a newer instance of the transactional id, or the coordinator's abort) exists."""
    if client == "confluent":
        from confluent_kafka import KafkaError, KafkaException

        codes = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
        return isinstance(error, KafkaException) and error.args[0].code() in codes
    if client == "kafka-python":
        from kafka.errors import InvalidProducerEpochError, ProducerFencedError

        return isinstance(error, ProducerFencedError | InvalidProducerEpochError)
    from aiokafka.errors import ProducerFenced

    return isinstance(error, ProducerFenced)


def run_transaction(
    producer: tx.TxnProducer, topic: str, msgs: list[Msg], commit: bool
) -> list[Row]:
    """One transaction of ``msgs``, committed or aborted: where its records were stored."""
    producer.begin()
    delivered = producer.send(topic, msgs)
    if commit:
        producer.commit()
    else:
        producer.abort()
    return tx.placed(msgs, delivered)


# ---------------------------------------------------------------------------------------------
# commit and abort


@pytest.mark.parametrize("client", CLIENTS)
def test_a_committed_transaction_is_read_once_in_order(tbroker: Broker, client: str) -> None:
    """30 records over 3 partitions in one committed transaction: stored at 0..9 of each
    partition in the order sent, the commit marker after them (the last stable offset is the
    end); every consumer, read_committed or not, shows each record once, in that order."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    msgs = tx.records(client, 30, PARTITIONS)
    producer = tx.PRODUCERS[client](bs, unique("tx"))
    try:
        producer.init()
        stored = run_transaction(producer, topic, msgs, commit=True)
    finally:
        producer.close()
    # each partition's records at 0..9 in the order they were sent, then the commit marker
    for p in ALL:
        sent = [m.value for m in msgs if m.partition == p]
        assert by_partition(stored)[p] == [(p, i, v) for i, v in enumerate(sent)]
    ends = tx.ends(bs, topic, ALL, tx.READ_UNCOMMITTED)
    assert ends == dict.fromkeys(ALL, 11)
    assert tx.ends(bs, topic, ALL, tx.READ_COMMITTED) == ends, "the last stable offset"
    assert_reads(bs, topic, ends, committed=stored, everything=stored)


@pytest.mark.parametrize("client", CLIENTS)
def test_aborted_transactions_are_hidden_from_read_committed(tbroker: Broker, client: str) -> None:
    """Committed and aborted transactions interleaved: read_committed consumers show the
    committed ones only, read_uncommitted ones everything; Fetch (read_committed) lists each
    aborted transaction where it begins, under the producer's one id."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    producer = tx.PRODUCERS[client](bs, unique("tx"))
    committed: list[Row] = []
    aborted: list[list[Row]] = []
    try:
        producer.init()
        for n, commit in enumerate((True, False, True, False, True)):
            stored = run_transaction(producer, topic, tx.records(f"{client}{n}", 6, 3), commit)
            if commit:
                committed += stored
            else:
                aborted.append(stored)
    finally:
        producer.close()
    everything = sorted(committed + [row for txn in aborted for row in txn])
    ends = tx.ends(bs, topic, ALL, tx.READ_UNCOMMITTED)
    assert ends == dict.fromkeys(ALL, 5 * 3), "2 records and a marker per transaction"
    assert tx.ends(bs, topic, ALL, tx.READ_COMMITTED) == ends
    assert_reads(bs, topic, ends, committed=committed, everything=everything)
    # the aborted-transaction lists of a read_committed Fetch from the start
    with kw.RawConnection.to(bs) as conn:
        for p in ALL:
            fetched = tx.fetch(conn, topic, p, 0, tx.READ_COMMITTED)
            assert fetched.error_code == kw.NONE, fetched
            assert fetched.aborted is not None
            starts = sorted(min(o for q, o, _ in txn if q == p) for txn in aborted)
            assert sorted(first for _, first in fetched.aborted) == starts, fetched
            assert len({pid for pid, _ in fetched.aborted}) == 1, fetched
            # a read_uncommitted Fetch lists none
            assert tx.fetch(conn, topic, p, 0, tx.READ_UNCOMMITTED).aborted in (None, [])


# ---------------------------------------------------------------------------------------------
# an open transaction


@pytest.mark.parametrize("client", CLIENTS)
def test_read_committed_stops_at_an_open_transaction(tbroker: Broker, client: str) -> None:
    """A transaction is committed, a second one written and left open: the last stable
    offset (ListOffsets latest read_committed, Fetch's last_stable_offset) is its first offset,
    and read_committed consumers of every client stop there (read_uncommitted ones read it);
    once it commits the same consumers go on and read it."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    producer = tx.PRODUCERS[client](bs, unique("tx"))
    consumers: dict[str, tx.TxnConsumer] = {}
    try:
        producer.init()
        first = run_transaction(producer, topic, tx.records("first", 6, 3), commit=True)
        producer.begin()
        open_msgs = tx.records("open", 9, 3)
        delivered = producer.send(topic, open_msgs)
        pending = tx.placed(open_msgs, delivered)
        starts = first_offsets(delivered)
        assert starts == dict.fromkeys(ALL, 3), "after 2 records and a marker"
        high = tx.ends(bs, topic, ALL, tx.READ_UNCOMMITTED)
        assert high == dict.fromkeys(ALL, 6)
        assert tx.ends(bs, topic, ALL, tx.READ_COMMITTED) == starts
        with kw.RawConnection.to(bs) as conn:
            for p in ALL:
                fetched = tx.fetch(conn, topic, p, starts[p], tx.READ_COMMITTED)
                assert fetched.error_code == kw.NONE, fetched
                assert (fetched.high_watermark, fetched.last_stable_offset) == (6, 3), fetched
                assert fetched.records == b"", "records of the open transaction"
                fetched = tx.fetch(conn, topic, p, starts[p], tx.READ_UNCOMMITTED)
                assert fetched.records, "read_uncommitted reads the open transaction"
        for name, make in tx.CONSUMERS.items():
            consumers[name] = make(bs, topic, list(ALL), True)
            got = in_order(tx.read_until(consumers[name], starts))
            assert got == by_partition(first), name
        # a while of polling: still nothing past the first offset of the open transaction
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for name, consumer in consumers.items():
                assert consumer.poll() == [], f"{name} read into the open transaction"
        for name, consumer in consumers.items():
            assert consumer.positions() == starts, name
        uncommitted = tx.read_all("confluent", bs, topic, high, False)
        assert in_order(uncommitted) == by_partition(first + pending)
        producer.commit()
    finally:
        producer.close()
    ends = tx.ends(bs, topic, ALL, tx.READ_UNCOMMITTED)
    assert ends == dict.fromkeys(ALL, 7)
    assert tx.ends(bs, topic, ALL, tx.READ_COMMITTED) == ends, "the last stable offset moved"
    try:
        for name, consumer in consumers.items():
            assert in_order(tx.read_until(consumer, ends)) == by_partition(pending), name
    finally:
        for consumer in consumers.values():
            consumer.close()


# ---------------------------------------------------------------------------------------------
# fencing and timeouts


@pytest.mark.parametrize("next_step", ["commit", "send"])
@pytest.mark.parametrize("client", CLIENTS)
def test_a_new_producer_fences_the_old_and_aborts_its_transaction(
    where: Where, client: str, next_step: str
) -> None:
    """The first producer writes a transaction and leaves it open; a second with the same
    transactional id initialises: the first's transaction is aborted by then (init_transactions
    returns once it is), and the first's next commit or send fails, fenced. The second's
    transaction commits; read_committed consumers show only that one."""
    bs = where.bootstrap
    topic = where.new_topic()
    transactional_id = unique("tx")
    old = tx.PRODUCERS[client](bs, transactional_id)
    new = tx.PRODUCERS[client](bs, transactional_id)
    try:
        old.init()
        old.begin()
        old_msgs = tx.records("old", 6, 3)
        abandoned = tx.placed(old_msgs, old.send(topic, old_msgs))
        assert where.ends(topic, tx.READ_COMMITTED) == dict.fromkeys(ALL, 0)
        new.init()
        ends = where.ends(topic, tx.READ_UNCOMMITTED)
        assert ends == dict.fromkeys(ALL, 3), "2 records and an abort marker"
        assert where.ends(topic, tx.READ_COMMITTED) == ends
        with pytest.raises(Exception) as failed:  # each client raises its own type
            if next_step == "commit":
                old.commit()
            else:
                old.send(topic, tx.records("late", 3, 3))
        assert fenced(client, failed.value), repr(failed.value)
        committed = run_transaction(new, topic, tx.records("new", 6, 3), commit=True)
    finally:
        old.close()
        new.close()
    ends = where.ends(topic, tx.READ_UNCOMMITTED)
    assert ends == dict.fromkeys(ALL, 6), "nothing of the fenced producer's late send stored"
    assert where.ends(topic, tx.READ_COMMITTED) == ends
    assert_reads(bs, topic, ends, committed=committed, everything=abandoned + committed)


TIMEOUT_MS = 2000
TIMEOUT_OPTIONS = {
    "confluent": {"transaction.timeout.ms": TIMEOUT_MS},
    "kafka-python": {"transaction_timeout_ms": TIMEOUT_MS},
    "aiokafka": {"transaction_timeout_ms": TIMEOUT_MS},
}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_transaction_past_its_timeout_is_aborted(where: Where, client: str) -> None:
    """A producer with a 2 s transaction timeout writes and then does nothing: the
    coordinator aborts the transaction (an abort marker in every partition, the last stable
    offset past it), and the producer's commit fails, fenced."""
    bs = where.bootstrap
    topic = where.new_topic()
    producer = tx.PRODUCERS[client](bs, unique("tx"), **TIMEOUT_OPTIONS[client])
    try:
        producer.init()
        producer.begin()
        msgs = tx.records("late", 6, 3)
        stored = tx.placed(msgs, producer.send(topic, msgs))
        assert where.ends(topic, tx.READ_COMMITTED) == dict.fromkeys(ALL, 0)
        aborted = dict.fromkeys(ALL, 3)  # 2 records and the abort marker

        def check() -> str | None:
            high = where.ends(topic, tx.READ_UNCOMMITTED)
            stable = where.ends(topic, tx.READ_COMMITTED)
            return None if high == stable == aborted else f"end {high}, last stable {stable}"

        tx.wait_for(check)
        with pytest.raises(Exception) as failed:  # each client raises its own type
            producer.commit()
        assert fenced(client, failed.value), repr(failed.value)
    finally:
        producer.close()
    assert where.ends(topic, tx.READ_UNCOMMITTED) == aborted, "nothing more written"
    assert_reads(bs, topic, aborted, committed=[], everything=stored)


# ---------------------------------------------------------------------------------------------
# a cluster: coordinator and partition owners on different brokers

CLUSTER_PARTITIONS = 12  # over 3 brokers: some on each of at least two of them


@pytest.fixture(scope="module")
def tcluster(module_cluster: Callable[..., Cluster]) -> Cluster:
    return module_cluster(3)


@pytest.mark.parametrize("client", CLIENTS)
def test_transactions_across_brokers(tcluster: Cluster, client: str) -> None:
    """Committed, aborted and committed again over 12 partitions owned by different brokers,
    the transactional id coordinated by one of them: read_committed consumers show the
    committed transactions only, read_uncommitted ones everything."""
    c = tcluster
    topic = unique("txn-cl")
    create_topic(c.bootstrap(), topic, CLUSTER_PARTITIONS)
    leaders = c.wait_converged([topic], {topic: CLUSTER_PARTITIONS}, until=c.claimed)[topic]
    owners = {lead.broker_id for lead in leaders.values()}
    assert len(owners) >= 2, f"every partition on one broker: {leaders}"
    transactional_id = unique("tx")
    with kw.RawConnection.to(c.any_live().bootstrap) as conn:
        found = tx.find_coordinator(conn, transactional_id, tx.TRANSACTION_KEY)
    assert found.error_code == kw.NONE and found.node_id in c.live_ids, found
    producer = tx.PRODUCERS[client](c.bootstrap(), transactional_id)
    committed: list[Row] = []
    everything: list[Row] = []
    try:
        producer.init()
        for n, commit in enumerate((True, False, True)):
            msgs = tx.records(f"{client}{n}", 2 * CLUSTER_PARTITIONS, CLUSTER_PARTITIONS)
            stored = run_transaction(producer, topic, msgs, commit)
            everything += stored
            if commit:
                committed += stored
    finally:
        producer.close()
    at_owners = Where(c.bootstrap(), lambda: topic, lambda t, p: c.owner(t, p).bootstrap)
    everyone = range(CLUSTER_PARTITIONS)
    ends = at_owners.ends(topic, tx.READ_UNCOMMITTED, everyone)
    assert ends == dict.fromkeys(everyone, 3 * 3)
    assert at_owners.ends(topic, tx.READ_COMMITTED, everyone) == ends
    assert_reads(c.bootstrap(), topic, ends, committed=committed, everything=everything)
    for b in c.live:
        assert_no_panic(b)
