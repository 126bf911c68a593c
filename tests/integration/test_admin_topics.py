"""CreatePartitions, CreateTopics/DeleteTopics (KIP-4) and OffsetForLeaderEpoch, on one broker
and on a 3-broker cluster: new partitions visible on every broker at once and writable;
INVALID_PARTITIONS, validate_only, unknown topics, manual assignments refused; batch requests with
independent results, duplicates and -1 defaults on the raw wire; the real clients' KIP-464
defaults; CreateTopics v5/v7 answers; DeleteTopics by name and by id (v6); kcat -L shows each
change; OffsetForLeaderEpoch v3/v4 across an ownership change.
"""

from __future__ import annotations

import uuid

import pytest
from support import admin_env
from support import admin_wire as aw
from support import kafka_wire as kw
from support.admin_clients import TopicSpec
from support.admin_env import (
    ADMIN_KINDS,
    DEFAULT_PARTITIONS,
    DEFAULT_SEGMENT_BYTES,
    TOPIC_WHITELIST,
    assert_default,
    assert_everywhere,
    assert_override,
    described,
    everywhere,
    kcat_partitions,
    list_offset,
    log,
    node_ids,
    open_admin,
    partition_counts,
    wait_partition_counts,
)
from support.clients import CONSUMERS, PRODUCERS, Msg, confluent_produce, unique
from support.cluster import METADATA_VERSION, moved_away
from support.group_env import ClusterNodes, GroupEnv
from support.procs import Broker

# one broker, then a 3-broker cluster (etcd + moto): every test runs on both
genv = admin_env.genv

# ---------------------------------------------------------------------------------------------
# CreatePartitions


@pytest.mark.parametrize("client", ADMIN_KINDS)
def test_create_partitions(genv, client):
    """2 -> 5 partitions: every broker's Metadata shows the five, with live leaders, right
    after the response; the client then writes to and reads from all of them; kcat -L shows
    them. Fewer or as many partitions: INVALID_PARTITIONS; validate_only changes nothing (and
    still validates); an unknown topic: UNKNOWN_TOPIC_OR_PARTITION, independently of a valid
    topic in the same request; a manual assignment is refused."""
    topic = genv.new_topic(unique(f"cp-{client}"), 2)
    nothere = unique("cp-nothere")
    with open_admin(genv, client) as admin:
        assert admin.create_partitions({topic: 5}) == {topic: 0}
        assert partition_counts(genv, topic) == everywhere(genv, 5), "not at once everywhere"

        msgs = [Msg(p, None, b"cp-%d-%d" % (p, i)) for p in range(5) for i in range(4)]
        PRODUCERS[client](genv.bootstrap(), topic, msgs)  # a fresh client: fresh metadata
        got = CONSUMERS[client](genv.bootstrap(), topic, dict.fromkeys(range(5), 4))
        for p in range(5):
            values = [g.value for g in got if g.partition == p][:4]
            assert values == [m.value for m in msgs if m.partition == p], f"p{p}: {values}"
        assert kcat_partitions(genv.bootstrap(), topic) == 5

        assert admin.create_partitions({topic: 3}) == {topic: aw.INVALID_PARTITIONS}
        assert admin.create_partitions({topic: 5}) == {topic: aw.INVALID_PARTITIONS}
        got = admin.create_partitions({topic: 3}, validate_only=True)
        assert got == {topic: aw.INVALID_PARTITIONS}, got
        assert admin.create_partitions({topic: 7}, validate_only=True) == {topic: 0}
        assert partition_counts(genv, topic) == everywhere(genv, 5), "validate_only grew it"
        assert admin.create_partitions({nothere: 4}) == {nothere: aw.UNKNOWN_TOPIC_OR_PARTITION}

        got = admin.create_partitions({topic: 6, nothere: 4})
        assert got == {topic: 0, nothere: aw.UNKNOWN_TOPIC_OR_PARTITION}, got
        assert partition_counts(genv, topic) == everywhere(genv, 6)
        assert partition_counts(genv, nothere) == everywhere(genv, None)

        node = min(node_ids(genv))
        got = admin.create_partitions({topic: 8}, assignments={topic: [[node], [node]]})
        assert got[topic] == aw.INVALID_REPLICA_ASSIGNMENT, got
        assert partition_counts(genv, topic) == everywhere(genv, 6), "an assignment was applied"
        assert kcat_partitions(genv.bootstrap(), topic) == 6


