"""Drive the JVM paced producer (tests/jvm's PacedProducer: Apache kafka-clients with default
settings).

Usage::

    import jvm_producer
    result = jvm_producer.run("127.0.0.1:9092", "jbench", rate_mb=5, seconds=5, partitions=8)

Built by Maven once (``support.jvm``: needs ``mvn`` and a JDK 17+ on PATH); ``run()`` starts
``java`` and returns the JSON line it prints as a dict.
"""

from __future__ import annotations

from typing import Any

from support import jvm  # on the path broker_bench set


def run(
    bootstrap: str,
    topic: str,
    rate_mb: float,
    seconds: float,
    value_bytes: int = 1024,
    partitions: int | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run the paced JVM producer and return its JSON result as a dict."""
    args = ["--bootstrap", bootstrap, "--topic", topic, "--rate-mb", str(rate_mb)]
    args += ["--seconds", str(seconds), "--value-bytes", str(value_bytes)]
    if partitions is not None:
        args += ["--partitions", str(partitions)]
    return jvm.run("PacedProducer", args, timeout)
