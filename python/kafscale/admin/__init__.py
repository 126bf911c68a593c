"""Control-plane admin handlers: topics (:mod:`kafscale.admin.topics`), configs and partitions.

The topic handlers read the core's request objects and return
:class:`~kafscale.admin.topics.TopicResult` and :class:`~kafscale.admin.topics.DeletedTopic`
lists; the functions here turn those into the CreateTopics and DeleteTopics answers, classes of
the core re-exported by :mod:`kafscale.admin.protocol`, as for every other API.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from kafscale.admin import topics
from kafscale.admin.configs import topic_configs
from kafscale.admin.protocol import (
    CreatableTopicResult,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsResponse,
)
from kafscale.admin.topic_configs import BrokerDefaults
from kafscale.admin.topics import DeletedTopic, TopicResult
from kafscale.errors import ErrorCode

if TYPE_CHECKING:
    from kafscale import _core

__all__ = ["create_topics", "create_topics_failure", "delete_topics", "delete_topics_failure"]

log = logging.getLogger(__name__)

# What CreateTopics v5+ report: every partition has one copy, its owner's (as Metadata shows);
# durability comes from object storage, not replicas.
_REPLICATION_FACTOR = 1


class AdminSettings(BrokerDefaults, Protocol):
    @property
    def default_partitions(self) -> int: ...


def _created(result: TopicResult, settings: BrokerDefaults) -> CreatableTopicResult:
    topic = result.created
    if topic is None:
        return CreatableTopicResult(result.name, int(result.error_code), result.error_message)
    return CreatableTopicResult(
        result.name,
        int(result.error_code),
        result.error_message,
        topic_id=topic.topic_id,
        num_partitions=topic.partitions,
        replication_factor=_REPLICATION_FACTOR,
        configs=topic_configs(topic.configs, settings),
    )


def _deleted(results: Iterable[DeletedTopic]) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(
        [
            DeletableTopicResult(r.name, int(r.error_code), r.error_message, r.topic_id)
            for r in results
        ]
    )


async def create_topics(
    core: _core.Broker,
    settings: AdminSettings,
    body: _core.CreateTopicsRequest,
    api_error: type[BaseException],
) -> CreateTopicsResponse:
    results = await topics.create_topics(
        core, body, default_partitions=settings.default_partitions, api_error=api_error
    )
    return CreateTopicsResponse([_created(r, settings) for r in results])


async def delete_topics(
    core: _core.Broker, body: _core.DeleteTopicsRequest, api_error: type[BaseException]
) -> DeleteTopicsResponse:
    results = await topics.delete_topics(core, body, api_error=api_error)
    for r in results:
        # DeleteTopics before v5 carries no error message, so the log is the one place for it.
        if r.error_code != ErrorCode.NONE:
            log.info(
                "deletion of topic %r (id %s): error %d: %s",
                r.name,
                r.topic_id,
                r.error_code,
                r.error_message,
            )
    return _deleted(results)


def create_topics_failure(
    body: _core.CreateTopicsRequest, code: int, message: str
) -> CreateTopicsResponse:
    """``code`` for every topic named in the request (each name once)."""
    names = dict.fromkeys(t.name for t in body.topics)
    return CreateTopicsResponse([CreatableTopicResult(n, code, message) for n in names])


def delete_topics_failure(body: _core.DeleteTopicsRequest, code: int) -> DeleteTopicsResponse:
    """``code`` for every entry of the request (each distinct entry once)."""
    entries = dict.fromkeys((t.name, t.topic_id) for t in body.topics)
    return _deleted(DeletedTopic(name, topic_id, code) for name, topic_id in entries)
