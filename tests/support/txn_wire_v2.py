"""The requests of Kafka's second transaction protocol (KIP-890 part 2, ``transaction.version``
2), and TxnOffsetCommit's flexible frame (v3, KIP-447's member, and v5), by hand, for tests
that need exact bytes.

Wire: ApiVersions v0-v4 with the feature lists of v3+ (KIP-584: tagged fields 0, 1 and 2 of the
answer), Produce v9-v12 (flexible; v12 is v11's frame), EndTxn v3-v5 (flexible; v5's answer
adds the producer id and epoch of the next transaction), AddPartitionsToTxn v4/v5 (the brokers'
batched form with ``verify_only``), TxnOffsetCommit v3-v5 (the same flexible frame). Encodings
follow the Kafka protocol guide and Kafka's message definitions; nothing here comes from
kafscale. support.txn_wire has the requests of the first protocol (v0 frames).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import kafka_wire as kw
from .txn_wire import ADD_PARTITIONS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT

TRANSACTION_VERSION = "transaction.version"

# ApiVersions v3+ answer: tags of its top-level tagged fields (KIP-584)
SUPPORTED_FEATURES_TAG = 0
FINALIZED_FEATURES_EPOCH_TAG = 1
FINALIZED_FEATURES_TAG = 2


# ---------------------------------------------------------------------------------------------
# ApiVersions with features


@dataclass(frozen=True)
class ApiVersionsWithFeatures:
    """An ApiVersions answer; the feature fields are those of v3+ (absent: empty, epoch -1)."""

    error_code: int
    apis: dict[int, tuple[int, int]]
    supported: dict[str, tuple[int, int]]  # name: (min version, max version)
    finalized: dict[str, tuple[int, int]]  # name: (min version level, max version level)
    finalized_epoch: int
    unknown_tags: list[int]


def _supported_features(data: bytes) -> dict[str, tuple[int, int]]:
    r = kw.Reader(data)
    out = {}
    for _ in range(r.compact_array_len()):
        name = r.compact_string()
        assert name is not None
        low, high = r.i16(), r.i16()
        r.skip_tagged_fields()
        out[name] = (low, high)
    assert r.remaining() == 0, f"{r.remaining()} bytes after SupportedFeatures"
    return out


def _finalized_features(data: bytes) -> dict[str, tuple[int, int]]:
    r = kw.Reader(data)
    out = {}
    for _ in range(r.compact_array_len()):
        name = r.compact_string()
        assert name is not None
        high, low = r.i16(), r.i16()  # MaxVersionLevel first, then MinVersionLevel
        r.skip_tagged_fields()
        out[name] = (low, high)
    assert r.remaining() == 0, f"{r.remaining()} bytes after FinalizedFeatures"
    return out


def api_versions(conn: kw.RawConnection, version: int) -> ApiVersionsWithFeatures:
    """ApiVersions v0-v4 (v3+: request header v2, response header v0, as KIP-511 has it),
    parsed to the last byte."""
    if version < 3:
        r = conn.request(kw.API_VERSIONS, version, b"")
        error = r.i16()
        apis = {}
        for _ in range(r.array_len()):
            key, low, high = r.i16(), r.i16(), r.i16()
            apis[key] = (low, high)
        if version >= 1:
            r.i32()  # throttle
        assert r.remaining() == 0, f"{r.remaining()} bytes after ApiVersions v{version}"
        return ApiVersionsWithFeatures(error, apis, {}, {}, -1, [])
    body = kw.api_versions_v3_body()
    r = conn.request(kw.API_VERSIONS, version, body, flexible=True, response_flexible_header=False)
    error = r.i16()
    apis = {}
    for _ in range(r.compact_array_len()):
        key, low, high = r.i16(), r.i16(), r.i16()
        r.skip_tagged_fields()
        apis[key] = (low, high)
    r.i32()  # throttle
    supported: dict[str, tuple[int, int]] = {}
    finalized: dict[str, tuple[int, int]] = {}
    epoch = -1
    unknown = []
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        data = r.data[r.pos : r.pos + size]
        r.pos += size
        if tag == SUPPORTED_FEATURES_TAG:
            supported = _supported_features(data)
        elif tag == FINALIZED_FEATURES_TAG:
            finalized = _finalized_features(data)
        elif tag == FINALIZED_FEATURES_EPOCH_TAG:
            assert size == 8, f"FinalizedFeaturesEpoch of {size} bytes"
            epoch = kw.Reader(data).i64()
        else:
            unknown.append(tag)
    assert r.remaining() == 0, f"{r.remaining()} bytes after ApiVersions v{version}"
    return ApiVersionsWithFeatures(error, apis, supported, finalized, epoch, unknown)


# ---------------------------------------------------------------------------------------------
# Produce v9-v12


@dataclass(frozen=True)
class Produced:
    """One partition of a flexible Produce answer."""

    error_code: int
    base_offset: int
    record_errors: list[tuple[int, str | None]]  # (index of the record in its batch, message)
    error_message: str | None


def produce(
    conn: kw.RawConnection,
    version: int,
    transactional_id: str | None,
    batches: dict[tuple[str, int], bytes],
) -> dict[tuple[str, int], Produced]:
    """Produce v9-v12 (flexible) of one batch per (topic, partition), acks all:
    {(topic, partition): Produced}."""
    assert 9 <= version <= 12, version
    by_topic: dict[str, list[tuple[int, bytes]]] = {}
    for (topic, partition), batch in batches.items():
        by_topic.setdefault(topic, []).append((partition, batch))
    w = kw.Writer().compact_string(transactional_id).i16(-1).i32(30_000)
    w.uvarint(len(by_topic) + 1)
    for topic, parts in by_topic.items():
        w.compact_string(topic).uvarint(len(parts) + 1)
        for partition, batch in parts:
            w.i32(partition).uvarint(len(batch) + 1).raw(batch).tagged_fields()
        w.tagged_fields()
    r = conn.request(kw.PRODUCE, version, w.tagged_fields().done(), flexible=True)
    out = {}
    for _ in range(r.compact_array_len()):
        name = r.compact_string()
        assert name is not None
        for _ in range(r.compact_array_len()):
            index, error, base = r.i32(), r.i16(), r.i64()
            r.i64()  # log append time
            r.i64()  # log start offset
            errors = []
            for _ in range(r.compact_array_len()):
                errors.append((r.i32(), r.compact_string()))
                r.skip_tagged_fields()
            message = r.compact_string()
            r.skip_tagged_fields()  # v10+: current leader (tag 0)
            out[(name, index)] = Produced(error, base, errors, message)
        r.skip_tagged_fields()
    r.i32()  # throttle
    r.skip_tagged_fields()  # v10+: node endpoints (tag 0)
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after Produce v{version}"
    assert set(out) == set(batches), out
    return out


# ---------------------------------------------------------------------------------------------
# EndTxn v3-v5


@dataclass(frozen=True)
class EndedTxn:
    """An EndTxn answer: v5 adds the producer id and epoch of the next transaction (-1 before
    v5)."""

    error_code: int
    producer_id: int
    producer_epoch: int


def end_txn(
    conn: kw.RawConnection,
    transactional_id: str,
    producer: tuple[int, int],
    commit: bool,
    version: int = 5,
) -> EndedTxn:
    """EndTxn v3-v5 (flexible; v5's request is v4's frame)."""
    assert 3 <= version <= 5, version
    producer_id, epoch = producer
    w = kw.Writer().compact_string(transactional_id).i64(producer_id).i16(epoch).boolean(commit)
    r = conn.request(END_TXN, version, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    error = r.i16()
    next_id, next_epoch = (r.i64(), r.i16()) if version >= 5 else (-1, -1)
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after EndTxn v{version}"
    return EndedTxn(error, next_id, next_epoch)


# ---------------------------------------------------------------------------------------------
# AddPartitionsToTxn v4/v5


@dataclass(frozen=True)
class TxnPartitions:
    """One transaction of an AddPartitionsToTxn v4+ request."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    verify_only: bool
    partitions: dict[str, list[int]]


