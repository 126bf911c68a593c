"""Consumer-group helpers for the integration tests: group members of the real clients polled
by their own threads
(and a confluent-kafka member in a child process, to be SIGKILLed), and the checks on how a
group split its partitions.

Each member keeps what its client says it owns (``owned``: partitions of its one topic), every
rebalance callback it saw (``events``) and every record it consumed (``records``). ``call(fn)``
runs ``fn(consumer)`` in the member's poll thread (clients are not shared across threads) and
returns the result; ``close()`` stops the loop and closes the client in that thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .group_env import HANG_GUARD

CALL_TIMEOUT = 45.0


# ---------------------------------------------------------------------------------------------
# members


@dataclass(frozen=True)
class Event:
    at: float  # time.monotonic()
    kind: str  # "assign", "revoke" or "lost"
    partitions: frozenset[int]


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    value: bytes | None


class Member:
    """A group member polled by its own thread; subclasses open, poll and close the client."""

    POLL_S = 0.05

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, conf: dict) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.conf = conf
        self.owned: frozenset[int] = frozenset()
        self.events: list[Event] = []
        self.records: list[Rec] = []
        self.error: BaseException | None = None
        self.closed_at: float | None = None
        self._lock = threading.Lock()
        self._calls: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __repr__(self) -> str:
        return f"{self.name}{sorted(self.owned)}"

    # --- used by the tests -------------------------------------------------------------------

    def start(self) -> Member:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def call(self, fn: Callable[[Any], Any], timeout: float = CALL_TIMEOUT) -> Any:
        """``fn(client)`` in the poll thread (awaited if it returns an awaitable)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((fn, future))
        if not self.running:
            self.check()
            raise AssertionError(f"{self.name} is not running")
        return future.result(timeout)

    def close(self, timeout: float = HANG_GUARD) -> None:
        """Stop polling and close the client (LeaveGroup for a dynamic member); raises if the
        client failed. Safe to call twice."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise AssertionError(f"{self.name} did not close within {timeout}s")
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error

    def events_since(self, mark: float) -> list[Event]:
        with self._lock:
            return [e for e in self.events if e.at >= mark]

    def seen(self) -> dict[int, list[int]]:
        """{partition: offsets consumed, in order}."""
        out: dict[int, list[int]] = {}
        with self._lock:
            for r in self.records:
                out.setdefault(r.partition, []).append(r.offset)
        return out

    # --- for subclasses ------------------------------------------------------------------------

    def _event(self, kind: str, partitions: Iterable[int]) -> None:
        parts = frozenset(partitions)
        with self._lock:
            self.events.append(Event(time.monotonic(), kind, parts))
            if kind == "assign":
                self.owned = self.owned | parts
            else:
                self.owned = self.owned - parts

    def _set_owned(self, partitions: Iterable[int]) -> None:
        with self._lock:
            self.owned = frozenset(partitions)

    def _record(self, partition: int, offset: int, value: bytes | None) -> None:
        with self._lock:
            self.records.append(Rec(partition, offset, value))

    def _open(self) -> Any:
        raise NotImplementedError

    def _poll(self, client: Any) -> Any:
        raise NotImplementedError

    def _close(self, client: Any) -> Any:
        raise NotImplementedError

    def _serve_calls(self, client: Any):
        """Run the queued calls; yields the awaitables of async clients to the caller."""
        while True:
            try:
                fn, future = self._calls.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(client)
                if inspect.isawaitable(result):
                    yield result, future
                    continue
                future.set_result(result)
            except BaseException as exc:
                future.set_exception(exc)

    def _fail_pending(self) -> None:
        while True:
            try:
                _, future = self._calls.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(AssertionError(f"{self.name} stopped"))

    def _run(self) -> None:
        client = None
        try:
            client = self._open()
            while not self._stop.is_set():
                for _, future in self._serve_calls(client):
                    future.set_exception(TypeError("a synchronous client returned an awaitable"))
                self._poll(client)
        except BaseException as exc:
            self.error = exc
        finally:
            try:
                if client is not None:
                    self._close(client)
            except BaseException as exc:
                self.error = self.error or exc
            self.closed_at = time.monotonic()
            self._fail_pending()


def confluent_conf(bootstrap: str, group: str, extra: dict | None = None) -> dict:
    """A consumer that learns of rebalances quickly (heartbeat every 200 ms), with the
    smallest session timeout the broker allows by default (6 s), no auto commit."""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
        "max.poll.interval.ms": 30000,  # also the rebalance timeout librdkafka sends
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 1000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }
    conf.update(extra or {})
    return conf


class ConfluentMember(Member):
    """confluent-kafka (librdkafka) ``Consumer.subscribe`` with rebalance callbacks that record
    what they get and apply it: ``assign``/``unassign`` for the eager protocol,
    ``incremental_assign``/``incremental_unassign`` for cooperative-sticky."""

    def __init__(self, name, bootstrap, group, topic, extra: dict | None = None) -> None:
        conf = confluent_conf(bootstrap, group, {"client.id": name, **(extra or {})})
        super().__init__(name, bootstrap, group, topic, conf)
        strategy = conf.get("partition.assignment.strategy", "")
        self.cooperative = strategy.startswith("cooperative")

    def _parts(self, partitions) -> list[int]:
        return [tp.partition for tp in partitions if tp.topic == self.topic]

    def _open(self):
        from confluent_kafka import Consumer

        def on_assign(consumer, partitions):
            parts = self._parts(partitions)
            if self.cooperative:
                consumer.incremental_assign(partitions)
            else:
                self._set_owned(())  # eager: every assignment is the whole assignment
                consumer.assign(partitions)
            self._event("assign", parts)

        def revoked(kind):
            def callback(consumer, partitions):
                if self.cooperative:
                    consumer.incremental_unassign(partitions)
                else:
                    consumer.unassign()
                self._event(kind, self._parts(partitions))

            return callback

        consumer = Consumer(self.conf)
        consumer.subscribe(
            [self.topic],
            on_assign=on_assign,
            on_revoke=revoked("revoke"),
            on_lost=revoked("lost"),
        )
        return consumer

    def _poll(self, consumer) -> None:
        msg = consumer.poll(self.POLL_S)
        if msg is None:
            return
        if msg.error():
            # informational events (partition EOF is off by default); a fatal one ends the loop
            if msg.error().fatal():
                raise AssertionError(f"{self.name}: fatal consumer error {msg.error()}")
            return
        self._record(msg.partition(), msg.offset(), msg.value())

    def _close(self, consumer) -> None:
        consumer.close()


def python_client_conf(name: str, bootstrap: str, group: str) -> dict:
    """What kafka-python's and aiokafka's consumers share (same option names)."""
    return {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "client_id": name,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 200,
        "max_poll_interval_ms": 30000,
        "metadata_max_age_ms": 5000,
    }


class KafkaPythonMember(Member):
    """kafka-python ``KafkaConsumer(topic, group_id=...)``; ``owned`` is its assignment()."""

    def __init__(self, name, bootstrap, group, topic, extra: dict | None = None) -> None:
        conf = python_client_conf(name, bootstrap, group) | (extra or {})
        super().__init__(name, bootstrap, group, topic, conf)

    def _open(self):
        from kafka import KafkaConsumer

        return KafkaConsumer(self.topic, **self.conf)

    def _poll(self, consumer) -> None:
        for tp, records in consumer.poll(timeout_ms=int(self.POLL_S * 1000)).items():
            for r in records:
                self._record(tp.partition, r.offset, r.value)
        self._set_owned(tp.partition for tp in consumer.assignment() if tp.topic == self.topic)

    def _close(self, consumer) -> None:
        consumer.close(autocommit=False)


class AioKafkaMember(Member):
    """aiokafka ``AIOKafkaConsumer(topic, group_id=...)`` on an event loop of its own thread;
    ``call(fn)`` awaits what ``fn`` returns (``lambda c: c.commit()``)."""

    def __init__(self, name, bootstrap, group, topic, extra: dict | None = None) -> None:
        conf = python_client_conf(name, bootstrap, group) | {"rebalance_timeout_ms": 30000}
        super().__init__(name, bootstrap, group, topic, conf | (extra or {}))

    def _run(self) -> None:
        try:
            asyncio.run(self._arun())
        except BaseException as exc:
            self.error = self.error or exc
        finally:
            self.closed_at = time.monotonic()
            self._fail_pending()

    async def _arun(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(self.topic, **self.conf)
        await consumer.start()
        try:
            while not self._stop.is_set():
                for awaitable, future in self._serve_calls(consumer):
                    try:
                        future.set_result(await awaitable)
                    except BaseException as exc:
                        future.set_exception(exc)
                batches = await consumer.getmany(timeout_ms=int(self.POLL_S * 1000))
                for tp, records in batches.items():
                    for r in records:
                        self._record(tp.partition, r.offset, r.value)
                self._set_owned(
                    tp.partition for tp in consumer.assignment() if tp.topic == self.topic
                )
        except BaseException as exc:
            self.error = exc
        finally:
            await consumer.stop()


MEMBER_KINDS: dict[str, type[Member]] = {
    "confluent": ConfluentMember,
    "kafka-python": KafkaPythonMember,
    "aiokafka": AioKafkaMember,
}


def close_all(members: Iterable[Member | ChildMember]) -> None:
    """Close every member (for finally blocks); raises the first failure after trying all."""
    problems = []
    for m in members:
        try:
            m.close()
        except BaseException as exc:
            problems.append(f"{m.name}: {exc}")
    if problems:
        raise AssertionError("; ".join(problems))


# ---------------------------------------------------------------------------------------------
# a confluent-kafka member in a child process (to be SIGKILLed: no LeaveGroup, no goodbye)

CHILD_SCRIPT = r"""
import json, sys
from confluent_kafka import Consumer

