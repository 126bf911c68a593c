"""Requests that name one thing many times, on the raw wire, against one broker. Where Kafka
reads a request into a map or a set, a repeated resource, group or partition is worked on and
answered once (DescribeConfigs too, which Kafka answers in full for every repeat: 273 KiB
naming one topic 40,000 times drew a 43.7 MiB answer); where Kafka refuses repeats, they are
refused (AlterConfigs, CreateTopics, CreatePartitions, ListOffsets: their own tests and the
core's).
"""

from __future__ import annotations

import pytest
from support import admin_wire as aw
from support import group_wire as gw
from support import kafka_wire as kw
from support.admin_env import TOPIC_WHITELIST
from support.clients import unique

REPEATS = 2_000


@pytest.fixture(scope="module")
def bootstrap(module_broker_factory) -> str:
    return module_broker_factory(["--default-partitions", "2"], name="repeats").bootstrap


def test_describe_configs_describes_a_repeated_resource_once(bootstrap):
    """A topic named thousands of times (all keys) and a broker named twice (a key each): one
    result each, the broker's with both keys."""
    topic = unique("repeated-configs")
    kw.ensure_topic(bootstrap, topic)
    resources: list[tuple[int, str, list[str] | None]] = [(aw.TOPIC_RESOURCE, topic, None)]
    resources *= REPEATS
    resources += [
        (aw.BROKER_RESOURCE, "0", ["broker.id"]),
        (aw.TOPIC_RESOURCE, topic, ["retention.ms"]),
        (aw.BROKER_RESOURCE, "0", ["advertised.listeners", "broker.id"]),
    ]
    with kw.RawConnection.to(bootstrap) as conn:
        described = aw.describe_configs(conn, resources)
    got = {(r.resource_type, r.resource_name): (r.error_code, set(r.configs)) for r in described}
    assert len(described) == len(got) == 2, [(r.resource_type, r.resource_name) for r in described]
    assert got == {
        (aw.TOPIC_RESOURCE, topic): (aw.NONE, TOPIC_WHITELIST),
        (aw.BROKER_RESOURCE, "0"): (aw.NONE, {"broker.id", "advertised.listeners"}),
    }


def offset_delete(conn: kw.RawConnection, group: str, topics: list[tuple[str, list[int]]]):
    """OffsetDelete v0 of these (topic, partitions) entries, repeats and all: (the request's
    error, [(topic, partition, error)] as answered)."""
    w = kw.Writer().string(group).array_len(len(topics))
    for name, partitions in topics:
        w.string(name).array_len(len(partitions))
        for p in partitions:
            w.i32(p)
    r = conn.request(aw.OFFSET_DELETE, 0, w.done())
    error = r.i16()
    r.i32()  # throttle
    answered = []
    for _ in range(r.array_len()):
        name = r.string()
        answered += [(name, r.i32(), r.i16()) for _ in range(r.array_len())]
    assert r.remaining() == 0
    return error, answered


def test_offset_commit_and_delete_of_a_repeated_partition(bootstrap):
    """OffsetCommit naming a partition three times stores the last offset and answers it once;
    OffsetDelete naming it three times deletes it once and answers it once; DescribeGroups
    answers a group named three times once."""
    topic = unique("repeated-offsets")
    kw.ensure_topic(bootstrap, topic, partitions=2)  # the broker's default
    group = unique("repeated-offsets")
    with kw.RawConnection.to(bootstrap) as conn:
        w = kw.Writer().string(group).i32(-1).string("").string(None).array_len(2)
        for offsets in ([(0, 3), (1, 7), (0, 4)], [(0, 5)]):
            w.string(topic).array_len(len(offsets))
            for partition, offset in offsets:
                w.i32(partition).i64(offset).i32(-1).string(None)
        r = conn.request(gw.OFFSET_COMMIT, 7, w.done())
        r.i32()  # throttle
        committed = []
        for _ in range(r.array_len()):
            name = r.string()
            committed += [(name, r.i32(), r.i16()) for _ in range(r.array_len())]
        assert committed == [(topic, 0, gw.NONE), (topic, 1, gw.NONE)]

        stored = gw.offset_fetch(conn, group, {topic: [0, 1]}).partitions
        assert {key: o.offset for key, o in stored.items()} == {(topic, 0): 5, (topic, 1): 7}

        error, deleted = offset_delete(conn, group, [(topic, [0, 0]), (topic, [0])])
        assert (error, deleted) == (gw.NONE, [(topic, 0, gw.NONE)])
        left = gw.offset_fetch(conn, group, {topic: [0, 1]}).partitions
        assert {key: o.offset for key, o in left.items()} == {(topic, 0): -1, (topic, 1): 7}

        described = gw.describe_groups(conn, [group] * 3)
        assert [g.group_id for g in described] == [group]
