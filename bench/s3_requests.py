"""The S3 requests a broker made, counted from moto's request log (one line per request), by
operation and kind of object: what an S3 bill charges for. Counted outside the broker, so the
same count applies to any build under comparison.

Operations: PUT (uploads and copies), GET (whole, ranged and HEAD), LIST, DELETE, POST
(multi-object deletes, multipart uploads). Objects: wal, segment, index, producer_state,
published_metadata, other (the KafScale layout).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlsplit

OPERATIONS = ("PUT", "GET", "LIST", "DELETE", "POST")
GIB = 1 << 30

# werkzeug's access log: 127.0.0.1 - - [date] "PUT /bucket/key HTTP/1.1" 200 -
_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/[0-9.]+')


def object_kind(key: str) -> str:
    parts = key.split("/")
    name = parts[-1]
    if "!meta" in parts:
        return "published_metadata"
    if "!wal" in parts:
        return "wal"
    if name.endswith(".kfs"):
        return "segment"
    if name.endswith(".index"):
        return "index"
    if name.startswith("producers-"):
        return "producer_state"
    return "other"


def classify(method: str, target: str) -> tuple[str, str]:
    """(operation, object kind) of one request line."""
    url = urlsplit(target)
    path = unquote(url.path).lstrip("/")
    _bucket, _, key = path.partition("/")
    if method in ("GET", "HEAD") and not key:
        return "LIST", "other"
    operation = "GET" if method == "HEAD" else method
    return operation, object_kind(key)


class S3Requests:
    """Counts the requests in moto's log from a mark on: ``mark()``, then ``since(mark)``."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path

    def mark(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def since(self, mark: int) -> Counter[tuple[str, str]]:
        counts: Counter[tuple[str, str]] = Counter()
        with open(self.log_path, "rb") as log:
            log.seek(mark)
            for raw in log:
                found = _LINE.search(raw.decode("utf-8", "replace"))
                if found:
                    counts[classify(found.group(1), found.group(2))] += 1
        return counts


def per_gib(counts: Counter[tuple[str, str]], nbytes: int) -> dict[str, object]:
    """Every operation per GiB (all of them, zeros too), and each operation's split by object."""
    gib = nbytes / GIB
    out: dict[str, object] = {}
    for op in OPERATIONS:
        total = sum(n for (o, _), n in counts.items() if o == op)
        out[op] = round(total / gib, 1) if gib else None
        kinds = {k: round(n / gib, 1) for (o, k), n in sorted(counts.items()) if o == op and gib}
        if kinds:
            out[f"{op}_by_object"] = kinds
    return out
