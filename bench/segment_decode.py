"""Segment decode benchmark: how fast ``kafscale.segment`` turns .kfs objects into Arrow.

For each codec (none, gzip, snappy, lz4, zstd) it writes a one-partition topic of segment and
index objects into a local directory, in the broker's format (built with the independent
encoder in tests/support/segment_format.py: header, Kafka RecordBatch v2 batches, footer, sparse
index), holding --mb MB of record bytes (key + value + header keys and values, uncompressed).
Then it reads the whole partition with ``SegmentSource.read`` in this one Python thread,
--passes times, and reports records/s and MB/s of record bytes per wall second and per CPU
second of this process (all its threads: decoding runs in the Rust core). The objects were just
written, so they come from the page cache: this measures decoding, not the disk.

Progress goes to stderr, ONE JSON line with every figure to stdout. It measures; it does not
judge.

Usage: python bench/segment_decode.py [--mb 200] [--codecs none,zstd] [--no-headers]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import broker_bench as bb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import segment_format as sf

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
NAMESPACE = "default"
TEMPLATES = 32  # distinct batches per codec, cycled with new base offsets
LEADER_EPOCH = 1
CREATED_MS = 1_700_000_000_000
WORDS = [
    *("alpha", "beta", "gamma", "delta", "epsilon", "kafka", "segment", "offset", "partition"),
    *("broker", "topic", "stream", "click", "view", "purchase", "cart", "search", "login"),
    *("logout", "user", "session", "device", "mobile", "desktop", "europe", "america", "asia"),
    *("green", "blue", "red", "small", "medium", "large", "error", "warning", "info", "debug"),
]


# --------------------------------------------------------------------------------------------
# building the data
# --------------------------------------------------------------------------------------------


def make_record(rng: random.Random, i: int, value_bytes: int) -> tuple[bytes, bytes, list]:
    """A log-like JSON record of about ``value_bytes`` (compressible, not repetitive)."""
    words = []
    size = 0
    while size < value_bytes - 120:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    value = json.dumps(
        {
            "user": rng.randrange(1_000_000),
            "event": rng.choice(WORDS),
            "amount": round(rng.random() * 1000, 2),
            "seq": i,
            "text": " ".join(words),
        }
    ).encode()
    key = f"user-{rng.randrange(100_000):08d}".encode()
    headers = [("trace-id", rng.randbytes(8).hex().encode()), ("source", b"bench")]
    return key, value, headers


def record_bytes(records: list[tuple[bytes, bytes, list]]) -> int:
    return sum(
        len(k) + len(v) + sum(len(hk) + len(hv) for hk, hv in headers) for k, v, headers in records
    )


def batch_templates(codec: int, args: argparse.Namespace) -> list[tuple[bytes, int, int]]:
    """(batch bytes at base offset 0, record count, record bytes) for TEMPLATES batches."""
    rng = random.Random(codec)
    out = []
    for t in range(TEMPLATES):
        records = [make_record(rng, i, args.value_bytes) for i in range(args.batch_records)]
        timestamps = [CREATED_MS + t * args.batch_records + i for i in range(len(records))]
        raw = sf.build_record_batch(
            records, timestamps=timestamps, compression=codec, partition_leader_epoch=LEADER_EPOCH
        )
        out.append((raw, len(records), record_bytes(records)))
    return out


def at_offset(raw: bytes, base_offset: int) -> bytes:
    """The batch with a new base offset (not covered by the batch CRC, as the broker does)."""
    return base_offset.to_bytes(8, "big", signed=True) + raw[8:]


def write_segment(part_dir: Path, batches: list[bytes], counts: list[int]) -> int:
    """One .kfs + .index pair; returns the .kfs size."""
    base = int.from_bytes(batches[0][:8], "big", signed=True)
    data = sf.build_segment(batches, CREATED_MS)
    layout, position, offset = [], sf.SEGMENT_HEADER.size, base
    for raw, count in zip(batches, counts, strict=True):
        layout.append(SimpleNamespace(base_offset=offset, position=position, record_count=count))
        position += len(raw)
        offset += count
    entries = sf.expected_index_entries(SimpleNamespace(batches=layout), sf.DEFAULT_INDEX_INTERVAL)
    (part_dir / f"segment-{base:020d}.kfs").write_bytes(data)
    (part_dir / f"segment-{base:020d}.index").write_bytes(sf.build_index(entries))
    return len(data)


def build_topic(root: Path, topic: str, codec: int, args: argparse.Namespace) -> dict[str, Any]:
    """Segments of ``topic``/0 holding at least --mb MB of record bytes."""
    part_dir = root / NAMESPACE / topic / "0"
    part_dir.mkdir(parents=True, exist_ok=True)
    templates = batch_templates(codec, args)
    target = int(args.mb * bb.MB)
    records = nbytes = stored = segments = 0
    pending: list[bytes] = []
    counts: list[int] = []
    i = 0
    while nbytes < target:
        raw, count, size = templates[i % TEMPLATES]
        pending.append(at_offset(raw, records))
        counts.append(count)
        records, nbytes, i = records + count, nbytes + size, i + 1
        if sum(map(len, pending)) >= args.segment_mib * bb.MIB or nbytes >= target:
            stored += write_segment(part_dir, pending, counts)
            segments += 1
            pending, counts = [], []
    return {
        "records": records,
        "record_bytes": nbytes,
        "stored_bytes": stored,
        "segments": segments,
    }


# --------------------------------------------------------------------------------------------
# reading it back
# --------------------------------------------------------------------------------------------


def read_pass(source, topic: str, end: int, args: argparse.Namespace) -> dict[str, float]:
    rows = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    for batch in source.read(
        topic, 0, 0, end, include_headers=args.headers, batch_rows=args.batch_rows
    ):
        rows += batch.num_rows
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"rows": rows, "seconds": wall, "cpu_s": cpu}


def measure(source, topic: str, built: dict[str, Any], args: argparse.Namespace) -> dict:
    passes = [read_pass(source, topic, built["records"], args) for _ in range(args.passes)]
    wrong = [p["rows"] for p in passes if p["rows"] != built["records"]]
    best = min(passes, key=lambda p: p["seconds"])
    mb = built["record_bytes"] / bb.MB
    out = {
        **built,
        "compression_ratio": round(built["record_bytes"] / built["stored_bytes"], 2),
        "seconds": round(best["seconds"], 3),
        "seconds_median": round(statistics.median(p["seconds"] for p in passes), 3),
        "cpu_s": round(best["cpu_s"], 3),
        "records_s": round(built["records"] / best["seconds"]),
        "mb_s": round(mb / best["seconds"], 1),
        "mb_s_per_cpu_s": round(mb / best["cpu_s"], 1) if best["cpu_s"] > 0 else None,
        "records_s_per_cpu_s": round(built["records"] / best["cpu_s"]) if best["cpu_s"] else None,
    }
    if wrong:
        out["errors"] = [f"read {n} rows, wrote {built['records']}" for n in wrong]
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200.0, help="MB of record bytes per codec")
    ap.add_argument("--codecs", default=",".join(CODECS), help="comma list of codecs")
    ap.add_argument("--value-bytes", type=int, default=1000, help="about this many per value")
    ap.add_argument("--batch-records", type=int, default=500, help="records per RecordBatch")
    ap.add_argument("--segment-mib", type=float, default=4.0, help="stored MiB per segment")
    ap.add_argument("--batch-rows", type=int, default=65_536, help="rows per Arrow batch")
    ap.add_argument("--passes", type=int, default=3, help="reads per codec (best is reported)")
    ap.add_argument("--no-headers", dest="headers", action="store_false", help="skip headers")
    ap.add_argument("--keep-data", action="store_true", help="keep the segment directory")
    args = ap.parse_args(argv)
    args.codecs = args.codecs.split(",")
    unknown = set(args.codecs) - set(CODECS)
    if unknown:
        ap.error(f"unknown codecs {sorted(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kafscale.segment import SegmentSource

    out: dict[str, Any] = {
        "mb_per_codec": args.mb,
        "value_bytes": args.value_bytes,
        "batch_records": args.batch_records,
        "segment_mib": args.segment_mib,
        "batch_rows": args.batch_rows,
        "include_headers": args.headers,
        "passes": args.passes,
        "cpus": os.cpu_count(),
        "codecs": {},
    }
    with bb.scratch_dir(args.keep_data) as root:
        for name in args.codecs:
            topic = f"decode-{name}"
            bb.log(f"{name}: writing {args.mb} MB of records")
            built = build_topic(root, topic, CODECS[name], args)
            source = SegmentSource.open(str(root / NAMESPACE))
            fig = measure(source, topic, built, args)
            bb.log(
                f"{name}: {fig['records_s']} rec/s, {fig['mb_s']} MB/s wall, "
                f"{fig['mb_s_per_cpu_s']} MB per CPU-s ({fig['segments']} segments, "
                f"ratio {fig['compression_ratio']})"
            )
            out["codecs"][name] = fig
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
