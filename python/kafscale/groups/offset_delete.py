"""OffsetDelete (KIP-496) on a loaded group: drops committed offsets of partitions the group
does not consume (any partition of an Empty group), as Kafka's group coordinator does.

- An Empty group: every named partition's offset goes.
- A group with members of the consumer protocol: partitions of topics some member subscribes
  to answer GROUP_SUBSCRIBED_TO_TOPIC; the rest go. A subscription that cannot be read counts
  as subscribing to every topic (Kafka's rule: never delete what may be in use).
- Any other group with members: NON_EMPTY_GROUP for the whole request.
- A group that was never stored, or is Dead: GROUP_ID_NOT_FOUND.
- A partition of a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION.
An offset that was never committed is deleted without complaint, as in Kafka.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Protocol

from kafscale.errors import ErrorCode
from kafscale.groups.model import Group, GroupState
from kafscale.groups.offsets import TopicLookup
from kafscale.groups.protocol import (
    OffsetDeletePartitionResult,
    OffsetDeleteResponse,
    OffsetDeleteTopicResult,
)

if TYPE_CHECKING:
    from kafscale import _core

__all__ = [
    "CONSUMER_PROTOCOL",
    "delete_offsets",
    "group_subscriptions",
    "subscribed_topics",
]

CONSUMER_PROTOCOL = "consumer"


class OffsetDeleter(Protocol):
    async def delete_offsets(self, group: Group, partitions: list[tuple[str, int]]) -> None: ...


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a consumer-protocol subscription (every version starts with a version
    int16 and the topics as an array of int16-length strings); None if it cannot be read."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0:
            return None
        position, topics = 6, set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.add(metadata[position : position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def group_subscriptions(group: Group) -> set[str] | None:
    """Every topic a member subscribes to; None if some subscription cannot be read."""
    topics: set[str] = set()
    for member in group.members.values():
        chosen = dict(member.protocols).get(group.protocol_name or "")
        subscribed = None if chosen is None else subscribed_topics(chosen)
        if subscribed is None:
            return None
        topics |= subscribed
    return topics


def _group_error(group: Group) -> int:
    if group.is_(GroupState.DEAD) or (group.revision == 0 and not group.members):
        return ErrorCode.GROUP_ID_NOT_FOUND
    if group.is_(GroupState.EMPTY) or group.protocol_type == CONSUMER_PROTOCOL:
        return ErrorCode.NONE
    return ErrorCode.NON_EMPTY_GROUP


async def delete_offsets(
    group: Group, req: _core.OffsetDeleteRequest, topics: TopicLookup, storage: OffsetDeleter
) -> OffsetDeleteResponse:
    """Deletes what may go (fenced on the group record, like every group write) and says
    per partition what happened. Raises the storage's Fenced and StoreUnavailable."""
    async with group.lock:
        code = _group_error(group)
        if code != ErrorCode.NONE:
            return OffsetDeleteResponse(code)
        in_use = set() if group.is_(GroupState.EMPTY) else group_subscriptions(group)
        results: list[OffsetDeleteTopicResult] = []
        doomed: list[tuple[str, int]] = []
        for t in req.topics:
            topic = await topics(t.name)
            partitions = []
            for index in t.partitions:
                if topic is None or not 0 <= index < topic.partitions:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif in_use is None or t.name in in_use:
                    error = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    error = ErrorCode.NONE
                    doomed.append((t.name, index))
                partitions.append(OffsetDeletePartitionResult(index, error))
            results.append(OffsetDeleteTopicResult(t.name, partitions))
        stored = [key for key in doomed if key in group.offsets]
        if stored:
            await storage.delete_offsets(group, stored)
            for key in stored:
                del group.offsets[key]
        return OffsetDeleteResponse(ErrorCode.NONE, results)
