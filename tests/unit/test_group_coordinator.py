"""The group coordinator against a fake core and an in-memory store with etcd's revision
semantics (no extension, no network): the classic protocol's state machine, offsets, fencing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from support.coordinator_fakes import (
    CLIENT,
    GROUP,
    FakeStore,
    commit_req,
    coordinator,
    fetch,
    fetch_req,
    hb_req,
    join,
    join_new,
    join_req,
    leave_req,
    run,
    stable_group,
    sync_req,
)

from kafscale.api_keys import ApiKey
from kafscale.errors import ErrorCode

# --- join / sync ---------------------------------------------------------------------------------


def test_first_join_v4_needs_a_member_id_and_v3_does_not() -> None:
    async def go() -> None:
        c, _ = coordinator()
        first = await join(c, join_req(), version=4)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id.startswith("app-")
        old = await join(c, join_req(group_id="other"), version=3)
        assert old.error_code == ErrorCode.NONE and old.member_id == old.leader

    run(go())


def test_leader_gets_every_members_metadata_verbatim_and_sync_hands_out_assignments() -> None:
    async def go() -> None:
        c, core = coordinator()
        store = core.store
        a = await join_new(c, protocols=(("range", b"A-range"), ("roundrobin", b"A-rr")))
        b = await join_new(c, protocols=(("roundrobin", b"B-rr"), ("range", b"B-range")))
        ja, jb = await asyncio.gather(a, b)
        assert ja.generation_id == jb.generation_id == 1
        leader, follower = (ja, jb) if ja.member_id == ja.leader else (jb, ja)
        # one vote each; the tie goes to the first preference counted (the first member's)
        assert ja.protocol_name == jb.protocol_name == "range"
        assert {m.member_id: m.metadata for m in leader.members} == {
            ja.member_id: b"A-range",
            jb.member_id: b"B-range",
        }
        assert follower.members == []
        follower_sync = asyncio.create_task(
            c.handle(ApiKey.SYNC_GROUP, 3, sync_req(follower.member_id, 1), CLIENT)
        )
        await asyncio.sleep(0.05)
        assert not follower_sync.done(), "a follower waits for the leader's assignment"
        assignments = {leader.member_id: b"L", follower.member_id: b"F"}
        got = await c.handle(
            ApiKey.SYNC_GROUP, 3, sync_req(leader.member_id, 1, assignments), CLIENT
        )
        assert got.assignment == b"L"
        assert (await follower_sync).assignment == b"F"
        assert (
            await c.handle(ApiKey.HEARTBEAT, 3, hb_req(follower.member_id, 1), CLIENT)
        ).error_code == 0
        # stored: the new generation, then the assignment (Stable)
        assert store.writes == 2

    run(go())


def test_join_waits_for_every_known_member_to_rejoin() -> None:
    async def go() -> None:
        c, _ = coordinator()
        ja, jb = await stable_group(c, 2)
        newcomer = await join_new(c)
        await asyncio.sleep(0.05)
        assert not newcomer.done()
        for j in (ja, jb):
            hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(j.member_id, 1), CLIENT)
            assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
        rejoin_a = asyncio.create_task(join(c, join_req(ja.member_id)))
        await asyncio.sleep(0.05)
        assert not newcomer.done() and not rejoin_a.done()
        rejoin_b = await join(c, join_req(jb.member_id))
        assert rejoin_b.generation_id == 2
        assert (await newcomer).generation_id == 2 and (await rejoin_a).generation_id == 2

    run(go())


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    async def go() -> None:
        c, _ = coordinator()
        ja, jb = await stable_group(c, 2, rebalance_ms=300)
        rejoin = await join(c, join_req(ja.member_id, rebalance_ms=300))
        assert rejoin.generation_id == 2
        assert [m.member_id for m in rejoin.members] == [ja.member_id]
        hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(jb.member_id, 1), CLIENT)
        assert hb.error_code == ErrorCode.UNKNOWN_MEMBER_ID

    run(go())


def test_initial_delay_gathers_members_into_one_generation() -> None:
    async def go() -> None:
        c, _ = coordinator(delay_ms=200)
        first = await join_new(c)
        await asyncio.sleep(0.1)
        second = await join_new(c)
        a, b = await asyncio.gather(first, second)
        assert a.generation_id == b.generation_id == 1
        assert len((a if a.member_id == a.leader else b).members) == 2

    run(go())


def test_a_group_forgotten_while_its_first_request_waited_for_the_load_is_loaded_again() -> None:
    """The sweep that forgets idle groups runs between the load of a new group and the resume of
    the request that loaded it: the member id that request hands out must belong to the group
    in memory, or the member's real join finds no such id (and its group starts without it)."""

    async def go() -> None:
        c, _ = coordinator()
        first = asyncio.create_task(join(c, join_req(), version=4))
        await asyncio.sleep(0)  # the request started the load and waits for it
        loading = c._loading[GROUP]
        # Runs after the load finished and before the request resumes (callbacks run in order).
        loading.add_done_callback(lambda _: c.forget_idle_groups())
        handed_out = await first
        assert handed_out.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = await join(c, join_req(handed_out.member_id), version=4)
        assert (joined.error_code, joined.generation_id) == (ErrorCode.NONE, 1)

    run(go())


