"""A cluster of brokers sharing one etcd and one S3 bucket (docs/design.md, docs/metadata.md).

Every broker reports the same brokers, leaders and leader epochs; produce goes to a
partition's owner only (NOT_LEADER_OR_FOLLOWER elsewhere) while committed data can be fetched
from any broker; real clients find their way through one bootstrap address; Fetch checks
leader epochs; retention and DeleteTopics clean up S3 and etcd; a broker leaving (SIGTERM) or
joining moves partitions without losing or duplicating anything.

Most tests share one 3-broker cluster for the module. Its lease TTL is long (30 s), so a
partition that moves within the 20 s guard of the hand-off test can only have been released
by its owner, not taken after a lease expired.
"""

from __future__ import annotations

import re
import time

import pytest
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import (
    CONSUMERS,
    PRODUCERS,
    Msg,
    confluent_produce,
    counts,
    kcat_produce,
    unique,
)
from support.cluster import (
    create_topic,
    delete_topic,
    moved_away,
    moved_to,
    read_partition,
    segment_base,
)
from support.load import Workload, busiest, wait_for
from support.procs import S3_ENV, free_port, settled

HOUR_MS = 3_600_000
LEASE_TTL_MS = 30_000
HANDOFF_GUARD_S = 20.0  # below the lease TTL: only a graceful release moves a partition in time
SETTLE_S = 60.0  # liveness guard for anything that lags (watch propagation, background deletes)


@pytest.fixture(scope="module")
def kc(module_cluster):
    """Three brokers; topics default to 1 hour retention.ms; retention checked every 200 ms."""
    return module_cluster(
        3,
        lease_ttl_ms=LEASE_TTL_MS,
        flush_interval_ms=20,
        args=["--retention-ms", str(HOUR_MS), "--retention-check-interval-ms", "200"],
    )


def new_topic(c, partitions: int, config: dict[str, str] | None = None) -> str:
    topic = unique("cl")
    create_topic(c.bootstrap(), topic, partitions, config)
    c.wait_converged([topic], {topic: partitions}, until=c.claimed)
    return topic


def list_offset(broker, topic: str, partition: int, which: int) -> int:
    with kw.RawConnection.to(broker.bootstrap) as conn:
        res = kw.list_offsets(conn, topic, partition, which)
    assert res.error_code == kw.NONE, f"{broker.name}: ListOffsets {topic}/{partition}: {res}"
    return res.offset


def fetch_error(broker, topic: str, partition: int, offset: int) -> int:
    with kw.RawConnection.to(broker.bootstrap) as conn:
        return kw.fetch(conn, topic, partition, offset, max_wait_ms=50).error_code


def by_partition(records) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    return out


# ---------------------------------------------------------------------------------------------
# metadata and routing


def test_metadata_agrees_on_every_broker(kc):
    """Every broker lists all three brokers (id, host, port) and the same leader and epoch
    (>= 1) for each partition; leaders are spread over all brokers; etcd holds the same owners
    and epochs, broker and owner keys bound to the owner's lease."""
    topic = new_topic(kc, 32)
    leaders = kc.leaders(topic)
    want_brokers = sorted((b.broker_id, b.host, b.port) for b in kc.live)
    for b in kc.live:
        md = kc.metadata(b, [topic])
        assert sorted(md.brokers) == want_brokers, f"{b.name} lists {md.brokers}"
        got = {p.partition: (p.leader, p.leader_epoch) for p in md.topics[topic].partitions}
        assert got == {p: (lead.broker_id, lead.epoch) for p, lead in leaders.items()}, b.name
    assert all(lead.epoch >= 1 for lead in leaders.values()), leaders
    assert {lead.broker_id for lead in leaders.values()} == kc.live_ids, "leaders not spread"

    # etcd agrees: owner keys, epochs, and (once compaction has run) the segment end after
    # one write per partition
    confluent_produce(kc.bootstrap(), topic, [Msg(p, None, b"m%d" % p) for p in range(32)])
    owners = kc.meta.owners(topic)

    def compacted():
        records = kc.meta.partitions(topic)
        for p, lead in leaders.items():
            assert records[p].leader_epoch == lead.epoch, f"partition {p}: {records[p]}"
            assert records[p].segment_end == 1, f"partition {p}: {records[p]}"

    for p, lead in leaders.items():
        assert owners.get(p) == lead.broker_id, f"partition {p}: owner key {owners.get(p)}"
    settled(compacted)
    assert kc.leaders(topic) == leaders, "writing changed a leader or epoch"

    registered = kc.meta.brokers()
    assert sorted(registered) == sorted(kc.live_ids)
    for bid, doc in registered.items():
        assert (doc["host"], doc["port"]) == (kc.brokers[bid].host, kc.brokers[bid].port), doc
    leases = kc.meta.client.leases_of(f"{kc.meta.root}/brokers/")
    session = {int(key.rsplit("/", 1)[1]): lease for key, lease in leases.items()}
    assert all(session.values()), f"broker keys without a lease: {leases}"
    for key, lease in kc.meta.client.leases_of(f"{kc.meta.root}/partitions/{topic}/").items():
        if key.endswith("/owner"):
            p = int(key.rsplit("/", 2)[1])
            assert lease == session[owners[p]], f"{key} not bound to broker{owners[p]}'s lease"


