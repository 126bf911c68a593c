"""A consumer-group member reading along while faults happen (confluent-kafka, subscribe,
auto commit), and the checks of what it saw: within one assignment a partition's offsets only
move forward, a partition (re)assigned starts no lower than the last offset the group was told
it committed for it, no offset was out of range, and in the end the group consumed every
acknowledged record and committed up to the end."""

from __future__ import annotations

import threading
from collections import defaultdict


class GroupReader:
    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.lock = threading.Lock()
        self.values: set[bytes] = set()
        self.last: dict[int, int] = {}  # partition -> last offset seen in its assignment
        self.committed: dict[int, int] = defaultdict(int)  # acknowledged commits
        self.problems: list[str] = []
        self.errors: list[str] = []
        self.crash: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-reader", daemon=True)

    def __enter__(self) -> GroupReader:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _on_commit(self, err, partitions) -> None:
        if err is not None:
            return
        with self.lock:
            for tp in partitions:
                if tp.error is None and tp.offset >= 0:
                    self.committed[tp.partition] = max(self.committed[tp.partition], tp.offset)

    def _on_assign(self, _consumer, partitions) -> None:
        with self.lock:
            for tp in partitions:
                self.last.pop(tp.partition, None)  # a new assignment starts from its commit

    def _run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.group,
                    "auto.offset.reset": "earliest",
                    "auto.commit.interval.ms": 500,
                    "on_commit": self._on_commit,
                    "topic.metadata.refresh.interval.ms": 1000,
                    "reconnect.backoff.max.ms": 500,
                    "error_cb": lambda err: None,
                }
            )
            consumer.subscribe([self.topic], on_assign=self._on_assign)
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is not None:
                    self._seen(msg)
            consumer.close()
        except BaseException as exc:
            self.crash = exc

    def _seen(self, msg) -> None:
        with self.lock:
            if msg.error():
                self.errors.append(msg.error().name())
                if "OFFSET" in msg.error().name():
                    self.problems.append(f"told an offset was out of range: {msg.error()}")
                return
            p, offset = msg.partition(), msg.offset()
            last = self.last.get(p)
            if last is None and offset < self.committed[p]:
                self.problems.append(
                    f"partition {p} (re)assigned at {offset}, below the offset {self.committed[p]}"
                    " the group was told it committed"
                )
            elif last is not None and offset <= last:
                self.problems.append(f"partition {p}: offset {offset} after {last}")
            self.last[p] = offset
            self.values.add(msg.value())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def check(self, acked: dict[bytes, tuple[int, int | None]], ends: dict[int, int]) -> list[str]:
        """After the producers stopped and the group caught up (``caught_up``)."""
        problems = list(self.problems)
        if self.crash is not None:
            problems.append(f"group reader crashed: {self.crash!r}")
        missing = [v for v in acked if v not in self.values]
        if missing:
            problems.append(f"{len(missing)} acked records never consumed, e.g. {missing[:3]}")
        with self.lock:
            behind = {p: (self.committed[p], end) for p, end in ends.items()}
        behind = {p: ce for p, ce in behind.items() if ce[0] < ce[1]}
        if behind:
            problems.append(f"group committed below the end (committed, end): {behind}")
        return problems

    def caught_up(self, ends: dict[int, int]) -> bool:
        with self.lock:
            return all(self.committed[p] >= end for p, end in ends.items())
