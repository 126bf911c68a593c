"""Raw SASL requests in the style of kafka_wire: SaslHandshake v0-1 and SaslAuthenticate v0-2,
the PLAIN mechanism's token (RFC 4616) and a SCRAM client (RFC 5802, RFC 7677; SCRAM-SHA-256
and SCRAM-SHA-512 as Kafka uses them, without channel binding).

The layouts follow Kafka's message definitions (SaslHandshakeRequest/Response.json,
SaslAuthenticateRequest/Response.json); nothing here comes from kafscale. SaslAuthenticate v1
adds the session lifetime of KIP-368 to the response; v2 is the flexible version. After a
SaslHandshake v0 the tokens travel bare, each behind a 4-byte length and without a Kafka header
(KIP-43, before KIP-152 framed them in SaslAuthenticate): :func:`raw_token` sends one so.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass

from .kafka_wire import RawConnection, Reader, Writer

# api keys
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

# error codes (Kafka's protocol guide)
NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}


# ---------------------------------------------------------------------------------------------
# SaslHandshake v0-1


@dataclass
class HandshakeResponse:
    error_code: int
    mechanisms: list[str]


def handshake(conn: RawConnection, mechanism: str, version: int = 1) -> HandshakeResponse:
    """SaslHandshake: the mechanism the client wants; the broker answers its enabled ones.
    (v1: the SASL tokens that follow travel in SaslAuthenticate requests.)"""
    if version not in (0, 1):
        raise ValueError("SaslHandshake has versions 0 and 1")
    r = conn.request(SASL_HANDSHAKE, version, Writer().string(mechanism).done())
    error = r.i16()
    mechanisms = [r.string() or "" for _ in range(r.array_len())]
    if r.remaining():
        raise AssertionError(f"{r.remaining()} unexpected bytes after SaslHandshake v{version}")
    return HandshakeResponse(error, mechanisms)


# ---------------------------------------------------------------------------------------------
# SaslAuthenticate v0-2


@dataclass
class AuthenticateResponse:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int | None  # v1+ (0: the session does not expire)


def _compact_bytes(w: Writer, data: bytes) -> Writer:
    return w.uvarint(len(data) + 1).raw(data)


def _read_compact_bytes(r: Reader) -> bytes | None:
    n = r.uvarint() - 1
    if n < 0:
        return None
    v = r.data[r.pos : r.pos + n]
    r.pos += n
    return bytes(v)


def authenticate_body(auth_bytes: bytes, version: int) -> bytes:
    if version >= 2:
        return _compact_bytes(Writer(), auth_bytes).tagged_fields().done()
    return Writer().bytes_(auth_bytes).done()


def parse_authenticate(version: int, r: Reader) -> AuthenticateResponse:
    error = r.i16()
    if version >= 2:
        message = r.compact_string()
        data = _read_compact_bytes(r)
    else:
        message = r.string()
        data = r.bytes_()
    lifetime = r.i64() if version >= 1 else None
    if version >= 2:
        r.skip_tagged_fields()
    if r.remaining():
        raise AssertionError(f"{r.remaining()} unexpected bytes after SaslAuthenticate v{version}")
    return AuthenticateResponse(error, message, data or b"", lifetime)


def authenticate(conn: RawConnection, auth_bytes: bytes, version: int = 1) -> AuthenticateResponse:
    """One SaslAuthenticate round: send ``auth_bytes``, read the broker's answer."""
    if version not in (0, 1, 2):
        raise ValueError("SaslAuthenticate has versions 0-2")
    flexible = version >= 2
    r = conn.request(
        SASL_AUTHENTICATE, version, authenticate_body(auth_bytes, version), flexible=flexible
    )
    return parse_authenticate(version, r)


def raw_token(conn: RawConnection, token: bytes) -> bytes:
    """One SASL token after a SaslHandshake v0: 4-byte length + token, answered the same way
    (a refused login is answered by closing the connection: kafka_wire.ConnectionClosed)."""
    conn.send_raw(struct.pack(">i", len(token)) + token)
    return conn.recv_frame()


# ---------------------------------------------------------------------------------------------
# PLAIN


def plain_token(username: str, password: str, authzid: str = "") -> bytes:
    """RFC 4616: [authzid] NUL authcid NUL passwd."""
    return f"{authzid}\0{username}\0{password}".encode()


def login_plain(
    conn: RawConnection,
    username: str,
    password: str,
    *,
    handshake_version: int = 1,
    version: int = 1,
) -> AuthenticateResponse:
    """SaslHandshake (PLAIN) then one SaslAuthenticate. A handshake the broker refuses raises
    AssertionError; the authentication's answer is returned as it came."""
    hs = handshake(conn, PLAIN, handshake_version)
    if hs.error_code != NONE:
        raise AssertionError(f"SaslHandshake PLAIN refused: {hs}")
    return authenticate(conn, plain_token(username, password), version)


# ---------------------------------------------------------------------------------------------
# SCRAM


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


class ScramClient:
    """The client side of one SCRAM exchange: :meth:`first`, then :meth:`final` with the
    server's first message, then :meth:`verify` with the server's final message."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: str | None = None
    ) -> None:
        self.hash = SCRAM_HASHES[mechanism]
        self.password = password.encode()
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self.first_bare = f"n={_saslname(username)},r={self.nonce}"
        self.auth_message = b""
        self.salted = b""

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        if not nonce.startswith(self.nonce):
            raise AssertionError(f"server nonce {nonce!r} does not extend ours {self.nonce!r}")
        without_proof = f"c=biws,r={nonce}"
        self.auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        self.salted = hashlib.pbkdf2_hmac(self.hash, self.password, salt, iterations)
        client_key = _hmac(self.hash, self.salted, b"Client Key")
        stored_key = hashlib.new(self.hash, client_key).digest()
        signature = _hmac(self.hash, stored_key, self.auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        """True when the server proved it knows the credential (``v=`` matches)."""
        text = server_final.decode()
        if not text.startswith("v="):
            return False
        server_key = _hmac(self.hash, self.salted, b"Server Key")
        expected = _hmac(self.hash, server_key, self.auth_message)
        return hmac.compare_digest(base64.b64decode(text[2:]), expected)


@dataclass
class ScramOutcome:
    first: AuthenticateResponse
    final: AuthenticateResponse | None  # None when the first round already failed
    server_verified: bool


def login_scram(
    conn: RawConnection, mechanism: str, username: str, password: str, *, version: int = 1
) -> ScramOutcome:
    """SaslHandshake then the two SaslAuthenticate rounds of SCRAM; a refused handshake raises
    AssertionError, a failed round is returned as it came."""
    hs = handshake(conn, mechanism)
    if hs.error_code != NONE:
        raise AssertionError(f"SaslHandshake {mechanism} refused: {hs}")
    client = ScramClient(mechanism, username, password)
    first = authenticate(conn, client.first(), version)
    if first.error_code != NONE:
        return ScramOutcome(first, None, False)
    final = authenticate(conn, client.final(first.auth_bytes), version)
    verified = final.error_code == NONE and client.verify(final.auth_bytes)
    return ScramOutcome(first, final, verified)
