"""Offset retention and the expiry of empty groups (Kafka 2.1+ rules, offsets.retention.minutes)
on the coordinator's test bench, with a wall clock that moves only when a test says so."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any

from support.coordinator_fakes import (
    CLIENT,
    GROUP,
    FakeWallClock,
    commit_req,
    coordinator,
    fetch,
    join_req,
    leave_req,
    run,
    stable_group,
)

from kafscale.api_keys import ApiKey
from kafscale.errors import ErrorCode
from kafscale.groups import GroupCoordinator
from kafscale.groups.model import GroupState

RETENTION_MIN = 60
RETENTION_MS = RETENTION_MIN * 60_000
DAY_MS = 24 * 3_600_000


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def bench(**limits: int) -> tuple[GroupCoordinator, Any, FakeWallClock]:
    clock = FakeWallClock()
    c, core = coordinator(
        delay_ms=0, wall_clock=clock, offsets_retention_minutes=RETENTION_MIN, **limits
    )
    core.topics["u"] = SimpleNamespace(partitions=2)
    return c, core, clock


async def commit(c: GroupCoordinator, offsets: dict[tuple[str, int], int], **kw: Any) -> None:
    got = await c.handle(ApiKey.OFFSET_COMMIT, 8, commit_req(offsets, **kw), CLIENT)
    assert {p.error_code for t in got.topics for p in t.partitions} == {ErrorCode.NONE}


async def committed(c: GroupCoordinator) -> list[tuple[str, int]]:
    everything = await fetch(c, None)
    return [(t.name, p.partition_index) for t in everything.topics for p in t.partitions]


def stored_keys(core: Any) -> list[str]:
    return sorted(core.store.data)


def test_a_simple_consumers_offsets_expire_one_by_one_after_their_commit() -> None:
    async def go() -> None:
        c, core, clock = bench()
        await commit(c, {("t", 0): 1})
        clock.advance(DAY_MS // 24)
        # a commit timestamp in the future counts as now: it cannot outlive the retention
        await commit(c, {("t", 1): 1}, timestamp=clock.now_ms + 365 * DAY_MS)
        clock.advance(RETENTION_MS - DAY_MS // 24 - 1)
        await c.expire_offsets()
        assert await committed(c) == [("t", 0), ("t", 1)]
        clock.advance(1)
        await c.expire_offsets()
        assert await committed(c) == [("t", 1)]
        assert stored_keys(core) == [GROUP, f"{GROUP}/offsets/t/1"]
        clock.advance(DAY_MS // 24)
        await c.expire_offsets()
        assert stored_keys(core) == [], "the group went with its last offset"
        assert GROUP not in c._groups
        assert (await c.list_groups([], [])).groups == []

    run(go())


def test_an_empty_groups_offsets_expire_together_retention_after_it_became_empty() -> None:
    """Offsets committed long before the group became empty stay until retention after it
    did (Kafka's currentStateTimestamp), then go together with the group; the time it became
    empty is stored, so a coordinator that loads the group later keeps to it."""

    async def go() -> None:
        c, core, clock = bench()
        (a,) = await stable_group(c, 1)
        await commit(c, {("t", 0): 1, ("t", 1): 1}, generation=1, member_id=a.member_id)
        clock.advance(2 * RETENTION_MS)
        await c.expire_offsets()
        assert await committed(c) == [("t", 0), ("t", 1)], "a member still consumes"
        await c.handle(ApiKey.LEAVE_GROUP, 3, leave_req(a.member_id), CLIENT)
        became_empty = clock.now_ms
        clock.advance(RETENTION_MS - 1)
        await c.expire_offsets()
        assert await committed(c) == [("t", 0), ("t", 1)]
        # a coordinator taking the group over from the store counts from the same moment
        c2, _ = coordinator(core.store, wall_clock=clock, offsets_retention_minutes=RETENTION_MIN)
        assert (await c2.describe([GROUP])).groups[0].group_state == "Empty"
        assert c2._groups[GROUP].empty_since_ms == became_empty
        clock.advance(1)
        await c2.expire_offsets()
        assert stored_keys(core) == []
        assert GROUP not in c2._groups

    run(go())


def test_an_empty_group_without_offsets_is_removed_at_the_next_check() -> None:
    async def go() -> None:
        c, core, _ = bench()
        (a,) = await stable_group(c, 1)
        await c.expire_offsets()
        assert stored_keys(core) == [GROUP], "a group with members stays"
        await c.handle(ApiKey.LEAVE_GROUP, 3, leave_req(a.member_id), CLIENT)
        await c.expire_offsets()
        assert stored_keys(core) == []
        assert c._groups == {}
        assert (await c.describe([GROUP])).groups[0].group_state == "Dead"

    run(go())


def test_a_stable_consumer_groups_offsets_of_topics_it_left_expire() -> None:
    async def go() -> None:
        c, _, clock = bench()
        (a,) = await stable_group(c, 1, protocols=(("range", subscription("t")),))
        await commit(c, {("t", 0): 1, ("u", 0): 1}, generation=1, member_id=a.member_id)
        clock.advance(RETENTION_MS)
        await c.expire_offsets()
        assert await committed(c) == [("t", 0)]
        assert GROUP in c._groups

    run(go())


def test_nothing_expires_while_a_subscription_cannot_be_read() -> None:
    async def go() -> None:
        c, _, clock = bench()
        (a,) = await stable_group(c, 1, protocols=(("range", b"\xff"),))
        await commit(c, {("u", 0): 1}, generation=1, member_id=a.member_id)
        clock.advance(2 * RETENTION_MS)
        await c.expire_offsets()
        assert await committed(c) == [("u", 0)]

    run(go())


def test_nothing_expires_while_a_group_rebalances() -> None:
    async def go() -> None:
        c, _, clock = bench()
        protocols = (("range", subscription("t")),)
        (a,) = await stable_group(c, 1, protocols=protocols)
        await commit(c, {("u", 0): 1}, generation=1, member_id=a.member_id)
        clock.advance(2 * RETENTION_MS)
        joining = asyncio.create_task(
            c.handle(ApiKey.JOIN_GROUP, 3, join_req(protocols=protocols), CLIENT)
        )
        await asyncio.sleep(0)
        assert c._groups[GROUP].state == GroupState.PREPARING_REBALANCE
        await c.expire_offsets()
        assert await committed(c) == [("u", 0)]
        joining.cancel()

    run(go())


def test_a_store_outage_leaves_groups_as_they_were() -> None:
    async def go() -> None:
        c, core, clock = bench()
        await commit(c, {("t", 0): 1})
        clock.advance(RETENTION_MS)
        core.store.down = True
        await c.expire_offsets()
        core.store.down = False
        assert await committed(c) == [("t", 0)]
        await c.expire_offsets()
        assert stored_keys(core) == []

    run(go())
