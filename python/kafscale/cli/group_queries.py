"""What the CLI asks about consumer groups (DescribeGroups, OffsetFetch, ListOffsets), shared by
``groups describe`` and ``groups reset-offsets``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .kafka import Kafka

if TYPE_CHECKING:
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import ConsumerGroupDescription

# confluent-kafka's ConsumerGroupState names -> Kafka's state names
STATES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


def state_name(state: ConsumerGroupState | None) -> str:
    return STATES.get(state.name, state.name.title()) if state is not None else "Unknown"


def describe_group(kafka: Kafka, group: str) -> ConsumerGroupDescription:
    """confluent-kafka's ConsumerGroupDescription (an unknown group comes back Dead)."""
    future = kafka.admin.describe_consumer_groups([group], request_timeout=kafka.timeout)[group]
    return kafka.result(future, "describing group", group)


def committed_offsets(kafka: Kafka, group: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): committed offset} of every partition the group committed."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions(group)]
    future = kafka.admin.list_consumer_group_offsets(request, request_timeout=kafka.timeout)[group]
    found = kafka.result(future, "fetching the committed offsets of group", group)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in found.topic_partitions
        if tp.error is None and tp.offset != NO_OFFSET
    }


def end_offsets(kafka: Kafka, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    """{(topic, partition): log-end offset}; None where the partition's leader could not say
    (a deleted topic, an owner changing)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    if not tps:
        return {}
    request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
    futures = kafka.admin.list_offsets(request, request_timeout=kafka.timeout)
    out: dict[tuple[str, int], int | None] = {}
    for tp, (found, _) in kafka.results(futures, "ListOffsets").items():
        out[(tp.topic, tp.partition)] = found.offset if found is not None else None
    return out
