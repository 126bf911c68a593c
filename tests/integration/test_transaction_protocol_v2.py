"""Kafka's second transaction protocol (KIP-890 part 2, ``transaction.version`` 2) over the raw
wire, on one broker.

What is checked: ApiVersions v3+ lists the feature (finalized at level 2 with an epoch; v4 also
supported 0..2) and the new maxima (Produce 12, EndTxn 5, TxnOffsetCommit 5, AddPartitionsToTxn
5, AddOffsetsToTxn 4), v0-v2 no features; a Produce v12 transactional batch adds its partition
to the producer's transaction (no AddPartitionsToTxn), Produce v8 and v11 do not
(NOT_ENOUGH_REPLICAS with an error message, nothing stored); EndTxn v5 bumps the producer's
epoch as it decides and answers the id and epoch of the next transaction, its markers carry the
bumped epoch, a late batch with the old epoch is refused (INVALID_PRODUCER_EPOCH) and stores
nothing, a retried EndTxn v5 with the old epoch gets the same answer and no second bump, the
contrary decision with the old epoch PRODUCER_FENCED, an abort with no transaction ongoing bumps
the epoch and a commit then is INVALID_TXN_STATE; read_committed (ListOffsets' last stable
offset, Fetch and its aborted-transaction list, a confluent-kafka consumer) shows the committed
transactions and not the aborted one; AddPartitionsToTxn v4/v5 (the brokers' form) with
verify_only checks partitions (each answered for itself) without adding them, without
verify_only adds them; TxnOffsetCommit v5 from a producer that never sent AddOffsetsToTxn adds
the group to the transaction (its offsets are the group's once the transaction commits), v3 of
the same request is answered COORDINATOR_LOAD_IN_PROGRESS and adds nothing.

Wire requests of the second protocol come from support.txn_wire_v2; those of the first
(InitProducerId, AddPartitionsToTxn v0, DescribeTransactions, ListOffsets, Fetch, OffsetFetch
v7) from support.transactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from support import group_wire as gw
from support import kafka_wire as kw
from support import segment_format as sf
from support import transactions as tx
from support import txn_faults as tf
from support import txn_wire_v2 as v2
from support.clients import HANG_GUARD, unique
from support.cluster import whole_batches
from support.procs import Broker, assert_no_panic

PARTITIONS = 3
ALL = range(PARTITIONS)
# the group coordinator's first rebalance at once (the 3 s default only slows the tests)
BROKER_ARGS = ["--default-partitions", str(PARTITIONS), "--group-initial-rebalance-delay-ms", "0"]
# answers of a group coordinator that is not ready yet (a client retries them)
NOT_READY = {gw.COORDINATOR_LOAD_IN_PROGRESS, gw.COORDINATOR_NOT_AVAILABLE, gw.NOT_COORDINATOR}

ADD_OFFSETS_TO_TXN = 25
NOT_ENOUGH_REPLICAS = tx.NOT_ENOUGH_REPLICAS
INVALID_PRODUCER_EPOCH = kw.INVALID_PRODUCER_EPOCH
INVALID_TXN_STATE = kw.INVALID_TXN_STATE
PRODUCER_FENCED = tx.PRODUCER_FENCED
COORDINATOR_LOAD_IN_PROGRESS = 14
TRANSACTIONAL_FLAG = sf.TRANSACTIONAL_FLAG


@pytest.fixture(scope="module")
def tbroker(module_broker_factory: Callable[..., Broker]) -> Broker:
    return module_broker_factory(BROKER_ARGS, name="txn-v2")


@pytest.fixture(autouse=True)
def _no_panic(tbroker: Broker) -> Iterator[None]:
    yield
    assert_no_panic(tbroker)


def new_topic(bootstrap: str) -> str:
    topic = unique("txv2")
    kw.ensure_topic(bootstrap, topic, PARTITIONS)
    return topic


def batch(producer: tuple[int, int], sequence: int, values: list[bytes]) -> bytes:
    """A transactional record batch of ``producer`` (id, epoch) from ``sequence`` on."""
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (None, v, []) for v in values
    ]
    producer_id, epoch = producer
    return sf.build_record_batch(
        records, producer=(producer_id, epoch, sequence), transactional=True
    )


def init(conn: kw.RawConnection, transactional_id: str) -> tuple[int, int]:
    """InitProducerId of a new transactional id: (producer id, epoch)."""
    answer = tx.init_producer_id(conn, transactional_id)
    assert answer.error_code == kw.NONE, answer
    assert answer.producer_id >= 0 and answer.epoch >= 0, answer
    return answer.producer_id, answer.epoch


def described(conn: kw.RawConnection, transactional_id: str) -> tx.DescribedTxn:
    found = tx.describe_transactions(conn, [transactional_id])[transactional_id]
    assert found.error_code == kw.NONE, found
    return found


def partitions_of(txn: tx.DescribedTxn) -> dict[str, list[int]]:
    return {name: sorted(parts) for name, parts in txn.partitions.items()}


def wait_state(conn: kw.RawConnection, transactional_id: str, state: str) -> tx.DescribedTxn:
    """DescribeTransactions until the transaction is in ``state`` (a bounded wait: the markers
    of a decided transaction are written after EndTxn is answered at the latest)."""

    def check() -> str | None:
        now = described(conn, transactional_id)
        return None if now.state == state else f"described {now}"

    tx.wait_for(check)
    return described(conn, transactional_id)


def ends(conn: kw.RawConnection, topic: str, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset) of a partition: ListOffsets latest,
    read_uncommitted and read_committed."""
    high = tx.list_offset(conn, topic, partition, tx.READ_UNCOMMITTED)
    stable = tx.list_offset(conn, topic, partition, tx.READ_COMMITTED)
    assert high.error_code == stable.error_code == kw.NONE, (high, stable)
    return high.offset, stable.offset


