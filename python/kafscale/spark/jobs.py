"""What the pipeline jobs in ``spark/`` share: a SparkSession ready for the ``kafscale`` source
(for jobs started with plain ``python``), and the command-line arguments that name the topics
to read and turn into source options."""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession

from kafscale.spark.datasource import KafScaleDataSource


def kafscale_session(app_name: str) -> SparkSession:
    """The active (or a new) session with the source registered. Spark's Python workers must
    run an interpreter that has kafscale installed: unless PYSPARK_PYTHON says otherwise, that
    is this one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.dataSource.register(KafScaleDataSource)
    return spark


def add_source_arguments(parser: argparse.ArgumentParser, option_examples: str) -> None:
    """location, --subscribe / --subscribe-pattern and repeatable --option KEY=VALUE."""
    parser.add_argument("location", help="s3://bucket/namespace or <data_dir>/<namespace>")
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--subscribe", help="comma-separated topic names")
    topics.add_argument("--subscribe-pattern", help="regular expression over topic names")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"kafscale data source option, repeatable: {option_examples}",
    )


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The source options the arguments of ``add_source_arguments`` ask for."""
    options = {"path": args.location}
    if args.subscribe:
        options["subscribe"] = args.subscribe
    else:
        options["subscribePattern"] = args.subscribe_pattern
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--option takes KEY=VALUE, got {item!r}")
        options[key] = value
    return options
