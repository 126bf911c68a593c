"""KafScale broker benchmark: produce / latency / fetch (cache and cold) figures.

Starts its own broker (`python -m kafscale.broker`) on a free loopback port with a temporary data
dir, drives it with confluent-kafka (librdkafka) in one or more driver processes and prints human
progress to stderr and ONE JSON line with every figure to stdout at the end. It measures; it does
not judge: nothing fails on slowness (the "targets" block only says whether each target was met).

Phases (see bench/README.md for what each figure means):
  produce_acks_all    --gib of 1 KiB values, acks=-1, round-robin over the partitions
  produce_acks_1      the same with acks=1
  latency             fixed offered rate (default 10 MB/s), acks=-1, per-message delivery latency
  fetch_cache         re-reads the newest data that fits in the broker cache until --gib is read
  produce_local       (memory store only) --gib acks=-1 onto a second broker using the local-dir
                      store, which is then restarted so that the cold phase has data to read
  fetch_cold          after a broker restart (empty cache), reads the first --gib of the topic

With --security ssl or sasl_ssl the broker gets an SSL or SASL_SSL listener (throwaway PKI in
the scratch dir; SCRAM-SHA-512 for sasl_ssl) next to its PLAINTEXT one, and every client the
bench makes uses that listener.

Usage: python bench/broker_bench.py [--gib 0.25] [--store memory|local|s3] [--python PATH] ...
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing as mp
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The tests' process helpers (broker, etcd and moto processes, free ports), shared with every
# bench.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from s3_requests import S3Requests, per_gib
from s3_servers import KINDS as S3_KINDS
from s3_servers import s3_server, s3_store_args
from support import procs

GIB = 1 << 30
MIB = 1 << 20
MB = 1_000_000
TOPIC = "kafscale-bench"
DEFAULT_SEGMENT_BYTES = 4 * MIB  # the broker's default --segment-bytes
COMPACTION_INTERVAL_S = 5.0  # the broker's default --wal-compaction-interval-ms
VALUE_POOL = 64  # distinct pre-generated values, cycled (no per-message value generation)
CLK_TCK = os.sysconf("SC_CLK_TCK")

Ranges = dict[int, tuple[int, int]]  # partition -> [start, end) offsets


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# /proc helpers (broker and driver resource usage)
# --------------------------------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # fields after "pid (comm) ", starting at state
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def proc_status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class AnonPeak:
    """The peak of a process's anonymous resident memory (RssAnon: its heap and buffers),
    sampled every 50 ms. VmHWM also counts the page-cache pages of memory-mapped segment files
    (the local-dir store maps them), which the kernel reclaims and which are not the broker's."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kib = pid, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.peak_kib = max(self.peak_kib, proc_status_kib(self.pid, "RssAnon"))
            if self._done.wait(0.05):
                return

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            self.peak_kib = max(self.peak_kib, proc_status_kib(self.pid, "RssAnon"))
        return round(self.peak_kib / 1024, 1)


def proc_minor_faults(pid: int) -> int:
    """Minor page faults of a process (all its threads): each is a page of fresh memory
    touched (or one given back to the system and touched again)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2 :].split()[7])  # field 10 of proc(5), minflt


def proc_wakeups(pid: int) -> int:
    """Times the process's threads went to sleep waiting (voluntary context switches): each
    is a wake-up later, and on a busy connection each costs more than the bytes it reads."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


@dataclass(frozen=True)
class Usage:
    """What the broker spent over a phase."""

    cpu_s: float
    wakeups: int
    page_faults: int

    def __sub__(self, before: Usage) -> Usage:
        return Usage(
            self.cpu_s - before.cpu_s,
            self.wakeups - before.wakeups,
            self.page_faults - before.page_faults,
        )


def self_cpu_seconds() -> float:
    """CPU of this process including librdkafka's threads."""
    t = os.times()
    return t.user + t.system


# --------------------------------------------------------------------------------------------
# Security (--security): the listener every client uses
# --------------------------------------------------------------------------------------------

SECURITY_MODES = ("plaintext", "ssl", "sasl_ssl")
SASL_MECHANISM = "SCRAM-SHA-512"
BENCH_USER = "bench"


@dataclass(frozen=True)
class ClientSecurity:
    """What a client needs for the broker's client listener. Plain strings only: driver jobs
    carry it to the spawned worker processes."""

    protocol: str = "PLAINTEXT"  # security.protocol: PLAINTEXT, SSL or SASL_SSL
    ca_location: str | None = None  # the throwaway CA that signed the broker's certificate
    username: str | None = None  # SASL_SSL only
    password: str | None = None

    def props(self) -> dict[str, str]:
        """The librdkafka security properties: the one place every client gets them from."""
        if self.protocol == "PLAINTEXT":
            return {}
        assert self.ca_location is not None
        props = {"security.protocol": self.protocol, "ssl.ca.location": self.ca_location}
        if self.protocol == "SASL_SSL":
            assert self.username is not None and self.password is not None
            props |= {
                "sasl.mechanism": SASL_MECHANISM,
                "sasl.username": self.username,
                "sasl.password": self.password,
            }
        return props


PLAINTEXT = ClientSecurity()


@dataclass(frozen=True)
class ListenerSecurity:
    """The secured listener a broker gets next to its PLAINTEXT one, and what clients present."""

    protocol: str  # listener name = security protocol: SSL or SASL_SSL
    ssl_args: tuple[str, ...]  # --ssl-certfile/--ssl-keyfile
    users_file: str | None  # --sasl-users-file (SASL_SSL)
    client: ClientSecurity

    def broker_args(self, plain: str, secure: str) -> list[str]:
        """--listeners (PLAINTEXT on --broker-addr's host:port, which the readiness check
        watches, plus this one on ``secure``) and the files it needs."""
        args = ["--listeners", f"PLAINTEXT://{plain},{self.protocol}://{secure}", *self.ssl_args]
        if self.users_file is not None:
            args += ["--sasl-users-file", self.users_file]
        return args


def make_listener_security(mode: str, root: Path) -> ListenerSecurity | None:
    """For --security ssl / sasl_ssl: a throwaway PKI (the tests' ``support.tls``) and, for
    sasl_ssl, a users file with one bench user, under ``root``; None for plaintext."""
    if mode == "plaintext":
        return None
    from support import tls  # cryptography: only needed here

    pki = tls.make_pki(root / "pki")
    protocol = mode.upper()
    users_file = None
    client = ClientSecurity(protocol, str(pki.ca.cert))
    if protocol == "SASL_SSL":
        password = secrets.token_hex(16)
        users = root / "pki" / "users"
        users.write_text(f"{BENCH_USER}:{password}\n")
        users_file = str(users)
        client = ClientSecurity(protocol, str(pki.ca.cert), BENCH_USER, password)
    ssl_args = tuple(pki.broker_args(trust_clients=False))  # server authentication only
    return ListenerSecurity(protocol, ssl_args, users_file, client)


