"""The control plane serves a connection's requests one at a time, in the order they arrive, and
the requests of different connections side by side (kafscale.control.ConnectionOrder,
docs/requests.md)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kafscale.api_keys import ApiKey
from kafscale.control import ConnectionOrder, ControlPlane


@dataclass
class Request:
    """What the control plane reads of a request; ``name`` tells the tests' requests apart."""

    connection_id: int
    name: str
    api_key: int = ApiKey.HEARTBEAT
    api_version: int = 3
    correlation_id: int = 1
    client_id: str | None = "tests"
    client_host: str = "127.0.0.1"
    body: Any = None
    answers: list[Any] = field(default_factory=list)

    def respond(self, response: Any) -> None:
        self.answers.append(response)


class Served:
    """A handler that logs when each request starts and ends, and ends one only once the test
    lets it (``finish``)."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    async def serve(self, req: Any) -> None:
        self.log.append(f"start {req.name}")
        try:
            await self.gate(req.name).wait()
            if req.name.startswith("failing"):
                raise RuntimeError("the handler failed")
        finally:
            self.log.append(f"end {req.name}")

    def finish(self, name: str) -> None:
        self.gate(name).set()


async def settle() -> None:
    """Lets every task that can run, run."""
    for _ in range(20):
        await asyncio.sleep(0)


def started(served: Served) -> set[str]:
    return {entry.split()[1] for entry in served.log if entry.startswith("start")}


def test_a_connections_requests_run_one_at_a_time_and_others_meanwhile() -> None:
    async def scenario() -> list[str]:
        order, served = ConnectionOrder(), Served()
        tasks = [order.start(Request(1, name), served.serve) for name in ("a1", "a2", "a3")] + [
            order.start(Request(2, "b1"), served.serve)
        ]
        await settle()
        assert started(served) == {"a1", "b1"}
        served.finish("b1")
        await settle()
        assert started(served) == {"a1", "b1"}, "a2 started before a1 finished"
        served.finish("a3")  # let through early: it still waits for its turn
        served.finish("a1")
        await settle()
        assert started(served) == {"a1", "a2", "b1"}
        served.finish("a2")
        await asyncio.gather(*tasks)
        assert order.connections() == 0
        return served.log

    log = asyncio.run(scenario())
    a_log = [entry for entry in log if entry.endswith(("a1", "a2", "a3"))]
    assert a_log == ["start a1", "end a1", "start a2", "end a2", "start a3", "end a3"]


def test_a_failed_or_cancelled_request_keeps_the_order_of_the_others() -> None:
    async def scenario() -> None:
        order, served = ConnectionOrder(), Served()
        failing = order.start(Request(1, "failing"), served.serve)
        cancelled = order.start(Request(1, "cancelled"), served.serve)
        last = order.start(Request(1, "last"), served.serve)
        served.finish("last")
        await settle()
        cancelled.cancel()
        await settle()
        # The cancelled request had not started; the one after it still waits for the first.
        assert started(served) == {"failing"}
        served.finish("failing")
        await asyncio.wait({failing, cancelled, last})
        assert isinstance(failing.exception(), RuntimeError)
        assert cancelled.cancelled()
        assert last.done() and last.exception() is None
        assert served.log == ["start failing", "end failing", "start last", "end last"]

    asyncio.run(scenario())


class Groups:
    """The group coordinator's entry point, answering Heartbeats once the test lets it."""

    def __init__(self) -> None:
        self.served = Served()

    async def handle(self, key: ApiKey, version: int, body: Any, req: Any) -> str:
        await self.served.serve(req)
        return f"answer {req.name}"


def test_the_router_serves_a_connection_in_order() -> None:
    async def scenario() -> None:
        groups = Groups()
        plane = ControlPlane(object(), object(), groups=groups, api_error=Exception)  # type: ignore[arg-type]
        first, second, other = Request(7, "first"), Request(7, "second"), Request(8, "other")
        tasks = [plane.start(req) for req in (first, second, other)]
        await settle()
        assert started(groups.served) == {"first", "other"}
        groups.served.finish("second")
        groups.served.finish("other")
        await settle()
        assert other.answers == ["answer other"]
        assert second.answers == [], "answered before the request before it"
        groups.served.finish("first")
        await asyncio.gather(*tasks)
        assert (first.answers, second.answers) == (["answer first"], ["answer second"])

    asyncio.run(scenario())
