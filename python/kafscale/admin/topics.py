"""CreateTopics (v0-7) and DeleteTopics (v0-6) with KIP-4 semantics.

The handlers read the core's request objects (typed by ``_core.pyi``) and return
:class:`TopicResult` values; :mod:`kafscale.admin` turns those into the CreateTopics and
DeleteTopics answers. The extension is imported for the type checker only, so unit tests pass
fakes of the same shape.

Semantics (KIP-4, adapted to KafScale):
- Every topic gets its own result; one topic's failure never stops another.
- CreateTopics: a name given more than once is not created at all and gets one INVALID_REQUEST
  result (KIP-4 models the request as a map). DeleteTopics: duplicates are deleted once (a set).
- CreateTopics with num_partitions -1 (v4+, KIP-464) gets the broker's default partition count.
  Each result carries the topic as created (as validate_only would create it), which v5+
  answers report.
- DeleteTopics v6 names each topic by name or by id, as Kafka checks: both or neither is
  INVALID_REQUEST, an id no topic has UNKNOWN_TOPIC_ID. A result names the topic and its id.
- KafScale places partitions itself and durability comes from object storage, so manual replica
  assignments are rejected (INVALID_REPLICA_ASSIGNMENT; INVALID_REQUEST when counts are given
  too, per KIP-4) and the replication factor is validated but otherwise ignored.
- ``timeout_ms > 0`` bounds the wait; a topic not finished by then reports REQUEST_TIMED_OUT and
  its operation carries on. ``timeout_ms <= 0`` would allow an early REQUEST_TIMED_OUT, but a
  create/delete here is a single metadata write with nothing to propagate, so we wait for it
  (up to ``UNBOUNDED_WAIT_S``) and return the final result, which clients accept either way.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafscale.admin.topic_configs import Rejected, normalise
from kafscale.errors import ErrorCode

if TYPE_CHECKING:
    from kafscale import _core

__all__ = [
    "UNBOUNDED_WAIT_S",
    "CreatedTopic",
    "DeletedTopic",
    "TopicResult",
    "create_topics",
    "delete_topics",
]

log = logging.getLogger(__name__)

# Upper bound on the wait when the client sent timeout_ms <= 0 (see the module docstring).
UNBOUNDED_WAIT_S = 30.0

# Kafka's topic name rules (Topic.validate): 1-249 of [a-zA-Z0-9._-], not "." or "..".
_TOPIC_NAME_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True)
class CreatedTopic:
    """A topic as CreateTopics made it; validate_only: as it would make it (no id yet)."""

    topic_id: str | None
    partitions: int
    configs: Mapping[str, str]


@dataclass(frozen=True)
class TopicResult:
    """Outcome for one topic; ``error_message`` reaches clients where the version carries it."""

    name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    created: CreatedTopic | None = None


@dataclass(frozen=True)
class DeletedTopic:
    """Outcome for one entry of DeleteTopics: the topic's name and id where known (an unknown
    id has no name)."""

    name: str | None
    topic_id: str | None
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


# --- validation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


def validate_topic_name(name: str) -> None:
    if name in (".", "..") or not _TOPIC_NAME_RE.fullmatch(name):
        raise Rejected(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"invalid topic name {name!r}: use 1-249 characters from a-z A-Z 0-9 . _ - "
            "(and not '.' or '..')",
        )


def _partitions(num_partitions: int, default_partitions: int) -> int:
    if num_partitions == -1:
        return default_partitions
    if num_partitions < 1:
        raise Rejected(
            ErrorCode.INVALID_PARTITIONS,
            f"num_partitions must be >= 1, or -1 for the broker default "
            f"({default_partitions}); got {num_partitions}",
        )
    return num_partitions


def _check_replication_factor(replication_factor: int) -> None:
    if replication_factor == -1 or replication_factor >= 1:
        return
    raise Rejected(
        ErrorCode.INVALID_REPLICATION_FACTOR,
        f"replication_factor must be >= 1, or -1 for the default; got {replication_factor} "
        "(KafScale ignores the value: durability comes from object storage)",
    )


def _plan(topic: _core.CreatableTopic, default_partitions: int) -> _Plan:
    validate_topic_name(topic.name)
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            # KIP-4: an assignment or counts, never both.
            raise Rejected(
                ErrorCode.INVALID_REQUEST,
                "give either a replica assignment or num_partitions/replication_factor, not both",
            )
        raise Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "manual replica assignment is not supported: KafScale places partitions itself; "
            "send num_partitions (or -1 for the broker default) without an assignment",
        )
    partitions = _partitions(topic.num_partitions, default_partitions)
    _check_replication_factor(topic.replication_factor)
    return _Plan(topic.name, partitions, {k: normalise(k, v) for k, v in topic.configs.items()})


# --- execution ---------------------------------------------------------------------------------

# Operations that outlived their request's timeout keep running (KIP-4: they may still
# complete); hold references so they are not garbage-collected mid-flight.
_lingering: set[asyncio.Task[TopicResult]] = set()


def api_error_result(name: str, exc: BaseException) -> TopicResult:
    code = int(getattr(exc, "code", ErrorCode.UNKNOWN_SERVER_ERROR))
    message = getattr(exc, "message", None) or str(exc) or None
    return TopicResult(name, code, message)


def internal_error_result(name: str, op: str) -> TopicResult:
    log.exception("%s of topic %r failed unexpectedly", op, name)
    return TopicResult(
        name,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        f"internal error during {op} of topic {name!r}; see the broker log",
    )


async def _create_one(
    core: _core.Broker, plan: _Plan, validate_only: bool, api_error: type[BaseException]
) -> TopicResult:
    try:
        if validate_only:
            # Nothing is written; report what creating it now would report.
            if await core.topic(plan.name) is not None:
                return TopicResult(
                    plan.name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {plan.name!r} already exists"
                )
            return TopicResult(plan.name, created=CreatedTopic(None, plan.partitions, plan.configs))
        topic = await core.create_topic(plan.name, plan.partitions, plan.configs)
    except api_error as exc:
        return api_error_result(plan.name, exc)
    except Exception:
        return internal_error_result(plan.name, "creation")
    created = CreatedTopic(topic.topic_id, topic.partitions, dict(topic.configs))
    return TopicResult(plan.name, created=created)


async def _delete_one(
    core: _core.Broker, name: str, topic_id: str | None, api_error: type[BaseException]
) -> TopicResult:
    try:
        await core.delete_topic(name, topic_id)
    except api_error as exc:
        return api_error_result(name, exc)
    except Exception:
        return internal_error_result(name, "deletion")
    return TopicResult(name)


def wait_seconds(timeout_ms: int) -> float:
    return timeout_ms / 1000 if timeout_ms > 0 else UNBOUNDED_WAIT_S


async def run_bounded(
    jobs: Mapping[str, Awaitable[TopicResult]], timeout_s: float, op: str
) -> dict[str, TopicResult]:
    """Run per-topic jobs concurrently; those unfinished after ``timeout_s`` report
    REQUEST_TIMED_OUT and keep running in the background."""
    if not jobs:
        return {}
    tasks = {name: asyncio.ensure_future(job) for name, job in jobs.items()}
    await asyncio.wait(tasks.values(), timeout=timeout_s)
    results: dict[str, TopicResult] = {}
    for name, task in tasks.items():
        if not task.done():
            _lingering.add(task)
            task.add_done_callback(_lingering.discard)
            results[name] = TopicResult(
                name,
                ErrorCode.REQUEST_TIMED_OUT,
                f"{op} of topic {name!r} did not finish within {timeout_s * 1000:.0f} ms; it "
                "may still complete: check the topic list before retrying",
            )
        elif task.cancelled():
            results[name] = TopicResult(
                name, ErrorCode.UNKNOWN_SERVER_ERROR, f"{op} of topic {name!r} was cancelled"
            )
        else:
            results[name] = task.result()  # the job functions never raise
    return results


async def create_topics(
    core: _core.Broker,
    req: _core.CreateTopicsRequest,
    *,
    default_partitions: int,
    api_error: type[BaseException],
) -> list[TopicResult]:
    """Handle CreateTopics; one result per distinct topic name, in request order.

    ``api_error`` is the exception type whose ``code``/``message`` the core raises
    (``_core.KafkaApiError``); it is a parameter so this runs without the extension."""
    counts = Counter(t.name for t in req.topics)
    results: dict[str, TopicResult] = {}
    jobs: dict[str, Awaitable[TopicResult]] = {}
    for topic in req.topics:
        name = topic.name
        if name in results or name in jobs:
            continue
        if counts[name] > 1:
            results[name] = TopicResult(
                name,
                ErrorCode.INVALID_REQUEST,
                f"topic {name!r} appears {counts[name]} times in one CreateTopics request; "
                "it was not created: send each topic once",
            )
            continue
        try:
            plan = _plan(topic, default_partitions)
        except Rejected as rejected:
            results[name] = TopicResult(name, rejected.code, rejected.message)
            continue
        jobs[name] = _create_one(core, plan, req.validate_only, api_error)

    results.update(await run_bounded(jobs, wait_seconds(req.timeout_ms), "creation"))
    return [results[name] for name in counts]  # Counter keeps first-seen order


@dataclass(frozen=True)
class _Target:
    name: str
    topic_id: str | None  # as far as this broker knows
    by_id: bool  # the entry named the id: the delete must not take another topic of the name


async def _target(
    core: _core.Broker, name: str | None, topic_id: str | None
) -> _Target | DeletedTopic:
    """The topic an entry names, or the outcome that refuses the entry. A name this broker
    does not know yet is still tried: the store decides."""
    if name is not None and topic_id is not None:
        return DeletedTopic(
            name,
            topic_id,
            ErrorCode.INVALID_REQUEST,
            "give a topic's name or its id, not both",
        )
    if topic_id is not None:
        topic = await core.topic_by_id(topic_id)
        if topic is None:
            return DeletedTopic(
                None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id}"
            )
        return _Target(topic.name, topic_id, by_id=True)
    if name is None:
        return DeletedTopic(
            None, None, ErrorCode.INVALID_REQUEST, "give a topic's name or its id (neither given)"
        )
    topic = await core.topic(name)
    return _Target(name, None if topic is None else topic.topic_id, by_id=False)


async def delete_topics(
    core: _core.Broker, req: _core.DeleteTopicsRequest, *, api_error: type[BaseException]
) -> list[DeletedTopic]:
    """Handle DeleteTopics; one result per distinct entry, in request order. A topic named
    more than once (by name or id) is deleted once and each entry reports the outcome."""
    entries = list(dict.fromkeys((t.name, t.topic_id) for t in req.topics))
    targets = await asyncio.gather(*(_target(core, *entry) for entry in entries))
    # One delete per topic; named by id (by any entry), it deletes only the topic of that id.
    by_name: dict[str, str | None] = {}
    for t in targets:
        if not isinstance(t, DeletedTopic):
            by_name[t.name] = by_name.get(t.name) or (t.topic_id if t.by_id else None)
    jobs = {
        name: _delete_one(core, name, topic_id, api_error) for name, topic_id in by_name.items()
    }
    results = await run_bounded(jobs, wait_seconds(req.timeout_ms), "deletion")
    out = []
    for target in targets:
        if isinstance(target, DeletedTopic):
            out.append(target)
        else:
            r = results[target.name]
            out.append(DeletedTopic(target.name, target.topic_id, r.error_code, r.error_message))
    return out
