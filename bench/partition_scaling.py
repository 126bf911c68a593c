"""KafScale partition-scaling benchmark (issue 13): what a fixed produce rate costs a broker as
the number of partitions it is spread over grows.

For each topology (``single``: one broker, embedded default = local directory + embedded
metadata; ``cluster``: --brokers brokers on etcd + moto's S3 server, started as
bench/cluster_bench.py does), each partition count P and each load (a fixed total rate in MB/s
of fixed-size values), a fresh broker set gets a topic of P partitions and --producers
processes send acks=all records at that rate, round-robin over all partitions, for --warmup +
--seconds. Measured over the --seconds window:

* write-ahead PUTs/s and compaction PUTs/s apart, from the brokers' /metrics
  (``kafscale_wal_objects_written_total``, ``kafscale_compaction_segments_written_total`` x 2);
  brokers without those metrics (before issue 13) are counted from moto's request log or the
  files in the data dir instead, where every PUT is an ack-path segment or index. ``put_source``
  says which;
* metadata writes/s: the txn count of ``kafscale_metadata_request_duration_seconds`` (etcd and
  the embedded store alike; older brokers: ``kafscale_etcd_request_duration_seconds``, and for an
  unmetered embedded store the flush count, one commit each, labelled as such); also the
  write-ahead commits apart (``kafscale_wal_commits_total``); on etcd also etcd's own txn and
  proposal counters;
* broker CPU (% of one core, from /proc; the drivers' CPU is reported apart) and RSS;
* produce latency p50/p99: produce() to delivery callback, records sent in the window.

Each run prints one line to stderr with the issue's targets next to the figures; ONE JSON line
with everything goes to stdout. It measures; it does not judge. Build the package in release
mode first (bench/README.md). Quick pass (~2 min):
    python bench/partition_scaling.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import broker_bench as bb
import cluster_bench as cb
from support.procs import free_port  # on the path broker_bench set

WAL_OBJECTS = "kafscale_wal_objects_written_total"
COMPACTED_SEGMENTS = "kafscale_compaction_segments_written_total"
# The second: brokers from before the embedded store was metered.
META_TXN_SERIES = (
    "kafscale_metadata_request_duration_seconds_count{",
    "kafscale_etcd_request_duration_seconds_count{",
)
WAL_COMMITS = "kafscale_wal_commits_total"
FLUSHES = "kafscale_flush_duration_seconds_count"
WAL_KEY = re.compile(r"(?:^|/)(?:!|%21)wal/")
SEGMENT_FILE = re.compile(r"segment-\d{20}\.(kfs|index)$")
TARGET_P99_MS = 400.0
TARGET_META_WRITES_S = 8.0
TARGET_CPU_FACTOR = 2.0
WAL_SIZE_CAP = 8 * bb.MIB


# --------------------------------------------------------------------------------------------
# Brokers: a single embedded-default broker or a cluster, both with a /metrics port each
# --------------------------------------------------------------------------------------------


def metered(opts: bb.BrokerOptions) -> tuple[bb.BrokerOptions, str]:
    addr = f"127.0.0.1:{free_port()}"
    return dataclasses.replace(opts, extra_args=[*opts.extra_args, "--metrics-addr", addr]), addr


class Single:
    """One broker on the embedded default; quacks like cluster_bench.Members."""

    def __init__(self, opts: bb.BrokerOptions, root: Path) -> None:
        opts, self.metrics = metered(dataclasses.replace(opts, store="local"))
        self.broker = bb.start_broker(opts, root / "broker")
        self.by_id = {1: self.broker}
        self.metrics_addrs = [self.metrics]
        self.addr = self.broker.addr
        self.data_dir = self.broker.data_dir

    def alive(self) -> bool:
        return self.broker.alive()

    def tail(self, n: int = 20) -> str:
        return self.broker.tail(n)

    def stop_all(self) -> list[int | None]:
        return [self.broker.stop()]


class Cluster(cb.Members):
    """cluster_bench's brokers on etcd + moto, each with its own /metrics address."""

    def __init__(self, opts, root, etcd, moto, args) -> None:
        super().__init__(opts, root, etcd, moto, args)
        self.metrics_addrs: list[str] = []

    def start(self, broker_id: int) -> bb.Broker:
        plain = self.opts
        self.opts, addr = metered(plain)
        try:
            broker = super().start(broker_id)
        finally:
            self.opts = plain
        self.metrics_addrs.append(addr)
        return broker

    def stop_all(self) -> list[int | None]:
        super().stop_all()
        return self.exit_codes


