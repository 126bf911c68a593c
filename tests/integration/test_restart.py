"""Acknowledged records survive a broker restart (SIGTERM and SIGKILL); offsets continue with
no gap and no reuse. Run against local storage and against S3 (moto)."""

from __future__ import annotations

import signal
import threading
import time
import urllib.request

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import Msg, confluent_consume, confluent_produce, unique
from support.procs import S3_ENV, free_port

PARTITIONS = 2


@pytest.fixture(params=["local", "s3"])
def storage_args(request):
    """Broker arguments and environment for each storage backend."""
    if request.param == "local":
        return [], {}
    moto = request.getfixturevalue("moto")
    bucket = request.getfixturevalue("s3_bucket")
    return moto.broker_args(bucket), dict(S3_ENV)


def make_broker(broker_factory, storage_args):
    args, env = storage_args
    return broker_factory([*args, "--default-partitions", str(PARTITIONS)], env=env)


def msgs_for(round_: int, n: int) -> list[Msg]:
    return [
        Msg(i % PARTITIONS, f"k{i}".encode(), f"r{round_}-v{i}".encode(), (("r", b"%d" % round_),))
        for i in range(n)
    ]


def read_all(bootstrap, topic, expected):
    got = confluent_consume(bootstrap, topic, expected)
    out = {}
    for g in got:
        out.setdefault(g.partition, []).append(g)
    return out


def latest(bootstrap, topic, partition) -> int:
    with kw.RawConnection.to(bootstrap) as conn:
        res = kw.list_offsets(conn, topic, partition, kw.LATEST)
    assert res.error_code == kw.NONE, res
    return res.offset


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_acked_records_survive_restart(broker_factory, storage_args, stop):
    broker = make_broker(broker_factory, storage_args)
    topic = unique(f"restart-{stop}")
    first = msgs_for(1, 200)
    delivered = confluent_produce(broker.bootstrap, topic, first, acks="all")
    per_part = {p: sum(1 for m in first if m.partition == p) for p in range(PARTITIONS)}
    assert sorted(off for p, off in delivered if p == 0) == list(range(per_part[0]))

    if stop == "sigterm":
        assert broker.terminate() == 0, "SIGTERM must flush and exit 0"
    else:
        broker.kill()
    broker.start()

    # the topic and its partition count came back from the metadata store
    assert kw.ensure_topic(broker.bootstrap, topic) == PARTITIONS
    for p in range(PARTITIONS):
        assert latest(broker.bootstrap, topic, p) == per_part[p]
    before = read_all(broker.bootstrap, topic, per_part)
    for p in range(PARTITIONS):
        want = [m for m in first if m.partition == p]
        assert [g.offset for g in before[p]] == list(range(per_part[p]))
        assert [(g.key, g.value, g.headers) for g in before[p]] == [
            (m.key, m.value, m.headers) for m in want
        ]

    # producing continues at the next offset: no gap, no reuse
    second = msgs_for(2, 100)
    delivered2 = confluent_produce(broker.bootstrap, topic, second, acks="all")
    for p in range(PARTITIONS):
        offs = sorted(off for q, off in delivered2 if q == p)
        n2 = sum(1 for m in second if m.partition == p)
        assert offs == list(range(per_part[p], per_part[p] + n2))
    total = {p: per_part[p] + sum(1 for m in second if m.partition == p) for p in per_part}
    after = read_all(broker.bootstrap, topic, total)
    for p in range(PARTITIONS):
        want = [m for m in first + second if m.partition == p]
        assert [g.offset for g in after[p]] == list(range(total[p]))
        assert [g.value for g in after[p]] == [m.value for m in want]


