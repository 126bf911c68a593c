"""Settings: precedence, parsing, validation messages. No Rust extension needed."""

from __future__ import annotations

import ast
import dataclasses
import socket
from pathlib import Path

import pytest

from kafscale.config import (
    CONTROL_PLANE_SETTINGS,
    LISTENER_SETTINGS,
    SHORTHAND_SETTINGS,
    Settings,
    SettingsError,
    env_var,
    flag,
    load_settings,
)

MIB = 1024 * 1024
PYI = Path(__file__).resolve().parents[2] / "python" / "kafscale" / "_core.pyi"


def load(argv: list[str] | None = None, **env: str) -> Settings:
    return load_settings(argv or [], env)


def error_of(argv: list[str] | None = None, **env: str) -> str:
    with pytest.raises(SettingsError) as info:
        load(argv, **env)
    return str(info.value)


def test_defaults() -> None:
    s = load()
    assert s.broker_addr == "127.0.0.1:9092"
    assert (s.broker_host, s.broker_port, s.broker_id) == ("127.0.0.1", 9092, 0)
    assert s.data_dir == "./kafscale-data"
    assert (s.s3_bucket, s.s3_region, s.s3_endpoint) == (None, None, None)
    assert s.s3_namespace == "default"
    assert s.use_memory_s3 is False
    assert s.segment_bytes == 4 * MIB
    assert s.flush_interval_ms == 250
    assert s.flush_mode == "interval"
    assert s.cache_bytes == 256 * MIB
    assert s.readahead_segments == 2
    assert s.auto_create_topics is True
    assert s.default_partitions == 1
    assert s.max_request_bytes == 100 * MIB
    assert s.max_message_bytes == 1 * MIB
    assert (s.log_level, s.log_format) == ("info", "text")


def test_fields_match_core_contract() -> None:
    """Settings carry exactly the attributes _core.BrokerSettings declares, in its order: the
    listener settings first (the core reads them as the derived listener_specs and tls), then
    the shorthands (read through the settings they set), the settings only the Python control
    plane reads last."""
    tree = ast.parse(PYI.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BrokerSettings")
    # read-only properties: the core only reads them (and Settings is frozen)
    declared = [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]
    assert declared[:2] == ["listener_specs", "tls"]
    # last: how the user named each setting they gave (for the core's messages)
    assert declared[-1] == "setting_names"
    names = [f.name for f in dataclasses.fields(Settings)]
    core = declared[2:-1]
    assert names == [*LISTENER_SETTINGS, *SHORTHAND_SETTINGS, *core, *CONTROL_PLANE_SETTINGS]


def test_flag_beats_env_beats_default() -> None:
    assert load(KAFSCALE_BROKER_ID="3").broker_id == 3
    assert load(["--broker-id", "5"], KAFSCALE_BROKER_ID="3").broker_id == 5
    assert load(["--data-dir=/tmp/x"], KAFSCALE_DATA_DIR="/tmp/y").data_dir == "/tmp/x"


def test_empty_env_counts_as_unset() -> None:
    s = load(KAFSCALE_S3_BUCKET="", KAFSCALE_BROKER_ID="", KAFSCALE_USE_MEMORY_S3="")
    assert (s.s3_bucket, s.broker_id, s.use_memory_s3) == (None, 0, False)


def test_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        load(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # undo argparse line wrapping
    for f in dataclasses.fields(Settings):
        assert flag(f.name) in out
        assert env_var(f.name) in out
    assert "AWS_ACCESS_KEY_ID" in out
    assert "default: 4MiB" in out
    assert "--no-auto-create-topics" in out


def test_the_configuration_page_lists_every_setting() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    # a row's first cell names one flag or several: "`--ssl-certfile`, `--ssl-keyfile`"
    first_cells = [line.split("|")[1] for line in page.splitlines() if line.startswith("| `--")]
    named = {name.strip().strip("`") for cell in first_cells for name in cell.split(",")}
    missing = [flag(f.name) for f in dataclasses.fields(Settings) if flag(f.name) not in named]
    assert not missing, f"settings without a row in docs/configuration.md's table: {missing}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1048576", MIB), ("64MiB", 64 * MIB), ("4 kib", 4096), ("1GiB", 1024 * MIB), ("7B", 7)],
)
def test_sizes(text: str, expected: int) -> None:
    assert load(KAFSCALE_CACHE_BYTES=text).cache_bytes == expected


