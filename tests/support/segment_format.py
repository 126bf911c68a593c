"""Independent parser and checker for KafScale segment (.kfs) and index (.index) files.

Written from the storage layout in docs/design.md and kafscale-spec.txt only; it does not import
``kafscale``. Everything is big-endian.

Segment: header (32 B) ``KAFS`` | u16 version=1 | u16 flags=0 | i64 base offset |
i32 message count | i64 created ms | u32 reserved=0; then Kafka RecordBatch v2 bytes verbatim;
footer (16 B) u32 CRC-32C of every batch byte between header and footer | i64 last offset |
``END!``.

Index: header (16 B) ``IDX\\0`` | u16 version=1 | i32 entry count | i32 interval | u16 reserved;
entries i64 offset + i32 position (absolute byte position of a batch start in the .kfs). One
entry for the first batch, then one for the first batch that starts after ``interval`` messages
have passed since the previous entry.

The module also builds RecordBatch v2 bytes, which the raw-protocol tests use.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import struct
import time
from dataclasses import dataclass, field

import crc32c as _crc32c

SEGMENT_MAGIC = b"KAFS"
FOOTER_MAGIC = b"END!"
INDEX_MAGIC = b"IDX\x00"
SEGMENT_HEADER = struct.Struct(">4sHHqiqI")
SEGMENT_FOOTER = struct.Struct(">Iq4s")
INDEX_HEADER = struct.Struct(">4sHiiH")
INDEX_ENTRY = struct.Struct(">qi")
# base offset, batch length, partition leader epoch, magic, crc, attributes, last offset delta,
# first timestamp, max timestamp, producer id, producer epoch, base sequence, record count
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_CRC_START = 21  # the CRC covers attributes .. end of batch
BATCH_LENGTH_OVERHEAD = 12  # base offset + batch length fields, not counted in batch length
DEFAULT_INDEX_INTERVAL = 100
SEGMENT_NAME = re.compile(r"^segment-(\d{20})\.(kfs|index)$")
PRODUCER_SNAPSHOT_NAME = re.compile(r"^producers-(\d{20})\.json$")

COMPRESSION_NONE = 0
TRANSACTIONAL_FLAG = 0x10  # attributes bit 4
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

assert SEGMENT_HEADER.size == 32
assert SEGMENT_FOOTER.size == 16
assert INDEX_HEADER.size == 16
assert INDEX_ENTRY.size == 12
assert BATCH_HEADER.size == 61


class FormatError(AssertionError):
    """The bytes do not follow the segment/index format."""


def crc32c(data: bytes) -> int:
    return _crc32c.crc32c(data)


# ---------------------------------------------------------------------------------------------
# varints


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("uvarint must be >= 0")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_varint(value: int) -> bytes:
    return encode_uvarint((value << 1) ^ (value >> 63))


def decode_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise FormatError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FormatError("varint too long")


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = decode_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


# ---------------------------------------------------------------------------------------------
# record batches


@dataclass
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class Batch:
    position: int  # byte position of the batch start inside the buffer it was parsed from
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    raw: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return self.batch_length + BATCH_LENGTH_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def crc_ok(self) -> bool:
        return crc32c(self.raw[BATCH_CRC_START:]) == self.crc

    def records(self) -> list[Record]:
        payload = decompress(self.compression, self.raw[BATCH_HEADER.size :])
        out = []
        pos = 0
        for _ in range(self.record_count):
            length, pos = decode_varint(payload, pos)
            end = pos + length
            if length < 0 or end > len(payload):
                raise FormatError(f"record length {length} runs past the batch")
            pos += 1  # attributes
            ts_delta, pos = decode_varint(payload, pos)
            offset_delta, pos = decode_varint(payload, pos)
            key, pos = _read_varbytes(payload, pos)
            value, pos = _read_varbytes(payload, pos)
            header_count, pos = decode_varint(payload, pos)
            headers = []
            for _ in range(header_count):
                hkey, pos = _read_varbytes(payload, pos)
                hval, pos = _read_varbytes(payload, pos)
                if hkey is None:
                    raise FormatError("null header key")
                headers.append((hkey.decode(), hval))
            if pos != end:
                raise FormatError(f"record ends at {pos}, length said {end}")
            out.append(
                Record(
                    offset=self.base_offset + offset_delta,
                    timestamp=self.first_timestamp + ts_delta,
                    key=key,
                    value=value,
                    headers=headers,
                )
            )
        if pos != len(payload):
            raise FormatError(f"{len(payload) - pos} bytes after the last record of the batch")
        return out


def _read_varbytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise FormatError("truncated bytes field")
    return bytes(buf[pos : pos + length]), pos + length


def decompress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.decompress(data)
    if codec == COMPRESSION_SNAPPY:
        import cramjam

        if data.startswith(b"\x82SNAPPY\x00"):  # xerial framing (Java client, kafka-python)
            pos = 16
            out = bytearray()
            while pos < len(data):
                (size,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + size]))
                pos += size
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        return lz4.frame.decompress(data)
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise FormatError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data)
    if codec == COMPRESSION_SNAPPY:
        import cramjam

        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        return lz4.frame.compress(data)
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(codec)


def parse_batch(buf: bytes, pos: int) -> Batch:
    """Parse one RecordBatch v2 starting at ``pos``; checks structure, not the CRC."""
    if pos + BATCH_HEADER.size > len(buf):
        raise FormatError(f"batch header at {pos} is truncated")
    fields = BATCH_HEADER.unpack_from(buf, pos)
    batch_length = fields[1]
    end = pos + BATCH_LENGTH_OVERHEAD + batch_length
    if batch_length < BATCH_HEADER.size - BATCH_LENGTH_OVERHEAD or end > len(buf):
        raise FormatError(f"batch at {pos} has bad length {batch_length}")
    batch = Batch(pos, *fields, raw=bytes(buf[pos:end]))
    if batch.magic != 2:
        raise FormatError(f"batch at {pos} has magic {batch.magic}, expected 2")
    return batch


def iter_batches(buf: bytes) -> list[Batch]:
    batches = []
    pos = 0
    while pos < len(buf):
        batch = parse_batch(buf, pos)
        batches.append(batch)
        pos += batch.size
    return batches


def build_record_batch(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    *,
    base_timestamp: int | None = None,
    timestamps: list[int] | None = None,
    compression: int = COMPRESSION_NONE,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    corrupt_crc: bool = False,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    """Build a RecordBatch v2 (magic 2) from (key, value, headers) triples. ``producer`` is
    the producer id, epoch and base sequence of an idempotent producer's batch."""
    if not records:
        raise ValueError("a batch needs at least one record")
    if timestamps is None:
        # Now by default: records stamped long ago would be fair game for retention.
        base = int(time.time() * 1000) if base_timestamp is None else base_timestamp
        timestamps = [base + i for i in range(len(records))]
    first_ts = timestamps[0]
    body = bytearray()
    for delta, (key, value, headers) in enumerate(records):
        rec = bytearray(b"\x00")
        rec += encode_varint(timestamps[delta] - first_ts)
        rec += encode_varint(delta)
        for blob in (key, value):
            if blob is None:
                rec += encode_varint(-1)
            else:
                rec += encode_varint(len(blob)) + blob
        rec += encode_varint(len(headers))
        for hkey, hval in headers:
            hk = hkey.encode()
            rec += encode_varint(len(hk)) + hk
            rec += encode_varint(-1) if hval is None else encode_varint(len(hval)) + hval
        body += encode_varint(len(rec)) + rec
    payload = compress(compression, bytes(body))
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            compression | (TRANSACTIONAL_FLAG if transactional else 0),
            len(records) - 1,
            first_ts,
            max(timestamps),
            *producer,
            len(records),
        )
        + payload
    )
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    batch_length = 4 + 1 + 4 + len(after_crc)
    return (
        struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc) + after_crc
    )


