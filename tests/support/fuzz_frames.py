"""Seed request frames for every API and version the broker serves, and mutations of them, for
the bounded fuzz run (tests/integration/test_fuzz.py).

What is served is asked of the broker under test (ApiVersions, ``served_apis``): nothing here
lists APIs or versions. The seeds are encoded by kafka-python's message classes, which are
generated from Kafka's own message definitions (clients/src/main/resources/common/message/*.json)
and cover every version, flexible ones included; nothing here comes from kafscale. An API (or a
version) newer than the installed kafka-python knows gets no seed, which the seed test reports;
the fix is Kafka's definition of the request (``<Name>Request.json``, copied unchanged from
Kafka's source tree) placed next to this file: kafka-python builds the message class from it
(its ``load_json`` class option), and it takes precedence over kafka-python's own.

Every field gets a plausible value (one element per array, the fuzz topic and group for names,
a real record batch for records, the definition's default where it has one), so that a seed
reaches the handler and each mutation lands somewhere the handler reads.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import random
import re
import struct
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import kafka.protocol
from kafka.protocol.api_message import ApiMessage

from . import kafka_wire as kw
from . import segment_format as sf

# APIs whose answer may legitimately wait (a long poll, a rebalance, durability) or never come
# (Produce with acks=0): silence from them is not a hang.
MAY_WAIT = {0, 1, 11, 14}
# Keys no Kafka API has (besides the real APIs the broker does not serve).
INVALID_KEYS = [-1, 1000, 32767]

TOPIC = "fuzz-topic"
GROUP = "fuzz-group"
# Integer fields that must not be 0 for the seed to be a real request; the others take the
# definition's default, else 0.
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
    "mechanism": 1,  # SCRAM-SHA-256 (the SCRAM credential APIs)
    "iterations": 4096,
}
# Strings that are null in a plain request where the API lets them be (an idempotent producer's
# InitProducerId and Produce); where they may not be null (EndTxn, TxnOffsetCommit) they are
# filled like any other.
NULLS = {"transactional_id"}
INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
_BATCH = sf.build_record_batch([(b"k", b"fuzz", [])], base_timestamp=1_700_000_000_000)

Served = dict[int, tuple[int, int]]  # api key -> (min version, max version)


def served_apis(bootstrap: str) -> Served:
    """What the broker at ``bootstrap`` advertises in ApiVersions."""
    with kw.RawConnection.to(bootstrap) as conn:
        response = kw.api_versions(conn)
    assert response.error_code == kw.NONE, response
    return response.apis


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
        elif name in NULLS and "nullableVersions" in f:
            values[name] = None
        elif "default" in f and name not in INTS:
            pass  # the class has it
        elif _scalar(kind, name) is not None:
            values[name] = _scalar(kind, name)
        # anything else (a nested struct, a uuid) keeps the class's default
    return cls(**values)


@functools.cache
def request_classes() -> dict[int, type]:
    """Every request kafka-python has a message class for, by api key; a definition placed next
    to this file replaces kafka-python's class for its API."""
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
    here = sys.modules[__package__]  # load_json reads <name>.json from this package
    for definition in sorted(Path(__file__).parent.glob("*Request.json")):
        cls = types.new_class(
            definition.stem,
            (ApiMessage,),
            {"load_json": here},
            lambda ns: ns.update(__module__=__name__),
        )
        found[cls.API_KEY] = cls
    return found


@dataclass(frozen=True)
class Seed:
    api_key: int
    version: int
    frame: bytes  # length-prefixed, header included


def seeds(served: Served) -> tuple[list[Seed], list[tuple[int, int]]]:
    """One valid frame per served (API, version), and the served (API, version) pairs that
    have none (no message class knows them)."""
    classes = request_classes()
    out, missing = [], []
    for key, (low, high) in sorted(served.items()):
        cls = classes.get(key)
        for version in range(low, high + 1):
            if cls is None or version > cls.max_version:
                missing.append((key, version))
                continue
            message = _filled(cls[version], cls.json["fields"])
            message.with_header(correlation_id=version + 1, client_id="fuzz")
            out.append(Seed(key, version, bytes(message.encode(header=True, framed=True))))
    return out, missing


def known_apis() -> Served:
    """Every request and version the message classes know (served or not)."""
    return {key: (0, cls.max_version) for key, cls in request_classes().items()}


def unserved_keys(served: Served) -> list[int]:
    """Api keys the broker does not serve: real APIs it leaves out, and keys no API has."""
    return sorted(set(request_classes()) - set(served)) + INVALID_KEYS


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


Mutation = Callable[[random.Random, bytes], tuple[bytes, bool]]


def mutations(served: Served) -> list[Mutation]:
    """The mutations, for a broker serving ``served``."""
    served_keys, unserved = sorted(served), unserved_keys(served)

    def other_version_or_api(rng: random.Random, frame: bytes) -> tuple[bytes, bool]:
        """A valid body under another version (flexible or not, served or not), or under
        another API's key: one served, or one the broker does not serve."""
        body = bytearray(frame[4:])
        if rng.random() < 0.5:
            struct.pack_into(">h", body, 2, rng.randint(-1, 20))
        else:
            keys = served_keys if rng.random() < 0.67 else unserved
            struct.pack_into(">h", body, 0, rng.choice(keys))
        return _reframe(bytes(body)), True

    return [
        flip_bits,
        truncate,
        lie_about_length,
        lie_about_counts,
        random_bytes,
        other_version_or_api,
    ]
