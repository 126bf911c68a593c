"""KafScale cluster benchmark: failover time, produce throughput and latency, and the S3 / etcd
writes per GiB, on a cluster of brokers sharing one etcd and one S3 server (moto).

Starts etcd (``etcd`` on PATH, Debian etcd-server), moto's S3 server and --brokers brokers
(``python -m kafscale.broker`` with --etcd-endpoints; build the package in release mode, e.g.
``pip install .``), drives them with confluent-kafka and prints progress to stderr and ONE JSON
line with every figure to stdout. It measures; it does not judge.

Phases (see bench/README.md):
  produce_acks_all  --gib of 1 KiB values, acks=-1, through the cluster; S3 requests (from the
                    moto request log) and etcd writes (from etcd's /metrics) during the phase
  latency           fixed offered rate, acks=-1, per-record delivery latency
  failover          kill -9 a broker, --kills times (each round the next broker, restarted
                    afterwards): time from the kill to the first acknowledged produce on each
                    partition it led
  handoff           the same once with SIGTERM (graceful release instead of lease expiry)

Usage: python bench/cluster_bench.py [--gib 0.25] [--brokers 3] [--kills 3] [--python PATH] ...
The driver helpers (produce workers, latency run, figures) come from bench/broker_bench.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import broker_bench as bb
from s3_servers import S3_BUCKET as BUCKET
from s3_servers import S3_CREDENTIALS, moto_server, s3_store_args
from support.procs import EtcdServer, MotoServer  # on the path broker_bench set

__all__ = ["S3_CREDENTIALS"]  # for the benches built on this one
MOTO_REQUEST = re.compile(r'"(GET|PUT|POST|DELETE|HEAD) /' + BUCKET + r'/(\S*) HTTP/[\d.]+" (\d+)')
ETCD_COUNTERS = {
    "proposals": "etcd_server_proposals_committed_total",
    "puts": "etcd_mvcc_put_total",
    "deletes": "etcd_mvcc_delete_total",
    "txns": "etcd_mvcc_txn_total",
}


# --------------------------------------------------------------------------------------------
# etcd and the S3 server
# --------------------------------------------------------------------------------------------


# The tests' process helpers: the same etcd and moto set-up, start-up checks and teardown.
Service = EtcdServer | MotoServer


def start_etcd(root: Path) -> EtcdServer:
    etcd = EtcdServer(root / "etcd", root / "etcd.log").start()
    bb.log(f"etcd pid {etcd.pid} at {etcd.endpoint}")
    return etcd


def etcd_counters(etcd: Service) -> dict[str, float]:
    with urllib.request.urlopen(etcd.endpoint + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ETCD_COUNTERS.values():
            values[name] = float(value)
    return {key: values.get(metric, 0.0) for key, metric in ETCD_COUNTERS.items()}


def s3_requests(moto: Service, since: int) -> dict[str, int]:
    """Object requests in moto's request log after byte offset ``since``: {"PUT 200": n, ...}."""
    out: dict[str, int] = {}
    for method, _key, status in MOTO_REQUEST.findall(moto.log_since(since)):
        out[f"{method} {status}"] = out.get(f"{method} {status}", 0) + 1
    return out


# --------------------------------------------------------------------------------------------
# The brokers: broker_bench's Broker, one per id, seen as one for the driver helpers
# --------------------------------------------------------------------------------------------


class Members:
    """The cluster's broker processes. Quacks like broker_bench.Broker (addr, alive,
    cpu_seconds, rss_mib, tail) so that its produce and latency runs work unchanged:
    CPU and RSS are summed over the brokers."""

    def __init__(self, opts: bb.BrokerOptions, root: Path, etcd: Service, moto: Service, args):
        self.opts = opts
        self.root = root
        self.etcd = etcd
        self.moto = moto
        self.args = args
        self.by_id: dict[int, bb.Broker] = {}
        self.exit_codes: list[int | None] = []

    def start(self, broker_id: int) -> bb.Broker:
        extra = [*s3_store_args(self.moto), "--etcd-endpoints", self.etcd.endpoint]
        extra += ["--broker-id", str(broker_id), "--lease-ttl-ms", str(self.args.lease_ttl_ms)]
        opts = dataclasses.replace(self.opts, extra_args=extra + self.opts.extra_args)
        broker = bb.start_broker(opts, self.root / f"broker{broker_id}")
        self.by_id[broker_id] = broker
        return broker

    def remove(self, broker_id: int, how: str) -> None:
        broker = self.by_id.pop(broker_id)
        if how == "kill":
            broker.kill()
        else:
            self.exit_codes.append(broker.stop())

    def stop_all(self) -> None:
        for broker_id in list(self.by_id):
            self.remove(broker_id, "term")

    @property
    def addr(self) -> str:
        return ",".join(b.addr for b in self.by_id.values())

    def alive(self) -> bool:
        return all(b.alive() for b in self.by_id.values())

    def cpu_seconds(self) -> float:
        return sum(b.cpu_seconds() for b in self.by_id.values() if b.alive())

    def rss_mib(self) -> float:
        return sum(b.rss_mib() for b in self.by_id.values() if b.alive())

    def tail(self, n: int = 20) -> str:
        return "\n".join(f"[broker{i}]\n{b.tail(n)}" for i, b in self.by_id.items())


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {p: pm.leader for p, pm in md.topics[topic].partitions.items()}


