"""``kafscale topics list|create|describe|alter|delete`` through the Kafka admin APIs.

Topic existence is always checked against a Metadata request that names no topic: naming one
would make a broker with auto-creation on create it, and DescribeConfigs answers the defaults
for any name, so neither can tell whether a topic exists.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypedDict

from kafscale._core import topic_configs
from kafscale.errors import ErrorCode

from . import output
from .args import key_value, positive_int
from .errors import EXIT_FAILED, EXIT_OK, CliError, print_error
from .kafka import Kafka, add_connection_flags

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata, ConfigEntry

    from .args import Subcommands

# DescribeConfigs' config sources, as a person reads them
SOURCES = {
    "DYNAMIC_TOPIC_CONFIG": "topic",
    "STATIC_BROKER_CONFIG": "broker",
    "DEFAULT_CONFIG": "default",
    "DYNAMIC_BROKER_CONFIG": "broker",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "broker",
}


def _accepted_configs() -> str:
    """The topic configs KafScale honours, as the help lists them (a list config with the one
    value it accepts)."""
    return ", ".join(
        f"{c.name}={c.expected}" if c.kind == "list" else c.name for c in topic_configs()
    )


def register(commands: Subcommands) -> None:
    topics = commands.add_parser(
        "topics",
        help="list, create, describe, alter and delete topics",
        description="Create, inspect, change and delete topics through the Kafka admin APIs of the "
        "brokers at --bootstrap-server.",
    )
    sub = topics.add_subparsers(dest="action", metavar="ACTION", title="actions")

    p = sub.add_parser("list", help="topic names and partition counts")
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("create", help="create a topic")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument(
        "--partitions",
        type=positive_int,
        metavar="N",
        help="partition count; default: the brokers' --default-partitions",
    )
    p.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        metavar="N",
        help="accepted for Kafka compatibility; KafScale keeps no replicas (data is durable "
        "in object storage), so any value >= 1 or -1 (the default) behaves the same",
    )
    p.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"topic config, repeatable ({_accepted_configs()})",
    )
    p.add_argument("--if-not-exists", action="store_true", help="succeed if it exists already")
    add_connection_flags(p)
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("describe", help="partitions, leaders, offsets and configs")
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("alter", help="change configs or add partitions")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set the topic's own value, repeatable (the keys of `topics create --config`)",
    )
    p.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove the topic's own value: the broker default applies again",
    )
    p.add_argument(
        "--partitions",
        type=positive_int,
        metavar="N",
        help="new partition count, more than the topic has (partitions can only be added)",
    )
    add_connection_flags(p)
    p.set_defaults(func=cmd_alter, parser=p)

    p = sub.add_parser("delete", help="delete topics and their data")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--if-exists", action="store_true", help="succeed for topics that do not exist")
    add_connection_flags(p)
    p.set_defaults(func=cmd_delete)


# ---------------------------------------------------------------------------------------------


def partition_counts(metadata: ClusterMetadata) -> dict[str, int]:
    return {name: len(t.partitions) for name, t in sorted(metadata.topics.items())}


def require_topics(metadata: ClusterMetadata, names: list[str]) -> None:
    missing = [n for n in names if n not in metadata.topics]
    if missing:
        raise CliError(
            f"no topic named {', '.join(missing)}",
            "`kafscale topics list` shows the topics that exist",
            code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )


def cmd_list(args: argparse.Namespace) -> int:
    counts = partition_counts(Kafka.from_args(args).metadata())
    if args.output == output.JSON:
        output.print_json([{"topic": t, "partitions": n} for t, n in counts.items()])
    else:
        output.print_table(["TOPIC", "PARTITIONS"], list(counts.items()))
    return EXIT_OK


def cmd_create(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewTopic

    if args.replication_factor == 0 or args.replication_factor < -1:
        raise CliError(
            f"--replication-factor {args.replication_factor} is not valid",
            "give -1 or a number >= 1 (KafScale keeps no replicas: leave it out)",
        )
    kafka = Kafka.from_args(args)
    kafka.metadata()  # a clear message when the brokers cannot be reached
    # -1: the brokers' defaults (KIP-464, CreateTopics v4+)
    partitions = -1 if args.partitions is None else args.partitions
    config = dict(args.config)
    topic = NewTopic(args.topic, partitions, args.replication_factor, config=config)
    future = kafka.admin.create_topics([topic], operation_timeout=kafka.timeout)[args.topic]
    try:
        kafka.result(future, "creating topic", args.topic)
    except CliError as err:
        if args.if_not_exists and err.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            output.note(f"topic {args.topic} exists already; nothing changed")
            return EXIT_OK
        raise
    if args.partitions is not None:
        print(f"created topic {args.topic} with {output.plural(args.partitions, 'partition')}")
        return EXIT_OK
    count = partition_counts(kafka.metadata()).get(args.topic)
    # A broker that has not caught up yet may not list it.
    how = (
        "the brokers' default partition count"
        if count is None
        else output.plural(count, "partition")
    )
    print(f"created topic {args.topic} with {how}")
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ConfigResource, ResourceType

    kafka = Kafka.from_args(args)
    metadata = kafka.metadata()
    names = list(dict.fromkeys(args.topics)) or sorted(metadata.topics)
    require_topics(metadata, names)
    if not names:
        if args.output == output.JSON:
            output.print_json([])
        else:
            output.note("the cluster has no topics")
        return EXIT_OK
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    futures = kafka.admin.describe_configs(resources, request_timeout=kafka.timeout)
    configs = {
        res.name: kafka.result(fut, "describing the configs of topic", res.name)
        for res, fut in futures.items()
    }
    ends = log_bounds(kafka, {n: sorted(metadata.topics[n].partitions) for n in names})
    described = [describe_one(metadata, n, configs[n], ends) for n in names]
    if args.output == output.JSON:
        output.print_json(described)
        return EXIT_OK
    for i, topic in enumerate(described):
        if i:
            print()
        print_topic(topic)
    return EXIT_OK


LogBounds = dict[tuple[str, int], tuple[int | None, int | None]]


# --- what ``describe`` shows (and prints as JSON) ---------------------------------------------


class PartitionView(TypedDict):
    partition: int
    leader: int | None
    leader_address: str | None
    start_offset: int | None
    end_offset: int | None
    error: str | None


class ConfigView(TypedDict):
    value: str | None
    source: str


class TopicView(TypedDict):
    topic: str
    partitions: list[PartitionView]
    configs: dict[str, ConfigView]


def log_bounds(kafka: Kafka, partitions: dict[str, list[int]]) -> LogBounds:
    """{(topic, partition): (log start offset, log end offset)} through ListOffsets; (None,
    None) for a partition whose leader cannot answer."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    tps = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
    found: dict[str, dict[tuple[str, int], int | None]] = {}
    for which, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):
        if not tps:
            break
        futures = kafka.admin.list_offsets({tp: spec for tp in tps}, request_timeout=kafka.timeout)
        found[which] = {}
        for tp, fut in futures.items():
            try:
                found[which][(tp.topic, tp.partition)] = kafka.result(
                    fut, f"looking up the {which} offset of", f"{tp.topic}/{tp.partition}"
                ).offset
            except CliError as err:  # shown as "-": the rest of the description still stands
                output.note(f"warning: {err}")
                found[which][(tp.topic, tp.partition)] = None
    return {
        (tp.topic, tp.partition): (
            found["start"][(tp.topic, tp.partition)],
            found["end"][(tp.topic, tp.partition)],
        )
        for tp in tps
    }


