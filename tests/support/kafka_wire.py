"""A small hand-written Kafka wire-protocol client for tests that need exact bytes.

Only what the tests use: request header v1/v2, ApiVersions v0/v3, Metadata v0-v8, Produce v3,
Fetch v4 and v11 (current leader epoch), ListOffsets v0/v1/v4, InitProducerId v0. Encodings
follow the Kafka protocol guide (kafka-design-and-protocol.txt); nothing here comes from kafscale.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from dataclasses import dataclass, field

from kafscale.api_keys import ApiKey
from kafscale.errors import ErrorCode

from .segment_format import encode_uvarint

# error codes
NONE = ErrorCode.NONE
OFFSET_OUT_OF_RANGE = ErrorCode.OFFSET_OUT_OF_RANGE
CORRUPT_MESSAGE = ErrorCode.CORRUPT_MESSAGE
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE
NOT_LEADER_OR_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER
REQUEST_TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT
MESSAGE_TOO_LARGE = ErrorCode.MESSAGE_TOO_LARGE
INVALID_TOPIC_EXCEPTION = ErrorCode.INVALID_TOPIC_EXCEPTION
INVALID_TIMESTAMP = ErrorCode.INVALID_TIMESTAMP
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
TOPIC_ALREADY_EXISTS = ErrorCode.TOPIC_ALREADY_EXISTS
KAFKA_STORAGE_ERROR = ErrorCode.KAFKA_STORAGE_ERROR
FENCED_LEADER_EPOCH = ErrorCode.FENCED_LEADER_EPOCH
UNKNOWN_LEADER_EPOCH = ErrorCode.UNKNOWN_LEADER_EPOCH
INVALID_RECORD = ErrorCode.INVALID_RECORD
# idempotent producers and transactions
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

# api keys
PRODUCE = ApiKey.PRODUCE
FETCH = ApiKey.FETCH
LIST_OFFSETS = ApiKey.LIST_OFFSETS
METADATA = ApiKey.METADATA
API_VERSIONS = ApiKey.API_VERSIONS
CREATE_TOPICS = ApiKey.CREATE_TOPICS
DELETE_TOPICS = ApiKey.DELETE_TOPICS
INIT_PRODUCER_ID = ApiKey.INIT_PRODUCER_ID
END_TXN = 26


class Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> Writer:
        self.buf += struct.pack(">b", v)
        return self

    def i16(self, v: int) -> Writer:
        self.buf += struct.pack(">h", v)
        return self

    def i32(self, v: int) -> Writer:
        self.buf += struct.pack(">i", v)
        return self

    def i64(self, v: int) -> Writer:
        self.buf += struct.pack(">q", v)
        return self

    def boolean(self, v: bool) -> Writer:
        return self.i8(1 if v else 0)

    def string(self, v: str | None) -> Writer:
        if v is None:
            return self.i16(-1)
        data = v.encode()
        self.i16(len(data))
        self.buf += data
        return self

    def bytes_(self, v: bytes | None) -> Writer:
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.buf += v
        return self

    def array_len(self, n: int | None) -> Writer:
        return self.i32(-1 if n is None else n)

    def uvarint(self, v: int) -> Writer:
        self.buf += encode_uvarint(v)
        return self

    def compact_string(self, v: str | None) -> Writer:
        if v is None:
            return self.uvarint(0)
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.buf += data
        return self

    def tagged_fields(self) -> Writer:
        return self.uvarint(0)

    def raw(self, data: bytes) -> Writer:
        self.buf += data
        return self

    def done(self) -> bytes:
        return bytes(self.buf)


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i8(self) -> int:
        return self._take(">b")

    def i16(self) -> int:
        return self._take(">h")

    def i32(self) -> int:
        return self._take(">i")

    def i64(self) -> int:
        return self._take(">q")

    def boolean(self) -> bool:
        return self.i8() != 0

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        v = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return v

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(v)

    def array_len(self) -> int:
        return self.i32()

    def uvarint(self) -> int:
        shift = 0
        result = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def compact_array_len(self) -> int:
        return self.uvarint() - 1

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        v = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return v

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            size = self.uvarint()
            self.pos += size

    def remaining(self) -> int:
        return len(self.data) - self.pos


def request_header(
    api_key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    w = Writer().i16(api_key).i16(version).i32(correlation_id).string(client_id)
    if flexible:
        w.tagged_fields()
    return w.done()


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class ConnectionClosed(Exception):
    pass


class RawConnection:
    """One TCP connection speaking the Kafka framing by hand."""

    def __init__(
        self, host: str, port: int, timeout: float = 30.0, source_ip: str | None = None
    ) -> None:
        source = (source_ip, 0) if source_ip else None
        self.sock = socket.create_connection((host, port), timeout=timeout, source_address=source)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_correlation_id = 1

    @classmethod
    def to(
        cls, bootstrap: str, timeout: float = 30.0, source_ip: str | None = None
    ) -> RawConnection:
        """``source_ip``: connect from this local address (e.g. 127.0.0.2 on Linux)."""
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), timeout, source_ip)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(
        self,
        api_key: int,
        version: int,
        body: bytes,
        *,
        flexible_header: bool = False,
        client_id: str | None = "kafscale-tests",
    ) -> int:
        cid = self.next_correlation_id
        self.next_correlation_id += 1
        header = request_header(api_key, version, cid, client_id, flexible_header)
        self.send_raw(frame(header + body))
        return cid

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionClosed(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def recv_response(self, flexible_header: bool = False) -> tuple[int, Reader]:
        data = self.recv_frame()
        r = Reader(data)
        cid = r.i32()
        if flexible_header:
            r.skip_tagged_fields()
        return cid, r

    def request(
        self,
        api_key: int,
        version: int,
        body: bytes,
        *,
        flexible: bool = False,
        response_flexible_header: bool | None = None,
        client_id: str | None = "kafscale-tests",
    ) -> Reader:
        cid = self.send(api_key, version, body, flexible_header=flexible, client_id=client_id)
        if response_flexible_header is None:
            response_flexible_header = flexible
        got, reader = self.recv_response(response_flexible_header)
        if got != cid:
            raise AssertionError(f"correlation id {got}, expected {cid}")
        return reader

    def wait_closed(self, timeout: float = 15.0) -> bool:
        """True once the peer closed the connection (EOF or reset); False if still open.

        Any bytes the broker sends before closing are read and dropped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
        return False


