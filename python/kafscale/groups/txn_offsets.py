"""Offsets committed in a transaction (TxnOffsetCommit, ``sendOffsetsToTransaction``) on the
group's coordinator.

A transactional producer's offsets are kept apart from the group's committed offsets, per
producer id, in memory and in the metadata store (``{group}/txn-offsets/{producer id}``), until
its transaction is decided. The transaction coordinator (in the core) records the group in the
transaction (AddOffsetsToTxn) and, once the transaction is decided, lists the group among those
still to be told (``unmarked_groups``); the transaction completes only after every one was.
Each round (``settle``) the coordinator of such a group makes the offsets of a committed
transaction the group's committed offsets, or drops those of an aborted one, and then reports
the group done (``transaction_group_marked``). So offsets committed in a transaction are in
force exactly when it committed, whichever broker coordinates the group, and a group's new
coordinator finds the undecided ones in the store.

A TxnOffsetCommit is checked against the transaction's record as this broker's copy of the
metadata store holds it: the producer's transaction must be ongoing with the group added. The
copy can lag the transaction coordinator's write by a moment: anything it cannot confirm is
answered COORDINATOR_LOAD_IN_PROGRESS, which producers retry; a producer whose epoch was
bumped gets INVALID_PRODUCER_EPOCH, one whose transaction is already being decided
INVALID_TXN_STATE. A producer of the second transaction protocol (TxnOffsetCommit v5,
KIP-890 part 2) sends no AddOffsetsToTxn: the group is added here first, and its record at
the same epoch still being decided is its previous transaction being marked (retried).
Until the transaction is decided, OffsetFetch with ``require_stable`` (KIP-447) answers
UNSTABLE_OFFSET_COMMIT for its partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from kafscale.errors import ErrorCode
from kafscale.groups.model import CommittedOffset, Group, PendingTxnOffsets, WallClock
from kafscale.groups.offsets import (
    commit_answer,
    commit_error_answer,
    committed_offset,
    partition_error,
)
from kafscale.groups.protocol import OffsetCommitResponse
from kafscale.groups.store import Fenced, GroupStorage, StoreUnavailable

if TYPE_CHECKING:
    from kafscale import _core

__all__ = ["TransactionalOffsets"]

log = logging.getLogger(__name__)

ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"

TopicLookup = Callable[[str], Awaitable["_core.TopicInfo | None"]]
Acquire = Callable[[str], Awaitable["Group | int"]]


class TransactionalOffsets:
    def __init__(
        self,
        core: _core.Broker,
        storage: GroupStorage,
        topic: TopicLookup,
        lose: Callable[[Group, int], None],
        broker_id: int,
        wall_clock: WallClock,
    ) -> None:
        self._core = core
        self._storage = storage
        self._topic = topic
        self._lose = lose
        self._broker_id = broker_id
        self._wall_clock = wall_clock

    async def commit(self, group: Group, req: _core.TxnOffsetCommitRequest) -> OffsetCommitResponse:
        """Keeps the request's offsets with the producer's transaction until it is decided."""
        if req.adds_group:
            await self._core.transaction_add_group(
                req.transactional_id, req.producer_id, req.producer_epoch, group.group_id
            )
        async with group.lock:
            code = self._may_commit(group, req)
            if code != ErrorCode.NONE:
                return commit_error_answer(req, code)
            now_ms = self._wall_clock()
            results: dict[tuple[str, int], int] = {}
            accepted: dict[tuple[str, int], CommittedOffset] = {}
            for t in req.topics:
                topic = await self._topic(t.name)
                for p in t.partitions:
                    key = (t.name, p.partition_index)
                    results[key] = partition_error(topic, p)
                    if results[key] == ErrorCode.NONE:
                        accepted[key] = committed_offset(p, now_ms)
            if accepted:
                earlier = group.pending_txn.get(req.producer_id)
                offsets = {}
                if earlier is not None and earlier.producer_epoch == req.producer_epoch:
                    offsets.update(earlier.offsets)
                offsets.update(accepted)
                pending = PendingTxnOffsets(req.transactional_id, req.producer_epoch, offsets)
                try:
                    await self._storage.put_pending(group, req.producer_id, pending)
                except Fenced:
                    self._lose(group, ErrorCode.NOT_COORDINATOR)
                    return commit_error_answer(req, ErrorCode.NOT_COORDINATOR)
                except StoreUnavailable:
                    return commit_error_answer(req, ErrorCode.COORDINATOR_NOT_AVAILABLE)
                group.pending_txn[req.producer_id] = pending
        return commit_answer(req, lambda topic, partition: results[(topic, partition)])

    def _may_commit(self, group: Group, req: _core.TxnOffsetCommitRequest) -> int:
        view = self._core.transaction(req.transactional_id)
        if view is None or view.producer_id != req.producer_id:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if view.producer_epoch > req.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        same = view.producer_epoch == req.producer_epoch
        if same and view.state in (PREPARE_COMMIT, PREPARE_ABORT):
            if req.adds_group:
                # The second protocol bumped the epoch as the previous transaction ended.
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            # The copy never runs ahead of the store: the transaction is being decided.
            return ErrorCode.INVALID_TXN_STATE
        if not (same and view.state == ONGOING and group.group_id in view.groups):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        # v3+ (KIP-447) name the consumer the offsets come from: a member of this generation.
        if req.member_id or req.generation_id >= 0:
            if group.fenced_instance(req.member_id, req.group_instance_id):
                return ErrorCode.FENCED_INSTANCE_ID
            if req.member_id not in group.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if req.generation_id != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    async def settle(self, acquire: Acquire, loaded: Iterable[Group]) -> None:
        """One round: tells every decided transaction's groups this broker coordinates, then
        drops undecided offsets whose transaction is over (see the module's comment)."""
        for view in self._core.decided_transactions():
            commit = view.state == PREPARE_COMMIT
            for group_id in view.unmarked_groups:
                if self._core.coordinator_for(group_id) != self._broker_id:
                    continue
                group = await acquire(group_id)
                if isinstance(group, int):
                    continue
                if not await self._decide(group, view, commit):
                    continue
                try:
                    await self._core.transaction_group_marked(
                        view.transactional_id, view.producer_id, view.producer_epoch, group_id
                    )
                except Exception as exc:
                    log.warning(
                        "reporting group %r done with transaction %r failed (%s); reporting it "
                        "again",
                        group_id,
                        view.transactional_id,
                        exc,
                    )
        for group in list(loaded):
            for producer_id, pending in list(group.pending_txn.items()):
                if self._over(producer_id, pending):
                    async with group.lock:
                        await self._drop(group, producer_id)

    async def _decide(self, group: Group, view: _core.TransactionView, commit: bool) -> bool:
        """Makes the transaction's offsets the group's (commit) or drops them; False if the
        store could not be written (tried again next round)."""
        async with group.lock:
            pending = group.pending_txn.get(view.producer_id)
            if pending is None:
                return True
            if commit and pending.producer_epoch == view.transaction_epoch:
                offsets = [(t, p, o) for (t, p), o in pending.offsets.items()]
                try:
                    await self._storage.commit_offsets(group, offsets)
                except Fenced:
                    self._lose(group, ErrorCode.NOT_COORDINATOR)
                    return False
                except StoreUnavailable as exc:
                    log.warning("cannot commit group %r's transaction offsets: %s", group, exc)
                    return False
                group.offsets.update(pending.offsets)
            return await self._drop(group, view.producer_id)

    def _over(self, producer_id: int, pending: PendingTxnOffsets) -> bool:
        """Whether the transaction of undecided offsets ended without telling the group: it
        aborted before they were stored (a commit waits for them)."""
        view = self._core.transaction(pending.transactional_id)
        if view is None or view.producer_id != producer_id:
            return True
        if view.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return False
        return view.producer_epoch > pending.producer_epoch or view.state != ONGOING

    async def _drop(self, group: Group, producer_id: int) -> bool:
        try:
            await self._storage.drop_pending(group, producer_id)
        except Fenced:
            self._lose(group, ErrorCode.NOT_COORDINATOR)
            return False
        except StoreUnavailable as exc:
            log.warning("cannot drop group %r's transaction offsets: %s", group.group_id, exc)
            return False
        group.pending_txn.pop(producer_id, None)
        return True
