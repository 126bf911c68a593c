"""Round trips through the real Kafka clients over a secured listener (SSL, SASL_PLAINTEXT,
SASL_SSL), for the TLS and SASL tests.

``Security`` is one client's security settings (the protocol, a SASL login, the CA that
verifies the broker, a client certificate), rendered in each client's own names; a test builds
it from its PKI (``support.tls.Pki.security``) or its credentials. The round trips are the
producers and consumers of ``support.clients`` with these settings added and nothing else
changed: hostname verification stays on (the test certificates name 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def records(n: int, tag: str, partition: int = 0) -> list[Msg]:
    """A few single-line text records with keys, all on ``partition`` (kcat can send these)."""
    return [Msg(partition, f"key-{i}".encode(), f"{tag}-value-{i}".encode()) for i in range(n)]


def assert_exact(produced: list[Msg], got: list[Got]) -> None:
    """Every record back once, in order, at offsets 0..n-1, same key and value."""
    assert [(g.partition, g.offset, g.key, g.value) for g in got] == [
        (m.partition, i, m.key, m.value) for i, m in enumerate(produced)
    ]


# ---------------------------------------------------------------------------------------------
# round trips, one per client: produce ``msgs``, then read them back from the beginning


# each client's producer and consumer (support.clients) and its options from a Security
CLIENTS: dict[str, tuple[Any, Any, Any]] = {
    "confluent": (confluent_produce, confluent_consume, Security.confluent),
    "kafka-python": (kafka_python_produce, kafka_python_consume, Security.kafka_python),
    "aiokafka": (aiokafka_produce, aiokafka_consume, Security.aiokafka),
    "kcat": (kcat_produce, kcat_consume, Security.kcat),
}


def secure_produce(
    client: str, bootstrap: str, topic: str, msgs: list[Msg], security: Security
) -> None:
    """``client``'s producer of ``msgs`` with ``security``'s settings."""
    produce, _consume, options = CLIENTS[client]
    produce(bootstrap, topic, msgs, extra=options(security))


def secure_consume(
    client: str, bootstrap: str, topic: str, expected: dict[int, int], security: Security
) -> list[Got]:
    """``client``'s consumer of ``expected`` ({partition: records}) from the beginning, with
    ``security``'s settings."""
    _produce, consume, options = CLIENTS[client]
    return consume(bootstrap, topic, expected, extra=options(security))


def roundtrip(
    client: str, bootstrap: str, topic: str, msgs: list[Msg], security: Security
) -> list[Got]:
    secure_produce(client, bootstrap, topic, msgs, security)
    return secure_consume(client, bootstrap, topic, counts(msgs), security)


ROUNDTRIPS = {client: functools.partial(roundtrip, client) for client in CLIENTS}
confluent_roundtrip = ROUNDTRIPS["confluent"]


def group_roundtrip(
    bootstrap: str, topic: str, msgs: list[Msg], security: Security, group: str
) -> tuple[list[Got], list[tuple[int, int]]]:
    """Produce ``msgs`` (all on partition 0) with confluent-kafka, then consume them with a
    consumer subscribed in ``group`` (it finds its coordinator, joins and consumes) and commit;
    returns what it consumed and the committed (partition, offset) of partition 0."""
    from confluent_kafka import TopicPartition

    confluent_produce(bootstrap, topic, msgs, extra=security.confluent())
    with subscribed(bootstrap, topic, security, group) as consumer:
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


@contextlib.contextmanager
def subscribed(bootstrap: str, topic: str, security: Security, group: str) -> Iterator[Any]:
    """A confluent consumer in ``group`` (no auto-commit, from the earliest offset when the
    group has none) subscribed to ``topic``; closed on leaving."""
    from confluent_kafka import Consumer

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
        yield consumer
    finally:
        consumer.close()
