"""Faults under load: a cluster of brokers keeps every acknowledged record, exactly where it was
acknowledged, through a killed broker, a frozen one (zombie), an S3 outage, an etcd outage and
scaling 1 -> 3 -> 1 brokers; and an owner killed, or S3 frozen, while compaction runs.

Every test runs a ``Workload`` (support/load.py): two acks=all producers (one retrying like a
real application, one that never resends), a consumer reading along, and a watcher of etcd and
the bucket. ``Workload.verify()`` then checks the whole log; its docstring lists the
properties. Each test adds the checks specific to its fault. The lease TTL is short (3 s) so that
a dead broker's partitions move quickly; the timeouts here are liveness guards only.

Each scenario runs on a narrow topic and on a wide one (``WIDE`` partitions), where one
write-ahead object carries the batches of many partitions. The wide runs and the compaction
faults end with ``check_compacted``: once compaction has caught up,
every acked record is at its acked offset in the compacted segments, read from the objects by
support/log_check, and no object is left that no metadata refers to.
"""

from __future__ import annotations

import time

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import unique
from support.cluster import create_topic, moved_away, moved_to, read_partition, served_offsets
from support.load import RETRIABLE, Workload, busiest, wait_for
from support.log_check import LogChecker
from support.procs import paused

PARTITIONS = 6
WIDE = 200  # partitions of the wide topics: one write-ahead object carries many of them
LEASE_TTL_MS = 3000
FLUSH_INTERVAL_MS = 200
OUTAGE_S = 10.0  # how long S3 / etcd stay away (the fault, not a limit on the broker)
PROBE_TIMEOUT_MS = 2000  # produce timeout of the probes sent during an outage
# Compaction soon and often, so that it runs during the faults and catches up quickly after.
COMPACTION_ENV = {
    "KAFSCALE_WAL_COMPACTION_AGE_MS": "1000",
    "KAFSCALE_WAL_COMPACTION_INTERVAL_MS": "200",
}
COMPACTION_TIMEOUT = 90.0  # liveness guard: compaction of every partition after the run
STALLS, STALL_S = 4, 1.5  # S3 freezes during compaction: how many, how long each

narrow_and_wide = pytest.mark.parametrize("partitions", [PARTITIONS, WIDE], ids=["narrow", "wide"])


def start_cluster(make_cluster, n: int = 3):
    return make_cluster(
        n, lease_ttl_ms=LEASE_TTL_MS, flush_interval_ms=FLUSH_INTERVAL_MS, env=COMPACTION_ENV
    )


def load(c, topic: str, partitions: int, **kw) -> Workload:
    """The fault tests' workload: a wide topic gets more records per second so that every
    partition sees a few of them per second."""
    return Workload(c, topic, partitions, rate=max(120, 3 * partitions), **kw)


def check_compacted(c, wl: Workload, topic: str) -> dict[str, int]:
    """After ``wl.verify()``: wait (bounded) until compaction has caught up, then every acked
    value is at its acked offset in the objects and nothing is left unreferenced."""
    report = LogChecker.for_cluster(c).wait_compacted([topic], COMPACTION_TIMEOUT)
    problems = report.problems + report.acked_problems(topic, wl.acked())
    assert not problems, f"{len(problems)} problems in the stored log: {problems[:10]}"
    assert report.manifests == 0, f"compaction did not catch up: {report.summary()}"
    left = sorted(report.unswept())
    assert not left, f"{len(left)} objects no metadata refers to: {left[:10]}"
    return report.summary()


def new_topic(c, partitions: int = PARTITIONS) -> str:
    topic = unique("faults")
    create_topic(c.bootstrap(), topic, partitions)
    c.wait_converged([topic], {topic: partitions}, until=c.claimed)
    return topic


def probe_owners(wl, c, owners: dict[int, list[int]], tag: str):
    """A raw produce (timeout_ms 2 s) to every partition, each sent to its owner."""
    return [
        wl.probe(c.brokers[b], parts, f"{tag}-{b}", PROBE_TIMEOUT_MS)
        for b, parts in owners.items()
        if parts
    ]


def assert_refused(probes, phase: str) -> None:
    """Produce requests sent during an outage (timeout_ms 2 s) were answered before it ended,
    all refused with retriable errors."""
    for probe in probes:
        acked = probe.acked()
        assert not acked, f"{phase}: acknowledged with nothing durable: {acked}"
        wrong = {v: e for v, e in probe.errors().items() if e not in RETRIABLE}
        assert not wrong, f"{phase}: non-retriable produce errors {wrong}"
        assert not probe.unanswered, (
            f"{phase}: no answer within the outage to produce requests with timeout_ms "
            f"{PROBE_TIMEOUT_MS} sent to {probe.broker_addr}: {probe.unanswered}"
        )


