"""Groups and committed offsets in the metadata store (etcd in a cluster, the embedded store on a
single node), under the core's group root:

    {group}                             the group record (JSON): state, generation, protocol,
                                        leader, coordinator epoch, members with their metadata
                                        and assignment
    {group}/offsets/{topic}/{partition} a committed offset (JSON)
    {group}/txn-offsets/{producer id}   offsets of a transaction not decided yet (JSON): its
                                        transactional id, producer epoch and offsets

``{group}`` is the group id percent-encoded, so any id is one path segment. Every write is
conditioned on the record's revision as this coordinator last saw it: a coordinator that lost
the group (another broker loaded it and bumped the coordinator epoch) fails its next write and
gives the group up. Heartbeats are never written.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, NotRequired, TypedDict, TypeVar
from urllib.parse import quote, unquote

from kafscale.groups.model import CommittedOffset, Group, GroupState, Member, PendingTxnOffsets

if TYPE_CHECKING:
    from kafscale import _core

__all__ = ["Fenced", "GroupStorage", "StoreUnavailable"]

# etcd refuses transactions of more than 128 operations (its --max-txn-ops default) and requests
# of more than 1.5 MiB (--max-request-bytes). Offsets are written in transactions of at most
# this many puts and (past the first put) bytes of keys and values; with one more offset and the
# fencing comparison a transaction stays well below 1.5 MiB.
_MAX_OPS_PER_TXN = 100
_MAX_TXN_BYTES = 1024 * 1024


_T = TypeVar("_T")


class Fenced(Exception):
    """The group's record changed behind this coordinator: another broker coordinates it now."""


class StoreUnavailable(Exception):
    """The metadata store could not be reached."""


def _group_key(group_id: str) -> str:
    return quote(group_id, safe="")


def _offsets_prefix(group_id: str) -> str:
    return f"{_group_key(group_id)}/offsets/"


def _offset_key(group_id: str, topic: str, partition: int) -> str:
    return f"{_offsets_prefix(group_id)}{topic}/{partition}"


def _pending_prefix(group_id: str) -> str:
    return f"{_group_key(group_id)}/txn-offsets/"


def _pending_key(group_id: str, producer_id: int) -> str:
    return f"{_pending_prefix(group_id)}{producer_id}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


# --- the stored records (JSON) --------------------------------------------------------------


class _ProtocolRecord(TypedDict):
    name: str
    metadata: str  # base64


class _MemberRecord(TypedDict):
    """A ``Member`` as stored: the format on disk, kept apart from the class in memory (no
    session state; bytes as base64) so that changing one does not silently change the other."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[_ProtocolRecord]
    assignment: str  # base64


class _GroupRecord(TypedDict):
    group_id: str
    state: str
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    coordinator: int
    coordinator_epoch: int
    # Absent from records stored before it was kept.
    empty_since_ms: NotRequired[int | None]
    members: list[_MemberRecord]


class _OffsetRecord(TypedDict):
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int


class _PendingOffsetRecord(_OffsetRecord):
    topic: str
    partition: int


class _PendingRecord(TypedDict):
    transactional_id: str
    producer_epoch: int
    offsets: list[_PendingOffsetRecord]


def _json(record: _GroupRecord | _OffsetRecord | _MemberRecord | _PendingRecord) -> bytes:
    # UTF-8 rather than \uXXXX escapes: a non-ASCII name takes its own size, not up to 3 times it.
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()


def _member_record(m: Member) -> _MemberRecord:
    return {
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "session_timeout_ms": m.session_timeout_ms,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "protocol_type": m.protocol_type,
        "protocols": [{"name": n, "metadata": _b64(meta)} for n, meta in m.protocols],
        "assignment": _b64(m.assignment),
    }


def _group_record(group: Group, coordinator: int, members: list[_MemberRecord]) -> bytes:
    return _json(
        {
            "group_id": group.group_id,
            "state": group.state.value,
            "generation": group.generation,
            "protocol_type": group.protocol_type,
            "protocol": group.protocol_name,
            "leader": group.leader_id,
            "coordinator": coordinator,
            "coordinator_epoch": group.coordinator_epoch,
            "empty_since_ms": group.empty_since_ms,
            "members": members,
        }
    )


def encode_group(group: Group, coordinator: int) -> bytes:
    return _group_record(group, coordinator, [_member_record(m) for m in group.members.values()])


def member_record_bytes(member: Member) -> int:
    """What ``member`` adds to its group's stored record (with the comma before it)."""
    return len(_json(_member_record(member))) + 1


