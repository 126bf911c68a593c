"""Seed request frames for every API and version the broker serves, and mutations of them, for
the bounded fuzz run (tests/integration/test_fuzz.py).

The seeds are encoded by kafka-python's message classes, which are generated from Kafka's own
message definitions (clients/src/main/resources/common/message/*.json) and cover every version,
flexible ones included; nothing here comes from kafscale. Every field gets a plausible value
(one element per array, the fuzz topic and group for names, a real record batch for records),
so that a seed reaches the handler and each mutation lands somewhere the handler reads.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

import kafka.protocol
from kafka.protocol.api_message import ApiMessage

from . import segment_format as sf

# What the broker serves (ApiVersions): api key -> (min version, max version).
SERVED = {
    0: (0, 9),  # Produce
    1: (4, 13),  # Fetch
    2: (0, 4),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (0, 8),  # OffsetCommit
    9: (0, 7),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups
    18: (0, 3),  # ApiVersions
    19: (0, 2),  # CreateTopics
    20: (0, 2),  # DeleteTopics
    23: (0, 4),  # OffsetForLeaderEpoch
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    44: (0, 1),  # IncrementalAlterConfigs
    47: (0, 0),  # OffsetDelete
}
# APIs whose answer may legitimately wait (a long poll, a rebalance, durability) or never come
# (Produce with acks=0): silence from them is not a hang.
MAY_WAIT = {0, 1, 11, 14}

TOPIC = "fuzz-topic"
GROUP = "fuzz-group"
# Integer fields that must not be 0 for the seed to be a real request; the rest are 0.
INTS = {
    "acks": 1,
    "timeout_ms": 1000,
    "num_partitions": 1,
    "replication_factor": -1,
    "count": 2,
    "max_bytes": 1 << 20,
    "partition_max_bytes": 1 << 20,
    "min_bytes": 1,
    "resource_type": 2,  # a topic
    "leader_epoch": -1,
    "current_leader_epoch": -1,
    "timestamp": -1,
    "generation_id": -1,
    "replica_id": -1,
}
INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
_BATCH = sf.build_record_batch([(b"k", b"fuzz", [])], base_timestamp=1_700_000_000_000)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _scalar(kind: str, name: str):
    if kind in INT_TYPES:
        return INTS.get(name, 0)
    if kind == "string":
        if "group" in name:
            return GROUP
        return TOPIC if "topic" in name or name in ("name", "resource_name") else "x"
    return {"bool": False, "bytes": b"", "records": _BATCH, "float64": 0.0}.get(kind)


def _filled(cls, fields: list[dict]):
    values = {}
    for f in fields:
        kind, name = f["type"], _snake(f["name"])
        if kind.startswith("[]"):
            inner = kind[2:]
            struct_cls = getattr(cls, inner, None)
            if struct_cls is not None and "fields" in f:
                values[name] = [_filled(struct_cls, f["fields"])]
            elif _scalar(inner, name) is not None:
                values[name] = [_scalar(inner, name)]
        elif _scalar(kind, name) is not None:
            values[name] = _scalar(kind, name)
        # anything else (a nested struct, a uuid) keeps the class's default
    return cls(**values)


def _request_classes() -> dict[int, type]:
    found = {}
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for attr in vars(module).values():
            if (
                isinstance(attr, type)
                and issubclass(attr, ApiMessage)
                and getattr(attr, "_json", None)
                and attr.is_request()
            ):
                found[attr.API_KEY] = attr
    return found


@dataclass(frozen=True)
class Seed:
    api_key: int
    version: int
    frame: bytes  # length-prefixed, header included


def seeds() -> list[Seed]:
    """One valid frame per served (API, version)."""
    classes = _request_classes()
    out = []
    for key, (low, high) in SERVED.items():
        cls = classes[key]
        for version in range(low, high + 1):
            message = _filled(cls[version], cls.json["fields"])
            message.with_header(correlation_id=version + 1, client_id="fuzz")
            out.append(Seed(key, version, bytes(message.encode(header=True, framed=True))))
    return out


# --- mutations: each takes (rng, frame) and returns (frame, whether its length prefix is honest)


def _reframe(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def flip_bits(rng: random.Random, frame: bytes) -> tuple[bytes, bool]:
    body = bytearray(frame[4:])
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(body))
        body[at] ^= 1 << rng.randrange(8)
    return _reframe(bytes(body)), True


def truncate(rng: random.Random, frame: bytes) -> tuple[bytes, bool]:
    return _reframe(frame[4 : 4 + rng.randrange(len(frame) - 4)]), True


def lie_about_length(rng: random.Random, frame: bytes) -> tuple[bytes, bool]:
    honest = len(frame) - 4
    told = rng.choice([0, 1, honest - 1, honest // 2, -1, -(2**31), 2**31 - 1, honest + 1])
    return struct.pack(">i", told) + frame[4:], False


def lie_about_counts(rng: random.Random, frame: bytes) -> tuple[bytes, bool]:
    """An int32 array count or length (a small value in the seed) becomes huge or negative; or
    a compact (uvarint) one becomes the largest a varint can say."""
    body = bytearray(frame[4:])
    small = [i for i in range(8, len(body) - 3) if 0 <= struct.unpack_from(">i", body, i)[0] < 8]
    if small and rng.random() < 0.7:
        at = rng.choice(small)
        struct.pack_into(">i", body, at, rng.choice([-2, -1, 2**31 - 1, 2**20, 2**16 + 1]))
        return _reframe(bytes(body)), True
    at = rng.randrange(8, len(body))
    return _reframe(bytes(body[:at]) + b"\xff\xff\xff\xff\x0f" + bytes(body[at + 1 :])), True


def random_bytes(rng: random.Random, frame: bytes) -> tuple[bytes, bool]:
    """A span replaced, or everything after the fixed header part (api key, version,
    correlation id) random."""
    body = bytearray(frame[4:])
    if rng.random() < 0.5:
        at = rng.randrange(len(body))
        span = rng.randint(1, 16)
        body[at : at + span] = rng.randbytes(span)
    else:
        body = body[:8] + rng.randbytes(rng.randint(0, 64))
    return _reframe(bytes(body)), True


def other_version_or_api(rng: random.Random, frame: bytes) -> tuple[bytes, bool]:
    """A valid body under another version (flexible or not) or another API's key."""
    body = bytearray(frame[4:])
    if rng.random() < 0.5:
        struct.pack_into(">h", body, 2, rng.randint(-1, 20))
    else:
        struct.pack_into(">h", body, 0, rng.choice([*SERVED, 4, 22, 60, 1000, -1]))
    return _reframe(bytes(body)), True


MUTATIONS: list[Callable[[random.Random, bytes], tuple[bytes, bool]]] = [
    flip_bits,
    truncate,
    lie_about_length,
    lie_about_counts,
    random_bytes,
    other_version_or_api,
]
