"""Protocol semantics: ApiVersions, Metadata, Fetch (long poll, committed data only, ranges),
ListOffsets, request pipelining, CreateTopics/DeleteTopics through real admin clients."""

from __future__ import annotations

import struct
import threading
import time
import zlib

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import Msg, confluent_consume, confluent_produce, unique
from support.procs import free_port

# (min, max) each API must at least cover (the product contract)
REQUIRED_RANGES = {
    kw.API_VERSIONS: (0, 4),
    kw.METADATA: (0, 12),
    kw.PRODUCE: (3, 11),
    kw.FETCH: (4, 17),
    kw.LIST_OFFSETS: (0, 9),
    kw.CREATE_TOPICS: (0, 7),
    kw.DELETE_TOPICS: (0, 6),
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
}
# APIs this broker does not serve (replication and KRaft
# internals): not listed at all, as Kafka leaves out what it does not serve
NOT_SERVED = [4, 5, 6, 7, 46, *range(52, 57), 57, 67]
# the transaction coordinator's APIs a producer sends: (min, max) each must at least cover
# (v4+ of AddPartitionsToTxn are brokers' own, KIP-890)
TRANSACTION_RANGES = {24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3), 65: (0, 0), 66: (0, 1)}


@pytest.fixture(scope="module")
def pbroker(module_broker_factory):
    return module_broker_factory()


def conn_to(broker) -> kw.RawConnection:
    return kw.RawConnection.to(broker.bootstrap)


def batch(values: list[bytes], timestamps: list[int] | None = None) -> bytes:
    return sf.build_record_batch([(None, v, []) for v in values], timestamps=timestamps)


def fetched_records(res: kw.FetchPartitionResult) -> list[sf.Record]:
    """Records of every complete batch in a fetch response (a trailing partial batch, which
    Kafka allows, is ignored)."""
    out = []
    data = res.records or b""
    pos = 0
    while pos + sf.BATCH_LENGTH_OVERHEAD <= len(data):
        try:
            b = sf.parse_batch(data, pos)
        except sf.FormatError:
            break
        assert b.crc_ok, "fetched batch fails its CRC"
        out += b.records()
        pos += b.size
    return out


# ---------------------------------------------------------------------------------------------
# ApiVersions


def test_api_versions_v0_covers_the_contract(pbroker):
    with conn_to(pbroker) as conn:
        r = conn.request(kw.API_VERSIONS, 0, kw.api_versions_v0_body())
        error = r.i16()
        entries = [(r.i16(), r.i16(), r.i16()) for _ in range(r.array_len())]
        assert r.remaining() == 0
    assert error == kw.NONE
    keys = [k for k, _, _ in entries]
    assert len(keys) == len(set(keys)), "an API key is listed twice"
    apis = {k: (lo, hi) for k, lo, hi in entries}
    for key, (lo, hi) in (REQUIRED_RANGES | TRANSACTION_RANGES).items():
        assert key in apis, f"API {key} not advertised"
        assert apis[key][0] <= lo and apis[key][1] >= hi, f"API {key}: {apis[key]}"
    for key in NOT_SERVED:
        assert key not in apis, f"API {key} is listed: {apis[key]}"
    for key, (lo, hi) in apis.items():
        assert 0 <= lo <= hi, f"API {key}: bad range {(lo, hi)}"


def test_api_versions_v3_flexible(pbroker):
    with conn_to(pbroker) as conn:
        v0 = kw.api_versions(conn)
        # request header v2; the response header stays v0 (no tagged fields) for ApiVersions
        r = conn.request(
            kw.API_VERSIONS,
            3,
            kw.api_versions_v3_body(),
            flexible=True,
            response_flexible_header=False,
        )
        v3 = kw.parse_api_versions_v3(r)
        assert r.remaining() == 0
    assert v3.error_code == kw.NONE
    assert v3.apis == v0.apis
    assert v3.throttle_time_ms == 0


