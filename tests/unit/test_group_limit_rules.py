"""What one member may bring into a group (member ids, names, metadata, assignments, member
count), the stored record staying within etcd's request limit, and the join race of new groups -
against the coordinator's test bench (no extension, no network)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from support.coordinator_fakes import (
    CLIENT,
    GROUP,
    FakeStore,
    commit_req,
    coordinator,
    fetch,
    hb_req,
    join,
    join_new,
    join_req,
    run,
    stable_group,
    sync_req,
)

from kafscale.api_keys import ApiKey
from kafscale.config import Settings
from kafscale.errors import ErrorCode
from kafscale.groups import limits
from kafscale.groups.limits import MAX_WIRE_STRING_BYTES, MEMBER_ID_PREFIX_BYTES
from kafscale.log_limit import LogLimit


@pytest.fixture(autouse=True)
def fresh_log_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's refusals are logged, whatever earlier tests logged in the same second."""
    monkeypatch.setattr(limits, "_REFUSALS", LogLimit("refused group requests"))


# etcd's default --max-request-bytes.
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
UUID_SUFFIX = len("-") + 36


class MeasuringStore(FakeStore):
    """Also records the largest transaction, as etcd would count it (keys and values)."""

    largest: int = 0

    async def commit(self, expect, put, delete, delete_prefixes) -> int | None:
        size = sum(len(k.encode()) for k, _ in expect) + sum(len(k) + len(v) for k, v in put)
        self.largest = max(self.largest, size)
        return await super().commit(expect, put, delete, delete_prefixes)


def client(client_id: str) -> Any:
    return SimpleNamespace(client_id=client_id, client_host="127.0.0.1")


# --- the join race (issue 12, item 10) ---------------------------------------------------------


def test_a_member_id_handed_out_during_the_first_rebalance_stays_valid() -> None:
    """A new member gets its id (MEMBER_ID_REQUIRED) while a new group's initial delay runs;
    the delay ends before it rejoins. Its id must still be honoured: it joins the next
    generation instead of getting UNKNOWN_MEMBER_ID."""

    async def go() -> None:
        c, _ = coordinator(delay_ms=50)
        first = await join_new(c)
        second = await join(c, join_req())
        assert second.error_code == ErrorCode.MEMBER_ID_REQUIRED
        a = await first  # the initial delay ended: generation 1, without the second member
        assert (a.error_code, a.generation_id) == (ErrorCode.NONE, 1)
        late = asyncio.create_task(join(c, join_req(second.member_id)))
        await asyncio.sleep(0)
        hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(a.member_id, 1), CLIENT)
        assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
        a2 = await join(c, join_req(a.member_id))
        b = await late
        assert b.error_code == ErrorCode.NONE, "the member id handed out was forgotten"
        assert a2.generation_id == b.generation_id == 2
        assert b.member_id == second.member_id

    run(go())


def test_an_unused_member_id_expires_with_its_session() -> None:
    async def go() -> None:
        c, _ = coordinator(delay_ms=0)
        sweeper = asyncio.create_task(c.run())
        try:
            (a,) = await stable_group(c, 1)
            unused = await join(c, join_req(session_ms=300))
            assert unused.error_code == ErrorCode.MEMBER_ID_REQUIRED
            while c._groups[GROUP].pending_members:
                await asyncio.sleep(0.05)
            hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(a.member_id, 1), CLIENT)
            assert hb.error_code == ErrorCode.NONE, "an unused id expiring is no rebalance"
            late = await join(c, join_req(unused.member_id))
            assert late.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        finally:
            sweeper.cancel()

    run(go())


# --- member ids and names (item 4) ---------------------------------------------------------------


