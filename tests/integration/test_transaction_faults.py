"""Transactions through broker faults on a 3-broker cluster (etcd + S3): the coordinator of a
transactional id or a partition's owner killed -9 (or frozen) while transactions run, and what
read_committed consumers show afterwards.

- A consume-transform-produce app (support/txn_faults ``CtpApp``: confluent-kafka with its
  defaults plus the transactional id, a group consumer with auto commit off, offsets sent with
  ``consumer_group_metadata()``, a commit each round, recovery as librdkafka prescribes) over
  3,000 input records on 6 partitions, while the broker coordinating the transactional id, or
  the owner of an output partition, is killed -9 in the middle of a transaction (its records
  written, before its offsets and commit) and started again 8 rounds later: a read_committed
  consumer of the output shows every input record transformed exactly once, in its partition's
  order; the group's committed offsets are the input's end offsets; no transaction is left
  open (every partition's last stable offset is its high watermark, asked of its owner;
  DescribeTransactions tells the id finished; no broker's ListTransactions lists it unfinished;
  its record in etcd has no markers left to write).
- A commit decided and stored, its coordinator killed -9 before the markers are all written:
  the owner of some of the transaction's partitions is frozen (SIGSTOP) before EndTxn, so its
  markers cannot be written; the test waits until etcd holds the PrepareCommit, then kills the
  coordinator. The frozen owner is thawed at once (it writes its markers itself) or left frozen
  past its lease (the surviving broker takes every partition and writes the markers from the
  producer state it rebuilt, then the zombie wakes up). Either way the transaction becomes
  CompleteCommit under the new coordinator, the producer's commit_transaction succeeds, a
  read_committed consumer shows all of it (and of the transaction before it) and nothing
  else, each partition holds exactly one commit marker per transaction and no abort marker, and
  the offsets sent in the transaction are the group's.
- A randomized transactional workload (support/txn_workload ``TxnWorkload``: transactions of a
  few records on random partitions, committed or aborted as a seeded RNG says) through the kill
  -9 of the busiest owner (started again later) and etcd frozen for twice the lease: nothing of
  an aborted transaction is visible to read_committed, all of every committed transaction is (no
  torn transaction), nothing else is, nothing twice. The randomized fault run
  (support/fault_run, tests/integration/test_fault_run.py) runs the same workload through its
  seeded schedule of faults; here it meets the faults aimed at transactions (the coordinator
  killed, a zombie owner) that the schedule may not draw.

Read_committed visibility is per partition, as in Kafka: between the first and the last marker
of a transaction, a consumer of a marked partition may see its part while another partition's
part is still behind the last stable offset. What must never happen, and is checked, is an
outcome that differs between partitions (a commit marker here, an abort there), a part that
never becomes visible, or a part visible of a transaction that did not commit.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from support import kafka_wire as kw
from support import transactions as tx
from support import txn_faults as tf
from support import txn_workload as tw
from support.clients import HANG_GUARD, Msg, confluent_produce, unique
from support.cluster import Cluster, create_topic, moved_away
from support.group_wire import find_coordinator as find_group_coordinator
from support.procs import Broker, assert_no_panic, paused

PARTITIONS = 6
LEASE_TTL_MS = 3000
ARGS = ["--group-initial-rebalance-delay-ms", "0"]  # one consumer: assigned at once
INPUT_RECORDS = 3000
BATCH = 100  # input records per transaction at most
KILL_ROUND = 8  # the first transaction (counted from 0) in which the victim may be killed
RESTART_AFTER = 4  # transactions after the kill: the victim starts again in the next one
ABORT_ROUND, FATAL_ROUND = 3, 5  # the app aborts this one; re-creates its clients in this one
SEED = 7


def start(make: Callable[..., Cluster], lease_ttl_ms: int = LEASE_TTL_MS) -> Cluster:
    return make(3, lease_ttl_ms=lease_ttl_ms, args=ARGS)


def new_topic(c: Cluster, prefix: str) -> str:
    topic = unique(prefix)
    create_topic(c.bootstrap(), topic, PARTITIONS)
    c.wait_converged([topic], {topic: PARTITIONS}, until=c.claimed)
    return topic


def txn_coordinator(c: Cluster, transactional_id: str) -> int:
    with kw.RawConnection.to(c.any_live().bootstrap) as conn:
        found = tx.find_coordinator(conn, transactional_id, tx.TRANSACTION_KEY)
    assert found.error_code == kw.NONE and found.node_id in c.live_ids, found
    return found.node_id


def group_coordinator(c: Cluster, group: str) -> int:
    with kw.RawConnection.to(c.any_live().bootstrap) as conn:
        found = find_group_coordinator(conn, group)
    assert found.error_code == kw.NONE and found.node_id in c.live_ids, found
    return int(found.node_id)


def pick(prefix: str, coordinator: Callable[[str], int], wanted: Callable[[int], bool]) -> str:
    """A fresh id (transactional id or group) whose coordinator is a broker ``wanted``."""
    for _ in range(200):
        candidate = unique(prefix)
        if wanted(coordinator(candidate)):
            return candidate
    raise AssertionError(f"no {prefix} id coordinated where wanted")


def owned_by(c: Cluster, topic: str) -> dict[int, list[int]]:
    """{broker id: the partitions of ``topic`` it owns}."""
    out: dict[int, list[int]] = defaultdict(list)
    for p, lead in sorted(c.leaders(topic).items()):
        out[lead.broker_id].append(p)
    return dict(out)


def all_survive(c: Cluster) -> None:
    for b in c.brokers.values():
        if b.running:
            assert_no_panic(b)


# ---------------------------------------------------------------------------------------------
# consume-transform-produce through a kill -9


@pytest.mark.parametrize("victim_role", ["txn-coordinator", "output-owner"])
def test_consume_transform_produce_through_a_kill(
    cluster: Callable[..., Cluster], victim_role: str
) -> None:
    """3,000 input records through the app, 100 at most a transaction. The victim is killed
    -9 in the middle of transaction 8: the broker coordinating the transactional id once the
    transaction's records and offsets are sent (EndTxn goes to the next coordinator; the
    group's coordinator is another broker), or, once the records are written, the owner of
    one of the output partitions the transaction wrote to (the first such transaction from the
    8th on if 8 wrote only to partitions of the coordinator of the transactional id and the
    group, which stays alive): its markers are for its heir to write. It is started again in
    the middle of a transaction 4 later (partitions and the coordinator move back), or after
    the run if that ended first. Before that the app aborts transaction 3 itself (and
    rewinds) and, in transaction 5, re-creates its producer and consumer as after a fatal
    error (the new producer's init_transactions aborts what the old one left open). The
    output, as read_committed shows it, is the input transformed, each record once, in order;
    the group's offsets are the input's ends; nothing is left open."""
    c = start(cluster)
    source, output = new_topic(c, "ctp-in"), new_topic(c, "ctp-out")
    msgs = [
        Msg(i % PARTITIONS, f"k{i}".encode(), f"in-{i:05d}".encode()) for i in range(INPUT_RECORDS)
    ]
    delivered = confluent_produce(c.bootstrap(), source, msgs)
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for m, _ in sorted(zip(msgs, delivered, strict=True), key=lambda md: md[1]):
        assert m.value is not None
        values[m.partition].append(m.value)
    ends = {p: len(v) for p, v in values.items()}
    assert tf.wait_all_stable(c, source, PARTITIONS) == ends

    # the transactional id's and the group's coordinators: "txn-coordinator" kills the
    # first, which coordinates no group; "output-owner" has both on one broker, left alive
    transactional_id = unique("ctp-tx")
    coordinator = txn_coordinator(c, transactional_id)
    if victim_role == "txn-coordinator":
        group = pick("ctp", lambda g: group_coordinator(c, g), lambda b: b != coordinator)
    else:
        group = pick("ctp", lambda g: group_coordinator(c, g), lambda b: b == coordinator)
    faults: list[str] = []
    victims: list[Broker] = []
    killed_in: list[int] = []

    def kill(n: int, phase: str, partitions: set[int]) -> None:
        """The victim, once the round is one it can be killed in."""
        if victim_role == "txn-coordinator":
            if phase != "offsets":
                return
            victim = c.brokers[coordinator]
        else:
            owners = c.leaders(output)
            others = sorted(p for p in partitions if owners[p].broker_id != coordinator)
            if phase != "produced" or not others:
                return  # no partition of this round's owned by a broker to kill
            victim = c.brokers[owners[others[0]].broker_id]
            faults.append(f"partitions written: {sorted(partitions)}, {others[0]} first")
        faults.append(f"killed broker{victim.broker_id} in transaction {n} ({phase})")
        victims.append(victim)
        killed_in.append(n)
        victim.kill()

    def hook(n: int, phase: str, partitions: set[int]) -> None:
        # the app's own failures first: its recovery paths run on the cluster too
        if n == ABORT_ROUND and phase == "offsets":
            raise tf.Abortable("injected: the app aborts this transaction")
        if n == FATAL_ROUND and phase == "offsets":
            raise tf.Fatal("injected: the app re-creates its producer and consumer")
        if not killed_in and n >= KILL_ROUND:
            kill(n, phase, partitions)
            return
        due = killed_in and n >= killed_in[0] + RESTART_AFTER and phase == "produced"
        if due and not victims[0].running:
            faults.append(f"started broker{victims[0].broker_id} in transaction {n}")
            victims[0].start()

    app = tf.CtpApp(c.bootstrap(), source, output, group, transactional_id, batch=BATCH, hook=hook)
    try:
        stats = app.run(ends)
    finally:
        app.close()
    assert killed_in, f"no broker was killed: {stats}"
    if not victims[0].running:  # the app was done before the restart was due
        faults.append(f"started broker{victims[0].broker_id} after the run")
        victims[0].start()
    assert stats.aborts >= 1 and stats.recreated >= 1, stats
    c.wait_converged([source, output], {source: PARTITIONS, output: PARTITIONS})

    tf.assert_no_open_transaction(c, transactional_id, [(output, PARTITIONS), (source, PARTITIONS)])
    assert tf.committed_offsets(c.bootstrap(), group, source, PARTITIONS) == ends
    out_ends = tf.wait_all_stable(c, output, PARTITIONS)
    shown = tx.read_all("confluent", c.bootstrap(), output, out_ends, committed=True)
    got = {p: [g.value or b"" for g in shown if g.partition == p] for p in range(PARTITIONS)}
    want = {p: [tf.transform(v) for v in values[p]] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        if got[p] != want[p]:
            lost = sorted(set(want[p]) - set(got[p]))
            twice = sorted(v for v in set(got[p]) if got[p].count(v) > 1)
            raise AssertionError(
                f"output partition {p}: {len(got[p])} records shown, {len(want[p])} wanted; "
                f"lost {lost[:10]} ({len(lost)}), shown twice {twice[:10]} ({len(twice)}); "
                f"faults {faults}; app {stats}"
            )
    all_survive(c)
    print(victim_role, faults, stats)


# ---------------------------------------------------------------------------------------------
# a decided commit whose coordinator dies before its markers are written


def commit_in_background(producer: tx.ConfluentTxnProducer) -> tuple[threading.Thread, list[Any]]:
    """commit_transaction in a thread, again while it fails with a retriable error (as an
    application does); the list gets None once it succeeded, else the exception."""
    outcome: list[Any] = []

    def commit() -> None:
        deadline = time.monotonic() + tf.LIVENESS
        while True:
            try:
                producer.commit()
                outcome.append(None)
                return
            except Exception as exc:
                err = tf.kafka_error(exc)
                if err is None or not err.retriable() or time.monotonic() > deadline:
                    outcome.append(exc)
                    return

    thread = threading.Thread(target=commit, name="commit", daemon=True)
    thread.start()
    return thread, outcome


def send_offsets(producer: tx.ConfluentTxnProducer, c: Cluster, group: str, topic: str) -> None:
    """send_offsets_to_transaction with the metadata of a consumer of ``group`` (one that has
    not joined it)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": c.bootstrap(), "group.id": group})
    try:
        tps = [TopicPartition(topic, p, 100 + p) for p in range(PARTITIONS)]
        metadata = consumer.consumer_group_metadata()
        producer.producer.send_offsets_to_transaction(tps, metadata, HANG_GUARD)
    finally:
        consumer.close()


def wait_decided(c: Cluster, transactional_id: str, frozen: list[int]) -> dict[str, Any]:
    """Waits (bounded) until the id's record in etcd is PrepareCommit; the record. The
    frozen owner's partitions must be among the ones still to mark."""
    seen: list[dict[str, Any]] = []

    def check() -> str | None:
        record = tf.txn_record(c, transactional_id)
        if record is None or record["state"] != "PrepareCommit":
            return f"record {record}"
        seen[:] = [record]
        return None

    tx.wait_for(check, tf.LIVENESS)
    unmarked = {p for _, p in seen[0].get("unmarked", [])}
    assert set(frozen) <= unmarked, f"frozen partitions {frozen} marked? {seen[0]}"
    return seen[0]


@pytest.mark.parametrize("fate", ["owner-thawed", "owner-replaced", "s3-frozen"])
def test_a_decided_commit_outlives_its_coordinator(
    cluster: Callable[..., Cluster], fate: str
) -> None:
    """A committed transaction, then a second one of 60 records over all 6 partitions and
    offsets of a group. Something is frozen (SIGSTOP) so that markers cannot be written, and
    EndTxn(commit) is sent (commit_transaction, in a thread); once etcd holds PrepareCommit
    (with the frozen markers still to write) the coordinator is killed -9.
    "owner-thawed": the owner of some partitions (not the coordinator) is frozen and resumed
    at once (the lease is 6 s: it keeps its partitions and writes its own markers).
    "owner-replaced": it stays frozen until the third broker owns every partition and the
    transaction is CompleteCommit, then wakes up as a zombie. "s3-frozen": S3 is frozen, so no
    marker can be committed anywhere, the coordinator's own included (they die with it);
    S3 is thawed once the coordinator is dead. The commit succeeds; the transaction is
    CompleteCommit under the new coordinator; read_committed and read_uncommitted consumers
    show both transactions' records, all and only those; each partition has exactly two
    markers, both commits; the group's offsets are the ones sent; the killed coordinator
    starts again and nothing changes."""
    lease = 6000 if fate == "owner-thawed" else LEASE_TTL_MS
    c = start(cluster, lease)
    topic = new_topic(c, "decided")
    owners = owned_by(c, topic)
    assert len(owners) == 3, f"want partitions on every broker: {owners}"
    transactional_id = unique("decided-tx")
    coordinator = c.brokers[txn_coordinator(c, transactional_id)]
    assert coordinator.broker_id is not None
    frozen = next(c.brokers[b] for b in sorted(owners) if b != coordinator.broker_id)
    assert frozen.broker_id is not None
    frozen_partitions = owners[frozen.broker_id]
    before = c.leaders(topic)
    group = unique("decided-grp")

    producer = tx.ConfluentTxnProducer(c.bootstrap(), transactional_id)
    try:
        producer.init()
        producer.begin()
        first_msgs = tx.records("first", 12, PARTITIONS)
        first = tx.placed(first_msgs, producer.send(topic, first_msgs))
        producer.commit()
        producer.begin()
        msgs = tx.records("decided", 60, PARTITIONS)
        decided = tx.placed(msgs, producer.send(topic, msgs))
        send_offsets(producer, c, group, topic)
        stopped = c.moto if fate == "s3-frozen" else frozen
        unmarkable = list(range(PARTITIONS)) if fate == "s3-frozen" else frozen_partitions
        with paused(stopped):
            thread, outcome = commit_in_background(producer)
            record = wait_decided(c, transactional_id, unmarkable)
            coordinator.kill()
            if fate == "owner-replaced":
                # the third broker alone is live: it owns every partition once it claimed them
                c.wait_converged([topic], {topic: PARTITIONS}, until=c.claimed)
                done = tf.wait_finished(c, transactional_id)
                assert done.state == "CompleteCommit", done
        thread.join(tf.LIVENESS)
        assert not thread.is_alive(), "commit_transaction hangs"
        assert outcome == [None], f"commit_transaction failed: {outcome}"
    finally:
        producer.close()
    if fate == "owner-thawed":
        now = c.leaders(topic)
        kept = {p: now[p] for p in frozen_partitions}
        assert kept == {p: before[p] for p in frozen_partitions}, (
            f"the frozen owner lost its partitions (not the case under test): {kept}"
        )

    done = tf.assert_no_open_transaction(c, transactional_id, [(topic, PARTITIONS)])
    assert done.state == "CompleteCommit", done
    assert done.producer_id == record["producer_id"], (done, record)
    assert txn_coordinator(c, transactional_id) != coordinator.broker_id
    want = {p: [v for q, _, v in sorted(first + decided) if q == p] for p in range(PARTITIONS)}
    ends = tf.wait_all_stable(c, topic, PARTITIONS)
    assert ends == dict.fromkeys(range(PARTITIONS), 2 + 10 + 2), "records and two markers each"
    for read_committed in (True, False):
        shown = tx.read_all("confluent", c.bootstrap(), topic, ends, committed=read_committed)
        got = {p: [g.value for g in shown if g.partition == p] for p in range(PARTITIONS)}
        assert got == want, f"read_committed={read_committed}"
    for p in range(PARTITIONS):
        marks = tf.markers(tf.owner_of(c, topic, p), topic, p, ends[p])
        assert [(m.producer_id, m.commit) for m in marks] == [(record["producer_id"], True)] * 2, (
            p,
            marks,
        )
        assert [m.offset for m in marks] == [2, ends[p] - 1], (p, marks)
    assert tf.committed_offsets(c.bootstrap(), group, topic, PARTITIONS) == {
        p: 100 + p for p in range(PARTITIONS)
    }
    # the killed coordinator comes back: nothing about the transaction changes
    coordinator.start()
    c.wait_converged([topic], {topic: PARTITIONS}, until=c.claimed)
    again = tf.assert_no_open_transaction(c, transactional_id, [(topic, PARTITIONS)])
    assert (again.state, again.producer_id) == ("CompleteCommit", done.producer_id), again
    assert tf.wait_all_stable(c, topic, PARTITIONS) == ends
    all_survive(c)


# ---------------------------------------------------------------------------------------------
# random commits and aborts through faults


def busiest(c: Cluster, topic: str) -> Broker:
    owners = owned_by(c, topic)
    return c.brokers[max(owners, key=lambda b: (len(owners[b]), -b))]


def test_random_transactions_through_kills_a_zombie_and_an_etcd_freeze(
    cluster: Callable[..., Cluster],
) -> None:
    """Seeded random transactions (60 % committed) on 6 partitions, 10 or more between
    faults: the busiest owner killed -9 (started again once its partitions moved); the
    coordinator of the transactional id killed -9 (started again once the others agree
    without it); the busiest owner frozen (SIGSTOP) until its partitions moved, then thawed
    (a zombie, which may coordinate the id too); etcd frozen for twice the lease (every
    broker's session lost). Then ``TxnWorkload.verify``: no transaction open, a read_committed
    consumer shows exactly the committed transactions' records, each once, none torn."""
    c = start(cluster)
    topic = new_topic(c, "random-txn")
    faults: list[str] = []
    with tw.TxnWorkload(c, topic, PARTITIONS, SEED) as wl:

        def kill_and_restart(victim: Broker, what: str) -> None:
            assert victim.broker_id is not None
            before = {topic: c.leaders(topic)}
            victim.kill()
            faults.append(f"killed broker{victim.broker_id} ({what})")
            c.wait_converged(
                [topic], {topic: PARTITIONS}, until=moved_away(before, victim.broker_id)
            )
            wl.wait_txns(10)
            victim.start()
            c.wait_converged([topic], {topic: PARTITIONS}, until=c.claimed)
            wl.wait_txns(10)

        wl.wait_txns(10)
        kill_and_restart(busiest(c, topic), "the busiest owner")
        kill_and_restart(c.brokers[txn_coordinator(c, wl.transactional_id)], "the coordinator")
        zombie = busiest(c, topic)
        assert zombie.broker_id is not None
        before = {topic: c.leaders(topic)}
        # thawed as soon as its partitions moved: the producer's requests in flight to it (a
        # produce, or EndTxn if it coordinates) are answered when it wakes up; librdkafka
        # waits for them (60 s) rather than go elsewhere while the connection stays up
        with paused(zombie):
            c.wait_converged(
                [topic], {topic: PARTITIONS}, until=moved_away(before, zombie.broker_id)
            )
        faults.append(f"froze broker{zombie.broker_id} past its lease")
        c.wait_converged([topic], {topic: PARTITIONS}, until=c.claimed)
        wl.wait_txns(10)
        with paused(c.etcd):
            time.sleep(2 * LEASE_TTL_MS / 1000)  # the fault's length, not a wait for anything
        faults.append("etcd frozen for twice the lease")
        c.wait_converged([topic], {topic: PARTITIONS}, until=c.claimed)
        wl.wait_txns(10)
        stats = wl.verify()
    outcomes = stats["transactions"]
    assert outcomes.get(tw.COMMITTED, 0) >= 10 and outcomes.get(tw.ABORTED, 0) >= 10, stats
    all_survive(c)
    print(faults, stats)
