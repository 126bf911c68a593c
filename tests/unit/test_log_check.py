"""The independent log checker (support/log_check.py) on hand-built metadata, write-ahead
objects and segments: it rebuilds the committed log from both kinds of object and names every
way the stored state can be wrong, so a clean report after a fault run means something."""

from __future__ import annotations

import json

from support import log_check as lc
from support import segment_format as sf

NS = "default"
ROOT = f"/kafscale/{NS}/"
TOPIC_ID = "0b0e7c2a-1111-4222-8333-444455556666"
OLD_ID = "99999999-1111-4222-8333-444455556666"


class MemoryObjects:
    """An object store in a dict (unit tests only)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.modified: dict[str, float] = {}

    def put(self, key: str, data: bytes, modified: float = 0.0) -> None:
        self.data[key] = data
        self.modified[key] = modified

    def list(self, prefix: str) -> dict[str, lc.StoredObject]:
        return {
            k: lc.StoredObject(len(v), self.modified[k])
            for k, v in self.data.items()
            if k.startswith(prefix)
        }

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)


def batch(base: int, n: int, epoch: int = 1, tag: str = "v") -> bytes:
    return sf.build_record_batch(
        [(None, f"{tag}{base + i}".encode(), []) for i in range(n)],
        base_offset=base,
        partition_leader_epoch=epoch,
        base_timestamp=1_700_000_000_000 + base,
    )


class World:
    """Metadata entries and objects of one namespace, built up by a test."""

    def __init__(self, partitions: int = 2) -> None:
        self.meta: dict[str, bytes] = {}
        self.objects = MemoryObjects()
        self.seq = 0
        self.topic("orders", partitions)

    def topic(self, name: str, partitions: int, topic_id: str = TOPIC_ID) -> None:
        doc = {"name": name, "id": topic_id, "partitions": partitions, "configs": {}}
        self.meta[f"{ROOT}topics/{name}"] = json.dumps(doc).encode()

    def partition(self, p: int, hwm: int, segment_end: int | None = None, start: int = 0):
        doc = {
            "leader_epoch": 1,
            "epoch_history": [{"epoch": 1, "start_offset": 0}],
            "log_start_offset": start,
            "high_watermark": hwm,
        }
        if segment_end is not None:
            doc["segment_end"] = segment_end
        self.meta[f"{ROOT}partitions/orders/{p}"] = json.dumps(doc).encode()
        self.meta[f"{ROOT}partitions/orders/{p}/owner"] = b"1"

    def segment(self, p: int, batches: list[bytes], topic: str = "orders") -> str:
        seg = sf.build_segment(batches)
        parsed = sf.parse_segment(seg)
        stem = f"{NS}/{topic}/{p}/segment-{parsed.base_offset:020d}"
        self.objects.put(stem + ".kfs", seg)
        self.objects.put(stem + ".index", sf.build_index(sf.expected_index_entries(parsed, 100)))
        return stem

    def wal(self, runs: list[tuple], *, commit: bool = True, topic_id: str = TOPIC_ID) -> str:
        """A write-ahead object of ``runs`` = [(partition, epoch, [batch bytes])] (and its
        manifest when ``commit``); returns the object key."""
        name = f"00112233aabbccdd-{self.seq:012d}"
        self.seq += 1
        key = f"{NS}/!wal/1/{name}.wal"
        body = bytearray(lc.WAL_HEADER.pack(lc.WAL_MAGIC, 1, 0, 1_700_000_000_000, 1, 0))
        listed = []
        for p, epoch, batches in runs:
            data = b"".join(batches)
            parsed = [sf.parse_batch(b, 0) for b in batches]
            first, last = parsed[0].base_offset, parsed[-1].last_offset
            max_ts = max(b.max_timestamp for b in parsed)
            listed.append([p, epoch, first, last, len(body), len(data), max_ts])
            body += data
        self.objects.put(key, bytes(body))
        if commit:
            manifest = {
                "object": key,
                "broker": 1,
                "created_ms": 1_700_000_000_000,
                "size": len(body),
                "topics": [{"topic": "orders", "id": topic_id, "runs": listed}],
            }
            self.meta[f"{ROOT}wal/1/{name}"] = json.dumps(manifest).encode()
        return key

    def check(self) -> lc.LogReport:
        return lc.LogChecker(lambda: dict(self.meta), self.objects, NS).check()


def values(report: lc.LogReport, p: int) -> list[tuple[int, bytes]]:
    return report.records("orders", p)


def expect(first: int, last: int) -> list[tuple[int, bytes]]:
    return [(o, f"v{o}".encode()) for o in range(first, last + 1)]


def test_segments_then_runs_of_shared_objects():
    w = World()
    w.segment(0, [batch(0, 3), batch(3, 2)])
    w.partition(0, hwm=5, segment_end=5)
    w.partition(1, hwm=0, segment_end=0)
    w.wal([(0, 1, [batch(5, 2)]), (1, 1, [batch(0, 4)])])
    w.wal([(1, 1, [batch(4, 1), batch(5, 3)]), (0, 1, [batch(7, 1)])])
    report = w.check()
    assert report.problems == [] and report.unreferenced == {}
    assert values(report, 0) == expect(0, 7) and values(report, 1) == expect(0, 7)
    assert report.ends == {("orders", 0): (0, 8), ("orders", 1): (0, 8)}
    assert report.manifests == 2 and report.segments == 1
    assert report.summary()["in_wal"] == 3 + 8


def test_record_without_segment_end_is_all_segments():
    """Records of brokers before issue 13: segment_end = high watermark."""
    w = World(partitions=1)
    w.segment(0, [batch(0, 2)])
    w.segment(0, [batch(2, 3)])
    w.partition(0, hwm=5)
    report = w.check()
    assert report.problems == [] and values(report, 0) == expect(0, 4)


def test_compacted_runs_are_not_read_and_their_objects_may_be_gone():
    """A manifest whose runs are all below segment_end is deleted object first: its missing
    object is no problem, and its runs are not part of the log."""
    w = World(partitions=1)
    key = w.wal([(0, 1, [batch(0, 2, tag="old")])])
    del w.objects.data[key]
    w.segment(0, [batch(0, 2)])
    w.partition(0, hwm=2, segment_end=2)
    report = w.check()
    assert report.problems == [] and values(report, 0) == expect(0, 1)
    assert report.manifests == 1  # compaction has not caught up yet


def test_missing_object_of_a_needed_run_is_reported():
    w = World(partitions=1)
    w.partition(0, hwm=0, segment_end=0)
    key = w.wal([(0, 1, [batch(0, 2)])])
    del w.objects.data[key]
    report = w.check()
    assert any("is missing" in p for p in report.problems), report.problems
    assert any("missing 2 from [0, 1]" in p for p in report.problems), report.problems


def test_gap_and_overlap_between_runs():
    w = World(partitions=2)
    w.partition(0, hwm=0, segment_end=0)
    w.partition(1, hwm=0, segment_end=0)
    w.wal([(0, 1, [batch(0, 2)]), (1, 1, [batch(0, 2)])])
    w.wal([(0, 1, [batch(3, 1)]), (1, 1, [batch(1, 2)])])
    problems = w.check().problems
    assert any(p.startswith("orders/0") and "missing 1 from [2]" in p for p in problems)
    assert any(p.startswith("orders/1") and "stored twice" in p for p in problems)


def test_runs_must_match_their_manifest():
    w = World(partitions=1)
    w.partition(0, hwm=0, segment_end=0)
    key = w.wal([(0, 2, [batch(0, 2, epoch=1)])])  # manifest says epoch 2
    problems = w.check().problems
    assert any("has epoch 1, manifest 2" in p for p in problems), problems
    w.objects.data[key] += b"\0"  # one byte more than the manifest says
    assert any("bytes, manifest says" in p for p in w.check().problems)


def test_bad_header_is_reported():
    w = World(partitions=1)
    w.partition(0, hwm=0, segment_end=0)
    key = w.wal([(0, 1, [batch(0, 1)])])
    w.objects.data[key] = b"XWAL" + w.objects.data[key][4:]
    assert any("header magic b'XWAL'" in p for p in w.check().problems)


def test_committed_end_comes_from_the_runs():
    """The record's high watermark is only a lower bound; a run above it is committed."""
    w = World(partitions=1)
    w.partition(0, hwm=1, segment_end=0)
    w.wal([(0, 1, [batch(0, 4)])])
    report = w.check()
    assert report.ends[("orders", 0)] == (0, 4) and report.problems == []


