"""Start-up failures of ``python -m kafscale.broker``, as a new user meets them: each one is a
single line on stderr (after the log lines of the stages that went well, if any) that says
what is wrong, names the setting the way the user gave it (flag or ``KAFSCALE_*`` variable)
and what to do; no traceback, no S3 XML body, no transport dump, exit code 1.

And no request leaves the machine that the user did not configure: with an S3 endpoint and no
credentials, neither the broker nor ``kafscale segments`` asks a cloud instance-metadata
service for credentials. object_store's metadata address is moved to a local recorder with
its own ``AWS_METADATA_ENDPOINT`` variable; a control run without an endpoint (the standard
AWS chain, left as it is) shows the recorder does get asked when asking is right.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli_runner import kafscale, one_error_line
from support.procs import S3_ENV, MotoServer, free_port

START_GUARD = 90.0  # seconds; a hang guard, never a performance limit
# A log line of an earlier stage: "2026-11-26T04:40:42.936Z  INFO target: message".
LOG_LINE = re.compile(r"^\S+Z\s+(TRACE|DEBUG|INFO|WARN)\s")
FAILED = re.compile(r"^\S+Z\s+ERROR kafscale\.broker: the broker could not start: (.*)$")


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any KafScale setting or AWS variable (no credentials,
    no endpoint, no profile), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFSCALE_", "AWS_"))}
    env.update(extra or {})
    return env


def start_failure(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> str:
    """Runs the broker, which must fail to start: its one error line's message (the part
    after 'the broker could not start: ')."""
    argv = [sys.executable, "-m", "kafscale.broker", *args]
    if not any(a.startswith("--data-dir") for a in args) and "KAFSCALE_DATA_DIR" not in (env or {}):
        argv += ["--data-dir", str(tmp_path / "data")]
    if not any(a.startswith(("--broker-addr", "--listeners")) for a in args) and not (
        env and ("KAFSCALE_BROKER_ADDR" in env or "KAFSCALE_LISTENERS" in env)
    ):
        argv += ["--broker-addr", "127.0.0.1:0"]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=_env(env),
        cwd=tmp_path,
        timeout=START_GUARD,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1, f"exit {proc.returncode}:\n{proc.stderr}"
    assert proc.stdout == "", proc.stdout
    lines = [line for line in proc.stderr.splitlines() if not LOG_LINE.match(line)]
    assert len(lines) == 1, f"expected one line besides earlier log lines:\n{proc.stderr}"
    match = FAILED.match(lines[0])
    assert match, lines[0]
    message = match.group(1)
    for junk in ("Traceback", "<?xml", "<Error>", "tonic", "os error", "Generic S3 error"):
        assert junk not in message, message
    assert "object storage: object storage" not in message, message
    assert "listening on" not in proc.stderr
    return message


def assert_names_only(message: str, *wanted: str) -> None:
    """The message names each of ``wanted`` and no setting of the other kind (a flag where
    the user used variables, or a variable where they used flags)."""
    for setting in wanted:
        assert setting in message, message
    if all(w.startswith("--") for w in wanted):
        assert "KAFSCALE_" not in message, message
    else:
        assert not re.search(r"(^|\s)--[a-z]", message), message


# --- object storage -------------------------------------------------------------------------


def test_a_missing_bucket_is_named_with_how_to_fix_it(tmp_path, moto):
    message = start_failure(
        tmp_path,
        [
            "--s3-bucket",
            "no-such-bucket",
            "--s3-region",
            "us-east-1",
            "--s3-endpoint",
            moto.endpoint,
        ],
        S3_ENV,
    )
    assert message == (
        f"bucket no-such-bucket does not exist on the S3 server at --s3-endpoint "
        f"{moto.endpoint}: create it, or pass --s3-bucket BUCKET naming an existing one"
    )

    as_variables = {
        **S3_ENV,
        "KAFSCALE_S3_BUCKET": "no-such-bucket",
        "KAFSCALE_S3_REGION": "us-east-1",
        "KAFSCALE_S3_ENDPOINT": moto.endpoint,
        "KAFSCALE_DATA_DIR": str(tmp_path / "data"),
        "KAFSCALE_BROKER_ADDR": "127.0.0.1:0",
    }
    message = start_failure(tmp_path, [], as_variables)
    assert "set KAFSCALE_S3_BUCKET=BUCKET" in message, message
    assert_names_only(message, "KAFSCALE_S3_ENDPOINT", "KAFSCALE_S3_BUCKET")


def test_wrong_s3_credentials_are_named(tmp_path, monkeypatch):
    # A moto that checks credentials after its first request (which creates the bucket):
    # unknown keys get 403 InvalidAccessKeyId, as from AWS or MinIO.
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "1")
    server = MotoServer(tmp_path / "moto", tmp_path / "moto.log")
    try:
        server.start()
        server.create_bucket("locked")
        message = start_failure(
            tmp_path,
            ["--s3-bucket", "locked", "--s3-region", "us-east-1", "--s3-endpoint", server.endpoint],
            S3_ENV,
        )
    finally:
        server.cleanup()
    assert message.startswith(
        f"the S3 server at --s3-endpoint {server.endpoint} refused the credentials for bucket "
        "locked (InvalidAccessKeyId: "
    ), message
    assert message.endswith(
        "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), and that "
        "they may list and write the bucket"
    ), message


def test_an_unreachable_s3_endpoint_is_named(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    message = start_failure(
        tmp_path,
        ["--s3-bucket", "b", "--s3-region", "us-east-1", "--s3-endpoint", endpoint],
        S3_ENV,
    )
    assert message == (
        f"cannot reach the S3 server at --s3-endpoint {endpoint} (Connection refused): start "
        "the S3 server there, or pass --s3-endpoint URL of a running one"
    )


# --- credentials and the instance-metadata service ------------------------------------------


class Recorder:
    """A local HTTP server standing in for the instance-metadata service: answers 404 to
    everything and keeps each request line."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                recorder.requests.append(f"{self.command} {self.path}")
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_PUT = do_POST = _record

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def metadata_service() -> Iterator[Recorder]:
    recorder = Recorder()
    thread = threading.Thread(target=recorder.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        recorder.server.shutdown()
        recorder.server.server_close()


NO_CREDENTIALS_REMEDY = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary "
    "ones), or AWS_SKIP_SIGNATURE=true if the bucket allows anonymous access"
)