class _Captured(Exception):
    """Raised by :class:`_Capture` once a helper has handed over its request."""


class _Capture:
    """Stands in for a connection: keeps the request a helper sends, then stops the helper."""

    def __init__(self) -> None:
        self.sent: tuple = ()

    def request(self, api_key, version, body, **options) -> Reader:
        self.sent = (api_key, version, body, options)
        raise _Captured


class _Replay:
    """Stands in for a connection: hands a helper the response that was read for it."""

    def __init__(self, response: Reader) -> None:
        self.response = response

    def request(self, api_key, version, body, **options) -> Reader:
        return self.response


class Pipeline:
    """Requests sent back to back on one connection, with no response read in between, as a
    client pipelines them; then every response read in order and parsed. Each request is a call
    of a one-request helper of kafka_wire, group_wire or admin_wire (any function that sends one
    request with ``conn.request`` and parses its answer): ``add`` runs the helper against a
    stand-in that keeps the request, ``read`` runs it again on the response read for it.

        p = Pipeline(conn)
        first = p.add(gw.offset_commit, group, {(topic, 0): gw.CommitOffset(1)})
        second = p.add(gw.offset_fetch, group, {topic: [0]})
        answers = p.send_and_read()  # answers[first], answers[second]
    """

    def __init__(self, conn: RawConnection) -> None:
        self.conn = conn
        self.calls: list[tuple] = []

    def add(self, helper, *args, **kwargs) -> int:
        """Queues ``helper(conn, *args, **kwargs)``; returns its index among the results."""
        capture = _Capture()
        with contextlib.suppress(_Captured):
            helper(capture, *args, **kwargs)
        assert capture.sent, f"{helper.__name__} sent no request"
        self.calls.append((helper, args, kwargs, capture.sent))
        return len(self.calls) - 1

    def send(self) -> list[int]:
        """Sends every queued request in one write; returns their correlation ids."""
        frames = bytearray()
        ids = []
        for _, _, _, (api_key, version, body, options) in self.calls:
            cid = self.conn.next_correlation_id
            self.conn.next_correlation_id += 1
            flexible = options.get("flexible", False)
            client_id = options.get("client_id", "kafscale-tests")
            frames += frame(request_header(api_key, version, cid, client_id, flexible) + body)
            ids.append(cid)
        self.conn.send_raw(bytes(frames))
        return ids

    def read(self, ids: list[int]) -> list:
        """Reads the responses to the requests sent as ``ids``, in order, and parses each with
        its helper."""
        out = []
        for cid, (helper, args, kwargs, (_, _, _, options)) in zip(ids, self.calls, strict=True):
            flexible_header = options.get("response_flexible_header")
            if flexible_header is None:
                flexible_header = options.get("flexible", False)
            got, reader = self.conn.recv_response(flexible_header)
            assert got == cid, f"correlation id {got}, expected {cid}"
            out.append(helper(_Replay(reader), *args, **kwargs))
        return out

    def send_and_read(self) -> list:
        """Sends every queued request back to back, then reads and parses their responses."""
        return self.read(self.send())


