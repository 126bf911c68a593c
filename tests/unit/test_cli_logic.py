"""The decisions of the kafscale CLI that need no broker: how segments must join up
(``segments verify``) and where ``groups reset-offsets`` moves each partition."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from kafscale.cli.errors import CliError
from kafscale.cli.kafka import read_command_config
from kafscale.cli.reset import Strategy, plan
from kafscale.cli.verify import joins


@dataclass(frozen=True)
class Info:  # the fields of kafscale.segment.SegmentInfo that verify uses
    topic: str
    partition: int
    base_offset: int
    end_offset: int
    size: int = 100


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
    assert found.message.startswith("gap: offsets 10..19 missing between ns/t/0/segment-")
    assert (found.object, found.offset) == (checks[1].object, 10)


def test_overlap_between_segments():
    infos, checks = segments((0, 0, 9), (5, 5, 14))
    (found,) = joins("t", 0, infos, checks)
    assert found.message.startswith("overlap: the segment starts at offset 5")
    assert "holds offsets up to 9" in found.message


def test_first_record_after_the_base_offset():
    infos, checks = segments((0, 3, 9))
    (found,) = joins("t", 0, infos, checks)
    assert found.message.startswith("gap: offsets 0..2 missing at the start of the segment")


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
