"""Client quotas over the Kafka protocol: DescribeClientQuotas and AlterClientQuotas (KIP-546),
sent with kafka-python.

librdkafka (and so confluent-kafka, the client of every other command) has no client-quota
admin API, and kafka-python's KafkaAdminClient has none either; but kafka-python generates the
two requests from Kafka's own message schemas (``kafka.protocol.admin``), and its network
client (``kafka.net.KafkaNetClient``, the client KafkaAdminClient, KafkaConsumer and
KafkaProducer take as ``kafka_client``) sends any request object: it bootstraps, negotiates the
API version from ApiVersions, and does PLAINTEXT, SSL and SASL (PLAIN, SCRAM). Only those
public pieces are used.

The connection is first checked with the confluent-kafka client of the other commands
(:meth:`Kafka.metadata`), so an unreachable address or a refused login fail at once with the
same sentences; then kafka-python connects with the same ``--command-config``, its librdkafka
property names translated (:func:`client_config`). A property it has no equivalent for is
refused before anything is sent.
"""

from __future__ import annotations

import argparse
import logging
import re
import ssl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafscale.errors import ErrorCode

from .errors import CliError
from .kafka import Kafka

ENTITY_TYPES = ("user", "client-id", "ip")  # Kafka's entity types, in the order shown
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2  # DescribeClientQuotas' match types
API_MAX_VERSION = 1

# (entity type, name or None for the type's default), in ENTITY_TYPES order
Entity = tuple[tuple[str, str | None], ...]

# --command-config properties kafka-python takes (librdkafka's names)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_KEYS = ("sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password")
_SSL_KEYS = (
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.crl.location",
    "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
)
# librdkafka's logging and placement: nothing to translate, nothing that changes the connection
_IGNORED_KEYS = ("debug", "log_level", "log.connection.close", "log.thread.name", "client.rack")
_MAPPED_KEYS = frozenset(("security.protocol", *_SASL_KEYS, *_SSL_KEYS, *_IGNORED_KEYS))


def sort_entity(parts: Sequence[tuple[str, str | None]]) -> Entity:
    """An entity's parts in ENTITY_TYPES order (unknown types last, by name)."""

    def rank(part: tuple[str, str | None]) -> tuple[int, str]:
        kind = part[0]
        return (ENTITY_TYPES.index(kind) if kind in ENTITY_TYPES else len(ENTITY_TYPES), kind)

    return tuple(sorted(parts, key=rank))


@dataclass(frozen=True)
class Component:
    """One DescribeClientQuotas filter component."""

    entity_type: str
    match_type: int
    match: str | None = None


@dataclass(frozen=True)
class Described:
    """One entity of DescribeClientQuotas' answer with its quota values."""

    entity: Entity
    values: dict[str, float]


# ---------------------------------------------------------------------------------------------
# --command-config for kafka-python


def _flag(properties: dict[str, str], key: str, default: bool) -> bool:
    value = properties.get(key)
    if value is None:
        return default
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise CliError(f"--command-config: {key}={value} is not true or false", "give true or false")


def client_config(properties: dict[str, str]) -> dict[str, Any]:
    """kafka-python's security settings for librdkafka ``properties``; a CliError naming
    what it cannot take (before anything is sent)."""
    unknown = sorted(set(properties) - _MAPPED_KEYS)
    if unknown:
        raise CliError(
            f"`kafscale quotas` cannot use {', '.join(unknown)} of --command-config: librdkafka "
            "has no client-quota API, so this command connects with kafka-python",
            "it takes security.protocol, sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), "
            "sasl.username, sasl.password and the ssl.*.location settings; leave the others "
            "out of the file for this command",
        )
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in _PROTOCOLS:
        raise CliError(
            f"--command-config: security.protocol={properties['security.protocol']} is not "
            "a security protocol",
            f"give one of {', '.join(_PROTOCOLS)}",
        )
    config: dict[str, Any] = {"security_protocol": protocol}
    if protocol.startswith("SASL_"):
        mechanism = properties.get("sasl.mechanism", properties.get("sasl.mechanisms", "GSSAPI"))
        if mechanism.upper() not in SASL_MECHANISMS:
            raise CliError(
                f"`kafscale quotas` cannot log in with SASL mechanism {mechanism} (librdkafka "
                "has no client-quota API, so this command connects with kafka-python)",
                f"give sasl.mechanism={' or '.join(SASL_MECHANISMS)} in --command-config",
            )
        config |= {
            "sasl_mechanism": mechanism.upper(),
            "sasl_plain_username": properties.get("sasl.username"),
            "sasl_plain_password": properties.get("sasl.password"),
        }
    if protocol.endswith("SSL"):
        config["ssl_context"] = ssl_context(properties)
    return config


