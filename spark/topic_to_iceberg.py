"""Copy KafScale topics into Iceberg tables (one per topic), incrementally and exactly once, read
straight from the segment objects (no broker involved).

    python spark/topic_to_iceberg.py ./kafscale-data/default --subscribe orders,payments
    python spark/topic_to_iceberg.py s3://bucket/default --subscribe orders \\
        --option endpoint=http://127.0.0.1:9000 --value-schema "id BIGINT, amount DOUBLE"
    spark-submit spark/topic_to_iceberg.py ./kafscale-data/default --subscribe orders \\
        --catalog-uri https://catalog.example.com --catalog-option credential=ID:SECRET \\
        --catalog-option warehouse=analytics

Each topic has the table <namespace>.<topic> (--namespace, default kafscale; '.' in a topic name
becomes '_'), partitioned by day(timestamp), with the Kafka source's columns (key, value, topic,
partition, offset, timestamp, timestampType, and headers with --include-headers) and, with
--value-schema, the JSON values' fields. Default catalog: SQLite + files in --warehouse
(./iceberg-warehouse).

A run reads every partition from the offsets the table's last commit reached (earliest for a
partition it has not seen) up to where the partition ends when the run starts. Spark writes the
Parquet files; then one Iceberg commit adds them and stores the offsets reached in the snapshot
summary (kafscale.offsets). A run that fails before that commit leaves files no snapshot refers
to (removed by a later run, --orphan-minutes): the next run reads the same records again, so
nothing is lost or written twice. A run with nothing new commits nothing.

--streaming --checkpoint DIR runs a Structured Streaming query instead: one commit per table per
micro-batch, with the micro-batch id in the summary, so a micro-batch Spark replays after a crash
is not appended twice.
"""

from __future__ import annotations

import argparse

from kafscale.spark.iceberg import IcebergJobError, Job, open_catalog, run_batch, run_stream
from kafscale.spark.jobs import add_source_arguments, kafscale_session, source_options


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_source_arguments(
        ap,
        "endpoint=, region=, accessKeyId=, secretAccessKey=, etcd.endpoints=, minPartitions=",
    )
    ap.add_argument("--include-headers", action="store_true", help="add the headers column")
    ap.add_argument(
        "--value-schema",
        metavar="DDL",
        help="decode JSON values into typed columns, Spark DDL such as 'id BIGINT, name "
        "STRING' (the raw value column stays); a value that is not valid JSON, or lacks a "
        "field, gets nulls in those columns (Spark's from_json)",
    )
    ap.add_argument("--value-prefix", default="", help="prefix of the decoded columns' names")
    ap.add_argument(
        "--warehouse",
        help="embedded catalog: local directory of the tables and of catalog.db (SQLite), "
        "default ./iceberg-warehouse; with --catalog-uri: the catalog's warehouse property",
    )
    ap.add_argument(
        "--catalog-uri",
        help="a catalog service instead of the embedded one: https://... (REST), "
        "sqlite:///... or postgresql+psycopg2://... (SQL)",
    )
    ap.add_argument(
        "--catalog-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pyiceberg catalog property, repeatable: credential=, token=, warehouse=, "
        "s3.endpoint=, ...",
    )
    ap.add_argument("--catalog-name", default="kafscale", help="pyiceberg catalog name")
    ap.add_argument(
        "--namespace",
        default="kafscale",
        help="Iceberg namespace of the tables (default kafscale); table name = topic name "
        "with '.' as '_'",
    )
    ap.add_argument(
        "--orphan-minutes",
        type=float,
        default=60.0,
        help="remove uncommitted kafscale-* data directories of failed runs once this old "
        "(default 60)",
    )
    ap.add_argument("--streaming", action="store_true", help="run as a stream (see --checkpoint)")
    ap.add_argument("--checkpoint", help="Spark checkpoint directory (--streaming)")
    ap.add_argument(
        "--trigger-seconds", type=float, default=10.0, help="micro-batch interval (default 10)"
    )
    ap.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch")
    ap.add_argument(
        "--until-caught-up", action="store_true", help="--streaming: stop once all is committed"
    )
    return ap


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = parser()
    args = ap.parse_args(argv)
    if args.streaming and not args.checkpoint:
        ap.error("--streaming needs --checkpoint DIR (Spark keeps the stream's progress there)")
    return args


def job_from_args(args: argparse.Namespace) -> Job:
    """Opens the catalog: before Spark starts, so that its errors come first."""
    options = source_options(args)
    if args.include_headers:
        options["includeHeaders"] = "true"
    catalog = open_catalog(args.warehouse, args.catalog_uri, args.catalog_option, args.catalog_name)
    return Job(
        catalog=catalog,
        namespace=args.namespace,
        options=options,
        value_schema=args.value_schema,
        value_prefix=args.value_prefix,
        orphan_seconds=args.orphan_minutes * 60,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        job = job_from_args(args)
        spark = kafscale_session("kafscale-topic-to-iceberg")
        if args.streaming:
            run_stream(
                spark,
                job,
                args.checkpoint,
                args.trigger_seconds,
                args.until_caught_up,
                args.max_offsets_per_trigger,
            )
        else:
            run_batch(spark, job)
    except IcebergJobError as exc:
        raise SystemExit(f"topic_to_iceberg: {exc}") from exc


if __name__ == "__main__":
    main()
