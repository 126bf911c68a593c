"""Streaming aggregation over KafScale topics: how many records each key got in each event-time
window, kept up to date as records arrive, read straight from the segment objects.

    python spark/stream_counts.py ./kafscale-data/default --subscribe orders \\
        --window "1 minute" --checkpoint /tmp/counts-checkpoint
    spark-submit spark/stream_counts.py s3://bucket/default --subscribe orders \\
        --checkpoint s3a://bucket/checkpoints/counts --output s3a://bucket/tables/counts \\
        --option endpoint=http://127.0.0.1:9000

Without --output the table is printed to the console after every micro-batch; with --output the
whole table (window_start, window_end, key, count) replaces the Parquet directory's contents
after every micro-batch. Progress lives in the checkpoint: a restart with the same --checkpoint
carries on where the last run stopped, counting every record exactly once. --until-caught-up
processes what is there now and exits (handy from cron or a test).
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafscale.spark.jobs import add_source_arguments, kafscale_session, source_options


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_source_arguments(
        parser,
        "endpoint=, region=, accessKeyId=, secretAccessKey=, etcd.endpoints=, minPartitions=",
    )
    parser.add_argument("--window", default="1 minute", help="tumbling window (default 1 minute)")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--output", help="Parquet directory for the table (default: console)")
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="where a new query starts: earliest (default), latest or the Kafka source's JSON",
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch")
    parser.add_argument(
        "--trigger-seconds", type=float, default=10.0, help="micro-batch interval (default 10)"
    )
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        default=8,
        help="partitions of the counts' state (default 8; the checkpoint's first run fixes it)",
    )
    parser.add_argument(
        "--until-caught-up", action="store_true", help="stop once everything there is counted"
    )
    return parser.parse_args(argv)


def stream_options(args: argparse.Namespace) -> dict[str, str]:
    options = source_options(args)
    options.setdefault("startingOffsets", args.starting_offsets)
    if args.max_offsets_per_trigger:
        options.setdefault("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return options


def counts_per_key_and_window(records: DataFrame, window: str) -> DataFrame:
    return (
        records.groupBy(F.window("timestamp", window).alias("window"), F.col("key").cast("string"))
        .count()
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.col("key"),
            F.col("count"),
        )
    )


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    # Spark's default of 200 state partitions makes every micro-batch of a small stream slow
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    records = spark.readStream.format("kafscale").options(**stream_options(args)).load()
    counts = counts_per_key_and_window(records, args.window)
    # complete mode: every micro-batch hands over the whole table, so each write replaces it
    writer = counts.writeStream.outputMode("complete").option("checkpointLocation", args.checkpoint)
    if args.output:
        output = args.output
        writer = writer.foreachBatch(lambda table, _: table.write.mode("overwrite").parquet(output))
    else:
        writer = writer.format("console").option("truncate", "false")
    query = writer.trigger(processingTime=f"{args.trigger_seconds:g} seconds").start()
    if args.until_caught_up:
        query.processAllAvailable()
        query.stop()
    else:
        query.awaitTermination()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run(kafscale_session("kafscale-stream-counts"), args)


if __name__ == "__main__":
    main()
