"""One client's input cannot break a consumer group for the others (issue 12, items 4, 7, 10),
with raw frames where clients cannot produce the input: a 32,767-byte client id (member ids
stay encodable, the group and DescribeGroups keep working), names too long for old versions,
oversized protocol metadata, group.max.size, the MEMBER_ID_REQUIRED race on many new groups at
once, and names with newlines in the broker's log. On a broker of its own: the number of groups
(group_max_count) and the expiry of empty groups and their offsets (offsets_retention_minutes)."""

from __future__ import annotations

import select
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import admin_wire as aw
from support import group_wire as gw
from support import kafka_wire as kw
from support.clients import unique
from support.group_env import HANG_GUARD, SingleNode
from support.groups import ConfluentMember, close_all, wait_split

DELAY_MS = 300  # group.initial.rebalance.delay.ms: long enough to join during it
MEMBER_BYTES = 64 * 1024
GROUP_BYTES = 128 * 1024
MAX_SIZE = 4
ARGS = [
    "--group-initial-rebalance-delay-ms",
    str(DELAY_MS),
    "--group-max-member-metadata-bytes",
    str(MEMBER_BYTES),
    "--group-max-metadata-bytes",
    str(GROUP_BYTES),
    "--group-max-size",
    str(MAX_SIZE),
]
# Kafka's member id: "{client id}-{uuid}"; the broker keeps 255 bytes of the client id.
LONGEST_MEMBER_ID = 255 + 1 + 36
RANGE = "range"


@pytest.fixture(scope="module")
def env(module_broker_factory):
    broker = module_broker_factory(ARGS, name="limits")
    yield SingleNode(broker)
    broker.cleanup()


def connect(env: SingleNode) -> kw.RawConnection:
    return kw.RawConnection.to(env.node.bootstrap, timeout=HANG_GUARD)


def test_a_32767_byte_client_id_cannot_take_a_group_over(env):
    """JoinGroup v2 from a client id as long as the header allows: its member id stays short,
    its answer and DescribeGroups (v0 and v4) encode, and a real consumer group then forms in
    the same group (the silent member's session expires)."""
    topic = env.new_topic(unique("takeover"), 2)
    group = unique("takeover-g")
    longest = "x" * 32_767
    meta = [(RANGE, gw.subscription([topic]))]
    with connect(env) as attacker:
        joined = gw.join_group(
            attacker, group, protocols=meta, session_timeout_ms=6000, version=2, client_id=longest
        )
    assert joined.error_code == gw.NONE, joined
    assert len(joined.member_id.encode()) <= LONGEST_MEMBER_ID
    assert joined.member_id.startswith("x" * 255 + "-")
    with connect(env) as conn:
        for version in (0, 4):
            (described,) = gw.describe_groups(conn, [group], version=version)
            assert described.error_code == gw.NONE
            assert [(m.member_id, m.client_id) for m in described.members] == [
                (joined.member_id, longest)
            ]
    members = [ConfluentMember(f"after{i}", env.bootstrap(), group, topic) for i in range(2)]
    try:
        for m in members:
            m.start()
        wait_split(members, 2, [1, 1])
    finally:
        close_all(members)
    with connect(env) as conn:
        (described,) = gw.describe_groups(conn, [group], version=0)
    assert described.error_code == gw.NONE
    assert joined.member_id not in [m.member_id for m in described.members]


def test_names_older_versions_cannot_carry_are_refused(env):
    """Through flexible JoinGroup v6 names of any length arrive; one longer than an int16
    string is refused, so the group's other members (and old clients) are never sent it."""
    group = unique("names")
    too_long = "n" * 40_000
    meta = [(RANGE, b"")]
    with connect(env) as conn:
        refused = [
            gw.join_group_v6(conn, group, protocols=meta, protocol_type=too_long),
            gw.join_group_v6(conn, group, protocols=meta, group_instance_id=too_long),
            gw.join_group_v6(conn, group, protocols=[(too_long, b"")]),
        ]
        assert [code for code, _ in refused] == [gw.INVALID_REQUEST] * 3
        code, _ = gw.join_group_v6(conn, too_long, protocols=meta)
        assert code == gw.INVALID_GROUP_ID
        first = gw.join_group(conn, group, protocols=meta)
        assert first.error_code == gw.MEMBER_ID_REQUIRED
        joined = gw.join_group(conn, group, first.member_id, protocols=meta)
        assert (joined.error_code, joined.leader) == (gw.NONE, joined.member_id)
        (described,) = gw.describe_groups(conn, [group], version=0)
        assert [m.member_id for m in described.members] == [joined.member_id]


