"""KafScale consumer-group benchmark: how long a confluent-kafka group takes to become Stable
and to rebalance after a member leaves, on one broker and on a cluster of brokers, with the
default initial rebalance delay (3000 ms, like Kafka's group.initial.rebalance.delay.ms) and
with 0.

For every setup (topology x delay) the broker(s) are started with
``--group-initial-rebalance-delay-ms DELAY``, a topic of --partitions partitions is created
and --reps rounds run, each with a fresh group of --consumers confluent-kafka consumers
(``subscribe()``, one polling thread each, all in this process):

  stable_s  from the first subscribe() until every member owns at least one partition and the
            members' partitions are disjoint and cover the topic (held for --settle-ms)
  leave_s   from close() of one member (LeaveGroup) until the others again cover every
            partition (held for --settle-ms)

Single node: ``python -m kafscale.broker`` with its embedded metadata store and local segments.
Cluster: etcd (``etcd`` on PATH), moto's S3 server and --brokers brokers, as in
cluster_bench.py (whose helpers are imported). Progress goes to stderr, ONE JSON line with
every figure to stdout (median and max per setup). It measures; it does not judge.

Usage: python bench/group_bench.py [--reps 3] [--topologies single,cluster] [--delays 3000,0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import broker_bench as bb
import cluster_bench as cb

DEFAULT_DELAY_MS = 3000  # the broker's default --group-initial-rebalance-delay-ms


# --------------------------------------------------------------------------------------------
# group members
# --------------------------------------------------------------------------------------------


class Member:
    """One confluent-kafka consumer of the group, polled by its own thread; ``owned`` is the
    set of partitions its rebalance callbacks say it has."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.conf = conf
        self.topic = topic
        self.cooperative = str(conf.get("partition.assignment.strategy", "")).startswith("coop")
        self.owned: frozenset[int] = frozenset()
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 60.0) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        from confluent_kafka import Consumer

        def parts(partitions: Any) -> frozenset[int]:
            return frozenset(tp.partition for tp in partitions if tp.topic == self.topic)

        def on_assign(_c: Any, partitions: Any) -> None:
            base = self.owned if self.cooperative else frozenset()
            self.owned = base | parts(partitions)

        def on_revoke(_c: Any, partitions: Any) -> None:
            self.owned = self.owned - parts(partitions)

        try:
            consumer = Consumer(self.conf)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        try:
            consumer.subscribe(
                [self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke
            )
            while not self._stop.is_set():
                msg = consumer.poll(0.05)
                if msg is not None and msg.error() and msg.error().fatal():
                    self.error = str(msg.error())
                    return
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            consumer.close()


def consumer_config(bootstrap: str, group: str, args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
    }
    if args.assignment_strategy:
        conf["partition.assignment.strategy"] = args.assignment_strategy
    return conf


def covered(members: list[Member], partitions: int) -> str | None:
    """None when every member owns a partition, nobody shares one and all are owned."""
    for m in members:
        if m.error:
            raise RuntimeError(f"consumer failed: {m.error}")
    owned = [m.owned for m in members]
    union = frozenset().union(*owned)
    if not all(owned):
        return f"{sum(1 for o in owned if not o)} members without partitions"
    if sum(len(o) for o in owned) != len(union):
        return "members share partitions"
    if len(union) != partitions:
        return f"{partitions - len(union)} partitions unowned"
    return None


def wait_covered(
    members: list[Member], partitions: int, settle_s: float, timeout: float
) -> float | None:
    """time.monotonic() at which ``covered`` first held (and kept holding for ``settle_s``);
    None after ``timeout``."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        if covered(members, partitions) is None:
            since = now if since is None else since
            if now - since >= settle_s:
                return since
        else:
            since = None
        time.sleep(0.01)
    return None


def one_round(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh group: time to Stable, then time to rebalance after one member leaves."""
    group = f"group-bench-{uuid.uuid4().hex[:10]}"
    members = [
        Member(consumer_config(bootstrap, group, args) | {"client.id": f"m{i}"}, topic)
        for i in range(args.consumers)
    ]
    settle = args.settle_ms / 1000
    out: dict[str, Any] = {}
    try:
        t0 = time.monotonic()
        for m in members:
            m.start()
        at = wait_covered(members, args.partitions, settle, args.timeout)
        if at is None:
            out["stable_timed_out"] = covered(members, args.partitions)
            return out
        out["stable_s"] = round(at - t0, 3)
        leaver, rest = members[-1], members[:-1]
        t1 = time.monotonic()
        leaver.close()
        out["close_s"] = round(time.monotonic() - t1, 3)
        at = wait_covered(rest, args.partitions, settle, args.timeout)
        if at is None:
            out["leave_timed_out"] = covered(rest, args.partitions)
            return out
        out["leave_s"] = round(at - t1, 3)
        return out
    finally:
        for m in members:
            m.close()


def setup_figures(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    fig: dict[str, Any] = {"rounds": rounds}
    for key in ("stable_s", "leave_s", "close_s"):
        values = [r[key] for r in rounds if key in r]
        fig[key.replace("_s", "_median_s")] = (
            round(statistics.median(values), 3) if values else None
        )
        fig[key.replace("_s", "_max_s")] = max(values) if values else None
    fig["timed_out"] = sum(1 for r in rounds if "stable_s" not in r or "leave_s" not in r)
    return fig


def run_rounds(label: str, bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    topic = f"group-bench-{label}"
    bb.create_topic(bootstrap, topic, args.partitions)
    rounds = []
    for k in range(args.reps):
        r = one_round(bootstrap, topic, args)
        bb.log(f"{label} round {k + 1}/{args.reps}: {r}")
        rounds.append(r)
    fig = setup_figures(rounds)
    bb.log(
        f"{label}: stable median {fig['stable_median_s']} s (max {fig['stable_max_s']}), "
        f"after a leave median {fig['leave_median_s']} s (max {fig['leave_max_s']})"
    )
    return fig


# --------------------------------------------------------------------------------------------
# topologies
# --------------------------------------------------------------------------------------------


def broker_options(args: argparse.Namespace, store: str, delay_ms: int) -> bb.BrokerOptions:
    return bb.BrokerOptions(
        python=args.python,
        store=store,
        flush_interval_ms=args.flush_interval_ms,
        cache_bytes=64 * bb.MIB,
        segment_bytes=None,
        readahead_segments=None,
        log_level=args.broker_log_level,
        extra_args=["--group-initial-rebalance-delay-ms", str(delay_ms), *args.broker_arg],
    )


def run_single(args: argparse.Namespace, root: Path, delay_ms: int) -> dict[str, Any]:
    broker = bb.start_broker(broker_options(args, "local", delay_ms), root / f"single-{delay_ms}")
    try:
        return run_rounds(f"single-delay{delay_ms}", broker.addr, args)
    finally:
        code = broker.stop()
        if code != 0:
            bb.log(f"single broker exited with {code}:\n{broker.tail()}")


class Services:
    """etcd and moto for every cluster setup (started once, on first use)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.etcd: cb.Service | None = None
        self.moto: cb.Service | None = None

    def get(self) -> tuple[cb.Service, cb.Service]:
        if self.etcd is None:
            os.environ.update(cb.S3_CREDENTIALS)  # the brokers inherit them
            self.etcd = cb.start_etcd(self.root)
            self.moto = cb.start_moto(self.root)
        assert self.moto is not None
        return self.etcd, self.moto

    def stop(self) -> None:
        for service in (self.moto, self.etcd):
            if service is not None:
                service.cleanup()


def run_cluster(
    args: argparse.Namespace, root: Path, services: Services, delay_ms: int
) -> dict[str, Any]:
    etcd, moto = services.get()
    workdir = root / f"cluster-{delay_ms}"
    workdir.mkdir(parents=True, exist_ok=True)
    members = cb.Members(broker_options(args, "s3", delay_ms), workdir, etcd, moto, args)
    try:
        for broker_id in range(1, args.brokers + 1):
            members.start(broker_id)
        return run_rounds(f"cluster{args.brokers}-delay{delay_ms}", members.addr, args)
    finally:
        members.stop_all()
        if any(code != 0 for code in members.exit_codes):
            bb.log(f"cluster broker exit codes {members.exit_codes}")


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3, help="rounds (fresh groups) per setup")
    ap.add_argument("--topologies", default="single,cluster", help="comma list")
    ap.add_argument(
        "--delays",
        default=f"{DEFAULT_DELAY_MS},0",
        help="comma list of --group-initial-rebalance-delay-ms values",
    )
    ap.add_argument("--brokers", type=int, default=3, help="cluster size")
    ap.add_argument("--lease-ttl-ms", type=int, default=5000, help="cluster brokers")
    ap.add_argument("--flush-interval-ms", type=int, default=50)
    ap.add_argument("--session-timeout-ms", type=int, default=45000, help="librdkafka default")
    ap.add_argument("--heartbeat-interval-ms", type=int, default=3000, help="librdkafka default")
    ap.add_argument(
        "--assignment-strategy",
        default=None,
        help="partition.assignment.strategy (default: librdkafka's range,roundrobin)",
    )
    ap.add_argument("--settle-ms", type=int, default=200, help="how long a split must hold")
    ap.add_argument("--timeout", type=float, default=120.0, help="give up a wait after this")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the brokers")
    ap.add_argument("--broker-log-level", default="info")
    ap.add_argument("--broker-arg", action="append", default=[], help="extra broker flag")
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    args = ap.parse_args(argv)
    args.topologies = [t for t in args.topologies.split(",") if t]
    args.delays = [int(d) for d in args.delays.split(",") if d]
    return args


def summary(out: dict[str, Any]) -> str:
    lines = [f"{'setup':<22} {'stable med/max s':>18} {'leave med/max s':>18} {'timeouts':>9}"]
    for label, fig in out["setups"].items():
        if "error" in fig:
            lines.append(f"{label:<22} error: {fig['error']}")
            continue
        stable = f"{fig['stable_median_s']}/{fig['stable_max_s']}"
        leave = f"{fig['leave_median_s']}/{fig['leave_max_s']}"
        lines.append(f"{label:<22} {stable:>18} {leave:>18} {fig['timed_out']:>9}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict[str, Any] = {
        "consumers": args.consumers,
        "partitions": args.partitions,
        "reps": args.reps,
        "session_timeout_ms": args.session_timeout_ms,
        "heartbeat_interval_ms": args.heartbeat_interval_ms,
        "assignment_strategy": args.assignment_strategy or "range,roundrobin",
        "settle_ms": args.settle_ms,
        "brokers": args.brokers,
        "driver": bb.driver_version(),
        "cpus": os.cpu_count(),
        "setups": {},
    }
    with bb.scratch_dir(args.keep_data) as root:
        services = Services(root)
        try:
            for topology in args.topologies:
                for delay in args.delays:
                    label = (
                        f"single_delay{delay}"
                        if topology == "single"
                        else f"cluster{args.brokers}_delay{delay}"
                    )
                    try:
                        if topology == "single":
                            fig = run_single(args, root, delay)
                        elif topology == "cluster":
                            fig = run_cluster(args, root, services, delay)
                        else:
                            raise ValueError(f"unknown topology {topology!r}")
                    except Exception as exc:
                        fig = {"error": f"{type(exc).__name__}: {exc}"}
                        out.setdefault("errors", []).append(f"{label}: {fig['error']}")
                        bb.log(f"ERROR in {label}: {exc}")
                    out["setups"][label] = fig
        finally:
            services.stop()
    bb.log("summary:\n" + summary(out))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
