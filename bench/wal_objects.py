"""Write-ahead objects per second, and produce latency, for producers in their defaults.

One broker (memory store by default; ``--store s3`` for moto's S3), a topic of ``--partitions``
partitions per run, and one producer at a time with nothing but its bootstrap address set:
librdkafka (confluent-kafka), kafka-python, and the Java client (tests/jvm, built with Maven
when ``mvn`` is there; skipped otherwise, and said so). Each offers 1 KiB values round-robin
over the partitions at each ``--rates`` (MB/s, MB = 10^6 bytes) for a second of warm-up and
``--seconds`` measured. Per run: the rate achieved, the broker's write-ahead objects per second
over the measured window (``kafscale_wal_objects_written_total`` from its /metrics), the bound
the design sets (4 per second at the default 250 ms flush interval, plus one per
``--wal-object-max-bytes`` written), and the latency from send to acknowledgement (p50, p99).
A producer that cannot keep up with the offered rate is reported at the rate it achieved.

Extra broker flags go through ``--broker-arg`` (e.g. ``--broker-arg=--flush-mode=arrival``),
so the same runs show what a flush setting costs in objects and buys in latency.

Usage: python bench/wal_objects.py [--rates 1,5,50] [--seconds 8] [--clients rdkafka,python,java]
Prints progress to stderr and one JSON line to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import broker_bench as bb
from s3_requests import S3Requests, per_gib
from s3_servers import moto_server, s3_store_args

VALUE_BYTES = 1024
OBJECT_CAP = 8 * bb.MIB  # the broker's default --wal-object-max-bytes
FLUSHES_PER_SECOND = 4  # at the default --flush-interval-ms 250
WARMUP_S = 1.0
JVM_START_S = 0.5
DRAIN_S = 30.0  # a producer that fell behind gets this long to be answered after its window


def wal_objects(metrics: str) -> float:
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("kafscale_wal_objects_written_total "):
                return float(line.split()[1])
    raise RuntimeError("the broker's /metrics has no kafscale_wal_objects_written_total")


def nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1)


class Window:
    """The broker's write-ahead objects over a producer's measured window."""

    def __init__(self, metrics: str) -> None:
        self.metrics = metrics
        self.marks: list[tuple[float, float]] = []

    def mark(self) -> None:
        self.marks.append((wal_objects(self.metrics), time.perf_counter()))

    def per_second(self) -> float:
        (first, began), (last, ended) = self.marks[0], self.marks[-1]
        return (last - first) / (ended - began)


class Paced:
    """Sends what an offered rate has due every millisecond; latencies of measured sends."""

    def __init__(self, rate_mb: float, partitions: int) -> None:
        self.per_second = rate_mb * bb.MB / VALUE_BYTES
        self.partitions = partitions
        self.values = [os.urandom(VALUE_BYTES) for _ in range(64)]
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.measured_from = 0.0
        self.last_ack = 0.0
        self.sent_measured = 0

    def acked(self, sent_at: float) -> None:
        self.last_ack = time.perf_counter()
        self.latencies.append((self.last_ack - sent_at) * 1000)

    def run(
        self,
        send: Callable[[bytes, int, bool], None],
        poll: Callable[[], None],
        seconds: float,
        window: Window,
    ) -> float:
        """Sends for a second of warm-up and ``seconds`` measured, marking the window's start
        and end; the measured window's length."""
        start = time.perf_counter()
        sent = 0
        measured_from: float | None = None
        while True:
            now = time.perf_counter()
            if measured_from is None and now - start >= WARMUP_S:
                window.mark()
                measured_from = self.measured_from = now
            if measured_from is not None and now - start >= WARMUP_S + seconds:
                window.mark()
                return now - measured_from
            due = int((now - start) * self.per_second)
            while sent < due:
                measured = measured_from is not None
                send(self.values[sent % 64], sent % self.partitions, measured)
                self.sent_measured += measured
                sent += 1
            poll()
            time.sleep(0.001)


def rdkafka_run(
    addr: str, topic: str, rate: float, args: argparse.Namespace, window: Window
) -> dict[str, Any]:
    from confluent_kafka import Producer

    paced = Paced(rate, args.partitions)
    producer = Producer({"bootstrap.servers": addr})

    def send(value: bytes, partition: int, measured: bool) -> None:
        sent_at = time.perf_counter()

        def done(err: Any, _msg: Any) -> None:
            if err is not None:
                paced.errors.append(str(err))
            elif measured:
                paced.acked(sent_at)

        while True:
            try:
                producer.produce(topic, value, partition=partition, on_delivery=done)
                return
            except BufferError:
                producer.poll(0.001)

    paced.run(send, lambda: producer.poll(0), args.seconds, window)
    producer.flush(DRAIN_S)
    return {"client": "librdkafka", **results(paced)}


def kafka_python_run(
    addr: str, topic: str, rate: float, args: argparse.Namespace, window: Window
) -> dict[str, Any]:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    paced = Paced(rate, args.partitions)
    producer = KafkaProducer(bootstrap_servers=addr)

    def send(value: bytes, partition: int, measured: bool) -> None:
        sent_at = time.perf_counter()
        future = producer.send(topic, value, partition=partition)
        if measured:
            future.add_callback(lambda _m: paced.acked(sent_at))
        future.add_errback(lambda e: paced.errors.append(str(e)))

    paced.run(send, lambda: None, args.seconds, window)
    with contextlib.suppress(KafkaTimeoutError):
        producer.flush(DRAIN_S)
    with contextlib.suppress(KafkaTimeoutError):
        producer.close(timeout=0)  # what is still unanswered is dropped (and counted)
    return {"client": "kafka-python", **results(paced)}