def wait_leaders(bootstrap: str, want: set[int], timeout: float = 60.0) -> dict[int, int]:
    """Poll until the partition leaders are exactly the brokers ``want`` (all of them lead)."""
    deadline = time.monotonic() + timeout
    while True:
        got = leaders(bootstrap, bb.TOPIC)
        if set(got.values()) == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------------------------


def produce_phase(members: Members, args: argparse.Namespace) -> dict[str, Any]:
    moto_at = members.moto.log_size()
    etcd0 = etcd_counters(members.etcd)
    fig = bb.run_produce(members, args, "-1", "produce_acks_all")  # type: ignore[arg-type]
    etcd1 = etcd_counters(members.etcd)
    requests = s3_requests(members.moto, moto_at)
    gib = fig["bytes"] / bb.GIB
    puts = sum(n for k, n in requests.items() if k.startswith("PUT"))
    etcd = {k: etcd1[k] - etcd0[k] for k in etcd0}

    def per_gib(n: float) -> float | None:
        return round(n / gib, 1) if gib > 0 else None

    fig |= {
        "s3_requests": requests,
        "s3_puts": puts,
        "s3_puts_per_gib": per_gib(puts),
        "etcd_delta": etcd,
        "etcd_writes_per_gib": per_gib(etcd["proposals"]),
        "etcd_key_writes_per_gib": per_gib(etcd["puts"] + etcd["deletes"]),
    }
    bb.log(
        f"produce_acks_all: {puts} S3 PUTs ({fig['s3_puts_per_gib']}/GiB), "
        f"{etcd['proposals']:.0f} etcd proposals ({fig['etcd_writes_per_gib']}/GiB)"
    )
    return fig


