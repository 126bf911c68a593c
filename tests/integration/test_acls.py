"""Kafka ACLs (``--authorizer acl``) on a real broker and on a 3-broker cluster.

The module's broker has a SASL_PLAINTEXT listener (PLAIN, users of ``--sasl-users-file``: each
user's principal is ``User:<name>``) and a PLAINTEXT one (``User:ANONYMOUS``), with
``--super-users "User:admin;User:root"`` and ``allow.everyone.if.no.acl.found`` off. ACLs are
created, listed and deleted through confluent-kafka's admin API (CreateAcls, DescribeAcls,
DeleteAcls) as admin, and through the raw requests of ``support.acl_wire`` at every version.
Each test names its own topics and groups, so the ACLs of one do not reach another's.

What is checked is what Kafka 3.9's KafkaApis checks: Produce needs Write on the topic, Fetch
Read, ListOffsets Describe; Metadata hides the topics a principal may not Describe and refuses
named ones (TOPIC_AUTHORIZATION_FAILED) and auto-creates only with Create; CreateTopics needs
Create, DeleteTopics Delete, CreatePartitions Alter, DescribeConfigs / AlterConfigs their
operations; OffsetCommit Read on the group and the topic, FindCoordinator Describe on the group,
ListGroups lists what may be described, DeleteGroups Delete; InitProducerId of an idempotent
producer IdempotentWrite on the cluster or Write on some topic; a transactional id Write on
it for InitProducerId, AddPartitionsToTxn, EndTxn and Produce with it, Describe for
FindCoordinator (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Read, Write, Delete and Alter
imply Describe; a deny wins; prefixed ACLs cover the names they start; super users pass
everything. The broker that answered CreateAcls or DeleteAcls enforces the change at once (no
waiting here); the other brokers of a cluster follow within moments (a bounded wait).

Every client the suite drives (confluent-kafka, kcat, kafka-python, aiokafka) produces and
consumes as an authorized user with its defaults plus only the SASL options, and is refused as
an unauthorized one. The ``kafscale acls`` command adds, lists and removes ACLs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from support import acl_wire as aw
from support import kafka_wire as kw
from support import sasl_wire as sw
from support import segment_format as sf
from support import transactions as txw
from support.acl_clients import (
    CLUSTER_AUTHORIZATION_FAILED,
    CLUSTER_NAME,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    NONE,
    SECURITY_DISABLED,
    TOPIC_AUTHORIZATION_FAILED,
    acl_filter,
    admin_client,
    allow,
    client_certificate,
    commit_error,
    committed,
    consume_error,
    create,
    create_outcomes,
    create_topic,
    create_topic_error,
    delete,
    delete_error,
    delete_topic_error,
    deny,
    describe,
    drop,
    end_offset,
    key,
    leaders,
    produce_error,
    subscribe_error,
    topic_error,
    topics_seen,
    wait_until,
)
from support.cli_runner import kafscale, ok, one_error_line
from support.clients import HANG_GUARD, counts, unique
from support.procs import Broker, assert_no_panic, free_ports
from support.secure_clients import (
    ROUNDTRIPS,
    Security,
    assert_exact,
    records,
    secure_consume,
    secure_produce,
)
from support.tls import CLIENT_CN, CLIENT_ORG, make_pki

HOST = "127.0.0.1"
PLAINTEXT = "PLAINTEXT"
SASL_PLAINTEXT = "SASL_PLAINTEXT"

USERS = {
    "admin": "admin-secret",
    "root": "root-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "eve": "eve-secret",  # refused everywhere: never given Write or Read
    "operator": "operator-secret",  # given rights on the cluster by one test
    "idem": "idem-secret",  # the idempotent producer test's user
    "txn": "txn-secret",  # the transactional producer tests' user
}
SUPER_USERS = "User:admin;User:root"
ADMIN, ROOT, ALICE, BOB, EVE = (f"User:{n}" for n in ("admin", "root", "alice", "bob", "eve"))
OPERATOR, IDEM, TXN = "User:operator", "User:idem", "User:txn"
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
ANONYMOUS = "User:ANONYMOUS"
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group committed nothing for the partition
EVERYONE = "User:*"

# groups every principal may read (their consumers are not what the tests are about):
# support.acl_clients' reader groups and support.clients' assign-only consumers
READER_GROUP_PREFIXES = ("reader-", "assign-only-")


def users_file(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "users.txt"
    path.write_text("".join(f"{name}:{password}\n" for name, password in USERS.items()))
    return path


def login(name: str) -> Security:
    return Security(SASL_PLAINTEXT, "PLAIN", name, USERS[name])


def authorizer_args(users: Path) -> list[str]:
    return [
        "--sasl-users-file",
        str(users),
        "--authorizer",
        "acl",
        "--super-users",
        SUPER_USERS,
    ]


@dataclass(frozen=True)
class AclBroker:
    """The module's broker: PLAINTEXT (anonymous) and SASL_PLAINTEXT listeners."""

    broker: Broker
    ports: dict[str, int]

    def bootstrap(self, protocol: str = SASL_PLAINTEXT) -> str:
        return f"{HOST}:{self.ports[protocol]}"

    def admin(self, user: str = "admin"):
        return admin_client(self.bootstrap(), login(user))

    def topic(self, name: str, *, partitions: int = 1, records: int = 0) -> str:
        """Create topic ``name`` as admin, with ``records`` records in partition 0."""
        create_topic(self.admin(), name, partitions)
        for i in range(records):
            error = produce_error(self.bootstrap(), name, login("admin"), value=b"r%d" % i)
            assert error is None, error
        return name


@pytest.fixture(scope="module")
def ab(module_broker_factory, tmp_path_factory) -> AclBroker:
    users = users_file(tmp_path_factory.mktemp("acl-users"))
    ports = dict(zip((PLAINTEXT, SASL_PLAINTEXT), free_ports(2), strict=True))
    args = [
        "--listeners",
        ",".join(f"{name}://{HOST}:{port}" for name, port in ports.items()),
        *authorizer_args(users),
        "--group-initial-rebalance-delay-ms",
        "0",
    ]
    broker = module_broker_factory(args, port=ports[PLAINTEXT], name="acl")
    acl_broker = AclBroker(broker, ports)
    create(
        acl_broker.admin(),
        *(
            allow(EVERYONE, "READ", "GROUP", prefix, pattern="PREFIXED")
            for prefix in READER_GROUP_PREFIXES
        ),
    )
    return acl_broker


@pytest.fixture(autouse=True)
def _broker_survives(request):
    yield
    if "ab" in request.fixturenames:
        assert_no_panic(request.getfixturevalue("ab").broker)


def raw_login(bootstrap: str, user: str) -> kw.RawConnection:
    """A raw connection to a SASL_PLAINTEXT listener, logged in as ``user``."""
    conn = kw.RawConnection.to(bootstrap, HANG_GUARD)
    auth = sw.login_plain(conn, user, USERS[user])
    assert auth.error_code == sw.NONE, auth
    return conn


# ---------------------------------------------------------------------------------------------
# without an authorizer


