"""The options of the kafscale data source: parsed and checked on the driver into a
:class:`ReadOptions`, with errors that say what was expected; offsets in the Kafka source's JSON
shape."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypedDict, TypeGuard

if TYPE_CHECKING:
    from kafscale.segment import SegmentSource
    from kafscale.spark.planning import PartitionLog


EARLIEST = -2  # offset placeholders of Spark's Kafka source JSON
LATEST = -1
TopicPartition = tuple[str, int]
OffsetsJson = dict[str, dict[str, int]]  # {"topic": {"0": 12}}: the Kafka source's offset shape

_OFFSETS_EXAMPLE = '{"orders": {"0": 12, "1": -2}} (-2 = earliest, -1 = latest)'
_ASSIGN_EXAMPLE = '{"orders": [0, 1]}'
_SUBSCRIPTION_OPTIONS = ("subscribe", "subscribePattern", "assign")


class StorageOptions(TypedDict, total=False):
    """The storage keywords of ``SegmentSource.open`` that options gave (the others come from
    the AWS environment variables)."""

    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str
    session_token: str


_StorageKeyword = Literal[
    "endpoint", "region", "access_key_id", "secret_access_key", "session_token"
]
# Spark option → keyword of SegmentSource.open
_STORAGE_OPTIONS: dict[str, _StorageKeyword] = {
    "endpoint": "endpoint",
    "region": "region",
    "accessKeyId": "access_key_id",
    "secretAccessKey": "secret_access_key",
    "sessionToken": "session_token",
}


class KafScaleOptionError(ValueError):
    """An option of the kafscale data source is missing, contradictory or malformed."""


class _Options:
    """Case-insensitive option lookup (Spark lower-cases keys; tests pass plain dicts) where an
    empty string counts as not given."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._values = {k.lower(): v for k, v in options.items() if v is not None and v != ""}

    def get(self, name: str) -> str | None:
        return self._values.get(name.lower())

    def flag(self, name: str, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        if text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
        raise KafScaleOptionError(f"kafscale: option {name} must be true or false, not {text!r}")

    def positive_int(self, name: str) -> int | None:
        text = self.get(name)
        if text is None:
            return None
        value = _int_or_none(text)
        if value is None or value < 1:
            raise KafScaleOptionError(
                f"kafscale: option {name} must be a whole number of at least 1, not {text!r}"
            )
        return value

    def timestamp_ms(self, name: str) -> int | None:
        text = self.get(name)
        if text is None:
            return None
        value = _int_or_none(text)
        if value is None or value < 0:
            raise KafScaleOptionError(
                f"kafscale: option {name} must be a Unix timestamp in milliseconds "
                f"(e.g. 1700000000000), not {text!r}"
            )
        return value


def _int_or_none(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions a query reads: a list of topics, a regex over topic names, or an
    explicit assignment of partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[TopicPartition, ...] = ()

    def includes(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics or any(t == topic for t, _ in self.assignment)

    def select(self, source: SegmentSource) -> dict[str, list[int]]:
        """{topic: partitions} to read. Topics without data are left out: like Spark's Kafka
        source, subscribing to a topic that does not exist reads nothing."""
        if self.assignment:
            chosen: dict[str, list[int]] = {}
            for topic, partition in self.assignment:
                chosen.setdefault(topic, []).append(partition)
            return chosen
        if self.pattern is not None:
            names = [t for t in source.topics() if re.fullmatch(self.pattern, t)]
        else:
            names = list(self.topics)
        return {topic: source.partitions(topic) for topic in sorted(set(names))}


def _parse_subscription(opts: _Options) -> Subscription:
    given = [name for name in _SUBSCRIPTION_OPTIONS if opts.get(name) is not None]
    if len(given) != 1:
        raise KafScaleOptionError(
            "kafscale: give exactly one of the options subscribe (comma-separated topics), "
            f"subscribePattern (a regular expression) or assign (JSON like {_ASSIGN_EXAMPLE}); "
            f"got {', '.join(given) or 'none of them'}"
        )
    name = given[0]
    text = opts.get(name) or ""
    if name == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise KafScaleOptionError(f"kafscale: option subscribe names no topic: {text!r}")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(text)
        except re.error as e:
            raise KafScaleOptionError(
                f"kafscale: option subscribePattern is not a valid regular expression ({e}): "
                f"{text!r}"
            ) from None
        return Subscription(pattern=text)
    return Subscription(assignment=_parse_assignment(text))


def _parse_assignment(text: str) -> tuple[TopicPartition, ...]:
    parsed = _json_option("assign", text, _ASSIGN_EXAMPLE)
    if (
        not isinstance(parsed, dict)
        or not parsed
        or not all(
            isinstance(parts, list) and all(_is_int(p) and p >= 0 for p in parts)
            for parts in parsed.values()
        )
    ):
        raise KafScaleOptionError(
            f"kafscale: option assign must map topics to partition lists, like "
            f"{_ASSIGN_EXAMPLE}; got {text!r}"
        )
    return tuple(sorted({(topic, p) for topic, parts in parsed.items() for p in parts}))


def _json_option(name: str, text: str, example: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise KafScaleOptionError(
            f"kafscale: option {name} is not valid JSON ({e.msg} at character {e.pos}): "
            f"{text!r}; expected e.g. {example}"
        ) from None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends in each partition: a timestamp, else a per-partition offset
    from JSON, else ``default`` (EARLIEST or LATEST). Offsets outside the partition's data are
    clamped to it (retention may have removed the start; the end may not be written yet)."""

    default: int
    specific: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    def resolve(self, log: PartitionLog, source: SegmentSource) -> int:
        if self.timestamp_ms is not None:
            found = source.offset_for_timestamp(log.topic, log.partition, self.timestamp_ms)
            # no record at or after the timestamp: the partition's end (Kafka's "latest" strategy)
            return log.latest if found is None else log.clamp(found)
        wanted = self.specific.get((log.topic, log.partition), self.default)
        if wanted == EARLIEST:
            return log.earliest
        if wanted == LATEST:
            return log.latest
        return log.clamp(wanted)


def parse_offsets(name: str, text: str | None, default: int) -> OffsetSpec:
    """startingOffsets / endingOffsets: "earliest", "latest" or the Kafka source's JSON.
    Partitions the JSON does not name use ``default``."""
    if text is None:
        return OffsetSpec(default)
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(EARLIEST if word == "earliest" else LATEST)
    parsed = _json_option(name, text, f"'earliest', 'latest' or {_OFFSETS_EXAMPLE}")
    return OffsetSpec(default, offsets_from_json(parsed, name=name))


def offsets_from_json(parsed: object, *, name: str = "offsets") -> dict[TopicPartition, int]:
    """{"topic": {"0": 12}} → {("topic", 0): 12}, refusing anything of another shape."""
    if not isinstance(parsed, dict):
        raise _bad_offsets(name, parsed)
    out: dict[TopicPartition, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise _bad_offsets(name, parsed)
        for partition, offset in partitions.items():
            number = _int_or_none(partition) if isinstance(partition, str) else None
            if number is None or number < 0 or not _is_int(offset) or offset < EARLIEST:
                raise _bad_offsets(name, parsed)
            out[(topic, number)] = offset
    return out


def _bad_offsets(name: str, parsed: object) -> KafScaleOptionError:
    return KafScaleOptionError(
        f"kafscale: option {name} must map topics to {{partition: offset}} objects, like "
        f"{_OFFSETS_EXAMPLE}; got {json.dumps(parsed)}"
    )


def offsets_to_json(positions: Mapping[TopicPartition, int]) -> OffsetsJson:
    """The Kafka source's JSON shape, in one canonical key order: Spark tells a new micro-batch
    from an old one by comparing these offsets as JSON text."""
    out: OffsetsJson = {}
    for topic, partition in sorted(positions):
        out.setdefault(topic, {})[str(partition)] = positions[(topic, partition)]
    return out


@dataclass(frozen=True)
class ReadOptions:
    """Every option of one query, parsed and checked on the driver (picklable: the executors get
    a copy to open the storage with)."""

    location: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    include_headers: bool = False
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    # None: SegmentSource's default bound on what one compressed batch may expand to
    max_uncompressed_batch_bytes: int | None = None
    storage: StorageOptions = field(default_factory=StorageOptions)
    etcd_endpoints: str | None = None
    namespace: str = ""
    # What the reader sees of transactions (SegmentSource.open's isolation_level).
    isolation_level: str = "read_committed"

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        opts = _Options(options)
        location, namespace = _parse_location(opts)
        subscription = _parse_subscription(opts)
        # Spark's Kafka source defaults: a batch reads everything, a stream only what comes next
        starting = _parse_start_or_end(opts, "starting", EARLIEST if not streaming else LATEST)
        if streaming:
            _refuse_ending_options(opts)
            ending = OffsetSpec(LATEST)
        else:
            ending = _parse_start_or_end(opts, "ending", LATEST)
        for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
            _check_topics_subscribed(spec, name, subscription)
        etcd_endpoints = opts.get("etcd.endpoints")
        given = opts.get("namespace")
        if given and given != namespace:
            raise KafScaleOptionError(
                f"kafscale: the option namespace ({given!r}) is not the namespace of "
                f"{location!r} ({namespace!r}): a cluster's metadata is under the namespace its "
                "storage is; leave the option out"
            )
        return cls(
            location=location,
            subscription=subscription,
            starting=starting,
            ending=ending,
            include_headers=opts.flag("includeHeaders", False),
            min_partitions=opts.positive_int("minPartitions"),
            max_offsets_per_trigger=opts.positive_int("maxOffsetsPerTrigger"),
            max_uncompressed_batch_bytes=opts.positive_int("maxUncompressedBatchBytes"),
            storage=_storage_options(opts),
            etcd_endpoints=etcd_endpoints,
            namespace=namespace,
            isolation_level=_parse_isolation(opts),
        )


def _parse_isolation(opts: _Options) -> str:
    from kafscale.segment import check_isolation_level

    level = opts.get("isolationLevel") or "read_committed"
    try:
        check_isolation_level(level)
    except ValueError as exc:
        raise KafScaleOptionError(f"kafscale: the option isolationLevel: {exc}") from None
    return level


def _storage_options(opts: _Options) -> StorageOptions:
    storage: StorageOptions = {}
    for name, keyword in _STORAGE_OPTIONS.items():
        value = opts.get(name)
        if value:
            storage[keyword] = value
    return storage


def _parse_location(opts: _Options) -> tuple[str, str]:
    """The location and its namespace (s3://bucket/a/b → "a/b"; <data_dir>/<namespace> → the
    last path component), parsed by the core's one parser of storage URLs."""
    location = opts.get("path")
    if location is None:
        raise KafScaleOptionError(
            "kafscale: say where the segments are: .load('s3://bucket/namespace') or "
            ".load('<data_dir>/<namespace>') for a broker's local data directory"
        )
    from kafscale._core import StorageLocation

    try:
        parsed = StorageLocation(location)
    except ValueError as exc:
        raise KafScaleOptionError(f"kafscale: {exc}") from None
    local = parsed.directory is not None
    if local and not os.path.isdir(os.path.join(parsed.directory or "", parsed.namespace)):
        raise KafScaleOptionError(
            f"kafscale: {location!r} is not a directory; load() takes s3://bucket/namespace or "
            "a broker's local data directory followed by the namespace, e.g. "
            "./kafscale-data/default"
        )
    if parsed.scheme == "memory":
        raise KafScaleOptionError(
            f"kafscale: {location!r} is a broker's own memory, which nothing else can read; "
            "load() takes s3://bucket/namespace or a broker's data directory followed by the "
            "namespace"
        )
    return location, parsed.namespace


def _parse_start_or_end(opts: _Options, which: str, default: int) -> OffsetSpec:
    # As in Spark's Kafka source, a timestamp takes precedence over offsets.
    timestamp = opts.timestamp_ms(f"{which}Timestamp")
    if timestamp is not None:
        return OffsetSpec(default, timestamp_ms=timestamp)
    return parse_offsets(f"{which}Offsets", opts.get(f"{which}Offsets"), default)


def _refuse_ending_options(opts: _Options) -> None:
    for name in ("endingOffsets", "endingTimestamp"):
        if opts.get(name) is not None:
            raise KafScaleOptionError(
                f"kafscale: option {name} applies to batch reads (spark.read) only; a stream "
                "has no end"
            )


def _check_topics_subscribed(spec: OffsetSpec, name: str, subscription: Subscription) -> None:
    strangers = sorted({t for t, _ in spec.specific if not subscription.includes(t)})
    if strangers:
        raise KafScaleOptionError(
            f"kafscale: option {name} names topics the query does not read: {', '.join(strangers)}"
        )
