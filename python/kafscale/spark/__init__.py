"""PySpark data source ``kafscale``: reads KafScale topics straight from their segment objects (S3
or a local data directory), as a batch or as a stream, with the schema of Spark's Kafka source.

    spark.dataSource.register(KafScaleDataSource)
    df = (spark.read.format("kafscale").option("subscribe", "orders")
          .load("s3://bucket/namespace"))

The driver lists the segments of every subscribed partition and plans the input partitions:
offset ranges, cut only at segment boundaries; the executors read those objects themselves
through ``kafscale.segment``.
No broker is ever contacted. With ``etcd.endpoints`` every read stops at the committed high
watermark, so objects a broker wrote but never committed are never read.

Options follow Spark's Kafka source where they overlap: ``subscribe`` / ``subscribePattern`` /
``assign``, ``startingOffsets`` / ``endingOffsets`` ("earliest", "latest" or JSON such as
``{"orders": {"0": 12, "1": -2}}`` with -2 = earliest and -1 = latest), ``startingTimestamp`` /
``endingTimestamp`` (Unix milliseconds), ``includeHeaders``, ``minPartitions`` and, for streams,
``maxOffsetsPerTrigger``. Storage: ``endpoint``, ``region``, ``accessKeyId``,
``secretAccessKey``, ``sessionToken`` (else the standard AWS environment variables).
``kafscale.segment`` (the Rust core) is imported only when data is listed or read, so options can
be parsed and plans made without the extension.

See :mod:`kafscale.spark.options` for the options, :mod:`kafscale.spark.planning` for listing
and input partitions, :mod:`kafscale.spark.pruning` for pushed-down filters,
:mod:`kafscale.spark.readers` for the batch and stream readers, :mod:`kafscale.spark.schema`
for the row schema and :mod:`kafscale.spark.datasource` for the data source itself.
"""

from kafscale.spark.datasource import KafScaleDataSource
from kafscale.spark.jobs import kafscale_session
from kafscale.spark.options import (
    EARLIEST,
    LATEST,
    KafScaleOptionError,
    ReadOptions,
)
from kafscale.spark.planning import SegmentRange, latest_offsets
from kafscale.spark.pruning import Pruning
from kafscale.spark.schema import spark_schema

__all__ = [
    "EARLIEST",
    "LATEST",
    "KafScaleDataSource",
    "KafScaleOptionError",
    "Pruning",
    "ReadOptions",
    "SegmentRange",
    "kafscale_session",
    "latest_offsets",
    "spark_schema",
]
