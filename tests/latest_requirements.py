"""The requirements of the "latest" test environment, one per line, from pyproject.toml.

The package's dependencies and its analytics extras keep their declared ranges, so pip
resolves each to the newest version the range allows: a range is a promise that those
versions work, and this is where it is checked. The Kafka client libraries the client tests
drive float to their newest release too (users run today's clients). Every other test tool
keeps its exact pin from the ``test`` extra, so a failure points at what changed.

    python tests/latest_requirements.py  # tests/run.sh installs what it prints
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

# The extras whose ranges users install: every analytics path.
ANALYTICS_EXTRAS = ("spark", "polars", "iceberg")

# Test tools that are products users run against the broker: their newest release.
CLIENT_LIBRARIES = ("kafka-python", "aiokafka")


def latest_requirements(pyproject: dict) -> list[str]:
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    ranged = list(project["dependencies"])
    for extra in ANALYTICS_EXTRAS:
        ranged += extras.get(extra, [])
    floating = {canonicalize_name(Requirement(r).name) for r in ranged}
    # a client library the package depends on keeps its range (the newest it allows)
    out = ranged + [c for c in CLIENT_LIBRARIES if canonicalize_name(c) not in floating]
    floating |= {canonicalize_name(name) for name in CLIENT_LIBRARIES}
    for pinned in extras["test"]:
        if canonicalize_name(Requirement(pinned).name) not in floating:
            out.append(pinned)
    return out


def main() -> None:
    with PYPROJECT.open("rb") as f:
        pyproject = tomllib.load(f)
    sys.stdout.write("\n".join(latest_requirements(pyproject)) + "\n")


if __name__ == "__main__":
    main()
