"""Real Kafka clients produce to and consume from a real broker, byte for byte.

kcat (librdkafka 2.0 from Debian), confluent-kafka (librdkafka 2.12), kafka-python and aiokafka,
every compression codec each of them offers, acks 0/1/all, a 3-partition topic.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import (
    CONSUMERS,
    PRODUCERS,
    Got,
    Msg,
    confluent_consume,
    counts,
    kcat_produce,
    unique,
)
from support.procs import settled

PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PY_CLIENTS = ["confluent", "kafka-python", "aiokafka"]


@pytest.fixture(scope="module")
def kbroker(module_broker_factory):
    """One broker for the module; new topics get 3 partitions."""
    return module_broker_factory(["--default-partitions", str(PARTITIONS)])


def rich_messages(n: int, null_header_values: bool = True) -> list[Msg]:
    """Text records covering null keys, null and empty values, headers (repeated names, empty
    and null values), explicit create timestamps and values big enough to compress.

    kafka-python's producer refuses null header values, so it gets empty ones instead."""
    base_ts = int(time.time() * 1000) - 3_600_000
    msgs = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i % 17}".encode()
        if i % 11 == 3 and key is not None:
            value = None  # tombstone
        elif i % 13 == 4:
            value = b""
        elif i % 7 == 1:
            value = (f"long-{i}-" + "abcdefgh" * 500).encode()
        else:
            value = f"value-{i}".encode()
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 1:
            headers = (("trace", f"t{i}".encode()), ("dup", b"1"), ("dup", b"2"))
        elif i % 3 == 2:
            headers = (("empty", b""), ("null", None if null_header_values else b""))
        msgs.append(Msg(i % PARTITIONS, key, value, headers, base_ts + i * 7))
    return msgs


def kcat_messages(n: int) -> list[Msg]:
    """What kcat can produce: text lines, key or null key, one header set per partition."""
    msgs = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i % 17}".encode()
        value = (f"long-{i}-" + "abcdefgh" * 300) if i % 7 == 1 else f"value-{i}"
        msgs.append(Msg(i % PARTITIONS, key, value.encode(), (("src", b"kcat"),)))
    return msgs


def by_partition(items):
    out = defaultdict(list)
    for it in items:
        out[it.partition].append(it)
    return dict(out)


def assert_hwm(bootstrap: str, topic: str, expected: dict[int, int]) -> None:
    """The log end of every partition is exactly what was produced: no extra records."""
    with kw.RawConnection.to(bootstrap) as conn:
        for p in range(PARTITIONS):
            res = kw.list_offsets(conn, topic, p, kw.LATEST)
            assert res.error_code == kw.NONE, res
            assert res.offset == expected.get(p, 0), f"partition {p}: {res}"


def assert_same(
    produced: list[Msg],
    got: list[Got],
    *,
    check_timestamps: bool = True,
    ts_window: tuple[int, int] | None = None,
) -> None:
    want = by_partition(produced)
    have = by_partition(got)
    assert sorted(have) == sorted(want)
    for p, msgs in want.items():
        recs = have[p]
        assert [r.offset for r in recs] == list(range(len(msgs))), f"partition {p} offsets"
        assert [r.key for r in recs] == [m.key for m in msgs], f"partition {p} keys"
        assert [r.value for r in recs] == [m.value for m in msgs], f"partition {p} values"
        assert [r.headers for r in recs] == [m.headers for m in msgs], f"partition {p} headers"
        if check_timestamps:
            assert [r.timestamp for r in recs] == [m.timestamp for m in msgs], f"p{p} timestamps"
        if ts_window is not None:
            lo, hi = ts_window
            assert all(lo <= r.timestamp <= hi for r in recs), f"partition {p} timestamps"


def assert_stored_with_codec(broker, topic: str, codec: str, records: int) -> None:
    """The broker stores batches as the client sent them, so the segments show whether the
    client really compressed with ``codec`` (they are also parsed and checked on the way),
    once compaction has turned all ``records`` into segments."""

    def compacted():
        logs = sf.read_local_partitions(broker.data_dir, topic)
        assert sum(len(log.records()) for log in logs.values()) == records
        return logs

    logs = settled(compacted)
    seen = {
        sf.CODEC_NAMES[b.compression]
        for log in logs.values()
        for _, seg, _ in log.segments
        for b in seg.batches
    }
    if codec == "none":
        assert seen == {"none"}
    else:
        # a client may send a batch that does not shrink uncompressed, but not all of them
        assert codec in seen, f"no {codec} batch stored (batches: {seen})"
        assert seen <= {codec, "none"}


def assert_delivery_matches(produced: list[Msg], delivered, got: list[Got]) -> None:
    """Offsets in delivery reports are where each message really is."""
    at = {(g.partition, g.offset): g for g in got}
    for m, (p, off) in zip(produced, delivered, strict=True):
        assert p == m.partition
        rec = at[(p, off)]
        assert (rec.key, rec.value) == (m.key, m.value)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", PY_CLIENTS)
