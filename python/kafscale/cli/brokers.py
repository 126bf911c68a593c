"""``kafscale brokers list``: the live brokers and the partitions each one leads.

Built from one Metadata response (KafScale does not serve DescribeCluster): its broker list is
the set of live brokers, and each partition's leader is the broker that owns it.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from . import output
from .errors import EXIT_OK
from .kafka import Kafka, add_connection_flags

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata

    from .args import Subcommands


def register(commands: Subcommands) -> None:
    brokers = commands.add_parser("brokers", help="the brokers of the cluster")
    sub = brokers.add_subparsers(dest="action", metavar="ACTION", title="actions")
    p = sub.add_parser("list", help="broker ids, addresses and the partitions each leads")
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)


def led_partitions(metadata: ClusterMetadata) -> dict[int, dict[str, list[int]]]:
    """{broker id: {topic: [partitions it leads]}}."""
    led: dict[int, dict[str, list[int]]] = {b: {} for b in metadata.brokers}
    for name, topic in sorted(metadata.topics.items()):
        for pid, part in sorted(topic.partitions.items()):
            if part.leader in led:
                led[part.leader].setdefault(name, []).append(pid)
    return led


def compact(by_topic: dict[str, list[int]]) -> str:
    """{"orders": [0, 2]} -> "orders[0,2]"."""
    return " ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in by_topic.items()) or "-"


def cmd_list(args: argparse.Namespace) -> int:
    metadata = Kafka.from_args(args).metadata()
    led = led_partitions(metadata)
    brokers = [
        {
            "id": bid,
            "address": f"{b.host}:{b.port}",
            "leads": sum(len(ps) for ps in led[bid].values()),
            "partitions": led[bid],
        }
        for bid, b in sorted(metadata.brokers.items())
    ]
    if args.output == output.JSON:
        output.print_json(brokers)
        return EXIT_OK
    output.print_table(
        ["ID", "ADDRESS", "LEADS", "PARTITIONS"],
        [[b["id"], b["address"], b["leads"], compact(b["partitions"])] for b in brokers],
    )
    return EXIT_OK
