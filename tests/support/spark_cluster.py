"""A Spark standalone cluster for the tests: a master and workers started from the pyspark
package's own launcher (``bin/spark-class``), all on 127.0.0.1, each a managed process with its
own log. Executors run this interpreter as their Python (it has kafscale), as an executor of a
real cluster runs the Python its node has kafscale installed in."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from .procs import ManagedProcess, free_ports, port_open

STARTUP_S = 120.0  # liveness guard: JVMs start slowly on a busy 2-core machine


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work),
        "SPARK_WORKER_DIR": str(work / "worker"),
        "PYSPARK_PYTHON": sys.executable,
    }


class SparkDaemon(ManagedProcess):
    def start(self, main_class: str, args: list[str], work: Path) -> SparkDaemon:
        launcher = spark_home() / "bin" / "spark-class"
        self._spawn([str(launcher), main_class, *args], spark_env(work), work)
        return self


class StandaloneCluster:
    """``master_url`` and the workers registered with it."""

    def __init__(self, work: Path, workers: int) -> None:
        self.work = work
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + workers)
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master = SparkDaemon("spark-master", work / "master.log")
        self.workers = [
            SparkDaemon(f"spark-worker{i}", work / f"worker{i}.log") for i in range(workers)
        ]

    def start(self) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self.master.start(
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port)],
            self.work,
        )
        deadline = time.monotonic() + STARTUP_S
        while not port_open("127.0.0.1", self.port):
            assert time.monotonic() < deadline, f"no master:\n{self.master.log_text()[-3000:]}"
            time.sleep(0.2)
        for worker, ui_port in zip(self.workers, self.worker_ui_ports, strict=True):
            worker.start(
                "org.apache.spark.deploy.worker.Worker",
                [
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(ui_port),
                    "--work-dir",
                    str(self.work / "worker"),
                ],
                self.work,
            )
        while len(re.findall("Registering worker", self.master.log_text())) < len(self.workers):
            log = self.master.log_text()[-3000:]
            assert time.monotonic() < deadline, f"workers never registered:\n{log}"
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        for daemon in [*self.workers, self.master]:
            daemon.cleanup()
