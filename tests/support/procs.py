"""Real processes for the integration tests: the KafScale broker, a moto S3 server and etcd."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0

# AWS credentials for moto; the broker reads the same variables.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "kafscale-test",
    "AWS_SECRET_ACCESS_KEY": "kafscale-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` different free ports (``free_port`` may hand out the same one twice)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 200) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log file)"
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """A child process with its stdout+stderr in a log file; killed at teardown at the latest."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self._log = None
        self.exit_codes: list[int] = []
        self.paused = False

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self._log.write(f"\n===== start: {' '.join(argv)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_size(self) -> int:
        """Bytes in the log so far: a mark for ``log_since``."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, offset: int) -> str:
        """What the process logged after byte ``offset`` (a ``log_size`` mark)."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def pause(self) -> None:
        """SIGSTOP: the process stays alive (sockets open, nothing answered) until resume()."""
        assert self.running, f"{self.name} is not running"
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after pause()."""
        assert self.proc is not None, f"{self.name} is not running"
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        """Wait for the process to exit by itself; returns its exit code (raises on timeout)."""
        assert self.proc is not None, f"{self.name} is not running"
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout}s:\n{tail(self.log_path)}"
            ) from None
        return self._reap()

    def _reap(self) -> int:
        assert self.proc is not None
        code = self.proc.returncode
        self.exit_codes.append(code)
        self.proc = None
        self.paused = False
        if self._log is not None:
            self._log.write(f"===== exited with {code}\n".encode())
            self._log.close()
            self._log = None
        return code

    def terminate(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; SIGKILL (and raise) if it does not exit in time."""
        assert self.proc is not None, f"{self.name} is not running"
        if self.paused:
            self.resume()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._reap()
                raise AssertionError(
                    f"{self.name} did not exit within {timeout}s of SIGTERM; killed it"
                ) from None
        return self._reap()

    def kill(self) -> int:
        """SIGKILL and wait."""
        assert self.proc is not None, f"{self.name} is not running"
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        return self._reap()

    def cleanup(self) -> None:
        """Teardown: make sure nothing is left running."""
        if self.proc is None:
            return
        if self.paused and self.proc.poll() is None:
            self.resume()  # a stopped process would not act on SIGTERM
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reap()


# Test brokers compact write-ahead data into segments at once (every 100 ms, runs of any age),
# so on-disk checks and the segment readers see acked records within moments. Tests of the
# write-ahead path itself pass their own values in ``env``.
COMPACT_AT_ONCE_ENV = {
    "KAFSCALE_WAL_COMPACTION_AGE_MS": "1",
    "KAFSCALE_WAL_COMPACTION_INTERVAL_MS": "100",
}


def settled(check, timeout: float = 30.0, poll: float = 0.1):
    """``check()``'s result once it stops failing (compaction catches up within moments);
    its last failure if it never does. ``timeout`` is a liveness guard only."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (AssertionError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(poll)


class Broker(ManagedProcess):
    """``python -m kafscale.broker`` on a loopback port with its own data directory."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *,
        port: int | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        flush_interval_ms: int = 20,
        name: str = "broker",
        python: str = sys.executable,
        compact_at_once: bool = True,
    ) -> None:
        """``python``: the interpreter that runs the broker (a benchmark may compare builds).
        ``compact_at_once``: the test setting ``COMPACT_AT_ONCE_ENV``; benchmarks run the
        broker's defaults."""
        super().__init__(name, log_path)
        self.python = python
        self.compact_at_once = compact_at_once
        self.data_dir = data_dir
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.args = list(args or [])
        self.env = dict(env or {})
        self.flush_interval_ms = flush_interval_ms
        self.starts = 0
        self.broker_id: int | None = None  # set for cluster members (--broker-id)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def argv(self) -> list[str]:
        return [
            self.python,
            "-m",
            "kafscale.broker",
            "--broker-addr",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
            "--flush-interval-ms",
            str(self.flush_interval_ms),
            *self.args,
        ]

    def start(self, wait: bool = True) -> Broker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFSCALE_")}
        if self.compact_at_once:
            env.update(COMPACT_AT_ONCE_ENV)
        env.update(self.env)
        env.setdefault("RUST_BACKTRACE", "1")
        self._spawn(self.argv(), env, self.data_dir.parent)
        self.starts += 1
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Wait for this start's ``listening on HOST:PORT`` line and an accepting port."""
        marker = f"listening on {self.bootstrap}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                code = self.proc.returncode if self.proc else None
                raise AssertionError(
                    f"{self.name} exited with {code} before listening:\n{tail(self.log_path)}"
                )
            text = self.log_text()
            current = text.rsplit("===== start:", 1)[-1]
            if marker in current and port_open(self.host, self.port):
                return
            time.sleep(0.05)
        raise AssertionError(
            f"{self.name} did not log {marker!r} and accept within {timeout}s:\n"
            f"{tail(self.log_path)}"
        )

    def restart(self, hard: bool = False) -> int:
        """SIGTERM (or SIGKILL when ``hard``), then start again on the same port and data dir."""
        code = self.kill() if hard else self.terminate()
        self.start()
        return code


