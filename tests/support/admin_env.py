"""Shared set-up of the ops/admin API tests (test_admin_*.py): the brokers they run against (one
broker, or three sharing etcd and a moto bucket: the ``genv`` fixture), their settings, and
helpers to read topics, configs and offsets from every broker.

Brokers run with short retention checks (200 ms), explicit cache/readahead/segment/retention
defaults (so DescribeConfigs can be checked against them), 3 partitions for -1 and no topic
auto-creation (kcat -L of a deleted topic must not create it again).
"""

from __future__ import annotations

import contextlib
import re
import subprocess

import pytest

from . import admin_wire as aw
from . import kafka_wire as kw
from .admin_clients import ADMINS, Admin
from .clients import Msg, confluent_produce
from .cluster import (
    METADATA_VERSION,
    create_topic,
)
from .group_env import HANG_GUARD, ClusterNodes, GroupEnv, SingleNode
from .load import wait_for
from .procs import Broker

HOUR_MS = 3_600_000
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
CACHE_BYTES = 32 * 1024 * 1024
READAHEAD = 3
DEFAULT_PARTITIONS = 3
FLUSH_MS = 50
ARGS = [
    "--group-initial-rebalance-delay-ms",
    "300",
    "--retention-ms",
    str(HOUR_MS),
    "--retention-check-interval-ms",
    "200",
    "--segment-bytes",
    str(DEFAULT_SEGMENT_BYTES),
    "--cache-bytes",
    str(CACHE_BYTES),
    "--readahead-segments",
    str(READAHEAD),
    "--default-partitions",
    str(DEFAULT_PARTITIONS),
    "--no-auto-create-topics",
]
SETTLE_S = 30.0  # liveness guard for what lags (retention passes, background deletes)

ADMIN_KINDS = list(ADMINS)
TOPIC_KEYS = {"retention.ms", "retention.bytes", "segment.bytes"}
TOPIC_WHITELIST = TOPIC_KEYS | {
    "max.message.bytes",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "segment.ms",
    "message.timestamp.type",
}
BROKER_KEYS = {
    "broker.id",
    "advertised.listeners",
    "kafscale.s3.bucket",
    "kafscale.s3.region",
    "kafscale.s3.endpoint",
    "kafscale.cache.bytes",
    "kafscale.readahead.segments",
    "kafscale.segment.bytes",
    "kafscale.flush.interval.ms",
}
DEFAULT_SOURCES = {"DEFAULT_CONFIG", "STATIC_BROKER_CONFIG"}  # not overridden on the topic
TOPIC_OVERRIDE = "DYNAMIC_TOPIC_CONFIG"
BAD_TOPIC_CONFIGS = [
    {"cleanup.policy": "shred"},  # delete and compact are the policies
    {"min.cleanable.dirty.ratio": "2"},
    {"retention.ms": "-5"},
    {"retention.bytes": "-2"},
    {"segment.bytes": "0"},
    {"retention.ms": "ten minutes"},
]


@pytest.fixture(scope="module", params=["single", "cluster"])
def genv(request, module_broker_factory):
    """One broker (embedded metadata store, local segments) or three brokers sharing etcd and a
    moto bucket."""
    if request.param == "single":
        broker = module_broker_factory(ARGS, name="single", flush_interval_ms=FLUSH_MS)
        yield SingleNode(broker)
        broker.cleanup()
    else:
        make = request.getfixturevalue("module_cluster")
        yield ClusterNodes(make(3, args=ARGS, flush_interval_ms=FLUSH_MS))


def log(genv: GroupEnv, what: str) -> None:
    print(f"[admin/{genv.kind}] {what}")


@contextlib.contextmanager
def open_admin(genv: GroupEnv, kind: str):
    admin: Admin = ADMINS[kind](genv.bootstrap())
    try:
        yield admin
    finally:
        admin.close()


def node_ids(genv: GroupEnv) -> dict[int, Broker]:
    """{node id: broker} of the live brokers, as Metadata names them (single node: id 0)."""
    with kw.RawConnection.to(genv.live[0].bootstrap, timeout=10) as conn:
        md = kw.metadata(conn, [], version=METADATA_VERSION, allow_auto_topic_creation=False)
    by_addr = {b.bootstrap: b for b in genv.live}
    out = {node: by_addr[f"{host}:{port}"] for node, host, port in md.brokers}
    assert len(out) == len(genv.live), f"Metadata lists {md.brokers}, live {list(by_addr)}"
    return out


