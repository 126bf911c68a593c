"""spark/topic_to_iceberg.py (kafscale.spark.iceberg) against what a Kafka consumer reads through
the broker: one Iceberg table per topic, read back with pyiceberg, polars and DuckDB.

The reference topic of ``analytics`` (every client and codec, headers, null keys; one broker
with local segments, then three brokers with etcd and moto S3) goes into a table, grows, and the
second run adds only what is new; a run with nothing new commits nothing. Exactly once: files
written by a run that "crashes" before its commit are never seen, and the next run neither loses
nor repeats a row; of two runs at once, one commits and the other fails. The table is
partitioned by day(timestamp), every data file of one day. JSON values decode into typed
columns. Several topics get a table each. The streaming variant commits one snapshot per
micro-batch and skips a micro-batch Spark replays.

One SparkSession (local[2]) for the module; the catalog is the job's embedded default (SQLite
and a local warehouse under tmp_path).
"""

from __future__ import annotations

import datetime as dt
import json
import runpy
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform
from support import analytics_env
from support.analytics_env import AnalyticsData, Row, arrow_rows, consume_rows, row_order
from support.clients import (
    Msg,
    aiokafka_produce,
    confluent_produce,
    kafka_python_produce,
    kcat_produce,
)
from support.spark_session import local_spark

from kafscale.spark import iceberg as ice
from kafscale.spark import latest_offsets

analytics = analytics_env.analytics

JOB = Path(__file__).resolve().parents[2] / "spark" / "topic_to_iceberg.py"
SCRIPT = runpy.run_path(str(JOB))  # its functions; main(argv) runs it as from a shell
DAY = dt.timedelta(days=1)
ARROW_SCHEMA = pa.schema([pa.field("key", pa.binary())])


@pytest.fixture(scope="module")
def spark():
    with local_spark("kafscale-iceberg-tests") as session:
        yield session


def source_args(data: AnalyticsData) -> list[str]:
    options = dict(data.options)
    if data.etcd_endpoints:
        options["etcd.endpoints"] = data.etcd_endpoints
    return [data.location, "--subscribe", data.topic] + [
        f"--option={key}={value}" for key, value in options.items()
    ]


def run_job(data: AnalyticsData, warehouse: Path, *extra: str) -> None:
    """spark/topic_to_iceberg.py as a person runs it (in this process: the session is shared)."""
    SCRIPT["main"]([*source_args(data), "--warehouse", str(warehouse), *extra])


def job_of(data: AnalyticsData, warehouse: Path, *extra: str) -> ice.Job:
    """The Job the command line makes of these arguments."""
    args = SCRIPT["parse_args"]([*source_args(data), "--warehouse", str(warehouse), *extra])
    return SCRIPT["job_from_args"](args)


def table_of(warehouse: Path, topic: str) -> Table:
    return ice.open_catalog(str(warehouse)).load_table(("kafscale", ice.table_name(topic)))


def table_rows(table: Table) -> list[Row]:
    return sorted(arrow_rows(table.scan().to_arrow()), key=row_order)


def polars_rows(table: Table) -> list[Row]:
    return sorted(arrow_rows(pl.scan_iceberg(table).collect().to_arrow()), key=row_order)


def duckdb_rows(table: Table) -> list[Row]:
    con = table.scan().to_duckdb(table_name="records")
    return sorted(arrow_rows(con.sql("SELECT * FROM records").to_arrow_table()), key=row_order)


def snapshots(table: Table) -> list:
    table.refresh()
    return sorted(table.snapshots(), key=lambda s: s.sequence_number)


def summary_offsets(table: Table) -> dict[int, int]:
    return {int(p): o for p, o in json.loads(table.current_snapshot().summary[ice.OFFSETS]).items()}


def produce(data: AnalyticsData, msgs: list[Msg], produce_with=confluent_produce) -> list[Row]:
    """Write ``msgs`` to ``data.topic``; returns their rows as a consumer reads them (added to
    ``expected``), once they are in segments."""
    starts = data.end_offsets()
    produce_with(data.bootstrap, data.topic, msgs)
    ends = dict(starts)
    for m in msgs:
        ends[m.partition] += 1
    rows = consume_rows(data.bootstrap, data.topic, starts, ends)
    data.expected = sorted([*data.expected, *rows], key=row_order)
    data.segments_settled()
    return rows


# --- batch ----------------------------------------------------------------------------------------


