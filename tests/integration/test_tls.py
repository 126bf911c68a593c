"""TLS listeners (Kafka's SSL security protocol) on a real broker.

Every client the suite drives (confluent-kafka, kafka-python, aiokafka, kcat) produces and
consumes over an SSL listener with the suite's usual client settings plus only the TLS options
it needs (``support.secure_clients``; hostname verification stays on: the server certificate
names 127.0.0.1). Client certificates
(``--ssl-client-auth required``) admit a certificate from the trusted CA and turn away a
client without one, with one from an unknown CA and with an expired one, while the good
client carries on. A plaintext client on the SSL port and a TLS client on the PLAINTEXT port
fail without hurting the broker. Metadata, FindCoordinator and DescribeCluster advertise the
listener the client came in on. A renewed certificate is served to new connections without a
restart. Certificates come from ``support.tls`` (a throwaway CA per module or test).

Nothing is timed: waits poll with generous deadlines that only stop a hung test.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import group_wire as gw
from support import kafka_wire as kw
from support import segment_format as sf
from support.clients import HANG_GUARD, unique
from support.procs import Broker, assert_no_panic, free_port, free_ports
from support.secure_clients import (
    ROUNDTRIPS,
    assert_exact,
    confluent_roundtrip,
    group_roundtrip,
    records,
)
from support.tls import Pair, Pki, make_pki, peer_certificate, renew_server_cert, serial_of

HOST = "127.0.0.1"
FAIL_TIMEOUT = 5.0  # how long a client that must fail is given to fail (seconds)
RELOAD_DEADLINE = 15.0  # liveness guard for a renewed certificate to be served


@dataclass(frozen=True)
class TlsBroker:
    """A broker with a PLAINTEXT listener (the fixture's port, which its readiness check
    watches) and an SSL listener on another port."""

    broker: Broker
    pki: Pki
    plain_port: int
    ssl_port: int

    @property
    def plain(self) -> str:
        return f"{HOST}:{self.plain_port}"

    @property
    def ssl(self) -> str:
        return f"{HOST}:{self.ssl_port}"


def start_tls_broker(
    factory,
    pki: Pki,
    *,
    client_auth: str | None = None,
    reload_interval_ms: int | None = None,
    trust_clients: bool = True,
    extra: list[str] | None = None,
) -> TlsBroker:
    plain, tls = free_ports(2)
    args = [
        "--listeners",
        f"PLAINTEXT://{HOST}:{plain},SSL://{HOST}:{tls}",
        *pki.broker_args(client_auth, reload_interval_ms, trust_clients),
        *(extra or []),
    ]
    return TlsBroker(factory(args, port=plain), pki, plain, tls)


@pytest.fixture(scope="module")
def module_pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(module_broker_factory, module_pki) -> TlsBroker:
    """Server authentication only (``--ssl-client-auth`` default, no ``--ssl-cafile``)."""
    return start_tls_broker(module_broker_factory, module_pki, trust_clients=False)


@pytest.fixture(scope="module")
def mtls_broker(module_broker_factory, module_pki) -> TlsBroker:
    """Client certificates required, signed by the module's CA."""
    return start_tls_broker(module_broker_factory, module_pki, client_auth="required")


# ---------------------------------------------------------------------------------------------
# helpers


def tls_connection(
    bootstrap: str, cafile: Path, client: Pair | None = None, timeout: float = 30.0
) -> kw.RawConnection:
    """A RawConnection whose socket is TLS (hostname and chain verified against ``cafile``;
    ``client``: present this certificate)."""
    context = ssl.create_default_context(cafile=str(cafile))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    conn = kw.RawConnection.to(bootstrap, timeout)
    try:
        conn.sock = context.wrap_socket(conn.sock, server_hostname=bootstrap.rsplit(":", 1)[0])
    except BaseException:
        conn.close()
        raise
    return conn