def client_security(broker: Any) -> ClientSecurity:
    """The security properties for ``broker.addr``; brokers of other benches (cluster_bench's
    members) have none and are PLAINTEXT."""
    return getattr(broker, "security", PLAINTEXT)


@contextlib.contextmanager
def over_plaintext(broker: Broker) -> Iterator[None]:
    """Points the bench's clients at the broker's PLAINTEXT listener for a while (the
    --compare-plaintext rounds: the same broker, heap and topic over both listeners)."""
    saved = broker.client_port, broker.security
    broker.client_port, broker.security = broker.port, PLAINTEXT
    try:
        yield
    finally:
        broker.client_port, broker.security = saved


# --------------------------------------------------------------------------------------------
# Broker process
# --------------------------------------------------------------------------------------------


@dataclass
class BrokerOptions:
    python: str
    store: str  # "memory", "local" or "s3" (the S3 flags are in extra_args)
    flush_interval_ms: int
    cache_bytes: int
    segment_bytes: int | None
    readahead_segments: int | None
    log_level: str
    extra_args: list[str]
    security: ListenerSecurity | None = None  # None: the PLAINTEXT listener only
    # --queued-max-request-bytes: what the broker holds in requests and answers in flight
    # (every produced byte until it is durable), the "buffered" of the RSS budgets; None: the
    # broker's default (the other benches, which check no memory budget)
    buffered_bytes: int | None = None
    # the S3 server's request log (--store s3): requests per GiB in every phase's figures
    s3_requests: S3Requests | None = None
    # a source tree whose kafscale package (with its built _core) the broker runs instead of
    # the installed one: another build, side by side (bench/write_cost.py)
    source_tree: Path | None = None


class Broker(procs.Broker):
    """A broker for the benches: the tests' process helper (output in a log file beside its
    data dir, the same start-up check and teardown) with the broker's own defaults, plus
    its CPU and memory from /proc."""

    def __init__(self, opts: BrokerOptions, data_dir: Path) -> None:
        host, port = "127.0.0.1", procs.free_port()
        self.client_port = port  # the listener every client of the bench uses
        self.security = PLAINTEXT
        args = broker_args(opts)
        if opts.security is not None:
            while self.client_port == port:
                self.client_port = procs.free_port()
            secure = opts.security.broker_args(f"{host}:{port}", f"{host}:{self.client_port}")
            args = secure + args
            self.security = opts.security.client
        super().__init__(
            data_dir,
            data_dir.parent / f"{data_dir.name}.log",
            port=port,
            args=args,
            env=broker_env(opts),
            flush_interval_ms=opts.flush_interval_ms,
            python=opts.python,
            compact_at_once=False,
        )
        assert self.host == host
        self.store = opts.store
        self.s3_requests = opts.s3_requests

    @property
    def addr(self) -> str:
        """Bootstrap for clients: the secured listener with --security, else --broker-addr."""
        return f"{self.host}:{self.client_port}"

    def wait_ready(self, timeout: float = procs.STARTUP_TIMEOUT) -> None:
        super().wait_ready(timeout)  # the PLAINTEXT listener on --broker-addr
        # The broker binds every listener before it logs them all on one line; no probe of
        # the TLS port (a bare connect shows in the broker log as a failed handshake).
        listener = f"{self.addr} ({self.security.protocol}"
        if self.client_port != self.port and listener not in self.log_text():
            raise AssertionError(f"broker did not log its {listener}) listener:\n{self.tail()}")

    def alive(self) -> bool:
        return self.running

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)

    def usage(self) -> Usage:
        pid = self.pid
        return Usage(proc_cpu_seconds(pid), proc_wakeups(pid), proc_minor_faults(pid))

    def rss_mib(self) -> float:
        return proc_status_kib(self.pid, "VmRSS") / 1024

    def peak_rss_mib(self) -> float:
        return proc_status_kib(self.pid, "VmHWM") / 1024

    def tail(self, n: int = 20) -> str:
        return procs.tail(self.log_path, n)

    def stop(self, timeout: float = 120.0) -> int | None:
        """SIGTERM (flush, exit 0 expected); None if it had to be killed."""
        if self.proc is None:
            return self.exit_codes[-1] if self.exit_codes else None
        try:
            return self.terminate(timeout)
        except AssertionError:
            log(f"broker ignored SIGTERM for {timeout}s; killed it")
            return None


def default_options(python: str, store: str, extra_args: list[str], **more: Any) -> BrokerOptions:
    """A broker with its own defaults (250 ms flushes, 256 MiB cache) on ``store``."""
    return BrokerOptions(
        python=python,
        store=store,
        flush_interval_ms=250,
        cache_bytes=256 * MIB,
        segment_bytes=None,
        readahead_segments=None,
        log_level="info",
        extra_args=extra_args,
        **more,
    )


def broker_env(opts: BrokerOptions) -> dict[str, str]:
    env = {"NO_COLOR": "1"}
    if opts.source_tree is not None:
        env["PYTHONPATH"] = str(opts.source_tree / "python")
    return env


def broker_args(opts: BrokerOptions) -> list[str]:
    """The flags after --broker-addr, --data-dir and --flush-interval-ms."""
    cmd = ["--cache-bytes", str(opts.cache_bytes), "--log-level", opts.log_level]
    if opts.buffered_bytes is not None:
        cmd += ["--queued-max-request-bytes", str(opts.buffered_bytes)]
    if opts.store == "memory":
        cmd.append("--use-memory-s3")
    if opts.segment_bytes is not None:
        cmd += ["--segment-bytes", str(opts.segment_bytes)]
    if opts.readahead_segments is not None:
        cmd += ["--readahead-segments", str(opts.readahead_segments)]
    return cmd + opts.extra_args


def start_broker(opts: BrokerOptions, data_dir: Path, timeout: float = 90.0) -> Broker:
    broker = Broker(opts, data_dir)
    log(f"starting broker: {' '.join(broker.argv())}")
    broker.start(wait=False)
    try:
        broker.wait_ready(timeout)
    except AssertionError as exc:
        broker.cleanup()
        raise RuntimeError(f"broker did not start: {exc}") from None
    log(
        f"broker pid {broker.pid} listening on {broker.addr} ({opts.store} store, clients "
        f"{broker.security.protocol})"
    )
    return broker


# --------------------------------------------------------------------------------------------
# Kafka client configuration
# --------------------------------------------------------------------------------------------


def client_config(bootstrap: str, security: ClientSecurity | None = None) -> dict[str, Any]:
    """bootstrap.servers and the security properties: every client's config starts here."""
    return {"bootstrap.servers": bootstrap} | (security or PLAINTEXT).props()