# ---------------------------------------------------------------------------------------------
# ApiVersions


@dataclass
class ApiVersionsResponse:
    error_code: int
    apis: dict[int, tuple[int, int]]
    throttle_time_ms: int | None = None


def api_versions_v0_body() -> bytes:
    return b""


def api_versions_v3_body(name: str = "kafscale-tests", version: str = "1.0") -> bytes:
    return Writer().compact_string(name).compact_string(version).tagged_fields().done()


def parse_api_versions_v0(r: Reader) -> ApiVersionsResponse:
    error = r.i16()
    apis = {}
    for _ in range(r.array_len()):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        apis[key] = (lo, hi)
    return ApiVersionsResponse(error, apis)


def parse_api_versions_v3(r: Reader) -> ApiVersionsResponse:
    error = r.i16()
    apis = {}
    for _ in range(r.compact_array_len()):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        r.skip_tagged_fields()
        apis[key] = (lo, hi)
    throttle = r.i32()
    r.skip_tagged_fields()
    return ApiVersionsResponse(error, apis, throttle)


def api_versions(conn: RawConnection) -> ApiVersionsResponse:
    return parse_api_versions_v0(conn.request(API_VERSIONS, 0, api_versions_v0_body()))


# ---------------------------------------------------------------------------------------------
# Metadata


@dataclass
class PartitionMeta:
    error_code: int
    partition: int
    leader: int
    leader_epoch: int = -1  # Metadata v7+


@dataclass
class TopicMeta:
    error_code: int
    name: str
    partitions: list[PartitionMeta]


@dataclass
class MetadataResponse:
    brokers: list[tuple[int, str, int]]
    controller_id: int
    topics: dict[str, TopicMeta]
    cluster_id: str | None = None


def metadata_body(
    version: int, topics: list[str] | None, allow_auto_topic_creation: bool = True
) -> bytes:
    w = Writer()
    if topics is None:
        if version == 0:
            raise ValueError("Metadata v0 has no null topic list")
        w.array_len(None)
    else:
        w.array_len(len(topics))
        for t in topics:
            w.string(t)
    if version >= 4:
        w.boolean(allow_auto_topic_creation)
    if version >= 8:
        w.boolean(False)  # include cluster authorized operations
        w.boolean(False)  # include topic authorized operations
    return w.done()