# ---------------------------------------------------------------------------------------------
# segments and indexes


@dataclass
class Segment:
    version: int
    flags: int
    base_offset: int
    message_count: int
    created_ms: int
    reserved: int
    footer_crc: int
    last_offset: int
    batches: list[Batch]
    size: int

    def records(self) -> list[Record]:
        return [rec for batch in self.batches for rec in batch.records()]


@dataclass
class Index:
    version: int
    interval: int
    reserved: int
    entries: list[tuple[int, int]]


def parse_segment(data: bytes) -> Segment:
    """Parse and fully verify one .kfs object."""
    if len(data) < SEGMENT_HEADER.size + SEGMENT_FOOTER.size:
        raise FormatError(f"segment of {len(data)} bytes is shorter than header + footer")
    magic, version, flags, base, count, created, reserved = SEGMENT_HEADER.unpack_from(data, 0)
    if magic != SEGMENT_MAGIC:
        raise FormatError(f"segment magic {magic!r}")
    if version != 1:
        raise FormatError(f"segment version {version}")
    if flags != 0:
        raise FormatError(f"segment flags {flags}")
    if reserved != 0:
        raise FormatError(f"segment reserved {reserved}")
    footer_crc, last_offset, footer_magic = SEGMENT_FOOTER.unpack_from(
        data, len(data) - SEGMENT_FOOTER.size
    )
    if footer_magic != FOOTER_MAGIC:
        raise FormatError(f"footer magic {footer_magic!r}")
    body = data[SEGMENT_HEADER.size : len(data) - SEGMENT_FOOTER.size]
    actual_crc = crc32c(body)
    if actual_crc != footer_crc:
        raise FormatError(f"footer CRC {footer_crc:#010x}, batches hash to {actual_crc:#010x}")
    batches = iter_batches(body)
    if not batches:
        raise FormatError("segment holds no batch")
    for batch in batches:
        batch.position += SEGMENT_HEADER.size
        if not batch.crc_ok:
            raise FormatError(f"batch at {batch.position} fails its own CRC-32C")
        if batch.record_count != batch.last_offset_delta + 1:
            raise FormatError(
                f"batch at {batch.position}: {batch.record_count} records but last offset "
                f"delta {batch.last_offset_delta}"
            )
        if batch.partition_leader_epoch < 0:
            raise FormatError(
                f"batch at {batch.position}: partition leader epoch "
                f"{batch.partition_leader_epoch} was not rewritten by the broker"
            )
    if batches[0].base_offset != base:
        raise FormatError(f"header base offset {base}, first batch {batches[0].base_offset}")
    for prev, nxt in itertools.pairwise(batches):
        if nxt.base_offset != prev.last_offset + 1:
            raise FormatError(
                f"batch base offset {nxt.base_offset} does not follow {prev.last_offset}"
            )
    if last_offset != batches[-1].last_offset:
        raise FormatError(
            f"footer last offset {last_offset}, batches end at {batches[-1].last_offset}"
        )
    total = sum(b.record_count for b in batches)
    if count != total:
        raise FormatError(f"header message count {count}, batches hold {total}")
    if count != last_offset - base + 1:
        raise FormatError(f"message count {count} does not span {base}..{last_offset}")
    seg = Segment(
        version, flags, base, count, created, reserved, footer_crc, last_offset, batches, len(data)
    )
    for batch in batches:  # decode every record: proves the payload is well formed
        for i, rec in enumerate(batch.records()):
            if rec.offset != batch.base_offset + i:
                raise FormatError(f"record offset {rec.offset} at position {i} of its batch")
    return seg