def read_committed(
    conn: kw.RawConnection, topic: str, partition: int
) -> tuple[list[bytes | None], list[tuple[int, int]]]:
    """A read_committed Fetch from offset 0: the values a read_committed consumer keeps of
    it (no control batch, nothing of a transaction the answer lists as aborted, as Kafka's
    consumer filters them), and the aborted-transaction list (producer id, first offset)."""
    fetched = tx.fetch(conn, topic, partition, 0, tx.READ_COMMITTED)
    assert fetched.error_code == kw.NONE, fetched
    listed = sorted(fetched.aborted or [], key=lambda a: a[1])
    pending = list(listed)
    aborting: set[int] = set()
    values: list[bytes | None] = []
    for b in whole_batches(fetched.records):
        while pending and pending[0][1] <= b.last_offset:
            aborting.add(pending.pop(0)[0])
        if b.attributes & tx.CONTROL_FLAG:
            (marker,) = b.records()
            assert marker.key is not None and len(marker.key) == 4, marker
            if int.from_bytes(marker.key[2:4], "big") == tf.ABORT_MARKER:
                aborting.discard(b.producer_id)
            continue
        if b.attributes & TRANSACTIONAL_FLAG and b.producer_id in aborting:
            continue
        values += [r.value for r in b.records()]
    return values, listed


def markers(
    bootstrap: str, topic: str, partition: int, end: int
) -> list[tuple[int, int, int, bool]]:
    """The transaction markers of a partition up to ``end``: (offset, producer id, epoch,
    commit)."""
    return [
        (m.offset, m.producer_id, m.epoch, m.commit)
        for m in tf.markers(bootstrap, topic, partition, end)
    ]


