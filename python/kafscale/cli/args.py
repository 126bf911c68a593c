"""argparse types shared by the subcommands: each turns a bad value into a usage error
(exit code 2) whose message shows the expected form."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # What add_subparsers returns: each command registers its parser there (argparse does not
    # name the class publicly; typeshed does).
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def key_value(value: str) -> tuple[str, str]:
    """``retention.ms=60000`` -> ("retention.ms", "60000")."""
    key, sep, val = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE (e.g. retention.ms=60000)")
    return key.strip(), val.strip()


def non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number >= 0")
    return number


def positive_int(value: str) -> int:
    number = non_negative_int(value)
    if number == 0:
        raise argparse.ArgumentTypeError("0 is not allowed here: give a whole number >= 1")
    return number


def signed_int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None


def timestamp_ms(value: str) -> int:
    """An ISO 8601 date-time (``2025-01-31T12:00:00``, ``...Z``, ``...+02:00``) -> Unix ms.
    Without a zone it is local time, as Kafka's kafka-consumer-groups reads it."""
    text = value.strip()
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO 8601 date-time such as 2025-01-31T12:00:00Z "
            "(local time when no zone is given)"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, like Kafka's tool
    return int(when.timestamp() * 1000)


def topic_partitions(value: str) -> tuple[str, list[int] | None]:
    """``orders`` (every partition) or ``orders:0,2`` (those partitions), as Kafka's tool."""
    topic, sep, parts = value.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError(f"{value!r}: give TOPIC or TOPIC:PARTITION[,PARTITION]")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",")})
    except ValueError:
        partitions = [-1]
    if not partitions or partitions[0] < 0:
        raise argparse.ArgumentTypeError(
            f"{value!r}: partitions are whole numbers >= 0, e.g. orders:0,2"
        )
    return topic, partitions


def plain(doc: str | None) -> str:
    """A module docstring as --help text: without the reST literal marks."""
    return (doc or "").replace("``", "")