def test_api_versions_too_new_answers_v0_unsupported(pbroker):
    with conn_to(pbroker) as conn:
        r = conn.request(
            kw.API_VERSIONS,
            9,
            kw.api_versions_v3_body(),
            flexible=True,
            response_flexible_header=False,
        )
        res = kw.parse_api_versions_v0(r)
        assert res.error_code == kw.UNSUPPORTED_VERSION
        assert kw.API_VERSIONS in res.apis
        assert res.apis[kw.API_VERSIONS][1] >= 3
        # and the connection is still good for the version it now knows
        assert kw.api_versions(conn).error_code == kw.NONE


# ---------------------------------------------------------------------------------------------
# Metadata


def test_metadata_topic_list_semantics(pbroker):
    a, b = unique("md-a"), unique("md-b")
    kw.ensure_topic(pbroker.bootstrap, a)
    kw.ensure_topic(pbroker.bootstrap, b)
    with conn_to(pbroker) as conn:
        # v0: empty list means all topics
        assert {a, b} <= set(kw.metadata(conn, [], version=0).topics)
        # v1+: null means all, empty means none
        for version in (1, 4):
            assert {a, b} <= set(kw.metadata(conn, None, version=version).topics)
            assert kw.metadata(conn, [], version=version).topics == {}
        only_a = kw.metadata(conn, [a], version=1)
        assert set(only_a.topics) == {a}
        assert only_a.topics[a].error_code == kw.NONE


def test_metadata_brokers_and_leaders(pbroker):
    with conn_to(pbroker) as conn:
        topic = unique("md-leader")
        kw.ensure_topic(pbroker.bootstrap, topic)
        md = kw.metadata(conn, [topic], version=1)
    assert len(md.brokers) == 1
    node, host, port = md.brokers[0]
    assert (host, port) == ("127.0.0.1", pbroker.port)
    assert md.controller_id == node
    assert [p.leader for p in md.topics[topic].partitions] == [node]


def test_metadata_allow_auto_topic_creation_false_is_honoured(pbroker):
    topic = unique("md-noauto")
    with conn_to(pbroker) as conn:
        md = kw.metadata(conn, [topic], version=4, allow_auto_topic_creation=False)
        assert md.topics[topic].error_code == kw.UNKNOWN_TOPIC_OR_PARTITION
        assert topic not in kw.metadata(conn, None, version=4).topics
        md = kw.metadata(conn, [topic], version=4, allow_auto_topic_creation=True)
        assert md.topics[topic].error_code in (kw.NONE, kw.LEADER_NOT_AVAILABLE)
    assert kw.ensure_topic(pbroker.bootstrap, topic) == 1
    with conn_to(pbroker) as conn:
        assert topic in kw.metadata(conn, None, version=4).topics


def test_advertised_address_and_env_settings(broker_factory):
    """--broker-id/--broker-host/--broker-port show up in Metadata; KAFSCALE_* env vars work
    like flags."""
    port = free_port()
    broker = broker_factory(
        ["--broker-id", "7", "--broker-host", "localhost", "--broker-port", str(port)],
        port=port,
        env={"KAFSCALE_DEFAULT_PARTITIONS": "4"},
    )
    topic = unique("adv")
    assert kw.ensure_topic(broker.bootstrap, topic) == 4
    with conn_to(broker) as conn:
        md = kw.metadata(conn, [topic], version=1)
    assert md.brokers == [(7, "localhost", port)]
    assert md.controller_id == 7
    assert {p.leader for p in md.topics[topic].partitions} == {7}
    # a real client follows the advertised address
    msgs = [Msg(p, None, b"adv-%d" % p) for p in range(4)]
    confluent_produce(broker.bootstrap, topic, msgs)
    got = confluent_consume(broker.bootstrap, topic, dict.fromkeys(range(4), 1))
    assert sorted(g.value for g in got) == sorted(m.value for m in msgs)


# ---------------------------------------------------------------------------------------------
# pipelining


