"""KafScale topics into Iceberg tables (one per topic), read with the ``kafscale`` Spark source,
incrementally and exactly once; the logic of ``spark/topic_to_iceberg.py``.

Spark's tasks write the Parquet data files (``kafscale.spark.task_files``: each reads its offset
range with the Rust reader and writes Arrow with pyarrow; with ``--value-schema`` Spark writes
them from its rows, after ``from_json``), into a fresh directory ``<table location>/data/kafscale-
<uuid>/`` (one subdirectory per day, so that every file holds one day of the table's
``day(timestamp)`` partitioning); then ONE pyiceberg commit adds those files and records in the
snapshot's summary how far each partition was read (``kafscale.offsets``, JSON
``{"partition": next offset}``). The offsets and the rows land together or not at all: a run
that stops between the two leaves files no snapshot references, and the next run reads again
from the offsets of the last commit. Such leftover directories are removed by a later run once
they are older than ``--orphan-minutes``.

The job's commits do not let pyiceberg rebase them onto a concurrent commit (the table property
``commit.retry.num-retries`` is 0): the job itself retries only when the concurrent commit did
not move the offsets (maintenance, say), and fails when another run of it got there first.

Streaming (``--streaming``): one commit per table per micro-batch, whose summary also holds the
query id and the micro-batch id (``kafscale.query-id``, ``kafscale.batch-id``); a micro-batch
Spark replays after a crash is skipped when the table already has it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.transforms import DayTransform
from pyiceberg.types import IcebergType, ListType, MapType, NestedField
from pyiceberg.types import StructType as IcebergStruct
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, StructField, StructType
from pyspark.sql.types import MapType as SparkMap

from kafscale.spark.options import ReadOptions
from kafscale.spark.planning import latest_offsets
from kafscale.spark.readers import KafScaleBatchReader
from kafscale.spark.schema import arrow_schema as source_arrow_schema
from kafscale.spark.schema import spark_schema
from kafscale.spark.task_files import write_ranges

OFFSETS = "kafscale.offsets"  # snapshot summary: {"partition": next offset} reached
QUERY_ID = "kafscale.query-id"  # streaming: the query (kept in its checkpoint)
BATCH_ID = "kafscale.batch-id"  # streaming: the micro-batch
DATA_PREFIX = "kafscale-"  # <table location>/data/kafscale-<uuid>/: one run's files
DAY = "kafscale_day"  # days since the epoch (UTC): the write's partition directories only
NO_REBASE = {"commit.retry.num-retries": "0"}
COMMIT_ATTEMPTS = 3
MICROS_PER_DAY = 86_400_000_000


class IcebergJobError(Exception):
    """What went wrong, and what to do about it."""


@dataclass(frozen=True)
class Job:
    """What a run needs besides the SparkSession."""

    catalog: Catalog
    namespace: str
    options: dict[str, str]  # kafscale source options
    value_schema: str | None = None  # Spark DDL of the JSON values
    value_prefix: str = ""
    orphan_seconds: float = 3600.0


@dataclass(frozen=True)
class Committed:
    """What the table's snapshots say this job committed last."""

    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset
    query_id: str | None = None
    batch_id: int | None = None


@dataclass
class Staged:
    """Data files written for one table but not committed yet."""

    table: Table
    topic: str
    directory: str  # <table location>/data/kafscale-<uuid>
    files: list[str]
    starting: dict[int, int]
    offsets: dict[int, int]  # what the table will have reached once committed
    committed: Committed
    properties: dict[str, str] = field(default_factory=dict)


# --- tables -------------------------------------------------------------------------------------


def label(table: Table) -> str:
    return ".".join(table.name())


def table_name(topic: str) -> str:
    """Iceberg's name of a topic's table: '.' separates namespace levels, so it becomes '_'
    (Kafka refuses two topics whose names differ only there); other characters of topic names
    (letters, digits, '-', '_') stay."""
    return topic.replace(".", "_")


