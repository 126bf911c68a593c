"""Offsets in transactions across their coordinators, and the transactions' admin requests.

What is checked: the offsets of an open transaction survive the group coordinator's restart on
its data dir (one broker, SIGTERM or SIGKILL; over the wire or confluent-kafka's producer) and
its loss (a 3-broker cluster with etcd + S3, the transaction's coordinator another broker; over
the wire or each Python client's producer): still pending (require_stable:
UNSTABLE_OFFSET_COMMIT, else the previous offsets), the transaction Ongoing, and the group's
once it commits, its records readable; DescribeTransactions is answered by the transaction's
coordinator only; DescribeTransactions and ListTransactions (its state, producer id and
duration filters) describe and list transactions as they go, on one broker.

Wire requests come from support.txn_wire, the clients' transactional producers from
support.transactions, the helpers shared with test_transaction_offsets.py from
support.txn_offsets.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from support import group_wire as gw
from support import kafka_wire as kw
from support import transactions as tx
from support import txn_wire as tw
from support.clients import unique
from support.cluster import Cluster, create_topic
from support.procs import Broker, assert_no_panic
from support.txn_offsets import (
    ALL,
    BROKER_ARGS,
    CLIENTS,
    PARTITIONS,
    assert_not_visible,
    described,
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
    return module_broker_factory(BROKER_ARGS, name="txn-coordinators")


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
                    lambda: tw.end_txn(conn, transactional_id, wire, True), lambda e: e, "EndTxn"
                )
            assert ended == kw.NONE, ended
        else:
            client.commit()
        watch_decision(bs, transactional_id, group, topic, before, after, "CompleteCommit")
    finally:
        if client is not None:
            client.close()
    if written:
        ends = tx.ends(bs, output, ALL, tw.READ_UNCOMMITTED)
        assert tx.ends(bs, output, ALL, tw.READ_COMMITTED) == ends
        shown = tx.read_all("confluent", bs, output, ends, committed=True)
        assert tx.shown(shown) == written
    assert_no_panic(broker)


def owner_ends(c: Cluster, topic: str, isolation: int) -> dict[int, int]:
    """ListOffsets latest of each partition, asked of its owner."""
    out = {}
    for p in ALL:
        with kw.RawConnection.to(c.owner(topic, p).bootstrap) as conn:
            res = tw.list_offset(conn, topic, p, isolation)
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
            found = tw.find_coordinator(conn, transactional_id, tw.TRANSACTION_KEY)
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
                init = tw.init_producer_id(txn_conn, transactional_id)
                assert init.error_code == kw.NONE, init
                wire = (init.producer_id, init.epoch)
                added = tw.add_offsets_to_txn(txn_conn, transactional_id, wire, group)
                assert added == kw.NONE, added
                pending = {(topic, 0): 10, (topic, 1): 11}
                answer = retried(
                    lambda: tw.txn_offset_commit(
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
                txn = tw.describe_transactions(conn, [transactional_id])[transactional_id]
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
                assert tw.end_txn(conn, transactional_id, wire, True) == kw.NONE
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
        ends = owner_ends(c, output, tw.READ_UNCOMMITTED)
        assert owner_ends(c, output, tw.READ_COMMITTED) == ends
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
        init = tw.init_producer_id(conn, transactional_id, 45_000)
        assert init.error_code == kw.NONE, init
        producer = (init.producer_id, init.epoch)
        started = int(time.time() * 1000)
        added = tw.add_partitions_to_txn(conn, transactional_id, producer, {topic: [0, 2]})
        assert added == {(topic, 0): kw.NONE, (topic, 2): kw.NONE}, added
        now = int(time.time() * 1000)

        answer = tw.describe_transactions(conn, [transactional_id, unknown])
        assert set(answer) == {transactional_id, unknown}, answer
        ongoing = answer[transactional_id]
        assert ongoing.error_code == kw.NONE, ongoing
        assert ongoing.state == "Ongoing"
        assert ongoing.timeout_ms == 45_000
        assert (ongoing.producer_id, ongoing.producer_epoch) == producer
        assert ongoing.partitions == {topic: [0, 2]}
        assert started - 1000 <= ongoing.start_time_ms <= now + 1000, (started, ongoing, now)
        assert answer[unknown].error_code == tw.TRANSACTIONAL_ID_NOT_FOUND, answer[unknown]

        listed = tw.list_transactions(conn, ["Ongoing", "NoSuchState"])
        assert listed.error_code == kw.NONE, listed
        assert listed.unknown_state_filters == ["NoSuchState"]
        assert listed.transactions.get(transactional_id) == (producer[0], "Ongoing"), listed
        assert all(state == "Ongoing" for _, state in listed.transactions.values()), listed
        everything = tw.list_transactions(conn, [])
        assert everything.unknown_state_filters == []
        assert everything.transactions.get(transactional_id) == (producer[0], "Ongoing")
        by_producer = tw.list_transactions(conn, [], [producer[0]])
        assert by_producer.transactions == {transactional_id: (producer[0], "Ongoing")}
        other_producer = tw.list_transactions(conn, ["Ongoing"], [producer[0] + 1_000_000])
        assert transactional_id not in other_producer.transactions
        not_yet = tw.list_transactions(conn, ["CompleteCommit"])
        assert transactional_id not in not_yet.transactions
        # v1: transactions running longer than the duration filter (this one: a while now)
        time.sleep(0.02)
        assert transactional_id in tw.list_transactions(conn, [], duration_ms=0).transactions
        long = tw.list_transactions(conn, [], duration_ms=3_600_000)
        assert long.error_code == kw.NONE, long
        assert transactional_id not in long.transactions, long

        assert tw.end_txn(conn, transactional_id, producer, True) == kw.NONE

    def complete() -> str | None:
        d = described(bs, transactional_id)
        return None if d.state == "CompleteCommit" else f"described {d}"

    tx.wait_for(complete)
    done = described(bs, transactional_id)
    assert done.error_code == kw.NONE
    assert (done.producer_id, done.timeout_ms) == (producer[0], 45_000), done
    assert done.partitions == {}, "a complete transaction has no partitions (as in Kafka)"
    with kw.RawConnection.to(bs) as conn:
        listed = tw.list_transactions(conn, ["CompleteCommit"])
        assert listed.transactions.get(transactional_id) == (producer[0], "CompleteCommit")
        assert transactional_id not in tw.list_transactions(conn, ["Ongoing"]).transactions
