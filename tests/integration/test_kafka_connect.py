"""Kafka Connect (4.3, from tests/jvm/connect's Maven module) against a broker: a standalone
worker with the file connectors, configured as Kafka's example ``connect-standalone.properties``
is (JSON converters with schemas, offsets in a file), copies a file through a topic into another
file, and after a restart copies only the lines added since.

A distributed worker keeps connector configs, source offsets and statuses in compacted topics
it creates (``cleanup.policy=compact``): connectors created through its REST API copy a file,
and after a restart the worker finds its connectors and offsets in those topics again.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support import jvm
from support.procs import free_port

STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"
DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
WAIT_S = 120.0  # liveness guard: the worker's start and the copy


@pytest.fixture(scope="module")
def cbroker(module_broker_factory):
    return module_broker_factory()


def properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def copy_until(worker: list[str], output: Path, expected: list[str]) -> None:
    """Runs the standalone worker until ``output`` holds ``expected``, then stops it as an
    operator would (SIGTERM: it commits its offsets and exits)."""
    with jvm.stopped_after(jvm.CONNECT.command(STANDALONE, worker), WAIT_S) as alive:
        while lines(output) != expected:
            alive(f"output {lines(output)}")
            time.sleep(0.2)


def test_standalone_file_connectors_copy_a_file_and_resume_after_a_restart(cbroker, tmp_path):
    source, sink = tmp_path / "input.txt", tmp_path / "output.txt"
    worker = properties(
        tmp_path / "worker.properties",
        {
            "bootstrap.servers": cbroker.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(tmp_path / "connect.offsets"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{free_port()}",
        },
    )
    connectors = [
        properties(
            tmp_path / "source.properties",
            {
                "name": "file-source",
                "connector.class": "FileStreamSource",
                "tasks.max": "1",
                "file": str(source),
                "topic": "connect-test",
            },
        ),
        properties(
            tmp_path / "sink.properties",
            {
                "name": "file-sink",
                "connector.class": "FileStreamSink",
                "tasks.max": "1",
                "file": str(sink),
                "topics": "connect-test",
            },
        ),
    ]
    args = [str(worker), *map(str, connectors)]
    first = [f"line {i} of the first run" for i in range(100)]
    source.write_text("".join(f"{line}\n" for line in first))
    copy_until(args, sink, first)

    second = [f"line {i} of the second run" for i in range(50)]
    with source.open("a") as f:
        f.write("".join(f"{line}\n" for line in second))
    copy_until(args, sink, first + second)


def rest(port: int, method: str, path: str, body: dict | None = None) -> object:
    """A call of the worker's REST API; its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def distributed_until(worker: Path, port: int, output: Path, expected: list[str], connectors):
    """Runs a distributed worker, creates ``connectors`` (name, config) through its REST API
    if given, and stops it (SIGTERM) once ``output`` holds ``expected``."""
    with jvm.stopped_after(jvm.CONNECT.command(DISTRIBUTED, [str(worker)]), WAIT_S) as alive:
        while True:
            alive("the REST API never answered")
            try:
                rest(port, "GET", "/connectors")
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        for name, config in connectors:
            rest(port, "POST", "/connectors", {"name": name, "config": config})
        while lines(output) != expected:
            alive(f"output {lines(output)}")
            time.sleep(0.2)
        names = rest(port, "GET", "/connectors")
        assert sorted(names) == ["file-sink", "file-source"], names  # type: ignore[arg-type]


def test_a_distributed_worker_keeps_its_connectors_and_offsets_in_compacted_topics(
    cbroker, tmp_path
):
    """The connectors and the source's offsets survive a restart of the worker: its second
    run reads them back from its compacted config and offset topics, and copies only the
    lines added since."""
    source, sink = tmp_path / "input.txt", tmp_path / "output.txt"
    port = free_port()
    worker = properties(
        tmp_path / "distributed.properties",
        {
            "bootstrap.servers": cbroker.bootstrap,
            "group.id": "connect-cluster",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "config.storage.topic": "connect-configs",
            "offset.storage.topic": "connect-offsets",
            "status.storage.topic": "connect-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{port}",
        },
    )
    connectors = [
        (
            "file-source",
            {
                "connector.class": "FileStreamSource",
                "tasks.max": "1",
                "file": str(source),
                "topic": "connect-distributed",
            },
        ),
        (
            "file-sink",
            {
                "connector.class": "FileStreamSink",
                "tasks.max": "1",
                "file": str(sink),
                "topics": "connect-distributed",
            },
        ),
    ]
    first = [f"line {i} of the first run" for i in range(100)]
    source.write_text("".join(f"{line}\n" for line in first))
    distributed_until(worker, port, sink, first, connectors)

    second = [f"line {i} of the second run" for i in range(50)]
    with source.open("a") as f:
        f.write("".join(f"{line}\n" for line in second))
    distributed_until(worker, port, sink, first + second, [])
