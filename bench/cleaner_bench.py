"""What the cleaner of compacted topics costs: CPU and S3 requests per GiB cleaned, and the
produce cost of a compacted topic with cleaning running beside it against with cleaning held
off, in one run on the same S3 server kind.

Three brokers in turn, each on a fresh S3 server (moto, or ``--s3-server s3fast``) and a
compacted topic (``--partitions``, ``--keys`` keys per partition cycled through, so that all but
the last ``--keys`` records of each partition are superseded):

- held off: broker_bench's produce phase of ``--gib`` GiB, counted until the broker is idle
  (write-ahead compaction included), with the cleaner's backoff at a day;
- beside: the same, the cleaner looking every second (``--backoff-ms``), counted until the
  cleaner too is done;
- cleaning alone: the held-off broker's data, with a broker started on it that cleans: its CPU
  and S3 requests from start-up until it is idle, per GiB of segments its cleanings read
  (the cleaned part read again and the dirty part; from its log) and per GiB produced.

Usage: python bench/cleaner_bench.py [--gib 0.5] [--keys 10000] [--s3-server s3fast]
Prints progress to stderr and one JSON line to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any

import broker_bench as bb
from s3_requests import S3Requests, per_gib
from s3_servers import KINDS, s3_server, s3_store_args

DAY_MS = 86_400_000
CLEANED = re.compile(r"cleaned a compacted partition .*?bytes_read=(\d+) bytes_written=(\d+)")


def start(args: argparse.Namespace, s3: Any, root: Path, backoff_ms: int) -> bb.Broker:
    store_args = [*s3_store_args(s3), "--s3-namespace", "cleaner"]
    cleaner = ["--log-cleaner-backoff-ms", str(backoff_ms), "--file-delete-delay-ms", "1000"]
    opts = bb.default_options(
        args.python, "s3", [*store_args, *cleaner], s3_requests=S3Requests(s3.log_path)
    )
    return bb.start_broker(opts, root)


def cleaned_bytes(broker: bb.Broker) -> tuple[int, int, int]:
    """(cleanings, bytes read, bytes written) of the cleanings in the broker's log so far."""
    found = [tuple(map(int, m.groups())) for m in CLEANED.finditer(broker.log_text())]
    return len(found), sum(r for r, _ in found), sum(w for _, w in found)


def produce(args: argparse.Namespace, s3: Any, root: Path, backoff_ms: int, label: str):
    broker = start(args, s3, root, backoff_ms)
    configs = {"cleanup.policy": "compact"}
    bb.create_topic(broker.addr, bb.TOPIC, args.partitions, None, configs)
    fig = bb.produce_until_idle(broker, args, "-1", label)
    count, read, written = cleaned_bytes(broker)
    fig |= {"cleanings": count, "cleaned_read_bytes": read, "cleaned_written_bytes": written}
    return broker, fig


def clean_alone(args: argparse.Namespace, s3: Any, root: Path, produced: int) -> dict[str, Any]:
    """A broker that cleans, started on data written with the cleaner held off."""
    broker = start(args, s3, root, 1000)
    try:
        requests = broker.s3_requests
        assert requests is not None
        mark, cpu0 = requests.mark(), broker.cpu_seconds()
        bb.wait_idle(broker, timeout=600)
        cpu = broker.cpu_seconds() - cpu0
        count, read, written = cleaned_bytes(broker)
        made = requests.since(mark)
    finally:
        broker.stop()
    out: dict[str, Any] = {
        "cleanings": count,
        "read_gib": round(read / bb.GIB, 3),
        "written_gib": round(written / bb.GIB, 3),
        "broker_cpu_s": round(cpu, 2),
    }
    if read:
        out["cpu_s_per_gib_cleaned"] = round(cpu / (read / bb.GIB), 3)
        out["s3_requests_per_gib_cleaned"] = per_gib(made, read)
    out["s3_requests_per_gib_produced"] = per_gib(made, produced)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=0.5, help="GiB produced per broker")
    ap.add_argument("--keys", type=int, default=10_000, help="keys per partition")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--s3-server", choices=KINDS, default="moto", help="see broker_bench")
    ap.add_argument("--backoff-ms", type=int, default=1000, help="the cleaner's, beside")
    ap.add_argument("--keep-data", action="store_true")
    own = ap.parse_args()
    flags = ["--store", "s3", "--gib", str(own.gib), "--keys", str(own.keys)]
    args = bb.parse_args([*flags, "--partitions", str(own.partitions)])
    out: dict[str, Any] = {
        "gib": own.gib,
        "keys_per_partition": own.keys,
        "partitions": own.partitions,
        "s3_server": own.s3_server,
        "unsigned_payload": os.environ.get("AWS_UNSIGNED_PAYLOAD", "") == "true",
        "driver": bb.driver_version(),
        "errors": [],
    }

    def run(root: Path) -> None:
        with contextlib.ExitStack() as stack:
            s3 = stack.enter_context(s3_server(root / "held-s3", own.s3_server))
            broker, out["held_off"] = produce(args, s3, root / "held", DAY_MS, "held off")
            broker.stop()
            out["cleaning_alone"] = clean_alone(args, s3, root / "held", out["held_off"]["bytes"])
        with contextlib.ExitStack() as stack:
            s3 = stack.enter_context(s3_server(root / "beside-s3", own.s3_server))
            broker, out["beside"] = produce(args, s3, root / "beside", own.backoff_ms, "beside")
            broker.stop()
        held, beside = out["held_off"], out["beside"]
        key = "broker_cpu_s_per_gib_with_compaction"
        if held.get(key) and beside.get(key):
            out["produce_cpu_beside_vs_held_off"] = round(beside[key] / held[key], 2)

    return bb.run_in_scratch(out, own.keep_data, run)


if __name__ == "__main__":
    sys.exit(main())
