"""Topic → Iceberg benchmark: what spark/topic_to_iceberg.py costs per GiB, next to consuming the
same data through the broker.

Starts one broker (``python -m kafscale.broker``, local-dir store) on a temporary data dir,
produces --gib of 1 KiB random values into an 8-partition topic with confluent-kafka (the
produce workers of broker_bench.py), then:

  consume   confluent-kafka consumers (--consumers processes, assign(), from offset 0) read the
            whole topic through the broker once: broker_bench.py's fetch workers. CPU = the
            broker's + the consumer processes'.
  iceberg   ``python spark/topic_to_iceberg.py`` as a person runs it (Spark on local[N],
            --spark-cores, default 2; the embedded SQLite catalog in the scratch dir): a first
            run that copies the whole topic into its Iceberg table. CPU = every process of the
            job: the Python driver, Spark's JVM and its Python workers, sampled from /proc
            every 0.2 s (a process's last < 0.2 s is missed). The time includes starting Spark.
            The table's row count is checked against the topic's.

The job is then run again with nothing new: its time and CPU are the fixed cost of a run
(``cpu_s_per_gib_beyond_fixed`` leaves it out). ``cpu_ratio`` is the job's CPU-seconds per GiB
over the consumer path's; ``rate_ratio`` the job's records/s over the consumers'. The broker was
just written to and the segment files are in the page cache: both sides read from memory.
Progress goes to stderr, ONE JSON line to stdout; it measures and does not judge.

--core-lib PATH runs broker and job on another build of kafscale._core (e.g.
target/release/libkafscale.so): a copy of python/kafscale with it, first on PYTHONPATH.

Usage: python bench/iceberg_job.py [--gib 1] [--spark-cores 2] [--consumers 2] [--core-lib PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import broker_bench as bb

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "spark" / "topic_to_iceberg.py"
NAMESPACE = "default"  # the broker's default --s3-namespace: segments live in <data_dir>/default
TICK = os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def own_cpu(pid: int) -> tuple[str, float] | None:
    """(start time, as a key that outlives pid reuse; utime + stime seconds) of ``pid``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return f"{pid}:{fields[19]}", (int(fields[11]) + int(fields[12])) / TICK


