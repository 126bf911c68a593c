"""The ceiling a producer's in-flight window puts on its throughput, by broker ack latency.

An idempotent librdkafka producer (like the Java one) keeps at most 5 Produce requests in flight
per broker; without idempotence librdkafka keeps up to a million. So once every acknowledgement
takes a round trip of L, an idempotent producer sends at most 5 requests per L, whatever the
broker does with them. This bench measures that ceiling with no broker of ours at all:
confluent-kafka against librdkafka's own in-process mock cluster, whose round trip is set with
`test.mock.broker.rtt`, producing what bench/broker_bench.py produces (1 KiB values, its
producer settings, round-robin over --partitions) with idempotence on and off.

A broker that acknowledges only what is durable in object storage and the metadata store has an
ack latency of an upload plus a commit: compare broker_bench.py's --idempotence figures with the
row of this bench whose round trip matches the broker's mean Produce time.

Usage: python bench/client_window.py [--mib 512] [--rtts 0,2,5,10,20] [--partitions 4]
Prints progress to stderr and one JSON line to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from confluent_kafka import Producer

VALUE_BYTES = 1024
VALUE_POOL = 256


def produce(mib: int, partitions: int, rtt_ms: int, idempotent: bool) -> float:
    """MB/s of ``mib`` MiB produced with acks=all to a mock broker with round trip ``rtt_ms``."""
    producer = Producer(
        {
            "test.mock.num.brokers": 1,
            "test.mock.broker.rtt": rtt_ms,
            "acks": "-1",
            "linger.ms": 10,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.kbytes": 262_144,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": idempotent,
            "socket.send.buffer.bytes": 4 * 1024 * 1024,
        }
    )
    # The mock cluster creates the topic on first use with its default partition count.
    producer.list_topics("window", timeout=10)
    values = [os.urandom(VALUE_BYTES) for _ in range(VALUE_POOL)]
    records = mib * 1024 * 1024 // VALUE_BYTES
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce("window", values[i % VALUE_POOL], partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.001)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return records * VALUE_BYTES / (time.perf_counter() - start) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512, help="MiB produced per run")
    ap.add_argument("--rtts", default="0,2,5,10,20", help="mock broker round trips, ms")
    ap.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="partitions written round-robin (the mock cluster's default topic has 4)",
    )
    args = ap.parse_args()
    rows = []
    for rtt in (int(r) for r in args.rtts.split(",")):
        on = produce(args.mib, args.partitions, rtt, idempotent=True)
        off = produce(args.mib, args.partitions, rtt, idempotent=False)
        row = {"rtt_ms": rtt, "idempotent_mb_s": round(on, 1), "plain_mb_s": round(off, 1)}
        row["idempotent_cost_pct"] = round(100 * (1 - on / off), 1)
        print(f"[client_window] rtt {rtt} ms: {row}", file=sys.stderr)
        rows.append(row)
    print(json.dumps({"mib": args.mib, "partitions": args.partitions, "runs": rows}))


if __name__ == "__main__":
    main()
