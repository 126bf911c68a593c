"""The Java client (Apache kafka-clients, pinned in tests/jvm/pom.xml) in its defaults against
a broker: an idempotent producer with acks=all, a consumer group, seeks and timestamp lookups,
the AdminClient, the same over SASL_SSL with SCRAM and over TLS with a client certificate, and
the idempotent producer through a kill -9 of a partition owner. The JVM
side (tests/jvm's ClientChecks and FailoverProducer) reports what it saw; these tests decide
what is right."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from typing import Any

import pytest
from support import jvm
from support import kafka_wire as kw
from support.cluster import create_topic, moved_away, read_partition
from support.load import busiest
from support.procs import free_ports
from support.tls import make_pki

RECORDS = 500
FAILOVER_PARTITIONS = 6
FAILOVER_SECONDS = 25  # the producer's run; the kill comes a few seconds in
FAILOVER_RATE = 200  # records per second


@pytest.fixture(scope="module")
def jbroker(module_broker_factory):
    return module_broker_factory()


def checks(*args: str) -> dict[str, Any]:
    return jvm.run("ClientChecks", list(args), timeout=240)


def test_default_producer_and_consumer_group_see_every_record_once_in_order(jbroker):
    got = checks("produce-consume", jbroker.bootstrap, "java-defaults", str(RECORDS))
    assert got == EXPECTED_ROUNDTRIP


EXPECTED_ROUNDTRIP = {
    "assigned": 3,
    "sent": RECORDS,
    "received": RECORDS,
    "distinct": RECORDS,
    "duplicates": 0,
    "out_of_order": 0,
    "committed_at_end": True,
    "reread_after_seek": RECORDS,
    "offsets_for_times_found": True,
}


def test_over_sasl_ssl_with_a_scram_user_the_admin_client_stored(broker_factory, tmp_path):
    """The AdminClient stores a SCRAM-SHA-512 user (AlterUserScramCredentials) over the
    PLAINTEXT listener; then the producer, consumer and admin clients log in as that user over
    SASL_SSL, checking the broker's certificate against the CA (PEM truststore)."""
    pki = make_pki(tmp_path / "pki")
    users = tmp_path / "users.txt"
    users.write_text("file-user:file-secret\n")
    plain, sasl_ssl = free_ports(2)
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl_ssl}"
    broker_factory(
        [
            "--listeners",
            listeners,
            "--sasl-users-file",
            str(users),
            *pki.broker_args(trust_clients=False),
        ],
        port=plain,
    )
    stored = checks("scram-user", f"127.0.0.1:{plain}", "java-scram", "java-secret")
    assert stored == {"credentials": "SCRAM-SHA-512:8192"}
    login = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="java-scram"'
        ' password="java-secret";'
    )
    security = [
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        f"sasl.jaas.config={login}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pki.ca.cert}",
    ]
    got = checks("produce-consume", f"127.0.0.1:{sasl_ssl}", "java-sasl", str(RECORDS), *security)
    assert got == EXPECTED_ROUNDTRIP


def test_over_tls_with_a_client_certificate(broker_factory, tmp_path):
    """mTLS: the broker requires a client certificate signed by its CA; the Java clients
    present one (a PEM keystore: the key, then the certificate) and check the broker's."""
    pki = make_pki(tmp_path / "pki")
    keystore = tmp_path / "client-keystore.pem"
    keystore.write_text(pki.client.key.read_text() + pki.client.cert.read_text())
    plain, tls = free_ports(2)
    broker_factory(
        [
            *("--listeners", f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}"),
            *pki.broker_args(client_auth="required"),
        ],
        port=plain,
    )
    security = [
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pki.ca.cert}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
    ]
    got = checks("produce-consume", f"127.0.0.1:{tls}", "java-mtls", str(RECORDS), *security)
    assert got == EXPECTED_ROUNDTRIP


def test_admin_client_manages_topics_configs_records_and_group_offsets(jbroker):
    got = checks("admin", jbroker.bootstrap, "java-admin")
    assert got == {
        "cluster_id_set": True,
        "nodes": 1,
        "controller_set": True,
        "partitions": 2,
        "retention_ms": "3600000",
        "retention_ms_altered": "7200000",
        "partitions_increased": 4,
        "low_watermark": 5,
        "first_offset_after_delete": 5,
        "group_offset": 7,
        "deleted": True,
    }