def test_produce_to_non_owner_is_refused(kc):
    """Produce to a broker that does not own the partition: NOT_LEADER_OR_FOLLOWER and nothing
    stored; the owner then accepts a batch at offset 0, and every broker serves just that."""
    topic = new_topic(kc, 6)
    for p in range(6):
        batch = sf.build_record_batch([(None, b"refused-%d" % p, [])])
        for other in kc.non_owners(topic, p):
            with kw.RawConnection.to(other.bootstrap) as conn:
                res = kw.produce(conn, topic, p, batch)
            assert res.error_code == kw.NOT_LEADER_OR_FOLLOWER, f"{other.name} p{p}: {res}"
        owner = kc.owner(topic, p)
        kept = sf.build_record_batch([(None, b"kept-%d" % p, [])])

        def accepted(owner=owner, p=p, kept=kept):
            # a fresh owner may refuse (retriable) until it has opened the partition
            with kw.RawConnection.to(owner.bootstrap) as conn:
                res = kw.produce(conn, topic, p, kept)
            return None if res.error_code == kw.NOT_LEADER_OR_FOLLOWER else res

        res = wait_for(accepted, SETTLE_S, f"{owner.name} to take writes for p{p}")
        assert (res.error_code, res.base_offset) == (kw.NONE, 0), f"{owner.name} p{p}: {res}"
    for p in range(6):
        for b in kc.live:
            assert [r.value for r in read_partition(b.bootstrap, topic, p, 0, 1)] == [
                b"kept-%d" % p
            ]
            assert list_offset(b, topic, p, kw.LATEST) == 1, f"{b.name}: p{p} holds more"


def test_fetch_committed_data_from_any_broker(kc):
    """Records produced through the owners can be fetched, identically, from every broker
    (Fetch v4 and v11), with the same high watermark and log start."""
    topic = new_topic(kc, 6)
    msgs = [Msg(i % 6, None, b"any-%04d" % i) for i in range(300)]
    confluent_produce(kc.bootstrap(), topic, msgs)
    want = counts(msgs)
    for b in kc.live:
        for p, n in want.items():
            got = read_partition(b.bootstrap, topic, p, 0, n)
            assert [r.value for r in got] == [m.value for m in msgs if m.partition == p], b.name
            with kw.RawConnection.to(b.bootstrap) as conn:
                res = kw.fetch_v11(conn, topic, p, 0)
            assert res.error_code == kw.NONE, f"{b.name} p{p}: {res}"
            assert (res.high_watermark, res.log_start_offset) == (n, 0), f"{b.name} p{p}: {res}"


CLIENTS = ["confluent", "kafka-python", "aiokafka", "kcat"]
# each client's defaults (kafka-python's is idempotent), then idempotence turned on
IDEMPOTENCE = [(client, None) for client in CLIENTS] + [
    ("confluent", True),
    ("aiokafka", True),
]