def test_runs_are_incremental_and_the_table_is_what_a_consumer_reads(spark, analytics, tmp_path):
    warehouse = tmp_path / "warehouse"
    run_job(analytics, warehouse, "--include-headers")
    table = table_of(warehouse, analytics.topic)
    before = list(analytics.expected)
    assert table_rows(table) == before
    assert summary_offsets(table) == analytics.end_offsets()

    # more records, by two other clients: the next run adds just them
    more = [Msg(i % 3, None if i % 4 == 0 else b"k%d" % i, b"more-%d" % i) for i in range(18)]
    added = produce(analytics, more, aiokafka_produce)
    added += produce(analytics, [Msg(i % 3, b"kc", b"kcat-%d" % i) for i in range(9)], kcat_produce)
    run_job(analytics, warehouse, "--include-headers")
    first, second = snapshots(table)
    assert second.summary["added-records"] == str(len(added))
    at_first = table.scan(snapshot_id=first.snapshot_id).to_arrow()
    assert sorted(arrow_rows(at_first), key=row_order) == before
    assert table_rows(table) == analytics.expected  # nothing lost, nothing twice
    assert polars_rows(table) == analytics.expected
    assert duckdb_rows(table) == analytics.expected
    assert summary_offsets(table) == analytics.end_offsets()

    run_job(analytics, warehouse, "--include-headers")  # nothing new: no snapshot
    assert len(snapshots(table)) == 2


def test_a_crash_between_files_and_commit_loses_and_repeats_nothing(spark, analytics, tmp_path):
    data = analytics.fresh(30)
    warehouse = tmp_path / "warehouse"
    run_job(data, warehouse)
    data.produce_more(21)

    # a run that writes its data files and dies before committing them
    job = job_of(data, warehouse)
    ending = {int(p): o for p, o in latest_offsets(job.options)[data.topic].items()}
    staged = ice.stage_topic(spark, job, data.topic, ending)
    assert staged is not None and staged.files
    leftover = Path(staged.directory.removeprefix("file://"))
    assert leftover.is_dir()
    table = table_of(warehouse, data.topic)
    assert len(snapshots(table)) == 1 and table.scan().to_arrow().num_rows == 30

    data.produce_more(6)
    run_job(data, warehouse, "--orphan-minutes", "0")
    assert [s.summary["added-records"] for s in snapshots(table)] == ["30", "27"]
    assert table_rows(table) == [r._replace(headers=[]) for r in data.expected]
    assert not leftover.exists()  # no snapshot had it: removed
    assert summary_offsets(table) == data.end_offsets()

    run_job(data, warehouse)
    assert len(snapshots(table)) == 2


def test_of_two_runs_at_once_only_one_commits(spark, analytics, tmp_path):
    data = analytics.fresh(12)
    warehouse = tmp_path / "warehouse"
    run_job(data, warehouse)
    data.produce_more(9)
    job = job_of(data, warehouse)
    ending = {int(p): o for p, o in latest_offsets(job.options)[data.topic].items()}
    first = ice.stage_topic(spark, job, data.topic, ending)
    second = ice.stage_topic(spark, job, data.topic, ending)  # read the same records
    assert first is not None and second is not None
    assert first.table.properties["commit.retry.num-retries"] == "0"  # no silent rebase
    ice.commit(first)
    with pytest.raises(ice.IcebergJobError, match=r"got other records .* Nothing was committed"):
        ice.commit(second)
    table = table_of(warehouse, data.topic)
    assert [s.summary["added-records"] for s in snapshots(table)] == ["12", "9"]
    assert table_rows(table) == [r._replace(headers=[]) for r in data.expected]


def test_the_table_is_partitioned_by_day_and_each_file_holds_its_day(spark, analytics, tmp_path):
    data = analytics.fresh(0)
    now_ms = int(time.time() * 1000)
    msgs = [Msg(i % 3, b"d", b"day-%d" % i, (), now_ms - (i % 3) * 86_400_000) for i in range(24)]
    produce(data, msgs)
    warehouse = tmp_path / "warehouse"
    run_job(data, warehouse)
    table = table_of(warehouse, data.topic)

    (field,) = table.spec().fields
    assert isinstance(field.transform, DayTransform)
    assert table.schema().find_field(field.source_id).name == "timestamp"
    files = table.inspect.files().to_pylist()
    days = set()
    for f in files:
        day = f["partition"]["timestamp_day"]
        stamps = pq.read_table(f["file_path"].removeprefix("file://")).column("timestamp")
        assert {t.date() for t in stamps.to_pylist()} == {day}, f["file_path"]
        days.add(day)
    today = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).date()
    assert days == {today, today - DAY, today - 2 * DAY}
    assert table_rows(table) == [r._replace(headers=[]) for r in data.expected]