def parse_index(data: bytes) -> Index:
    if len(data) < INDEX_HEADER.size:
        raise FormatError(f"index of {len(data)} bytes is shorter than its header")
    magic, version, count, interval, reserved = INDEX_HEADER.unpack_from(data, 0)
    if magic != INDEX_MAGIC:
        raise FormatError(f"index magic {magic!r}")
    if version != 1:
        raise FormatError(f"index version {version}")
    if reserved != 0:
        raise FormatError(f"index reserved {reserved}")
    if interval <= 0:
        raise FormatError(f"index interval {interval}")
    expected_len = INDEX_HEADER.size + count * INDEX_ENTRY.size
    if count < 0 or len(data) != expected_len:
        raise FormatError(f"index has {len(data)} bytes for {count} entries ({expected_len})")
    entries = [
        INDEX_ENTRY.unpack_from(data, INDEX_HEADER.size + i * INDEX_ENTRY.size)
        for i in range(count)
    ]
    return Index(version, interval, reserved, entries)


def expected_index_entries(segment: Segment, interval: int) -> list[tuple[int, int]]:
    """Entry for the first batch, then for the first batch after >= interval messages."""
    entries = []
    since_last = 0
    for batch in segment.batches:
        if not entries or since_last >= interval:
            entries.append((batch.base_offset, batch.position))
            since_last = 0
        since_last += batch.record_count
    return entries


def check_index(index: Index, segment: Segment, interval: int = DEFAULT_INDEX_INTERVAL) -> None:
    if index.interval != interval:
        raise FormatError(f"index interval {index.interval}, expected {interval}")
    starts = {b.position: b.base_offset for b in segment.batches}
    for offset, position in index.entries:
        if starts.get(position) != offset:
            raise FormatError(
                f"index entry ({offset}, {position}) does not point at the start of the batch "
                f"with that base offset"
            )
    expected = expected_index_entries(segment, interval)
    if index.entries != expected:
        raise FormatError(f"index entries {index.entries}, interval rule gives {expected}")


