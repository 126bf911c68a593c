"""Client quotas from the outside: AlterClientQuotas and DescribeClientQuotas v0 by hand (the
requests Kafka's Admin sends), a broker's per-quota counters on its /metrics page, probes that
tell when a broker enforces a quota, and a confluent-kafka producer run that measures what was
acknowledged and what throttle the client was told.

Entities are tuples of (entity type, name) with None for the type's default, as on the wire:
``(("client-id", "slow"),)``, ``(("user", None),)``, ``(("ip", None),)``."""

from __future__ import annotations

import contextlib
import json
import struct
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from . import kafka_wire as kw
from . import segment_format as sf

ALTER_CLIENT_QUOTAS = 49
DESCRIBE_CLIENT_QUOTAS = 48
# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]

IN_FORCE_S = 30.0  # liveness guard of the polls below, never a timing check


def label(entity: Entity) -> str:
    """The broker's ``entity`` label of a configured entity: ``client-id=slow``,
    ``user=<default>``, ``user=alice,client-id=app``."""
    return ",".join(f"{kind}={'<default>' if name is None else name}" for kind, name in entity)


# --- the wire ----------------------------------------------------------------------------------


def alter_body(entity: Entity, values: Mapping[str, float | None]) -> bytes:
    """AlterClientQuotas v0 of one entity: each quota set to its value, or removed (None)."""
    w = kw.Writer().array_len(1).array_len(len(entity))
    for kind, name in entity:
        w.string(kind).string(name)
    w.array_len(len(values))
    for key, value in values.items():
        w.string(key).raw(_f64(0.0 if value is None else value)).boolean(value is None)
    return w.boolean(False).done()  # not validate_only


def _f64(value: float) -> bytes:
    return struct.pack(">d", value)


def alter_answer(
    bootstrap: str, entity: Entity, values: Mapping[str, float | None]
) -> tuple[int, str | None]:
    """AlterClientQuotas of one entity: the error code and message of its entry."""
    with kw.RawConnection.to(bootstrap) as conn:
        r = conn.request(ALTER_CLIENT_QUOTAS, 0, alter_body(entity, values))
    r.i32()  # throttle
    entries = r.array_len()
    assert entries == 1, entries
    return r.i16(), r.string()


def alter(bootstrap: str, entity: Entity, values: Mapping[str, float | None]) -> None:
    """Sets or removes (None) quotas of ``entity``; the broker must accept the change."""
    error, message = alter_answer(bootstrap, entity, values)
    assert error == kw.NONE, f"AlterClientQuotas {entity} {dict(values)}: {error} {message}"


def describe(
    bootstrap: str, components: list[tuple[str, int, str | None]] | None = None
) -> dict[Entity, dict[str, float]]:
    """DescribeClientQuotas v0 with ``components`` (entity type, match type, name), not
    strict; every quota stored by default (no component)."""
    w = kw.Writer().array_len(len(components or []))
    for kind, match_type, name in components or []:
        w.string(kind).i8(match_type).string(name)
    with kw.RawConnection.to(bootstrap) as conn:
        r = conn.request(DESCRIBE_CLIENT_QUOTAS, 0, w.boolean(False).done())
    r.i32()  # throttle
    error, message = r.i16(), r.string()
    assert error == kw.NONE, f"DescribeClientQuotas: {error} {message}"
    out: dict[Entity, dict[str, float]] = {}
    for _ in range(max(0, r.array_len())):
        entity = tuple((str(r.string()), r.string()) for _ in range(r.array_len()))
        values = {}
        for _ in range(r.array_len()):
            key = str(r.string())
            values[key] = _read_f64(r)
        out[entity] = values
    return out


def _read_f64(r: kw.Reader) -> float:
    (value,) = struct.unpack_from(">d", r.data, r.pos)
    r.pos += 8
    return float(value)


# --- the broker's counters ---------------------------------------------------------------------