def test_pipelined_requests_answered_in_order(pbroker):
    topic = unique("pipe")
    kw.ensure_topic(pbroker.bootstrap, topic)
    with conn_to(pbroker) as conn:
        sent = []
        # a long-polling fetch first: everything behind it must wait for it
        sent.append(conn.send(kw.FETCH, 4, kw.fetch_body(topic, 0, 0, max_wait_ms=300)))
        for i in range(30):
            if i % 3 == 0:
                sent.append(conn.send(kw.API_VERSIONS, 0, b""))
            elif i % 3 == 1:
                sent.append(conn.send(kw.METADATA, 1, kw.metadata_body(1, [topic])))
            else:
                sent.append(
                    conn.send(kw.PRODUCE, 3, kw.produce_body(topic, 0, batch([b"p%d" % i])))
                )
        got = [conn.recv_response()[0] for _ in sent]
    assert got == sent
    with conn_to(pbroker) as conn:
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).offset == 10


def test_a_producer_with_its_window_full_is_answered_before_the_flush_interval(broker_factory):
    """Clients keep at most 5 Produce requests in flight per connection by default (idempotent
    producers, the Java client and kafka-python even without idempotence). Once a connection has
    5 waiting with at least 1 MiB between them, the broker flushes at once rather than holding
    them for the flush interval (10 minutes here: they would time out). A request alone waits
    for the interval as always; it is stored with the next flush although it timed out, as in
    Kafka."""
    b = broker_factory(flush_interval_ms=600_000)
    topic = unique("window")
    kw.ensure_topic(b.bootstrap, topic)
    big = batch([bytes(250_000)])
    with kw.RawConnection.to(b.bootstrap, timeout=60) as conn:
        alone = conn.request(kw.PRODUCE, 3, kw.produce_body(topic, 0, batch([b"alone"]), -1, 1000))
        assert kw.parse_produce_v3(alone)[(topic, 0)].error_code == kw.REQUEST_TIMED_OUT
        sent = [
            conn.send(kw.PRODUCE, 3, kw.produce_body(topic, 0, big, -1, 30_000)) for _ in range(5)
        ]
        answers = []
        for cid in sent:
            got, reader = conn.recv_response()
            assert got == cid
            answers.append(kw.parse_produce_v3(reader)[(topic, 0)])
    assert [(a.error_code, a.base_offset) for a in answers] == [(kw.NONE, i) for i in range(1, 6)]


# ---------------------------------------------------------------------------------------------
# Fetch


def test_fetch_long_poll_returns_when_data_arrives(pbroker):
    topic = unique("longpoll")
    kw.ensure_topic(pbroker.bootstrap, topic)
    with conn_to(pbroker) as conn:
        assert kw.produce(conn, topic, 0, batch([b"first"])).error_code == kw.NONE
    result: dict = {}

    def long_poll():
        # socket timeout (30 s) < max wait (120 s): only an early return can succeed
        with kw.RawConnection.to(pbroker.bootstrap, timeout=30) as c:
            try:
                result["res"] = kw.fetch(c, topic, 0, 1, max_wait_ms=120_000, min_bytes=1)
            except Exception as exc:  # reported below
                result["err"] = exc

    t = threading.Thread(target=long_poll)
    t.start()
    time.sleep(0.5)  # let the fetch park; if it arrives later it just finds the data
    with conn_to(pbroker) as conn:
        assert kw.produce(conn, topic, 0, batch([b"second"])).error_code == kw.NONE
    t.join(60)
    assert not t.is_alive()
    assert "err" not in result, f"long poll did not return with the new data: {result['err']!r}"
    res = result["res"]
    assert res.error_code == kw.NONE
    assert [(r.offset, r.value) for r in fetched_records(res)] == [(1, b"second")]
    assert res.high_watermark == 2


def test_fetch_max_wait_expires_empty(pbroker):
    topic = unique("fetch-empty")
    kw.ensure_topic(pbroker.bootstrap, topic)
    with kw.RawConnection.to(pbroker.bootstrap, timeout=30) as conn:
        res = kw.fetch(conn, topic, 0, 0, max_wait_ms=200)
    assert res.error_code == kw.NONE
    assert res.high_watermark == 0
    assert not res.records


