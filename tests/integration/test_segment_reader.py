"""kafscale.segment reads the brokers' own segments exactly as a consumer reads the topic.

The data (support/analytics_env.py) is written by every client with every codec, on one broker
with local segments and on a 3-broker cluster with etcd and moto S3; the oracle is a
confluent-kafka consumer reading through the broker. Damaged objects are copies in a temporary
directory: the reader must raise SegmentError naming the object and an offset, and must never
hand out a wrong row.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import polars as pl
import pytest
from support import analytics_env
from support import segment_format as sf
from support.analytics_env import (
    CODECS,
    PARTITIONS,
    AnalyticsData,
    Row,
    arrow_rows,
    without_headers,
)
from support.cluster import segment_base

from kafscale.polars import scan_topic
from kafscale.segment import (
    PartitionBounds,
    SegmentError,
    SegmentSource,
    committed_bounds,
    kafka_schema,
)
from kafscale.spark.options import ReadOptions
from kafscale.spark.planning import open_source

analytics = analytics_env.analytics
cluster_analytics = analytics_env.cluster_analytics


def partition_rows(data: AnalyticsData, partition: int) -> list[Row]:
    return [row for row in data.expected if row.partition == partition]


def read_rows(source: SegmentSource, topic: str, partition: int, start: int, end: int, **kw):
    batches = source.read(topic, partition, start, end, **kw)
    return [row for batch in batches for row in arrow_rows(batch)]


_OBJECTS: dict[tuple[str, str], dict[str, bytes]] = {}


def objects_of(data: AnalyticsData) -> dict[str, bytes]:
    """{key: bytes} of the topic's objects, fetched once (committed segments never change and
    the shared topic gets no more data)."""
    cache_key = (data.location, data.topic)
    if cache_key not in _OBJECTS:
        _OBJECTS[cache_key] = data.objects()
    return _OBJECTS[cache_key]


def stored_batches(data: AnalyticsData) -> list[tuple[str, sf.Segment, sf.Index]]:
    """(key, parsed segment, parsed index) of every segment of the topic (independent parser)."""
    objects = objects_of(data)
    out = []
    for key, raw in sorted(objects.items()):
        if key.endswith(".kfs"):
            index = sf.parse_index(objects[key.removesuffix(".kfs") + ".index"])
            out.append((key, sf.parse_segment(raw), index))
    return out


def multi_entry_segment(data: AnalyticsData) -> tuple[int, sf.Segment, sf.Index]:
    """(partition, segment, index) of a segment whose index has several entries."""
    for key, seg, index in stored_batches(data):
        if len(index.entries) >= 2:
            return segment_base(key)[0], seg, index
    raise AssertionError("the reference data has no segment with two index entries")


def entry_before_a_later_batch(
    data: AnalyticsData,
) -> tuple[int, sf.Segment, sf.Index, tuple[int, int]]:
    """(partition, segment, index, (offset, position)): an index entry after the first with a
    batch after the one it names, and that later batch's position. How the clients batched
    the reference data decides which segment has one; the last entry often names the last
    batch."""
    for key, seg, index in stored_batches(data):
        for offset, position in index.entries[1:]:
            later = [b.position for b in seg.batches if b.position > position]
            if later:
                return segment_base(key)[0], seg, index, (offset, later[0])
    raise AssertionError("the reference data has no index entry with a batch after its own")


def test_reference_data_is_varied(analytics):
    """Guards the other tests' reach: every codec is stored, the rows hold null keys, null and
    empty values and null header values, and timestamps go back and forth along the log."""
    codecs = {
        sf.CODEC_NAMES[batch.compression]
        for _, seg, _ in stored_batches(analytics)
        for batch in seg.batches
    }
    assert codecs == set(CODECS)
    rows = analytics.expected
    assert any(r.key is None for r in rows)
    assert any(r.value is None for r in rows)
    assert any(r.value == b"" for r in rows)
    assert any(value is None for r in rows for _, value in r.headers)
    assert any(
        a.partition == b.partition and a.timestamp_ms > b.timestamp_ms
        for a, b in itertools.pairwise(rows)
    )


def test_lists_topics_partitions_and_segments(analytics):
    source = analytics.open_source()
    topic = analytics.topic
    assert topic in source.topics()
    assert source.partitions(topic) == list(range(PARTITIONS))
    sizes = {key: len(raw) for key, raw in objects_of(analytics).items()}
    ends = analytics.end_offsets()
    for p, keys in analytics.segment_keys().items():
        segments = source.segments(topic, p)
        bases = [segment_base(key)[1] for key in keys]
        assert [(s.topic, s.partition) for s in segments] == [(topic, p)] * len(keys)
        assert [s.base_offset for s in segments] == bases
        assert [s.end_offset for s in segments] == [*bases[1:], ends[p]]
        assert [s.size for s in segments] == [sizes[key] for key in keys]


def test_reads_what_a_consumer_reads(analytics):
    source = analytics.open_source()
    want_schema = kafka_schema(include_headers=True)
    for p, end in analytics.end_offsets().items():
        batches = list(source.read(analytics.topic, p, 0, end, include_headers=True))
        assert all(batch.schema == want_schema for batch in batches)
        rows = [row for batch in batches for row in arrow_rows(batch)]
        assert rows == partition_rows(analytics, p), f"partition {p}"


def test_reads_without_headers(analytics):
    assert "headers" not in kafka_schema().names
    source = analytics.open_source()
    for p, end in analytics.end_offsets().items():
        batches = list(source.read(analytics.topic, p, 0, end))
        assert all(batch.schema == kafka_schema() for batch in batches)
        rows = [row for batch in batches for row in arrow_rows(batch)]
        assert rows == without_headers(partition_rows(analytics, p)), f"partition {p}"


def test_batch_rows_sizes_arrow_batches(analytics):
    """Arrow batches are cut between Kafka batches once they hold ``batch_rows`` rows."""
    largest = max(
        batch.record_count
        for key, seg, _ in stored_batches(analytics)
        if segment_base(key)[0] == 1
        for batch in seg.batches
    )
    source = analytics.open_source()
    end = analytics.end_offsets()[1]
    batches = list(source.read(analytics.topic, 1, 0, end, include_headers=True, batch_rows=50))
    assert len(batches) >= end // (50 + largest)
    assert max(batch.num_rows for batch in batches) < 50 + largest
    rows = [row for batch in batches for row in arrow_rows(batch)]
    assert rows == partition_rows(analytics, 1)


def test_offset_ranges(analytics):
    """Ranges starting inside a segment (after its second index entry), inside one batch,
    across segments, empty, and reaching past the end."""
    p, seg, index = multi_entry_segment(analytics)
    rows = partition_rows(analytics, p)
    end = analytics.end_offsets()[p]
    inside = index.entries[1][0] + 2
    ranges = [
        (inside, seg.last_offset),
        (inside, inside + 1),
        (inside, end),
        (seg.base_offset + 1, min(end, seg.last_offset + 40)),
        (0, end + 1000),
        (end - 3, end + 5),
        (end, end + 10),
        (inside, inside),
        (inside, inside - 1),
    ]
    source = analytics.open_source()
    for start, stop in ranges:
        got = read_rows(source, analytics.topic, p, start, stop, include_headers=True)
        assert got == rows[start:stop], f"partition {p} [{start}, {stop})"


def test_offset_for_timestamp(analytics):
    """The first offset with a timestamp at or after t; the reference timestamps are not
    monotonic (explicit older ones are interleaved with client-chosen ones)."""
    source = analytics.open_source()
    for p in range(PARTITIONS):
        rows = partition_rows(analytics, p)
        stamps = sorted({r.timestamp_ms for r in rows})
        step = max(1, len(stamps) // 4)
        probes = [0, stamps[0], stamps[-1], stamps[-1] + 1, *stamps[1::step]]
        probes += [t + 1 for t in stamps[step::step]]
        for t in probes:
            want = next((r.offset for r in rows if r.timestamp_ms >= t), None)
            got = source.offset_for_timestamp(analytics.topic, p, t)
            assert got == want, f"partition {p}, timestamp {t}"


def test_committed_bounds(cluster_analytics):
    data = cluster_analytics
    want = {p: PartitionBounds(0, end) for p, end in data.end_offsets().items()}
    assert committed_bounds(data.etcd_endpoints, data.namespace, data.topic) == want
    assert committed_bounds([data.etcd_endpoints], data.namespace, data.topic) == want

    fresh = data.fresh(12)
    before = committed_bounds(data.etcd_endpoints, data.namespace, fresh.topic)
    assert before == {p: PartitionBounds(0, 4) for p in range(PARTITIONS)}
    fresh.produce_more(6)
    after = committed_bounds(data.etcd_endpoints, data.namespace, fresh.topic)
    assert after == {p: PartitionBounds(0, 6) for p in range(PARTITIONS)}


def test_an_s3_url_carries_its_endpoint_and_region(cluster_analytics, monkeypatch):
    """The location alone says where the objects are: ``?endpoint=…&region=…`` in the URL, no
    keyword settings and no AWS_ENDPOINT_URL* or region variable (the keys come from the
    environment, as they always do); the polars reader takes the same URL."""
    data = cluster_analytics
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", data.options["accessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", data.options["secretAccessKey"])
    url = data.store.moto.location(data.store.bucket, data.namespace)
    url += f"&region={data.options['region']}"
    source = SegmentSource.open(url, etcd_endpoints=data.etcd_endpoints)
    for p, end in data.end_offsets().items():
        rows = read_rows(source, data.topic, p, 0, end, include_headers=True)
        assert rows == partition_rows(data, p), f"partition {p}"
    frame = scan_topic(url, data.topic, etcd_endpoints=data.etcd_endpoints).collect()
    assert frame.height == len(data.expected)


# ---------------------------------------------------------------------------------------------
# damaged objects (copies in a temporary directory)


def copy_partition(data: AnalyticsData, partition: int, root: Path) -> Path:
    """The partition's objects under ``root/<namespace>/<topic>/<partition>/``; returns the
    namespace directory (a SegmentSource location)."""
    prefix = f"{data.namespace}/{data.topic}/{partition}/"
    for key, raw in objects_of(data).items():
        if key.startswith(prefix):
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(raw)
    return root / data.namespace


def flip(path: Path, position: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= 0x5A
    path.write_bytes(bytes(raw))


def damage(path: Path, how: str, seg: sf.Segment) -> None:
    batch = seg.batches[1]  # a batch that does not start the segment
    if how == "payload":
        flip(path, batch.position + sf.BATCH_HEADER.size + 3)
    elif how == "base offset":  # not covered by the batch CRC, only by the segment CRC
        flip(path, batch.position + 7)
    elif how == "batch length":
        flip(path, batch.position + 8)
    elif how == "footer":
        flip(path, seg.size - sf.SEGMENT_FOOTER.size)
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[: seg.size // 2])
    else:
        raise ValueError(how)


def damaged_segment(data: AnalyticsData) -> tuple[int, sf.Segment]:
    """(partition, segment) of a segment with several batches that is not the first one."""
    for key, seg, _ in stored_batches(data):
        if seg.base_offset > 0 and len(seg.batches) >= 2:
            return segment_base(key)[0], seg
    raise AssertionError("no segment past offset 0 with two batches")


@pytest.mark.parametrize("how", ["payload", "base offset", "batch length", "footer", "truncated"])
def test_damaged_segment_raises(analytics, tmp_path, how):
    p, seg = damaged_segment(analytics)
    name = f"segment-{seg.base_offset:020d}.kfs"
    location = copy_partition(analytics, p, tmp_path)
    damage(location / analytics.topic / str(p) / name, how, seg)
    end = analytics.end_offsets()[p]
    rows: list[Row] = []
    with pytest.raises(SegmentError) as err:
        source = SegmentSource.open(str(location))
        for batch in source.read(analytics.topic, p, 0, end, include_headers=True):
            rows += arrow_rows(batch)
    # whatever came before the error is right, and nothing came from the damaged segment
    assert rows == partition_rows(analytics, p)[: len(rows)]
    assert len(rows) <= seg.base_offset
    message = str(err.value)
    assert name in message, message
    offset = re.search(r"offset (\d+)", message)
    assert offset and seg.base_offset <= int(offset.group(1)) <= seg.last_offset, message


def test_index_skips_what_lies_before_the_start(analytics, tmp_path):
    """A read from a later index entry does not touch the segment's earlier batches: with the
    first batch damaged it still returns the right rows, a read from the start raises."""
    p, seg, index = multi_entry_segment(analytics)
    location = copy_partition(analytics, p, tmp_path)
    path = location / analytics.topic / str(p) / f"segment-{seg.base_offset:020d}.kfs"
    flip(path, seg.batches[0].position + sf.BATCH_HEADER.size + 3)
    source = SegmentSource.open(str(location))
    start, stop = index.entries[1][0], seg.last_offset + 1
    got = read_rows(source, analytics.topic, p, start, stop, include_headers=True)
    assert got == partition_rows(analytics, p)[start:stop]
    with pytest.raises(SegmentError):
        read_rows(source, analytics.topic, p, seg.base_offset, stop)


def test_index_pointing_past_its_batch_never_gives_wrong_rows(analytics, tmp_path):
    """An index entry that names a later batch's position than its offset's: the reader must
    notice (SegmentError) or read correctly anyway, never skip records silently."""
    p, seg, index, (offset, later) = entry_before_a_later_batch(analytics)
    location = copy_partition(analytics, p, tmp_path)
    index_path = location / analytics.topic / str(p) / f"segment-{seg.base_offset:020d}.index"
    entries = [(o, later if o == offset else pos) for o, pos in index.entries]
    index_path.write_bytes(sf.build_index(entries, index.interval))
    source = SegmentSource.open(str(location))
    try:
        got = read_rows(source, analytics.topic, p, offset + 1, seg.last_offset + 1)
    except SegmentError as exc:
        assert f"segment-{seg.base_offset:020d}." in str(exc), str(exc)
    else:
        assert (
            got == without_headers(partition_rows(analytics, p))[offset + 1 : seg.last_offset + 1]
        )


def test_missing_index_still_reads(analytics, tmp_path):
    """Without the .index a read from the middle scans the segment from its start."""
    p, seg, index = multi_entry_segment(analytics)
    location = copy_partition(analytics, p, tmp_path)
    (location / analytics.topic / str(p) / f"segment-{seg.base_offset:020d}.index").unlink()
    source = SegmentSource.open(str(location))
    start, stop = index.entries[1][0] + 1, seg.last_offset + 1
    got = read_rows(source, analytics.topic, p, start, stop, include_headers=True)
    assert got == partition_rows(analytics, p)[start:stop]


def test_a_copy_reads_like_the_original(analytics, tmp_path):
    """The copies used above are faithful (so their failures are the damage's doing)."""
    location = copy_partition(analytics, 0, tmp_path)
    source = SegmentSource.open(str(location))
    end = analytics.end_offsets()[0]
    got = read_rows(source, analytics.topic, 0, 0, end, include_headers=True)
    assert got == partition_rows(analytics, 0)


# ---------------------------------------------------------------------------------------------
# decompression bombs (issue 12, item 9)


def write_single_batch_segment(root: Path, topic: str, batch: bytes) -> str:
    part = root / "ns" / topic / "0"
    part.mkdir(parents=True)
    (part / f"segment-{0:020d}.kfs").write_bytes(sf.build_segment([batch]))
    return str(root / "ns")


def with_payload(batch: bytes, payload: bytes, codec: int) -> bytes:
    """``batch`` with another records section and codec, its CRC made valid again."""
    header = bytearray(batch[: sf.BATCH_HEADER.size])
    header[21:23] = codec.to_bytes(2, "big")
    length = sf.BATCH_HEADER.size - sf.BATCH_LENGTH_OVERHEAD + len(payload)
    header[8:12] = length.to_bytes(4, "big")
    out = bytearray(header + payload)
    out[17:21] = sf.crc32c(bytes(out[sf.BATCH_CRC_START :])).to_bytes(4, "big")
    return bytes(out)


@pytest.mark.parametrize("codec", [sf.COMPRESSION_ZSTD, sf.COMPRESSION_SNAPPY])
def test_a_batch_expanding_past_the_bound_raises(tmp_path, codec):
    """8 MiB of records in a few KiB: past max_uncompressed_batch_bytes it is SegmentError,
    within it the record reads back."""
    batch = sf.build_record_batch([(None, bytes(8 << 20), [])], compression=codec)
    location = write_single_batch_segment(tmp_path, "bombs", batch)
    small = SegmentSource.open(location, max_uncompressed_batch_bytes=1 << 20)
    with pytest.raises(SegmentError, match="expand past the limit of 1048576 bytes"):
        list(small.read("bombs", 0, 0, 1))
    rows = SegmentSource.open(location).read("bombs", 0, 0, 1)
    assert [len(v) for b in rows for v in b.column("value").to_pylist()] == [8 << 20]


def test_polars_and_spark_readers_take_the_bound(tmp_path):
    """scan_topic's keyword and the Spark option maxUncompressedBatchBytes reach the reader:
    the same 8 MiB batch fails under a 1 MiB bound and reads at the default."""
    batch = sf.build_record_batch([(None, bytes(8 << 20), [])], compression=sf.COMPRESSION_ZSTD)
    location = write_single_batch_segment(tmp_path, "bombs", batch)
    # polars 1.x reports an IO plugin's exception as a ComputeError that names it; 2.x raises
    # the plugin's own exception
    failed = (pl.exceptions.ComputeError, SegmentError)
    with pytest.raises(failed, match=r"expand past the limit of 1048576 "):
        scan_topic(location, "bombs", max_uncompressed_batch_bytes=1 << 20).collect()
    assert scan_topic(location, "bombs").select("offset").collect().height == 1

    def spark_source(**given: str) -> SegmentSource:
        opts = ReadOptions.parse({"path": location, "subscribe": "bombs", **given}, streaming=False)
        return open_source(opts)

    with pytest.raises(SegmentError, match="expand past the limit of 1048576 bytes"):
        list(spark_source(maxUncompressedBatchBytes="1048576").read("bombs", 0, 0, 1))
    assert sum(b.num_rows for b in spark_source().read("bombs", 0, 0, 1)) == 1


def test_a_tiny_snappy_bomb_is_refused_before_allocating(tmp_path):
    """68 bytes of raw snappy declaring 1 GiB of output (the attack of the issue)."""
    declared = sf.encode_uvarint(1 << 30)
    bomb = declared + b"\xfe\xff\xff" * ((68 - len(declared)) // 3)
    batch = with_payload(sf.build_record_batch([(None, b"x", [])]), bomb, sf.COMPRESSION_SNAPPY)
    location = write_single_batch_segment(tmp_path, "bombs", batch)
    with pytest.raises(SegmentError, match="expand past the limit of 134217728 bytes"):
        list(SegmentSource.open(location).read("bombs", 0, 0, 1))
    with pytest.raises(ValueError, match="max_uncompressed_batch_bytes"):
        SegmentSource.open(location, max_uncompressed_batch_bytes=0)
