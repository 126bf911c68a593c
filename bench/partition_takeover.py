"""KafScale partition-count benchmark: what idle partitions cost a broker, and how long a
restarted broker takes to own them all again.

For each metadata store (``embedded``: the redb store with segments in the data dir;
``etcd``: etcd + moto's S3 server, both started here as bench/cluster_bench.py does) one broker
is started, and topics of --per-topic partitions are created until the broker holds each of
--scales partitions (topics of at most 100 partitions: a bigger topic cannot be created on etcd
yet, see issue 13). At each scale, with no client connected, the broker's CPU is measured over
--idle-seconds. At the largest scale the broker is restarted, once after SIGKILL and once after
SIGTERM, and timed from the start of the new process until

* ``listening``: it accepts connections (start-up waits, bounded, for its partitions),
* ``owned``: its /metrics gauge ``kafscale_owned_partitions`` counts every partition,
* ``writable``: a produce (acks=all) to each of --sample partitions was acknowledged.

After a SIGKILL on etcd the old session's owner keys stay until its lease expires, so those
times include up to --lease-ttl-ms (printed next to them).

Prints progress to stderr and ONE JSON line with every figure to stdout. It measures; it does
not judge. Usage:
    python bench/partition_takeover.py [--stores embedded,etcd] [--scales 10000,40000,100000]
Build the package in release mode first (see bench/README.md). The broker is
``python -m kafscale.broker`` from --python with the environment's PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import broker_bench as bb
import cluster_bench as cb
from support.procs import free_port  # on the path broker_bench set

OWNED = re.compile(r"^kafscale_owned_partitions (\d+)", re.MULTILINE)
TOPICS_PER_REQUEST = 20


def owned_partitions(metrics_addr: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=30) as resp:
            found = OWNED.search(resp.read().decode(errors="replace"))
    except OSError:
        return None
    return int(found.group(1)) if found else None


def broker_options(python: str, extra: list[str]) -> bb.BrokerOptions:
    """A broker with the default settings on the local store, plus ``extra`` arguments."""
    return bb.BrokerOptions(
        python=python,
        store="local",
        flush_interval_ms=250,
        cache_bytes=64 * bb.MIB,
        segment_bytes=None,
        readahead_segments=None,
        log_level="info",
        extra_args=extra,
    )


class Subject:
    """One broker on one metadata store, restartable with the same data and settings."""

    def __init__(self, store: str, root: Path, args: argparse.Namespace) -> None:
        self.store = store
        self.root = root
        self.args = args
        self.services: list[cb.Service] = []
        self.metrics_addr = f"127.0.0.1:{free_port()}"
        extra = ["--metrics-addr", self.metrics_addr, "--lease-ttl-ms", str(args.lease_ttl_ms)]
        if store == "etcd":
            os.environ.update(cb.S3_CREDENTIALS)  # the brokers' environment comes from ours
            etcd, moto = cb.start_etcd(root), cb.start_moto(root)
            self.services = [etcd, moto]
            extra += ["--s3-bucket", cb.BUCKET, "--s3-region", cb.S3_CREDENTIALS["AWS_REGION"]]
            extra += ["--s3-endpoint", moto.endpoint, "--etcd-endpoints", etcd.endpoint]
        self.opts = broker_options(args.python, extra)
        try:
            self.broker = self.start()
        except BaseException:
            for service in self.services:
                service.cleanup()
            raise

    def start(self) -> bb.Broker:
        return bb.start_broker(self.opts, self.root / "broker", timeout=self.args.start_timeout)

    def close(self) -> None:
        if self.broker.alive():
            self.broker.stop()
        for service in self.services:
            service.cleanup()


def create_topics(subject: Subject, first: int, count: int, per_topic: int) -> list[str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": subject.broker.addr})
    names = [f"takeover-{i:05d}" for i in range(first, first + count)]
    for at in range(0, len(names), TOPICS_PER_REQUEST):
        chunk = names[at : at + TOPICS_PER_REQUEST]
        futures = admin.create_topics(
            [NewTopic(name, per_topic, 1) for name in chunk], operation_timeout=120
        )
        for future in futures.values():
            future.result(timeout=300)
    return names


def wait_owned(subject: Subject, want: int, timeout: float) -> float | None:
    """Seconds until the broker's gauge shows ``want`` owned partitions (None: timed out)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if owned_partitions(subject.metrics_addr) == want:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def idle_cpu(subject: Subject, seconds: float) -> float:
    """Percent of one core the broker used over ``seconds`` with nothing to do."""
    time.sleep(3)  # let the last creations' follow-up settle
    cpu0, t0 = subject.broker.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return round(100 * (subject.broker.cpu_seconds() - cpu0) / (time.monotonic() - t0), 2)


