"""The classic group protocol's state machine: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
session expiry on one loaded group, as Kafka's GroupCoordinator runs it.

    Empty ──join──▶ PreparingRebalance ──every member rejoined, or the rebalance timeout──▶
    CompletingRebalance ──the leader's SyncGroup──▶ Stable ──join/leave/expiry──▶ Preparing…
    (no member left when a join phase ends ──▶ Empty; unloaded or deleted ──▶ Dead)

JoinGroup and SyncGroup requests wait on futures that the phase's end answers. The record is
written when a join phase ends (new generation) and when the leader's assignment makes the group
Stable, never on a heartbeat. A write that fails hands the group back to the coordinator
(``lose``), which answers every waiting member and forgets the group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kafscale.errors import ErrorCode
from kafscale.groups.limits import GroupLimits, log_refusal, new_member_id, setting_name
from kafscale.groups.model import Group, GroupState, Member, WallClock, wall_clock_ms
from kafscale.groups.protocol import (
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from kafscale.groups.store import (
    Fenced,
    StoreUnavailable,
    group_record_bytes,
    member_record_bytes,
)

if TYPE_CHECKING:
    from kafscale import _core

__all__ = ["Membership"]

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# JoinGroup v4 introduced MEMBER_ID_REQUIRED: a new member first gets its id, then rejoins.
_MEMBER_ID_REQUIRED_SINCE = 4


class Saver(Protocol):
    async def save(self, group: Group) -> None: ...


class Membership:
    def __init__(
        self,
        storage: Saver,
        initial_rebalance_delay_ms: int,
        limits: GroupLimits,
        lose: Callable[[Group, int], None],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: WallClock = wall_clock_ms,
    ) -> None:
        self._storage = storage
        self._wall_clock = wall_clock
        self._initial_delay_s = initial_rebalance_delay_ms / 1000
        self._limits = limits
        self._lose = lose
        self._clock = clock
        # Timer-started phase ends in flight (the loop keeps only weak references to tasks).
        self._timer_tasks: set[asyncio.Task[None]] = set()

    # --- JoinGroup --------------------------------------------------------------------------

    async def join(
        self, group: Group, req: _core.JoinGroupRequest, client: _core.ControlRequest, version: int
    ) -> JoinGroupResponse:
        async with group.lock:
            outcome = await self._join(group, req, client, version)
        if isinstance(outcome, JoinGroupResponse):
            return outcome
        return await outcome

    async def _join(
        self, group: Group, req: _core.JoinGroupRequest, client: _core.ControlRequest, version: int
    ) -> JoinGroupResponse | asyncio.Future[JoinGroupResponse]:
        def error(code: int) -> JoinGroupResponse:
            return JoinGroupResponse(code, member_id=req.member_id)

        if group.is_(DEAD):
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        if not group.supports(req.protocol_type, protocols):
            return error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if req.member_id == "":
            instance = req.group_instance_id
            existing = None if instance is None else group.member_by_instance(instance)
            if existing is not None:
                return await self._replace_static_member(group, existing, req, protocols, client)
            if len(group.members) + len(group.pending_members) >= self._limits.members:
                refused(
                    group,
                    client,
                    f"it has reached {setting_name('group_max_size')} = {self._limits.members}",
                )
                return error(ErrorCode.GROUP_MAX_SIZE_REACHED)
            if instance is not None:
                return await self._add_member(
                    group, new_member_id(instance), req, protocols, client
                )
            member_id = new_member_id(client.client_id or "consumer")
            if version >= _MEMBER_ID_REQUIRED_SINCE:
                group.pending_members[member_id] = self._clock() + req.session_timeout_ms / 1000
                return JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
            return await self._add_member(group, member_id, req, protocols, client)
        if group.pending_members.pop(req.member_id, None) is not None:
            return await self._add_member(group, req.member_id, req, protocols, client)
        if group.fenced_instance(req.member_id, req.group_instance_id):
            return error(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(req.member_id)
        if member is None or group.is_(EMPTY):
            return error(ErrorCode.UNKNOWN_MEMBER_ID)
        unchanged = member.protocols == protocols
        if group.is_(COMPLETING) and unchanged:
            # It lost the first answer (a client timeout, say): the same generation again.
            return self._current_generation(group, member)
        if group.is_(STABLE) and unchanged and member.member_id != group.leader_id:
            return self._current_generation(group, member)
        # A leader rejoining a stable group asks for a new assignment (a topic it watches
        # changed), as does any member whose subscription changed.
        if not self._update(group, member, req, protocols, client):
            return error(ErrorCode.GROUP_MAX_SIZE_REACHED)
        return await self._await_join(group, member)

    async def _add_member(
        self,
        group: Group,
        member_id: str,
        req: _core.JoinGroupRequest,
        protocols: list[tuple[str, bytes]],
        client: _core.ControlRequest,
    ) -> JoinGroupResponse | asyncio.Future[JoinGroupResponse]:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=client.client_id or "",
            client_host=client.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=protocols,
            last_heartbeat=self._clock(),
        )
        member.record_bytes = member_record_bytes(member)
        if not self._record_fits(group, client, group_record_bytes(group) + member.record_bytes):
            # Its member id is gone: a rebalance waiting for it need not wait any longer.
            await self._maybe_complete_join(group)
            return JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=member_id)
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if group.initial_delay_until is not None:
            group.joined_during_delay = True
        return await self._await_join(group, member)

    def _update(
        self,
        group: Group,
        member: Member,
        req: _core.JoinGroupRequest,
        protocols: list[tuple[str, bytes]],
        client: _core.ControlRequest,
    ) -> bool:
        """The member's new protocols and timeouts, unless the group's record would outgrow
        its limit (False: the member keeps what it had)."""
        updated = dataclasses.replace(
            member,
            protocols=protocols,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
        )
        size = member_record_bytes(updated)
        others = group_record_bytes(group) - member.record_bytes
        if not self._record_fits(group, client, others + size):
            return False
        member.protocols = protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.record_bytes = size
        return True

    def _record_fits(self, group: Group, client: _core.ControlRequest, size: int) -> bool:
        if size <= self._limits.group_record_bytes:
            return True
        refused(
            group,
            client,
            f"its stored record would grow to {size} bytes, more than "
            f"{setting_name('group_max_metadata_bytes')} = {self._limits.group_record_bytes}",
        )
        return False

    async def _await_join(self, group: Group, member: Member) -> asyncio.Future[JoinGroupResponse]:
        if (parked := member.pending_join) is not None:
            # The client gave up on its earlier JoinGroup and sent another; the newer one counts.
            parked.set_result(JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
        member.join_waiter = asyncio.get_running_loop().create_future()
        waiter = member.join_waiter
        if not group.is_(PREPARING):
            self._prepare_rebalance(group)
        await self._maybe_complete_join(group)
        return waiter

    async def _replace_static_member(
        self,
        group: Group,
        old: Member,
        req: _core.JoinGroupRequest,
        protocols: list[tuple[str, bytes]],
        client: _core.ControlRequest,
    ) -> JoinGroupResponse | asyncio.Future[JoinGroupResponse]:
        """A static member restarted (same group.instance.id, no member id): it takes over its
        old member's place under a new id; the old id is fenced. If nothing else changed in a
        stable group, no rebalance: it gets the current generation and its old assignment."""
        new_id = new_member_id(old.group_instance_id or "")
        fenced = JoinGroupResponse(ErrorCode.FENCED_INSTANCE_ID, member_id=old.member_id)
        if (parked_join := old.pending_join) is not None:
            parked_join.set_result(fenced)
        if (parked_sync := old.pending_sync) is not None:
            parked_sync.set_result(SyncGroupResponse(ErrorCode.FENCED_INSTANCE_ID))
        del group.members[old.member_id]
        old.member_id, old.join_waiter, old.sync_waiter = new_id, None, None
        old.last_heartbeat = self._clock()
        old.record_bytes = member_record_bytes(old)
        group.members[new_id] = old
        if group.leader_id == fenced.member_id:
            group.leader_id = new_id
        if group.is_(STABLE) and old.protocols == protocols:
            try:
                await self._storage.save(group)
            except (Fenced, StoreUnavailable):
                self._lose(group, ErrorCode.NOT_COORDINATOR)
                return JoinGroupResponse(ErrorCode.NOT_COORDINATOR, member_id="")
            return self._current_generation(group, old, skip_assignment=True)
        if not self._update(group, old, req, protocols, client):
            return JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=new_id)
        return await self._await_join(group, old)

    def _current_generation(
        self, group: Group, member: Member, skip_assignment: bool = False
    ) -> JoinGroupResponse:
        is_leader = member.member_id == group.leader_id
        return JoinGroupResponse(
            ErrorCode.NONE,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=self._member_list(group) if is_leader else [],
            skip_assignment=skip_assignment and is_leader,
        )

    @staticmethod
    def _member_list(group: Group) -> list[JoinGroupMember]:
        protocol = group.protocol_name or ""
        return [
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(protocol))
            for m in group.members.values()
        ]

    # --- the join phase ---------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group) -> None:
        if group.is_(COMPLETING):
            for member in group.members.values():
                member.assignment = b""
                if (parked := member.pending_sync) is not None:
                    parked.set_result(SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
        now = self._clock()
        group.join_deadline = now + group.max_rebalance_timeout_s
        if group.is_(EMPTY) and self._initial_delay_s > 0:
            # Kafka's group.initial.rebalance.delay.ms: consumers started together join one
            # generation instead of rebalancing once per arrival.
            group.initial_delay_until = now + min(
                self._initial_delay_s, group.max_rebalance_timeout_s
            )
            group.joined_during_delay = False
        else:
            group.initial_delay_until = None
        group.state = PREPARING
        self._schedule(group, group.initial_delay_until or group.join_deadline)

    def _schedule(self, group: Group, at: float) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, at - self._clock())
        group.join_timer = loop.call_later(delay, self._start_timer_task, group)

    def _start_timer_task(self, group: Group) -> None:
        task = asyncio.get_running_loop().create_task(self._on_timer(group))
        self._timer_tasks.add(task)
        task.add_done_callback(self._timer_tasks.discard)

    async def _on_timer(self, group: Group) -> None:
        async with group.lock:
            if not group.is_(PREPARING):
                return
            now = self._clock()
            if group.initial_delay_until is not None:
                if now < group.initial_delay_until:
                    self._schedule(group, group.initial_delay_until)
                    return
                remaining = group.join_deadline - now
                if group.joined_during_delay and remaining > 0:
                    group.initial_delay_until = now + min(self._initial_delay_s, remaining)
                    group.joined_during_delay = False
                    self._schedule(group, group.initial_delay_until)
                    return
                group.initial_delay_until = None
                await self._complete_join(group)
            elif now >= group.join_deadline or group.all_members_joined():
                await self._complete_join(group)
            else:
                self._schedule(group, group.join_deadline)

    async def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.is_(PREPARING)
            and group.initial_delay_until is None
            and group.all_members_joined()
        ):
            await self._complete_join(group)

    async def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            # Did not rejoin within the rebalance timeout.
            del group.members[member.member_id]
        # Member ids handed out with MEMBER_ID_REQUIRED stay valid (until their session timeout):
        # such a member's join starts the next rebalance, as in Kafka.
        group.generation += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            if group.leader_id not in group.members:
                group.leader_id = next(iter(group.members))
            group.state = COMPLETING
            group.empty_since_ms = None
        else:
            group.protocol_name = None
            group.leader_id = None
            group.state = EMPTY
            group.empty_since_ms = self._wall_clock()
        try:
            await self._storage.save(group)
        except (Fenced, StoreUnavailable):
            self._lose(group, ErrorCode.NOT_COORDINATOR)
            return
        now = self._clock()
        for member in group.members.values():
            member.last_heartbeat = now
            answer = self._current_generation(group, member)
            waiter = member.join_waiter
            assert waiter is not None  # those not awaiting their JoinGroup were removed above
            waiter.set_result(answer)

    def resume(self, group: Group) -> None:
        """A group loaded mid-rebalance: its members must rejoin under this coordinator."""
        if group.is_(COMPLETING, PREPARING):
            group.state = COMPLETING  # so that preparing resets stale assignments
            self._prepare_rebalance(group)

    # --- SyncGroup ----------------------------------------------------------------------------

    async def sync(
        self, group: Group, req: _core.SyncGroupRequest, client: _core.ControlRequest
    ) -> SyncGroupResponse:
        async with group.lock:
            outcome = await self._sync(group, req, client)
        if isinstance(outcome, SyncGroupResponse):
            return outcome
        return await outcome

    async def _sync(
        self, group: Group, req: _core.SyncGroupRequest, client: _core.ControlRequest
    ) -> SyncGroupResponse | asyncio.Future[SyncGroupResponse]:
        code = self._check_member(group, req.member_id, req.group_instance_id, req.generation_id)
        if code == ErrorCode.NONE and (
            (req.protocol_type is not None and req.protocol_type != group.protocol_type)
            or (req.protocol_name is not None and req.protocol_name != group.protocol_name)
        ):
            code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if code != ErrorCode.NONE:
            return SyncGroupResponse(code)
        member = group.members[req.member_id]
        member.last_heartbeat = self._clock()
        if group.is_(PREPARING):
            return SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.is_(STABLE):
            return self._assignment(group, member)
        if member.member_id == group.leader_id:
            assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
            problem = self._assignments_problem(group, assignments)
            if problem:
                refused(group, client, problem)
                # As Kafka does when it cannot store an assignment: everyone rejoins.
                self._prepare_rebalance(group)
                return SyncGroupResponse(ErrorCode.MESSAGE_TOO_LARGE)
        if (parked := member.pending_sync) is not None:
            parked.set_result(SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_waiter = asyncio.get_running_loop().create_future()
        waiter = member.sync_waiter
        if member.member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
                m.record_bytes = member_record_bytes(m)
            group.state = STABLE
            try:
                await self._storage.save(group)
            except (Fenced, StoreUnavailable):
                self._lose(group, ErrorCode.NOT_COORDINATOR)
                return waiter
            for m in group.members.values():
                if (parked := m.pending_sync) is not None:
                    parked.set_result(self._assignment(group, m))
        return waiter

    def _assignments_problem(self, group: Group, assignments: dict[str, bytes]) -> str | None:
        """Why the leader's assignments cannot be taken, if they cannot."""
        limit = self._limits.member_metadata_bytes
        largest = max((len(a) for a in assignments.values()), default=0)
        if largest > limit:
            return (
                f"the leader's assignment of {largest} bytes for one member is more than "
                f"{setting_name('group_max_member_metadata_bytes')} = {limit}"
            )
        size = group_record_bytes(group) + sum(
            member_record_bytes(dataclasses.replace(m, assignment=assignments[m.member_id]))
            - m.record_bytes
            for m in group.members.values()
            if m.member_id in assignments
        )
        if size > self._limits.group_record_bytes:
            return (
                f"with the leader's assignments its stored record would be {size} bytes, more "
                f"than {setting_name('group_max_metadata_bytes')} = "
                f"{self._limits.group_record_bytes}"
            )
        return None

    @staticmethod
    def _assignment(group: Group, member: Member) -> SyncGroupResponse:
        return SyncGroupResponse(
            ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
        )

    def _check_member(
        self, group: Group, member_id: str, group_instance_id: str | None, generation: int
    ) -> int:
        """Kafka's order of checks for requests of a current member."""
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.fenced_instance(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members or group.is_(EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # --- Heartbeat, LeaveGroup, expiry -----------------------------------------------------------

    def heartbeat(self, group: Group, req: _core.HeartbeatRequest) -> HeartbeatResponse:
        code = self._check_member(group, req.member_id, req.group_instance_id, req.generation_id)
        if code != ErrorCode.NONE:
            return HeartbeatResponse(code)
        group.members[req.member_id].last_heartbeat = self._clock()
        if group.is_(PREPARING):
            return HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse(ErrorCode.NONE)

    def touch(self, group: Group, member_id: str) -> None:
        """An offset commit by a member counts as a heartbeat, as in Kafka."""
        member = group.members.get(member_id)
        if member is not None:
            member.last_heartbeat = self._clock()

    async def leave(self, group: Group, leaving: list[_core.LeavingMember]) -> LeaveGroupResponse:
        async with group.lock:
            if group.is_(DEAD):
                return LeaveGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            results = [self._leave_one(group, m) for m in leaving]
            if any(r.error_code == ErrorCode.NONE for r in results):
                await self._membership_changed(group)
        return LeaveGroupResponse(ErrorCode.NONE, results)

    def _leave_one(self, group: Group, leaving: _core.LeavingMember) -> LeaveGroupMemberResult:
        def result(code: int) -> LeaveGroupMemberResult:
            return LeaveGroupMemberResult(leaving.member_id, leaving.group_instance_id, code)

        if leaving.group_instance_id is not None:
            member = group.member_by_instance(leaving.group_instance_id)
            if member is None:
                return result(ErrorCode.UNKNOWN_MEMBER_ID)
            if leaving.member_id not in ("", member.member_id):
                return result(ErrorCode.FENCED_INSTANCE_ID)
        elif group.pending_members.pop(leaving.member_id, None) is not None:
            return result(ErrorCode.NONE)
        else:
            member = group.members.get(leaving.member_id)
            if member is None:
                return result(ErrorCode.UNKNOWN_MEMBER_ID)
        self._remove(group, member)
        return result(ErrorCode.NONE)

    def _remove(self, group: Group, member: Member) -> None:
        del group.members[member.member_id]
        if (parked_join := member.pending_join) is not None:
            parked_join.set_result(JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID))
        if (parked_sync := member.pending_sync) is not None:
            parked_sync.set_result(SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID))

    async def _membership_changed(self, group: Group) -> None:
        if group.is_(STABLE, COMPLETING):
            self._prepare_rebalance(group)
        await self._maybe_complete_join(group)

    async def expire(self, group: Group) -> None:
        """Removes members whose session timed out and member ids never used in time."""
        now = self._clock()
        async with group.lock:
            expired = [m for m in group.members.values() if m.session_expired(now)]
            for member in expired:
                self._remove(group, member)
            unused = [m for m, deadline in group.pending_members.items() if now > deadline]
            for member_id in unused:
                del group.pending_members[member_id]
            if expired:
                await self._membership_changed(group)
            elif unused:
                # Never a member: nothing to rebalance, but a join phase may wait for it (Kafka).
                await self._maybe_complete_join(group)

    def abandon(self, group: Group, code: int) -> None:
        """The group is no longer this broker's: answer everyone waiting and stop its timer."""
        group.state = DEAD
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for member in group.members.values():
            if (parked_join := member.pending_join) is not None:
                parked_join.set_result(JoinGroupResponse(code, member_id=member.member_id))
            if (parked_sync := member.pending_sync) is not None:
                parked_sync.set_result(SyncGroupResponse(code))


def refused(group: Group, client: _core.ControlRequest, reason: str) -> None:
    log_refusal(group.group_id, client.client_id, reason)
