"""Progress of long CLI work on stderr: a tqdm bar on a terminal, plain lines otherwise.

A bar redraws itself with carriage returns, which turns a log file or a CI transcript into one
endless line; so when stderr is not a terminal the same progress is printed as whole lines, at
most every ``LINE_EVERY_S`` seconds, plus a last line when the work is done. Results go to
stdout through :meth:`Progress.write`, which keeps them from being drawn over by the bar.

Sizes are binary (KiB, MiB, GiB) in the bar and the lines alike, as everywhere in the CLI:
tqdm's own scaling prints 1024-based counts with SI letters ("3.00M") next to a decimal rate
("1.57MB/s"), so the bar formats its sizes with :func:`human_bytes`.
"""

from __future__ import annotations

import os
import sys
import time
from functools import cache
from typing import TYPE_CHECKING, Never, TextIO, TypedDict

from .output import human_bytes, plural

if TYPE_CHECKING:
    from tqdm import tqdm

LINE_EVERY_S = 2.0


class Progress:
    """``total_bytes`` in ``total_items`` pieces (segments); ``advance`` after each piece."""

    def __init__(
        self,
        label: str,
        total_items: int,
        total_bytes: int,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.label = label
        self.total_items = total_items
        self.total_bytes = total_bytes
        self.items = 0
        self.bytes = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self._last_line = self.started
        self._bar = None
        if enabled and _is_terminal(self.stream):
            self._bar = _byte_bar()(
                total=total_bytes,
                unit="B",
                desc=label,
                file=self.stream,
                leave=True,
                bar_format=BAR_FORMAT,
                **_width(self.stream),
            )

    def advance(self, nbytes: int, where: str) -> None:
        self.items += 1
        self.bytes += nbytes
        if self._bar is not None:
            self._bar.set_postfix_str(where, refresh=False)
            self._bar.update(nbytes)
        elif self.enabled and time.monotonic() - self._last_line >= LINE_EVERY_S:
            self._last_line = time.monotonic()
            self._line(f"at {where}")

    def write(self, line: str, file: TextIO | None = None) -> None:
        """A result line (stdout by default) that the bar does not draw over."""
        out = file or sys.stdout
        if self._bar is not None:
            self._bar.write(line, file=out)
        else:
            print(line, file=out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.enabled:
            elapsed = time.monotonic() - self.started
            self._line(f"done in {elapsed:.1f}s")

    def _line(self, tail: str) -> None:
        share = f" ({100 * self.bytes // self.total_bytes}%)" if self.total_bytes else ""
        print(
            f"{self.label}: {self.items}/{plural(self.total_items, 'segment')}, "
            f"{human_bytes(self.bytes)} of {human_bytes(self.total_bytes)}{share}, {tail}",
            file=self.stream,
            flush=True,
        )


# tqdm's default layout, with sizes and rate from human_bytes
BAR_FORMAT = "{l_bar}{bar}| {done}/{size} [{elapsed}<{remaining}, {speed}{postfix}]"


@cache
def _byte_bar() -> type[tqdm[Never]]:
    """A tqdm bar class whose format has ``done``, ``size`` and ``speed`` in binary units
    (tqdm is imported only when a bar is drawn)."""
    from tqdm import tqdm

    class ByteBar(tqdm):  # type: ignore[type-arg]
        @property
        def format_dict(self) -> dict[str, object]:
            info = dict(super().format_dict)
            n, elapsed = info["n"] or 0, info["elapsed"] or 0
            rate = info["rate"] or (n / elapsed if elapsed else None)
            info["done"] = human_bytes(int(n))
            info["size"] = human_bytes(int(info["total"] or 0))
            info["speed"] = f"{human_bytes(int(rate))}/s" if rate is not None else "? B/s"
            return info

    return ByteBar


class _Size(TypedDict, total=False):
    """The bar-size keywords of tqdm."""

    dynamic_ncols: bool
    ncols: int
    nrows: int


def _width(stream: TextIO) -> _Size:
    """Follow the terminal's size; a terminal that reports none (a fresh pty, some CI runners)
    gets 80x24, since tqdm hides a bar on a screen of zero rows."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        size = os.terminal_size((0, 0))
    return {"dynamic_ncols": True} if size.columns and size.lines else {"ncols": 80, "nrows": 24}


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False
