"""Errors the CLI shows a person: what went wrong and what to do, on one line each.

Every failure the CLI foresees (an unreachable broker, an unknown topic, a refused request, an
unreadable bucket) is raised as :class:`CliError` and printed as ``kafscale: error: ...`` with
exit code 1; bad arguments are argparse's business (exit code 2). A traceback means a bug.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed, or (segments verify) found problems
EXIT_USAGE = 2  # argparse's code for bad arguments
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class CliError(Exception):
    """A failure to report without a traceback: ``what`` went wrong, ``hint`` what to do."""

    def __init__(self, what: str, hint: str | None = None, *, code: int | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint
        self.code = code  # the Kafka error code behind it, when there is one

    def __str__(self) -> str:
        return f"{self.what}; {self.hint}" if self.hint and not self.hint_said() else self.what

    def hint_said(self) -> bool:
        """True when ``what`` gives the hint's advice already, as a broker's own message may
        (KafScale's say what to do): the hint's first clause, up to its first colon, is in
        it. Then the hint is left out rather than said twice."""
        first = (self.hint or "").split(": ", 1)[0].strip().lower()
        return bool(first) and first in self.what.lower()


def print_error(err: CliError) -> None:
    """One ``kafscale: error: ...`` line on stderr."""
    import sys

    print(f"kafscale: error: {err}", file=sys.stderr)
