"""Copy KafScale topics into Parquet, incrementally: each run adds the records written since the
previous run, read straight from the segment objects (no broker involved).

    python spark/topic_to_parquet.py s3://bucket/default --subscribe orders --output /data/orders \\
        --option endpoint=http://127.0.0.1:9000
    spark-submit spark/topic_to_parquet.py ./kafscale-data/default --subscribe orders --output out

A run reads every partition from where the previous run stopped up to where the partition ends
when the run starts, and writes those records to ``<output>/run=<n>``. Only then does it record
the offsets it reached in a small JSON state file (``<output>/_kafscale_offsets.json`` by default;
Spark's Parquet reader skips names starting with "_"). A run that fails before that is redone by
the next one into the same ``run=<n>`` directory, which is overwritten: no record is lost or
written twice. ``spark.read.parquet(output)`` shows every run, with a ``run`` column.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pyspark.sql import SparkSession

from kafscale.spark import latest_offsets
from kafscale.spark.jobs import add_source_arguments, kafscale_session, source_options

STATE_FILE = "_kafscale_offsets.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_source_arguments(
        parser,
        "endpoint=, region=, accessKeyId=, secretAccessKey=, etcd.endpoints=, "
        "includeHeaders=true, minPartitions=",
    )
    parser.add_argument("--output", required=True, help="Parquet directory (path or URL)")
    parser.add_argument(
        "--state",
        help=f"local JSON file of the offsets reached (default: <output>/{STATE_FILE}; "
        "required when --output is a URL)",
    )
    args = parser.parse_args(argv)
    if args.state is None:
        if "://" in args.output:
            parser.error("--output is a URL: give --state, a local file for the offsets reached")
        args.state = os.path.join(args.output, STATE_FILE)
    return args


def load_state(path: str) -> tuple[int, dict[str, dict[str, int]]]:
    """(last run number, {topic: {partition: next offset}}); (0, {}) before the first run."""
    if not os.path.exists(path):
        return 0, {}
    with open(path) as f:
        state = json.load(f)
    return state["run"], state["offsets"]


def save_state(path: str, run: int, offsets: dict[str, dict[str, int]]) -> None:
    # write-then-rename: a crash leaves the old state or the new one, never half a file
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    temporary = f"{path}.tmp"
    with open(temporary, "w") as f:
        json.dump({"run": run, "offsets": offsets}, f, indent=1, sort_keys=True)
    os.replace(temporary, path)


def merged(
    old: dict[str, dict[str, int]], new: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """``old`` updated by ``new``; partitions no longer read keep their last offset."""
    out = {topic: dict(parts) for topic, parts in old.items()}
    for topic, parts in new.items():
        out.setdefault(topic, {}).update(parts)
    return out


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    options = source_options(args)
    last_run, reached = load_state(args.state)
    ending = latest_offsets(options)
    if merged(reached, ending) == reached:
        print(f"nothing new since run {last_run}")
        return
    # partitions absent from the state (new topics or partitions) start at their earliest
    starting = {topic: parts for topic, parts in reached.items() if topic in ending}
    this_run = last_run + 1
    records = (
        spark.read.format("kafscale")
        .options(**options)
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .load()
    )
    records.write.mode("overwrite").parquet(f"{args.output.rstrip('/')}/run={this_run}")
    save_state(args.state, this_run, merged(reached, ending))
    for topic, parts in sorted(ending.items()):
        for partition, end in sorted(parts.items(), key=lambda item: int(item[0])):
            start = reached.get(topic, {}).get(partition, "earliest")
            print(f"run {this_run}: {topic}/{partition} offsets {start} .. {end}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run(kafscale_session("kafscale-topic-to-parquet"), args)


if __name__ == "__main__":
    main()
