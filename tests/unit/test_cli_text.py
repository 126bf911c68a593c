"""What the kafscale CLI prints and parses, without a broker: argument types, tables, record
bytes, the sentences for librdkafka's errors, and progress on a stderr that is no terminal."""

from __future__ import annotations

import argparse
import datetime as dt
import io

import pytest
from confluent_kafka import KafkaError

from kafscale.cli import args as cli_args
from kafscale.cli.kafka import Kafka, check_bootstrap
from kafscale.cli.output import human_bytes, plural, print_table
from kafscale.cli.progress import Progress
from kafscale.cli.segments import json_bytes, text_bytes


def test_timestamps():
    assert cli_args.timestamp_ms("2025-01-31T12:00:00Z") == 1_738_324_800_000
    assert cli_args.timestamp_ms("2025-01-31T14:00:00.250+02:00") == 1_738_324_800_250
    naive = dt.datetime(2025, 1, 31, 12).astimezone()  # no zone: local time, as Kafka's tool
    assert cli_args.timestamp_ms("2025-01-31T12:00:00") == int(naive.timestamp() * 1000)
    with pytest.raises(argparse.ArgumentTypeError, match="ISO 8601"):
        cli_args.timestamp_ms("yesterday")


def test_topic_partitions_and_key_values():
    assert cli_args.topic_partitions("orders") == ("orders", None)
    assert cli_args.topic_partitions("orders:2,0,2") == ("orders", [0, 2])
    for bad in ("orders:", "orders:a", "orders:-1", ":1"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli_args.topic_partitions(bad)
    assert cli_args.key_value(" retention.ms = 60000 ") == ("retention.ms", "60000")
    assert cli_args.key_value("a=b=c") == ("a", "b=c")
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        cli_args.key_value("retention.ms")


def test_bootstrap_addresses():
    assert check_bootstrap("127.0.0.1:9092,kafka-2:19092") == "127.0.0.1:9092,kafka-2:19092"
    assert check_bootstrap("[::1]:9092") == "[::1]:9092"
    for bad in ("localhost", "host:", ":9092", "host:99999", "host:port"):
        with pytest.raises(argparse.ArgumentTypeError, match="HOST:PORT"):
            check_bootstrap(bad)


def test_tables_and_sizes():
    out = io.StringIO()
    print_table(["TOPIC", "PARTITIONS"], [["orders", 3], ["a-much-longer-name", None]], out)
    assert out.getvalue().splitlines() == [
        "TOPIC               PARTITIONS",
        "orders              3",
        "a-much-longer-name  -",
    ]
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 GiB",
    ]
    assert (plural(1, "batch", "batches"), plural(2, "batch", "batches")) == (
        "1 batch",
        "2 batches",
    )


def test_record_bytes():
    assert text_bytes(None) == "null"
    assert text_bytes(b"") == '""'
    assert text_bytes('h\u00e9llo\n"x"'.encode()) == '"h\u00e9llo\\n\\"x\\""'
    assert text_bytes(b"\x00\x01\xff") == "hex:0001ff"
    assert text_bytes(b"bell\x07") == "hex:62656c6c07"
    assert json_bytes(None, "key") == {"key": None}
    assert json_bytes(b"abc", "key") == {"key": "abc"}
    assert json_bytes(b"\xff\x00", "value") == {"value": "/wA=", "value_encoding": "base64"}


@pytest.fixture
def kafka():
    # no connection is made until a request is sent
    return Kafka("127.0.0.1:9", timeout=7)


def test_error_sentences(kafka):
    unsupported = KafkaError(KafkaError._UNSUPPORTED_FEATURE, "needs DescribeCluster")
    err = kafka.failure(unsupported, "describing the cluster")
    assert "brokers at 127.0.0.1:9 do not support describing the cluster" in str(err)
    assert "ApiVersions" in str(err)
    timeout = KafkaError(KafkaError.REQUEST_TIMED_OUT, "Broker: Request timed out")
    err = kafka.failure(timeout, "deleting topic", "orders")
    assert "no answer from the brokers at 127.0.0.1:9 within 7s while deleting topic orders" in (
        str(err)
    )
    assert "--timeout" in str(err)
    down = KafkaError(KafkaError._TRANSPORT, "Connection refused")
    assert str(kafka.failure(down, "x")).startswith(
        "cannot reach the Kafka bootstrap server 127.0.0.1:9 (Connection refused); check "
        "--bootstrap-server"
    )
    exists = KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "topic 'o' already exists")
    err = kafka.failure(exists, "creating topic", "o")
    assert (str(err), err.code) == (
        "creating topic o failed: topic 'o' already exists; pick another name, or add "
        "--if-not-exists",
        KafkaError.TOPIC_ALREADY_EXISTS,
    )


def test_progress_lines_when_stderr_is_no_terminal(monkeypatch):
    """Whole lines (never a carriage return): at most one every LINE_EVERY_S, one at the end;
    results go to their own stream."""
    monkeypatch.setattr("kafscale.cli.progress.LINE_EVERY_S", 0.0)
    err, out = io.StringIO(), io.StringIO()
    progress = Progress("verify", 2, 3072, stream=err)
    progress.advance(1024, "t/0@0")
    progress.write("PROBLEM t/0 ...", file=out)
    progress.advance(2048, "t/0@10")
    progress.close()
    lines = err.getvalue().splitlines()
    assert "\r" not in err.getvalue()
    assert lines[0] == "verify: 1/2 segments, 1.0 KiB of 3.0 KiB (33%), at t/0@0"
    assert lines[-1].startswith("verify: 2/2 segments, 3.0 KiB of 3.0 KiB (100%), done in ")
    assert out.getvalue() == "PROBLEM t/0 ...\n"
    quiet = io.StringIO()
    silent = Progress("verify", 1, 1, enabled=False, stream=quiet)
    silent.advance(1, "t/0@0")
    silent.close()
    assert quiet.getvalue() == ""
