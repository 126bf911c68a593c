"""The Spark source and the Iceberg job on a real Spark cluster: a standalone master and two
workers (started from the pyspark package, all on 127.0.0.1), reading a 3-broker etcd + S3
cluster's topic. Each executor reads its ranges from S3 itself; the results equal what a
consumer reads through the brokers. The brokers compact only after 10 minutes, so the records
are read from the committed write-ahead objects."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from support.analytics_env import (
    NAMESPACE,
    PARTITIONS,
    arrow_rows,
    consume_rows,
    row_order,
    s3_options,
    without_headers,
)
from support.clients import Msg, confluent_produce, unique
from support.group_env import ClusterNodes
from support.spark_cluster import StandaloneCluster
from support.spark_session import spark_session

from kafscale.spark import iceberg as ice

UNCOMPACTED = ["--default-partitions", str(PARTITIONS), "--wal-compaction-age-ms", "600000"]
RECORDS = 300
JOB = Path(__file__).resolve().parents[2] / "spark" / "topic_to_iceberg.py"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spark(standalone):
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.host": "127.0.0.1",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
    }
    with spark_session("kafscale-standalone", standalone.master_url, **conf) as session:
        yield session


def test_the_source_and_the_iceberg_job_run_on_the_cluster_executors(
    cluster, standalone, spark, tmp_path
):
    nodes = cluster(3, args=UNCOMPACTED)
    env = ClusterNodes(nodes)
    topic = env.new_topic(unique("standalone"), PARTITIONS)
    msgs = [Msg(i % PARTITIONS, f"k{i}".encode(), f"v{i}".encode()) for i in range(RECORDS)]
    confluent_produce(env.bootstrap(), topic, msgs)
    ends = {p: sum(1 for m in msgs if m.partition == p) for p in range(PARTITIONS)}
    expected = without_headers(
        consume_rows(env.bootstrap(), topic, dict.fromkeys(range(PARTITIONS), 0), ends)
    )
    options = {**s3_options(nodes.moto), "etcd.endpoints": nodes.etcd.endpoint}
    location = f"s3://{nodes.bucket}/{NAMESPACE}"
    frame = (
        spark.read.format("kafscale")
        .options(**options)
        .option("subscribe", topic)
        .option("minPartitions", "4")
        .load(location)
    )
    assert sorted(arrow_rows(frame.toArrow()), key=row_order) == expected
    # the tasks ran in executors the workers launched, not in the driver
    for worker in standalone.workers:
        assert "Asked to launch executor" in worker.log_text(), worker.name

    warehouse = tmp_path / "warehouse"
    job = runpy.run_path(str(JOB))
    args = [location, "--subscribe", topic, "--warehouse", str(warehouse)]
    job["main"]([*args, *(f"--option={k}={v}" for k, v in options.items())])
    table = ice.open_catalog(str(warehouse)).load_table(("kafscale", ice.table_name(topic)))
    assert sorted(arrow_rows(table.scan().to_arrow()), key=row_order) == expected
