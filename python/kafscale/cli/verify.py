"""``kafscale segments verify``: check every segment of every partition and report every
problem, not just the first.

Within each segment: the header, each batch's CRC, that batches follow each other, the footer
and segment CRC, and its ``.index``. Across segments: that they join up (a segment must start
right after the last offset the previous one holds, else offsets are missing or stored twice)
and that each one's first record is at its base offset; the first segment of a partition may
start above 0 (retention removed older ones). An ``.index`` object whose segment is gone is a
problem too.

Exit code 0 when nothing was found, 1 when anything was; one summary line either way.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from . import output
from .args import non_negative_int, plain
from .errors import EXIT_FAILED, EXIT_OK
from .progress import Progress
from .storage import (
    add_location_flags,
    nothing_stored,
    object_name,
    open_source,
    partitions_of,
    storage,
)

if TYPE_CHECKING:  # imported when used: the Kafka commands run without the Rust core
    from kafscale.segment import SegmentCheck, SegmentObject, SegmentSource

    from .args import Subcommands


@dataclass(frozen=True)
class Finding:
    """One problem, where it is."""

    topic: str
    partition: int
    object: str
    offset: int | None
    byte: int | None
    message: str

    def line(self) -> str:
        where = [f"offset {self.offset}"] if self.offset is not None else []
        where += [f"byte {self.byte}"] if self.byte is not None else []
        at = f" ({', '.join(where)})" if where else ""
        return f"PROBLEM {self.topic}/{self.partition} {self.object}{at}: {self.message}"


@dataclass
class Totals:
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "verify",
        help="check every segment (CRCs, index, gaps between segments); exit 1 on any problem",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_location_flags(p)
    p.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="only this topic (repeatable; default: every topic under LOCATION)",
    )
    p.add_argument(
        "--partition", type=non_negative_int, metavar="P", help="only this partition (with --topic)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--output",
        "-o",
        choices=["text", "json"],
        default="text",
        help="text (default: one PROBLEM line each, then a summary) or json (one document)",
    )
    p.set_defaults(func=cmd_verify, parser=p)


def chains(
    infos: list[SegmentObject], checks: list[SegmentCheck | None]
) -> list[tuple[list[SegmentObject], list[SegmentCheck | None]]]:
    """The partition's segments by who wrote them: compaction's, then each cleaning's of a
    compacted topic (for a minute after a cleaning, the segments it replaced are there too).
    Each is checked for gaps and overlaps on its own."""
    by_writer: dict[int | None, tuple[list[SegmentObject], list[SegmentCheck | None]]] = {}
    for info, check in zip(infos, checks, strict=True):
        chain, chain_checks = by_writer.setdefault(info.generation, ([], []))
        chain.append(info)
        chain_checks.append(check)
    return list(by_writer.values())


def joins(
    topic: str, partition: int, infos: list[SegmentObject], checks: list[SegmentCheck | None]
) -> list[Finding]:
    """Problems between and at the start of segments, from the checks of consecutive segments
    (``checks[i]`` is None when segment i could not be read at all). A cleaning's segments
    skip the offsets it removed: only overlaps are problems there."""
    if infos and infos[0].generation is not None:
        return overlaps(topic, partition, infos, checks)
    found: list[Finding] = []
    for i, (info, check) in enumerate(zip(infos, checks, strict=True)):
        name = check.object if check else object_name(topic, partition, info.base_offset, None)

        def add(offset: int, message: str, name: str = name) -> None:
            found.append(Finding(topic, partition, name, offset, None, message))

        base, first = info.base_offset, check.first_offset if check else None
        if first is not None and first > base:
            add(
                base,
                f"gap: {output.offsets(base, first - 1)} missing at the start of the segment "
                f"(its first record is at offset {first})",
            )
        elif first is not None and first < base:
            add(
                first,
                f"the segment's base offset is {base} but its first record is at offset {first}",
            )
        before = checks[i - 1] if i else None
        if before is None or before.last_offset is None:
            continue  # the first segment, or nothing readable before: its own problems say so
        expected = before.last_offset + 1
        if base > expected:
            add(
                expected,
                f"gap: {output.offsets(expected, base - 1)} missing between "
                f"{before.object} and this segment",
            )
        elif base < expected:
            add(
                base,
                f"overlap: the segment starts at offset {base} but {before.object} "
                f"already holds offsets up to {before.last_offset}",
            )
    return found


def overlaps(
    topic: str, partition: int, infos: list[SegmentObject], checks: list[SegmentCheck | None]
) -> list[Finding]:
    """A cleaning's segments whose records reach into the next one's offsets."""
    found: list[Finding] = []
    for info, before in zip(infos[1:], checks, strict=False):
        last = before.last_offset if before is not None else None
        if before is not None and last is not None and last >= info.base_offset:
            message = (
                f"overlap: the segment starts at offset {info.base_offset} but "
                f"{before.object} already holds offsets up to {last}"
            )
            name = object_name(topic, partition, info.base_offset, info.generation)
            found.append(Finding(topic, partition, name, info.base_offset, None, message))
    return found


def check_segment(
    source: SegmentSource, info: SegmentObject
) -> tuple[SegmentCheck | None, list[Finding]]:
    """(SegmentCheck or None, its problems as findings). A storage failure on one object is a
    finding too (the object may have gone since the listing), not the end of the walk."""
    try:
        check = source.verify(info.topic, info.partition, info.base_offset, info.generation)
    except OSError as exc:
        name = object_name(info.topic, info.partition, info.base_offset, info.generation)
        return None, [
            Finding(info.topic, info.partition, name, None, None, f"cannot read the object: {exc}")
        ]
    return check, [
        Finding(info.topic, info.partition, p.object, p.offset, p.byte, p.message)
        for p in check.problems
    ]


def orphans(source: SegmentSource, topic: str, partition: int) -> list[Finding]:
    """The partition's index objects without their segment; a storage failure is a finding."""
    try:
        problems = source.orphan_indexes(topic, partition)
    except OSError as exc:
        return [
            Finding(topic, partition, f"{topic}/{partition}/", None, None, f"cannot list: {exc}")
        ]
    return [Finding(topic, partition, p.object, p.offset, p.byte, p.message) for p in problems]


