"""SASL listeners (Kafka's SASL_PLAINTEXT and SASL_SSL) on a real broker.

Every client the suite drives (confluent-kafka, kafka-python, aiokafka, kcat) produces and
consumes over SASL_SSL with SCRAM-SHA-512 and over SASL_PLAINTEXT with PLAIN, with the suite's
usual client settings plus only the security options it needs (``support.secure_clients``), as a
user of ``--sasl-users-file`` and as a user whose SCRAM credential was stored through
AlterUserScramCredentials (KIP-554). Credentials are listed (DescribeUserScramCredentials),
changed and deleted, and a deleted user's next login fails. A wrong password, an unknown user
and a mechanism that is not enabled are refused (after the failed-authentication delay, then the
connection is closed) while a good client carries on; a request other than ApiVersions,
SaslHandshake and SaslAuthenticate before authenticating closes the connection. With
``--connections-max-reauth-ms`` (KIP-368) SaslAuthenticate v1+ tells the session lifetime,
librdkafka re-authenticates on its own and keeps its connections, and a raw client that does not
re-authenticate has its connection closed at its next request after the expiry. The
``kafscale users`` command sets, lists and deletes a user.

The raw requests come from ``support.sasl_wire``; certificates from ``support.tls``. Nothing is
timed except where the protocol is about time (a session lifetime, the failed-authentication
delay), and there only with margins in the direction a slow machine cannot break.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import admin_wire as aw
from support import kafka_wire as kw
from support import sasl_wire as sw
from support.cli_runner import kafscale, ok, one_error_line
from support.clients import HANG_GUARD, unique
from support.procs import Broker, assert_no_panic, free_ports
from support.secure_clients import (
    ROUNDTRIPS,
    Security,
    assert_exact,
    confluent_roundtrip,
    group_roundtrip,
    records,
)
from support.tls import Pki, make_pki

HOST = "127.0.0.1"
FAILED_AUTH_DELAY_MS = 300  # the module broker's --connection-failed-authentication-delay-ms
REAUTH_MS = 2000  # --connections-max-reauth-ms of the re-authentication tests

PLAINTEXT = "PLAINTEXT"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"

# the users of --sasl-users-file
FILE_USER, FILE_PASSWORD = "file-user", "file-secret"
OTHER_FILE_USER, OTHER_FILE_PASSWORD = "other-file-user", "other-secret"
USERS_FILE = (
    "# users of the SASL tests\n"
    f"{FILE_USER}:{FILE_PASSWORD}\n"
    "# commented-user:commented-secret\n"
    "\n"
    f"{OTHER_FILE_USER}:{OTHER_FILE_PASSWORD}\n"
)

# the user the module stores through AlterUserScramCredentials (SCRAM-SHA-512 only)
SCRAM_USER, SCRAM_PASSWORD, SCRAM_ITERATIONS = "scram-user", "scram-secret", 8192

# a broker log line that says it closed a connection because its session ended (the raw expiry
# test checks that the broker writes one, so that its absence means something)
EXPIRED_SESSION = re.compile(r"(?i)closing connection.*(session|re-?auth)")


# ---------------------------------------------------------------------------------------------
# brokers and credentials


@dataclass(frozen=True)
class SaslBroker:
    """A broker with a PLAINTEXT listener (the fixture's port, which its readiness check
    watches, and where admin requests need no login) and SASL listeners on other ports."""

    broker: Broker
    pki: Pki | None
    users_file: Path
    ports: dict[str, int]  # listener name -> port

    def bootstrap(self, protocol: str = PLAINTEXT) -> str:
        return f"{HOST}:{self.ports[protocol]}"

    def creds(self, protocol: str, mechanism: str, username: str, password: str) -> Security:
        """A client's settings for logging in on the ``protocol`` listener (over SASL_SSL it
        verifies the broker's certificate against the PKI's CA)."""
        cafile = self.pki.ca.cert if protocol == SASL_SSL and self.pki is not None else None
        return Security(protocol, mechanism, username, password, cafile)


def write_atomically(path: Path, text: str) -> None:
    """A reader (the broker, reading the users file at every login) sees the old file or the
    new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def start_sasl_broker(
    factory,
    users_file: Path,
    pki: Pki | None = None,
    *,
    extra: list[str] | None = None,
) -> SaslBroker:
    """PLAINTEXT + SASL_PLAINTEXT, and SASL_SSL when ``pki`` is given."""
    protocols = [PLAINTEXT, SASL_PLAINTEXT] + ([SASL_SSL] if pki is not None else [])
    ports = dict(zip(protocols, free_ports(len(protocols)), strict=True))
    args = [
        "--listeners",
        ",".join(f"{name}://{HOST}:{port}" for name, port in ports.items()),
        "--sasl-users-file",
        str(users_file),
        *(pki.broker_args(trust_clients=False) if pki is not None else []),
        *(extra or []),
    ]
    broker = factory(args, port=ports[PLAINTEXT])
    return SaslBroker(broker, pki, users_file, ports)


def users_file_in(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "users.txt"
    write_atomically(path, USERS_FILE)
    return path


@pytest.fixture(scope="module")
def sasl_broker(module_broker_factory, tmp_path_factory) -> SaslBroker:
    root = tmp_path_factory.mktemp("sasl")
    return start_sasl_broker(
        module_broker_factory,
        users_file_in(root),
        make_pki(root / "pki"),
        extra=["--connection-failed-authentication-delay-ms", str(FAILED_AUTH_DELAY_MS)],
    )


@pytest.fixture(scope="module")
def scram_user(sasl_broker) -> tuple[str, str]:
    """SCRAM_USER with a SCRAM-SHA-512 credential, stored through the PLAINTEXT listener."""
    admin = admin_client(sasl_broker.bootstrap())
    upsert(admin, SCRAM_USER, SCRAM_PASSWORD, "SCRAM-SHA-512", SCRAM_ITERATIONS)
    return SCRAM_USER, SCRAM_PASSWORD


# ---------------------------------------------------------------------------------------------
# helpers


def admin_client(bootstrap: str, creds: Security | None = None):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **(creds.confluent() if creds else {})})