def test_fetch_offset_out_of_range(pbroker):
    topic = unique("fetch-oor")
    kw.ensure_topic(pbroker.bootstrap, topic)
    with conn_to(pbroker) as conn:
        kw.produce(conn, topic, 0, batch([b"a", b"b", b"c"]))
        at_end = kw.fetch(conn, topic, 0, 3, max_wait_ms=50)
        assert at_end.error_code == kw.NONE and not at_end.records
        for offset in (4, 1000, -1):
            res = kw.fetch(conn, topic, 0, offset, max_wait_ms=50)
            assert res.error_code == kw.OFFSET_OUT_OF_RANGE, offset


def test_fetch_returns_committed_data_only(broker_factory):
    """With a long flush interval, acks=0 records sit in the write buffer: not visible to Fetch
    or ListOffsets until flushed."""
    broker = broker_factory(flush_interval_ms=60_000)
    topic = unique("uncommitted")
    kw.ensure_topic(broker.bootstrap, topic)
    with conn_to(broker) as conn:
        conn.send(kw.PRODUCE, 3, kw.produce_body(topic, 0, batch([b"x", b"y"]), acks=0))
        assert kw.api_versions(conn).error_code == kw.NONE  # the produce has been taken
        res = kw.fetch(conn, topic, 0, 0, max_wait_ms=300)
        assert res.error_code == kw.NONE
        assert res.high_watermark == 0
        assert fetched_records(res) == []
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).offset == 0
    assert broker.terminate() == 0
    broker.start()
    with conn_to(broker) as conn:
        res = kw.fetch(conn, topic, 0, 0)
        assert [r.value for r in fetched_records(res)] == [b"x", b"y"]


def test_fetch_ranges_and_byte_limits(pbroker):
    """Fetch from any offset (inside a batch, at a segment boundary) and with tiny byte
    limits still makes progress with whole batches."""
    topic = unique("fetch-range")
    kw.ensure_topic(pbroker.bootstrap, topic)
    values = [b"v%03d-" % i + b"." * 500 for i in range(40)]
    with conn_to(pbroker) as conn:
        for i in range(0, 40, 4):  # 10 acked produces: 10 batches, likely 10 segments
            assert kw.produce(conn, topic, 0, batch(values[i : i + 4])).error_code == kw.NONE
        for start in (0, 1, 4, 7, 21, 39):
            recs = fetched_records(kw.fetch(conn, topic, 0, start))
            recs = [r for r in recs if r.offset >= start]  # a batch may start before `start`
            assert [r.offset for r in recs] == list(range(start, 40)), start
            assert [r.value for r in recs] == values[start:]
        # limits smaller than one batch: Kafka still returns the first batch whole
        tiny = kw.fetch(conn, topic, 0, 8, max_bytes=10, partition_max_bytes=10)
        recs = fetched_records(tiny)
        assert recs and recs[0].offset == 8
        # walking the log with small limits visits every record exactly once
        offset, seen = 0, []
        while offset < 40:
            recs = [
                r
                for r in fetched_records(kw.fetch(conn, topic, 0, offset, partition_max_bytes=700))
                if r.offset >= offset
            ]
            assert recs, f"no progress at offset {offset}"
            seen += [r.value for r in recs]
            offset = recs[-1].offset + 1
        assert seen == values


# ---------------------------------------------------------------------------------------------
# ListOffsets