def produce_sample(bootstrap: str, sample: list[tuple[str, int]], timeout: float) -> float | None:
    """Seconds until one record (acks=all) to each sampled partition was acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(
        bb.producer_config(bootstrap, "-1", 0)
        | {"message.timeout.ms": 5_000, "retry.backoff.ms": 50, "retry.backoff.max.ms": 200}
    )
    left = set(sample)
    t0 = time.monotonic()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            left.discard((msg.topic(), msg.partition()))

    while left and time.monotonic() - t0 < timeout:
        for topic, partition in list(left):
            producer.produce(topic, b"takeover", None, partition, on_delivery)
        producer.flush(10)
    return None if left else time.monotonic() - t0


def restart(subject: Subject, how: str, total: int, sample: list[tuple[str, int]]) -> dict:
    old = subject.broker
    t_stop = time.monotonic()
    if how == "kill":
        old.kill()
    else:
        old.stop()
    stopped_s = time.monotonic() - t_stop
    t0 = time.monotonic()
    subject.broker = subject.start()
    listening_s = time.monotonic() - t0
    owned_wait = wait_owned(subject, total, subject.args.takeover_timeout)
    owned_s = None if owned_wait is None else time.monotonic() - t0
    writable = produce_sample(subject.broker.addr, sample, subject.args.takeover_timeout)
    writable_s = None if writable is None else time.monotonic() - t0
    figures = {
        "stop_s": round(stopped_s, 2),
        "listening_s": round(listening_s, 2),
        "owned_s": None if owned_s is None else round(owned_s, 2),
        "writable_s": None if writable_s is None else round(writable_s, 2),
        "lease_ttl_s": subject.args.lease_ttl_ms / 1000,
    }
    bb.log(f"{subject.store}: restart after {how}: {figures}")
    return figures


def run_store(store: str, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"scales": {}}
    with tempfile.TemporaryDirectory(prefix=f"kafscale-takeover-{store}-") as tmp:
        subject = Subject(store, Path(tmp), args)
        try:
            topics: list[str] = []
            for scale in args.scales:
                want = scale // args.per_topic - len(topics)
                t0 = time.monotonic()
                topics += create_topics(subject, len(topics), want, args.per_topic)
                total = len(topics) * args.per_topic
                owned_s = wait_owned(subject, total, args.takeover_timeout)
                created_s = time.monotonic() - t0
                cpu = idle_cpu(subject, args.idle_seconds)
                fig = {
                    "partitions": total,
                    "create_s": round(created_s, 1),
                    "all_owned": owned_s is not None,
                    "idle_cpu_pct": cpu,
                    "rss_mib": round(subject.broker.rss_mib(), 1),
                }
                out["scales"][str(total)] = fig
                bb.log(f"{store}: {fig}")
            total = len(topics) * args.per_topic
            rng = random.Random(7)
            sample = [
                (rng.choice(topics), rng.randrange(args.per_topic)) for _ in range(args.sample)
            ]
            sample = sorted(set(sample))
            for how in args.restarts:
                out[f"restart_after_{how}"] = restart(subject, how, total, sample)
            out["idle_cpu_after_restart_pct"] = idle_cpu(subject, args.idle_seconds)
        finally:
            subject.close()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--stores", default="embedded,etcd", help="comma list of embedded, etcd")
    p.add_argument("--scales", default="10000,40000,100000", help="partition totals, ascending")
    p.add_argument("--per-topic", type=int, default=100, help="partitions per topic (<= 100)")
    p.add_argument("--idle-seconds", type=float, default=20.0)
    p.add_argument("--sample", type=int, default=200, help="partitions produced to after restart")
    p.add_argument("--restarts", default="kill,term", help="comma list of kill, term")
    p.add_argument("--lease-ttl-ms", type=int, default=5_000)
    p.add_argument("--start-timeout", type=float, default=900.0)
    p.add_argument("--takeover-timeout", type=float, default=900.0)
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the broker")
    args = p.parse_args(argv)
    args.stores = [s for s in args.stores.split(",") if s]
    args.scales = [int(s) for s in args.scales.split(",") if s]
    args.restarts = [s for s in args.restarts.split(",") if s]
    return args


def main() -> None:
    args = parse_args()
    out = {"args": {k: v for k, v in vars(args).items()}}
    for store in args.stores:
        out[store] = run_store(store, args)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