@pytest.mark.parametrize(("client", "idempotent"), IDEMPOTENCE)
def test_client_through_one_bootstrap_address(kc, client, idempotent):
    """A real client given one broker's address produces to every partition's owner (spread
    over the brokers) and reads everything back, in order, with keys and headers."""
    topic = new_topic(kc, 12)
    assert len({lead.broker_id for lead in kc.leaders(topic).values()}) > 1
    bootstrap = kc.live[CLIENTS.index(client) % len(kc.live)].bootstrap
    msgs = [
        Msg(i % 12, f"k{i}".encode(), f"{client}-{i}".encode(), (("src", b"cluster"),))
        for i in range(240)
    ]
    if client == "kcat":
        kcat_produce(bootstrap, topic, msgs)
    else:
        delivered = PRODUCERS[client](bootstrap, topic, msgs, idempotent=idempotent)
        for p, n in counts(msgs).items():
            assert sorted(off for q, off in delivered if q == p) == list(range(n)), p
    got = by_partition(CONSUMERS[client](bootstrap, topic, counts(msgs)))
    for p, n in counts(msgs).items():
        want = [m for m in msgs if m.partition == p]
        recs = got[p][:n]
        assert [r.offset for r in recs] == list(range(n)), f"partition {p}"
        assert [(r.key, r.value, r.headers) for r in recs] == [
            (m.key, m.value, m.headers) for m in want
        ], f"partition {p}"


def test_fetch_checks_current_leader_epoch(kc):
    """Fetch v11 on any broker: the partition's epoch or -1 is served; an older epoch gets
    FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH."""
    topic = new_topic(kc, 3)
    confluent_produce(kc.bootstrap(), topic, [Msg(p, None, b"e%d" % p) for p in range(3)])
    for b in kc.live:  # every broker has seen the commits
        for p in range(3):
            read_partition(b.bootstrap, topic, p, 0, 1)
    for p, lead in kc.leaders(topic).items():
        cases = {
            lead.epoch: kw.NONE,
            kw.NO_EPOCH: kw.NONE,
            lead.epoch - 1: kw.FENCED_LEADER_EPOCH,
            lead.epoch + 1: kw.UNKNOWN_LEADER_EPOCH,
        }
        for b in kc.live:
            with kw.RawConnection.to(b.bootstrap) as conn:
                for epoch, want in cases.items():
                    res = kw.fetch_v11(conn, topic, p, 0, current_leader_epoch=epoch)
                    assert res.error_code == want, (
                        f"{b.name} p{p} (epoch {lead.epoch}) asked with {epoch}: {res}"
                    )
                    if want == kw.NONE:
                        assert res.high_watermark == 1 and res.records, f"{b.name} p{p}: {res}"


def test_etcd_unreachable_at_startup(broker_factory, moto, s3_bucket):
    """With nothing listening at --etcd-endpoints the broker exits non-zero, never listens,
    and says which setting to fix."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    args = [*moto.broker_args(s3_bucket), "--etcd-endpoints", endpoint, "--broker-id", "7"]
    broker = broker_factory(args, env=dict(S3_ENV), start=False, name="broker-no-etcd")
    broker.start(wait=False)
    code = broker.wait_exit(SETTLE_S)
    text = broker.log_text()
    assert code != 0, f"exit code {code}:\n{text[-2000:]}"
    assert f"cannot reach etcd at --etcd-endpoints {endpoint}" in text, text[-2000:]
    assert "listening on" not in text


# ---------------------------------------------------------------------------------------------
# retention


def produce_segments(kc, topic, rounds: list[list[Msg]]) -> list[int]:
    """One acknowledged produce per round of partition 0, each compacted into segments before
    the next (so segments end at round ends); returns each round's end."""
    ends, total = [], 0
    for msgs in rounds:
        confluent_produce(kc.bootstrap(), topic, msgs, extra={"linger.ms": 50})
        total += len(msgs)
        ends.append(total)
        settled(lambda total=total: check_segments_end(kc, topic, total))
    return ends


def check_has_objects(kc, topic: str) -> None:
    assert kc.objects(topic), f"no objects for {topic}"


def check_segments_end(kc, topic: str, end: int) -> None:
    record = kc.meta.partitions(topic)[0]
    assert record.segment_end == end, f"segments of {topic}/0 end at {record.segment_end}"