def open_catalog(
    warehouse: str | None,
    uri: str | None = None,
    options: Iterable[str] = (),
    name: str = "kafscale",
) -> Catalog:
    """The embedded SQL catalog (SQLite file ``catalog.db`` inside the local ``warehouse``
    directory) unless ``uri`` names one (REST ``https://...``, ``sqlite:///``, ...); ``options``
    ("KEY=VALUE") are passed to ``pyiceberg.catalog.load_catalog``."""
    properties: dict[str, str | None] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise IcebergJobError(f"--catalog-option takes KEY=VALUE, got {item!r}")
        properties[key] = value
    if uri is not None:
        properties["uri"] = uri
        if warehouse is not None:
            properties.setdefault("warehouse", warehouse)
    else:
        root = Path(warehouse or "iceberg-warehouse").resolve()
        if "://" in (warehouse or ""):
            raise IcebergJobError(
                f"--warehouse {warehouse} is a URL: the embedded catalog needs a local "
                "directory; give --catalog-uri for a catalog service"
            )
        root.mkdir(parents=True, exist_ok=True)
        properties.setdefault("type", "sql")
        properties.setdefault("uri", f"sqlite:///{root / 'catalog.db'}")
        properties.setdefault("warehouse", root.as_uri())
    try:
        return load_catalog(name, **properties)
    except Exception as exc:
        raise IcebergJobError(
            f"cannot open the Iceberg catalog {name!r} ({properties.get('uri')}): {exc}; check "
            "--catalog-uri and --catalog-option"
        ) from exc


def load_table(job: Job, topic: str) -> Table | None:
    try:
        return job.catalog.load_table((job.namespace, table_name(topic)))
    except NoSuchTableError:
        return None


def create_table(job: Job, topic: str, schema: pa.Schema) -> Table:
    """The topic's table, partitioned by day(timestamp), made in one catalog commit."""
    job.catalog.create_namespace_if_not_exists(job.namespace)
    identifier = (job.namespace, table_name(topic))
    nullable = pa.schema([f.with_nullable(True) for f in schema])
    tx = job.catalog.create_table_transaction(identifier, nullable, properties=NO_REBASE)
    with tx.update_spec() as spec:
        spec.add_field("timestamp", DayTransform(), "timestamp_day")
    tx.commit_transaction()
    return job.catalog.load_table(identifier)


def committed(table: Table | None) -> Committed:
    """The newest snapshot among the current one and its ancestors that this job committed
    (others, e.g. compactions, are stepped over)."""
    if table is None or table.current_snapshot() is None:
        return Committed()
    current = table.current_snapshot()
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        text = summary[OFFSETS] if summary is not None else None
        if text is None:
            continue
        assert summary is not None
        batch = summary[BATCH_ID]
        return Committed(
            offsets={int(p): int(o) for p, o in json.loads(text).items()},
            query_id=summary[QUERY_ID],
            batch_id=None if batch is None else int(batch),
        )
    raise IcebergJobError(
        f"table {label(table)} has snapshots but none committed by this job (no {OFFSETS} in "
        "their summaries, or they were expired): it cannot tell which records are in it already. "
        "Write into a table of its own (--namespace), or drop this one"
    )


def data_files(table: Table) -> set[str]:
    """Every data file any snapshot of the table references."""
    files: set[str] = set()
    seen: set[str] = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                files.add(entry.data_file.file_path)
    return files


def remove_orphans(table: Table, older_than_seconds: float) -> list[str]:
    """Delete the ``kafscale-*`` data directories no snapshot references whose files are all
    older than ``older_than_seconds`` (a younger one may belong to a run still going); returns
    them. Best effort: a store it cannot list is left alone."""
    base = f"{table.location().rstrip('/')}/data"
    try:
        fs, root = pafs.FileSystem.from_uri(base)
        entries = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except Exception as exc:
        print(f"{label(table)}: left leftover files alone, cannot list {base}: {exc}")
        return []
    candidates = [e for e in entries if e.type == pafs.FileType.Directory]
    candidates = [e for e in candidates if e.base_name.startswith(DATA_PREFIX)]
    if not candidates:
        return []
    referenced = {
        path[len(base) + 1 :].split("/")[0] for path in data_files(table) if path.startswith(base)
    }
    removed = []
    now = time.time()
    for entry in candidates:
        if entry.base_name in referenced:
            continue
        files = fs.get_file_info(pafs.FileSelector(entry.path, recursive=True))
        newest = max((f.mtime.timestamp() for f in files if f.mtime is not None), default=0.0)
        if now - newest < older_than_seconds:
            continue
        fs.delete_dir(entry.path)
        removed.append(f"{base}/{entry.base_name}")
    return removed