def test_python_client_roundtrip(kbroker, client, codec):
    """Each Python client produces with a codec; every consumer reads back exactly that."""
    topic = unique(f"rt-{client}-{codec}")
    kw.ensure_topic(kbroker.bootstrap, topic, PARTITIONS)
    msgs = rich_messages(120, null_header_values=client != "kafka-python")
    delivered = PRODUCERS[client](kbroker.bootstrap, topic, msgs, compression=codec, acks="all")
    expected = counts(msgs)
    assert_hwm(kbroker.bootstrap, topic, expected)
    for consumer_name, consume in CONSUMERS.items():
        got = consume(kbroker.bootstrap, topic, expected)
        assert_same(msgs, got)
        if consumer_name == client:
            assert_delivery_matches(msgs, delivered, got)
    assert_stored_with_codec(kbroker, topic, codec, len(msgs))


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_roundtrip(kbroker, codec):
    topic = unique(f"rt-kcat-{codec}")
    kw.ensure_topic(kbroker.bootstrap, topic, PARTITIONS)
    msgs = kcat_messages(90)
    before = int(time.time() * 1000) - 1
    kcat_produce(kbroker.bootstrap, topic, msgs, compression=codec, acks="all")
    after = int(time.time() * 1000) + 1
    expected = counts(msgs)
    assert_hwm(kbroker.bootstrap, topic, expected)
    for consume in CONSUMERS.values():
        got = consume(kbroker.bootstrap, topic, expected)
        assert_same(msgs, got, check_timestamps=False, ts_window=(before, after))
    assert_stored_with_codec(kbroker, topic, codec, len(msgs))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client", [*PY_CLIENTS, "kcat"])
def test_acks(kbroker, client, acks):
    """acks 0/1/all all end up durable and readable; the topic is auto-created by the client."""
    topic = unique(f"acks-{client}-{acks}")
    if client == "kcat":
        msgs = kcat_messages(60)
        kcat_produce(kbroker.bootstrap, topic, msgs, acks=acks)
    else:
        msgs = rich_messages(60, null_header_values=client != "kafka-python")
        ack_value = acks if acks == "all" or client == "confluent" else int(acks)
        delivered = PRODUCERS[client](kbroker.bootstrap, topic, msgs, acks=ack_value)
        if acks != "0":
            assert [p for p, _ in delivered] == [m.partition for m in msgs]
    got = confluent_consume(kbroker.bootstrap, topic, counts(msgs))
    assert_same(msgs, got, check_timestamps=client != "kcat")
    assert_hwm(kbroker.bootstrap, topic, counts(msgs))
    if client != "kcat" and acks != "0":
        assert_delivery_matches(msgs, delivered, got)


@pytest.mark.parametrize("client", PY_CLIENTS)
def test_client_partitioner_spreads_keys(kbroker, client):
    """Without an explicit partition, the client's partitioner uses the broker's partition
    count: keys spread over the partitions, one key stays in one partition, in order."""
    topic = unique(f"keys-{client}")
    kw.ensure_topic(kbroker.bootstrap, topic, PARTITIONS)
    msgs = [Msg(-1, f"k{i % 24}".encode(), f"v{i}".encode()) for i in range(240)]

    delivered = _produce_unpartitioned(client, kbroker.bootstrap, topic, msgs)
    per_partition = defaultdict(int)
    for p, _ in delivered:
        per_partition[p] += 1
    assert len(per_partition) > 1, f"every key went to one partition: {dict(per_partition)}"
    assert set(per_partition) <= set(range(PARTITIONS))
    got = confluent_consume(kbroker.bootstrap, topic, dict(per_partition))
    assert len(got) == len(msgs)
    key_partition: dict[bytes, int] = {}
    key_values = defaultdict(list)
    for g in sorted(got, key=lambda g: (g.partition, g.offset)):
        assert key_partition.setdefault(g.key, g.partition) == g.partition
        key_values[g.key].append(g.value)
    for key, values in key_values.items():
        assert values == [m.value for m in msgs if m.key == key]


def _produce_unpartitioned(client, bootstrap, topic, msgs):
    if client == "confluent":
        from confluent_kafka import Producer

        out = []
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for m in msgs:
            p.produce(
                topic,
                key=m.key,
                value=m.value,
                on_delivery=lambda err, msg: out.append(
                    (msg.partition(), msg.offset()) if err is None else err
                ),
            )
        assert p.flush(60) == 0
        assert all(isinstance(x, tuple) for x in out), out
        return out
    if client == "kafka-python":
        from kafka import KafkaProducer

        p = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=False
        )
        try:
            futures = [p.send(topic, key=m.key, value=m.value) for m in msgs]
            p.flush(timeout=60)
            return [(f.get(60).partition, f.get(60).offset) for f in futures]
        finally:
            p.close(timeout=10)
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=False
        )
        await p.start()
        try:
            futures = [await p.send(topic, key=m.key, value=m.value) for m in msgs]
            return [(md.partition, md.offset) for md in await asyncio.gather(*futures)]
        finally:
            await p.stop()

    return asyncio.run(run())


def test_binary_payloads(kbroker):
    """Every byte value survives in keys, values and header values."""
    topic = unique("binary")
    kw.ensure_topic(kbroker.bootstrap, topic, PARTITIONS)
    blob = bytes(range(256))
    msgs = [
        Msg(i % PARTITIONS, blob[i:] + blob[:i], blob * (i + 1), (("b", blob[::-1]),), 1000 + i)
        for i in range(30)
    ]
    PRODUCERS["confluent"](kbroker.bootstrap, topic, msgs, compression="lz4")
    expected = counts(msgs)
    for name in PY_CLIENTS:
        assert_same(msgs, CONSUMERS[name](kbroker.bootstrap, topic, expected))