def test_leave_group_v3_removes_members_at_once() -> None:
    async def go() -> None:
        c, _ = coordinator()
        ja, jb, jc = await stable_group(c, 3)
        left = await c.handle(ApiKey.LEAVE_GROUP, 3, leave_req(jb.member_id, "nobody"), CLIENT)
        assert left.error_code == ErrorCode.NONE
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (jb.member_id, ErrorCode.NONE),
            ("nobody", ErrorCode.UNKNOWN_MEMBER_ID),
        ]
        a, cc = await asyncio.gather(
            join(c, join_req(ja.member_id)), join(c, join_req(jc.member_id))
        )
        assert a.generation_id == cc.generation_id == 2
        leave_all = leave_req(ja.member_id, jc.member_id)
        assert (await c.handle(ApiKey.LEAVE_GROUP, 3, leave_all, CLIENT)).error_code == 0
        assert c._groups[GROUP].state.value == "Empty"

    run(go())


def test_session_timeout_expires_a_silent_member() -> None:
    async def go() -> None:
        c, _ = coordinator()
        sweeper = asyncio.create_task(c.run())
        try:
            ja, _jb = await stable_group(c, 2, session_ms=400)
            for _ in range(8):
                await asyncio.sleep(0.1)
                await c.handle(ApiKey.HEARTBEAT, 3, hb_req(ja.member_id, 1), CLIENT)
            hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(ja.member_id, 1), CLIENT)
            assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
            rejoin = await join(c, join_req(ja.member_id, session_ms=400))
            assert rejoin.generation_id == 2 and len(rejoin.members) == 1
        finally:
            sweeper.cancel()

    run(go())


def test_heartbeats_are_not_written_to_the_store() -> None:
    async def go() -> None:
        c, core = coordinator()
        store = core.store
        (ja,) = await stable_group(c, 1)
        before = store.writes
        for _ in range(20):
            assert (
                await c.handle(ApiKey.HEARTBEAT, 3, hb_req(ja.member_id, 1), CLIENT)
            ).error_code == 0
        assert store.writes == before

    run(go())


def test_heartbeat_and_sync_errors() -> None:
    async def go() -> None:
        c, _ = coordinator()
        (ja,) = await stable_group(c, 1)
        hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(ja.member_id, 7), CLIENT)
        assert hb.error_code == ErrorCode.ILLEGAL_GENERATION
        hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req("stranger", 1), CLIENT)
        assert hb.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        bad = sync_req(ja.member_id, 1, protocol_type="connect")
        assert (await c.handle(ApiKey.SYNC_GROUP, 5, bad, CLIENT)).error_code == 23

    run(go())


