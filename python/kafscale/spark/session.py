"""A SparkSession ready for the ``kafscale`` source, for jobs started with plain ``python``."""

from __future__ import annotations

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
