"""Logging for the Python side, formatted like the Rust core's tracing output so one stderr
stream reads as one log.

text: ``2026-11-21T13:10:00.123Z  INFO kafscale.broker: message`` (level right-aligned to 5)
json: one object per line: ``{"timestamp", "level", "target", "message"}`` (+ ``exception``)

Either way one event is one line (a traceback follows on its own lines in the text format): the
text format escapes control characters in the message, as the core does, so a name a client
chose (a topic with a newline in it) cannot forge a log line; JSON escapes them itself.
"""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["TRACE", "configure_python_logging", "setup"]

# Python has no TRACE level; register one below DEBUG so "trace" means something on this side.
TRACE = 5
logging.addLevelName(TRACE, "TRACE")

_LEVELS = {
    "trace": TRACE,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
# tracing's level names (WARN, not WARNING; there is no CRITICAL).
_NAMES = {TRACE: "TRACE", logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN"}


# C0 control characters and DEL, escaped as the core escapes them; also C1 controls and the
# Unicode line separators, at which some log viewers break lines.
_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)},
    **{c: f"\\u{c:04x}" for c in (*range(0x80, 0xA0), 0x2028, 0x2029)},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def _escape_controls(text: str) -> str:
    return text.translate(_ESCAPES)


def _level_name(levelno: int) -> str:
    return _NAMES.get(levelno, "ERROR" if levelno >= logging.ERROR else "INFO")


def _timestamp(created: float) -> str:
    # RFC 3339 UTC with milliseconds, as the core prints.
    ms = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{ms:03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{_timestamp(record.created)} {_level_name(record.levelno):>5} "
            f"{record.name}: {_escape_controls(record.getMessage())}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "timestamp": _timestamp(record.created),
            "level": _level_name(record.levelno),
            "target": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


def configure_python_logging(level: str, fmt: str) -> None:
    """Route Python logging to stderr with the given level (trace/debug/info/warn/error) and
    format (text/json), replacing any handlers already on the root logger."""
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}; use text or json")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(_LEVELS[level])


def setup(level: str, fmt: str) -> None:
    """Configure Python logging and the core's tracing subscriber identically."""
    from kafscale import _core  # the extension; imported here so config-only use works without it

    configure_python_logging(level, fmt)
    _core.init_logging(level, fmt)
