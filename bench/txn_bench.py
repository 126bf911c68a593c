"""What transactions cost a producer and the broker: produce throughput, broker CPU-s per GiB,
commits per second and commit latency of transactional producers against idempotent ones.

Phases, each producing --gib of 1 KiB random values round-robin over a topic of --partitions
with confluent-kafka in its defaults (acks=all, idempotence on; the transactional phases with a
``transactional.id`` of their own per driver process), one producer per driver process
(--producers):

  idempotent   the plain idempotent producer: produce everything, flush
  txn_1mib     begin; --txn-bytes (1 MiB) of records; commit; repeat
  txn_100      begin; --txn-records (100) records; commit; repeat

Every phase runs on a fresh broker (and with --store s3 a fresh S3 server) with the same
settings, so none inherits another's heap (the memory store keeps every segment in it), data,
write-ahead objects still to compact or producer state, and the order of the phases does not
weigh on their figures. With --rounds N every phase runs N times, the order rotating each
round (so that drift of the machine weighs on all phases alike), and the medians are reported.

Per phase: MB/s and records/s (until the last record is acknowledged, the last commit
returned), broker CPU-s per GiB over that window and with the compaction after it (until the
broker is idle again, as broker_bench.py's produce phases), commits per second and p50/p99 of
``commit_transaction()`` (it sends what is still queued, waits for it, then ends the
transaction), and from the broker's /metrics per GiB: write-ahead object PUTs, write-ahead
commits, metadata store writes (the ``txn`` count of kafscale_metadata_request_duration_seconds)
and object store PUTs by object; with --store s3 also S3 requests per GiB from the server's
request log (broker_bench.py's count).

Each phase is verified before its figures count: every partition's last stable offset equals
its high watermark (no transaction left open), the offsets equal the records plus one marker per
partition per transaction, and a read_committed consumer reads exactly the records the
producers were told committed. A phase that fails its check, or whose producer met an error,
reports the error and its figures under ``discarded``, never as results.

Usage: python bench/txn_bench.py [--gib 0.25] [--partitions 8] [--producers 1] [--rounds 1]
           [--phases idempotent,txn_1mib,txn_100] [--store memory|local|s3]
           [--s3-server moto|s3fast] [--broker-arg=--flag=value ...]
Prints progress to stderr and one JSON line to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import broker_bench as bb
from partition_scaling import WAL_COMMITS, WAL_OBJECTS, metered, scrape, txn_count
from s3_requests import S3Requests, per_gib
from s3_servers import KINDS, s3_server, s3_store_args

PHASES = ("idempotent", "txn_1mib", "txn_100")
OBJECT_PUT = re.compile(r'^kafscale_object_store_requests_total\{(?=.*operation="put")')
OBJECT_LABEL = re.compile(r'object="([^"]*)"')
# What a broker log line looks like when something went wrong.
LOG_PROBLEM = re.compile(r"^\S+\s+(WARN|ERROR)\b|panicked")
MEDIAN_KEYS = (
    "mb_s",
    "records_s",
    "broker_cpu_s_per_gib",
    "broker_cpu_s_per_gib_with_compaction",
    "broker_cpu_util",
    "driver_cpu_util",
    "commits_s",
    "commit_p50_ms",
    "commit_p99_ms",
    "wal_puts_per_gib",
    "wal_commits_per_gib",
    "metadata_writes_per_gib",
    "metadata_writes_per_gib_with_compaction",
    "metadata_writes_per_txn",
    "wal_puts_per_txn",
)
RATIO_KEYS = (
    "mb_s",
    "broker_cpu_s_per_gib",
    "broker_cpu_s_per_gib_with_compaction",
    "wal_puts_per_gib",
    "metadata_writes_per_gib",
)


# --------------------------------------------------------------------------------------------
# The driver: one producer per process, idempotent or transactional
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TxnJob:
    bootstrap: str
    topic: str
    partitions: list[int]
    messages: int
    value_bytes: int
    transactional_id: str | None  # None: the idempotent producer
    records_per_txn: int
    deadline_s: float


def txn_worker(wid: int, job: TxnJob, out: Any, start: Any) -> None:
    bb.report_outcome(_produce, wid, job, out, start)


def _produce(wid: int, job: TxnJob, out: Any, start: Any) -> dict[str, Any]:
    """Produces ``job.messages`` records, in transactions of ``records_per_txn`` if
    transactional; reports what each partition got (records committed, offsets taken by
    records and markers) and every commit's duration."""
    from confluent_kafka import KafkaException, Producer

    failed: list[str] = []  # delivery failures (only errors get a delivery report)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    conf = bb.client_config(job.bootstrap) | {
        "enable.idempotence": True,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        "error_cb": lambda e: errors.append(str(e)),
    }
    txn = job.transactional_id is not None
    if txn:
        conf["transactional.id"] = job.transactional_id
    producer = Producer(conf)
    producer.list_topics(job.topic, timeout=30)  # connect + metadata before the clock starts
    if txn:
        producer.init_transactions(60)  # the producer id, before the clock starts
    values = bb.make_values(job.value_bytes)
    parts = job.partitions
    n_parts = len(parts)
    records = dict.fromkeys(parts, 0)  # committed (transactional) or produced (idempotent)
    offsets = dict.fromkeys(parts, 0)  # offsets taken: records and markers
    commits: list[float] = []
    bb._wait_start(out, start, wid)

    cpu0, t0 = bb.self_cpu_seconds(), time.monotonic()
    deadline = t0 + job.deadline_s
    produce, poll = producer.produce, producer.poll
    chunk = job.records_per_txn if txn else job.messages
    done = 0
    complete = True
    while done < job.messages:
        n = min(chunk, job.messages - done)
        if txn:
            producer.begin_transaction()
        written = dict.fromkeys(parts, 0)
        for i in range(done, done + n):
            part = parts[(i + wid) % n_parts]
            while True:
                try:
                    produce(job.topic, values[i % bb.VALUE_POOL], None, part)
                    break
                except BufferError:
                    poll(0.002)
            written[part] += 1
            if i % 2048 == 0:
                poll(0)
        if txn:
            began = time.monotonic()
            try:
                producer.commit_transaction(120)
            except KafkaException as exc:
                errors.append(f"commit_transaction: {exc}")
                complete = False
                with contextlib.suppress(KafkaException):
                    if exc.args[0].txn_requires_abort():
                        producer.abort_transaction(60)
                break
            commits.append(time.monotonic() - began)
        for part, k in written.items():
            records[part] += k
            offsets[part] += k + (1 if txn and k else 0)  # a marker where the txn wrote
        done += n
        if time.monotonic() > deadline:
            errors.append(f"deadline: only {done} of {job.messages} produced")
            complete = False
            break
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    t1 = time.monotonic()
    return {
        "start": t0,
        "end": t1,
        "records": done - len(failed) - remaining,
        "unacked": remaining,
        "complete": complete and done == job.messages and not failed and not remaining,
        "errors": (failed + errors)[:5],
        "error_count": len(failed) + len(errors),
        "cpu_s": bb.self_cpu_seconds() - cpu0,
        "per_partition_records": records,
        "per_partition_offsets": offsets,
        "commits_s": commits,
    }