def describe_one(
    metadata: ClusterMetadata, name: str, configs: dict[str, ConfigEntry], ends: LogBounds
) -> TopicView:
    brokers = metadata.brokers
    partitions: list[PartitionView] = []
    for pid, part in sorted(metadata.topics[name].partitions.items()):
        leader = brokers.get(part.leader)
        start, end = ends[(name, pid)]
        partitions.append(
            {
                "partition": pid,
                "leader": part.leader if part.leader >= 0 else None,
                "leader_address": f"{leader.host}:{leader.port}" if leader else None,
                "start_offset": start,
                "end_offset": end,
                "error": part.error.str() if part.error else None,
            }
        )
    return {
        "topic": name,
        "partitions": partitions,
        "configs": {
            key: {"value": e.value, "source": source_name(e.source)}
            for key, e in sorted(configs.items())
        },
    }


def source_name(source: int) -> str:
    from confluent_kafka.admin import ConfigSource

    name: str = ConfigSource(source).name
    return SOURCES.get(name, name.lower())


def print_topic(topic: TopicView) -> None:
    overrides = [f"{k}={c['value']}" for k, c in topic["configs"].items() if c["source"] == "topic"]
    print(
        f"Topic: {topic['topic']}  Partitions: {len(topic['partitions'])}  "
        f"Overrides: {', '.join(overrides) or 'none'}"
    )
    output.print_table(
        ["PARTITION", "LEADER", "LEADER-ADDRESS", "START-OFFSET", "END-OFFSET"],
        [
            [p["partition"], p["leader"], p["leader_address"], p["start_offset"], p["end_offset"]]
            for p in topic["partitions"]
        ],
    )
    print()
    output.print_table(
        ["CONFIG", "VALUE", "SOURCE"],
        [[k, c["value"], c["source"]] for k, c in topic["configs"].items()],
    )


