"""TLS and SASL on a 3-broker cluster (etcd, moto). Every broker has a PLAINTEXT listener and an
SSL, SASL_SSL or SASL_PLAINTEXT one; a client that comes in on the secured listener is given
every broker's endpoint there, so producing to partitions owned by the other brokers, consuming
in a group (FindCoordinator) and the admin API all stay on it.

One cluster per listener kind, and in it every client the suite drives (kcat, confluent-kafka,
kafka-python, aiokafka) bootstraps on broker 1's secured listener, produces to a partition led
by each broker and reads the records back: over SSL; over SSL with client certificates required
(while a client without one is refused by every broker); over SASL_SSL with SCRAM-SHA-512 and
with PLAIN, and over SASL_PLAINTEXT with PLAIN, as a SCRAM user stored once. With an authorizer,
an ACL for a client certificate's subject created through one broker lets that client produce
through every broker. Certificates come from tests/support/tls.py.

Nothing is timed: waits poll with deadlines that only stop a hung test.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support.acl_clients import (
    TOPIC_AUTHORIZATION_FAILED,
    admin_client,
    allow,
    client_certificate,
    create,
    create_topic,
    end_offset,
    leaders,
    produce_error,
    wait_until,
)
from support.clients import HANG_GUARD, unique
from support.cluster import Cluster
from support.procs import assert_no_panic
from support.secure_clients import ROUNDTRIPS, Security, assert_exact, records
from support.tls import CLIENT_CN, CLIENT_ORG, make_pki

pytestmark = pytest.mark.timeout(240)

HOST = "127.0.0.1"
PARTITIONS = 6
FAIL_TIMEOUT = 5.0  # how long a client that must fail is given to fail (seconds)

# the SASL listeners, and the mechanisms their clients log in with
SASL_LOGINS = {"SASL_SSL": ("SCRAM-SHA-512", "PLAIN"), "SASL_PLAINTEXT": ("PLAIN",)}


@dataclass
class Secured:
    """A cluster whose brokers each have a secured listener: {broker id: its port}, an admin
    client that creates topics, and ``leaders_of(topic)``: {partition: leader id}."""

    cluster: Cluster
    ports: dict[int, int]
    admin: AdminClient
    leaders_of: Callable[[str], dict[int, int]]

    def endpoint(self, broker_id: int = 1) -> str:
        return f"{HOST}:{self.ports[broker_id]}"

    def spread_topic(self) -> tuple[str, dict[int, int]]:
        """A new topic with a partition led by each broker: (topic, {broker id: partition})."""
        for _ in range(30):
            topic = unique("spread")
            create_topic(self.admin, topic, PARTITIONS)
            led = {bid: p for p, bid in sorted(self.leaders_of(topic).items(), reverse=True)}
            if set(led) == set(self.ports):
                return topic, led
        raise AssertionError("30 topics in a row left a broker without a partition")

    def roundtrip(self, client: str, security: Security) -> None:
        """``client`` bootstraps on broker 1's secured listener, produces a few records to a
        partition led by each broker and reads them back: each partition's, exactly."""
        topic, led = self.spread_topic()
        msgs = [m for bid, p in led.items() for m in records(3, f"{client}-broker{bid}", p)]
        got = ROUNDTRIPS[client](self.endpoint(), topic, msgs, security)
        assert {g.partition for g in got} == set(led.values()), client
        for p in led.values():
            sent = [m for m in msgs if m.partition == p]
            assert_exact(sent, [g for g in got if g.partition == p])

    def assert_no_panic(self) -> None:
        for broker in self.cluster.brokers.values():
            assert_no_panic(broker)


def secured(cluster, protocol: str, args: list[str], admin: Security | None = None) -> Secured:
    """Three brokers (the ``cluster`` fixture) with a ``protocol`` listener each (and ``args``).
    Topics are created and their leaders learnt over PLAINTEXT, once every broker agrees; or, as
    ``admin``, over broker 1's secured listener (an authorizer hides them from PLAINTEXT)."""
    c = cluster(0)
    ports = c.start_with_listener(3, protocol, args)
    if admin is None:

        def converged(topic: str) -> dict[int, int]:
            return {p: lead.broker_id for p, lead in c.wait_converged([topic])[topic].items()}

        return Secured(c, ports, admin_client(c.brokers[1].bootstrap), converged)
    bootstrap = f"{HOST}:{ports[1]}"
    return Secured(c, ports, admin_client(bootstrap, admin), lambda t: leaders(bootstrap, admin, t))


