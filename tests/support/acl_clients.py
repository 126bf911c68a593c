"""ACLs through confluent-kafka's admin API (CreateAcls, DescribeAcls, DeleteAcls), and what
one principal's clients are let do: produce, fetch, commit, see topics, delete them.

Bindings are compared as plain tuples of names (:func:`key`): ``("TOPIC", "orders", "LITERAL",
"User:alice", "*", "READ", "ALLOW")``; the cluster resource is ``"CLUSTER"`` (librdkafka calls
it BROKER). Every probe makes a new client, so nothing it learnt earlier (metadata, a refused
topic) colours the answer, and returns the Kafka error code the client was given, or None when
it was let through; a probe that gets neither within the hang guard fails the test.
"""

from __future__ import annotations

import time

from .clients import HANG_GUARD, unique
from .secure_clients import Security, subscribed

# Kafka error codes
NONE = 0
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
SECURITY_DISABLED = 54

CLUSTER_NAME = "kafka-cluster"
AclKey = tuple[str, str, str, str, str, str, str]

# a group prefix every principal may read (module fixtures allow it to User:*), for consumers
# whose group is not what a test is about
READER_GROUP_PREFIX = "reader-"


def reader_group() -> str:
    return unique(READER_GROUP_PREFIX.rstrip("-"))


def admin_client(bootstrap: str, security: Security | None = None):
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": bootstrap, **(security.confluent() if security else {})}
    return AdminClient(conf)


# ---------------------------------------------------------------------------------------------
# bindings and filters


def _restype(name: str):
    from confluent_kafka.admin import ResourceType

    return ResourceType.BROKER if name == "CLUSTER" else ResourceType[name]


def _from_names(make, resource_type, name, pattern, principal, host, operation, permission):
    """``make`` (an AclBinding or AclBindingFilter) of these names, in Kafka's field order."""
    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType

    return make(
        _restype(resource_type),
        name,
        ResourcePatternType[pattern],
        principal,
        host,
        AclOperation[operation],
        AclPermissionType[permission],
    )


def binding(
    permission: str,
    principal: str,
    operation: str,
    resource_type: str,
    name: str,
    pattern: str = "LITERAL",
    host: str = "*",
):
    """An AclBinding from names: binding("ALLOW", "User:alice", "READ", "TOPIC", "orders")."""
    from confluent_kafka.admin import AclBinding

    return _from_names(
        AclBinding, resource_type, name, pattern, principal, host, operation, permission
    )


def allow(principal: str, operation: str, resource_type: str, name: str, **kw):
    return binding("ALLOW", principal, operation, resource_type, name, **kw)


def deny(principal: str, operation: str, resource_type: str, name: str, **kw):
    return binding("DENY", principal, operation, resource_type, name, **kw)


def acl_filter(
    resource_type: str = "ANY",
    name: str | None = None,
    pattern: str = "ANY",
    principal: str | None = None,
    host: str | None = None,
    operation: str = "ANY",
    permission: str = "ANY",
):
    from confluent_kafka.admin import AclBindingFilter

    return _from_names(
        AclBindingFilter, resource_type, name, pattern, principal, host, operation, permission
    )


def key(b) -> AclKey:
    """A binding (confluent's AclBinding) as a tuple of names."""
    restype = "CLUSTER" if b.restype.name == "BROKER" else b.restype.name
    return (
        restype,
        b.name,
        b.resource_pattern_type.name,
        b.principal,
        b.host,
        b.operation.name,
        b.permission_type.name,
    )


def _code(exc) -> int:
    return exc.args[0].code()


def create_outcomes(admin, bindings: list) -> dict[AclKey, int]:
    """{binding: error code (0 when created)} of one CreateAcls."""
    from confluent_kafka import KafkaException

    futures = admin.create_acls(bindings, request_timeout=HANG_GUARD)
    out = {}
    for b, future in futures.items():
        try:
            future.result(HANG_GUARD)
            out[key(b)] = NONE
        except KafkaException as exc:
            out[key(b)] = _code(exc)
    return out


def create(admin, *bindings) -> None:
    """Create ``bindings``; every one must be accepted."""
    outcomes = create_outcomes(admin, list(bindings))
    assert set(outcomes.values()) == {NONE}, outcomes


def describe(admin, f) -> set[AclKey]:
    """DescribeAcls through confluent-kafka. librdkafka (2.12) drops this API's error code: a
    refused listing (SECURITY_DISABLED, CLUSTER_AUTHORIZATION_FAILED) comes back as an empty
    one, so tests check those refusals with support.acl_wire."""
    found = admin.describe_acls(f, request_timeout=HANG_GUARD).result(HANG_GUARD)
    return {key(b) for b in found}


def delete(admin, *filters) -> list[set[AclKey]]:
    """DeleteAcls: what each filter deleted, in filter order."""
    futures = admin.delete_acls(list(filters), request_timeout=HANG_GUARD)
    return [{key(b) for b in futures[f].result(HANG_GUARD)} for f in filters]


def delete_error(admin, *filters) -> int | None:
    from confluent_kafka import KafkaException

    futures = admin.delete_acls(list(filters), request_timeout=HANG_GUARD)
    codes = set()
    for f in filters:
        try:
            futures[f].result(HANG_GUARD)
        except KafkaException as exc:
            codes.add(_code(exc))
    assert len(codes) <= 1, codes
    return codes.pop() if codes else None


def drop(admin, *bindings) -> None:
    """Delete exactly these bindings (one filter each, naming every field)."""
    deleted = delete(admin, *[exact(b) for b in bindings])
    assert [len(d) for d in deleted] == [1] * len(bindings), deleted


