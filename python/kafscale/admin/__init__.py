"""Control-plane admin handlers: topics (:mod:`kafscale.admin.topics`), configs and partitions.

The topic handlers work on plain request-shaped values and return
:class:`~kafscale.admin.topics.TopicResult` lists (unit-tested without the extension); the
functions here turn those into the CreateTopics and DeleteTopics answers, plain dataclasses of
:mod:`kafscale.admin.protocol` that the core reads by attribute, as for every other API.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from kafscale.admin import topics
from kafscale.admin.protocol import (
    CreatableTopicResult,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsResponse,
)
from kafscale.admin.topics import (
    CreateTopicsRequestLike,
    DeleteTopicsRequestLike,
    TopicResult,
    TopicStore,
)
from kafscale.errors import ErrorCode

__all__ = ["create_topics", "create_topics_failure", "delete_topics", "delete_topics_failure"]

log = logging.getLogger(__name__)


class AdminSettings(Protocol):
    @property
    def default_partitions(self) -> int: ...


def _created(results: Iterable[TopicResult]) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        [CreatableTopicResult(r.name, int(r.error_code), r.error_message) for r in results]
    )


def _deleted(results: Iterable[TopicResult]) -> DeleteTopicsResponse:
    return DeleteTopicsResponse([DeletableTopicResult(r.name, int(r.error_code)) for r in results])


async def create_topics(
    core: TopicStore,
    settings: AdminSettings,
    body: CreateTopicsRequestLike,
    api_error: type[BaseException],
) -> CreateTopicsResponse:
    results = await topics.create_topics(
        core, body, default_partitions=settings.default_partitions, api_error=api_error
    )
    return _created(results)


async def delete_topics(
    core: TopicStore, body: DeleteTopicsRequestLike, api_error: type[BaseException]
) -> DeleteTopicsResponse:
    results = await topics.delete_topics(core, body, api_error=api_error)
    for r in results:
        # DeleteTopics v0-2 carries no error message, so the log is the only place for it.
        if r.error_code != ErrorCode.NONE:
            log.info("deletion of topic %r: error %d: %s", r.name, r.error_code, r.error_message)
    return _deleted(results)


def create_topics_failure(
    body: CreateTopicsRequestLike, code: int, message: str
) -> CreateTopicsResponse:
    """``code`` for every topic named in the request (each name once)."""
    names: Sequence[str] = list(dict.fromkeys(t.name for t in body.topics))
    return _created(TopicResult(n, code, message) for n in names)


def delete_topics_failure(body: DeleteTopicsRequestLike, code: int) -> DeleteTopicsResponse:
    """``code`` for every topic named in the request (each name once)."""
    return _deleted(TopicResult(n, code) for n in dict.fromkeys(body.topic_names))