def producer_config(
    bootstrap: str,
    acks: str,
    linger_ms: int,
    compression: str = "none",
    idempotent: bool = False,
    security: ClientSecurity | None = None,
) -> dict[str, Any]:
    return client_config(bootstrap, security) | {
        "acks": acks,
        "linger.ms": linger_ms,
        "batch.size": 1_000_000,  # <= message.max.bytes (default 1 000 000)
        "batch.num.messages": 100_000,
        "compression.type": compression,
        "queue.buffering.max.kbytes": 262_144,
        "queue.buffering.max.messages": 1_000_000,
        "message.timeout.ms": 120_000,
        "enable.idempotence": idempotent,
        "socket.send.buffer.bytes": 4 * MIB,
    }


def consumer_config(bootstrap: str, security: ClientSecurity | None = None) -> dict[str, Any]:
    return client_config(bootstrap, security) | {
        "group.id": "kafscale-bench",  # required by the client; only assign() is used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 50 * MIB,
        "max.partition.fetch.bytes": 8 * MIB,
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 128 * 1024,
        "socket.receive.buffer.bytes": 4 * MIB,
        # Once its queue holds queued.min.messages (100,000 by default: 100 MiB of these
        # records), librdkafka stops fetching the partition for this long (1 s by default):
        # a broker that answers faster than the Python loop consumes then shows as a second
        # of silence, a figure of the client rather than of the broker.
        "fetch.queue.backoff.ms": 10,
    }


def make_values(value_bytes: int) -> list[bytes]:
    """Random (incompressible) values, generated once."""
    return [os.urandom(value_bytes) for _ in range(VALUE_POOL)]


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    security: ClientSecurity | None = None,
    configs: dict[str, str] | None = None,
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(bootstrap, security))
    new = NewTopic(topic, partitions, 1, config=configs or {})
    futures = admin.create_topics([new], operation_timeout=30)
    futures[topic].result(timeout=60)
    meta = admin.list_topics(topic, timeout=30)
    got = len(meta.topics[topic].partitions)
    if got != partitions:
        raise RuntimeError(f"topic {topic} has {got} partitions, wanted {partitions}")
    log(f"created topic {topic} with {partitions} partitions")


def watermarks(
    bootstrap: str, topic: str, partitions: int, security: ClientSecurity | None = None
) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(consumer_config(bootstrap, security))
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
            for p in range(partitions)
        }
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# Driver workers (spawned processes; each reports one result dict on the queue)
# --------------------------------------------------------------------------------------------


@dataclass
class ProduceJob:
    bootstrap: str
    topic: str
    partitions: list[int]
    messages: int
    value_bytes: int
    acks: str
    linger_ms: int
    compression: str
    idempotent: bool
    deadline_s: float
    security: ClientSecurity = PLAINTEXT
    keys: int = 0  # records get the keys k0 .. k(keys - 1) in turn; 0: no key


@dataclass
class FetchJob:
    bootstrap: str
    topic: str
    ranges: Ranges
    passes: int
    stall_s: float
    security: ClientSecurity = PLAINTEXT


def _wait_start(out: Any, start: Any, wid: int) -> None:
    out.put(("ready", wid, None))
    start.wait()


def report_outcome(work: Callable[..., dict[str, Any]], wid: int, job: Any, out: Any, start: Any):
    """Run a worker's ``work`` and put its result, or its exception, on the parent's queue."""
    try:
        out.put(("result", wid, work(wid, job, out, start)))
    except Exception as exc:  # reported to the parent, which records it
        out.put(("error", wid, f"{type(exc).__name__}: {exc}"))


def produce_worker(wid: int, job: ProduceJob, out: Any, start: Any) -> None:
    report_outcome(_produce, wid, job, out, start)


def _produce(wid: int, job: ProduceJob, out: Any, start: Any) -> dict[str, Any]:
    from confluent_kafka import Producer

    failed: list[str] = []  # delivery failures (only errors get a delivery report)
    errors: list[str] = []  # client-level errors and a deadline note

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    conf = producer_config(
        job.bootstrap, job.acks, job.linger_ms, job.compression, job.idempotent, job.security
    )
    conf |= {
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        "error_cb": lambda e: errors.append(str(e)),
    }
    producer = Producer(conf)
    producer.list_topics(job.topic, timeout=30)  # connect + metadata before the clock starts
    values = make_values(job.value_bytes)
    keys = [b"k%d" % k for k in range(job.keys)] or [None]
    n_keys = len(keys)
    parts = job.partitions
    n_parts = len(parts)
    _wait_start(out, start, wid)

    cpu0, t0 = self_cpu_seconds(), time.monotonic()
    deadline = t0 + job.deadline_s
    produce, poll = producer.produce, producer.poll
    topic = job.topic
    produced = job.messages
    for i in range(job.messages):
        value, part = values[i % VALUE_POOL], parts[(i + wid) % n_parts]
        key = keys[(i // n_parts) % n_keys]  # each partition cycles through the keys
        while True:
            try:
                produce(topic, value, key, part)
                break
            except BufferError:
                poll(0.002)
        if i % 2048 == 0:
            poll(0)
            if time.monotonic() > deadline:
                errors.append(f"deadline: only {i} of {job.messages} produced")
                produced = i
                break
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    t1 = time.monotonic()
    return {
        "start": t0,
        "end": t1,
        "records": produced - len(failed) - remaining,
        "unacked": remaining,
        "complete": produced == job.messages and not failed and not remaining,
        "errors": (failed + errors)[:5],
        "error_count": len(failed) + len(errors),
        "cpu_s": self_cpu_seconds() - cpu0,
    }


def fetch_worker(wid: int, job: FetchJob, out: Any, start: Any) -> None:
    report_outcome(_fetch, wid, job, out, start)


def _fetch(wid: int, job: FetchJob, out: Any, start: Any) -> dict[str, Any]:
    from confluent_kafka import Consumer

    errors: list[str] = []
    conf = consumer_config(job.bootstrap, job.security)
    conf["error_cb"] = lambda e: errors.append(str(e))
    consumer = Consumer(conf)
    consumer.list_topics(job.topic, timeout=30)
    _wait_start(out, start, wid)

    cpu0, t0 = self_cpu_seconds(), time.monotonic()
    records = nbytes = 0
    complete = True
    for _ in range(job.passes):
        r, b, ok = _fetch_pass(consumer, job, errors)
        records, nbytes = records + r, nbytes + b
        if not ok:
            complete = False
            break
    t1 = time.monotonic()
    cpu = self_cpu_seconds() - cpu0
    consumer.close()
    return {
        "start": t0,
        "end": t1,
        "records": records,
        "bytes": nbytes,
        "complete": complete,
        "errors": errors[:5],
        "error_count": len(errors),
        "cpu_s": cpu,
    }


def _fetch_pass(consumer: Any, job: FetchJob, errors: list[str]) -> tuple[int, int, bool]:
    """Read every range once; returns (records, value bytes, completed)."""
    from confluent_kafka import TopicPartition

    todo = {p: end for p, (begin, end) in job.ranges.items() if end > begin}
    left = sum(end - job.ranges[p][0] for p, end in todo.items())
    tps = [TopicPartition(job.topic, p, job.ranges[p][0]) for p in todo]
    consumer.assign(tps)
    consumer.resume(tps)  # partitions paused at the end of an earlier pass
    records = nbytes = 0
    last_progress = time.monotonic()
    while todo:
        # consume() waits for all it asked for (or the timeout): never ask for more than is left
        msgs = consumer.consume(max(1, min(10_000, left)), 0.5)
        if msgs:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > job.stall_s:
            errors.append(f"stalled {job.stall_s}s with partitions {sorted(todo)} unfinished")
            return records, nbytes, False
        for m in msgs:
            if m.error():
                errors.append(str(m.error()))
                continue
            p, off = m.partition(), m.offset()
            end = todo.get(p)
            if end is None or off >= end:
                continue
            records += 1
            left -= 1
            nbytes += len(m.value())
            if off == end - 1:
                del todo[p]
                consumer.pause([TopicPartition(job.topic, p)])
    consumer.unassign()
    return records, nbytes, True


# --------------------------------------------------------------------------------------------
# Running workers and turning their results into phase figures
# --------------------------------------------------------------------------------------------


def run_workers(
    target: Callable[..., None], jobs: list[Any], broker: Broker, timeout: float
) -> tuple[list[dict[str, Any]], Usage, list[str]]:
    """Run one spawned process per job; returns (results, the broker's usage, errors).

    Broker CPU is sampled after every worker has connected and before they are released."""
    ctx = mp.get_context("spawn")
    out, start = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(i, j, out, start)) for i, j in enumerate(jobs)]
    for p in procs:
        p.start()
    errors: list[str] = []
    try:
        ready = _collect(out, set(range(len(jobs))), broker, procs, 120.0, "ready", errors)
        before = broker.usage()
        start.set()
        results = _collect(out, set(ready), broker, procs, timeout, "result", errors)
        usage = broker.usage() - before
    finally:
        release_and_reap(procs, start)
    if not results:
        raise RuntimeError("; ".join(errors) or "no driver results")
    return list(results.values()), usage, errors