conf, topic = json.loads(sys.argv[1]), sys.argv[2]
owned = set()

def report():
    print(json.dumps(sorted(owned)), flush=True)

def on_assign(consumer, partitions):
    owned.clear()
    owned.update(tp.partition for tp in partitions if tp.topic == topic)
    report()

def on_revoke(consumer, partitions):
    owned.difference_update(tp.partition for tp in partitions if tp.topic == topic)
    report()

consumer = Consumer(conf)
consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
while True:
    consumer.poll(0.05)
"""


class ChildMember:
    """A confluent-kafka member (eager protocol) in a child process; it prints its assignment
    on every change and is ended with SIGKILL."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, log_path: Path):
        self.name = name
        self.topic = topic
        self.conf = confluent_conf(bootstrap, group, {"client.id": name})
        self.log_path = log_path
        self.owned: frozenset[int] = frozenset()
        self.error: BaseException | None = None
        self.proc: subprocess.Popen | None = None
        self._log = None

    def __repr__(self) -> str:
        return f"{self.name}{sorted(self.owned)}"

    def start(self) -> ChildMember:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD_SCRIPT, json.dumps(self.conf), self.topic],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        threading.Thread(target=self._read, name=f"{self.name}-stdout", daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.owned = frozenset(json.loads(line))
            except ValueError:
                continue

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() not in (None, -9):
            raise AssertionError(
                f"{self.name} exited with {self.proc.returncode}: see {self.log_path}"
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None


# ---------------------------------------------------------------------------------------------
# how a group split its partitions


def split_problem(members: list, partitions: int, sizes: list[int] | None = None) -> str | None:
    """None when the members' partitions are disjoint, cover 0..partitions-1 and (if given)
    have ``sizes`` (in any order); else what is off."""
    owned = [m.owned for m in members]
    union = frozenset().union(*owned)
    if sum(len(o) for o in owned) != len(union):
        return f"overlap: {members}"
    if union != frozenset(range(partitions)):
        return f"missing {sorted(set(range(partitions)) - union)}: {members}"
    if sizes is not None and sorted(len(o) for o in owned) != sorted(sizes):
        return f"sizes {sorted(len(o) for o in owned)}, wanted {sorted(sizes)}: {members}"
    return None


def wait_split(
    members: list,
    partitions: int,
    sizes: list[int] | None = None,
    *,
    timeout: float = HANG_GUARD,
    settle: float = 0.3,
    also: Callable[[], str | None] | None = None,
) -> float:
    """Wait until ``split_problem`` (and ``also``, if given) find nothing off, and still nothing
    ``settle`` seconds later; returns the time.monotonic() at which it first held."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    problem: str | None = "never checked"
    while True:
        for m in members:
            m.check()
        now = time.monotonic()
        problem = split_problem(members, partitions, sizes) or (also() if also else None)
        if problem is None:
            if since is None:
                since = now
            if now - since >= settle:
                return since
        else:
            since = None
        if now > deadline:
            raise AssertionError(f"group did not settle within {timeout}s: {problem}")
        time.sleep(0.02)


def wait_records(members: list[Member], want: int, timeout: float = HANG_GUARD) -> None:
    """Until the members together consumed at least ``want`` records."""
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            m.check()
        got = sum(len(m.records) for m in members)
        if got >= want:
            return
        if time.monotonic() > deadline:
            seen = {m.name: {p: len(o) for p, o in m.seen().items()} for m in members}
            raise AssertionError(f"consumed {got} of {want} records within {timeout}s: {seen}")
        time.sleep(0.05)
