"""The group coordinator's test bench: a fake core and an in-memory store with etcd's revision
semantics (no extension, no network), and request builders for each group API."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kafscale.api_keys import ApiKey
from kafscale.config import Settings
from kafscale.errors import ErrorCode
from kafscale.groups import GroupCoordinator
from kafscale.groups.protocol import JoinGroupResponse

GROUP = "g"
LIMITS = (
    "group_max_member_metadata_bytes",
    "group_max_metadata_bytes",
    "group_max_size",
    "group_max_count",
    "group_max_committed_offsets",
    "offsets_retention_minutes",
    "offsets_retention_check_interval_ms",
)


class StoreDown(Exception):
    pass


@dataclass
class Entry:
    key: str
    value: bytes
    mod_revision: int


@dataclass
class FakeStore:
    """Keys with mod revisions and compare-and-swap, like etcd; counts writes."""

    data: dict[str, Entry] = field(default_factory=dict)
    revision: int = 0
    writes: int = 0
    down: bool = False

    async def get(self, key: str) -> Entry | None:
        self._check()
        return self.data.get(key)

    async def list(self, prefix: str) -> list[Entry]:
        self._check()
        return [e for k, e in sorted(self.data.items()) if k.startswith(prefix)]

    async def commit(self, expect, put, delete, delete_prefixes) -> int | None:
        self._check()
        for key, revision in expect:
            current = self.data.get(key)
            if (current.mod_revision if current else 0) != revision:
                return None
        self.revision += 1
        self.writes += 1
        for key, value in put:
            self.data[key] = Entry(key, value, self.revision)
        for key in delete:
            self.data.pop(key, None)
        for prefix in delete_prefixes:
            for key in [k for k in self.data if k.startswith(prefix)]:
                del self.data[key]
        return self.revision

    def _check(self) -> None:
        if self.down:
            raise StoreDown("store unreachable")


class FakeCore:
    def __init__(self, store: FakeStore, coordinator: int = 1) -> None:
        self.store = store
        self.coordinator: int | None = coordinator
        # groups coordinated by another broker than ``coordinator``
        self.elsewhere: dict[str, int | None] = {}
        self.topics = {"t": SimpleNamespace(partitions=6)}

    def coordinator_for(self, group_id: str) -> int | None:
        return self.elsewhere.get(group_id, self.coordinator)

    def group_store(self) -> FakeStore:
        return self.store

    async def topic(self, name: str) -> Any:
        return self.topics.get(name)


def settings(broker_id: int = 1, delay_ms: int = 0, **limits: int) -> Any:
    """The broker's defaults for the group limits and offset retention unless ``limits``
    names them."""
    return SimpleNamespace(
        broker_id=broker_id,
        group_initial_rebalance_delay_ms=delay_ms,
        group_min_session_timeout_ms=100,
        group_max_session_timeout_ms=60_000,
        **{name: limits.get(name, Settings.__dataclass_fields__[name].default) for name in LIMITS},
    )


CLIENT = SimpleNamespace(client_id="app", client_host="127.0.0.1")


class FakeWallClock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def coordinator(
    store: FakeStore | None = None,
    broker_id: int = 1,
    delay_ms: int = 50,
    wall_clock: FakeWallClock | None = None,
    **limits: int,
):
    core = FakeCore(store or FakeStore(), coordinator=broker_id)
    config = settings(broker_id, delay_ms, **limits)
    return GroupCoordinator(core, config, StoreDown, wall_clock or FakeWallClock()), core


def join_req(member_id: str = "", protocols=(("range", b"R"),), session_ms=10_000, **kw) -> Any:
    return SimpleNamespace(
        group_id=kw.get("group_id", GROUP),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=kw.get("rebalance_ms", 2_000),
        member_id=member_id,
        group_instance_id=kw.get("instance"),
        protocol_type=kw.get("protocol_type", "consumer"),
        protocols=[SimpleNamespace(name=n, metadata=m) for n, m in protocols],
        reason=None,
    )


def sync_req(member_id: str, generation: int, assignments=None, **kw) -> Any:
    return SimpleNamespace(
        group_id=GROUP,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=kw.get("instance"),
        protocol_type=kw.get("protocol_type"),
        protocol_name=kw.get("protocol_name"),
        assignments=[
            SimpleNamespace(member_id=m, assignment=a) for m, a in (assignments or {}).items()
        ],
    )


def hb_req(member_id: str, generation: int, instance: str | None = None) -> Any:
    return SimpleNamespace(
        group_id=GROUP, generation_id=generation, member_id=member_id, group_instance_id=instance
    )


def leave_req(*member_ids: str, instances: tuple[str | None, ...] = ()) -> Any:
    ids = member_ids or ("",) * len(instances)
    insts = instances or (None,) * len(ids)
    return SimpleNamespace(
        group_id=GROUP,
        members=[
            SimpleNamespace(member_id=m, group_instance_id=i, reason=None)
            for m, i in zip(ids, insts, strict=True)
        ],
    )


def commit_req(
    offsets: dict[tuple[str, int], int],
    generation=-1,
    member_id="",
    meta="m",
    group_id: str = GROUP,
    timestamp: int = -1,
) -> Any:
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            SimpleNamespace(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=3,
                committed_metadata=meta,
                commit_timestamp=timestamp,
            )
        )
    return SimpleNamespace(
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[SimpleNamespace(name=t, partitions=ps) for t, ps in topics.items()],
    )


def fetch_req(topics: dict[str, list[int]] | None, *groups: str) -> Any:
    """An OffsetFetch of ``topics`` (None: all committed) for each of ``groups`` (GROUP if
    none named)."""
    wanted = (
        None
        if topics is None
        else [SimpleNamespace(name=t, partition_indexes=ps) for t, ps in topics.items()]
    )
    return SimpleNamespace(
        groups=[SimpleNamespace(group_id=g, topics=wanted) for g in groups or (GROUP,)],
        require_stable=False,
    )


async def fetch(c: GroupCoordinator, topics: dict[str, list[int]] | None) -> Any:
    """GROUP's result of an OffsetFetch."""
    (result,) = (await c.fetch_offsets(fetch_req(topics))).groups
    return result


