"""The batch and stream readers Spark gets from the data source: they plan on the driver and
read one input partition on an executor."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)

from kafscale.spark.options import (
    OffsetsJson,
    ReadOptions,
    TopicPartition,
    offsets_from_json,
    offsets_to_json,
)
from kafscale.spark.planning import (
    SegmentRange,
    batch_ranges,
    list_partition_logs,
    open_source,
    rate_limited,
    split_at_segments,
)
from kafscale.spark.pruning import Pruning
from kafscale.spark.schema import arrow_schema


def read_range(options: ReadOptions, part: InputPartition | None) -> Iterator[pa.RecordBatch]:
    """Executor side: the records of one input partition as Arrow batches of the Spark schema."""
    if not isinstance(part, SegmentRange):
        # A plan without input partitions: Spark hands read() None (pyspark 4.1) or a bare
        # InputPartition(None) (4.2 and later) in their place.
        return
    target = arrow_schema(options.include_headers)
    batches = open_source(options).read(
        part.topic,
        part.partition,
        part.start_offset,
        part.end_offset,
        include_headers=options.include_headers,
    )
    for batch in batches:
        if batch.num_rows:
            # kafka_schema has millisecond timestamps; Spark's Arrow reader takes microseconds
            yield batch.cast(target)


class KafScaleBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pruning = Pruning()

    def partitions(self) -> list[SegmentRange]:
        source = open_source(self.options)
        logs = list_partition_logs(source, self.options)
        ranges = self.pruning.apply(batch_ranges(logs, self.options, source), source)
        segments = {tp: log.segments for tp, log in logs.items()}
        return split_at_segments(ranges, segments, self.options.min_partitions)

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)


class KafScalePruningBatchReader(KafScaleBatchReader):
    """The batch reader when Spark pushes filters down (spark.sql.python.filterPushdown.enabled)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pruning = Pruning.from_filters(filters)
        # every filter goes back: pruning skips data that cannot match, Spark does the filtering
        return filters


class KafScaleStreamReader(DataSourceStreamReader):
    """Micro-batches over offsets of the Kafka source's JSON shape; each batch ends where the
    data (or the committed high watermark) ended when it was planned, at most
    maxOffsetsPerTrigger offsets after the previous one."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        # Spark asks for the initial offset more than once; "latest" must not move between calls
        self._initial: OffsetsJson | None = None
        # end of the last batch Spark planned; on a restart Spark replays the checkpoint's last
        # offsets through partitions(), so this picks up where the checkpoint left off
        self._planned_until: dict[TopicPartition, int] | None = None

    def initialOffset(self) -> OffsetsJson:
        if self._initial is None:
            source = open_source(self.options)
            logs = list_partition_logs(source, self.options)
            starting = self.options.starting
            self._initial = offsets_to_json(
                {tp: starting.resolve(log, source) for tp, log in logs.items()}
            )
        return self._initial

    def latestOffset(self) -> OffsetsJson:
        logs = list_partition_logs(open_source(self.options), self.options)
        known = self._planned_until
        if known is None:
            known = offsets_from_json(self.initialOffset())
        # partitions (or topics matching the pattern) that appeared since: from their start
        begin = {tp: known.get(tp, log.earliest) for tp, log in logs.items()}
        until = {tp: max(begin[tp], log.latest) for tp, log in logs.items()}
        if self.options.max_offsets_per_trigger:
            until = rate_limited(begin, until, self.options.max_offsets_per_trigger)
        return offsets_to_json({**known, **until})

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> list[SegmentRange]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        self._planned_until = until
        # a partition new in this batch starts at 0: reading below its earliest offset simply
        # yields nothing, so this gives the same rows as latestOffset's "from its start"
        ranges = [
            SegmentRange(topic, partition, begin.get((topic, partition), 0), stop)
            for (topic, partition), stop in sorted(until.items())
            if begin.get((topic, partition), 0) < stop
        ]
        if not self.options.min_partitions or not ranges:
            return ranges
        source = open_source(self.options)
        segments = {
            (r.topic, r.partition): source.log(r.topic, r.partition).segments for r in ranges
        }
        return split_at_segments(ranges, segments, self.options.min_partitions)

    # As in KafScaleBatchReader.read: Spark passes back the partitions planned above.
    def read(self, partition: SegmentRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(self.options, partition)
