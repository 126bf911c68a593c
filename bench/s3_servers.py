"""The S3 servers the benchmarks start: moto (the tests' server, Python, about 200 MB/s on
this kind of machine) or s3fast (bench/s3fast: gofakes3's in-memory backend, Go, for runs
moto cannot keep up with). Both write one line per request in moto's log format, which
`s3_requests.S3Requests` counts, and hold one bucket, ``S3_BUCKET``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import procs

KINDS = ("moto", "s3fast")
S3_BUCKET = "kafscale-bench"
# Credentials the brokers inherit from the bench's environment.
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "kafscale-bench",
    "AWS_SECRET_ACCESS_KEY": "kafscale-bench-secret",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}
S3FAST_SOURCE = Path(__file__).resolve().parent / "s3fast"
S3FAST_BINARY = Path(__file__).resolve().parent.parent / "target" / "s3fast"


class S3Server(Protocol):
    @property
    def endpoint(self) -> str: ...

    @property
    def pid(self) -> int: ...

    # the request log S3Requests counts
    log_path: Path


class S3Fast(procs.ManagedProcess):
    """bench/s3fast on a loopback port; objects in its memory. Its output, the request log
    S3Requests counts, goes to ``log_path`` (the tests' process helper)."""

    def __init__(self, root: Path) -> None:
        super().__init__("s3fast", root / "s3fast.log")
        self.workdir = root
        self.port = procs.free_port()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Fast:
        build_s3fast()
        argv = [str(S3FAST_BINARY), "-addr", f"127.0.0.1:{self.port}"]
        argv += ["-bucket", S3_BUCKET]
        self._spawn(argv, dict(os.environ), self.workdir)
        deadline = time.monotonic() + 10
        while not procs.port_open("127.0.0.1", self.port):
            if not self.running or time.monotonic() > deadline:
                raise RuntimeError(f"s3fast did not start:\n{procs.tail(self.log_path)}")
            time.sleep(0.05)
        return self


def build_s3fast() -> None:
    """Builds bench/s3fast with the Go toolchain (its build cache makes a rebuild quick)."""
    S3FAST_BINARY.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run(
        ["go", "build", "-o", str(S3FAST_BINARY), "."],
        cwd=S3FAST_SOURCE,
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        raise RuntimeError(f"building bench/s3fast failed (is Go installed?):\n{built.stderr}")


@contextlib.contextmanager
def moto_server(root: Path) -> Iterator[procs.MotoServer]:
    os.environ.update(S3_CREDENTIALS)
    moto = procs.MotoServer(root / "moto", root / "moto.log").start()
    try:
        moto.create_bucket(S3_BUCKET)
        print(f"moto pid {moto.pid} at {moto.endpoint}, bucket {S3_BUCKET}", file=sys.stderr)
        yield moto
    finally:
        moto.cleanup()


@contextlib.contextmanager
def s3_server(root: Path, kind: str = "moto") -> Iterator[S3Server]:
    """The S3 server of that kind, started with one empty bucket."""
    if kind == "moto":
        with moto_server(root) as moto:
            yield moto
        return
    os.environ.update(S3_CREDENTIALS)
    root.mkdir(parents=True, exist_ok=True)
    fast = S3Fast(root).start()
    try:
        print(f"s3fast pid {fast.pid} at {fast.endpoint}, bucket {S3_BUCKET}", file=sys.stderr)
        yield fast
    finally:
        fast.cleanup()


def s3_store_args(server: S3Server) -> list[str]:
    region = S3_CREDENTIALS["AWS_REGION"]
    return ["--s3-bucket", S3_BUCKET, "--s3-region", region, "--s3-endpoint", server.endpoint]
