"""etcd v3 seen from the tests, through etcd's JSON gateway (etcd 3.4: POST /v3/kv/range, ...).

No etcdctl and no client library: urllib, JSON and base64 (keys and values travel as base64).
``ClusterMeta`` reads KafScale's key schema (docs/metadata.md) on top of it.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


class EtcdError(Exception):
    """etcd did not answer, or answered with an error."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text or "")


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that makes a range request cover every key starting with ``prefix``."""
    data = bytearray(prefix)
    while data:
        if data[-1] < 0xFF:
            data[-1] += 1
            return bytes(data)
        data.pop()
    return b"\0"  # every key


class EtcdClient:
    """The few etcd calls the tests need, over HTTP."""

    def __init__(self, endpoint: str, timeout: float = 5.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.endpoint + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EtcdError(f"etcd {path} at {self.endpoint}: {exc}") from exc

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/health", timeout=self.timeout) as resp:
                return json.loads(resp.read()).get("health") == "true"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    # --- keys --------------------------------------------------------------------------------

    def range(self, prefix: str) -> dict[str, bytes]:
        """Every key starting with ``prefix`` (key order) and its value."""
        raw = prefix.encode()
        doc = self._post("/v3/kv/range", {"key": _b64(raw), "range_end": _b64(prefix_end(raw))})
        return {_unb64(kv["key"]).decode(): _unb64(kv.get("value")) for kv in doc.get("kvs", [])}

    def leases_of(self, prefix: str) -> dict[str, int]:
        """{key: lease id} for every key starting with ``prefix`` (0: not lease-bound)."""
        raw = prefix.encode()
        doc = self._post(
            "/v3/kv/range",
            {"key": _b64(raw), "range_end": _b64(prefix_end(raw)), "keys_only": True},
        )
        return {_unb64(kv["key"]).decode(): int(kv.get("lease", 0)) for kv in doc.get("kvs", [])}

    def get(self, key: str) -> bytes | None:
        doc = self._post("/v3/kv/range", {"key": _b64(key.encode())})
        kvs = doc.get("kvs", [])
        return _unb64(kvs[0].get("value")) if kvs else None

    def put(self, key: str, value: bytes, lease: int = 0) -> None:
        body: dict[str, Any] = {"key": _b64(key.encode()), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        self._post("/v3/kv/put", body)

    def delete_prefix(self, prefix: str) -> int:
        raw = prefix.encode()
        doc = self._post(
            "/v3/kv/deleterange", {"key": _b64(raw), "range_end": _b64(prefix_end(raw))}
        )
        return int(doc.get("deleted", 0))

    # --- leases ------------------------------------------------------------------------------

    def leases(self) -> list[int]:
        doc = self._post("/v3/lease/leases", {})
        return [int(lease["ID"]) for lease in doc.get("leases", [])]

    def lease_revoke(self, lease_id: int) -> None:
        self._post("/v3/lease/revoke", {"ID": str(lease_id)})

    def lease_ttl(self, lease_id: int) -> int:
        """Seconds left on a lease (-1 once it is gone)."""
        doc = self._post("/v3/lease/timetolive", {"ID": str(lease_id)})
        return int(doc.get("TTL", -1))

    # --- server ------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """The Prometheus text of /metrics as {series: value}, labels included in the name."""
        try:
            with urllib.request.urlopen(self.endpoint + "/metrics", timeout=self.timeout) as r:
                text = r.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            raise EtcdError(f"etcd /metrics at {self.endpoint}: {exc}") from exc
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
        return out


@dataclass
class PartitionRecord:
    """/partitions/{topic}/{p}: the partition's committed state."""

    leader_epoch: int
    epoch_history: list[tuple[int, int]]  # (epoch, start offset), oldest first
    log_start_offset: int
    high_watermark: int  # since issue 13 a lower bound of the committed end (support/log_check)
    segment_end: int = 0  # offsets below it are in committed .kfs segments


class ClusterMeta:
    """KafScale's keys in etcd (docs/metadata.md) for one namespace."""

    def __init__(self, client: EtcdClient, namespace: str = "default") -> None:
        self.client = client
        self.root = f"/kafscale/{namespace}"

    def topic_key(self, topic: str) -> str:
        return f"{self.root}/topics/{topic}"

    def partition_key(self, topic: str, partition: int) -> str:
        return f"{self.root}/partitions/{topic}/{partition}"

    def owner_key(self, topic: str, partition: int) -> str:
        return f"{self.partition_key(topic, partition)}/owner"

    def deletion_key(self, topic: str) -> str:
        return f"{self.root}/deletions/{topic}"

    def topic(self, topic: str) -> dict[str, Any] | None:
        raw = self.client.get(self.topic_key(topic))
        return None if raw is None else json.loads(raw)

    def brokers(self) -> dict[int, dict[str, Any]]:
        """Registered (live) brokers: {id: record}."""
        prefix = f"{self.root}/brokers/"
        out = {}
        for key, value in self.client.range(prefix).items():
            doc = json.loads(value)
            out[int(doc.get("id", key.removeprefix(prefix)))] = doc
        return out

    def partition(self, topic: str, partition: int) -> PartitionRecord | None:
        raw = self.client.get(self.partition_key(topic, partition))
        if raw is None:
            return None
        return parse_partition_record(raw)

    def partitions(self, topic: str) -> dict[int, PartitionRecord]:
        """Every partition record of ``topic`` (owner keys left out)."""
        prefix = f"{self.root}/partitions/{topic}/"
        out = {}
        for key, value in self.client.range(prefix).items():
            rest = key.removeprefix(prefix)
            if rest.isdigit():
                out[int(rest)] = parse_partition_record(value)
        return out

    def owners(self, topic: str) -> dict[int, int]:
        """{partition: owning broker id} for the partitions that have an owner key."""
        prefix = f"{self.root}/partitions/{topic}/"
        out = {}
        for key, value in self.client.range(prefix).items():
            part, _, leaf = key.removeprefix(prefix).partition("/")
            if leaf == "owner" and part.isdigit():
                out[int(part)] = parse_owner(value)
        return out

    def keys_of_topic(self, topic: str) -> list[str]:
        """Every key that belongs to ``topic``: its record, partitions, owners, deletion marker."""
        keys = list(self.client.range(f"{self.root}/partitions/{topic}/"))
        for key in (self.topic_key(topic), self.deletion_key(topic)):
            if self.client.get(key) is not None:
                keys.append(key)
        return sorted(keys)


def parse_partition_record(raw: bytes) -> PartitionRecord:
    doc = json.loads(raw)
    history = [(int(e["epoch"]), int(e["start_offset"])) for e in doc.get("epoch_history", [])]
    return PartitionRecord(
        leader_epoch=int(doc["leader_epoch"]),
        epoch_history=history,
        log_start_offset=int(doc.get("log_start_offset", 0)),
        high_watermark=int(doc["high_watermark"]),
        segment_end=int(doc.get("segment_end", doc["high_watermark"])),
    )


def parse_owner(raw: bytes) -> int:
    """An owner key holds the broker id (plain number; a JSON object with an id is accepted)."""
    doc = json.loads(raw)
    if isinstance(doc, dict):
        doc = doc.get("broker_id", doc.get("id"))
    return int(doc)


def wait_healthy(client: EtcdClient, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.healthy():
            return True
        time.sleep(0.1)
    return False
