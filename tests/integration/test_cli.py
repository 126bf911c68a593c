"""The ``kafscale`` command against real brokers: topics, groups and brokers subcommands.

Every call is a real process (``python -m kafscale.cli``) with its exit code, stdout and stderr;
what it claims is checked through another path: the raw Metadata / DescribeConfigs /
OffsetFetch wire clients of tests/support, or a confluent-kafka consumer. One broker (local
segments, embedded metadata store) for most tests; ``topics list`` and ``brokers list`` also on
a 3-broker cluster with etcd and moto.
"""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support import admin_wire as aw
from support.admin_env import partition_counts, raw_topic_configs
from support.cli_runner import Run, kafscale, ok, one_error_line
from support.clients import Msg, confluent_produce, unique
from support.cluster import create_topic
from support.group_env import HANG_GUARD, SingleNode
from support.groups import ConfluentMember, close_all, wait_records, wait_split
from support.load import wait_for
from support.procs import free_port


@pytest.fixture(scope="module")
def node(module_broker_factory):
    """One broker with auto-creation on (so a Metadata request naming a topic would create it)
    and no initial rebalance delay."""
    args = ["--group-initial-rebalance-delay-ms", "0", "--default-partitions", "3"]
    return SingleNode(module_broker_factory(args, name="cli"))


def bs(env) -> list[str]:
    return ["--bootstrap-server", env.bootstrap()]


# ---------------------------------------------------------------------------------------------
# usage and reachability


def test_help_and_usage_errors():
    """--help at every level exits 0; bad arguments exit 2 with argparse's message saying
    which argument is wrong."""
    ok("--help")
    for command in (
        ["topics"],
        ["topics", "create"],
        ["groups"],
        ["groups", "reset-offsets"],
        ["brokers", "list"],
        ["acls"],
        ["acls", "add"],
        ["acls", "remove"],
        ["segments"],
        ["segments", "verify"],
    ):
        assert "usage: kafscale" in ok(*command, "--help").out
    bad = {
        ("topics", "create", "t", "--partitions", "0"): "--partitions",
        ("topics", "create", "t", "--partitions", "1", "--config", "retention.ms"): "KEY=VALUE",
        ("topics", "alter", "t"): "--config",
        ("topics", "list", "--bootstrap-server", "localhost"): "HOST:PORT",
        ("groups", "reset-offsets", "g", "--topic", "t"): "--to-earliest",
        ("groups", "reset-offsets", "g", "--all-topics", "--to-datetime", "noon"): "ISO 8601",
        ("groups", "reset-offsets", "g", "--topic", "t:x", "--to-latest"): "partitions",
        ("frobnicate",): "invalid choice",
    }
    for args, says in bad.items():
        run = kafscale(*args)
        assert run.code == 2, f"{args}: exit {run.code}, {run.err}"
        assert says in run.err, f"{args}: {run.err}"


COMMANDS = {
    "topics": ["list", "create", "describe", "alter", "delete"],
    "groups": ["list", "describe", "delete", "reset-offsets"],
    "brokers": ["list"],
    "users": ["list", "set", "delete"],
    "acls": ["list", "add", "remove"],
    "quotas": ["list", "set", "delete"],
    "segments": ["ls", "dump", "verify"],
}


def listed_names(help_text: str, heading: str) -> list[str]:
    """The names of a help text's ``commands:`` or ``actions:`` section."""
    lines = help_text.split(f"\n{heading}:\n", 1)[1].splitlines()
    # "    NAME  summary"; wrapped summaries continue further indented
    return [line.split()[0] for line in lines[1:] if line[:4] == "    " and line[4:5] != " "]


def test_a_command_left_out_lists_the_commands():
    """`kafscale` alone, and a group without its action (`kafscale topics`), print the help
    with every command (action) and its one-line summary on stderr, then argparse's error
    line, and exit 2 like any missing argument; stdout stays empty."""
    run = kafscale()
    assert run.code == 2 and run.out == "", run
    assert run.err.startswith("usage: kafscale "), run.err
    assert listed_names(run.err, "commands") == list(COMMANDS), run.err
    assert "segments  list, dump and verify segment objects" in run.err, run.err
    assert run.err.strip().splitlines()[-1] == (
        "kafscale: error: the following arguments are required: COMMAND"
    )
    for group, actions in COMMANDS.items():
        run = kafscale(group)
        assert run.code == 2 and run.out == "", f"{group}: {run}"
        assert run.err.startswith(f"usage: kafscale {group} "), run.err
        assert listed_names(run.err, "actions") == actions, run.err
        assert run.err.strip().splitlines()[-1] == (
            f"kafscale {group}: error: the following arguments are required: ACTION"
        )
    # --help still goes to stdout with exit 0, and lists the same
    assert listed_names(ok("--help").out, "commands") == list(COMMANDS)
    assert listed_names(ok("topics", "--help").out, "actions") == COMMANDS["topics"]


