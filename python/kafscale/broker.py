"""``python -m kafscale.broker``: read settings, start the Rust core, serve the control plane.

The core owns the listener and the whole data plane. This process runs an asyncio loop that
takes control-plane requests (topic admin, consumer groups) from the core and answers them,
until SIGTERM or SIGINT: then the core stops accepting and reading requests, flushes every
buffer, sends every response it owes and closes its stores, and the process exits 0. A second
signal during that shutdown exits at once (nothing acknowledged is lost: acks are only sent
after data is durable).

Exit codes: 0 clean shutdown, 1 the broker could not start or failed, 2 bad settings.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

from kafscale import log as kafscale_log
from kafscale.config import Settings, SettingsError, load_settings
from kafscale.control import ControlPlane
from kafscale.groups import GroupCoordinator

if TYPE_CHECKING:
    from kafscale import _core

log = logging.getLogger("kafscale.broker")

# How long in-flight control requests get to finish after the core has shut down.
SHUTDOWN_GRACE_S = 10.0
# How often the group gauges (/metrics) are refreshed from the coordinator.
GROUP_METRICS_INTERVAL_S = 1.0


def _prog() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    # Under `python -m` argv[0] is the module's file path; show the command people typed.
    if not name or name.endswith(".py") or name == "-c":
        return "python -m kafscale.broker"
    return name


def main(argv: list[str] | None = None) -> int:
    try:
        settings = load_settings(argv, prog=_prog())
    except SettingsError as exc:
        print(f"kafscale: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else 0

    try:
        from kafscale import _core
    except ImportError as exc:
        print(
            f"kafscale: the Rust core (kafscale._core) cannot be loaded: {exc}; "
            "build and install the package with `pip install .`",
            file=sys.stderr,
        )
        return 1

    kafscale_log.setup(settings.log_level, settings.log_format)
    try:
        core = _core.Broker(settings)
    except ValueError as exc:
        print(f"kafscale: {exc}", file=sys.stderr)
        return 2
    try:
        core.start()
    except RuntimeError as exc:
        log.error("the broker could not start: %s", exc)
        return 1
    log.info("%s", core.describe())
    code = asyncio.run(serve(core, settings, _core))
    _exit_without_finalizing(code)


async def serve(core: _core.Broker, settings: Settings, extension: ModuleType) -> int:
    """Serve control-plane requests until a signal or the core stops; then shut the core down.
    ``extension`` is ``kafscale._core`` (its error types and the API keys it hands over).
    Returns the process exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _on_signal, signum, stop)

    groups = GroupCoordinator(core, settings, extension.MetadataStoreError)
    plane = ControlPlane(core, settings, groups, extension.KafkaApiError)
    unanswered = plane.unanswered(extension.CONTROL_API_KEYS)
    if unanswered:
        # The core and this package come from different builds; answering only some of the
        # APIs the core advertises would break clients one request at a time.
        log.error(
            "the control plane has no handler for API keys %s that the core serves; reinstall "
            "the package so that kafscale and kafscale._core come from the same build",
            unanswered,
        )
        await asyncio.to_thread(core.shutdown)
        return 1
    sweeper = asyncio.create_task(groups.run())
    reporter = asyncio.create_task(_report_group_metrics(core, groups))
    in_flight: set[asyncio.Task[None]] = set()
    control = asyncio.create_task(_control_loop(core, plane, in_flight))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({control, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    # Members waiting in a rebalance here are told to find the next coordinator now rather
    # than when their requests time out.
    sweeper.cancel()
    reporter.cancel()
    groups.close()

    exit_code = 0
    if control.done():
        error = None if control.cancelled() else control.exception()
        if error is not None:
            log.error("the control plane failed; shutting down", exc_info=error)
            exit_code = 1
        else:
            log.warning("the core stopped handing out control requests; shutting down")

    # Blocking call (stop accepting, flush, close); run it off the loop so in-flight handlers
    # can still finish and respond meanwhile.
    try:
        await asyncio.to_thread(core.shutdown)
    except Exception:
        log.exception("shutdown failed; buffered data that was not acknowledged may be lost")
        exit_code = 1

    await _drain(control, in_flight)
    log.info("shut down")
    return exit_code


async def _report_group_metrics(core: _core.Broker, groups: GroupCoordinator) -> None:
    while True:
        core.publish_group_metrics(groups.metrics_report())
        await asyncio.sleep(GROUP_METRICS_INTERVAL_S)


def _exit_without_finalizing(code: int) -> NoReturn:
    """Everything durable is done by now (the core flushed and closed its stores). The core's
    threads can still hold Python objects - an awaitable of a request that was cut short, say -
    and tearing the interpreter down under them may crash the process at exit (seen as a rare
    SIGSEGV after a clean shutdown). So leave at once, with the output flushed."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _on_signal(signum: int, stop: asyncio.Event) -> None:
    name = signal.Signals(signum).name
    if stop.is_set():
        log.warning("second %s during shutdown; exiting now without flushing", name)
        logging.shutdown()
        os._exit(1)
    log.info("%s received; flushing and shutting down (send it again to exit at once)", name)
    stop.set()


async def _control_loop(
    core: _core.Broker, plane: ControlPlane, in_flight: set[asyncio.Task[None]]
) -> None:
    # One task per request so a slow handler (a JoinGroup waiting for its group) never holds
    # up another connection's requests; the requests of one connection run one at a time, in
    # order (docs/requests.md). The set keeps references (the loop only holds weak ones) until
    # each task is done.
    while (req := await core.next_control_request()) is not None:
        task = plane.start(req)
        in_flight.add(task)
        task.add_done_callback(_forget(in_flight))


def _forget(in_flight: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        in_flight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # dispatch() handles its own errors; reaching this is a bug worth seeing.
            log.error("control request task failed", exc_info=task.exception())

    return done


async def _drain(control: asyncio.Task[None], in_flight: set[asyncio.Task[None]]) -> None:
    """Let the control loop see the end of the request stream and in-flight requests finish."""
    if not control.done():
        try:
            await asyncio.wait_for(control, timeout=SHUTDOWN_GRACE_S)
        except TimeoutError:
            log.warning("the control request stream did not end after shutdown; stopped it")
        except Exception:
            log.exception("the control plane failed during shutdown")
    if in_flight:
        _, pending = await asyncio.wait(set(in_flight), timeout=SHUTDOWN_GRACE_S)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("%d control request(s) did not finish before exit", len(pending))


if __name__ == "__main__":
    sys.exit(main())
