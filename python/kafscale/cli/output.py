"""How results are printed: aligned tables for people, JSON for scripts (``--output json``).

Tables go to stdout with a header row and two spaces between columns (the shape of Kafka's own
tools); a missing value prints as ``-``. JSON is one document (``print_json``) or, for record
dumps, one object per line, so that ``jq`` and line-oriented tools can stream it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

TABLE = "table"
JSON = "json"


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        "-o",
        choices=[TABLE, JSON],
        default=TABLE,
        help="table (default, for people) or json (for scripts)",
    )


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], file: TextIO | None = None
) -> None:
    """Left-aligned columns; the last column is not padded (no trailing blanks)."""
    out = file or sys.stdout
    text = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    for row in [list(headers), *text]:
        padded = [v.ljust(widths[i]) for i, v in enumerate(row[:-1])]
        print("  ".join([*padded, row[-1]]).rstrip(), file=out)


def print_json(document: object, file: TextIO | None = None) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False), file=file or sys.stdout)


def print_json_line(document: object, file: TextIO | None = None) -> None:
    print(json.dumps(document, ensure_ascii=False), file=file or sys.stdout)


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB' (binary units, as the broker's size settings use)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def note(message: str) -> None:
    """A remark for the person at the terminal (stderr, so stdout stays parseable)."""
    print(f"kafscale: {message}", file=sys.stderr)


def plural(n: int, word: str, words: str | None = None) -> str:
    """plural(1, "segment") -> "1 segment"; plural(3, "batch", "batches") -> "3 batches".
    Every count the CLI shows a person goes through it."""
    return f"{n} {word}" if n == 1 else f"{n} {words or word + 's'}"


def offsets(first: int, last: int) -> str:
    """offsets(7, 7) -> "offset 7"; offsets(7268, 7911) -> "offsets 7268 to 7911" (both
    included; never Rust's or Python's range syntax, which people read differently)."""
    return f"offset {first}" if first == last else f"offsets {first} to {last}"