@pytest.mark.parametrize("text", ["4MB", "abc", "1.5MiB", "-1", ""])
def test_bad_size_names_setting(text: str) -> None:
    message = error_of(["--segment-bytes", text])
    assert "--segment-bytes" in message
    assert "KAFSCALE_SEGMENT_BYTES" in message
    assert "MiB" in message  # says what to write instead


def test_unparsable_number_from_env_names_both() -> None:
    message = error_of(KAFSCALE_FLUSH_INTERVAL_MS="soon")
    assert "KAFSCALE_FLUSH_INTERVAL_MS" in message
    assert "--flush-interval-ms" in message
    assert "'soon'" in message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("segment_bytes", "0"),
        ("cache_bytes", "0"),
        ("max_request_bytes", "0"),
        ("max_message_bytes", "0"),
        ("flush_interval_ms", "0"),
        ("flush_interval_ms", "-5"),
        ("flush_mode", "asap"),
        ("default_partitions", "0"),
        ("readahead_segments", "-1"),
        ("broker_id", "-1"),
        ("segment_bytes", "2GiB"),  # index positions are int32
    ],
)
def test_out_of_range(name: str, value: str) -> None:
    message = error_of(**{env_var(name): value})
    assert env_var(name) in message
    assert flag(name) not in message  # named as the user gave it
    message = error_of([flag(name), value])
    assert flag(name) in message
    assert env_var(name) not in message


def test_flush_mode_is_read_in_any_case() -> None:
    assert load(KAFSCALE_FLUSH_MODE="Arrival").flush_mode == "arrival"


def test_readahead_zero_allowed() -> None:
    assert load(KAFSCALE_READAHEAD_SEGMENTS="0").readahead_segments == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", True),
        ("TRUE", True),
        ("yes", True),
        ("On", True),
        ("0", False),
        ("false", False),
        ("NO", False),
        ("off", False),
    ],
)
def test_booleans(text: str, expected: bool) -> None:
    assert load(KAFSCALE_USE_MEMORY_S3=text).use_memory_s3 is expected
    assert load(KAFSCALE_AUTO_CREATE_TOPICS=text).auto_create_topics is expected


def test_bad_boolean() -> None:
    message = error_of(KAFSCALE_AUTO_CREATE_TOPICS="maybe")
    assert "KAFSCALE_AUTO_CREATE_TOPICS" in message
    assert "--auto-create-topics" in message
    assert "true/false" in message


def test_boolean_flags() -> None:
    s = load(["--no-auto-create-topics"], KAFSCALE_AUTO_CREATE_TOPICS="1")
    assert s.auto_create_topics is False
    assert load(["--use-memory-s3"]).use_memory_s3 is True


def test_log_level() -> None:
    assert load(["--log-level", "DEBUG"]).log_level == "debug"
    assert load(KAFSCALE_LOG_LEVEL="warning").log_level == "warn"
    message = error_of(KAFSCALE_LOG_LEVEL="loud")
    assert "KAFSCALE_LOG_LEVEL" in message and "trace, debug, info, warn, error" in message


def test_log_format() -> None:
    assert load(KAFSCALE_LOG_FORMAT="JSON").log_format == "json"
    assert "KAFSCALE_LOG_FORMAT" in error_of(KAFSCALE_LOG_FORMAT="xml")