def test_validation_errors() -> None:
    async def go() -> None:
        c, _ = coordinator()
        assert (await join(c, join_req(group_id=""))).error_code == ErrorCode.INVALID_GROUP_ID
        too_short = join_req(session_ms=10)
        assert (await join(c, too_short)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        await stable_group(c, 1)
        other = join_req(protocols=(("sticky", b"x"),))
        assert (await join(c, other)).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        other_type = join_req(protocol_type="connect")
        assert (await join(c, other_type)).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    run(go())


def test_static_member_restart_keeps_its_assignment_without_a_rebalance() -> None:
    async def go() -> None:
        c, _ = coordinator()
        dynamic, static = await stable_group(c, 1, static=("pod-1",))
        restarted = await join(c, join_req(instance="pod-1"))
        assert restarted.error_code == ErrorCode.NONE and restarted.generation_id == 1
        assert restarted.member_id != static.member_id
        old = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(static.member_id, 1, "pod-1"), CLIENT)
        assert old.error_code == ErrorCode.FENCED_INSTANCE_ID
        other = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(dynamic.member_id, 1), CLIENT)
        assert other.error_code == ErrorCode.NONE, "no rebalance for the others"
        sync = sync_req(restarted.member_id, 1, instance="pod-1")
        assert (
            await c.handle(ApiKey.SYNC_GROUP, 3, sync, CLIENT)
        ).assignment == static.member_id.encode()
        left = await c.handle(ApiKey.LEAVE_GROUP, 4, leave_req(instances=("pod-1",)), CLIENT)
        assert left.members[0].error_code == ErrorCode.NONE

    run(go())


# --- offsets -------------------------------------------------------------------------------------


