"""Connection and memory limits over raw sockets: caps on connections, idle and frame-read
timeouts, file descriptors freed when a long-polling client goes, one descriptor per
connection (TLS ones too, handshake included), the operations endpoint's cap and clocks, bytes
in flight bounded (partial frames, unread responses) and shared fairly, frames before SASL
authentication capped, and Fetch answers bounded (duplicate partitions, fetch_max_bytes).
Figures are read from /proc of the broker process and its /metrics; nothing is timed: each
check polls with a generous deadline."""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time
import urllib.request
from pathlib import Path

import pytest
from support import kafka_wire as kw
from support import sasl_wire as sw
from support import segment_format as sf
from support.clients import unique
from support.procs import free_port, free_ports
from support.tls import Pki, make_pki

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
    goes out for 2 s (the broker stopped reading); returns bytes sent in all. A connection
    the broker closed (its partial request dropped for others) is done."""
    sent = [0] * len(socks)
    closed = [False] * len(socks)
    for s in socks:
        s.setblocking(False)
    last_progress = time.monotonic()
    while time.monotonic() - last_progress < 2 and any(
        n < len(p) and not c for n, p, c in zip(sent, payloads, closed, strict=True)
    ):
        progressed = False
        for i, s in enumerate(socks):
            if sent[i] < len(payloads[i]) and not closed[i]:
                try:
                    n = s.send(payloads[i][sent[i] : sent[i] + 256 * 1024])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:  # reset or broken pipe: the broker closed it
                    closed[i] = True
                    continue
                sent[i] += n
                progressed = progressed or n > 0
        if progressed:
            last_progress = time.monotonic()
        else:
            time.sleep(0.05)
    return sum(sent)


def metrics_sample(port: int, name: str) -> float:
    """One unlabelled sample of the broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def http_get(sock: socket.socket, path: str = "/healthz") -> bytes:
    """One keep-alive GET on an open socket; the response's status line and headers (the
    endpoint's probe bodies are a few bytes and come in the same segment)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: broker\r\n\r\n".encode())
    return sock.recv(65536)


def closed_by_peer(sock: socket.socket, timeout: float = DEADLINE) -> bool:
    """True once the peer closed ``sock`` (EOF or reset), reading and dropping what it sends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def produce_and_fetch(broker, topic: str) -> None:
    """The broker still serves: a produce is stored and fetched back."""
    with open_conn(broker) as conn:
        res = kw.produce(conn, topic, 0, batch_of(100))
        assert res.error_code == kw.NONE, res
        fetched = kw.fetch(conn, topic, 0, res.base_offset, max_bytes=1 * MIB)
        assert fetched.error_code == kw.NONE and fetched.high_watermark > res.base_offset


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
# The operations endpoint


def ops_broker(broker_factory, *flags: str):
    port = free_port()
    broker = broker_factory(["--metrics-addr", f"127.0.0.1:{port}", *flags])
    return broker, port