@pytest.mark.parametrize("version", [0, 1, 2, 4])
def test_list_offsets_earliest_latest_and_by_timestamp(pbroker, version):
    topic = unique(f"lo-v{version}")
    kw.ensure_topic(pbroker.bootstrap, topic)
    with conn_to(pbroker) as conn:
        for ts in (kw.EARLIEST, kw.LATEST):
            res = kw.list_offsets(conn, topic, 0, ts, version)
            assert (res.error_code, res.offset) == (kw.NONE, 0)
        # timestamps not in order inside a batch; the first offset with ts >= t wins
        kw.produce(conn, topic, 0, batch([b"a", b"b", b"c"], [1000, 5000, 3000]))
        kw.produce(conn, topic, 0, batch([b"d", b"e"], [2000, 6000]))
        res = kw.list_offsets(conn, topic, 0, kw.EARLIEST, version)
        assert (res.error_code, res.offset) == (kw.NONE, 0)
        res = kw.list_offsets(conn, topic, 0, kw.LATEST, version)
        assert (res.error_code, res.offset) == (kw.NONE, 5)
        if version == 0:
            return  # v0 answers offsets only, no timestamp lookup results to compare
        for ts, offset, found_ts in [
            (0, 0, 1000),
            (1000, 0, 1000),
            (1001, 1, 5000),
            (2500, 1, 5000),
            (5000, 1, 5000),
            (5001, 4, 6000),
            (6000, 4, 6000),
        ]:
            res = kw.list_offsets(conn, topic, 0, ts, version)
            assert (res.error_code, res.offset, res.timestamp) == (kw.NONE, offset, found_ts), ts
        res = kw.list_offsets(conn, topic, 0, 6001, version)
        assert (res.error_code, res.offset) == (kw.NONE, -1)


def test_list_offsets_through_clients(pbroker):
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic = unique("lo-clients")
    kw.ensure_topic(pbroker.bootstrap, topic)
    msgs = [Msg(0, None, b"m%d" % i, (), 10_000 + 1000 * i) for i in range(10)]
    confluent_produce(pbroker.bootstrap, topic, msgs)

    c = Consumer({"bootstrap.servers": pbroker.bootstrap, "group.id": unique("lo")})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 10)
        found = c.offsets_for_times([TopicPartition(topic, 0, 13_500)], timeout=30)
        assert found[0].error is None and found[0].offset == 4
    finally:
        c.close()

    k = KafkaConsumer(bootstrap_servers=pbroker.bootstrap)
    try:
        tp = KTP(topic, 0)
        assert k.beginning_offsets([tp]) == {tp: 0}
        assert k.end_offsets([tp]) == {tp: 10}
        res = k.offsets_for_times({tp: 12_000})[tp]
        assert (res.offset, res.timestamp) == (2, 12_000)
        assert k.offsets_for_times({tp: 99_000})[tp] is None
    finally:
        k.close()


# ---------------------------------------------------------------------------------------------
# CreateTopics / DeleteTopics


def partitions_of(bootstrap: str, topic: str) -> int | None:
    with kw.RawConnection.to(bootstrap) as conn:
        md = kw.metadata(conn, [topic], version=4, allow_auto_topic_creation=False)
    t = md.topics[topic]
    if t.error_code == kw.UNKNOWN_TOPIC_OR_PARTITION:
        return None
    assert t.error_code == kw.NONE, t
    return len(t.partitions)


