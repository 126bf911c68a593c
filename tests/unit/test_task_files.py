"""What a task of the Iceberg job writes (kafscale.spark.task_files): its range as one Parquet
file per UTC day, in the table's schema with its field ids, every row once."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from kafscale.segment import kafka_schema
from kafscale.spark.options import ReadOptions
from kafscale.spark.planning import SegmentRange
from kafscale.spark.schema import arrow_schema
from kafscale.spark.task_files import RangeWriter

DAY_MS = 86_400_000
MIDNIGHT_MS = int(dt.datetime(2026, 11, 29, tzinfo=dt.UTC).timestamp() * 1000)


@dataclass
class FakeSource:
    """Two Kafka-schema batches of offsets 0-5: the first three just before midnight UTC."""

    def read(self, topic: str, partition: int, start: int, end: int, **_: object):
        stamps = [MIDNIGHT_MS - 2, MIDNIGHT_MS - 1, MIDNIGHT_MS - 1, MIDNIGHT_MS, MIDNIGHT_MS + 5]
        rows = [
            {
                "key": b"k",
                "value": b"v%d" % o,
                "topic": topic,
                "partition": partition,
                "offset": o,
                "timestamp": dt.datetime.fromtimestamp(stamps[o] / 1000, dt.UTC),
                "timestampType": 0,
            }
            for o in range(start, end)
        ]
        schema = kafka_schema()
        yield pa.RecordBatch.from_pylist(rows[:2], schema=schema)
        yield pa.RecordBatch.from_pylist(rows[2:], schema=schema)


def with_ids(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [f.with_metadata({b"PARQUET:field_id": str(i + 1).encode()}) for i, f in enumerate(schema)]
    )


def test_a_range_is_written_as_one_file_per_utc_day_in_the_tables_schema(tmp_path):
    options = ReadOptions.parse({"path": str(tmp_path), "subscribe": "t"}, streaming=False)
    schema = with_ids(arrow_schema())
    writer = RangeWriter(options, tmp_path.as_uri(), schema)
    written = writer.write(
        FakeSource(), pafs.LocalFileSystem(), str(tmp_path), SegmentRange("t", 3, 0, 5)
    )
    day = MIDNIGHT_MS // DAY_MS
    assert [(path.split("/")[0], rows) for path, rows in written] == [
        (f"kafscale_day={day - 1}", 3),
        (f"kafscale_day={day}", 2),
    ]
    offsets = []
    for path, _ in written:
        table = pq.read_table(tmp_path / path)
        assert table.schema.field("offset").metadata == {b"PARQUET:field_id": b"5"}
        assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
        days = {t.timestamp() * 1000 // DAY_MS for t in table["timestamp"].to_pylist()}
        assert len(days) == 1, "every file holds one day"
        offsets += table["offset"].to_pylist()
    assert sorted(offsets) == [0, 1, 2, 3, 4]