# --- writing ------------------------------------------------------------------------------------


def spark_path(location: str) -> str:
    """A table location as Spark's Hadoop file systems name it (s3:// is s3a:// there)."""
    return "s3a://" + location[5:] if location.startswith("s3://") else location


def decoded(records: DataFrame, value_schema: str | None, prefix: str = "") -> DataFrame:
    """``records`` plus the fields of their JSON values (Spark DDL ``value_schema``) as columns
    named ``prefix + field``; a value that is not valid JSON (or null) gives nulls in all of
    them. The raw ``value`` stays."""
    if not value_schema:
        return records
    parsed = F.from_json(F.col("value").cast("string"), value_schema)
    try:
        struct = records.select(parsed.alias("v")).schema["v"].dataType
    except Exception as exc:
        raise IcebergJobError(
            f"--value-schema {value_schema!r} is not a Spark DDL schema such as "
            f"'id BIGINT, name STRING': {exc}"
        ) from exc
    assert isinstance(struct, StructType)
    fields = struct.fieldNames()
    taken = set(records.columns) | {DAY}
    clash = sorted(prefix + f for f in fields if prefix + f in taken)
    if clash:
        raise IcebergJobError(
            f"--value-schema fields {clash} clash with the record's own columns: give "
            "--value-prefix (e.g. v_) to name the decoded columns apart"
        )
    return records.withColumn("__v", parsed).select(
        *records.columns, *[F.col(f"__v.`{f}`").alias(prefix + f) for f in fields]
    )


def check_value_schema(spark: SparkSession, job: Job) -> None:
    """Fail before reading anything if --value-schema is not usable."""
    decoded(spark.createDataFrame([], spark_schema(True)), job.value_schema, job.value_prefix)


def write_files(records: DataFrame, table_location: str) -> tuple[str, list[str]]:
    """Write ``records`` as Parquet under a fresh ``<location>/data/kafscale-<uuid>/``, one
    subdirectory per UTC day of ``timestamp`` (so each file holds one day); returns the
    directory and its data files, named as the table location names them."""
    directory = f"{table_location.rstrip('/')}/data/{DATA_PREFIX}{uuid.uuid4()}"
    day = F.floor(F.unix_micros(F.col("timestamp")) / F.lit(MICROS_PER_DAY)).cast("int")
    # Values are mostly distinct: building a dictionary for them only to give it up costs a
    # quarter of the job's CPU per GiB (bench/iceberg_job.py); keys keep theirs.
    writer = records.withColumn(DAY, day).write.option("parquet.enable.dictionary#value", "false")
    writer.partitionBy(DAY).parquet(spark_path(directory))
    spark = records.sparkSession
    listing = (
        spark.read.format("binaryFile")
        .option("pathGlobFilter", "*.parquet")
        .option("recursiveFileLookup", "true")
        .load(spark_path(directory))
        .select("path")
        .collect()
    )
    name = directory.rsplit("/", 1)[1]
    files = sorted(f"{directory}/{row['path'].split(f'/{name}/', 1)[1]}" for row in listing)
    return directory, files


def evolve(table: Table, schema: pa.Schema) -> None:
    """Add the columns of ``schema`` the table lacks (--value-schema or headers asked for
    later): a schema change of its own, before any file is written with their ids."""
    try:
        with table.update_schema() as update:
            update.union_by_name(pa.schema([f.with_nullable(True) for f in schema]))
    except ValueError as exc:
        raise IcebergJobError(
            f"the records do not fit table {label(table)}: {exc}. Keep --value-schema as the "
            "table has it, or write another table (--namespace)"
        ) from exc