def release_and_reap(procs: list[Any], start: Any) -> None:
    """Let waiting workers go (so none blocks forever), then join them; kill stragglers."""
    start.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()


def _collect(
    queue: Any,
    waiting: set[int],
    broker: Broker,
    procs: list[Any],
    timeout: float,
    kind: str,
    errors: list[str],
) -> dict[int, Any]:
    """Wait until every worker in `waiting` sent `kind` or an error (or died)."""
    import queue as queue_mod

    got: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while waiting:
        if time.monotonic() > deadline:
            raise RuntimeError(f"driver workers {sorted(waiting)} gave no {kind} in {timeout:.0f}s")
        if not broker.alive():
            raise RuntimeError(f"broker exited:\n{broker.tail()}")
        try:
            tag, wid, payload = queue.get(timeout=0.5)
        except queue_mod.Empty:
            for wid in [w for w in waiting if procs[w].exitcode is not None]:
                errors.append(f"worker {wid} exited with code {procs[wid].exitcode}")
                waiting.discard(wid)
            continue
        waiting.discard(wid)
        if tag == "error":
            errors.append(f"worker {wid}: {payload}")
        else:
            got[wid] = payload
    return got


def phase_figures(
    results: list[dict[str, Any]],
    value_bytes: int,
    broker: Broker,
    usage: Usage,
    errors: list[str],
) -> dict[str, Any]:
    broker_cpu = usage.cpu_s
    records = sum(r["records"] for r in results)
    nbytes = sum(r.get("bytes", r["records"] * value_bytes) for r in results)
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    driver_cpu = sum(r["cpu_s"] for r in results)
    gib = nbytes / GIB
    errors = errors + [e for r in results for e in r["errors"]]
    out = {
        "records": records,
        "bytes": nbytes,
        "seconds": round(wall, 3),
        "mb_s": round(nbytes / MB / wall, 1) if wall > 0 else None,
        "records_s": round(records / wall) if wall > 0 else None,
        "broker_cpu_s": round(broker_cpu, 2),
        "broker_cpu_s_per_gib": round(broker_cpu / gib, 3) if gib > 0 else None,
        "broker_cpu_util": round(broker_cpu / wall, 2) if wall > 0 else None,
        "broker_wakeups_per_gib": round(usage.wakeups / gib) if gib > 0 else None,
        "broker_page_faults_per_gib": round(usage.page_faults / gib) if gib > 0 else None,
        "driver_procs": len(results),
        "driver_cpu_s": round(driver_cpu, 2),
        "driver_cpu_util": round(driver_cpu / wall, 2) if wall > 0 else None,
        "broker_rss_mib": round(broker.rss_mib(), 1),
        "error_count": sum(r["error_count"] for r in results) + len(errors),
    }
    if errors:
        out["errors"] = errors[:5]
    if any(not r["complete"] for r in results):
        out["incomplete"] = True
    return out


def split(items: list[int], n: int) -> list[list[int]]:
    return [items[i::n] for i in range(n) if items[i::n]]


def run_produce(broker: Broker, args: argparse.Namespace, acks: str, label: str) -> dict[str, Any]:
    total = messages_per_phase(args)
    procs = max(1, args.producers)
    deadline = max(120.0, total * args.value_bytes / (2 * MB))  # >= 2 MB/s or it is abandoned
    jobs = [
        ProduceJob(
            bootstrap=broker.addr,
            topic=TOPIC,
            partitions=list(range(args.partitions)),
            messages=total // procs + (1 if i < total % procs else 0),
            value_bytes=args.value_bytes,
            acks=acks,
            linger_ms=args.linger_ms,
            compression=args.compression,
            idempotent=args.idempotence,
            deadline_s=deadline,
            security=client_security(broker),
            keys=args.keys,
        )
        for i in range(procs)
    ]
    log(f"{label}: producing {total} x {args.value_bytes} B, acks={acks}, {procs} process(es)")
    results, usage, errors = run_workers(produce_worker, jobs, broker, deadline + 180)
    fig = phase_figures(results, args.value_bytes, broker, usage, errors)
    fig["acks"] = int(acks)
    log(
        f"{label}: {fig['mb_s']} MB/s, {fig['records_s']} rec/s, broker "
        f"{fig['broker_cpu_s_per_gib']} CPU-s/GiB, {fig['broker_wakeups_per_gib']} wake-ups/GiB, "
        f"{fig['broker_page_faults_per_gib']} page faults/GiB, "
        f"driver {fig['driver_cpu_s']} CPU-s"
    )
    return fig