def test_operations_connections_are_capped_and_idle_ones_closed(broker_factory):
    """200 idle connections to the operations endpoint, whose cap is 4: the broker holds at
    most 4 of them (its descriptors say so), refuses the rest at once with a warning naming
    the setting, keeps serving produce and fetch meanwhile, and closes the idle ones it took
    once they have been idle for the idle timeout; then the endpoint answers again."""
    cap = 4
    broker, port = ops_broker(
        broker_factory,
        "--metrics-max-connections",
        str(cap),
        "--metrics-idle-timeout-ms",
        "2000",
    )
    topic = unique("ops-cap")
    kw.ensure_topic(broker.bootstrap, topic)
    baseline = fd_count(broker.pid)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(200)]
    try:
        # (Descriptors of segment files and the like come and go: a margin for them.)
        assert fd_count(broker.pid) <= baseline + cap + 20, "more connections than the cap"
        produce_and_fetch(broker, topic)
        assert fd_count(broker.pid) <= baseline + cap + 20
        for sock in idle:
            assert closed_by_peer(sock), "an operations connection stayed open"
    finally:
        for sock in idle:
            sock.close()
    assert "KAFSCALE_METRICS_MAX_CONNECTIONS" in broker.log_text()
    wait_until(
        lambda: fd_count(broker.pid) <= baseline + 20,
        lambda: f"{fd_count(broker.pid)} descriptors open, {baseline} before",
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:
        assert response.status == 200


def test_an_operations_connection_answered_stays_until_idle(broker_factory):
    """A kept-alive connection is answered again and again, and closed only once idle."""
    _broker, port = ops_broker(broker_factory, "--metrics-idle-timeout-ms", "1500")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for _ in range(3):
            assert http_get(sock).startswith(b"HTTP/1.1 200"), "a kept-alive request failed"
        assert closed_by_peer(sock), "an idle operations connection stayed open"


def test_a_slow_header_client_is_cut_off(broker_factory):
    """A client that sends its request line and then a header byte every 0.2 s is closed by
    the header-read timeout, though it is never idle; a normal request is still answered."""
    _broker, port = ops_broker(
        broker_factory,
        "--metrics-header-read-timeout-ms",
        "1000",
        "--metrics-idle-timeout-ms",
        "600000",
    )
    cut_off = False
    with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                slow.sendall(b"X")
            except OSError:
                cut_off = True
                break
            if closed_by_peer(slow, timeout=0.2):
                cut_off = True
                break
    assert cut_off, "a client trickling its headers kept its connection"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:
        assert response.status == 200


# ---------------------------------------------------------------------------------------------
# TLS connections: one descriptor each, counted from the start of the handshake


def tls_broker(broker_factory, pki: Pki, *flags: str):
    plain, tls = free_ports(2)
    args = [
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        *pki.broker_args(trust_clients=False),
        *flags,
    ]
    return broker_factory(args, port=plain), f"127.0.0.1:{tls}"


def test_tls_connections_hold_one_descriptor_each(broker_factory, tmp_path):
    """40 TLS connections, handshake done and served, hold about 40 descriptors, not 80: the
    connection caps count connections, so each must hold one."""
    pki = make_pki(tmp_path / "pki")
    broker, ssl_bootstrap = tls_broker(broker_factory, pki)
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    baseline = fd_count(broker.pid)
    conns = []
    try:
        for _ in range(40):
            conn = kw.RawConnection.to(ssl_bootstrap, timeout=30)
            conn.sock = context.wrap_socket(conn.sock, server_hostname="127.0.0.1")
            conns.append(conn)
            assert is_open(conn)
        grown = fd_count(broker.pid) - baseline
        assert grown <= 40 + 20, f"40 TLS connections hold {grown} descriptors"
    finally:
        for conn in conns:
            conn.close()


def test_half_open_tls_connections_count_against_the_cap(broker_factory, tmp_path):
    """With --max-connections 40: a plaintext producer, then 39 connections that start no
    TLS handshake (each holding one descriptor, the broker's own count says so), and a
    further one is refused at once; the producer still produces and fetches."""
    pki = make_pki(tmp_path / "pki")
    cap = 40
    broker, ssl_bootstrap = tls_broker(
        broker_factory,
        pki,
        "--max-connections",
        str(cap),
        "--max-connections-per-ip",
        "1000",
        "--request-read-timeout-ms",
        "600000",  # the handshake's time too: they stay half-open throughout the test
    )
    topic = unique("half-open")
    kw.ensure_topic(broker.bootstrap, topic)
    producer = open_admitted(broker)
    baseline = fd_count(broker.pid)
    host, port = ssl_bootstrap.rsplit(":", 1)

    def half_open_admitted() -> socket.socket:
        """A connection that starts no handshake, once the broker took it (places held by
        earlier connections, ensure_topic's, come free once the broker saw them close)."""
        deadline = time.monotonic() + DEADLINE
        while True:
            sock = socket.create_connection((host, int(port)), timeout=30)
            if not closed_by_peer(sock, timeout=0.2):
                return sock
            sock.close()
            assert time.monotonic() < deadline, "no half-open connection was admitted"

    half_open = []
    try:
        half_open += [half_open_admitted() for _ in range(cap - 1)]
        grown = fd_count(broker.pid) - baseline
        assert grown <= cap - 1 + 20, f"{cap - 1} half-open TLS connections hold {grown} fds"
        with socket.create_connection((host, int(port)), timeout=30) as extra:
            assert closed_by_peer(extra), "a connection past the cap stayed open"
        with open_conn(broker) as plain_extra:
            assert plain_extra.wait_closed(), "the cap counts every listener"
        res = kw.produce(producer, topic, 0, batch_of(100))
        assert res.error_code == kw.NONE, res
        fetched = kw.fetch(producer, topic, 0, 0, max_bytes=1 * MIB)
        assert fetched.error_code == kw.NONE and fetched.high_watermark == 1
    finally:
        for sock in half_open:
            sock.close()
        producer.close()
    assert "KAFSCALE_MAX_CONNECTIONS)" in broker.log_text()
    open_admitted(broker).close()  # places come back as the half-open ones close


# ---------------------------------------------------------------------------------------------
# SASL listeners: frames before authentication


USER, PASSWORD = "producer", "producer-secret"


def sasl_broker(broker_factory, tmp_path: Path, *flags: str):
    """PLAINTEXT (the fixture's port) and SASL_PLAINTEXT listeners, the operations endpoint;
    returns the broker, the SASL listener's address and the endpoint's port."""
    users = tmp_path / "users.txt"
    users.write_text(f"{USER}:{PASSWORD}\n")
    plain, sasl, ops = free_ports(3)
    args = [
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "--sasl-users-file",
        str(users),
        "--metrics-addr",
        f"127.0.0.1:{ops}",
        *flags,
    ]
    return broker_factory(args, port=plain), f"127.0.0.1:{sasl}", ops


def logged_in(bootstrap: str) -> kw.RawConnection:
    conn = kw.RawConnection.to(bootstrap, timeout=30)
    answer = sw.login_plain(conn, USER, PASSWORD)
    assert answer.error_code == kw.NONE, answer
    return conn


def test_a_large_frame_before_authentication_closes_the_connection_unread(broker_factory, tmp_path):
    """A SaslHandshake, or after one a SaslAuthenticate, declaring 1 MiB (over the default
    sasl.server.max.receive.size of 512 KiB) closes the connection on its size prefix: the
    rest is never read, so the request budget is never charged for it. After a login the
    listener's own limit applies. (The request read timeout is long: only the prefix can
    close these connections within the test's deadline.)"""
    broker, bootstrap, ops = sasl_broker(
        broker_factory, tmp_path, "--request-read-timeout-ms", "600000"
    )
    for handshake_first in (False, True):
        with kw.RawConnection.to(bootstrap, timeout=30) as conn:
            api_key = sw.SASL_HANDSHAKE
            if handshake_first:
                assert sw.handshake(conn, sw.PLAIN).error_code == kw.NONE
                api_key = sw.SASL_AUTHENTICATE
            header = kw.request_header(api_key, 1, 7, "greedy", False)
            # The prefix and the request header only: the client is still "sending" the rest.
            conn.send_raw(struct.pack(">i", 1 * MIB) + header)
            assert conn.wait_closed(timeout=DEADLINE), "a 1 MiB frame before login was read"
            assert metrics_sample(ops, "kafscale_request_budget_used_bytes") == 0
    with kw.RawConnection.to(bootstrap, timeout=30) as conn:
        conn.sock.setblocking(False)
        frame = struct.pack(">i", 1 * MIB) + kw.request_header(sw.SASL_HANDSHAKE, 1, 1, "x", False)
        frame += b"\0" * (1 * MIB - len(frame) + 4)
        send_nonblocking([conn.sock], [frame])
        conn.sock.setblocking(True)
        assert conn.wait_closed(timeout=DEADLINE)
    assert "sasl_server_max_receive_size" in broker.log_text()
    assert metrics_sample(ops, "kafscale_request_budget_used_bytes") == 0
    topic = unique("after-login")
    kw.ensure_topic(broker.bootstrap, topic)
    with logged_in(bootstrap) as conn:
        res = kw.produce(conn, topic, 0, batch_of(700 * 1024))  # a frame over 512 KiB
        assert res.error_code == kw.NONE, res


def test_partial_frames_of_several_clients_do_not_stall_an_authenticated_producer(
    broker_factory, tmp_path
):
    """Four logged-in clients each declare a 100 MiB Produce and send 4 MiB of it, which
    fills the 8 MiB request budget, and stop. An authenticated producer that connects then
    still logs in, produces and fetches: a connection under its share of the budget waits
    about a second at most for the largest partial request over a share to be dropped, not
    the 120 s request_read_timeout_ms."""
    broker, bootstrap, ops = sasl_broker(
        broker_factory,
        tmp_path,
        "--max-request-bytes",
        "128MiB",
        "--connection-max-inflight-bytes",
        "4MiB",
        "--queued-max-request-bytes",
        "8MiB",
        "--request-read-timeout-ms",
        "120000",
    )
    topic = unique("fair")
    kw.ensure_topic(broker.bootstrap, topic)
    greedy = [logged_in(bootstrap) for _ in range(4)]
    try:
        header = struct.pack(">i", 100 * MIB) + kw.request_header(kw.PRODUCE, 3, 9, "big", False)
        send_nonblocking([c.sock for c in greedy], [header + b"\0" * (4 * MIB)] * 4)
        wait_until(
            lambda: metrics_sample(ops, "kafscale_request_budget_used_bytes") >= 4 * MIB,
            lambda: "the partial requests never filled the budget",
        )
        started = time.monotonic()
        with logged_in(bootstrap) as producer:
            res = kw.produce(producer, topic, 0, batch_of(1000))
            assert res.error_code == kw.NONE, res
            fetched = kw.fetch(producer, topic, 0, 0, max_bytes=1 * MIB)
            assert fetched.error_code == kw.NONE and fetched.high_watermark == 1
        waited = time.monotonic() - started
        assert waited < 60, f"the producer waited {waited:.0f} s (the read timeout is 120 s)"
    finally:
        for c in greedy:
            c.close()
    assert "share of queued_max_request_bytes" in broker.log_text()


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
    broker-wide budget until a connection under its share needs room (then the largest is
    dropped) or request_read_timeout_ms drops them: a client that closed with bytes still
    unsent looks just like a slow one."""
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
