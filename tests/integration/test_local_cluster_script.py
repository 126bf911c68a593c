"""deploy/local-cluster.sh: one command brings up etcd, moto and 3 brokers that form a cluster
real clients can use and that answer the health and metrics endpoints the Kubernetes manifests
probe; SIGTERM stops all of it, brokers cleanly, and leaves nothing behind.

The script runs in its own session, so every process it started (whatever their process
groups) can be found afterwards by session id.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from support.clients import Msg, confluent_consume, confluent_produce, unique
from support.cluster import create_topic
from support.procs import free_ports, port_open, tail

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local-cluster.sh"
UP_TIMEOUT = 60.0  # liveness guards only
STOP_TIMEOUT = 60.0
BOOTSTRAP_LINE = re.compile(r"bootstrap servers: (\S+)")

pytestmark = pytest.mark.timeout(180)


def session_processes(sid: int) -> dict[int, str]:
    """{pid: command line} of the live processes in session ``sid``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue  # exited meanwhile
        # Fields after the parenthesised command name: state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found[int(entry.name)] = cmdline
    return found


def wait_for_bootstrap(proc: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + UP_TIMEOUT
    while time.monotonic() < deadline:
        match = BOOTSTRAP_LINE.search(log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"the script exited with {proc.returncode}:\n{tail(log)}")
        time.sleep(0.1)
    raise AssertionError(f"no bootstrap line within {UP_TIMEOUT}s:\n{tail(log)}")


def wait_for_brokers(bootstrap: str, want: dict[int, str]) -> None:
    """Until Metadata lists exactly the brokers ``want`` ({id: "host:port"})."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + UP_TIMEOUT
    seen: dict[int, str] = {}
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        seen = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
        if seen == want:
            return
        time.sleep(0.2)
    raise AssertionError(f"Metadata lists brokers {seen}, want {want}")


def test_local_cluster_comes_up_serves_and_stops_cleanly(tmp_path):
    ports = free_ports(9)
    kafka, metrics, (etcd, etcd_peer, s3) = ports[:3], ports[3:6], ports[6:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFSCALE_", "LOCAL_"))}
    env.update(
        LOCAL_BROKER_PORTS=" ".join(map(str, kafka)),
        LOCAL_METRICS_PORTS=" ".join(map(str, metrics)),
        LOCAL_ETCD_PORT=str(etcd),
        LOCAL_ETCD_PEER_PORT=str(etcd_peer),
        LOCAL_S3_PORT=str(s3),
        PYTHON=sys.executable,
        TMPDIR=str(tmp_path),  # where the script makes its temporary directory
    )
    log = tmp_path / "local-cluster.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", str(SCRIPT)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        bootstrap = wait_for_bootstrap(proc, log)
        assert bootstrap == ",".join(f"127.0.0.1:{p}" for p in kafka)
        wait_for_brokers(bootstrap, {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(kafka)})

        # The endpoints the Kubernetes probes and Prometheus use, on each broker.
        for port in metrics:
            for path in ("/healthz", "/readyz", "/metrics"):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    assert r.status == 200, (port, path)
                    body = r.read().decode()
            assert "# TYPE" in body  # Prometheus text format

        topic = unique("local")
        create_topic(bootstrap, topic, 3)
        msgs = [Msg(i % 3, f"k{i}".encode(), f"v{i}".encode()) for i in range(30)]
        confluent_produce(bootstrap, topic, msgs)
        got = confluent_consume(bootstrap, topic, {0: 10, 1: 10, 2: 10})
        assert sorted((g.partition, g.value) for g in got) == sorted(
            (m.partition, m.value) for m in msgs
        )

        assert len(session_processes(proc.pid)) >= 6  # the script, etcd, moto, 3 brokers
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(STOP_TIMEOUT)
        assert code == 0, f"exit code {code}:\n{tail(log)}"
        assert "did not" not in log.read_text(), tail(log)
        assert session_processes(proc.pid) == {}
        assert [p for p in ports if port_open("127.0.0.1", p)] == []
        # The temporary directory (data and logs) is removed after a clean stop.
        assert [p.name for p in tmp_path.glob("kafscale-local.*")] == []
    finally:
        leftovers = session_processes(proc.pid)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(10)