def ssl_context(properties: dict[str, str]) -> ssl.SSLContext:
    """An SSLContext that checks what librdkafka would with these properties: the broker's
    certificate against ``ssl.ca.location`` (or the system's CAs) and, unless
    ``ssl.endpoint.identification.algorithm=none``, its host name."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    verify = _flag(properties, "enable.ssl.certificate.verification", True)
    identify = properties.get("ssl.endpoint.identification.algorithm", "https").lower()
    if identify not in ("https", "none"):
        raise CliError(
            f"--command-config: ssl.endpoint.identification.algorithm={identify} is not "
            "https or none",
            "give https (check the broker's host name, the default) or none",
        )
    context.check_hostname = verify and identify == "https"
    if not verify:
        context.verify_mode = ssl.CERT_NONE
    try:
        ca = properties.get("ssl.ca.location")
        if ca and ca != "probe":
            if Path(ca).is_dir():
                context.load_verify_locations(capath=ca)
            else:
                context.load_verify_locations(cafile=ca)
        elif "ssl.ca.pem" in properties:
            context.load_verify_locations(cadata=properties["ssl.ca.pem"])
        else:
            context.load_default_certs()
        certificate = properties.get("ssl.certificate.location")
        if certificate:
            context.load_cert_chain(
                certificate,
                properties.get("ssl.key.location"),
                properties.get("ssl.key.password"),
            )
        crl = properties.get("ssl.crl.location")
        if crl:
            context.load_verify_locations(cafile=crl)
            context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        if "ssl.cipher.suites" in properties:
            context.set_ciphers(properties["ssl.cipher.suites"])
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise CliError(
            f"cannot load the TLS settings of --command-config ({exc})",
            "check ssl.ca.location, ssl.certificate.location, ssl.key.location and "
            "ssl.key.password",
        ) from None
    return context


# ---------------------------------------------------------------------------------------------
# the client


class _Said(logging.Handler):
    """Keeps kafka-python's warnings (the reason a connection failed, when one does)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def reason(self) -> str | None:
        """Why the last connection failed, as kafka-python logged it (``Bootstrap connection
        to bootstrap-0 failed: ...``), else its last warning."""
        for line in reversed(self.lines):
            if line.startswith(("Bootstrap connection to", "Connection failed")):
                return re.sub(r" \(backoff [^)]*\)$", "", line)
        return self.lines[-1] if self.lines else None


class _Failure:
    """A kafka-python failure in the shape :meth:`Kafka.failure` reads (code and text)."""

    def __init__(self, code: int, text: str) -> None:
        self._code = code
        self._text = text

    def code(self) -> int:
        return self._code

    def str(self) -> str:
        return self._text


def _kafka_python() -> tuple[Any, Any, Any]:
    """kafka-python's modules ``errors``, ``net`` and ``protocol.admin``, imported when a
    quota command runs (they take 0.15 s to import, which the other commands need not wait)."""
    import kafka.errors  # type: ignore[import-untyped]
    import kafka.net  # type: ignore[import-untyped]
    import kafka.protocol.admin  # type: ignore[import-untyped]

    return kafka.errors, kafka.net, kafka.protocol.admin


