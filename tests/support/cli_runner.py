"""Running the ``kafscale`` command as a real process, for the CLI tests."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

CLI_HANG_GUARD = 120.0  # seconds; stops a hung CLI process, never a performance limit


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def kafscale(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Run:
    """``python -m kafscale.cli ARGS`` with ``stdin`` piped in (or no standard input); a
    traceback on stderr is always a failure (every error a person can cause must be a
    sentence, not a stack)."""
    proc = subprocess.run(
        [sys.executable, "-m", "kafscale.cli", *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_GUARD,
        env=env,
        check=False,
    )
    run = Run(proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in run.err, f"kafscale {' '.join(args)} crashed:\n{run.err}"
    return run


def ok(*args: str, stdin: str | None = None) -> Run:
    """A command that must succeed."""
    run = kafscale(*args, stdin=stdin)
    assert run.code == 0, f"kafscale {' '.join(args)} exited {run.code}:\n{run.err}"
    return run


def one_error_line(run: Run) -> str:
    """The single ``kafscale: error: ...`` line of a failed command."""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kafscale: error: "), run.err
    return lines[0]
