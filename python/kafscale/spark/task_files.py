"""Parquet data files written by Spark's tasks themselves, without Spark's row format: each task
(one per input partition the ``kafscale`` source plans, run through Spark's RDD API) reads its
offset range with the Rust reader into Arrow and writes it with pyarrow, one file per UTC day,
and hands back only the files' paths and row counts. Spark schedules and retries the tasks; the
driver commits the files (``kafscale.spark.iceberg``).

A task that Spark runs twice (a retry, a speculative copy) writes files under new names: only
the paths the driver collects are committed, the others are left for the orphan clean-up, as
files of a run that died are."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from kafscale.spark.options import ReadOptions
from kafscale.spark.planning import SegmentRange, open_source

if TYPE_CHECKING:
    from kafscale.segment import SegmentSource

DAY_COLUMN = "kafscale_day"  # the directory of a day's files: days since the epoch (UTC)
MICROS_PER_DAY = 86_400_000_000


@dataclass(frozen=True)
class RangeWriter:
    """What each task runs: every range it is given written as Parquet files of ``schema`` (the
    table's, with its field ids) under ``directory``; yields (path, rows) per file."""

    options: ReadOptions
    directory: str
    schema: pa.Schema

    def __call__(self, ranges: Iterable[SegmentRange]) -> Iterator[tuple[str, int]]:
        source = open_source(self.options)
        fs, root = pafs.FileSystem.from_uri(self.directory)
        for rng in ranges:
            for rel, rows in self.write(source, fs, root, rng):
                yield f"{self.directory}/{rel}", rows

    def write(
        self, source: SegmentSource, fs: pafs.FileSystem, root: str, rng: SegmentRange
    ) -> list[tuple[str, int]]:
        """One range as one file per UTC day: [(path below the directory, rows)]."""
        writers: dict[int, tuple[str, pq.ParquetWriter]] = {}
        counts: dict[int, int] = {}
        try:
            for batch in source.read(
                rng.topic,
                rng.partition,
                rng.start_offset,
                rng.end_offset,
                include_headers=self.options.include_headers,
            ):
                table = pa.Table.from_batches([batch]).select(self.schema.names)
                table = table.cast(self.schema)
                micros = pc.cast(table["timestamp"], pa.int64())
                days = pc.floor(pc.divide(pc.cast(micros, pa.float64()), MICROS_PER_DAY))
                days = pc.cast(days, pa.int32())
                present = pc.unique(days).to_pylist()
                for day in present:
                    # one day (the usual case): the batch as it is, no copy
                    part = table if len(present) == 1 else table.filter(pc.equal(days, day))
                    if day not in writers:
                        rel = f"{DAY_COLUMN}={day}/part-{rng.partition}-{uuid.uuid4()}.parquet"
                        fs.create_dir(f"{root}/{DAY_COLUMN}={day}")  # local disks need it
                        sink = fs.open_output_stream(f"{root}/{rel}")
                        # values are mostly distinct: a dictionary for them is built in vain
                        writer = pq.ParquetWriter(
                            sink, self.schema, use_dictionary=["key", "topic"]
                        )
                        writers[day] = (rel, writer)
                        counts[day] = 0
                    writers[day][1].write_table(part)
                    counts[day] += part.num_rows
        finally:
            for _, writer in writers.values():
                writer.close()
        return [(rel, counts[day]) for day, (rel, _) in sorted(writers.items())]


def write_ranges(
    spark: SparkSession,
    options: ReadOptions,
    ranges: list[SegmentRange],
    directory: str,
    schema: pa.Schema,
) -> list[str]:
    """Writes ``ranges`` (a task each) as Parquet files under ``directory``; their paths."""
    tasks = spark.sparkContext.parallelize(ranges, max(1, len(ranges)))
    written = tasks.mapPartitions(RangeWriter(options, directory, schema)).collect()
    return sorted(path for path, rows in written if rows)
