"""Connection and memory limits over raw sockets: caps on connections, idle and frame-read
timeouts, file descriptors freed when a long-polling client goes, bytes in flight bounded
(partial frames, unread responses), and Fetch answers bounded (duplicate partitions,
fetch_max_bytes). Figures are read from /proc of the broker process; nothing is timed: each
check polls with a generous deadline."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import unique

MIB = 1024 * 1024
DEADLINE = 60.0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def wait_until(condition, message, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message()
        time.sleep(0.1)


def max_rss_over(pid: int, seconds: float) -> int:
    """The highest RSS seen while sampling for ``seconds``: passes only if no sample is over
    the bound the caller checks, so a slow broker cannot make it fail wrongly."""
    highest = rss_bytes(pid)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        highest = max(highest, rss_bytes(pid))
        time.sleep(0.1)
    return highest


def is_open(conn: kw.RawConnection) -> bool:
    try:
        return kw.api_versions(conn).error_code == kw.NONE
    except (OSError, kw.ConnectionClosed):
        return False


def open_conn(broker, **kwargs) -> kw.RawConnection:
    return kw.RawConnection.to(broker.bootstrap, timeout=30, **kwargs)


def open_admitted(broker, **kwargs) -> kw.RawConnection:
    """A connection the broker took, once places freed by earlier ones (the start-up probe's,
    say) are free again: the broker counts a connection until it has seen it close."""
    deadline = time.monotonic() + DEADLINE
    while True:
        conn = open_conn(broker, **kwargs)
        if is_open(conn):
            return conn
        conn.close()
        assert time.monotonic() < deadline, "no connection was admitted"
        time.sleep(0.1)


def batch_of(size: int, tag: bytes = b"v") -> bytes:
    return sf.build_record_batch([(None, tag * size, [])])


def produce_batches(broker, topic: str, partition: int, batches: int, size: int) -> None:
    with open_conn(broker) as conn:
        for i in range(batches):
            res = kw.produce(conn, topic, partition, batch_of(size, b"%d" % (i % 10)))
            assert res.error_code == kw.NONE, res


def send_nonblocking(socks: list[socket.socket], payloads: list[bytes]) -> int:
    """Sends what the peers take without blocking on any, until all is sent or nothing more
    goes out for 2 s (the broker stopped reading); returns bytes sent in all."""
    sent = [0] * len(socks)
    for s in socks:
        s.setblocking(False)
    last_progress = time.monotonic()
    while time.monotonic() - last_progress < 2 and any(
        n < len(p) for n, p in zip(sent, payloads, strict=True)
    ):
        progressed = False
        for i, s in enumerate(socks):
            if sent[i] < len(payloads[i]):
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    n = s.send(payloads[i][sent[i] : sent[i] + 256 * 1024])
                    sent[i] += n
                    progressed = progressed or n > 0
        if progressed:
            last_progress = time.monotonic()
        else:
            time.sleep(0.05)
    return sum(sent)


# ---------------------------------------------------------------------------------------------
# File descriptors and connection caps


def test_clients_closing_during_a_long_poll_fetch_leak_no_descriptors(broker):
    """connect -> Fetch (10 minute max wait on an empty partition) -> close, 300 times: the
    broker cancels each waiting Fetch when its client goes and closes the socket, instead of
    keeping it in CLOSE-WAIT until the max wait ends."""
    topic = unique("long-poll")
    kw.ensure_topic(broker.bootstrap, topic)
    baseline = fd_count(broker.pid)
    for _ in range(300):
        with open_conn(broker) as conn:
            conn.send(kw.FETCH, 4, kw.fetch_body(topic, 0, 0, max_wait_ms=600_000))
    wait_until(
        lambda: fd_count(broker.pid) <= baseline + 20,
        lambda: f"{fd_count(broker.pid)} descriptors open, {baseline} before the cycles",
    )
    with open_conn(broker) as conn:  # a live long poll still answers when data comes
        conn.send(kw.FETCH, 4, kw.fetch_body(topic, 0, 0, max_wait_ms=30_000))
        produce_batches(broker, topic, 0, 1, 10)
        _, r = conn.recv_response()
        assert kw.parse_fetch_v4(r)[(topic, 0)].high_watermark == 1


def test_connections_past_the_per_ip_cap_are_closed_and_the_others_keep_working(
    broker_factory,
):
    broker = broker_factory(["--max-connections-per-ip", "3"])
    kept = [open_admitted(broker) for _ in range(3)]
    with open_conn(broker) as extra:
        assert extra.wait_closed(), "a 4th connection from one address stayed open"
    assert all(is_open(c) for c in kept)
    with open_conn(broker, source_ip="127.0.0.2") as other_host:
        assert is_open(other_host), "the cap is per address"
    assert "KAFSCALE_MAX_CONNECTIONS_PER_IP" in broker.log_text()
    kept.pop().close()
    kept.append(open_admitted(broker))  # the closed one's place is free again
    for c in kept:
        c.close()


def test_connections_past_the_overall_cap_are_closed_and_logged_sparingly(broker_factory):
    broker = broker_factory(["--max-connections", "4", "--max-connections-per-ip", "100"])
    kept = [open_admitted(broker) for _ in range(4)]
    for _ in range(50):
        with open_conn(broker) as extra:
            assert extra.wait_closed(), "a connection past max_connections stayed open"
    assert all(is_open(c) for c in kept)
    warnings = [
        line for line in broker.log_text().splitlines() if "KAFSCALE_MAX_CONNECTIONS)" in line
    ]
    assert 1 <= len(warnings) < 10, warnings  # one per 10 s, not one per refusal
    for c in kept:
        c.close()


def test_open_file_limit_is_raised_and_logged(broker):
    line = next(x for x in broker.log_text().splitlines() if "open-file limit" in x)
    assert "soft=" in line and "hard=" in line, line
    with open(f"/proc/{broker.pid}/limits") as limits:
        row = next(x for x in limits if x.startswith("Max open files")).split()
    assert row[3] == row[4], f"soft limit {row[3]} not raised to the hard limit {row[4]}"


# ---------------------------------------------------------------------------------------------
# Timeouts


def test_an_idle_connection_is_closed_but_not_one_waiting_for_an_answer(broker_factory):
    broker = broker_factory(["--connections-max-idle-ms", "1000"])
    topic = unique("idle")
    kw.ensure_topic(broker.bootstrap, topic)
    with open_conn(broker) as waiting:
        # A Fetch waiting 3 s is owed an answer: the connection is not idle meanwhile.
        waiting.send(kw.FETCH, 4, kw.fetch_body(topic, 0, 0, max_wait_ms=3000))
        _, r = waiting.recv_response()
        assert kw.parse_fetch_v4(r)[(topic, 0)].error_code == kw.NONE
    with open_conn(broker) as idle:
        assert is_open(idle)
        assert idle.wait_closed(timeout=DEADLINE), "an idle connection stayed open"


def test_a_partial_frame_is_dropped_after_the_read_timeout(broker_factory):
    broker = broker_factory(["--request-read-timeout-ms", "500"])
    with open_conn(broker) as bystander, open_conn(broker) as slow:
        slow.send_raw(struct.pack(">i", 1000) + kw.request_header(kw.METADATA, 1, 1, "t", False))
        assert slow.wait_closed(timeout=DEADLINE), "a stalled frame kept its connection"
        assert is_open(bystander)
    assert "request_read_timeout_ms" in broker.log_text()


# ---------------------------------------------------------------------------------------------
# Bytes in flight


def test_partial_frames_declaring_100_mib_pin_only_the_budget(broker_factory):
    """100 connections each declare a 100 MiB request and send 2 MiB of it: the broker reads
    no more than its budget of bytes in flight instead of 200 MB. The stalled frames hold the
    broker-wide budget (new connections wait) until request_read_timeout_ms drops them: a
    client that closed with bytes still unsent looks just like a slow one."""
    broker = broker_factory(
        [
            "--max-request-bytes",
            "128MiB",
            "--connection-max-inflight-bytes",
            "1MiB",
            "--queued-max-request-bytes",
            "8MiB",
            "--request-read-timeout-ms",
            "20000",
        ]
    )
    baseline = rss_bytes(broker.pid)
    header = struct.pack(">i", 100 * MIB) + kw.request_header(kw.PRODUCE, 3, 1, "big", False)
    payload = header + b"\0" * (2 * MIB)
    conns = [open_conn(broker) for _ in range(100)]
    try:
        sent = send_nonblocking([c.sock for c in conns], [payload] * len(conns))
        assert sent > 50 * MIB, f"only {sent} bytes could be sent"
        growth = max_rss_over(broker.pid, 5) - baseline
        assert growth < 48 * MIB, f"RSS grew by {growth / MIB:.0f} MiB"
    finally:
        for c in conns:
            c.close()
    open_admitted(broker).close()


def test_a_client_that_does_not_read_its_fetch_answers_stops_being_read(broker_factory):
    """3 connections pipeline 1,000 Fetches each of 8 MiB of data and read nothing: the
    broker answers one Fetch at a time per connection, within the budgets, and stops reading
    instead of holding thousands of answers."""
    broker = broker_factory(
        [
            "--connection-max-inflight-bytes",
            "2MiB",
            "--queued-max-request-bytes",
            "8MiB",
        ]
    )
    topic = unique("unread")
    kw.ensure_topic(broker.bootstrap, topic)
    produce_batches(broker, topic, 0, 64, 128 * 1024)
    baseline = rss_bytes(broker.pid)
    fetches = b"".join(
        kw.frame(kw.request_header(kw.FETCH, 4, i, "greedy", False) + kw.fetch_body(topic, 0, 0))
        for i in range(1000)
    )
    conns = [open_conn(broker) for _ in range(3)]
    try:
        send_nonblocking([c.sock for c in conns], [fetches] * 3)
        growth = max_rss_over(broker.pid, 5) - baseline
        assert growth < 96 * MIB, f"RSS grew by {growth / MIB:.0f} MiB"
    finally:
        for c in conns:
            c.close()
    with open_conn(broker) as conn:
        fetched = kw.fetch(conn, topic, 0, 0, max_bytes=1 * MIB)
        assert fetched.error_code == kw.NONE and fetched.high_watermark == 64


# ---------------------------------------------------------------------------------------------
# Fetch answers


def test_a_partition_named_1000_times_is_answered_once(broker):
    """Like Kafka: one entry per partition, where it was first named, with the last
    entry's offset."""
    topic = unique("dup")
    kw.ensure_topic(broker.bootstrap, topic)
    produce_batches(broker, topic, 0, 8, 32 * 1024)
    entries = [(0, 0, 10 * MIB)] * 999 + [(0, 4, 10 * MIB)]
    body = kw.fetch_v4_body([(topic, entries)], max_bytes=50 * MIB)
    with open_conn(broker) as conn:
        answer = kw.parse_fetch_v4_entries(conn.request(kw.FETCH, 4, body))
    assert [(t, p) for t, p, _ in answer] == [(topic, 0)]
    records = answer[0][2].records
    assert len(records) < 200 * 1024, len(records)
    assert [b.base_offset for b in sf.iter_batches(records)] == [4, 5, 6, 7]


