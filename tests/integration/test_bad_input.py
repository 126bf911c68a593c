"""Bad input over raw sockets: undecodable frames close the connection, bad records get the
Kafka error code, nothing is half-written, and the broker keeps serving everyone else."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import zlib

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import unique

MAX_REQUEST = 1024 * 1024
MAX_MESSAGE = 8192


@pytest.fixture
def strict_broker(broker_factory):
    return broker_factory(
        [
            "--max-request-bytes",
            str(MAX_REQUEST),
            "--max-message-bytes",
            str(MAX_MESSAGE),
        ]
    )


@pytest.fixture
def bystander(strict_broker):
    """A connection opened before the bad input; it must keep working afterwards."""
    conn = kw.RawConnection.to(strict_broker.bootstrap)
    assert kw.api_versions(conn).error_code == kw.NONE
    yield conn
    conn.close()


def small_batch(n: int = 3, tag: bytes = b"ok") -> bytes:
    return sf.build_record_batch([(b"k%d" % i, tag + b"-%d" % i, []) for i in range(n)])


def assert_healthy(broker, bystander: kw.RawConnection | None = None) -> None:
    """The broker runs, an older connection still answers, and a new one can produce and
    fetch back what it produced."""
    assert broker.running, "broker process died"
    if bystander is not None:
        res = kw.api_versions(bystander)
        assert res.error_code == kw.NONE and kw.PRODUCE in res.apis
    topic = unique("healthy")
    kw.ensure_topic(broker.bootstrap, topic)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        res = kw.produce(conn, topic, 0, small_batch(3, b"health"), acks=-1)
        assert (res.error_code, res.base_offset) == (kw.NONE, 0)
        fetched = kw.fetch(conn, topic, 0, 0)
        assert fetched.error_code == kw.NONE and fetched.high_watermark == 3
        values = [r.value for b in sf.iter_batches(fetched.records) for r in b.records()]
        assert values == [b"health-0", b"health-1", b"health-2"]


def open_raw(broker) -> kw.RawConnection:
    return kw.RawConnection.to(broker.bootstrap, timeout=15)


def send_ignoring_reset(conn: kw.RawConnection, data: bytes) -> None:
    # the broker may close before reading it all; that is allowed
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        conn.send_raw(data)


def end_offset(broker, topic: str) -> int:
    with open_raw(broker) as conn:
        res = kw.list_offsets(conn, topic, 0, kw.LATEST)
    assert res.error_code == kw.NONE, res
    return res.offset


# ---------------------------------------------------------------------------------------------
# framing


@pytest.mark.parametrize(
    "length",
    [MAX_REQUEST + 1, 64 * MAX_REQUEST, 0x7FFFFFFF, -1, -(2**31)],
    ids=["max+1", "64x", "int32max", "minus1", "int32min"],
)
def test_bad_frame_length_closes_connection(strict_broker, bystander, length):
    with open_raw(strict_broker) as conn:
        header = kw.request_header(kw.API_VERSIONS, 0, 7, "big", False)
        send_ignoring_reset(conn, struct.pack(">i", length) + header + b"\x00" * 1024)
        assert conn.wait_closed(), "connection stayed open after a bad frame length"
    assert_healthy(strict_broker, bystander)


def test_request_over_max_request_bytes_is_refused(strict_broker, bystander):
    """A real Produce request one byte over the limit is refused by closing; the same request
    under the limit (split in two) is taken."""
    topic = unique("max-req")
    kw.ensure_topic(strict_broker.bootstrap, topic)
    batches = [small_batch(1, b"x" * 4000) for _ in range(300)]
    records = b"".join(batches)
    body = kw.produce_body(topic, 0, records)
    header = kw.request_header(kw.PRODUCE, 3, 1, "big", False)
    too_big = len(header) + len(body)
    assert too_big > MAX_REQUEST
    with open_raw(strict_broker) as conn:
        send_ignoring_reset(conn, kw.frame(header + body))
        assert conn.wait_closed(), "connection stayed open after an oversize request"
    assert end_offset(strict_broker, topic) == 0
    with open_raw(strict_broker) as conn:
        half = len(batches) // 2
        for part in (batches[:half], batches[half:]):
            res = kw.produce(conn, topic, 0, b"".join(part))
            assert res.error_code == kw.NONE
    assert end_offset(strict_broker, topic) == len(batches)
    assert_healthy(strict_broker, bystander)


def test_truncated_frame_then_eof(strict_broker, bystander):
    with open_raw(strict_broker) as conn:
        conn.send_raw(struct.pack(">i", 200) + kw.request_header(kw.METADATA, 1, 1, "t", False))
        conn.sock.shutdown(socket.SHUT_WR)
        assert conn.wait_closed()
    assert_healthy(strict_broker, bystander)


@pytest.mark.parametrize("cut", [1, 9, 20, 40])
def test_truncated_request_body_closes_connection(strict_broker, bystander, cut):
    """A complete frame whose Produce body ends in the middle of a field."""
    topic = unique("trunc")
    kw.ensure_topic(strict_broker.bootstrap, topic)
    body = kw.produce_body(topic, 0, small_batch())
    header = kw.request_header(kw.PRODUCE, 3, 1, "t", False)
    truncated = body[: min(cut, len(body) - 1)]
    with open_raw(strict_broker) as conn:
        conn.send_raw(kw.frame(header + truncated))
        assert conn.wait_closed(), "connection stayed open after a truncated request"
    assert end_offset(strict_broker, topic) == 0
    assert_healthy(strict_broker, bystander)


@pytest.mark.parametrize(
    "payload",
    [
        b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        kw.frame(b"\x7a\x7a" + os.urandom(62)),
        kw.frame(b"\x00"),  # a frame shorter than any request header
        # ApiVersions v3 with a compact string length past the frame end
        kw.frame(kw.request_header(kw.API_VERSIONS, 3, 1, "g", True) + b"\x7f"),
    ],
    ids=["http", "random", "one-byte", "bad-compact-string"],
)
def test_garbage_closes_connection(strict_broker, bystander, payload):
    with open_raw(strict_broker) as conn:
        send_ignoring_reset(conn, payload)
        assert conn.wait_closed(), "connection stayed open after garbage"
    assert_healthy(strict_broker, bystander)


HUGE = b"\x7f\xff\xff\xff"
HUGE_ARRAYS = {
    # api, version, flexible header, body up to and including an absurd array length
    "produce-v3": (kw.PRODUCE, 3, False, b"\xff\xff" + b"\xff\xff" + b"\x00\x00\x75\x30" + HUGE),
    "fetch-v4": (kw.FETCH, 4, False, b"\xff" * 4 + b"\x00" * 12 + b"\x00" + HUGE),
    "list-offsets-v1": (kw.LIST_OFFSETS, 1, False, b"\xff" * 4 + HUGE),
    "metadata-v1": (kw.METADATA, 1, False, HUGE),
    "metadata-v9-compact": (kw.METADATA, 9, True, b"\xff\xff\xff\x7f"),
    "create-topics-v0": (kw.CREATE_TOPICS, 0, False, HUGE),
    "delete-topics-v0": (kw.DELETE_TOPICS, 0, False, HUGE),
}


@pytest.mark.parametrize("case", sorted(HUGE_ARRAYS))
def test_absurd_array_length_closes_connection(strict_broker, bystander, case):
    """A tiny request that claims billions of array elements must not make the broker try to
    allocate them."""
    api, version, flexible, body = HUGE_ARRAYS[case]
    with open_raw(strict_broker) as conn:
        conn.send_raw(kw.frame(kw.request_header(api, version, 1, "huge", flexible) + body + b"ab"))
        assert conn.wait_closed(), "connection stayed open after an undecodable request"
    assert_healthy(strict_broker, bystander)


@pytest.mark.parametrize("api_key", [1000, 32767, -5])
def test_unknown_api_key_closes_connection(strict_broker, bystander, api_key):
    with open_raw(strict_broker) as conn:
        conn.send_raw(kw.frame(kw.request_header(api_key, 0, 1, "u", False)))
        assert conn.wait_closed(), f"connection stayed open after api key {api_key}"
    assert_healthy(strict_broker, bystander)


DESCRIBE_CLIENT_QUOTAS = 48


def test_unimplemented_api_gets_unsupported_version(strict_broker, bystander):
    """DescribeClientQuotas v2, a version past the ones served (0-1): an error response in the
    newest encoding the broker knows (v1's, flexible), not a close."""
    # no components (compact array of 0), not strict, no tagged fields
    body = kw.Writer().uvarint(1).boolean(False).tagged_fields().done()
    with open_raw(strict_broker) as conn:
        r = conn.request(DESCRIBE_CLIENT_QUOTAS, 2, body, flexible=True)
        r.i32()  # throttle
        assert r.i16() == kw.UNSUPPORTED_VERSION
        # the connection goes on serving
        assert kw.api_versions(conn).error_code == kw.NONE
    assert_healthy(strict_broker, bystander)


def test_unimplemented_per_item_apis_answer_each_item(strict_broker, bystander):
    """A version past what is served, of an API whose response only carries per-item error
    codes, repeats the request's items, each with UNSUPPORTED_VERSION, instead of dropping the
    connection: FindCoordinator v6 (v0-4 are served) with two keys."""
    find_coordinator_v6 = (
        kw.Writer()
        .i8(0)  # key type: group
        .uvarint(3)  # compact array of 2
        .compact_string("a")
        .compact_string("b")
        .tagged_fields()
        .done()
    )
    with open_raw(strict_broker) as conn:
        r = conn.request(10, 6, find_coordinator_v6, flexible=True)
        r.i32()  # throttle
        results = []
        for _ in range(r.compact_array_len()):
            key, node, _host, port = r.compact_string(), r.i32(), r.compact_string(), r.i32()
            error, message = r.i16(), r.compact_string()
            r.skip_tagged_fields()
            results.append((key, node, port, error))
            assert message
        r.skip_tagged_fields()
        assert r.remaining() == 0
        assert results == [
            ("a", -1, -1, kw.UNSUPPORTED_VERSION),
            ("b", -1, -1, kw.UNSUPPORTED_VERSION),
        ]
        assert kw.api_versions(conn).error_code == kw.NONE
    assert_healthy(strict_broker, bystander)


# ---------------------------------------------------------------------------------------------
# records


def test_corrupt_batch_crc_is_rejected(strict_broker, bystander):
    topic = unique("crc")
    kw.ensure_topic(strict_broker.bootstrap, topic)
    with open_raw(strict_broker) as conn:
        res = kw.produce(
            conn, topic, 0, sf.build_record_batch([(b"k", b"v", [])], corrupt_crc=True)
        )
        assert res.error_code == kw.CORRUPT_MESSAGE
        # one bit flipped in a record after the CRC was computed
        good = bytearray(small_batch())
        good[-3] ^= 0x20
        res = kw.produce(conn, topic, 0, bytes(good))
        assert res.error_code == kw.CORRUPT_MESSAGE
        # a good batch after a bad one in the same request is not written either
        mixed = small_batch() + sf.build_record_batch([(b"k", b"v", [])], corrupt_crc=True)
        res = kw.produce(conn, topic, 0, mixed)
        assert res.error_code == kw.CORRUPT_MESSAGE
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).offset == 0
        fetched = kw.fetch(conn, topic, 0, 0, max_wait_ms=100)
        assert fetched.high_watermark == 0 and not fetched.records
        # same connection, valid batch: accepted at offset 0
        res = kw.produce(conn, topic, 0, small_batch())
        assert (res.error_code, res.base_offset) == (kw.NONE, 0)
    assert_healthy(strict_broker, bystander)


