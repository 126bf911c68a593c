"""Spark's own Kafka source and sink (``spark-sql-kafka-0-10``, from Maven Central at the
installed pyspark's version) read and write KafScale topics unchanged: a batch write and read,
and Structured Streaming from a topic into another one and into memory
(tests/support/spark_kafka_job.py, in a process of its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).resolve().parents[1] / "support" / "spark_kafka_job.py"
RECORDS = 300


@pytest.fixture(scope="module")
def kbroker(module_broker_factory):
    return module_broker_factory(["--default-partitions", "3"])


def test_spark_kafka_source_and_sink_batch_and_streaming(kbroker, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(JOB), kbroker.bootstrap, "spark-kafka", str(RECORDS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {
        "batch_read": RECORDS,
        "batch_distinct": RECORDS,
        "streamed": RECORDS,
        "streamed_distinct": RECORDS,
        "copied": RECORDS,
        "copied_upper": RECORDS,
    }