def test_simple_consumer_commits_and_fetches_offsets() -> None:
    async def go() -> None:
        c, core = coordinator()
        store = core.store
        empty = await fetch(c, {"t": [0, 1]})
        assert [(p.partition_index, p.committed_offset) for p in empty.topics[0].partitions] == [
            (0, -1),
            (1, -1),
        ]
        req = commit_req({("t", 0): 10, ("t", 1): 20, ("t", 9): 5, ("nope", 0): 1})
        got = await c.handle(ApiKey.OFFSET_COMMIT, 3, req, CLIENT)
        codes = {
            (t.name, p.partition_index): p.error_code for t in got.topics for p in t.partitions
        }
        assert codes == {
            ("t", 0): 0,
            ("t", 1): 0,
            ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        everything = await fetch(c, None)
        assert [
            (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
            for t in everything.topics
            for p in t.partitions
        ] == [("t", 0, 10, 3, "m"), ("t", 1, 20, 3, "m")]
        # a second coordinator (after failover) reads the same offsets from the store
        c2, _ = coordinator(store)
        again = await fetch(c2, {"t": [1, 2]})
        assert [p.committed_offset for p in again.topics[0].partitions] == [20, -1]

    run(go())


def test_commit_rules_for_members() -> None:
    async def go() -> None:
        c, _ = coordinator()
        (ja,) = await stable_group(c, 1)
        ok = await c.handle(
            ApiKey.OFFSET_COMMIT, 8, commit_req({("t", 0): 5}, 1, ja.member_id), CLIENT
        )
        assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE
        stale = commit_req({("t", 0): 6}, 0, ja.member_id)
        got = await c.handle(ApiKey.OFFSET_COMMIT, 8, stale, CLIENT)
        assert got.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
        simple = await c.handle(ApiKey.OFFSET_COMMIT, 8, commit_req({("t", 0): 7}), CLIENT)
        assert simple.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
        big = commit_req({("t", 0): 8}, 1, ja.member_id, meta="x" * 5000)
        got = await c.handle(ApiKey.OFFSET_COMMIT, 8, big, CLIENT)
        assert got.topics[0].partitions[0].error_code == ErrorCode.OFFSET_METADATA_TOO_LARGE

    run(go())


def test_large_commits_are_split_into_transactions_etcd_accepts() -> None:
    async def go() -> None:
        c, core = coordinator()
        core.topics["big"] = SimpleNamespace(partitions=500)
        req = commit_req({("big", p): p for p in range(500)})
        got = await c.handle(ApiKey.OFFSET_COMMIT, 8, req, CLIENT)
        assert {p.error_code for p in got.topics[0].partitions} == {0}
        assert core.store.writes == 6  # the group record rides with the first 99 offsets

    run(go())


def test_offset_fetch_answers_each_group_on_its_own() -> None:
    """v8+ ask for several groups at once: each gets its offsets or its own error."""

    async def go() -> None:
        c, core = coordinator()
        core.elsewhere.update({"theirs": 2, "orphan": None})
        await c.handle(ApiKey.OFFSET_COMMIT, 3, commit_req({("t", 0): 10}), CLIENT)
        answer = await c.fetch_offsets(fetch_req({"t": [0]}, GROUP, "theirs", "orphan", "fresh"))
        got = [
            (g.group_id, g.error_code, [p.committed_offset for t in g.topics for p in t.partitions])
            for g in answer.groups
        ]
        assert got == [
            (GROUP, ErrorCode.NONE, [10]),
            ("theirs", ErrorCode.NOT_COORDINATOR, []),
            ("orphan", ErrorCode.COORDINATOR_NOT_AVAILABLE, []),
            ("fresh", ErrorCode.NONE, [-1]),
        ]

    run(go())


# --- placement and fencing ---------------------------------------------------------------------


def test_other_brokers_answer_not_coordinator() -> None:
    async def go() -> None:
        c, core = coordinator()
        core.coordinator = 2
        assert (await join(c, join_req())).error_code == ErrorCode.NOT_COORDINATOR
        fetched = await fetch(c, None)
        assert fetched.error_code == ErrorCode.NOT_COORDINATOR
        core.coordinator = None
        assert (await join(c, join_req())).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(go())


def test_a_new_coordinator_loads_the_group_and_fences_the_old_one() -> None:
    async def go() -> None:
        store = FakeStore()
        old, _ = coordinator(store)
        ja, jb = await stable_group(old, 2)
        new, _ = coordinator(store, broker_id=1)
        # members carry on at the new coordinator with their ids and generation
        hb = await new.handle(ApiKey.HEARTBEAT, 3, hb_req(ja.member_id, 1), CLIENT)
        assert hb.error_code == ErrorCode.NONE
        sync = await new.handle(ApiKey.SYNC_GROUP, 3, sync_req(jb.member_id, 1), CLIENT)
        assert sync.assignment == jb.member_id.encode()
        # the old coordinator's next write fails: it gives the group up
        stale = commit_req({("t", 0): 1}, 1, ja.member_id)
        got = await old.handle(ApiKey.OFFSET_COMMIT, 8, stale, CLIENT)
        assert got.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
        assert GROUP not in old._groups
        ok = await new.handle(ApiKey.OFFSET_COMMIT, 8, stale, CLIENT)
        assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE

    run(go())


def test_a_group_loaded_mid_rebalance_makes_its_members_rejoin() -> None:
    async def go() -> None:
        store = FakeStore()
        old, _ = coordinator(store)
        first = await join_new(old)
        (ja,) = [await first]  # generation 1 stored, nobody synced yet
        new, _ = coordinator(store)
        hb = await new.handle(ApiKey.HEARTBEAT, 3, hb_req(ja.member_id, 1), CLIENT)
        assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = await join(new, join_req(ja.member_id))
        assert rejoined.error_code == ErrorCode.NONE and rejoined.generation_id == 2

    run(go())


def test_store_outage_answers_coordinator_not_available() -> None:
    async def go() -> None:
        c, core = coordinator()
        core.store.down = True
        assert (await join(c, join_req())).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        core.store.down = False
        (ja,) = await stable_group(c, 1)
        core.store.down = True
        got = await c.handle(
            ApiKey.OFFSET_COMMIT, 8, commit_req({("t", 0): 1}, 1, ja.member_id), CLIENT
        )
        assert got.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(go())


def test_group_ids_are_escaped_in_store_keys() -> None:
    async def go() -> None:
        c, core = coordinator()
        req = commit_req({("t", 0): 1})
        req.group_id = "a/offsets/t"
        await c.handle(ApiKey.OFFSET_COMMIT, 8, req, CLIENT)
        assert sorted(core.store.data) == ["a%2Foffsets%2Ft", "a%2Foffsets%2Ft/offsets/t/0"]

    run(go())


@pytest.mark.parametrize(
    "api_key", [ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP]
)
def test_requests_for_a_dead_group_id_are_rejected_cleanly(api_key: int) -> None:
    async def go() -> None:
        c, _ = coordinator()
        body = {
            ApiKey.JOIN_GROUP: join_req(group_id=""),
            ApiKey.SYNC_GROUP: SimpleNamespace(**{**vars(sync_req("m", 1)), "group_id": ""}),
            ApiKey.HEARTBEAT: SimpleNamespace(**{**vars(hb_req("m", 1)), "group_id": ""}),
            ApiKey.LEAVE_GROUP: SimpleNamespace(group_id="", members=[]),
        }[api_key]
        assert (await c.handle(api_key, 3, body, CLIENT)).error_code == ErrorCode.INVALID_GROUP_ID

    run(go())


def test_shutdown_sends_waiting_members_to_the_next_coordinator() -> None:
    async def go() -> None:
        c, _ = coordinator(delay_ms=5_000)
        waiting = await join_new(c)
        await asyncio.sleep(0.05)
        c.close()
        assert (await waiting).error_code == ErrorCode.NOT_COORDINATOR
        assert (await join(c, join_req())).error_code == ErrorCode.NOT_COORDINATOR

    run(go())


# --- ops: DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------


def test_describe_list_and_delete_groups() -> None:
    async def go() -> None:
        c, core = coordinator()
        ja, jb = await stable_group(c, 2)
        (described,) = (await c.describe([GROUP])).groups
        assert (described.group_state, described.protocol_type, described.protocol_data) == (
            "Stable",
            "consumer",
            "range",
        )
        members = {m.member_id: m for m in described.members}
        assert members[ja.member_id].member_assignment == ja.member_id.encode()
        assert members[ja.member_id].member_metadata == b"R"
        assert members[jb.member_id].client_id == "app"
        assert members[jb.member_id].client_host == "127.0.0.1"
        (unknown,) = (await c.describe(["never-seen"])).groups
        assert (unknown.error_code, unknown.group_state) == (0, "Dead")

        listed = await c.list_groups([], [])
        assert [(g.group_id, g.group_state) for g in listed.groups] == [(GROUP, "Stable")]
        assert (await c.list_groups(["empty"], [])).groups == []
        assert (await c.list_groups(["STABLE"], ["classic"])).groups != []
        assert (await c.list_groups([], ["consumer"])).groups == []

        commit = commit_req({("t", 0): 4}, 1, ja.member_id)
        await c.handle(ApiKey.OFFSET_COMMIT, 8, commit, CLIENT)
        deleted = await c.delete([GROUP, "never-seen"])
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (GROUP, ErrorCode.NON_EMPTY_GROUP),
            ("never-seen", ErrorCode.GROUP_ID_NOT_FOUND),
        ]
        await c.handle(ApiKey.LEAVE_GROUP, 3, leave_req(ja.member_id, jb.member_id), CLIENT)
        assert [r.error_code for r in (await c.delete([GROUP])).results] == [0]
        assert core.store.data == {}, "the record and its offsets are gone"
        fetched = await fetch(c, {"t": [0]})
        assert fetched.topics[0].partitions[0].committed_offset == -1
        core.coordinator = 2
        (elsewhere,) = (await c.describe([GROUP])).groups
        assert elsewhere.error_code == ErrorCode.NOT_COORDINATOR

    run(go())
