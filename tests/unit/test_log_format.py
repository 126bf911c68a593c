"""Log lines cannot be forged through a name a client chose: the text format escapes control
characters in the message (a traceback still follows on its own lines), JSON stays valid JSON
that reads back as the original."""

from __future__ import annotations

import json
import logging
import sys

from kafscale.log import JsonFormatter, TextFormatter

FORGED = "orders\n2026-01-01T00:00:00.000Z ERROR kafscale.broker: forged\r\x1b[2J\x85\u2028"


def record(exc_info=None) -> logging.LogRecord:
    return logging.LogRecord(
        "kafscale.admin", logging.INFO, __file__, 1, "deleted topic %s", (FORGED,), exc_info
    )


def test_text_lines_show_control_characters_escaped() -> None:
    line = TextFormatter().format(record())
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.endswith(
        "INFO kafscale.admin: deleted topic orders\\n2026-01-01T00:00:00.000Z ERROR "
        "kafscale.broker: forged\\r\\x1b[2J\\u0085\\u2028"
    )


def test_a_traceback_still_follows_on_its_own_lines() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        text = TextFormatter().format(record(sys.exc_info()))
    first, *rest = text.split("\n")
    assert first.endswith("\\u2028") and rest[0] == "Traceback (most recent call last):"


def test_json_stays_one_valid_object() -> None:
    line = JsonFormatter().format(record())
    assert "\n" not in line
    assert json.loads(line)["message"] == f"deleted topic {FORGED}"