def test_s3_complete() -> None:
    s = load(
        KAFSCALE_S3_BUCKET="b",
        KAFSCALE_S3_REGION="us-east-1",
        KAFSCALE_S3_ENDPOINT="http://127.0.0.1:9000",
    )
    assert (s.s3_bucket, s.s3_region, s.s3_endpoint) == ("b", "us-east-1", "http://127.0.0.1:9000")


def test_bucket_without_region() -> None:
    message = error_of(KAFSCALE_S3_BUCKET="b")
    assert "KAFSCALE_S3_REGION" in message and "KAFSCALE_S3_BUCKET" in message


@pytest.mark.parametrize(
    "env",
    [{"KAFSCALE_S3_REGION": "eu-west-1"}, {"KAFSCALE_S3_ENDPOINT": "http://localhost:9000"}],
)
def test_region_or_endpoint_without_bucket(env: dict[str, str]) -> None:
    message = error_of(**env)
    assert "KAFSCALE_S3_BUCKET" in message
    assert next(iter(env)) in message


def test_memory_s3_with_bucket_is_a_contradiction() -> None:
    message = error_of(["--use-memory-s3"], KAFSCALE_S3_BUCKET="b", KAFSCALE_S3_REGION="r")
    assert "--use-memory-s3" in message and "KAFSCALE_S3_BUCKET" in message
    assert "choose one" in message


def test_messages_name_settings_as_given() -> None:
    """A hint names a setting the way the user gave the others: flags for flags, variables
    for variables."""
    message = error_of(["--s3-bucket", "b"])
    assert message.startswith("--s3-bucket is set but --s3-region is not"), message
    assert "e.g. --s3-region us-east-1" in message and "KAFSCALE_" not in message
    message = error_of(KAFSCALE_S3_BUCKET="b")
    assert message.startswith("KAFSCALE_S3_BUCKET is set but KAFSCALE_S3_REGION is not")
    assert "e.g. KAFSCALE_S3_REGION=us-east-1" in message and "--" not in message
    s = load(["--s3-bucket", "b"], KAFSCALE_S3_REGION="r")
    assert s.setting_names == {"s3_bucket": "--s3-bucket", "s3_region": "KAFSCALE_S3_REGION"}


def test_endpoint_must_be_url() -> None:
    message = error_of(KAFSCALE_S3_BUCKET="b", KAFSCALE_S3_REGION="r", KAFSCALE_S3_ENDPOINT="minio")
    assert "KAFSCALE_S3_ENDPOINT" in message and "http://" in message


@pytest.mark.parametrize(
    "addr", ["localhost", "host:port", ":9092", "::1:9092", "h:70000", "[::1]9092", "a b:1"]
)
def test_bad_broker_addr(addr: str) -> None:
    message = error_of(["--broker-addr", addr])
    assert "--broker-addr" in message and "KAFSCALE_BROKER_ADDR" not in message


def test_advertised_defaults_follow_listen_addr() -> None:
    s = load(["--broker-addr", "10.1.2.3:19092"])
    assert (s.broker_host, s.broker_port) == ("10.1.2.3", 19092)
    s = load(["--broker-addr", "[::1]:9093"])
    assert (s.broker_host, s.broker_port) == ("::1", 9093)
    s = load(["--broker-addr", "127.0.0.1:0"])
    assert s.broker_port == 0  # "advertise the port actually bound"


@pytest.mark.parametrize("wildcard", ["0.0.0.0:9092", "[::]:9092"])
def test_wildcard_listen_advertises_hostname(wildcard: str) -> None:
    s = load(["--broker-addr", wildcard])
    assert s.broker_host == socket.gethostname()
    s = load(["--broker-addr", wildcard], KAFSCALE_BROKER_HOST="broker-0.kafscale")
    assert s.broker_host == "broker-0.kafscale"