def results(paced: Paced) -> dict[str, Any]:
    """What the measured sends got; the rate achieved is theirs until the last was answered
    (a producer that fell behind answers long after the window)."""
    took = paced.last_ack - paced.measured_from
    acked = len(paced.latencies)
    return {
        "records": acked,
        "unanswered": paced.sent_measured - acked,
        "seconds": round(took, 2) if acked else None,
        "achieved_mb_s": round(acked * VALUE_BYTES / took / bb.MB, 2) if acked else 0.0,
        "p50_ms": nearest_rank(paced.latencies, 0.50),
        "p99_ms": nearest_rank(paced.latencies, 0.99),
        "errors": len(paced.errors),
        "first_error": paced.errors[0] if paced.errors else None,
    }


def java_run(
    addr: str, topic: str, rate: float, args: argparse.Namespace, window: Window
) -> dict[str, Any]:
    import jvm_producer
    from support import jvm

    jvm.classpath()  # built before the window's clock starts
    # The JVM's window is its own: marked here by the clock, from its start (about half a
    # second) and its warm-up on.
    marks = [
        threading.Timer(JVM_START_S + WARMUP_S, window.mark),
        threading.Timer(JVM_START_S + WARMUP_S + args.seconds, window.mark),
    ]
    for mark in marks:
        mark.start()
    try:
        got = jvm_producer.run(addr, topic, rate, args.seconds, VALUE_BYTES, args.partitions)
    finally:
        for mark in marks:
            mark.cancel()
    if len(window.marks) < 2:
        window.mark()  # it was answered before its window's end: the window ends here
    return {
        "client": "java",
        "seconds": got["seconds"],
        "records": got["records"],
        "achieved_mb_s": got["achieved_mb_s"],
        "p50_ms": got["p50_ms"],
        "p99_ms": got["p99_ms"],
        "errors": got["errors"],
        "first_error": got["first_error"],
    }


def whole_run(
    broker: bb.Broker,
    topic: str,
    partitions: int,
    cpu: float,
    requests: S3Requests | None,
    mark: int,
) -> dict[str, Any]:
    """What the run cost, warm-up included, until the broker is idle again (so the compaction
    of what it wrote counts): broker CPU-s and S3 requests per GiB written."""
    bb.wait_idle(broker)
    marks = bb.watermarks(broker.addr, topic, partitions, None)
    written = sum(high - low for low, high in marks.values()) * VALUE_BYTES
    if not written:
        return {}
    out: dict[str, Any] = {
        "broker_cpu_s_per_gib_with_compaction": round(
            (broker.cpu_seconds() - cpu) / (written / bb.GIB), 2
        )
    }
    if requests:
        out["s3_requests_per_gib"] = per_gib(requests.since(mark), written)
    return out


CLIENTS = {"rdkafka": rdkafka_run, "python": kafka_python_run, "java": java_run}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1,5,50", help="offered MB/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    ap.add_argument("--clients", default="rdkafka,python,java")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--store", choices=("memory", "s3"), default="memory")
    ap.add_argument("--broker-arg", action="append", default=[], help="passed to the broker")
    ap.add_argument("--keep-data", action="store_true")
    args = ap.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    if "java" in clients and shutil.which("mvn") is None:
        bb.log("no mvn on PATH: the Java client is skipped")
        clients.remove("java")
    rates = [float(r) for r in args.rates.split(",")]
    out: dict[str, Any] = {
        "store": args.store,
        "partitions": args.partitions,
        "broker_args": args.broker_arg,
        "driver": bb.driver_version(),
        "runs": [],
        "errors": [],
    }

    def run(root: Path) -> None:
        with contextlib.ExitStack() as stack:
            extra = list(args.broker_arg)
            requests = None
            if args.store == "s3":
                moto = stack.enter_context(moto_server(root))
                extra += s3_store_args(moto)
                requests = S3Requests(moto.log_path)
            metrics = f"127.0.0.1:{bb.procs.free_port()}"
            opts = bb.default_options(
                sys.executable, args.store, [*extra, "--metrics-addr", metrics]
            )
            broker = bb.start_broker(opts, root / "broker")
            stack.callback(broker.stop)
            for n, (client, rate) in enumerate((c, r) for c in clients for r in rates):
                topic = f"objects-{n}"
                bb.create_topic(broker.addr, topic, args.partitions, None)
                window = Window(metrics)
                cpu, mark = broker.cpu_seconds(), requests.mark() if requests else 0
                got = CLIENTS[client](broker.addr, topic, rate, args, window)
                achieved = got["achieved_mb_s"]
                row = {
                    "offered_mb_s": rate,
                    **got,
                    "wal_objects_per_s": round(window.per_second(), 2),
                    "bound_per_s": round(FLUSHES_PER_SECOND + achieved * bb.MB / OBJECT_CAP, 2),
                    **whole_run(broker, topic, args.partitions, cpu, requests, mark),
                }
                out["runs"].append(row)
                bb.log(
                    f"{client} at {rate} MB/s offered: {row['achieved_mb_s']} MB/s, "
                    f"{row['wal_objects_per_s']} objects/s (bound {row['bound_per_s']}), "
                    f"p50/p99 {row['p50_ms']}/{row['p99_ms']} ms, {row['errors']} errors, "
                    f"{row.get('broker_cpu_s_per_gib_with_compaction')} CPU-s/GiB with "
                    f"compaction, S3 {row.get('s3_requests_per_gib')}"
                )

    return bb.run_in_scratch(out, args.keep_data, run)


if __name__ == "__main__":
    sys.exit(main())