@narrow_and_wide
def test_kill_owner_of_busy_partitions(cluster, partitions):
    """kill -9 the broker leading the most partitions: after its lease expires the others own
    its partitions (higher epochs), nothing else moves, producers carry on through the
    others, and nothing acknowledged is lost or moved."""
    c = start_cluster(cluster)
    topic = new_topic(c, partitions)
    with load(c, topic, partitions) as wl:
        wl.wait_acks(10)
        before = {topic: c.leaders(topic)}
        victim, _moved = busiest(c, topic)
        victim.kill()
        c.wait_converged([topic], {topic: partitions}, until=moved_away(before, victim.broker_id))
        wl.wait_acks(20)  # every partition, the moved ones included
        stats = wl.verify()
    if partitions == WIDE:
        stats |= check_compacted(c, wl, topic)
    print(stats)


@narrow_and_wide
def test_frozen_owner_is_fenced(cluster, partitions):
    """SIGSTOP a busy owner until its lease expires and the new owners have written, then
    SIGCONT it: the zombie acknowledges nothing it could not commit (produce requests it
    received while frozen are refused or, if it owns the partition again, stored where it
    said), high watermarks only move forward, no segment is overwritten, and records written
    after the takeover carry the new epoch (verify() checks epochs along the log)."""
    c = start_cluster(cluster)
    topic = new_topic(c, partitions)
    with load(c, topic, partitions) as wl:
        wl.wait_acks(10)
        before = {topic: c.leaders(topic)}
        zombie, moved = busiest(c, topic)
        with paused(zombie):
            # the kernel accepts these; the frozen broker reads them when it wakes up
            probe = wl.probe(zombie, moved, "zombie")
            c.wait_converged(
                [topic], {topic: partitions}, until=moved_away(before, zombie.broker_id)
            )
            wl.wait_acks(20, partitions=moved)  # the new owners write past the takeover
            taken = {p: c.meta.partition(topic, p).high_watermark for p in moved}
        probe.collect(timeout=30)
        wrong = {v: e for v, e in probe.errors().items() if e not in RETRIABLE}
        assert not wrong, f"the woken broker answered with non-retriable errors {wrong}"
        c.wait_converged([topic], {topic: partitions})  # it rejoins: all three agree
        wl.wait_acks(20)
        for p, hwm in taken.items():
            now = c.meta.partition(topic, p).high_watermark
            assert now >= hwm, f"partition {p}: high watermark {hwm} after takeover, now {now}"
        stats = wl.verify()
    if partitions == WIDE:
        stats |= check_compacted(c, wl, topic)
    print(stats, "zombie probe answers:", probe.answers, "unanswered:", probe.unanswered)


def test_idempotent_producers_through_outage_kill_and_freeze(cluster, moto):
    """Idempotent producers of two clients (confluent-kafka with enable.idempotence,
    kafka-python with its defaults) through an S3 outage, a kill -9 of the busiest owner and
    then a freeze of the next busiest past its lease. During the outage their requests time out
    (REQUEST_TIMED_OUT, "possibly persisted") while the batches stay buffered, so they resend
    batches that are then stored: without idempotence that stores hundreds of records twice.
    After the kill and the freeze their resends reach owners that rebuilt the producer state
    (from the write-ahead runs and compaction's snapshots, compacting every second here).
    Every acked record is stored once at its acked offset, each producer's records are in the
    order it sent them, and no record is stored twice at all."""
    c = start_cluster(cluster)
    topic = new_topic(c)
    with load(c, topic, PARTITIONS, idempotent=True) as wl:
        wl.wait_acks(10)
        with paused(moto):
            time.sleep(OUTAGE_S)
        wl.wait_acks(20)
        before = {topic: c.leaders(topic)}
        victim, _ = busiest(c, topic)
        victim.kill()
        c.wait_converged([topic], {topic: PARTITIONS}, until=moved_away(before, victim.broker_id))
        wl.wait_acks(20)
        before = {topic: c.leaders(topic)}
        zombie, moved = busiest(c, topic)
        with paused(zombie):
            c.wait_converged(
                [topic], {topic: PARTITIONS}, until=moved_away(before, zombie.broker_id)
            )
            wl.wait_acks(20, partitions=moved)
        c.wait_converged([topic], {topic: PARTITIONS})
        wl.wait_acks(20)
        stats = wl.verify()
    assert stats["duplicates"] == 0, stats
    print(stats)


def produce_until_owned(bootstrap: str, topic: str, partition: int, batch: bytes):
    """Produce, retrying while the broker does not take writes for the partition yet (its
    claim, or the rebuild of the producer state, is under way)."""
    deadline = time.monotonic() + 30
    with kw.RawConnection.to(bootstrap) as conn:
        while True:
            res = kw.produce(conn, topic, partition, batch)
            if res.error_code != kw.NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
                return res
            time.sleep(0.1)


