"""A randomized fault run: three brokers on etcd and S3 (moto behind support/s3_faults) under
idempotent acks=all load, a consumer group and a transactional producer on a second topic
(seeded random transactions, committed or aborted: support/txn_workload ``TxnWorkload``),
through a seeded schedule of faults drawn from ``FAULTS``. It ends with every check of
``Workload.verify`` (every acked record at its acked offset exactly once, the storage
invariants over etcd's whole history, the live consumer never rewound nor out of range), the
group's checks (support/group_reader), ``TxnWorkload.verify`` (no aborted record visible to
read_committed, no committed transaction lost or torn, nothing twice, nothing left open), and
no broker logging a gap in its write-ahead runs or answering KAFKA_STORAGE_ERROR once the
faults are over.

``run(seed)`` is the whole run; tests/integration/test_fault_run.py runs a short fixed seed,
bench/fault_runs.py many seeds."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .cluster import Cluster, create_topic, served_offsets
from .group_reader import GroupReader
from .load import LIVENESS_TIMEOUT, Workload, wait_for
from .procs import paused
from .s3_faults import S3FaultProxy
from .txn_workload import TxnWorkload

PARTITIONS = 6
LEASE_TTL_MS = 3000
FLUSH_INTERVAL_MS = 200
COMPACTION_ENV = {
    "KAFSCALE_WAL_COMPACTION_AGE_MS": "1000",
    "KAFSCALE_WAL_COMPACTION_INTERVAL_MS": "200",
}
# What the brokers must not log once the faults are over: a hole in a partition's log as they
# see it (reads of it answer KAFKA_STORAGE_ERROR).
AFTER_FAULTS = ("write-ahead runs have a gap", "view of the log skips offsets")


@dataclass
class Run:
    cluster: Cluster
    proxy: S3FaultProxy
    rng: random.Random
    done: list[str] = field(default_factory=list)

    @property
    def lease_s(self) -> float:
        return LEASE_TTL_MS / 1000

    def pick_broker(self):
        return self.rng.choice(sorted(self.cluster.live, key=lambda b: b.broker_id))

    def broker_lease(self, broker) -> int | None:
        key = f"{self.cluster.meta.root}/brokers/{broker.broker_id}"
        return self.cluster.etcd.client().leases_of(key).get(key) or None


def etcd_stopped(r: Run) -> None:
    r.cluster.etcd.stop()
    time.sleep(r.rng.uniform(1, 6))
    r.cluster.etcd.start()


def etcd_killed(r: Run) -> None:
    r.cluster.etcd.kill()
    time.sleep(r.rng.uniform(1, 6))
    r.cluster.etcd.start()


def etcd_frozen_past_the_lease(r: Run) -> None:
    with paused(r.cluster.etcd):
        time.sleep(r.lease_s * r.rng.uniform(1.5, 2.5))


def etcd_restarted_twice(r: Run) -> None:
    for _ in range(2):
        r.cluster.etcd.stop()
        time.sleep(r.rng.uniform(0.2, 1.5))
        r.cluster.etcd.start()
        time.sleep(r.rng.uniform(0.2, 1.0))


def etcd_flapping(r: Run) -> None:
    for _ in range(r.rng.randint(3, 6)):
        with paused(r.cluster.etcd):
            time.sleep(r.rng.uniform(0.2, 1.2))
        time.sleep(r.rng.uniform(0.2, 0.8))


def s3_frozen(r: Run) -> None:
    with paused(r.cluster.moto):
        time.sleep(r.rng.uniform(1, 6))


def s3_unavailable(r: Run) -> None:
    r.proxy.set("unavailable")
    time.sleep(r.rng.uniform(1, 6))
    r.proxy.set("pass")


def s3_slow(r: Run) -> None:
    r.proxy.set("slow", r.rng.uniform(0.3, 2.0))
    time.sleep(r.rng.uniform(2, 6))
    r.proxy.set("pass")


def broker_killed(r: Run) -> None:
    broker = r.pick_broker()
    broker.kill()
    time.sleep(r.rng.uniform(0, r.lease_s * 1.5))
    broker.start()


def broker_frozen(r: Run) -> None:
    with paused(r.pick_broker()):
        time.sleep(r.lease_s * r.rng.uniform(0.5, 2.5))


def session_expired(r: Run) -> None:
    """One broker's etcd lease revoked (as when etcd expires it alone): its owner keys go."""
    lease = r.broker_lease(r.pick_broker())
    if lease is not None:
        r.cluster.etcd.client().lease_revoke(lease)


