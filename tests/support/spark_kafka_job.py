"""A PySpark job using Spark's own Kafka source and sink (``spark-sql-kafka-0-10``, resolved
from Maven Central by ``spark.jars.packages`` at the version of the installed pyspark), as an
existing Spark job would, against the broker at BOOTSTRAP: a batch write and read, then
Structured Streaming from the topic into another one and into memory. Run in a process of its
own (the packages are only loaded when Spark's JVM starts). Prints one JSON line of counts.

Usage: python spark_kafka_job.py BOOTSTRAP TOPIC RECORDS CHECKPOINT_DIR
"""

from __future__ import annotations

import json
import os
import sys

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    bootstrap, topic, records, checkpoints = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    copy = f"{topic}-copy"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafscale-spark-kafka")
        .config("spark.jars.packages", package)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    kafka = {"kafka.bootstrap.servers": bootstrap}
    try:
        rows = [(f"k{i % 10}", f"v{i}") for i in range(records)]
        written = spark.createDataFrame(rows, ["key", "value"])
        written.write.format("kafka").options(**kafka).option("topic", topic).save()

        read = spark.read.format("kafka").options(**kafka).option("subscribe", topic).load()
        values = read.select(F.col("value").cast("string").alias("v"))
        batch = values.agg(F.count("*"), F.countDistinct("v")).first()

        stream = (
            spark.readStream.format("kafka")
            .options(**kafka)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        to_kafka = (
            stream.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"))
            .writeStream.format("kafka")
            .options(**kafka)
            .option("topic", copy)
            .option("checkpointLocation", f"{checkpoints}/to-kafka")
            .trigger(availableNow=True)
            .start()
        )
        to_kafka.awaitTermination()
        to_memory = (
            stream.select(F.col("value").cast("string").alias("v"))
            .writeStream.format("memory")
            .queryName("streamed")
            .option("checkpointLocation", f"{checkpoints}/to-memory")
            .trigger(availableNow=True)
            .start()
        )
        to_memory.awaitTermination()
        streamed = spark.sql("select count(*), count(distinct v) from streamed").first()
        copied = (
            spark.read.format("kafka")
            .options(**kafka)
            .option("subscribe", copy)
            .load()
            .select(F.col("value").cast("string").alias("v"))
        )
        upper = copied.filter(F.col("v").startswith("V")).count()
        print(
            json.dumps(
                {
                    "batch_read": batch[0],
                    "batch_distinct": batch[1],
                    "streamed": streamed[0],
                    "streamed_distinct": streamed[1],
                    "copied": copied.count(),
                    "copied_upper": upper,
                }
            )
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