def test_sigkill_during_produce_keeps_every_ack(broker_factory, storage_args):
    """SIGKILL while a producer is busy: every acknowledged record is there at its acked offset,
    offsets stay contiguous, and new records go right after the recovered end."""
    broker = make_broker(broker_factory, storage_args)
    topic = unique("kill-busy")
    kw.ensure_topic(broker.bootstrap, topic, PARTITIONS)

    from confluent_kafka import Producer

    acked: dict[bytes, tuple[int, int]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            with lock:
                acked[msg.value()] = (msg.partition(), msg.offset())

    def produce_loop():
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "enable.idempotence": False,
                "message.timeout.ms": 5000,
                "reconnect.backoff.max.ms": 200,
            }
        )
        i = 0
        while not stop.is_set():
            try:
                producer.produce(
                    topic, value=b"busy-%06d" % i, partition=i % PARTITIONS, on_delivery=on_delivery
                )
                i += 1
            except BufferError:
                pass
            producer.poll(0.001)
        producer.flush(10)  # drain callbacks; failures are simply not acked

    thread = threading.Thread(target=produce_loop, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while len(acked) < 500 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(acked) >= 500, "the producer got no acknowledgements"
    broker.kill()
    stop.set()
    thread.join(30)
    assert not thread.is_alive()
    acked_now = dict(acked)

    broker.start()
    ends = {p: latest(broker.bootstrap, topic, p) for p in range(PARTITIONS)}
    got = read_all(broker.bootstrap, topic, ends)
    for p in range(PARTITIONS):
        assert [g.offset for g in got.get(p, [])] == list(range(ends[p]))
    # This producer is not idempotent, so it resends only after a produce went unanswered for
    # message.timeout.ms (5 s): a value stored twice means the broker stalled that long.
    where: dict[bytes, tuple[int, int]] = {}
    twice = []
    for g in (g for recs in got.values() for g in recs):
        if g.value in where:
            twice.append((g.value, where[g.value], (g.partition, g.offset)))
        where[g.value] = (g.partition, g.offset)
    assert not twice, f"values stored twice (value, first, second): {twice[:5]}"
    missing = {v: at for v, at in acked_now.items() if where.get(v) != at}
    assert not missing, f"{len(missing)} acked records lost or moved, e.g. {list(missing)[:3]}"

    delivered = confluent_produce(
        broker.bootstrap, topic, [Msg(p, None, b"after-%d" % p) for p in range(PARTITIONS)]
    )
    assert sorted(delivered) == [(p, ends[p]) for p in range(PARTITIONS)]


def test_sigterm_flushes_acks0_and_exits_zero(broker_factory):
    """Records sent with acks=0 sit in the write buffer (flush interval 60 s); SIGTERM must
    flush them and exit 0."""
    broker = broker_factory(flush_interval_ms=60_000)
    topic = unique("acks0-term")
    kw.ensure_topic(broker.bootstrap, topic, 1)
    values = [b"a0-%d" % i for i in range(50)]
    with kw.RawConnection.to(broker.bootstrap) as conn:
        for i in range(0, len(values), 10):
            batch = sf.build_record_batch([(None, v, []) for v in values[i : i + 10]])
            conn.send(kw.PRODUCE, 3, kw.produce_body(topic, 0, batch, acks=0))
        # requests on one connection are handled in order: once this is answered, the
        # broker has taken every produce request above
        assert kw.api_versions(conn).error_code == kw.NONE
    assert broker.terminate() == 0
    broker.start()
    got = confluent_consume(broker.bootstrap, topic, {0: len(values)})
    assert [g.value for g in got] == values
    assert [g.offset for g in got] == list(range(len(values)))


def test_sigterm_answers_every_produce_it_took(broker_factory):
    """acks=all requests waiting for their flush when SIGTERM arrives (flush interval 60 s):
    the broker flushes, then answers each on its connection before it exits. A client that
    lost those answers would have to send the stored records again."""
    metrics_port = free_port()
    broker = broker_factory(
        ["--metrics-addr", f"127.0.0.1:{metrics_port}"], flush_interval_ms=60_000
    )
    topic = unique("acks-all-term")
    kw.ensure_topic(broker.bootstrap, topic, 1)
    values = [b"t-%d" % i for i in range(30)]
    with kw.RawConnection.to(broker.bootstrap) as conn:
        correlation_ids = []
        for i in range(0, len(values), 10):
            batch = sf.build_record_batch([(None, v, []) for v in values[i : i + 10]])
            correlation_ids.append(conn.send(kw.PRODUCE, 3, kw.produce_body(topic, 0, batch)))
        # the broker counts a produce request when it appends it: wait until all three are in
        taken = f'kafscale_produce_requests_total{{topic="{topic}"}} 3'
        deadline = time.monotonic() + 15
        while taken not in scrape(metrics_port):
            assert time.monotonic() < deadline, scrape(metrics_port)
            time.sleep(0.05)
        broker.proc.send_signal(signal.SIGTERM)
        answers = []
        for expected_id in correlation_ids:
            correlation_id, r = conn.recv_response()
            assert correlation_id == expected_id
            answers.append(kw.parse_produce_v3(r)[(topic, 0)])
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (0, 10), (0, 20)]
    assert broker.wait_exit() == 0
    broker.start()
    got = confluent_consume(broker.bootstrap, topic, {0: len(values)})
    assert [g.value for g in got] == values


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()