def test_protocol_metadata_is_bounded_per_member_and_per_group(env):
    group = unique("big")
    with connect(env) as conn:
        too_big = gw.join_group(conn, group, protocols=[(RANGE, b"m" * MEMBER_BYTES)], version=3)
        assert too_big.error_code == gw.MESSAGE_TOO_LARGE
        # about 60 KiB each, 80 KiB stored: one fits the group's 128 KiB, two do not
        large = [(RANGE, b"m" * (60 * 1024))]
        first = gw.join_group(conn, group, protocols=large, version=3)
        assert first.error_code == gw.NONE
        second = gw.join_group(conn, group, protocols=large, version=3)
        assert second.error_code == gw.GROUP_MAX_SIZE_REACHED
        (described,) = gw.describe_groups(conn, [group], version=0)
        assert [m.member_id for m in described.members] == [first.member_id]
    text = env.node.log_text()
    assert "group_max_member_metadata_bytes" in text and "group_max_metadata_bytes" in text


def test_group_max_size(env):
    group = unique("full")
    meta = [(RANGE, b"")]
    with connect(env) as conn:
        handed_out = [gw.join_group(conn, group, protocols=meta) for _ in range(MAX_SIZE)]
        assert {j.error_code for j in handed_out} == {gw.MEMBER_ID_REQUIRED}
        full = gw.join_group(conn, group, protocols=meta)
        assert full.error_code == gw.GROUP_MAX_SIZE_REACHED


def _late_member_joins(env: SingleNode, group: str) -> tuple[int, int]:
    """Member A starts a new group; B is handed its member id during the initial delay and
    rejoins only after generation 1 went out without it. B's (error, generation)."""
    meta = [(RANGE, b"")]
    with connect(env) as a_conn, connect(env) as b_conn:
        a_id = gw.join_group(a_conn, group, protocols=meta).member_id
        a_join = a_conn.send(gw.JOIN_GROUP, 4, _join_body(group, a_id))
        b_id = gw.join_group(b_conn, group, protocols=meta).member_id
        got, r = a_conn.recv_response()  # generation 1, without B
        assert got == a_join
        r.i32()  # throttle
        assert (r.i16(), r.i32()) == (gw.NONE, 1), f"{group}: A's first generation"
        b_join = b_conn.send(gw.JOIN_GROUP, 4, _join_body(group, b_id))
        deadline = time.monotonic() + HANG_GUARD
        # A rejoins until B has its answer: generation 1 again while B's join is on its way,
        # then the join phase B's join started, which A's rejoin completes.
        while not select.select([b_conn.sock], [], [], 0.05)[0]:
            assert time.monotonic() < deadline, f"{group}: B never answered"
            gw.join_group(a_conn, group, a_id, protocols=meta)
        got, r = b_conn.recv_response()
        assert got == b_join
        r.i32()  # throttle
        return r.i16(), r.i32()


def _join_body(group: str, member_id: str) -> bytes:
    w = kw.Writer().string(group).i32(10_000).i32(10_000).string(member_id).string("consumer")
    return w.array_len(1).string(RANGE).bytes_(b"").done()


def test_member_ids_handed_out_survive_the_first_rebalance_of_many_new_groups(env):
    """40 new groups at once, each with a member that got its id (MEMBER_ID_REQUIRED) during
    the initial delay and joins after the first generation: every one is let in."""
    groups = [unique(f"race{i}") for i in range(40)]
    with ThreadPoolExecutor(len(groups)) as pool:
        outcomes = list(pool.map(lambda g: _late_member_joins(env, g), groups))
    assert outcomes == [(gw.NONE, 2)] * len(groups)