@dataclass(frozen=True)
class AddedPartitions:
    """An AddPartitionsToTxn v4+ answer: the top-level error and {transactional id:
    {(topic, partition): error code}}."""

    error_code: int
    results: dict[str, dict[tuple[str, int], int]]


def add_partitions_to_txn(
    conn: kw.RawConnection, transactions: list[TxnPartitions], version: int = 4
) -> AddedPartitions:
    """AddPartitionsToTxn v4/v5 (flexible; the brokers' form: a batch of transactions, each
    with verify_only)."""
    assert version in (4, 5), version
    w = kw.Writer().uvarint(len(transactions) + 1)
    for txn in transactions:
        w.compact_string(txn.transactional_id).i64(txn.producer_id).i16(txn.producer_epoch)
        w.boolean(txn.verify_only).uvarint(len(txn.partitions) + 1)
        for topic, indexes in txn.partitions.items():
            w.compact_string(topic).uvarint(len(indexes) + 1)
            for index in indexes:
                w.i32(index)
            w.tagged_fields()
        w.tagged_fields()
    r = conn.request(ADD_PARTITIONS_TO_TXN, version, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    error = r.i16()
    results: dict[str, dict[tuple[str, int], int]] = {}
    for _ in range(r.compact_array_len()):
        transactional_id = r.compact_string()
        assert transactional_id is not None
        errors: dict[tuple[str, int], int] = {}
        for _ in range(r.compact_array_len()):
            name = r.compact_string()
            assert name is not None
            for _ in range(r.compact_array_len()):
                index, code = r.i32(), r.i16()
                r.skip_tagged_fields()
                errors[(name, index)] = code
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        results[transactional_id] = errors
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} bytes after AddPartitionsToTxn v{version}"
    return AddedPartitions(error, results)


# ---------------------------------------------------------------------------------------------
# TxnOffsetCommit v3-v5


def txn_offset_commit(
    conn: kw.RawConnection,
    version: int,
    transactional_id: str,
    group: str,
    producer: tuple[int, int],
    offsets: dict[tuple[str, int], int],
    *,
    generation_id: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
) -> dict[tuple[str, int], int]:
    """TxnOffsetCommit v3-v5 (one flexible frame; by default no member: the offsets of a
    producer, not of a group member): {(topic, partition): error code}."""
    assert 3 <= version <= 5, version
    producer_id, epoch = producer
    w = kw.Writer().compact_string(transactional_id).compact_string(group)
    w.i64(producer_id).i16(epoch).i32(generation_id).compact_string(member_id)
    w.compact_string(group_instance_id)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    w.uvarint(len(by_topic) + 1)
    for topic, parts in by_topic.items():
        w.compact_string(topic).uvarint(len(parts) + 1)
        for partition, offset in parts:
            w.i32(partition).i64(offset).i32(-1).compact_string(None).tagged_fields()
        w.tagged_fields()
    r = conn.request(TXN_OFFSET_COMMIT, version, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    out = {}
    for _ in range(r.compact_array_len()):
        name = r.compact_string()
        assert name is not None
        for _ in range(r.compact_array_len()):
            index, error = r.i32(), r.i16()
            r.skip_tagged_fields()
            out[(name, index)] = error
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} bytes after TxnOffsetCommit v{version}"
    return out
