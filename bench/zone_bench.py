"""KafScale zone benchmark: the bytes consumers read across zones, without and with rack
awareness (KIP-392 fetch from follower: --broker-rack on the brokers, client.rack on the
consumers).

Starts etcd, moto's S3 server and three brokers (ids 1, 2, 3 with --broker-rack a, b, c, each
with a /metrics endpoint) sharing them, as bench/cluster_bench.py does; creates a topic of
--partitions (6, so each broker owns two) and produces --mib MiB of 1 KiB values through the
owners (acks=all). Then two rounds of three consumers, one per rack, each reading the whole
topic once from the beginning (confluent-kafka, assign(), librdkafka's defaults otherwise, so
read_committed): round "without" gives them no client.rack, round "with" gives each its rack.
That models one application deployed in each of three zones.

The consumers run one at a time, so what each broker's ``kafscale_fetch_bytes_total{topic}``
grew by during a consumer's run is what it served that consumer: bytes from a broker of another
rack crossed zones. Per round: the bytes served (record batch bytes), the cross-zone ones and
cross-zone MiB per GiB consumed, and what the brokers' zone counters
(``kafscale_zone_fetch_bytes_total{zone=same|cross|unknown}``) grew by. A small table goes to
stderr with the progress lines, ONE JSON line with every figure to stdout. It measures; it does
not judge.

Usage: python bench/zone_bench.py [--mib 256] [--partitions 6] [--rounds without,with] ...
The brokers run whatever ``kafscale`` the interpreter (--python) imports: build it in release
mode first (``pip install .``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import broker_bench as bb
import cluster_bench as cb
from s3_servers import moto_server
from support.procs import free_port  # on the path broker_bench set
from support.racks import BrokerMetrics, Traffic, grown

RACKS = {1: "a", 2: "b", 3: "c"}
TOPIC = "kafscale-zones"
ROUNDS = ("without", "with")


class RackedMembers(cb.Members):
    """cluster_bench's brokers, each with --broker-rack (RACKS) and a /metrics address."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.metrics: dict[int, BrokerMetrics] = {}

    def start(self, broker_id: int) -> bb.Broker:
        plain = self.opts
        addr = f"127.0.0.1:{free_port()}"
        extra = ["--broker-rack", RACKS[broker_id], "--metrics-addr", addr]
        self.opts = dataclasses.replace(plain, extra_args=[*plain.extra_args, *extra])
        try:
            broker = super().start(broker_id)
        finally:
            self.opts = plain
        self.metrics[broker_id] = BrokerMetrics(addr)
        return broker

    def traffic(self) -> dict[int, Traffic]:
        return {bid: m.traffic(TOPIC) for bid, m in self.metrics.items()}


