"""``kafscale segments ls|dump|verify``: a topic's log read straight from object storage
(``s3://bucket/namespace``) or a single broker's ``<data dir>/<namespace>``, with no broker
involved: its segment objects and the committed write-ahead runs after them (what a single
broker publishes next to its data says which are committed; for a cluster, give
--etcd-endpoints).

S3 settings not given as flags come from the standard AWS environment variables
(AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION / AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); credentials are never taken as flags, so that they
stay out of shell histories and process lists.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
from typing import TYPE_CHECKING, NotRequired, TypedDict

from . import output, verify
from .args import non_negative_int, plain, positive_int
from .errors import EXIT_OK, CliError
from .storage import (
    add_location_flags,
    nothing_stored,
    object_name,
    open_source,
    partitions_of,
    storage,
)

if TYPE_CHECKING:  # imported when used: the Kafka commands run without the Rust core
    from kafscale.segment import SegmentSource

    from .args import Subcommands

TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def register(commands: Subcommands) -> None:
    segments = commands.add_parser(
        "segments",
        help="list, dump and verify segment objects (S3 or a data directory)",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = segments.add_subparsers(dest="action", metavar="ACTION", title="actions")

    p = sub.add_parser(
        "ls", help="partitions under a location, or the segments of a topic's partitions"
    )
    add_location_flags(p)
    p.add_argument("--topic", help="list this topic's segments (else: one line per partition)")
    p.add_argument("--partition", type=non_negative_int, metavar="P", help="only this partition")
    output.add_output_flag(p)
    p.set_defaults(func=cmd_ls, parser=p)

    p = sub.add_parser("dump", help="print a partition's records")
    add_location_flags(p)
    p.add_argument("--topic", required=True, help="the topic")
    p.add_argument(
        "--partition", type=non_negative_int, required=True, metavar="P", help="its partition"
    )
    p.add_argument(
        "--from-offset",
        type=non_negative_int,
        metavar="N",
        help="first offset (default: the first stored)",
    )
    p.add_argument("--max-records", type=positive_int, metavar="N", help="stop after N records")
    p.add_argument(
        "--output",
        "-o",
        choices=["text", "json"],
        default="text",
        help="text (default) or json: one object per line, bytes as base64 when not UTF-8",
    )
    p.set_defaults(func=cmd_dump)

    verify.register(sub)


# ---------------------------------------------------------------------------------------------
# ls


def cmd_ls(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        args.parser.error("--partition needs --topic")
    source = open_source(args)
    if args.topic:
        with storage(args.location):
            segments = segment_rows(source, args)
        if not segments:  # partition folders without a single segment object
            raise CliError(
                f"no segments of topic {args.topic} under {args.location}",
                f"`kafscale segments verify {args.location} --topic {args.topic}` reports "
                "what its partitions hold",
            )
        if args.output == output.JSON:
            output.print_json(segments)
            return EXIT_OK
        output.print_table(
            ["TOPIC", "PARTITION", "BASE-OFFSET", "END-OFFSET", "SIZE", "OBJECT"],
            [
                [
                    r["topic"],
                    r["partition"],
                    r["base_offset"],
                    r["end_offset"],
                    output.human_bytes(r["size"]),
                    r["object"],
                ]
                for r in segments
            ],
        )
        return EXIT_OK
    with storage(args.location):
        partitions = partition_rows(source)
    if not partitions:
        raise nothing_stored(args.location)
    if args.output == output.JSON:
        output.print_json(partitions)
        return EXIT_OK
    output.print_table(
        ["TOPIC", "PARTITION", "SEGMENTS", "WAL-RUNS", "FIRST-OFFSET", "END-OFFSET", "SIZE"],
        [
            [
                r["topic"],
                r["partition"],
                r["segments"],
                r["wal_runs"],
                r["first_offset"],
                r["end_offset"],
                output.human_bytes(r["size"]),
            ]
            for r in partitions
        ],
    )
    return EXIT_OK


class PartitionRow(TypedDict):
    topic: str
    partition: int
    segments: int
    wal_runs: int
    first_offset: int
    end_offset: int
    size: int


class SegmentRow(TypedDict):
    topic: str
    partition: int
    base_offset: int
    end_offset: int
    size: int
    object: str


def partition_rows(source: SegmentSource) -> list[PartitionRow]:
    rows: list[PartitionRow] = []
    for topic in source.topics():
        for p in source.partitions(topic):
            log = source.log(topic, p)
            if log.end_offset > log.log_start_offset:
                rows.append(
                    {
                        "topic": topic,
                        "partition": p,
                        "segments": len(log.segments),
                        "wal_runs": len(log.runs),
                        "first_offset": log.log_start_offset,
                        "end_offset": log.end_offset,
                        "size": sum(s.size for s in log.segments) + sum(r.size for r in log.runs),
                    }
                )
    return rows


def segment_rows(source: SegmentSource, args: argparse.Namespace) -> list[SegmentRow]:
    """The segments of each chosen partition, then its committed write-ahead runs (object:
    the write-ahead object's key)."""
    rows: list[SegmentRow] = []
    for p in partitions_of(source, args.topic, args.partition):
        log = source.log(args.topic, p)
        pieces = [
            (
                s.base_offset,
                s.end_offset,
                s.size,
                object_name(s.topic, s.partition, s.base_offset, s.generation),
            )
            for s in log.segments
        ]
        pieces += [(r.base_offset, r.end_offset, r.size, r.object) for r in log.runs]
        rows += [
            {
                "topic": args.topic,
                "partition": p,
                "base_offset": base,
                "end_offset": end,
                "size": size,
                "object": name,
            }
            for base, end, size, name in pieces
        ]
    return rows


# ---------------------------------------------------------------------------------------------
# dump


def cmd_dump(args: argparse.Namespace) -> int:
    from kafscale.segment import SegmentError

    source = open_source(args)
    with storage(args.location):
        (partition,) = partitions_of(source, args.topic, args.partition)
        log = source.log(args.topic, partition)
        start = args.from_offset if args.from_offset is not None else log.log_start_offset
        end = log.end_offset
        if start >= end:
            output.note(f"{args.topic}/{partition} ends at offset {end}: nothing from {start}")
            return EXIT_OK
        left = args.max_records
        batch_rows = min(left or 10_000, 10_000)
        try:
            batches = source.read(
                args.topic, partition, start, end, include_headers=True, batch_rows=batch_rows
            )
            for batch in batches:
                for row in batch.to_pylist():
                    print_record(row, args.output)
                    if left is not None:
                        left -= 1
                        if left == 0:
                            return EXIT_OK
        except SegmentError as exc:
            raise CliError(
                f"a damaged segment stops the dump: {exc}",
                f"`kafscale segments verify {args.location} --topic {args.topic}` lists every "
                "problem",
            ) from None
    return EXIT_OK


def printable(raw: bytes) -> str | None:
    """The text, when ``raw`` is UTF-8 without control characters (tabs and newlines are
    fine); else None."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if all(c.isprintable() or c in "\t\n\r" for c in text):
        return text
    return None


def text_bytes(raw: bytes | None) -> str:
    """For people: null, a JSON-quoted string, or hex:... for binary data."""
    if raw is None:
        return "null"
    text = printable(raw)
    return json.dumps(text, ensure_ascii=False) if text is not None else f"hex:{raw.hex()}"


def json_bytes(raw: bytes | None, name: str) -> dict[str, str | None]:
    """For scripts: {name: text} for UTF-8, {name: base64, name_encoding: "base64"} else."""
    if raw is None:
        return {name: None}
    text = printable(raw)
    if text is not None:
        return {name: text}
    return {name: base64.b64encode(raw).decode(), f"{name}_encoding": "base64"}


def iso_ms(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Header(TypedDict):
    key: str
    value: bytes | None


class Record(TypedDict):
    """A row of ``kafka_schema(include_headers=True)``, as pyarrow's ``to_pylist`` gives it."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: dt.datetime
    timestampType: int
    headers: NotRequired[list[Header] | None]


def print_record(row: Record, mode: str) -> None:
    headers = row.get("headers") or []
    if mode == "json":
        record: dict[str, object] = {
            "offset": row["offset"],
            "timestamp": iso_ms(row["timestamp"]),
            "timestamp_type": TIMESTAMP_TYPES.get(row["timestampType"], row["timestampType"]),
        }
        record |= json_bytes(row["key"], "key") | json_bytes(row["value"], "value")
        record["headers"] = [{"key": h["key"], **json_bytes(h["value"], "value")} for h in headers]
        output.print_json_line(record)
        return
    parts = [
        str(row["offset"]),
        iso_ms(row["timestamp"]),
        f"key={text_bytes(row['key'])}",
        f"value={text_bytes(row['value'])}",
    ]
    if headers:
        shown = ", ".join(f"{json.dumps(h['key'])}={text_bytes(h['value'])}" for h in headers)
        parts.append(f"headers=[{shown}]")
    print("  ".join(parts))