def run_fetch(
    broker: Broker, args: argparse.Namespace, ranges: Ranges, passes: int, label: str
) -> dict[str, Any]:
    procs = max(1, min(args.consumers, len(ranges)))
    security = client_security(broker)
    jobs = [
        FetchJob(
            broker.addr, TOPIC, {p: ranges[p] for p in group}, passes, args.stall_seconds, security
        )
        for group in split(sorted(ranges), procs)
    ]
    per_pass = sum(end - begin for begin, end in ranges.values())
    log(f"{label}: reading {per_pass} records x {passes} pass(es), {len(jobs)} process(es)")
    expected_s = passes * per_pass * args.value_bytes / (2 * MB)
    requests = broker.s3_requests
    start = requests.mark() if requests else 0
    results, usage, errors = run_workers(fetch_worker, jobs, broker, max(300.0, expected_s))
    fig = phase_figures(results, args.value_bytes, broker, usage, errors)
    fig["passes"] = passes
    if requests and fig.get("bytes"):
        fig["s3_requests_per_gib"] = per_gib(requests.since(start), fig["bytes"])
    log(
        f"{label}: {fig['mb_s']} MB/s, {fig['records_s']} rec/s, broker "
        f"{fig['broker_cpu_s_per_gib']} CPU-s/GiB, {fig['broker_wakeups_per_gib']} wake-ups/GiB, "
        f"{fig['broker_page_faults_per_gib']} page faults/GiB, "
        f"driver {fig['driver_cpu_s']} CPU-s"
    )
    return fig