def scrape(addrs: list[str]) -> dict[str, float]:
    """Every sample of every broker's /metrics, summed over the brokers by series name."""
    total: dict[str, float] = {}
    for addr in addrs:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as resp:
            text = resp.read().decode(errors="replace")
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    total[name] = total.get(name, 0.0) + float(value)
    return total


@dataclasses.dataclass
class Sample:
    """Counters at one instant of a run."""

    at: float
    cpu_s: float
    metrics: dict[str, float]
    moto_log_at: int | None
    segment_files: int | None
    etcd: dict[str, float] | None


def sample(brokers, moto: cb.Service | None, etcd: cb.Service | None) -> Sample:
    files = None
    if isinstance(brokers, Single):
        files = sum(1 for f in brokers.data_dir.rglob("*") if SEGMENT_FILE.search(f.name))
    return Sample(
        at=time.monotonic(),
        cpu_s=sum(b.cpu_seconds() for b in brokers.by_id.values()),
        metrics=scrape(brokers.metrics_addrs),
        moto_log_at=moto.log_size() if moto else None,
        segment_files=files,
        etcd=cb.etcd_counters(etcd) if etcd else None,
    )


# --------------------------------------------------------------------------------------------
# Driver: producer processes at a fixed rate, latency per record
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RateJob:
    bootstrap: str
    partitions: int
    records_s: float
    value_bytes: int
    warmup_s: float
    seconds: float
    linger_ms: int


def rate_worker(wid: int, job: RateJob, out: Any, start: Any) -> None:
    bb.report_outcome(_rate_produce, wid, job, out, start)


def _rate_produce(wid: int, job: RateJob, out: Any, start: Any) -> dict[str, Any]:
    from confluent_kafka import Producer

    latencies: list[float] = []
    errors: list[str] = []

    def on_delivery(sent_at: float, err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        elif measure_from <= sent_at < stop_at:
            latencies.append((time.monotonic() - sent_at) * 1000)

    producer = Producer(bb.producer_config(job.bootstrap, "-1", job.linger_ms))
    producer.list_topics(bb.TOPIC, timeout=60)
    values = bb.make_values(job.value_bytes)
    bb._wait_start(out, start, wid)
    cpu0 = bb.self_cpu_seconds()
    t0 = time.monotonic()
    measure_from, stop_at = t0 + job.warmup_s, t0 + job.warmup_s + job.seconds
    sent = bb._paced_produce(
        producer, values, job.partitions, 1 / job.records_s, t0, stop_at, on_delivery
    )
    unacked = producer.flush(120)
    return {
        "sent": sent,
        "seconds": stop_at - t0,
        "latencies_ms": latencies,
        "unacked": unacked,
        "error_count": len(errors),
        "errors": errors[:3],
        "cpu_s": bb.self_cpu_seconds() - cpu0,
    }


def drive(brokers, moto, etcd, args, partitions: int, mb_s: float, value_bytes: int):
    """Run the producers; returns (worker results, sample at window start, at window end)."""
    records_s = mb_s * bb.MB / value_bytes
    procs_n = args.producers or (1 if mb_s < 4 else 2)
    job = RateJob(
        brokers.addr,
        partitions,
        records_s / procs_n,
        value_bytes,
        args.warmup,
        args.seconds,
        args.linger_ms,
    )
    ctx = mp.get_context("spawn")
    out, start = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=rate_worker, args=(i, job, out, start)) for i in range(procs_n)]
    for p in procs:
        p.start()
    errors: list[str] = []
    try:
        bb._collect(out, set(range(procs_n)), brokers, procs, 120.0, "ready", errors)
        start.set()
        time.sleep(args.warmup)
        first = sample(brokers, moto, etcd)
        time.sleep(args.seconds)
        last = sample(brokers, moto, etcd)
        results = bb._collect(out, set(range(procs_n)), brokers, procs, 300.0, "result", errors)
    finally:
        bb.release_and_reap(procs, start)
    return list(results.values()), first, last, errors


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def delta(a: Sample, b: Sample, name: str) -> float | None:
    if name not in b.metrics:
        return None
    return b.metrics[name] - a.metrics.get(name, 0.0)


