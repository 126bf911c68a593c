"""The control plane: answers every request the core hands to Python - topic admin
(:mod:`kafscale.admin`) and consumer groups (:mod:`kafscale.groups`)."""

from __future__ import annotations

import logging
from typing import Any

from kafscale import admin, replies
from kafscale.admin import Bindings, ControlRequestLike
from kafscale.errors import ErrorCode
from kafscale.groups import GROUP_APIS, GroupCoordinator, error_answer

__all__ = ["ControlPlane"]

log = logging.getLogger(__name__)

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

    async def dispatch(self, req: ControlRequestLike) -> None:
        """Serves one request and responds to it. Never raises (except cancellation)."""
        if req.api_key not in GROUP_APIS:
            await admin.dispatch(self._core, self._settings, req, self._bindings)
            return
        api_name = _GROUP_API_NAMES[req.api_key]
        try:
            response = await self.groups.handle(req.api_key, req.api_version, req.body, req)
        except Exception:
            log.exception(
                "%s v%d failed (correlation id %d, client %r); answering UNKNOWN_SERVER_ERROR",
                api_name,
                req.api_version,
                req.correlation_id,
                req.client_id,
            )
            response = error_answer(req.api_key, req.body, ErrorCode.UNKNOWN_SERVER_ERROR)
        replies.send(req, response, api_name)
