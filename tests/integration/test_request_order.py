"""A connection's requests take effect in the order they were sent, as in Kafka
(docs/requests.md): requests pipelined on one socket - sent back to back, no response read in
between, as librdkafka sends its async and auto commits - act in that order, whatever each
one's handler does (the group APIs run in Python, Produce appends in the read loop, Metadata
and ListOffsets answer from the core). Requests of different connections still run side by
side: a JoinGroup waiting for its group holds up its own connection only.

Before the fix each request of a connection ran as a task of its own, and N OffsetCommits
sent back to back stored an older offset than the last one in most rounds, even with N = 2.
"""

from __future__ import annotations

import select
import time

import pytest
from support import admin_wire as aw
from support import group_wire as gw
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import unique

ROUNDS = 9
# How long the first member of a new group waits in its JoinGroup: long enough that a
# request of another connection is surely answered meanwhile.
REBALANCE_DELAY_MS = 1500


@pytest.fixture(scope="module")
def obroker(module_broker_factory):
    return module_broker_factory(
        ["--group-initial-rebalance-delay-ms", str(REBALANCE_DELAY_MS)], name="order"
    )


def connect(broker) -> kw.RawConnection:
    return kw.RawConnection.to(broker.bootstrap, timeout=30)


def answered(conn: kw.RawConnection) -> bool:
    """Whether a response (or a part of one) is waiting to be read on ``conn``."""
    return bool(select.select([conn.sock], [], [], 0)[0])


def batch(values: list[bytes]) -> bytes:
    return sf.build_record_batch([(None, v, []) for v in values])


@pytest.mark.parametrize("n", [2, 10, 50])
def test_pipelined_offset_commits_store_the_last_one(obroker, n):
    """N OffsetCommits of one partition with increasing offsets, back to back, then an
    OffsetFetch, on one socket: every commit succeeds and the fetch reads the last offset,
    round after round."""
    topic = unique("commits")
    kw.ensure_topic(obroker.bootstrap, topic)
    group = unique("committer")
    stored, expected = [], []
    with connect(obroker) as conn:
        for round_ in range(ROUNDS):
            base = round_ * 10_000
            p = kw.Pipeline(conn)
            for i in range(1, n + 1):
                p.add(gw.offset_commit, group, {(topic, 0): gw.CommitOffset(base + i)})
            p.add(gw.offset_fetch, group, {topic: [0]})
            *commits, fetched = p.send_and_read()
            assert commits == [{(topic, 0): gw.NONE}] * n
            stored.append(fetched.partitions[(topic, 0)].offset)
            expected.append(base + n)
    behind = [(got, want) for got, want in zip(stored, expected, strict=True) if got != want]
    assert not behind, f"{len(behind)} of {ROUNDS} rounds stored an older offset: {behind}"


def test_pipelined_commit_delete_fetch(obroker):
    """OffsetCommit, OffsetDelete, OffsetFetch, OffsetCommit, OffsetFetch on one socket: the
    first fetch finds nothing committed, the second the offset committed after the delete."""
    topic = unique("delete")
    kw.ensure_topic(obroker.bootstrap, topic)
    group = unique("deleter")
    with connect(obroker) as conn:
        for round_ in range(ROUNDS):
            p = kw.Pipeline(conn)
            p.add(gw.offset_commit, group, {(topic, 0): gw.CommitOffset(100 + round_)})
            p.add(gw.offset_delete, group, {topic: [0]})
            p.add(gw.offset_fetch, group, {topic: [0]})
            p.add(gw.offset_commit, group, {(topic, 0): gw.CommitOffset(200 + round_)})
            p.add(gw.offset_fetch, group, {topic: [0]})
            commit, deleted, gone, again, fetched = p.send_and_read()
            assert commit == again == {(topic, 0): gw.NONE}
            assert deleted == (gw.NONE, {(topic, 0): gw.NONE})
            assert gone.partitions[(topic, 0)].offset == gw.NO_OFFSET, f"round {round_}"
            assert fetched.partitions[(topic, 0)].offset == 200 + round_, f"round {round_}"


def range_of(topic: str) -> tuple[str, bytes]:
    """The "range" protocol of a member subscribed to ``topic``."""
    return ("range", gw.subscription([topic]))


def join_alone(conn: kw.RawConnection, group: str, topic: str) -> tuple[int, str]:
    """Makes the connection's client the only member of ``group``: (generation, member id)."""
    first = gw.join_group(conn, group, protocols=[range_of(topic)])
    assert first.error_code == gw.MEMBER_ID_REQUIRED
    joined = gw.join_group(conn, group, first.member_id, protocols=[range_of(topic)])
    assert joined.error_code == gw.NONE
    assert joined.leader == joined.member_id
    synced = gw.sync_group(
        conn,
        group,
        joined.generation_id,
        joined.member_id,
        {joined.member_id: gw.assignment({topic: [0]})},
    )
    assert synced.error_code == gw.NONE
    return joined.generation_id, joined.member_id