def test_truncated_batch_is_corrupt(strict_broker, bystander):
    topic = unique("short-batch")
    kw.ensure_topic(strict_broker.bootstrap, topic)
    with open_raw(strict_broker) as conn:
        res = kw.produce(conn, topic, 0, small_batch()[:-5])
        assert res.error_code == kw.CORRUPT_MESSAGE
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).offset == 0
    assert_healthy(strict_broker, bystander)


def test_old_magic_is_rejected(strict_broker, bystander):
    """Only RecordBatch v2 is accepted; a magic 1 message set is refused with an error code and
    nothing is written."""
    topic = unique("magic1")
    kw.ensure_topic(strict_broker.bootstrap, topic)
    # magic 1 message: offset, size, crc, magic, attributes, timestamp, key, value
    inner = struct.pack(">bbq", 1, 0, 1_700_000_000_000) + struct.pack(">i", -1)
    inner += struct.pack(">i", 5) + b"hello"
    msg = struct.pack(">I", zlib.crc32(inner)) + inner
    legacy = struct.pack(">qi", 0, len(msg)) + msg
    with open_raw(strict_broker) as conn:
        res = kw.produce(conn, topic, 0, legacy)
        assert res.error_code != kw.NONE
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).offset == 0
    assert_healthy(strict_broker, bystander)


