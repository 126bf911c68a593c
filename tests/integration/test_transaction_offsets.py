"""Offsets in transactions (KIP-98's sendOffsetsToTransaction, KIP-447's require_stable) on one
broker.

What is checked: a consume-transform-produce app of each Python client (a group consumer with
auto commit off, a transactional producer with the client's defaults plus the transactional
id, some rounds aborted and the consumer rewound to the group's committed offsets) puts every
input record in the output exactly once as a read_committed consumer sees it, and leaves the
group's committed offsets at the input's end; offsets sent to an open transaction are not the
group's (OffsetFetch answers the previous ones, with require_stable UNSTABLE_OFFSET_COMMIT, and
librdkafka's read_committed consumer waits), those of an aborted transaction (by its producer
or by the coordinator: timeout, fencing) never become the group's and those of a committed one
do, by the time the transaction is complete; a later plain commit outlives an earlier
transactional one; TxnOffsetCommit v3 checks the group member it names; a transaction of
offsets alone commits them.

Wire requests come from support.txn_wire (TxnOffsetCommit v3 from support.txn_wire_v2), the
clients' transactional producers from support.transactions; support.txn_offsets has the
clients' consume-transform-produce apps and the helpers shared with
test_transaction_coordinators.py (offsets across the coordinators' restart or loss,
DescribeTransactions, ListTransactions).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from support import group_wire as gw
from support import kafka_wire as kw
from support import transactions as tx
from support import txn_wire as tw
from support import txn_wire_v2 as v2
from support.clients import HANG_GUARD, Got, Msg, confluent_produce, unique
from support.procs import Broker
from support.txn_offsets import (
    ALL,
    APPS,
    BROKER_ARGS,
    CLIENTS,
    PARTITIONS,
    App,
    assert_not_visible,
    committed,
    described,
    fetch_offsets,
    first_retriable,
    new_topic,
    open_offsets,
    retried,
    send_offsets,
    stable,
    watch_decision,
)


@pytest.fixture(scope="module")
def tbroker(module_broker_factory: Callable[..., Broker]) -> Broker:
    return module_broker_factory(BROKER_ARGS, name="txn-offsets")


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
# consume-transform-produce: rounds of transactions of a client's app (support.txn_offsets.APPS)


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
    assert tx.ends(bs, source, ALL, tw.READ_UNCOMMITTED) == ends
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
    out_ends = tx.ends(bs, output, ALL, tw.READ_UNCOMMITTED)
    assert tx.ends(bs, output, ALL, tw.READ_COMMITTED) == out_ends, "an open transaction"
    shown = tx.read_all("confluent", bs, output, out_ends, committed=True)
    want = {p: [b"out:" + v for v in values[p]] for p in ALL}
    assert {p: [g.value for g in shown if g.partition == p] for p in ALL} == want
    everything = tx.read_all("confluent", bs, output, out_ends, committed=False)
    assert len(everything) == INPUT_RECORDS + sum(len(batch) for batch in aborted)


# ---------------------------------------------------------------------------------------------
# offsets of open, aborted and committed transactions


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
                assert tw.end_txn(conn, transactional_id, producer, True) == kw.NONE
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
                lambda: tw.init_producer_id(conn, transactional_id),
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
        late = tw.txn_offset_commit(conn, transactional_id, group, old, {(topic, 0): 12})
    assert late[(topic, 0)] in (kw.INVALID_PRODUCER_EPOCH, tw.PRODUCER_FENCED), late
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
        assert tw.end_txn(conn, transactional_id, producer, True) == kw.NONE

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

        init = tw.init_producer_id(conn, transactional_id)
        assert init.error_code == kw.NONE, init
        producer = (init.producer_id, init.epoch)
        assert tw.add_offsets_to_txn(conn, transactional_id, producer, group) == kw.NONE

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
        assert tw.end_txn(conn, transactional_id, producer, True) == kw.NONE
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
    assert tx.ends(bs, topic, ALL, tw.READ_UNCOMMITTED) == dict.fromkeys(ALL, 0)