def test_pipelined_heartbeat_commit_leave_heartbeat(obroker):
    """Heartbeat, OffsetCommit, LeaveGroup, Heartbeat, OffsetFetch of a group's only member on
    one socket: the first heartbeat and the commit are a member's, the second heartbeat of one
    that has left, and the commit is stored."""
    topic, group = unique("members"), unique("leaver")
    kw.ensure_topic(obroker.bootstrap, topic)
    with connect(obroker) as conn:
        generation, member = join_alone(conn, group, topic)
        p = kw.Pipeline(conn)
        p.add(gw.heartbeat, group, generation, member)
        p.add(
            gw.offset_commit,
            group,
            {(topic, 0): gw.CommitOffset(42)},
            generation_id=generation,
            member_id=member,
        )
        p.add(gw.leave_group, group, [(member, None)])
        p.add(gw.heartbeat, group, generation, member)
        p.add(gw.offset_fetch, group, {topic: [0]})
        before, committed, left, after, fetched = p.send_and_read()
    assert before == gw.NONE
    assert committed == {(topic, 0): gw.NONE}
    assert left.error_code == gw.NONE
    assert left.members == [(member, None, gw.NONE)]
    assert after == gw.UNKNOWN_MEMBER_ID
    assert fetched.partitions[(topic, 0)].offset == 42


def test_a_waiting_join_holds_its_connection_only(obroker):
    """A JoinGroup waiting for its group (the initial rebalance delay) holds up the requests
    sent after it on its connection, as Kafka does: an OffsetCommit behind it has not taken
    effect while it waits. Another connection is served meanwhile."""
    topic, group = unique("joining"), unique("waiting")
    other, third = unique("other"), unique("third")
    kw.ensure_topic(obroker.bootstrap, topic)
    with connect(obroker) as waiting, connect(obroker) as conn:
        first = gw.join_group(waiting, group, protocols=[range_of(topic)])
        assert first.error_code == gw.MEMBER_ID_REQUIRED
        p = kw.Pipeline(waiting)
        p.add(gw.join_group, group, first.member_id, protocols=[range_of(topic)])
        p.add(gw.offset_commit, other, {(topic, 0): gw.CommitOffset(7)})
        ids = p.send()
        started = time.monotonic()
        # another connection is answered while the join waits ...
        assert gw.offset_commit(conn, third, {(topic, 0): gw.CommitOffset(1)}) == {
            (topic, 0): gw.NONE
        }
        assert gw.offset_fetch(conn, third, {topic: [0]}).partitions[(topic, 0)].offset == 1
        # ... and does not see the commit queued behind the join, however long it looks
        time.sleep(REBALANCE_DELAY_MS / 1000 / 3)
        assert gw.offset_fetch(conn, other, {topic: [0]}).partitions[(topic, 0)].offset == -1
        assert not answered(waiting), "the JoinGroup was answered before the rebalance delay"
        assert time.monotonic() - started < REBALANCE_DELAY_MS / 1000
        joined, committed = p.read(ids)
        assert joined.error_code == gw.NONE
        assert time.monotonic() - started >= REBALANCE_DELAY_MS / 1000 * 0.9
        assert committed == {(topic, 0): gw.NONE}
        assert gw.offset_fetch(conn, other, {topic: [0]}).partitions[(topic, 0)].offset == 7


def test_pipelined_create_topics_then_metadata_and_produce(obroker):
    """CreateTopics, Metadata, Produce, ListOffsets on one socket: Metadata lists the new topic
    with its partitions, the Produce (appended as it is read) finds it, ListOffsets counts the
    records. DeleteTopics then CreateTopics of the same name: both succeed."""
    topic = unique("created")
    with connect(obroker) as conn:
        p = kw.Pipeline(conn)
        p.add(aw.create_topics, [aw.NewTopicSpec(topic, 3)])
        p.add(kw.metadata, [topic], version=4, allow_auto_topic_creation=False)
        p.add(kw.produce, topic, 2, batch([b"a", b"b", b"c"]))
        p.add(kw.list_offsets, topic, 2, kw.LATEST)
        created, md, produced, latest = p.send_and_read()
        assert [(t.name, t.error_code) for t in created] == [(topic, aw.NONE)]
        listed = md.topics[topic]
        assert listed.error_code == kw.NONE
        assert len(listed.partitions) == 3
        assert (produced.error_code, produced.base_offset) == (kw.NONE, 0)
        assert latest.offset == 3

        p = kw.Pipeline(conn)
        p.add(aw.delete_topics, [topic])
        p.add(aw.create_topics, [aw.NewTopicSpec(topic, 1)])
        p.add(kw.metadata, [topic], version=4, allow_auto_topic_creation=False)
        deleted, created, md = p.send_and_read()
        assert [(t.name, t.error_code) for t in deleted] == [(topic, aw.NONE)]
        assert [(t.name, t.error_code) for t in created] == [(topic, aw.NONE)]
        assert len(md.topics[topic].partitions) == 1


def test_pipelined_alter_then_describe_configs(obroker):
    """AlterConfigs then DescribeConfigs of a topic on one socket, round after round: the
    describe reads the value just set."""
    topic = unique("configs")
    kw.ensure_topic(obroker.bootstrap, topic)
    with connect(obroker) as conn:
        for round_ in range(ROUNDS):
            retention = str(3_600_000 + round_)
            p = kw.Pipeline(conn)
            p.add(aw.alter_configs, [(aw.TOPIC_RESOURCE, topic, {"retention.ms": retention})])
            p.add(aw.describe_configs, [(aw.TOPIC_RESOURCE, topic, ["retention.ms"])])
            altered, described = p.send_and_read()
            assert altered == [(aw.NONE, None, aw.TOPIC_RESOURCE, topic)]
            assert described[0].configs["retention.ms"].value == retention, f"round {round_}"