def exact(b):
    """The filter that matches ``b`` and nothing else."""
    restype, name, pattern, principal, host, operation, permission = key(b)
    return acl_filter(restype, name, pattern, principal, host, operation, permission)


# ---------------------------------------------------------------------------------------------
# topics


def create_topic(admin, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics([NewTopic(topic, partitions)], request_timeout=HANG_GUARD)
    futures[topic].result(HANG_GUARD)


def create_topic_error(admin, topic: str) -> int | None:
    from confluent_kafka import KafkaException

    try:
        create_topic(admin, topic)
    except KafkaException as exc:
        return _code(exc)
    return None


def delete_topic_error(admin, topic: str) -> int | None:
    from confluent_kafka import KafkaException

    future = admin.delete_topics([topic], request_timeout=HANG_GUARD)[topic]
    try:
        future.result(HANG_GUARD)
    except KafkaException as exc:
        return _code(exc)
    return None


def topics_seen(bootstrap: str, security: Security | None) -> set[str]:
    """The topics a Metadata request for every topic shows this principal."""
    metadata = admin_client(bootstrap, security).list_topics(timeout=HANG_GUARD)
    return set(metadata.topics)


def topic_error(bootstrap: str, security: Security | None, topic: str) -> int:
    """The error of a Metadata request naming ``topic`` (0: none)."""
    metadata = admin_client(bootstrap, security).list_topics(topic, timeout=HANG_GUARD)
    error = metadata.topics[topic].error
    return NONE if error is None else error.code()


def leaders(bootstrap: str, security: Security, topic: str) -> dict[int, int]:
    """{partition: leader id}, once every partition has a leader."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        md = admin_client(bootstrap, security).list_topics(topic, timeout=HANG_GUARD)
        parts = md.topics[topic].partitions
        found = {p: meta.leader for p, meta in parts.items()}
        if found and all(leader >= 0 for leader in found.values()):
            return found
        assert time.monotonic() < deadline, f"{topic} has partitions without a leader: {found}"
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# produce, fetch, offsets


def produce_error(
    bootstrap: str, topic: str, security: Security | None, partition: int = 0, value=b"v"
) -> int | None:
    """One record through a new confluent producer: the error its delivery report gives."""
    from confluent_kafka import Producer

    reports: list = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "message.timeout.ms": int(HANG_GUARD * 1000),
            **(security.confluent() if security else {}),
        }
    )
    producer.produce(
        topic, value=value, partition=partition, on_delivery=lambda e, m: reports.append(e)
    )
    remaining = producer.flush(HANG_GUARD)
    assert remaining == 0 and len(reports) == 1, f"no delivery report within {HANG_GUARD}s"
    error = reports[0]
    return None if error is None else error.code()


def consume_error(
    bootstrap: str,
    topic: str,
    security: Security | None,
    *,
    partition: int = 0,
    group: str | None = None,
) -> int | None:
    """A new confluent consumer (in ``group``, default a reader group) assigned the partition
    from its beginning: None once it gets a record, else the first error it reports."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or reader_group(),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **(security.confluent() if security else {}),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                return msg.error().code()
            return None
        raise AssertionError(f"neither a record nor an error from {topic}[{partition}]")
    finally:
        consumer.close()


def end_offset(bootstrap: str, topic: str, security: Security, partition: int = 0) -> int:
    """The partition's high watermark (ListOffsets), as ``security``'s principal sees it."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": reader_group(),
            **security.confluent(),
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=HANG_GUARD
        )
        return high
    finally:
        consumer.close()


def commit_error(
    bootstrap: str, security: Security, group: str, topic: str, offset: int, partition: int = 0
) -> int | None:
    """A new consumer of ``group`` (assigned, not subscribed) commits ``offset``: the error
    of the commit, the request's or the partition's."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            **security.confluent(),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition)])
        try:
            result = consumer.commit(
                offsets=[TopicPartition(topic, partition, offset)], asynchronous=False
            )
        except KafkaException as exc:
            return _code(exc)
        errors = [tp.error for tp in result or [] if tp.error is not None]
        return errors[0].code() if errors else None
    finally:
        consumer.close()


def committed(bootstrap: str, security: Security, group: str, topic: str, partition: int = 0):
    """The offset ``group`` has committed for the partition (OffsetFetch), or its error."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **security.confluent()})
    try:
        try:
            [tp] = consumer.committed([TopicPartition(topic, partition)], timeout=HANG_GUARD)
        except KafkaException as exc:
            return ("error", _code(exc))
        if tp.error is not None:
            return ("error", tp.error.code())
        return tp.offset
    finally:
        consumer.close()


def subscribe_error(bootstrap: str, security: Security, group: str, topic: str) -> int | None:
    """A consumer subscribed in ``group``: None once it gets a record, else its first error."""
    with subscribed(bootstrap, topic, security, group) as consumer:
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            return None if msg.error() is None else msg.error().code()
        raise AssertionError(f"neither a record nor an error for group {group}")


def client_certificate(pki, common_name: str, directory, *, with_org: bool = True):
    """A client certificate (CN=common_name, and O=kafscale-tests unless not ``with_org``)
    signed by ``pki``'s CA, as a support.tls Pair under ``directory``."""
    from . import tls

    ca_cert, ca_key = tls._load_ca(pki)
    org = tls.CLIENT_ORG if with_org else None
    pair = tls.Pair(directory / f"{common_name}.pem", directory / f"{common_name}.key")
    tls._write_pair(pair, *tls._issue(ca_cert, ca_key, common_name, server=False, org=org))
    return pair


def wait_until(check, what: str, timeout: float = HANG_GUARD, poll: float = 0.1):
    """Poll ``check()`` until it returns something truthy (returned); fail after ``timeout``
    (a liveness guard, never a performance limit) saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(poll)
