"""The rate limit of client-triggered log lines, on a clock that moves only when told to."""

from __future__ import annotations

import logging

import pytest

from kafscale.groups import limits
from kafscale.log_limit import LogLimit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_at_most_the_limit_a_second_then_the_count_of_those_suppressed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    limit = LogLimit("refusals", per_second=3, clock=clock)
    assert [limit.admit() for _ in range(5)] == [True, True, True, False, False]
    clock.now += 0.5
    assert not limit.admit()
    assert "suppressed" not in caplog.text
    clock.now += 0.5
    with caplog.at_level(logging.INFO, logger="kafscale.log_limit"):
        assert limit.admit()
    assert "suppressed 3 similar log lines (refusals)" in caplog.text
    assert [limit.admit() for _ in range(3)] == [True, True, False]


def test_refused_group_requests_do_not_flood_the_log(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = LogLimit("refused group requests", clock=lambda: 0.0)
    monkeypatch.setattr(limits, "_REFUSALS", frozen)
    with caplog.at_level(logging.WARNING, logger="kafscale.groups.limits"):
        for _ in range(1000):
            limits.log_refusal("g", "client", "it is refused")
    refused = [r for r in caplog.records if "refused a request" in r.getMessage()]
    assert len(refused) == 10
