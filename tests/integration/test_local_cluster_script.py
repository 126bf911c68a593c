"""deploy/local-cluster.sh: one command brings up etcd, moto and 3 brokers that form a cluster
real clients can use and that answer the health and metrics endpoints the Kubernetes manifests
probe; SIGTERM stops all of it, brokers cleanly, and leaves nothing behind. A broker that dies
leaves the rest running (the others take over its partitions), and the script's commands
(status, stop N, kill N, restart N) show and control the brokers of the running cluster.

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
from collections import Counter
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


def base_env(tmp_path: Path) -> dict[str, str]:
    """The environment of the script and its commands, with nothing from this machine's own
    local cluster: the pointer file to the running cluster goes under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFSCALE_", "LOCAL_"))}
    runtime = tmp_path / "runtime"
    runtime.mkdir(exist_ok=True)
    env.update(
        PYTHON=sys.executable,
        TMPDIR=str(tmp_path),  # where the script makes its temporary directory
        XDG_RUNTIME_DIR=str(runtime),  # where it writes the pointer to the running cluster
    )
    return env


def script_env(tmp_path: Path, ports: list[int], **extra: str) -> dict[str, str]:
    kafka, metrics, (etcd, etcd_peer, s3) = ports[:3], ports[3:6], ports[6:]
    env = base_env(tmp_path)
    env.update(
        LOCAL_BROKER_PORTS=" ".join(map(str, kafka)),
        LOCAL_METRICS_PORTS=" ".join(map(str, metrics)),
        LOCAL_ETCD_PORT=str(etcd),
        LOCAL_ETCD_PEER_PORT=str(etcd_peer),
        LOCAL_S3_PORT=str(s3),
        **extra,
    )
    return env


@contextlib.contextmanager
def running_script(tmp_path: Path, env: dict[str, str]):
    """The script running in its own session, its output in tmp_path/local-cluster.log; at the
    end, whatever of its session is left is killed."""
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
        yield proc, log
    finally:
        leftovers = session_processes(proc.pid)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(10)


def command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``bash local-cluster.sh ARGS...``: a command to the running cluster."""
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=STOP_TIMEOUT + UP_TIMEOUT + 40,
    )


STATUS_LINE = re.compile(r"^(broker\d|etcd|s3)\s+(\w+)\s+(?:pid|code) (\d+)", re.M)


def status(env: dict[str, str]) -> tuple[dict[str, tuple[str, int]], str]:
    """({name: (state, pid or exit code)}, the whole output) from ``status``."""
    res = command(env, "status")
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    found = {m.group(1): (m.group(2), int(m.group(3))) for m in STATUS_LINE.finditer(res.stdout)}
    return found, res.stdout


def wait_for(what: str, check, timeout: float = UP_TIMEOUT):
    """Poll ``check()`` until it returns something true; returns that."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout}s (last: {last!r})")


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: leader broker id} in the Metadata of ``bootstrap``."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: pm.leader for p, pm in md.topics[topic].partitions.items()}


def test_local_cluster_comes_up_serves_and_stops_cleanly(tmp_path):
    ports = free_ports(9)
    kafka, metrics = ports[:3], ports[3:6]
    env = script_env(tmp_path, ports)
    with running_script(tmp_path, env) as (proc, log):
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