def measure_move(
    members: Members, how: str, round_no: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Stop (kill -9 or SIGTERM) a broker (round ``round_no`` takes the next one that leads
    partitions); seconds from then to the first acknowledged produce on each of its partitions
    (a librdkafka producer that refreshes metadata every 100 ms keeps offering one record per
    partition every 20 ms)."""
    from confluent_kafka import Producer

    before = wait_leaders(members.addr, set(members.by_id))
    led: dict[int, list[int]] = {}
    for p, leader in before.items():
        led.setdefault(leader, []).append(p)
    victim = sorted(led)[round_no % len(led)]
    moved = sorted(led[victim])
    producer = Producer(
        bb.producer_config(members.addr, "-1", 0)
        | {
            "topic.metadata.refresh.interval.ms": 100,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 100,
        }
    )
    for p in moved:  # connections and metadata in place before the clock starts
        producer.produce(bb.TOPIC, b"warm", None, p)
    producer.flush(30)
    first: dict[int, float] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            first.setdefault(msg.partition(), time.monotonic())

    t0 = time.monotonic()
    members.remove(victim, how)
    while len(first) < len(moved) and time.monotonic() - t0 < args.failover_timeout:
        for p in moved:
            if p not in first:
                producer.produce(bb.TOPIC, b"failover", None, p, on_delivery)
        producer.poll(0.02)
    producer.flush(10)
    times = {p: round(first[p] - t0, 3) for p in moved if p in first}
    after = leaders(members.addr, bb.TOPIC)
    members.start(victim)  # back to full strength for the next round
    bb.log(f"{how} broker{victim}: partitions {moved} writable again after {times}")
    return {
        "broker": victim,
        "partitions": moved,
        "seconds": times,
        "new_leaders": {p: after.get(p) for p in moved},
        "timed_out": [p for p in moved if p not in first],
    }


def move_figures(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    per_partition = [s for r in rounds for s in r["seconds"].values()]
    worst_per_round = [max(r["seconds"].values()) for r in rounds if r["seconds"]]
    return {
        "rounds": rounds,
        "median_s": round(statistics.median(per_partition), 3) if per_partition else None,
        "max_s": max(per_partition) if per_partition else None,
        "median_worst_partition_s": (
            round(statistics.median(worst_per_round), 3) if worst_per_round else None
        ),
        "timed_out": sum(len(r["timed_out"]) for r in rounds),
    }


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=0.25, help="GiB of values for produce_acks_all")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the brokers")
    ap.add_argument("--flush-interval-ms", type=int, default=250)
    ap.add_argument("--lease-ttl-ms", type=int, default=5000)
    ap.add_argument("--cache-bytes", type=int, default=256 * bb.MIB)
    ap.add_argument("--segment-bytes", type=int, default=None, help="passed on if given")
    ap.add_argument("--broker-log-level", default="info")
    ap.add_argument("--broker-arg", action="append", default=[], help="extra broker flag")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=1, help="producer processes")
    ap.add_argument("--linger-ms", type=int, default=10)
    ap.add_argument("--latency-rate-mb", type=float, default=5.0, help="offered MB/s")
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--latency-warmup", type=float, default=1.0)
    ap.add_argument("--latency-linger-ms", type=int, default=5)
    ap.add_argument("--latency-max-in-flight", type=int, default=None)
    ap.add_argument("--kills", type=int, default=3, help="kill -9 rounds of the failover phase")
    ap.add_argument("--failover-timeout", type=float, default=60.0)
    ap.add_argument(
        "--phases",
        default="produce_acks_all,latency,failover,handoff",
        help="comma-separated subset of phases to run",
    )
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    args = ap.parse_args(argv)
    args.phases = set(args.phases.split(","))
    return args


def run(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    with moto_server(root) as moto:
        run_with(args, root, out, moto)


def run_with(args: argparse.Namespace, root: Path, out: dict[str, Any], moto: MotoServer) -> None:
    etcd = start_etcd(root)
    opts = bb.BrokerOptions(
        python=args.python,
        store="s3",
        flush_interval_ms=args.flush_interval_ms,
        cache_bytes=args.cache_bytes,
        segment_bytes=args.segment_bytes,
        readahead_segments=None,
        log_level=args.broker_log_level,
        extra_args=args.broker_arg,
    )
    members = Members(opts, root, etcd, moto, args)
    try:
        for broker_id in range(1, args.brokers + 1):
            members.start(broker_id)
        bb.create_topic(members.addr, bb.TOPIC, args.partitions)
        out["leaders_at_start"] = wait_leaders(members.addr, set(members.by_id))

        def phase(name: str, fn) -> None:
            if name not in args.phases:
                return
            try:
                out[name] = fn()
            except Exception as exc:
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
                out.setdefault("errors", []).append(f"{name}: {type(exc).__name__}: {exc}")
                bb.log(f"ERROR in {name}: {exc}\n{members.tail()}")

        phase("produce_acks_all", lambda: produce_phase(members, args))
        phase("latency", lambda: bb.run_latency(members, args))  # type: ignore[arg-type]

        def moves(how: str, rounds: int) -> dict[str, Any]:
            return move_figures([measure_move(members, how, k, args) for k in range(rounds)])

        phase("failover", lambda: moves("kill", args.kills))
        phase("handoff", lambda: moves("term", 1))
    finally:
        members.stop_all()
        out["broker_exit_codes"] = members.exit_codes
        etcd.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict[str, Any] = {
        "brokers": args.brokers,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "gib": args.gib,
        "flush_interval_ms": args.flush_interval_ms,
        "lease_ttl_ms": args.lease_ttl_ms,
        "producers": args.producers,
        "linger_ms": args.linger_ms,
        "driver": bb.driver_version(),
        "cpus": os.cpu_count(),
    }
    with bb.scratch_dir(args.keep_data) as root:
        try:
            run(args, root, out)
        except Exception as exc:
            bb.log(f"ERROR: {type(exc).__name__}: {exc}")
            out.setdefault("errors", []).append(f"{type(exc).__name__}: {exc}")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