@pytest.mark.parametrize("api", ["CreateTopics", "DeleteTopics"])
def test_a_newline_in_a_topic_name_cannot_forge_a_log_line(env, api):
    forged = f"{unique('ghost')}\n2026-01-01T00:00:00.000Z ERROR kafscale.broker: forged {api}"
    with connect(env) as conn:
        if api == "CreateTopics":
            (result,) = aw.create_topics(conn, [aw.NewTopicSpec(forged, 1)], version=0)
        else:
            (result,) = aw.delete_topics(conn, [forged])
    assert result.error_code != gw.NONE
    lines = env.node.log_text().splitlines()
    assert not [line for line in lines if line.startswith("2026-01-01T00:00:00.000Z")]
    if api == "DeleteTopics":  # v0-2 carry no error message: the refusal is logged
        assert [line for line in lines if "\\n2026-01-01T00:00:00.000Z ERROR" in line]


# --- groups per broker and their expiry ----------------------------------------------------------

GROUP_MAX_COUNT = 3
RETENTION_MINUTES = 1
CAPPED_ARGS = [
    "--group-initial-rebalance-delay-ms",
    "0",
    "--group-max-count",
    str(GROUP_MAX_COUNT),
    "--offsets-retention-minutes",
    str(RETENTION_MINUTES),
    "--offsets-retention-check-interval-ms",
    "200",
]


@pytest.fixture(scope="module")
def capped(module_broker_factory):
    broker = module_broker_factory(CAPPED_ARGS, name="capped")
    yield SingleNode(broker)
    broker.cleanup()


def _state(conn: kw.RawConnection, group: str) -> str:
    (described,) = gw.describe_groups(conn, [group], version=0)
    return described.state


def _wait_for(what: str, done) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not done():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)


def test_empty_groups_and_their_offsets_expire(capped):
    """With a retention of one minute and a check every 200 ms: a simple consumer's offset
    committed (v1 timestamp) two minutes ago expires and its group goes; a consumer group
    whose last member left, with no offsets, goes at the next check; a fresh commit stays."""
    topic = capped.new_topic(unique("expiry"), 1)
    old, left, fresh = unique("old"), unique("left"), unique("fresh")
    two_minutes_ago = int(time.time() * 1000) - 120_000
    with connect(capped) as conn:
        stale = {(topic, 0): gw.CommitOffset(5, commit_timestamp=two_minutes_ago)}
        assert gw.offset_commit(conn, old, stale, version=1) == {(topic, 0): gw.NONE}
        assert gw.offset_commit(conn, fresh, {(topic, 0): gw.CommitOffset(7)}) == {
            (topic, 0): gw.NONE
        }
        joined = gw.join_group(conn, left, protocols=[(RANGE, gw.subscription([topic]))], version=3)
        assert joined.error_code == gw.NONE
        synced = gw.sync_group(conn, left, joined.generation_id, joined.member_id, {})
        assert synced.error_code == gw.NONE
        assert gw.leave_group(conn, left, [(joined.member_id, None)]).error_code == gw.NONE
        _wait_for(
            f"{old} and {left} removed", lambda: _state(conn, old) == _state(conn, left) == "Dead"
        )
        fetched = gw.offset_fetch(conn, old, {topic: [0]})
        assert fetched.partitions[(topic, 0)].offset == gw.NO_OFFSET
        assert _state(conn, fresh) == "Empty"
        assert gw.offset_fetch(conn, fresh, {topic: [0]}).partitions[(topic, 0)].offset == 7


def test_offset_commit_to_more_groups_than_the_cap_is_refused(capped):
    """New groups are taken until the broker holds group_max_count of them (earlier tests'
    groups may hold some of the room); the next gets INVALID_COMMIT_OFFSET_SIZE and the log
    names the setting, while a group that exists still commits."""
    topic = capped.new_topic(unique("capped"), 1)
    offsets = {(topic, 0): gw.CommitOffset(1)}
    created: list[str] = []
    with connect(capped) as conn:
        for _ in range(GROUP_MAX_COUNT + 1):
            group = unique("many")
            code = gw.offset_commit(conn, group, offsets)[(topic, 0)]
            if code != gw.NONE:
                break
            created.append(group)
        assert code == gw.INVALID_COMMIT_OFFSET_SIZE, "no group refused"
        assert 1 <= len(created) <= GROUP_MAX_COUNT
        assert gw.offset_commit(conn, created[0], offsets) == {(topic, 0): gw.NONE}
        refused = gw.join_group(conn, unique("many"), protocols=[(RANGE, b"")], version=3)
        assert refused.error_code == gw.GROUP_MAX_SIZE_REACHED
    assert "group_max_count" in capped.node.log_text()
