"""The control plane: one router, keyed by :class:`~kafscale.api_keys.ApiKey`, that answers every
request the core hands to Python - topic admin (:mod:`kafscale.admin`), configs and
partitions, and consumer groups (:mod:`kafscale.groups`).

Each route names its API, the handler that answers it and the answer that reports an error
code for every item of the request (what the client gets when the handler fails). Every
answer is an object of the API's answer class in the core (``_core.ControlAnswer``), which the
core encodes at the request's version.
A body is cast to the stub's class for its API (``_core.pyi``), so the type checker holds each
handler's parameter types against what the core really hands over.

A connection's requests are served one at a time, in the order the client sent them, as Kafka
serves them (docs/requests.md); requests of different connections run concurrently, so a
JoinGroup waiting for its group holds up only its own connection (:class:`ConnectionOrder`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from kafscale import admin, replies
from kafscale.admin.configs import alter_configs, describe_configs
from kafscale.admin.partitions import create_partitions
from kafscale.admin.protocol import (
    AlterConfigsResourceResult,
    AlterConfigsResponse,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kafscale.api_keys import ApiKey
from kafscale.errors import ErrorCode
from kafscale.groups import GROUP_APIS, GroupCoordinator, error_answer, fetch_offsets_failure
from kafscale.groups.offsets import commit_error_answer
from kafscale.groups.protocol import (
    DeletableGroupResult,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsResponse,
    ListGroupsResponse,
    OffsetDeleteResponse,
)

if TYPE_CHECKING:
    from kafscale import _core
    from kafscale.config import Settings
    from kafscale.groups.coordinator import GroupRequest

__all__ = ["ConnectionOrder", "ControlPlane"]

log = logging.getLogger(__name__)

_INTERNAL = "internal error; see the broker log"


class ConnectionOrder:
    """Runs each connection's requests one at a time, in the order they are started, and the
    requests of different connections side by side.

    Kafka reads a connection's next request only once the previous one is answered, and clients
    count on the order when they pipeline: of two OffsetCommits sent back to back the second is
    stored. The core already hands over a connection's next request only once the one before is
    answered; this keeps the order in Python whatever the core does (a request whose connection
    was closed while Python served it, say), and at no cost when there is nothing to wait for.
    """

    def __init__(self) -> None:
        # Per connection, its requests started and not finished (running or waiting).
        self._unfinished: dict[int, set[asyncio.Task[None]]] = {}

    def start(
        self, req: _core.ControlRequest, serve: Callable[[_core.ControlRequest], Awaitable[None]]
    ) -> asyncio.Task[None]:
        """A task that runs ``serve(req)`` once every request of its connection started before
        it has finished, however it ended (answered, failed, cancelled)."""
        connection = req.connection_id
        unfinished = self._unfinished.setdefault(connection, set())
        # All of them, not the last one only: one cancelled while it waited has finished
        # before the ones it waited for.
        task = asyncio.create_task(_after(set(unfinished), serve, req))
        unfinished.add(task)

        def forget(done: asyncio.Task[None]) -> None:
            unfinished.discard(done)
            if not unfinished and self._unfinished.get(connection) is unfinished:
                del self._unfinished[connection]

        task.add_done_callback(forget)
        return task

    def connections(self) -> int:
        """How many connections have a request running or waiting."""
        return len(self._unfinished)


async def _after(
    before: set[asyncio.Task[None]],
    serve: Callable[[_core.ControlRequest], Awaitable[None]],
    req: _core.ControlRequest,
) -> None:
    if before:
        # wait() neither raises what they raised nor passes their cancellation on.
        await asyncio.wait(before)
    await serve(req)


@dataclass(frozen=True)
class _Route:
    serve: Callable[[_core.ControlRequest], Awaitable[_core.ControlAnswer]]
    # The answer that reports ``code`` for every item of the request.
    failure: Callable[[_core.ControlRequest, int], _core.ControlAnswer]


class ControlPlane:
    def __init__(
        self,
        core: _core.Broker,
        settings: Settings,
        groups: GroupCoordinator,
        api_error: type[BaseException],
    ) -> None:
        self.groups = groups
        self._order = ConnectionOrder()

        def group_route(key: ApiKey) -> _Route:
            return _Route(
                lambda req: groups.handle(
                    key, req.api_version, cast("GroupRequest", req.body), req
                ),
                lambda req, code: error_answer(key, cast("GroupRequest", req.body), code),
            )

        def alter_configs_route() -> _Route:
            return _Route(
                lambda req: alter_configs(
                    core, cast("_core.AlterConfigsRequest", req.body), api_error=api_error
                ),
                lambda req, code: AlterConfigsResponse(
                    [
                        AlterConfigsResourceResult(
                            code, _INTERNAL, r.resource_type, r.resource_name
                        )
                        for r in cast("_core.AlterConfigsRequest", req.body).resources
                    ]
                ),
            )

        self._routes: dict[ApiKey, _Route] = {key: group_route(key) for key in GROUP_APIS}
        self._routes.update(
            {
                ApiKey.CREATE_TOPICS: _Route(
                    lambda req: admin.create_topics(
                        core, settings, cast("_core.CreateTopicsRequest", req.body), api_error
                    ),
                    lambda req, code: admin.create_topics_failure(
                        cast("_core.CreateTopicsRequest", req.body), code, _INTERNAL
                    ),
                ),
                ApiKey.DELETE_TOPICS: _Route(
                    lambda req: admin.delete_topics(
                        core, cast("_core.DeleteTopicsRequest", req.body), api_error
                    ),
                    lambda req, code: admin.delete_topics_failure(
                        cast("_core.DeleteTopicsRequest", req.body), code
                    ),
                ),
                ApiKey.OFFSET_FETCH: _Route(
                    lambda req: groups.fetch_offsets(cast("_core.OffsetFetchRequest", req.body)),
                    lambda req, code: fetch_offsets_failure(
                        cast("_core.OffsetFetchRequest", req.body), code
                    ),
                ),
                ApiKey.TXN_OFFSET_COMMIT: _Route(
                    lambda req: groups.txn_commit_offsets(
                        cast("_core.TxnOffsetCommitRequest", req.body)
                    ),
                    lambda req, code: commit_error_answer(
                        cast("_core.TxnOffsetCommitRequest", req.body), code
                    ),
                ),
                ApiKey.DESCRIBE_GROUPS: _Route(
                    lambda req: groups.describe(
                        list(cast("_core.DescribeGroupsRequest", req.body).groups)
                    ),
                    lambda req, code: DescribeGroupsResponse(
                        [
                            DescribedGroup(code, g)
                            for g in cast("_core.DescribeGroupsRequest", req.body).groups
                        ]
                    ),
                ),
                ApiKey.LIST_GROUPS: _Route(
                    lambda req: groups.list_groups(
                        list(cast("_core.ListGroupsRequest", req.body).states_filter),
                        list(cast("_core.ListGroupsRequest", req.body).types_filter),
                    ),
                    lambda req, code: ListGroupsResponse(code),
                ),
                ApiKey.DELETE_GROUPS: _Route(
                    lambda req: groups.delete(
                        list(cast("_core.DeleteGroupsRequest", req.body).groups_names)
                    ),
                    lambda req, code: DeleteGroupsResponse(
                        [
                            DeletableGroupResult(g, code)
                            for g in cast("_core.DeleteGroupsRequest", req.body).groups_names
                        ]
                    ),
                ),
                ApiKey.OFFSET_DELETE: _Route(
                    lambda req: groups.delete_offsets(cast("_core.OffsetDeleteRequest", req.body)),
                    lambda req, code: OffsetDeleteResponse(code),
                ),
                ApiKey.DESCRIBE_CONFIGS: _Route(
                    lambda req: describe_configs(
                        core, settings, cast("_core.DescribeConfigsRequest", req.body)
                    ),
                    lambda req, code: DescribeConfigsResponse(
                        [
                            DescribeConfigsResult(code, _INTERNAL, r.resource_type, r.resource_name)
                            for r in cast("_core.DescribeConfigsRequest", req.body).resources
                        ]
                    ),
                ),
                ApiKey.ALTER_CONFIGS: alter_configs_route(),
                ApiKey.INCREMENTAL_ALTER_CONFIGS: alter_configs_route(),
                ApiKey.CREATE_PARTITIONS: _Route(
                    lambda req: create_partitions(
                        core, cast("_core.CreatePartitionsRequest", req.body), api_error=api_error
                    ),
                    lambda req, code: CreatePartitionsResponse(
                        [
                            CreatePartitionsTopicResult(t.name, code, _INTERNAL)
                            for t in cast("_core.CreatePartitionsRequest", req.body).topics
                        ]
                    ),
                ),
            }
        )

    def unanswered(self, served: Iterable[int]) -> list[int]:
        """The API keys among ``served`` (the core's ``CONTROL_API_KEYS``) with no route here."""
        return sorted(k for k in served if k not in self._routes)

    def start(self, req: _core.ControlRequest) -> asyncio.Task[None]:
        """A task that serves ``req`` once the requests of its connection started before it
        have been served (:class:`ConnectionOrder`)."""
        return self._order.start(req, self.dispatch)

    async def dispatch(self, req: _core.ControlRequest) -> None:
        """Serves one request and responds to it. Never raises (except cancellation)."""
        try:
            key = ApiKey(req.api_key)
            route = self._routes[key]
        except (ValueError, KeyError):
            # The core hands over only the keys of its table, which start-up checked are all
            # routed here; dropping the request is the documented way out (the core closes
            # the connection).
            log.error(
                "no control-plane route for api_key %d v%d (correlation id %d); dropping the "
                "request, which closes the client's connection",
                req.api_key,
                req.api_version,
                req.correlation_id,
            )
            return
        name = _api_name(key)
        try:
            response = await route.serve(req)
        except Exception:
            log.exception(
                "%s v%d failed (correlation id %d, client %r); answering UNKNOWN_SERVER_ERROR",
                name,
                req.api_version,
                req.correlation_id,
                req.client_id,
            )
            try:
                response = route.failure(req, ErrorCode.UNKNOWN_SERVER_ERROR)
            except Exception:
                log.exception("could not build an error answer for %s; dropping it", name)
                return
        replies.send(req, response, name)


def _api_name(key: ApiKey) -> str:
    """Kafka's spelling of the API's name (``JOIN_GROUP`` is JoinGroup)."""
    return "".join(word.capitalize() for word in key.name.split("_"))