@pytest.mark.parametrize("compacted", [False, True], ids=["from-runs", "from-snapshot"])
def test_a_resend_to_the_next_owner_is_stored_once(cluster, compacted):
    """An idempotent producer's batches, acked by an owner that is then killed, resent to the
    next owner: each is answered with its first offset and nothing is stored again; the next
    batch follows. The next owner rebuilt the producer state from the write-ahead runs, or
    (compacted) from the snapshot compaction stored next to the segments."""
    c = start_cluster(cluster)
    topic = new_topic(c)
    leaders = c.leaders(topic)
    owner = c.brokers[leaders[0].broker_id]
    with kw.RawConnection.to(owner.bootstrap) as conn:
        r = conn.request(kw.INIT_PRODUCER_ID, 0, kw.init_producer_id_v0_body())
        error, pid, epoch = kw.parse_init_producer_id_v0(r)
        assert error == kw.NONE

    def batch(seq: int) -> bytes:
        values = [f"idem-{seq + i}".encode() for i in range(3)]
        return sf.build_record_batch([(None, v, []) for v in values], producer=(pid, epoch, seq))

    sent = [batch(seq) for seq in (0, 3, 6)]
    acked = [produce_until_owned(owner.bootstrap, topic, 0, b) for b in sent]
    assert [(a.error_code, a.base_offset) for a in acked] == [(0, 0), (0, 3), (0, 6)]
    if compacted:

        def compacted_through_9():
            record = c.meta.partition(topic, 0)
            return record is not None and record.segment_end == 9

        wait_for(compacted_through_9, COMPACTION_TIMEOUT, "compaction of partition 0")
    owner.kill()
    c.wait_converged(
        [topic], {topic: PARTITIONS}, until=moved_away({topic: leaders}, owner.broker_id)
    )
    heir = c.brokers[c.leaders(topic)[0].broker_id]
    for b, first in zip(sent, acked, strict=True):
        again = produce_until_owned(heir.bootstrap, topic, 0, b)
        assert (again.error_code, again.base_offset) == (kw.NONE, first.base_offset)
    follows = produce_until_owned(heir.bootstrap, topic, 0, batch(9))
    assert (follows.error_code, follows.base_offset) == (kw.NONE, 9)
    records = read_partition(heir.bootstrap, topic, 0, 0, 12)
    assert [r.value for r in records] == [f"idem-{i}".encode() for i in range(12)]


@narrow_and_wide
def test_s3_outage(cluster, moto, partitions):
    """Freeze the S3 server for 10 s: produce requests sent meanwhile are answered within the
    outage (their timeout_ms is 2 s) with retriable errors, since nothing can be made durable;
    producing recovers once S3 is back, and nothing acknowledged is lost."""
    c = start_cluster(cluster)
    topic = new_topic(c, partitions)
    with load(c, topic, partitions) as wl:
        wl.wait_acks(10)
        owners = {b.broker_id: c.partitions_of(topic, b.broker_id) for b in c.live}
        with paused(moto):
            until = time.monotonic() + OUTAGE_S
            probes = probe_owners(wl, c, owners, "s3")
            for probe in probes:
                probe.collect(timeout=max(0.1, until - time.monotonic() - 1))
            assert_refused(probes, "S3 frozen")
            time.sleep(max(0.0, until - time.monotonic()))
        wl.wait_acks(20)
        stats = wl.verify()
    if partitions == WIDE:
        stats |= check_compacted(c, wl, topic)
    print(stats, [p.answers for p in probes])