def ensure_topic_over_tls(
    bootstrap: str, topic: str, cafile: Path, client: Pair | None = None
) -> None:
    """Auto-create ``topic`` (Metadata over TLS) and wait until its partitions have leaders."""
    deadline = time.monotonic() + HANG_GUARD
    last = None
    with tls_connection(bootstrap, cafile, client) as conn:
        while time.monotonic() < deadline:
            md = kw.metadata(conn, [topic], version=4, allow_auto_topic_creation=True)
            last = md.topics.get(topic)
            if (
                last is not None
                and last.error_code == kw.NONE
                and last.partitions
                and all(p.error_code == kw.NONE and p.leader >= 0 for p in last.partitions)
            ):
                return
            time.sleep(0.1)
    raise AssertionError(f"topic {topic} never became ready over TLS: {last}")


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_client_roundtrip_over_ssl(tls_broker, client):
    topic = unique(f"tls-{client}")
    ensure_topic_over_tls(tls_broker.ssl, topic, tls_broker.pki.ca.cert)
    msgs = records(7, client)
    assert_exact(msgs, ROUNDTRIPS[client](tls_broker.ssl, topic, msgs, tls_broker.pki.security()))


def test_consumer_group_over_ssl(tls_broker):
    """A subscribing consumer finds its coordinator, joins, consumes and commits over SSL
    (the coordinator it is sent to must be the SSL endpoint, or its TLS connection fails)."""
    topic = unique("tls-group")
    msgs = records(4, "group")
    security = tls_broker.pki.security()
    got, committed = group_roundtrip(tls_broker.ssl, topic, msgs, security, unique("tls-group"))
    assert_exact(msgs, got)
    assert committed == [(0, len(msgs))]


def test_ssl_only_broker(broker_factory, tmp_path):
    """``--listeners`` with only an SSL listener (on the port the fixture also passes as
    --broker-addr): it is the only one bound, and clients work over it."""
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    broker = broker_factory(
        ["--listeners", f"SSL://{HOST}:{port}", *pki.broker_args(trust_clients=False)],
        port=port,
    )
    topic = unique("tls-only")
    ensure_topic_over_tls(broker.bootstrap, topic, pki.ca.cert)
    msgs = records(3, "only")
    assert_exact(msgs, confluent_roundtrip(broker.bootstrap, topic, msgs, pki.security()))
    with tls_connection(broker.bootstrap, pki.ca.cert) as conn:
        md = kw.metadata(conn, None)
    assert [(h, p) for _, h, p in md.brokers] == [(HOST, port)]
    assert_no_panic(broker)


# ---------------------------------------------------------------------------------------------
# advertised endpoints


def test_metadata_advertises_the_listener_the_client_came_in_on(tls_broker):
    from confluent_kafka.admin import AdminClient

    pki = tls_broker.pki
    topic = unique("tls-meta")
    ensure_topic_over_tls(tls_broker.ssl, topic, pki.ca.cert)
    group = unique("tls-meta-group")

    # the wire: Metadata and FindCoordinator on each listener
    with tls_connection(tls_broker.ssl, pki.ca.cert) as conn:
        md = kw.metadata(conn, [topic])
        coordinator = gw.find_coordinator(conn, group)
    assert [(h, p) for _, h, p in md.brokers] == [(HOST, tls_broker.ssl_port)]
    assert (coordinator.error_code, coordinator.host, coordinator.port) == (
        kw.NONE,
        HOST,
        tls_broker.ssl_port,
    ), coordinator
    with kw.RawConnection.to(tls_broker.plain) as conn:
        md = kw.metadata(conn, [topic])
        coordinator = gw.find_coordinator(conn, group)
    assert [(h, p) for _, h, p in md.brokers] == [(HOST, tls_broker.plain_port)]
    assert (coordinator.error_code, coordinator.host, coordinator.port) == (
        kw.NONE,
        HOST,
        tls_broker.plain_port,
    ), coordinator

    # a real client: Metadata and DescribeCluster
    for bootstrap, conf, port in [
        (tls_broker.ssl, pki.security().confluent(), tls_broker.ssl_port),
        (tls_broker.plain, {}, tls_broker.plain_port),
    ]:
        admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
        brokers = admin.list_topics(timeout=HANG_GUARD).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [(HOST, port)], bootstrap
        cluster = admin.describe_cluster(request_timeout=HANG_GUARD).result(HANG_GUARD)
        assert [(n.host, n.port) for n in cluster.nodes] == [(HOST, port)], bootstrap


