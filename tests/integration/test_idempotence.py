"""Idempotent producers against a real broker: producer ids from InitProducerId, retried batches
stored once and answered with their first offsets, Kafka's sequence and epoch errors, each Python
client with idempotence on (kafka-python by default); where transactional batches meet the
idempotent producer's rules (a transactional id keeps its producer id, a transactional batch is
taken only in a transaction its coordinator knows), and transactional clients initialising (or
told at once that their transaction timeout is too long).

The fault tests (test_faults.py) run idempotent producers through a killed and a frozen owner;
the cluster tests (test_cluster.py) through a 3-broker cluster; test_transactions.py runs
transactions through the clients."""

from __future__ import annotations

import time

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support import transactions as txw
from support.clients import CONSUMERS, PRODUCERS, Msg, counts, unique

PARTITIONS = 3


@pytest.fixture(scope="module")
def ibroker(module_broker_factory):
    return module_broker_factory(["--default-partitions", str(PARTITIONS)], name="idempotence")


def producer_id(conn: kw.RawConnection, transactional_id: str | None = None) -> tuple[int, int]:
    r = conn.request(kw.INIT_PRODUCER_ID, 0, kw.init_producer_id_v0_body(transactional_id))
    error, pid, epoch = kw.parse_init_producer_id_v0(r)
    assert error == kw.NONE, error
    return pid, epoch


def batch(pid: int, epoch: int, first_seq: int, values: list[bytes]) -> bytes:
    return sf.build_record_batch([(None, v, []) for v in values], producer=(pid, epoch, first_seq))


def test_producer_ids_are_distinct_and_a_transactional_id_keeps_its_own(ibroker):
    """Idempotent producers get a new producer id each; a transactional id keeps one, at the
    next epoch each time. A transactional batch of it is refused until AddPartitionsToTxn has
    put the partition in its transaction: NOT_ENOUGH_REPLICAS, which clients retry (as Kafka
    answers a batch whose transaction it could not verify), nothing stored."""
    topic = unique("idem-txn")
    kw.ensure_topic(ibroker.bootstrap, topic, PARTITIONS)
    transactional_id = unique("tx")
    with kw.RawConnection.to(ibroker.bootstrap) as conn:
        ids = [producer_id(conn) for _ in range(5)]
        assert len({pid for pid, _ in ids}) == 5
        assert all(pid >= 0 and epoch == 0 for pid, epoch in ids)
        tx_pid, tx_epoch = producer_id(conn, transactional_id)
        assert tx_pid >= 0 and tx_epoch == 0
        assert tx_pid not in {pid for pid, _ in ids}
        assert producer_id(conn, transactional_id) == (tx_pid, 1)
        txn = sf.build_record_batch([(None, b"t", [])], producer=(tx_pid, 1, 0), transactional=True)
        unverified = txw.produce(conn, transactional_id, topic, 0, txn)
        assert (unverified.error_code, unverified.base_offset) == (txw.NOT_ENOUGH_REPLICAS, -1)
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).offset == 0, "nothing stored"
        # in the transaction: the same batch is taken
        added = txw.add_partitions_to_txn(conn, transactional_id, (tx_pid, 1), {topic: [0]})
        assert added == {(topic, 0): kw.NONE}
        verified = txw.produce(conn, transactional_id, topic, 0, txn)
        assert (verified.error_code, verified.base_offset) == (kw.NONE, 0)
        assert txw.end_txn(conn, transactional_id, (tx_pid, 1), commit=False) == kw.NONE