def test_oversize_batch_is_message_too_large(strict_broker, bystander):
    topic = unique("too-large")
    kw.ensure_topic(strict_broker.bootstrap, topic)
    with open_raw(strict_broker) as conn:
        big = sf.build_record_batch([(None, b"x" * (2 * MAX_MESSAGE), [])])
        res = kw.produce(conn, topic, 0, big)
        assert res.error_code == kw.MESSAGE_TOO_LARGE
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).offset == 0
        fine = sf.build_record_batch([(None, b"y" * (MAX_MESSAGE // 2), [])])
        res = kw.produce(conn, topic, 0, fine)
        assert (res.error_code, res.base_offset) == (kw.NONE, 0)

    from confluent_kafka import KafkaError, Producer

    errors = []
    p = Producer({"bootstrap.servers": strict_broker.bootstrap, "message.send.max.retries": 0})
    p.produce(
        topic,
        value=b"z" * (4 * MAX_MESSAGE),
        partition=0,
        on_delivery=lambda e, m: errors.append(e),
    )
    assert p.flush(60) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert end_offset(strict_broker, topic) == 1
    assert_healthy(strict_broker, bystander)


# ---------------------------------------------------------------------------------------------
# topics


def test_unknown_topic_without_auto_create(broker_factory):
    broker = broker_factory(["--no-auto-create-topics"])
    topic = unique("nope")
    with open_raw(broker) as conn:
        res = kw.produce(conn, topic, 0, small_batch())
        assert res.error_code == kw.UNKNOWN_TOPIC_OR_PARTITION
        md = kw.metadata(conn, [topic], version=4, allow_auto_topic_creation=True)
        assert md.topics[topic].error_code == kw.UNKNOWN_TOPIC_OR_PARTITION
        md = kw.metadata(conn, [topic], version=1)
        assert md.topics[topic].error_code == kw.UNKNOWN_TOPIC_OR_PARTITION
        fetched = kw.fetch(conn, topic, 0, 0, max_wait_ms=100)
        assert fetched.error_code == kw.UNKNOWN_TOPIC_OR_PARTITION
        assert kw.list_offsets(conn, topic, 0, kw.LATEST).error_code == (
            kw.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert topic not in kw.metadata(conn, None, version=1).topics
    assert broker.running


INVALID_NAMES = ["bad/name", "white space", "a" * 250, ".", "..", "ümlaut", "star*", ""]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=lambda n: repr(n[:12]))
def test_invalid_topic_name(strict_broker, bystander, name):
    with open_raw(strict_broker) as conn:
        md = kw.metadata(conn, [name], version=4, allow_auto_topic_creation=True)
        assert md.topics[name].error_code == kw.INVALID_TOPIC_EXCEPTION
        # Kafka answers a produce to a topic that cannot exist with UNKNOWN_TOPIC_OR_PARTITION;
        # INVALID_TOPIC_EXCEPTION says the same more precisely. Either way nothing is written.
        res = kw.produce(conn, name, 0, small_batch())
        assert res.error_code in (kw.INVALID_TOPIC_EXCEPTION, kw.UNKNOWN_TOPIC_OR_PARTITION)
        assert name not in kw.metadata(conn, None, version=1).topics
    assert_healthy(strict_broker, bystander)


def test_longest_legal_topic_name_works(strict_broker):
    name = "a" * 249
    assert kw.ensure_topic(strict_broker.bootstrap, name) == 1
    with open_raw(strict_broker) as conn:
        assert kw.produce(conn, name, 0, small_batch()).error_code == kw.NONE


def test_partition_out_of_range(strict_broker, bystander):
    topic = unique("part-range")
    kw.ensure_topic(strict_broker.bootstrap, topic, 1)
    with open_raw(strict_broker) as conn:
        res = kw.produce(conn, topic, 5, small_batch())
        assert res.error_code == kw.UNKNOWN_TOPIC_OR_PARTITION
        assert kw.fetch(conn, topic, 5, 0, max_wait_ms=100).error_code == (
            kw.UNKNOWN_TOPIC_OR_PARTITION
        )
    assert_healthy(strict_broker, bystander)
