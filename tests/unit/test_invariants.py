"""The storage-invariant checker (support/invariants) finds each kind of violation in a made-up
history, and none in a clean one; its history reader sees etcd's changes in revision order."""

from __future__ import annotations

import json

import pytest
from support.invariants import Event, Replay, history

ROOT = "/kafscale/ns/"
TOPIC_ID = "00000000-0000-0000-0000-0000000000aa"


def topic(name: str = "t") -> tuple[str, bytes]:
    return f"{ROOT}topics/{name}", json.dumps({"name": name, "id": TOPIC_ID}).encode()


def record(p: int, *, end: int, hwm: int, epoch: int = 1, start: int = 0) -> tuple[str, bytes]:
    doc = {
        "leader_epoch": epoch,
        "epoch_history": [],
        "log_start_offset": start,
        "high_watermark": hwm,
        "segment_end": end,
    }
    return f"{ROOT}partitions/t/{p}", json.dumps(doc).encode()


def owner(p: int, broker: int) -> tuple[str, bytes]:
    return f"{ROOT}partitions/t/{p}/owner", str(broker).encode()


def manifest(seq: int, broker: int, runs: list[tuple[int, int, int, int]]) -> tuple[str, bytes]:
    """runs: (partition, epoch, base, last)."""
    doc = {
        "object": f"ns/!wal/{broker}/ab-{seq:012}.wal",
        "broker": broker,
        "created_ms": 0,
        "size": 100,
        "topics": [
            {
                "topic": "t",
                "id": TOPIC_ID,
                "runs": [[p, e, b, last, 24, 10, 0] for p, e, b, last in runs],
            }
        ],
    }
    return f"{ROOT}wal/{broker}/ab-{seq:012}", json.dumps(doc).encode()


def replay(*revisions: list[tuple[str, bytes | None]]) -> list[str]:
    r = Replay(ROOT)
    for rev, changes in enumerate(revisions, start=1):
        r.apply(rev, [Event(rev, key, value) for key, value in changes])
    return r.problems


def deleted(kv: tuple[str, bytes]) -> tuple[str, None]:
    return kv[0], None


def claimed(p: int = 0, broker: int = 1) -> list[tuple[str, bytes | None]]:
    return [record(p, end=0, hwm=0), owner(p, broker)]


def test_a_clean_history_breaks_nothing():
    m1 = manifest(1, 1, [(0, 1, 0, 9)])
    m2 = manifest(2, 1, [(0, 1, 10, 19)])
    assert not replay(
        [topic()],
        claimed(),
        [m1],
        [m2],
        [record(0, end=10, hwm=20)],  # compaction past the first run
        [deleted(m1)],
    )


def test_a_manifest_deleted_while_its_run_is_above_the_segment_end():
    m1 = manifest(1, 1, [(0, 1, 0, 9)])
    problems = replay([topic()], claimed(), [m1], [record(0, end=5, hwm=10)], [deleted(m1)])
    assert len(problems) == 1 and "deleted while its run" in problems[0]


@pytest.mark.parametrize(
    ("before", "after", "name"),
    [
        ({"end": 10, "hwm": 20}, {"end": 5, "hwm": 20}, "segment end"),
        ({"end": 10, "hwm": 20}, {"end": 10, "hwm": 14}, "high watermark"),
        ({"end": 10, "hwm": 20, "start": 4}, {"end": 10, "hwm": 20}, "log start"),
        ({"end": 0, "hwm": 0, "epoch": 3}, {"end": 0, "hwm": 0, "epoch": 2}, "leader epoch"),
    ],
)
def test_a_partition_record_moving_back(before, after, name):
    problems = replay([topic()], [record(0, **before)], [record(0, **after)])
    assert len(problems) == 1 and f"{name} went back" in problems[0]


def test_overlapping_runs():
    problems = replay(
        [topic()],
        claimed(),
        [manifest(1, 1, [(0, 1, 0, 9)])],
        [manifest(2, 1, [(0, 1, 9, 12)])],
    )
    assert len(problems) == 1 and "overlap" in problems[0]


def test_a_commit_by_a_broker_that_does_not_own_the_partition():
    problems = replay([topic()], claimed(broker=2), [manifest(1, 1, [(0, 1, 0, 9)])])
    assert len(problems) == 1 and "the owner is 2" in problems[0]


def test_a_run_of_an_epoch_the_partition_left():
    problems = replay(
        [topic()],
        [record(0, end=0, hwm=0, epoch=2), owner(0, 1)],
        [manifest(1, 1, [(0, 1, 0, 9)])],
    )
    assert len(problems) == 1 and "epoch 1" in problems[0]


def test_runs_of_a_topic_deleted_meanwhile_are_not_held_against_it():
    assert not replay([topic()], claimed(), [deleted(topic())], [manifest(1, 1, [(0, 1, 0, 9)])])


def test_the_history_is_read_from_etcd_in_revision_order(etcd):
    client = etcd.client()
    client.put(f"{ROOT}a", b"1")
    client.put("/elsewhere/x", b"1")
    client.put(f"{ROOT}b", b"2")
    client.delete_prefix(f"{ROOT}a")
    events = history(etcd.endpoint, ROOT)
    assert [(e.key, e.value) for e in events] == [
        (f"{ROOT}a", b"1"),
        (f"{ROOT}b", b"2"),
        (f"{ROOT}a", None),
    ]
    assert [e.revision for e in events] == sorted(e.revision for e in events)