# ---------------------------------------------------------------------------------------------
# CreateTopics / DeleteTopics (KIP-4)


@pytest.mark.parametrize("client", ADMIN_KINDS)
def test_create_and_delete_topics_batch(genv, client):
    """One CreateTopics request with good and bad topics: each gets its own result (bad name
    INVALID_TOPIC_EXCEPTION, existing TOPIC_ALREADY_EXISTS, a config outside the whitelist or a
    bad value INVALID_CONFIG) and the good ones are created on every broker with their configs
    (DescribeConfigs shows them); validate_only creates nothing but reports the same errors; one
    DeleteTopics with an unknown topic among existing ones deletes those and reports
    UNKNOWN_TOPIC_OR_PARTITION for it. kafka-python can send a name twice: that name gets
    INVALID_REQUEST and is not created, the others are. kcat -L shows each change."""
    tag = unique(client)
    existing = genv.new_topic(f"{tag}-e", 1)
    a, d = f"{tag}-a", f"{tag}-d"
    bad_name = f"{tag}/bad"
    rejected = {f"{tag}-b": {"cleanup.policy": "shred"}, f"{tag}-c": {"retention.ms": "-5"}}
    rejected[f"{tag}-f"] = {"segment.bytes": "0"}
    a_configs = {"retention.ms": "120000", "max.message.bytes": "2000000"}
    specs = [
        TopicSpec(a, 3, a_configs),
        TopicSpec(bad_name, 1),
        TopicSpec(existing, 1),
        *(TopicSpec(name, 1, cfg) for name, cfg in rejected.items()),
        TopicSpec(d, 2),
    ]
    want = {a: 0, bad_name: aw.INVALID_TOPIC_EXCEPTION, existing: aw.TOPIC_ALREADY_EXISTS, d: 0}
    want |= dict.fromkeys(rejected, aw.INVALID_CONFIG)
    with open_admin(genv, client) as admin:
        got = admin.create_topics(specs, validate_only=True)
        assert dict(got) == want, got
        for name in (a, d, *rejected):
            assert partition_counts(genv, name) == everywhere(genv, None), f"{name} created"

        got = admin.create_topics(specs)
        assert dict(got) == want, got
        wait_partition_counts(genv, a, 3)
        wait_partition_counts(genv, d, 2)
        for name in rejected:
            assert partition_counts(genv, name) == everywhere(genv, None), f"{name} created"
        configs = described(admin, a)
        for key, value in a_configs.items():
            assert_override(configs, key, value)
        assert_default(configs, "segment.bytes", str(DEFAULT_SEGMENT_BYTES))
        assert_everywhere(genv, a, {k: (v, aw.SOURCE_DYNAMIC_TOPIC) for k, v in a_configs.items()})
        assert kcat_partitions(genv.bootstrap(), a) == 3
        assert kcat_partitions(genv.bootstrap(), d) == 2

        if client == "kafka-python":
            x, y = f"{tag}-x", f"{tag}-y"
            got = admin.create_topics([TopicSpec(x, 1), TopicSpec(x, 2), TopicSpec(y, 2)])
            assert {code for name, code in got if name == x} == {aw.INVALID_REQUEST}, got
            assert [code for name, code in got if name == y] == [0], got
            wait_partition_counts(genv, y, 2)
            assert partition_counts(genv, x) == everywhere(genv, None), "duplicate was created"

        nothere = f"{tag}-nothere"
        got = admin.delete_topics([a, nothere, d])
        assert got == {a: 0, nothere: aw.UNKNOWN_TOPIC_OR_PARTITION, d: 0}, got
        wait_partition_counts(genv, a, None)
        wait_partition_counts(genv, d, None)
        assert partition_counts(genv, existing) == everywhere(genv, 1)
        assert kcat_partitions(genv.bootstrap(), a) is None
        assert kcat_partitions(genv.bootstrap(), d) is None


