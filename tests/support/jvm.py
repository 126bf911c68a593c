"""The JVM programs of the tests, in Maven modules with pinned versions: tests/jvm (Apache
kafka-clients, kafka-streams and Kafka's tools; its own programs print one JSON line on stdout,
their result) and tests/jvm/connect (a Kafka Connect worker with the file connectors).

A module is built by Maven when its pom or a source is newer than its last build (needs
``mvn`` and a JDK 17+ on PATH; Maven fetches the jars from Maven Central into ~/.m2 the first
time), then its classes run with ``java``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JVM_DIR = Path(__file__).resolve().parent.parent / "jvm"
PACKAGE = "dev.kafscale.jvm"

_TAIL_LINES = 40


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclass(frozen=True)
class Module:
    """One Maven module: its pom, sources and build under ``dir``."""

    dir: Path

    @property
    def target(self) -> Path:
        return self.dir / "target"

    def _up_to_date(self, classpath_file: Path, built: Path) -> bool:
        """Built after the last change to the pom or any source."""
        if not (classpath_file.is_file() and built.is_file()):
            return False
        inputs = [self.dir / "pom.xml", *(self.dir / "src").rglob("*.java")]
        return built.stat().st_mtime > max(i.stat().st_mtime for i in inputs)

    def _mvn(self, *args: str) -> None:
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("mvn not found on PATH: install Maven 3.8+ and a JDK 17+")
        cmd = [mvn, "-q", "-B", "-f", str(self.dir / "pom.xml"), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed (exit {proc.returncode}). Check that Maven can reach "
                f"Maven Central (or ~/.m2 holds the dependencies) and that JDK 17+ is "
                f"installed, then retry; delete {self.target} to force a rebuild.\n"
                f"{_tail(proc.stdout + proc.stderr)}"
            )

    def classpath(self) -> str:
        """Build the module if needed; its java classpath (classes, then dependencies)."""
        classpath_file, built = self.target / "classpath.txt", self.target / "built"
        if not self._up_to_date(classpath_file, built):
            self._mvn("dependency:build-classpath", f"-Dmdep.outputFile={classpath_file}")
            self._mvn("compile")
            built.touch()
        deps = classpath_file.read_text().strip()
        return f"{self.target / 'classes'}{':' + deps if deps else ''}"

    def command(self, main_class: str, args: list[str]) -> list[str]:
        """The command that runs the fully named ``main_class`` (of the module or of a jar it
        depends on, such as Kafka's tools) with ``args``, built first if needed."""
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java not found on PATH: install a JDK 17+")
        # slf4j-simple logs to stderr: warnings and errors only, so a failure shows why.
        logging = "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
        return [java, logging, "-cp", self.classpath(), main_class, *args]


CLIENTS = Module(JVM_DIR)
CONNECT = Module(JVM_DIR / "connect")


def classpath() -> str:
    """tests/jvm's classpath, built first if needed."""
    return CLIENTS.classpath()


def command(main_class: str, args: list[str]) -> list[str]:
    """The command that runs ``main_class`` of tests/jvm (or of its dependencies)."""
    return CLIENTS.command(main_class, args)


def java(
    main_class: str, args: list[str], stdin: str | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the fully named ``main_class`` of tests/jvm with ``args``; its exit code and
    output, not checked."""
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
