"""Produce checks every record of every batch (issue 12, item 1), with raw frames no client
would send: each attack gets Kafka's error code, nothing of it is stored (the high watermark
stays), and kafka-python and the segment reader still read the partition afterwards."""

from __future__ import annotations

import struct
import time
import zlib

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import kafka_python_consume, unique

from kafscale.segment import SegmentSource

NOW_MS = int(time.time() * 1000)
YEAR_9999_MS = 253_402_300_799_000
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def vbroker(module_broker_factory):
    return module_broker_factory()


def records(n: int, prefix: bytes = b"v") -> list[tuple[bytes | None, bytes | None, list]]:
    return [(None, prefix + b"%d" % i, []) for i in range(n)]


def patched(batch: bytes, payload: bytes | None = None, **fields: int) -> bytes:
    """``batch`` with header fields replaced (and/or another records section), CRC fixed up:
    only what the test means to break is wrong."""
    names = [
        "base_offset", "length", "epoch", "magic", "crc", "attributes", "last_offset_delta",
        "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
        "count",
    ]  # fmt: skip
    header = dict(zip(names, sf.BATCH_HEADER.unpack_from(batch), strict=True))
    header.update(fields)
    body = batch[sf.BATCH_HEADER.size :] if payload is None else payload
    header["length"] = sf.BATCH_HEADER.size - sf.BATCH_LENGTH_OVERHEAD + len(body)
    packed = bytearray(sf.BATCH_HEADER.pack(*header.values()) + body)
    packed[17:21] = struct.pack(">I", sf.crc32c(bytes(packed[sf.BATCH_CRC_START :])))
    return bytes(packed)


def one_record_with(timestamp_delta: bytes) -> bytes:
    """A records section of one record whose timestamp delta is the given raw varint bytes."""
    body = b"\x00" + timestamp_delta + sf.encode_varint(0) + sf.encode_varint(-1)
    body += sf.encode_varint(1) + b"x" + sf.encode_varint(0)
    return sf.encode_varint(len(body)) + body


def inflated_count() -> bytes:
    """Declares 2^31-1 records (offsets to match), holds one."""
    return patched(
        sf.build_record_batch(records(1)),
        last_offset_delta=INT32_MAX - 1,
        count=INT32_MAX,
    )


def deflated_count() -> bytes:
    """Declares one record, holds three (consumers would see two records nobody numbered)."""
    return patched(sf.build_record_batch(records(3)), last_offset_delta=0, count=1)


def garbage(codec: int) -> bytes:
    return patched(
        sf.build_record_batch(records(2)),
        payload=b"\x00garbage, not compressed\xff" * 4,
        attributes=codec,
    )


def corrupt_varint() -> bytes:
    """A timestamp delta of 11 varint bytes (a varlong has at most 10)."""
    return patched(
        sf.build_record_batch(records(1)), payload=one_record_with(b"\xff" * 10 + b"\x01")
    )


def far_timestamp(timestamp: int) -> bytes:
    return sf.build_record_batch(records(2), timestamps=[NOW_MS, timestamp])


ATTACKS = {
    "count-int32-max-holding-1": (inflated_count, kw.INVALID_RECORD, None),
    "count-1-holding-3": (deflated_count, kw.INVALID_RECORD, None),
    **{
        f"garbage-{name}": (lambda c=codec: garbage(c), kw.CORRUPT_MESSAGE, None)
        for codec, name in sf.CODEC_NAMES.items()
        if codec != sf.COMPRESSION_NONE
    },
    **{
        f"codec-{codec}": (
            lambda c=codec: patched(sf.build_record_batch(records(2)), attributes=c),
            kw.CORRUPT_MESSAGE,
            None,
        )
        for codec in (5, 6, 7)
    },
    "corrupt-varint": (corrupt_varint, kw.INVALID_RECORD, 0),
    "control-batch": (
        lambda: patched(sf.build_record_batch(records(1)), attributes=0x20),
        kw.INVALID_RECORD,
        None,
    ),
    "timestamp-year-9999": (lambda: far_timestamp(YEAR_9999_MS), kw.INVALID_TIMESTAMP, 1),
    "timestamp-int64-max": (lambda: far_timestamp(INT64_MAX), kw.INVALID_TIMESTAMP, 1),
}