def wait_spread(addr: str, timeout: float = 60.0) -> dict[int, int]:
    """{partition: leader} once every broker leads a partition of the topic (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        got = cb.leaders(addr, TOPIC)
        if set(got.values()) == set(RACKS) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------
# Producing and consuming (in this process: one client at a time)
# --------------------------------------------------------------------------------------------


def produce(addr: str, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    count = max(1, args.mib * bb.MIB // args.value_bytes)
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    conf = bb.producer_config(addr, "-1", args.linger_ms)
    conf |= {"delivery.report.only.error": True, "on_delivery": on_delivery}
    producer = Producer(conf)
    values = bb.make_values(args.value_bytes)
    bb.log(f"producing {count} x {args.value_bytes} B to {args.partitions} partitions")
    t0 = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, values[i % len(values)], None, i % args.partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 4096 == 0:
            producer.poll(0)
    left = producer.flush(300)
    seconds = time.monotonic() - t0
    mib = count * args.value_bytes / bb.MIB
    bb.log(f"produced {mib:.0f} MiB in {seconds:.1f} s ({left} unacknowledged)")
    return {
        "records": count,
        "value_mib": round(mib, 1),
        "seconds": round(seconds, 2),
        "unacknowledged": left,
        "errors": failed[:5],
        "error_count": len(failed),
    }


def consume(
    addr: str, ends: dict[int, int], rack: str | None, label: str, stall_s: float
) -> dict[str, Any]:
    """One consumer (client.rack = ``rack`` if given) reads every partition from its start to
    ``ends``; its records, value bytes and time."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    errors: list[str] = []
    conf = bb.consumer_config(addr) | {
        "group.id": f"zone-bench-{label}",
        "client.id": f"zone-bench-{label}",
        "error_cb": lambda e: errors.append(str(e)),
    }
    if rack is not None:
        conf["client.rack"] = rack
    consumer = Consumer(conf)
    todo = {p: end for p, end in ends.items() if end > 0}
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in todo])
    records = nbytes = 0
    complete = True
    t0 = last = time.monotonic()
    try:
        while todo:
            msgs = consumer.consume(10_000, 0.5)
            now = time.monotonic()
            if msgs:
                last = now
            elif now - last > stall_s:
                errors.append(f"stalled {stall_s} s with partitions {sorted(todo)} unfinished")
                complete = False
                break
            for m in msgs:
                if m.error():
                    errors.append(str(m.error()))
                    continue
                p, off = m.partition(), m.offset()
                end = todo.get(p)
                if end is None or off >= end:
                    continue
                records += 1
                nbytes += len(m.value())
                if off == end - 1:
                    del todo[p]
                    consumer.pause([TopicPartition(TOPIC, p)])
        seconds = time.monotonic() - t0
    finally:
        consumer.close()
    return {
        "records": records,
        "value_bytes": nbytes,
        "seconds": round(seconds, 2),
        "mb_s": round(nbytes / bb.MB / seconds, 1) if seconds > 0 else None,
        "complete": complete,
        "errors": errors[:5],
        "error_count": len(errors),
    }


# --------------------------------------------------------------------------------------------
# Rounds and figures
# --------------------------------------------------------------------------------------------


def zone_sums(delta: dict[int, Traffic]) -> dict[str, dict[str, float]]:
    """The zone counters' growth per broker (by rack): {rack: {zone: bytes}}."""
    return {RACKS[bid]: dict(t.zone_fetch) for bid, t in sorted(delta.items())}


def run_round(
    members: RackedMembers, name: str, ends: dict[int, int], args: argparse.Namespace
) -> dict[str, Any]:
    """One consumer per rack, one after another; each broker's served bytes per consumer."""
    consumers = []
    start = members.traffic()
    for rack in RACKS.values():
        before = members.traffic()
        label = f"{name}-{rack}"
        bb.log(f"round {name}: consumer in rack {rack} reads the topic")
        fig = consume(members.addr, ends, rack if name == "with" else None, label, args.stall_s)
        delta = grown(members.traffic(), before)
        served = {RACKS[bid]: t.fetch_bytes for bid, t in sorted(delta.items())}
        cross = sum(v for r, v in served.items() if r != rack)
        fig |= {
            "rack": rack,
            "served_bytes": served,
            "cross_zone_bytes": cross,
            "zone_counters": zone_sums(delta),
        }
        bb.log(
            f"round {name}, rack {rack}: {fig['mb_s']} MB/s, served "
            + ", ".join(f"{r} {v / bb.MIB:.1f} MiB" for r, v in served.items())
            + f"; cross-zone {cross / bb.MIB:.1f} MiB"
        )
        consumers.append(fig)
    total = grown(members.traffic(), start)
    served_total = sum(sum(c["served_bytes"].values()) for c in consumers)
    cross_total = sum(c["cross_zone_bytes"] for c in consumers)
    gib = served_total / bb.GIB
    return {
        "consumers": consumers,
        "served_bytes": served_total,
        "value_bytes": sum(c["value_bytes"] for c in consumers),
        "cross_zone_bytes": cross_total,
        "cross_zone_mib_per_gib": round(cross_total / bb.MIB / gib, 1) if gib > 0 else None,
        "cross_zone_share": round(cross_total / served_total, 4) if served_total else None,
        "zone_counters": zone_sums(total),
    }