def test_high_watermark_without_data_is_a_gap():
    w = World(partitions=1)
    w.partition(0, hwm=3, segment_end=0)
    w.wal([(0, 1, [batch(0, 2)])])
    assert any("missing 1 from [2]" in p for p in w.check().problems)


def test_unreferenced_objects():
    w = World(partitions=1)
    w.segment(0, [batch(0, 2)])
    w.partition(0, hwm=4, segment_end=2)
    w.wal([(0, 1, [batch(2, 2)])])
    stray_seg = w.segment(0, [batch(2, 2)])  # compaction output, never committed
    stray_wal = w.wal([(0, 1, [batch(4, 1)])], commit=False)  # PUT, then a crash
    ghost = w.segment(0, [batch(0, 1)], topic="gone")  # a topic that does not exist
    w.segment(0, [batch(0, 1)], topic="leaving")  # being deleted: the marker refers to it
    w.meta[f"{ROOT}deletions/leaving"] = b'{"topic": "leaving"}'
    report = w.check()
    assert report.problems == [] and values(report, 0) == expect(0, 3)
    assert sorted(report.unreferenced) == sorted(
        [stray_seg + ".kfs", stray_seg + ".index", stray_wal, ghost + ".kfs", ghost + ".index"]
    )
    # the sweep leaves a young uncommitted write-ahead object alone for a while
    w.objects.modified[stray_wal] = report.checked_at - 5
    assert stray_wal not in w.check().unswept()
    w.objects.modified[stray_wal] = report.checked_at - lc.WAL_SWEEP_AGE_S - 5
    assert stray_wal in w.check().unswept()