@pytest.mark.parametrize("listener", ["plaintext", "ssl"])
def test_a_large_request_arriving_in_pieces_is_answered(tls_broker, listener):
    """While most of a large request is still on its way the broker asks the kernel not to
    wake it for every piece (SO_RCVLOWAT); the request must still be read to its last byte
    and answered when the client's writes arrive slowly and in small pieces."""
    pki = tls_broker.pki
    topic = unique(f"pieces-{listener}")
    ensure_topic_over_tls(tls_broker.ssl, topic, pki.ca.cert)
    records = [(b"k%d" % i, bytes([i % 251]) * 1024, []) for i in range(700)]
    batch = sf.build_record_batch(records)
    header = kw.request_header(kw.PRODUCE, 3, 7, "pieces", False)
    request = kw.frame(header + kw.produce_body(topic, 0, batch))
    assert len(request) > 700 * 1024
    if listener == "ssl":
        conn = tls_connection(tls_broker.ssl, pki.ca.cert)
    else:
        conn = kw.RawConnection.to(tls_broker.plain)
    with conn:
        for start in range(0, len(request), 8 * 1024):
            conn.send_raw(request[start : start + 8 * 1024])
            time.sleep(0.002)
        cid, r = conn.recv_response()
        first = kw.parse_produce_v3(r)[(topic, 0)]
        assert (cid, first.error_code) == (7, kw.NONE), first
        # Stored whole: the next batch lands right after its 700 records.
        after = kw.produce(conn, topic, 0, sf.build_record_batch([(None, b"after", [])]))
    assert (after.error_code, after.base_offset) == (kw.NONE, first.base_offset + 700), after


def test_advertised_listeners(broker_factory, tmp_path):
    """``--advertised-listeners`` replaces the endpoint each listener's clients are told."""
    pki = make_pki(tmp_path / "pki")
    plain, tls = free_ports(2)
    adv_plain, adv_tls = free_ports(2)
    broker = broker_factory(
        [
            "--listeners",
            f"PLAINTEXT://{HOST}:{plain},SSL://{HOST}:{tls}",
            "--advertised-listeners",
            f"PLAINTEXT://localhost:{adv_plain},SSL://localhost:{adv_tls}",
            *pki.broker_args(trust_clients=False),
        ],
        port=plain,
    )
    with tls_connection(f"{HOST}:{tls}", pki.ca.cert) as conn:
        md = kw.metadata(conn, None)
    assert [(h, p) for _, h, p in md.brokers] == [("localhost", adv_tls)]
    with kw.RawConnection.to(broker.bootstrap) as conn:
        md = kw.metadata(conn, None)
    assert [(h, p) for _, h, p in md.brokers] == [("localhost", adv_plain)]


# ---------------------------------------------------------------------------------------------
# the wrong protocol on a port


def test_plaintext_client_on_the_ssl_port_fails_cleanly(tls_broker):
    from confluent_kafka import KafkaException, Producer

    # a raw Kafka frame where a TLS ClientHello belongs: the broker closes the connection
    # (a timeout here would mean it kept a useless connection open)
    closed = (kw.ConnectionClosed, ConnectionResetError, BrokenPipeError)
    with pytest.raises(closed), kw.RawConnection.to(tls_broker.ssl, timeout=HANG_GUARD) as conn:
        kw.api_versions(conn)

    # a real PLAINTEXT client never gets metadata
    plain_client = Producer({"bootstrap.servers": tls_broker.ssl})
    try:
        with pytest.raises(KafkaException):
            plain_client.list_topics(timeout=FAIL_TIMEOUT)

        # ... while an SSL client on the same port works
        topic = unique("tls-after-plain")
        ensure_topic_over_tls(tls_broker.ssl, topic, tls_broker.pki.ca.cert)
        msgs = records(3, "after-plain")
        security = tls_broker.pki.security()
        assert_exact(msgs, confluent_roundtrip(tls_broker.ssl, topic, msgs, security))
    finally:
        plain_client.flush(0)
        del plain_client
    assert_no_panic(tls_broker.broker)