def test_the_wheel_installs_the_kafscale_command():
    """`pip install` puts `kafscale` next to the interpreter (the package's console script)."""
    command = Path(sys.executable).with_name("kafscale")
    run = subprocess.run(
        [str(command), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("kafscale "), run.stdout


def test_unreachable_bootstrap_server_is_one_clear_line():
    """Nobody listening: every Kafka-side command fails at once with exit 1 and one line naming
    the address and what to check. A port that accepts but never answers: the same, within
    --timeout."""
    address = f"127.0.0.1:{free_port()}"
    for command in (
        ["topics", "list"],
        ["topics", "create", "x", "--partitions", "1"],
        ["groups", "list"],
        ["groups", "describe", "g"],
        ["brokers", "list"],
    ):
        run = kafscale(*command, "--bootstrap-server", address)
        assert run.code == 1, f"{command}: {run}"
        line = one_error_line(run)
        assert f"cannot reach the Kafka bootstrap server {address}" in line, line
        assert "Connection refused" in line and "check --bootstrap-server" in line, line
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes handshakes; nothing ever answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        run = kafscale("topics", "list", "--bootstrap-server", address, "--timeout", "2")
    assert run.code == 1, run
    assert f"cannot reach the Kafka bootstrap server {address}" in one_error_line(run), run.err


# ---------------------------------------------------------------------------------------------
# topics


def test_topic_lifecycle(node):
    """create (configs) -> list -> describe (leader, offsets, config sources) -> alter (set and
    delete configs, more partitions) -> delete; each step checked on the wire."""
    topic = unique("cli-topic")
    run = ok(
        "topics",
        "create",
        topic,
        "--partitions",
        "2",
        "--config",
        "retention.ms=3600000",
        "--config",
        "max.message.bytes=2000000",
        *bs(node),
    )
    assert run.out.strip() == f"created topic {topic} with 2 partitions"
    assert partition_counts(node, topic) == {"cli": 2}
    (configs,) = raw_topic_configs(node, topic).values()
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "3600000",
        aw.SOURCE_DYNAMIC_TOPIC,
    )

    assert {"topic": topic, "partitions": 2} in ok("topics", "list", "-o", "json", *bs(node)).json()
    rows = [line.split() for line in ok("topics", "list", *bs(node)).out.splitlines()]
    assert rows[0] == ["TOPIC", "PARTITIONS"] and [topic, "2"] in rows

    confluent_produce(node.bootstrap(), topic, [Msg(p, None, b"v") for p in (0, 1, 1)])
    (described,) = ok("topics", "describe", topic, "-o", "json", *bs(node)).json()
    assert described["topic"] == topic
    assert [
        (p["partition"], p["leader"], p["leader_address"], p["start_offset"], p["end_offset"])
        for p in described["partitions"]
    ] == [(0, 0, node.bootstrap(), 0, 1), (1, 0, node.bootstrap(), 0, 2)]
    cfg = described["configs"]
    assert cfg["retention.ms"] == {"value": "3600000", "source": "topic"}
    assert cfg["max.message.bytes"] == {"value": "2000000", "source": "topic"}
    assert cfg["segment.bytes"]["source"] != "topic", cfg
    text = ok("topics", "describe", topic, *bs(node)).out
    assert f"Topic: {topic}  Partitions: 2  Overrides: max.message.bytes=2000000, " in text
    assert "START-OFFSET  END-OFFSET" in text, text

    run = ok(
        "topics",
        "alter",
        topic,
        "--config",
        "retention.bytes=1048576",
        "--delete-config",
        "retention.ms",
        "--partitions",
        "4",
        *bs(node),
    )
    assert f"topic {topic} now has 4 partitions (had 2)" in run.out
    assert partition_counts(node, topic) == {"cli": 4}
    (configs,) = raw_topic_configs(node, topic).values()
    assert configs["retention.bytes"].value == "1048576"
    assert configs["retention.bytes"].source == aw.SOURCE_DYNAMIC_TOPIC
    assert configs["retention.ms"].source != aw.SOURCE_DYNAMIC_TOPIC, configs["retention.ms"]

    assert ok("topics", "delete", topic, *bs(node)).out.strip() == f"deleted topic {topic}"
    wait_for(lambda: partition_counts(node, topic) == {"cli": None}, HANG_GUARD, f"{topic} gone")
    assert topic not in {t["topic"] for t in ok("topics", "list", "-o", "json", *bs(node)).json()}


def test_create_without_partitions_takes_the_brokers_default(node):
    """`topics create NAME` sends -1 partitions and replication factor (KIP-464): the topic gets
    the broker's --default-partitions (3 here), with its configs; a replication factor is still
    accepted."""
    topic = unique("cli-default")
    run = ok("topics", "create", topic, "--config", "cleanup.policy=delete", *bs(node))
    assert run.out.strip() == f"created topic {topic} with 3 partitions"
    assert partition_counts(node, topic) == {"cli": 3}
    (configs,) = raw_topic_configs(node, topic).values()
    assert configs["cleanup.policy"].source == aw.SOURCE_DYNAMIC_TOPIC, configs
    other = unique("cli-default-rf")
    ok("topics", "create", other, "--replication-factor", "1", *bs(node))
    assert partition_counts(node, other) == {"cli": 3}


def test_topic_errors_say_what_to_do(node):
    topic = unique("cli-err")
    ok("topics", "create", topic, "--partitions", "3", *bs(node))
    cases = [
        (["create", topic, "--partitions", "3"], ["already exists", "--if-not-exists"]),
        (
            [
                "create",
                unique("cli-bad"),
                "--partitions",
                "1",
                "--config",
                "cleanup.policy=shred",
            ],
            ["cleanup.policy", "check the --config"],
        ),
        (["create", "bad/name", "--partitions", "1"], ["bad/name", "1-249"]),
        (["describe", "cli-missing"], ["no topic named cli-missing", "kafscale topics list"]),
        (["alter", topic, "--partitions", "2"], ["partitions can only be added"]),
        (["alter", "cli-missing", "--config", "retention.ms=1"], ["no topic named cli-missing"]),
        (["alter", topic, "--config", "retention.ms=soon"], ["retention.ms", "soon"]),
        (["delete", "cli-missing"], ["cli-missing", "kafscale topics list"]),
    ]
    for args, says in cases:
        run = kafscale("topics", *args, *bs(node))
        assert run.code == 1, f"{args}: exit {run.code}: {run.err}"
        line = one_error_line(run)
        assert all(s in line for s in says), f"{args}: {line}"
    # describing a missing topic must not have auto-created it
    assert partition_counts(node, "cli-missing") == {"cli": None}
    assert partition_counts(node, topic) == {"cli": 3}
    ok("topics", "create", topic, "--partitions", "3", "--if-not-exists", *bs(node))
    ok("topics", "delete", "cli-missing", "--if-exists", *bs(node))


def test_counts_are_singular_for_one_and_hints_are_said_once(node):
    """ "1 partition", "2 partitions" in every message that counts; the advice of an error is
    said once, also when the broker's own message gives it (KafScale's do)."""
    topic = unique("cli-one")
    run = ok("topics", "create", topic, "--partitions", "1", *bs(node))
    assert run.out.strip() == f"created topic {topic} with 1 partition"
    run = kafscale("topics", "alter", topic, "--partitions", "1", *bs(node))
    assert run.code == 1, run
    line = one_error_line(run)
    assert f"topic {topic} has 1 partition already" in line, line
    assert line.count("partitions can only be added") == 1, line
    assert line.endswith("give --partitions more than 1"), line
    run = ok("topics", "alter", topic, "--partitions", "2", *bs(node))
    assert run.out.strip() == f"topic {topic} now has 2 partitions (had 1)"
    run = kafscale("topics", "alter", topic, "--partitions", "2", *bs(node))
    assert "has 2 partitions already" in one_error_line(run), run.err

    # the node runs without an authorizer: the broker's message says what to do, once
    run = kafscale("acls", "list", *bs(node))
    assert run.code == 1, run
    line = one_error_line(run)
    assert line.count("--authorizer acl") == 1, line

    group = unique("cli-one-g")
    run = ok(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        f"{topic}:0",
        "--to-earliest",
        "--execute",
        *bs(node),
    )
    assert f"committed the new offsets of group {group} on 1 partition\n" in run.err, run.err
    run = kafscale(
        "groups", "reset-offsets", group, "--topic", f"{topic}:5", "--to-earliest", *bs(node)
    )
    line = one_error_line(run)
    assert f"topic {topic} has no partition 5 (it has partitions 0 to 1)" in line, line
    assert ".." not in line, line


# ---------------------------------------------------------------------------------------------
# groups


def committed(node, group: str, topic: str) -> dict[int, int]:
    return {p: o.offset for p, o in node.offsets(group, topic, range(2)).items()}


def test_group_with_a_live_member(node):
    """list and describe a group with one confluent-kafka member and committed offsets (Kafka's
    kafka-consumer-groups --describe shape); reset-offsets --execute and delete are refused
    while it has members, and a dry run changes nothing."""
    from confluent_kafka import TopicPartition

    topic = unique("cli-gt")
    create_topic(node.bootstrap(), topic, 2)
    confluent_produce(
        node.bootstrap(), topic, [Msg(p, None, b"x") for p in (0, 1) for _ in range(10)]
    )
    group = unique("cli-g")
    member = ConfluentMember(f"cli-member-{group[-4:]}", node.bootstrap(), group, topic)
    try:
        member.start()
        wait_split([member], 2, [2])
        wait_records([member], 20)
        offsets = [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)]
        member.call(lambda c: c.commit(offsets=offsets, asynchronous=False))
        member_id = member.call(lambda c: c.memberid())

        listed = ok("groups", "list", "-o", "json", *bs(node)).json()
        assert {"group": group, "state": "Stable", "type": "classic"} in listed
        empty_only = ok("groups", "list", "--state", "Empty", "-o", "json", *bs(node)).json()
        assert group not in {g["group"] for g in empty_only}

        (view,) = ok("groups", "describe", group, "-o", "json", *bs(node)).json()
        assert (view["group"], view["state"], view["assignor"]) == (group, "Stable", "range")
        (m,) = view["members"]
        assert (m["member_id"], m["client_id"], m["host"].lstrip("/")) == (
            member_id,
            member.name,
            "127.0.0.1",
        )
        assert m["assignment"] == [{"topic": topic, "partition": p} for p in (0, 1)]
        assert [
            (o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"], o["member_id"])
            for o in view["offsets"]
        ] == [(0, 4, 10, 6, member_id), (1, 7, 10, 3, member_id)]
        text = ok("groups", "describe", group, *bs(node)).out
        assert "CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID" in text, text
        assert [topic, "0", "4", "10", "6", member_id] == next(
            line.split()[:6] for line in text.splitlines() if line.startswith(f"{topic}  0 ")
        )

        reset = ["groups", "reset-offsets", group, "--topic", topic, "--to-earliest", *bs(node)]
        run = kafscale(*reset, "--execute")
        assert run.code == 1, run
        assert "active member" in one_error_line(run) and "stop its consumers" in run.err
        run = ok(*reset)  # dry run: the plan, a warning, nothing changed
        assert "--execute would be refused" in run.err and "dry run" in run.err
        assert committed(node, group, topic) == {0: 4, 1: 7}

        run = kafscale("groups", "delete", group, *bs(node))
        assert run.code == 1 and "stop the group's consumers" in one_error_line(run), run
    finally:
        close_all([member])
    wait_for(
        lambda: ok("groups", "describe", group, "-o", "json", *bs(node)).json()[0]["state"]
        == "Empty",
        HANG_GUARD,
        f"{group} Empty after its member left",
    )
    assert ok("groups", "delete", group, *bs(node)).out.strip() == f"deleted group {group}"
    run = kafscale("groups", "describe", group, *bs(node))
    assert run.code == 1 and f"no group named {group}" in one_error_line(run)
    run = kafscale("groups", "delete", group, *bs(node))
    assert run.code == 1 and "kafscale groups list" in one_error_line(run)


def iso(ms: int, zone: str = "Z") -> str:
    text = dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", zone)


def test_reset_offsets(node):
    """Every strategy with --execute on a group without members (the first one creates its
    offsets), checked through OffsetFetch: earliest, offset (clamped at the end, with a
    note), shift-by (both ways), datetime (Z and +hh:mm; later than every record = the end),
    latest; --all-topics takes the committed partitions; a single partition via TOPIC:P."""
    topic = unique("cli-rt")
    create_topic(node.bootstrap(), topic, 2)
    base = 1_700_000_000_000
    msgs = [Msg(p, None, b"r%d" % i, timestamp=base + i * 1000) for p in (0, 1) for i in range(10)]
    confluent_produce(node.bootstrap(), topic, msgs)
    group = unique("cli-rg")

    def reset(*how: str) -> Run:
        return ok("groups", "reset-offsets", group, *how, "--execute", *bs(node))

    reset("--topic", topic, "--to-offset", "3")
    assert committed(node, group, topic) == {0: 3, 1: 3}
    run = reset("--topic", f"{topic}:1", "--to-offset", "25")
    assert "offset 25 is outside the log [0, 10]" in run.err and committed(node, group, topic) == {
        0: 3,
        1: 10,
    }
    reset("--all-topics", "--shift-by", "-2")
    assert committed(node, group, topic) == {0: 1, 1: 8}
    reset("--topic", topic, "--shift-by", "1")
    assert committed(node, group, topic) == {0: 2, 1: 9}
    reset("--topic", topic, "--to-datetime", iso(base + 5000))
    assert committed(node, group, topic) == {0: 5, 1: 5}
    stamp = dt.datetime.fromtimestamp((base + 7500) / 1000, dt.timezone(dt.timedelta(hours=2)))
    reset("--topic", topic, "--to-datetime", stamp.isoformat())
    assert committed(node, group, topic) == {0: 8, 1: 8}
    reset("--topic", topic, "--to-earliest")
    assert committed(node, group, topic) == {0: 0, 1: 0}
    reset("--topic", topic, "--to-datetime", iso(base + 3_600_000))
    assert committed(node, group, topic) == {0: 10, 1: 10}

    run = ok(
        "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "-o", "json", *bs(node)
    )
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in run.json()] == [
        (0, 10, 0),
        (1, 10, 0),
    ]
    assert "add --execute" in run.err and committed(node, group, topic) == {0: 10, 1: 10}

    fresh = unique("cli-fresh")
    run = kafscale("groups", "reset-offsets", fresh, "--topic", topic, "--shift-by", "1", *bs(node))
    assert run.code == 1 and "no committed offset to shift from" in one_error_line(run)
    run = kafscale(
        "groups", "reset-offsets", group, "--topic", "cli-missing", "--to-latest", *bs(node)
    )
    assert run.code == 1 and "no topic named cli-missing" in one_error_line(run)
    run = kafscale(
        "groups", "reset-offsets", group, "--topic", f"{topic}:7", "--to-latest", *bs(node)
    )
    assert run.code == 1 and "has no partition 7" in one_error_line(run)