def test_a_retried_batch_is_stored_once_and_sequence_rules_hold(ibroker):
    topic = unique("idem-wire")
    kw.ensure_topic(ibroker.bootstrap, topic, PARTITIONS)
    with kw.RawConnection.to(ibroker.bootstrap) as conn:
        pid, epoch = producer_id(conn)
        first = kw.produce(conn, topic, 0, batch(pid, epoch, 0, [b"a", b"b"]))
        assert (first.error_code, first.base_offset) == (kw.NONE, 0)
        again = kw.produce(conn, topic, 0, batch(pid, epoch, 0, [b"a", b"b"]))
        assert (again.error_code, again.base_offset) == (kw.NONE, 0), "answered as first"
        gap = kw.produce(conn, topic, 0, batch(pid, epoch, 5, [b"c"]))
        assert gap.error_code == kw.OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = kw.produce(conn, topic, 0, batch(pid, epoch, 2, [b"c"]))
        assert (nxt.error_code, nxt.base_offset) == (kw.NONE, 2)
        bumped = kw.produce(conn, topic, 0, batch(pid, epoch + 1, 0, [b"d"]))
        assert (bumped.error_code, bumped.base_offset) == (kw.NONE, 3)
        fenced = kw.produce(conn, topic, 0, batch(pid, epoch, 3, [b"e"]))
        assert fenced.error_code == kw.INVALID_PRODUCER_EPOCH
        # a transactional batch in a request without a transactional id: in no transaction
        txn = sf.build_record_batch([(None, b"t", [])], producer=(pid, 0, 0), transactional=True)
        refused = kw.produce_v8(conn, topic, 0, txn)
        assert (refused.error_code, refused.base_offset) == (kw.INVALID_TXN_STATE, -1)
        end = kw.list_offsets(conn, topic, 0, kw.LATEST)
        assert end.offset == 4, "nothing stored twice, nothing refused stored"
        error, producers = kw.describe_producers(conn, topic, 0)
        assert error == kw.NONE
        assert [(p.producer_id, p.epoch, p.last_sequence) for p in producers] == [
            (pid, epoch + 1, 0)
        ]
        assert abs(producers[0].last_timestamp - time.time() * 1000) < 60_000
        assert kw.describe_producers(conn, "no-such-topic", 0)[0] == kw.UNKNOWN_TOPIC_OR_PARTITION


IDEMPOTENT = {"confluent": True, "kafka-python": None, "aiokafka": True}


@pytest.mark.parametrize("client", list(IDEMPOTENT))
def test_idempotent_clients_round_trip(ibroker, client):
    """Each client with idempotence on (kafka-python: its default) produces to every
    partition; every consumer reads back exactly that, at the offsets the producer was told."""
    topic = unique(f"idem-{client}")
    kw.ensure_topic(ibroker.bootstrap, topic, PARTITIONS)
    msgs = [
        Msg(i % PARTITIONS, f"k{i}".encode(), f"{client}-{i}".encode(), (("h", b"1"),))
        for i in range(300)
    ]
    produce = PRODUCERS[client]
    delivered = produce(ibroker.bootstrap, topic, msgs, idempotent=IDEMPOTENT[client])
    want = counts(msgs)
    for p, n in want.items():
        assert sorted(off for q, off in delivered if q == p) == list(range(n)), p
    for consume in CONSUMERS.values():
        got = consume(ibroker.bootstrap, topic, want)
        assert sorted((g.partition, g.offset, g.value) for g in got) == sorted(
            (p, off, m.value) for m, (p, off) in zip(msgs, delivered, strict=True)
        )


TRANSACTION_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default
TOO_LONG = {
    "confluent": {"transaction.timeout.ms": TRANSACTION_MAX_TIMEOUT_MS + 1},
    "kafka-python": {"transaction_timeout_ms": TRANSACTION_MAX_TIMEOUT_MS + 1},
    "aiokafka": {"transaction_timeout_ms": TRANSACTION_MAX_TIMEOUT_MS + 1},
}


@pytest.mark.parametrize("client", list(txw.PRODUCERS))
def test_transactional_producers_initialise_or_fail_fast(ibroker, client):
    """A transactional producer initialises with the client's defaults plus the transactional
    id; one asking for a transaction timeout above the broker's maximum is told at once
    (INVALID_TRANSACTION_TIMEOUT, which no client retries) instead of retrying until its own
    timeout."""
    transactional_id = unique("tx")
    producer = txw.PRODUCERS[client](ibroker.bootstrap, transactional_id)
    try:
        producer.init()
    finally:
        producer.close()
    started = time.monotonic()
    producer = txw.PRODUCERS[client](ibroker.bootstrap, transactional_id, **TOO_LONG[client])
    try:
        with pytest.raises(Exception) as failed:  # each client raises its own type
            producer.init()
    finally:
        producer.close()
    assert "InvalidTransactionTimeout" in repr(failed.value) or (
        "INVALID_TRANSACTION_TIMEOUT" in repr(failed.value)
    ), failed.value
    assert time.monotonic() - started < 20, "retried instead of failing"