def test_retention_moves_the_start_into_a_segment():
    w = World(partitions=1)
    old = w.segment(0, [batch(0, 2)])
    w.segment(0, [batch(2, 3)])
    w.partition(0, hwm=7, segment_end=5, start=3)
    w.wal([(0, 1, [batch(5, 2)])])
    report = w.check()
    assert report.problems == [] and values(report, 0) == expect(3, 6)
    assert sorted(report.unreferenced) == [old + ".index", old + ".kfs"]


def test_runs_of_a_deleted_topic_id_are_ignored():
    w = World(partitions=1)
    w.partition(0, hwm=0, segment_end=0)
    w.wal([(0, 1, [batch(0, 3, tag="old")])], topic_id=OLD_ID)
    w.wal([(0, 1, [batch(0, 1)])])
    report = w.check()
    assert report.problems == [] and values(report, 0) == expect(0, 0)


def test_segment_chain_must_reach_segment_end():
    w = World(partitions=1)
    w.segment(0, [batch(0, 2)])
    w.segment(0, [batch(3, 2)])
    w.partition(0, hwm=5, segment_end=5)
    problems = w.check().problems
    assert any("segment at 3, the chain is at 2" in p for p in problems), problems


def test_acked_values_are_looked_up_in_the_objects():
    w = World(partitions=1)
    w.partition(0, hwm=0, segment_end=0)
    w.wal([(0, 1, [batch(0, 2)])])
    report = w.check()
    assert report.acked_problems("orders", {b"v0": (0, 0), b"v1": (0, 1)}) == []
    wrong = report.acked_problems("orders", {b"v1": (0, 0), b"v9": (0, 9)})
    assert len(wrong) == 2 and "holds b'v0'" in wrong[0] and "no record" in wrong[1]


def test_an_ack_without_offset_needs_the_value_in_its_partition():
    w = World(partitions=2)
    for p in (0, 1):
        w.partition(p, hwm=0, segment_end=0)
    w.wal([(0, 1, [batch(0, 2)])])
    report = w.check()
    assert report.acked_problems("orders", {b"v1": (0, None)}) == []
    wrong = report.acked_problems("orders", {b"v1": (1, None), b"v9": (0, None)})
    assert len(wrong) == 2 and all("not in that partition" in line for line in wrong)
