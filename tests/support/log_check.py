"""An independent check of what the brokers committed: every partition's log rebuilt from the
metadata and the objects themselves, never through a broker.

Layout (docs/design.md, docs/metadata.md; nothing here imports ``kafscale``):

- ``partitions/{topic}/{p}``: ``log_start_offset``, ``high_watermark`` and ``segment_end``
  (absent on older records: = high watermark). Offsets in [log_start, segment_end) are in the
  ``.kfs`` segments ``{ns}/{topic}/{p}/segment-{base:020}.kfs`` (+ ``.index``). The record's
  ``producer_snapshot`` names the one ``{ns}/{topic}/{p}/producers-{end:020}.json`` in use
  (the idempotent producers' state as of ``end``; checked by segment_format).
- ``wal/{broker}/{writer}-{seq}``: the manifest (JSON) of one committed write-ahead object
  ``{ns}/!wal/{broker}/{writer}-{seq}.wal``: a 24-byte header (``KWAL``, version 1, flags 0,
  created ms, broker id, reserved 0) and then runs of record batches, one run per partition,
  where the manifest says (position, length). [segment_end, committed end) is in those runs;
  the committed end is max(high watermark, 1 + the largest last offset of any run).

``check()`` returns each partition's records (offset, value) over [log_start, committed end),
every way the committed state is not whole (``problems``), and every object that no metadata
refers to (``unreferenced``): write-ahead objects no manifest names, segments outside their
partition's committed range, objects of topics that do not exist. A write-ahead object is read
with one GET and each run cut out at the manifest's (position, length): the same bytes as a
ranged GET, at one request per object instead of one per partition.
"""

from __future__ import annotations

import json
import re
import struct
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import segment_format as sf

WAL_MAGIC = b"KWAL"
WAL_HEADER = struct.Struct(">4sHHqiI")  # magic, version, flags, created ms, broker id, reserved
WAL_DIR = "!wal"
WAL_KEY = re.compile(r"^!wal/(\d+)/([0-9a-f]{16})-(\d{12})\.wal$")
SEGMENT_KEY = re.compile(r"^([^/!][^/]*)/(\d+)/segment-(\d{20})\.(kfs|index)$")
PRODUCER_SNAPSHOT_KEY = re.compile(r"^([^/!][^/]*)/(\d+)/producers-(\d{20})\.json$")
# uncommitted write-ahead objects are swept once older than this (docs/metadata.md: 10 minutes)
WAL_SWEEP_AGE_S = 600.0

assert WAL_HEADER.size == 24


# ---------------------------------------------------------------------------------------------
# metadata


@dataclass(frozen=True)
class Run:
    """One partition's batches in a write-ahead object, as its manifest lists them."""

    topic: str
    topic_id: str
    partition: int
    leader_epoch: int
    base_offset: int
    last_offset: int
    position: int
    length: int
    max_timestamp: int


@dataclass
class Manifest:
    key: str
    object: str  # the object's key in the bucket (namespace included)
    broker: int
    created_ms: int
    size: int
    runs: list[Run]


@dataclass
class PartitionState:
    log_start: int
    segment_end: int
    high_watermark: int
    leader_epoch: int
    producer_snapshot: int | None = None


@dataclass
class Metadata:
    """The keys of one namespace that say what is committed."""

    topics: dict[str, dict]  # name -> topic record ("id", "partitions", ...)
    partitions: dict[tuple[str, int], PartitionState]
    manifests: dict[str, Manifest]
    deletions: set[str]  # topics whose objects are still being deleted

    def topic_id(self, topic: str) -> str | None:
        rec = self.topics.get(topic)
        return None if rec is None else str(rec.get("id", "")).lower()


def parse_manifest(key: str, raw: bytes) -> Manifest:
    doc = json.loads(raw)
    runs = [
        Run(t["topic"], str(t["id"]).lower(), *(int(x) for x in run))
        for t in doc.get("topics", [])
        for run in t["runs"]
    ]
    return Manifest(
        key, doc["object"], int(doc["broker"]), int(doc["created_ms"]), int(doc["size"]), runs
    )


def check_snapshot(key: str, data: bytes | None) -> list[str]:
    """The producer snapshot a partition record names is there and well formed."""
    if data is None:
        return [f"{key}: the producer snapshot the partition record names is missing"]
    end = int(key.rsplit("-", 1)[1].split(".")[0])
    try:
        sf.check_producer_snapshot(end, data)
    except (sf.FormatError, ValueError, KeyError) as exc:
        return [f"{key}: {exc}"]
    return []