def fetch_offsets(
    conn: kw.RawConnection, group: str, topic: str, require_stable: bool
) -> dict[int, tx.StableOffset]:
    """OffsetFetch v7 of every partition of ``topic`` (asked again while the group's
    coordinator is not ready: a bounded wait)."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        top, parts = tx.offset_fetch_v7(conn, group, topic, ALL, require_stable)
        if top not in NOT_READY:
            break
        assert time.monotonic() < deadline, f"OffsetFetch {group}: still {top}"
        time.sleep(0.05)
    assert top == kw.NONE, (top, parts)
    assert set(parts) == set(ALL), parts
    return parts


def stable_offsets(conn: kw.RawConnection, group: str, topic: str) -> dict[int, int]:
    """The group's offsets once none is pending (OffsetFetch with require_stable answers
    UNSTABLE_OFFSET_COMMIT while one is: a bounded wait for the transaction's outcome)."""
    seen: dict[int, tx.StableOffset] = {}

    def check() -> str | None:
        seen.update(fetch_offsets(conn, group, topic, require_stable=True))
        unstable = {p: o for p, o in seen.items() if o.error_code != kw.NONE}
        return f"pending {unstable}" if unstable else None

    tx.wait_for(check)
    return {p: o.offset for p, o in seen.items()}


# ---------------------------------------------------------------------------------------------
# ApiVersions


def test_api_versions_list_transaction_version_2(tbroker: Broker) -> None:
    """ApiVersions v3 and v4 list the finalized feature transaction.version at level 2 (min =
    max = 2) with a finalized-features epoch above 0; v4 lists it supported 0..2, v3 lists no
    supported features (Kafka leaves out a range starting at 0 there, KAFKA-17011: clients
    before v4 reject it); both serve
    Produce up to v12, EndTxn v5, TxnOffsetCommit v5, AddPartitionsToTxn v5 and AddOffsetsToTxn
    v4; v0 and v2 carry no features (their answers end after the API list and throttle time)
    and list the same APIs."""
    maxima = {
        kw.PRODUCE: 12,
        tx.END_TXN: 5,
        tx.TXN_OFFSET_COMMIT: 5,
        tx.ADD_PARTITIONS_TO_TXN: 5,
        ADD_OFFSETS_TO_TXN: 4,
    }
    with kw.RawConnection.to(tbroker.bootstrap) as conn:
        old = {version: v2.api_versions(conn, version) for version in (0, 2)}
        new = {version: v2.api_versions(conn, version) for version in (3, 4)}
    for version, answer in old.items():
        assert answer.error_code == kw.NONE, (version, answer)
        assert (answer.supported, answer.finalized) == ({}, {}), (version, answer)
        assert answer.apis == old[0].apis, version
    for version, answer in new.items():
        assert answer.error_code == kw.NONE, (version, answer)
        supported = {v2.TRANSACTION_VERSION: (0, 2)} if version >= 4 else {}
        assert answer.supported == supported, (version, answer)
        assert answer.finalized.get(v2.TRANSACTION_VERSION) == (2, 2), (version, answer)
        assert answer.finalized_epoch > 0, (version, answer)
        assert answer.unknown_tags == [], (version, answer)
        assert answer.apis == old[0].apis, version
        assert {key: answer.apis[key][1] for key in maxima} == maxima, (version, answer.apis)


# ---------------------------------------------------------------------------------------------
# a whole transaction of the second protocol