def table(out: dict[str, Any]) -> str:
    """The figures of the rounds as a small text table."""
    mib = bb.MIB
    lines = [
        f"{'round':<8} {'consumer':<8} {'MB/s':>7}  {'served by a / b / c (MiB)':<28}"
        f"{'cross-zone MiB':>15}"
    ]
    for name in ROUNDS:
        rnd = out.get(name)
        if not isinstance(rnd, dict) or "consumers" not in rnd:
            continue
        for c in rnd["consumers"]:
            served = " / ".join(f"{c['served_bytes'][r] / mib:.1f}" for r in RACKS.values())
            lines.append(
                f"{name:<8} {c['rack']:<8} {c['mb_s'] or 0:>7}  {served:<28}"
                f"{c['cross_zone_bytes'] / mib:>15.1f}"
            )
        lines.append(
            f"{name:<8} {'all':<8} {'':>7}  {rnd['served_bytes'] / mib:<28.1f}"
            f"{rnd['cross_zone_bytes'] / mib:>15.1f}   "
            f"= {rnd['cross_zone_mib_per_gib']} MiB cross-zone per GiB consumed"
        )
    for name in ROUNDS:
        rnd = out.get(name)
        if not isinstance(rnd, dict) or "zone_counters" not in rnd:
            continue
        lines.append(f"zone counters, round {name} (MiB, per broker: same / cross / unknown):")
        for rack, zones in rnd["zone_counters"].items():
            figures = " / ".join(f"{zones[z] / mib:.1f}" for z in ("same", "cross", "unknown"))
            lines.append(f"  broker in rack {rack}: {figures}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="MiB of values produced")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--linger-ms", type=int, default=10)
    ap.add_argument("--rounds", default=",".join(ROUNDS), help="comma list of without,with")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the brokers")
    ap.add_argument("--flush-interval-ms", type=int, default=250)
    ap.add_argument("--lease-ttl-ms", type=int, default=5000)
    ap.add_argument("--cache-bytes", type=int, default=256 * bb.MIB)
    ap.add_argument("--stall-s", type=float, default=60.0, help="a consumer gives up after")
    ap.add_argument("--broker-arg", action="append", default=[], help="extra broker flag")
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    args = ap.parse_args(argv)
    args.rounds = [r for r in args.rounds.split(",") if r]
    unknown = set(args.rounds) - set(ROUNDS)
    if unknown:
        ap.error(f"unknown rounds {sorted(unknown)}: choose from {', '.join(ROUNDS)}")
    return args


def run(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    with moto_server(root) as moto:
        etcd = cb.start_etcd(root)
        opts = bb.BrokerOptions(
            python=args.python,
            store="s3",
            flush_interval_ms=args.flush_interval_ms,
            cache_bytes=args.cache_bytes,
            segment_bytes=None,
            readahead_segments=None,
            log_level="info",
            extra_args=args.broker_arg,
        )
        members = RackedMembers(opts, root, etcd, moto, args)
        try:
            for broker_id in RACKS:
                members.start(broker_id)
            bb.create_topic(members.addr, TOPIC, args.partitions)
            out["leaders"] = wait_spread(members.addr)
            out["produce"] = produce(members.addr, args)
            marks = bb.watermarks(members.addr, TOPIC, args.partitions)
            ends = {p: high for p, (_low, high) in marks.items()}
            out["records"] = sum(ends.values())
            for name in args.rounds:
                try:
                    out[name] = run_round(members, name, ends, args)
                except Exception as exc:
                    out["errors"].append(f"round {name}: {type(exc).__name__}: {exc}")
                    bb.log(f"ERROR in round {name}: {exc}\n{members.tail()}")
        finally:
            members.stop_all()
            out["broker_exit_codes"] = members.exit_codes
            etcd.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict[str, Any] = {
        "brokers": len(RACKS),
        "racks": RACKS,
        "partitions": args.partitions,
        "mib": args.mib,
        "value_bytes": args.value_bytes,
        "flush_interval_ms": args.flush_interval_ms,
        "driver": bb.driver_version(),
        "cpus": os.cpu_count(),
        "errors": [],
    }

    def go(root: Path) -> None:
        try:
            run(args, root, out)
        finally:
            print(table(out), file=sys.stderr, flush=True)

    return bb.run_in_scratch(out, args.keep_data, go)


if __name__ == "__main__":
    sys.exit(main())
