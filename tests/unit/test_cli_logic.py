"""The decisions of the kafscale CLI that need no broker: how segments must join up
(``segments verify``), where ``groups reset-offsets`` moves each partition, and how
``users`` takes its arguments and the password."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from kafscale.cli.errors import CliError
from kafscale.cli.kafka import read_command_config
from kafscale.cli.reset import Strategy, plan
from kafscale.cli.verify import chains, joins


@dataclass(frozen=True)
class Info:  # the fields of kafscale.segment.SegmentInfo that verify uses
    topic: str
    partition: int
    base_offset: int
    end_offset: int
    size: int = 100
    generation: int | None = None


@dataclass(frozen=True)
class Check:  # the contract of kafscale.segment.SegmentCheck
    object: str
    base_offset: int
    first_offset: int | None
    last_offset: int | None
    batches: int = 1
    records: int = 1
    problems: list = field(default_factory=list)


def segments(*spans: tuple[int, int | None, int | None]) -> tuple[list[Info], list[Check]]:
    """(base, first, last) per segment -> infos and checks."""
    infos = [Info("t", 0, base, 0) for base, _, _ in spans]
    checks = [
        Check(f"ns/t/0/segment-{base:020d}.kfs", base, first, last) for base, first, last in spans
    ]
    return infos, checks


def test_contiguous_segments_join():
    infos, checks = segments((0, 0, 9), (10, 10, 24), (25, 25, 25))
    assert joins("t", 0, infos, checks) == []


def test_a_partition_may_start_above_zero():
    infos, checks = segments((500, 500, 599), (600, 600, 650))
    assert joins("t", 0, infos, checks) == []


def test_gap_between_segments():
    infos, checks = segments((0, 0, 9), (20, 20, 29))
    (found,) = joins("t", 0, infos, checks)
    assert found.message.startswith("gap: offsets 10 to 19 missing between ns/t/0/segment-")
    assert (found.object, found.offset) == (checks[1].object, 10)


def test_overlap_between_segments():
    infos, checks = segments((0, 0, 9), (5, 5, 14))
    (found,) = joins("t", 0, infos, checks)
    assert found.message.startswith("overlap: the segment starts at offset 5")
    assert "holds offsets up to 9" in found.message


def test_first_record_after_the_base_offset():
    infos, checks = segments((0, 3, 9))
    (found,) = joins("t", 0, infos, checks)
    assert found.message.startswith("gap: offsets 0 to 2 missing at the start of the segment")


def test_first_record_before_the_base_offset():
    infos, checks = segments((10, 8, 19))
    (found,) = joins("t", 0, infos, checks)
    assert "base offset is 10 but its first record is at offset 8" in found.message


def test_unreadable_segments_are_not_joined():
    """A segment that could not be read (None) or held no readable batch (last None) gives
    no join finding of its own: its own problems are reported already."""
    infos, checks = segments((0, 0, 9), (10, None, None), (30, 30, 39))
    assert joins("t", 0, infos, [checks[0], None, checks[2]]) == []
    assert joins("t", 0, infos, checks) == []


def test_a_cleanings_segments_skip_offsets_and_are_checked_apart_from_compactions():
    """A compacted topic's cleaned segments may skip offsets (at their start, between them);
    for a minute after a cleaning the segments it replaced are listed too."""
    cleaned = [Info("t", 0, 0, 0, generation=7), Info("t", 0, 10, 0, generation=7)]
    replaced = [Info("t", 0, 0, 0), Info("t", 0, 10, 0), Info("t", 0, 20, 0)]
    checks = {
        (0, 7): Check("c0", 0, 3, 8),
        (10, 7): Check("c10", 10, 15, 15),
        (0, None): Check("s0", 0, 0, 9),
        (10, None): Check("s10", 10, 10, 19),
        (20, None): Check("s20", 20, 20, 20),
    }
    infos = sorted(cleaned + replaced, key=lambda i: i.base_offset)
    listed = [checks[(i.base_offset, i.generation)] for i in infos]
    for chain, chain_checks in chains(infos, listed):
        assert joins("t", 0, chain, chain_checks) == [], chain
    overlapping = [Check("c0", 0, 3, 12), Check("c10", 10, 15, 15)]
    (found,) = joins("t", 0, cleaned, overlapping)
    assert "overlap" in found.message and found.offset == 10


# ---------------------------------------------------------------------------------------------
# reset-offsets

TPS = [("t", 0), ("t", 1)]
EARLIEST = {("t", 0): 5, ("t", 1): 0}
LATEST = {("t", 0): 50, ("t", 1): 10}


def news(strategy: Strategy, current=None, by_time=None) -> list[tuple[int, str | None]]:
    return [
        (t.new_offset, t.note)
        for t in plan(strategy, TPS, current or {}, EARLIEST, LATEST, by_time)
    ]


def test_earliest_and_latest():
    assert news(Strategy("earliest")) == [(5, None), (0, None)]
    assert news(Strategy("latest")) == [(50, None), (10, None)]


def test_to_offset_is_clamped_into_the_log_with_a_note():
    assert news(Strategy("offset", 2)) == [
        (5, "t/0: offset 2 is outside the log [5, 50]: using the log start 5"),
        (2, None),
    ]
    assert news(Strategy("offset", 30)) == [
        (30, None),
        (10, "t/1: offset 30 is outside the log [0, 10]: using the log end 10"),
    ]


def test_shift_by_moves_from_the_committed_offset():
    current = {("t", 0): 20, ("t", 1): 9}
    assert news(Strategy("shift", 3), current) == [
        (23, None),
        (10, "t/1: offset 12 is outside the log [0, 10]: using the log end 10"),
    ]
    assert [o for o, _ in news(Strategy("shift", -18), current)] == [5, 0]


def test_shift_by_needs_a_committed_offset():
    with pytest.raises(CliError, match="t/1 has no committed offset to shift from"):
        plan(Strategy("shift", 1), TPS, {("t", 0): 7}, EARLIEST, LATEST)


def test_datetime_later_than_every_record_is_the_end():
    by_time = {("t", 0): 17, ("t", 1): -1}
    assert news(Strategy("datetime", 1_700_000_000_000), by_time=by_time) == [
        (17, None),
        (10, None),
    ]


def test_command_config_reads_client_properties(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(
        "# TLS to the SSL listener\n"
        "security.protocol=SSL\n"
        "ssl.ca.location = /etc/kafscale/ca.pem\n"
        "! a comment too\n"
        "ssl.key.location: /etc/kafscale/client.key\n"
    )
    assert read_command_config(str(path)) == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/kafscale/ca.pem",
        "ssl.key.location": "/etc/kafscale/client.key",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("security.protocol SSL\n", "line 1"),
        ("ok=1\nbootstrap.servers=elsewhere:9092\n", "set by the command itself"),
    ],
)
def test_command_config_mistakes_are_explained(tmp_path, text, expected):
    path = tmp_path / "client.properties"
    path.write_text(text)
    with pytest.raises(argparse.ArgumentTypeError, match=expected):
        read_command_config(str(path))
    with pytest.raises(argparse.ArgumentTypeError, match="cannot read"):
        read_command_config(str(tmp_path / "missing.properties"))


# ---------------------------------------------------------------------------------------------
# users: arguments and passwords (nothing here reaches a broker)


def test_users_arguments():
    from kafscale.cli import build_parser
    from kafscale.cli.users import DEFAULT_ITERATIONS

    parser = build_parser()
    args = parser.parse_args(["users", "set", "bob", "--mechanism", "SCRAM-SHA-512"])
    assert (args.name, args.mechanism, args.iterations) == ("bob", "SCRAM-SHA-512", 8192)
    assert DEFAULT_ITERATIONS == 8192
    args = parser.parse_args(
        ["users", "set", "bob", "--mechanism", "SCRAM-SHA-256", "--iterations", "4096"]
    )
    assert (args.mechanism, args.iterations) == ("SCRAM-SHA-256", 4096)
    assert parser.parse_args(["users", "delete", "bob"]).mechanism is None
    args = parser.parse_args(["users", "delete", "bob", "--mechanism", "SCRAM-SHA-256"])
    assert args.mechanism == "SCRAM-SHA-256"
    assert parser.parse_args(["users", "list", "-o", "json"]).output == "json"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["users", "set", "bob"], "--mechanism"),
        (["users", "set", "bob", "--mechanism", "PLAIN"], "invalid choice"),
        (["users", "set", "bob", "--mechanism", "SCRAM-SHA-256", "--iterations", "0"], "0"),
        (["users", "set", "bob", "--mechanism", "SCRAM-SHA-256", "--password", "x"], "--password"),
        (["users", "set", "", "--mechanism", "SCRAM-SHA-256"], "not a user name"),
        (["users", "delete", " bob", "--mechanism", "SCRAM-SHA-256"], "not a user name"),
        (["users", "delete"], "NAME"),
    ],
)
def test_users_argument_mistakes_are_usage_errors(capsys, argv, expected):
    from kafscale.cli import main

    assert main(argv) == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(
    ("piped", "password"),
    [
        ("s3cret\n", "s3cret"),
        ("s3cret\r\n", "s3cret"),
        ("s3cret", "s3cret"),
        (" with blanks \n", " with blanks "),
        ("p=a:s,s\n", "p=a:s,s"),
    ],
)
def test_password_from_a_pipe_is_its_one_line(piped, password):
    from kafscale.cli.users import password_from_pipe

    assert password_from_pipe(piped) == password


@pytest.mark.parametrize(
    ("piped", "expected"), [("", "no password"), ("\n", "no password"), ("a\nb\n", "more than")]
)
def test_password_from_a_pipe_mistakes_are_explained(piped, expected):
    from kafscale.cli.users import password_from_pipe

    with pytest.raises(CliError, match=expected) as failure:
        password_from_pipe(piped)
    assert failure.value.hint


class _Terminal:
    def isatty(self) -> bool:
        return True

    def read(self) -> str:  # a terminal's password never comes from here
        raise AssertionError("read the terminal instead of prompting")


@pytest.mark.parametrize(
    ("typed", "outcome"),
    [
        (["pw", "pw"], "pw"),
        (["pw", "other"], "differ"),
        (["", ""], "empty"),
        ([EOFError()], "no password"),
    ],
)
def test_password_at_a_terminal_is_asked_twice(monkeypatch, typed, outcome):
    import getpass
    import sys

    from kafscale.cli.users import read_password

    answers = list(typed)
    prompts = []

    def fake_getpass(prompt: str = "") -> str:
        prompts.append(prompt)
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(sys, "stdin", _Terminal())
    monkeypatch.setattr(getpass, "getpass", fake_getpass)
    if outcome == "pw":
        assert read_password("bob") == "pw"
        assert len(prompts) == 2 and all("bob" in p for p in prompts)
    else:
        with pytest.raises(CliError, match=outcome):
            read_password("bob")


def test_users_set_reads_the_password_before_connecting(monkeypatch, capsys):
    """An empty pipe fails at once with one error line (no broker at the default address is
    ever asked: the command stops before connecting)."""
    import io
    import sys

    from kafscale.cli import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    argv = ["users", "set", "bob", "--mechanism", "SCRAM-SHA-256"]
    assert main([*argv, "--bootstrap-server", "127.0.0.1:1", "--timeout", "0.1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kafscale: error: standard input holds no password")


def test_credential_rows_one_per_user_and_mechanism():
    from types import SimpleNamespace

    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism

    from kafscale.cli.users import credential_rows

    described = {
        "zed": SimpleNamespace(
            user="zed",
            scram_credential_infos=[ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)],
        ),
        "amy": SimpleNamespace(
            user="amy",
            scram_credential_infos=[
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 16384),
            ],
        ),
    }
    assert credential_rows(described) == [
        {"user": "amy", "mechanism": "SCRAM-SHA-256", "iterations": 16384},
        {"user": "amy", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
        {"user": "zed", "mechanism": "SCRAM-SHA-512", "iterations": 8192},
    ]