def assert_no_panic(broker: Broker) -> None:
    """No panic in the broker's log, and the broker still runs."""
    log = broker.log_text()
    assert "panicked" not in log, log[-5000:]
    assert broker.running, f"broker exited:\n{log[-5000:]}"


class MotoServer(ManagedProcess):
    """moto's S3-compatible server on a loopback port."""

    def __init__(self, workdir: Path, log_path: Path) -> None:
        super().__init__("moto", log_path)
        self.workdir = workdir
        self.port = free_port()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(S3_ENV)
        bindir = Path(sys.executable).parent
        exe = bindir / "moto_server"
        argv = (
            [str(exe), "-H", "127.0.0.1", "-p", str(self.port)]
            if exe.exists()
            else [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        )
        self._spawn(argv, env, self.workdir)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if not self.running:
                raise AssertionError(f"moto server exited:\n{tail(self.log_path)}")
            if port_open("127.0.0.1", self.port):
                return self
            time.sleep(0.1)
        raise AssertionError(f"moto server did not listen:\n{tail(self.log_path)}")

    def client(self, timeout: float | None = None):
        """A boto3 S3 client; with ``timeout``, calls give up after that many seconds (no
        retries) instead of botocore's patient defaults."""
        import boto3
        from botocore.config import Config

        config = None
        if timeout is not None:
            config = Config(
                connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1}
            )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=S3_ENV["AWS_REGION"],
            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
            config=config,
        )

    def listing(self, bucket: str, prefix: str = "", client=None) -> dict[str, tuple[str, int]]:
        """Every object under ``prefix`` as {key: (ETag, size)}, without reading the bytes."""
        s3 = client or self.client()
        out = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = (obj["ETag"], obj["Size"])
        return out

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix`` as {key: bytes}. A listing and the reads after it are
        not one snapshot: an object deleted in between (a write-ahead object compaction has
        collected) is left out, as a listing a moment later would leave it out."""
        s3 = self.client()
        out = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                try:
                    out[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                except s3.exceptions.NoSuchKey:
                    continue
        return out

    def broker_args(
        self, bucket: str, namespace: str | None = None, endpoint: str | None = None
    ) -> list[str]:
        """A broker on ``bucket``, as one storage URL (the --s3-* flags say the same in parts;
        test_startup_errors and the settings' unit tests use those). ``endpoint``: where the
        broker reaches this server (a proxy in front of it), if not directly."""
        url = self.location(bucket, namespace or "default", broker=True, endpoint=endpoint)
        return ["--storage", url]

    def location(
        self, bucket: str, namespace: str, *, broker: bool = False, endpoint: str | None = None
    ) -> str:
        """The storage URL of ``namespace`` in ``bucket`` on this server (with the region a
        broker needs; readers default it)."""
        query = {"endpoint": endpoint or self.endpoint}
        if broker:
            query = {"region": S3_ENV["AWS_REGION"], **query}
        return f"s3://{bucket}/{namespace}?{urllib.parse.urlencode(query)}"


class EtcdServer(ManagedProcess):
    """A single-member etcd (Debian etcd-server 3.4) on loopback ports with its own data dir.

    ``stop()`` and ``start()`` restart it on the same ports and data dir (what it stored
    survives); ``pause()``/``resume()`` freeze it with SIGSTOP/SIGCONT."""

    def __init__(self, workdir: Path, log_path: Path, name: str = "etcd") -> None:
        super().__init__(name, log_path)
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.client_port = free_port()
        self.peer_port = free_port()
        while self.peer_port == self.client_port:
            self.peer_port = free_port()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def client(self, timeout: float = 5.0):
        from .etcd import EtcdClient

        return EtcdClient(self.endpoint, timeout)

    def argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            "etcd",
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.endpoint,
            "--advertise-client-urls",
            self.endpoint,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"{self.name}={peer}",
            "--initial-cluster-state",
            "new",
            # a single member elects itself quicker with shorter raft timers
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
        ]

    def start(self, timeout: float = STARTUP_TIMEOUT) -> EtcdServer:
        from .etcd import wait_healthy

        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
        self._spawn(self.argv(), env, self.workdir)
        deadline = time.monotonic() + timeout
        client = self.client(timeout=1.0)
        while time.monotonic() < deadline:
            if not self.running:
                raise AssertionError(f"etcd exited:\n{tail(self.log_path)}")
            if wait_healthy(client, 0.5):
                return self
        raise AssertionError(f"etcd not healthy within {timeout}s:\n{tail(self.log_path)}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait (the data dir stays for the next start())."""
        return self.terminate(timeout)


@contextlib.contextmanager
def paused(proc: ManagedProcess):
    """Freeze ``proc`` (SIGSTOP) for the body of the with-block; always SIGCONT afterwards."""
    proc.pause()
    try:
        yield proc
    finally:
        if proc.paused:
            proc.resume()


@contextlib.contextmanager
def managed(proc: ManagedProcess):
    try:
        yield proc
    finally:
        proc.cleanup()
