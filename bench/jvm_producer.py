"""Drive the JVM paced producer (bench/jvm, Apache kafka-clients with default settings).

Usage::

    import jvm_producer
    result = jvm_producer.run("127.0.0.1:9092", "jbench", rate_mb=5, seconds=5, partitions=8)

``classpath()`` builds the Maven project once (needs ``mvn`` and a JDK 17+ on PATH);
``run()`` starts ``java`` and returns the JSON line it prints as a dict.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
JVM_DIR = HERE / "jvm"
POM = JVM_DIR / "pom.xml"
SOURCE = JVM_DIR / "src" / "main" / "java" / "dev" / "kafscale" / "bench" / "PacedProducer.java"
TARGET = JVM_DIR / "target"
CLASSES = TARGET / "classes"
CLASSPATH_FILE = TARGET / "classpath.txt"
MAIN_CLASS = "dev.kafscale.bench.PacedProducer"
MAIN_CLASS_FILE = CLASSES / "dev" / "kafscale" / "bench" / "PacedProducer.class"

_TAIL_LINES = 40


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _up_to_date() -> bool:
    if not (CLASSPATH_FILE.is_file() and MAIN_CLASS_FILE.is_file()):
        return False
    newest_input = max(POM.stat().st_mtime, SOURCE.stat().st_mtime)
    oldest_output = min(CLASSPATH_FILE.stat().st_mtime, MAIN_CLASS_FILE.stat().st_mtime)
    return oldest_output > newest_input


def _mvn(*args: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn not found on PATH: install Maven 3.8+ and a JDK 17+")
    cmd = [mvn, "-q", "-B", "-f", str(POM), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed (exit {proc.returncode}). Check that Maven can reach "
            f"Maven Central (or ~/.m2 holds the dependencies) and that JDK 17+ is installed, "
            f"then retry; delete {TARGET} to force a rebuild.\n"
            f"{_tail(proc.stdout + proc.stderr)}"
        )


def classpath() -> str:
    """Build bench/jvm if needed and return the java classpath (dependencies + classes)."""
    if not _up_to_date():
        _mvn("dependency:build-classpath", f"-Dmdep.outputFile={CLASSPATH_FILE}")
        _mvn("compile")
        # Ensure the outputs are newer than the inputs even if mvn skipped unchanged work.
        CLASSPATH_FILE.touch()
        MAIN_CLASS_FILE.touch()
    deps = CLASSPATH_FILE.read_text().strip()
    return f"{CLASSES}{':' + deps if deps else ''}"


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
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java not found on PATH: install a JDK 17+")
    cmd = [
        java,
        "-cp",
        classpath(),
        MAIN_CLASS,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--rate-mb",
        str(rate_mb),
        "--seconds",
        str(seconds),
        "--value-bytes",
        str(value_bytes),
    ]
    if partitions is not None:
        cmd += ["--partitions", str(partitions)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        raise RuntimeError(f"JVM producer timed out after {timeout}s\n{_tail(err or '')}") from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"JVM producer failed (exit {proc.returncode})\n{_tail(proc.stderr + proc.stdout)}"
        )
    for line in reversed(proc.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                result: dict[str, Any] = json.loads(line)
            except json.JSONDecodeError:
                continue
            return result
    raise RuntimeError(
        f"JVM producer printed no JSON result\nstdout: {_tail(proc.stdout)}\n"
        f"stderr: {_tail(proc.stderr)}"
    )