def cmd_alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourceType,
    )

    if not (args.config or args.delete_config or args.partitions):
        args.parser.error("say what to change: --config, --delete-config and/or --partitions")
    both = {k for k, _ in args.config} & set(args.delete_config)
    if both:
        args.parser.error(
            f"{', '.join(sorted(both))}: given to both --config and --delete-config; "
            "set it or delete it"
        )
    kafka = Kafka.from_args(args)
    metadata = kafka.metadata()
    require_topics(metadata, [args.topic])
    before = len(metadata.topics[args.topic].partitions)
    if args.partitions and args.partitions <= before:
        raise CliError(
            f"topic {args.topic} has {output.plural(before, 'partition')} already, and "
            "partitions can only be added (nothing was changed)",
            f"give --partitions more than {before}",
            code=ErrorCode.INVALID_PARTITIONS,
        )
    if args.config or args.delete_config:
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in args.config
        ] + [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k in args.delete_config
        ]
        resource = ConfigResource(ResourceType.TOPIC, args.topic, incremental_configs=entries)
        futures = kafka.admin.incremental_alter_configs([resource], request_timeout=kafka.timeout)
        kafka.result(next(iter(futures.values())), "changing the configs of topic", args.topic)
        for k, v in args.config:
            print(f"set {k}={v} on topic {args.topic}")
        for k in args.delete_config:
            print(f"removed {k} from topic {args.topic} (the broker default applies)")
    if args.partitions:
        future = kafka.admin.create_partitions(
            [NewPartitions(args.topic, args.partitions)], operation_timeout=kafka.timeout
        )[args.topic]
        kafka.result(future, "adding partitions to topic", args.topic)
        print(
            f"topic {args.topic} now has {output.plural(args.partitions, 'partition')} "
            f"(had {before})"
        )
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    kafka = Kafka.from_args(args)
    kafka.metadata()
    names = list(dict.fromkeys(args.topics))
    futures = kafka.admin.delete_topics(names, operation_timeout=kafka.timeout)
    failed = False
    for name, (_, err) in kafka.results(futures, "deleting topic").items():
        if err is None:
            print(f"deleted topic {name}")
        elif args.if_exists and err.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            output.note(f"topic {name} does not exist; nothing to delete")
        else:
            print_error(err)
            failed = True
    return EXIT_FAILED if failed else EXIT_OK