def mechanism_enum(name: str):
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def upsert(admin, user: str, password: str, mechanism: str, iterations: int = 8192) -> None:
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    info = ScramCredentialInfo(mechanism_enum(mechanism), iterations)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode())],
        request_timeout=HANG_GUARD,
    )
    assert futures[user].result(HANG_GUARD) is None


def delete_credential(admin, user: str, mechanism: str) -> None:
    from confluent_kafka.admin import UserScramCredentialDeletion

    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, mechanism_enum(mechanism))],
        request_timeout=HANG_GUARD,
    )
    assert futures[user].result(HANG_GUARD) is None


def described(admin, user: str) -> set[tuple[str, int]] | int:
    """{(mechanism, iterations)} of ``user``, or the error code of its description."""
    from confluent_kafka import KafkaException

    future = admin.describe_user_scram_credentials([user], request_timeout=HANG_GUARD)[user]
    try:
        description = future.result(HANG_GUARD)
    except KafkaException as exc:
        return exc.args[0].code()
    assert description.user == user
    return {
        (i.mechanism.name.replace("_", "-"), i.iterations)
        for i in description.scram_credential_infos
    }


def described_all(admin) -> dict[str, set[tuple[str, int]]]:
    found = admin.describe_user_scram_credentials(request_timeout=HANG_GUARD).result(HANG_GUARD)
    return {
        name: {(i.mechanism.name.replace("_", "-"), i.iterations) for i in d.scram_credential_infos}
        for name, d in found.items()
    }


RESOURCE_NOT_FOUND = 91


def is_auth_failure(error) -> bool:
    """librdkafka's error for a refused login (_AUTHENTICATION, 'SASL authentication error')."""
    from confluent_kafka import KafkaError

    text = f"{error.name()} {error.str()}".lower()
    return error.code() == KafkaError._AUTHENTICATION or "authentication" in text


