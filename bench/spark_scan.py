"""Spark scan benchmark: reading a topic's segments with Spark vs consuming it through a broker.

Starts one broker (``python -m kafscale.broker``, local-dir store) on a temporary data dir,
produces --gib of 1 KiB random values into an 8-partition topic with confluent-kafka (the
produce workers of broker_bench.py), then reads the whole topic in two ways:

  consume   confluent-kafka consumers (--consumers processes, assign(), from offset 0) through
            the broker: broker_bench.py's fetch workers
  spark     the ``kafscale`` PySpark data source on ``local[N]`` (--spark-cores, default 2)
            reading the segment objects directly, counting the rows and summing the value
            lengths (every row is decoded); the SparkSession is started before timing
  spark_kafka  the same job through Spark's own Kafka source (``spark-sql-kafka-0-10`` at the
            installed pyspark's version, from Maven Central), which fetches through the broker:
            what an existing Spark job gets unchanged

A third figure, ``ceiling``, is what Spark itself can take in from any Python data source on
this machine: a source whose executors decode one Arrow batch of each partition (same schema,
same rows) once and yield it over and over until they have handed over as many rows as the
partition holds. Its rate bounds what the ``kafscale`` source can reach through the Python
Data Source API; ``of_ceiling`` is spark MB/s over ceiling MB/s.

Each side reads the topic --passes times (default 2): the consumers in one go (their figure is
over all passes), Spark as separate jobs of which the fastest counts (the first one also starts
Spark's Python workers). Both figures count value bytes; ``ratio`` is spark MB/s over consume
MB/s, ``kafka_source_ratio`` spark MB/s over spark_kafka MB/s; each Spark side also reports the
broker's CPU-s per GiB it read (none for the segment source, which does not ask the broker).
The broker was just written to, so its cache holds the newest data, and the segment files
are in the page cache: both sides read from memory. Progress goes to stderr, ONE JSON line to
stdout; it measures and does not judge.

Usage: python bench/spark_scan.py [--gib 1] [--spark-cores 2] [--consumers 2] [--passes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import broker_bench as bb
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAMESPACE = "default"  # the broker's default --s3-namespace: segments live in <data_dir>/default


def broker_options(args: argparse.Namespace) -> bb.BrokerOptions:
    return bb.BrokerOptions(
        python=args.python,
        store="local",
        flush_interval_ms=args.flush_interval_ms,
        cache_bytes=args.cache_bytes,
        segment_bytes=args.segment_bytes,
        readahead_segments=None,
        log_level=args.broker_log_level,
        extra_args=[],
    )


def start_spark(cores: int):
    import pyspark
    from pyspark.sql import SparkSession

    # Spark's Python workers must run the interpreter that has kafscale installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("kafscale-spark-scan-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", os.environ.get("KAFSCALE_BENCH_SPARK_MEMORY", "4g"))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config(
            "spark.jars.packages",
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}",
        )
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    from kafscale.spark import KafScaleDataSource

    spark.dataSource.register(KafScaleDataSource)
    spark.dataSource.register(CeilingSource)
    return spark


class CeilingReader(DataSourceReader):
    """Yields one decoded batch of each partition again and again (no decoding after the
    first): what is left of a scan's cost is Spark's own intake of Arrow batches."""

    def __init__(self, options: dict[str, str]) -> None:
        self.location = options["path"]
        self.topic = options["topic"]
        self.rows = {int(p): n for p, n in json.loads(options["rows"]).items()}

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in sorted(self.rows)]

    def read(self, partition: InputPartition):
        from pyspark.sql.pandas.types import to_arrow_schema

        from kafscale.segment import SegmentSource
        from kafscale.spark import spark_schema

        source = SegmentSource.open(self.location)
        first = next(source.read(self.topic, partition.value, 0, self.rows[partition.value]))
        batch = first.cast(to_arrow_schema(spark_schema()))
        left = self.rows[partition.value]
        while left > 0:
            piece = batch.slice(0, min(left, batch.num_rows))
            left -= piece.num_rows
            yield piece


class CeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafscale_bench_ceiling"

    def schema(self):
        from kafscale.spark import spark_schema

        return spark_schema()

    def reader(self, schema) -> DataSourceReader:
        return CeilingReader(dict(self.options))


def spark_pass(spark, reader) -> dict[str, Any]:
    """One full scan: count and total value length, timed from the action to its result."""
    from pyspark.sql import functions as F

    frame = reader().agg(F.count("*").alias("rows"), F.sum(F.length("value")).alias("bytes"))
    t0 = time.perf_counter()
    row = frame.collect()[0]
    seconds = time.perf_counter() - t0
    return {"records": row["rows"], "bytes": row["bytes"], "seconds": seconds}


def spark_figures(passes: list[dict[str, Any]], want_records: int) -> dict[str, Any]:
    best = min(passes, key=lambda p: p["seconds"])
    out = {
        "records": best["records"],
        "bytes": best["bytes"],
        "seconds": round(best["seconds"], 3),
        "seconds_all": [round(p["seconds"], 3) for p in passes],
        "mb_s": round(best["bytes"] / bb.MB / best["seconds"], 1),
        "records_s": round(best["records"] / best["seconds"]),
    }
    wrong = [p["records"] for p in passes if p["records"] != want_records]
    if wrong:
        out["errors"] = [f"spark counted {n} rows, the topic holds {want_records}" for n in wrong]
    return out


def run(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    broker = bb.start_broker(broker_options(args), root / "broker")
    try:
        bb.create_topic(broker.addr, bb.TOPIC, args.partitions)
        out["produce"] = bb.run_produce(broker, args, "1", "produce")
        marks = bb.watermarks(broker.addr, bb.TOPIC, args.partitions)
        ranges = {p: (0, hi) for p, (_, hi) in marks.items()}
        records = sum(hi for _, hi in ranges.values())
        out["topic_records"] = records
        out["consume"] = bb.run_fetch(broker, args, ranges, args.passes, "consume")
        spark = start_spark(args.spark_cores)
        try:
            location = str(broker.data_dir / NAMESPACE)
            readers = {
                "spark": lambda: spark.read.format("kafscale")
                .option("subscribe", bb.TOPIC)
                .load(location),
                "spark_kafka": lambda: spark.read.format("kafka")
                .option("kafka.bootstrap.servers", broker.addr)
                .option("subscribe", bb.TOPIC)
                .load(),
                "ceiling": lambda: spark.read.format("kafscale_bench_ceiling")
                .option("topic", bb.TOPIC)
                .option("rows", json.dumps({p: hi for p, (_, hi) in ranges.items()}))
                .load(location),
            }
            for name, reader in readers.items():
                passes = []
                broker_cpu = broker.cpu_seconds()
                for i in range(args.passes):
                    passes.append(spark_pass(spark, reader))
                    bb.log(f"{name} pass {i + 1}: {passes[-1]['seconds']:.2f} s")
                out[name] = spark_figures(passes, records)
                read_gib = sum(p["bytes"] or 0 for p in passes) / bb.GIB
                out[name]["broker_cpu_s_per_gib"] = round(
                    (broker.cpu_seconds() - broker_cpu) / read_gib, 3
                )
        finally:
            spark.stop()
        out["ratio"] = round(out["spark"]["mb_s"] / out["consume"]["mb_s"], 2)
        out["of_ceiling"] = round(out["spark"]["mb_s"] / out["ceiling"]["mb_s"], 2)
        out["kafka_source_ratio"] = round(out["spark"]["mb_s"] / out["spark_kafka"]["mb_s"], 2)
        bb.log(
            f"consume {out['consume']['mb_s']} MB/s, spark {out['spark']['mb_s']} MB/s, "
            f"ratio {out['ratio']}; Spark's Kafka source {out['spark_kafka']['mb_s']} MB/s; "
            f"Python data source ceiling {out['ceiling']['mb_s']} MB/s"
        )
    finally:
        out["broker_exit_code"] = broker.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="GiB of values in the topic")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=1, help="produce driver processes")
    ap.add_argument("--consumers", type=int, default=2, help="consume driver processes")
    ap.add_argument("--spark-cores", type=int, default=2, help="N of local[N]")
    ap.add_argument("--passes", type=int, default=2, help="reads per side (see the docstring)")
    ap.add_argument("--linger-ms", type=int, default=10)
    # What broker_bench's produce workers also read: its defaults.
    ap.add_argument("--compression", default="none", help="compression.type of the producers")
    ap.add_argument("--idempotence", action="store_true", help="idempotent producers")
    ap.add_argument("--flush-interval-ms", type=int, default=250)
    ap.add_argument("--cache-bytes", type=int, default=256 * bb.MIB)
    ap.add_argument("--segment-bytes", type=int, default=None)
    ap.add_argument("--stall-seconds", type=float, default=30.0)
    ap.add_argument("--python", default=sys.executable, help="interpreter running the broker")
    ap.add_argument("--broker-log-level", default="info")
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
        "passes": args.passes,
        "driver": bb.driver_version(),
        "cpus": os.cpu_count(),
        "errors": [],
    }
    return bb.run_in_scratch(out, args.keep_data, lambda root: run(args, root, out))


if __name__ == "__main__":
    sys.exit(main())
