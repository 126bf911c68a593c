"""Kafka's own command-line tools (kafka-tools 4.4, pinned in tests/jvm/pom.xml) against a
broker, run as a Kafka distribution's scripts run them (``kafka-topics.sh`` is
``org.apache.kafka.tools.TopicCommand``, and so on), with nothing set but the bootstrap server."""

from __future__ import annotations

import re
import subprocess

import pytest
from support import jvm

TOOLS = "org.apache.kafka.tools."
TOPICS = TOOLS + "TopicCommand"
CONFIGS = TOOLS + "ConfigCommand"
ACLS = TOOLS + "AclCommand"
GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"
CONSOLE_PRODUCER = TOOLS + "ConsoleProducer"
CONSOLE_CONSUMER = TOOLS + "consumer.ConsoleConsumer"
PRODUCER_PERF = TOOLS + "ProducerPerformance"
CONSUMER_PERF = TOOLS + "ConsumerPerformance"


@pytest.fixture(scope="module")
def tbroker(module_broker_factory):
    return module_broker_factory()


def tool(main_class: str, *args: str, stdin: str | None = None) -> str:
    """The tool's standard output; a non-zero exit fails the test with its output."""
    proc: subprocess.CompletedProcess[str] = jvm.java(main_class, list(args), stdin, timeout=180)
    assert proc.returncode == 0, (
        f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def partition_count(bootstrap: str, topic: str) -> int:
    out = tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    found = re.search(r"PartitionCount:\s*(\d+)", out)
    assert found, out
    return int(found.group(1))


def topics(bootstrap: str) -> set[str]:
    return set(tool(TOPICS, "--bootstrap-server", bootstrap, "--list").split())


def test_kafka_topics_creates_lists_describes_alters_and_deletes(tbroker):
    b = tbroker.bootstrap
    tool(
        TOPICS, "--bootstrap-server", b, "--create", "--topic", "tools-topics", "--partitions", "3"
    )
    assert "tools-topics" in topics(b)
    assert partition_count(b, "tools-topics") == 3
    tool(TOPICS, "--bootstrap-server", b, "--alter", "--topic", "tools-topics", "--partitions", "5")
    assert partition_count(b, "tools-topics") == 5
    tool(TOPICS, "--bootstrap-server", b, "--delete", "--topic", "tools-topics")
    assert "tools-topics" not in topics(b)


def test_kafka_configs_alters_and_describes_a_topic_config(tbroker):
    b = tbroker.bootstrap
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "tools-configs")
    entity = ["--entity-type", "topics", "--entity-name", "tools-configs"]
    tool(
        CONFIGS, "--bootstrap-server", b, *entity, "--alter", "--add-config", "retention.ms=1234567"
    )
    out = tool(CONFIGS, "--bootstrap-server", b, *entity, "--describe")
    assert "retention.ms=1234567" in out, out
    tool(CONFIGS, "--bootstrap-server", b, *entity, "--alter", "--delete-config", "retention.ms")
    out = tool(CONFIGS, "--bootstrap-server", b, *entity, "--describe")
    assert "retention.ms=1234567" not in out, out


def test_console_clients_and_consumer_group_offsets_and_resets(tbroker):
    b = tbroker.bootstrap
    topic, group = "tools-console", "tools-group"
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2")
    lines = [f"key-{i}:value-{i}" for i in range(50)]
    tool(
        CONSOLE_PRODUCER,
        *("--bootstrap-server", b, "--topic", topic),
        *("--reader-property", "parse.key=true", "--reader-property", "key.separator=:"),
        stdin="\n".join(lines) + "\n",
    )
    consume = [
        *("--bootstrap-server", b, "--topic", topic, "--group", group),
        *("--from-beginning", "--max-messages", "50"),
        *("--formatter-property", "print.key=true", "--formatter-property", "key.separator=:"),
    ]
    assert sorted(tool(CONSOLE_CONSUMER, *consume).split()) == sorted(lines)

    assert group in tool(GROUPS, "--bootstrap-server", b, "--list").split()
    offsets = committed(b, group)
    assert set(offsets) == {0, 1} and sum(offsets.values()) == 50, offsets

    tool(
        GROUPS,
        *("--bootstrap-server", b, "--group", group, "--topic", topic),
        *("--reset-offsets", "--to-earliest", "--execute"),
    )
    assert committed(b, group) == {0: 0, 1: 0}
    again = tool(CONSOLE_CONSUMER, *consume)
    assert sorted(again.split()) == sorted(lines)

    tool(GROUPS, "--bootstrap-server", b, "--delete", "--group", group)
    assert group not in tool(GROUPS, "--bootstrap-server", b, "--list").split()


def committed(bootstrap: str, group: str) -> dict[int, int]:
    """Partition → committed offset, from ``kafka-consumer-groups --describe``."""
    out = tool(GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group)
    rows = [line.split() for line in out.splitlines()]
    header = next(r for r in rows if "CURRENT-OFFSET" in r)
    at = {name: i for i, name in enumerate(header)}
    return {
        int(r[at["PARTITION"]]): int(r[at["CURRENT-OFFSET"]])
        for r in rows
        if len(r) == len(header) and r is not header and r[at["PARTITION"]].isdigit()
    }


def test_producer_and_consumer_perf_tests_run_to_the_end(tbroker):
    b = tbroker.bootstrap
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "tools-perf", "--partitions", "3")
    out = tool(
        PRODUCER_PERF,
        *("--topic", "tools-perf", "--num-records", "20000", "--record-size", "100"),
        *("--throughput", "-1", "--producer-props", f"bootstrap.servers={b}"),
    )
    assert re.search(r"^20000 records sent", out, re.MULTILINE), out
    out = tool(
        CONSUMER_PERF, "--bootstrap-server", b, "--topic", "tools-perf", "--messages", "20000"
    )
    # A header line of comma-separated names, then one line of figures.
    lines = [line.split(", ") for line in out.strip().splitlines()]
    header = next(i for i, names in enumerate(lines) if "data.consumed.in.nMsg" in names)
    figures = dict(zip(lines[header], lines[header + 1], strict=False))
    assert int(figures["data.consumed.in.nMsg"]) == 20000, out


def test_kafka_acls_adds_lists_and_removes_acls(broker_factory):
    # ACLs enforced; the tool connects over PLAINTEXT as User:ANONYMOUS, made a super user.
    b = broker_factory(["--authorizer", "acl", "--super-users", "User:ANONYMOUS"]).bootstrap
    rule = ["--allow-principal", "User:alice", "--operation", "Read", "--topic", "tools-acls"]
    tool(ACLS, "--bootstrap-server", b, "--add", *rule)
    listed = tool(ACLS, "--bootstrap-server", b, "--list", "--topic", "tools-acls")
    assert re.search(r"principal=User:alice.*operation=READ.*permissionType=ALLOW", listed), listed
    tool(ACLS, "--bootstrap-server", b, "--remove", "--force", *rule)
    listed = tool(ACLS, "--bootstrap-server", b, "--list", "--topic", "tools-acls")
    assert "User:alice" not in listed, listed