def parse_metadata(version: int, r: Reader) -> MetadataResponse:
    if version > 8:
        raise ValueError("Metadata v9+ is flexible; this parser reads v0-v8")
    if version >= 3:
        r.i32()  # throttle
    brokers = []
    for _ in range(r.array_len()):
        node, host, port = r.i32(), r.string(), r.i32()
        if version >= 1:
            r.string()  # rack
        brokers.append((node, host, port))
    cluster_id = r.string() if version >= 2 else None
    controller = r.i32() if version >= 1 else -1
    topics = {}
    for _ in range(r.array_len()):
        err, name = r.i16(), r.string()
        if version >= 1:
            r.boolean()  # is_internal
        parts = []
        for _ in range(r.array_len()):
            perr, pidx, leader = r.i16(), r.i32(), r.i32()
            epoch = r.i32() if version >= 7 else -1
            for _ in range(r.array_len()):
                r.i32()  # replicas
            for _ in range(r.array_len()):
                r.i32()  # isr
            if version >= 5:
                for _ in range(r.array_len()):
                    r.i32()  # offline replicas
            parts.append(PartitionMeta(perr, pidx, leader, epoch))
        if version >= 8:
            r.i32()  # topic authorized operations
        topics[name] = TopicMeta(err, name, sorted(parts, key=lambda p: p.partition))
    if version >= 8:
        r.i32()  # cluster authorized operations
    if r.remaining():
        raise AssertionError(f"{r.remaining()} unexpected bytes after Metadata v{version}")
    return MetadataResponse(brokers, controller, topics, cluster_id)


def metadata(
    conn: RawConnection,
    topics: list[str] | None,
    version: int = 4,
    allow_auto_topic_creation: bool = True,
) -> MetadataResponse:
    body = metadata_body(version, topics, allow_auto_topic_creation)
    return parse_metadata(version, conn.request(METADATA, version, body))


def ensure_topic(bootstrap: str, topic: str, partitions: int | None = None, timeout=30.0) -> int:
    """Auto-create ``topic`` through Metadata and wait until every partition has a leader.

    Returns the partition count."""
    deadline = time.monotonic() + timeout
    last = None
    with RawConnection.to(bootstrap) as conn:
        while time.monotonic() < deadline:
            md = metadata(conn, [topic], version=4, allow_auto_topic_creation=True)
            last = md.topics.get(topic)
            if (
                last is not None
                and last.error_code == NONE
                and last.partitions
                and all(p.error_code == NONE and p.leader >= 0 for p in last.partitions)
                and (partitions is None or len(last.partitions) == partitions)
            ):
                return len(last.partitions)
            time.sleep(0.1)
    raise AssertionError(f"topic {topic} never became ready: {last}")


# ---------------------------------------------------------------------------------------------
# Produce v3


@dataclass
class ProducePartitionResult:
    error_code: int
    base_offset: int
    log_append_time: int


def produce_body(
    topic: str, partition: int, batch: bytes | None, acks: int = -1, timeout_ms: int = 30000
) -> bytes:
    return (
        Writer()
        .string(None)  # transactional id
        .i16(acks)
        .i32(timeout_ms)
        .array_len(1)
        .string(topic)
        .array_len(1)
        .i32(partition)
        .bytes_(batch)
        .done()
    )


def parse_produce_v3(r: Reader) -> dict[tuple[str, int], ProducePartitionResult]:
    out = {}
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            part, err, base, append_ts = r.i32(), r.i16(), r.i64(), r.i64()
            out[(topic, part)] = ProducePartitionResult(err, base, append_ts)
    r.i32()  # throttle
    return out


def produce(
    conn: RawConnection, topic: str, partition: int, batch: bytes, acks: int = -1
) -> ProducePartitionResult:
    r = conn.request(PRODUCE, 3, produce_body(topic, partition, batch, acks))
    results = parse_produce_v3(r)
    assert set(results) == {(topic, partition)}, results
    return results[(topic, partition)]


@dataclass
class ProduceV8Result:
    error_code: int
    base_offset: int
    record_errors: list[tuple[int, str | None]]  # (index of the record in its batch, message)
    error_message: str | None


def produce_v8(conn: RawConnection, topic: str, partition: int, batch: bytes) -> ProduceV8Result:
    """Produce v8 (the v3 request; the answer adds record_errors and error_message)."""
    r = conn.request(PRODUCE, 8, produce_body(topic, partition, batch))
    out = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            part, err, base = r.i32(), r.i16(), r.i64()
            r.i64()  # log append time
            r.i64()  # log start offset
            errors = [(r.i32(), r.string()) for _ in range(r.array_len())]
            out[(name, part)] = ProduceV8Result(err, base, errors, r.string())
    r.i32()  # throttle
    assert set(out) == {(topic, partition)}, out
    return out[(topic, partition)]


