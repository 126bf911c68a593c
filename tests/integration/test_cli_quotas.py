"""The ``kafscale quotas`` command against a real broker: client quotas of users, client ids,
both, the defaults and IP addresses, set, listed and deleted through DescribeClientQuotas and
AlterClientQuotas; what the broker refuses; the CLI's own argument checks; the logins it
maps from --command-config onto kafka-python.

One broker for the module, with three listeners: PLAINTEXT (anonymous, a super user, where
most tests run), SASL_PLAINTEXT (users ``admin``, a super user, and ``carol``, who may do what
ACLs allow) and SSL with client certificates (the PKI's ``alice`` certificate is a super
user). Quotas are global state: each test names its own users, client ids and addresses, and
the tests that change a type's default put it back.
"""

from __future__ import annotations

import json
import re
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.cli_runner import Run, kafscale, ok, one_error_line
from support.clients import unique
from support.procs import Broker, assert_no_panic, free_port, free_ports
from support.tls import CLIENT_CN, CLIENT_ORG, Pki, make_pki

from kafscale.cli.quotas_wire import client_config

HOST = "127.0.0.1"
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL")
USERS = {"admin": "admin-secret", "carol": "carol-secret"}
SUPER_USERS = f"User:ANONYMOUS;User:admin;User:CN={CLIENT_CN},O={CLIENT_ORG}"
SCRAM_USER, SCRAM_PASSWORD = "dave", "dave: secret"


@dataclass(frozen=True)
class QuotaBroker:
    broker: Broker
    ports: dict[str, int]
    pki: Pki

    def bootstrap(self, listener: str = "PLAINTEXT") -> list[str]:
        return ["--bootstrap-server", f"{HOST}:{self.ports[listener]}"]


