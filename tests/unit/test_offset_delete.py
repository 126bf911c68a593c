"""OffsetDelete's rules (KIP-496) on a group in memory: which offsets go, which stay and why."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

import pytest

from kafscale.errors import ErrorCode
from kafscale.groups.model import CommittedOffset, Group, GroupState, Member
from kafscale.groups.offset_delete import delete_offsets, subscribed_topics


def subscription(*topics: str, version: int = 3) -> bytes:
    """A ConsumerProtocolSubscription as Java clients write it (user data and the fields of
    later versions follow the topics; the parser must not care)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1) + b"\x00\x00\x00\x00"


@dataclass
class TopicInfo:
    partitions: int


@dataclass
class Topic:
    name: str
    partitions: list[int]


@dataclass
class Request:
    group_id: str
    topics: list[Topic]


class Storage:
    def __init__(self) -> None:
        self.deleted: list[tuple[str, int]] = []

    async def delete_offsets(self, group: Group, partitions: list[tuple[str, int]]) -> None:
        self.deleted += partitions


async def topics(name: str) -> TopicInfo | None:
    return {"a": TopicInfo(2), "b": TopicInfo(2)}.get(name)


def group(state: GroupState, protocol_type: str = "consumer", *metadata: bytes) -> Group:
    g = Group("g", state=state, protocol_type=protocol_type, protocol_name="range", revision=7)
    for i, meta in enumerate(metadata):
        g.members[f"m{i}"] = Member(
            f"m{i}", None, "c", "h", 10_000, 10_000, protocol_type, [("range", meta)]
        )
    for key in [("a", 0), ("a", 1), ("b", 0)]:
        g.offsets[key] = CommittedOffset(5, -1, "", 0)
    return g


def run(g: Group, *asked: Topic) -> tuple[dict[tuple[str, int], int], int, Storage]:
    storage = Storage()
    answer = asyncio.run(delete_offsets(g, Request("g", list(asked)), topics, storage))
    codes = {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}
    return codes, answer.error_code, storage


def test_subscriptions_of_every_version_are_read() -> None:
    for version in range(4):
        assert subscribed_topics(subscription("a", "b", version=version)) == {"a", "b"}
    assert subscribed_topics(subscription()) == set()


@pytest.mark.parametrize(
    "metadata", [b"", b"\x00\x01", struct.pack(">hi", 0, -1), struct.pack(">hih", 0, 1, 40) + b"x"]
)
def test_an_unreadable_subscription_is_none(metadata: bytes) -> None:
    assert subscribed_topics(metadata) is None


def test_an_empty_group_loses_every_named_offset() -> None:
    g = group(GroupState.EMPTY)
    codes, error, storage = run(g, Topic("a", [0, 1]), Topic("b", [1]))
    assert error == ErrorCode.NONE
    assert set(codes.values()) == {ErrorCode.NONE}
    assert storage.deleted == [("a", 0), ("a", 1)], "an offset never committed is not written"
    assert list(g.offsets) == [("b", 0)]


def test_a_consuming_group_keeps_what_its_members_subscribe_to() -> None:
    g = group(GroupState.STABLE, "consumer", subscription("a"), subscription("a", "x"))
    codes, error, storage = run(g, Topic("a", [0]), Topic("b", [0, 5]), Topic("nope", [0]))
    assert error == ErrorCode.NONE
    assert codes == {
        ("a", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("b", 0): ErrorCode.NONE,
        ("b", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert storage.deleted == [("b", 0)]
    assert ("a", 0) in g.offsets


def test_an_unreadable_subscription_counts_as_every_topic() -> None:
    g = group(GroupState.STABLE, "consumer", subscription("a"), b"garbage")
    codes, _, storage = run(g, Topic("b", [0]))
    assert codes == {("b", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
    assert storage.deleted == []


def test_other_groups_with_members_and_unknown_groups_are_refused_whole() -> None:
    connect = group(GroupState.STABLE, "connect", subscription("a"))
    codes, error, storage = run(connect, Topic("b", [0]))
    assert (codes, error, storage.deleted) == ({}, ErrorCode.NON_EMPTY_GROUP, [])
    never_stored = Group("g")
    codes, error, storage = run(never_stored, Topic("a", [0]))
    assert (codes, error, storage.deleted) == ({}, ErrorCode.GROUP_ID_NOT_FOUND, [])