def test_tls_client_on_the_plaintext_port_fails_cleanly(tls_broker):
    """A ClientHello read as a Kafka frame has an absurd size: the connection is closed (the
    handshake fails; a timeout would mean the broker waited for ~350 MB)."""
    with pytest.raises(OSError) as failure:
        peer_certificate(HOST, tls_broker.plain_port, tls_broker.pki.ca.cert, timeout=HANG_GUARD)
    assert not isinstance(failure.value, TimeoutError), failure.value
    with kw.RawConnection.to(tls_broker.plain) as conn:
        assert kw.api_versions(conn).error_code == kw.NONE
    assert_no_panic(tls_broker.broker)


# ---------------------------------------------------------------------------------------------
# client certificates


def test_client_certificate_admitted(mtls_broker):
    pki = mtls_broker.pki
    topic = unique("mtls-good")
    ensure_topic_over_tls(mtls_broker.ssl, topic, pki.ca.cert, pki.client)
    msgs = records(5, "mtls")
    assert_exact(msgs, confluent_roundtrip(mtls_broker.ssl, topic, msgs, pki.security(pki.client)))
    # the PLAINTEXT listener asks for no certificate
    with kw.RawConnection.to(mtls_broker.plain) as conn:
        assert kw.api_versions(conn).error_code == kw.NONE


# case: (the Pki attribute with the client's certificate, the TLS alert the broker must send)
BAD_CLIENTS = {
    "no-certificate": (None, "CERTIFICATE_REQUIRED"),
    "unknown-ca": ("unknown_client", "UNKNOWN_CA"),
    "expired": ("expired_client", "CERTIFICATE_EXPIRED"),
}


@pytest.mark.parametrize("case", list(BAD_CLIENTS))
def test_client_certificate_rejected(mtls_broker, case):
    """The bad client is turned away at the TLS level, with the alert that says why, and its
    client reports an SSL error, while a client with a good certificate, working at the same
    time, is unaffected.

    librdkafka (confluent-kafka) does not present a certificate whose issuer is not among the
    CAs the broker asks for, so its unknown-CA client reaches the broker without one; Python's
    ``ssl`` presents it regardless, which is what checks the unknown issuer itself."""
    from confluent_kafka import KafkaException, Producer

    pki = mtls_broker.pki
    attr, alert = BAD_CLIENTS[case]
    bad_pair: Pair | None = None if attr is None else getattr(pki, attr)

    # Python's ssl: the handshake, then the broker's verdict (under TLS 1.3 the client's
    # certificate is judged after the client's side of the handshake is done): an alert,
    # never an open connection
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if bad_pair is not None:
        context.load_cert_chain(str(bad_pair.cert), str(bad_pair.key))
    with pytest.raises(OSError) as failure:
        conn = kw.RawConnection.to(mtls_broker.ssl, timeout=2 * FAIL_TIMEOUT)
        try:
            conn.sock = context.wrap_socket(conn.sock, server_hostname=HOST)
            conn.sock.recv(1)  # a rejected client reads an alert; an admitted one would wait
        finally:
            conn.close()
    assert not isinstance(failure.value, TimeoutError), "the broker admitted the client"
    assert isinstance(failure.value, ssl.SSLError), repr(failure.value)
    assert alert in (failure.value.reason or ""), repr(failure.value)

    # confluent-kafka: keeps failing in the background from creation on
    errors = []
    bad = Producer(
        {
            "bootstrap.servers": mtls_broker.ssl,
            "error_cb": errors.append,
            **pki.security(bad_pair).confluent(),
        }
    )
    try:
        # meanwhile, the good client
        topic = unique(f"mtls-beside-{case}")
        ensure_topic_over_tls(mtls_broker.ssl, topic, pki.ca.cert, pki.client)
        msgs = records(4, case)
        good = pki.security(pki.client)
        assert_exact(msgs, confluent_roundtrip(mtls_broker.ssl, topic, msgs, good))

        with pytest.raises(KafkaException):
            bad.list_topics(timeout=FAIL_TIMEOUT)
        deadline = time.monotonic() + HANG_GUARD
        while not any(_is_tls_failure(e) for e in errors):
            assert time.monotonic() < deadline, f"no SSL error reported: {errors}"
            bad.poll(0.2)
    finally:
        bad.flush(0)
        del bad
    assert_no_panic(mtls_broker.broker)