def parse_partition_state(raw: bytes) -> PartitionState:
    doc = json.loads(raw)
    hwm = int(doc["high_watermark"])
    return PartitionState(
        log_start=int(doc.get("log_start_offset", 0)),
        segment_end=int(doc.get("segment_end", hwm)),
        high_watermark=hwm,
        leader_epoch=int(doc["leader_epoch"]),
        producer_snapshot=doc.get("producer_snapshot"),
    )


def read_metadata(entries: dict[str, bytes], namespace: str) -> Metadata:
    """``entries``: every key under ``/kafscale/{namespace}/`` with its value (one etcd range
    request gives them at one revision: a consistent snapshot)."""
    root = f"/kafscale/{namespace}/"
    meta = Metadata({}, {}, {}, set())
    for key, value in entries.items():
        parts = key.removeprefix(root).split("/")
        kind = parts[0]
        if kind == "topics" and len(parts) == 2:
            meta.topics[parts[1]] = json.loads(value)
        elif kind == "partitions" and len(parts) == 3 and parts[2].isdigit():
            meta.partitions[(parts[1], int(parts[2]))] = parse_partition_state(value)
        elif kind == "wal" and len(parts) == 3:
            meta.manifests[key] = parse_manifest(key, value)
        elif kind == "deletions" and len(parts) == 2:
            meta.deletions.add(parts[1])
    return meta


# ---------------------------------------------------------------------------------------------
# objects


@dataclass(frozen=True)
class StoredObject:
    size: int
    modified: float  # unix seconds