def test_fetch_max_bytes_caps_a_fetch_but_the_first_batch_comes_whole(broker_factory):
    broker = broker_factory(["--fetch-max-bytes", "64KiB", "--default-partitions", "4"])
    topic = unique("capped")
    kw.ensure_topic(broker.bootstrap, topic, 4)
    for partition in range(4):
        produce_batches(broker, topic, partition, 16, 8 * 1024)
    body = kw.fetch_v4_body([(topic, [(p, 0, 10 * MIB) for p in range(4)])], max_bytes=50 * MIB)
    with open_conn(broker) as conn:
        answer = kw.parse_fetch_v4_entries(conn.request(kw.FETCH, 4, body))
    total = sum(len(result.records or b"") for _, _, result in answer)
    assert 32 * 1024 <= total <= 64 * 1024, total
    big = unique("one-big-batch")
    kw.ensure_topic(broker.bootstrap, big)
    produce_batches(broker, big, 0, 1, 200 * 1024)
    with open_conn(broker) as conn:
        fetched = kw.fetch(conn, big, 0, 0, max_bytes=50 * MIB)
    assert len(fetched.records) > 200 * 1024  # larger than fetch_max_bytes, returned whole


@pytest.fixture(autouse=True)
def _linux_only():
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("reads /proc of the broker process")