def produce(genv: GroupEnv, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    msgs = [
        Msg(p, None, f"{tag}-{p}-{i}".encode())
        for i in range(per_partition)
        for p in range(partitions)
    ]
    confluent_produce(genv.bootstrap(), topic, msgs)


def partition_counts(genv: GroupEnv, topic: str) -> dict[str, int | None]:
    """{broker name: partitions of ``topic`` in its Metadata (None: unknown topic)}; every
    partition listed must have a live leader."""
    ids = set(node_ids(genv))
    out: dict[str, int | None] = {}
    for b in genv.live:
        with kw.RawConnection.to(b.bootstrap, timeout=10) as conn:
            md = kw.metadata(
                conn, [topic], version=METADATA_VERSION, allow_auto_topic_creation=False
            )
        tm = md.topics[topic]
        if tm.error_code == kw.UNKNOWN_TOPIC_OR_PARTITION:
            out[b.name] = None
            continue
        assert tm.error_code == kw.NONE, f"{b.name}: Metadata {topic}: {tm}"
        assert [p.partition for p in tm.partitions] == list(range(len(tm.partitions))), tm
        for p in tm.partitions:
            assert p.error_code == kw.NONE and p.leader in ids, f"{b.name}: {topic}/{p}"
        out[b.name] = len(tm.partitions)
    return out


def make_topic(genv: GroupEnv, topic: str, partitions: int, configs: dict[str, str] | None = None):
    """CreateTopics (confluent-kafka) with ``configs``; returns once every broker knows it."""
    create_topic(genv.bootstrap(), topic, partitions, configs)
    wait_partition_counts(genv, topic, partitions)
    return topic


def everywhere(genv: GroupEnv, value) -> dict[str, object]:
    return {b.name: value for b in genv.live}


def wait_partition_counts(genv: GroupEnv, topic: str, want: int | None) -> None:
    wait_for(
        lambda: partition_counts(genv, topic) == everywhere(genv, want),
        SETTLE_S,
        f"every broker to show {topic} with {want} partitions ({partition_counts(genv, topic)})",
    )


KCAT_TOPIC = re.compile(r'topic "(?P<name>[^"]+)" with (?P<n>\d+) partitions:(?P<rest>.*)')


def kcat_partitions(bootstrap: str, topic: str) -> int | None:
    """Partitions of ``topic`` as ``kcat -L -t`` shows them; None when it reports an error."""
    proc = subprocess.run(
        ["kcat", "-L", "-b", bootstrap, "-t", topic, "-m", "30"],
        capture_output=True,
        timeout=HANG_GUARD,
    )
    text = proc.stdout.decode()
    assert proc.returncode == 0, f"kcat -L failed ({proc.returncode}): {proc.stderr!r}"
    for line in text.splitlines():
        m = KCAT_TOPIC.search(line)
        if m and m.group("name") == topic:
            if m.group("rest").strip():  # ": Broker: Unknown topic or partition"
                assert "Unknown topic" in m.group("rest"), text
                return None
            return int(m.group("n"))
    raise AssertionError(f"kcat -L does not mention {topic}:\n{text}")


def raw_topic_configs(genv: GroupEnv, topic: str) -> dict[str, dict[str, aw.DescribedValue]]:
    """{broker name: {key: value}} from DescribeConfigs v1 sent to every live broker."""
    out = {}
    for b in genv.live:
        with kw.RawConnection.to(b.bootstrap, timeout=10) as conn:
            (res,) = aw.describe_configs(conn, [(aw.TOPIC_RESOURCE, topic, None)])
        assert res.error_code == aw.NONE, f"{b.name}: DescribeConfigs {topic}: {res}"
        assert (res.resource_type, res.resource_name) == (aw.TOPIC_RESOURCE, topic), res
        out[b.name] = res.configs
    return out


def assert_everywhere(genv: GroupEnv, topic: str, want: dict[str, tuple[str, int | None]]):
    """Every broker describes ``topic`` with these (value, source) pairs at once (source None:
    any source that is not a topic override)."""
    for name, configs in raw_topic_configs(genv, topic).items():
        for key, (value, source) in want.items():
            got = configs.get(key)
            assert got is not None, f"{name} does not describe {key} of {topic}: {configs}"
            if source is None:
                assert (got.value, got.source != aw.SOURCE_DYNAMIC_TOPIC) == (value, True), (
                    f"{name}: {key} of {topic} is {got}, wanted the default {value}"
                )
            else:
                assert (got.value, got.source) == (value, source), f"{name}: {key} is {got}"


def described(admin: Admin, topic: str) -> dict:
    error, configs = admin.describe_configs(aw.TOPIC_RESOURCE, topic)
    assert error == aw.NONE, f"{admin.kind}: DescribeConfigs {topic}: error {error}"
    return configs


def assert_default(configs: dict, key: str, value: str) -> None:
    cfg = configs[key]
    assert (cfg.value, cfg.read_only) == (value, False), f"{key}: {cfg}"
    assert cfg.source in DEFAULT_SOURCES, f"{key} is not overridden: {cfg}"
    if cfg.is_default is not None:
        assert cfg.is_default == (cfg.source == "DEFAULT_CONFIG"), f"{key}: {cfg}"


def assert_override(configs: dict, key: str, value: str) -> None:
    cfg = configs[key]
    assert (cfg.value, cfg.source, cfg.read_only) == (value, TOPIC_OVERRIDE, False), f"{key}: {cfg}"
    assert cfg.is_default in (None, False), f"{key}: {cfg}"


def owner_of(genv: GroupEnv, topic: str, partition: int) -> Broker:
    if isinstance(genv, ClusterNodes):
        return genv.cluster.owner(topic, partition)
    return genv.live[0]


def one_partition_per_owner(genv: GroupEnv, topic: str, partitions: int) -> dict[int, Broker]:
    """{partition: owner}, one partition for each broker that owns some partition of
    ``topic``; on a cluster at least two different owners."""
    chosen: dict[int, Broker] = {}
    seen: set[str] = set()
    for p in range(partitions):
        owner = owner_of(genv, topic, p)
        if owner.name not in seen:
            seen.add(owner.name)
            chosen[p] = owner
    if genv.kind == "cluster":
        assert len(chosen) >= 2, f"all {partitions} partitions of {topic} on one broker"
    return chosen


def list_offset(broker: Broker, topic: str, partition: int, which: int) -> int:
    with kw.RawConnection.to(broker.bootstrap) as conn:
        res = kw.list_offsets(conn, topic, partition, which)
    assert res.error_code == kw.NONE, f"{broker.name}: ListOffsets {topic}/{partition}: {res}"
    return res.offset