class S3Objects:
    """A bucket (moto in the tests) through boto3."""

    def __init__(self, client, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def list(self, prefix: str) -> dict[str, StoredObject]:
        out = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                out[obj["Key"]] = StoredObject(obj["Size"], obj["LastModified"].timestamp())
        return out

    def get(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None


class DirObjects:
    """The local-directory store: object key = path below the data dir."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def list(self, prefix: str) -> dict[str, StoredObject]:
        out = {}
        base = self.root / prefix
        for path in base.rglob("*") if base.is_dir() else []:
            if path.is_file():
                st = path.stat()
                key = path.relative_to(self.root).as_posix()
                out[key] = StoredObject(st.st_size, st.st_mtime)
        return out

    def get(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None


# ---------------------------------------------------------------------------------------------
# write-ahead objects


def parse_wal_header(data: bytes, manifest: Manifest) -> list[str]:
    """What is wrong with the header of ``manifest``'s object (nothing: [])."""
    if len(data) < WAL_HEADER.size:
        return [f"{manifest.object}: {len(data)} bytes, shorter than the header"]
    magic, version, flags, _created, broker, reserved = WAL_HEADER.unpack_from(data, 0)
    problems = []
    if (magic, version, flags, reserved) != (WAL_MAGIC, 1, 0, 0):
        problems.append(
            f"{manifest.object}: header magic {magic!r} version {version} flags {flags} "
            f"reserved {reserved}, wanted KWAL 1 0 0"
        )
    if broker != manifest.broker:
        problems.append(f"{manifest.object}: header broker {broker}, manifest {manifest.broker}")
    return problems


def run_layout_problems(manifest: Manifest, size: int) -> list[str]:
    """The runs lie back to back after the header and fill the object exactly."""
    if size != manifest.size:
        return [f"{manifest.object}: {size} bytes, manifest says {manifest.size}"]
    at = WAL_HEADER.size
    for run in sorted(manifest.runs, key=lambda r: r.position):
        if run.position != at or run.length <= 0:
            return [
                f"{manifest.object}: run of {run.topic}/{run.partition} at {run.position} "
                f"(+{run.length}), the previous one ends at {at}"
            ]
        at += run.length
    if at != size:
        return [f"{manifest.object}: runs end at {at}, the object at {size}"]
    return []


def run_batches(data: bytes, run: Run, where: str) -> tuple[list[sf.Batch], list[str]]:
    """The record batches of one run and what about them disagrees with the manifest."""
    try:
        batches = sf.iter_batches(data[run.position : run.position + run.length])
    except sf.FormatError as exc:
        return [], [f"{where}: {exc}"]
    problems = []
    expected = run.base_offset
    for b in batches:
        if not b.crc_ok:
            problems.append(f"{where}: batch at {b.base_offset} fails its CRC-32C")
        if b.base_offset != expected or b.record_count != b.last_offset_delta + 1:
            problems.append(f"{where}: batch at {b.base_offset} after {expected - 1}")
        if b.partition_leader_epoch != run.leader_epoch:
            problems.append(
                f"{where}: batch at {b.base_offset} has epoch {b.partition_leader_epoch}, "
                f"manifest {run.leader_epoch}"
            )
        expected = b.last_offset + 1
    if not batches or expected - 1 != run.last_offset:
        problems.append(f"{where}: batches end at {expected - 1}, manifest {run.last_offset}")
    elif max(b.max_timestamp for b in batches) != run.max_timestamp:
        problems.append(f"{where}: max timestamp differs from the manifest's {run.max_timestamp}")
    return batches, problems


# ---------------------------------------------------------------------------------------------
# the check


@dataclass
class LogReport:
    logs: dict[tuple[str, int], list[tuple[int, bytes | None]]] = field(default_factory=dict)
    epochs: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)  # offset->epoch
    ends: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # start, end
    segment_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unreferenced: dict[str, StoredObject] = field(default_factory=dict)
    manifests: int = 0  # live manifests (0 once compaction has caught up)
    segments: int = 0  # committed .kfs objects
    checked_at: float = 0.0

    def records(self, topic: str, partition: int) -> list[tuple[int, bytes | None]]:
        return self.logs.get((topic, partition), [])

    def unswept(self, max_age: float = WAL_SWEEP_AGE_S) -> dict[str, StoredObject]:
        """Unreferenced objects, less the write-ahead objects the sweep may still leave (an
        uncommitted one younger than its age limit)."""
        return {
            k: o
            for k, o in self.unreferenced.items()
            if not (WAL_KEY.match(k.split("/", 1)[-1]) and self.checked_at - o.modified < max_age)
        }

    def acked_problems(self, topic: str, acked: dict[bytes, tuple[int, int | None]]) -> list[str]:
        """Each acked value (value -> (partition, offset)) is at its offset in the objects, or
        somewhere in its partition when it was acknowledged without an offset."""
        at = {(p, off): v for (t, p), recs in self.logs.items() if t == topic for off, v in recs}
        partition_of = {v: p for (p, _off), v in at.items()}
        problems = []
        for value, (p, off) in sorted(acked.items()):
            if off is None:
                if partition_of.get(value) != p:
                    problems.append(f"acked {value!r} in {topic}/{p}: not in that partition")
            elif (p, off) not in at:
                problems.append(f"acked {value!r} at {topic}/{p}/{off}: no record there")
            elif at[(p, off)] != value:
                problems.append(f"acked {value!r} at {topic}/{p}/{off}: holds {at[(p, off)]!r}")
        return problems

    def summary(self) -> dict[str, int]:
        return {
            "partitions": len(self.logs),
            "records": sum(len(r) for r in self.logs.values()),
            "in_wal": sum(
                max(0, end - max(self.segment_ends[k], s)) for k, (s, end) in self.ends.items()
            ),
            "manifests": self.manifests,
            "segments": self.segments,
            "unreferenced": len(self.unreferenced),
        }


class LogChecker:
    """``load_metadata()`` gives {key: value} under ``/kafscale/{namespace}/``; ``objects``
    is an S3Objects or DirObjects."""

    def __init__(self, load_metadata: Callable[[], dict[str, bytes]], objects, namespace: str):
        self.load_metadata = load_metadata
        self.objects = objects
        self.namespace = namespace

    @classmethod
    def for_cluster(cls, cluster) -> LogChecker:
        """On a tests/support/cluster.Cluster (etcd + moto)."""
        root = f"/kafscale/{cluster.namespace}/"
        return cls(
            lambda: cluster.etcd.client().range(root),
            S3Objects(cluster.moto.client(), cluster.bucket),
            cluster.namespace,
        )

    def check(self, topics: list[str] | None = None, settle_s: float = 60.0) -> LogReport:
        """One check against a metadata snapshot that did not change while the objects were
        read (compaction moves on meanwhile: a changed snapshot means reading again, for up
        to ``settle_s``; once producers stop, compaction soon has nothing left to move). If no
        snapshot held still, the problems reported are those every attempt found: one that a
        compaction between reading the metadata and the objects made up (a manifest whose
        object was collected a moment after, once its runs were in a segment) is not seen
        twice, a lost record is."""
        deadline = time.monotonic() + settle_s
        seen: set[str] | None = None
        while True:
            meta = read_metadata(self.load_metadata(), self.namespace)
            report = self._check(meta, topics)
            if read_metadata(self.load_metadata(), self.namespace) == meta:
                return report
            found = set(report.problems)
            seen = found if seen is None else seen & found
            if time.monotonic() > deadline:
                report.problems = [p for p in report.problems if p in seen]
                return report

    def wait_compacted(self, topics: list[str] | None, timeout: float) -> LogReport:
        """Check until compaction has caught up: no manifest left and nothing unreferenced
        (apart from uncommitted write-ahead objects the sweep may still leave); the last
        report either way (callers assert on it)."""
        deadline = time.monotonic() + timeout
        # Waiting for the manifests to go reads the metadata only; a check reads and decodes
        # every object (tens of seconds for a wide topic), so it runs once they are gone.
        while read_metadata(self.load_metadata(), self.namespace).manifests:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        while True:
            report = self.check(topics)
            if (report.manifests == 0 and not report.unswept()) or time.monotonic() > deadline:
                return report
            time.sleep(0.5)

    # --- internals ---------------------------------------------------------------------------

    def _check(self, meta: Metadata, topics: list[str] | None) -> LogReport:
        report = LogReport(checked_at=time.time(), manifests=len(meta.manifests))
        prefix = f"{self.namespace}/"
        listing = {k.removeprefix(prefix): o for k, o in self.objects.list(prefix).items()}
        wanted = set(meta.topics) if topics is None else set(topics)
        named = {m.object.removeprefix(prefix) for m in meta.manifests.values()}
        segments: dict[tuple[str, int], dict[int, dict[str, StoredObject]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        for key, obj in listing.items():
            m = SEGMENT_KEY.match(key)
            topic = m.group(1) if m else key.split("/", 1)[0]
            snapshot = PRODUCER_SNAPSHOT_KEY.match(key)
            if snapshot and topic in meta.topics:
                state = meta.partitions.get((topic, int(snapshot.group(2))))
                if state is None or state.producer_snapshot != int(snapshot.group(3)):
                    report.unreferenced[prefix + key] = obj
                elif topic in wanted:
                    report.problems += check_snapshot(key, self.objects.get(prefix + key))
                continue
            if WAL_KEY.match(key):
                if key not in named:
                    report.unreferenced[prefix + key] = obj
            elif topic in meta.deletions:
                continue  # still being deleted: the marker refers to it
            elif m is None or topic not in meta.topics:
                report.unreferenced[prefix + key] = obj
            elif topic in wanted:
                segments[(topic, int(m.group(2)))][int(m.group(3))][m.group(4)] = obj
        runs = self._read_runs(meta, wanted, report)
        for topic in sorted(wanted):
            for p in range(int(meta.topics.get(topic, {}).get("partitions", 0))):
                state = meta.partitions.get((topic, p), PartitionState(0, 0, 0, 0))
                self._partition(topic, p, state, segments.get((topic, p), {}), runs, report)
        for topic, p in sorted(set(runs) - set(report.ends)):
            report.problems.append(f"{topic}/{p}: runs of a partition the topic does not have")
        return report

    def _read_runs(self, meta: Metadata, wanted: set[str], report: LogReport) -> dict:
        """{(topic, p): [(run, batches or None)]}: every run of a live topic; the batches of
        those not yet below their partition's segment end (the others are not read: their
        object may already be on its way out, object first, then manifest)."""
        runs: dict[tuple[str, int], list[tuple[Run, list[sf.Batch] | None]]] = defaultdict(list)
        for manifest in meta.manifests.values():
            live = [
                r
                for r in manifest.runs
                if r.topic in wanted and r.topic_id == meta.topic_id(r.topic)
            ]
            needed = [r for r in live if r.last_offset >= wal_start(meta, r)]
            data = self.objects.get(manifest.object) if needed else None
            if needed and data is None:
                report.problems.append(f"{manifest.key}: its object {manifest.object} is missing")
            elif needed:
                report.problems += parse_wal_header(data, manifest)
                report.problems += run_layout_problems(manifest, len(data))
            for run in live:
                batches = None
                if run in needed and data is not None:
                    where = f"{manifest.object} {run.topic}/{run.partition}@{run.base_offset}"
                    batches, problems = run_batches(data, run, where)
                    report.problems += problems
                runs[(run.topic, run.partition)].append((run, batches))
        return runs

    def _partition(self, topic, p, state: PartitionState, segs, runs, report) -> None:
        key = (topic, p)
        where = f"{topic}/{p}"
        mine = sorted(runs.get(key, []), key=lambda rb: rb[0].base_offset)
        end = max([state.high_watermark] + [r.last_offset + 1 for r, _ in mine])
        start, seg_end = state.log_start, state.segment_end
        wal_from = max(seg_end, start)
        report.ends[key] = (start, end)
        report.segment_ends[key] = seg_end
        batches = self._segment_chain(where, start, seg_end, segs, report)
        batches += [b for run, bs in mine if bs and run.last_offset >= wal_from for b in bs]
        log: list[tuple[int, bytes | None]] = []
        epochs: dict[int, int] = {}
        for b in batches:
            for rec in b.records():
                if start <= rec.offset < seg_end or wal_from <= rec.offset < end:
                    log.append((rec.offset, rec.value))
                    epochs[rec.offset] = b.partition_leader_epoch
        offsets = [off for off, _ in log]
        if offsets != list(range(start, end)):
            report.problems.append(f"{where}: {describe_offsets(offsets, start, end)}")
        report.logs[key] = log
        report.epochs[key] = epochs

    def _segment_chain(self, where, start, seg_end, segs, report) -> list[sf.Batch]:
        """The batches of the segments covering [start, seg_end); every other segment object
        of the partition is unreferenced."""
        prefix = f"{self.namespace}/{where}/segment-"
        chain_start = max((b for b in segs if b <= start), default=start)
        batches: list[sf.Batch] = []
        expected = chain_start
        for base in sorted(segs):
            kinds = segs[base]
            if start >= seg_end or base < chain_start or base >= seg_end:
                for kind, obj in kinds.items():
                    report.unreferenced[f"{prefix}{base:020d}.{kind}"] = obj
                continue
            if base != expected:
                report.problems.append(f"{where}: segment at {base}, the chain is at {expected}")
            if set(kinds) != {"kfs", "index"}:
                report.problems.append(f"{where}: segment {base} has only {sorted(kinds)}")
                continue
            seg = self._read_segment(f"{prefix}{base:020d}", report)
            if seg is None:
                return batches
            report.segments += 1
            batches += seg.batches
            expected = seg.last_offset + 1
        if start < seg_end and expected != seg_end:
            report.problems.append(f"{where}: segments reach {expected}, segment_end {seg_end}")
        return batches

    def _read_segment(self, stem: str, report: LogReport) -> sf.Segment | None:
        kfs, index = self.objects.get(f"{stem}.kfs"), self.objects.get(f"{stem}.index")
        if kfs is None or index is None:
            report.problems.append(f"{stem}.kfs: vanished while committed")
            return None
        try:
            seg = sf.parse_segment(kfs)
            sf.check_index(sf.parse_index(index), seg)
        except sf.FormatError as exc:
            report.problems.append(f"{stem}.kfs: {exc}")
            return None
        return seg


def wal_start(meta: Metadata, run: Run) -> int:
    """Where the partition of ``run`` starts reading write-ahead runs."""
    state = meta.partitions.get((run.topic, run.partition), PartitionState(0, 0, 0, 0))
    return max(state.segment_end, state.log_start)


def describe_offsets(offsets: list[int], start: int, end: int) -> str:
    """How ``offsets`` differ from start, start+1, ..., end-1."""
    seen = set(offsets)
    dupes = len(offsets) - len(seen)
    missing = [o for o in range(start, end) if o not in seen]
    extra = sorted(o for o in seen if not start <= o < end)
    parts = [f"offsets should be {start}..{end - 1}"]
    if missing:
        parts.append(f"missing {len(missing)} from {missing[:5]}")
    if dupes:
        parts.append(f"{dupes} offsets stored twice")
    if extra:
        parts.append(f"outside the range {extra[:5]}")
    if not (missing or dupes or extra):
        parts.append("out of order")
    return "; ".join(parts)