def with_ids(dtype: DataType, itype: IcebergType) -> DataType:
    """``dtype`` whose struct fields carry the Iceberg field ids of ``itype`` (by name), which
    Spark writes into Parquet: readers that go by id (polars' own) need them."""
    if isinstance(dtype, StructType) and isinstance(itype, IcebergStruct):
        return StructType([id_field(f, itype.field_by_name(f.name)) for f in dtype.fields])
    if isinstance(dtype, ArrayType) and isinstance(itype, ListType):
        return ArrayType(with_ids(dtype.elementType, itype.element_type), dtype.containsNull)
    if isinstance(dtype, SparkMap) and isinstance(itype, MapType):
        key = with_ids(dtype.keyType, itype.key_type)
        return SparkMap(key, with_ids(dtype.valueType, itype.value_type), dtype.valueContainsNull)
    return dtype


def id_field(field: StructField, nested: NestedField | None) -> StructField:
    if nested is None:
        return field
    metadata = {**field.metadata, "parquet.field.id": nested.field_id}
    return StructField(
        field.name, with_ids(field.dataType, nested.field_type), field.nullable, metadata
    )


def with_field_ids(records: DataFrame, schema: IcebergStruct) -> DataFrame:
    """``records`` with the table's field ids on their columns (nested ones too)."""
    typed = with_ids(records.schema, schema)
    assert isinstance(typed, StructType)
    # .to() sets the nested fields' metadata; the alias makes sure of the top-level columns'
    columns = [F.col(f"`{f.name}`").alias(f.name, metadata=f.metadata) for f in typed.fields]
    return records.to(typed).select(*columns)


def arrow_schema(records: DataFrame) -> pa.Schema:
    """The Arrow schema of ``records`` as Spark hands them over (timestamps µs UTC)."""
    return records.limit(0).toArrow().schema


def stage(
    job: Job,
    topic: str,
    records: DataFrame,
    starting: dict[int, int],
    offsets: dict[int, int],
    before: Committed,
    properties: Mapping[str, str] = {},
) -> Staged:
    """Write ``records`` (one topic's, read from ``starting``) as data files of the topic's
    table (made if need be) without committing them: step one of two."""
    records = decoded(records, job.value_schema, job.value_prefix)
    table = load_table(job, topic)
    if table is None:
        table = create_table(job, topic, arrow_schema(records))
    elif set(records.columns) - set(table.schema().column_names):
        evolve(table, arrow_schema(records))
    records = with_field_ids(records, table.schema().as_struct())
    directory, files = write_files(records, table.location())
    return Staged(table, topic, directory, files, starting, offsets, before, dict(properties))


def commit(staged: Staged) -> Snapshot | None:
    """Step two: ONE snapshot that adds the staged files and records the offsets reached. If
    the table moved on meanwhile, it is retried only when the offsets did not (another writer,
    not this job); else the files stay uncommitted and it fails."""
    table = staged.table
    properties = {OFFSETS: offsets_json(staged.offsets), **staged.properties}
    if table.properties.get("commit.retry.num-retries") != "0":
        with table.transaction() as tx:  # a table this job did not make: no snapshot here
            tx.set_properties(NO_REBASE)
    for attempt in range(COMMIT_ATTEMPTS):
        now = committed(table)
        if now.offsets != staged.committed.offsets or now.batch_id != staged.committed.batch_id:
            raise IcebergJobError(
                f"table {label(table)} got other records of {staged.topic} since this run "
                f"started (offsets {now.offsets}, not {staged.committed.offsets}): is another "
                "run of this job writing it? Nothing was committed; run again"
            )
        try:
            with table.transaction() as tx:
                tx.add_files(staged.files, snapshot_properties=properties)
            return table.current_snapshot()
        except CommitFailedException as exc:
            if attempt + 1 == COMMIT_ATTEMPTS:
                raise IcebergJobError(
                    f"table {label(table)} kept changing under this run ({exc}); nothing was "
                    "committed: run again"
                ) from exc
            table = table.refresh()
        except ValueError as exc:
            raise IcebergJobError(
                f"the data files do not fit table {label(table)}: {exc}. Keep --value-schema "
                "and headers as the table has them, or write another table (--namespace)"
            ) from exc
    return None


def offsets_json(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())})