async def join(c: GroupCoordinator, req: Any, version: int = 5) -> JoinGroupResponse:
    return await c.handle(ApiKey.JOIN_GROUP, version, req, CLIENT)


async def join_new(c: GroupCoordinator, **kw: Any) -> asyncio.Task[JoinGroupResponse]:
    """A v4+ member: MEMBER_ID_REQUIRED first, then the real join (returned as a task)."""
    first = await join(c, join_req(**kw))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    task = asyncio.create_task(join(c, join_req(first.member_id, **kw)))
    await asyncio.sleep(0)
    return task


async def stable_group(
    c: GroupCoordinator, n: int, static: tuple[str, ...] = (), **kw: Any
) -> list[JoinGroupResponse]:
    """n dynamic members plus one static member per instance id, synced with each member's own
    id as its assignment."""
    tasks = [await join_new(c, **kw) for _ in range(n)]
    tasks += [asyncio.create_task(join(c, join_req(instance=i, **kw))) for i in static]
    joined = list(await asyncio.gather(*tasks))
    leader = next(j for j in joined if j.member_id == j.leader)
    assignments = {j.member_id: j.member_id.encode() for j in joined}
    syncs = [
        asyncio.create_task(
            c.handle(
                ApiKey.SYNC_GROUP,
                3,
                sync_req(j.member_id, j.generation_id, assignments if j is leader else None),
                CLIENT,
            )
        )
        for j in joined
    ]
    for s, j in zip(await asyncio.gather(*syncs), joined, strict=True):
        assert s.error_code == ErrorCode.NONE
        assert s.assignment == j.member_id.encode()
    return joined


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))