class QuotaMetrics:
    """The kafscale_quota_* counters of one broker's /metrics page (its --metrics-addr)."""

    def __init__(self, addr: str) -> None:
        self.url = f"http://{addr}/metrics"

    def page(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            body: bytes = answer.read()
        return body.decode()

    def counters(self, quota: str, entity: Entity) -> dict[str, float] | None:
        """usage, throttled and throttle_seconds of ``quota`` for ``entity``; None while the
        broker serves no series of it (no quota in force, or nothing metered yet)."""
        names = {
            "kafscale_quota_usage_total": "usage",
            "kafscale_quota_throttled_total": "throttled",
            "kafscale_quota_throttle_seconds_total": "throttle_seconds",
        }
        wanted = {"quota": quota, "entity": label(entity)}
        found: dict[str, float] = {}
        families = text_string_to_metric_families(self.page())  # type: ignore[no-untyped-call]
        for family in families:
            for s in family.samples:
                if s.name in names and s.labels == wanted:
                    found[names[s.name]] = float(s.value)
        if not found:
            return None
        return {name: found.get(name, 0.0) for name in names.values()}

    def counter(self, quota: str, entity: Entity, name: str) -> float:
        counters = self.counters(quota, entity)
        return 0.0 if counters is None else counters[name]


def poll_until(check: Callable[[], bool], what: Callable[[], str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"after {timeout} s: {what()}"
        time.sleep(0.1)


# --- probes: one metered request of a client, until the broker meters it under the quota ------


def probe_produce(bootstrap: str, topic: str, client_id: str) -> None:
    """One small Produce (v3) of ``client_id``: metered against its producer_byte_rate."""
    batch = sf.build_record_batch([(None, b"probe", [])])
    body = kw.produce_body(topic, 0, batch)
    with kw.RawConnection.to(bootstrap) as conn:
        r = conn.request(kw.PRODUCE, 3, body, client_id=client_id)
    results = kw.parse_produce_v3(r)
    assert [p.error_code for p in results.values()] == [kw.NONE], results


def probe_fetch(bootstrap: str, topic: str, client_id: str) -> None:
    """One Fetch (v4) of ``client_id`` past the end of partition 0, answered at once:
    metered (its bytes, none) against its consumer_byte_rate."""
    body = kw.fetch_body(topic, 0, 1 << 40, max_wait_ms=0, min_bytes=0)
    with kw.RawConnection.to(bootstrap) as conn:
        conn.request(kw.FETCH, 4, body, client_id=client_id)


def wait_in_force(
    metrics: QuotaMetrics, quota: str, entity: Entity, probe: Callable[[], None]
) -> None:
    """Probes until the broker meters the probe under ``quota`` of ``entity`` (its series
    appear: the broker follows the metadata store within moments)."""

    def metered() -> bool:
        probe()
        return metrics.counters(quota, entity) is not None

    poll_until(metered, lambda: f"{quota} of {label(entity)} not in force", IN_FORCE_S)


def wait_removed(metrics: QuotaMetrics, quota: str, entity: Entity) -> None:
    """Until the broker has dropped ``quota`` of ``entity`` (its series go with it)."""
    poll_until(
        lambda: metrics.counters(quota, entity) is None,
        lambda: f"{quota} of {label(entity)} still served: {metrics.counters(quota, entity)}",
        IN_FORCE_S,
    )


# --- a producer as fast as it can --------------------------------------------------------------


@dataclass
class ProduceRun:
    """What one confluent-kafka producer saw: acknowledged bytes and records (in the measured
    span and in all), delivery errors, and the highest broker throttle (ms) its statistics
    reported."""

    client_id: str
    seconds: float
    acked_in_span: int = 0
    acked_bytes: int = 0
    acked_records: int = 0
    produced_records: int = 0
    errors: list[str] = field(default_factory=list)
    throttle_max_ms: float = 0.0
    stats_seen: int = 0

    @property
    def mb_per_s(self) -> float:
        """Acknowledged MB (10^6 bytes) per second over the measured span."""
        return self.acked_in_span / self.seconds / 1e6


# Records the application keeps outstanding (produced, not yet acknowledged): it bounds its
# memory as any application does, while the client's own settings stay librdkafka's defaults
# (whose queue would take 1 GB, 100 000 records, before pushing back).
OUTSTANDING_RECORDS = 200
FLUSH_GUARD_S = 60.0  # liveness guard of the final flush


def produce_flat_out(
    bootstrap: str,
    topic: str,
    client_id: str,
    seconds: float,
    value_bytes: int = 10_000,
    start: threading.Event | None = None,
) -> ProduceRun:
    """Produces ``value_bytes`` records to ``topic`` as fast as a default librdkafka producer
    with ``client.id`` takes them, for ``seconds`` (after ``start`` is set, if given), then
    waits for every outstanding delivery. statistics.interval.ms (1 s) makes librdkafka
    report the broker throttle it was told."""
    from confluent_kafka import Producer

    run = ProduceRun(client_id, seconds)

    def stats(text: str) -> None:
        run.stats_seen += 1
        for broker in json.loads(text).get("brokers", {}).values():
            run.throttle_max_ms = max(run.throttle_max_ms, float(broker["throttle"]["max"]))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    value = b"v" * value_bytes
    end = float("inf")

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            run.errors.append(str(err))
            return
        size = len(msg.value())
        run.acked_bytes += size
        run.acked_records += 1
        if time.monotonic() <= end:
            run.acked_in_span += size

    if start is not None:
        start.wait()
    begun = time.monotonic()
    end = begun + seconds
    while time.monotonic() < end:
        if len(producer) >= OUTSTANDING_RECORDS:
            producer.poll(0.05)
            continue
        producer.produce(topic, value=value, on_delivery=delivered)
        run.produced_records += 1
        producer.poll(0)
    left = producer.flush(FLUSH_GUARD_S)
    assert left == 0, f"{client_id}: {left} records undelivered {FLUSH_GUARD_S} s after the run"
    # one more statistics report, covering the end of the run
    seen = run.stats_seen
    guard = time.monotonic() + 5
    while run.stats_seen == seen and time.monotonic() < guard:
        producer.poll(0.1)
    return run


@contextlib.contextmanager
def quotas_set(bootstrap: str, entity: Entity, values: Mapping[str, float]) -> Iterator[None]:
    """``values`` set on ``entity`` for the body of the with-block, removed afterwards (retried
    while the broker closes new connections: an IP's connection rate may hold them back)."""
    alter(bootstrap, entity, values)
    try:
        yield
    finally:
        removal: dict[str, float | None] = dict.fromkeys(values)

        def removed() -> bool:
            try:
                alter(bootstrap, entity, removal)
            except (OSError, kw.ConnectionClosed):
                return False
            return True

        poll_until(removed, lambda: f"could not remove {dict(values)} of {label(entity)}", 30)


# --- a consumer under a byte rate --------------------------------------------------------------


@dataclass
class ConsumeRun:
    """What one confluent-kafka consumer read: each record's value, in order, the time from
    its assignment to its last record, and the highest broker throttle its statistics
    reported."""

    values: list[bytes] = field(default_factory=list)
    bytes_read: int = 0
    seconds: float = 0.0
    throttle_max_ms: float = 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / self.seconds / 1e6


def consume_all(
    bootstrap: str, topic: str, client_id: str, records: int, guard_s: float = 90.0
) -> ConsumeRun:
    """Reads partition 0 of ``topic`` from the beginning with a default consumer (its own
    group id, client.id ``client_id``, statistics each second) until ``records`` records
    came; ``guard_s`` only stops a hung run."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    run = ConsumeRun()

    def stats(text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            run.throttle_max_ms = max(run.throttle_max_ms, float(broker["throttle"]["max"]))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"quota-reader-{client_id}",
            "client.id": client_id,
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    try:
        begun = time.monotonic()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while len(run.values) < records:
            assert time.monotonic() - begun < guard_s, (
                f"{client_id} read {len(run.values)} of {records} records in {guard_s} s"
            )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, f"{client_id}: {msg.error()}"
            value: bytes = msg.value()
            run.values.append(value)
            run.bytes_read += len(value)
        run.seconds = time.monotonic() - begun
        consumer.poll(1.5)  # a last statistics report
    finally:
        consumer.close()
    return run


# --- many connections at once ------------------------------------------------------------------


@dataclass
class Burst:
    """New connections opened back to back, each sending ApiVersions: which were answered
    (and after how long, for the report only) and which the broker closed."""

    answered_after_s: list[float] = field(default_factory=list)
    closed: int = 0


def connection_burst(bootstrap: str, connections: int, guard_s: float = 15.0) -> Burst:
    """Opens ``connections`` connections as fast as possible, sends ApiVersions v0 on each,
    then reads each answer, or the broker's close."""
    burst = Burst()
    opened = [kw.RawConnection.to(bootstrap, timeout=guard_s) for _ in range(connections)]
    begun = time.monotonic()
    try:
        for conn in opened:
            conn.send(kw.API_VERSIONS, 0, kw.api_versions_v0_body())
        for conn in opened:
            try:
                conn.recv_frame()
            except (kw.ConnectionClosed, ConnectionResetError):
                burst.closed += 1
            else:
                burst.answered_after_s.append(time.monotonic() - begun)
    finally:
        for conn in opened:
            conn.close()
    return burst