def test_json_values_become_typed_columns(spark, analytics, tmp_path):
    data = analytics.fresh(0)
    docs = [
        {"id": i, "name": f"item {i}", "price": i * 1.5, "tags": ["a", str(i)], "extra": True}
        for i in range(15)
    ]
    values = [json.dumps(d).encode() for d in docs] + [b"not json", b"", b'{"id": "x"}']
    produce(data, [Msg(i % 3, None, v) for i, v in enumerate(values)])
    warehouse = tmp_path / "warehouse"
    schema = "id BIGINT, name STRING, price DOUBLE, tags ARRAY<STRING>"
    run_job(data, warehouse, "--value-schema", schema, "--value-prefix", "v_")
    table = table_of(warehouse, data.topic)

    assert [f.name for f in table.schema().fields][-4:] == ["v_id", "v_name", "v_price", "v_tags"]
    got = {r["value"]: r for r in table.scan().to_arrow().to_pylist()}
    assert len(got) == len(values)
    for doc, value in zip(docs, values, strict=False):
        row = got[value]
        assert (row["v_id"], row["v_name"], row["v_price"], row["v_tags"]) == (
            doc["id"],
            doc["name"],
            doc["price"],
            doc["tags"],
        )
    for bad in (b"not json", b"", b'{"id": "x"}'):  # not valid JSON for the schema: nulls
        assert got[bad]["v_id"] is None and got[bad]["v_name"] is None


def test_several_topics_one_table_each_and_errors_say_what_to_do(spark, analytics, tmp_path):
    first = analytics.fresh(12)
    dotted = analytics.fresh(0)
    dotted.topic = dotted.env.new_topic(f"iceberg.dotted-{time.monotonic_ns()}", 3)
    produce(dotted, [Msg(i % 3, b"d", b"dotted-%d" % i) for i in range(9)], kafka_python_produce)
    warehouse = tmp_path / "warehouse"
    argv = source_args(first)
    argv[2] = f"{first.topic},{dotted.topic}"
    SCRIPT["main"]([*argv, "--warehouse", str(warehouse)])
    for data in (first, dotted):
        table = table_of(warehouse, data.topic)
        assert table_rows(table) == [r._replace(headers=[]) for r in data.expected]
    assert table_of(warehouse, dotted.topic).name() == ("kafscale", dotted.topic.replace(".", "_"))

    # a table this job did not write: it cannot know what is in it, and says so
    foreign = analytics.fresh(3)
    catalog = ice.open_catalog(str(warehouse))
    table = catalog.create_table(("kafscale", ice.table_name(foreign.topic)), schema=ARROW_SCHEMA)
    table.append(pa.Table.from_pylist([{"key": b"x"}], schema=ARROW_SCHEMA))
    with pytest.raises(SystemExit, match="has snapshots but none committed by this job"):
        run_job(foreign, warehouse)
    with pytest.raises(SystemExit, match="not a Spark DDL schema"):
        run_job(first, warehouse, "--value-schema", "id BIGINTEGER")


# --- streaming ------------------------------------------------------------------------------------


def test_stream_commits_one_snapshot_per_micro_batch_and_skips_a_replay(spark, analytics, tmp_path):
    data = analytics.fresh(30)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
    stream = ["--streaming", "--checkpoint", str(checkpoint), "--trigger-seconds", "0"]
    stream += ["--until-caught-up", "--max-offsets-per-trigger", "20", "--include-headers"]
    run_job(data, warehouse, *stream)
    table = table_of(warehouse, data.topic)
    first = snapshots(table)
    assert [s.summary[ice.BATCH_ID] for s in first] == ["0", "1"]
    assert [s.summary["added-records"] for s in first] == ["20", "10"]
    query_id = first[-1].summary[ice.QUERY_ID]
    assert query_id and first[0].summary[ice.QUERY_ID] == query_id
    assert table_rows(table) == data.expected

    # a crash after the Iceberg commit of batch 1 but before Spark recorded it: Spark runs
    # batch 1 again on restart, and the job must skip it
    for name in ("1", ".1.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    data.produce_more(5)
    run_job(data, warehouse, *stream)
    after = snapshots(table)
    assert [s.summary[ice.BATCH_ID] for s in after] == ["0", "1", "2"]
    assert after[-1].summary["added-records"] == "5"
    assert table_rows(table) == data.expected

    # and the same batch handed over directly
    job = job_of(data, warehouse, "--include-headers")
    frame = spark.read.format("kafscale").options(**job.options).load()
    ice.commit_batch(job, frame, 2, query_id)
    assert len(snapshots(table)) == 3
    assert table_rows(table) == data.expected

    # a new query (new checkpoint) handing over everything again adds none of it
    ice.commit_batch(job, frame, 0, "a-new-query")
    assert snapshots(table)[-1].summary["added-records"] in (None, "0")
    assert table_rows(table) == data.expected
    assert summary_offsets(table) == data.end_offsets()
