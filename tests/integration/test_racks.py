"""Rack awareness: Kafka's broker.rack (--broker-rack) and KIP-392 fetch from follower.

Three brokers (ids 1, 2, 3 in racks a, b, c) share one etcd and one bucket, each with its own
/metrics endpoint. Every broker lists every broker's rack in Metadata and DescribeCluster. A
consumer that names its rack (Fetch v11+ rack_id: librdkafka's and the Java client's
client.rack), or whose client.id carries a ``zone=RACK`` item, is pointed by a partition's
owner in another rack to the broker of its own rack (preferred_read_replica, no records), which
serves any partition from object storage; without a live broker in its rack the owner serves
it. read_committed reads are redirected too, except of a partition transactional producers
wrote. Produce always goes to the owner.

What the clients read is checked record by record; where they read it from, by each broker's
counters: ``kafscale_fetch_bytes_total{topic=...}`` (the bytes of the topic it served) and the
zone counters ``kafscale_zone_fetch_bytes_total`` / ``kafscale_zone_produce_bytes_total``
(zone="same", "cross" or "unknown" as the client's zone is this broker's rack, another, or
either is not known). The module shares one cluster; the failover tests kill -9 the rack-b
broker and come last: the Java client's first, which starts it again (same id, rack, port and
data directory), then librdkafka's, which leaves it dead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import admin_wire as aw
from support import jvm, racks
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import Msg, confluent_produce, unique
from support.cluster import (
    Cluster,
    Leader,
    create_topic,
    moved_away,
    read_partition,
    whole_batches,
)
from support.procs import Broker, free_ports
from support.racks import READ_COMMITTED, READ_UNCOMMITTED, BrokerMetrics, GroupReader, Traffic

RACKS = {1: "a", 2: "b", 3: "c"}
BROKER_IN = {rack: broker_id for broker_id, rack in RACKS.items()}
PARTITIONS = 3
RECORDS = 1000  # per partition of the shared topic: 3 x 1000 x 1 KiB
VALUE_BYTES = 1024
IN_RACK_SHARE = 0.95  # of a topic's fetched bytes, served by the consumer's rack broker
COUNTER_SLACK = 0.05  # relative difference allowed between two counters of the same bytes
JAVA_RECORDS = 500
SETTLE_S = 60.0  # liveness guard only


@dataclass
class Racked:
    """The module's cluster and each broker's /metrics endpoint."""

    cluster: Cluster
    metrics: dict[int, BrokerMetrics]

    def broker(self, broker_id: int) -> Broker:
        return self.cluster.brokers[broker_id]

    def bootstrap(self) -> str:
        return self.cluster.bootstrap()

    def traffic(self, topic: str, ids: set[int] | None = None) -> dict[int, Traffic]:
        chosen = {b: m for b, m in self.metrics.items() if ids is None or b in ids}
        return racks.traffic(chosen, topic)


@pytest.fixture(scope="module")
def rc(module_cluster: Callable[..., Cluster]) -> Racked:
    """Brokers 1, 2, 3 in racks a, b, c, each with a /metrics endpoint."""
    cluster = module_cluster(0, lease_ttl_ms=3000, flush_interval_ms=20)
    metrics = {}
    for (broker_id, rack), port in zip(RACKS.items(), free_ports(len(RACKS)), strict=True):
        addr = f"127.0.0.1:{port}"
        broker = cluster.add(args=["--broker-rack", rack, "--metrics-addr", addr])
        assert broker.broker_id == broker_id
        metrics[broker_id] = BrokerMetrics(addr)
    cluster.wait_converged()
    return Racked(cluster, metrics)


def new_topic(rc: Racked, partitions: int = PARTITIONS) -> str:
    """A topic whose partitions are claimed by their owners; with as many partitions as
    brokers, each broker owns one."""
    topic = unique("rack")
    create_topic(rc.bootstrap(), topic, partitions)
    leaders = rc.cluster.wait_converged([topic], {topic: partitions}, until=rc.cluster.claimed)
    if partitions == len(RACKS):
        owners = sorted(lead.broker_id for lead in leaders[topic].values())
        assert owners == sorted(RACKS), f"{topic}: owners {leaders[topic]}"
    return topic


def value(partition: int, i: int, size: int = VALUE_BYTES) -> bytes:
    return (b"%d-%06d-" % (partition, i)).ljust(size, b".")


def fill(rc: Racked, topic: str, start: int, count: int) -> dict[int, list[bytes]]:
    """Produces ``count`` records to each partition (offsets from ``start``, values of
    ``value``) through the owners, without a rack; returns the values by partition."""
    msgs = [Msg(p, None, value(p, start + i)) for i in range(count) for p in range(PARTITIONS)]
    confluent_produce(rc.bootstrap(), topic, msgs)
    rc.cluster.wait_seen_everywhere(topic, dict.fromkeys(range(PARTITIONS), start + count))
    return {p: [m.value or b"" for m in msgs if m.partition == p] for p in range(PARTITIONS)}


def values(res: racks.RackFetch) -> list[bytes | None]:
    return [r.value for b in whole_batches(res.records) for r in b.records()]


def fetch_bytes(delta: dict[int, Traffic]) -> dict[int, float]:
    return {bid: t.fetch_bytes for bid, t in delta.items()}


def assert_served_by(delta: dict[int, Traffic], broker_id: int, at_least: int) -> None:
    """The topic's bytes (at least ``at_least`` in all) were served (nearly) all by
    ``broker_id``."""
    served = fetch_bytes(delta)
    total = sum(served.values())
    assert total >= at_least, f"brokers served {served} bytes of the topic, less than {at_least}"
    assert served[broker_id] >= IN_RACK_SHARE * total, (
        f"broker{broker_id} (rack {RACKS[broker_id]}) served {served[broker_id]:.0f} of "
        f"{total:.0f} bytes; by broker: {served}"
    )


def assert_zone_counts_match(delta: dict[int, Traffic], zone: dict[int, str]) -> None:
    """Each broker counted the topic's fetched bytes (the only fetches meanwhile) under the
    zone ``zone[broker id]``, and next to nothing under the others."""
    for bid, t in delta.items():
        slack = COUNTER_SLACK * t.fetch_bytes + 64 * 1024
        assert abs(t.zone_fetch[zone[bid]] - t.fetch_bytes) <= slack, (
            f"broker{bid}: zone={zone[bid]!r} grew by {t.zone_fetch[zone[bid]]:.0f}, it "
            f"served {t.fetch_bytes:.0f} bytes of the topic; zone counters {t.zone_fetch}"
        )
        others = {z: v for z, v in t.zone_fetch.items() if z != zone[bid]}
        assert all(v <= slack for v in others.values()), f"broker{bid}: {t.zone_fetch}"


def assert_read_in_order(reader: GroupReader, want: dict[int, list[bytes]]) -> None:
    for p, vals in want.items():
        got = reader.reads[p]
        assert [r.offset for r in got] == list(range(len(vals))), f"partition {p}"
        assert [r.value for r in got] == vals, f"partition {p}"


@pytest.fixture(scope="module")
def loaded(rc: Racked) -> tuple[str, dict[int, list[bytes]]]:
    """A topic of three partitions (one per broker) holding RECORDS 1 KiB records each,
    written without a rack; consumers read it whole, each measured by counter differences."""
    topic = new_topic(rc)
    return topic, fill(rc, topic, 0, RECORDS)


# ---------------------------------------------------------------------------------------------
# the racks in Metadata and DescribeCluster


def test_metadata_and_describe_cluster_list_each_brokers_rack(rc: Racked) -> None:
    """Every broker lists brokers 1-3 with racks a, b, c in Metadata v1 to v12 and in
    DescribeCluster; a fourth broker started without --broker-rack is listed with none. (It
    leaves again, with SIGTERM, before any topic exists.)"""
    extra = rc.cluster.add()
    try:
        rc.cluster.wait_converged()
        want: dict[int, str | None] = {**RACKS, extra.broker_id or 0: None}
        for b in rc.cluster.live:
            with kw.RawConnection.to(b.bootstrap) as conn:
                for version in (1, 4, 7, 8, 9, 12):
                    got = racks.metadata_racks(conn, version)
                    assert got == want, f"{b.name}: Metadata v{version} lists {got}"
                cluster = aw.describe_cluster(conn)
            assert cluster.error_code == kw.NONE, cluster
            got = {node: rack for node, _host, _port, rack in cluster.brokers}
            assert got == want, f"{b.name}: DescribeCluster lists {got}"
    finally:
        assert extra.terminate() == 0
    rc.cluster.wait_converged()


# ---------------------------------------------------------------------------------------------
# Fetch v11 on the wire


def test_owner_points_a_consumer_of_another_rack_to_its_racks_broker(rc: Racked) -> None:
    """Fetch v11 to a partition's owner: a consumer of another rack that has a broker (rack_id,
    or a ``zone=`` item of client.id when it sends no rack_id) gets no records and that
    broker's id as preferred read replica, read_committed or not; a consumer of the owner's
    rack, of a rack without a broker, or of no rack is served. The rack's broker serves the
    consumers of its rack every partition itself."""
    topic = new_topic(rc)
    want = fill(rc, topic, 0, 5)
    for p, lead in rc.cluster.leaders(topic).items():
        owner = rc.broker(lead.broker_id)
        where = f"{topic}/{p} on its owner {owner.name} (rack {RACKS[lead.broker_id]})"

        def served(res: racks.RackFetch, asked: str, p: int = p, where: str = where) -> None:
            assert (res.error_code, res.preferred_read_replica) == (kw.NONE, racks.NO_REPLICA), (
                f"{where}, {asked}: {res}"
            )
            assert values(res) == want[p], f"{where}, {asked}: records served"

        def redirected(res: racks.RackFetch, to: int, asked: str, where: str = where) -> None:
            assert (res.error_code, res.preferred_read_replica) == (kw.NONE, to), (
                f"{where}, {asked}: wanted preferred read replica {to}, got {res}"
            )
            assert res.records == b"", f"{where}, {asked}: records along with a redirect"

        with kw.RawConnection.to(owner.bootstrap) as conn:
            for rack, bid in BROKER_IN.items():
                for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
                    asked = f"rack_id {rack!r}, isolation {isolation}"
                    res = racks.fetch_v11(conn, topic, p, rack_id=rack, isolation_level=isolation)
                    if bid == lead.broker_id:
                        served(res, asked)
                    else:
                        redirected(res, bid, asked)
                for client_id in (f"rack-app,zone={rack}", f"zone={rack},rack-app"):
                    asked = f"no rack_id, client.id {client_id!r}"
                    res = racks.fetch_v11(conn, topic, p, client_id=client_id)
                    if bid == lead.broker_id:
                        served(res, asked)
                    else:
                        redirected(res, bid, asked)
            served(racks.fetch_v11(conn, topic, p, rack_id="z"), "rack_id 'z' (no broker)")
            served(racks.fetch_v11(conn, topic, p), "no rack_id, plain client.id")
            other = next(r for r in BROKER_IN if r != RACKS[lead.broker_id])
            hinted = racks.fetch_v11(
                conn, topic, p, rack_id=RACKS[lead.broker_id], client_id=f"app,zone={other}"
            )
            served(hinted, f"rack_id of the owner's rack, client.id zone={other}")
        for rack, bid in BROKER_IN.items():
            with kw.RawConnection.to(rc.broker(bid).bootstrap) as conn:
                res = racks.fetch_v11(conn, topic, p, rack_id=rack)
            assert (res.error_code, res.preferred_read_replica) == (kw.NONE, racks.NO_REPLICA), (
                f"{topic}/{p} on broker{bid} for a consumer of its rack {rack}: {res}"
            )
            assert values(res) == want[p], f"{topic}/{p} on broker{bid}: records served"


def test_zone_fetch_counters_count_what_one_fetch_returned(rc: Racked) -> None:
    """One Fetch served by a partition's owner adds the bytes it returned (as the topic's
    kafscale_fetch_bytes_total counts them) to zone="same" for a consumer of the owner's
    rack, "cross" for another rack without a broker, "unknown" for a consumer without a
    rack."""
    topic = new_topic(rc)
    fill(rc, topic, 0, 20)
    leaders = rc.cluster.leaders(topic)
    for p, lead in leaders.items():
        owner = rc.broker(lead.broker_id)
        for rack, zone in ((RACKS[lead.broker_id], "same"), ("z", "cross"), ("", "unknown")):
            before = rc.metrics[lead.broker_id].traffic(topic)
            with kw.RawConnection.to(owner.bootstrap) as conn:
                res = racks.fetch_v11(conn, topic, p, rack_id=rack)
            assert res.preferred_read_replica == racks.NO_REPLICA and res.size > 0, res
            delta = rc.metrics[lead.broker_id].traffic(topic) - before
            assert delta.fetch_bytes >= res.size, f"{owner.name}: {delta}, {res.size} fetched"
            assert delta.zone_fetch == {
                z: delta.fetch_bytes if z == zone else 0.0 for z in racks.ZONES
            }, f"{owner.name} after one fetch of {res.size} bytes for rack {rack!r}: {delta}"


def test_read_committed_reads_of_a_transactional_partition_stay_with_the_owner(
    rc: Racked,
) -> None:
    """A partition a transactional producer wrote is served by its owner to read_committed
    consumers of any rack (read_uncommitted ones are redirected); a partition of the same
    topic without transactions redirects both."""
    from confluent_kafka import Producer

    topic = new_topic(rc, 2)
    fill_msgs = [Msg(p, None, value(p, 0)) for p in range(2)]
    confluent_produce(rc.bootstrap(), topic, fill_msgs)
    producer = Producer(
        {"bootstrap.servers": rc.bootstrap(), "transactional.id": unique("rack-txn")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=value(0, 1), partition=0)
    producer.commit_transaction(30)
    producer.flush(10)
    rc.cluster.wait_seen_everywhere(topic, {0: 3, 1: 1})  # a record and its commit marker
    for p, lead in rc.cluster.leaders(topic).items():
        rack, bid = next((r, b) for r, b in BROKER_IN.items() if b != lead.broker_id)
        with kw.RawConnection.to(rc.broker(lead.broker_id).bootstrap) as conn:
            plain = racks.fetch_v11(conn, topic, p, rack_id=rack)
            committed = racks.fetch_v11(
                conn, topic, p, rack_id=rack, isolation_level=READ_COMMITTED
            )
        where = f"{topic}/{p} (transactional: {p == 0}) on its owner broker{lead.broker_id}"
        assert (plain.error_code, plain.preferred_read_replica) == (kw.NONE, bid), (
            f"{where}, read_uncommitted from rack {rack}: {plain}"
        )
        want_committed = racks.NO_REPLICA if p == 0 else bid
        assert (committed.error_code, committed.preferred_read_replica) == (
            kw.NONE,
            want_committed,
        ), f"{where}, read_committed from rack {rack}: {committed}"
        if p == 0:
            assert committed.size > 0, f"{where}: served read_committed without records"


# ---------------------------------------------------------------------------------------------
# real clients


def test_librdkafka_consumer_with_client_rack_reads_through_its_racks_broker(
    rc: Racked, loaded: tuple[str, dict[int, list[bytes]]]
) -> None:
    """confluent-kafka in its defaults (a group, read_committed) with client.rack=b reads the
    three partitions (owned by brokers 1, 2, 3) once each, in order; broker 2 served (nearly)
    all of their bytes and counted them as zone="same". Without client.rack the same consumer
    is served by the owners, each its own partition, counted as zone="unknown"."""
    topic, want = loaded
    ends = {p: len(v) for p, v in want.items()}
    total = sum(len(v) for vals in want.values() for v in vals)

    before = rc.traffic(topic)
    with GroupReader(rc.bootstrap(), topic, {"client.rack": "b"}) as reader:
        reader.read_until(ends)
    delta = racks.grown(rc.traffic(topic), before)
    assert_read_in_order(reader, want)
    assert_served_by(delta, BROKER_IN["b"], total)
    assert_zone_counts_match(delta, {1: "cross", 2: "same", 3: "cross"})

    before = rc.traffic(topic)
    with GroupReader(rc.bootstrap(), topic) as reader:
        reader.read_until(ends)
    delta = racks.grown(rc.traffic(topic), before)
    assert_read_in_order(reader, want)
    served = fetch_bytes(delta)
    assert sum(served.values()) >= total, served
    for bid in RACKS:  # each broker owns one of the three equal partitions
        share = served[bid] / sum(served.values())
        assert abs(share - 1 / PARTITIONS) <= 0.05, f"without client.rack: served {served}"
    assert_zone_counts_match(delta, dict.fromkeys(RACKS, "unknown"))


def test_zone_hint_in_client_id_routes_reads_like_client_rack(
    rc: Racked, loaded: tuple[str, dict[int, list[bytes]]]
) -> None:
    """client.id "rack-hint,zone=c" and no client.rack: broker 3 serves (nearly) all."""
    topic, want = loaded
    ends = {p: len(v) for p, v in want.items()}
    total = sum(len(v) for vals in want.values() for v in vals)
    before = rc.traffic(topic)
    with GroupReader(rc.bootstrap(), topic, {"client.id": "rack-hint,zone=c"}) as reader:
        reader.read_until(ends)
    delta = racks.grown(rc.traffic(topic), before)
    assert_read_in_order(reader, want)
    assert_served_by(delta, BROKER_IN["c"], total)
    assert_zone_counts_match(delta, {1: "cross", 2: "cross", 3: "same"})


def test_java_consumer_with_client_rack_reads_through_its_racks_broker(rc: Racked) -> None:
    """The Java client in its defaults plus client.rack=a (tests/jvm's ClientChecks
    produce-consume: a group consumer reads what an idempotent producer writes to three
    partitions, then reads it all again after a seek): every record once and in order, and
    broker 1 served (nearly) all the bytes of the topic."""
    topic = unique("rack-java")
    before = rc.traffic(topic)
    got = jvm.run(
        "ClientChecks",
        ["produce-consume", rc.bootstrap(), topic, str(JAVA_RECORDS), "client.rack=a"],
        timeout=240,
    )
    delta = racks.grown(rc.traffic(topic), before)
    assert got == {
        "assigned": PARTITIONS,
        "sent": JAVA_RECORDS,
        "received": JAVA_RECORDS,
        "distinct": JAVA_RECORDS,
        "duplicates": 0,
        "out_of_order": 0,
        "committed_at_end": True,
        "reread_after_seek": JAVA_RECORDS,
        "offsets_for_times_found": True,
    }
    owners = sorted(lead.broker_id for lead in rc.cluster.leaders(topic).values())
    assert owners == sorted(RACKS), f"{topic}: owners {owners}"
    produced = sum(t.produce_bytes for t in delta.values())
    assert_served_by(delta, BROKER_IN["a"], int(produced))


def test_producers_with_a_rack_or_zone_hint_write_to_the_owners(rc: Racked) -> None:
    """librdkafka producers with client.id "rack-producer,zone=b" and with client.rack=b:
    every record is acknowledged at the next offset of its partition and stored by the owner;
    the hint is counted per owner as zone="same" (broker 2) or "cross", client.rack alone as
    zone="unknown" (a Produce carries no rack). A Produce to a non-owner is refused, whatever
    its zone."""
    topic = new_topic(rc)
    n = 50

    def batch(start: int) -> list[Msg]:
        return [Msg(p, None, value(p, start + i)) for i in range(n) for p in range(PARTITIONS)]

    first, second = batch(0), batch(n)
    t0 = rc.traffic(topic)
    acked = confluent_produce(
        rc.bootstrap(), topic, first, extra={"client.id": "rack-producer,zone=b"}
    )
    t1 = rc.traffic(topic)
    acked += confluent_produce(rc.bootstrap(), topic, second, extra={"client.rack": "b"})
    t2 = rc.traffic(topic)

    msgs = first + second
    for p in range(PARTITIONS):
        offsets = [off for (q, off) in acked if q == p]
        assert offsets == list(range(2 * n)), f"partition {p}: acked at {offsets}"
        owner = rc.cluster.owner(topic, p)
        stored = read_partition(owner.bootstrap, topic, p, 0, 2 * n)
        assert [r.value for r in stored] == [m.value for m in msgs if m.partition == p]

    hinted, plain = racks.grown(t1, t0), racks.grown(t2, t1)
    for bid in RACKS:
        zone = "same" if bid == BROKER_IN["b"] else "cross"
        for delta, counted in ((hinted[bid], zone), (plain[bid], "unknown")):
            assert delta.produce_bytes > 0, f"broker{bid} took no writes: {delta}"
            slack = COUNTER_SLACK * delta.produce_bytes
            assert abs(delta.zone_produce[counted] - delta.produce_bytes) <= slack, (
                f"broker{bid}: zone={counted!r}: {delta.zone_produce}, topic {delta}"
            )

    for p in range(PARTITIONS):
        for other in rc.cluster.non_owners(topic, p):
            rack = RACKS[other.broker_id or 0]
            body = kw.produce_body(topic, p, sf.build_record_batch([(None, b"refused", [])]))
            with kw.RawConnection.to(other.bootstrap) as conn:
                reader = conn.request(kw.PRODUCE, 3, body, client_id=f"app,zone={rack}")
            res = kw.parse_produce_v3(reader)[(topic, p)]
            assert res.error_code == kw.NOT_LEADER_OR_FOLLOWER, f"{other.name} p{p}: {res}"


# ---------------------------------------------------------------------------------------------
# failover (last: they kill a broker of the module's cluster)


def test_java_consumer_keeps_reading_when_its_racks_broker_is_killed(
    rc: Racked, tmp_path: Path
) -> None:
    """Kafka's console consumer (the Java client in its defaults, a group, client.rack=b) reads
    the first half of three partitions through broker 2 and auto-commits it; broker 2 is killed
    -9, and the group's committed offsets are still the first half's ends once its partition
    has a new owner; the second half is written. The consumer reads it from the remaining
    brokers (no live broker of rack b is left, so the owners serve it): within each partition
    every offset once, in order, no gap and no step back; closing, it commits the ends.
    Broker 2 is then started again, for the librdkafka failover test."""
    half = 300
    topic = new_topic(rc)
    first = fill(rc, topic, 0, half)
    first_bytes = sum(len(v) for vals in first.values() for v in vals)
    survivors = set(RACKS) - {BROKER_IN["b"]}
    group = unique("rack-java-group")
    victim = rc.broker(BROKER_IN["b"])
    stderr = tmp_path / "console-consumer.stderr"
    try:
        before = rc.traffic(topic)
        with racks.ConsoleReader(
            rc.bootstrap(), topic, group, 2 * half * PARTITIONS, {"client.rack": "b"}, stderr
        ) as reader:
            reader.read_until(dict.fromkeys(range(PARTITIONS), half))
            mid = rc.traffic(topic)
            assert_served_by(racks.grown(mid, before), BROKER_IN["b"], first_bytes)
            halfway = dict.fromkeys(range(PARTITIONS), half)
            commits = [racks.committed(rc.bootstrap(), group, topic, PARTITIONS)]
            deadline = time.monotonic() + SETTLE_S  # auto.commit.interval.ms: 5 s
            while commits[-1] != halfway:
                assert time.monotonic() < deadline, f"{group} committed {commits[-1]}"
                time.sleep(0.2)
                commits.append(racks.committed(rc.bootstrap(), group, topic, PARTITIONS))

            leaders: dict[str, dict[int, Leader]] = {topic: rc.cluster.leaders(topic)}
            victim.kill()
            gone = moved_away(leaders, BROKER_IN["b"])

            def moved_and_claimed(now: dict[str, dict[int, Leader]]) -> str | None:
                return gone(now) or rc.cluster.claimed(now)

            rc.cluster.wait_converged([topic], {topic: PARTITIONS}, SETTLE_S, moved_and_claimed)
            commits.append(racks.committed(rc.bootstrap(), group, topic, PARTITIONS))
            assert commits[-1] == halfway, f"{group} committed {commits[-1]} after the kill"
            second = fill(rc, topic, half, half)
            second_bytes = sum(len(v) for vals in second.values() for v in vals)
            reader.read_until(dict.fromkeys(range(PARTITIONS), 2 * half), timeout=SETTLE_S)
            after = rc.traffic(topic, survivors)
            assert reader.finish() == 0, reader.stderr()
        commits.append(racks.committed(rc.bootstrap(), group, topic, PARTITIONS))
    finally:
        if not victim.running:
            victim.start()
            rc.cluster.wait_converged()

    for p in range(PARTITIONS):
        reads = reader.reads[p]
        problems = racks.offset_problems(reads)
        assert problems == [], f"partition {p}: {problems}; {reader.other[-5:]}\n{reader.stderr()}"
        assert [r.value for r in reads] == first[p] + second[p], f"partition {p}"
        assert [c[p] for c in commits] == sorted(c[p] for c in commits), (
            f"partition {p}: committed offsets went back: {commits}"
        )
    assert commits[-1] == dict.fromkeys(range(PARTITIONS), 2 * half), commits[-1]
    served = {bid: after[bid].fetch_bytes - mid[bid].fetch_bytes for bid in survivors}
    assert sum(served.values()) >= second_bytes, (
        f"after the kill brokers {sorted(survivors)} served {served} bytes of the topic, "
        f"less than the {second_bytes} written since"
    )


def test_consumer_keeps_reading_when_its_racks_broker_is_killed(rc: Racked) -> None:
    """A librdkafka consumer (defaults, client.rack=b) reads the first half of three
    partitions through broker 2 and commits; broker 2 is killed -9; once its partition has a
    new owner the second half is written. The consumer reads the second half from the
    remaining brokers (no live broker of rack b is left, so the owners serve it): within each
    partition every offset once, in order, no gap and no step back."""
    half = 300
    topic = new_topic(rc)
    first = fill(rc, topic, 0, half)
    first_bytes = sum(len(v) for vals in first.values() for v in vals)
    survivors = set(RACKS) - {BROKER_IN["b"]}

    before = rc.traffic(topic)
    with GroupReader(rc.bootstrap(), topic, {"client.rack": "b"}) as reader:
        reader.read_until(dict.fromkeys(range(PARTITIONS), half))
        reader.commit()
        mid = rc.traffic(topic)
        assert_served_by(racks.grown(mid, before), BROKER_IN["b"], first_bytes)

        leaders: dict[str, dict[int, Leader]] = {topic: rc.cluster.leaders(topic)}
        victim = rc.broker(BROKER_IN["b"])
        victim.kill()
        gone = moved_away(leaders, BROKER_IN["b"])

        def moved_and_claimed(now: dict[str, dict[int, Leader]]) -> str | None:
            return gone(now) or rc.cluster.claimed(now)

        rc.cluster.wait_converged([topic], {topic: PARTITIONS}, SETTLE_S, moved_and_claimed)
        second = fill(rc, topic, half, half)
        second_bytes = sum(len(v) for vals in second.values() for v in vals)
        reader.read_until(dict.fromkeys(range(PARTITIONS), 2 * half), timeout=SETTLE_S)
        after = rc.traffic(topic, survivors)

    for p in range(PARTITIONS):
        reads = reader.reads[p]
        assert racks.offset_problems(reads) == [], f"partition {p}: errors {reader.errors[-5:]}"
        assert [r.value for r in reads] == first[p] + second[p], f"partition {p}"
    served = {bid: after[bid].fetch_bytes - mid[bid].fetch_bytes for bid in survivors}
    assert sum(served.values()) >= second_bytes, (
        f"after the kill brokers {sorted(survivors)} served {served} bytes of the topic, "
        f"less than the {second_bytes} written since"
    )