class TreeCpu:
    """The CPU time of a process tree, sampled from /proc until stopped."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root, self.interval = root, interval
        self.seen: dict[str, float] = {}
        self.peak_procs = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        pids = descendants(self.root)
        self.peak_procs = max(self.peak_procs, len(pids))
        for pid in pids:
            got = own_cpu(pid)
            if got is not None:
                self.seen[got[0]] = max(self.seen.get(got[0], 0.0), got[1])

    def loop(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval)

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return sum(self.seen.values())


def core_overlay(lib: Path, root: Path) -> Path:
    """A copy of python/kafscale whose kafscale._core is ``lib``; returns the directory to put
    first on PYTHONPATH."""
    overlay = root / "overlay"
    shutil.copytree(
        ROOT / "python" / "kafscale",
        overlay / "kafscale",
        ignore=shutil.ignore_patterns("_core*.so", "__pycache__"),
    )
    shutil.copy(lib, overlay / "kafscale" / "_core.abi3.so")
    return overlay


def run_job(args: argparse.Namespace, location: str, warehouse: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYSPARK_SUBMIT_ARGS"] = (
        f"--master local[{args.spark_cores}] --driver-memory {args.spark_memory} "
        "--conf spark.ui.enabled=false pyspark-shell"
    )
    env["PYSPARK_PYTHON"] = sys.executable
    cmd = [sys.executable, str(JOB), location, "--subscribe", bb.TOPIC]
    cmd += ["--warehouse", str(warehouse)]
    bb.log(f"iceberg: {' '.join(cmd)}")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cpu = TreeCpu(proc.pid)
    stdout, stderr = proc.communicate()
    seconds = time.perf_counter() - t0
    cpu_s = cpu.stop()
    out: dict[str, Any] = {
        "exit_code": proc.returncode,
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu_s, 2),
        "processes_at_peak": cpu.peak_procs,
        "progress": stdout.strip().splitlines()[-3:],
    }
    if proc.returncode != 0:
        out["stderr_tail"] = stderr.strip().splitlines()[-15:]
    return out


def wait_for_segments(location: str, marks: dict[int, int], seconds: float = 120.0) -> bool:
    """Wait until the topic's committed log, as a reader sees it, ends at the high watermarks
    (the job reads what the data directory says is committed)."""
    from kafscale.spark import latest_offsets

    want = {str(p): hi for p, hi in marks.items()}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if latest_offsets({"path": location, "subscribe": bb.TOPIC}).get(bb.TOPIC) == want:
            return True
        time.sleep(0.5)
    return False


def table_rows(warehouse: Path) -> int:
    from kafscale.spark.iceberg import open_catalog, table_name

    table = open_catalog(str(warehouse)).load_table(("kafscale", table_name(bb.TOPIC)))
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    return int(snapshot.summary["total-records"] or 0)


def run(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    if args.core_lib:
        overlay = core_overlay(Path(args.core_lib), root)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(overlay), os.environ.get("PYTHONPATH")) if p
        )
    bargs = bb.parse_args(
        [
            "--gib",
            str(args.gib),
            "--store",
            "local",
            "--partitions",
            str(args.partitions),
            "--consumers",
            str(args.consumers),
        ]
    )
    opts = bb.BrokerOptions(
        python=sys.executable,
        store="local",
        flush_interval_ms=bargs.flush_interval_ms,
        cache_bytes=bargs.cache_bytes,
        segment_bytes=None,
        readahead_segments=None,
        log_level="info",
        extra_args=[],
    )
    broker = bb.start_broker(opts, root / "broker")
    try:
        bb.create_topic(broker.addr, bb.TOPIC, args.partitions)
        out["produce"] = bb.run_produce(broker, bargs, "1", "produce")
        marks = bb.watermarks(broker.addr, bb.TOPIC, args.partitions)
        ranges = {p: (0, hi) for p, (_, hi) in marks.items()}
        records = sum(hi for _, hi in ranges.values())
        gib = records * args.value_bytes / bb.GIB
        out["topic_records"] = records
        out["topic_gib"] = round(gib, 4)

        consume = bb.run_fetch(broker, bargs, ranges, 1, "consume")
        consume_cpu = consume["broker_cpu_s"] + consume["driver_cpu_s"]
        consume["cpu_s"] = round(consume_cpu, 2)
        consume["cpu_s_per_gib"] = round(consume_cpu / gib, 2)
        out["consume"] = consume

        location = str(broker.data_dir / NAMESPACE)
        if not wait_for_segments(location, {p: hi for p, (_, hi) in ranges.items()}):
            out["errors"].append("the segments never reached the high watermarks")
        broker_cpu0 = broker.cpu_seconds()
        job = run_job(args, location, root / "warehouse")
        job["broker_cpu_s"] = round(broker.cpu_seconds() - broker_cpu0, 2)  # not in cpu_s
        job["records_s"] = round(records / job["seconds"])
        job["mb_s"] = round(records * args.value_bytes / bb.MB / job["seconds"], 1)
        job["cpu_s_per_gib"] = round(job["cpu_s"] / gib, 2)
        if job["exit_code"] == 0:
            job["table_records"] = table_rows(root / "warehouse")
            if job["table_records"] != records:
                out["errors"].append(f"table has {job['table_records']} rows, topic {records}")
        else:
            out["errors"].append(f"the job exited with {job['exit_code']}")
        out["iceberg"] = job
        # the fixed cost: the same job again with nothing new (Spark start, planning, catalog)
        out["iceberg_nothing_new"] = noop = run_job(args, location, root / "warehouse")
        marginal = job["cpu_s"] - noop["cpu_s"]
        job["cpu_s_per_gib_beyond_fixed"] = round(marginal / gib, 2)
        out["cpu_ratio"] = round(job["cpu_s_per_gib"] / consume["cpu_s_per_gib"], 2)
        out["rate_ratio"] = round(job["records_s"] / consume["records_s"], 3)
        bb.log(
            f"consume {consume['records_s']} rec/s, {consume['cpu_s_per_gib']} CPU-s/GiB; "
            f"iceberg job {job['records_s']} rec/s, {job['cpu_s_per_gib']} CPU-s/GiB "
            f"({job['seconds']} s, {job['cpu_s']} CPU-s; a run with nothing new "
            f"{noop['seconds']} s, {noop['cpu_s']} CPU-s); cpu ratio {out['cpu_ratio']}"
        )
    finally:
        out["broker_exit_code"] = broker.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="GiB of values in the topic")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-bytes", type=int, default=1024, choices=[1024])
    ap.add_argument("--consumers", type=int, default=2, help="consume driver processes")
    ap.add_argument("--spark-cores", type=int, default=2, help="N of local[N]")
    ap.add_argument("--spark-memory", default="4g", help="Spark driver memory")
    ap.add_argument("--core-lib", help="another build of kafscale._core (see the docstring)")
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dir")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict[str, Any] = {
        "gib": args.gib,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "consumers": args.consumers,
        "spark_cores": args.spark_cores,
        "core_lib": args.core_lib or "installed kafscale._core",
        "driver": bb.driver_version(),
        "cpus": os.cpu_count(),
        "errors": [],
    }
    return bb.run_in_scratch(out, args.keep_data, lambda root: run(args, root, out))


if __name__ == "__main__":
    sys.exit(main())