def refused(client, errors: list) -> bool:
    """Whether a confluent client gets metadata (False) or reports a refused login (True),
    whichever comes first; anything else (a hang, another error) fails the test."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + HANG_GUARD
    while True:
        try:
            client.list_topics(timeout=0.5)
            return False
        except KafkaException:
            pass
        client.poll(0)  # delivers error_cb
        if any(is_auth_failure(e) for e in errors):
            return True
        assert time.monotonic() < deadline, f"neither metadata nor a refused login: {errors}"


def login_works(bootstrap: str, creds: Security) -> bool:
    """A fresh confluent client logs in and gets metadata (True) or is refused (False)."""
    from confluent_kafka import Producer

    errors: list = []
    client = Producer(
        {"bootstrap.servers": bootstrap, "error_cb": errors.append, **creds.confluent()}
    )
    try:
        return not refused(client, errors)
    finally:
        client.flush(0)
        del client


def wait_login(bootstrap: str, creds: Security, expected: bool) -> None:
    """Logins succeed (or fail) as expected, at once: the broker that stored a credential is
    the one that checks it here."""
    assert login_works(bootstrap, creds) is expected, (creds.username, creds.mechanism)


def closed_on(conn: kw.RawConnection, timeout: float = HANG_GUARD) -> str | None:
    """None once the peer closes the connection without sending anything more; otherwise
    what happened instead (an answer, or nothing at all within ``timeout``)."""
    conn.sock.settimeout(timeout)
    try:
        data = conn.sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return None
    except TimeoutError:
        return f"the connection is still open after {timeout}s"
    return None if not data else f"the broker answered {data[:64]!r}"


def request_closes(conn: kw.RawConnection, api_key: int, version: int, body: bytes) -> None:
    """Sending this request makes the broker close the connection, without an answer."""
    try:
        conn.send(api_key, version, body)
    except (BrokenPipeError, ConnectionResetError):
        return
    problem = closed_on(conn)
    assert problem is None, f"api {api_key} v{version}: {problem}"


def raw_sasl(bootstrap: str, timeout: float = HANG_GUARD) -> kw.RawConnection:
    return kw.RawConnection.to(bootstrap, timeout)


def log_lines(text: str, pattern: re.Pattern[str]) -> list[str]:
    return [line for line in text.splitlines() if pattern.search(line)]


# ---------------------------------------------------------------------------------------------
# round trips

# listener and mechanism of each round trip
SECURITY = {
    "SASL_SSL-SCRAM-SHA-512": (SASL_SSL, "SCRAM-SHA-512"),
    "SASL_PLAINTEXT-PLAIN": (SASL_PLAINTEXT, "PLAIN"),
}


@pytest.mark.parametrize("user", ["file", "stored"])
@pytest.mark.parametrize("security", list(SECURITY))
@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_client_roundtrip(sasl_broker, scram_user, client, security, user):
    """``file``: a user of --sasl-users-file; ``stored``: the user whose SCRAM-SHA-512
    credential was stored through AlterUserScramCredentials (with PLAIN, its password is
    checked against that credential)."""
    protocol, mechanism = SECURITY[security]
    username, password = (FILE_USER, FILE_PASSWORD) if user == "file" else scram_user
    creds = sasl_broker.creds(protocol, mechanism, username, password)
    topic = unique(f"sasl-{client}")
    kw.ensure_topic(sasl_broker.bootstrap(), topic)
    msgs = records(6, f"{client}-{user}")
    got = ROUNDTRIPS[client](sasl_broker.bootstrap(protocol), topic, msgs, creds)
    assert_exact(msgs, got)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_file_user_logs_in_with_every_mechanism(sasl_broker, mechanism):
    for protocol in (SASL_PLAINTEXT, SASL_SSL):
        creds = sasl_broker.creds(protocol, mechanism, OTHER_FILE_USER, OTHER_FILE_PASSWORD)
        assert login_works(sasl_broker.bootstrap(protocol), creds), protocol


def test_consumer_group_over_sasl(sasl_broker, scram_user):
    """A subscribing consumer finds its coordinator (advertised on the SASL_SSL listener, where
    it logs in again), joins, consumes and commits."""
    creds = sasl_broker.creds(SASL_SSL, "SCRAM-SHA-512", *scram_user)
    bootstrap = sasl_broker.bootstrap(SASL_SSL)
    topic = unique("sasl-group")
    kw.ensure_topic(sasl_broker.bootstrap(), topic)
    msgs = records(4, "group")
    got, committed = group_roundtrip(bootstrap, topic, msgs, creds, unique("sasl-group"))
    assert_exact(msgs, got)
    assert committed == [(0, len(msgs))]


def test_metadata_advertises_the_sasl_listener(sasl_broker):
    """A client that came in on a SASL listener is told that listener's endpoint (or every
    connection after the bootstrap one would go to a listener it cannot log in to)."""
    for protocol in (SASL_PLAINTEXT, SASL_SSL):
        creds = sasl_broker.creds(protocol, "PLAIN", FILE_USER, FILE_PASSWORD)
        admin = admin_client(sasl_broker.bootstrap(protocol), creds)
        brokers = admin.list_topics(timeout=HANG_GUARD).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [(HOST, sasl_broker.ports[protocol])]


# ---------------------------------------------------------------------------------------------
# the raw exchange


def test_raw_plain_login(sasl_broker):
    """ApiVersions lists the SASL APIs before a login; SaslHandshake v1 answers the enabled
    mechanisms; SaslAuthenticate v0, v1 and v2 log in (v1+: session lifetime 0, sessions do not
    expire by default); then the connection serves Metadata."""
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        versions = kw.api_versions(conn)
        assert versions.error_code == kw.NONE
        assert versions.apis[sw.SASL_HANDSHAKE][0] <= 1 <= versions.apis[sw.SASL_HANDSHAKE][1]
        assert versions.apis[sw.SASL_AUTHENTICATE] == (0, 2), versions.apis[sw.SASL_AUTHENTICATE]
        hs = sw.handshake(conn, sw.PLAIN)
        assert hs.error_code == sw.NONE, hs
        assert set(hs.mechanisms) == {sw.PLAIN, sw.SCRAM_SHA_256, sw.SCRAM_SHA_512}, hs
        auth = sw.authenticate(conn, sw.plain_token(FILE_USER, FILE_PASSWORD), version=1)
        assert (auth.error_code, auth.session_lifetime_ms) == (sw.NONE, 0), auth
        md = kw.metadata(conn, None)
        assert [(h, p) for _, h, p in md.brokers] == [(HOST, sasl_broker.ports[SASL_PLAINTEXT])]
    for version in (0, 2):
        with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
            auth = sw.login_plain(conn, FILE_USER, FILE_PASSWORD, version=version)
            assert auth.error_code == sw.NONE, (version, auth)
            assert auth.session_lifetime_ms == (None if version == 0 else 0), (version, auth)
            assert kw.api_versions(conn).error_code == kw.NONE
            kw.metadata(conn, None)


def test_raw_handshake_v0_then_bare_tokens(sasl_broker):
    """SaslHandshake v0 (KIP-43), listed in ApiVersions as Kafka lists it (0-1): the tokens
    that follow travel bare, behind a 4-byte length. aiokafka logs in this way on its bootstrap
    connection (it knows no versions yet), and librdkafka 2.0 (kcat's) logs in only when
    ApiVersions lists SaslHandshake v0 ("SASL Handshake not supported by broker" otherwise).
    PLAIN answers an empty token; a refused login closes the connection."""
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        lo, hi = kw.api_versions(conn).apis[sw.SASL_HANDSHAKE]
        assert (lo, hi) == (0, 1)
        hs = sw.handshake(conn, sw.PLAIN, version=0)
        assert hs.error_code == sw.NONE, hs
        # aiokafka's PLAIN token: the user name as authorization id too
        assert sw.raw_token(conn, sw.plain_token(FILE_USER, FILE_PASSWORD, FILE_USER)) == b""
        kw.metadata(conn, None)
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        assert sw.handshake(conn, sw.SCRAM_SHA_512, version=0).error_code == sw.NONE
        client = sw.ScramClient(sw.SCRAM_SHA_512, FILE_USER, FILE_PASSWORD)
        server_first = sw.raw_token(conn, client.first())
        assert client.verify(sw.raw_token(conn, client.final(server_first)))
        kw.metadata(conn, None)
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        assert sw.handshake(conn, sw.PLAIN, version=0).error_code == sw.NONE
        with pytest.raises((kw.ConnectionClosed, ConnectionResetError)):
            sw.raw_token(conn, sw.plain_token(FILE_USER, "not-the-password"))


def test_plain_authorization_id(sasl_broker):
    """PLAIN's authorization id: empty or the user's own name logs in (aiokafka and
    kafka-python send the name); another name is refused, as Kafka refuses it."""
    for authzid in ("", FILE_USER):
        with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
            assert sw.handshake(conn, sw.PLAIN).error_code == sw.NONE
            auth = sw.authenticate(conn, sw.plain_token(FILE_USER, FILE_PASSWORD, authzid))
            assert auth.error_code == sw.NONE, (authzid, auth)
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        assert sw.handshake(conn, sw.PLAIN).error_code == sw.NONE
        token = sw.plain_token(FILE_USER, FILE_PASSWORD, OTHER_FILE_USER)
        auth = sw.authenticate(conn, token)
        assert auth.error_code == sw.SASL_AUTHENTICATION_FAILED, auth


@pytest.mark.parametrize("mechanism", [sw.SCRAM_SHA_256, sw.SCRAM_SHA_512])
def test_raw_scram_login_proves_the_server(sasl_broker, scram_user, mechanism):
    """The SCRAM exchange by hand: the server's final message carries the server signature
    that only a holder of the credential can compute (the file user has both mechanisms; the
    stored user only SCRAM-SHA-512)."""
    users = [(FILE_USER, FILE_PASSWORD)]
    if mechanism == sw.SCRAM_SHA_512:
        users.append(scram_user)
    for username, password in users:
        with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
            outcome = sw.login_scram(conn, mechanism, username, password)
            assert outcome.first.error_code == sw.NONE, outcome
            assert outcome.final is not None and outcome.final.error_code == sw.NONE, outcome
            assert outcome.server_verified, outcome
            kw.metadata(conn, None)


# ---------------------------------------------------------------------------------------------
# refused logins

# case: (listener, mechanism, user, password); "stored" is the stored SCRAM user
BAD_LOGINS = {
    "plain-wrong-password": (SASL_PLAINTEXT, "PLAIN", FILE_USER, "not-the-password"),
    "plain-unknown-user": (SASL_PLAINTEXT, "PLAIN", "nobody", "whatever"),
    "plain-stored-user-wrong-password": (SASL_PLAINTEXT, "PLAIN", "stored", "not-it"),
    "scram-wrong-password": (SASL_SSL, "SCRAM-SHA-512", "stored", "not-the-password"),
    "scram-unknown-user": (SASL_SSL, "SCRAM-SHA-512", "nobody", "whatever"),
    "scram-file-user-wrong-password": (SASL_PLAINTEXT, "SCRAM-SHA-256", FILE_USER, "nope"),
    "scram-stored-user-other-mechanism": (SASL_SSL, "SCRAM-SHA-256", "stored", SCRAM_PASSWORD),
}


@pytest.mark.parametrize("case", list(BAD_LOGINS))
def test_bad_login_fails_cleanly(sasl_broker, scram_user, case):
    """The bad client reports an authentication error (and keeps failing), while a good
    client, working at the same time, is unaffected."""
    from confluent_kafka import Producer

    protocol, mechanism, username, password = BAD_LOGINS[case]
    if username == "stored":
        username = scram_user[0]
    bad_creds = sasl_broker.creds(protocol, mechanism, username, password)
    errors: list = []
    bad = Producer(
        {
            "bootstrap.servers": sasl_broker.bootstrap(protocol),
            "error_cb": errors.append,
            **bad_creds.confluent(),
        }
    )
    try:
        topic = unique(f"sasl-beside-{case}")
        kw.ensure_topic(sasl_broker.bootstrap(), topic)
        msgs = records(4, case)
        good = sasl_broker.creds(protocol, mechanism, FILE_USER, FILE_PASSWORD)
        assert_exact(msgs, confluent_roundtrip(sasl_broker.bootstrap(protocol), topic, msgs, good))

        assert refused(bad, errors)
    finally:
        bad.flush(0)
        del bad
    assert_no_panic(sasl_broker.broker)


@pytest.mark.parametrize(
    ("username", "password"),
    [(FILE_USER, "not-the-password"), ("nobody", "whatever")],
    ids=["wrong-password", "unknown-user"],
)
def test_raw_failed_plain_login_is_answered_then_closed(sasl_broker, username, password):
    """SASL_AUTHENTICATION_FAILED with a message, and the connection closed no sooner than
    --connection-failed-authentication-delay-ms after the request."""
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        assert sw.handshake(conn, sw.PLAIN).error_code == sw.NONE
        sent = time.monotonic()
        auth = sw.authenticate(conn, sw.plain_token(username, password), version=1)
        assert auth.error_code == sw.SASL_AUTHENTICATION_FAILED, auth
        assert auth.error_message, auth
        assert password not in auth.error_message, auth  # a log or an answer never shows it
        assert closed_on(conn) is None
        assert time.monotonic() - sent >= FAILED_AUTH_DELAY_MS / 1000 * 0.98
    assert FILE_PASSWORD not in sasl_broker.broker.log_text()
    assert_no_panic(sasl_broker.broker)


@pytest.mark.parametrize(
    ("username", "password"),
    [("stored", "not-the-password"), ("nobody", "whatever")],
    ids=["wrong-password", "unknown-user"],
)
def test_raw_failed_scram_login_is_answered_then_closed(
    sasl_broker, scram_user, username, password
):
    """SCRAM refuses in the first round (unknown user) or the final one (wrong proof) with
    SASL_AUTHENTICATION_FAILED; then the connection is closed after the delay."""
    if username == "stored":
        username = scram_user[0]
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        sent = time.monotonic()
        outcome = sw.login_scram(conn, sw.SCRAM_SHA_512, username, password)
        last = outcome.final or outcome.first
        assert last.error_code == sw.SASL_AUTHENTICATION_FAILED, outcome
        assert not outcome.server_verified
        assert closed_on(conn) is None
        assert time.monotonic() - sent >= FAILED_AUTH_DELAY_MS / 1000 * 0.98
    assert_no_panic(sasl_broker.broker)


@pytest.mark.parametrize("protocol", [SASL_PLAINTEXT, SASL_SSL])
def test_requests_before_authentication_close_the_connection(sasl_broker, protocol):
    """Only ApiVersions, SaslHandshake and SaslAuthenticate are served before a login: a
    Metadata request closes the connection, first thing, after ApiVersions, or between the
    handshake and the authentication."""
    import ssl

    def connect() -> kw.RawConnection:
        conn = raw_sasl(sasl_broker.bootstrap(protocol))
        if protocol == SASL_SSL:
            assert sasl_broker.pki is not None
            context = ssl.create_default_context(cafile=str(sasl_broker.pki.ca.cert))
            conn.sock = context.wrap_socket(conn.sock, server_hostname=HOST)
        return conn

    metadata = kw.metadata_body(4, None)
    with connect() as conn:
        request_closes(conn, kw.METADATA, 4, metadata)
    with connect() as conn:
        assert kw.api_versions(conn).error_code == kw.NONE
        request_closes(conn, kw.METADATA, 4, metadata)
    with connect() as conn:
        assert sw.handshake(conn, sw.PLAIN).error_code == sw.NONE
        request_closes(conn, kw.METADATA, 4, metadata)
    with connect() as conn:  # a Produce request (v3, no topics): the one that would write
        produce = kw.Writer().string(None).i16(1).i32(30_000).array_len(0).done()
        request_closes(conn, kw.PRODUCE, 3, produce)
    # the PLAINTEXT listener asks for no login
    with kw.RawConnection.to(sasl_broker.bootstrap()) as conn:
        kw.metadata(conn, None)
    assert_no_panic(sasl_broker.broker)


def test_handshake_with_an_unknown_mechanism(sasl_broker):
    """UNSUPPORTED_SASL_MECHANISM with the enabled mechanisms, then the connection closes."""
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        hs = sw.handshake(conn, "GSSAPI")
        assert hs.error_code == sw.UNSUPPORTED_SASL_MECHANISM, hs
        assert set(hs.mechanisms) == {sw.PLAIN, sw.SCRAM_SHA_256, sw.SCRAM_SHA_512}, hs
        assert closed_on(conn) is None


def test_mechanism_not_enabled(broker_factory, tmp_path):
    """--sasl-enabled-mechanisms SCRAM-SHA-512: PLAIN (and SCRAM-SHA-256) are refused with
    UNSUPPORTED_SASL_MECHANISM and the enabled list, a PLAIN client reports it, and a
    SCRAM-SHA-512 client of the same user works."""
    sb = start_sasl_broker(
        broker_factory,
        users_file_in(tmp_path / "users"),
        extra=["--sasl-enabled-mechanisms", "SCRAM-SHA-512"],
    )
    for mechanism in (sw.PLAIN, sw.SCRAM_SHA_256):
        with raw_sasl(sb.bootstrap(SASL_PLAINTEXT)) as conn:
            hs = sw.handshake(conn, mechanism)
            assert (hs.error_code, hs.mechanisms) == (
                sw.UNSUPPORTED_SASL_MECHANISM,
                [sw.SCRAM_SHA_512],
            ), (mechanism, hs)
            assert closed_on(conn) is None, mechanism

    assert not login_works(
        sb.bootstrap(SASL_PLAINTEXT), sb.creds(SASL_PLAINTEXT, "PLAIN", FILE_USER, FILE_PASSWORD)
    )
    creds = sb.creds(SASL_PLAINTEXT, "SCRAM-SHA-512", FILE_USER, FILE_PASSWORD)
    topic = unique("sasl-enabled")
    kw.ensure_topic(sb.bootstrap(), topic)
    msgs = records(3, "enabled")
    assert_exact(msgs, confluent_roundtrip(sb.bootstrap(SASL_PLAINTEXT), topic, msgs, creds))
    assert_no_panic(sb.broker)


# ---------------------------------------------------------------------------------------------
# users: the file and the stored credentials


def test_users_file_edits_apply_at_once(sasl_broker):
    """The file is read at every login: a user added logs in at once, a user removed (or a
    password changed) is refused at once; comments are not users."""
    path = sasl_broker.users_file
    bootstrap = sasl_broker.bootstrap(SASL_PLAINTEXT)
    late = sasl_broker.creds(SASL_PLAINTEXT, "PLAIN", "late-user", "late-secret")
    late_scram = sasl_broker.creds(SASL_PLAINTEXT, "SCRAM-SHA-256", "late-user", "late-secret")
    commented = sasl_broker.creds(SASL_PLAINTEXT, "PLAIN", "commented-user", "commented-secret")
    try:
        assert not login_works(bootstrap, late)
        write_atomically(path, USERS_FILE + "late-user:late-secret\n")
        assert login_works(bootstrap, late)
        assert login_works(bootstrap, late_scram)
        write_atomically(path, USERS_FILE + "late-user:changed-secret\n")
        assert not login_works(bootstrap, late)
        write_atomically(path, USERS_FILE)
        assert not login_works(bootstrap, late_scram)
        assert not login_works(bootstrap, commented)
    finally:
        write_atomically(path, USERS_FILE)
    assert login_works(
        bootstrap, sasl_broker.creds(SASL_PLAINTEXT, "PLAIN", FILE_USER, FILE_PASSWORD)
    )


def test_describe_lists_mechanisms_and_iterations(sasl_broker, scram_user):
    """Credentials stored by a client logged in over SASL_SSL (as the file user) are listed
    with their mechanisms and iterations, by name and in the list of every user; users of the
    file are not stored credentials and are not listed; each mechanism logs in."""
    file_admin = admin_client(
        sasl_broker.bootstrap(SASL_SSL),
        sasl_broker.creds(SASL_SSL, "SCRAM-SHA-512", FILE_USER, FILE_PASSWORD),
    )
    user = unique("described")
    upsert(file_admin, user, "first-secret", "SCRAM-SHA-256", 4096)
    upsert(file_admin, user, "first-secret", "SCRAM-SHA-512", 10000)
    expected = {("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 10000)}
    assert described(file_admin, user) == expected
    plain_admin = admin_client(sasl_broker.bootstrap())
    assert described(plain_admin, user) == expected
    everyone = described_all(plain_admin)
    assert everyone[user] == expected
    assert everyone[scram_user[0]] == {("SCRAM-SHA-512", SCRAM_ITERATIONS)}
    assert FILE_USER not in everyone and OTHER_FILE_USER not in everyone
    assert described(plain_admin, unique("nobody")) == RESOURCE_NOT_FOUND

    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        for protocol in (SASL_PLAINTEXT, SASL_SSL):
            creds = sasl_broker.creds(protocol, mechanism, user, "first-secret")
            wait_login(sasl_broker.bootstrap(protocol), creds, True)


def test_changed_and_deleted_credentials(sasl_broker):
    """A new password replaces the old one at once; deleting one mechanism leaves the other;
    deleting the last one makes the next login fail, with every mechanism."""
    admin = admin_client(sasl_broker.bootstrap())
    user = unique("changing")
    bootstrap = sasl_broker.bootstrap(SASL_PLAINTEXT)

    def creds(mechanism: str, password: str) -> Security:
        return sasl_broker.creds(SASL_PLAINTEXT, mechanism, user, password)

    upsert(admin, user, "old-secret", "SCRAM-SHA-512")
    upsert(admin, user, "old-secret", "SCRAM-SHA-256")
    wait_login(bootstrap, creds("SCRAM-SHA-512", "old-secret"), True)

    upsert(admin, user, "new-secret", "SCRAM-SHA-512", 9000)
    assert described(admin, user) == {("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 9000)}
    wait_login(bootstrap, creds("SCRAM-SHA-512", "new-secret"), True)
    wait_login(bootstrap, creds("SCRAM-SHA-512", "old-secret"), False)
    wait_login(bootstrap, creds("SCRAM-SHA-256", "old-secret"), True)

    delete_credential(admin, user, "SCRAM-SHA-512")
    assert described(admin, user) == {("SCRAM-SHA-256", 8192)}
    wait_login(bootstrap, creds("SCRAM-SHA-512", "new-secret"), False)
    wait_login(bootstrap, creds("SCRAM-SHA-256", "old-secret"), True)

    delete_credential(admin, user, "SCRAM-SHA-256")
    assert described(admin, user) == RESOURCE_NOT_FOUND
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        wait_login(bootstrap, creds(mechanism, "old-secret"), False)
    with raw_sasl(bootstrap) as conn:
        auth = sw.login_plain(conn, user, "old-secret")
        assert auth.error_code == sw.SASL_AUTHENTICATION_FAILED, auth

    # deleting what is not there: RESOURCE_NOT_FOUND
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import UserScramCredentialDeletion

    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, mechanism_enum("SCRAM-SHA-256"))],
        request_timeout=HANG_GUARD,
    )
    with pytest.raises(KafkaException) as failure:
        futures[user].result(HANG_GUARD)
    assert failure.value.args[0].code() == RESOURCE_NOT_FOUND, failure.value
    assert_no_panic(sasl_broker.broker)


def test_deleted_user_keeps_an_open_session(sasl_broker, scram_user):
    """Without --connections-max-reauth-ms a session lives as long as its connection: deleting
    the credential refuses new logins but leaves an open, authenticated connection serving."""
    admin = admin_client(sasl_broker.bootstrap())
    user = unique("leaving")
    upsert(admin, user, "secret", "SCRAM-SHA-512")
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        outcome = sw.login_scram(conn, sw.SCRAM_SHA_512, user, "secret")
        assert outcome.server_verified, outcome
        delete_credential(admin, user, "SCRAM-SHA-512")
        kw.metadata(conn, None)
    with raw_sasl(sasl_broker.bootstrap(SASL_PLAINTEXT)) as conn:
        outcome = sw.login_scram(conn, sw.SCRAM_SHA_512, user, "secret")
        assert (outcome.final or outcome.first).error_code == sw.SASL_AUTHENTICATION_FAILED


# ---------------------------------------------------------------------------------------------
# re-authentication (KIP-368)


def reauth_broker(factory, tmp_path: Path, reauth_ms: int = REAUTH_MS) -> SaslBroker:
    return start_sasl_broker(
        factory,
        users_file_in(tmp_path / "users"),
        extra=["--connections-max-reauth-ms", str(reauth_ms)],
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_librdkafka_reauthenticates_and_keeps_its_connections(broker_factory, tmp_path, mechanism):
    """A producer and a consumer (librdkafka re-authenticates by itself) run for more than
    three session lifetimes: every record arrives, in order, no error is reported, no
    connection is lost (librdkafka's statistics count every disconnect), and the broker closes
    no connection for an expired session."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    sb = reauth_broker(broker_factory, tmp_path)
    creds = sb.creds(SASL_PLAINTEXT, mechanism, FILE_USER, FILE_PASSWORD)
    bootstrap = sb.bootstrap(SASL_PLAINTEXT)
    topic = unique("sasl-reauth")
    kw.ensure_topic(sb.bootstrap(), topic)
    log_start = sb.broker.log_size()

    errors: list = []
    stats: dict[str, dict] = {}

    def keep_stats(role: str):
        def cb(text: str) -> None:
            stats[role] = json.loads(text)

        return cb

    common = {
        "bootstrap.servers": bootstrap,
        "error_cb": errors.append,
        "statistics.interval.ms": 500,
        **creds.confluent(),
    }
    producer = Producer({**common, "linger.ms": 0, "stats_cb": keep_stats("producer")})
    consumer = Consumer(
        {
            **common,
            "group.id": unique("reauth"),
            "enable.auto.commit": False,
            "stats_cb": keep_stats("consumer"),
        }
    )
    sent: list[bytes] = []
    got: list[tuple[int, bytes]] = []

    def take(msg) -> None:
        if msg is None:
            return
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.value()))

    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        run_s = 3 * REAUTH_MS / 1000 + 0.5
        start = time.monotonic()
        next_send = start
        while time.monotonic() - start < run_s:
            if time.monotonic() >= next_send:
                value = f"reauth-{len(sent)}".encode()
                producer.produce(topic, value=value, partition=0)
                sent.append(value)
                next_send += 0.25
            producer.poll(0)
            take(consumer.poll(0.05))
        assert producer.flush(HANG_GUARD) == 0
        deadline = time.monotonic() + HANG_GUARD
        while len(got) < len(sent):
            assert time.monotonic() < deadline, f"consumed {len(got)} of {len(sent)}"
            take(consumer.poll(0.2))
        # one more round of statistics, taken after the run
        stats.clear()
        deadline = time.monotonic() + HANG_GUARD
        while len(stats) < 2:
            assert time.monotonic() < deadline, "no statistics from librdkafka"
            producer.poll(0.1)
            take(consumer.poll(0.1))
        assert got == list(enumerate(sent)), got
        assert errors == [], errors
        for role, doc in stats.items():
            for name, b in doc["brokers"].items():
                assert b["disconnects"] == 0, f"{role} lost its connection to {name}: {b}"
    finally:
        consumer.close()
        producer.flush(0)
    assert log_lines(sb.broker.log_since(log_start), EXPIRED_SESSION) == []
    assert_no_panic(sb.broker)


