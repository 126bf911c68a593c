"""The control plane: answers every request the core hands to Python - topic admin
(:mod:`kafscale.admin`), configs and partitions, and consumer groups (:mod:`kafscale.groups`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kafscale import admin, replies
from kafscale.admin import Bindings, ControlRequestLike
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
from kafscale.errors import ErrorCode
from kafscale.groups import GroupCoordinator, error_answer
from kafscale.groups.protocol import (
    DeletableGroupResult,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsResponse,
    ListGroupsResponse,
)

__all__ = ["ControlPlane"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Api:
    name: str
    serve: Callable[[Any], Awaitable[Any]]
    # The answer that reports ``code`` for every item of the request.
    failure: Callable[[Any, int], Any]


_GROUP_API_NAMES = {
    8: "OffsetCommit",
    9: "OffsetFetch",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
}


class ControlPlane:
    def __init__(
        self, core: Any, settings: Any, bindings: Bindings, groups: GroupCoordinator
    ) -> None:
        self._core = core
        self._settings = settings
        self._bindings = bindings
        self.groups = groups
        api_error = bindings.api_error
        self._apis: dict[int, _Api] = {
            key: _Api(name, self._group_request(key), self._group_failure(key))
            for key, name in _GROUP_API_NAMES.items()
        }
        self._apis.update(
            {
                15: _Api(
                    "DescribeGroups",
                    lambda req: groups.describe(list(req.body.groups)),
                    lambda req, code: DescribeGroupsResponse(
                        [DescribedGroup(code, g) for g in req.body.groups]
                    ),
                ),
                16: _Api(
                    "ListGroups",
                    lambda req: groups.list_groups(
                        list(req.body.states_filter), list(req.body.types_filter)
                    ),
                    lambda req, code: ListGroupsResponse(code),
                ),
                42: _Api(
                    "DeleteGroups",
                    lambda req: groups.delete(list(req.body.groups_names)),
                    lambda req, code: DeleteGroupsResponse(
                        [DeletableGroupResult(g, code) for g in req.body.groups_names]
                    ),
                ),
                32: _Api(
                    "DescribeConfigs",
                    lambda req: describe_configs(core, settings, req.body),
                    lambda req, code: DescribeConfigsResponse(
                        [
                            DescribeConfigsResult(code, _INTERNAL, r.resource_type, r.resource_name)
                            for r in req.body.resources
                        ]
                    ),
                ),
                33: self._alter_configs_api("AlterConfigs", api_error),
                44: self._alter_configs_api("IncrementalAlterConfigs", api_error),
                37: _Api(
                    "CreatePartitions",
                    lambda req: create_partitions(core, req.body, api_error=api_error),
                    lambda req, code: CreatePartitionsResponse(
                        [
                            CreatePartitionsTopicResult(t.name, code, _INTERNAL)
                            for t in req.body.topics
                        ]
                    ),
                ),
            }
        )

    def _group_request(self, api_key: int) -> Callable[[Any], Awaitable[Any]]:
        return lambda req: self.groups.handle(api_key, req.api_version, req.body, req)

    @staticmethod
    def _group_failure(api_key: int) -> Callable[[Any, int], Any]:
        return lambda req, code: error_answer(api_key, req.body, code)

    def _alter_configs_api(self, name: str, api_error: type[BaseException]) -> _Api:
        return _Api(
            name,
            lambda req: alter_configs(self._core, req.body, api_error=api_error),
            lambda req, code: AlterConfigsResponse(
                [
                    AlterConfigsResourceResult(code, _INTERNAL, r.resource_type, r.resource_name)
                    for r in req.body.resources
                ]
            ),
        )

    async def dispatch(self, req: ControlRequestLike) -> None:
        """Serves one request and responds to it. Never raises (except cancellation)."""
        api = self._apis.get(req.api_key)
        if api is None:
            await admin.dispatch(self._core, self._settings, req, self._bindings)
            return
        try:
            response = await api.serve(req)
        except Exception:
            log.exception(
                "%s v%d failed (correlation id %d, client %r); answering UNKNOWN_SERVER_ERROR",
                api.name,
                req.api_version,
                req.correlation_id,
                req.client_id,
            )
            response = api.failure(req, ErrorCode.UNKNOWN_SERVER_ERROR)
        replies.send(req, response, api.name)


_INTERNAL = "internal error; see the broker log"