def test_acl_apis_answer_security_disabled_without_an_authorizer(broker_factory):
    """The default (--authorizer none): everything is allowed and the ACL APIs answer
    SECURITY_DISABLED, through confluent-kafka, the raw requests and the CLI."""
    broker = broker_factory()
    admin = admin_client(broker.bootstrap)
    binding = allow(ALICE, "READ", "TOPIC", "orders")
    assert create_outcomes(admin, [binding]) == {key(binding): SECURITY_DISABLED}
    assert delete_error(admin, acl_filter()) == SECURITY_DISABLED
    with kw.RawConnection.to(broker.bootstrap) as conn:
        for version in aw.VERSIONS:
            described = aw.describe_acls(conn, aw.AclFilter(), version)
            assert described.error_code == SECURITY_DISABLED, (version, described)
            [created] = aw.create_acls(
                conn,
                [aw.Acl(aw.TOPIC, "t", aw.LITERAL, ALICE, "*", aw.READ, aw.ALLOW)],
                version,
            )
            assert created.error_code == SECURITY_DISABLED, (version, created)
            [deleted] = aw.delete_acls(conn, [aw.AclFilter()], version)
            assert deleted.error_code == SECURITY_DISABLED, (version, deleted)
    run = kafscale("acls", "list", "--bootstrap-server", broker.bootstrap)
    assert run.code == 1
    assert "--authorizer acl" in one_error_line(run)
    # and nothing is checked: an anonymous client produces and consumes anything
    topic = unique("acl-off")
    assert produce_error(broker.bootstrap, topic, None) is None
    assert consume_error(broker.bootstrap, topic, None, group=unique("any")) is None
    assert_no_panic(broker)


# ---------------------------------------------------------------------------------------------
# the data plane


def test_produce_needs_write_on_the_topic(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique("acl-produce"))
    alice = login("alice")
    # no ACL: the topic is not even described (Metadata refuses it)
    assert produce_error(bs, topic, alice) == TOPIC_AUTHORIZATION_FAILED
    # Read implies Describe, not Write: Produce itself refuses
    create(admin, allow(ALICE, "READ", "TOPIC", topic))
    assert produce_error(bs, topic, alice) == TOPIC_AUTHORIZATION_FAILED
    assert end_offset(bs, topic, login("admin")) == 0
    # Write: at once, since this broker answered the CreateAcls
    create(admin, allow(ALICE, "WRITE", "TOPIC", topic))
    assert produce_error(bs, topic, alice) is None
    assert end_offset(bs, topic, login("admin")) == 1
    # the ACL is alice's alone
    assert produce_error(bs, topic, login("bob")) == TOPIC_AUTHORIZATION_FAILED
    assert end_offset(bs, topic, login("admin")) == 1


def test_fetch_needs_read_and_list_offsets_describe(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique("acl-fetch"), records=2)
    alice = login("alice")
    create(admin, allow(ALICE, "WRITE", "TOPIC", topic))  # implies Describe, not Read
    assert consume_error(bs, topic, alice) == TOPIC_AUTHORIZATION_FAILED
    # ListOffsets needs Describe only: alice may, eve (no ACL) may not
    assert end_offset(bs, topic, alice) == 2
    for user, expected in (("alice", NONE), ("eve", TOPIC_AUTHORIZATION_FAILED)):
        with raw_login(bs, user) as conn:
            listed = kw.list_offsets(conn, topic, 0, kw.LATEST)
            assert listed.error_code == expected, (user, listed)
            fetched = kw.fetch(conn, topic, 0, 0)
            assert fetched.error_code == TOPIC_AUTHORIZATION_FAILED, (user, fetched)
    create(admin, allow(ALICE, "READ", "TOPIC", topic))
    assert consume_error(bs, topic, alice) is None
    with raw_login(bs, "alice") as conn:
        fetched = kw.fetch(conn, topic, 0, 0)
        assert fetched.error_code == NONE and fetched.records, fetched


def test_offset_commit_needs_read_on_the_group_and_the_topic(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique("acl-commit"), records=3)
    other = ab.topic(unique("acl-commit-other"), records=1)
    group = unique("acl-commit")
    alice = login("alice")
    create(admin, allow(ALICE, "READ", "TOPIC", topic), allow(ALICE, "WRITE", "TOPIC", other))
    # no ACL on the group: FindCoordinator needs Describe on it
    assert subscribe_error(bs, alice, group, topic) == GROUP_AUTHORIZATION_FAILED
    # Describe finds the coordinator, but committing needs Read on the group
    create(admin, allow(ALICE, "DESCRIBE", "GROUP", group))
    assert commit_error(bs, alice, group, topic, 1) == GROUP_AUTHORIZATION_FAILED
    assert committed(bs, login("admin"), group, topic) == NO_OFFSET
    create(admin, allow(ALICE, "READ", "GROUP", group))
    assert commit_error(bs, alice, group, topic, 1) is None
    assert committed(bs, alice, group, topic) == 1
    # ... and Read on the topic: alice may only Describe (Write) the other one
    assert commit_error(bs, alice, group, other, 1) == TOPIC_AUTHORIZATION_FAILED
    assert committed(bs, login("admin"), group, other) == NO_OFFSET
    # with both, a subscribed consumer joins, syncs and consumes from the committed offset
    assert subscribe_error(bs, alice, group, topic) is None
    assert committed(bs, login("admin"), group, topic) == 1