def test_explicit_advertised_port() -> None:
    assert load(KAFSCALE_BROKER_PORT="19092").broker_port == 19092
    assert "KAFSCALE_BROKER_PORT" in error_of(KAFSCALE_BROKER_PORT="65536")


def test_advertised_host_with_port_is_rejected() -> None:
    message = error_of(KAFSCALE_BROKER_HOST="example.com:9092")
    assert "KAFSCALE_BROKER_HOST" in message and "KAFSCALE_BROKER_PORT" in message


def test_message_larger_than_request_is_rejected() -> None:
    message = error_of(KAFSCALE_MAX_MESSAGE_BYTES="2MiB", KAFSCALE_MAX_REQUEST_BYTES="1MiB")
    assert "KAFSCALE_MAX_MESSAGE_BYTES" in message and "KAFSCALE_MAX_REQUEST_BYTES" in message


def test_bad_namespace() -> None:
    assert "KAFSCALE_S3_NAMESPACE" in error_of(KAFSCALE_S3_NAMESPACE="/x/")


def test_unknown_flag() -> None:
    assert "--help" in error_of(["--brokr-addr", "x"])


def test_settings_are_frozen_and_validated_when_built_directly() -> None:
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.broker_id = 1  # type: ignore[misc]
    with pytest.raises(SettingsError, match="KAFSCALE_DEFAULT_PARTITIONS"):
        Settings(default_partitions=0)


# --- listeners ------------------------------------------------------------------------------


def test_without_listeners_one_plaintext_listener_on_the_broker_address() -> None:
    s = load(["--broker-addr", "0.0.0.0:9000", "--broker-host", "kafka.example"])
    assert [(x.name, x.bind, x.advertised_host, x.advertised_port) for x in s.listener_specs] == [
        ("PLAINTEXT", "0.0.0.0:9000", "kafka.example", 9000)
    ]
    assert s.tls is None


def test_listeners_advertise_their_own_host_or_the_broker_host_or_what_is_given() -> None:
    s = load(
        [
            "--listeners",
            "PLAINTEXT://127.0.0.1:9092, ssl://:9093",
            "--advertised-listeners",
            "PLAINTEXT://kafka.example:19092",
            "--broker-host",
            "node-1.example",
            "--ssl-certfile",
            "server.pem",
            "--ssl-keyfile",
            "server.key",
        ]
    )
    assert [(x.name, x.bind, x.advertised_host, x.advertised_port) for x in s.listener_specs] == [
        ("PLAINTEXT", "127.0.0.1:9092", "kafka.example", 19092),
        ("SSL", "0.0.0.0:9093", "node-1.example", 9093),
    ]
    assert s.tls is not None
    assert (s.tls.certfile, s.tls.client_auth, s.tls.reload_interval_ms) == (
        "server.pem",
        "none",
        10_000,
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--listeners", "PLAINTEXT://127.0.0.1"], "has no port number"),
        (["--listeners", "FOO://:9092"], "unknown listener 'FOO'"),
        (["--listeners", "SASL_SSL://:9092"], "SASL_SSL listener needs a certificate"),
        (["--sasl-enabled-mechanisms", "GSSAPI"], "GSSAPI and OAUTHBEARER are not supported"),
        (["--sasl-users-file", "/nonexistent/users"], "cannot be read"),
        (["--listeners", "SSL://:1,SSL://:2"], "named twice"),
        (
            ["--listeners", "PLAINTEXT://:1", "--advertised-listeners", "SSL://h:1"],
            "not in listeners",
        ),
        (
            ["--listeners", "PLAINTEXT://:1", "--advertised-listeners", "PLAINTEXT://0.0.0.0:1"],
            "host clients can reach",
        ),
        (["--listeners", "SSL://:9093"], "needs a certificate"),
        (["--ssl-client-auth", "required"], "needs --ssl-cafile"),
    ],
)
def test_listener_mistakes_are_explained(argv: list[str], expected: str) -> None:
    assert expected in error_of(argv)
