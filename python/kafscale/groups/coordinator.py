"""The group coordinator: which groups this broker coordinates, loading them from the metadata
store, and routing the group APIs to the state machine and the offset handlers.

Each group has one coordinator: rendezvous hashing of the group id over the live brokers (the
core's ``coordinator_for``, which is also what FindCoordinator answers). Every request first
checks that this broker is it - otherwise NOT_COORDINATOR, and a group this broker had loaded is
given up. A group is loaded on its first request: read from the store and claimed (its
coordinator epoch bumped), which fences the previous coordinator's writes. Members carry on with
their member ids; a group that was mid-rebalance makes its members rejoin.

A broker coordinates at most ``group_max_count`` groups: a JoinGroup or OffsetCommit that would
create one more is refused. Every ``offsets_retention_check_interval_ms`` expired offsets are
deleted and empty groups without offsets removed (:mod:`kafscale.groups.retention`), from the
metadata store and from memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol, cast

from kafscale.api_keys import ApiKey
from kafscale.errors import ErrorCode
from kafscale.groups.limits import (
    GroupLimits,
    LimitSettings,
    Refusal,
    join_refusal,
    log_refusal,
    new_group_refusal,
    oversized_name,
)
from kafscale.groups.membership import Membership
from kafscale.groups.model import Group, GroupState, WallClock, wall_clock_ms
from kafscale.groups.offset_delete import delete_offsets
from kafscale.groups.offsets import Offsets, commit_error_answer
from kafscale.groups.protocol import (
    DeletableGroupResult,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchGroupResult,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafscale.groups.retention import expired_offsets, removable
from kafscale.groups.store import Fenced, GroupStorage, StoreUnavailable
from kafscale.groups.txn_offsets import TransactionalOffsets
from kafscale.log_limit import LogLimit

if TYPE_CHECKING:
    from kafscale import _core

    # The bodies of the requests ``handle`` answers (GROUP_APIS).
    GroupRequest = (
        _core.JoinGroupRequest
        | _core.SyncGroupRequest
        | _core.HeartbeatRequest
        | _core.LeaveGroupRequest
        | _core.OffsetCommitRequest
    )
    # What ``handle`` answers.
    GroupAnswer = (
        JoinGroupResponse
        | SyncGroupResponse
        | HeartbeatResponse
        | LeaveGroupResponse
        | OffsetCommitResponse
    )

__all__ = ["GROUP_APIS", "GroupCoordinator", "GroupSettings"]

log = logging.getLogger(__name__)
# Any client can name a group id too long, as often as it likes.
_REFUSED_IDS = LogLimit("refused group ids")

# The group protocol's APIs, which ``handle`` answers.
GROUP_APIS = frozenset(
    {
        ApiKey.OFFSET_COMMIT,
        ApiKey.JOIN_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.SYNC_GROUP,
    }
)

# How often sessions are checked for expiry and groups for a coordinator change.
SWEEP_INTERVAL_S = 0.25

# How often stored groups this broker coordinates but has not loaded are taken up (the first
# time at start-up): a group whose consumers are down sends nothing, and its lag must still be
# reported by its coordinator (after a restart or when coordinators move).
ADOPT_INTERVAL_S = 30.0


class GroupSettings(LimitSettings, Protocol):
    @property
    def broker_id(self) -> int: ...
    @property
    def group_initial_rebalance_delay_ms(self) -> int: ...
    @property
    def group_min_session_timeout_ms(self) -> int: ...
    @property
    def group_max_session_timeout_ms(self) -> int: ...
    @property
    def offsets_retention_minutes(self) -> int: ...
    @property
    def offsets_retention_check_interval_ms(self) -> int: ...


def error_answer(api_key: ApiKey, body: GroupRequest, code: int) -> GroupAnswer:
    """``code`` as the answer to a group request, whatever its API."""
    if api_key == ApiKey.JOIN_GROUP:
        return JoinGroupResponse(code, member_id=cast("_core.JoinGroupRequest", body).member_id)
    if api_key == ApiKey.SYNC_GROUP:
        return SyncGroupResponse(code)
    if api_key == ApiKey.HEARTBEAT:
        return HeartbeatResponse(code)
    if api_key == ApiKey.LEAVE_GROUP:
        return LeaveGroupResponse(code)
    return commit_error_answer(cast("_core.OffsetCommitRequest", body), code)


def fetch_offsets_failure(body: _core.OffsetFetchRequest, code: int) -> OffsetFetchResponse:
    """``code`` for every group of an OffsetFetch."""
    return OffsetFetchResponse([OffsetFetchGroupResult(g.group_id, code) for g in body.groups])


class GroupCoordinator:
    def __init__(
        self,
        core: _core.Broker,
        settings: GroupSettings,
        store_error: type[Exception],
        wall_clock: WallClock = wall_clock_ms,
    ) -> None:
        self._core = core
        self._wall_clock = wall_clock
        self._settings = settings
        self._groups: dict[str, Group] = {}
        self._loading: dict[str, asyncio.Task[Group]] = {}
        self._closed = False
        self._storage = GroupStorage(core.group_store(), settings.broker_id, store_error)
        self._limits = GroupLimits.of(settings)
        self._membership = Membership(
            self._storage,
            settings.group_initial_rebalance_delay_ms,
            self._limits,
            self._lose,
            wall_clock=wall_clock,
        )
        self._offsets = Offsets(
            self._storage, core.topic, self._membership.touch, self._lose, self._limits, wall_clock
        )
        self._txn_offsets = TransactionalOffsets(
            core, self._storage, core.topic, self._lose, settings.broker_id, wall_clock
        )

    async def handle(
        self, api_key: ApiKey, version: int, body: GroupRequest, client: _core.ControlRequest
    ) -> GroupAnswer:
        """The answer to one group request (never raises for a Kafka-level error)."""
        refusal = self._validate(api_key, body)
        if refusal is not None:
            log_refusal(body.group_id, client.client_id, refusal.reason)
            return error_answer(api_key, body, refusal.code)
        group = await self._acquire(body.group_id)
        if isinstance(group, int):
            return error_answer(api_key, body, group)
        refusal = self._creation_refusal(api_key, group)
        if refusal is not None:
            log_refusal(body.group_id, client.client_id, refusal.reason)
            return error_answer(api_key, body, refusal.code)
        # The body is the class of its API (``api_key``).
        if api_key == ApiKey.JOIN_GROUP:
            join = cast("_core.JoinGroupRequest", body)
            return await self._membership.join(group, join, client, version)
        if api_key == ApiKey.SYNC_GROUP:
            return await self._membership.sync(group, cast("_core.SyncGroupRequest", body), client)
        if api_key == ApiKey.HEARTBEAT:
            return self._membership.heartbeat(group, cast("_core.HeartbeatRequest", body))
        if api_key == ApiKey.LEAVE_GROUP:
            return await self._membership.leave(
                group, cast("_core.LeaveGroupRequest", body).members
            )
        return await self._offsets.commit(group, cast("_core.OffsetCommitRequest", body), client)

    async def fetch_offsets(self, req: _core.OffsetFetchRequest) -> OffsetFetchResponse:
        """OffsetFetch: each group's committed offsets, or the error that says why this
        broker cannot serve that group (v8+ name several groups, each answered on its own)."""
        results = []
        for wanted in req.groups:
            group = await self._acquire(wanted.group_id)
            if isinstance(group, int):
                results.append(OffsetFetchGroupResult(wanted.group_id, group))
            else:
                results.append(self._offsets.fetch(group, wanted, req.require_stable))
        return OffsetFetchResponse(results)

    async def txn_commit_offsets(self, req: _core.TxnOffsetCommitRequest) -> OffsetCommitResponse:
        """TxnOffsetCommit: see :mod:`kafscale.groups.txn_offsets`."""
        group = await self._acquire(req.group_id)
        if isinstance(group, int):
            return commit_error_answer(req, group)
        return await self._txn_offsets.commit(group, req)

    # --- ops: DescribeGroups, ListGroups, DeleteGroups ------------------------------------------

    async def describe(self, group_ids: list[str]) -> DescribeGroupsResponse:
        """Each group as its coordinator sees it; another broker's group is NOT_COORDINATOR
        (clients ask each group's coordinator). An unknown group is Dead, not an error."""
        described = []
        for group_id in group_ids:
            group = await self._acquire(group_id)
            if isinstance(group, int):
                described.append(DescribedGroup(group, group_id))
            else:
                described.append(_describe(group))
        return DescribeGroupsResponse(described)

    async def list_groups(self, states: list[str], types: list[str]) -> ListGroupsResponse:
        """The groups this broker coordinates (clients ask every broker), loaded first so that
        their state is current; filtered by state (case-insensitive) and type ("classic")."""
        try:
            stored = await self._storage.group_ids()
        except StoreUnavailable as exc:
            log.warning("cannot list groups: %s", exc)
            return ListGroupsResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listed = []
        for group_id in sorted(set(stored) | set(self._groups)):
            if self._core.coordinator_for(group_id) != self._settings.broker_id:
                continue
            group = await self._acquire(group_id)
            if isinstance(group, int) or (group.revision == 0 and not group.members):
                continue
            state = _visible_state(group)
            if wanted_states and state.lower() not in wanted_states:
                continue
            if wanted_types and "classic" not in wanted_types:
                continue
            listed.append(ListedGroup(group_id, group.protocol_type or "", state))
        return ListGroupsResponse(ErrorCode.NONE, listed)

    async def delete(self, group_ids: list[str]) -> DeleteGroupsResponse:
        """Deletes empty groups with their committed offsets; NON_EMPTY_GROUP while members
        are in it, GROUP_ID_NOT_FOUND for a group that does not exist."""
        results = []
        for group_id in dict.fromkeys(group_ids):
            results.append(DeletableGroupResult(group_id, await self._delete_one(group_id)))
        return DeleteGroupsResponse(results)

    async def delete_offsets(self, req: _core.OffsetDeleteRequest) -> OffsetDeleteResponse:
        """OffsetDelete: see :mod:`kafscale.groups.offset_delete`."""
        group = await self._acquire(req.group_id)
        if isinstance(group, int):
            return OffsetDeleteResponse(group)
        try:
            return await delete_offsets(group, req, self._core.topic, self._storage)
        except Fenced:
            self._lose(group, ErrorCode.NOT_COORDINATOR)
            return OffsetDeleteResponse(ErrorCode.NOT_COORDINATOR)
        except StoreUnavailable:
            return OffsetDeleteResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def _delete_one(self, group_id: str) -> int:
        group = await self._acquire(group_id)
        if isinstance(group, int):
            return group
        async with group.lock:
            if group.members or group.pending_members:
                return ErrorCode.NON_EMPTY_GROUP
            if group.revision == 0:
                return ErrorCode.GROUP_ID_NOT_FOUND
            try:
                await self._storage.delete(group)
            except Fenced:
                self._lose(group, ErrorCode.NOT_COORDINATOR)
                return ErrorCode.NOT_COORDINATOR
            except StoreUnavailable:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            self._lose(group, ErrorCode.GROUP_ID_NOT_FOUND)
        log.info("deleted group %r and its committed offsets", group_id)
        return ErrorCode.NONE

    def _validate(self, api_key: ApiKey, body: GroupRequest) -> Refusal | None:
        if api_key != ApiKey.JOIN_GROUP:
            return None
        join = cast("_core.JoinGroupRequest", body)
        timeout = join.session_timeout_ms
        s = self._settings
        if not s.group_min_session_timeout_ms <= timeout <= s.group_max_session_timeout_ms:
            return Refusal(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {timeout} ms is outside group_min_session_timeout_ms = "
                f"{s.group_min_session_timeout_ms} to group_max_session_timeout_ms = "
                f"{s.group_max_session_timeout_ms}",
            )
        return join_refusal(join, self._limits)

    def _creation_refusal(self, api_key: ApiKey, group: Group) -> Refusal | None:
        """Whether a request that would create ``group`` must be refused: this broker holds
        ``group_max_count`` groups already. No await may come between this check and the
        request taking the group's lock (which makes it count): concurrent creations could
        otherwise all pass it."""
        if api_key not in (ApiKey.JOIN_GROUP, ApiKey.OFFSET_COMMIT) or not _forgettable(group):
            return None
        held = sum(1 for g in self._groups.values() if not _forgettable(g))
        return new_group_refusal(api_key, held, self._limits)

    async def _acquire(self, group_id: str) -> Group | int:
        """The loaded group, or the error code that says why this broker cannot serve it."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        problem = oversized_name([("group id", group_id)])
        if problem:
            # Stored, it would be listed to every client, and old versions could not encode it.
            if _REFUSED_IDS.admit():
                log.warning("refused a group: %s", problem)
            return ErrorCode.INVALID_GROUP_ID
        owner = self._core.coordinator_for(group_id)
        if self._closed or owner != self._settings.broker_id:
            if group_id in self._groups:
                self._lose(self._groups[group_id], ErrorCode.NOT_COORDINATOR)
            return (
                ErrorCode.COORDINATOR_NOT_AVAILABLE if owner is None else ErrorCode.NOT_COORDINATOR
            )
        group = self._groups.get(group_id)
        if group is not None:
            return group
        loading = self._loading.get(group_id)
        if loading is None:
            loading = asyncio.create_task(self._load(group_id))
            self._loading[group_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(group_id, None))
        try:
            loaded = await asyncio.shield(loading)
        except Fenced:
            log.info("group %r was written by another coordinator while loading", group_id)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        except StoreUnavailable as exc:
            log.warning("cannot load group %r: %s", group_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self._groups.get(group_id) is loaded:
            return loaded
        # Forgotten before this request resumed (a new group is empty and nobody holds its
        # lock yet, so forget_idle_groups may drop it; or it was lost): acting on the detached
        # object would hand out a member id the group in memory never heard of. Start over.
        return await self._acquire(group_id)

    async def _load(self, group_id: str) -> Group:
        group = await self._storage.load(group_id)
        self._membership.resume(group)
        self._groups[group_id] = group
        if group.revision:
            log.debug(
                "coordinating group %r (generation %d, %s, %d members)",
                group_id,
                group.generation,
                group.state.value,
                len(group.members),
            )
        return group

    def _lose(self, group: Group, code: int) -> None:
        """Forgets a group this broker no longer coordinates; its waiting members get ``code``
        and find the coordinator again."""
        if self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
            log.info("no longer coordinating group %r", group.group_id)
        self._membership.abandon(group, code)

    async def run(self) -> None:
        """Expires sessions, settles the offsets of decided transactions, gives up groups that
        moved to another broker and takes up the stored ones that moved here, until
        cancelled."""
        adopt_at = time.monotonic()
        expire_every_s = self._settings.offsets_retention_check_interval_ms / 1000
        expire_at = adopt_at + expire_every_s
        while True:
            if time.monotonic() >= adopt_at:
                adopt_at = time.monotonic() + ADOPT_INTERVAL_S
                await self.adopt_stored_groups()
            if time.monotonic() >= expire_at:
                expire_at = time.monotonic() + expire_every_s
                await self.expire_offsets()
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self._txn_offsets.settle(self._acquire, self._groups.values())
            except Exception:
                log.exception("settling transactions' offsets failed; trying again")
            self.forget_idle_groups()
            for group in list(self._groups.values()):
                try:
                    await self._membership.expire(group)
                except Exception:
                    log.exception("expiring sessions of group %r failed", group.group_id)

    def forget_idle_groups(self) -> None:
        """Gives up the groups that moved to another broker and forgets those not worth
        keeping in memory (see ``_forgettable``)."""
        for group in list(self._groups.values()):
            if self._core.coordinator_for(group.group_id) != self._settings.broker_id:
                self._lose(group, ErrorCode.NOT_COORDINATOR)
            elif _forgettable(group):
                del self._groups[group.group_id]

    async def adopt_stored_groups(self) -> int:
        """Loads the stored groups this broker coordinates and has not loaded yet (so their
        committed offsets, and lag, are reported without waiting for a request); the number
        taken up. A store outage is logged and retried at the next round."""
        try:
            stored = await self._storage.group_ids()
        except StoreUnavailable as exc:
            log.warning("cannot list stored groups to take up: %s", exc)
            return 0
        adopted = 0
        for group_id in stored:
            if group_id in self._groups or self._closed:
                continue
            if self._core.coordinator_for(group_id) != self._settings.broker_id:
                continue
            if not isinstance(await self._acquire(group_id), int):
                adopted += 1
        if adopted:
            log.info("took up %d stored group(s) this broker coordinates", adopted)
        return adopted

    async def expire_offsets(self) -> None:
        """One round of offset retention (:mod:`kafscale.groups.retention`) over the loaded
        groups: expired offsets are deleted, groups left empty without offsets removed, from
        the store and from memory. A store outage ends the round (the next one retries)."""
        now_ms = self._wall_clock()
        retention_ms = self._settings.offsets_retention_minutes * 60_000
        offsets = groups = 0
        for group in list(self._groups.values()):
            try:
                expired, removed = await self._expire(group, now_ms, retention_ms)
            except Fenced:
                self._lose(group, ErrorCode.NOT_COORDINATOR)
                continue
            except StoreUnavailable as exc:
                log.warning("cannot expire committed offsets: %s", exc)
                break
            offsets += expired
            groups += removed
        if offsets or groups:
            log.info(
                "expired %d committed offset(s) and removed %d empty group(s)", offsets, groups
            )

    async def _expire(self, group: Group, now_ms: int, retention_ms: int) -> tuple[int, bool]:
        """Expires ``group``'s offsets: how many, and whether the group was removed."""
        async with group.lock:
            # Lost while this round waited for the lock, or never stored.
            if self._groups.get(group.group_id) is not group or group.revision == 0:
                return 0, False
            expired = expired_offsets(group, now_ms, retention_ms)
            if removable(group, expired):
                # The record with every offset (all of them expired) in one transaction.
                await self._storage.delete(group)
                self._lose(group, ErrorCode.GROUP_ID_NOT_FOUND)
                return len(expired), True
            if expired:
                await self._storage.delete_offsets(group, expired)
                for key in expired:
                    del group.offsets[key]
            return len(expired), False

    def metrics_report(self) -> list[tuple[str, str, int, list[tuple[str, int, int]]]]:
        """Each coordinated group as ``(group_id, state, member count, [(topic, partition,
        committed offset)])``: what the core's group and lag gauges are computed from."""
        return [
            (
                group.group_id,
                _visible_state(group),
                len(group.members),
                [(topic, p, committed.offset) for (topic, p), committed in group.offsets.items()],
            )
            for group in self._groups.values()
            if not _forgettable(group)
        ]

    def close(self) -> None:
        """This broker is shutting down: members waiting in a rebalance, and every group request
        from now on, are told to find the next coordinator."""
        self._closed = True
        for group in list(self._groups.values()):
            self._lose(group, ErrorCode.NOT_COORDINATOR)


def _forgettable(group: Group) -> bool:
    """Never stored, nobody in it and nothing in progress (an OffsetFetch of an unknown group,
    say): nothing worth keeping in memory."""
    return (
        group.revision == 0
        and not group.members
        and not group.pending_members
        and not group.lock.locked()
    )


def _visible_state(group: Group) -> str:
    # A group that exists only because of an OffsetFetch is not a group to a client.
    if group.revision == 0 and not group.members:
        return GroupState.DEAD.value
    return group.state.value


def _describe(group: Group) -> DescribedGroup:
    """Kafka's summary: member metadata and assignments only once the group is Stable."""
    state = _visible_state(group)
    stable = group.state == GroupState.STABLE
    protocol = group.protocol_name or ""
    members = [
        DescribedGroupMember(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.metadata(protocol) if stable else b"",
            m.assignment if stable else b"",
        )
        for m in group.members.values()
    ]
    return DescribedGroup(
        ErrorCode.NONE,
        group.group_id,
        state,
        group.protocol_type or "",
        protocol if stable else "",
        members,
    )
