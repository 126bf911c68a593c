"""Where segments are read from: a SegmentSource for the LOCATION argument, and storage
failures turned into messages that say what to check."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import CliError

if TYPE_CHECKING:  # imported when used: the Kafka commands run without the Rust core
    from kafscale.segment import SegmentSource


def add_location_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "location",
        metavar="LOCATION",
        help="s3://BUCKET/NAMESPACE, or a broker's data directory joined with its namespace "
        "(e.g. ./kafscale-data/default)",
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


def open_source(args: argparse.Namespace) -> SegmentSource:
    try:
        from kafscale.segment import SegmentSource
    except ImportError as exc:
        raise CliError(
            f"the Rust core (kafscale._core) cannot be loaded: {exc}",
            "install KafScale with `pip install .` (or the wheel) in this environment",
        ) from None
    try:
        return SegmentSource.open(args.location, endpoint=args.s3_endpoint, region=args.s3_region)
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
        if location.startswith("s3://"):
            hint = (
                "check the bucket name, --s3-endpoint, --s3-region and the "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY environment variables"
            )
        else:
            hint = "check that the directory exists and is readable"
        raise CliError(f"cannot read {location}: {exc}", hint) from None


def object_name(topic: str, partition: int, base_offset: int) -> str:
    """The segment's key below the location (the layout of the README's 'Storage layout')."""
    return f"{topic}/{partition}/segment-{base_offset:020d}.kfs"


def partitions_of(source: SegmentSource, topic: str, only: int | None) -> list[int]:
    partitions = source.partitions(topic)
    if not partitions:
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