def old_round(r: int, timestamp: int) -> list[Msg]:
    return [Msg(0, None, b"old-%d-%d" % (r, i), timestamp=timestamp + i) for i in range(5)]


def new_round(r: int) -> list[Msg]:
    return [Msg(0, None, b"new-%d-%d" % (r, i)) for i in range(5)]


def assert_log_starts_at(kc, topic: str, start: int, end: int, values: list[bytes]) -> None:
    """Every broker: ListOffsets earliest = ``start``, Fetch below it is OFFSET_OUT_OF_RANGE,
    reading from ``start`` gives ``values``; etcd and S3 hold nothing below it."""
    for b in kc.live:
        wait_for(
            lambda b=b: list_offset(b, topic, 0, kw.EARLIEST) == start,
            SETTLE_S,
            f"{b.name}: earliest offset {start}",
        )
        assert fetch_error(b, topic, 0, 0) == kw.OFFSET_OUT_OF_RANGE, b.name
        assert fetch_error(b, topic, 0, start - 1) == kw.OFFSET_OUT_OF_RANGE, b.name
        assert [r.value for r in read_partition(b.bootstrap, topic, 0, start, end)] == values
    assert kc.meta.partition(topic, 0).log_start_offset == start

    def objects_below_gone():
        bases = [segment_base(k) for k in kc.objects(topic)]
        return bases and min(base for _p, base, _kind in bases) == start

    wait_for(objects_below_gone, SETTLE_S, f"objects below offset {start} deleted")
    kinds = {}
    for _p, base, kind in (segment_base(k) for k in kc.objects(topic)):
        kinds.setdefault(base, set()).add(kind)
    assert all(k == {"kfs", "index"} for k in kinds.values()), kinds


def test_retention_ms_topic_config(kc):
    """retention.ms = 10 min on the topic (shorter than the brokers' 1 hour default): segments
    whose records are 30 minutes old go, newer ones stay."""
    topic = new_topic(kc, 1, {"retention.ms": str(10 * 60_000)})
    old = int(time.time() * 1000) - 30 * 60_000
    rounds = [old_round(r, old) for r in range(3)] + [new_round(r) for r in range(2)]
    ends = produce_segments(kc, topic, rounds)
    values = [m.value for msgs in rounds[3:] for m in msgs]
    assert_log_starts_at(kc, topic, ends[2], ends[-1], values)


def test_retention_ms_broker_default(kc):
    """A topic without retention.ms gets the brokers' --retention-ms (1 hour): records two hours
    old go, current ones stay."""
    topic = new_topic(kc, 1)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    rounds = [old_round(r, old) for r in range(2)] + [new_round(0)]
    ends = produce_segments(kc, topic, rounds)
    assert_log_starts_at(kc, topic, ends[1], ends[-1], [m.value for m in rounds[2]])


def test_retention_bytes_topic_config(kc):
    """retention.bytes on the topic: the oldest segments go while the rest still holds at least
    retention.bytes (Kafka's rule). Six ~50 KB segments with a 120 KB limit keep three."""
    value = 10_000
    topic = new_topic(kc, 1, {"retention.bytes": str(120_000)})
    rounds = [[Msg(0, None, b"%d-%d-" % (r, i) + b"x" * value) for i in range(5)] for r in range(6)]
    ends = produce_segments(kc, topic, rounds)
    values = [m.value for msgs in rounds[3:] for m in msgs]
    assert_log_starts_at(kc, topic, ends[2], ends[-1], values)
    kept = sorted(base for _p, base, kind in map(segment_base, kc.objects(topic)) if kind == "kfs")
    assert kept == ends[2:5], f"segments kept {kept}, produced rounds ending at {ends}"


# ---------------------------------------------------------------------------------------------
# DeleteTopics


