"""Sending a control-plane response back through the core."""

from __future__ import annotations

import logging
from typing import Any, Protocol

log = logging.getLogger("kafscale.control")


class Respondable(Protocol):
    @property
    def correlation_id(self) -> int: ...

    def respond(self, response: Any) -> None: ...


def send(req: Respondable, response: Any, api_name: str) -> None:
    """Responds; a failure (typically the client went away) is logged, never raised - there is
    nobody left to tell."""
    try:
        req.respond(response)
    except Exception:
        log.warning(
            "could not send the %s response (correlation id %d)",
            api_name,
            req.correlation_id,
            exc_info=True,
        )
