"""A randomized transactional workload under faults.

``TxnWorkload``: one transactional producer (a background thread) writing transactions of a
few records to random partitions, each committed or aborted as a seeded RNG says; every value
names its transaction and its place in it. ``verify()`` then checks what a read_committed
consumer shows against the outcomes: nothing of an aborted transaction, all of every committed
one (no torn transaction), all or nothing of one whose commit failed in doubt, nothing else, and
nothing twice. It has the shape of support/load's ``Workload`` (a context manager,
``wait_txns`` like ``wait_acks``, ``verify``), so a fault run can open it beside that one.

Errors are handled as support/txn_faults' ``CtpApp`` handles them, and ``verify`` ends with its
checks (no transaction left open, every partition stable).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import transactions as tx
from .clients import HANG_GUARD
from .cluster import Cluster
from .txn_faults import (
    LIVENESS,
    Abortable,
    Fatal,
    assert_no_open_transaction,
    kafka_error,
    retrying,
    wait_all_stable,
)

COMMITTED, ABORTED, IN_DOUBT = "committed", "aborted", "in doubt"


@dataclass
class Txn:
    number: int
    values: dict[bytes, int]  # value -> partition
    outcome: str | None = None  # COMMITTED, ABORTED or IN_DOUBT once finished


class TxnWorkload:
    """A transactional producer writing transactions of 1..``max_records`` records to random
    partitions of ``topic``, committing each with probability ``commit_ratio`` (else aborting),
    as ``random.Random(seed)`` decides; errors are handled as ``CtpApp`` handles them."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        partitions: int,
        seed: int,
        *,
        transactional_id: str | None = None,
        max_records: int = 12,
        commit_ratio: float = 0.6,
        pause_s: float = 0.02,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.seed = seed
        self.rng = random.Random(seed)
        self.transactional_id = transactional_id or f"txn-workload-{seed}-{time.time_ns()}"
        self.max_records = max_records
        self.commit_ratio = commit_ratio
        self.pause_s = pause_s  # between transactions: the brokers share two cores with it
        self.bootstrap = cluster.bootstrap()
        self.txns: list[Txn] = []
        self.errors: Counter[str] = Counter()
        self.recreated = 0
        self.crash: BaseException | None = None
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txn-workload", daemon=True)
        self.producer: Any = None

    def __enter__(self) -> TxnWorkload:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(LIVENESS)
        assert not self._thread.is_alive(), f"the transactional producer hangs: {self.summary()}"

    # --- producing ---------------------------------------------------------------------------

    def _new_producer(self) -> None:
        from confluent_kafka import Producer

        if self.producer is not None:
            self.recreated += 1
        self.producer = Producer(
            {"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id}
        )
        self._call(lambda: self.producer.init_transactions(HANG_GUARD), "init")

    def _call(self, call: Callable[[], Any], what: str) -> Any:
        def noted(err: Any, _retried: bool) -> None:
            with self.lock:
                self.errors[f"{what}: {err.name()}"] += 1

        return retrying(call, noted)

    def _one(self, txn: Txn, commit: bool) -> str:
        """Writes and ends ``txn``; its outcome."""
        from confluent_kafka import KafkaException

        failed: list[Any] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(err)

        self._call(self.producer.begin_transaction, "begin")
        for value, partition in txn.values.items():
            try:
                self.producer.produce(
                    self.topic, value=value, partition=partition, on_delivery=delivered
                )
            except KafkaException as exc:  # the transaction is in an error state already
                raise Abortable(str(kafka_error(exc))) from exc
        self.producer.flush(HANG_GUARD)
        if failed:
            raise Abortable(f"delivery failed: {failed[0]}")
        if not commit:
            self._call(lambda: self.producer.abort_transaction(HANG_GUARD), "abort")
            return ABORTED
        try:
            self._call(lambda: self.producer.commit_transaction(HANG_GUARD), "commit")
        except Abortable:
            # EndTxn(commit) may be on its way (a request timed out): aborted only if the
            # abort goes through
            try:
                self._call(lambda: self.producer.abort_transaction(HANG_GUARD), "abort")
            except Fatal:
                return IN_DOUBT
            return ABORTED
        except Fatal:
            return IN_DOUBT  # the decision may have been stored: all of it or none of it
        return COMMITTED

    def _run(self) -> None:
        try:
            self._new_producer()
            number = 0
            while not self._stop.is_set():
                n = self.rng.randint(1, self.max_records)
                values = {
                    f"{self.seed}-{number:05d}-{i:02d}/{n:02d}".encode(): self.rng.randrange(
                        self.partitions
                    )
                    for i in range(n)
                }
                commit = self.rng.random() < self.commit_ratio
                txn = Txn(number, values)
                with self.lock:
                    self.txns.append(txn)
                number += 1
                try:
                    outcome = self._one(txn, commit)
                except Abortable:
                    try:
                        self._call(lambda: self.producer.abort_transaction(HANG_GUARD), "abort")
                    except Fatal:
                        self._new_producer()  # fences the old one and aborts its transaction
                    outcome = ABORTED
                except Fatal:
                    self._new_producer()
                    outcome = ABORTED
                with self.lock:
                    txn.outcome = outcome
                if outcome == IN_DOUBT:
                    self._new_producer()
                time.sleep(self.pause_s)
        except BaseException as exc:
            self.crash = exc
        finally:
            if self.producer is not None:
                from confluent_kafka import KafkaException

                with contextlib.suppress(KafkaException):  # a fenced one raises it again
                    self.producer.flush(0)

    # --- progress ----------------------------------------------------------------------------

    def finished(self) -> Counter[str]:
        with self.lock:
            return Counter(t.outcome for t in self.txns if t.outcome is not None)

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "transactions": dict(self.finished()),
            "recreated": self.recreated,
            "errors": dict(self.errors),
            "crash": repr(self.crash) if self.crash else None,
        }

    def wait_txns(self, n: int, timeout: float = LIVENESS) -> None:
        """Waits until ``n`` more transactions have finished (committed or aborted) than
        now."""
        base = sum(self.finished().values())
        deadline = time.monotonic() + timeout
        while sum(self.finished().values()) < base + n:
            if self.crash is not None:
                raise AssertionError(f"the transactional producer crashed: {self.crash!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {n} transactions within {timeout}s: {self.summary()}")
            time.sleep(0.05)

    # --- the checks --------------------------------------------------------------------------

    def verify(self) -> dict[str, Any]:
        """Stops the producer, then: no transaction is left open (every partition's last
        stable offset is its high watermark, the id is finished), and a read_committed
        consumer shows exactly the records of the committed transactions (and, of each in
        doubt, all or none), each once, in the order they were written in each partition;
        a read_uncommitted consumer shows every committed record too."""
        self.stop()
        assert self.crash is None, f"the transactional producer crashed: {self.crash!r}"
        c = self.cluster
        done = assert_no_open_transaction(c, self.transactional_id, [(self.topic, self.partitions)])
        ends = wait_all_stable(c, self.topic, self.partitions)
        shown = tx.read_all("confluent", c.bootstrap(), self.topic, ends, committed=True)
        everything = tx.read_all("confluent", c.bootstrap(), self.topic, ends, committed=False)
        problems = self.problems(
            [(g.partition, g.value) for g in shown], {g.value for g in everything}
        )
        assert not problems, f"{len(problems)} problems: {problems[:20]}; {self.summary()}"
        return {
            **self.summary(),
            "shown": len(shown),
            "stored": len(everything),
            "state": done.state,
        }

    def problems(
        self, shown: list[tuple[int, bytes | None]], stored: set[bytes | None]
    ) -> list[str]:
        """What is wrong with ``shown`` ((partition, value) in the order a read_committed
        consumer showed them) given the outcomes; ``stored``: every value read_uncommitted."""
        by_value = {v: (t, p) for t in self.txns for v, p in t.values.items()}
        problems: list[str] = []
        counts = Counter(v for _, v in shown)
        problems += [f"{v!r} shown {n} times" for v, n in counts.items() if n > 1]
        last: dict[int, int] = {}
        for p, v in shown:
            if v not in by_value:
                problems.append(f"{v!r} shown in partition {p}: never sent")
                continue
            txn, partition = by_value[v]
            if partition != p:
                problems.append(f"{v!r} shown in partition {p}, sent to {partition}")
            if txn.number < last.get(p, -1):
                problems.append(f"{v!r} shown in partition {p} after transaction {last[p]}")
            last[p] = max(last.get(p, -1), txn.number)
        for txn in self.txns:
            seen = [v for v in txn.values if counts[v]]
            if txn.outcome == ABORTED and seen:
                problems.append(f"aborted transaction {txn.number} shown: {seen}")
            elif txn.outcome == COMMITTED and len(seen) != len(txn.values):
                missing = sorted(set(txn.values) - set(seen))
                problems.append(
                    f"committed transaction {txn.number} torn: {len(seen)} of "
                    f"{len(txn.values)} shown, missing {missing}"
                )
            elif txn.outcome in (IN_DOUBT, None) and seen and len(seen) != len(txn.values):
                problems.append(f"transaction {txn.number} ({txn.outcome}) torn: shown {seen}")
            if txn.outcome == COMMITTED:
                lost = [v for v in txn.values if v not in stored]
                if lost:
                    problems.append(f"committed transaction {txn.number}: not stored {lost}")
        return problems
