"""A local SparkSession for the tests, with the ``kafscale`` data source registered."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def local_spark(app_name: str, **conf: str) -> Iterator:
    """Spark on ``local[2]`` without its UI, stopped on exit; ``conf`` adds settings."""
    with spark_session(app_name, "local[2]", **conf) as session:
        yield session


@contextlib.contextmanager
def spark_session(app_name: str, master: str, **conf: str) -> Iterator:
    """A session on ``master`` without its UI, stopped on exit; ``conf`` adds settings."""
    from pyspark.sql import SparkSession

    from kafscale.spark import KafScaleDataSource

    with pytest.MonkeyPatch.context() as mp:
        # Spark's Python workers must run this interpreter: it has pyarrow and kafscale
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        builder = (
            SparkSession.builder.master(master)
            .appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
        )
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.dataSource.register(KafScaleDataSource)
        try:
            yield session
        finally:
            session.stop()