class QuotaClient:
    """kafka-python's network client, for the two quota requests of one command."""

    def __init__(self, kafka: Kafka, config: dict[str, Any]) -> None:
        """``config``: kafka-python's security settings (:func:`client_config`)."""
        _, net, _ = _kafka_python()
        self.kafka = kafka
        self._said = _Said()
        self._logger = logging.getLogger("kafka")
        self._logger.addHandler(self._said)
        self._net = net.KafkaNetClient(
            bootstrap_servers=[s.strip() for s in kafka.bootstrap.split(",")],
            client_id="kafscale-cli",
            request_timeout_ms=int(kafka.timeout * 1000),
            **config,
        )

    def close(self) -> None:
        try:
            self._net.close()
        finally:
            self._logger.removeHandler(self._said)

    def _failure(self, exc: Exception, doing: str, subject: str | None) -> CliError:
        errors, _, _ = _kafka_python()
        text = str(exc) or type(exc).__name__
        if isinstance(exc, errors.UnsupportedVersionError):
            code = int(ErrorCode.UNSUPPORTED_VERSION)
        elif isinstance(exc, errors.KafkaTimeoutError | errors.RequestTimedOutError):
            code = int(ErrorCode.REQUEST_TIMED_OUT)
        elif isinstance(
            exc, errors.SaslAuthenticationFailedError | errors.UnsupportedSaslMechanismError
        ):
            return self.kafka.authentication_failed(_Failure(-1, text))
        elif isinstance(exc, errors.BrokerResponseError) and exc.errno is not None:
            code = int(exc.errno)
        else:  # the connection failed (kafka-python logged why)
            said = self._said.reason()
            return self.kafka.unreachable(f"{text}; {said}" if said else text)
        return self.kafka.failure(_Failure(code, text), doing, subject)

    def _send(self, request: Any, doing: str, subject: str | None) -> Any:
        """``request``'s answer from the least loaded broker, or a CliError."""
        errors, _, _ = _kafka_python()
        timeout_ms = int(self.kafka.timeout * 1000)
        try:
            self._net.check_version(timeout_ms=timeout_ms)  # bootstraps, once
        except errors.KafkaError as exc:
            # confluent-kafka got through with the same settings, kafka-python did not: what
            # it logged last says why (a bootstrap that fails keeps retrying until the timeout)
            if isinstance(
                exc, errors.UnsupportedVersionError | errors.SaslAuthenticationFailedError
            ):
                raise self._failure(exc, doing, subject) from None
            said = self._said.reason() or str(exc) or type(exc).__name__
            raise self.kafka.unreachable(f"kafka-python: {said}") from None
        try:
            node = self._net.least_loaded_node(bootstrap_fallback=True)
            return self._net.send_and_receive(node, request, timeout_ms=timeout_ms)
        except errors.KafkaError as exc:
            raise self._failure(exc, doing, subject) from None

    def describe(
        self,
        components: Sequence[Component],
        *,
        strict: bool,
        doing: str,
        subject: str | None = None,
    ) -> list[Described]:
        """DescribeClientQuotas: the entities the filter matches, with their values. A
        CliError (with the broker's error code) when the broker refuses the request."""
        _, _, admin = _kafka_python()
        request = admin.DescribeClientQuotasRequest(
            components=[
                admin.DescribeClientQuotasRequest.ComponentData(
                    entity_type=c.entity_type, match_type=c.match_type, match=c.match
                )
                for c in components
            ],
            strict=strict,
            max_version=API_MAX_VERSION,
        )
        response = self._send(request, doing, subject)
        if response.error_code:
            raise self.refused(response.error_code, response.error_message, doing, subject)
        return [
            Described(
                sort_entity([(e.entity_type, e.entity_name) for e in entry.entity]),
                {v.key: v.value for v in entry.values},
            )
            for entry in response.entries or []
        ]

    def alter(
        self, entity: Entity, ops: Sequence[tuple[str, float | None]], *, doing: str, subject: str
    ) -> None:
        """AlterClientQuotas of one entity: each (key, value) sets the key, (key, None)
        removes it. A CliError with the broker's message and code when it refuses."""
        _, _, admin = _kafka_python()
        entry = admin.AlterClientQuotasRequest.EntryData
        request = admin.AlterClientQuotasRequest(
            entries=[
                entry(
                    entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    ops=[
                        entry.OpData(key=key, value=value or 0.0, remove=value is None)
                        for key, value in ops
                    ],
                )
            ],
            validate_only=False,
            max_version=API_MAX_VERSION,
        )
        response = self._send(request, doing, subject)
        for answer in response.entries:
            if answer.error_code:
                raise self.refused(answer.error_code, answer.error_message, doing, subject)

    def refused(self, code: int, message: str | None, doing: str, subject: str | None) -> CliError:
        """The broker's refusal (``code``, ``message``) as :meth:`Kafka.failure` words it."""
        if not message:
            errors, _, _ = _kafka_python()
            message = str(errors.for_code(code).message)
        return self.kafka.failure(_Failure(code, message), doing, subject)


@contextmanager
def quota_client(args: argparse.Namespace) -> Iterator[QuotaClient]:
    """A QuotaClient for the connection flags ``args``, once confluent-kafka reached the
    brokers with them; closed after. What kafka-python cannot take of --command-config is
    refused first."""
    config = client_config(args.command_config)
    kafka = Kafka.from_args(args)
    kafka.metadata()
    client = QuotaClient(kafka, config)
    try:
        yield client
    finally:
        client.close()