def test_a_second_protocol_transaction_end_to_end(tbroker: Broker) -> None:
    """InitProducerId; Produce v12 of a transactional batch (2 records, sequence 0) to
    partitions 0 and 1 with no AddPartitionsToTxn: both stored at 0, DescribeTransactions tells
    Ongoing with both partitions. EndTxn v5 commit: error 0, the same producer id, epoch + 1;
    once complete the records are committed (last stable offset = high watermark = 3, a
    read_committed Fetch returns them, no aborted transaction) and each partition's commit
    marker carries epoch + 1. EndTxn v5 commit again with the old epoch: the same answer, no
    second bump (DescribeTransactions: epoch + 1). A late Produce v12 batch with the old epoch
    (sequence 2): INVALID_PRODUCER_EPOCH, nothing stored, no transaction started. The next
    transaction at epoch + 1, sequence 0, to partitions 0 and 2: accepted; EndTxn v5 abort:
    epoch + 2; its abort markers carry epoch + 2; read_committed (Fetch's aborted list, a
    confluent-kafka read_committed consumer) shows the first transaction's records only."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    transactional_id = unique("tx2")
    first = {p: [f"first-{p}-{i}".encode() for i in range(2)] for p in (0, 1)}
    with kw.RawConnection.to(bs) as conn:
        producer_id, epoch = init(conn, transactional_id)
        old = (producer_id, epoch)
        produced = v2.produce(
            conn, 12, transactional_id, {(topic, p): batch(old, 0, first[p]) for p in (0, 1)}
        )
        assert {k: (r.error_code, r.base_offset) for k, r in produced.items()} == {
            (topic, 0): (kw.NONE, 0),
            (topic, 1): (kw.NONE, 0),
        }, produced
        ongoing = described(conn, transactional_id)
        assert ongoing.state == "Ongoing", ongoing
        assert (ongoing.producer_id, ongoing.producer_epoch) == old, ongoing
        assert partitions_of(ongoing) == {topic: [0, 1]}, ongoing

        committed = v2.end_txn(conn, transactional_id, old, commit=True)
        assert committed == v2.EndedTxn(kw.NONE, producer_id, epoch + 1), committed
        done = wait_state(conn, transactional_id, "CompleteCommit")
        assert (done.producer_id, done.producer_epoch) == (producer_id, epoch + 1), done
        for p in (0, 1):
            assert ends(conn, topic, p) == (3, 3), p  # 2 records and the commit marker
            assert read_committed(conn, topic, p) == (list(first[p]), []), p
        assert ends(conn, topic, 2) == (0, 0)

        # EndTxn retried with the old epoch: the same answer, no second bump
        again = v2.end_txn(conn, transactional_id, old, commit=True)
        assert again == committed, again
        after_retry = described(conn, transactional_id)
        assert after_retry.state == "CompleteCommit", after_retry
        assert after_retry.producer_epoch == epoch + 1, after_retry

        # a late batch of the finished transaction's epoch
        late = v2.produce(conn, 12, transactional_id, {(topic, 0): batch(old, 2, [b"late"])})
        assert late[(topic, 0)].error_code == INVALID_PRODUCER_EPOCH, late
        assert ends(conn, topic, 0) == (3, 3), "the late batch stored"
        after_late = described(conn, transactional_id)
        assert after_late.state == "CompleteCommit", after_late
        assert after_late.producer_epoch == epoch + 1, after_late
        assert partitions_of(after_late) == {}, after_late

        # the next transaction, at the epoch EndTxn answered; aborted
        new = (committed.producer_id, committed.producer_epoch)
        second = {0: [b"aborted-0-0", b"aborted-0-1"], 2: [b"aborted-2-0"]}
        produced = v2.produce(
            conn, 12, transactional_id, {(topic, p): batch(new, 0, v) for p, v in second.items()}
        )
        assert {k: (r.error_code, r.base_offset) for k, r in produced.items()} == {
            (topic, 0): (kw.NONE, 3),
            (topic, 2): (kw.NONE, 0),
        }, produced
        ongoing = described(conn, transactional_id)
        assert (ongoing.state, ongoing.producer_epoch) == ("Ongoing", epoch + 1), ongoing
        assert partitions_of(ongoing) == {topic: [0, 2]}, ongoing
        aborted = v2.end_txn(conn, transactional_id, new, commit=False)
        assert aborted == v2.EndedTxn(kw.NONE, producer_id, epoch + 2), aborted
        done = wait_state(conn, transactional_id, "CompleteAbort")
        assert done.producer_epoch == epoch + 2, done

        assert ends(conn, topic, 0) == (6, 6)  # first: 2 + marker; second: 2 + marker
        assert ends(conn, topic, 1) == (3, 3)
        assert ends(conn, topic, 2) == (2, 2)  # 1 record + marker
        assert read_committed(conn, topic, 0) == (list(first[0]), [(producer_id, 3)])
        assert read_committed(conn, topic, 1) == (list(first[1]), [])
        assert read_committed(conn, topic, 2) == ([], [(producer_id, 0)])

    # the markers carry the bumped epochs
    commit_mark, abort_mark = epoch + 1, epoch + 2
    assert markers(bs, topic, 0, 6) == [
        (2, producer_id, commit_mark, True),
        (5, producer_id, abort_mark, False),
    ]
    assert markers(bs, topic, 1, 3) == [(2, producer_id, commit_mark, True)]
    assert markers(bs, topic, 2, 2) == [(1, producer_id, abort_mark, False)]
    # and a real read_committed consumer shows the committed transaction only
    shown = tx.read_all("confluent", bs, topic, {0: 6, 1: 3, 2: 2}, committed=True)
    assert tx.shown(shown) == sorted(
        (p, i, v) for p, values in first.items() for i, v in enumerate(values)
    )


# ---------------------------------------------------------------------------------------------
# Produce: the partition added by the broker from v12 on


@pytest.mark.parametrize("old_version", [8, 11])
def test_produce_before_v12_does_not_add_the_partition(tbroker: Broker, old_version: int) -> None:
    """A transactional batch to a partition not in the producer's transaction: Produce v8 and
    v11 answer NOT_ENOUGH_REPLICAS with a non-empty error message, store nothing and add
    nothing (DescribeTransactions: no partition); Produce v12 of the same batch adds the
    partition and stores it at 0; committed with EndTxn v5, read_committed returns it."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    transactional_id = unique("tx2")
    with kw.RawConnection.to(bs) as conn:
        producer = init(conn, transactional_id)
        records = batch(producer, 0, [b"one", b"two"])
        if old_version == 8:
            refused = tx.produce(conn, transactional_id, topic, 1, records, version=8)
            error, message = refused.error_code, refused.error_message
        else:
            answer = v2.produce(conn, 11, transactional_id, {(topic, 1): records})[(topic, 1)]
            error, message = answer.error_code, answer.error_message
        assert error == NOT_ENOUGH_REPLICAS, (error, message)
        assert message, f"no error message with NOT_ENOUGH_REPLICAS: {message!r}"
        assert ends(conn, topic, 1) == (0, 0), "the refused batch stored"
        assert partitions_of(described(conn, transactional_id)) == {}

        taken = v2.produce(conn, 12, transactional_id, {(topic, 1): records})[(topic, 1)]
        assert (taken.error_code, taken.base_offset) == (kw.NONE, 0), taken
        ongoing = described(conn, transactional_id)
        assert ongoing.state == "Ongoing", ongoing
        assert partitions_of(ongoing) == {topic: [1]}, ongoing
        ended = v2.end_txn(conn, transactional_id, producer, commit=True)
        assert ended == v2.EndedTxn(kw.NONE, producer[0], producer[1] + 1), ended
        wait_state(conn, transactional_id, "CompleteCommit")
        assert ends(conn, topic, 1) == (3, 3)
        assert read_committed(conn, topic, 1) == ([b"one", b"two"], [])


