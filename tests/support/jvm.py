"""The JVM programs of the tests, in Maven modules with pinned versions: tests/jvm (Apache
kafka-clients, kafka-streams and Kafka's tools; its own programs print one JSON line on stdout,
their result) and tests/jvm/connect (a Kafka Connect worker with the file connectors, and
MirrorMaker 2).

A module is built by Maven when its pom or a source is newer than its last build (needs
``mvn`` and a JDK 17+ on PATH; Maven fetches the jars from Maven Central into ~/.m2 the first
time), then its classes run with ``java``.

In the latest environment (``KAFSCALE_TEST_NEWEST_KAFKA=1``, set by tests/run.sh) each module
is built instead at the newest Kafka release Maven Central serves of all its Kafka artifacts,
into a build directory of its own; ``python tests/support/jvm.py`` prints those versions.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

JVM_DIR = Path(__file__).resolve().parent.parent / "jvm"
PACKAGE = "dev.kafscale.jvm"

_TAIL_LINES = 40

NEWEST_ENV = "KAFSCALE_TEST_NEWEST_KAFKA"
KAFKA_GROUP_URL = "https://repo1.maven.org/maven2/org/apache/kafka"
# Releases of the major version the modules pin (no release candidates or snapshots).
_RELEASE = re.compile(r"4\.\d+\.\d+")


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@functools.cache
def releases(artifact: str) -> frozenset[str]:
    """The Kafka releases of ``artifact`` Maven Central lists."""
    url = f"{KAFKA_GROUP_URL}/{artifact}/maven-metadata.xml"
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            metadata = ElementTree.fromstring(answer.read())
    except OSError as exc:
        raise RuntimeError(
            f"could not read {url} ({exc}): the latest environment needs Maven Central"
        ) from exc
    versions = (v.text or "" for v in metadata.iter("version"))
    return frozenset(v for v in versions if _RELEASE.fullmatch(v))


def newest_release(artifacts: tuple[str, ...]) -> str:
    """The newest release every one of ``artifacts`` has (Kafka publishes them together, but
    a connector may lag behind)."""
    common = frozenset.intersection(*(releases(a) for a in artifacts))
    if not common:
        raise RuntimeError(f"Maven Central has no 4.x release common to {', '.join(artifacts)}")
    return max(common, key=lambda v: tuple(int(part) for part in v.split(".")))


@dataclass(frozen=True)
class Module:
    """One Maven module: its pom, sources and build under ``dir``; ``artifacts`` are its Kafka
    dependencies (one version, the pom's ``kafka.version``)."""

    dir: Path
    artifacts: tuple[str, ...]

    @functools.cached_property
    def kafka_version(self) -> str | None:
        """The Kafka release to build with instead of the pom's: the newest, in the latest
        environment; None for the pom's own."""
        return newest_release(self.artifacts) if os.environ.get(NEWEST_ENV) == "1" else None

    @property
    def target(self) -> Path:
        version = self.kafka_version
        return self.dir / ("target" if version is None else f"target-kafka-{version}")

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
        if self.kafka_version is not None:
            cmd += [f"-Dkafka.version={self.kafka_version}", f"-Dbuild.dir={self.target}"]
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


CLIENTS = Module(JVM_DIR, ("kafka-clients", "kafka-streams", "kafka-tools"))
CONNECT = Module(
    JVM_DIR / "connect", ("connect-runtime", "connect-json", "connect-file", "connect-mirror")
)


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


@contextlib.contextmanager
def stopped_after(command: list[str], wait_s: float) -> Iterator[Callable[[str], None]]:
    """Runs a long-lived JVM program (a Connect worker, MirrorMaker) while the body waits for
    it, then stops it as an operator would (SIGTERM: it commits what it has and exits 0 or
    143). Yields ``alive(progress)``, which fails if the program exited, or once ``wait_s``
    have passed (saying ``progress``)."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        deadline = time.monotonic() + wait_s

        def alive(progress: str) -> None:
            if proc.poll() is not None:
                log = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"it exited {proc.returncode}:\n{_tail(log)}")
            assert time.monotonic() < deadline, f"after {wait_s} s: {progress}"

        try:
            yield alive
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                log, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                log, _ = proc.communicate()
        assert proc.returncode in (0, 143), f"exited {proc.returncode}:\n{_tail(log)}"


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


def main() -> None:
    """Print the Kafka release each module builds with here; with ``--newer``, print only
    ``newer`` if any module builds with a release other than its pom's (else ``pinned``)."""
    newer = False
    for module in (CLIENTS, CONNECT):
        pinned = _pom_version(module.dir / "pom.xml")
        version = module.kafka_version or pinned
        newer |= version != pinned
        if "--newer" not in sys.argv:
            source = "newest on Maven Central" if module.kafka_version else "pinned"
            print(f"{module.dir.relative_to(JVM_DIR.parent.parent)}: Kafka {version} ({source})")
    if "--newer" in sys.argv:
        print("newer" if newer else "pinned")


def _pom_version(pom: Path) -> str:
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    return found.group(1) if found else "?"


if __name__ == "__main__":
    main()
