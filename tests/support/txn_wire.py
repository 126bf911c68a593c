"""Kafka's transactional protocol by hand, for tests: the requests of the first transaction
protocol (v0 frames), those of offsets in transactions, and the transactions' admin requests.

Wire: FindCoordinator v1 (any key type), InitProducerId v0 with a transaction timeout,
AddPartitionsToTxn v0, EndTxn v0, Produce v3 / v8 with a transactional id, ListOffsets v4 and
Fetch v4 with an isolation level (Fetch's answer with its aborted-transaction list);
AddOffsetsToTxn v0, TxnOffsetCommit v2 and OffsetFetch v7 (with require_stable);
DescribeTransactions v0 and ListTransactions v0 / v1. Encodings follow the Kafka protocol
guide; nothing here comes from kafscale. support.txn_wire_v2 has the requests of the second
protocol; support.transactions the clients' transactional producers and consumers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from . import kafka_wire as kw

# error codes of transactions (kafscale.errors names only what its Python side answers)
NOT_ENOUGH_REPLICAS = 19
CONCURRENT_TRANSACTIONS = 51
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90

FIND_COORDINATOR = 10
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
GROUP_KEY, TRANSACTION_KEY = 0, 1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

CONTROL_FLAG = 0x20  # record batch attributes bit 5: a transaction marker


# ---------------------------------------------------------------------------------------------
# transactions of records: coordinator, producer id, partitions, end, produce, read


@dataclass(frozen=True)
class Coordinator:
    error_code: int
    message: str | None
    node_id: int
    host: str | None
    port: int


def find_coordinator(conn: kw.RawConnection, key: str, key_type: int) -> Coordinator:
    """FindCoordinator v1 (key type 0: a group, 1: a transactional id)."""
    r = conn.request(FIND_COORDINATOR, 1, kw.Writer().string(key).i8(key_type).done())
    r.i32()  # throttle
    found = Coordinator(r.i16(), r.string(), r.i32(), r.string(), r.i32())
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after FindCoordinator v1"
    return found


@dataclass(frozen=True)
class InitProducerId:
    error_code: int
    producer_id: int
    epoch: int


def init_producer_id(
    conn: kw.RawConnection, transactional_id: str | None, timeout_ms: int = 60_000
) -> InitProducerId:
    """InitProducerId v0."""
    body = kw.Writer().string(transactional_id).i32(timeout_ms).done()
    error, producer_id, epoch = kw.parse_init_producer_id_v0(
        conn.request(kw.INIT_PRODUCER_ID, 0, body)
    )
    return InitProducerId(error, producer_id, epoch)


def add_partitions_to_txn(
    conn: kw.RawConnection,
    transactional_id: str,
    producer: tuple[int, int],
    partitions: dict[str, list[int]],
) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0: {(topic, partition): error code}."""
    producer_id, epoch = producer
    w = kw.Writer().string(transactional_id).i64(producer_id).i16(epoch)
    w.array_len(len(partitions))
    for topic, indexes in partitions.items():
        w.string(topic).array_len(len(indexes))
        for index in indexes:
            w.i32(index)
    answer = conn.request(ADD_PARTITIONS_TO_TXN, 0, w.done())
    return partition_errors(answer, "AddPartitionsToTxn v0")


def end_txn(
    conn: kw.RawConnection, transactional_id: str, producer: tuple[int, int], commit: bool
) -> int:
    """EndTxn v0: its error code."""
    producer_id, epoch = producer
    body = kw.Writer().string(transactional_id).i64(producer_id).i16(epoch).boolean(commit)
    return error_only(conn.request(END_TXN, 0, body.done()), "EndTxn v0")


def partition_errors(r: kw.Reader, what: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): error code} of an answer that is a throttle time and, per topic,
    each partition's error code (v0 framing)."""
    r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        assert name is not None
        for _ in range(r.array_len()):
            index, error = r.i32(), r.i16()
            out[(name, index)] = error
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after {what}"
    return out


def error_only(r: kw.Reader, what: str) -> int:
    """The error code of an answer that is a throttle time and an error code (v0 framing)."""
    r.i32()  # throttle
    error = r.i16()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after {what}"
    return error


