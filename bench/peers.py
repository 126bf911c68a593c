"""Peer brokers the benchmarks run beside KafScale, through the same clients: Tansu
(https://github.com/tansu-io/tansu), built from crates.io into ``target/`` at the version pinned
here, on the same S3 server; and Apache Kafka (KRaft, one node that is broker and controller,
its jars from Maven Central through bench/kafka/pom.xml), on local disks.

A peer is a process the bench starts and measures from /proc as it does its own broker
(CPU, wake-ups, memory), PLAINTEXT only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import broker_bench as bb
from s3_requests import S3Requests
from s3_servers import S3_BUCKET, S3_CREDENTIALS, S3Server
from support import jvm, procs

TANSU_VERSION = "0.6.0"
TANSU_ROOT = Path(__file__).resolve().parent.parent / "target" / f"tansu-{TANSU_VERSION}"
TANSU_BINARY = TANSU_ROOT / "bin" / "tansu"
KAFKA = jvm.Module(Path(__file__).resolve().parent / "kafka")
KAFKA_VERSION = "4.4.0"  # bench/kafka/pom.xml's
KAFKA_HEAP = "-Xmx1g"  # Kafka's own scripts' default (KAFKA_HEAP_OPTS)


class PeerBroker(procs.ManagedProcess):
    """A peer's process (the tests' process helper: output in a log file, teardown), with the
    parts of ``broker_bench.Broker`` the phases use."""

    security = bb.PLAINTEXT

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], root: Path, port: int | None = None
    ) -> None:
        super().__init__(name, root / f"{name}.log")
        self.port = self.client_port = port if port is not None else procs.free_port()
        self.host = "127.0.0.1"
        self.s3_requests: S3Requests | None = None
        self._spawn([a.replace("{port}", str(self.port)) for a in argv], env, root)
        deadline = time.monotonic() + 60
        while not procs.port_open(self.host, self.port):
            if not self.running or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{self.tail()}")
            time.sleep(0.1)

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.running

    def cpu_seconds(self) -> float:
        return bb.proc_cpu_seconds(self.pid)

    def usage(self) -> bb.Usage:
        pid = self.pid
        return bb.Usage(bb.proc_cpu_seconds(pid), bb.proc_wakeups(pid), bb.proc_minor_faults(pid))

    def rss_mib(self) -> float:
        return bb.proc_status_kib(self.pid, "VmRSS") / 1024

    def peak_rss_mib(self) -> float:
        return bb.proc_status_kib(self.pid, "VmHWM") / 1024

    def tail(self, n: int = 20) -> str:
        return procs.tail(self.log_path, n)

    def stop(self) -> None:
        self.cleanup()  # SIGTERM, then kill if it does not exit


def build_tansu() -> Path:
    """``cargo install`` of the pinned Tansu into target/ (once; a release build of ~500
    crates, some 30 minutes on two cores)."""
    if TANSU_BINARY.exists():
        return TANSU_BINARY
    bb.log(f"building tansu {TANSU_VERSION} into {TANSU_ROOT} (once)")
    cmd = ["cargo", "install", "--locked", "tansu", "--version", f"={TANSU_VERSION}"]
    # (its S3 storage engine is behind the dynostore feature, off by default)
    cmd += ["--features", "dynostore", "--root", str(TANSU_ROOT)]
    built = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.STDOUT)
    if built.returncode != 0 or not TANSU_BINARY.exists():
        raise RuntimeError(f"building tansu failed (exit {built.returncode})")
    return TANSU_BINARY


def start_tansu(server: S3Server, root: Path, namespace: str) -> PeerBroker:
    """Tansu's broker on the S3 server's bucket (a server of its own: Tansu keeps its whole
    state in the bucket)."""
    binary = build_tansu()
    env = dict(os.environ)
    env.update(S3_CREDENTIALS)
    env.update({"AWS_ENDPOINT": server.endpoint, "AWS_ALLOW_HTTP": "true"})
    argv = [str(binary), "broker", "--kafka-cluster-id", namespace]
    argv += ["--kafka-listener-url", "tcp://127.0.0.1:{port}"]
    argv += ["--kafka-advertised-listener-url", "tcp://127.0.0.1:{port}"]
    argv += ["--storage-engine", f"s3://{S3_BUCKET}/"]
    peer = PeerBroker(f"tansu-{namespace}", argv, env, root)
    peer.s3_requests = S3Requests(server.log_path)
    return peer


def start_kafka(root: Path, name: str = "kafka", partitions: int = 8) -> PeerBroker:
    """Apache Kafka in KRaft mode, one node as broker and controller, its log in ``root``:
    the storage formatted (``kafka-storage format --standalone``), then ``kafka.Kafka``, with
    the settings a single-node quickstart has (replication factors of one)."""
    data = root / name
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    port, controller = procs.free_port(), procs.free_port()
    config = data / "server.properties"
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data / "logs"),
        "num.partitions": str(partitions),
        "offsets.topic.replication.factor": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    cluster_id = uuid.uuid4().hex[:22]
    fmt = ["format", "--cluster-id", cluster_id, "--config", str(config), "--standalone"]
    formatted = subprocess.run(
        KAFKA.command("kafka.tools.StorageTool", fmt), capture_output=True, text=True
    )
    if formatted.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")
    argv = KAFKA.command("kafka.Kafka", [str(config)])
    argv.insert(1, KAFKA_HEAP)
    peer = PeerBroker(name, argv, dict(os.environ), data, port=port)
    return peer