def test_no_credentials_with_an_endpoint_asks_no_metadata_service(
    tmp_path, moto, s3_bucket, metadata_service
):
    imds = {"AWS_METADATA_ENDPOINT": metadata_service.url, "HOME": str(tmp_path)}

    # The control: without an endpoint (AWS itself) the standard chain asks the metadata
    # service, here the recorder: the variable is honoured, so silence below means something.
    message = start_failure(tmp_path, ["--s3-bucket", s3_bucket, "--s3-region", "us-east-1"], imds)
    assert metadata_service.requests, "the standard AWS chain did not ask the metadata service"
    assert message.startswith("no S3 credentials found for AWS S3 (region us-east-1)"), message
    assert message.endswith(NO_CREDENTIALS_REMEDY), message
    metadata_service.requests.clear()

    # The broker, with --s3-endpoint and with KAFSCALE_S3_ENDPOINT
    endpoint_flags = [
        *["--s3-bucket", s3_bucket, "--s3-region", "us-east-1"],
        *["--s3-endpoint", moto.endpoint],
    ]
    message = start_failure(tmp_path, endpoint_flags, imds)
    assert message == (
        f"no S3 credentials found for the S3 server at --s3-endpoint {moto.endpoint} (the "
        f"instance metadata service is not asked when an endpoint is set): "
        f"{NO_CREDENTIALS_REMEDY}"
    )
    message = start_failure(
        tmp_path,
        ["--s3-bucket", s3_bucket, "--s3-region", "us-east-1"],
        {**imds, "KAFSCALE_S3_ENDPOINT": moto.endpoint},
    )
    assert f"KAFSCALE_S3_ENDPOINT {moto.endpoint}" in message, message

    # kafscale segments, with --s3-endpoint and with AWS_ENDPOINT_URL
    location = f"s3://{s3_bucket}/default"
    for args, extra in (
        (["--s3-endpoint", moto.endpoint], {}),
        ([], {"AWS_ENDPOINT_URL": moto.endpoint}),
    ):
        run = kafscale("segments", "ls", location, *args, env=_env({**imds, **extra}))
        assert run.code != 0
        line = one_error_line(run)
        assert "no S3 credentials found" in line and NO_CREDENTIALS_REMEDY in line, line

    assert metadata_service.requests == []


def test_skip_signature_reads_an_anonymous_bucket_unsigned(
    tmp_path, moto, s3_bucket, metadata_service
):
    """AWS_SKIP_SIGNATURE=true is the documented way to an endpoint that allows anonymous
    access (moto does): the broker starts with unsigned requests, asking no metadata
    service."""
    port = free_port()
    argv = [
        *[sys.executable, "-m", "kafscale.broker", "--broker-addr", f"127.0.0.1:{port}"],
        *["--data-dir", str(tmp_path / "data"), "--s3-bucket", s3_bucket],
        *["--s3-region", "us-east-1", "--s3-endpoint", moto.endpoint],
    ]
    env = _env({"AWS_SKIP_SIGNATURE": "true", "AWS_METADATA_ENDPOINT": metadata_service.url})
    proc = subprocess.Popen(
        argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + START_GUARD
        seen = []
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if f"listening on 127.0.0.1:{port}" in line:
                break
        assert any("listening on" in line for line in seen), "".join(seen)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=START_GUARD)
    assert metadata_service.requests == []


