"""The JVM programs of tests/jvm (Apache kafka-clients, pinned in its pom.xml): built by Maven
once, then run with ``java``. Each prints one JSON line on stdout, its result.

``classpath()`` builds when a source or the pom is newer than the build (needs ``mvn`` and a
JDK 17+ on PATH; Maven fetches the jars from Maven Central into ~/.m2 the first time);
``run()`` starts a main class and returns the JSON line it printed as a dict.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

JVM_DIR = Path(__file__).resolve().parent.parent / "jvm"
POM = JVM_DIR / "pom.xml"
SOURCES = JVM_DIR / "src" / "main" / "java"
TARGET = JVM_DIR / "target"
CLASSES = TARGET / "classes"
CLASSPATH_FILE = TARGET / "classpath.txt"
BUILT = TARGET / "built"  # touched after each build
PACKAGE = "dev.kafscale.jvm"

_TAIL_LINES = 40


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _up_to_date() -> bool:
    """Built after the last change to the pom or any source."""
    if not (CLASSPATH_FILE.is_file() and BUILT.is_file()):
        return False
    inputs = [POM, *SOURCES.rglob("*.java")]
    return BUILT.stat().st_mtime > max(i.stat().st_mtime for i in inputs)


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
    """Build tests/jvm if needed and return the java classpath (classes, then dependencies)."""
    if not _up_to_date():
        _mvn("dependency:build-classpath", f"-Dmdep.outputFile={CLASSPATH_FILE}")
        _mvn("compile")
        BUILT.touch()
    deps = CLASSPATH_FILE.read_text().strip()
    return f"{CLASSES}{':' + deps if deps else ''}"


def command(main_class: str, args: list[str]) -> list[str]:
    """The command that runs the fully named ``main_class`` (of tests/jvm or of a jar it
    depends on, such as Kafka's tools) with ``args``, built first if needed."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java not found on PATH: install a JDK 17+")
    return [java, "-cp", classpath(), main_class, *args]


def java(
    main_class: str, args: list[str], stdin: str | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the fully named ``main_class`` with ``args``; its exit code and output, not
    checked."""
    try:
        return subprocess.run(
            command(main_class, args),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        raise RuntimeError(f"{main_class} timed out after {timeout}s\n{_tail(err or '')}") from exc


def result(name: str, returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The JSON line a program of tests/jvm printed last. A non-zero exit or no JSON line
    raises, with the end of its output."""
    if returncode != 0:
        raise RuntimeError(f"{name} failed (exit {returncode})\n{_tail(stderr + stdout)}")
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                parsed: dict[str, Any] = json.loads(line)
            except json.JSONDecodeError:
                continue
            return parsed
    raise RuntimeError(
        f"{name} printed no JSON result\nstdout: {_tail(stdout)}\nstderr: {_tail(stderr)}"
    )


def run(main_class: str, args: list[str], timeout: float | None = None) -> dict[str, Any]:
    """Run ``dev.kafscale.jvm.<main_class>`` with ``args``; the JSON line it printed last."""
    proc = java(f"{PACKAGE}.{main_class}", args, timeout=timeout)
    return result(main_class, proc.returncode, proc.stdout, proc.stderr)