def cmd_verify(args: argparse.Namespace) -> int:
    if args.partition is not None and not args.topic:
        args.parser.error("--partition needs --topic")
    source = open_source(args)
    findings: list[Finding] = []
    with storage(args.location):
        plan = listing(source, args)
    total = Totals(partitions=sum(1 for infos in plan.values() if infos))
    progress = Progress(
        "verify",
        sum(len(infos) for infos in plan.values()),
        sum(s.size for infos in plan.values() for s in infos),
        enabled=not args.no_progress,
    )
    try:
        for (topic, partition), infos in plan.items():
            checks = []
            for info in infos:
                check, problems = check_segment(source, info)
                checks.append(check)
                if check is not None:
                    total.batches += check.batches
                    total.records += check.records
                total.segments += 1
                total.bytes += info.size
                report(progress, problems, findings, args.output)
                progress.advance(info.size, f"{topic}/{partition}@{info.base_offset}")
            for chain, chain_checks in chains(infos, checks):
                between = joins(topic, partition, chain, chain_checks)
                report(progress, between, findings, args.output)
            report(progress, orphans(source, topic, partition), findings, args.output)
    finally:
        progress.close()
    counts = ", ".join(
        [
            output.plural(total.partitions, "partition"),
            output.plural(total.segments, "segment"),
            output.plural(total.batches, "batch", "batches"),
            output.plural(total.records, "record"),
        ]
    )
    summary = f"verified {counts} ({output.human_bytes(total.bytes)}) under {args.location}: " + (
        f"{output.plural(len(findings), 'problem')} found" if findings else "no problems"
    )
    if args.output == output.JSON:
        found = [asdict(f) for f in findings]
        output.print_json({"location": args.location, **asdict(total), "problems": found})
        output.note(summary)
    else:
        print(summary)
    return EXIT_FAILED if findings else EXIT_OK


def report(progress: Progress, new: list[Finding], findings: list[Finding], mode: str) -> None:
    findings.extend(new)
    if mode != output.JSON:
        for f in new:
            progress.write(f.line())


def listing(
    source: SegmentSource, args: argparse.Namespace
) -> dict[tuple[str, int], list[SegmentObject]]:
    """{(topic, partition): its segment objects in offset order} of everything to verify, from
    the object listing alone: no object is read yet, so a damaged one hides nothing."""
    if args.topic:
        chosen = {t: partitions_of(source, t, args.partition) for t in dict.fromkeys(args.topic)}
    else:  # folders without partitions (a namespace, when given a data directory) are skipped
        chosen = {t: parts for t in source.topics() if (parts := source.partitions(t))}
        if not chosen:
            raise nothing_stored(args.location)
    return {(t, p): source.segment_objects(t, p) for t, parts in chosen.items() for p in parts}