def put_rates(a: Sample, b: Sample, moto: cb.Service | None) -> dict[str, Any]:
    wall = b.at - a.at
    wal, compacted = delta(a, b, WAL_OBJECTS), delta(a, b, COMPACTED_SEGMENTS)
    if wal is not None:
        return {
            "put_source": "broker /metrics",
            "wal_puts_s": round(wal / wall, 2),
            "compaction_puts_s": round(2 * (compacted or 0.0) / wall, 2),
        }
    if moto is not None:  # before issue 13: every PUT is an ack-path segment or index
        with open(moto.log_path, "rb") as f:
            f.seek(a.moto_log_at)
            window = f.read(b.moto_log_at - a.moto_log_at).decode(errors="replace")
        keys = [
            key
            for method, key, status in cb.MOTO_REQUEST.findall(window)
            if method == "PUT" and status == "200"
        ]
        wal_puts = sum(1 for k in keys if WAL_KEY.search(k))
        return {
            "put_source": "moto request log (PUT 200)",
            "wal_puts_s": round(wal_puts / wall, 2),
            "ack_path_segment_puts_s": round((len(keys) - wal_puts) / wall, 2),
        }
    return {
        "put_source": "segment and index files in the data dir",
        "ack_path_segment_puts_s": round((b.segment_files - a.segment_files) / wall, 2),
    }


def txn_count(metrics: dict[str, float]) -> float | None:
    """Metadata transactions in a scrape: the first metric family of META_TXN_SERIES present,
    summed over its stores."""
    for prefix in META_TXN_SERIES:
        found = [v for k, v in metrics.items() if k.startswith(prefix) and 'operation="txn"' in k]
        if found:
            return sum(found)
    return None


def meta_rates(a: Sample, b: Sample) -> dict[str, Any]:
    wall = b.at - a.at
    after = txn_count(b.metrics)
    txns = None if after is None else after - (txn_count(a.metrics) or 0.0)
    out: dict[str, Any] = {}
    commits = delta(a, b, WAL_COMMITS)
    if commits is not None:
        out["wal_commits_s"] = round(commits / wall, 2)
    if txns is not None:
        out |= {"meta_source": "broker /metrics txn count", "meta_writes_s": round(txns / wall, 2)}
    else:
        flushes = delta(a, b, FLUSHES) or 0.0
        out |= {
            "meta_source": "partition flushes (one commit each; store not metered)",
            "meta_writes_s": round(flushes / wall, 2),
        }
    if a.etcd and b.etcd:
        out["etcd_server_s"] = {k: round((b.etcd[k] - a.etcd[k]) / wall, 2) for k in a.etcd}
    return out