# ---------------------------------------------------------------------------------------------
# Fetch v4


@dataclass
class FetchPartitionResult:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    records: bytes | None = field(repr=False)
    log_start_offset: int = -1  # Fetch v5+


def fetch_body(
    topic: str,
    partition: int,
    offset: int,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 10 * 1024 * 1024,
) -> bytes:
    return fetch_v4_body(
        [(topic, [(partition, offset, partition_max_bytes)])], max_wait_ms, min_bytes, max_bytes
    )


def fetch_v4_body(
    topics: list[tuple[str, list[tuple[int, int, int]]]],
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
) -> bytes:
    """Fetch v4 naming ``topics``: [(topic, [(partition, offset, partition_max_bytes)])],
    duplicates and all."""
    w = (
        Writer()
        .i32(-1)  # replica id
        .i32(max_wait_ms)
        .i32(min_bytes)
        .i32(max_bytes)
        .i8(0)  # isolation level: read uncommitted
        .array_len(len(topics))
    )
    for topic, partitions in topics:
        w.string(topic).array_len(len(partitions))
        for partition, offset, partition_max_bytes in partitions:
            w.i32(partition).i64(offset).i32(partition_max_bytes)
    return w.done()


def parse_fetch_v4_entries(r: Reader) -> list[tuple[str, int, FetchPartitionResult]]:
    """Every partition entry of a Fetch v4 answer, in order (a dict would hide repeats)."""
    r.i32()  # throttle
    out = []
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            part, err, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
            n_aborted = r.array_len()
            for _ in range(max(0, n_aborted)):
                r.i64()
                r.i64()
            out.append((topic, part, FetchPartitionResult(err, hw, lso, r.bytes_())))
    return out


def parse_fetch_v4(r: Reader) -> dict[tuple[str, int], FetchPartitionResult]:
    return {(topic, part): result for topic, part, result in parse_fetch_v4_entries(r)}


def fetch(
    conn: RawConnection, topic: str, partition: int, offset: int, **kwargs
) -> FetchPartitionResult:
    r = conn.request(FETCH, 4, fetch_body(topic, partition, offset, **kwargs))
    results = parse_fetch_v4(r)
    assert set(results) == {(topic, partition)}, results
    return results[(topic, partition)]


# ---------------------------------------------------------------------------------------------
# Fetch v11: session fields, current leader epoch (v9+), log start offset (v5+), rack id (v11)

NO_EPOCH = -1  # current_leader_epoch -1: the broker does not check the epoch


def fetch_v11_body(
    topic: str,
    partition: int,
    offset: int,
    current_leader_epoch: int = NO_EPOCH,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 10 * 1024 * 1024,
) -> bytes:
    return (
        Writer()
        .i32(-1)  # replica id
        .i32(max_wait_ms)
        .i32(min_bytes)
        .i32(max_bytes)
        .i8(0)  # isolation level: read uncommitted
        .i32(0)  # session id: no fetch session
        .i32(-1)  # session epoch: full fetch, no session
        .array_len(1)
        .string(topic)
        .array_len(1)
        .i32(partition)
        .i32(current_leader_epoch)
        .i64(offset)
        .i64(-1)  # log start offset (followers only)
        .i32(partition_max_bytes)
        .array_len(0)  # forgotten topics
        .string("")  # rack id
        .done()
    )


def parse_fetch_v11(r: Reader) -> tuple[int, dict[tuple[str, int], FetchPartitionResult]]:
    """Returns (top-level error code, {(topic, partition): result})."""
    r.i32()  # throttle
    error = r.i16()
    r.i32()  # session id
    out = {}
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            part, err, hw, lso, log_start = r.i32(), r.i16(), r.i64(), r.i64(), r.i64()
            for _ in range(max(0, r.array_len())):  # aborted transactions
                r.i64()
                r.i64()
            r.i32()  # preferred read replica
            out[(topic, part)] = FetchPartitionResult(err, hw, lso, r.bytes_(), log_start)
    if r.remaining():
        raise AssertionError(f"{r.remaining()} unexpected bytes after Fetch v11")
    return error, out