def group_record_bytes(group: Group) -> int:
    """The size of the group's stored record, from its members' ``record_bytes`` (kept current
    by the state machine) rather than by encoding every member again."""
    header = _group_record(group, 0, [])
    return len(header) + sum(m.record_bytes for m in group.members.values())


def decode_group(group_id: str, value: bytes, revision: int, now: float) -> Group:
    record: _GroupRecord = json.loads(value)
    group = Group(
        group_id,
        state=GroupState(record["state"]),
        generation=record["generation"],
        protocol_type=record["protocol_type"],
        protocol_name=record["protocol"],
        leader_id=record["leader"],
        revision=revision,
        coordinator_epoch=record["coordinator_epoch"],
        empty_since_ms=record.get("empty_since_ms"),
    )
    for m in record["members"]:
        member = Member(
            member_id=m["member_id"],
            group_instance_id=m["group_instance_id"],
            client_id=m["client_id"],
            client_host=m["client_host"],
            session_timeout_ms=m["session_timeout_ms"],
            rebalance_timeout_ms=m["rebalance_timeout_ms"],
            protocol_type=m["protocol_type"],
            protocols=[(p["name"], _unb64(p["metadata"])) for p in m["protocols"]],
            assignment=_unb64(m["assignment"]),
            # A loaded member gets a full session from now to reach its new coordinator.
            last_heartbeat=now,
        )
        member.record_bytes = member_record_bytes(member)
        group.members[member.member_id] = member
    return group


def encode_offset(offset: CommittedOffset) -> bytes:
    return _json(
        {
            "offset": offset.offset,
            "leader_epoch": offset.leader_epoch,
            "metadata": offset.metadata,
            "commit_timestamp_ms": offset.commit_timestamp_ms,
        }
    )


def decode_offset(value: bytes) -> CommittedOffset:
    record: _OffsetRecord = json.loads(value)
    return CommittedOffset(
        record["offset"], record["leader_epoch"], record["metadata"], record["commit_timestamp_ms"]
    )


def encode_pending(pending: PendingTxnOffsets) -> bytes:
    return _json(
        {
            "transactional_id": pending.transactional_id,
            "producer_epoch": pending.producer_epoch,
            "offsets": [
                {
                    "topic": topic,
                    "partition": partition,
                    "offset": o.offset,
                    "leader_epoch": o.leader_epoch,
                    "metadata": o.metadata,
                    "commit_timestamp_ms": o.commit_timestamp_ms,
                }
                for (topic, partition), o in pending.offsets.items()
            ],
        }
    )


def decode_pending(value: bytes) -> PendingTxnOffsets:
    record: _PendingRecord = json.loads(value)
    return PendingTxnOffsets(
        record["transactional_id"],
        record["producer_epoch"],
        {
            (o["topic"], o["partition"]): CommittedOffset(
                o["offset"], o["leader_epoch"], o["metadata"], o["commit_timestamp_ms"]
            )
            for o in record["offsets"]
        },
    )