# ---------------------------------------------------------------------------------------------
# EndTxn v5: epochs, retries and contrary decisions


def test_end_txn_v5_epochs_retries_and_contrary_decisions(tbroker: Broker) -> None:
    """Right after InitProducerId (epoch e, no transaction): EndTxn v5 abort answers 0 and
    epoch e + 1; retried with e, the same answer and no second bump; EndTxn v5 commit at e + 1
    (still no transaction) is INVALID_TXN_STATE; commit with e, the contrary of the abort
    decided at e, is PRODUCER_FENCED. Then a transaction at e + 1 (Produce v12) committed with
    EndTxn v5 (epoch e + 2): abort with e + 1 is PRODUCER_FENCED, the commit retried with e + 1
    answers the same again; the epoch stays e + 2 and the records are committed."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    transactional_id = unique("tx2")
    with kw.RawConnection.to(bs) as conn:
        producer_id, e = init(conn, transactional_id)
        aborted = v2.end_txn(conn, transactional_id, (producer_id, e), commit=False)
        assert aborted == v2.EndedTxn(kw.NONE, producer_id, e + 1), aborted
        assert described(conn, transactional_id).producer_epoch == e + 1
        retried = v2.end_txn(conn, transactional_id, (producer_id, e), commit=False)
        assert retried == aborted, retried
        assert described(conn, transactional_id).producer_epoch == e + 1, "a second bump"

        nothing = v2.end_txn(conn, transactional_id, (producer_id, e + 1), commit=True)
        assert nothing.error_code == INVALID_TXN_STATE, nothing
        contrary = v2.end_txn(conn, transactional_id, (producer_id, e), commit=True)
        assert contrary.error_code == PRODUCER_FENCED, contrary
        state = described(conn, transactional_id)
        assert (state.producer_id, state.producer_epoch) == (producer_id, e + 1), state
        assert partitions_of(state) == {}, state

        current = (producer_id, e + 1)
        records = batch(current, 0, [b"kept"])
        taken = v2.produce(conn, 12, transactional_id, {(topic, 0): records})[(topic, 0)]
        assert (taken.error_code, taken.base_offset) == (kw.NONE, 0), taken
        committed = v2.end_txn(conn, transactional_id, current, commit=True)
        assert committed == v2.EndedTxn(kw.NONE, producer_id, e + 2), committed
        wait_state(conn, transactional_id, "CompleteCommit")
        contrary = v2.end_txn(conn, transactional_id, current, commit=False)
        assert contrary.error_code == PRODUCER_FENCED, contrary
        again = v2.end_txn(conn, transactional_id, current, commit=True)
        assert again == committed, again
        final = described(conn, transactional_id)
        assert (final.state, final.producer_epoch) == ("CompleteCommit", e + 2), final
        assert ends(conn, topic, 0) == (2, 2)
        assert read_committed(conn, topic, 0) == ([b"kept"], [])


# ---------------------------------------------------------------------------------------------
# AddPartitionsToTxn v4/v5: verify_only


def open_transaction_with_0_and_1(
    conn: kw.RawConnection, topic: str, transactional_id: str
) -> tuple[int, int]:
    """InitProducerId, Produce v12 to partition 0 (the broker adds it), AddPartitionsToTxn v0
    of partition 1: the producer (id, epoch) of the transaction, Ongoing with 0 and 1."""
    producer = init(conn, transactional_id)
    taken = v2.produce(conn, 12, transactional_id, {(topic, 0): batch(producer, 0, [b"a"])})
    assert taken[(topic, 0)].error_code == kw.NONE, taken
    added = tx.add_partitions_to_txn(conn, transactional_id, producer, {topic: [1]})
    assert added == {(topic, 1): kw.NONE}, added
    state = described(conn, transactional_id)
    assert (state.state, partitions_of(state)) == ("Ongoing", {topic: [0, 1]}), state
    return producer


def txn_partitions(
    transactional_id: str, producer: tuple[int, int], verify_only: bool, parts: dict[str, list[int]]
) -> v2.TxnPartitions:
    producer_id, epoch = producer
    return v2.TxnPartitions(transactional_id, producer_id, epoch, verify_only, parts)


def test_add_partitions_to_txn_v4_verifies_and_v5_adds(tbroker: Broker) -> None:
    """A transaction with partition 0 (added by Produce v12) and 1 (AddPartitionsToTxn v0):
    AddPartitionsToTxn v4 verify_only for 0 and 1 answers 0 for each; for 2, INVALID_TXN_STATE,
    and adds nothing (DescribeTransactions: 0 and 1); v5 without verify_only adds 2 (answer 0;
    DescribeTransactions: 0, 1, 2) and verify_only then answers 0 for it. Once the transaction
    is aborted (EndTxn v5), verify_only at the new epoch answers INVALID_TXN_STATE for 0."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    tid = unique("tx2")

    def answer(errors: dict[int, int]) -> v2.AddedPartitions:
        return v2.AddedPartitions(kw.NONE, {tid: {(topic, p): e for p, e in errors.items()}})

    with kw.RawConnection.to(bs) as conn:
        producer = open_transaction_with_0_and_1(conn, topic, tid)
        verify = txn_partitions(tid, producer, True, {topic: [0, 1]})
        verified = v2.add_partitions_to_txn(conn, [verify], 4)
        assert verified == answer({0: kw.NONE, 1: kw.NONE}), verified
        verify = txn_partitions(tid, producer, True, {topic: [2]})
        verified = v2.add_partitions_to_txn(conn, [verify], 4)
        assert verified == answer({2: INVALID_TXN_STATE}), verified
        state = described(conn, tid)
        assert (state.state, partitions_of(state)) == ("Ongoing", {topic: [0, 1]}), state

        add = txn_partitions(tid, producer, False, {topic: [2]})
        added = v2.add_partitions_to_txn(conn, [add], 5)
        assert added == answer({2: kw.NONE}), added
        assert partitions_of(described(conn, tid)) == {topic: [0, 1, 2]}
        verified = v2.add_partitions_to_txn(conn, [verify], 4)
        assert verified == answer({2: kw.NONE}), verified

        ended = v2.end_txn(conn, tid, producer, commit=False)
        assert ended == v2.EndedTxn(kw.NONE, producer[0], producer[1] + 1), ended
        wait_state(conn, tid, "CompleteAbort")
        next_epoch = (ended.producer_id, ended.producer_epoch)
        verify = txn_partitions(tid, next_epoch, True, {topic: [0]})
        verified = v2.add_partitions_to_txn(conn, [verify], 4)
        assert verified == answer({0: INVALID_TXN_STATE}), verified
        assert partitions_of(described(conn, tid)) == {}