def messages_per_phase(args: argparse.Namespace) -> int:
    return max(1, int(args.gib * GIB) // args.value_bytes)


# --------------------------------------------------------------------------------------------
# Latency at a fixed offered rate (in this process; a single producer is plenty at 10 MB/s)
# --------------------------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def run_latency(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    rate = args.latency_rate_mb * MB
    warmup, seconds = args.latency_warmup, args.latency_seconds
    log(
        f"latency: {args.latency_rate_mb} MB/s offered for {warmup}+{seconds}s, acks=-1, "
        f"linger.ms={args.latency_linger_ms}"
    )
    latencies: list[float] = []
    errors: list[str] = []

    def on_delivery(sent_at: float, err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        elif sent_at >= measure_from:
            latencies.append(time.monotonic() - sent_at)

    conf = producer_config(
        broker.addr, "-1", args.latency_linger_ms, security=client_security(broker)
    )
    conf["error_cb"] = lambda e: errors.append(str(e))
    if args.latency_max_in_flight is not None:
        conf["max.in.flight.requests.per.connection"] = args.latency_max_in_flight
    producer = Producer(conf)
    producer.list_topics(TOPIC, timeout=30)
    values = make_values(args.value_bytes)
    interval = args.value_bytes / rate
    cpu0, bcpu0 = self_cpu_seconds(), broker.cpu_seconds()
    t0 = time.monotonic()
    measure_from, stop_at = t0 + warmup, t0 + warmup + seconds
    sent = _paced_produce(producer, values, args.partitions, interval, t0, stop_at, on_delivery)
    send_wall = time.monotonic() - t0
    unacked = producer.flush(120)
    lat_ms = sorted(x * 1000 for x in latencies)
    fig = {
        "offered_mb_s": args.latency_rate_mb,
        "achieved_mb_s": round(sent * args.value_bytes / MB / send_wall, 2),
        "acks": -1,
        "linger_ms": args.latency_linger_ms,
        "max_in_flight": args.latency_max_in_flight,
        "flush_interval_ms": args.flush_interval_ms,
        "measured_records": len(lat_ms),
        "p50_ms": _round(percentile(lat_ms, 0.50)),
        "p99_ms": _round(percentile(lat_ms, 0.99)),
        "max_ms": round(lat_ms[-1], 2) if lat_ms else None,
        "mean_ms": round(sum(lat_ms) / len(lat_ms), 2) if lat_ms else None,
        "broker_cpu_s": round(broker.cpu_seconds() - bcpu0, 2),
        "driver_cpu_s": round(self_cpu_seconds() - cpu0, 2),
        "broker_rss_mib": round(broker.rss_mib(), 1),
        "error_count": len(errors),
    }
    if errors:
        fig["errors"] = errors[:5]
    if unacked:
        fig["incomplete"] = True
        fig["unacked"] = unacked
    log(
        f"latency: p50 {fig['p50_ms']} ms, p99 {fig['p99_ms']} ms, max {fig['max_ms']} ms "
        f"({len(lat_ms)} records)"
    )
    return fig


def _paced_produce(
    producer: Any,
    values: list[bytes],
    partitions: int,
    interval: float,
    t0: float,
    stop_at: float,
    on_delivery: Callable[[float, Any, Any], None],
) -> int:
    """Produce one value every `interval` seconds until stop_at (in ~1 ms ticks: librdkafka's
    poll() timeout has millisecond resolution) and serve delivery callbacks in between."""
    sent = 0
    while True:
        now = time.monotonic()
        if now >= stop_at:
            return sent
        while t0 + sent * interval <= now:
            cb = functools.partial(on_delivery, time.monotonic())
            producer.produce(TOPIC, values[sent % VALUE_POOL], None, sent % partitions, cb)
            sent += 1
        producer.poll(0.001)


# --------------------------------------------------------------------------------------------
# The suite
# --------------------------------------------------------------------------------------------


def tail_ranges(marks: dict[int, tuple[int, int]], records_per_partition: int) -> Ranges:
    return {p: (max(low, high - records_per_partition), high) for p, (low, high) in marks.items()}


def head_ranges(marks: dict[int, tuple[int, int]], records_per_partition: int) -> Ranges:
    return {p: (low, min(high, low + records_per_partition)) for p, (low, high) in marks.items()}


def fetch_cache_phase(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    """Re-read the newest data that fits in the cache (window) until --gib has been read."""
    window = int(args.cache_bytes * args.cache_window_fraction)
    per_part = max(1, window // args.partitions // args.value_bytes)
    marks = watermarks(broker.addr, TOPIC, args.partitions, client_security(broker))
    ranges = tail_ranges(marks, per_part)
    window_bytes = sum(e - b for b, e in ranges.values()) * args.value_bytes
    if window_bytes == 0:
        raise RuntimeError("topic is empty; nothing to fetch")
    passes = max(1, math.ceil(args.gib * GIB / window_bytes))
    fig = run_fetch(broker, args, ranges, passes, "fetch_cache")
    fig["window_bytes"] = window_bytes
    return fig


def fetch_cold_phase(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    """Read the first --gib of the topic once, right after a restart (empty cache)."""
    per_part = max(1, messages_per_phase(args) // args.partitions)
    marks = watermarks(broker.addr, TOPIC, args.partitions, client_security(broker))
    ranges = head_ranges(marks, per_part)
    return run_fetch(broker, args, ranges, 1, "fetch_cold")


COMPARED_PHASES = {
    "produce_acks_all": lambda broker, args: run_produce(broker, args, "-1", "produce_acks_all"),
    "fetch_cache": fetch_cache_phase,
}


def wait_idle(broker: Broker, timeout: float = 90.0) -> None:
    """Waits until the broker is done with what the last phase left it (compacting the
    write-ahead data a produce phase wrote into segments): under 4 % of a core for one whole
    compaction interval and a second more. A shorter quiet spell is no proof: compaction runs
    on the interval's tick, so a phase that ends soon after one tick leaves its data
    uncompacted until the next (and it would land in a later phase, after a restart even)."""
    deadline = time.monotonic() + timeout
    quiet_needed = COMPACTION_INTERVAL_S + 1.0
    quiet_since = time.monotonic()
    last = broker.cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = broker.cpu_seconds()
        if now - last >= 0.04:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_needed:
            return
        last = now
    log(f"broker not idle after {timeout:.0f} s; measuring anyway")


def produce_until_idle(
    broker: Broker, args: argparse.Namespace, acks: str, label: str
) -> dict[str, Any]:
    """A produce phase, then the wait until the broker has compacted what it wrote: that
    tail's CPU is part of producing (``broker_cpu_s_per_gib_with_compaction``), and the next
    phase's figures are its own, not the compaction's."""
    requests = broker.s3_requests
    start = requests.mark() if requests else 0
    fig = run_produce(broker, args, acks, label)
    produced = requests.mark() if requests else 0
    before = broker.cpu_seconds()
    wait_idle(broker)
    tail = broker.cpu_seconds() - before
    fig["compaction_tail_cpu_s"] = round(tail, 2)
    if fig.get("bytes") and fig.get("broker_cpu_s_per_gib") is not None:
        with_tail = fig["broker_cpu_s_per_gib"] + tail / (fig["bytes"] / GIB)
        fig["broker_cpu_s_per_gib_with_compaction"] = round(with_tail, 3)
    log(f"{label}: compaction afterwards took {tail:.2f} broker CPU-s")
    if requests and fig.get("bytes"):
        # During the phase (write-ahead objects, and the compaction running beside them), after
        # it (the compaction tail), and both.
        window, after = requests.since(start), requests.since(produced)
        window.subtract(after)
        fig["s3_requests_per_gib"] = {
            "produce_window": per_gib(+window, fig["bytes"]),
            "compaction_tail": per_gib(after, fig["bytes"]),
            "total": per_gib(requests.since(start), fig["bytes"]),
        }
        log(f"{label}: S3 requests per GiB {fig['s3_requests_per_gib']['total']}")
    return fig


def security_cost(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    """--compare-plaintext: produce_acks_all and fetch_cache over the PLAINTEXT listener and
    over the secured one of the same broker, alternately, ``args.compare_plaintext`` times
    each (the first of a pair alternates too, so that a drift of the broker's state over the
    run weighs on both sides). Each phase's broker CPU counts until the broker is idle again,
    so that the segments a produce phase's data is compacted into count for that phase and
    not for whichever runs next; the medians of CPU per GiB and their ratio."""
    cpu: dict[str, dict[str, list[float]]] = {
        name: {"plaintext": [], "secured": []} for name in COMPARED_PHASES
    }
    mb_s: dict[str, dict[str, list[float]]] = {
        name: {"plaintext": [], "secured": []} for name in COMPARED_PHASES
    }
    for round_no in range(args.compare_plaintext):
        order = ["plaintext", "secured"] if round_no % 2 == 0 else ["secured", "plaintext"]
        for side in order:
            for name, run in COMPARED_PHASES.items():
                log(f"security_cost round {round_no + 1}/{args.compare_plaintext}: {side} {name}")
                wait_idle(broker)
                before = broker.cpu_seconds()
                with over_plaintext(broker) if side == "plaintext" else contextlib.nullcontext():
                    fig = run(broker, args)
                wait_idle(broker)
                cpu[name][side].append(
                    round((broker.cpu_seconds() - before) / (fig["bytes"] / GIB), 3)
                )
                mb_s[name][side].append(fig["mb_s"])

    cost: dict[str, Any] = {"rounds": args.compare_plaintext}
    for name, sides in cpu.items():
        medians = {side: statistics.median(runs) for side, runs in sides.items()}
        cost[name] = {
            "plaintext_cpu_s_per_gib": sides["plaintext"],
            "secured_cpu_s_per_gib": sides["secured"],
            "plaintext_mb_s": statistics.median(mb_s[name]["plaintext"]),
            "secured_mb_s": statistics.median(mb_s[name]["secured"]),
            "cpu_ratio": round(medians["secured"] / medians["plaintext"], 3),
        }
        log(f"security_cost {name}: CPU per GiB secured / plaintext = {cost[name]['cpu_ratio']}")
    return cost


@dataclass
class Suite:
    args: argparse.Namespace
    opts: BrokerOptions
    root: Path
    out: dict[str, Any]
    exit_codes: list[int | None] = field(default_factory=list)
    live: list[Broker] = field(default_factory=list)
    anon: dict[int, AnonPeak] = field(default_factory=dict)

    def start(self, store: str, data_dir: Path) -> Broker:
        opts = BrokerOptions(**{**self.opts.__dict__, "store": store})
        broker = start_broker(opts, data_dir)
        self.live.append(broker)
        self.anon[broker.pid] = AnonPeak(broker.pid)
        return broker

    def stop(self, broker: Broker, rss_key: str) -> None:
        pid = broker.pid if broker.alive() else None
        if broker.alive():
            self.out[rss_key] = round(broker.peak_rss_mib(), 1)
            anon = self.anon.pop(broker.pid).stop()
            self.out[rss_key.replace("peak_rss", "peak_anon_rss")] = anon
        code = broker.stop()
        self.exit_codes.append(code)
        self.live.remove(broker)
        log(f"broker pid {pid} stopped, exit code {code}")
        if code != 0:
            self.error(f"broker exit code {code} after SIGTERM:\n{broker.tail()}")

    def error(self, msg: str) -> None:
        log(f"ERROR: {msg}")
        self.out.setdefault("errors", []).append(msg)

    def phase(
        self,
        name: str,
        fn: Callable[[], dict[str, Any]],
        always: bool = False,
        into: dict[str, Any] | None = None,
        broker: str = "",
    ) -> bool:
        """Runs phase ``name`` if asked for (or ``always``), its figures or its error under
        ``name`` in ``into`` (the bench's output by default); ``broker`` names a peer's."""
        if not always and name not in self.args.phases:
            return False
        out = self.out if into is None else into
        try:
            out[name] = fn()
            return True
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            self.error(f"{broker}{name}: {type(exc).__name__}: {exc}")
            return False

    def run(self) -> None:
        args = self.args
        main_dir = self.root / "main"
        broker = self.start(args.store, main_dir)
        create_topic(broker.addr, TOPIC, args.partitions, client_security(broker))
        self.out["broker_rss_mib_idle"] = round(broker.rss_mib(), 1)
        self.phase(
            "produce_acks_all", lambda: produce_until_idle(broker, args, "-1", "produce_acks_all")
        )
        self.phase(
            "produce_acks_1", lambda: produce_until_idle(broker, args, "1", "produce_acks_1")
        )
        self.phase("latency", lambda: run_latency(broker, args))
        self.phase("fetch_cache", lambda: fetch_cache_phase(broker, args))
        if args.compare_plaintext and self.opts.security is not None:
            self.phase("security_cost", lambda: security_cost(broker, args), True)
        with contextlib.suppress(Exception):
            marks = watermarks(broker.addr, TOPIC, args.partitions, client_security(broker))
            self.out["topic_bytes"] = sum(h - lo for lo, h in marks.values()) * args.value_bytes
        self.stop(broker, "broker_peak_rss_mib")
        if "fetch_cold" in args.phases:
            self.cold(main_dir)
        if args.peer == "kafka":
            self.kafka()

    def kafka(self) -> None:
        """The phases KafScale ran, run against Apache Kafka, and the ratios of the figures."""
        import peers  # it imports this module: loaded only when asked for

        args = self.args
        log(f"starting Apache Kafka {peers.KAFKA_VERSION}")
        peer = peers.start_kafka(self.root, partitions=args.partitions)
        out: dict[str, Any] = {
            "name": f"Apache Kafka {peers.KAFKA_VERSION} (KRaft, one node, local disk, "
            f"heap {peers.KAFKA_HEAP})"
        }
        self.out["peer"] = out
        # Its produce phase counts the produce window only: Kafka defers no work like
        # compaction, and its JVM never idles below wait_idle's 4 % of a core.
        phases: dict[str, Callable[[], dict[str, Any]]] = {
            "produce_acks_all": lambda: run_produce(peer, args, "-1", "kafka produce"),
            "latency": lambda: run_latency(peer, args),
            "fetch_cache": lambda: fetch_cache_phase(peer, args),
        }
        try:
            create_topic(peer.addr, TOPIC, args.partitions, None)
            # A quarter GiB first, not measured: the JVM compiles its hot paths meanwhile.
            warm_up = argparse.Namespace(**{**vars(args), "gib": min(0.25, args.gib)})
            run_produce(peer, warm_up, "-1", "kafka warm-up")
            for name, run in phases.items():
                self.phase(name, run, into=out, broker="kafka ")
            out["peak_rss_mib"] = round(peer.peak_rss_mib(), 1)
        finally:
            peer.stop()
        self.out["ratios_to_peer"] = peer_ratios(self.out, out)
        log(f"KafScale / Kafka: {json.dumps(self.out['ratios_to_peer'])}")

    def cold(self, main_dir: Path) -> None:
        args = self.args
        store = "local" if args.store == "memory" else args.store
        if store == args.store:
            data_dir = main_dir  # the topic written above is still there
        else:
            data_dir = self.root / "cold"
            broker = self.start("local", data_dir)
            create_topic(broker.addr, TOPIC, args.partitions, client_security(broker))
            ok = self.phase(
                "produce_local", lambda: run_produce(broker, args, "-1", "produce_local"), True
            )
            self.stop(broker, "local_broker_peak_rss_mib")
            if not ok:
                return
        broker = self.start(store, data_dir)
        self.out["cold_broker_rss_mib_start"] = round(broker.rss_mib(), 1)
        self.phase("fetch_cold", lambda: fetch_cold_phase(broker, args))
        self.stop(broker, "cold_broker_peak_rss_mib")

    def shutdown(self) -> None:
        for broker in list(self.live):
            with contextlib.suppress(Exception):
                self.stop(broker, f"broker_{broker.pid}_peak_rss_mib")


def targets(out: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The issue's targets next to the measured figure (informational, never fails the run)."""

    def get(phase: str, key: str) -> Any:
        return (out.get(phase) or {}).get(key)

    def entry(value: Any, op: str, limit: float) -> dict[str, Any]:
        met = None if value is None else (value <= limit if op == "<=" else value >= limit)
        return {"value": value, "target": f"{op} {limit:g}", "met": met}

    budget = round(100 + args.cache_bytes / MIB + 2 * args.buffered_bytes / MIB, 1)
    rss: dict[str, Any] = {}
    for key in ("broker_peak_rss_mib", "local_broker_peak_rss_mib", "cold_broker_peak_rss_mib"):
        if key in out:
            rss[key] = entry(out[key], "<=", budget)
    # The broker's own memory: 64 MiB beyond the cache and the bytes in flight.
    own_budget = round(64 + args.cache_bytes / MIB + args.buffered_bytes / MIB, 1)
    own = ["local_broker_peak_anon_rss_mib", "cold_broker_peak_anon_rss_mib"]
    if args.store != "memory":  # (the memory store's objects are in the broker's heap)
        own.append("broker_peak_anon_rss_mib")
    for key in own:
        if key in out:
            rss[key] = entry(out[key], "<=", own_budget)
    if args.store == "memory" and "broker_peak_rss_mib" in out and "topic_bytes" in out:
        # the memory store keeps every segment in the broker's own heap
        excl = round(out["broker_peak_rss_mib"] - out["topic_bytes"] / MIB, 1)
        rss["broker_peak_rss_mib_excl_memory_store"] = entry(excl, "<=", budget)
    return (
        rss
        | {
            # an object store over HTTP costs the uploads on top of what the memory store does
            "produce_acks_all_broker_cpu_s_per_gib": entry(
                get("produce_acks_all", "broker_cpu_s_per_gib"),
                "<=",
                1.0 if args.store == "memory" else 1.5,
            ),
            "fetch_cache_broker_cpu_s_per_gib": entry(
                get("fetch_cache", "broker_cpu_s_per_gib"), "<=", 0.5
            ),
            "fetch_cold_broker_cpu_s_per_gib": entry(
                get("fetch_cold", "broker_cpu_s_per_gib"), "<=", 1.0
            ),
            "produce_acks_all_mb_s": entry(get("produce_acks_all", "mb_s"), ">=", 100),
            "fetch_cache_mb_s": entry(get("fetch_cache", "mb_s"), ">=", 300),
            "latency_p99_ms": entry(get("latency", "p99_ms"), "<=", args.flush_interval_ms + 30),
        }
        | {
            f"security_cost_{name}_cpu_ratio": entry(
                (get("security_cost", name) or {}).get("cpu_ratio"), "<=", 1.3
            )
            for name in COMPARED_PHASES
            if "security_cost" in out
        }
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="GiB per produce/fetch phase")
    ap.add_argument(
        "--store",
        choices=["memory", "local", "s3"],
        default="memory",
        help="segment store of the main broker: in its heap, a local directory, or moto's S3 "
        "server started by the bench (the cold phase restarts it on the same data; with the "
        "memory store it writes the topic again into a local-dir broker first)",
    )
    ap.add_argument(
        "--s3-server",
        choices=S3_KINDS,
        default="moto",
        help="the S3 server of --store s3: moto, or s3fast (bench/s3fast, Go) for the speeds "
        "moto cannot keep up with",
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the broker")
    ap.add_argument(
        "--peer",
        choices=["kafka"],
        default=None,
        help="then run the produce, latency and fetch-from-cache phases the same way against "
        "Apache Kafka (bench/peers.py: KRaft, one node, local disk) and report this broker's "
        "figures as ratios of its",
    )
    ap.add_argument("--flush-interval-ms", type=int, default=250)
    ap.add_argument("--cache-bytes", type=int, default=256 * MIB)
    ap.add_argument("--segment-bytes", type=int, default=None, help="passed on if given")
    ap.add_argument("--readahead-segments", type=int, default=None, help="passed on if given")
    ap.add_argument(
        "--buffered-bytes",
        type=int,
        default=None,
        help="bytes the broker may hold in requests and answers in flight, passed as its "
        "--queued-max-request-bytes, and the buffered bytes of the RSS budgets (100 MiB + "
        "cache + 2x this for VmHWM, 64 MiB + cache + this for anonymous memory); default "
        "partitions x segment bytes",
    )
    ap.add_argument("--broker-log-level", default="info")
    ap.add_argument("--broker-arg", action="append", default=[], help="extra broker flag")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=1, help="producer processes per phase")
    ap.add_argument("--consumers", type=int, default=2, help="consumer processes per phase")
    ap.add_argument("--linger-ms", type=int, default=10, help="linger.ms of throughput phases")
    ap.add_argument(
        "--keys",
        type=int,
        default=0,
        help="keyed records: the keys k0 .. k(N-1) in turn (0, the default: no key)",
    )
    ap.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression.type of the throughput producers",
    )
    ap.add_argument(
        "--idempotence",
        action="store_true",
        help="enable.idempotence of the throughput producers (librdkafka then keeps at most 5 "
        "requests in flight per broker)",
    )
    ap.add_argument("--latency-rate-mb", type=float, default=10.0, help="offered MB/s")
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--latency-warmup", type=float, default=1.0, help="seconds not measured")
    ap.add_argument("--latency-linger-ms", type=int, default=5)
    ap.add_argument(
        "--latency-max-in-flight",
        type=int,
        default=None,
        help="max.in.flight.requests.per.connection of the latency producer (librdkafka default)",
    )
    ap.add_argument(
        "--cache-window-fraction",
        type=float,
        default=0.5,
        help="fetch_cache re-reads the newest cache-bytes x this",
    )
    ap.add_argument(
        "--stall-seconds",
        type=float,
        default=30.0,
        help="give up a fetch when no record arrives for this long",
    )
    ap.add_argument(
        "--phases",
        default="produce_acks_all,produce_acks_1,latency,fetch_cache,fetch_cold",
        help="comma-separated subset of phases to run",
    )
    ap.add_argument(
        "--security",
        choices=SECURITY_MODES,
        default="plaintext",
        help="listener every client uses: plaintext (--broker-addr), or an SSL / SASL_SSL "
        f"(SASL {SASL_MECHANISM}) listener next to it, with a throwaway PKI",
    )
    ap.add_argument(
        "--compare-plaintext",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="with --security ssl/sasl_ssl: afterwards run produce_acks_all and fetch_cache "
        "ROUNDS times over each listener, alternately, and report the CPU ratio",
    )
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    args = ap.parse_args(argv)
    args.phases = set(args.phases.split(","))
    if args.buffered_bytes is None:
        args.buffered_bytes = args.partitions * (args.segment_bytes or DEFAULT_SEGMENT_BYTES)
    return args


RATIO_KEYS = (
    "broker_cpu_s_per_gib",
    "broker_cpu_s_per_gib_with_compaction",
    "mb_s",
    "p50_ms",
    "p99_ms",
)


def peer_ratios(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """This broker's figure ÷ the peer's, per phase both ran and figure both have (below 1:
    less CPU or latency, or less throughput), and of the peak RSS."""
    ratios: dict[str, Any] = {}
    for phase, theirs in peer.items():
        mine = ours.get(phase)
        if not isinstance(theirs, dict) or not isinstance(mine, dict):
            continue
        both = {
            key: round(mine[key] / theirs[key], 2)
            for key in RATIO_KEYS
            if isinstance(mine.get(key), int | float)
            and isinstance(theirs.get(key), int | float)
            and theirs[key]
        }
        if both:
            ratios[phase] = both
    if ours.get("broker_peak_rss_mib") and peer.get("peak_rss_mib"):
        ratios["peak_rss_mib"] = round(ours["broker_peak_rss_mib"] / peer["peak_rss_mib"], 2)
    return ratios


def driver_version() -> str:
    try:
        import confluent_kafka
    except ImportError:
        sys.exit("broker_bench: the driver needs confluent-kafka (pip install confluent-kafka)")
    client, lib = confluent_kafka.__version__, confluent_kafka.libversion()[0]
    return f"confluent-kafka {client}, librdkafka {lib}"


@contextlib.contextmanager
def scratch_dir(keep: bool) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kafscale-bench-"))
    try:
        yield root
    finally:
        if keep:
            log(f"data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def run_in_scratch(out: dict[str, Any], keep: bool, run: Callable[[Path], None]) -> int:
    """Runs a bench in a scratch dir, its failure noted in ``out["errors"]`` rather than
    raised, then prints ``out`` as the one JSON line of stdout."""
    with scratch_dir(keep) as root:
        try:
            run(root)
        except Exception as exc:
            out["errors"].append(f"{type(exc).__name__}: {exc}")
            log(f"error: {exc}")
    print(json.dumps(out), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict[str, Any] = {
        "store": args.store,
        "cold_store": "local" if args.store == "memory" else args.store,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "gib_per_phase": args.gib,
        "flush_interval_ms": args.flush_interval_ms,
        "cache_bytes": args.cache_bytes,
        "segment_bytes": args.segment_bytes,
        "producers": args.producers,
        "consumers": args.consumers,
        "linger_ms": args.linger_ms,
        "compression": args.compression,
        "idempotence": args.idempotence,
        "security": args.security,
        "driver": driver_version(),
        "cpus": os.cpu_count(),
    }
    with scratch_dir(args.keep_data) as root, contextlib.ExitStack() as stack:
        extra = list(args.broker_arg)
        requests = None
        if args.store == "s3":
            server = stack.enter_context(s3_server(root, args.s3_server))
            extra += s3_store_args(server)
            requests = S3Requests(server.log_path)
        opts = BrokerOptions(
            python=args.python,
            store=args.store,
            flush_interval_ms=args.flush_interval_ms,
            cache_bytes=args.cache_bytes,
            buffered_bytes=args.buffered_bytes,
            segment_bytes=args.segment_bytes,
            readahead_segments=args.readahead_segments,
            log_level=args.broker_log_level,
            extra_args=extra,
            security=make_listener_security(args.security, root),
            s3_requests=requests,
        )
        suite = Suite(args, opts, root, out)
        try:
            suite.run()
        except Exception as exc:
            suite.error(f"{type(exc).__name__}: {exc}")
        finally:
            suite.shutdown()
    out["broker_exit_codes"] = suite.exit_codes
    out["targets"] = targets(out, args)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