# --- etcd -----------------------------------------------------------------------------------


def test_an_unreachable_etcd_is_named(tmp_path, moto, s3_bucket):
    endpoint = f"http://127.0.0.1:{free_port()}"
    args = [*moto.broker_args(s3_bucket), "--etcd-endpoints", endpoint]
    message = start_failure(tmp_path, args, S3_ENV)
    assert message == (
        f"cannot reach etcd at --etcd-endpoints {endpoint} (Connection refused): start etcd "
        "there, or pass --etcd-endpoints URLS with the client URLs of a running one"
    )


def _etcd_call(endpoint: str, path: str, body: dict, token: str | None = None) -> dict:
    request = urllib.request.Request(
        f"{endpoint}/v3/{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": token} if token else {},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def test_etcd_login_failures_are_named(tmp_path, moto, s3_bucket, etcd):
    endpoint = etcd.endpoint
    _etcd_call(endpoint, "auth/role/add", {"name": "root"})
    _etcd_call(endpoint, "auth/user/add", {"name": "root", "password": "right"})
    _etcd_call(endpoint, "auth/user/grant", {"user": "root", "role": "root"})
    _etcd_call(endpoint, "auth/enable", {})
    args = [*moto.broker_args(s3_bucket), "--etcd-endpoints", endpoint]

    message = start_failure(tmp_path, args, S3_ENV)
    assert message.startswith(f"etcd at --etcd-endpoints {endpoint} refused the login"), message
    assert message.endswith("pass --etcd-username USER and --etcd-password of an etcd user")

    wrong = [*args, "--etcd-username", "root", "--etcd-password", "wrong"]
    message = start_failure(tmp_path, wrong, S3_ENV)
    assert "refused the login (etcdserver: authentication failed" in message, message
    assert message.endswith("check --etcd-username and --etcd-password"), message


# --- listeners, data directory, TLS files ---------------------------------------------------


@contextlib.contextmanager
def port_taken() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_port_in_use_says_what_to_do(tmp_path):
    with port_taken() as port:
        addr = f"127.0.0.1:{port}"
        message = start_failure(tmp_path, ["--broker-addr", addr])
        assert message == (
            f"{addr} is in use by another process: stop it or pass --broker-addr HOST:PORT"
        )
        message = start_failure(tmp_path, [], {"KAFSCALE_BROKER_ADDR": addr})
        assert message == (
            f"{addr} is in use by another process: stop it or set KAFSCALE_BROKER_ADDR=HOST:PORT"
        )
        message = start_failure(tmp_path, ["--metrics-addr", addr])
        assert message == (
            f"{addr} is in use by another process: stop it or pass --metrics-addr HOST:PORT"
        )
        message = start_failure(tmp_path, ["--listeners", f"PLAINTEXT://{addr}"])
        assert message == (
            f"{addr} is in use by another process: stop it or change its port in --listeners"
        )


def test_an_unusable_data_dir_is_named(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    message = start_failure(tmp_path, ["--data-dir", str(a_file / "data")])
    assert message == (
        f"--data-dir {a_file / 'data'} cannot be used (Not a directory): pass --data-dir DIR "
        "naming a directory this user can write to"
    )


def test_missing_tls_files_are_named(tmp_path):
    missing = tmp_path / "missing.pem"
    args = ["--listeners", "SSL://127.0.0.1:0", "--ssl-certfile", str(missing)]
    message = start_failure(tmp_path, [*args, "--ssl-keyfile", str(missing)])
    assert message == (
        f"--ssl-certfile {missing} cannot be read (No such file or directory): pass "
        "--ssl-certfile PATH naming a readable PEM file"
    )
    message = start_failure(
        tmp_path,
        [],
        {
            "KAFSCALE_LISTENERS": "SSL://127.0.0.1:0",
            "KAFSCALE_SSL_CERTFILE": str(missing),
            "KAFSCALE_SSL_KEYFILE": str(missing),
            "KAFSCALE_DATA_DIR": str(tmp_path / "data"),
        },
    )
    assert message.startswith(f"KAFSCALE_SSL_CERTFILE {missing} cannot be read"), message
    assert message.endswith("set KAFSCALE_SSL_CERTFILE=PATH naming a readable PEM file"), message