def test_add_partitions_to_txn_v4_verify_only_answers_each_partition(tbroker: Broker) -> None:
    """One AddPartitionsToTxn v4 verify_only request for partitions 0 and 1 (in the ongoing
    transaction) and 2 (not in it) answers each partition for itself: 0, 0 and
    INVALID_TXN_STATE; nothing is added (DescribeTransactions: 0 and 1)."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    tid = unique("tx2")
    with kw.RawConnection.to(bs) as conn:
        producer = open_transaction_with_0_and_1(conn, topic, tid)
        verify = txn_partitions(tid, producer, True, {topic: [0, 1, 2]})
        verified = v2.add_partitions_to_txn(conn, [verify], 4)
        errors = {(topic, 0): kw.NONE, (topic, 1): kw.NONE, (topic, 2): INVALID_TXN_STATE}
        assert verified == v2.AddedPartitions(kw.NONE, {tid: errors}), verified
        state = described(conn, tid)
        assert (state.state, partitions_of(state)) == ("Ongoing", {topic: [0, 1]}), state
        ended = v2.end_txn(conn, tid, producer, commit=False)
        assert ended.error_code == kw.NONE, ended


# ---------------------------------------------------------------------------------------------
# TxnOffsetCommit v5: the group added by its coordinator


def test_txn_offset_commit_v5_adds_the_group_to_the_transaction(tbroker: Broker) -> None:
    """A producer that never sends AddOffsetsToTxn writes a record (Produce v12) and sends
    offsets 10 and 11 with TxnOffsetCommit v5: 0 for each partition; while the transaction is
    open the group's offsets are still none (OffsetFetch; with require_stable,
    UNSTABLE_OFFSET_COMMIT for those two). EndTxn v5 commit: once the transaction is complete
    OffsetFetch answers 10, 11 and none, stable, and the record is committed."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx2")
    nothing = dict.fromkeys(ALL, -1)
    with kw.RawConnection.to(bs) as conn:
        before = fetch_offsets(conn, group, topic, require_stable=False)
        assert {p: o.offset for p, o in before.items()} == nothing, before
        producer = init(conn, transactional_id)
        taken = v2.produce(conn, 12, transactional_id, {(topic, 2): batch(producer, 0, [b"out"])})
        assert taken[(topic, 2)].error_code == kw.NONE, taken
        offsets = {(topic, 0): 10, (topic, 1): 11}
        answer = v2.txn_offset_commit(conn, 5, transactional_id, group, producer, offsets)
        assert answer == dict.fromkeys(offsets, kw.NONE), answer

        plain = fetch_offsets(conn, group, topic, require_stable=False)
        assert {p: (o.error_code, o.offset) for p, o in plain.items()} == {
            p: (kw.NONE, -1) for p in ALL
        }, "offsets of an open transaction are the group's"
        pending = fetch_offsets(conn, group, topic, require_stable=True)
        assert {p: o.error_code for p, o in pending.items()} == {
            0: tx.UNSTABLE_OFFSET_COMMIT,
            1: tx.UNSTABLE_OFFSET_COMMIT,
            2: kw.NONE,
        }, pending

        ended = v2.end_txn(conn, transactional_id, producer, commit=True)
        assert ended == v2.EndedTxn(kw.NONE, producer[0], producer[1] + 1), ended
        wait_state(conn, transactional_id, "CompleteCommit")
        assert stable_offsets(conn, group, topic) == {0: 10, 1: 11, 2: -1}
        plain = fetch_offsets(conn, group, topic, require_stable=False)
        assert {p: o.offset for p, o in plain.items()} == {0: 10, 1: 11, 2: -1}
        assert read_committed(conn, topic, 2) == ([b"out"], [])


