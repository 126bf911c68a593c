"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs through real admin clients, on one
broker and on a 3-broker cluster: topic values and sources, read-only broker keys, unknown keys
left out, unknown topics; validate_only, INVALID_CONFIG for unknown keys, bad values and broker
resources. Changes take effect at once on every broker: retention.ms lowered removes old
segments on every partition owner; segment.bytes lowered makes the owners seal small segments.
"""

from __future__ import annotations

import math
import time

import pytest
from support import admin_env
from support import admin_wire as aw
from support import kafka_wire as kw
from support import segment_format as sf
from support.admin_clients import TopicSpec
from support.admin_env import (
    ADMIN_KINDS,
    BAD_TOPIC_CONFIGS,
    BROKER_KEYS,
    CACHE_BYTES,
    DEFAULT_SEGMENT_BYTES,
    FLUSH_MS,
    HOUR_MS,
    READAHEAD,
    SETTLE_S,
    TOPIC_KEYS,
    TOPIC_WHITELIST,
    assert_default,
    assert_everywhere,
    assert_override,
    described,
    everywhere,
    list_offset,
    log,
    make_topic,
    node_ids,
    one_partition_per_owner,
    open_admin,
    partition_counts,
    wait_partition_counts,
)
from support.clients import Msg, confluent_produce, unique
from support.cluster import segment_base, whole_batches
from support.group_env import ClusterNodes, GroupEnv, SingleNode
from support.load import wait_for
from support.procs import S3_ENV, Broker, settled

# one broker, then a 3-broker cluster (etcd + moto): every test runs on both
genv = admin_env.genv

# ---------------------------------------------------------------------------------------------
# DescribeConfigs, AlterConfigs, IncrementalAlterConfigs


def expected_broker_values(genv: GroupEnv, node: int) -> dict[str, set[str | None]]:
    """What each read-only broker key must show (a set: any of those values)."""
    if isinstance(genv, ClusterNodes):
        s3 = {
            "kafscale.s3.bucket": {genv.cluster.bucket},
            "kafscale.s3.region": {S3_ENV["AWS_REGION"]},
            "kafscale.s3.endpoint": {genv.cluster.moto.endpoint},
        }
    else:  # no bucket: segments go to the data dir
        s3 = {k: {None, ""} for k in ("kafscale.s3.bucket", "kafscale.s3.endpoint")}
        s3["kafscale.s3.region"] = {None, ""}
    return {
        "broker.id": {str(node)},
        "kafscale.cache.bytes": {str(CACHE_BYTES)},
        "kafscale.readahead.segments": {str(READAHEAD)},
        "kafscale.segment.bytes": {str(DEFAULT_SEGMENT_BYTES)},
        "kafscale.flush.interval.ms": {str(FLUSH_MS)},
        **s3,
    }


@pytest.mark.parametrize("client", ADMIN_KINDS)
def test_describe_configs(genv, client):
    """A topic created with retention.ms: that key is a topic override, retention.bytes and
    segment.bytes are the brokers' defaults, none read-only, nothing outside the whitelist;
    asking for a key that does not exist just leaves it out; an unknown topic is
    UNKNOWN_TOPIC_OR_PARTITION; every broker (named by its id) shows its read-only settings."""
    topic = make_topic(genv, unique(f"dc-{client}"), 2, {"retention.ms": "120000"})
    with open_admin(genv, client) as admin:
        configs = described(admin, topic)
        assert TOPIC_KEYS <= set(configs) <= TOPIC_WHITELIST, sorted(configs)
        assert_override(configs, "retention.ms", "120000")
        assert_default(configs, "retention.bytes", "-1")
        assert_default(configs, "segment.bytes", str(DEFAULT_SEGMENT_BYTES))

        if admin.describe_filters_keys:
            error, some = admin.describe_configs(
                aw.TOPIC_RESOURCE, topic, ["retention.ms", "no.such.key"]
            )
            assert error == aw.NONE and set(some) == {"retention.ms"}, (error, some)
            assert_override(some, "retention.ms", "120000")
        else:  # confluent-kafka's describe_configs sends no key list: ask on the wire instead
            for b in genv.live:
                with kw.RawConnection.to(b.bootstrap, timeout=10) as conn:
                    keys = ["retention.ms", "no.such.key"]
                    (res,) = aw.describe_configs(conn, [(aw.TOPIC_RESOURCE, topic, keys)])
                assert res.error_code == aw.NONE and set(res.configs) == {"retention.ms"}, res

        error, _ = admin.describe_configs(aw.TOPIC_RESOURCE, unique("dc-nothere"))
        assert error == aw.UNKNOWN_TOPIC_OR_PARTITION, error

        for node, broker in node_ids(genv).items():
            error, keys = admin.describe_configs(aw.BROKER_RESOURCE, str(node))
            assert error == aw.NONE, f"broker {node}: error {error}"
            assert set(keys) >= BROKER_KEYS, f"broker {node}: {sorted(keys)}"
            for key in BROKER_KEYS:
                assert keys[key].read_only is True, f"broker {node}: {key} {keys[key]}"
            for key, allowed in expected_broker_values(genv, node).items():
                assert keys[key].value in allowed, f"broker {node}: {key} {keys[key]}"
            listeners = keys["advertised.listeners"].value or ""
            assert broker.bootstrap in listeners, f"broker {node}: {listeners}"
            log(genv, f"{client}: broker {node}: { {k: keys[k].value for k in sorted(keys)} }")


@pytest.mark.parametrize("client", ADMIN_KINDS)
def test_alter_configs(genv, client):
    """AlterConfigs (the legacy API) sets retention.ms as a topic override, shown by every
    broker at once (with confluent-kafka, which sends only what it is given, the override set
    before goes back to its default: AlterConfigs replaces the whole set); validate_only
    changes nothing; unknown keys and bad values are INVALID_CONFIG, also with validate_only,
    and change nothing; any broker resource is INVALID_CONFIG; an unknown topic is
    UNKNOWN_TOPIC_OR_PARTITION."""
    topic = make_topic(genv, unique(f"ac-{client}"), 2, {"retention.bytes": "5000000"})
    with open_admin(genv, client) as admin:
        assert_override(described(admin, topic), "retention.bytes", "5000000")
        assert admin.alter_configs(aw.TOPIC_RESOURCE, topic, {"retention.ms": "90000"}) == 0
        assert_everywhere(genv, topic, {"retention.ms": ("90000", aw.SOURCE_DYNAMIC_TOPIC)})
        configs = described(admin, topic)
        assert_override(configs, "retention.ms", "90000")
        if client == "confluent":
            assert_default(configs, "retention.bytes", "-1")
            assert_everywhere(genv, topic, {"retention.bytes": ("-1", None)})

        code = admin.alter_configs(
            aw.TOPIC_RESOURCE, topic, {"retention.ms": "1234"}, validate_only=True
        )
        assert code == 0
        for bad in BAD_TOPIC_CONFIGS:
            for validate_only in (True, False):
                code = admin.alter_configs(aw.TOPIC_RESOURCE, topic, bad, validate_only)
                assert code == aw.INVALID_CONFIG, f"{bad} (validate_only {validate_only}): {code}"
        assert_override(described(admin, topic), "retention.ms", "90000")
        assert_everywhere(genv, topic, {"retention.ms": ("90000", aw.SOURCE_DYNAMIC_TOPIC)})

        for node in node_ids(genv):
            for change in ({"kafscale.cache.bytes": "1024"}, {"log.retention.ms": "1000"}):
                code = admin.alter_configs(aw.BROKER_RESOURCE, str(node), change)
                assert code == aw.INVALID_CONFIG, f"broker {node} {change}: {code}"
        nothere = unique("ac-nothere")
        code = admin.alter_configs(aw.TOPIC_RESOURCE, nothere, {"retention.ms": "1000"})
        assert code == aw.UNKNOWN_TOPIC_OR_PARTITION, code


@pytest.mark.parametrize("client", ADMIN_KINDS)
def test_incremental_alter_configs(genv, client):
    """IncrementalAlterConfigs: SET two keys (every broker shows them at once), DELETE one: it
    is back to the brokers' default, the other stays; validate_only changes nothing; the same
    validation errors as AlterConfigs; broker resources INVALID_CONFIG; unknown topic
    UNKNOWN_TOPIC_OR_PARTITION."""
    topic = make_topic(genv, unique(f"iac-{client}"), 2)
    with open_admin(genv, client) as admin:
        ops = {"retention.ms": "90000", "retention.bytes": "7000000"}
        assert admin.incremental_alter_configs(aw.TOPIC_RESOURCE, topic, ops) == 0
        assert_everywhere(
            genv,
            topic,
            {
                "retention.ms": ("90000", aw.SOURCE_DYNAMIC_TOPIC),
                "retention.bytes": ("7000000", aw.SOURCE_DYNAMIC_TOPIC),
            },
        )
        configs = described(admin, topic)
        assert_override(configs, "retention.ms", "90000")
        assert_override(configs, "retention.bytes", "7000000")
        assert_default(configs, "segment.bytes", str(DEFAULT_SEGMENT_BYTES))

        assert (
            admin.incremental_alter_configs(aw.TOPIC_RESOURCE, topic, {"retention.ms": None}) == 0
        )
        configs = described(admin, topic)
        assert_default(configs, "retention.ms", str(HOUR_MS))
        assert_override(configs, "retention.bytes", "7000000")
        assert_everywhere(
            genv,
            topic,
            {
                "retention.ms": (str(HOUR_MS), None),
                "retention.bytes": ("7000000", aw.SOURCE_DYNAMIC_TOPIC),
            },
        )

        code = admin.incremental_alter_configs(
            aw.TOPIC_RESOURCE, topic, {"segment.bytes": "1048576"}, validate_only=True
        )
        assert code == 0
        for bad in BAD_TOPIC_CONFIGS:
            for validate_only in (True, False):
                code = admin.incremental_alter_configs(aw.TOPIC_RESOURCE, topic, bad, validate_only)
                assert code == aw.INVALID_CONFIG, f"{bad} (validate_only {validate_only}): {code}"
        configs = described(admin, topic)
        assert_default(configs, "segment.bytes", str(DEFAULT_SEGMENT_BYTES))
        assert_default(configs, "retention.ms", str(HOUR_MS))
        assert_override(configs, "retention.bytes", "7000000")

        for node in node_ids(genv):
            change = {"kafscale.cache.bytes": "1024"}
            code = admin.incremental_alter_configs(aw.BROKER_RESOURCE, str(node), change)
            assert code == aw.INVALID_CONFIG, f"broker {node}: {code}"
        nothere = unique("iac-nothere")
        code = admin.incremental_alter_configs(aw.TOPIC_RESOURCE, nothere, {"retention.ms": "1"})
        assert code == aw.UNKNOWN_TOPIC_OR_PARTITION, code


@pytest.mark.parametrize("client", ADMIN_KINDS)
def test_cleanup_policy_is_delete_compact_or_both(genv, client):
    """cleanup.policy: a topic without it describes the default delete (DEFAULT_CONFIG);
    delete, compact and compact,delete (in any order, stored as Kafka writes it) are accepted by
    CreateTopics, AlterConfigs and IncrementalAlterConfigs (then a topic override), on every
    broker; anything else is INVALID_CONFIG and changes nothing."""
    plain = make_topic(genv, unique(f"cpol-{client}"), 1)
    with open_admin(genv, client) as admin:
        assert_default(described(admin, plain), "cleanup.policy", "delete")
        made = {
            unique(f"cpol-{client}-d"): "delete",
            unique(f"cpol-{client}-c"): "compact",
            unique(f"cpol-{client}-cd"): "delete,compact",
        }
        refused = unique(f"cpol-{client}-x")
        specs = [TopicSpec(name, 1, {"cleanup.policy": p}) for name, p in made.items()]
        got = admin.create_topics([*specs, TopicSpec(refused, 1, {"cleanup.policy": "shred"})])
        assert dict(got) == dict.fromkeys(made, 0) | {refused: aw.INVALID_CONFIG}, got
        for name, policy in made.items():
            wait_partition_counts(genv, name, 1)
            stored = "compact,delete" if "," in policy else policy
            assert_override(described(admin, name), "cleanup.policy", stored)
        assert partition_counts(genv, refused) == everywhere(genv, None), f"{refused} created"

        compact = {"cleanup.policy": "compact"}
        assert admin.alter_configs(aw.TOPIC_RESOURCE, plain, compact) == 0
        assert_everywhere(genv, plain, {"cleanup.policy": ("compact", aw.SOURCE_DYNAMIC_TOPIC)})
        both = {"cleanup.policy": "compact, delete"}
        assert admin.incremental_alter_configs(aw.TOPIC_RESOURCE, plain, both) == 0
        expected = ("compact,delete", aw.SOURCE_DYNAMIC_TOPIC)
        assert_everywhere(genv, plain, {"cleanup.policy": expected})
        shred = {"cleanup.policy": "shred"}
        assert admin.alter_configs(aw.TOPIC_RESOURCE, plain, shred) == aw.INVALID_CONFIG
        code = admin.incremental_alter_configs(aw.TOPIC_RESOURCE, plain, shred)
        assert code == aw.INVALID_CONFIG, code
        assert_override(described(admin, plain), "cleanup.policy", "compact,delete")


# ---------------------------------------------------------------------------------------------
# config changes take effect on every broker


def old_msgs(partitions, r: int, timestamp: int) -> list[Msg]:
    return [
        Msg(p, None, b"old-%d-%d" % (r, i), timestamp=timestamp + i)
        for p in partitions
        for i in range(5)
    ]


def test_lower_retention_ms_applies_on_every_owner(genv):
    """Records 30 minutes old are kept under the brokers' 1 hour default; once retention.ms of
    the topic is set to 10 minutes (IncrementalAlterConfigs, confluent-kafka), every partition
    owner (different brokers on the cluster) deletes the old segments: ListOffsets earliest
    moves to the first new record on every broker and fetching from there reads the new ones."""
    partitions = 12 if genv.kind == "cluster" else 2
    topic = genv.new_topic(unique("ret"), partitions)
    chosen = one_partition_per_owner(genv, topic, partitions)
    old = int(time.time() * 1000) - 30 * 60_000
    for r in range(3):
        confluent_produce(
            genv.bootstrap(), topic, old_msgs(chosen, r, old), extra={"linger.ms": 50}
        )
    # Retention drops whole segments: the old records are compacted into segments of their
    # own (at once in tests) before the new ones come.
    for p in chosen:
        settled(lambda p=p: check_records_in_segments(genv, topic, p, 15))
    new = [Msg(p, None, b"new-%d-%d" % (p, i)) for p in chosen for i in range(5)]
    confluent_produce(genv.bootstrap(), topic, new, extra={"linger.ms": 50})

    time.sleep(1.0)  # five retention passes under the default: nothing goes
    for b in genv.live:
        for p in chosen:
            assert list_offset(b, topic, p, kw.EARLIEST) == 0, f"{b.name} p{p}: deleted early"

    with open_admin(genv, "confluent") as admin:
        code = admin.incremental_alter_configs(
            aw.TOPIC_RESOURCE, topic, {"retention.ms": str(10 * 60_000)}
        )
    assert code == 0
    t0 = time.monotonic()
    for b in genv.live:
        for p in chosen:
            wait_for(
                lambda b=b, p=p: list_offset(b, topic, p, kw.EARLIEST) == 15,
                SETTLE_S,
                f"{b.name}: earliest offset of {topic}/{p} at 15",
            )
    log(genv, f"old segments of {sorted(chosen)} gone {time.monotonic() - t0:.2f}s after")
    for p, owner in chosen.items():
        with kw.RawConnection.to(genv.live[-1].bootstrap) as conn:
            res = kw.fetch(conn, topic, p, 15, max_wait_ms=100)
        assert res.error_code == kw.NONE, f"p{p} (owner {owner.name}): {res}"
        values = [r.value for batch in whole_batches(res.records or b"") for r in batch.records()]
        assert values == [m.value for m in new if m.partition == p], f"p{p}: {values}"


SMALL_SEGMENT = 2048
BURST = 60


def burst(owner: Broker, topic: str, partition: int, tag: bytes) -> int:
    """BURST produce requests (acks=-1, one 1-record batch of ~530 bytes each) in one write to
    ``owner``, then their answers: they arrive within one flush interval, so the broker writes
    them in few segments unless segment.bytes seals them earlier. Returns the batch size."""
    size = 0
    data = bytearray()
    with kw.RawConnection.to(owner.bootstrap) as conn:
        for i in range(BURST):
            batch = sf.build_record_batch([(None, tag + b"-%03d-" % i + b"s" * 500, [])])
            size = max(size, len(batch))
            header = kw.request_header(kw.PRODUCE, 3, 1000 + i, "kafscale-tests", False)
            data += kw.frame(header + kw.produce_body(topic, partition, batch, acks=-1))
        conn.send_raw(bytes(data))
        for i in range(BURST):
            cid, r = conn.recv_response()
            res = kw.parse_produce_v3(r)[(topic, partition)]
            assert (cid, res.error_code) == (1000 + i, kw.NONE), f"{owner.name} p{partition}: {res}"
    return size


def records_in_segments(genv: GroupEnv, topic: str, partition: int) -> int:
    """How many records of one partition compaction has put into segments so far."""
    if isinstance(genv, ClusterNodes):
        c = genv.cluster
        prefix = f"{c.namespace}/{topic}/{partition}/"
        objects = {k.rsplit("/", 1)[1]: v for k, v in c.moto.objects(c.bucket, prefix).items()}
    else:
        assert isinstance(genv, SingleNode)
        folder = genv.node.data_dir / "default" / topic / str(partition)
        # (complete objects only: the local store writes each under a temporary name first,
        # `segment-….kfs#1`, and renames it when it is whole)
        whole = [*folder.glob("segment-*.kfs"), *folder.glob("segment-*.index")]
        objects = {f.name: f.read_bytes() for f in whole}
    return len(sf.check_partition(objects).records()) if objects else 0


def check_records_in_segments(genv: GroupEnv, topic: str, partition: int, want: int) -> None:
    have = records_in_segments(genv, topic, partition)
    assert have == want, f"{topic}/{partition}: {have} records in segments, not {want}"


def segment_sizes(genv: GroupEnv, topic: str, partition: int) -> dict[int, int]:
    """{base offset: size of the .kfs object} of one partition (S3 or the data dir)."""
    out = {}
    if isinstance(genv, ClusterNodes):
        for key, (_etag, size) in genv.cluster.objects(topic).items():
            parsed = segment_base(key)
            if parsed and parsed[0] == partition and parsed[2] == "kfs":
                out[parsed[1]] = size
        return out
    assert isinstance(genv, SingleNode)
    for path in genv.node.data_dir.rglob("segment-*.kfs"):
        if path.parent.name == str(partition) and path.parent.parent.name == topic:
            out[int(path.stem.split("-")[1])] = path.stat().st_size
    return out


def test_lower_segment_bytes_applies_on_every_owner(genv):
    """A burst of 60 small batches under the default segment.bytes (8 MiB) lands in a few big
    segments; segment.bytes set to 2 KiB (AlterConfigs, kafka-python) is shown by every broker
    at once and every owner's compaction then cuts a segment as soon as it holds 2 KiB: no new
    segment is larger than that plus one batch (and the segment header and footer)."""
    partitions = 12 if genv.kind == "cluster" else 1
    topic = genv.new_topic(unique("seg"), partitions)
    chosen = one_partition_per_owner(genv, topic, partitions)
    overhead = sf.SEGMENT_HEADER.size + sf.SEGMENT_FOOTER.size

    def burst_all(tag: bytes, end: int) -> int:
        size = max(burst(owner, topic, p, tag) for p, owner in chosen.items())
        for p, owner in chosen.items():
            assert list_offset(owner, topic, p, kw.LATEST) == end, f"p{p} on {owner.name}"
        return size

    batch = burst_all(b"big", BURST)
    bound = SMALL_SEGMENT + batch + overhead
    for p in chosen:
        settled(lambda p=p: check_records_in_segments(genv, topic, p, BURST))
        before = segment_sizes(genv, topic, p)
        assert max(before.values()) > bound, (
            f"p{p}: the burst was not buffered into big segments ({before}); the check below "
            "would prove nothing"
        )

    with open_admin(genv, "kafka-python") as admin:
        code = admin.alter_configs(aw.TOPIC_RESOURCE, topic, {"segment.bytes": str(SMALL_SEGMENT)})
    assert code == 0
    assert_everywhere(genv, topic, {"segment.bytes": (str(SMALL_SEGMENT), aw.SOURCE_DYNAMIC_TOPIC)})

    burst_all(b"small", 2 * BURST)
    for p, owner in chosen.items():
        settled(lambda p=p: check_records_in_segments(genv, topic, p, 2 * BURST))
        after = {base: n for base, n in segment_sizes(genv, topic, p).items() if base >= BURST}
        too_big = {base: n for base, n in after.items() if n > bound}
        assert not too_big, f"p{p} (owner {owner.name}): segments over {bound} bytes: {too_big}"
        least = math.ceil(BURST * (batch - 1) / (SMALL_SEGMENT + batch))
        assert len(after) >= least, f"p{p}: {len(after)} segments: {after}"
        log(genv, f"p{p} on {owner.name}: {len(after)} segments, sizes {sorted(after.values())}")