def run_figures(brokers, moto, results, first: Sample, last: Sample, n_brokers: int, load):
    mb_s, value_bytes = load
    wall = last.at - first.at
    lat = sorted(x for r in results for x in r["latencies_ms"])
    sent = sum(r["sent"] for r in results)
    offered_bytes_s = mb_s * bb.MB
    fig: dict[str, Any] = {
        "offered_mb_s": mb_s,
        "value_bytes": value_bytes,
        "achieved_mb_s": round(
            sum(r["sent"] / r["seconds"] for r in results) * value_bytes / bb.MB, 3
        ),
        "records_sent": sent,
        "p50_ms": bb._round(bb.percentile(lat, 0.50)),
        "p99_ms": bb._round(bb.percentile(lat, 0.99)),
        "measured_records": len(lat),
        "unacked": sum(r["unacked"] for r in results),
        "error_count": sum(r["error_count"] for r in results),
        "broker_cpu_pct": round(100 * (last.cpu_s - first.cpu_s) / wall, 1),
        "broker_rss_mib": round(sum(b.rss_mib() for b in brokers.by_id.values()), 1),
        "driver_procs": len(results),
        "driver_cpu_pct": round(100 * sum(r["cpu_s"] for r in results) / wall, 1),
        **put_rates(first, last, moto),
        **meta_rates(first, last),
    }
    errors = [e for r in results for e in r["errors"]]
    if errors:
        fig["errors"] = errors[:3]
    per_broker = offered_bytes_s / n_brokers
    fig["targets_per_broker"] = {
        # before issue 13 the ack path writes segments: those are its PUTs
        "ack_path_puts_s": entry(
            per(fig.get("wal_puts_s", 0.0) + fig.get("ack_path_segment_puts_s", 0.0), n_brokers),
            4 + per_broker / WAL_SIZE_CAP,
        ),
        "meta_writes_s": entry(per(fig["meta_writes_s"], n_brokers), TARGET_META_WRITES_S),
    }
    return fig


def per(value: float | None, n: int) -> float | None:
    return None if value is None else round(value / n, 2)


def entry(value: float | None, limit: float) -> dict[str, Any]:
    return {
        "value": value,
        "target": f"<= {limit:g}",
        "met": None if value is None else value <= limit,
    }