def produce(
    conn: kw.RawConnection,
    transactional_id: str | None,
    topic: str,
    partition: int,
    batch: bytes,
    version: int = 8,
) -> kw.ProduceV8Result:
    """Produce v3 or v8 of one batch, with ``transactional_id`` in the request (v3's answer
    has no record errors and no error message: empty and None)."""
    body = (
        kw.Writer()
        .string(transactional_id)
        .i16(-1)  # acks: all
        .i32(30_000)
        .array_len(1)
        .string(topic)
        .array_len(1)
        .i32(partition)
        .bytes_(batch)
        .done()
    )
    r = conn.request(kw.PRODUCE, version, body)
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            index, error, base = r.i32(), r.i16(), r.i64()
            r.i64()  # log append time
            if version < 5:
                out[(name, index)] = kw.ProduceV8Result(error, base, [], None)
                continue
            r.i64()  # log start offset
            errors = [(r.i32(), r.string()) for _ in range(r.array_len())]
            out[(name, index)] = kw.ProduceV8Result(error, base, errors, r.string())
    r.i32()  # throttle
    assert set(out) == {(topic, partition)}, out
    return out[(topic, partition)]


def list_offset(
    conn: kw.RawConnection, topic: str, partition: int, isolation: int, timestamp: int = kw.LATEST
) -> kw.ListOffsetsResult:
    """ListOffsets v4 with an isolation level: latest under READ_COMMITTED is the last stable
    offset."""
    w = kw.Writer().i32(-1).i8(isolation)  # replica id, isolation level
    w.array_len(1).string(topic).array_len(1).i32(partition)
    w.i32(-1).i64(timestamp)  # current leader epoch: unknown; the timestamp
    r = conn.request(kw.LIST_OFFSETS, 4, w.done())
    r.i32()  # throttle
    results = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            index, error, ts, offset = r.i32(), r.i16(), r.i64(), r.i64()
            r.i32()  # leader epoch
            results[(name, index)] = kw.ListOffsetsResult(error, ts, offset)
    assert set(results) == {(topic, partition)}, results
    return results[(topic, partition)]


