"""Sending a control-plane response back through the core."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafscale import _core

log = logging.getLogger("kafscale.control")


def send(req: _core.ControlRequest, response: _core.ControlAnswer, api_name: str) -> None:
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