# --------------------------------------------------------------------------------------------
# The broker: broker_bench's, with a /metrics address scraped where its CPU is sampled
# --------------------------------------------------------------------------------------------


class Metered:
    """A broker_bench broker whose /metrics are scraped whenever bb.run_workers samples its
    usage: right before the drivers are released (first the scrape, whose CPU is then not
    counted) and right after the last one reported (the usage first)."""

    def __init__(self, broker: bb.Broker, metrics_addr: str) -> None:
        self.broker, self.metrics_addr = broker, metrics_addr
        self.scrapes: list[dict[str, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.broker, name)

    def metrics(self) -> dict[str, float]:
        return scrape([self.metrics_addr])

    def usage(self) -> bb.Usage:
        if len(self.scrapes) % 2 == 0:
            self.scrapes.append(self.metrics())
            return self.broker.usage()
        usage = self.broker.usage()
        self.scrapes.append(self.metrics())
        return usage


def counters(metrics: dict[str, float]) -> dict[str, float]:
    """The counters this bench reports, from one scrape (0 for a series the broker lacks)."""
    found = {
        "wal_puts": metrics.get(WAL_OBJECTS, 0.0),
        "wal_commits": metrics.get(WAL_COMMITS, 0.0),
        "metadata_writes": txn_count(metrics) or 0.0,
    }
    for series, value in metrics.items():
        if OBJECT_PUT.match(series):
            label = OBJECT_LABEL.search(series)
            key = f"put_{label.group(1) if label else 'other'}"
            found[key] = found.get(key, 0.0) + value
    return found


def increase(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """How much each counter grew between two scrapes."""
    a, b = counters(before), counters(after)
    return {key: b[key] - a.get(key, 0.0) for key in b}


# --------------------------------------------------------------------------------------------
# Checks: what the partitions hold against what the producers were told
# --------------------------------------------------------------------------------------------


def list_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, int]:
    """Each partition's end: the high watermark (read_uncommitted) or last stable offset
    (read_committed: librdkafka's ListOffsets carries the consumer's isolation level)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(bb.consumer_config(bootstrap) | {"isolation.level": isolation})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        }
    finally:
        c.close()


def read_committed(bootstrap: str, topic: str, partitions: int, stall_s: float) -> dict[int, int]:
    """Records per partition a read_committed consumer reads from the start to the end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    conf = bb.consumer_config(bootstrap) | {
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    }
    c = Consumer(conf)
    counts = dict.fromkeys(range(partitions), 0)
    todo = set(range(partitions))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        last = time.monotonic()
        while todo:
            msgs = c.consume(10_000, 0.5)
            if msgs:
                last = time.monotonic()
            elif time.monotonic() - last > stall_s:
                raise RuntimeError(f"read_committed: partitions {sorted(todo)} stalled")
            for m in msgs:
                err = m.error()
                if err is None:
                    counts[m.partition()] += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    todo.discard(m.partition())
                else:
                    raise RuntimeError(f"read_committed: {err}")
    finally:
        c.close()
    return counts


def verify(broker: Any, args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The partitions against the producers' reports; ``ok`` only if everything matches."""
    want_records = dict.fromkeys(range(args.partitions), 0)
    want_offsets = dict.fromkeys(range(args.partitions), 0)
    for r in results:
        for p, n in r["per_partition_records"].items():
            want_records[int(p)] += n
        for p, n in r["per_partition_offsets"].items():
            want_offsets[int(p)] += n
    high = list_offsets(broker.addr, bb.TOPIC, args.partitions, "read_uncommitted")
    stable = list_offsets(broker.addr, bb.TOPIC, args.partitions, "read_committed")
    got = read_committed(broker.addr, bb.TOPIC, args.partitions, args.stall_seconds)
    problems = [
        f"partition {p}: last stable offset {stable[p]} below high watermark {high[p]}"
        for p in high
        if stable[p] != high[p]
    ]
    problems += [
        f"partition {p}: high watermark {high[p]}, expected {want_offsets[p]} (records + markers)"
        for p in high
        if high[p] != want_offsets[p]
    ]
    problems += [
        f"partition {p}: read_committed read {got[p]} records, expected {want_records[p]}"
        for p in got
        if got[p] != want_records[p]
    ]
    return {
        "ok": not problems,
        "expected_records": sum(want_records.values()),
        "read_committed_records": sum(got.values()),
        "expected_offsets": sum(want_offsets.values()),
        "high_watermarks": sum(high.values()),
        "last_stable_offsets": sum(stable.values()),
        "problems": problems[:10],
    }


# --------------------------------------------------------------------------------------------
# A phase on a fresh broker
# --------------------------------------------------------------------------------------------


def records_per_txn(phase: str, args: argparse.Namespace) -> int:
    if phase == "txn_1mib":
        return max(1, args.txn_bytes // args.value_bytes)
    return args.txn_records if phase == "txn_100" else 0


def start_broker(args: argparse.Namespace, root: Path, s3: Any) -> Metered:
    extra = [*args.broker_arg, *(s3_store_args(s3) if s3 else [])]
    opts = bb.default_options(
        args.python, args.store, extra, s3_requests=S3Requests(s3.log_path) if s3 else None
    )
    opts = dataclasses.replace(
        opts, flush_interval_ms=args.flush_interval_ms, log_level=args.broker_log_level
    )
    opts, metrics_addr = metered(opts)
    return Metered(bb.start_broker(opts, root), metrics_addr)


def run_phase(phase: str, args: argparse.Namespace, broker: Metered) -> dict[str, Any]:
    per_txn = records_per_txn(phase, args)
    total = bb.messages_per_phase(args)
    procs = max(1, args.producers)
    txns = -(-total // per_txn) if per_txn else 0
    # a liveness guard only: at least 2 MB/s, or 2 s per transaction of each producer
    deadline = max(300.0, total * args.value_bytes / (2 * bb.MB), 2.0 * txns / procs)
    jobs = [
        TxnJob(
            bootstrap=broker.addr,
            topic=bb.TOPIC,
            partitions=list(range(args.partitions)),
            messages=total // procs + (1 if i < total % procs else 0),
            value_bytes=args.value_bytes,
            transactional_id=f"kafscale-bench-{phase}-{i}" if per_txn else None,
            records_per_txn=per_txn,
            deadline_s=deadline,
        )
        for i in range(procs)
    ]
    what = f"transactions of {per_txn} records" if per_txn else "no transactions"
    bb.log(f"{phase}: producing {total} x {args.value_bytes} B, {what}, {procs} process(es)")
    requests = broker.s3_requests
    mark = requests.mark() if requests else 0
    results, usage, errors = bb.run_workers(txn_worker, jobs, broker, deadline + 180)
    fig = bb.phase_figures(results, args.value_bytes, broker, usage, errors)
    window_end = requests.mark() if requests else 0
    before_tail = broker.cpu_seconds()
    bb.wait_idle(broker)
    tail = broker.cpu_seconds() - before_tail
    final = broker.metrics()
    nbytes = fig["bytes"]
    fig["records_per_txn"] = per_txn or None
    commits = sorted(s * 1000 for r in results for s in r["commits_s"])
    fig["transactions"] = len(commits)
    if commits:
        fig |= {
            "commits_s": round(len(commits) / fig["seconds"], 2),
            "commit_p50_ms": bb._round(bb.percentile(commits, 0.50)),
            "commit_p99_ms": bb._round(bb.percentile(commits, 0.99)),
            "commit_max_ms": round(commits[-1], 2),
            "commit_mean_ms": round(sum(commits) / len(commits), 2),
        }
    fig["compaction_tail_cpu_s"] = round(tail, 2)
    if nbytes:
        gib = nbytes / bb.GIB
        fig["broker_cpu_s_per_gib_with_compaction"] = round((usage.cpu_s + tail) / gib, 3)
        first, last = broker.scrapes[-2:]
        window, total_counts = increase(first, last), increase(first, final)
        fig |= {
            "wal_puts_per_gib": round(window["wal_puts"] / gib, 1),
            "wal_commits_per_gib": round(window["wal_commits"] / gib, 1),
            "metadata_writes_per_gib": round(window["metadata_writes"] / gib, 1),
            "metadata_writes_per_gib_with_compaction": round(
                total_counts["metadata_writes"] / gib, 1
            ),
            "object_store_puts_per_gib_with_compaction": {
                k.removeprefix("put_"): round(v / gib, 1)
                for k, v in total_counts.items()
                if k.startswith("put_")
            },
        }
        if commits:
            fig["wal_puts_per_txn"] = round(window["wal_puts"] / len(commits), 2)
            fig["metadata_writes_per_txn"] = round(window["metadata_writes"] / len(commits), 2)
        if requests:
            win, after = requests.since(mark), requests.since(window_end)
            win.subtract(after)
            fig["s3_requests_per_gib"] = {
                "produce_window": per_gib(+win, nbytes),
                "total": per_gib(requests.since(mark), nbytes),
            }
    bb.log(
        f"{phase}: {fig['mb_s']} MB/s, broker {fig['broker_cpu_s_per_gib']} CPU-s/GiB "
        f"({fig.get('broker_cpu_s_per_gib_with_compaction')} with compaction), "
        f"{fig.get('commits_s')} commits/s, commit p50 {fig.get('commit_p50_ms')} ms "
        f"p99 {fig.get('commit_p99_ms')} ms, {fig.get('metadata_writes_per_gib')} metadata "
        f"writes/GiB, {fig.get('wal_puts_per_gib')} write-ahead PUTs/GiB"
    )
    fig["verification"] = check = verify(broker, args, results)
    bb.log(
        f"{phase}: verified {check['read_committed_records']} of "
        f"{check['expected_records']} records read_committed; "
        + ("ok" if check["ok"] else "; ".join(check["problems"][:3]))
    )
    return fig


def log_problems(broker: bb.Broker) -> list[str]:
    """The broker log's warnings and errors (and panics), at most 10."""
    lines = [line for line in broker.log_text().splitlines() if LOG_PROBLEM.search(line)]
    return lines[:10]


def one_phase(phase: str, n: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """``phase`` on a fresh broker (and S3 server); its figures, or its error and the figures
    it discarded."""
    fig: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        s3 = None
        if args.store == "s3":
            s3 = stack.enter_context(s3_server(root / f"r{n}-{phase}-s3", args.s3_server))
        broker = start_broker(args, root / f"r{n}-{phase}", s3)
        try:
            bb.create_topic(broker.addr, bb.TOPIC, args.partitions)
            fig = run_phase(phase, args, broker)
            fig["broker_peak_rss_mib"] = round(broker.peak_rss_mib(), 1)
        except Exception as exc:
            fig = {"error": f"{type(exc).__name__}: {exc}", "discarded": fig}
        finally:
            code = broker.stop()
            fig["broker_exit_code"] = code
            problems = log_problems(broker.broker)
            if problems:
                fig["broker_log_problems"] = problems
    broken = []
    if "error" not in fig:
        if fig.get("error_count") or fig.get("incomplete"):
            broken.append(f"{fig.get('error_count')} producer error(s): {fig.get('errors')}")
        if not fig["verification"]["ok"]:
            broken.append(f"verification failed: {fig['verification']['problems'][:3]}")
        if code != 0:
            broken.append(f"broker exit code {code} after SIGTERM")
    if broken:
        keep = ("broker_exit_code", "broker_log_problems", "verification")
        fig = {
            "error": "; ".join(broken),
            **{k: fig.pop(k) for k in keep if k in fig},
            "discarded": fig,
        }
    return fig


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {"verified_runs": len(good)}
    for key in MEDIAN_KEYS:
        values = [r[key] for r in good if isinstance(r.get(key), int | float)]
        if values:
            out[key] = round(statistics.median(values), 3)
    return out


def ratios(phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each transactional phase's medians ÷ the idempotent phase's (above 1: more)."""
    base = phases.get("idempotent", {})
    out: dict[str, Any] = {}
    for name, fig in phases.items():
        if name == "idempotent":
            continue
        both = {
            key: round(fig[key] / base[key], 3)
            for key in RATIO_KEYS
            if isinstance(fig.get(key), int | float) and base.get(key)
        }
        if both:
            out[name] = both
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=0.25, help="GiB of values per phase")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=1, help="producer processes per phase")
    ap.add_argument(
        "--txn-bytes", type=int, default=bb.MIB, help="values per transaction in txn_1mib"
    )
    ap.add_argument("--txn-records", type=int, default=100, help="records per txn in txn_100")
    ap.add_argument("--rounds", type=int, default=1, help="runs of every phase (medians)")
    ap.add_argument("--phases", default=",".join(PHASES), help="comma list of " + ",".join(PHASES))
    ap.add_argument(
        "--store",
        choices=["memory", "local", "s3"],
        default="memory",
        help="segment store of every broker, as in broker_bench.py (s3: a fresh server per phase)",
    )
    ap.add_argument("--s3-server", choices=KINDS, default="moto", help="see broker_bench.py")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the broker")
    ap.add_argument("--flush-interval-ms", type=int, default=250)
    ap.add_argument("--broker-log-level", default="info")
    ap.add_argument("--broker-arg", action="append", default=[], help="extra broker flag")
    ap.add_argument(
        "--stall-seconds", type=float, default=60.0, help="give up the read-back after this"
    )
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    args = ap.parse_args(argv)
    args.phases = [p for p in args.phases.split(",") if p]
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        ap.error(f"unknown phases: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict[str, Any] = {
        "store": args.store,
        "s3_server": args.s3_server if args.store == "s3" else None,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "gib_per_phase": args.gib,
        "producers": args.producers,
        "records_per_txn": {p: records_per_txn(p, args) for p in args.phases if p != "idempotent"},
        "flush_interval_ms": args.flush_interval_ms,
        "broker_args": args.broker_arg,
        "rounds": args.rounds,
        "broker_per_phase": "fresh",
        "driver": bb.driver_version(),
        "errors": [],
    }
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in args.phases}

    def run(root: Path) -> None:
        for n in range(args.rounds):
            order = args.phases[n % len(args.phases) :] + args.phases[: n % len(args.phases)]
            for phase in order:
                bb.log(f"round {n + 1}/{args.rounds}: {phase}")
                fig = one_phase(phase, n, args, root)
                runs[phase].append(fig)
                if "error" in fig:
                    out["errors"].append(f"round {n + 1} {phase}: {fig['error']}")
                    bb.log(f"ERROR round {n + 1} {phase}: {fig['error']}")
        out["phases"] = {p: medians(r) | {"runs": r} for p, r in runs.items()}
        out["vs_idempotent"] = ratios(out["phases"])
        bb.log(f"transactional / idempotent: {json.dumps(out['vs_idempotent'])}")

    return bb.run_in_scratch(out, args.keep_data, run)


if __name__ == "__main__":
    sys.exit(main())
