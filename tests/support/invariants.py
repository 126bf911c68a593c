"""The storage invariants (docs/metadata.md, "Invariants"), checked against the whole history
of a run as etcd recorded it: every change under ``/kafscale/{namespace}/`` from revision 1, in
revision order, replayed one revision at a time.

After each revision, for what it changed:

- **manifest deleted too early**: a write-ahead manifest is deleted only once every run in it
  lies below its partition's segment end or log start, or its topic (that incarnation) is gone;
- **segment end / high watermark / log start backwards**: a partition record of one topic
  incarnation never moves any of them back (nor its leader epoch);
- **overlapping runs**: no two runs ever committed for a partition share an offset (each offset
  is committed once, by one writer);
- **commit by a non-owner**: when a manifest appears, each of its runs' partitions has an owner
  key naming the manifest's broker, and the run's leader epoch is the partition record's.

A check reads etcd only (no broker): one watch from revision 1 over the whole key space (the
gateway's JSON stream), read up to the revision etcd had when the watch was created. The test
fixtures' etcd keeps its whole history (no auto-compaction).
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections import defaultdict
from dataclasses import dataclass

from .etcd import EtcdError
from .log_check import Manifest, PartitionState, parse_manifest, parse_partition_state


@dataclass(frozen=True)
class Event:
    revision: int
    key: str
    value: bytes | None  # None: deleted


def history(endpoint: str, prefix: str, timeout: float = 30.0) -> list[Event]:
    """Every change under ``prefix`` from revision 1 up to etcd's revision now, in order."""
    everything = base64.b64encode(b"\0").decode()
    body = {"create_request": {"key": everything, "range_end": everything, "start_revision": 1}}
    request = urllib.request.Request(
        endpoint.rstrip("/") + "/v3/watch",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    events: list[Event] = []
    try:
        with urllib.request.urlopen(request, timeout=timeout) as stream:
            until = None
            reached = 0
            while until is None or reached < until:
                line = stream.readline()
                if not line:
                    raise EtcdError("the watch of etcd's history ended early")
                result = json.loads(line).get("result", {})
                if result.get("created"):
                    until = int(result["header"]["revision"])
                for raw in result.get("events", []):
                    kv = raw["kv"]
                    reached = int(kv["mod_revision"])
                    key = base64.b64decode(kv["key"]).decode()
                    if not key.startswith(prefix):
                        continue
                    deleted = raw.get("type") == "DELETE"
                    value = None if deleted else base64.b64decode(kv.get("value", ""))
                    events.append(Event(reached, key, value))
    except OSError as exc:
        raise EtcdError(f"reading etcd's history at {endpoint}: {exc}") from exc
    return events


class Replay:
    """The key space at one revision, and what the invariants need to remember across
    revisions."""

    def __init__(self, root: str) -> None:
        self.root = root  # /kafscale/{namespace}/
        self.keys: dict[str, bytes] = {}
        self.problems: list[str] = []
        # per (topic id, partition): the largest segment end, high watermark, log start and
        # epoch seen, and every run ever committed as (base, last, manifest key)
        self.seen: dict[tuple[str, int], tuple[int, int, int, int]] = {}
        self.runs: dict[tuple[str, int], list[tuple[int, int, str]]] = defaultdict(list)

    def topic_id(self, topic: str) -> str | None:
        raw = self.keys.get(f"{self.root}topics/{topic}")
        return None if raw is None else str(json.loads(raw).get("id", "")).lower()

    def record(self, topic: str, partition: int) -> PartitionState | None:
        raw = self.keys.get(f"{self.root}partitions/{topic}/{partition}")
        return None if raw is None else parse_partition_state(raw)

    def owner(self, topic: str, partition: int) -> int | None:
        raw = self.keys.get(f"{self.root}partitions/{topic}/{partition}/owner")
        return None if raw is None else int(raw)

    def apply(self, revision: int, events: list[Event]) -> None:
        before = {e.key: self.keys.get(e.key) for e in events}
        for e in events:
            if e.value is None:
                self.keys.pop(e.key, None)
            else:
                self.keys[e.key] = e.value
        for e in events:
            parts = e.key.removeprefix(self.root).split("/")
            if parts[0] == "wal" and len(parts) == 3:
                if e.value is not None and before[e.key] is None:
                    self._manifest_committed(revision, parse_manifest(e.key, e.value))
                elif e.value is None and before[e.key] is not None:
                    self._manifest_deleted(revision, parse_manifest(e.key, before[e.key]))
            elif (
                parts[0] == "partitions"
                and len(parts) == 3
                and parts[2].isdigit()
                and e.value is not None
            ):
                self._record_written(revision, parts[1], int(parts[2]))

    def _manifest_committed(self, revision: int, manifest: Manifest) -> None:
        for run in manifest.runs:
            where = f"rev {revision}: {manifest.key} {run.topic}/{run.partition}"
            if self.topic_id(run.topic) != run.topic_id:
                continue  # the topic went meanwhile: its owner may still flush what it took
            owner = self.owner(run.topic, run.partition)
            if owner != manifest.broker:
                self.problems.append(
                    f"{where}: committed by broker {manifest.broker}, the owner is {owner}"
                )
            record = self.record(run.topic, run.partition)
            if record is not None and record.leader_epoch != run.leader_epoch:
                self.problems.append(
                    f"{where}: run of leader epoch {run.leader_epoch}, the partition is at "
                    f"epoch {record.leader_epoch}"
                )
            committed = self.runs[(run.topic_id, run.partition)]
            for base, last, other in committed:
                if base <= run.last_offset and run.base_offset <= last:
                    self.problems.append(
                        f"{where}: offsets {run.base_offset}..{run.last_offset} overlap "
                        f"{base}..{last} of {other}"
                    )
                    break
            committed.append((run.base_offset, run.last_offset, manifest.key))

    def _manifest_deleted(self, revision: int, manifest: Manifest) -> None:
        for run in manifest.runs:
            if self.topic_id(run.topic) != run.topic_id:
                continue
            record = self.record(run.topic, run.partition)
            if record is None:
                continue  # being deleted with its topic
            if run.last_offset >= max(record.segment_end, record.log_start):
                self.problems.append(
                    f"rev {revision}: {manifest.key} deleted while its run "
                    f"{run.topic}/{run.partition} {run.base_offset}..{run.last_offset} lies at "
                    f"or above the segment end {record.segment_end} (log start "
                    f"{record.log_start})"
                )

    def _record_written(self, revision: int, topic: str, partition: int) -> None:
        topic_id = self.topic_id(topic)
        record = self.record(topic, partition)
        if topic_id is None or record is None:
            return
        now = (record.segment_end, record.high_watermark, record.log_start, record.leader_epoch)
        names = ("segment end", "high watermark", "log start", "leader epoch")
        before = self.seen.get((topic_id, partition))
        if before is not None:
            for name, old, new in zip(names, before, now, strict=True):
                if new < old:
                    self.problems.append(
                        f"rev {revision}: {topic}/{partition}: {name} went back from {old} to {new}"
                    )
        self.seen[(topic_id, partition)] = tuple(
            max(a, b) for a, b in zip(before or now, now, strict=True)
        )


def check_history(endpoint: str, namespace: str) -> list[str]:
    """Every way the run's etcd history breaks the storage invariants (empty: none)."""
    root = f"/kafscale/{namespace}/"
    replay = Replay(root)
    batch: list[Event] = []
    for event in history(endpoint, root):
        if batch and batch[0].revision != event.revision:
            replay.apply(batch[0].revision, batch)
            batch = []
        batch.append(event)
    if batch:
        replay.apply(batch[0].revision, batch)
    return replay.problems
