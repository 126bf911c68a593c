"""``kafscale groups list|describe|delete|reset-offsets``: consumer groups through the Kafka
admin APIs (ListGroups, DescribeGroups, OffsetFetch, ListOffsets, DeleteGroups, OffsetCommit).

``describe`` has the shape of Kafka's ``kafka-consumer-groups --describe``: per partition the
committed offset, the log-end offset and the lag, with the member that owns the partition;
then the members with their client ids, hosts and assignments.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypedDict

from kafscale.errors import ErrorCode

from . import output, reset
from .args import plain
from .errors import EXIT_FAILED, EXIT_OK, CliError, print_error
from .group_queries import STATES, committed_offsets, describe_group, end_offsets, state_name
from .kafka import Kafka, add_connection_flags

if TYPE_CHECKING:
    from confluent_kafka.admin import MemberDescription

    from .args import Subcommands


# --- what ``describe`` shows (and prints as JSON) ---------------------------------------------


class PartitionView(TypedDict):
    topic: str
    partition: int


class MemberView(TypedDict):
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: list[PartitionView]


class OffsetView(TypedDict):
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None
    host: str | None
    client_id: str | None


class CoordinatorView(TypedDict):
    id: int
    address: str


class GroupView(TypedDict):
    group: str
    state: str
    type: str | None
    assignor: str | None
    coordinator: CoordinatorView | None
    members: list[MemberView]
    offsets: list[OffsetView]


def register(commands: Subcommands) -> None:
    groups = commands.add_parser(
        "groups",
        help="list, describe and delete consumer groups; reset offsets",
        description=plain(__doc__),
    )
    sub = groups.add_subparsers(dest="action", metavar="ACTION", title="actions")

    p = sub.add_parser("list", help="group ids, states and types")
    p.add_argument(
        "--state",
        action="append",
        choices=[s for s in STATES.values() if s != "Unknown"],
        help="only groups in this state (repeatable)",
    )
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help="members, committed offsets, log-end offsets and lag")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("delete", help="delete groups and their committed offsets")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_flags(p)
    p.set_defaults(func=cmd_delete)

    reset.register(sub)


def cmd_list(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupState

    kafka = Kafka.from_args(args)
    kafka.metadata()
    kwargs: dict[str, object] = {"request_timeout": kafka.timeout}
    if args.state:
        by_name = {v: k for k, v in STATES.items()}
        kwargs["states"] = {ConsumerGroupState[by_name[s]] for s in args.state}
    listed = kafka.result(kafka.admin.list_consumer_groups(**kwargs), "listing groups")
    groups = sorted(
        (
            {
                "group": g.group_id,
                "state": state_name(g.state),
                "type": g.type.name.lower() if g.type is not None else None,
            }
            for g in listed.valid
        ),
        key=lambda g: g["group"],
    )
    if args.output == output.JSON:
        output.print_json(groups)
    else:
        output.print_table(
            ["GROUP", "STATE", "TYPE"], [[g["group"], g["state"], g["type"]] for g in groups]
        )
    for err in listed.errors:  # a broker that did not answer: the list may be incomplete
        print_error(kafka.failure(err, "listing the groups of one broker"))
    return EXIT_FAILED if listed.errors else EXIT_OK


# ---------------------------------------------------------------------------------------------
# describe


def group_view(kafka: Kafka, group: str) -> GroupView:
    desc = describe_group(kafka, group)
    committed = committed_offsets(kafka, group)
    owner: dict[tuple[str, int], MemberDescription] = {}
    members: list[MemberView] = []
    for m in desc.members:
        assigned = sorted(
            (tp.topic, tp.partition)
            for tp in (m.assignment.topic_partitions if m.assignment else [])
        )
        for tp in assigned:
            owner[tp] = m
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "instance_id": m.group_instance_id,
                "assignment": [{"topic": t, "partition": p} for t, p in assigned],
            }
        )
    state = state_name(desc.state)
    if state == "Dead" and not members and not committed:
        raise CliError(
            f"no group named {group} (no members, no committed offsets)",
            "`kafscale groups list` shows the groups that exist",
            code=ErrorCode.GROUP_ID_NOT_FOUND,
        )
    tps = sorted(set(committed) | set(owner))
    ends = end_offsets(kafka, tps)
    offsets: list[OffsetView] = []
    for tp in tps:
        current, end, m = committed.get(tp), ends.get(tp), owner.get(tp)
        offsets.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed_offset": current,
                "log_end_offset": end,
                "lag": end - current if current is not None and end is not None else None,
                "member_id": m.member_id if m else None,
                "host": m.host if m else None,
                "client_id": m.client_id if m else None,
            }
        )
    coordinator = desc.coordinator
    return {
        "group": group,
        "state": state,
        "type": desc.type.name.lower() if getattr(desc, "type", None) is not None else None,
        "assignor": desc.partition_assignor or None,
        "coordinator": (
            {"id": coordinator.id, "address": f"{coordinator.host}:{coordinator.port}"}
            if coordinator is not None
            else None
        ),
        "members": members,
        "offsets": offsets,
    }


def print_group(view: GroupView) -> None:
    coordinator = view["coordinator"]
    where = f"{coordinator['id']} ({coordinator['address']})" if coordinator else "-"
    print(
        f"Group: {view['group']}  State: {view['state']}  Assignor: {view['assignor'] or '-'}  "
        f"Coordinator: {where}  Members: {len(view['members'])}"
    )
    print()
    output.print_table(
        [
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        [
            [
                o["topic"],
                o["partition"],
                o["committed_offset"],
                o["log_end_offset"],
                o["lag"],
                o["member_id"],
                o["host"],
                o["client_id"],
            ]
            for o in view["offsets"]
        ],
    )
    if view["members"]:
        print()
        output.print_table(
            ["MEMBER-ID", "CLIENT-ID", "HOST", "INSTANCE-ID", "ASSIGNMENT"],
            [
                [
                    m["member_id"],
                    m["client_id"],
                    m["host"],
                    m["instance_id"],
                    assignment_text(m["assignment"]),
                ]
                for m in view["members"]
            ],
        )


def assignment_text(assignment: list[PartitionView]) -> str:
    by_topic: dict[str, list[int]] = {}
    for a in assignment:
        by_topic.setdefault(a["topic"], []).append(a["partition"])
    return " ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in by_topic.items()) or "-"


def cmd_describe(args: argparse.Namespace) -> int:
    kafka = Kafka.from_args(args)
    kafka.metadata()
    views, failed = [], False
    for group in dict.fromkeys(args.groups):
        try:
            views.append(group_view(kafka, group))
        except CliError as err:
            if len(args.groups) == 1:
                raise
            print_error(err)
            failed = True
    if args.output == output.JSON:
        output.print_json(views)
    else:
        for i, view in enumerate(views):
            if i:
                print()
            print_group(view)
    return EXIT_FAILED if failed else EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    kafka = Kafka.from_args(args)
    kafka.metadata()
    names = list(dict.fromkeys(args.groups))
    futures = kafka.admin.delete_consumer_groups(names, request_timeout=kafka.timeout)
    failed = False
    for name, (_, err) in kafka.results(futures, "deleting group").items():
        if err is None:
            print(f"deleted group {name}")
        else:
            print_error(err)
            failed = True
    return EXIT_FAILED if failed else EXIT_OK