def high_watermark(conn: kw.RawConnection, topic: str) -> int:
    return kw.list_offsets(conn, topic, 0, kw.LATEST).offset


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_is_refused_and_the_partition_stays_readable(vbroker, attack):
    build, expected, record_index = ATTACKS[attack]
    topic = unique(f"validate-{attack}")
    kw.ensure_topic(vbroker.bootstrap, topic)
    with kw.RawConnection.to(vbroker.bootstrap) as conn:
        good = sf.build_record_batch(records(3, b"before-"))
        assert kw.produce(conn, topic, 0, good).error_code == kw.NONE
        assert high_watermark(conn, topic) == 3

        # the attack after a good batch in the same partition's records: nothing is stored
        result = kw.produce_v8(conn, topic, 0, good + build())
        assert result.error_code == expected, result
        assert result.error_message, result
        if record_index is None:
            assert result.record_errors == [], result
        else:
            assert [i for i, _ in result.record_errors] == [record_index], result
            assert f"record {record_index}" in (result.record_errors[0][1] or ""), result
        assert high_watermark(conn, topic) == 3

        after = sf.build_record_batch(records(2, b"after-"))
        assert kw.produce(conn, topic, 0, after).base_offset == 3
    expected_values = [b"before-0", b"before-1", b"before-2", b"after-0", b"after-1"]
    got = kafka_python_consume(vbroker.bootstrap, topic, {0: 5})
    assert [g.value for g in got] == expected_values
    source = SegmentSource.open(str(vbroker.data_dir / "default"))
    rows = [v for b in source.read(topic, 0, 0, 5) for v in b.column("value").to_pylist()]
    assert rows == expected_values


def test_topic_timestamp_bounds_override_the_broker_defaults(vbroker):
    """message.timestamp.before.max.ms set on one topic refuses an hour-old record there;
    a topic without it takes the broker default (no limit on old records)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    strict, lax = unique("validate-strict"), unique("validate-lax")
    admin = KafkaAdminClient(bootstrap_servers=vbroker.bootstrap)
    try:
        admin.create_topics(
            [
                NewTopic(strict, 1, 1, topic_configs={"message.timestamp.before.max.ms": "60000"}),
                NewTopic(lax, 1, 1),
            ]
        )
    finally:
        admin.close()
    hour_old = sf.build_record_batch(records(1), timestamps=[NOW_MS - 3_600_000])
    with kw.RawConnection.to(vbroker.bootstrap) as conn:
        kw.ensure_topic(vbroker.bootstrap, strict)
        kw.ensure_topic(vbroker.bootstrap, lax)
        refused = kw.produce_v8(conn, strict, 0, hour_old)
        assert refused.error_code == kw.INVALID_TIMESTAMP, refused
        assert refused.record_errors and refused.record_errors[0][0] == 0, refused
        assert kw.produce(conn, lax, 0, hour_old).error_code == kw.NONE
        fresh = sf.build_record_batch(records(1))
        assert kw.produce(conn, strict, 0, fresh).error_code == kw.NONE


def test_a_decompression_bomb_is_refused(vbroker):
    """A gzip batch whose records would expand past --max-uncompressed-batch-bytes (128 MiB by
    default): CORRUPT_MESSAGE after at most that much work, nothing stored."""
    topic = unique("validate-bomb")
    kw.ensure_topic(vbroker.bootstrap, topic)
    value_len = 200 << 20  # one record with a 200 MiB value of zeros
    body_start = b"\x00" + sf.encode_varint(0) + sf.encode_varint(0) + sf.encode_varint(-1)
    body_start += sf.encode_varint(value_len)
    body_len = len(body_start) + value_len + 1  # + header count 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    parts = [compressor.compress(sf.encode_varint(body_len) + body_start)]
    zeros = bytes(1 << 20)
    parts += [compressor.compress(zeros) for _ in range(value_len >> 20)]
    parts += [compressor.compress(sf.encode_varint(0)), compressor.flush()]
    one = sf.build_record_batch(records(1))
    bomb = patched(one, payload=b"".join(parts), attributes=sf.COMPRESSION_GZIP)
    assert len(bomb) < 1_000_000  # fits max.message.bytes: only the expansion is wrong
    with kw.RawConnection.to(vbroker.bootstrap) as conn:
        result = kw.produce_v8(conn, topic, 0, bomb)
        assert result.error_code == kw.CORRUPT_MESSAGE, result
        assert "limit" in (result.error_message or ""), result
        assert high_watermark(conn, topic) == 0


def test_a_max_timestamp_not_the_records_largest_is_stored_as_it(vbroker):
    """librdkafka sends batches whose max timestamp is not their records' largest: Kafka stores
    the largest (with a CRC to match), and so does KafScale. The records lie more than 2^31 ms
    from the batch's base timestamp (timestamp deltas are varlongs): ListOffsets finds them."""
    topic = unique("validate-max-timestamp")
    kw.ensure_topic(vbroker.bootstrap, topic)
    old, new = NOW_MS - 2**32, NOW_MS
    timestamps = [old, new, old + 1]
    sent = patched(sf.build_record_batch(records(3), timestamps=timestamps), max_timestamp=0)
    with kw.RawConnection.to(vbroker.bootstrap) as conn:
        assert kw.produce(conn, topic, 0, sent).error_code == kw.NONE
        [stored] = sf.iter_batches(kw.fetch(conn, topic, 0, 0).records)
        assert stored.max_timestamp == new
        assert stored.crc_ok
        assert [r.timestamp for r in stored.records()] == timestamps
        found = kw.list_offsets(conn, topic, 0, old + 2)
        assert (found.offset, found.timestamp) == (1, new)
