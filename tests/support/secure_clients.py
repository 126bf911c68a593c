"""Round trips through the real Kafka clients over a secured listener (SSL, SASL_PLAINTEXT,
SASL_SSL), for the TLS and SASL tests.

``Security`` is one client's security settings (the protocol, a SASL login, the CA that
verifies the broker, a client certificate), rendered in each client's own names; a test builds
it from its PKI (``support.tls.Pki.security``) or its credentials. The round trips are the
producers and consumers of ``support.clients`` with these settings added and nothing else
changed: hostname verification stays on (the test certificates name 127.0.0.1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from support.clients import (
    HANG_GUARD,
    Got,
    Msg,
    aiokafka_consume,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    counts,
    kafka_python_consume,
    kafka_python_produce,
    kcat_consume,
    kcat_produce,
)

if TYPE_CHECKING:
    from support.tls import Pair


# kafka-python's and aiokafka's names for the SASL mechanism, user name and password
PYTHON_SASL_OPTIONS = ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password")


@dataclass(frozen=True)
class Security:
    """One client's security settings. ``mechanism`` (with ``username`` and ``password``):
    log in with SASL; ``cafile``: verify the broker's certificate against this CA;
    ``client``: present this certificate."""

    protocol: str  # SSL, SASL_PLAINTEXT or SASL_SSL
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    cafile: Path | None = None
    client: Pair | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def _sasl(self, mechanism: str, username: str, password: str) -> dict[str, str]:
        """The SASL login under a client's own option names (nothing without one)."""
        if self.mechanism is None:
            return {}
        return {
            mechanism: self.mechanism,
            username: str(self.username),
            password: str(self.password),
        }

    def _files(self, cafile: str, certfile: str, keyfile: str) -> dict[str, str]:
        """The CA and client certificate files under a client's own option names."""
        files = {} if self.cafile is None else {cafile: str(self.cafile)}
        if self.client is not None:
            files |= {certfile: str(self.client.cert), keyfile: str(self.client.key)}
        return files

    def confluent(self) -> dict[str, str]:
        """librdkafka's properties (confluent-kafka's config, kcat's ``-X``)."""
        return {
            "security.protocol": self.protocol,
            **self._sasl("sasl.mechanisms", "sasl.username", "sasl.password"),
            **self._files("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"),
        }

    def kafka_python(self) -> dict:
        return {
            "security_protocol": self.protocol,
            **self._sasl(*PYTHON_SASL_OPTIONS),
            **self._files("ssl_cafile", "ssl_certfile", "ssl_keyfile"),
        }

    def aiokafka(self) -> dict:
        """A new SSL context on every call (a context belongs to one client)."""
        conf: dict = {"security_protocol": self.protocol, **self._sasl(*PYTHON_SASL_OPTIONS)}
        if self.tls:
            from aiokafka.helpers import create_ssl_context

            conf["ssl_context"] = create_ssl_context(**self._files("cafile", "certfile", "keyfile"))
        return conf

    def kcat(self) -> list[str]:
        """kcat is librdkafka: the same properties, as ``-X`` arguments."""
        return [arg for key, value in self.confluent().items() for arg in ("-X", f"{key}={value}")]

    def properties(self) -> str:
        """A --command-config file's text."""
        return "".join(f"{k}={v}\n" for k, v in self.confluent().items())


# ---------------------------------------------------------------------------------------------
# records


def records(n: int, tag: str) -> list[Msg]:
    """A few single-line text records with keys, all on partition 0 (kcat can send these)."""
    return [Msg(0, f"key-{i}".encode(), f"{tag}-value-{i}".encode()) for i in range(n)]


def assert_exact(produced: list[Msg], got: list[Got]) -> None:
    """Every record back once, in order, at offsets 0..n-1, same key and value."""
    assert [(g.partition, g.offset, g.key, g.value) for g in got] == [
        (m.partition, i, m.key, m.value) for i, m in enumerate(produced)
    ]


# ---------------------------------------------------------------------------------------------
# round trips, one per client: produce ``msgs``, then read them back from the beginning


def confluent_roundtrip(
    bootstrap: str, topic: str, msgs: list[Msg], security: Security
) -> list[Got]:
    confluent_produce(bootstrap, topic, msgs, extra=security.confluent())
    return confluent_consume(bootstrap, topic, counts(msgs), extra=security.confluent())


def kafka_python_roundtrip(
    bootstrap: str, topic: str, msgs: list[Msg], security: Security
) -> list[Got]:
    kafka_python_produce(bootstrap, topic, msgs, extra=security.kafka_python())
    return kafka_python_consume(bootstrap, topic, counts(msgs), extra=security.kafka_python())


def aiokafka_roundtrip(
    bootstrap: str, topic: str, msgs: list[Msg], security: Security
) -> list[Got]:
    aiokafka_produce(bootstrap, topic, msgs, extra=security.aiokafka())
    return aiokafka_consume(bootstrap, topic, counts(msgs), extra=security.aiokafka())


def kcat_roundtrip(bootstrap: str, topic: str, msgs: list[Msg], security: Security) -> list[Got]:
    kcat_produce(bootstrap, topic, msgs, extra=security.kcat())
    return kcat_consume(bootstrap, topic, counts(msgs), extra=security.kcat())


ROUNDTRIPS = {
    "confluent": confluent_roundtrip,
    "kafka-python": kafka_python_roundtrip,
    "aiokafka": aiokafka_roundtrip,
    "kcat": kcat_roundtrip,
}


def group_roundtrip(
    bootstrap: str, topic: str, msgs: list[Msg], security: Security, group: str
) -> tuple[list[Got], list[tuple[int, int]]]:
    """Produce ``msgs`` (all on partition 0) with confluent-kafka, then consume them with a
    consumer subscribed in ``group`` (it finds its coordinator, joins and consumes) and commit;
    returns what it consumed and the committed (partition, offset) of partition 0."""
    from confluent_kafka import Consumer, TopicPartition

    confluent_produce(bootstrap, topic, msgs, extra=security.confluent())
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **security.confluent(),
        }
    )
    try:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + HANG_GUARD
        while len(got) < len(msgs):
            assert time.monotonic() < deadline, f"group consumer got {len(got)}/{len(msgs)}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(Got(msg.partition(), msg.offset(), msg.key(), msg.value(), (), 0))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=HANG_GUARD)
        return got, [(tp.partition, tp.offset) for tp in committed]
    finally:
        consumer.close()