def test_a_dead_broker_leaves_the_cluster_running_and_restarts_on_request(tmp_path):
    ports = free_ports(9)
    kafka = ports[:3]
    # A short lease: the survivors take over a killed broker's partitions 2 s after its death.
    env = script_env(tmp_path, ports, KAFSCALE_LEASE_TTL_MS="2000")
    everyone = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(kafka)}
    with running_script(tmp_path, env) as (proc, log):
        bootstrap = wait_for_bootstrap(proc, log)
        wait_for_brokers(bootstrap, everyone)

        # status: every process running, with its pid (in the script's session) and ports.
        states, text = status(env)
        sids = session_processes(proc.pid)
        assert set(states) == {"broker1", "broker2", "broker3", "etcd", "s3"}, text
        for name, (state, pid) in states.items():
            assert state == "running" and pid in sids, (name, text)
        for port in ports[:6]:
            assert f"127.0.0.1:{port}" in text, text
        root = next(tmp_path.glob("kafscale-local.*"))
        assert f"local cluster in {root} (script pid {proc.pid})" in text, text

        partitions = 12
        topic = unique("failover")
        create_topic(bootstrap, topic, partitions)
        sent: list[Msg] = []

        def produce_round(servers: str) -> None:
            n = len(sent)
            msgs = [Msg(p, f"k{n + p}".encode(), f"v{n + p}".encode()) for p in range(partitions)]
            confluent_produce(servers, topic, msgs)
            sent.extend(msgs)

        def check_all(servers: str) -> None:
            per = len(sent) // partitions
            got = confluent_consume(servers, topic, dict.fromkeys(range(partitions), per))
            assert sorted((g.partition, g.value) for g in got) == sorted(
                (m.partition, m.value) for m in sent
            )

        produce_round(bootstrap)
        before = wait_for("an owner for every partition", lambda: _all_led(bootstrap, topic))
        # The broker owning the most partitions dies (SIGKILL: no handoff, its lease expires).
        victim = max(everyone, key=lambda b: sum(1 for owner in before.values() if owner == b))
        assert victim in before.values()
        victim_pid = states[f"broker{victim}"][1]
        os.kill(victim_pid, signal.SIGKILL)

        died = re.compile(
            rf"broker{victim} \(pid {victim_pid}\) died with exit code 137 \(SIGKILL\); "
            rf"log: {re.escape(str(root))}/logs/broker{victim}\.log; "
            rf"restart it with: bash \S+ restart {victim}$",
            re.M,
        )
        wait_for("report of the death", lambda: died.search(log.read_text()), 10)
        assert proc.poll() is None, tail(log)
        states, text = status(env)
        assert states[f"broker{victim}"] == ("exited", 137), text
        assert {states[f"broker{b}"][0] for b in everyone if b != victim} == {"running"}, text

        # The survivors take over its partitions and serve every partition.
        survivors = {b: a for b, a in everyone.items() if b != victim}
        rest = ",".join(survivors.values())
        wait_for_brokers(rest, survivors)
        after = wait_for(
            "takeover by the survivors",
            lambda: (led := _all_led(rest, topic)) and set(led.values()) <= set(survivors) and led,
        )
        assert {p: o for p, o in after.items() if before[p] != victim} == {
            p: o for p, o in before.items() if o != victim
        }
        produce_round(rest)
        check_all(rest)
        assert proc.poll() is None, tail(log)

        # restart: it comes back, rejoins and takes its share again (as many partitions as
        # before, not necessarily the same ones: placement moves only what balance needs).
        res = command(env, "restart", str(victim))
        assert res.returncode == 0, (res.stdout, res.stderr, tail(log))
        assert f"broker{victim} is up again" in res.stdout, res.stdout
        wait_for_brokers(bootstrap, everyone)
        wait_for(
            "the restarted broker's share back",
            lambda: _shares(now := _all_led(bootstrap, topic)) == _shares(before)
            and now is not None
            and victim in now.values(),
        )
        produce_round(bootstrap)
        check_all(bootstrap)
        states, text = status(env)
        state, new_pid = states[f"broker{victim}"]
        assert state == "running" and new_pid != victim_pid, text
        assert new_pid in session_processes(proc.pid)

        # stop and kill on request; neither ends the script nor fails its exit code.
        first, second = (b for b in everyone if b != victim)
        res = command(env, "stop", str(first))
        assert res.returncode == 0, (res.stdout, res.stderr)
        assert f"broker{first} stopped, exit code 0" in res.stdout, res.stdout
        res = command(env, "stop", str(first))
        assert res.returncode == 1 and f"broker{first} is not running" in res.stdout, res
        res = command(env, "kill", str(second))
        assert res.returncode == 0, (res.stdout, res.stderr)
        assert f"broker{second} killed, exit code 137 (SIGKILL)" in res.stdout, res.stdout
        states, text = status(env)
        assert states[f"broker{first}"] == ("stopped", 0), text
        assert states[f"broker{second}"] == ("killed", 137), text
        assert states[f"broker{victim}"][0] == "running", text
        assert proc.poll() is None, tail(log)

        # SIGTERM: the running broker stops cleanly, so exit 0; the others are reported.
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(STOP_TIMEOUT)
        out = log.read_text()
        assert code == 0, f"exit code {code}:\n{tail(log)}"
        assert f"broker{first} was not running (stopped, exit code 0)" in out, tail(log)
        assert f"broker{second} was not running (killed, exit code 137)" in out, tail(log)
        assert session_processes(proc.pid) == {}
        assert [p for p in ports if port_open("127.0.0.1", p)] == []
        assert not root.exists()
        assert list((tmp_path / "runtime").iterdir()) == []  # the pointer is gone
        res = command(env, "status")
        assert res.returncode == 1 and "no local cluster is running" in res.stderr, res


def _shares(led: dict[int, int] | None) -> list[int] | None:
    """How many partitions the brokers lead, fewest first (which broker takes one partition
    more than another may change when one leaves and comes back)."""
    return None if led is None else sorted(Counter(led.values()).values())


def _all_led(bootstrap: str, topic: str) -> dict[int, int] | None:
    """The leaders, once every partition has one (None before)."""
    led = leaders(bootstrap, topic)
    return led if led and all(owner >= 0 for owner in led.values()) else None


def test_commands_fail_clearly_without_a_running_cluster(tmp_path):
    env = base_env(tmp_path)
    for args in (["status"], ["restart", "2"], ["stop", "1"], ["kill", "3"]):
        res = command(env, *args)
        assert res.returncode == 1, (args, res)
        assert res.stderr.startswith("local-cluster: no local cluster is running"), (args, res)
        assert res.stdout == ""
    # A directory without a running cluster in it, given explicitly.
    res = command({**env, "LOCAL_CLUSTER_DIR": str(tmp_path / "nothing")}, "status")
    assert res.returncode == 1, res
    assert f"no local cluster is running in {tmp_path / 'nothing'}" in res.stderr, res
    # Bad commands and arguments: a usage message, before looking for a cluster.
    for args, message in (
        (["restart", "4"], "usage: bash"),
        (["restart"], "usage: bash"),
        (["status", "1"], "usage: bash"),
        (["frobnicate"], "unknown command 'frobnicate'"),
    ):
        res = command(env, *args)
        assert res.returncode == 1 and message in res.stderr, (args, res)
    res = command(env, "--help")
    assert res.returncode == 0 and "restart N" in res.stdout, res