def test_txn_offset_commit_v3_without_add_offsets_adds_nothing(tbroker: Broker) -> None:
    """The same TxnOffsetCommit at v3, in an ongoing transaction (a Produce v12 record) whose
    producer never sent AddOffsetsToTxn, the group's coordinator ready (OffsetFetch
    answered): COORDINATOR_LOAD_IN_PROGRESS for each partition, and the group is not added:
    nothing pending (require_stable answers none at once), and after EndTxn v5 commit the
    group still has no offsets."""
    bs = tbroker.bootstrap
    topic = new_topic(bs)
    group = unique("grp")
    transactional_id = unique("tx2")
    nothing = {p: (kw.NONE, -1) for p in ALL}
    with kw.RawConnection.to(bs) as conn:
        before = fetch_offsets(conn, group, topic, require_stable=False)
        assert {p: (o.error_code, o.offset) for p, o in before.items()} == nothing, before
        producer = init(conn, transactional_id)
        taken = v2.produce(conn, 12, transactional_id, {(topic, 2): batch(producer, 0, [b"out"])})
        assert taken[(topic, 2)].error_code == kw.NONE, taken
        offsets = {(topic, 0): 10, (topic, 1): 11}
        answer = v2.txn_offset_commit(conn, 3, transactional_id, group, producer, offsets)
        assert answer == dict.fromkeys(offsets, COORDINATOR_LOAD_IN_PROGRESS), answer
        stable_now = fetch_offsets(conn, group, topic, require_stable=True)
        assert {p: (o.error_code, o.offset) for p, o in stable_now.items()} == nothing
        assert partitions_of(described(conn, transactional_id)) == {topic: [2]}

        ended = v2.end_txn(conn, transactional_id, producer, commit=True)
        assert ended == v2.EndedTxn(kw.NONE, producer[0], producer[1] + 1), ended
        wait_state(conn, transactional_id, "CompleteCommit")
        after = fetch_offsets(conn, group, topic, require_stable=True)
        assert {p: (o.error_code, o.offset) for p, o in after.items()} == nothing, after
        assert read_committed(conn, topic, 2) == ([b"out"], [])