@pytest.fixture(scope="module")
def qb(module_broker_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> QuotaBroker:
    root = tmp_path_factory.mktemp("quotas")
    users = root / "users.txt"
    users.write_text("".join(f"{name}:{password}\n" for name, password in USERS.items()))
    pki = make_pki(root / "pki")
    ports = dict(zip(LISTENERS, free_ports(len(LISTENERS)), strict=True))
    args = [
        "--listeners",
        ",".join(f"{name}://{HOST}:{port}" for name, port in ports.items()),
        "--sasl-users-file",
        str(users),
        *pki.broker_args(client_auth="required"),
        "--authorizer",
        "acl",
        "--super-users",
        SUPER_USERS,
    ]
    broker: Broker = module_broker_factory(args, port=ports["PLAINTEXT"], name="quotas")
    return QuotaBroker(broker, ports, pki)


@pytest.fixture(autouse=True)
def _broker_survives(request: pytest.FixtureRequest) -> Any:
    yield
    if "qb" in request.fixturenames:
        assert_no_panic(request.getfixturevalue("qb").broker)


def quotas(qb: QuotaBroker, *args: str) -> Run:
    """``kafscale quotas ARGS`` over the PLAINTEXT listener (anonymous: a super user)."""
    return ok("quotas", *args, *qb.bootstrap())


def listed(qb: QuotaBroker, *args: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(quotas(qb, "list", *args, "-o", "json").out)
    return rows


def table(run: Run) -> list[list[str]]:
    """A table's rows split on its column gaps (two blanks or more: names may hold one)."""
    return [re.split(r" {2,}", line.strip()) for line in run.out.splitlines()]


def failed(qb: QuotaBroker, *args: str, listener: str = "PLAINTEXT") -> str:
    """The one error line of a ``kafscale quotas`` command that must exit 1."""
    run = kafscale("quotas", *args, *qb.bootstrap(listener))
    assert run.code == 1, f"{args}: exit {run.code}\n{run.out}{run.err}"
    return one_error_line(run)


# ---------------------------------------------------------------------------------------------
# the CLI's own checks (no broker)


def test_usage_errors_name_the_argument() -> None:
    """Bad arguments exit 2 with argparse's message; nothing is sent."""
    run = kafscale("quotas")
    assert run.code == 2 and run.out == "", run
    assert "    list " in run.err and "    set " in run.err and "    delete " in run.err
    for action in ("list", "set", "delete"):
        assert f"usage: kafscale quotas {action}" in ok("quotas", action, "--help").out
    bad = {
        ("set", "--producer-byte-rate", "1024"): "name the entity",
        ("set", "--user", "u"): "give at least one quota",
        ("set", "--user", "u", "--producer-byte-rate", "0"): "whole number from 1",
        ("set", "--user", "u", "--consumer-byte-rate", "1.5"): "whole number from 1",
        ("set", "--user", "u", "--producer-byte-rate", str(2**53 + 1)): "whole number from 1",
        ("set", "--user", "u", "--request-percentage", "0"): "number above 0",
        ("set", "--user", "u", "--request-percentage", "nan"): "number above 0",
        ("set", "--ip", "10.0.0.1", "--user", "u", "--producer-byte-rate", "1"): "go alone",
        ("set", "--ip", "10.0.0.01", "--connection-creation-rate", "1"): "not an IP address",
        ("set", "--ip", "localhost", "--connection-creation-rate", "1"): "not an IP address",
        ("set", "--user", "u", "--default-user", "--producer-byte-rate", "1"): "not allowed",
        ("set", "--user", "", "--producer-byte-rate", "1"): "not a user name",
        ("set", "--client-id", "", "--producer-byte-rate", "1"): "--default-client-id",
        ("set", "--user", "--producer-byte-rate", "1"): "expected one argument",
        ("delete", "--user", "u"): "or give --all",
        ("delete", "--user", "u", "--all", "--producer-byte-rate"): "leave out the quota",
        ("delete", "--producer-byte-rate"): "name the entity",
        ("delete", "--user", "u", "--producer-byte-rate", "1"): "unrecognized arguments",
        ("list", "--strict"): "--strict needs an entity",
        ("list", "--ip", "--client-id", "c"): "go alone",
    }
    for args, says in bad.items():
        run = kafscale("quotas", *args)
        assert run.code == 2, f"{args}: exit {run.code}, {run.err}"
        assert says in run.err.splitlines()[-1], f"{args}: {run.err}"


@pytest.mark.parametrize(
    ("properties", "says"),
    [
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n", "sasl.mechanism=PLAIN"),
        ("security.protocol=SASL_SSL\nsasl.mechanisms=OAUTHBEARER\n", "mechanism OAUTHBEARER"),
        ("security.protocol=SSL\nssl.keystore.location=k.p12\n", "ssl.keystore.location"),
        ("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n", "TLS settings"),
        ("security.protocol=TLS\n", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ("enable.ssl.certificate.verification=maybe\nsecurity.protocol=SSL\n", "true or false"),
    ],
)
def test_command_config_it_cannot_map_is_refused(
    tmp_path: Path, properties: str, says: str
) -> None:
    """What kafka-python has no equivalent for is one error line (exit 1) before anything
    is sent: the default bootstrap address is never contacted."""
    config = tmp_path / "client.properties"
    config.write_text(properties)
    run = kafscale("quotas", "list", "--command-config", str(config))
    assert run.code == 1, run
    line = one_error_line(run)
    assert says in line, line
    assert "cannot reach" not in line, line


def test_command_config_is_translated_for_kafka_python() -> None:
    """librdkafka's names (either spelling of the mechanism, any case) become kafka-python's;
    TLS checks what librdkafka would: the host name unless told not to."""
    assert client_config({"debug": "all"}) == {"security_protocol": "PLAINTEXT"}
    sasl = {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanisms": "scram-sha-256",
        "sasl.username": "u",
        "sasl.password": "p",
    }
    assert client_config(sasl) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }
    tls: dict[str, str] = {"security.protocol": "SSL"}
    context = client_config(tls)["ssl_context"]
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    context = client_config({**tls, "ssl.endpoint.identification.algorithm": "none"})["ssl_context"]
    assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    context = client_config({**tls, "enable.ssl.certificate.verification": "false"})["ssl_context"]
    assert not context.check_hostname and context.verify_mode == ssl.CERT_NONE


def test_unreachable_bootstrap_server_is_one_clear_line() -> None:
    address = f"{HOST}:{free_port()}"
    started = time.monotonic()
    run = kafscale("quotas", "list", "--bootstrap-server", address)
    assert run.code == 1, run
    line = one_error_line(run)
    assert f"cannot reach the Kafka bootstrap server {address}" in line, line
    assert "check --bootstrap-server" in line, line
    assert time.monotonic() - started < 20, "an unreachable address was not noticed at once"


# ---------------------------------------------------------------------------------------------
# set, list, delete


def test_user_quotas(qb: QuotaBroker) -> None:
    """set two quotas of a user -> list (JSON and table) -> change one, the other stays ->
    delete one -> delete --all."""
    user = unique("quota-user")
    run = quotas(qb, "set", "--user", user, "--producer-byte-rate", "1048576",
                 "--request-percentage", "12.5")  # fmt: skip
    assert run.out.splitlines() == [
        f"set producer_byte_rate=1048576 for user {user}",
        f"set request_percentage=12.5 for user {user}",
    ]
    expected = {"producer_byte_rate": 1048576, "request_percentage": 12.5}
    assert listed(qb, "--user", user, "--strict") == [
        {"entity": {"user": user}, "quotas": expected}
    ]
    assert table(quotas(qb, "list", "--user", user)) == [
        ["USER", "CLIENT-ID", "IP", "QUOTA", "VALUE"],
        [user, "-", "-", "producer_byte_rate", "1048576"],
        [user, "-", "-", "request_percentage", "12.5"],
    ]
    assert {"entity": {"user": user}, "quotas": expected} in listed(qb)  # every quota

    quotas(
        qb, "set", "--user", user, "--producer-byte-rate", "2048", "--consumer-byte-rate", "4096"
    )
    assert listed(qb, "--user", user)[0]["quotas"] == {
        "producer_byte_rate": 2048,
        "consumer_byte_rate": 4096,
        "request_percentage": 12.5,
    }
    run = quotas(qb, "delete", "--user", user, "--producer-byte-rate")
    assert run.out.strip() == f"deleted producer_byte_rate=2048 of user {user}"
    assert listed(qb, "--user", user)[0]["quotas"] == {
        "consumer_byte_rate": 4096,
        "request_percentage": 12.5,
    }
    run = quotas(qb, "delete", "--user", user, "--all")
    assert run.out.splitlines() == [
        f"deleted consumer_byte_rate=4096 of user {user}",
        f"deleted request_percentage=12.5 of user {user}",
    ]
    assert listed(qb, "--user", user) == []
    assert table(quotas(qb, "list", "--user", user)) == [
        ["USER", "CLIENT-ID", "IP", "QUOTA", "VALUE"]
    ]


def test_client_ids_users_with_client_ids_and_defaults(qb: QuotaBroker) -> None:
    """Entities of a client id, a user with a client id, and the defaults of both types;
    the filters of ``list``: a name, a default, any name (a type without a name), --strict."""
    user, client = unique("quota-u"), unique("quota app")  # a client id may hold blanks
    entities: list[tuple[list[str], dict[str, Any], str]] = [
        (["--client-id", client], {"client_id": client}, f"client-id {client}"),
        (["--user", user, "--client-id", client], {"user": user, "client_id": client},
         f"user {user} with client-id {client}"),
        (["--default-user", "--client-id", client], {"user": None, "client_id": client},
         f"the default user with client-id {client}"),
        (["--user", user, "--default-client-id"], {"user": user, "client_id": None},
         f"user {user} with the default client-id"),
        (["--default-user"], {"user": None}, "the default user"),
        (["--default-client-id"], {"client_id": None}, "the default client-id"),
    ]  # fmt: skip
    mine = [json.dumps(entity, sort_keys=True) for _, entity, _ in entities]

    def found(*args: str) -> dict[str, dict[str, Any]]:
        """The entities of this test the listing shows, with their quotas."""
        out = {json.dumps(r["entity"], sort_keys=True): r["quotas"] for r in listed(qb, *args)}
        return {k: v for k, v in out.items() if k in mine}

    def expect(*indexes: int) -> dict[str, dict[str, Any]]:
        return {mine[i]: {"consumer_byte_rate": 1000 * (i + 1)} for i in indexes}

    try:
        for rate, (flags, _, text) in enumerate(entities, start=1):
            run = quotas(qb, "set", *flags, "--consumer-byte-rate", str(1000 * rate))
            assert run.out.strip() == f"set consumer_byte_rate={1000 * rate} for {text}"
        assert found() == expect(0, 1, 2, 3, 4, 5)
        assert found("--client-id", client) == expect(0, 1, 2)
        assert found("--client-id", client, "--strict") == expect(0)
        assert found("--user", user) == expect(1, 3)
        assert found("--user", user, "--strict") == {}
        assert found("--default-user", "--strict") == expect(4)
        assert found("--default-user") == expect(2, 4)
        assert found("--user", "--client-id", client) == expect(1, 2)
        assert found("--client-id", "--strict") == expect(0, 5)
        assert found("--user", user, "--default-client-id") == expect(3)
        assert found("--ip") == {}

        # the table shows a default as <default> and a type the entity lacks as -; users
        # with client ids before client ids alone, a default before the names
        rows = table(quotas(qb, "list", "--client-id", client))
        assert rows[1:] == [
            ["<default>", client, "-", "consumer_byte_rate", "3000"],
            [user, client, "-", "consumer_byte_rate", "2000"],
            ["-", client, "-", "consumer_byte_rate", "1000"],
        ]
    finally:
        for flags, _, _ in entities:
            ok("quotas", "delete", *flags, "--all", "--if-exists", *qb.bootstrap())
    assert found() == {}


def test_ip_quotas(qb: QuotaBroker) -> None:
    """connection_creation_rate of an address (IPv4, IPv6) and of the default address."""
    v4, v6 = f"10.77.{time.time_ns() % 250}.9", "2001:db8::77"
    try:
        quotas(qb, "set", "--ip", v4, "--connection-creation-rate", "7")
        quotas(qb, "set", "--ip", v6, "--connection-creation-rate", "8")
        run = quotas(qb, "set", "--default-ip", "--connection-creation-rate", "20")
        assert run.out.strip() == "set connection_creation_rate=20 for the default ip"
        everyone = listed(qb, "--ip")
        for entity, rate in (({"ip": v4}, 7), ({"ip": v6}, 8), ({"ip": None}, 20)):
            assert {"entity": entity, "quotas": {"connection_creation_rate": rate}} in everyone
        assert listed(qb, "--ip", v6) == [
            {"entity": {"ip": v6}, "quotas": {"connection_creation_rate": 8}}
        ]
        assert listed(qb, "--default-ip") == [
            {"entity": {"ip": None}, "quotas": {"connection_creation_rate": 20}}
        ]
        assert ["-", "-", "<default>", "connection_creation_rate", "20"] in table(
            quotas(qb, "list", "--ip")
        )
        assert all("ip" not in r["entity"] for r in listed(qb, "--user"))
        run = quotas(qb, "delete", "--ip", v4, "--connection-creation-rate")
        assert run.out.strip() == f"deleted connection_creation_rate=7 of ip {v4}"
        assert listed(qb, "--ip", v4) == []
    finally:
        for flags in (["--ip", v4], ["--ip", v6], ["--default-ip"]):
            ok("quotas", "delete", *flags, "--all", "--if-exists", *qb.bootstrap())
    assert listed(qb, "--default-ip") == []


def test_refused_quotas_show_the_brokers_message(qb: QuotaBroker) -> None:
    """A quota the entity does not take, and one KafScale does not support: exit 1, one line
    with the broker's reason and where to look; nothing of the request is applied."""
    user, address = unique("quota-refused"), "10.78.0.1"
    cases = [
        (["--user", user, "--connection-creation-rate", "5"],
         f"connection_creation_rate cannot be set for user={user}"),
        (["--user", user, "--producer-byte-rate", "100", "--controller-mutation-rate", "5"],
         "controller_mutation_rate is not supported"),
        (["--ip", address, "--producer-byte-rate", "100"],
         f"producer_byte_rate cannot be set for ip={address}"),
        (["--default-ip", "--consumer-byte-rate", "100"],
         "consumer_byte_rate cannot be set for ip=<default>"),
    ]  # fmt: skip
    for args, says in cases:
        line = failed(qb, "set", *args)
        assert line.startswith("kafscale: error: setting the quotas of "), line
        assert says in line and "kafscale quotas set --help" in line, line
    assert listed(qb, "--user", user) == []
    assert listed(qb, "--ip", address) == []
    assert listed(qb, "--default-ip") == []


def test_deleting_what_is_not_there(qb: QuotaBroker) -> None:
    user = unique("quota-del")
    line = failed(qb, "delete", "--user", user, "--all")
    assert f"user {user} has no quotas; nothing deleted" in line, line
    assert "kafscale quotas list" in line, line
    line = failed(qb, "delete", "--user", user, "--producer-byte-rate")
    assert f"user {user} has no producer_byte_rate quota; nothing deleted" in line, line
    run = quotas(qb, "delete", "--user", user, "--all", "--if-exists")
    assert run.out == "" and "nothing deleted" in run.err, run

    quotas(qb, "set", "--user", user, "--consumer-byte-rate", "100")
    run = quotas(qb, "delete", "--user", user, "--producer-byte-rate", "--consumer-byte-rate")
    assert run.out.strip() == f"deleted consumer_byte_rate=100 of user {user}"
    assert f"user {user} has no producer_byte_rate quota" in run.err, run.err
    assert listed(qb, "--user", user) == []


# ---------------------------------------------------------------------------------------------
# logins and permissions


def properties(path: Path, **settings: str) -> list[str]:
    """--command-config with ``settings`` (``security_protocol`` -> security.protocol)."""
    path.write_text("".join(f"{k.replace('_', '.')}={v}\n" for k, v in settings.items()))
    return ["--command-config", str(path)]


def test_logins_and_cluster_permissions(qb: QuotaBroker, tmp_path: Path) -> None:
    """The command logs in as --command-config says: SASL PLAIN and SCRAM, and TLS with a
    client certificate. A principal may list with DescribeConfigs on the cluster and change
    with AlterConfigs; without them the broker's CLUSTER_AUTHORIZATION_FAILED is one line
    that says which permission to get."""
    user = unique("quota-login")
    as_admin = properties(tmp_path / "admin.properties", security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="PLAIN", sasl_username="admin",
                          sasl_password=USERS["admin"])  # fmt: skip
    ok("quotas", "set", "--user", user, "--producer-byte-rate", "100",
       *qb.bootstrap("SASL_PLAINTEXT"), *as_admin)  # fmt: skip
    over_tls = properties(tmp_path / "tls.properties", security_protocol="SSL",
                          ssl_ca_location=str(qb.pki.ca.cert),
                          ssl_certificate_location=str(qb.pki.client.cert),
                          ssl_key_location=str(qb.pki.client.key))  # fmt: skip
    run = ok("quotas", "list", "--user", user, "-o", "json", *qb.bootstrap("SSL"), *over_tls)
    assert json.loads(run.out) == [
        {"entity": {"user": user}, "quotas": {"producer_byte_rate": 100}}
    ]

    # a SCRAM user without permissions, then with DescribeConfigs, then AlterConfigs
    ok("users", "set", SCRAM_USER, "--mechanism", "SCRAM-SHA-512", *qb.bootstrap(),
       stdin=SCRAM_PASSWORD)  # fmt: skip
    as_dave = properties(tmp_path / "dave.properties", security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="SCRAM-SHA-512", sasl_username=SCRAM_USER,
                         sasl_password=SCRAM_PASSWORD)  # fmt: skip
    line = failed(qb, "list", *as_dave, listener="SASL_PLAINTEXT")
    assert "listing the quotas failed" in line and "DescribeConfigs on the cluster" in line, line
    principal = f"User:{SCRAM_USER}"
    acl = ["--allow", "--principal", principal, "--cluster", *qb.bootstrap()]
    ok("acls", "add", "--operation", "DescribeConfigs", *acl)
    run = ok("quotas", "list", "--user", user, *qb.bootstrap("SASL_PLAINTEXT"), *as_dave)
    assert [user, "-", "-", "producer_byte_rate", "100"] in table(run)
    line = failed(qb, "set", "--user", user, "--producer-byte-rate", "5", *as_dave,
                  listener="SASL_PLAINTEXT")  # fmt: skip
    assert "setting the quotas of" in line and "AlterConfigs on the cluster" in line, line
    line = failed(qb, "delete", "--user", user, "--all", *as_dave, listener="SASL_PLAINTEXT")
    assert "AlterConfigs on the cluster" in line, line
    ok("acls", "add", "--operation", "AlterConfigs", *acl)
    ok("quotas", "delete", "--user", user, "--all", *qb.bootstrap("SASL_PLAINTEXT"), *as_dave)
    assert listed(qb, "--user", user) == []
    ok("acls", "remove", "--principal", principal, "--cluster", *qb.bootstrap())

    # a refused login is the same line as in the other commands
    wrong = properties(tmp_path / "wrong.properties", security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="PLAIN", sasl_username="admin",
                       sasl_password="not-the-password")  # fmt: skip
    line = failed(qb, "list", *wrong, listener="SASL_PLAINTEXT")
    assert "refused the client's authentication" in line, line
