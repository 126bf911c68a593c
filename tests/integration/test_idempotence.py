"""Idempotent producers against a real broker: producer ids from InitProducerId, retried batches
stored once and answered with their first offsets, Kafka's sequence and epoch errors, each Python
client with idempotence on (kafka-python by default), and transactional clients refused at once.

The fault tests (test_faults.py) run idempotent producers through a killed and a frozen owner;
the cluster tests (test_cluster.py) through a 3-broker cluster."""

from __future__ import annotations

import time

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
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


def test_producer_ids_are_distinct_and_transactional_ids_refused(ibroker):
    with kw.RawConnection.to(ibroker.bootstrap) as conn:
        ids = [producer_id(conn) for _ in range(5)]
        assert len({pid for pid, _ in ids}) == 5
        assert all(pid >= 0 and epoch == 0 for pid, epoch in ids)
        r = conn.request(kw.INIT_PRODUCER_ID, 0, kw.init_producer_id_v0_body("tx-1"))
        error, pid, _ = kw.parse_init_producer_id_v0(r)
        assert (error, pid) == (kw.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)


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
        txn = sf.build_record_batch([(None, b"t", [])], producer=(pid, 0, 0), transactional=True)
        refused = kw.produce_v8(conn, topic, 0, txn)
        assert refused.error_code == kw.INVALID_TXN_STATE
        assert "transactions are not supported" in (refused.error_message or "")
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


def test_transactional_producers_fail_fast(ibroker):
    """A transactional producer is told at once that transactions are not supported, instead
    of retrying until its timeout."""
    from confluent_kafka import KafkaException, Producer
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    started = time.monotonic()
    producer = Producer({"bootstrap.servers": ibroker.bootstrap, "transactional.id": "tx"})
    with pytest.raises(KafkaException) as failed:
        producer.init_transactions(30)
    assert "transactions are not supported" in str(failed.value), failed.value
    assert failed.value.args[0].fatal()
    assert time.monotonic() - started < 20, "retried instead of failing"

    started = time.monotonic()
    kp = KafkaProducer(bootstrap_servers=ibroker.bootstrap, transactional_id="tx")
    try:
        with pytest.raises(KafkaError):
            kp.init_transactions()
    finally:
        kp.close(timeout=5)
    assert time.monotonic() - started < 20, "retried instead of failing"
