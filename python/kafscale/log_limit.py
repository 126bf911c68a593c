"""A rate limit for log lines any client can trigger (a refused group request, a name too
long): a client sending such requests in a loop must not flood the log. Each kind of line gets
its own limit: at most ``per_second`` lines a second; the ones over are counted, and the next
line let through after them is preceded by one that says how many were suppressed. The core's
``server::log_limit`` does the same for its lines.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["LogLimit"]

PER_SECOND = 10
_WINDOW_S = 1.0

log = logging.getLogger(__name__)


class LogLimit:
    def __init__(
        self,
        kind: str,
        per_second: int = PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kind = kind
        self._per_second = per_second
        self._clock = clock
        self._started: float | None = None
        self._logged = 0
        self._suppressed = 0

    def admit(self) -> bool:
        """Whether to log the line at hand (after saying how many were suppressed, if any)."""
        now = self._clock()
        if self._started is None or now >= self._started + _WINDOW_S:
            self._started, self._logged = now, 0
        if self._logged >= self._per_second:
            self._suppressed += 1
            return False
        self._logged += 1
        if self._suppressed:
            log.info("suppressed %d similar log lines (%s)", self._suppressed, self._kind)
            self._suppressed = 0
        return True
