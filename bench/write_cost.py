"""What producing costs the broker, compaction included, side by side with another build.

Rounds of broker_bench.py's produce phase (``--gib`` of 1 KiB values, acks=all, 8 partitions,
confluent-kafka; a fresh broker and a fresh S3 server each time: moto, or with ``--s3-server
s3fast`` bench/s3fast, which keeps up with the broker's full speed), each counted until the
broker is idle again, so the compaction of what it wrote is part of it; alternately on this
tree's broker and on the broker of ``--baseline`` (a source tree with its own built
``kafscale._core``, e.g. a git worktree of the code before a change), which goes first
alternating too. Each round prints the
broker's CPU-s per GiB (the produce window, and with the compaction after it) and the S3
requests per GiB by operation and object (from the server's request log); then the medians of each
side. Uploads are signed with their body's hash unless AWS_UNSIGNED_PAYLOAD=true (what they are
over HTTPS), as with broker_bench.py.

``--tansu`` adds a third side: Tansu (bench/peers.py), whose CPU and S3 requests are counted
the same way (it has no compaction: its tail is whatever it does once the producer stopped).

``--idempotence`` makes the producer idempotent (librdkafka then keeps at most five requests in
flight, as the Java client does); ``--store memory`` uses the broker's memory store instead.

Usage: python bench/write_cost.py --baseline DIR [--rounds 3] [--gib 1] [--idempotence]
                                  [--s3-server moto|s3fast] [--tansu]
Prints progress to stderr and one JSON line to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import broker_bench as bb
import peers
from s3_requests import S3Requests
from s3_servers import KINDS, s3_server, s3_store_args


def one_round(
    side: str, tree: Path | None, args: argparse.Namespace, s3: Any, root: Path, n: int
) -> dict[str, Any]:
    namespace = f"r{n}-{side}"
    if side == "tansu":
        broker: Any = peers.start_tansu(s3, root, namespace)
    else:
        broker = kafscale(tree, args, s3, root, namespace)
    try:
        bb.create_topic(broker.addr, bb.TOPIC, args.partitions, None)
        fig = bb.produce_until_idle(broker, args, "-1", f"{side} round {n}")
    finally:
        broker.stop()
    return fig


def kafscale(
    tree: Path | None, args: argparse.Namespace, s3: Any, root: Path, namespace: str
) -> bb.Broker:
    """This tree's broker, or the one of source tree ``tree``."""
    store_args = [*s3_store_args(s3), "--s3-namespace", namespace] if s3 else []
    opts = bb.default_options(
        args.python,
        args.store,
        store_args,
        s3_requests=S3Requests(s3.log_path) if s3 else None,
        source_tree=tree,
    )
    return bb.start_broker(opts, root / namespace)


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def med(get: Any) -> float | None:
        values = [v for v in (get(r) for r in rounds) if v is not None]
        return round(statistics.median(values), 3) if values else None

    out: dict[str, Any] = {
        "mb_s": med(lambda r: r.get("mb_s")),
        "broker_cpu_s_per_gib": med(lambda r: r.get("broker_cpu_s_per_gib")),
        "broker_cpu_s_per_gib_with_compaction": med(
            lambda r: r.get("broker_cpu_s_per_gib_with_compaction")
        ),
    }
    if all("s3_requests_per_gib" in r for r in rounds):
        for op in ("PUT", "GET", "LIST", "DELETE", "POST"):
            out[f"s3_{op}_per_gib"] = med(lambda r, op=op: r["s3_requests_per_gib"]["total"][op])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="source tree of the other build")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side")
    ap.add_argument("--gib", type=float, default=1.0, help="GiB produced per round")
    ap.add_argument("--store", choices=("s3", "memory"), default="s3")
    ap.add_argument("--s3-server", choices=KINDS, default="moto", help="see broker_bench")
    ap.add_argument("--idempotence", action="store_true", help="an idempotent producer")
    ap.add_argument(
        "--tansu",
        action="store_true",
        help=f"a third side: Tansu {peers.TANSU_VERSION} on S3 (built into target/ once)",
    )
    ap.add_argument("--keep-data", action="store_true")
    own = ap.parse_args()
    if not (own.baseline / "python" / "kafscale").is_dir():
        ap.error(f"{own.baseline} holds no python/kafscale package")
    flags = ["--store", own.store, "--gib", str(own.gib)]
    args = bb.parse_args(flags + (["--idempotence"] if own.idempotence else []))
    sides: dict[str, Path | None] = {"this": None, "baseline": own.baseline.resolve()}
    if own.tansu:
        if own.store != "s3":
            ap.error("--tansu runs on S3 (--store s3)")
        sides["tansu"] = None
        peers.build_tansu()
    out: dict[str, Any] = {
        "gib": own.gib,
        "store": own.store,
        "s3_server": own.s3_server if own.store == "s3" else None,
        "idempotence": own.idempotence,
        "baseline": str(own.baseline),
        "unsigned_payload": os.environ.get("AWS_UNSIGNED_PAYLOAD", "") == "true",
        "driver": bb.driver_version(),
        "rounds": {side: [] for side in sides},
        "errors": [],
    }

    def run(root: Path) -> None:
        for n in range(own.rounds):
            order = list(sides) if n % 2 == 0 else list(reversed(sides))
            for side in order:
                # an S3 server of its own: one holding earlier rounds' objects answers slower
                with contextlib.ExitStack() as stack:
                    server = (
                        stack.enter_context(s3_server(root / f"r{n}-{side}-s3", own.s3_server))
                        if own.store == "s3"
                        else None
                    )
                    fig = one_round(side, sides[side], args, server, root, n)
                out["rounds"][side].append(fig)
        out["medians"] = {side: medians(out["rounds"][side]) for side in sides}
        bb.log(f"medians: {json.dumps(out['medians'])}")

    return bb.run_in_scratch(out, own.keep_data, run)


if __name__ == "__main__":
    sys.exit(main())