def test_member_ids_are_bounded_whatever_the_client_id() -> None:
    async def go() -> None:
        c, _ = coordinator(delay_ms=0)
        longest = "c" * MAX_WIRE_STRING_BYTES
        got = await c.handle(11, 4, join_req(), client(longest))
        assert got.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert got.member_id.startswith("c" * MEMBER_ID_PREFIX_BYTES + "-")
        assert len(got.member_id.encode()) == MEMBER_ID_PREFIX_BYTES + UUID_SUFFIX
        # cut on a character boundary, never inside a multi-byte character
        wide = await c.handle(11, 3, join_req(group_id="w"), client("é" * 20_000))
        assert wide.member_id.startswith("é" * (MEMBER_ID_PREFIX_BYTES // 2) + "-")
        static = await c.handle(11, 5, join_req(group_id="s", instance="i" * 20_000), CLIENT)
        assert len(static.member_id.encode()) == MEMBER_ID_PREFIX_BYTES + UUID_SUFFIX
        # the full client id is still what DescribeGroups reports
        (described,) = (await c.describe(["w"])).groups
        assert described.members[0].client_id == "é" * 20_000

    run(go())


def test_names_no_version_could_echo_are_refused_and_the_group_carries_on() -> None:
    async def go() -> None:
        c, _ = coordinator(delay_ms=0)
        (a,) = await stable_group(c, 1)
        too_long = "x" * (MAX_WIRE_STRING_BYTES + 1)
        for bad in (
            join_req(instance=too_long),
            join_req(protocol_type=too_long),
            join_req(protocols=(("range", b"R"), (too_long, b""))),
        ):
            assert (await join(c, bad)).error_code == ErrorCode.INVALID_REQUEST
        hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(a.member_id, 1), CLIENT)
        assert hb.error_code == ErrorCode.NONE, "a refused join does not disturb the group"
        long_group = join_req(group_id=too_long)
        assert (await join(c, long_group)).error_code == ErrorCode.INVALID_GROUP_ID
        commit = commit_req({("t", 0): 1})
        commit.group_id = too_long
        got = await c.handle(ApiKey.OFFSET_COMMIT, 8, commit, CLIENT)
        assert got.topics[0].partitions[0].error_code == ErrorCode.INVALID_GROUP_ID
        assert [g.group_id for g in (await c.list_groups([], [])).groups] == [GROUP]

    run(go())


# --- sizes and member count (item 7) -------------------------------------------------------------


def test_protocol_metadata_per_member_is_bounded() -> None:
    async def go() -> None:
        c, _ = coordinator(delay_ms=0, group_max_member_metadata_bytes=2048)
        name_and_metadata = (("range", b"m" * (2048 - len("range"))),)
        assert (await join(c, join_req(protocols=name_and_metadata), 3)).error_code == 0
        # the limit counts every protocol a member names
        many = (("range", b"m" * 1024), ("roundrobin", b"m" * 1024))
        got = await join(c, join_req(protocols=many, group_id="other"), 3)
        assert got.error_code == ErrorCode.MESSAGE_TOO_LARGE

    run(go())


def test_the_stored_record_is_bounded_per_group() -> None:
    async def go() -> None:
        c, core = coordinator(group_max_metadata_bytes=8192)
        protocols = (("range", b"m" * 2000),)  # about 2.7 KB stored (base64)
        joined = await stable_group(c, 2, protocols=protocols)
        third = await join(c, join_req(protocols=protocols))
        assert third.error_code == ErrorCode.MEMBER_ID_REQUIRED
        refused = await join(c, join_req(third.member_id, protocols=protocols))
        assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        # a member may not grow its metadata past the limit either
        bigger = (("range", b"m" * 4000),)
        grown = await join(c, join_req(joined[0].member_id, protocols=bigger))
        assert grown.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        hb = await c.handle(ApiKey.HEARTBEAT, 3, hb_req(joined[1].member_id, 1), CLIENT)
        assert hb.error_code == ErrorCode.NONE, "the group is as it was"
        assert max(len(e.value) for e in core.store.data.values()) <= 8192

    run(go())


def test_assignments_past_a_limit_are_refused_and_everyone_rejoins() -> None:
    async def go() -> None:
        c, core = coordinator(group_max_member_metadata_bytes=4096)
        a, b = await asyncio.gather(await join_new(c), await join_new(c))
        leader, follower = (a, b) if a.member_id == a.leader else (b, a)
        waiting = asyncio.create_task(
            c.handle(ApiKey.SYNC_GROUP, 3, sync_req(follower.member_id, 1), CLIENT)
        )
        await asyncio.sleep(0)
        huge = {leader.member_id: b"L", follower.member_id: b"F" * 5000}
        got = await c.handle(ApiKey.SYNC_GROUP, 3, sync_req(leader.member_id, 1, huge), CLIENT)
        assert got.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert (await waiting).error_code == ErrorCode.REBALANCE_IN_PROGRESS
        assert b"RiBGRkZG" not in b"".join(e.value for e in core.store.data.values())
        a2, b2 = await asyncio.gather(
            join(c, join_req(leader.member_id)), join(c, join_req(follower.member_id))
        )
        assert a2.generation_id == b2.generation_id == 2

    run(go())


def test_group_max_size_counts_members_and_handed_out_ids() -> None:
    async def go() -> None:
        c, _ = coordinator(delay_ms=0, group_max_size=2)
        (a,) = await stable_group(c, 1)
        pending = await join(c, join_req())
        assert pending.error_code == ErrorCode.MEMBER_ID_REQUIRED
        full = await join(c, join_req())
        assert full.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert (await join(c, join_req(instance="pod"), 5)).error_code == 81
        # the member that was handed an id still gets in; a known member rejoins freely
        b = asyncio.create_task(join(c, join_req(pending.member_id)))
        await asyncio.sleep(0)
        a2 = await join(c, join_req(a.member_id))
        assert (await b).error_code == a2.error_code == ErrorCode.NONE

    run(go())


def test_default_limits_keep_every_transaction_within_etcds_request_limit() -> None:
    """A group filled to the default limits with the names that take the most room stored
    (control characters: six bytes each in JSON), then 500 offsets with the largest metadata:
    no transaction reaches etcd's 1.5 MiB."""

    async def go() -> None:
        store = MeasuringStore()
        c, core = coordinator(store, delay_ms=0)
        defaults = Settings.__dataclass_fields__
        per_member = defaults["group_max_member_metadata_bytes"].default
        group_id = "\x01" * MAX_WIRE_STRING_BYTES
        name = "\x02" * 1000
        protocols = ((name, b"m" * (per_member - len(name))),)
        kw: dict[str, Any] = {"group_id": group_id, "protocols": protocols}
        longest_client = client("\x03" * MAX_WIRE_STRING_BYTES)
        handed_out = [(await c.handle(11, 4, join_req(**kw), longest_client)) for _ in range(5)]
        joins = [join(c, join_req(h.member_id, **kw)) for h in handed_out]
        joined = await asyncio.gather(*joins)
        ids = [j.member_id for j in joined if j.error_code == ErrorCode.NONE]
        refused = [j for j in joined if j.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED]
        assert len(ids) >= 2 and refused, "filled up to group_max_metadata_bytes"
        assignments = {m: b"a" * 1000 for m in ids}
        sync = sync_req(ids[0], 1, assignments)
        sync.group_id = group_id
        await c.handle(ApiKey.SYNC_GROUP, 3, sync, CLIENT)
        core.topics["t"] = SimpleNamespace(partitions=500)
        commit = commit_req({("t", p): p for p in range(500)}, 1, ids[0], meta="\x04" * 4096)
        commit.group_id = group_id
        got = await c.handle(ApiKey.OFFSET_COMMIT, 8, commit, CLIENT)
        assert {p.error_code for p in got.topics[0].partitions} == {ErrorCode.NONE}
        assert store.largest < ETCD_MAX_REQUEST_BYTES, store.largest

    run(go())


# --- groups per broker and offsets per group ----------------------------------------------------


class YieldingStore(FakeStore):
    """Commits give the loop a turn first, as a real store's round trip does, so that
    concurrent requests interleave at the write."""

    async def commit(self, expect, put, delete, delete_prefixes) -> int | None:
        await asyncio.sleep(0)
        return await super().commit(expect, put, delete, delete_prefixes)


def first_code(answer: Any) -> int:
    return answer.topics[0].partitions[0].error_code


def test_group_max_count_refuses_new_groups_and_names_the_setting(caplog: Any) -> None:
    async def go() -> None:
        c, core = coordinator(delay_ms=0, group_max_count=2)
        for g in ("a", "b"):
            got = await c.handle(
                ApiKey.OFFSET_COMMIT, 8, commit_req({("t", 0): 1}, group_id=g), CLIENT
            )
            assert first_code(got) == ErrorCode.NONE
        third = commit_req({("t", 0): 1}, group_id="c")
        got = await c.handle(ApiKey.OFFSET_COMMIT, 8, third, CLIENT)
        assert first_code(got) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        joined = await join(c, join_req(group_id="d"))
        assert joined.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert not [k for k in core.store.data if k.startswith(("c", "d"))]
        # groups that exist carry on; deleting one makes room
        again = commit_req({("t", 1): 1}, group_id="a")
        assert first_code(await c.handle(ApiKey.OFFSET_COMMIT, 8, again, CLIENT)) == 0
        assert (await c.delete(["a"])).results[0].error_code == ErrorCode.NONE
        assert first_code(await c.handle(ApiKey.OFFSET_COMMIT, 8, third, CLIENT)) == 0

    run(go())
    assert "--group-max-count" in caplog.text and "KAFSCALE_GROUP_MAX_COUNT" in caplog.text


def test_group_max_count_holds_for_concurrent_creations() -> None:
    """Ten new groups at once, each write interleaved with the others: two get in."""

    async def go() -> None:
        c, core = coordinator(YieldingStore(), delay_ms=0, group_max_count=2)
        commits = [
            c.handle(ApiKey.OFFSET_COMMIT, 8, commit_req({("t", 0): 1}, group_id=f"g{i}"), CLIENT)
            for i in range(10)
        ]
        codes = [first_code(got) for got in await asyncio.gather(*commits)]
        assert sorted(codes) == [0, 0] + [ErrorCode.INVALID_COMMIT_OFFSET_SIZE] * 8
        assert len([k for k in core.store.data if "/" not in k]) == 2

    run(go())


def test_offsets_one_group_holds_are_capped(caplog: Any) -> None:
    async def go() -> None:
        c, core = coordinator(delay_ms=0, group_max_committed_offsets=3)
        first = await c.handle(
            ApiKey.OFFSET_COMMIT, 8, commit_req({("t", 0): 1, ("t", 1): 1}), CLIENT
        )
        assert first_code(first) == ErrorCode.NONE
        more = commit_req({("t", 0): 2, ("t", 2): 2, ("t", 3): 2, ("t", 4): 2})
        got = await c.handle(ApiKey.OFFSET_COMMIT, 8, more, CLIENT)
        codes = {p.partition_index: p.error_code for p in got.topics[0].partitions}
        assert codes == {0: 0, 2: 0, 3: 28, 4: 28}  # INVALID_COMMIT_OFFSET_SIZE
        committed = await fetch(c, None)
        assert [
            (p.partition_index, p.committed_offset) for p in committed.topics[0].partitions
        ] == [
            (0, 2),
            (1, 1),
            (2, 2),
        ]
        assert len([k for k in core.store.data if "/offsets/" in k]) == 3

    run(go())
    assert "--group-max-committed-offsets" in caplog.text
