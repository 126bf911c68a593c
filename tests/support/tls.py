"""Certificates for the TLS listener tests, made on the spot with ``cryptography``.

Every test run gets its own throwaway CA, so nothing depends on the machine's trust store or on
fixture files that expire. Keys are ECDSA P-256: quick to generate, and accepted by rustls
(the broker), OpenSSL (librdkafka, Python's ``ssl``) alike. Certificates carry the extensions
strict verifiers look for (basic constraints, key usage, extended key usage, subject and
authority key identifiers), so a rejection in a test is the one the test means, not a missing
extension.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from support.secure_clients import Security

# Subject of the good client certificate: what a broker would see as its principal.
CLIENT_CN = "alice"
CLIENT_ORG = "kafscale-tests"

# The names the server certificate is valid for: clients connect to 127.0.0.1 and check it.
SERVER_SANS: tuple[x509.GeneralName, ...] = (
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    x509.IPAddress(ipaddress.ip_address("::1")),
    x509.DNSName("localhost"),
)


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key as PEM files (keys unencrypted PKCS#8)."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Everything a TLS test needs, as files under ``dir``.

    ``ca`` signs ``server``, ``client`` (CN=alice, O=kafscale-tests) and ``expired_client``;
    ``unknown_ca`` is a second CA the broker does not trust, signing ``unknown_client`` (also
    CN=alice, so that only the issuer is wrong)."""

    dir: Path
    ca: Pair
    server: Pair
    client: Pair
    unknown_ca: Pair
    unknown_client: Pair
    expired_client: Pair

    def broker_args(
        self,
        client_auth: str | None = None,
        reload_interval_ms: int | None = None,
        trust_clients: bool = True,
    ) -> list[str]:
        """The broker's ``--ssl-*`` flags for this PKI; ``None`` leaves a flag at its default.
        ``trust_clients``: pass ``ca`` as ``--ssl-cafile`` (the CA for client certificates)."""
        args = ["--ssl-certfile", str(self.server.cert), "--ssl-keyfile", str(self.server.key)]
        if trust_clients:
            args += ["--ssl-cafile", str(self.ca.cert)]
        if client_auth is not None:
            args += ["--ssl-client-auth", client_auth]
        if reload_interval_ms is not None:
            args += ["--ssl-reload-interval-ms", str(reload_interval_ms)]
        return args

    def security(self, client: Pair | None = None) -> Security:
        """A client's settings for an SSL listener with this PKI's server certificate: verify
        it against ``ca``; ``client``: present this certificate."""
        return Security("SSL", cafile=self.ca.cert, client=client)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, org: str | None = CLIENT_ORG) -> x509.Name:
    """O=org (left out when None), CN=common_name: a principal ``User:CN=...,O=...``."""
    org_attributes = [] if org is None else [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)]
    return x509.Name([*org_attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``: a reader (the
    broker reloading its certificate) sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write_pair(pair: Pair, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    """Key first, certificate last: a broker that sees the new certificate sees its key too."""
    _write_atomically(
        pair.key,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    _write_atomically(pair.cert, cert.public_bytes(serialization.Encoding.PEM))


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signatures; for a CA also certificate and CRL signing."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _make_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = _name(common_name)
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _issue(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    server: bool,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    org: str | None = CLIENT_ORG,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf certificate signed by ``ca``: for a server (``SERVER_SANS``, serverAuth) or a
    client (clientAuth), its subject ``_name(common_name, org)``. Valid from yesterday for 30
    days unless told otherwise."""
    key = _new_key()
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, org))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - dt.timedelta(days=1))
        .not_valid_after(not_after or now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(SERVER_SANS), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(dir: Path) -> Pki:
    """Write a fresh PKI under ``dir`` (created if missing) and describe it."""
    dir.mkdir(parents=True, exist_ok=True)

    def pair(stem: str) -> Pair:
        return Pair(dir / f"{stem}.pem", dir / f"{stem}.key")

    pki = Pki(
        dir=dir,
        ca=pair("ca"),
        server=pair("server"),
        client=pair("client"),
        unknown_ca=pair("unknown-ca"),
        unknown_client=pair("unknown-client"),
        expired_client=pair("expired-client"),
    )
    ca_cert, ca_key = _make_ca("kafscale-tests-ca")
    _write_pair(pki.ca, ca_cert, ca_key)
    _write_pair(pki.server, *_issue(ca_cert, ca_key, "server", server=True))
    _write_pair(pki.client, *_issue(ca_cert, ca_key, CLIENT_CN, server=False))
    now = _now()
    _write_pair(
        pki.expired_client,
        *_issue(
            ca_cert,
            ca_key,
            CLIENT_CN,
            server=False,
            not_before=now - dt.timedelta(days=30),
            not_after=now - dt.timedelta(days=1),
        ),
    )
    other_cert, other_key = _make_ca("unknown-ca")
    _write_pair(pki.unknown_ca, other_cert, other_key)
    _write_pair(pki.unknown_client, *_issue(other_cert, other_key, CLIENT_CN, server=False))
    return pki


def _load_ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def renew_server_cert(pki: Pki, common_name: str = "server-2") -> int:
    """Replace ``pki.server``'s files (each atomically, key first) with a new certificate and a
    new key from the same CA and for the same names, as a certificate renewal would; returns
    the new certificate's serial number so a test can tell which one a connection got."""
    ca_cert, ca_key = _load_ca(pki)
    cert, key = _issue(ca_cert, ca_key, common_name, server=True)
    _write_pair(pki.server, cert, key)
    return cert.serial_number


def serial_of(cert_file: Path) -> int:
    """The serial number of the (first) certificate in a PEM file."""
    return x509.load_pem_x509_certificate(cert_file.read_bytes()).serial_number


def peer_certificate(host: str, port: int, cafile: Path, timeout: float = 10.0) -> x509.Certificate:
    """Open a new TLS connection (hostname checked against ``host``, chain against
    ``cafile``) and return the certificate the server presented; then close it."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((host, port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None, "no peer certificate"
    return x509.load_der_x509_certificate(der)