FAULTS: dict[str, Callable[[Run], None]] = {
    f.__name__: f
    for f in (
        etcd_stopped,
        etcd_killed,
        etcd_frozen_past_the_lease,
        etcd_restarted_twice,
        etcd_flapping,
        s3_frozen,
        s3_unavailable,
        s3_slow,
        broker_killed,
        broker_frozen,
        session_expired,
    )
}


def schedule(seed: int, faults: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(sorted(FAULTS)) for _ in range(faults)]


def start_cluster(make_cluster, proxy: S3FaultProxy) -> Cluster:
    return make_cluster(
        3,
        lease_ttl_ms=LEASE_TTL_MS,
        flush_interval_ms=FLUSH_INTERVAL_MS,
        env=COMPACTION_ENV,
        s3_endpoint=proxy.endpoint,
    )


def run(make_cluster, moto, seed: int, faults: int) -> dict:
    """One run of ``faults`` faults drawn by ``seed``; raises AssertionError naming the seed."""
    proxy = S3FaultProxy(moto.endpoint).start()
    try:
        c = start_cluster(make_cluster, proxy)
        topic, txn_topic = f"fault-run-{seed}", f"fault-run-txn-{seed}"
        topics = {topic: PARTITIONS, txn_topic: PARTITIONS}
        for name in topics:
            create_topic(c.bootstrap(), name, PARTITIONS)
        c.wait_converged(list(topics), topics, until=c.claimed)
        r = Run(c, proxy, random.Random(seed))
        with (
            Workload(c, topic, PARTITIONS, idempotent=True) as wl,
            GroupReader(c.bootstrap(), topic, f"group-{seed}") as group,
            TxnWorkload(c, txn_topic, PARTITIONS, seed) as txns,
        ):
            wl.wait_acks(10)
            txns.wait_txns(3)
            for name in schedule(seed, faults):
                r.done.append(name)
                FAULTS[name](r)
                c.wait_converged(list(topics), topics)
                wl.wait_acks(5)
                txns.wait_txns(3)
            marks = {b.broker_id: b.log_size() for b in c.live}
            wl.wait_acks(20)
            try:
                stats = wl.verify()
                txn_stats = txns.verify()
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, faults {r.done}: {exc}") from None
            ends = {p: end for p, (_start, end) in _ends(c, topic).items()}
            wait_for(lambda: group.caught_up(ends), LIVENESS_TIMEOUT, "the group to commit")
        problems = group.check(wl.acked(), ends)
        for b in c.live:  # every broker serves the whole log, none answers an error
            for p, end in ends.items():
                if served_offsets(b.bootstrap, topic, p, end) != list(range(end)):
                    problems.append(f"{b.name} does not serve {topic}/{p} 0..{end - 1}")
        for b in c.live:
            after = b.log_since(marks.get(b.broker_id, 0))
            problems += [
                f"{b.name} logged {w!r} after the faults" for w in AFTER_FAULTS if w in after
            ]
        assert not problems, f"seed {seed}, faults {r.done}: {problems[:10]}"
        transactions = {
            "transactions": txn_stats["transactions"],
            "txn_errors": txn_stats["errors"],
        }
        return {
            "seed": seed,
            "faults": r.done,
            "s3_refused": proxy.refused,
            **stats,
            **transactions,
        }
    finally:
        proxy.stop()


def _ends(c: Cluster, topic: str) -> dict[int, tuple[int, int]]:
    return c.end_offsets(topic, PARTITIONS)
