"""TLS and SASL on a 3-broker cluster (etcd, moto). Every broker has a PLAINTEXT listener and an
SSL or SASL_SSL one; a client that comes in on the secured listener is given every broker's
endpoint there, so producing to partitions owned by the other brokers, consuming in a group
(FindCoordinator) and the admin API all stay on it, and a SCRAM user stored once logs in at
every broker. Certificates come from tests/support/tls.py."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from support.clients import unique
from support.secure_clients import ROUNDTRIPS, Security, assert_exact, records
from support.tls import make_pki

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6


def test_clients_on_the_ssl_listener_reach_every_broker_over_tls(cluster, tmp_path):
    pki = make_pki(tmp_path / "pki")
    c = cluster(0)
    ssl_ports = c.start_with_listener(3, "SSL", pki.broker_args())
    ssl_bootstrap = f"127.0.0.1:{ssl_ports[1]}"
    tls = {
        "bootstrap.servers": ssl_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca.cert),
    }
    admin = AdminClient(tls)
    topic = unique("tls-cluster")
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
    brokers = admin.list_topics(timeout=10).brokers
    assert {b.id: b.port for b in brokers.values()} == ssl_ports, "SSL endpoints for SSL clients"
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

    # kafka-python with its defaults (idempotent producer) over the same listener
    more = [f"kafka-python-{i}".encode() for i in range(30)]
    kp = KafkaProducer(
        bootstrap_servers=ssl_bootstrap, security_protocol="SSL", ssl_cafile=str(pki.ca.cert)
    )
    for i, value in enumerate(more):
        kp.send(topic, value, partition=i % PARTITIONS)
    kp.flush(60)
    kp.close()
    kc = KafkaConsumer(
        topic,
        bootstrap_servers=ssl_bootstrap,
        security_protocol="SSL",
        ssl_cafile=str(pki.ca.cert),
        auto_offset_reset="earliest",
        consumer_timeout_ms=20_000,
    )
    read = [m.value for m in kc]
    kc.close()
    assert sorted(read) == sorted(values + more)


def test_scram_credentials_stored_once_log_in_at_every_broker(cluster, tmp_path):
    """A SCRAM user created through one broker (AlterUserScramCredentials on its PLAINTEXT
    listener) logs in at every broker of the cluster, since the credential lives in the
    metadata store: each client bootstraps on broker 1's SASL_SSL listener and produces to a
    partition another broker owns, so it logs in there too. PLAIN checks the same credential."""
    pki = make_pki(tmp_path / "pki")
    c = cluster(0)
    sasl_ports = c.start_with_listener(3, "SASL_SSL", pki.broker_args())
    admin = AdminClient({"bootstrap.servers": c.brokers[1].bootstrap})
    alice = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"alice-secret"
    )
    admin.alter_user_scram_credentials([alice])["alice"].result(30)
    bootstrap = f"127.0.0.1:{sasl_ports[1]}"
    logins = {
        client: Security("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret", pki.ca.cert)
        for client in ROUNDTRIPS
    }
    logins["confluent-plain"] = Security("SASL_SSL", "PLAIN", "alice", "alice-secret", pki.ca.cert)
    for name, security in logins.items():
        roundtrip = ROUNDTRIPS[name.removesuffix("-plain")]
        topic = led_by_another_broker(admin, c, avoid=1)
        msgs = records(5, name)
        assert_exact(msgs, roundtrip(bootstrap, topic, msgs, security))


def led_by_another_broker(admin: AdminClient, c, avoid: int) -> str:
    """A new one-partition topic whose partition a broker other than ``avoid`` owns."""
    for _ in range(30):
        topic = unique("sasl-cluster")
        admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
        leader = c.wait_converged([topic])[topic][0].broker_id
        if leader != avoid:
            return topic
    raise AssertionError(f"30 topics in a row were led by broker {avoid}")
