"""Every segment object compaction writes is a valid KafScale segment or index (docs/design.md,
"Storage layout"), checked with the independent parser in support/segment_format.py: on a local
data dir and on S3. Acked records are committed in write-ahead objects first; compaction (at
once in tests, see support/procs.py) turns them into segments."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import Msg, confluent_consume, confluent_produce, counts, unique
from support.procs import S3_ENV, settled

from kafscale.polars import scan_topic
from kafscale.segment import SegmentSource

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def local_objects(data_dir: Path) -> dict[tuple[str, str, int], dict[str, bytes]]:
    """{(namespace, topic, partition): {file name: bytes}} for every .kfs/.index file."""
    out: dict[tuple[str, str, int], dict[str, bytes]] = defaultdict(dict)
    for path in sorted(data_dir.rglob("*")):
        if path.suffix not in (".kfs", ".index"):
            continue
        rel = path.relative_to(data_dir).parts
        assert len(rel) == 4, f"segment file outside {{ns}}/{{topic}}/{{partition}}/: {path}"
        ns, topic, part, name = rel
        assert part.isdigit(), path
        out[(ns, topic, int(part))][name] = path.read_bytes()
    return dict(out)


def s3_objects(objects: dict[str, bytes]) -> dict[tuple[str, str, int], dict[str, bytes]]:
    out: dict[tuple[str, str, int], dict[str, bytes]] = defaultdict(dict)
    for key, data in objects.items():
        parts = key.split("/")
        if parts[1].startswith("!"):
            continue  # the broker's own folders: write-ahead objects, published metadata
        assert len(parts) == 4, f"unexpected object key {key!r}"
        ns, topic, part, name = parts
        assert part.isdigit(), key
        out[(ns, topic, int(part))][name] = data
    return dict(out)


def check_topic(
    objects: dict[tuple[str, str, int], dict[str, bytes]],
    namespace: str,
    topic: str,
    msgs: list[Msg],
    created_after: int,
) -> dict[int, sf.PartitionLog]:
    """Parse every object of ``topic``; records must be exactly ``msgs``, in order, in segments
    created (by compaction, whenever it ran) after ``created_after`` and not in the future."""
    logs = {}
    for (ns, t, p), objs in objects.items():
        if t != topic:
            continue
        assert ns == namespace
        logs[p] = sf.check_partition(objs)
    want = defaultdict(list)
    for m in msgs:
        want[m.partition].append(m)
    assert sorted(logs) == sorted(want), f"partitions on storage {sorted(logs)}"
    lo, hi = created_after, int(time.time() * 1000) + 1000
    for p, log in logs.items():
        recs = log.records()
        assert [r.offset for r in recs] == list(range(len(want[p])))
        assert [(r.key, r.value, tuple(r.headers), r.timestamp) for r in recs] == [
            (m.key, m.value, m.headers, m.timestamp) for m in want[p]
        ], f"partition {p} records differ from what was produced"
        for name, seg, _ in log.segments:
            assert lo <= seg.created_ms <= hi, f"{name} created at {seg.created_ms}"
    return logs


def produce_rounds(bootstrap: str, topic: str, partitions: int) -> list[Msg]:
    """Several acked rounds with different codecs and batch sizes; returns all messages."""
    msgs: list[Msg] = []
    ts = 1_700_000_000_000
    blob = bytes(range(256))
    rounds = [
        ("none", 700, {"batch.num.messages": 7}),  # many small batches in one flush
        ("gzip", 120, {}),
        ("snappy", 60, {}),
        ("lz4", 60, {}),
        ("zstd", 60, {"batch.num.messages": 3}),
    ]
    for r, (codec, n, extra) in enumerate(rounds):
        batch = []
        for i in range(n):
            key = None if i % 4 == 0 else b"k%d" % (i % 9)
            value = b"r%d-%d-" % (r, i) + (b"compressible " * 20 if i % 2 else blob)
            headers = (("round", b"%d" % r),) if i % 3 else ()
            batch.append(Msg(i % partitions, key, value, headers, ts))
            ts += 3
        confluent_produce(bootstrap, topic, batch, compression=codec, extra=extra)
        msgs += batch
    return msgs


def test_local_segments_are_valid(broker_factory):
    started = int(time.time() * 1000) - 1000
    broker = broker_factory(["--default-partitions", "3"], flush_interval_ms=1500)
    topic = unique("seg-local")
    kw.ensure_topic(broker.bootstrap, topic, 3)
    msgs = produce_rounds(broker.bootstrap, topic, 3)

    # compaction turns the acknowledged records into segments while the broker runs
    settled(lambda: check_topic(local_objects(broker.data_dir), "default", topic, msgs, started))

    assert broker.terminate() == 0
    logs = check_topic(local_objects(broker.data_dir), "default", topic, msgs, started)
    for log in logs.values():
        # each acked round was sealed before the next began
        assert len(log.segments) >= 5
        codecs = {b.compression for _, seg, _ in log.segments for b in seg.batches}
        assert len(codecs) > 1 and codecs <= set(CODEC_IDS.values())
    # the 700-message round went into few flushes, so some index has more than one entry
    assert any(len(idx.entries) > 1 for log in logs.values() for _, _, idx in log.segments), (
        "no segment held more than one index interval; the index rule was not exercised"
    )
    assert (broker.data_dir / "metadata.redb").is_file()


def test_segment_bytes_rolls_segments(broker_factory):
    """Compaction cuts segments at --segment-bytes, also inside one write-ahead run (the flush
    interval is long here, so runs are large)."""
    seg_bytes = 65536
    broker = broker_factory(["--segment-bytes", str(seg_bytes)], flush_interval_ms=5000)
    topic = unique("seg-roll")
    kw.ensure_topic(broker.bootstrap, topic, 1)
    msgs = [Msg(0, None, bytes([i % 251]) * 8000, (), 1_700_000_000_000 + i) for i in range(100)]
    confluent_produce(
        broker.bootstrap,
        topic,
        msgs,
        acks="1",
        extra={"batch.size": 16384, "linger.ms": 0},
    )

    def compacted():
        log = sf.check_partition(local_objects(broker.data_dir)[("default", topic, 0)])
        assert [r.value for r in log.records()] == [m.value for m in msgs]
        return log

    log = settled(compacted)
    assert broker.terminate() == 0
    assert len(log.segments) >= 10, f"{len(log.segments)} segments for 800 kB at 64 KiB each"
    biggest_batch = max(b.size for _, seg, _ in log.segments for b in seg.batches)
    for name, seg, _ in log.segments:
        body = seg.size - 48
        assert body <= seg_bytes + biggest_batch, f"{name} holds {body} batch bytes"


def test_a_partition_compacted_by_size_is_read_whole(broker_factory):
    """Compaction by size cuts the newest segment inside a write-ahead run, whose rest stays
    committed until the next compaction; the readers read that run from the segment end on,
    every record once."""
    broker = broker_factory(
        ["--segment-bytes", "65536"],
        # By age only after ten minutes: the rest of the run stays as it is meanwhile.
        env={"KAFSCALE_WAL_COMPACTION_AGE_MS": "600000"},
        flush_interval_ms=3000,
    )
    topic = unique("seg-straddle")
    kw.ensure_topic(broker.bootstrap, topic, 1)
    msgs = [Msg(0, None, bytes([i]) * 8000, (), 1_700_000_000_000 + i) for i in range(12)]
    # Two flushes, two runs of 48 kB in batches of at most 16 kB: together a segment's worth,
    # so compaction cuts a segment of 64 KiB, which ends inside the second run.
    for half in (msgs[:6], msgs[6:]):
        confluent_produce(
            broker.bootstrap, topic, half, acks="1", extra={"batch.size": 16384, "linger.ms": 0}
        )

    def cut_by_size():
        log = sf.check_partition(local_objects(broker.data_dir)[("default", topic, 0)])
        in_segments = len(list(log.records()))
        assert 0 < in_segments < len(msgs), f"{in_segments} records in segments"
        return in_segments

    in_segments = settled(cut_by_size)
    location = str(broker.data_dir / "default")
    frame = scan_topic(location, topic).collect()
    assert frame["value"].to_list() == [m.value for m in msgs], "every record once, in order"
    assert frame["offset"].to_list() == list(range(len(msgs)))
    source = SegmentSource.open(location)
    log = source.log(topic, 0)
    assert (log.log_start_offset, log.end_offset) == (0, len(msgs))
    bounds = source.bounds(topic)
    assert bounds is not None and bounds[0].high_watermark == len(msgs)
    timestamps = source.offset_for_timestamp(topic, 0, 1_700_000_000_000 + in_segments)
    assert timestamps == in_segments, "the first record past the segments, found in the run"
    assert broker.terminate() == 0


@pytest.mark.parametrize("unsigned", [False, True], ids=["signed", "unsigned-payload"])
def test_s3_segments_are_valid(broker_factory, moto, s3_bucket, unsigned):
    """Over moto's plain HTTP the uploads are signed with their body's hash by default; with
    AWS_UNSIGNED_PAYLOAD=true they are sent as over HTTPS (AWS itself), unhashed."""
    started = int(time.time() * 1000) - 1000
    namespace = "itest-ns"
    env = dict(S3_ENV, AWS_UNSIGNED_PAYLOAD="true") if unsigned else dict(S3_ENV)
    broker = broker_factory(
        [*moto.broker_args(s3_bucket, namespace), "--default-partitions", "2"],
        env=env,
        flush_interval_ms=1500,
    )
    signing = "upload bodies not signed" if unsigned else "upload bodies signed)"
    assert signing in broker.log_text(), "the broker's start-up line names its store"
    url = moto.location(s3_bucket, namespace, broker=True)
    assert f"storage: {url} (" in broker.log_text(), "... by the URL --storage takes"
    topic = unique("seg-s3")
    kw.ensure_topic(broker.bootstrap, topic, 2)
    msgs = produce_rounds(broker.bootstrap, topic, 2)

    objects = settled(lambda: s3_objects(moto.objects(s3_bucket)))
    assert {ns for ns, _, _ in objects} == {namespace}
    settled(
        lambda: check_topic(s3_objects(moto.objects(s3_bucket)), namespace, topic, msgs, started)
    )

    assert broker.terminate() == 0
    logs = check_topic(s3_objects(moto.objects(s3_bucket)), namespace, topic, msgs, started)
    assert all(len(log.segments) >= 5 for log in logs.values())

    # after a restart the broker serves exactly what the bucket holds
    broker.start()
    got = confluent_consume(broker.bootstrap, topic, counts(msgs))
    assert sorted((g.partition, g.offset, g.value) for g in got) == sorted(
        (r_p, r.offset, r.value) for r_p, log in logs.items() for r in log.records()
    )


def test_memory_store_keeps_segments_off_disk(broker_factory):
    broker = broker_factory(["--use-memory-s3"])
    topic = unique("seg-mem")
    msgs = [Msg(0, b"k", b"v%d" % i, (), 1_700_000_000_000 + i) for i in range(20)]
    confluent_produce(broker.bootstrap, topic, msgs)
    got = confluent_consume(broker.bootstrap, topic, {0: 20})
    assert [g.value for g in got] == [m.value for m in msgs]
    assert broker.terminate() == 0
    assert local_objects(broker.data_dir) == {}