def end_offset(cluster, topic: str, partition: int) -> int:
    with kw.RawConnection.to(cluster.owner(topic, partition).bootstrap) as conn:
        res = kw.list_offsets(conn, topic, partition, -1)
    assert res.error_code == kw.NONE, res
    return res.offset


def wait_stored(cluster, topic: str, at_least: int, timeout: float = 60) -> None:
    """Until the topic's partitions hold ``at_least`` records in all (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        stored = sum(end_offset(cluster, topic, p) for p in range(FAILOVER_PARTITIONS))
        if stored >= at_least:
            return
        assert time.monotonic() < deadline, f"{stored} records stored, waiting for {at_least}"
        time.sleep(0.2)


def test_default_idempotent_producer_through_an_owner_killed(cluster):
    """The Java producer in its defaults (idempotent, acks=all) writes to six partitions of a
    3-broker cluster while the broker owning the most of them is killed -9. It resends what
    the dead owner had not answered to the partitions' next owners: every send is
    acknowledged, every acked record is stored once at its acked offset, each partition holds
    its records in the order they were sent, and nothing is stored twice."""
    c = cluster(3, lease_ttl_ms=3000, flush_interval_ms=200)
    topic = "java-failover"
    create_topic(c.bootstrap(), topic, FAILOVER_PARTITIONS)
    c.wait_converged([topic], {topic: FAILOVER_PARTITIONS}, until=c.claimed)
    args = [c.bootstrap(), topic, str(FAILOVER_PARTITIONS), str(FAILOVER_SECONDS)]
    cmd = jvm.command(f"{jvm.PACKAGE}.FailoverProducer", [*args, str(FAILOVER_RATE)])
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            wait_stored(c, topic, 2 * FAILOVER_RATE)
            before = {topic: c.leaders(topic)}
            victim, _ = busiest(c, topic)
            victim.kill()
            c.wait_converged(
                [topic], {topic: FAILOVER_PARTITIONS}, until=moved_away(before, victim.broker_id)
            )
            stdout, stderr = proc.communicate(timeout=FAILOVER_SECONDS + 150)
        finally:
            proc.kill()
    got = jvm.result("FailoverProducer", proc.returncode, stdout, stderr)
    assert (got["errors"], got["first_error"]) == (0, None)
    assert len(got["acked"]) == got["sent"] > FAILOVER_RATE * 5

    stored: dict[int, list[str]] = {}
    for p in range(FAILOVER_PARTITIONS):
        recs = read_partition(c.owner(topic, p).bootstrap, topic, p, 0, end_offset(c, topic, p))
        stored[p] = [(r.value or b"").decode() for r in recs]
    misplaced = [
        (p, offset, value)
        for p, offset, value in got["acked"]
        if offset >= len(stored[p]) or stored[p][offset] != value
    ]
    assert not misplaced, f"{len(misplaced)} acked records not at their offsets: {misplaced[:10]}"
    twice = [v for v, n in Counter(v for vs in stored.values() for v in vs).items() if n > 1]
    assert not twice, f"stored more than once: {twice[:10]}"
    for p, values in stored.items():
        sequence = [int(v.split("-")[1]) for v in values]
        assert sequence == sorted(sequence), f"partition {p} out of send order"


RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


@pytest.mark.parametrize(
    ("assignor", "static"),
    [(RANGE, False), (COOPERATIVE, False), (COOPERATIVE, True)],
    ids=["range", "cooperative-sticky", "cooperative-sticky-static"],
)
def test_two_consumers_rebalance_and_read_each_record_once(jbroker, assignor, static):
    """Two Java consumers of a group over four partitions (tests/jvm's GroupChecks): the second
    to join takes a share, the records written then are read once between them; when the
    second leaves the first gets everything back, and a static member (group.instance.id)
    restarting gets its own partitions back without the other being rebalanced."""
    topic = f"java-group-{'static' if static else assignor.rsplit('.', 1)[-1].lower()}"
    got = jvm.run("GroupChecks", [jbroker.bootstrap, topic, assignor, str(static).lower()], 240)
    expected: dict[str, Any] = {"a_alone": 4, "split": "2+2", "received": 400, "distinct": 400}
    if static:
        expected |= {"restarted_with_same_partitions": True, "a_revocations": 0, "a_kept": True}
    else:
        expected |= {"a_after_b_left": 4}
    assert got == expected | {"read_twice": 0}