# ---------------------------------------------------------------------------------------------
# a 3-broker cluster


def test_cluster_topics_and_brokers(cluster):
    """brokers list names every broker with its address and exactly the partitions it leads
    (as Metadata from the brokers themselves says); topics list through one broker shows
    topics created through another."""
    c = cluster(3)
    first, second = c.live[0].bootstrap, c.live[1].bootstrap
    topic = unique("cli-cluster")
    ok("topics", "create", topic, "--partitions", "6", "--bootstrap-server", first)
    leaders = c.wait_converged([topic], {topic: 6}, until=c.claimed)[topic]
    listed = ok("topics", "list", "-o", "json", "--bootstrap-server", second).json()
    assert {"topic": topic, "partitions": 6} in listed

    brokers = ok("brokers", "list", "-o", "json", "--bootstrap-server", c.bootstrap()).json()
    assert {b["id"]: b["address"] for b in brokers} == {
        bid: b.bootstrap for bid, b in c.brokers.items()
    }
    for b in brokers:
        mine = sorted(p for p, lead in leaders.items() if lead.broker_id == b["id"])
        assert b["partitions"].get(topic, []) == mine, f"broker {b['id']}: {b}"
    assert sum(len(b["partitions"].get(topic, [])) for b in brokers) == 6
    rows = ok("brokers", "list", "--bootstrap-server", second).out.splitlines()
    assert rows[0].split() == ["ID", "ADDRESS", "LEADS", "PARTITIONS"] and len(rows) == 4