@narrow_and_wide
def test_etcd_outage(cluster, etcd, partitions):
    """Stop etcd for 10 s and start it again on the same data dir: committed data stays
    readable from every broker, produce requests are answered within the outage with
    retriable errors (no commit is possible), and once etcd is back producing recovers with
    nothing acknowledged lost."""
    c = start_cluster(cluster)
    topic = new_topic(c, partitions)
    with load(c, topic, partitions) as wl:
        wl.wait_acks(10)
        committed = c.end_offsets(topic, partitions)
        c.wait_seen_everywhere(topic, {p: end for p, (_start, end) in committed.items()})
        owners = {b.broker_id: c.partitions_of(topic, b.broker_id) for b in c.live}
        etcd.stop()
        until = time.monotonic() + OUTAGE_S
        # sent first: reading a wide topic from every broker takes a good part of the outage
        probes = probe_owners(wl, c, owners, "etcd")
        # Every broker serves a sample of 20 partitions (all of a narrow topic): a broker
        # that does not own a partition reads it from S3, and reading all of a wide topic
        # three times takes a minute on this test's S3 server, far past the outage.
        sample = sorted(committed)[:: max(1, partitions // 20)]
        for b in c.live:
            for p in sample:
                end = committed[p][1]
                assert served_offsets(b.bootstrap, topic, p, end) == list(range(end)), (b.name, p)
        for probe in probes:
            probe.collect(timeout=max(0.1, until - time.monotonic() - 1))
        assert_refused(probes, "etcd down")
        time.sleep(max(0.0, until - time.monotonic()))
        etcd.start()
        c.wait_converged([topic], {topic: partitions})
        wl.wait_acks(20)
        stats = wl.verify()
    if partitions == WIDE:
        stats |= check_compacted(c, wl, topic)
    print(stats, [p.answers for p in probes])


@pytest.mark.parametrize("partitions", [12, WIDE], ids=["narrow", "wide"])
def test_scale_one_three_one(cluster, partitions):
    """One broker, then three (the new ones take over a share, handed off gracefully), then
    one again (SIGTERM: the leaving brokers flush, release and exit 0), all while producing
    and consuming through the first broker's address: nothing acknowledged is lost, and with
    only graceful moves nothing is stored twice, not even by the retrying producer."""
    c = start_cluster(cluster, 1)
    topic = new_topic(c, partitions)
    first = c.brokers[1]
    with load(c, topic, partitions, bootstrap=first.bootstrap) as wl:
        wl.wait_acks(5)
        before = {topic: c.leaders(topic)}
        b2, b3 = c.add(), c.add()
        c.wait_converged([topic], {topic: partitions}, until=moved_to(before, {2, 3}))
        wl.wait_acks(10)
        assert b2.terminate() == 0, "SIGTERM must flush, release and exit 0"
        assert b3.terminate() == 0, "SIGTERM must flush, release and exit 0"
        back = c.wait_converged([topic], {topic: partitions})[topic]
        assert {lead.broker_id for lead in back.values()} == {1}
        wl.wait_acks(10)
        stats = wl.verify()
    assert stats["duplicates"] == 0, f"graceful moves left requests in doubt: {stats}"
    if partitions == WIDE:
        stats |= check_compacted(c, wl, topic)
    print(stats)


def compacting_owner(c, topic: str):
    """Wait until compaction is seen moving (a partition's segment end advanced between two
    reads of etcd) and return that partition's owner: it is compacting right now."""

    def advanced():
        first = c.meta.partitions(topic)
        time.sleep(0.05)
        now = c.meta.partitions(topic)
        moved = [
            p for p, rec in now.items() if p in first and rec.segment_end > first[p].segment_end
        ]
        return moved and c.owner(topic, moved[0])

    return wait_for(advanced, COMPACTION_TIMEOUT, "compaction to commit a segment")


def test_kill_owner_during_compaction(cluster, moto):
    """kill -9 an owner in the middle of compaction: as soon as it is seen compacting, S3 is
    frozen for a few compaction intervals (its next uploads hang), the owner is killed and S3
    thawed (requests it had sent may still land: objects nobody committed). The other brokers
    take its partitions and compact its write-ahead data; nothing acknowledged is lost or
    moved, and once compaction has caught up nothing is left that no metadata refers to."""
    c = start_cluster(cluster)
    topic = new_topic(c, WIDE)
    with load(c, topic, WIDE) as wl:
        wl.wait_acks(5)
        victim = compacting_owner(c, topic)
        before = {topic: c.leaders(topic)}
        with paused(moto):
            time.sleep(3 * int(COMPACTION_ENV["KAFSCALE_WAL_COMPACTION_INTERVAL_MS"]) / 1000)
            victim.kill()
        c.wait_converged([topic], {topic: WIDE}, until=moved_away(before, victim.broker_id))
        wl.wait_acks(10)
        stats = wl.verify()
    stats |= check_compacted(c, wl, topic)
    print(stats)


def test_s3_frozen_during_compaction(cluster, moto):
    """Freeze S3 for 1.5 s, four times, each time right after compaction was seen committing,
    so that compaction stalls at different steps (segment uploads, commit, deleting
    write-ahead objects) while producing goes on: nothing acknowledged is lost or moved, and
    compaction catches up leaving nothing unreferenced."""
    c = start_cluster(cluster)
    topic = new_topic(c, WIDE)
    with load(c, topic, WIDE) as wl:
        wl.wait_acks(5)
        for _ in range(STALLS):
            compacting_owner(c, topic)
            with paused(moto):
                time.sleep(STALL_S)
            wl.wait_acks(2)
        stats = wl.verify()
    stats |= check_compacted(c, wl, topic)
    print(stats)