@dataclass(frozen=True)
class Fetched:
    """One partition of a Fetch v4 answer."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None  # (producer id, first offset); None: a null list
    records: bytes = field(repr=False)


def fetch(
    conn: kw.RawConnection, topic: str, partition: int, offset: int, isolation: int
) -> Fetched:
    """Fetch v4 of one partition from ``offset`` with an isolation level (answered at once)."""
    w = kw.Writer().i32(-1).i32(0).i32(1).i32(50 * 1024 * 1024)  # replica, wait, min, max bytes
    w.i8(isolation).array_len(1).string(topic).array_len(1)
    w.i32(partition).i64(offset).i32(10 * 1024 * 1024)
    r = conn.request(kw.FETCH, 4, w.done())
    r.i32()  # throttle
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            index, error, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
            n = r.array_len()
            aborted = None if n < 0 else [(r.i64(), r.i64()) for _ in range(n)]
            out[(name, index)] = Fetched(error, hw, lso, aborted, r.bytes_() or b"")
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after Fetch v4"
    assert set(out) == {(topic, partition)}, out
    return out[(topic, partition)]


# ---------------------------------------------------------------------------------------------
# offsets in transactions, DescribeTransactions, ListTransactions

OFFSET_FETCH = 9
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
TRANSACTIONAL_ID_NOT_FOUND = 105
UNSTABLE_OFFSET_COMMIT = 88


def add_offsets_to_txn(
    conn: kw.RawConnection, transactional_id: str, producer: tuple[int, int], group: str
) -> int:
    """AddOffsetsToTxn v0: its error code."""
    producer_id, epoch = producer
    body = kw.Writer().string(transactional_id).i64(producer_id).i16(epoch).string(group)
    return error_only(conn.request(ADD_OFFSETS_TO_TXN, 0, body.done()), "AddOffsetsToTxn v0")


def txn_offset_commit(
    conn: kw.RawConnection,
    transactional_id: str,
    group: str,
    producer: tuple[int, int],
    offsets: dict[tuple[str, int], int],
) -> dict[tuple[str, int], int]:
    """TxnOffsetCommit v2 (no member: the offsets of a producer, not of a group member):
    {(topic, partition): error code}."""
    producer_id, epoch = producer
    w = kw.Writer().string(transactional_id).string(group).i64(producer_id).i16(epoch)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    w.array_len(len(by_topic))
    for topic, parts in by_topic.items():
        w.string(topic).array_len(len(parts))
        for partition, offset in parts:
            w.i32(partition).i64(offset).i32(-1).string(None)  # leader epoch, metadata
    return partition_errors(conn.request(TXN_OFFSET_COMMIT, 2, w.done()), "TxnOffsetCommit v2")


@dataclass(frozen=True)
class StableOffset:
    """One partition of an OffsetFetch v7 answer (offset -1: none committed)."""

    offset: int
    error_code: int


def offset_fetch_v7(
    conn: kw.RawConnection, group: str, topic: str, partitions: Iterable[int], require_stable: bool
) -> tuple[int, dict[int, StableOffset]]:
    """OffsetFetch v7 (flexible, with require_stable): (top-level error code,
    {partition: StableOffset})."""
    parts = list(partitions)
    w = kw.Writer().compact_string(group).uvarint(2).compact_string(topic).uvarint(len(parts) + 1)
    for p in parts:
        w.i32(p)
    w.tagged_fields().boolean(require_stable).tagged_fields()
    r = conn.request(OFFSET_FETCH, 7, w.done(), flexible=True)
    r.i32()  # throttle
    out = {}
    for _ in range(r.compact_array_len()):
        name = r.compact_string()
        for _ in range(r.compact_array_len()):
            index, offset = r.i32(), r.i64()
            r.i32()  # leader epoch
            r.compact_string()  # metadata
            error = r.i16()
            r.skip_tagged_fields()
            assert name == topic, name
            out[index] = StableOffset(offset, error)
        r.skip_tagged_fields()
    top = r.i16()
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after OffsetFetch v7"
    return top, out


@dataclass(frozen=True)
class DescribedTxn:
    """One transaction of a DescribeTransactions v0 answer."""

    error_code: int
    transactional_id: str | None
    state: str | None
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: dict[str, list[int]]


def describe_transactions(
    conn: kw.RawConnection, transactional_ids: list[str]
) -> dict[str | None, DescribedTxn]:
    """DescribeTransactions v0 (flexible): {transactional id: DescribedTxn}."""
    w = kw.Writer().uvarint(len(transactional_ids) + 1)
    for wanted in transactional_ids:
        w.compact_string(wanted)
    r = conn.request(DESCRIBE_TRANSACTIONS, 0, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    out: dict[str | None, DescribedTxn] = {}
    for _ in range(r.compact_array_len()):
        error, tid, state = r.i16(), r.compact_string(), r.compact_string()
        timeout, start, producer_id, epoch = r.i32(), r.i64(), r.i64(), r.i16()
        partitions: dict[str, list[int]] = {}
        for _ in range(r.compact_array_len()):
            name = r.compact_string()
            assert name is not None
            partitions[name] = [r.i32() for _ in range(r.compact_array_len())]
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        out[tid] = DescribedTxn(error, tid, state, timeout, start, producer_id, epoch, partitions)
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after DescribeTransactions v0"
    return out


@dataclass(frozen=True)
class ListedTxns:
    """A ListTransactions answer: {transactional id: (producer id, state)}."""

    error_code: int
    unknown_state_filters: list[str | None]
    transactions: dict[str | None, tuple[int, str | None]]


def list_transactions(
    conn: kw.RawConnection,
    states: list[str],
    producer_ids: list[int] | None = None,
    duration_ms: int | None = None,
) -> ListedTxns:
    """ListTransactions v0, or v1 when ``duration_ms`` is given (flexible)."""
    w = kw.Writer().uvarint(len(states) + 1)
    for name in states:
        w.compact_string(name)
    w.uvarint(len(producer_ids or []) + 1)
    for pid in producer_ids or []:
        w.i64(pid)
    version = 0
    if duration_ms is not None:
        version = 1
        w.i64(duration_ms)
    r = conn.request(LIST_TRANSACTIONS, version, w.tagged_fields().done(), flexible=True)
    r.i32()  # throttle
    error = r.i16()
    unknown = [r.compact_string() for _ in range(r.compact_array_len())]
    listed: dict[str | None, tuple[int, str | None]] = {}
    for _ in range(r.compact_array_len()):
        tid, producer_id, state = r.compact_string(), r.i64(), r.compact_string()
        r.skip_tagged_fields()
        listed[tid] = (producer_id, state)
    r.skip_tagged_fields()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after ListTransactions"
    return ListedTxns(error, unknown, listed)
