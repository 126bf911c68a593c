"""A bounded fuzz run against one real broker: a few thousand mutated frames over every API and
version it serves (as its ApiVersions says; seeds and mutations in support/fuzz_frames.py), on
fresh and reused connections, while a canary producer (confluent-kafka, acks=all, default
settings) writes.

Each frame must be answered or its connection closed: silence past ANSWER_WAIT_S from an API
that has nothing to wait for is a hang. The broker must stay alive and serve Metadata with a
bounded RSS, and every value the canary had acknowledged must be read back at its offset.
Problems are reported with the frame's bytes in hex and its API, so they can be replayed.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import uuid
from pathlib import Path

import pytest
from support import fuzz_frames as ff
from support import kafka_wire as kw
from support.clients import confluent_consume
from support.kafka_wire import RawConnection

pytestmark = pytest.mark.timeout(300)

RNG_SEED = 20_261_123
FRAMES = 3000
# Past this, an API with nothing to wait for has hung (the broker answers in milliseconds).
ANSWER_WAIT_S = 10.0
# How long to give an API that may wait (long poll, rebalance, acks=0) before moving on.
WAITING_GRACE_S = 0.5
FRESH_CONNECTION = 0.2  # chance of a new connection for a frame
RSS_LIMIT = 1 << 30


class Canary:
    """A producer thread with acks=all and otherwise default settings."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}
        self.unresolved = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canary", daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.failed[msg.value()] = err.name()

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all"})
        i = 0
        while not self._stop.is_set():
            producer.produce(self.topic, value=b"canary-%07d" % i, on_delivery=self._delivered)
            i += 1
            producer.poll(0.01)
        self.unresolved = producer.flush(120)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
        assert not self._thread.is_alive(), "the canary producer did not finish"


def exchange(conn: RawConnection, frame: bytes, wait: float) -> str:
    """'answered', 'closed' or 'silent' (no whole response frame within ``wait``)."""
    sock = conn.sock
    try:
        sock.sendall(frame)
        sock.settimeout(wait)
        size = struct.unpack(">i", read_exactly(sock, 4))[0]
        read_exactly(sock, size)
        return "answered"
    except (ConnectionError, EOFError):
        return "closed"
    except TimeoutError:
        return "silent"


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_seeds_are_valid_requests_for_every_served_api(broker):
    """Every API and version the broker advertises has a seed, and the seeds reach the
    handlers: each one, unmutated, gets a response."""
    served = ff.served_apis(broker.bootstrap)
    seeds, missing = ff.seeds(served)
    assert missing == [], (
        "served (api key, version) without a seed; add Kafka's definition of the request next "
        f"to support/fuzz_frames.py: {missing}"
    )
    assert {(s.api_key, s.version) for s in seeds} == {
        (key, v) for key, (low, high) in served.items() for v in range(low, high + 1)
    }
    unserved = set(ff.unserved_keys(served))
    assert unserved and not unserved & set(served), unserved
    kw.ensure_topic(broker.bootstrap, ff.TOPIC)
    silent = []
    for seed in seeds:
        with RawConnection.to(broker.bootstrap) as conn:
            wait = WAITING_GRACE_S if seed.api_key in ff.MAY_WAIT else ANSWER_WAIT_S
            if exchange(conn, seed.frame, wait) != "answered":
                silent.append((seed.api_key, seed.version))
    # JoinGroup v0-3 joins (no member id round trip) and waits for the rebalance to finish.
    assert [s for s in silent if s[0] != 11] == []


def test_mutated_frames_are_answered_or_closed_and_the_canary_loses_nothing(broker):
    canary_topic = f"canary-{uuid.uuid4().hex[:8]}"
    kw.ensure_topic(broker.bootstrap, ff.TOPIC)
    kw.ensure_topic(broker.bootstrap, canary_topic)
    rss_before = rss(broker.proc.pid)
    canary = Canary(broker.bootstrap, canary_topic)
    rng = random.Random(RNG_SEED)
    served = ff.served_apis(broker.bootstrap)
    seeds, _ = ff.seeds(served)
    mutations = ff.mutations(served)
    hangs: list[str] = []
    outcomes: dict[str, int] = {}
    conn: RawConnection | None = None
    try:
        for _ in range(FRAMES):
            seed = rng.choice(seeds)
            mutation = rng.choice(mutations)
            frame, honest_length = mutation(rng, seed.frame)
            api = struct.unpack(">h", frame[4:6])[0] if len(frame) >= 6 else seed.api_key
            may_wait = not honest_length or {seed.api_key, api} & ff.MAY_WAIT
            if conn is None or rng.random() < FRESH_CONNECTION:
                if conn is not None:
                    conn.close()
                conn = RawConnection.to(broker.bootstrap)
            outcome = exchange(conn, frame, WAITING_GRACE_S if may_wait else ANSWER_WAIT_S)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome == "silent" and not may_wait:
                hangs.append(
                    f"API {api} (seed {seed.api_key} v{seed.version}, {mutation.__name__}): "
                    f"{frame.hex()}"
                )
                if len(hangs) >= 5:
                    break
            if outcome != "answered" or not honest_length:
                conn.close()  # what is left on it (a cut frame, a late answer) is unknown
                conn = None
            assert broker.proc.poll() is None, f"the broker died; last frame {frame.hex()}"
    finally:
        if conn is not None:
            conn.close()
        canary.stop()

    assert hangs == [], "frames neither answered nor closed:\n" + "\n".join(hangs)
    assert outcomes.get("answered", 0) > FRAMES // 10, outcomes  # the run reached the handlers
    with RawConnection.to(broker.bootstrap) as conn:
        meta = kw.metadata(conn, [ff.TOPIC, canary_topic], allow_auto_topic_creation=False)
        assert meta.topics[canary_topic].error_code == kw.NONE
    rss_after = rss(broker.proc.pid)
    print(f"{outcomes}; RSS {rss_before >> 20} -> {rss_after >> 20} MiB; {len(canary.acked)} acked")
    assert rss_after < RSS_LIMIT, f"RSS {rss_before >> 20} MiB before, {rss_after >> 20} after"

    assert canary.unresolved == 0 and canary.failed == {}, (canary.unresolved, canary.failed)
    assert canary.acked, "the canary got no acknowledgement"
    per_partition: dict[int, int] = {}
    for partition, _ in canary.acked.values():
        per_partition[partition] = per_partition.get(partition, 0) + 1
    got = confluent_consume(broker.bootstrap, canary_topic, per_partition)
    read = {(g.partition, g.offset): g.value for g in got}
    lost = {v: at for v, at in canary.acked.items() if read.get(at) != v}
    assert lost == {}, f"{len(lost)} acknowledged values not at their offsets"
