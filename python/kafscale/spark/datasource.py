"""The ``kafscale`` data source class Spark is given, and the choice of reader for it."""

from __future__ import annotations

import sys
from types import FrameType

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from kafscale.spark.options import ReadOptions
from kafscale.spark.readers import (
    KafScaleBatchReader,
    KafScalePruningBatchReader,
    KafScaleStreamReader,
)
from kafscale.spark.schema import spark_schema

_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"


class KafScaleDataSource(DataSource):
    """``spark.read.format("kafscale")`` / ``spark.readStream.format("kafscale")``."""

    @classmethod
    def name(cls) -> str:
        return "kafscale"

    def schema(self) -> StructType:
        # parsing here makes a bad option fail at load(), not at the first action
        return spark_schema(ReadOptions.parse(self.options, streaming=False).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options, streaming=False)
        if _asked_by_filter_pushdown():
            return KafScalePruningBatchReader(options)
        return KafScaleBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafScaleStreamReader(ReadOptions.parse(self.options, streaming=True))


def _asked_by_filter_pushdown() -> bool:
    """True when Spark's filter-pushdown planner wants the reader. Spark refuses a reader that
    defines pushFilters while spark.sql.python.filterPushdown.enabled is off (the default), and
    only that planner ever calls pushFilters; choosing the reader by its caller keeps the source
    working with the default configuration and pruning when pushdown is on."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == _PUSHDOWN_WORKER:
            return True
        frame = frame.f_back
    return False
