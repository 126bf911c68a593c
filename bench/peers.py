"""Peer brokers the benchmarks run beside KafScale, through the same clients and the same S3
server: Tansu (https://github.com/tansu-io/tansu), built from crates.io into ``target/`` at
the version pinned here, on S3.

A peer is a process the bench starts and measures from /proc as it does its own broker
(CPU, wake-ups, memory), PLAINTEXT only."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import broker_bench as bb
from s3_requests import S3Requests
from s3_servers import S3_BUCKET, S3_CREDENTIALS, S3Server
from support import procs

TANSU_VERSION = "0.6.0"
TANSU_ROOT = Path(__file__).resolve().parent.parent / "target" / f"tansu-{TANSU_VERSION}"
TANSU_BINARY = TANSU_ROOT / "bin" / "tansu"


class PeerBroker(procs.ManagedProcess):
    """A peer's process (the tests' process helper: output in a log file, teardown), with the
    parts of ``broker_bench.Broker`` the phases use."""

    security = bb.PLAINTEXT

    def __init__(self, name: str, argv: list[str], env: dict[str, str], root: Path) -> None:
        super().__init__(name, root / f"{name}.log")
        self.port = self.client_port = procs.free_port()
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