def fetch_v11(
    conn: RawConnection,
    topic: str,
    partition: int,
    offset: int,
    current_leader_epoch: int = NO_EPOCH,
    **kwargs,
) -> FetchPartitionResult:
    body = fetch_v11_body(topic, partition, offset, current_leader_epoch, **kwargs)
    error, results = parse_fetch_v11(conn.request(FETCH, 11, body))
    assert error == NONE, f"Fetch v11 top-level error {error}"
    assert set(results) == {(topic, partition)}, results
    return results[(topic, partition)]


# ---------------------------------------------------------------------------------------------
# ListOffsets


EARLIEST = -2
LATEST = -1


@dataclass
class ListOffsetsResult:
    error_code: int
    timestamp: int
    offset: int


def list_offsets(
    conn: RawConnection, topic: str, partition: int, timestamp: int, version: int = 4
) -> ListOffsetsResult:
    w = Writer().i32(-1)  # replica id
    if version >= 2:
        w.i8(0)  # isolation level
    w.array_len(1).string(topic).array_len(1).i32(partition)
    if version >= 4:
        w.i32(-1)  # current leader epoch: unknown
    w.i64(timestamp)
    if version == 0:
        w.i32(1)  # max number of offsets
    r = conn.request(LIST_OFFSETS, version, w.done())
    if version >= 2:
        r.i32()  # throttle
    results = {}
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            part, err = r.i32(), r.i16()
            if version == 0:
                offsets = [r.i64() for _ in range(r.array_len())]
                results[(name, part)] = ListOffsetsResult(err, -1, offsets[0] if offsets else -1)
            else:
                ts, off = r.i64(), r.i64()
                if version >= 4:
                    r.i32()  # leader epoch
                results[(name, part)] = ListOffsetsResult(err, ts, off)
    assert set(results) == {(topic, partition)}, results
    return results[(topic, partition)]


# ---------------------------------------------------------------------------------------------
# InitProducerId v0 (idempotent producers), EndTxn v0 (support.transactions has the rest)


def init_producer_id_v0_body(transactional_id: str | None = None) -> bytes:
    return Writer().string(transactional_id).i32(60000).done()


def parse_init_producer_id_v0(r: Reader) -> tuple[int, int, int]:
    """(error, producer id, epoch)"""
    r.i32()  # throttle
    error = r.i16()
    producer_id = r.i64()
    epoch = r.i16()
    return error, producer_id, epoch


def end_txn_v0_body() -> bytes:
    return Writer().string("tx").i64(0).i16(0).i8(1).done()


# ---------------------------------------------------------------------------------------------
# DescribeProducers v0 (flexible)

DESCRIBE_PRODUCERS = 61


@dataclass
class ActiveProducer:
    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int


def describe_producers(
    conn: RawConnection, topic: str, partition: int
) -> tuple[int, list[ActiveProducer]]:
    """(error code, active producers) of one partition."""
    body = (
        Writer()
        .uvarint(2)  # one topic
        .compact_string(topic)
        .uvarint(2)  # one partition index
        .i32(partition)
        .tagged_fields()
        .tagged_fields()
        .done()
    )
    conn.send(DESCRIBE_PRODUCERS, 0, body, flexible_header=True)
    _, r = conn.recv_response(flexible_header=True)
    r.i32()  # throttle
    assert r.compact_array_len() == 1
    assert r.compact_string() == topic
    assert r.compact_array_len() == 1
    assert r.i32() == partition
    error = r.i16()
    r.compact_string()  # error message
    producers = []
    for _ in range(r.compact_array_len()):
        pid, epoch, last_seq, last_ts = r.i64(), r.i32(), r.i32(), r.i64()
        r.i32()  # coordinator epoch
        r.i64()  # current transaction's start offset
        r.skip_tagged_fields()
        producers.append(ActiveProducer(pid, epoch, last_seq, last_ts))
    return error, producers
