"""``kafscale groups reset-offsets``: move a group's committed offsets, as Kafka's
``kafka-consumer-groups --reset-offsets`` does.

Without ``--execute`` it only shows the plan (Kafka's default). Offsets are committed with
OffsetCommit for generation -1, which a coordinator only accepts from outside the group while
the group has no members: so the CLI refuses to execute while consumers are connected instead
of letting them overwrite the new offsets with their next commit.

Targets outside a partition's log are clamped to it (``--to-offset`` past the end becomes the
end, as in Kafka) and noted on stderr; ``--to-datetime`` later than every record means the end.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from . import output
from .args import non_negative_int, plain, signed_int, timestamp_ms, topic_partitions
from .errors import EXIT_OK, CliError
from .group_queries import committed_offsets, describe_group, state_name
from .kafka import Kafka, add_connection_flags

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata, OffsetSpec

    from .args import Subcommands

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class Strategy:
    kind: str  # "earliest", "latest", "offset", "datetime" or "shift"
    value: int | None = None  # the offset, Unix ms, or shift


@dataclass(frozen=True)
class Target:
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int
    note: str | None = None  # why new_offset is not what was asked for


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (dry run unless --execute)",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("group", metavar="GROUP")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic",
        type=topic_partitions,
        action="append",
        metavar="TOPIC[:P,...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    which.add_argument(
        "--all-topics", action="store_true", help="every topic the group has committed offsets on"
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start of each partition")
    to.add_argument("--to-latest", action="store_true", help="the log end of each partition")
    to.add_argument(
        "--to-offset", type=non_negative_int, metavar="N", help="this offset in each partition"
    )
    to.add_argument(
        "--to-datetime",
        type=timestamp_ms,
        metavar="ISO8601",
        help="the first record at or after this time, e.g. 2025-01-31T12:00:00Z (no zone: "
        "local time)",
    )
    to.add_argument("--shift-by", type=signed_int, metavar="N", help="committed offset + N")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_reset_offsets)


def strategy_of(args: argparse.Namespace) -> Strategy:
    if args.to_earliest:
        return Strategy("earliest")
    if args.to_latest:
        return Strategy("latest")
    if args.to_offset is not None:
        return Strategy("offset", args.to_offset)
    if args.to_datetime is not None:
        return Strategy("datetime", args.to_datetime)
    return Strategy("shift", args.shift_by)


def plan(
    strategy: Strategy,
    tps: list[TopicPartitionKey],
    current: dict[TopicPartitionKey, int],
    earliest: dict[TopicPartitionKey, int],
    latest: dict[TopicPartitionKey, int],
    by_time: dict[TopicPartitionKey, int] | None = None,
) -> list[Target]:
    """The new offset of each partition. ``by_time``: ListOffsets' answer for the timestamp
    (-1 when no record is that recent)."""
    targets = []
    for tp in tps:
        lo, hi, now = earliest[tp], latest[tp], current.get(tp)
        want: int | None
        if strategy.kind == "earliest":
            want = lo
        elif strategy.kind == "latest":
            want = hi
        elif strategy.kind == "datetime":
            assert by_time is not None
            want = by_time[tp] if by_time[tp] >= 0 else hi
        elif strategy.kind == "offset":
            want = strategy.value
        else:
            if now is None:
                raise CliError(
                    f"{tp[0]}/{tp[1]} has no committed offset to shift from",
                    "reset it with --to-earliest, --to-latest or --to-offset instead",
                )
            want = now + (strategy.value or 0)
        assert want is not None
        new = min(max(want, lo), hi)
        note = None
        if new != want:
            side = "log start" if want < lo else "log end"
            note = (
                f"{tp[0]}/{tp[1]}: offset {want} is outside the log [{lo}, {hi}]: "
                f"using the {side} {new}"
            )
        targets.append(Target(tp[0], tp[1], now, new, note))
    return targets


def chosen_partitions(
    args: argparse.Namespace, metadata: ClusterMetadata, committed: dict[TopicPartitionKey, int]
) -> list[TopicPartitionKey]:
    if args.all_topics:
        if not committed:
            raise CliError(
                f"group {args.group} has no committed offsets, so --all-topics names nothing",
                "name the topics with --topic",
            )
        # as in Kafka's tool: the partitions with a committed offset, of topics that still exist
        return sorted(tp for tp in committed if tp[0] in metadata.topics)
    chosen = args.topic
    out: list[TopicPartitionKey] = []
    for topic, parts in chosen:
        if topic not in metadata.topics:
            raise CliError(f"no topic named {topic}", "`kafscale topics list` shows the topics")
        count = len(metadata.topics[topic].partitions)
        for p in parts if parts is not None else range(count):
            if p >= count:
                which = "partition 0" if count == 1 else f"partitions 0 to {count - 1}"
                raise CliError(
                    f"topic {topic} has no partition {p} (it has {which})",
                    f"`kafscale topics describe {topic}` lists its partitions",
                )
            out.append((topic, p))
    return sorted(set(out))


def list_offsets(
    kafka: Kafka, tps: list[TopicPartitionKey], spec: OffsetSpec
) -> dict[TopicPartitionKey, int]:
    from confluent_kafka import TopicPartition

    futures = kafka.admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in tps}, request_timeout=kafka.timeout
    )
    return {
        (tp.topic, tp.partition): kafka.result(
            f, "looking up offsets of", f"{tp.topic}/{tp.partition}"
        ).offset
        for tp, f in futures.items()
    }


def commit(kafka: Kafka, group: str, targets: list[Target]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t.topic, t.partition, t.new_offset) for t in targets]
    )
    future = kafka.admin.alter_consumer_group_offsets([request], request_timeout=kafka.timeout)
    done = kafka.result(future[group], "committing the new offsets of group", group)
    for tp in done.topic_partitions:
        if tp.error is not None:
            raise kafka.failure(
                tp.error, "committing the new offset of", f"{tp.topic}/{tp.partition}"
            )


def cmd_reset_offsets(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec

    kafka = Kafka.from_args(args)
    metadata = kafka.metadata()
    desc = describe_group(kafka, args.group)
    if desc.members:
        problem = (
            f"group {args.group} has {output.plural(len(desc.members), 'active member')} (state "
            f"{state_name(desc.state)}): offsets can only be reset while the group is empty"
        )
        if args.execute:
            raise CliError(problem, "stop its consumers (or wait for their session timeout)")
        output.note(f"warning: {problem}; --execute would be refused now")
    committed = committed_offsets(kafka, args.group)
    tps = chosen_partitions(args, metadata, committed)
    if not tps:
        raise CliError(
            f"group {args.group} has no committed offsets on topics that exist",
            "name the topics with --topic",
        )
    strategy = strategy_of(args)
    earliest = list_offsets(kafka, tps, OffsetSpec.earliest())
    latest = list_offsets(kafka, tps, OffsetSpec.latest())
    by_time = None
    if strategy.kind == "datetime":
        assert strategy.value is not None
        by_time = list_offsets(kafka, tps, OffsetSpec.for_timestamp(strategy.value))
    targets = plan(strategy, tps, committed, earliest, latest, by_time)
    for t in targets:
        if t.note:
            output.note(t.note)
    if args.output == output.JSON:
        output.print_json([{"group": args.group, **asdict(t)} for t in targets])
    else:
        output.print_table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
            [[args.group, t.topic, t.partition, t.current_offset, t.new_offset] for t in targets],
        )
    if args.execute:
        commit(kafka, args.group, targets)
        output.note(
            f"committed the new offsets of group {args.group} on "
            f"{output.plural(len(targets), 'partition')}"
        )
    else:
        output.note("dry run: nothing was changed; add --execute to commit these offsets")
    return EXIT_OK
