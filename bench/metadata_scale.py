"""KafScale metadata-scale benchmark: topics of 10,000 partitions, 100,000 in a cluster.

A 3-broker cluster on etcd + moto's S3 server (started here as bench/cluster_bench.py does).
--topics topics of --per-topic partitions are created one CreateTopics each (a topic is one
metadata key; partition records come with their first claim), then it prints, as progress on
stderr and ONE JSON line on stdout:

* ``create_s``: each CreateTopics round trip (the broker answers once the new partitions have
  owners, or after its bounded wait), and ``all_claimed_s``: from the first request until the
  brokers' ``kafscale_owned_partitions`` gauges add up to every partition;
* ``metadata_ms``: Metadata request latency (request sent to the last response byte, read raw,
  no client-side parsing), median and max of --metadata-rounds, for one topic and for all;
* ``rss_mib``: each broker's RSS with every partition created;
* ``restart``: a broker stopped (SIGTERM: its partitions move to the others at once) and started
  again, timed from the new process until it listens (start-up waits, bounded, for the
  partitions assigned to it) and until its gauge shows them all;
* ``failover``: a broker killed with SIGKILL, timed until the other two own every partition.
  Its owner keys go when its etcd lease expires, so this includes up to --lease-ttl-ms;
* ``delete_topic_s``: a DeleteTopics round trip of one of the topics.

It measures; it does not judge. Build the extension in release mode first (bench/README.md).
Usage: python bench/metadata_scale.py [--topics 10] [--per-topic 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import broker_bench as bb
import cluster_bench as cb
import partition_takeover as pt
from support import kafka_wire as kw
from support.procs import free_port  # on the path broker_bench set

BROKERS = (1, 2, 3)


class Cluster:
    """Three brokers on one etcd and one bucket, each with its own metrics port."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.root, self.args = root, args
        os.environ.update(cb.S3_CREDENTIALS)  # the brokers' environment comes from ours
        self.etcd, self.moto = cb.start_etcd(root), cb.start_moto(root)
        self.metrics = {i: f"127.0.0.1:{free_port()}" for i in BROKERS}
        self.brokers: dict[int, bb.Broker] = {}
        for broker_id in BROKERS:
            self.start(broker_id)

    def start(self, broker_id: int) -> bb.Broker:
        extra = ["--s3-bucket", cb.BUCKET, "--s3-region", cb.S3_CREDENTIALS["AWS_REGION"]]
        extra += ["--s3-endpoint", self.moto.endpoint, "--etcd-endpoints", self.etcd.endpoint]
        extra += ["--broker-id", str(broker_id), "--lease-ttl-ms", str(self.args.lease_ttl_ms)]
        extra += ["--metrics-addr", self.metrics[broker_id]]
        opts = pt.broker_options(self.args.python, extra)
        broker = bb.start_broker(opts, self.root / f"broker{broker_id}", timeout=900)
        self.brokers[broker_id] = broker
        return broker

    def owned(self, ids: list[int] | None = None) -> int:
        ids = ids or list(self.brokers)
        return sum(pt.owned_partitions(self.metrics[i]) or 0 for i in ids)

    def wait_owned(self, want: int, ids: list[int] | None = None) -> float | None:
        """Seconds until the gauges of ``ids`` (default: live brokers) add up to ``want``."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.args.timeout:
            if self.owned(ids) == want:
                return time.monotonic() - t0
            time.sleep(0.05)
        return None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.addr for b in self.brokers.values())

    def close(self) -> None:
        for broker in self.brokers.values():
            if broker.alive():
                broker.stop()
        self.moto.cleanup()
        self.etcd.cleanup()


def create_topics(cluster: Cluster, args: argparse.Namespace) -> tuple[list[str], dict]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    names = [f"scale-{i:03d}" for i in range(args.topics)]
    total = args.topics * args.per_topic
    created = []
    t0 = time.monotonic()
    for name in names:
        t = time.monotonic()
        futures = admin.create_topics([NewTopic(name, args.per_topic, 1)], operation_timeout=120)
        futures[name].result(timeout=300)
        created.append(round(time.monotonic() - t, 2))
        bb.log(f"created {name} in {created[-1]} s")
    claimed = cluster.wait_owned(total)
    figures = {
        "partitions": total,
        "create_s": created,
        "all_claimed_s": None if claimed is None else round(time.monotonic() - t0, 2),
    }
    return names, figures


def metadata_latency(broker: bb.Broker, topics: list[str] | None, rounds: int) -> dict:
    """Milliseconds per Metadata v8 request, raw (the response is read, not parsed)."""
    body = kw.metadata_body(8, topics, allow_auto_topic_creation=False)
    times = []
    with kw.RawConnection.to(broker.addr, timeout=120) as conn:
        for _ in range(rounds):
            t = time.monotonic()
            conn.request(kw.METADATA, 8, body)
            times.append((time.monotonic() - t) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}


def restart(cluster: Cluster, broker_id: int, total: int) -> dict:
    """SIGTERM one broker, wait until the others own everything, start it again."""
    cluster.brokers.pop(broker_id).stop()
    others = [i for i in BROKERS if i != broker_id]
    moved = cluster.wait_owned(total, others)
    t0 = time.monotonic()
    cluster.start(broker_id)
    listening = time.monotonic() - t0
    share = total - cluster.owned(others)  # what moves back once it is assigned again
    back = cluster.wait_owned(total)
    return {
        "handed_off_s": None if moved is None else round(moved, 2),
        "listening_s": round(listening, 2),
        "owns_its_share_s": None if back is None else round(time.monotonic() - t0, 2),
        "share_when_listening": share,
    }


def failover(cluster: Cluster, broker_id: int, total: int) -> dict:
    victim = cluster.brokers.pop(broker_id)
    had = pt.owned_partitions(cluster.metrics[broker_id])
    t0 = time.monotonic()
    victim.kill()
    taken = cluster.wait_owned(total)
    return {
        "partitions_of_the_killed_broker": had,
        "all_owned_again_s": None if taken is None else round(time.monotonic() - t0, 2),
        "lease_ttl_s": cluster.args.lease_ttl_ms / 1000,
    }


def delete_topic(cluster: Cluster, topic: str) -> float:
    """Seconds for one DeleteTopics round trip."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    t0 = time.monotonic()
    admin.delete_topics([topic], operation_timeout=120)[topic].result(timeout=300)
    return round(time.monotonic() - t0, 2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="kafscale-metadata-scale-") as tmp:
        cluster = Cluster(Path(tmp), args)
        try:
            names, out["create"] = create_topics(cluster, args)
            bb.log(f"create: {out['create']}")
            total = out["create"]["partitions"]
            any_broker = cluster.brokers[BROKERS[0]]
            out["metadata_ms"] = {
                "one_topic": metadata_latency(any_broker, names[:1], args.metadata_rounds),
                "all_topics": metadata_latency(any_broker, None, args.metadata_rounds),
            }
            bb.log(f"metadata: {out['metadata_ms']}")
            out["rss_mib"] = {i: round(b.rss_mib(), 1) for i, b in cluster.brokers.items()}
            out["restart"] = restart(cluster, BROKERS[-1], total)
            bb.log(f"restart: {out['restart']}")
            out["failover"] = failover(cluster, BROKERS[-1], total)
            bb.log(f"failover: {out['failover']}")
            survivors = {i: round(b.rss_mib(), 1) for i, b in cluster.brokers.items()}
            out["rss_mib_after_failover"] = survivors
            out["delete_topic_s"] = delete_topic(cluster, names[0])
            bb.log(f"deleted {names[0]} in {out['delete_topic_s']} s")
        finally:
            cluster.close()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--topics", type=int, default=10)
    p.add_argument("--per-topic", type=int, default=10_000, help="partitions per topic")
    p.add_argument("--metadata-rounds", type=int, default=20)
    p.add_argument("--lease-ttl-ms", type=int, default=5_000)
    p.add_argument("--timeout", type=float, default=900.0, help="liveness guard per wait")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the broker")
    return p.parse_args(argv)


def main() -> None:
    print(json.dumps(run(parse_args())))


if __name__ == "__main__":
    main()