def tls_refusal(port: int, cafile: Path) -> str:
    """The reason of the TLS error a client without a certificate gets from the listener on
    ``port`` (under TLS 1.3 the broker judges the client after its side of the handshake, so
    the verdict is read; a broker that admitted the client would let the read time out)."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        pytest.raises(ssl.SSLError) as failure,
        socket.create_connection((HOST, port), timeout=HANG_GUARD) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        tls.recv(1)
    return failure.value.reason or ""


# ---------------------------------------------------------------------------------------------
# TLS


def test_clients_on_the_ssl_listener_reach_every_broker_over_tls(cluster, tmp_path):
    pki = make_pki(tmp_path / "pki")
    s = secured(cluster, "SSL", pki.broker_args(trust_clients=False))
    tls = {"bootstrap.servers": s.endpoint(), **pki.security().confluent()}
    admin = AdminClient(tls)
    topic = unique("tls-cluster")
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
    brokers = admin.list_topics(timeout=10).brokers
    assert {b.id: b.port for b in brokers.values()} == s.ports, "SSL endpoints for SSL clients"
    c = s.cluster
    plain = AdminClient({"bootstrap.servers": c.brokers[1].bootstrap}).list_topics(timeout=10)
    assert {b.id: b.port for b in plain.brokers.values()} == {
        i: b.port for i, b in c.brokers.items()
    }, "PLAINTEXT endpoints for PLAINTEXT clients"
    described = admin.list_topics(topic, timeout=10).topics[topic]
    leaders = {p.leader for p in described.partitions.values()}
    assert len(leaders) > 1, f"the partitions should spread over the brokers: {leaders}"

    # confluent-kafka: every partition, whoever owns it, then a group over TLS
    values = [f"confluent-{i}".encode() for i in range(60)]
    producer = Producer(tls)
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(60) == 0
    group = unique("tls-group")
    consumer = Consumer({**tls, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    consumer.close()
    assert sorted(got) == sorted(values)
    assert sum(tp.offset for tp in committed) == len(values)

    # every client, with its defaults plus the CA, through every broker
    for client in ROUNDTRIPS:
        s.roundtrip(client, pki.security())
    s.assert_no_panic()


def test_client_certificates_are_required_by_every_broker(cluster, tmp_path):
    """With ``--ssl-client-auth required`` every client presenting a certificate of the trusted
    CA round-trips through every broker, while a confluent client without one, retrying beside
    them, never gets metadata, and each broker turns such a client away with the TLS alert."""
    pki = make_pki(tmp_path / "pki")
    s = secured(cluster, "SSL", pki.broker_args(client_auth="required"))
    everywhere = ",".join(s.endpoint(bid) for bid in s.ports)
    bad = Producer({"bootstrap.servers": everywhere, **pki.security().confluent()})
    try:
        with pytest.raises(KafkaException):
            bad.list_topics(timeout=FAIL_TIMEOUT)
        for client in ROUNDTRIPS:
            s.roundtrip(client, pki.security(pki.client))
        with pytest.raises(KafkaException):
            bad.list_topics(timeout=FAIL_TIMEOUT)
    finally:
        bad.flush(0)
        del bad
    for port in s.ports.values():
        assert "CERTIFICATE_REQUIRED" in tls_refusal(port, pki.ca.cert), port
    s.assert_no_panic()


def test_an_acl_for_a_certificate_subject_created_through_one_broker_holds_at_every_broker(
    cluster, tmp_path
):
    """With ``--authorizer acl`` and client certificates required, ops (a super user by its
    certificate's subject) creates an ACL through broker 1's listener for alice's certificate,
    ``User:CN=alice,O=kafscale-tests``: every broker refused her records before and takes them
    after (the others follow the metadata store within a bounded wait)."""
    pki = make_pki(tmp_path / "pki")
    ops = client_certificate(pki, "ops", pki.dir)
    as_ops, as_alice = pki.security(ops), pki.security(pki.client)
    authorizer = ["--authorizer", "acl", "--super-users", f"User:CN=ops,O={CLIENT_ORG}"]
    s = secured(cluster, "SSL", [*pki.broker_args(client_auth="required"), *authorizer], as_ops)
    topic, led = s.spread_topic()

    def produced(bid: int) -> int | None:
        """alice's record to the partition ``bid`` leads, through ``bid``'s listener."""
        return produce_error(s.endpoint(bid), topic, as_alice, partition=led[bid])

    for bid in led:
        assert produced(bid) == TOPIC_AUTHORIZATION_FAILED, bid
    create(s.admin, allow(f"User:CN={CLIENT_CN},O={CLIENT_ORG}", "WRITE", "TOPIC", topic))
    for bid in led:
        wait_until(lambda bid=bid: produced(bid) is None, f"broker {bid} taking alice's record")
        assert end_offset(s.endpoint(bid), topic, as_ops, led[bid]) == 1, bid
    s.assert_no_panic()


# ---------------------------------------------------------------------------------------------
# SASL


@pytest.mark.parametrize("protocol", list(SASL_LOGINS))
def test_scram_credentials_stored_once_log_in_at_every_broker(cluster, tmp_path, protocol):
    """A SCRAM user created through one broker (AlterUserScramCredentials on its PLAINTEXT
    listener) logs in at every broker of the cluster, since the credential lives in the
    metadata store: each client bootstraps on broker 1's SASL listener and produces to a
    partition each broker owns, so it logs in at each. PLAIN checks the same credential."""
    pki = make_pki(tmp_path / "pki")
    over_tls = protocol == "SASL_SSL"
    s = secured(cluster, protocol, pki.broker_args(trust_clients=False) if over_tls else [])
    alice = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"alice-secret"
    )
    s.admin.alter_user_scram_credentials([alice])["alice"].result(30)
    cafile = pki.ca.cert if over_tls else None
    for mechanism in SASL_LOGINS[protocol]:
        login = Security(protocol, mechanism, "alice", "alice-secret", cafile)
        for client in ROUNDTRIPS:
            s.roundtrip(client, login)
    s.assert_no_panic()