def _is_tls_failure(error) -> bool:
    text = f"{error.name()} {error.str()}".lower()
    return any(word in text for word in ("ssl", "handshake", "certificate", "alert"))


# ---------------------------------------------------------------------------------------------
# certificate reload


def served_serial(tb: TlsBroker) -> int:
    return peer_certificate(HOST, tb.ssl_port, tb.pki.ca.cert).serial_number


def wait_for_serial(tb: TlsBroker, wanted: int, allowed: set[int]) -> None:
    """Poll new connections until they get certificate ``wanted``; every connection on the
    way must succeed with one of ``allowed`` (a reload never breaks a handshake)."""
    deadline = time.monotonic() + RELOAD_DEADLINE
    while True:
        serial = served_serial(tb)
        assert serial in allowed | {wanted}, f"served an unexpected certificate {serial}"
        if serial == wanted:
            return
        assert time.monotonic() < deadline, f"still serving {serial}, not {wanted}"
        time.sleep(0.1)


def test_renewed_certificate_is_served_without_restart(broker_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    tb = start_tls_broker(broker_factory, pki, reload_interval_ms=200)
    first = serial_of(pki.server.cert)
    assert served_serial(tb) == first
    before = tls_connection(tb.ssl, pki.ca.cert)
    try:
        assert kw.api_versions(before).error_code == kw.NONE

        second = renew_server_cert(pki, "server-2")
        assert second != first
        wait_for_serial(tb, second, {first})
        cert = peer_certificate(HOST, tb.ssl_port, pki.ca.cert)
        assert cert.subject.rfc4514_string() == "CN=server-2,O=kafscale-tests"

        # the connection made before the renewal carries on
        assert kw.api_versions(before).error_code == kw.NONE
    finally:
        before.close()
    # a real client verifies the new certificate
    topic = unique("tls-renewed")
    ensure_topic_over_tls(tb.ssl, topic, pki.ca.cert)
    msgs = records(3, "renewed")
    assert_exact(msgs, confluent_roundtrip(tb.ssl, topic, msgs, pki.security()))
    assert tb.broker.starts == 1
    assert_no_panic(tb.broker)


def test_unloadable_certificate_keeps_the_previous_one(broker_factory, tmp_path):
    """A certificate file that does not load is not taken in: new connections keep the one in
    use, and a good file written afterwards is taken in as usual."""
    pki = make_pki(tmp_path / "pki")
    tb = start_tls_broker(broker_factory, pki, reload_interval_ms=200)
    first = serial_of(pki.server.cert)
    assert served_serial(tb) == first

    tmp = pki.server.cert.with_name("garbage.tmp")
    tmp.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    tmp.replace(pki.server.cert)
    # Give the broker many reload intervals to look at it (this can only make the test pass
    # wrongly on a very slow broker, never fail wrongly); every connection still succeeds.
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        assert served_serial(tb) == first
        time.sleep(0.1)

    second = renew_server_cert(pki, "server-2")
    wait_for_serial(tb, second, {first})
    assert_no_panic(tb.broker)
