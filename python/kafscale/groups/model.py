"""A consumer group's in-memory state: members, generation, the chosen protocol, offsets.

Plain data plus the small decisions that only read it (protocol selection, who has rejoined);
the state machine that changes it lives in :mod:`kafscale.groups.membership`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from kafscale.groups.protocol import JoinGroupResponse, SyncGroupResponse

# What timestamps kept with groups and offsets are read from: wall-clock milliseconds, since
# they are stored and read again by other brokers. Injected so that tests can move time.
WallClock = Callable[[], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GroupState(str, Enum):
    """The classic protocol's states, named as DescribeGroups reports them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = 0.0
    # What this member adds to the group's stored record (``store.member_record_bytes``), kept
    # current by the state machine whenever what is stored of the member changes.
    record_bytes: int = 0
    # Set while the member's JoinGroup (or SyncGroup) request waits for the group.
    join_waiter: asyncio.Future[JoinGroupResponse] | None = None
    sync_waiter: asyncio.Future[SyncGroupResponse] | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)

    # The waiter of the member's parked JoinGroup (SyncGroup) while it is unanswered, else None:
    # what answering it needs, typed so that no caller has to assume the waiter is set.
    @property
    def pending_join(self) -> asyncio.Future[JoinGroupResponse] | None:
        waiter = self.join_waiter
        return waiter if waiter is not None and not waiter.done() else None

    @property
    def pending_sync(self) -> asyncio.Future[SyncGroupResponse] | None:
        waiter = self.sync_waiter
        return waiter if waiter is not None and not waiter.done() else None

    @property
    def awaiting_join(self) -> bool:
        return self.pending_join is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.pending_sync is not None

    def session_expired(self, now: float) -> bool:
        # A member parked in JoinGroup or SyncGroup cannot heartbeat; the rebalance deadline
        # bounds those waits instead.
        if self.awaiting_join or self.awaiting_sync:
            return False
        return now > self.last_heartbeat + self.session_timeout_ms / 1000


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int


@dataclass(frozen=True)
class PendingTxnOffsets:
    """Offsets a transaction committed for the group (TxnOffsetCommit), not in force until
    the transaction commits; dropped if it aborts."""

    transactional_id: str
    producer_epoch: int
    offsets: dict[tuple[str, int], CommittedOffset]


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, and when they stop being honoured.
    pending_members: dict[str, float] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # By producer id: offsets of transactions not decided yet.
    pending_txn: dict[int, PendingTxnOffsets] = field(default_factory=dict)
    # Mod revision of the group's record in the metadata store (0: not stored yet); every
    # write of the record or of an offset is conditioned on it, which fences an old coordinator.
    revision: int = 0
    coordinator_epoch: int = 0
    # Wall-clock time (ms) at which the group last became Empty (Kafka's currentStateTimestamp,
    # kept only for Empty): an empty group's offsets expire retention after it. None for a
    # group that never had members, or whose record was stored before this was kept.
    empty_since_ms: int | None = None
    # When the current join phase ends at the latest, and (during the initial delay of a group
    # that was empty) when the delay expires and whether members joined during it.
    join_deadline: float = 0.0
    initial_delay_until: float | None = None
    joined_during_delay: bool = False
    join_timer: asyncio.TimerHandle | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def unstable_offsets(self) -> set[tuple[str, int]]:
        """The partitions with offsets of an undecided transaction (KIP-447)."""
        return {key for pending in self.pending_txn.values() for key in pending.offsets}

    def member_by_instance(self, group_instance_id: str) -> Member | None:
        return next(
            (m for m in self.members.values() if m.group_instance_id == group_instance_id), None
        )

    def fenced_instance(self, member_id: str, group_instance_id: str | None) -> bool:
        """A static member id that no longer belongs to its instance (a newer one took over)."""
        if group_instance_id is None:
            return False
        current = self.member_by_instance(group_instance_id)
        return current is not None and current.member_id != member_id

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join: same type, and one protocol every
        current member supports too."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def candidate_protocols(self) -> set[str]:
        names = [set(m.protocol_names) for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def select_protocol(self) -> str:
        """Kafka's rule: among the protocols every member supports, each member votes for the
        first of its own preferences; the most votes win (ties: the earliest preferred)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(p for p in member.protocol_names if p in candidates)] += 1
        return votes.most_common(1)[0][0]

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    @property
    def max_rebalance_timeout_s(self) -> float:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
