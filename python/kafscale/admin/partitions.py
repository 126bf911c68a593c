"""CreatePartitions (v0-3): additive only, per topic, KIP-4 style.

Each topic gets its own result. A count not above the current one is INVALID_PARTITIONS; manual
assignments are refused (KafScale places partitions itself); a topic named twice is not
changed (INVALID_REQUEST). The core grows the topic record and seeds the new partitions in one
metadata transaction and answers once they have owners, so they are writable and shown by every
broker right after the response. ``timeout_ms`` bounds the wait as in CreateTopics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from kafscale.admin.protocol import CreatePartitionsResponse, CreatePartitionsTopicResult
from kafscale.admin.topic_configs import Rejected
from kafscale.admin.topics import (
    TopicResult,
    api_error_result,
    internal_error_result,
    run_bounded,
    wait_seconds,
)
from kafscale.errors import ErrorCode

if TYPE_CHECKING:
    from kafscale import _core

__all__ = ["create_partitions"]


async def _check(core: _core.Broker, item: _core.CreatePartitionsTopic) -> None:
    if item.assignments is not None:
        raise Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "manual partition assignment is not supported: KafScale places partitions itself; "
            "send the new count without assignments",
        )
    topic = await core.topic(item.name)
    if topic is None:
        raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {item.name!r} does not exist")
    if item.count <= topic.partitions:
        raise Rejected(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {item.name!r} has {_partitions(topic.partitions)}; partitions can only be "
            f"added: ask for more than {topic.partitions} (got {item.count})",
        )


async def _grow(
    core: _core.Broker,
    item: _core.CreatePartitionsTopic,
    validate_only: bool,
    api_error: type[BaseException],
) -> TopicResult:
    try:
        await _check(core, item)
        if not validate_only:
            await core.create_partitions(item.name, item.count)
    except Rejected as r:
        return TopicResult(item.name, r.code, r.message)
    except api_error as exc:
        return api_error_result(item.name, exc)
    except Exception:
        return internal_error_result(item.name, "partition creation")
    return TopicResult(item.name)


async def create_partitions(
    core: _core.Broker, req: _core.CreatePartitionsRequest, *, api_error: type[BaseException]
) -> CreatePartitionsResponse:
    counts = Counter(t.name for t in req.topics)
    results: dict[str, TopicResult] = {}
    jobs: dict[str, Awaitable[TopicResult]] = {}
    for item in req.topics:
        if item.name in results or item.name in jobs:
            continue
        if counts[item.name] > 1:
            results[item.name] = TopicResult(
                item.name,
                ErrorCode.INVALID_REQUEST,
                f"topic {item.name!r} appears {counts[item.name]} times in one request; it was "
                "not changed: send each topic once",
            )
            continue
        jobs[item.name] = _grow(core, item, req.validate_only, api_error)
    timeout = wait_seconds(req.timeout_ms)
    results.update(await run_bounded(jobs, timeout, "partition creation"))
    return CreatePartitionsResponse(
        [
            CreatePartitionsTopicResult(r.name, int(r.error_code), r.error_message)
            for r in (results[name] for name in counts)
        ]
    )


def _partitions(count: int) -> str:
    return f"{count} partition" if count == 1 else f"{count} partitions"