@dataclass
class PartitionLog:
    segments: list[tuple[str, Segment, Index]]

    def records(self) -> list[Record]:
        return [rec for _, seg, _ in self.segments for rec in seg.records()]

    @property
    def next_offset(self) -> int:
        return self.segments[-1][1].last_offset + 1 if self.segments else 0


def check_producer_snapshot(end: int, data: bytes) -> None:
    """An idempotent-producer snapshot as compaction stores it next to the segments: JSON with
    the offset it is valid at (its name's) and, per producer id, its epoch and last batches."""
    snapshot = json.loads(data)
    if snapshot.get("end") != end:
        raise FormatError(f"producer snapshot {end} says it ends at {snapshot.get('end')}")
    for producer_id, entry in snapshot["producers"].items():
        batches = entry["batches"]
        if int(producer_id) < 0 or not 1 <= len(batches) <= 5:
            raise FormatError(f"producer {producer_id} in snapshot {end}: {entry}")
        if any(b["last_offset"] >= end for b in batches):
            raise FormatError(f"producer {producer_id}: a batch at or past the snapshot's end")


def check_partition(
    objects: dict[str, bytes], interval: int = DEFAULT_INDEX_INTERVAL, *, from_zero: bool = True
) -> PartitionLog:
    """Verify all objects of one partition directory, given as {file name: bytes}.

    Every .kfs has a matching .index and vice versa, names carry the header base offset,
    and base offsets are contiguous across segments, starting at 0 unless ``from_zero`` is
    False (retention or DeleteRecords moved the log start).
    """
    kfs = {}
    idx = {}
    for name, data in objects.items():
        snapshot = PRODUCER_SNAPSHOT_NAME.match(name)
        if snapshot:
            check_producer_snapshot(int(snapshot.group(1)), data)
            continue
        match = SEGMENT_NAME.match(name)
        if not match:
            raise FormatError(f"unexpected object name {name!r}")
        base = int(match.group(1))
        (kfs if match.group(2) == "kfs" else idx)[base] = (name, data)
    if set(kfs) != set(idx):
        raise FormatError(f"segments {sorted(kfs)} and indexes {sorted(idx)} do not pair up")
    segments = []
    expected_base = 0 if from_zero else min(kfs, default=0)
    for base in sorted(kfs):
        name, data = kfs[base]
        try:
            seg = parse_segment(data)
            index = parse_index(idx[base][1])
            check_index(index, seg, interval)
        except FormatError as exc:
            raise FormatError(f"{name}: {exc}") from exc
        if seg.base_offset != base:
            raise FormatError(f"{name} holds base offset {seg.base_offset}")
        if base != expected_base:
            raise FormatError(f"{name} starts at {base}, previous segment ended at {expected_base}")
        expected_base = seg.last_offset + 1
        segments.append((name, seg, index))
    return PartitionLog(segments)


def build_segment(batches: list[bytes], created_ms: int = 1_700_000_000_000) -> bytes:
    """Assemble a .kfs from batches whose base offsets are already set (parser self-tests)."""
    parsed = [parse_batch(b, 0) for b in batches]
    body = b"".join(batches)
    header = SEGMENT_HEADER.pack(
        SEGMENT_MAGIC,
        1,
        0,
        parsed[0].base_offset,
        sum(b.record_count for b in parsed),
        created_ms,
        0,
    )
    return header + body + SEGMENT_FOOTER.pack(crc32c(body), parsed[-1].last_offset, FOOTER_MAGIC)


def build_index(entries: list[tuple[int, int]], interval: int = DEFAULT_INDEX_INTERVAL) -> bytes:
    out = INDEX_HEADER.pack(INDEX_MAGIC, 1, len(entries), interval, 0)
    return out + b"".join(INDEX_ENTRY.pack(o, p) for o, p in entries)


def read_local_partitions(
    data_dir,
    topic: str,
    namespace: str = "default",
    interval: int = DEFAULT_INDEX_INTERVAL,
    *,
    from_zero: bool = True,
) -> dict[int, PartitionLog]:
    """Verify every partition of ``topic`` under ``{data_dir}/{namespace}/{topic}/``."""
    from pathlib import Path

    root = Path(data_dir) / namespace / topic
    out = {}
    for part_dir in sorted(root.iterdir()) if root.is_dir() else []:
        if not part_dir.name.isdigit():
            raise FormatError(f"unexpected entry {part_dir}")
        objects = {f.name: f.read_bytes() for f in part_dir.iterdir()}
        out[int(part_dir.name)] = check_partition(objects, interval, from_zero=from_zero)
    return out