def test_metadata_hides_topics_without_describe(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    described = ab.topic(unique("acl-describe"))
    implied = ab.topic(unique("acl-implied"))
    hidden = ab.topic(unique("acl-hidden"))
    alice = login("alice")
    assert {described, implied, hidden} <= topics_seen(bs, login("admin"))
    assert not {described, implied, hidden} & topics_seen(bs, alice)
    assert topic_error(bs, alice, hidden) == TOPIC_AUTHORIZATION_FAILED
    create(
        admin,
        allow(ALICE, "DESCRIBE", "TOPIC", described),
        allow(ALICE, "DELETE", "TOPIC", implied),  # Delete implies Describe
    )
    seen = topics_seen(bs, alice)
    assert {described, implied} <= seen and hidden not in seen
    assert topic_error(bs, alice, described) == NONE
    assert topic_error(bs, alice, hidden) == TOPIC_AUTHORIZATION_FAILED
    # bob and the anonymous principal of the PLAINTEXT listener still see none of them
    assert not {described, implied, hidden} & topics_seen(bs, login("bob"))
    assert not {described, implied, hidden} & topics_seen(ab.bootstrap(PLAINTEXT), None)
    with kw.RawConnection.to(ab.bootstrap(PLAINTEXT)) as conn:
        md = kw.metadata(conn, [hidden], allow_auto_topic_creation=False)
        assert md.topics[hidden].error_code == TOPIC_AUTHORIZATION_FAILED, md


def test_auto_creation_and_create_topics_need_create(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    prefix = unique("acl-create") + "-"
    auto, created = prefix + "auto", prefix + "new"
    alice = login("alice")
    create(admin, allow(ALICE, "WRITE", "TOPIC", prefix, pattern="PREFIXED"))
    # Describe (from Write) but no Create: Metadata does not create the topic
    assert produce_error(bs, auto, alice) == TOPIC_AUTHORIZATION_FAILED
    assert create_topic_error(ab.admin("alice"), created) == TOPIC_AUTHORIZATION_FAILED
    assert not {auto, created} & topics_seen(bs, login("admin"))
    create(admin, allow(ALICE, "CREATE", "TOPIC", prefix, pattern="PREFIXED"))
    assert produce_error(bs, auto, alice) is None
    assert create_topic_error(ab.admin("alice"), created) is None
    assert {auto, created} <= topics_seen(bs, login("admin"))
    # Create on the cluster covers every topic
    other = unique("acl-create-any")
    assert create_topic_error(ab.admin("bob"), other) == TOPIC_AUTHORIZATION_FAILED
    create(admin, allow(BOB, "CREATE", "CLUSTER", CLUSTER_NAME))
    try:
        assert create_topic_error(ab.admin("bob"), other) is None
    finally:
        drop(admin, allow(BOB, "CREATE", "CLUSTER", CLUSTER_NAME))
    assert create_topic_error(ab.admin("bob"), unique("acl-create-any")) == (
        TOPIC_AUTHORIZATION_FAILED
    )


def test_delete_topics_needs_delete(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique("acl-delete"))
    bob = ab.admin("bob")
    assert delete_topic_error(bob, topic) == TOPIC_AUTHORIZATION_FAILED
    # a topic that does not exist: refused the same way (bob may not learn it is missing)
    assert delete_topic_error(bob, unique("acl-missing")) == TOPIC_AUTHORIZATION_FAILED
    create(admin, allow(BOB, "DESCRIBE", "TOPIC", topic))
    assert delete_topic_error(bob, topic) == TOPIC_AUTHORIZATION_FAILED
    assert topic in topics_seen(bs, login("admin"))
    create(admin, allow(BOB, "DELETE", "TOPIC", topic))
    assert delete_topic_error(bob, topic) is None
    wait_until(lambda: topic not in topics_seen(bs, login("admin")), f"{topic} leaving Metadata")


def test_configs_and_partitions_need_their_operations(ab):
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourceType,
    )

    admin = ab.admin()
    topic = ab.topic(unique("acl-configs"))
    alice = ab.admin("alice")

    def describe_configs(resource: ConfigResource) -> int | None:
        future = alice.describe_configs([resource], request_timeout=HANG_GUARD)[resource]
        try:
            future.result(HANG_GUARD)
        except KafkaException as exc:
            return exc.args[0].code()
        return None

    def alter_configs() -> int | None:
        entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
        future = alice.incremental_alter_configs([resource], request_timeout=HANG_GUARD)
        try:
            next(iter(future.values())).result(HANG_GUARD)
        except KafkaException as exc:
            return exc.args[0].code()
        return None

    def add_partitions(n: int) -> int | None:
        future = alice.create_partitions([NewPartitions(topic, n)], request_timeout=HANG_GUARD)
        try:
            future[topic].result(HANG_GUARD)
        except KafkaException as exc:
            return exc.args[0].code()
        return None

    of_topic = ConfigResource(ResourceType.TOPIC, topic)
    of_broker = ConfigResource(ResourceType.BROKER, "0")
    assert describe_configs(of_topic) == TOPIC_AUTHORIZATION_FAILED
    assert describe_configs(of_broker) == CLUSTER_AUTHORIZATION_FAILED
    assert alter_configs() == TOPIC_AUTHORIZATION_FAILED
    assert add_partitions(2) == TOPIC_AUTHORIZATION_FAILED
    # AlterConfigs implies DescribeConfigs; Alter lets partitions be added
    create(
        admin,
        allow(ALICE, "ALTER_CONFIGS", "TOPIC", topic),
        allow(ALICE, "ALTER", "TOPIC", topic),
    )
    assert describe_configs(of_topic) is None
    assert alter_configs() is None
    assert add_partitions(2) is None
    assert describe_configs(of_broker) == CLUSTER_AUTHORIZATION_FAILED
    md = admin.list_topics(topic, timeout=HANG_GUARD)
    assert len(md.topics[topic].partitions) == 2


def test_group_listing_description_and_deletion(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique("acl-groups"), records=1)
    mine, theirs = unique("acl-mine"), unique("acl-theirs")
    for group in (mine, theirs):
        assert commit_error(bs, login("admin"), group, topic, 1) is None
    alice = ab.admin("alice")

    def listed(client) -> set[str]:
        result = client.list_consumer_groups(request_timeout=HANG_GUARD).result(HANG_GUARD)
        return {g.group_id for g in result.valid}

    def group_error(futures, group: str) -> int | None:
        try:
            futures[group].result(HANG_GUARD)
        except KafkaException as exc:
            return exc.args[0].code()
        return None

    assert {mine, theirs} <= listed(admin)
    assert not {mine, theirs} & listed(alice)
    create(admin, allow(ALICE, "DESCRIBE", "GROUP", mine))
    seen = listed(alice)
    assert mine in seen and theirs not in seen
    described = alice.describe_consumer_groups([mine, theirs], request_timeout=HANG_GUARD)
    assert group_error(described, mine) is None
    assert group_error(described, theirs) == GROUP_AUTHORIZATION_FAILED
    deleted = alice.delete_consumer_groups([mine], request_timeout=HANG_GUARD)
    assert group_error(deleted, mine) == GROUP_AUTHORIZATION_FAILED
    create(admin, allow(ALICE, "DELETE", "GROUP", mine))
    deleted = alice.delete_consumer_groups([mine], request_timeout=HANG_GUARD)
    assert group_error(deleted, mine) is None
    seen = listed(admin)
    assert mine not in seen and theirs in seen


def test_idempotent_producers_need_idempotent_write_or_write_on_some_topic(ab):
    """InitProducerId without a transactional id, as Kafka's authorizeByResourceType: an
    allow of IdempotentWrite on the cluster, or of Write on any topic that no deny covers."""
    admin, bs = ab.admin(), ab.bootstrap()

    def init_producer_id() -> int:
        with raw_login(bs, "idem") as conn:
            r = conn.request(kw.INIT_PRODUCER_ID, 0, kw.init_producer_id_v0_body())
            error, _producer_id, _epoch = kw.parse_init_producer_id_v0(r)
            return error

    assert init_producer_id() == CLUSTER_AUTHORIZATION_FAILED
    some_topic = allow(IDEM, "WRITE", "TOPIC", unique("acl-idem") + "-", pattern="PREFIXED")
    create(admin, some_topic)
    assert init_producer_id() == NONE
    drop(admin, some_topic)
    assert init_producer_id() == CLUSTER_AUTHORIZATION_FAILED
    cluster = allow(IDEM, "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER_NAME)
    create(admin, cluster)
    try:
        assert init_producer_id() == NONE
    finally:
        drop(admin, cluster)
    assert init_producer_id() == CLUSTER_AUTHORIZATION_FAILED


def test_transactional_ids_need_write_and_find_coordinator_describe(ab):
    """A transactional id as Kafka's KafkaApis checks it: FindCoordinator needs Describe on the
    TransactionalId resource; InitProducerId, AddPartitionsToTxn, EndTxn and Produce with the
    id need Write on it (which implies Describe); else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    Refused, a request changes nothing; AddPartitionsToTxn needs Write on the topic too."""
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique("acl-txn"))
    txid = unique("acl-txn")
    refused = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    topic_write = allow(TXN, "WRITE", "TOPIC", topic)
    create(admin, topic_write)

    def end(isolation: int) -> int:
        with raw_login(bs, "admin") as conn:
            res = txw.list_offset(conn, topic, 0, isolation)
        assert res.error_code == NONE, res
        return res.offset

    def last_stable() -> int:
        return end(txw.READ_COMMITTED)

    def txn_batch(producer: tuple[int, int], sequence: int) -> bytes:
        return sf.build_record_batch(
            [(None, b"t%d" % sequence, [])], producer=(*producer, sequence), transactional=True
        )

    with raw_login(bs, "txn") as conn:
        assert txw.find_coordinator(conn, txid, txw.TRANSACTION_KEY).error_code == refused
        assert txw.init_producer_id(conn, txid).error_code == refused
        # Describe: FindCoordinator only
        describe_only = allow(TXN, "DESCRIBE", "TRANSACTIONAL_ID", txid)
        create(admin, describe_only)
        assert txw.find_coordinator(conn, txid, txw.TRANSACTION_KEY).error_code == NONE
        assert txw.init_producer_id(conn, txid).error_code == refused
        drop(admin, describe_only)
        assert txw.find_coordinator(conn, txid, txw.TRANSACTION_KEY).error_code == refused
        # Write: all of it
        write = allow(TXN, "WRITE", "TRANSACTIONAL_ID", txid)
        create(admin, write)
        assert txw.find_coordinator(conn, txid, txw.TRANSACTION_KEY).error_code == NONE
        init = txw.init_producer_id(conn, txid)
        assert init.error_code == NONE, init
        producer = (init.producer_id, init.epoch)
        added = txw.add_partitions_to_txn(conn, txid, producer, {topic: [0]})
        assert added == {(topic, 0): NONE}
        written = txw.produce(conn, txid, topic, 0, txn_batch(producer, 0))
        assert (written.error_code, written.base_offset) == (NONE, 0)
        assert last_stable() == 0, "the transaction is open"
        # without Write on the id every request of the transaction is refused
        drop(admin, write)
        assert txw.produce(conn, txid, topic, 0, txn_batch(producer, 1)).error_code == refused
        assert txw.add_partitions_to_txn(conn, txid, producer, {topic: [0]}) == {
            (topic, 0): refused
        }
        assert txw.end_txn(conn, txid, producer, commit=True) == refused
        assert txw.init_producer_id(conn, txid).error_code == refused
        assert last_stable() == 0, "still open: nothing was ended or aborted"
        assert end(txw.READ_UNCOMMITTED) == 1, "nothing more stored"
        create(admin, write)
        assert txw.end_txn(conn, txid, producer, commit=True) == NONE
        assert last_stable() == 2, "committed: the record and its marker"
        # Write on the id but not on the topic: AddPartitionsToTxn refuses the partition
        drop(admin, topic_write)
        added = txw.add_partitions_to_txn(conn, txid, producer, {topic: [0]})
        assert added == {(topic, 0): TOPIC_AUTHORIZATION_FAILED}
        drop(admin, write)


TXN_CLIENT_OPTIONS = {
    "confluent": Security.confluent,
    "kafka-python": Security.kafka_python,
    "aiokafka": Security.aiokafka,
}


@pytest.mark.parametrize("client", list(TXN_CLIENT_OPTIONS))
def test_transactional_clients_need_write_on_their_transactional_id(ab, client):
    """A transactional producer of each client (its defaults, the transactional id and the
    SASL options) with Write on the topic but no ACL for its transactional id fails to
    initialise, told it is not authorized; with Write on the id it commits a transaction."""
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique(f"acl-txn-{client}"))
    txid = unique(f"acl-txn-{client}")
    create(admin, allow(TXN, "WRITE", "TOPIC", topic))
    options = TXN_CLIENT_OPTIONS[client]
    producer = txw.PRODUCERS[client](bs, txid, **options(login("txn")))
    try:
        with pytest.raises(Exception) as failed:  # each client raises its own type
            producer.init()
    finally:
        producer.close()
    refusal = repr(failed.value).replace("_", "").lower()
    assert "transactionalidauthorizationfailed" in refusal, repr(failed.value)
    create(admin, allow(TXN, "WRITE", "TRANSACTIONAL_ID", txid))
    producer = txw.PRODUCERS[client](bs, txid, **options(login("txn")))
    try:
        producer.init()
        producer.begin()
        assert producer.send(topic, records(2, client)) == [(0, 0), (0, 1)]
        producer.commit()
    finally:
        producer.close()
    with raw_login(bs, "admin") as conn:
        stable = txw.list_offset(conn, topic, 0, txw.READ_COMMITTED)
    assert (stable.error_code, stable.offset) == (NONE, 3), "2 records and the commit marker"


