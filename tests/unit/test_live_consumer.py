"""The fault tests' live consumer replaces a librdkafka consumer that stopped delivering while
behind (librdkafka can deadlock inside itself when a broker leaves: see ``load_clients``), and
gives up with an error when that keeps happening."""

from __future__ import annotations

import json
import threading
import time

import pytest
from support import load_clients
from support.load_clients import LiveConsumer


class Deadlocked:
    """A consumer that delivers nothing; its close() never returns, as a deadlocked one's."""

    def __init__(self, consumer: LiveConsumer) -> None:
        self.live = consumer
        self.closing = threading.Event()

    def poll(self, timeout: float) -> None:
        # its last statistics: partition 0 has data up to offset 5, none seen yet
        stats = {"topics": {"t": {"partitions": {"0": {"hi_offset": 5}}}}}
        self.live._note_stats(json.dumps(stats))
        time.sleep(timeout)

    def close(self) -> None:
        self.closing.set()
        threading.Event().wait()  # never returns


@pytest.fixture
def fast_stalls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_clients, "STALL_S", 0.2)


def run_deadlocked(live: LiveConsumer, until) -> list[Deadlocked]:
    """Runs ``live`` over consumers that deliver nothing until ``until(made)`` holds (10 s at
    most); the consumers it made."""
    made: list[Deadlocked] = []

    def consumer() -> Deadlocked:
        made.append(Deadlocked(live))
        return made[-1]

    live._consumer = consumer  # type: ignore[method-assign]
    live.start()
    deadline = time.monotonic() + 10
    while not until(made) and time.monotonic() < deadline:
        time.sleep(0.05)
    live._stop.set()
    return made


def test_a_consumer_that_delivers_nothing_while_behind_is_replaced(fast_stalls: None) -> None:
    live = LiveConsumer("127.0.0.1:1", "t", 1)
    made = run_deadlocked(live, lambda made: len(made) >= 2)
    assert len(made) >= 2, "the stalled consumer was not replaced"
    assert made[0].closing.wait(5), "the stalled consumer was not closed"
    assert live.stalls and not live.errors


def test_a_consumer_stalling_again_and_again_is_an_error(
    fast_stalls: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load_clients, "MAX_STALLS", 1)
    live = LiveConsumer("127.0.0.1:1", "t", 1)
    run_deadlocked(live, lambda made: bool(live.errors))
    assert live.errors[0] == "live consumer stalled 2 times"


def test_a_caught_up_consumer_with_nothing_to_read_is_kept(fast_stalls: None) -> None:
    live = LiveConsumer("127.0.0.1:1", "t", 1)
    live.seen[0].append(load_clients.Seen(4, b"v"))  # next offset 5: caught up
    assert not live._stalled()