def report(staged: Staged, snapshot: Snapshot | None, prefix: str = "") -> None:
    rows = "?"
    if snapshot is not None and snapshot.summary is not None:
        rows = snapshot.summary["added-records"] or "0"
    ranges = ", ".join(
        f"{p}: {staged.starting.get(p, 'earliest')}..{end}"
        for p, end in sorted(staged.offsets.items())
        if staged.starting.get(p) != end
    )
    print(f"{prefix}{staged.topic} -> {label(staged.table)}: {rows} rows, offsets {{{ranges}}}")


# --- batch --------------------------------------------------------------------------------------


def configure(spark: SparkSession) -> None:
    # Iceberg reads INT96 timestamps, Spark's default, only as a legacy case: write micros
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    # a task sees a day or two: a file open per day beats sorting the task's rows by day
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "16")


def topic_options(
    options: Mapping[str, str], topic: str, starting: dict[int, int], ending: dict[int, int]
) -> dict[str, str]:
    """Source options that read exactly [starting, ending) of ``topic``'s partitions (a
    partition missing from ``starting`` from its earliest)."""
    out = {k: v for k, v in options.items() if k not in ("subscribe", "subscribePattern")}
    out["assign"] = json.dumps({topic: sorted(ending)})
    out["startingOffsets"] = json.dumps({topic: {str(p): o for p, o in starting.items()}})
    out["endingOffsets"] = json.dumps({topic: {str(p): o for p, o in ending.items()}})
    return out


def plan_topic(
    job: Job, topic: str, ending: dict[int, int]
) -> tuple[Committed, dict[int, int], dict[int, int]] | None:
    """(what the table has, starting, offsets to reach) for ``topic``; None if nothing new."""
    table = load_table(job, topic)
    if table is not None:
        for path in remove_orphans(table, job.orphan_seconds):
            print(f"{label(table)}: removed uncommitted files of an earlier run: {path}")
    before = committed(table)
    starting = {p: o for p, o in before.offsets.items() if p in ending}
    for p, end in ending.items():
        if starting.get(p, 0) > end:
            raise IcebergJobError(
                f"table {table_name(topic)} has {topic} partition {p} up to offset "
                f"{starting[p]}, but the partition now ends at {end}: was the topic deleted "
                "and made again? Write into a new table (drop it, or use another --namespace)"
            )
    if all(end == starting.get(p, 0) for p, end in ending.items()):
        return None
    return before, starting, {**before.offsets, **ending}


def stage_topic(spark: SparkSession, job: Job, topic: str, ending: dict[int, int]) -> Staged | None:
    """Read what is new in ``topic`` up to ``ending`` and write it as uncommitted data files;
    None if there is nothing new. The tasks write the files themselves from Arrow, unless JSON
    values are decoded (Spark's ``from_json``) or the table has columns the records lack: then
    Spark writes them from its rows."""
    planned = plan_topic(job, topic, ending)
    if planned is None:
        return None
    before, starting, offsets = planned
    options = topic_options(job.options, topic, starting, ending)
    if job.value_schema is None:
        staged = stage_from_tasks(spark, job, topic, options, planned)
        if staged is not None:
            return staged
    records = spark.read.format("kafscale").options(**options).load()
    return stage(job, topic, records, starting, offsets, before)


def stage_from_tasks(
    spark: SparkSession,
    job: Job,
    topic: str,
    options: dict[str, str],
    planned: tuple[Committed, dict[int, int], dict[int, int]],
) -> Staged | None:
    """``stage`` with the files written by the tasks from Arrow (``task_files``): one task per
    input partition the source plans; None if the table has columns the records lack."""
    before, starting, offsets = planned
    read = ReadOptions.parse(options, streaming=False)
    columns = source_arrow_schema(read.include_headers)
    table = load_table(job, topic)
    if table is None:
        table = create_table(job, topic, columns)
    elif set(columns.names) - set(table.schema().column_names):
        evolve(table, columns)
    if set(table.schema().column_names) != set(columns.names):
        return None
    directory = f"{table.location().rstrip('/')}/data/{DATA_PREFIX}{uuid.uuid4()}"
    ranges = KafScaleBatchReader(read).partitions()
    files = write_ranges(spark, read, ranges, directory, schema_to_pyarrow(table.schema()))
    return Staged(table, topic, directory, files, starting, offsets, before)


