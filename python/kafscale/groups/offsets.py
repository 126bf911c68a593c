"""OffsetCommit and OffsetFetch on a loaded group.

Who may commit follows Kafka: a current member of the current generation (its commit counts as
a heartbeat), or - with generation -1 and no member id - anyone while the group has no members
(consumers that assign() partitions themselves). Offsets are written to the metadata store,
fenced on the group record, before they are acknowledged or served. A group holds offsets for
at most ``group_max_committed_offsets`` partitions: a partition new to a group at the cap gets
INVALID_COMMIT_OFFSET_SIZE (partitions it already holds can always be committed again).

A commit's timestamp (OffsetCommit v1 may set it) is what its expiry counts from, so one in the
future is taken as now: a client can make its offsets expire sooner, never later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from kafscale.errors import ErrorCode
from kafscale.groups.limits import GroupLimits, log_refusal, offsets_cap_reason
from kafscale.groups.model import (
    CommittedOffset,
    Group,
    GroupState,
    PendingTxnOffsets,
    WallClock,
    wall_clock_ms,
)
from kafscale.groups.protocol import (
    OffsetCommitPartitionResult,
    OffsetCommitResponse,
    OffsetCommitTopicResult,
    OffsetFetchGroupResult,
    OffsetFetchPartitionResult,
    OffsetFetchTopicResult,
)
from kafscale.groups.store import Fenced, StoreUnavailable

if TYPE_CHECKING:
    from kafscale import _core

__all__ = [
    "MAX_METADATA_BYTES",
    "Offsets",
    "commit_answer",
    "commit_error_answer",
    "committed_offset",
    "partition_error",
]

# Kafka's offset.metadata.max.bytes default.
MAX_METADATA_BYTES = 4096


class OffsetWriter(Protocol):
    async def commit_offsets(
        self,
        group: Group,
        offsets: list[tuple[str, int, CommittedOffset]],
        pending: list[tuple[int, PendingTxnOffsets]],
    ) -> None: ...


TopicLookup = Callable[[str], Awaitable["_core.TopicInfo | None"]]


def commit_answer(
    req: _core.OffsetCommitRequest | _core.TxnOffsetCommitRequest,
    code_of: Callable[[str, int], int],
) -> OffsetCommitResponse:
    """The answer to an OffsetCommit or TxnOffsetCommit: ``code_of(topic, partition)`` for each
    partition of the request."""
    return OffsetCommitResponse(
        [
            OffsetCommitTopicResult(
                t.name,
                [
                    OffsetCommitPartitionResult(
                        p.partition_index, code_of(t.name, p.partition_index)
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def commit_error_answer(
    req: _core.OffsetCommitRequest | _core.TxnOffsetCommitRequest, code: int
) -> OffsetCommitResponse:
    """The same error for every partition of the request."""
    return commit_answer(req, lambda _topic, _partition: code)


class Offsets:
    def __init__(
        self,
        storage: OffsetWriter,
        topic: TopicLookup,
        touch: Callable[[Group, str], None],
        lose: Callable[[Group, int], None],
        limits: GroupLimits,
        wall_clock: WallClock = wall_clock_ms,
    ) -> None:
        self._storage = storage
        self._topic = topic
        self._touch = touch
        self._lose = lose
        self._limits = limits
        self._wall_clock = wall_clock

    def _may_commit(self, group: Group, req: _core.OffsetCommitRequest) -> int:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        simple = req.generation_id < 0 and req.member_id == "" and req.group_instance_id is None
        if simple:
            return ErrorCode.NONE if group.is_(GroupState.EMPTY) else ErrorCode.UNKNOWN_MEMBER_ID
        if group.fenced_instance(req.member_id, req.group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if req.member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def commit(
        self, group: Group, req: _core.OffsetCommitRequest, client: _core.ControlRequest
    ) -> OffsetCommitResponse:
        async with group.lock:
            code = self._may_commit(group, req)
            if code != ErrorCode.NONE:
                return commit_error_answer(req, code)
            self._touch(group, req.member_id)
            now_ms = self._wall_clock()
            results: dict[tuple[str, int], int] = {}
            accepted: list[tuple[str, int, CommittedOffset]] = []
            # Partitions this commit adds to the group, counted against its cap.
            added: set[tuple[str, int]] = set()
            over_cap = 0
            for t in req.topics:
                topic = await self._topic(t.name)
                for p in t.partitions:
                    key = (t.name, p.partition_index)
                    error = partition_error(topic, p)
                    if error == ErrorCode.NONE and key not in group.offsets and key not in added:
                        if len(group.offsets) + len(added) >= self._limits.committed_offsets:
                            error = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
                            over_cap += 1
                        else:
                            added.add(key)
                    results[key] = error
                    if error == ErrorCode.NONE:
                        accepted.append((t.name, p.partition_index, committed_offset(p, now_ms)))
            if over_cap:
                log_refusal(
                    group.group_id,
                    client.client_id,
                    offsets_cap_reason(over_cap, self._limits),
                )
            if accepted:
                # Kafka's rule: the most recent commit of a partition wins, so a transaction's
                # offset committed before this one no longer applies when it commits.
                superseded = _without(group, {(t, p) for t, p, _ in accepted})
                try:
                    await self._storage.commit_offsets(group, accepted, superseded)
                except Fenced:
                    self._lose(group, ErrorCode.NOT_COORDINATOR)
                    return commit_error_answer(req, ErrorCode.NOT_COORDINATOR)
                except StoreUnavailable:
                    return commit_error_answer(req, ErrorCode.COORDINATOR_NOT_AVAILABLE)
                for topic_name, partition, offset in accepted:
                    group.offsets[(topic_name, partition)] = offset
                group.pending_txn.update(superseded)
        return commit_answer(req, lambda topic, partition: results[(topic, partition)])

    @staticmethod
    def fetch(
        group: Group, req: _core.OffsetFetchGroup, require_stable: bool
    ) -> OffsetFetchGroupResult:
        """The offsets one group of an OffsetFetch asks for (``req.topics``; None: every
        partition the group committed). With ``require_stable`` (KIP-447) a partition with
        offsets of an undecided transaction is UNSTABLE_OFFSET_COMMIT, which consumers retry."""
        unstable = group.unstable_offsets() if require_stable else set()
        if req.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(group.offsets):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in req.topics}
        topics = []
        for name, partitions in wanted.items():
            results = []
            for partition in partitions:
                offset = group.offsets.get((name, partition))
                if (name, partition) in unstable:
                    results.append(
                        OffsetFetchPartitionResult(
                            partition, error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT
                        )
                    )
                elif offset is None:
                    results.append(OffsetFetchPartitionResult(partition))
                else:
                    results.append(
                        OffsetFetchPartitionResult(
                            partition, offset.offset, offset.leader_epoch, offset.metadata
                        )
                    )
            topics.append(OffsetFetchTopicResult(name, results))
        return OffsetFetchGroupResult(group.group_id, ErrorCode.NONE, topics)


def _without(group: Group, keys: set[tuple[str, int]]) -> list[tuple[int, PendingTxnOffsets]]:
    """The group's undecided transactions' offsets that name any of ``keys``, without them."""
    return [
        (
            producer_id,
            replace(pending, offsets={k: o for k, o in pending.offsets.items() if k not in keys}),
        )
        for producer_id, pending in group.pending_txn.items()
        if keys & pending.offsets.keys()
    ]


def partition_error(topic: _core.TopicInfo | None, p: _core.OffsetCommitPartition) -> int:
    if topic is None or not 0 <= p.partition_index < topic.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    metadata = p.committed_metadata or ""
    if len(metadata.encode()) > MAX_METADATA_BYTES:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE


def committed_offset(p: _core.OffsetCommitPartition, now_ms: int) -> CommittedOffset:
    timestamp = min(p.commit_timestamp, now_ms) if p.commit_timestamp >= 0 else now_ms
    # Kafka stores a null metadata as "" (and OffsetFetch answers "" for it).
    metadata = p.committed_metadata or ""
    return CommittedOffset(p.committed_offset, p.committed_leader_epoch, metadata, timestamp)