def test_create_topics_raw_duplicates_and_defaults(genv):
    """CreateTopics v2 on the wire: a name given twice gets INVALID_REQUEST (every entry for it)
    and is not created, while in the same request num_partitions/replication_factor -1 get the
    brokers' default (3 partitions) and a whitelisted config is applied; validate_only (v1)
    with -1 creates nothing. DeleteTopics v1 with a name twice deletes it once, no error."""
    tag = unique("raw")
    dup, dflt, cfg = f"{tag}-dup", f"{tag}-default", f"{tag}-cfg"
    via = genv.live[-1]
    with kw.RawConnection.to(via.bootstrap) as conn:
        got = aw.create_topics(
            conn,
            [aw.NewTopicSpec(f"{tag}-v")],
            validate_only=True,
            version=1,
        )
        assert [(t.name, t.error_code) for t in got] == [(f"{tag}-v", 0)], got
        got = aw.create_topics(
            conn,
            [
                aw.NewTopicSpec(dup, 1, 1),
                aw.NewTopicSpec(dflt),
                aw.NewTopicSpec(dup, 2, 1),
                aw.NewTopicSpec(cfg, 2, 1, {"retention.bytes": "1000000"}),
            ],
        )
    codes = {}
    for t in got:
        codes.setdefault(t.name, set()).add(t.error_code)
    assert codes == {dup: {aw.INVALID_REQUEST}, dflt: {0}, cfg: {0}}, got
    assert partition_counts(genv, f"{tag}-v") == everywhere(genv, None), "validate_only created"
    wait_partition_counts(genv, dflt, DEFAULT_PARTITIONS)
    wait_partition_counts(genv, cfg, 2)
    assert partition_counts(genv, dup) == everywhere(genv, None), "a duplicate was created"
    assert_everywhere(genv, cfg, {"retention.bytes": ("1000000", aw.SOURCE_DYNAMIC_TOPIC)})
    assert kcat_partitions(genv.bootstrap(), dflt) == DEFAULT_PARTITIONS

    with kw.RawConnection.to(via.bootstrap) as conn:
        got = aw.delete_topics(conn, [cfg, cfg, dflt])
    assert {(t.name, t.error_code) for t in got} == {(cfg, 0), (dflt, 0)}, got
    wait_partition_counts(genv, cfg, None)
    wait_partition_counts(genv, dflt, None)
    assert kcat_partitions(genv.bootstrap(), dflt) is None