def run_batch(spark: SparkSession, job: Job) -> None:
    """Every subscribed topic's table up to where its partitions end now."""
    configure(spark)
    check_value_schema(spark, job)
    ending = latest_offsets(job.options)
    if not ending:
        print("no topic matches; nothing to do")
    for topic, parts in sorted(ending.items()):
        staged = stage_topic(spark, job, topic, {int(p): o for p, o in parts.items()})
        if staged is None:
            print(f"{topic} -> {job.namespace}.{table_name(topic)}: nothing new")
            continue
        report(staged, commit(staged))


# --- streaming ----------------------------------------------------------------------------------


def stream_starting_offsets(job: Job) -> str:
    """Where a new query starts: for each topic with a table, the offsets it reached (a new
    checkpoint does not read again what the table has); else earliest."""
    found: dict[str, dict[str, int]] = {}
    for topic in latest_offsets(job.options):
        table = load_table(job, topic)
        if table is not None:
            for path in remove_orphans(table, job.orphan_seconds):
                print(f"{label(table)}: removed uncommitted files of an earlier run: {path}")
        offsets = committed(table).offsets
        if offsets:
            found[topic] = {str(p): o for p, o in offsets.items()}
    return json.dumps(found) if found else "earliest"


def not_before(offsets: Mapping[int, int]) -> Column:
    """Rows at or after ``offsets`` (partition -> offset)."""
    condition = F.lit(True)
    for p, o in offsets.items():
        condition = condition & ~((F.col("partition") == p) & (F.col("offset") < o))
    return condition


def commit_batch(job: Job, frame: DataFrame, batch_id: int, query_id: str | None) -> None:
    """One micro-batch: for each topic in it, one commit, unless its table has this batch."""
    frame = frame.persist()
    try:
        ends: dict[str, dict[int, int]] = {}
        for row in frame.groupBy("topic", "partition").agg(F.max("offset").alias("last")).collect():
            ends.setdefault(row["topic"], {})[row["partition"]] = row["last"] + 1
        for topic, reached in sorted(ends.items()):
            before = committed(load_table(job, topic))
            if (
                before.batch_id is not None
                and before.query_id == query_id
                and before.batch_id >= batch_id
            ):
                print(f"batch {batch_id}: {topic} already committed, skipped")
                continue
            records = frame.where(F.col("topic") == topic).where(not_before(before.offsets))
            props = {BATCH_ID: str(batch_id)} | ({QUERY_ID: query_id} if query_id else {})
            # never backwards: a new query may hand over records the table has (filtered out)
            offsets = {p: max(o, before.offsets.get(p, 0)) for p, o in reached.items()}
            offsets = {**before.offsets, **offsets}
            staged = stage(job, topic, records, before.offsets, offsets, before, props)
            report(staged, commit(staged), prefix=f"batch {batch_id}: ")
    finally:
        frame.unpersist()


def run_stream(
    spark: SparkSession,
    job: Job,
    checkpoint: str,
    trigger_seconds: float = 10.0,
    until_caught_up: bool = False,
    max_offsets_per_trigger: int | None = None,
) -> None:
    configure(spark)
    check_value_schema(spark, job)
    options = dict(job.options)
    options.setdefault("startingOffsets", stream_starting_offsets(job))
    if max_offsets_per_trigger:
        options.setdefault("maxOffsetsPerTrigger", str(max_offsets_per_trigger))

    def each(frame: DataFrame, batch_id: int) -> None:
        # the query id is in the checkpoint: with the batch id it names a micro-batch for good
        query_id = frame.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        commit_batch(job, frame, batch_id, query_id)

    records = spark.readStream.format("kafscale").options(**options).load()
    writer = records.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
    query = writer.trigger(processingTime=f"{trigger_seconds:g} seconds").start()
    if until_caught_up:
        query.processAllAvailable()
        query.stop()
    else:
        query.awaitTermination()