def test_delete_topic_in_cluster(kc):
    """DeleteTopics removes the topic's keys from etcd and its objects from S3 (in the
    background, to completion) and every broker forgets it; the same name created again has a
    new topic id and none of the old data."""
    topic = new_topic(kc, 3)
    confluent_produce(kc.bootstrap(), topic, [Msg(i % 3, None, b"old-%d" % i) for i in range(30)])
    old_id = kc.meta.topic(topic)["id"]
    assert kc.meta.keys_of_topic(topic), "no etcd keys for the topic"
    settled(lambda: check_has_objects(kc, topic))  # segments, once compaction has run

    delete_topic(kc.bootstrap(), topic)
    wait_for(
        lambda: not kc.meta.keys_of_topic(topic) and not kc.objects(topic),
        SETTLE_S,
        lambda: f"etcd keys and S3 objects of {topic} gone (left: "
        f"{kc.meta.keys_of_topic(topic)}, {kc.objects(topic)})",
    )
    for b in kc.live:
        wait_for(
            lambda b=b: kc.metadata(b, [topic]).topics[topic].error_code
            == kw.UNKNOWN_TOPIC_OR_PARTITION,
            SETTLE_S,
            f"{b.name} forgets {topic}",
        )

    create_topic(kc.bootstrap(), topic, 2)
    kc.wait_converged([topic], {topic: 2})
    assert kc.meta.topic(topic)["id"] != old_id, "recreated topic kept the old id"
    for b in kc.live:
        for p in range(2):
            assert list_offset(b, topic, p, kw.EARLIEST) == 0
            assert list_offset(b, topic, p, kw.LATEST) == 0, f"{b.name}: old data in p{p}"
    confluent_produce(kc.bootstrap(), topic, [Msg(p, None, b"new-%d" % p) for p in range(2)])
    for p in range(2):
        got = read_partition(kc.any_live().bootstrap, topic, p, 0, 1)
        assert [r.value for r in got] == [b"new-%d" % p]
        assert list_offset(kc.any_live(), topic, p, kw.LATEST) == 1


# ---------------------------------------------------------------------------------------------
# membership (last: it changes the module's cluster)


def test_sigterm_handoff_and_join_under_load(kc):
    """Under load: the broker leading the most partitions gets SIGTERM, exits 0 and hands its
    partitions over at once (well within the 30 s lease TTL); fetching with their old epoch is
    fenced. A fourth broker joins and takes over a share, handed off the same way. Nothing
    acknowledged is lost and nothing is stored twice, not even by the retrying producer: a
    graceful move leaves no request in doubt."""
    topic = new_topic(kc, 12)
    idle = new_topic(kc, 48)  # more partitions for the newcomer's share; no traffic
    with Workload(kc, topic, 12) as wl:
        wl.wait_acks(5)
        before = {t: kc.leaders(t) for t in (topic, idle)}
        leaving, moved = busiest(kc, topic)
        assert leaving.terminate() == 0, "SIGTERM must flush, release and exit 0"
        kc.wait_converged(
            [topic, idle], timeout=HANDOFF_GUARD_S, until=moved_away(before, leaving.broker_id)
        )
        wl.wait_acks(10)  # the new owners have opened their partitions and write
        now = kc.leaders(topic)
        for p in moved:
            for b in kc.live:
                with kw.RawConnection.to(b.bootstrap) as conn:
                    res = kw.fetch_v11(conn, topic, p, 0, before[topic][p].epoch)
                assert res.error_code == kw.FENCED_LEADER_EPOCH, (
                    f"{b.name} p{p}: epoch {before[topic][p]} -> {now[p]}, fetch with the old "
                    f"one: {res}"
                )

        before = {t: kc.leaders(t) for t in (topic, idle)}
        newcomer = kc.add()
        kc.wait_converged(
            [topic, idle], timeout=HANDOFF_GUARD_S, until=moved_to(before, {newcomer.broker_id})
        )
        wl.wait_acks(10)
        stats = wl.verify()
    assert stats["duplicates"] == 0, f"graceful moves left requests in doubt: {stats}"
    print(stats)
    # Ownership changes are logged as one summary line per pass, not one line per partition.
    leads = [
        p
        for t in (topic, idle)
        for p in kc.leaders(t).values()
        if p.broker_id == newcomer.broker_id
    ]
    took_over = re.findall(r"took over (\d+) partitions?: ", newcomer.log_text())
    assert sum(map(int, took_over)) >= len(leads) > 0, took_over
    handed = "".join(b.log_text() for b in kc.live if b is not newcomer)
    assert re.search(r"handed off \d+ partitions?: ", handed), "no hand-off summary"
    assert "handed the partition off" not in handed
