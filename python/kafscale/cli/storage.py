"""Where segments are read from: a SegmentSource for the LOCATION argument, and storage
failures turned into messages that say what to check."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CliError

if TYPE_CHECKING:  # imported when used: the Kafka commands run without the Rust core
    from kafscale._core import StorageLocation
    from kafscale.segment import SegmentSource


def add_location_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "location",
        metavar="LOCATION",
        help="s3://BUCKET/NAMESPACE[?region=REGION&endpoint=URL], or a broker's data "
        "directory joined with its namespace (e.g. ./kafscale-data/default)",
    )
    parser.add_argument(
        "--s3-endpoint",
        metavar="URL",
        help="S3-compatible server, e.g. "
        "http://127.0.0.1:9000 (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL "
        "or AWS itself)",
    )
    parser.add_argument(
        "--s3-region",
        metavar="REGION",
        help="bucket region (default: AWS_REGION / AWS_DEFAULT_REGION or us-east-1)",
    )
    parser.add_argument(
        "--etcd-endpoints",
        metavar="URLS",
        help="a cluster's etcd (comma-separated URLs): what is committed, so that the newest "
        "records, not compacted yet, are read too (a single broker's data directory says so "
        "itself)",
    )


def open_source(args: argparse.Namespace) -> SegmentSource:
    try:
        from kafscale.segment import SegmentSource
    except ImportError as exc:
        raise CliError(
            f"the Rust core (kafscale._core) cannot be loaded: {exc}",
            "install KafScale with `pip install .` (or the wheel) in this environment",
        ) from None
    try:
        return SegmentSource.open(
            args.location,
            endpoint=args.s3_endpoint,
            region=args.s3_region,
            etcd_endpoints=args.etcd_endpoints,
        )
    except ValueError as exc:  # the reader's own message says what a location looks like
        raise CliError(str(exc)) from None


@contextlib.contextmanager
def storage(location: str) -> Iterator[None]:
    """OSError from the object store, and SegmentError from a damaged object that a listing or
    a read ran into, as CliErrors that say what to check."""
    from kafscale.segment import SegmentError

    try:
        yield
    except SegmentError as exc:
        raise CliError(
            f"a damaged segment object: {exc}",
            f"`kafscale segments verify {location}` lists every problem",
        ) from None
    except BrokenPipeError:  # stdout closed by `| head`: not a storage problem
        raise
    except OSError as exc:
        if _parsed(location).scheme == "s3":
            hint = (
                "check the bucket name, --s3-endpoint, --s3-region and the "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY environment variables"
            )
        else:
            hint = "check that the directory exists and is readable"
        raise CliError(f"cannot read {location}: {exc}", hint) from None


def object_name(topic: str, partition: int, base_offset: int, generation: int | None) -> str:
    """The segment's key below the location (the layout of docs/design.md, 'Storage layout');
    a cleaning's carry its generation."""
    cleaning = "" if generation is None else f"-{generation:016x}"
    return f"{topic}/{partition}/segment-{base_offset:020d}{cleaning}.kfs"


WAL_FOLDER = "!wal"  # a namespace's write-ahead objects (no topic name has a "!")
NAMESPACE_HINT = (
    "give a broker's data directory joined with its namespace (the brokers' --s3-namespace, "
    "default: default), e.g. ./kafscale-data/default, or s3://BUCKET/NAMESPACE"
)


def stored_topics(source: SegmentSource) -> list[str]:
    """The topics under the location that have at least one partition with segments."""
    return [t for t in source.topics() if source.partitions(t)]


def nothing_stored(location: str) -> CliError:
    """The error for a location without a single segment, saying what it is instead: a
    directory of namespace directories (a broker's data directory itself is refused when the
    source is opened), or a namespace whose records are all still in write-ahead objects that
    no metadata says are committed."""
    parsed = _parsed(location)
    if parsed.directory is None:
        return CliError(f"no segments under {location}", NAMESPACE_HINT)
    root = Path(parsed.directory) / parsed.namespace
    try:
        namespaces = [d for d in sorted(root.iterdir()) if _namespace_dir(d)]
        if namespaces:
            paths = " or ".join(str(d) for d in namespaces)
            return CliError(
                f"no segments under {location}: it is a broker's data directory, and the "
                "segments are in its namespace directory",
                f"pass {paths}",
            )
        if (root / WAL_FOLDER).is_dir():
            return CliError(
                f"no segments under {location} yet, and no metadata that says which of its "
                f"write-ahead objects ({WAL_FOLDER}) are committed",
                "give the cluster's --etcd-endpoints, or retry once the brokers have compacted "
                "the records into segments",
            )
    except OSError:  # unreadable: the generic message
        pass
    return CliError(f"no segments under {location}", NAMESPACE_HINT)


def _parsed(location: str) -> StorageLocation:
    """A location the source was opened at (so it parses)."""
    from kafscale._core import StorageLocation

    return StorageLocation(location)


def _namespace_dir(path: Path) -> bool:
    """A namespace directory: a write-ahead log folder, or a topic folder with a partition
    folder (a number) in it."""
    if not path.is_dir():
        return False
    if (path / WAL_FOLDER).is_dir():
        return True
    return any(
        t.is_dir() and any(p.name.isdigit() and p.is_dir() for p in t.iterdir())
        for t in path.iterdir()
    )


def partitions_of(source: SegmentSource, topic: str, only: int | None) -> list[int]:
    partitions = source.partitions(topic)
    if not partitions:
        if not stored_topics(source):
            raise nothing_stored(source.location)
        raise CliError(
            f"no segments of topic {topic} under {source.location}",
            f"`kafscale segments ls {source.location}` lists the topics stored there",
        )
    if only is not None:
        if only not in partitions:
            raise CliError(
                f"no segments of {topic}/{only} under {source.location} (partitions with "
                f"segments: {', '.join(map(str, partitions))})"
            )
        return [only]
    return partitions