def _transactions(puts: list[tuple[str, bytes]]) -> Iterable[list[tuple[str, bytes]]]:
    batch: list[tuple[str, bytes]] = []
    size = 0
    for key, value in puts:
        n = len(key.encode()) + len(value)
        if batch and (len(batch) == _MAX_OPS_PER_TXN or size + n > _MAX_TXN_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((key, value))
        size += n
    if batch:
        yield batch


class GroupStorage:
    """Reads and fenced writes of groups and offsets for one coordinating broker."""

    def __init__(self, store: _core.GroupStore, broker_id: int, store_error: type[Exception]):
        self._store = store
        self._broker_id = broker_id
        self._store_error = store_error

    async def _call(self, operation: Awaitable[_T]) -> _T:
        try:
            return await operation
        except self._store_error as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def load(self, group_id: str) -> Group:
        """The group as stored, claimed for this broker (its coordinator epoch bumped, which
        fences the previous coordinator's writes), with its committed offsets read after the
        claim so none committed by the previous coordinator is missed. A group never stored
        comes back new and unclaimed: its first write creates it, conditioned on absence."""
        now = time.monotonic()
        entry = await self._call(self._store.get(_group_key(group_id)))
        if entry is None:
            group = Group(group_id)
        else:
            group = decode_group(group_id, entry.value, entry.mod_revision, now)
            group.coordinator_epoch += 1
            await self.save(group)
        for offset_entry in await self._call(self._store.list(_offsets_prefix(group_id))):
            topic, _, partition = offset_entry.key.removeprefix(
                _offsets_prefix(group_id)
            ).rpartition("/")
            group.offsets[(topic, int(partition))] = decode_offset(offset_entry.value)
        for pending_entry in await self._call(self._store.list(_pending_prefix(group_id))):
            producer_id = int(pending_entry.key.removeprefix(_pending_prefix(group_id)))
            group.pending_txn[producer_id] = decode_pending(pending_entry.value)
        return group

    async def group_ids(self) -> list[str]:
        """Every stored group's id."""
        entries = await self._call(self._store.list(""))
        return [unquote(e.key) for e in entries if "/" not in e.key]

    async def save(self, group: Group) -> None:
        """Writes the group record; raises Fenced if it changed since this broker's last write."""
        await self._commit(
            group, [(_group_key(group.group_id), encode_group(group, self._broker_id))]
        )

    async def commit_offsets(
        self,
        group: Group,
        offsets: Iterable[tuple[str, int, CommittedOffset]],
        pending: Iterable[tuple[int, PendingTxnOffsets]] = (),
    ) -> None:
        """Stores offsets, fenced on the group record. A group never stored is created with
        them (a simple consumer's group exists once it commits). Large commits go in several
        transactions etcd accepts; each is fenced, so a lost group stops the rest. ``pending``:
        transactions' offsets rewritten in the first of them (those the commit supersedes)."""
        puts = [(_pending_key(group.group_id, pid), encode_pending(p)) for pid, p in pending]
        puts += [(_offset_key(group.group_id, t, p), encode_offset(o)) for t, p, o in offsets]
        if group.revision == 0:
            puts.insert(0, (_group_key(group.group_id), encode_group(group, self._broker_id)))
        for batch in _transactions(puts):
            await self._commit(group, batch)

    async def put_pending(self, group: Group, producer_id: int, pending: PendingTxnOffsets) -> None:
        """Stores a transaction's offsets until it is decided, fenced on the group record (a
        group never stored is created with them)."""
        puts = [(_pending_key(group.group_id, producer_id), encode_pending(pending))]
        if group.revision == 0:
            puts.insert(0, (_group_key(group.group_id), encode_group(group, self._broker_id)))
        await self._commit(group, puts)

    async def drop_pending(self, group: Group, producer_id: int) -> None:
        """Removes a decided transaction's offsets (after they were committed, or aborted)."""
        record = _group_key(group.group_id)
        key = _pending_key(group.group_id, producer_id)
        revision = await self._call(self._store.commit([(record, group.revision)], [], [key], []))
        if revision is None:
            raise Fenced(group.group_id)

    async def delete_offsets(self, group: Group, partitions: list[tuple[str, int]]) -> None:
        """Removes these partitions' committed offsets, fenced on the group record, in as many
        transactions as etcd's operation limit takes (each fenced)."""
        keys = [_offset_key(group.group_id, topic, partition) for topic, partition in partitions]
        record = _group_key(group.group_id)
        for start in range(0, len(keys), _MAX_OPS_PER_TXN):
            batch = keys[start : start + _MAX_OPS_PER_TXN]
            revision = await self._call(
                self._store.commit([(record, group.revision)], [], batch, [])
            )
            if revision is None:
                raise Fenced(group.group_id)

    async def delete(self, group: Group) -> None:
        """Removes the record and every committed offset (a group is gone only as a whole)."""
        key = _group_key(group.group_id)
        revision = await self._call(
            self._store.commit(
                [(key, group.revision)],
                [],
                [key],
                [_offsets_prefix(group.group_id), _pending_prefix(group.group_id)],
            )
        )
        if revision is None:
            raise Fenced(group.group_id)

    async def _commit(self, group: Group, puts: list[tuple[str, bytes]]) -> None:
        key = _group_key(group.group_id)
        revision = await self._call(self._store.commit([(key, group.revision)], puts, [], []))
        if revision is None:
            raise Fenced(group.group_id)
        if any(k == key for k, _ in puts):
            group.revision = revision