def wait_partitions(bootstrap: str, topic: str, want: int | None, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while partitions_of(bootstrap, topic) != want:
        assert time.monotonic() < deadline, f"{topic} never had {want} partitions"
        time.sleep(0.1)


def test_admin_confluent_create_and_delete(pbroker):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": pbroker.bootstrap})
    topic = unique("adm-ck")

    def create(name, partitions=4, **kw_):
        fut = admin.create_topics([NewTopic(name, partitions, 1)], **kw_)[name]
        return fut.result(30)

    # validate_only creates nothing
    create(topic, validate_only=True)
    assert partitions_of(pbroker.bootstrap, topic) is None

    create(topic)
    wait_partitions(pbroker.bootstrap, topic, 4)
    with pytest.raises(KafkaException) as exc:
        create(topic)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    for bad in ("bad/name", "x" * 250):
        with pytest.raises(KafkaException) as exc:
            create(bad)
        assert exc.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    with pytest.raises(KafkaException) as exc:
        create(unique("adm-zero"), partitions=0)
    assert exc.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    # records written, topic deleted, same name recreated: it starts empty at offset 0
    confluent_produce(pbroker.bootstrap, topic, [Msg(p, None, b"old") for p in range(4)])
    admin.delete_topics([topic])[topic].result(30)
    wait_partitions(pbroker.bootstrap, topic, None)
    with pytest.raises(KafkaException) as exc:
        admin.delete_topics([topic])[topic].result(30)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    create(topic, partitions=2)
    wait_partitions(pbroker.bootstrap, topic, 2)
    with conn_to(pbroker) as conn:
        for p in range(2):
            assert kw.list_offsets(conn, topic, p, kw.LATEST).offset == 0
    delivered = confluent_produce(pbroker.bootstrap, topic, [Msg(0, None, b"new")])
    assert delivered == [(0, 0)]
    got = confluent_consume(pbroker.bootstrap, topic, {0: 1})
    assert [g.value for g in got] == [b"new"]


def test_admin_kafka_python_create_and_delete(pbroker):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import (
        InvalidTopicError,
        TopicAlreadyExistsError,
        UnknownTopicOrPartitionError,
    )

    admin = KafkaAdminClient(bootstrap_servers=pbroker.bootstrap)
    try:
        topic = unique("adm-kp")
        admin.create_topics([NewTopic(topic, 3, 1)])
        wait_partitions(pbroker.bootstrap, topic, 3)
        assert topic in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 3, 1)])
        with pytest.raises(InvalidTopicError):
            admin.create_topics([NewTopic("no spaces allowed", 1, 1)])
        admin.delete_topics([topic])
        wait_partitions(pbroker.bootstrap, topic, None)
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic])
    finally:
        admin.close()


# ---------------------------------------------------------------------------------------------
# FindCoordinator, legacy Produce

FIND_COORDINATOR = 10
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_REQUEST = 42


def find_coordinator_v1(conn: kw.RawConnection, key: str, key_type: int):
    r = conn.request(FIND_COORDINATOR, 1, kw.Writer().string(key).i8(key_type).done())
    _throttle, error, message = r.i32(), r.i16(), r.string()
    node, host, port = r.i32(), r.string(), r.i32()
    assert r.remaining() == 0
    return error, message, node, host, port


def test_find_coordinator_names_this_broker_for_groups_and_transactions(pbroker):
    host, port = pbroker.bootstrap.rsplit(":", 1)
    with conn_to(pbroker) as conn:
        for key, key_type in (("some-group", 0), ("some-txn", 1)):
            error, message, node, got_host, got_port = find_coordinator_v1(conn, key, key_type)
            assert (error, message) == (kw.NONE, None), key_type
            assert (node, got_host, got_port) == (0, host, int(port)), key_type
        # an unknown key type is refused, with the reason
        error, message, node, _, _ = find_coordinator_v1(conn, "some-key", 2)
        assert (error, node) == (INVALID_REQUEST, -1)
        assert "key type 2" in message


def test_legacy_produce_v2_message_set_is_refused_per_partition(pbroker):
    topic = unique("legacy")
    kw.ensure_topic(pbroker.bootstrap, topic)
    # one magic-1 message: offset, size, crc, magic, attributes, timestamp, key, value
    message = kw.Writer().i8(1).i8(0).i64(int(time.time() * 1000)).bytes_(None).bytes_(b"v")
    message = message.done()
    crc = zlib.crc32(message)
    legacy = kw.Writer().i64(0).i32(4 + len(message)).raw(struct.pack(">I", crc)).raw(message)
    body = (
        kw.Writer()
        .i16(-1)  # acks; v2 has no transactional id
        .i32(30000)
        .array_len(1)
        .string(topic)
        .array_len(1)
        .i32(0)
        .bytes_(legacy.done())
        .done()
    )
    with conn_to(pbroker) as conn:
        r = conn.request(kw.PRODUCE, 2, body)
        assert r.array_len() == 1 and r.string() == topic and r.array_len() == 1
        partition, error, base_offset = r.i32(), r.i16(), r.i64()
        assert (partition, error, base_offset) == (0, UNSUPPORTED_FOR_MESSAGE_FORMAT, -1)
        # nothing was stored: the partition is still empty
        assert kw.list_offsets(conn, topic, 0, -1).offset == 0