def test_real_clients_create_topics_with_their_defaults(genv):
    """KIP-464: confluent-kafka's NewTopic sends replication factor -1 by default (and -1
    partitions without a count), which it only sends to a broker serving CreateTopics v4+; both
    topics are created, the second with the brokers' default partition count. kafka-python's
    KafkaAdminClient creates a topic as before."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    counted, defaulted, kp = unique("kip464-3"), unique("kip464-d"), unique("kip464-kp")
    admin = AdminClient({"bootstrap.servers": genv.bootstrap()})
    futures = admin.create_topics([NewTopic(counted, 3), NewTopic(defaulted)])
    for name, future in futures.items():
        assert future.result(30) is None, name
    wait_partition_counts(genv, counted, 3)
    wait_partition_counts(genv, defaulted, DEFAULT_PARTITIONS)

    client = KafkaAdminClient(bootstrap_servers=genv.bootstrap())
    try:
        client.create_topics([KpNewTopic(kp, num_partitions=2, replication_factor=1)])
    finally:
        client.close()
    wait_partition_counts(genv, kp, 2)
    assert kcat_partitions(genv.bootstrap(), defaulted) == DEFAULT_PARTITIONS


def test_create_topics_v5_and_v7_answer_the_created_topic(genv):
    """CreateTopics v5+ answer each created topic's partition count (the brokers' default for
    -1), replication factor 1 and every topic config as DescribeConfigs lists it (the given
    one DYNAMIC_TOPIC_CONFIG, the others DEFAULT_CONFIG, none read-only or sensitive); v7 adds
    its id, which DeleteTopics v6 then deletes it by. validate_only answers the same without an
    id; a failed topic answers -1/-1 and no configs."""
    for version in (5, 7):
        tag = unique(f"v{version}")
        name, checked = f"{tag}-made", f"{tag}-validated"
        spec = aw.NewTopicSpec(name, configs={"retention.ms": "120000"})
        with kw.RawConnection.to(genv.live[-1].bootstrap) as conn:
            (made,) = aw.create_topics(conn, [spec], version=version)
            (exists,) = aw.create_topics(conn, [spec], version=version)
            (would,) = aw.create_topics(
                conn,
                [aw.NewTopicSpec(checked, 2, 1)],
                validate_only=True,
                version=version,
            )
        assert (made.name, made.error_code, made.error_message) == (name, 0, None), made
        assert (made.num_partitions, made.replication_factor) == (DEFAULT_PARTITIONS, 1), made
        assert made.configs is not None and set(made.configs) == TOPIC_WHITELIST, made
        for key, config in made.configs.items():
            source = aw.SOURCE_DYNAMIC_TOPIC if key == "retention.ms" else aw.SOURCE_DEFAULT
            assert (config.source, config.read_only, config.is_sensitive) == (source, False, False)
        assert made.configs["retention.ms"].value == "120000"
        assert made.configs["segment.bytes"].value == str(DEFAULT_SEGMENT_BYTES)
        assert made.configs["cleanup.policy"].value == "delete"
        assert (made.topic_id is not None) == (version >= 7), made
        wait_partition_counts(genv, name, DEFAULT_PARTITIONS)

        assert exists.error_code == aw.TOPIC_ALREADY_EXISTS, exists
        assert (exists.num_partitions, exists.replication_factor, exists.topic_id) == (-1, -1, None)
        assert exists.configs == {}, exists

        assert (would.error_code, would.num_partitions, would.topic_id) == (0, 2, None), would
        assert would.configs is not None and set(would.configs) == TOPIC_WHITELIST, would
        assert partition_counts(genv, checked) == everywhere(genv, None), "validate_only made it"

        if made.topic_id is not None:
            with kw.RawConnection.to(genv.live[0].bootstrap) as conn:
                (gone,) = aw.delete_topics(conn, [made.topic_id], version=6)
            assert (gone.name, gone.topic_id, gone.error_code) == (name, made.topic_id, 0), gone
            wait_partition_counts(genv, name, None)


def test_delete_topics_by_name_and_by_id(genv):
    """DeleteTopics v6: a topic named by its name is deleted and answered with its id; one named
    by its id is deleted and answered with its name; an id no topic has is UNKNOWN_TOPIC_ID
    (no name), an unknown name UNKNOWN_TOPIC_OR_PARTITION, each with a message (v5+); the other
    entries of the request are deleted all the same. v4 and v5 (flexible) delete by name."""
    tag = unique("del6")
    by_name, by_id, unknown_name = f"{tag}-n", f"{tag}-i", f"{tag}-nothere"
    old = [f"{tag}-v4", f"{tag}-v5"]
    via = genv.live[-1]
    with kw.RawConnection.to(via.bootstrap) as conn:
        specs = [aw.NewTopicSpec(t, 1) for t in (by_name, by_id, *old)]
        created = {t.name: t.topic_id for t in aw.create_topics(conn, specs, version=7)}
    for t in (by_name, by_id, *old):
        wait_partition_counts(genv, t, 1)
    unknown_id = uuid.uuid4()
    with kw.RawConnection.to(genv.live[0].bootstrap) as conn:
        got = aw.delete_topics(conn, [by_name, created[by_id], unknown_id, unknown_name], version=6)
        v4 = aw.delete_topics(conn, [old[0]], version=4)
        v5 = aw.delete_topics(conn, [old[1], unknown_name], version=5)
    answered = [(t.name, t.topic_id, t.error_code) for t in got]
    assert answered == [
        (by_name, created[by_name], 0),
        (by_id, created[by_id], 0),
        (None, unknown_id, aw.UNKNOWN_TOPIC_ID),
        (unknown_name, None, aw.UNKNOWN_TOPIC_OR_PARTITION),
    ], got
    assert str(unknown_id) in (got[2].error_message or ""), got[2]
    assert unknown_name in (got[3].error_message or ""), got[3]
    assert [(t.name, t.error_code) for t in v4] == [(old[0], 0)], v4
    assert [(t.name, t.error_code) for t in v5] == [
        (old[1], 0),
        (unknown_name, aw.UNKNOWN_TOPIC_OR_PARTITION),
    ], v5
    assert v5[1].error_message, v5
    for t in (by_name, by_id, *old):
        wait_partition_counts(genv, t, None)
    assert kcat_partitions(genv.bootstrap(), by_id) is None


# ---------------------------------------------------------------------------------------------
# OffsetForLeaderEpoch (last: it moves a partition)


def leader_epoch(genv: GroupEnv, topic: str) -> tuple[Broker, int]:
    """(leader, epoch) of partition 0, as the first live broker reports it."""
    with kw.RawConnection.to(genv.live[0].bootstrap, timeout=10) as conn:
        md = kw.metadata(conn, [topic], version=METADATA_VERSION, allow_auto_topic_creation=False)
    (p0,) = [p for p in md.topics[topic].partitions if p.partition == 0]
    return node_ids(genv)[p0.leader], p0.leader_epoch


def epochs_asked(conn, topic: str, version: int, queries: list[aw.EpochQuery]):
    """The answer to each query, one request each (a partition is asked once per request)."""
    out = []
    for q in queries:
        got = aw.offset_for_leader_epoch(conn, {topic: [q]}, version=version)
        assert set(got) == {(topic, q.partition)}, got
        out.append(got[(topic, q.partition)])
    return out


def test_offset_for_leader_epoch(genv):
    """OffsetForLeaderEpoch v3 (and v4 if advertised) to the partition's leader: the current
    epoch ends at the high watermark, an epoch newer than the latest is -1/-1. After the owner
    goes away (cluster: SIGTERM to the owner; single node: SIGTERM and restart) the epoch is
    higher: the old epoch ends where the new one starts, the new one at the high watermark; a
    current_leader_epoch older than the leader's is FENCED_LEADER_EPOCH, a newer one
    UNKNOWN_LEADER_EPOCH; an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION."""
    topic = genv.new_topic(unique("ofle"), 1)
    with kw.RawConnection.to(genv.live[0].bootstrap) as conn:
        top = dict((k, hi) for k, _lo, hi in aw.api_versions_entries(conn))
    versions = [3] + ([4] if top[aw.OFFSET_FOR_LEADER_EPOCH] >= 4 else [])
    confluent_produce(genv.bootstrap(), topic, [Msg(0, None, b"first-%d" % i) for i in range(5)])
    leader, e1 = leader_epoch(genv, topic)
    assert e1 >= 1, e1
    Q = aw.EpochQuery
    with kw.RawConnection.to(leader.bootstrap) as conn:
        for v in versions:
            now, newer, same = epochs_asked(
                conn, topic, v, [Q(0, e1), Q(0, e1 + 1), Q(0, e1, current_leader_epoch=e1)]
            )
            assert now == aw.EpochEndOffset(0, e1, 5), f"v{v} epoch {e1}: {now}"
            assert newer == aw.EpochEndOffset(0, -1, -1), f"v{v} epoch {e1 + 1}: {newer}"
            assert same == now, f"v{v} with the current epoch: {same}"

    try:
        if isinstance(genv, ClusterNodes):
            before = {topic: genv.cluster.leaders(topic)}
            assert leader.terminate() == 0, "SIGTERM must flush, release and exit 0"
            gone = moved_away(before, leader.broker_id)
            genv.cluster.wait_converged(
                [topic], until=lambda now: gone(now) or genv.cluster.claimed(now)
            )
        else:
            genv.node.restart()
        confluent_produce(genv.bootstrap(), topic, [Msg(0, None, b"next-%d" % i) for i in range(3)])
        leader, e2 = leader_epoch(genv, topic)
        assert e2 > e1, f"epoch {e1} -> {e2} after the owner went away"
        assert list_offset(leader, topic, 0, kw.LATEST) == 8
        log(genv, f"epoch {e1} -> {e2}, leader now {leader.name}")
        with kw.RawConnection.to(leader.bootstrap) as conn:
            for v in versions:
                old, cur, newer = epochs_asked(conn, topic, v, [Q(0, e1), Q(0, e2), Q(0, e2 + 1)])
                assert old == aw.EpochEndOffset(0, e1, 5), f"v{v} old epoch {e1}: {old}"
                assert cur == aw.EpochEndOffset(0, e2, 8), f"v{v} epoch {e2}: {cur}"
                assert newer == aw.EpochEndOffset(0, -1, -1), f"v{v} epoch {e2 + 1}: {newer}"
                fenced, unknown, fine = epochs_asked(
                    conn,
                    topic,
                    v,
                    [
                        Q(0, e2, current_leader_epoch=e1),
                        Q(0, e2, current_leader_epoch=e2 + 1),
                        Q(0, e1, current_leader_epoch=e2),
                    ],
                )
                assert fenced.error_code == aw.FENCED_LEADER_EPOCH, f"v{v}: {fenced}"
                assert unknown.error_code == aw.UNKNOWN_LEADER_EPOCH, f"v{v}: {unknown}"
                assert fine == old, f"v{v}: {fine}"
                nothere = unique("ofle-nothere")
                got = aw.offset_for_leader_epoch(
                    conn, {nothere: [Q(0, e2)], topic: [Q(7, e2)]}, version=v
                )
                assert got[(nothere, 0)].error_code == aw.UNKNOWN_TOPIC_OR_PARTITION, got
                assert got[(topic, 7)].error_code == aw.UNKNOWN_TOPIC_OR_PARTITION, got
    finally:
        genv.heal()


# ---------------------------------------------------------------------------------------------
# Logs


def test_each_admin_change_is_logged_once(genv):
    """Creating a topic, adding partitions, altering its configs and deleting it each leave
    one line in the brokers' logs (the core's), not one from each side of the control plane."""
    topic = unique("logged")
    with open_admin(genv, "confluent") as admin:
        assert admin.create_topics([TopicSpec(topic, 2)]) == [(topic, 0)]
        assert admin.create_partitions({topic: 3}) == {topic: 0}
        assert admin.alter_configs(aw.TOPIC_RESOURCE, topic, {"retention.ms": "90000"}) == 0
        assert admin.delete_topics([topic]) == {topic: 0}
    named = [
        line
        for broker in genv.live
        for line in broker.log_text().splitlines()
        if f'topic="{topic}"' in line or f"'{topic}'" in line
    ]
    for action in ("topic created", "partitions added", "topic configs changed", "topic deleted"):
        assert sum(action in line for line in named) == 1, (action, named)
    assert not [line for line in named if "kafscale.admin" in line], named