# ---------------------------------------------------------------------------------------------
# patterns, deny, super users, the anonymous principal


def test_prefixed_acls_cover_the_names_they_start(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    prefix = unique("orders") + "-"
    eu = ab.topic(prefix + "eu")
    payments = ab.topic(unique("payments"))
    create(
        admin,
        allow(ALICE, "WRITE", "TOPIC", prefix, pattern="PREFIXED"),
        allow(BOB, "WRITE", "TOPIC", prefix),  # literal: the topic called exactly that
    )
    assert produce_error(bs, eu, login("alice")) is None
    assert produce_error(bs, payments, login("alice")) == TOPIC_AUTHORIZATION_FAILED
    assert produce_error(bs, eu, login("bob")) == TOPIC_AUTHORIZATION_FAILED
    seen = topics_seen(bs, login("alice"))
    assert eu in seen and payments not in seen
    assert eu not in topics_seen(bs, login("bob"))


def test_deny_wins_over_allow(ab):
    admin, bs = ab.admin(), ab.bootstrap()
    prefix = unique("acl-deny") + "-"
    topic = ab.topic(prefix + "t", records=1)
    alice = login("alice")
    no_write = deny(ALICE, "WRITE", "TOPIC", prefix, pattern="PREFIXED")
    create(admin, allow(ALICE, "ALL", "TOPIC", topic), no_write)
    assert produce_error(bs, topic, alice) == TOPIC_AUTHORIZATION_FAILED
    assert consume_error(bs, topic, alice) is None
    assert topic in topics_seen(bs, alice)
    # a deny for every principal applies to alice too
    nobody_reads = deny(EVERYONE, "READ", "TOPIC", topic)
    create(admin, nobody_reads)
    assert consume_error(bs, topic, alice) == TOPIC_AUTHORIZATION_FAILED
    # the allow works again once the denies are gone, at once
    drop(admin, no_write, nobody_reads)
    assert produce_error(bs, topic, alice) is None
    assert consume_error(bs, topic, alice) is None


def test_super_users_pass_everything_without_acls(ab):
    """Both principals of --super-users "User:admin;User:root" do everything, even on a topic
    and a group every principal is denied everything on; alice, allowed all, is denied."""
    admin, bs = ab.admin(), ab.bootstrap()
    topic, group = unique("acl-super"), unique("acl-super")
    create(
        admin,
        deny(EVERYONE, "ALL", "TOPIC", topic),
        deny(EVERYONE, "ALL", "GROUP", group),
        allow(ALICE, "ALL", "TOPIC", topic),
    )
    assert create_topic_error(ab.admin("root"), topic) is None
    for user in ("admin", "root"):
        security = login(user)
        assert produce_error(bs, topic, security) is None, user
        assert consume_error(bs, topic, security, group=group) is None, user
        assert commit_error(bs, security, group, topic, 1) is None, user
        assert topic in topics_seen(bs, security), user
    assert key(deny(EVERYONE, "ALL", "TOPIC", topic)) in describe(
        ab.admin("root"), acl_filter("TOPIC", topic)
    )
    assert produce_error(bs, topic, login("alice")) == TOPIC_AUTHORIZATION_FAILED
    assert topic not in topics_seen(bs, login("alice"))
    assert delete_topic_error(ab.admin("alice"), topic) == TOPIC_AUTHORIZATION_FAILED
    assert delete_topic_error(ab.admin("root"), topic) is None


def test_the_anonymous_principal_of_a_plaintext_listener(ab):
    admin = ab.admin()
    plain = ab.bootstrap(PLAINTEXT)
    topic = ab.topic(unique("acl-anonymous"), records=1)
    assert produce_error(plain, topic, None) == TOPIC_AUTHORIZATION_FAILED
    assert topic not in topics_seen(plain, None)
    create(
        admin, allow(ANONYMOUS, "WRITE", "TOPIC", topic), allow(ANONYMOUS, "READ", "TOPIC", topic)
    )
    assert produce_error(plain, topic, None) is None
    assert consume_error(plain, topic, None) is None
    assert topic in topics_seen(plain, None)
    # a logged-in user is not anonymous
    assert produce_error(ab.bootstrap(), topic, login("bob")) == TOPIC_AUTHORIZATION_FAILED


def test_the_principal_of_a_client_certificate(broker_factory, tmp_path):
    """Over an SSL listener with client certificates required, the principal is ``User:`` and
    the certificate's subject in RFC 2253 form (CN first), in ACLs and in --super-users. A CN
    that spells the super user's subject is escaped as Java escapes it: another principal."""
    pki = make_pki(tmp_path / "pki")
    ops = client_certificate(pki, "ops", tmp_path / "pki")
    spoof = client_certificate(pki, f"ops,O={CLIENT_ORG}", tmp_path / "pki", with_org=False)
    plain_port, ssl_port = free_ports(2)
    listeners = f"PLAINTEXT://{HOST}:{plain_port},SSL://{HOST}:{ssl_port}"
    broker = broker_factory(
        [
            "--listeners",
            listeners,
            *pki.broker_args(client_auth="required"),
            "--authorizer",
            "acl",
            "--super-users",
            f"User:admin;User:CN=ops,O={CLIENT_ORG}",
        ],
        port=plain_port,
    )
    bs = f"{HOST}:{ssl_port}"
    as_ops, as_alice = pki.security(ops), pki.security(pki.client)
    ops_admin = admin_client(bs, as_ops)
    topic = unique("acl-mtls")
    create_topic(ops_admin, topic)
    assert produce_error(bs, topic, as_ops) is None
    assert produce_error(bs, topic, as_alice) == TOPIC_AUTHORIZATION_FAILED
    # the SASL-style name is another principal; the subject is the certificate's
    create(ops_admin, allow(ALICE, "WRITE", "TOPIC", topic))
    assert produce_error(bs, topic, as_alice) == TOPIC_AUTHORIZATION_FAILED
    create(ops_admin, allow(f"User:CN={CLIENT_CN},O={CLIENT_ORG}", "WRITE", "TOPIC", topic))
    assert produce_error(bs, topic, as_alice) is None
    as_spoof = pki.security(spoof)
    assert produce_error(bs, topic, as_spoof) == TOPIC_AUTHORIZATION_FAILED
    create(ops_admin, allow(f"User:CN=ops\\,O\\={CLIENT_ORG}", "WRITE", "TOPIC", topic))
    assert produce_error(bs, topic, as_spoof) is None
    assert end_offset(bs, topic, as_ops) == 3
    assert_no_panic(broker)


# ---------------------------------------------------------------------------------------------
# the ACL APIs


def test_describe_acls_filters_and_delete_acls_returns_what_it_deleted(ab):
    admin = ab.admin()
    carol = f"User:{unique('carol')}"  # only named in ACLs, never logs in
    p = unique("acl-filters") + "-"
    bindings = {
        "read": allow(carol, "READ", "TOPIC", p + "orders"),
        "deny": deny(carol, "WRITE", "TOPIC", p + "orders", host="10.0.0.1"),
        "prefixed": allow(carol, "WRITE", "TOPIC", p, pattern="PREFIXED"),
        "group": allow(carol, "READ", "GROUP", p + "app"),
        "cluster": allow(carol, "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER_NAME),
        "txn": allow(carol, "WRITE", "TRANSACTIONAL_ID", p + "tx"),
    }
    create(admin, *bindings.values())
    create(admin, bindings["read"])  # twice: still one ACL
    k = {name: key(b) for name, b in bindings.items()}

    def found(**f) -> set:
        return describe(admin, acl_filter(**f))

    assert found(principal=carol) == set(k.values())
    assert found(resource_type="TOPIC", principal=carol) == {k["read"], k["deny"], k["prefixed"]}
    assert found(resource_type="GROUP", principal=carol) == {k["group"]}
    assert found(resource_type="CLUSTER", principal=carol) == {k["cluster"]}
    assert found(resource_type="TRANSACTIONAL_ID", principal=carol) == {k["txn"]}
    # a name: LITERAL and ANY take the ACLs of exactly that name, PREFIXED the prefix's
    orders = p + "orders"
    assert found(resource_type="TOPIC", name=orders, pattern="LITERAL") == {k["read"], k["deny"]}
    assert found(resource_type="TOPIC", name=orders) == {k["read"], k["deny"]}
    assert found(resource_type="TOPIC", name=p, pattern="PREFIXED") == {k["prefixed"]}
    assert found(resource_type="TOPIC", name=p, pattern="LITERAL") == set()
    # MATCH: every ACL that applies to a topic of that name
    assert found(resource_type="TOPIC", name=orders, pattern="MATCH", principal=carol) == {
        k["read"],
        k["deny"],
        k["prefixed"],
    }
    assert found(resource_type="TOPIC", name=p + "x", pattern="MATCH", principal=carol) == {
        k["prefixed"]
    }
    assert (
        found(resource_type="TOPIC", name=unique("elsewhere"), pattern="MATCH", principal=carol)
        == set()
    )
    # the other fields
    assert found(principal=carol, pattern="PREFIXED") == {k["prefixed"]}
    assert found(principal=carol, operation="WRITE") == {k["deny"], k["prefixed"], k["txn"]}
    assert found(principal=carol, permission="DENY") == {k["deny"]}
    assert found(principal=carol, host="10.0.0.1") == {k["deny"]}
    assert found(principal=carol, host="*") == set(k.values()) - {k["deny"]}

    # DeleteAcls: what each filter deleted
    by_type = acl_filter("TOPIC", principal=carol)
    by_name = acl_filter("GROUP", p + "app", "LITERAL")
    nothing = acl_filter("GROUP", p + "nothing", "LITERAL")
    assert delete(admin, by_type, by_name, nothing) == [
        {k["read"], k["deny"], k["prefixed"]},
        {k["group"]},
        set(),
    ]
    assert found(principal=carol) == {k["cluster"], k["txn"]}
    assert delete(admin, by_type, by_name) == [set(), set()]
    assert delete(admin, acl_filter(principal=carol)) == [{k["cluster"], k["txn"]}]
    assert found(principal=carol) == set()


def test_acl_apis_need_the_cluster_operations(ab):
    """DescribeAcls needs Describe on the cluster, CreateAcls and DeleteAcls Alter; anyone
    else gets CLUSTER_AUTHORIZATION_FAILED and changes nothing."""
    admin = ab.admin()
    operator = ab.admin("operator")
    topic = unique("acl-operator")

    def describe_refusal(user: str) -> int:
        """DescribeAcls' error code (raw: librdkafka does not report it)."""
        with raw_login(ab.bootstrap(), user) as conn:
            return aw.describe_acls(conn, aw.AclFilter()).error_code

    wanted = allow(ALICE, "READ", "TOPIC", topic)
    assert describe_refusal("operator") == CLUSTER_AUTHORIZATION_FAILED
    assert create_outcomes(operator, [wanted]) == {key(wanted): CLUSTER_AUTHORIZATION_FAILED}
    assert delete_error(operator, acl_filter()) == CLUSTER_AUTHORIZATION_FAILED
    assert describe(admin, acl_filter("TOPIC", topic)) == set()
    may_describe = allow(OPERATOR, "DESCRIBE", "CLUSTER", CLUSTER_NAME)
    may_alter = allow(OPERATOR, "ALTER", "CLUSTER", CLUSTER_NAME)
    create(admin, may_describe)
    try:
        assert describe_refusal("operator") == NONE
        assert key(may_describe) in describe(operator, acl_filter(principal=OPERATOR))
        assert create_outcomes(operator, [wanted]) == {key(wanted): CLUSTER_AUTHORIZATION_FAILED}
        assert delete_error(operator, acl_filter("TOPIC", topic)) == CLUSTER_AUTHORIZATION_FAILED
        create(admin, may_alter)
        create(operator, wanted)
        assert describe(operator, acl_filter("TOPIC", topic)) == {key(wanted)}
        assert delete(operator, acl_filter("TOPIC", topic)) == [{key(wanted)}]
    finally:
        delete(admin, acl_filter(principal=OPERATOR))
    assert describe_refusal("operator") == CLUSTER_AUTHORIZATION_FAILED


def test_invalid_bindings_are_refused(ab):
    """Each invalid binding gets INVALID_REQUEST with a reason; the valid ones of the same
    request are created."""
    admin = ab.admin()
    name = unique("acl-invalid")
    valid = allow(ALICE, "READ", "TOPIC", name)
    invalid = [
        allow(ALICE, "ALTER", "CLUSTER", "not-" + CLUSTER_NAME),
        allow("alice", "READ", "TOPIC", name),  # no principal type
        allow(ALICE, "WRITE", "TOPIC", ""),
        allow(ALICE, "DESCRIBE", "TOPIC", "*", pattern="PREFIXED"),
    ]
    outcomes = create_outcomes(admin, [valid, *invalid])
    assert outcomes == {key(valid): NONE, **{key(b): INVALID_REQUEST for b in invalid}}
    assert describe(admin, acl_filter(principal="alice")) == set()
    assert describe(admin, acl_filter("TOPIC", name, principal=ALICE)) == {key(valid)}
    # codes confluent-kafka will not send: ANY and MATCH in a binding, unknown codes
    good = aw.Acl(aw.TOPIC, name + "-raw", aw.LITERAL, ALICE, "*", aw.READ, aw.ALLOW)
    bad = [
        aw.Acl(aw.ANY, name, aw.LITERAL, ALICE, "*", aw.READ, aw.ALLOW),
        aw.Acl(aw.TOPIC, name, aw.MATCH, ALICE, "*", aw.READ, aw.ALLOW),
        aw.Acl(aw.TOPIC, name, aw.ANY, ALICE, "*", aw.READ, aw.ALLOW),
        aw.Acl(aw.TOPIC, name, aw.LITERAL, ALICE, "*", aw.ANY, aw.ALLOW),
        aw.Acl(aw.TOPIC, name, aw.LITERAL, ALICE, "*", aw.READ, aw.ANY),
        aw.Acl(99, name, aw.LITERAL, ALICE, "*", aw.READ, aw.ALLOW),
        aw.Acl(aw.TOPIC, name, aw.LITERAL, ALICE, "*", 99, aw.ALLOW),
    ]
    with raw_login(ab.bootstrap(), "admin") as conn:
        results = aw.create_acls(conn, [good, *bad])
        assert [r.error_code for r in results] == [NONE] + [INVALID_REQUEST] * len(bad), results
        assert all(r.error_message for r in results[1:]), results
        described = aw.describe_acls(conn, aw.AclFilter(aw.TOPIC, name + "-raw"))
        assert described.acls == [good], described
        # a filter with an unknown code is refused too
        weird = aw.describe_acls(conn, aw.AclFilter(resource_type=99))
        assert weird.error_code == INVALID_REQUEST, weird
        [deleted] = aw.delete_acls(conn, [aw.AclFilter(operation=99)])
        assert deleted.error_code == INVALID_REQUEST and deleted.acls == [], deleted


@pytest.mark.parametrize("version", aw.VERSIONS)
def test_acl_apis_at_every_version(ab, version):
    """CreateAcls, DescribeAcls and DeleteAcls v0-3 (v0 knows literal ACLs only; v2+ are
    flexible), and the ACL created is enforced at once."""
    bs = ab.bootstrap()
    topic = ab.topic(unique(f"acl-v{version}"))
    prefix = unique(f"acl-v{version}") + "-"
    literal = aw.Acl(aw.TOPIC, topic, aw.LITERAL, BOB, "*", aw.WRITE, aw.ALLOW)
    prefixed = aw.Acl(aw.TOPIC, prefix, aw.PREFIXED, BOB, "*", aw.READ, aw.DENY)
    created = [literal] if version == 0 else [literal, prefixed]
    with raw_login(bs, "admin") as conn:
        results = aw.create_acls(conn, created, version)
        assert [r.error_code for r in results] == [NONE] * len(created), results
        assert produce_error(bs, topic, login("bob")) is None
        described = aw.describe_acls(conn, aw.AclFilter(aw.TOPIC, topic, aw.LITERAL), version)
        assert described.error_code == NONE and described.acls == [literal], described
        if version >= 1:
            by_bob = aw.describe_acls(conn, aw.AclFilter(principal=BOB, pattern_type=aw.ANY), 1)
            assert {literal, prefixed} <= set(by_bob.acls), by_bob
            match = aw.AclFilter(aw.TOPIC, prefix + "x", aw.MATCH, BOB)
            assert aw.describe_acls(conn, match, version).acls == [prefixed]
        filters = [aw.AclFilter(aw.TOPIC, topic, aw.LITERAL)]
        if version >= 1:
            filters.append(aw.AclFilter(aw.TOPIC, prefix, aw.PREFIXED))
        deleted = aw.delete_acls(conn, filters, version)
        assert [(d.error_code, d.acls) for d in deleted] == [
            (NONE, [(NONE, acl)]) for acl in created
        ], deleted
        assert aw.describe_acls(conn, aw.AclFilter(aw.TOPIC, topic, aw.LITERAL), version).acls == []
    assert produce_error(bs, topic, login("bob")) == TOPIC_AUTHORIZATION_FAILED


# ---------------------------------------------------------------------------------------------
# every client


def _kcat_refusal(argv: list[str], stdin: bytes | None = None) -> str:
    """Run kcat until it says something about authorization (or exits): its stderr. A kcat
    that neither exits nor says so within the hang guard fails the test."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _out, err = proc.communicate(stdin, timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        text = err.decode(errors="replace")
        assert "authoriz" in text.lower(), f"kcat neither exited nor was refused: {text}"
        return text
    text = err.decode(errors="replace")
    assert proc.returncode != 0 or "authoriz" in text.lower(), text
    return text


def _raised(call: Callable[[], object]) -> str:
    """The exception ``call()`` must raise, as text."""
    with pytest.raises(Exception) as failure:
        call()
    return f"{type(failure.value).__name__}: {failure.value}"


def refused_produce(client: str, bs: str, topic: str, security: Security) -> str:
    """What ``client`` reports when it may not produce: the error, as text."""
    if client == "kcat":
        argv = ["kcat", "-P", "-b", bs, "-t", topic, "-p", "0", *security.kcat()]
        return _kcat_refusal(argv, b"refused-0\nrefused-1\n")
    msgs = records(2, "refused")
    return _raised(lambda: secure_produce(client, bs, topic, msgs, security))


def refused_consume(client: str, bs: str, topic: str, security: Security) -> str:
    """What ``client`` reports when it may not consume: the error, as text."""
    if client == "kcat":
        argv = ["kcat", "-C", "-b", bs, "-t", topic, "-p", "0", "-o", "beginning", "-c", "1"]
        return _kcat_refusal([*argv, *security.kcat()])
    return _raised(lambda: secure_consume(client, bs, topic, {0: 1}, security))


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_client_produces_and_consumes_only_with_acls(ab, client):
    """alice (Read and Write on the topic) produces and consumes with the client's defaults
    plus the SASL options (kafka-python's producer is idempotent by default: Write on a topic
    lets its InitProducerId through); eve (Describe only) is refused both, and nothing she
    sent is in the log."""
    admin, bs = ab.admin(), ab.bootstrap()
    topic = ab.topic(unique(f"acl-{client}"))
    create(
        admin,
        allow(ALICE, "READ", "TOPIC", topic),
        allow(ALICE, "WRITE", "TOPIC", topic),
        allow(EVE, "DESCRIBE", "TOPIC", topic),
    )
    msgs = records(4, client)
    assert_exact(msgs, ROUNDTRIPS[client](bs, topic, msgs, login("alice")))
    eve = login("eve")
    produced = refused_produce(client, bs, topic, eve)
    assert "authoriz" in produced.lower(), produced
    assert end_offset(bs, topic, login("admin")) == len(msgs)
    consumed = refused_consume(client, bs, topic, eve)
    assert "authoriz" in consumed.lower(), consumed
    assert counts(msgs) == {0: len(msgs)}


# ---------------------------------------------------------------------------------------------
# the kafscale acls command


def command_config(tmp_path: Path, user: str) -> list[str]:
    path = tmp_path / f"{user}.properties"
    path.write_text(login(user).properties())
    return ["--command-config", str(path)]


def words(text: str, **names: str) -> list[str]:
    """A command line as words, ``{name}`` replaced after the split (names hold no blanks
    that matter, but principals hold colons and braces would confuse str.format)."""
    return [names.get(w[1:-1], w) if w.startswith("{") and w.endswith("}") else w
            for w in text.split()]  # fmt: skip


def test_acls_command_builds_kafkas_bindings_and_filters():
    """What ``kafscale acls`` sends (no broker): one binding per principal, host, operation
    and resource; filters with ANY / None for what the flags leave out."""
    from kafscale.cli import build_parser
    from kafscale.cli.acls import bindings, filters

    parser = build_parser()
    args = parser.parse_args(
        words(
            "acls add --deny --principal User:a --principal User:CN=b,O=c --operation read "
            "--operation DESCRIBE_CONFIGS --topic t --cluster --resource-pattern-type PREFIXED"
        )
    )
    made = {key(b) for b in bindings(args)}
    assert made == {
        (kind, name, "PREFIXED", who, "*", op, "DENY")
        for kind, name in (("TOPIC", "t"), ("CLUSTER", CLUSTER_NAME))
        for who in ("User:a", "User:CN=b,O=c")
        for op in ("READ", "DESCRIBE_CONFIGS")
    }
    args = parser.parse_args(words("acls list"))
    assert [key(f) for f in filters(args)] == [("ANY", None, "ANY", None, None, "ANY", "ANY")]
    args = parser.parse_args(words("acls remove --group g --host 10.0.0.1 --allow"))
    assert [key(f) for f in filters(args)] == [
        ("GROUP", "g", "LITERAL", None, "10.0.0.1", "ANY", "ALLOW")
    ]


def test_acls_command(ab, tmp_path):
    bs = ab.bootstrap()
    as_admin = ["--bootstrap-server", bs, *command_config(tmp_path, "admin")]
    as_alice = ["--bootstrap-server", bs, *command_config(tmp_path, "alice")]
    topic = ab.topic(unique("acl-cli"), records=1)
    group = unique("reader-cli")
    prefix = unique("acl-cli") + "-"
    names = {"alice": ALICE, "topic": topic, "group": group, "prefix": prefix}

    def acls(text: str, *more: str):
        return ok("acls", *words(text, **names), *more, *as_admin)

    def listed(text: str) -> list[dict]:
        return acls(text, "-o", "json").json()

    add = "add --allow --principal {alice} --operation Write --operation read"
    lines = acls(f"{add} --topic {{topic}} --group {{group}}").out.splitlines()
    assert f"added ALLOW WRITE on TOPIC {topic} (LITERAL) for {ALICE} from *" in lines
    assert f"added ALLOW READ on GROUP {group} (LITERAL) for {ALICE} from *" in lines
    assert len(lines) == 4, lines
    assert produce_error(bs, topic, login("alice")) is None
    assert consume_error(bs, topic, login("alice"), group=group) is None

    row = {
        "principal": ALICE,
        "host": "*",
        "resource_type": "TOPIC",
        "resource_name": topic,
        "pattern_type": "LITERAL",
        "permission": "ALLOW",
    }
    assert listed("list --topic {topic}") == [
        {**row, "operation": "READ"},
        {**row, "operation": "WRITE"},
    ]
    header, *body = acls("list --principal {alice} --group {group}").out.splitlines()
    assert header.split() == [
        "PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "NAME", "PATTERN"
    ]  # fmt: skip
    assert [line.split() for line in body] == [  # every combination: Write on the group too
        [ALICE, "*", op, "ALLOW", "GROUP", group, "LITERAL"] for op in ("READ", "WRITE")
    ]
    assert {**row, "operation": "WRITE"} in listed("list")

    # a prefixed deny, found by a MATCH listing of a topic it covers, removed again
    deny_prefix = "--topic {prefix} --resource-pattern-type prefixed"
    acls(f"add --deny --principal {{alice}} --operation WRITE {deny_prefix}")
    names["covered"] = ab.topic(prefix + "x")
    acls("add --allow --principal {alice} --operation all --topic {covered}")
    assert produce_error(bs, names["covered"], login("alice")) == TOPIC_AUTHORIZATION_FAILED
    matching = listed("list --topic {covered} --resource-pattern-type match")
    assert {(r["pattern_type"], r["operation"], r["permission"]) for r in matching} == {
        ("PREFIXED", "WRITE", "DENY"),
        ("LITERAL", "ALL", "ALLOW"),
    }
    removed = acls("remove --topic {prefix} --resource-pattern-type prefixed").out
    assert removed.splitlines() == [
        f"removed DENY WRITE on TOPIC {prefix} (PREFIXED) for {ALICE} from *"
    ]
    assert produce_error(bs, names["covered"], login("alice")) is None

    # narrowing a removal; nothing left to remove is an error unless --if-exists
    removed = acls("remove --topic {topic} --operation Read").out
    assert removed.splitlines() == [
        f"removed ALLOW READ on TOPIC {topic} (LITERAL) for {ALICE} from *"
    ]
    assert [r["operation"] for r in listed("list --topic {topic}")] == ["WRITE"]
    again = kafscale("acls", *words("remove --topic {topic} --operation Read", **names), *as_admin)
    assert again.code == 1 and "no ACL matches" in one_error_line(again)
    assert "acls list" in again.err
    acls("remove --topic {topic} --operation Read --if-exists")

    # alice may not list or change ACLs: one line that says who may
    for text in (
        "list",
        "add --allow --principal {alice} --operation Read --topic {topic}",
        "remove --topic {topic}",
    ):
        refused = kafscale("acls", *words(text, **names), *as_alice)
        assert refused.code == 1, (text, refused)
        assert "--super-users" in one_error_line(refused), refused.err
    assert [r["operation"] for r in listed("list --topic {topic}")] == ["WRITE"]

    # usage errors: exit 2 with argparse's message, nothing sent
    for text, says in (
        ("add --allow --principal alice --operation Read --topic t", "TYPE:NAME"),
        ("add --allow --principal {alice} --operation Fly --topic t", "not an operation"),
        ("add --allow --deny --principal {alice} --operation Read --topic t", "not allowed with"),
        ("add --principal {alice} --operation Read --topic t", "--allow"),
        ("add --allow --principal {alice} --operation Read", "name a resource"),
        ("add --allow --principal {alice} --operation Read --topic t --resource-pattern-type match",
         "invalid choice"),
        ("list --resource-pattern-type match", "needs a resource"),
        ("remove --principal {alice}", "name a resource"),
    ):  # fmt: skip
        run = kafscale("acls", *words(text, **names), "--bootstrap-server", bs)
        assert run.code == 2 and says in run.err, (text, run.err)


# ---------------------------------------------------------------------------------------------
# a 3-broker cluster


def test_acls_created_through_one_broker_are_enforced_by_every_broker(cluster, tmp_path):
    """Every broker of a cluster (etcd, moto) follows the ACLs in the metadata store: an ACL
    created through broker 1 lets alice produce to partitions every broker leads and see the
    topic in every broker's Metadata; deleted through broker 2, every broker refuses her again.
    The broker that handled the request enforces the change at once, the others within a
    bounded wait."""
    users = users_file(tmp_path / "users")
    c = cluster(0)
    sasl_ports = c.start_with_listener(3, SASL_PLAINTEXT, authorizer_args(users))
    sasl = {bid: f"{HOST}:{port}" for bid, port in sasl_ports.items()}
    admin_login, alice = login("admin"), login("alice")
    topic = unique("acl-cluster")
    create_topic(admin_client(sasl[1], admin_login), topic, 24)
    led = leaders(sasl[1], admin_login, topic)
    partition_of = {bid: min(p for p, leader in led.items() if leader == bid) for bid in sasl}

    def seen_by(bid: int) -> bool:
        with raw_login(sasl[bid], "alice") as conn:
            return topic in kw.metadata(conn, None).topics

    def produced(bid: int) -> int | None:
        return produce_error(sasl[bid], topic, alice, partition=partition_of[bid])

    for bid in sasl:
        assert not seen_by(bid), bid
        assert produced(bid) == TOPIC_AUTHORIZATION_FAILED, bid

    may_write = aw.Acl(aw.TOPIC, topic, aw.LITERAL, ALICE, "*", aw.WRITE, aw.ALLOW)
    with raw_login(sasl[1], "admin") as conn:
        [created] = aw.create_acls(conn, [may_write])
        assert created.error_code == NONE, created
    assert seen_by(1) and produced(1) is None
    for bid in (2, 3):
        wait_until(lambda bid=bid: seen_by(bid), f"broker {bid} following the new ACL")
        assert produced(bid) is None, bid
    with raw_login(sasl[3], "admin") as conn:
        described = aw.describe_acls(conn, aw.AclFilter(aw.TOPIC, topic))
        assert described.acls == [may_write], described

    with raw_login(sasl[2], "admin") as conn:
        [deleted] = aw.delete_acls(conn, [aw.AclFilter(aw.TOPIC, topic)])
        assert deleted.acls == [(NONE, may_write)], deleted
    assert not seen_by(2) and produced(2) == TOPIC_AUTHORIZATION_FAILED
    for bid in (1, 3):
        wait_until(lambda bid=bid: not seen_by(bid), f"broker {bid} following the deletion")
        assert produced(bid) == TOPIC_AUTHORIZATION_FAILED, bid
    for b in c.brokers.values():
        assert_no_panic(b)