def test_the_broker_describes_its_session_lifetime(broker_factory, tmp_path):
    """DescribeConfigs of the broker lists connections.max.reauth.ms and
    sasl.enabled.mechanisms under those names (librdkafka's KIP-368 test reads the first and
    skips without it): on the raw wire, asking for every key, and through confluent-kafka."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    sb = reauth_broker(broker_factory, tmp_path)
    wanted = {
        "connections.max.reauth.ms": str(REAUTH_MS),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    }
    with kw.RawConnection.to(sb.bootstrap()) as conn:
        (described,) = aw.describe_configs(conn, [(aw.BROKER_RESOURCE, "0", None)], version=3)
    assert described.error_code == aw.NONE, described
    assert {k: described.configs[k].value for k in wanted} == wanted, described.configs
    assert described.configs["connections.max.reauth.ms"].read_only

    admin = AdminClient({"bootstrap.servers": sb.bootstrap()})
    futures = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")])
    (entries,) = (f.result(HANG_GUARD) for f in futures.values())
    assert {k: entries[k].value for k in wanted} == wanted, entries


def session_lifetime_s(auth: sw.AuthenticateResponse, reauth_ms: int) -> float:
    """The lifetime a successful SaslAuthenticate v1+ told, checked to be in (0, reauth_ms]."""
    assert auth.error_code == sw.NONE, auth
    lifetime = auth.session_lifetime_ms
    assert lifetime is not None and 0 < lifetime <= reauth_ms, auth
    return lifetime / 1000


def test_raw_session_expires_without_reauthentication(broker_factory, tmp_path):
    """SaslAuthenticate v1 and v2 tell a lifetime of at most --connections-max-reauth-ms; the
    connection serves until then, and its first request after it closes the connection. A
    client that re-authenticates late (its SaslHandshake comes after the expiry, as a client
    busy with a long fetch may) is let in again, as Kafka lets it."""
    sb = reauth_broker(broker_factory, tmp_path)
    bootstrap = sb.bootstrap(SASL_PLAINTEXT)
    log_start = sb.broker.log_size()
    conns = {v: raw_sasl(bootstrap) for v in (1, 2)}
    late = raw_sasl(bootstrap)
    try:
        expiry: dict[int, float] = {}
        for version, conn in conns.items():
            auth = sw.login_plain(conn, FILE_USER, FILE_PASSWORD, version=version)
            expiry[version] = time.monotonic() + session_lifetime_s(auth, REAUTH_MS)
            kw.metadata(conn, None)
        session_lifetime_s(sw.login_plain(late, FILE_USER, FILE_PASSWORD), REAUTH_MS)
        time.sleep(max(0.0, max(expiry.values()) + 0.5 - time.monotonic()))
        for version, conn in conns.items():
            try:
                request_closes(conn, kw.METADATA, 4, kw.metadata_body(4, None))
            except AssertionError as exc:
                raise AssertionError(f"SaslAuthenticate v{version}: {exc}") from None
        session_lifetime_s(sw.login_plain(late, FILE_USER, FILE_PASSWORD), REAUTH_MS)
        kw.metadata(late, None)
    finally:
        for conn in [*conns.values(), late]:
            conn.close()
    # the broker says why it closed them (what the librdkafka test looks for and must not find)
    deadline = time.monotonic() + HANG_GUARD
    while len(log_lines(sb.broker.log_since(log_start), EXPIRED_SESSION)) < len(conns):
        assert time.monotonic() < deadline, sb.broker.log_since(log_start)
        time.sleep(0.05)
    assert_no_panic(sb.broker)


def test_raw_reauthentication_extends_the_session(broker_factory, tmp_path):
    """KIP-368 on one connection: SaslHandshake and SaslAuthenticate again before the expiry
    start a new session; the connection serves past the first expiry and is closed at its
    first request after the second."""
    reauth_ms = 4000
    sb = reauth_broker(broker_factory, tmp_path, reauth_ms)
    with raw_sasl(sb.bootstrap(SASL_PLAINTEXT)) as conn:
        first = session_lifetime_s(sw.login_plain(conn, FILE_USER, FILE_PASSWORD), reauth_ms)
        first_expiry = time.monotonic() + first  # the latest it can be
        time.sleep(reauth_ms / 2000)
        renewed_at = time.monotonic()
        second = session_lifetime_s(sw.login_plain(conn, FILE_USER, FILE_PASSWORD), reauth_ms)
        second_earliest = renewed_at + second
        second_latest = time.monotonic() + second

        time.sleep(max(0.0, first_expiry + 0.3 - time.monotonic()))
        if time.monotonic() < second_earliest - 0.1:  # else: too slow a machine to tell
            kw.metadata(conn, None)
        time.sleep(max(0.0, second_latest + 0.5 - time.monotonic()))
        request_closes(conn, kw.METADATA, 4, kw.metadata_body(4, None))
    assert_no_panic(sb.broker)


# ---------------------------------------------------------------------------------------------
# the kafscale users command


def logged_in(bootstrap: str, creds: Security, config: Path) -> list[str]:
    """The command's arguments to reach ``bootstrap`` logged in with ``creds``, written to
    ``config`` for its --command-config."""
    config.write_text(creds.properties())
    return ["--bootstrap-server", bootstrap, "--command-config", str(config)]


def test_users_command(sasl_broker, tmp_path):
    """Set a user through the SASL_SSL listener as the file user (password piped), list it,
    log in with it and produce and consume, add a second mechanism through the PLAINTEXT
    listener, delete it all; mistakes are one error line and exit code 1."""
    file_user = sasl_broker.creds(SASL_SSL, "SCRAM-SHA-512", FILE_USER, FILE_PASSWORD)
    over_sasl = logged_in(
        sasl_broker.bootstrap(SASL_SSL), file_user, tmp_path / "client.properties"
    )
    over_plain = ["--bootstrap-server", sasl_broker.bootstrap()]
    user, password = unique("cli-user"), "cli: secret with spaces"

    run = ok(
        "users", "set", user, "--mechanism", "SCRAM-SHA-256", *over_sasl, stdin=password + "\n"
    )
    assert user in run.out and "SCRAM-SHA-256" in run.out
    assert password not in run.out + run.err

    listed = ok("users", "list", "-o", "json", *over_sasl).json()
    assert {"user": user, "mechanism": "SCRAM-SHA-256", "iterations": 8192} in listed
    assert all(set(row) == {"user", "mechanism", "iterations"} for row in listed)
    assert FILE_USER not in {row["user"] for row in listed}
    table = ok("users", "list", *over_plain).out.splitlines()
    assert table[0].split() == ["USER", "MECHANISM", "ITERATIONS"]
    assert [user, "SCRAM-SHA-256", "8192"] in [line.split() for line in table[1:]]

    # the new user logs in and works
    creds = sasl_broker.creds(SASL_PLAINTEXT, "SCRAM-SHA-256", user, password)
    topic = unique("sasl-cli")
    kw.ensure_topic(sasl_broker.bootstrap(), topic)
    msgs = records(3, "cli")
    assert_exact(
        msgs, confluent_roundtrip(sasl_broker.bootstrap(SASL_PLAINTEXT), topic, msgs, creds)
    )
    # ... and runs the command itself
    as_user = sasl_broker.creds(SASL_SSL, "SCRAM-SHA-256", user, password)
    mine = logged_in(sasl_broker.bootstrap(SASL_SSL), as_user, tmp_path / "user.properties")
    assert {"user": user, "mechanism": "SCRAM-SHA-256", "iterations": 8192} in ok(
        "users", "list", "-o", "json", *mine
    ).json()

    ok(
        "users",
        "set",
        user,
        "--mechanism",
        "SCRAM-SHA-512",
        "--iterations",
        "4096",
        *over_plain,
        stdin=password,
    )
    rows = [r for r in ok("users", "list", "-o", "json", *over_plain).json() if r["user"] == user]
    assert rows == [
        {"user": user, "mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"user": user, "mechanism": "SCRAM-SHA-512", "iterations": 4096},
    ]
    wait_login(
        sasl_broker.bootstrap(SASL_SSL),
        sasl_broker.creds(SASL_SSL, "SCRAM-SHA-512", user, password),
        True,
    )

    # nothing piped: nothing changes
    failed = kafscale("users", "set", user, "--mechanism", "SCRAM-SHA-512", *over_plain, stdin="")
    assert failed.code == 1 and "no password" in one_error_line(failed)

    # delete one mechanism, then (by default) every one left
    run = ok("users", "delete", user, "--mechanism", "SCRAM-SHA-512", *over_sasl)
    assert "SCRAM-SHA-512" in run.out and "SCRAM-SHA-256" not in run.out
    run = ok("users", "delete", user, *over_sasl)
    assert "SCRAM-SHA-256" in run.out
    assert user not in {r["user"] for r in ok("users", "list", "-o", "json", *over_plain).json()}
    wait_login(sasl_broker.bootstrap(SASL_PLAINTEXT), creds, False)

    again = kafscale("users", "delete", user, *over_plain)
    assert again.code == 1
    assert "no SCRAM credentials" in one_error_line(again) and "users list" in again.err
    again = kafscale("users", "delete", user, "--mechanism", "SCRAM-SHA-256", *over_plain)
    assert again.code == 1 and "no SCRAM-SHA-256 credential" in one_error_line(again)
    assert_no_panic(sasl_broker.broker)


def test_users_command_with_a_refused_login(sasl_broker, tmp_path):
    """A wrong password in --command-config is one error line that says the login was
    refused (not that the broker cannot be reached), well before --timeout."""
    bad = sasl_broker.creds(SASL_PLAINTEXT, "PLAIN", FILE_USER, "not-the-password")
    args = logged_in(sasl_broker.bootstrap(SASL_PLAINTEXT), bad, tmp_path / "client.properties")
    started = time.monotonic()
    run = kafscale("users", "list", *args, "--timeout", "60")
    assert run.code == 1
    line = one_error_line(run)
    assert "refused the client's authentication" in line and "sasl.password" in line, line
    assert time.monotonic() - started < 50, "the refused login was not noticed"
    assert "not-the-password" not in run.err
