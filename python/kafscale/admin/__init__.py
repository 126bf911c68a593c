"""Control-plane admin handlers and the dispatcher the broker's asyncio loop calls.

``dispatch`` routes a ``_core.ControlRequest`` by API key and always answers it: a handler that
raises is logged and the client gets UNKNOWN_SERVER_ERROR for every topic instead of a hung
request. The handlers themselves return plain :class:`~kafscale.admin.topics.TopicResult`
values; :class:`Bindings` turns them into the core's response objects, so tests can bind fakes
and run without the Rust extension.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from kafscale import replies
from kafscale.admin import topics
from kafscale.admin.topics import TopicResult, TopicStore
from kafscale.errors import ErrorCode

__all__ = ["CREATE_TOPICS", "DELETE_TOPICS", "Bindings", "CoreBindings", "dispatch"]

log = logging.getLogger(__name__)

CREATE_TOPICS = 19
DELETE_TOPICS = 20


class Bindings(Protocol):
    """The core's exception and response types, as the handlers need them."""

    api_error: type[BaseException]

    def create_topics_response(self, results: Sequence[TopicResult]) -> Any: ...
    def delete_topics_response(self, results: Sequence[TopicResult]) -> Any: ...


class CoreBindings:
    """Bindings to the real extension ``kafscale._core``."""

    def __init__(self) -> None:
        from kafscale import _core  # lazily: importing kafscale.admin must not need the extension

        self._core = _core
        self.api_error: type[BaseException] = _core.KafkaApiError

    def create_topics_response(self, results: Sequence[TopicResult]) -> Any:
        core = self._core
        return core.CreateTopicsResponse(
            [core.CreatableTopicResult(r.name, int(r.error_code), r.error_message) for r in results]
        )

    def delete_topics_response(self, results: Sequence[TopicResult]) -> Any:
        core = self._core
        return core.DeleteTopicsResponse(
            [core.DeletableTopicResult(r.name, int(r.error_code)) for r in results]
        )


class AdminSettings(Protocol):
    default_partitions: int


class ControlRequestLike(Protocol):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    body: Any

    def respond(self, response: Any) -> None: ...


Handler = Callable[[TopicStore, AdminSettings, Any, Bindings], Awaitable[Any]]


async def _create_topics(
    core: TopicStore, settings: AdminSettings, body: Any, bindings: Bindings
) -> Any:
    results = await topics.create_topics(
        core, body, default_partitions=settings.default_partitions, api_error=bindings.api_error
    )
    return bindings.create_topics_response(results)


async def _delete_topics(
    core: TopicStore, settings: AdminSettings, body: Any, bindings: Bindings
) -> Any:
    results = await topics.delete_topics(core, body, api_error=bindings.api_error)
    for r in results:
        # DeleteTopics v0-2 carries no error message, so the log is the only place for it.
        if r.error_code != ErrorCode.NONE:
            log.info("deletion of topic %r: error %d: %s", r.name, r.error_code, r.error_message)
    return bindings.delete_topics_response(results)


_HANDLERS: dict[int, tuple[str, Handler]] = {
    CREATE_TOPICS: ("CreateTopics", _create_topics),
    DELETE_TOPICS: ("DeleteTopics", _delete_topics),
}


def _failure_response(req: ControlRequestLike, bindings: Bindings, message: str) -> Any:
    """UNKNOWN_SERVER_ERROR for every topic named in the request."""
    code = ErrorCode.UNKNOWN_SERVER_ERROR
    if req.api_key == CREATE_TOPICS:
        names = dict.fromkeys(t.name for t in req.body.topics)
        return bindings.create_topics_response([TopicResult(n, code, message) for n in names])
    names = dict.fromkeys(req.body.topic_names)
    return bindings.delete_topics_response([TopicResult(n, code, message) for n in names])


@functools.cache
def _core_bindings() -> CoreBindings:
    return CoreBindings()


async def dispatch(
    core: TopicStore,
    settings: AdminSettings,
    req: ControlRequestLike,
    bindings: Bindings | None = None,
) -> None:
    """Serve one control-plane request and respond to it. Never raises (except cancellation).

    ``bindings`` defaults to the real extension's types."""
    if bindings is None:
        bindings = _core_bindings()
    entry = _HANDLERS.get(req.api_key)
    if entry is None:
        # The core should only hand over APIs routed here; without a response type to build,
        # dropping the request is the documented way out (the core closes the connection).
        log.error(
            "no control-plane handler for api_key %d v%d (correlation id %d); dropping the "
            "request, which closes the client's connection",
            req.api_key,
            req.api_version,
            req.correlation_id,
        )
        return
    api_name, handler = entry
    try:
        response = await handler(core, settings, req.body, bindings)
    except Exception:
        log.exception(
            "%s v%d handler failed (correlation id %d, client %r); answering UNKNOWN_SERVER_ERROR",
            api_name,
            req.api_version,
            req.correlation_id,
            req.client_id,
        )
        try:
            message = f"internal error in {api_name}; see the broker log"
            response = _failure_response(req, bindings, message)
        except Exception:
            log.exception("could not build an error response for %s; dropping it", api_name)
            return
    replies.send(req, response, api_name)