def cross_run_targets(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """At P = 1,000 and 0.4 MB/s: p99 <= 400 ms and CPU <= 2x the CPU at P = 10."""
    out = {}
    for run in runs:
        if run.get("partitions") != 1000 or run.get("offered_mb_s") != 0.4 or "p99_ms" not in run:
            continue
        base = next(
            (
                r
                for r in runs
                if r.get("partitions") == 10
                and r["topology"] == run["topology"]
                and r.get("offered_mb_s") == 0.4
                and "broker_cpu_pct" in r
            ),
            None,
        )
        limit = None if base is None else TARGET_CPU_FACTOR * base["broker_cpu_pct"]
        out[run["topology"]] = {
            "p99_ms": entry(run["p99_ms"], TARGET_P99_MS),
            "broker_cpu_pct": entry(run["broker_cpu_pct"], limit)
            if limit is not None
            else {"value": run["broker_cpu_pct"], "target": "needs the P=10 run", "met": None},
        }
    return out


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


def one_run(args, opts, root: Path, topology: str, partitions: int, load) -> dict[str, Any]:
    mb_s, value_bytes = load
    run: dict[str, Any] = {"topology": topology, "partitions": partitions, "offered_mb_s": mb_s}
    label = f"{topology} P={partitions} {mb_s} MB/s x {value_bytes} B"
    run_dir = root / f"{topology}-{partitions}-{mb_s}"
    run_dir.mkdir()
    etcd = moto = brokers = None
    n_brokers = 1 if topology == "single" else args.brokers
    try:
        if topology == "single":
            brokers = Single(opts, run_dir)
        else:
            etcd, moto = cb.start_etcd(run_dir), cb.start_moto(run_dir)
            brokers = Cluster(opts, run_dir, etcd, moto, args)
            for broker_id in range(1, n_brokers + 1):
                brokers.start(broker_id)
        bb.create_topic(brokers.addr, bb.TOPIC, partitions)
        results, first, last, errors = drive(
            brokers, moto, etcd, args, partitions, mb_s, value_bytes
        )
        run |= run_figures(brokers, moto, results, first, last, n_brokers, load)
        if errors:
            run["driver_errors"] = errors[:3]
        t = run["targets_per_broker"]
        bb.log(
            f"{label}: WAL PUTs/s {run.get('wal_puts_s')} (ack-path target/broker "
            f"{t['ack_path_puts_s']['target']}), ack-path segment PUTs/s "
            f"{run.get('ack_path_segment_puts_s')}, compaction PUTs/s "
            f"{run.get('compaction_puts_s')} [{run['put_source']}]; metadata writes/s "
            f"{run['meta_writes_s']} (target/broker {t['meta_writes_s']['target']}) "
            f"[{run['meta_source']}]; broker CPU {run['broker_cpu_pct']}%, RSS "
            f"{run['broker_rss_mib']} MiB; p50/p99 {run['p50_ms']}/{run['p99_ms']} ms; "
            f"achieved {run['achieved_mb_s']} MB/s; driver CPU {run['driver_cpu_pct']}%"
        )
    except Exception as exc:
        run["error"] = f"{type(exc).__name__}: {exc}"
        bb.log(f"{label}: ERROR {run['error']}")
    finally:
        if brokers is not None:
            run["broker_exit_codes"] = brokers.stop_all()
        for service in (moto, etcd):
            if service is not None:
                service.cleanup()
    return run


def parse_loads(text: str) -> list[tuple[float, int]]:
    """ "0.4:200,40:1024" -> [(0.4, 200), (40.0, 1024)] (MB/s : value bytes)."""
    out = []
    for item in text.split(","):
        rate, _, size = item.partition(":")
        out.append((float(rate), int(size or 1024)))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topologies", default="single,cluster", help="single and/or cluster")
    ap.add_argument("--partitions", default="10,100,1000,4000", help="comma list of P")
    ap.add_argument("--loads", default="0.4:200,40:1024", help="MB/s:value-bytes, comma list")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window per run")
    ap.add_argument("--warmup", type=float, default=5.0, help="unmeasured start of each run")
    ap.add_argument("--quick", action="store_true", help="P=10,1000, 0.4 MB/s, 10 s windows")
    ap.add_argument("--brokers", type=int, default=3, help="brokers of the cluster topology")
    ap.add_argument("--producers", type=int, default=0, help="driver processes (0: by rate)")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the brokers")
    ap.add_argument("--flush-interval-ms", type=int, default=250)
    ap.add_argument("--lease-ttl-ms", type=int, default=5000)
    ap.add_argument("--cache-bytes", type=int, default=256 * bb.MIB)
    ap.add_argument("--broker-log-level", default="info")
    ap.add_argument("--broker-arg", action="append", default=[], help="extra broker flag")
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    args = ap.parse_args(argv)
    if args.quick:
        args.partitions, args.loads, args.seconds, args.warmup = "10,1000", "0.4:200", 10.0, 3.0
    args.topologies = args.topologies.split(",")
    args.partitions = [int(p) for p in args.partitions.split(",")]
    args.loads = parse_loads(args.loads)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.update(cb.S3_CREDENTIALS)  # the cluster's brokers inherit them
    out: dict[str, Any] = {
        "flush_interval_ms": args.flush_interval_ms,
        "seconds": args.seconds,
        "warmup": args.warmup,
        "brokers": args.brokers,
        "driver": bb.driver_version(),
        "cpus": os.cpu_count(),
        "runs": [],
    }
    opts = bb.BrokerOptions(
        python=args.python,
        store="s3",
        flush_interval_ms=args.flush_interval_ms,
        cache_bytes=args.cache_bytes,
        segment_bytes=None,
        readahead_segments=None,
        log_level=args.broker_log_level,
        extra_args=args.broker_arg,
    )
    with bb.scratch_dir(args.keep_data) as root:
        for topology in args.topologies:
            for load in args.loads:
                for partitions in args.partitions:
                    out["runs"].append(one_run(args, opts, root, topology, partitions, load))
    out["targets_across_runs"] = cross_run_targets(out["runs"])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
