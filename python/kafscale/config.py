"""Broker settings: one typed, immutable object built from command-line flags and ``KAFSCALE_*``
environment variables.

Precedence: a flag wins over its environment variable, which wins over the default. An
environment variable set to the empty string counts as unset (deployment templates often render
optional values that way). Every setting ``name`` has the flag ``--name-in-kebab-case`` and the
environment variable ``KAFSCALE_NAME_IN_UPPER_CASE``.

Sizes take a whole number of bytes (``4194304``) or a number with a binary suffix ``KiB``,
``MiB`` or ``GiB`` (``4MiB``; case-insensitive). Booleans take 1/0, true/false, yes/no, on/off.

The attribute names are the ones the Rust core reads (``_core.BrokerSettings``).
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import ipaddress
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from kafscale import listeners as _listeners

__all__ = [
    "CONTROL_PLANE_SETTINGS",
    "FLUSH_MODES",
    "LISTENER_SETTINGS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "SHORTHAND_SETTINGS",
    "Settings",
    "SettingsError",
    "load_settings",
]

LOG_LEVELS = ("trace", "debug", "info", "warn", "error")
# Settings only the Python control plane reads (the core ignores them); they come last.
CONTROL_PLANE_SETTINGS = (
    "group_initial_rebalance_delay_ms",
    "group_min_session_timeout_ms",
    "group_max_session_timeout_ms",
    "group_max_member_metadata_bytes",
    "group_max_metadata_bytes",
    "group_max_size",
    "group_max_count",
    "group_max_committed_offsets",
    "offsets_retention_minutes",
    "offsets_retention_check_interval_ms",
)
LOG_FORMATS = ("text", "json")
FLUSH_MODES = ("interval", "arrival")
# Settings the core reads through the derived ``Settings.listener_specs`` and ``Settings.tls``
# (the first two properties of ``_core.BrokerSettings``); they come first.
LISTENER_SETTINGS = (
    "broker_addr",
    "broker_host",
    "broker_port",
    "listeners",
    "advertised_listeners",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cafile",
    "ssl_client_auth",
    "ssl_reload_interval_ms",
)
# Settings the core reads through the ones they set (``storage``: the storage parts, from
# ``data_dir`` to ``use_memory_s3``); they come after the listener settings.
SHORTHAND_SETTINGS = ("storage",)

_KIB = 1024
_MIB = 1024 * _KIB
_GIB = 1024 * _MIB
# Segment index positions, Kafka message sizes and request frame sizes are int32 on disk or on
# the wire, so byte limits that feed them cannot exceed this.
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class SettingsError(ValueError):
    """A setting is missing, unparsable or contradicts another; the message says which and how
    to fix it."""


def env_var(name: str) -> str:
    """The environment variable of the setting ``name``."""
    return "KAFSCALE_" + name.upper()


def flag(name: str) -> str:
    """The command-line flag of the setting ``name``."""
    return "--" + name.replace("_", "-")


# While load_settings builds Settings: the flag or variable each given setting came from, so
# that messages name settings the way the user gave them.
_GIVEN: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "kafscale_settings_given", default=None
)


def _both(name: str) -> str:
    """The setting ``name`` in a message: as the user gave it (``--s3-bucket`` or
    ``KAFSCALE_S3_BUCKET``); one they did not give the way they gave the others (a variable
    when every one given was a variable, otherwise a flag). Outside load_settings: both."""
    given = _GIVEN.get()
    if given is None:
        return f"{flag(name)} / {env_var(name)}"
    if name in given:
        return given[name]
    if given and all(term.startswith("KAFSCALE_") for term in given.values()):
        return env_var(name)
    return flag(name)


def _how_to_set(name: str, value: str) -> str:
    """How to give ``name`` a value, in the user's terms: ``--s3-region us-east-1`` or
    ``KAFSCALE_S3_REGION=us-east-1``."""
    term = _both(name)
    if term.startswith("--"):
        return f"{term} {value}"
    if term.startswith("KAFSCALE_"):
        return f"{term}={value}"
    return f"{flag(name)} {value} (or {env_var(name)}={value})"


# --- parsing: text -> typed value (raises _Unparsable with what is expected) -------------------


class _Unparsable(ValueError):
    pass


_INT_RE = re.compile(r"[+-]?\d+")
_SIZE_RE = re.compile(r"(\d+)\s*(b|kib|mib|gib)?", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "kib": _KIB, "mib": _MIB, "gib": _GIB}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _parse_str(text: str) -> str:
    return text.strip()


def _parse_optional_str(text: str) -> str | None:
    return text.strip() or None


def _parse_int(text: str) -> int:
    text = text.strip()
    if not _INT_RE.fullmatch(text):
        raise _Unparsable("not a whole number")
    return int(text)


def _parse_fraction(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise _Unparsable("not a number: give a fraction such as 0.5") from None
    if not 0.0 <= value <= 1.0:
        raise _Unparsable(f"{value} is not a fraction from 0 to 1, e.g. 0.5")
    return value


def _parse_size(text: str) -> int:
    match = _SIZE_RE.fullmatch(text.strip())
    if not match:
        raise _Unparsable(
            "not a size: give a whole number of bytes (4194304) or use a KiB/MiB/GiB suffix (4MiB)"
        )
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _SIZE_UNITS[unit]


def _parse_size_or_unlimited(text: str) -> int:
    return -1 if text.strip() == "-1" else _parse_size(text)


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _Unparsable("not a boolean: use 1/0, true/false, yes/no or on/off")


def _parse_level(text: str) -> str:
    value = text.strip().lower()
    # "warning" is what Python's logging calls it; accept it rather than fail on a synonym.
    return "warn" if value == "warning" else value


def _parse_lower(text: str) -> str:
    return text.strip().lower()


def split_host_port(text: str) -> tuple[str, int]:
    """Split ``host:port`` or ``[ipv6]:port``; raises ValueError saying what is wrong."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if not rest.startswith(":"):
            raise ValueError("an IPv6 address needs the form [addr]:port, e.g. [::1]:9092")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError("missing ':port', e.g. 127.0.0.1:9092")
        if ":" in host:
            raise ValueError("put an IPv6 address in brackets, e.g. [::1]:9092")
    if not host or any(c.isspace() for c in host):
        raise ValueError("missing or blank host, e.g. 127.0.0.1:9092 or 0.0.0.0:9092")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"port {port_text!r} is not a number from 0 to 65535")
    return host, int(port_text)


def _is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


# --- checks: typed value -> problem description, or None when fine ------------------------------

Check = Callable[[Any], str | None]


def _in_range(low: int, high: int, what: str) -> Check:
    def check(value: int) -> str | None:
        if low <= value <= high:
            return None
        if value < low:
            bound = "greater than 0" if low == 1 else f"at least {low}"
        else:
            bound = f"at most {high}"
        return f"must be {bound} (got {value}); set it to {what}"

    return check


def _one_of(choices: Sequence[str]) -> Check:
    def check(value: str) -> str | None:
        if value in choices:
            return None
        return f"must be one of {', '.join(choices)} (got {value!r})"

    return check


def _not_blank(what: str) -> Check:
    def check(value: str) -> str | None:
        return None if value.strip() else f"must not be empty; set it to {what}"

    return check


def _check_addr(value: str) -> str | None:
    try:
        split_host_port(value)
    except ValueError as exc:
        return f"is not a valid listen address ({value!r}): {exc}"
    return None


def _check_optional_addr(value: str | None) -> str | None:
    return None if value is None else _check_addr(value)


def _check_advertised_host(value: str) -> str | None:
    if not value or any(c.isspace() for c in value):
        return f"must be a host name or IP address clients can reach (got {value!r})"
    if ":" in value:
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return f"must be a host only (got {value!r}); put the port in {_both('broker_port')}"
    return None


def _check_super_users(value: str) -> str | None:
    bad = [p for p in value.split(";") if p.strip() and ":" not in p.strip()]
    if bad:
        return f"{bad[0]!r} is not a principal: write TYPE:NAME, e.g. User:admin"
    return None


_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _check_mechanisms(value: str) -> str | None:
    names = [m.strip().upper() for m in value.split(",") if m.strip()]
    unknown = [m for m in names if m not in _MECHANISMS]
    if not names or unknown:
        return (
            f"must name one or more of {', '.join(_MECHANISMS)} (got {value!r}); GSSAPI and "
            "OAUTHBEARER are not supported"
        )
    return None


def _check_readable_file(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        Path(value).read_bytes()
    except OSError as exc:
        return f"cannot be read ({value}: {exc.strerror})"
    return None


def _check_token_file(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        token = Path(value).read_text(encoding="utf-8").strip()
    except OSError as exc:
        return f"cannot be read ({value}: {exc.strerror})"
    return None if token else f"is empty ({value}); put the bearer token in it"


def _check_rack(value: str | None) -> str | None:
    if value is not None and "," in value:
        return "a rack name without commas, e.g. us-east-1a"
    return None


def _check_endpoint(value: str | None) -> str | None:
    if value is None or re.match(r"https?://[^/\s]+", value):
        return None
    return f"must be a URL such as http://127.0.0.1:9000 (got {value!r})"


def _check_endpoints(value: str | None) -> str | None:
    if value is None:
        return None
    urls = [u.strip() for u in value.split(",")]
    if all(re.match(r"https?://[^/\s]+$", u) for u in urls):
        return None
    return f"must be comma-separated URLs such as http://127.0.0.1:2379 (got {value!r})"


def _retention(expected: str) -> Check:
    def check(value: int) -> str | None:
        return None if value == -1 or 0 < value <= _INT64_MAX else f"must be {expected}"

    return check


def _check_namespace(value: str) -> str | None:
    if value and not value.startswith("/") and not value.endswith("/"):
        return None
    return f"must be non-empty without a leading or trailing '/' (got {value!r}), e.g. default"


# --- the settings object -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Meta:
    help: str
    parse: Callable[[str], object]
    check: Check | None = None
    default_doc: str | None = None  # shown in --help when repr(default) would mislead
    metavar: str = "VALUE"


_T = TypeVar("_T")


def _setting(
    default: _T,
    help: str,
    parse: Callable[[str], _T],
    *,
    check: Check | None = None,
    default_doc: str | None = None,
    metavar: str = "VALUE",
) -> _T:
    """A field of :class:`Settings`: its default, and what ``parse`` makes of a flag's or
    variable's text, have the field's type."""
    meta = _Meta(help, parse, check, default_doc, metavar)
    return field(default=default, metadata={"kafscale": meta})


def _size_doc(n: int) -> str:
    for unit, factor in (("GiB", _GIB), ("MiB", _MIB), ("KiB", _KIB)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


@dataclass(frozen=True)
class Settings:
    """Every broker setting. Build it with :func:`load_settings`; constructing it directly
    validates values the same way but does not derive the advertised host/port."""

    broker_addr: str = _setting(
        "127.0.0.1:9092",
        "Address the Kafka listener binds, host:port ([addr]:port for IPv6). "
        "Port 0 picks a free port.",
        _parse_str,
        check=_check_addr,
        metavar="HOST:PORT",
    )
    broker_host: str = _setting(
        "127.0.0.1",
        "Host advertised to clients in Metadata responses.",
        _parse_str,
        check=_check_advertised_host,
        default_doc="host of --broker-addr; this machine's hostname if that host is 0.0.0.0 or ::",
        metavar="HOST",
    )
    broker_port: int = _setting(
        9092,
        "Port advertised to clients. 0 means the port actually bound.",
        _parse_int,
        check=_in_range(0, 65535, "a port number"),
        default_doc="port of --broker-addr",
        metavar="PORT",
    )
    listeners: str | None = _setting(
        None,
        "Kafka listeners (Kafka's listeners): comma-separated NAME://HOST:PORT, the name being "
        "the listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL), e.g. "
        "PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093. An empty host binds every interface. "
        "Replaces --broker-addr.",
        _parse_optional_str,
        check=_listeners.check_listeners,
        default_doc="one PLAINTEXT listener on --broker-addr",
        metavar="LISTENERS",
    )
    advertised_listeners: str | None = _setting(
        None,
        "What clients that come in on each listener are told (Kafka's advertised.listeners): "
        "comma-separated NAME://HOST:PORT for some or all listeners; port 0 advertises the "
        "port bound.",
        _parse_optional_str,
        check=_listeners.check_advertised,
        default_doc="each listener's own host (--broker-host for a wildcard one) and port",
        metavar="LISTENERS",
    )
    ssl_certfile: str | None = _setting(
        None,
        "PEM file with the SSL listeners' certificate (and its chain); read again when it changes.",
        _parse_optional_str,
        default_doc="unset",
        metavar="PATH",
    )
    ssl_keyfile: str | None = _setting(
        None,
        "PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1).",
        _parse_optional_str,
        default_doc="unset",
        metavar="PATH",
    )
    ssl_cafile: str | None = _setting(
        None,
        "PEM file with the CAs that client certificates must be signed by.",
        _parse_optional_str,
        default_doc="unset",
        metavar="PATH",
    )
    ssl_client_auth: str = _setting(
        "none",
        "Client certificates on SSL listeners (Kafka's ssl.client.auth): none, requested "
        "(checked if sent) or required. A client's certificate subject is its principal.",
        _parse_lower,
        check=_one_of(("none", "requested", "required")),
        metavar="MODE",
    )
    ssl_reload_interval_ms: int = _setting(
        10_000,
        "How often the certificate, key and CA files are checked for changes; changed files "
        "serve new connections without a restart.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 10000"),
        metavar="MS",
    )
    storage: str | None = _setting(
        None,
        "Where segments go, as one URL: s3://BUCKET/NAMESPACE?region=REGION (add "
        "&endpoint=URL for an S3-compatible server), file:///DIR/NAMESPACE (DIR is the data "
        "directory) or memory://NAMESPACE (testing only: data is lost on exit). The --s3-*, "
        "--data-dir and --use-memory-s3 settings say the same in parts; a part given as well "
        "must agree with it.",
        _parse_optional_str,
        default_doc="unset: the parts' settings",
        metavar="URL",
    )
    sasl_enabled_mechanisms: str = _setting(
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms of the SASL_PLAINTEXT and SASL_SSL listeners (Kafka's "
        "sasl.enabled.mechanisms): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, comma-separated.",
        _parse_str,
        check=_check_mechanisms,
        metavar="MECHANISMS",
    )
    sasl_users_file: str | None = _setting(
        None,
        "File of users, one name:password per line (# starts a comment), who may log in with "
        "every enabled mechanism; read at every login, so an edit applies at once. Users "
        "created with AlterUserScramCredentials (kafscale users set) are kept in the "
        "metadata store instead, salted.",
        _parse_optional_str,
        check=_check_readable_file,
        default_doc="unset",
        metavar="PATH",
    )
    connections_max_reauth_ms: int = _setting(
        0,
        "How long a SASL login lasts (Kafka's connections.max.reauth.ms, KIP-368): clients "
        "log in again on the same connection before it ends, or the connection is closed at "
        "their next request after it. 0: as long as the connection.",
        _parse_int,
        check=_in_range(0, _INT64_MAX, "milliseconds (0: no limit)"),
        metavar="MS",
    )
    sasl_server_max_receive_size: int = _setting(
        512 * _KIB,
        "Largest frame a client may send on a SASL listener before it has authenticated "
        "(Kafka's sasl.server.max.receive.size); a larger one closes the connection before "
        "its bytes are read.",
        _parse_size,
        check=_in_range(1024, _INT32_MAX, "a size such as 512KiB"),
        default_doc=_size_doc(512 * _KIB),
        metavar="SIZE",
    )
    connection_failed_authentication_delay_ms: int = _setting(
        100,
        "How long the answer to a failed login is held back before the connection is closed "
        "(Kafka's connection.failed.authentication.delay.ms): slows down password guessing.",
        _parse_int,
        check=_in_range(0, 60_000, "milliseconds from 0 to 60000"),
        metavar="MS",
    )
    authorizer: str = _setting(
        "none",
        "Authorization of requests (Kafka's authorizer.class.name): none lets every client do "
        "everything; acl checks every request against the ACLs of the metadata store "
        "(managed with CreateAcls/DeleteAcls, e.g. kafka-acls or kafscale acls).",
        _parse_lower,
        check=_one_of(("none", "acl")),
        metavar="KIND",
    )
    super_users: str = _setting(
        "",
        "Principals allowed everything whatever the ACLs say (Kafka's super.users), separated "
        "by semicolons, e.g. User:admin;User:CN=broker.",
        _parse_str,
        check=_check_super_users,
        default_doc="none",
        metavar="PRINCIPALS",
    )
    allow_everyone_if_no_acl_found: bool = _setting(
        False,
        "With --authorizer acl: whether a resource no ACL names is open to everyone (Kafka's "
        "allow.everyone.if.no.acl.found). Off, such a resource is for super users only.",
        _parse_bool,
    )
    broker_id: int = _setting(
        0,
        "This broker's node id (unique per cluster).",
        _parse_int,
        check=_in_range(0, _INT32_MAX, "a whole number from 0"),
        metavar="N",
    )
    broker_rack: str | None = _setting(
        None,
        "The zone this broker runs in (Kafka's broker.rack). Consumers that name the same "
        "rack (client.rack, or zone=RACK in their client.id) are sent to read through a broker "
        "of their rack (KIP-392), so reads do not cross zones.",
        _parse_optional_str,
        check=_check_rack,
        default_doc="unset: no rack",
        metavar="RACK",
    )
    data_dir: str = _setting(
        "./kafscale-data",
        "Local directory for the embedded metadata store and, when neither an S3 bucket "
        "nor in-memory S3 is configured, the segment objects.",
        _parse_str,
        check=_not_blank("a directory path, e.g. ./kafscale-data"),
        metavar="DIR",
    )
    s3_bucket: str | None = _setting(
        None,
        "S3 bucket holding segment objects. Needs --s3-region. Credentials come from the "
        "standard AWS_* environment variables.",
        _parse_optional_str,
        default_doc="unset: segments go to --data-dir",
        metavar="BUCKET",
    )
    s3_region: str | None = _setting(
        None,
        "Region of --s3-bucket (any value for most S3-compatible servers).",
        _parse_optional_str,
        default_doc="unset",
        metavar="REGION",
    )
    s3_endpoint: str | None = _setting(
        None,
        "Endpoint URL of an S3-compatible server (MinIO, moto, ...).",
        _parse_optional_str,
        check=_check_endpoint,
        default_doc="unset: AWS S3",
        metavar="URL",
    )
    s3_namespace: str = _setting(
        "default",
        "Key prefix inside the bucket: {namespace}/{topic}/{partition}/segment-....kfs",
        _parse_str,
        check=_check_namespace,
        metavar="PREFIX",
    )
    use_memory_s3: bool = _setting(
        False,
        "Keep segment objects in memory (testing only: data is lost on exit). "
        "Cannot be combined with --s3-bucket.",
        _parse_bool,
    )
    etcd_endpoints: str | None = _setting(
        None,
        "Comma-separated etcd client URLs. Set: brokers form a cluster with their metadata in "
        "etcd (needs --s3-bucket). Unset: one broker, metadata in an embedded store in "
        "--data-dir.",
        _parse_optional_str,
        check=_check_endpoints,
        default_doc="unset: embedded metadata store",
        metavar="URLS",
    )
    etcd_username: str | None = _setting(
        None,
        "etcd user (with --etcd-password) when etcd has authentication enabled.",
        _parse_optional_str,
        default_doc="unset",
        metavar="USER",
    )
    etcd_password: str | None = _setting(
        None,
        "Password of --etcd-username.",
        _parse_optional_str,
        default_doc="unset",
        metavar="PASSWORD",
    )
    lease_ttl_ms: int = _setting(
        5000,
        "TTL of the broker's etcd lease: a crashed broker's partitions move to the others "
        "about this long after it died.",
        _parse_int,
        check=_in_range(2000, 600_000, "milliseconds between 2000 and 600000, e.g. 5000"),
        metavar="MS",
    )
    retention_ms: int = _setting(
        7 * 24 * 3600 * 1000,
        "Default retention.ms of topics: older segments are deleted (-1: keep forever).",
        _parse_int,
        check=_retention("milliseconds, e.g. 604800000, or -1"),
        metavar="MS",
    )
    retention_bytes: int = _setting(
        -1,
        "Default retention.bytes of topics: a partition's oldest segments are deleted while it "
        "is larger than this (-1: no size limit).",
        _parse_size_or_unlimited,
        check=_retention("a size such as 10GiB, or -1"),
        metavar="SIZE",
    )
    retention_check_interval_ms: int = _setting(
        300_000,
        "How often a broker applies retention to the partitions it owns.",
        _parse_int,
        check=_in_range(100, _INT32_MAX, "milliseconds, e.g. 300000"),
        metavar="MS",
    )
    segment_bytes: int = _setting(
        4 * _MIB,
        "Compaction cuts a partition's write-ahead data into segments of about this size.",
        _parse_size,
        check=_in_range(1, _INT32_MAX, "a size such as 4MiB (at most 2GiB - 1)"),
        default_doc=_size_doc(4 * _MIB),
        metavar="SIZE",
    )
    flush_interval_ms: int = _setting(
        250,
        "A broker writes what its partitions buffered as one write-ahead object at least "
        "this often; produce requests with acks 1 or -1 are answered after that flush.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 250"),
        metavar="MS",
    )
    flush_mode: str = _setting(
        "interval",
        "When a write-ahead flush starts. interval: --flush-interval-ms after the first write "
        "buffered since the last flush (fewest objects). arrival: as soon as a write is "
        "buffered, but at most once per --flush-interval-ms (lower latency when writes come "
        "and go; lower the interval too to trade object PUTs for latency under steady load).",
        _parse_lower,
        check=_one_of(FLUSH_MODES),
        metavar="MODE",
    )
    wal_object_max_bytes: int = _setting(
        8 * _MIB,
        "A write-ahead object is written before the flush interval is over once the "
        "buffered bytes reach this size.",
        _parse_size,
        check=_in_range(1, _INT32_MAX, "a size such as 8MiB"),
        default_doc=_size_doc(8 * _MIB),
        metavar="SIZE",
    )
    wal_compaction_age_ms: int = _setting(
        60_000,
        "A partition's write-ahead data is compacted into a segment once it holds "
        "segment.bytes, or once its oldest write is this old (slow partitions).",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 60000"),
        metavar="MS",
    )
    wal_compaction_interval_ms: int = _setting(
        5_000,
        "How often a broker looks for write-ahead data of its partitions to compact.",
        _parse_int,
        check=_in_range(10, _INT32_MAX, "milliseconds, e.g. 5000"),
        metavar="MS",
    )
    cache_bytes: int = _setting(
        256 * _MIB,
        "Size of the in-memory LRU cache of segment bytes used by Fetch.",
        _parse_size,
        check=_in_range(1, _INT64_MAX, "a size such as 256MiB"),
        default_doc=_size_doc(256 * _MIB),
        metavar="SIZE",
    )
    readahead_segments: int = _setting(
        2,
        "Segments fetched ahead of a consumer's position (0 disables readahead).",
        _parse_int,
        check=_in_range(0, 1024, "a count such as 2"),
        metavar="N",
    )
    auto_create_topics: bool = _setting(
        True,
        "Create a topic, with --default-partitions, when a client asks for one that does "
        "not exist.",
        _parse_bool,
    )
    default_partitions: int = _setting(
        1,
        "Partitions of auto-created topics and of CreateTopics with num_partitions -1.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "a count such as 1"),
        metavar="N",
    )
    max_request_bytes: int = _setting(
        100 * _MIB,
        "Largest request frame accepted; a bigger one closes the connection.",
        _parse_size,
        check=_in_range(1, _INT32_MAX, "a size such as 100MiB (at most 2GiB - 1)"),
        default_doc=_size_doc(100 * _MIB),
        metavar="SIZE",
    )
    max_message_bytes: int = _setting(
        1 * _MIB,
        "Largest record batch accepted.",
        _parse_size,
        check=_in_range(1, _INT32_MAX, "a size such as 1MiB"),
        default_doc=_size_doc(1 * _MIB),
        metavar="SIZE",
    )
    log_level: str = _setting(
        "info",
        f"Log level: {', '.join(LOG_LEVELS)}.",
        _parse_level,
        check=_one_of(LOG_LEVELS),
        metavar="LEVEL",
    )
    log_format: str = _setting(
        "text",
        f"Log format on stderr: {', '.join(LOG_FORMATS)} (json: one object per line).",
        _parse_lower,
        check=_one_of(LOG_FORMATS),
        metavar="FORMAT",
    )
    metrics_addr: str | None = _setting(
        None,
        "Address of the operations endpoint: /metrics (Prometheus), /healthz (alive) and "
        "/readyz (metadata and object stores reachable, serving), e.g. 0.0.0.0:9464.",
        _parse_optional_str,
        check=_check_optional_addr,
        default_doc="unset: not served",
        metavar="HOST:PORT",
    )
    metrics_tls: bool = _setting(
        False,
        "Serve the operations endpoint over TLS with --ssl-certfile and --ssl-keyfile; it "
        "never asks for a client certificate (probes present none).",
        _parse_bool,
    )
    metrics_token_file: str | None = _setting(
        None,
        "File holding a bearer token that /metrics requires (Authorization: Bearer TOKEN); "
        "read on every request, so a rotated token applies at once. /healthz and /readyz "
        "stay open for probes.",
        _parse_optional_str,
        check=_check_token_file,
        default_doc="unset: /metrics is open",
        metavar="PATH",
    )
    metrics_max_connections: int = _setting(
        64,
        "Most connections the operations endpoint holds at once; one past it is closed at "
        "once. Its descriptors are kept apart from the Kafka listeners' (--max-connections is "
        "lowered to leave room for them).",
        _parse_int,
        check=_in_range(1, 65_536, "a count such as 64"),
        metavar="N",
    )
    metrics_header_read_timeout_ms: int = _setting(
        10_000,
        "Once the first byte of a request to the operations endpoint has arrived (or a TLS "
        "handshake began), its request line and headers must arrive within this time, or the "
        "connection is closed.",
        _parse_int,
        check=_in_range(100, _INT32_MAX, "milliseconds, e.g. 10000"),
        metavar="MS",
    )
    metrics_idle_timeout_ms: int = _setting(
        60_000,
        "A connection to the operations endpoint that sends nothing and is owed nothing for "
        "this long is closed (scrapers and probes reconnect).",
        _parse_int,
        check=_in_range(100, _INT32_MAX, "milliseconds, e.g. 60000"),
        metavar="MS",
    )
    # Limits that keep one client from exhausting the broker (names follow Kafka's broker
    # configs where Kafka has one).
    max_connections: int = _setting(
        10_000,
        "Most client connections the broker holds at once (Kafka's max.connections); a "
        "connection past it is closed at once. Lowered at start-up to what the process's "
        "file-descriptor limit allows.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "a count such as 10000"),
        metavar="N",
    )
    max_connections_per_ip: int = _setting(
        1_000,
        "Most client connections from one IP address (Kafka's max.connections.per.ip).",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "a count such as 1000"),
        metavar="N",
    )
    connections_max_idle_ms: int = _setting(
        600_000,
        "A connection that sends no request and is owed no response for this long is closed "
        "(Kafka's connections.max.idle.ms), and so is one whose client reads none of a "
        "response for this long.",
        _parse_int,
        check=_in_range(1000, _INT32_MAX, "milliseconds, e.g. 60000"),
        metavar="MS",
    )
    request_read_timeout_ms: int = _setting(
        30_000,
        "Once the first byte of a request frame has arrived, the whole frame must arrive "
        "within this time or the connection is closed (a slow or stalled sender cannot pin "
        "buffers).",
        _parse_int,
        check=_in_range(100, _INT32_MAX, "milliseconds, e.g. 30000"),
        metavar="MS",
    )
    connection_max_inflight_bytes: int = _setting(
        128 * _MIB,
        "Bytes one connection may have in flight: requests read but not answered plus "
        "responses not yet sent. Past it the broker stops reading from that connection until "
        "responses go out (one request is always let through, whatever its size).",
        _parse_size,
        check=_in_range(1, _INT64_MAX, "a size such as 128MiB"),
        default_doc=_size_doc(128 * _MIB),
        metavar="SIZE",
    )
    queued_max_request_bytes: int = _setting(
        512 * _MIB,
        "Bytes all connections together may have in flight (Kafka's "
        "queued.max.request.bytes); past it the broker stops reading requests instead of "
        "growing.",
        _parse_size,
        check=_in_range(1, _INT64_MAX, "a size such as 512MiB"),
        default_doc=_size_doc(512 * _MIB),
        metavar="SIZE",
    )
    fetch_max_bytes: int = _setting(
        55 * _MIB,
        "Largest Fetch response (Kafka's fetch.max.bytes); a request asking for more gets "
        "this much. The first batch is still returned whole (KIP-74).",
        _parse_size,
        check=_in_range(1024, _INT32_MAX, "a size such as 55MiB"),
        default_doc=_size_doc(55 * _MIB),
        metavar="SIZE",
    )
    message_timestamp_before_max_ms: int = _setting(
        _INT64_MAX,
        "Default message.timestamp.before.max.ms of topics (KIP-937): a CreateTime record "
        "older than this is refused with INVALID_TIMESTAMP.",
        _parse_int,
        check=_in_range(0, _INT64_MAX, "milliseconds, e.g. 604800000"),
        default_doc=f"{_INT64_MAX} (no limit)",
        metavar="MS",
    )
    message_timestamp_after_max_ms: int = _setting(
        3_600_000,
        "Default message.timestamp.after.max.ms of topics (KIP-937): a CreateTime record "
        "more than this far in the future is refused with INVALID_TIMESTAMP.",
        _parse_int,
        check=_in_range(0, _INT64_MAX, "milliseconds, e.g. 3600000"),
        metavar="MS",
    )
    max_uncompressed_batch_bytes: int = _setting(
        128 * _MIB,
        "Largest size a compressed record batch may expand to; a bigger one (a "
        "decompression bomb) is refused with CORRUPT_MESSAGE. Validation streams, so this "
        "bounds CPU, not memory.",
        _parse_size,
        check=_in_range(1024, _INT64_MAX, "a size such as 128MiB"),
        default_doc=_size_doc(128 * _MIB),
        metavar="SIZE",
    )
    producer_id_expiration_ms: int = _setting(
        86_400_000,
        "How long a partition remembers an idempotent producer that wrote nothing "
        "(Kafka's producer.id.expiration.ms): a retry after that is no longer recognised "
        "as one.",
        _parse_int,
        check=_in_range(1, _INT64_MAX, "milliseconds, e.g. 86400000"),
        metavar="MS",
    )
    # Compacted topics (names follow Kafka's broker configs log.roll.ms, log.cleaner.*,
    # file.delete.delay.ms).
    log_roll_ms: int = _setting(
        7 * 24 * 3600 * 1000,
        "Default segment.ms of topics: a partition's write-ahead data becomes a segment at "
        "most this long after it was written (--wal-compaction-age-ms, when shorter, sooner).",
        _parse_int,
        check=_in_range(1, _INT64_MAX, "milliseconds, e.g. 604800000"),
        metavar="MS",
    )
    log_cleaner_min_cleanable_ratio: float = _setting(
        0.5,
        "Default min.cleanable.dirty.ratio of compacted topics: a partition is cleaned once "
        "its segments not yet cleaned hold this share of its segment bytes.",
        _parse_fraction,
        metavar="RATIO",
    )
    log_cleaner_min_compaction_lag_ms: int = _setting(
        0,
        "Default min.compaction.lag.ms of compacted topics: a record stays uncleaned at least "
        "this long.",
        _parse_int,
        check=_in_range(0, _INT64_MAX, "milliseconds, e.g. 0"),
        metavar="MS",
    )
    log_cleaner_max_compaction_lag_ms: int = _setting(
        _INT64_MAX,
        "Default max.compaction.lag.ms of compacted topics: a partition is cleaned once its "
        "oldest uncleaned segment is this old, however little of it is dirty.",
        _parse_int,
        check=_in_range(1, _INT64_MAX, "milliseconds, e.g. 604800000"),
        default_doc="unlimited",
        metavar="MS",
    )
    log_cleaner_delete_retention_ms: int = _setting(
        24 * 3600 * 1000,
        "Default delete.retention.ms of compacted topics: a tombstone is kept this long after "
        "the cleaning that first kept it.",
        _parse_int,
        check=_in_range(0, _INT64_MAX, "milliseconds, e.g. 86400000"),
        metavar="MS",
    )
    log_cleaner_dedupe_buffer_size: int = _setting(
        128 * _MIB,
        "Memory of a cleaning's offset map (at most 64 bytes a key): a cleaning takes in the "
        "keys of the dirty segments until it is full and cleans up to there.",
        _parse_size,
        check=_in_range(1024, _INT64_MAX, "a size such as 128MiB"),
        default_doc=_size_doc(128 * _MIB),
        metavar="SIZE",
    )
    log_cleaner_backoff_ms: int = _setting(
        15_000,
        "How often the cleaner looks for compacted partitions to clean.",
        _parse_int,
        check=_in_range(10, _INT32_MAX, "milliseconds, e.g. 15000"),
        metavar="MS",
    )
    file_delete_delay_ms: int = _setting(
        60_000,
        "How long the segments a cleaning replaced stay in storage, for reads that listed "
        "them before it was committed.",
        _parse_int,
        check=_in_range(0, _INT32_MAX, "milliseconds, e.g. 60000"),
        metavar="MS",
    )
    # Transactions (Kafka's transaction.max.timeout.ms, transactional.id.expiration.ms).
    transaction_max_timeout_ms: int = _setting(
        900_000,
        "The longest transaction timeout a producer may ask for (its transaction.timeout.ms); "
        "a longer one is refused with INVALID_TRANSACTION_TIMEOUT.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 900000"),
        metavar="MS",
    )
    transactional_id_expiration_ms: int = _setting(
        604_800_000,
        "How long the coordinator keeps a transactional id that has no transaction under way "
        "and has not been used; a producer that comes back later gets a new producer id.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 604800000"),
        metavar="MS",
    )
    # Consumer groups (read by the Python control plane only; names follow Kafka's broker
    # configs group.initial.rebalance.delay.ms, group.min/max.session.timeout.ms).
    group_initial_rebalance_delay_ms: int = _setting(
        3000,
        "How long a group's first rebalance waits for more members to join before assigning "
        "partitions, so a group started all at once rebalances once.",
        _parse_int,
        check=_in_range(0, 300_000, "milliseconds between 0 and 300000, e.g. 3000"),
        metavar="MS",
    )
    group_min_session_timeout_ms: int = _setting(
        6000,
        "Smallest session.timeout.ms a consumer may ask for (INVALID_SESSION_TIMEOUT below).",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 6000"),
        metavar="MS",
    )
    group_max_session_timeout_ms: int = _setting(
        1_800_000,
        "Largest session.timeout.ms a consumer may ask for (INVALID_SESSION_TIMEOUT above).",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 1800000"),
        metavar="MS",
    )
    group_max_member_metadata_bytes: int = _setting(
        256 * _KIB,
        "Largest protocol metadata (JoinGroup: all its protocols together) or assignment "
        "(SyncGroup) one member may carry; a bigger one gets MESSAGE_TOO_LARGE and the "
        "broker logs which setting to raise.",
        _parse_size,
        check=_in_range(1024, _INT32_MAX, "a size such as 256KiB"),
        default_doc=_size_doc(256 * _KIB),
        metavar="SIZE",
    )
    group_max_metadata_bytes: int = _setting(
        1 * _MIB,
        "Largest stored record of one group (its members' protocol metadata, assignments and "
        "ids); a join past it gets GROUP_MAX_SIZE_REACHED, an assignment MESSAGE_TOO_LARGE. "
        "The default keeps every write within etcd's default 1.5 MiB request limit; raise "
        "etcd's --max-request-bytes before raising this.",
        _parse_size,
        check=_in_range(1024, _INT32_MAX, "a size such as 1MiB"),
        default_doc=_size_doc(1 * _MIB),
        metavar="SIZE",
    )
    group_max_size: int = _setting(
        1_000,
        "Most members one consumer group may have (Kafka's group.max.size); a join past it "
        "gets GROUP_MAX_SIZE_REACHED.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "a count such as 1000"),
        metavar="N",
    )
    # Kafka bounds neither the number of groups nor their committed offsets (its offsets topic
    # grows instead); these bound what one client can make a coordinator keep in memory and in
    # the metadata store.
    group_max_count: int = _setting(
        5_000,
        "Most consumer groups one broker coordinates; OffsetCommit that would create one more "
        "gets INVALID_COMMIT_OFFSET_SIZE, JoinGroup GROUP_MAX_SIZE_REACHED (the log names this "
        "setting). Empty groups expire (offsets_retention_minutes), which frees room.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "a count such as 5000"),
        metavar="N",
    )
    group_max_committed_offsets: int = _setting(
        1_000,
        "Most partitions one consumer group may hold committed offsets for; a commit for one "
        "more partition gets INVALID_COMMIT_OFFSET_SIZE (the log names this setting).",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "a count such as 1000"),
        metavar="N",
    )
    offsets_retention_minutes: int = _setting(
        10_080,
        "Kafka's offsets.retention.minutes: an empty group's committed offsets expire this long "
        "after it became empty, a simple consumer's (commits only, never joined) this long after "
        "each commit; an empty group without offsets is removed.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "minutes, e.g. 10080 (7 days)"),
        metavar="MINUTES",
    )
    offsets_retention_check_interval_ms: int = _setting(
        600_000,
        "Kafka's offsets.retention.check.interval.ms: how often expired offsets and empty groups "
        "are looked for.",
        _parse_int,
        check=_in_range(1, _INT32_MAX, "milliseconds, e.g. 600000"),
        metavar="MS",
    )

    def __post_init__(self) -> None:
        self._apply_storage_url()
        for f in dataclasses.fields(self):
            meta: _Meta = f.metadata["kafscale"]
            problem = meta.check(getattr(self, f.name)) if meta.check else None
            if problem:
                raise SettingsError(f"{_both(f.name)} {problem}")
        self._check_storage()
        self._check_listeners()
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise SettingsError(
                f"{_both('group_min_session_timeout_ms')} ({self.group_min_session_timeout_ms}) "
                f"is larger than {_both('group_max_session_timeout_ms')} "
                f"({self.group_max_session_timeout_ms}), so no consumer could join; lower the "
                "first or raise the second"
            )
        if self.max_message_bytes > self.max_request_bytes:
            raise SettingsError(
                f"{_both('max_message_bytes')} ({self.max_message_bytes}) is larger than "
                f"{_both('max_request_bytes')} ({self.max_request_bytes}), so no such message "
                "could ever arrive; lower the first or raise the second"
            )

    def _check_listeners(self) -> None:
        try:
            specs = self.listener_specs
        except ValueError as exc:
            raise SettingsError(f"{_both('advertised_listeners')}: {exc}") from None
        if any(spec.name in _listeners.TLS_PROTOCOLS for spec in specs) and not (
            self.ssl_certfile and self.ssl_keyfile
        ):
            raise SettingsError(
                f"an SSL or SASL_SSL listener needs a certificate: set {_both('ssl_certfile')} and "
                f"{_both('ssl_keyfile')} (PEM files)"
            )
        if self.metrics_tls and not (self.ssl_certfile and self.ssl_keyfile):
            raise SettingsError(
                f"{_both('metrics_tls')} needs a certificate: set {_both('ssl_certfile')} and "
                f"{_both('ssl_keyfile')} (PEM files)"
            )
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise SettingsError(
                f"{_both('ssl_client_auth')} {self.ssl_client_auth} needs {_both('ssl_cafile')}: "
                "the CAs client certificates must be signed by"
            )

    @property
    def setting_names(self) -> dict[str, str]:
        """What the user called each setting they gave, by attribute name: its flag
        (``--s3-bucket``) or its environment variable (``KAFSCALE_S3_BUCKET``), so that
        messages name it the same way. Settings left at their default are not in it."""
        given: dict[str, str] = self.__dict__.get("_given_as", {})
        return dict(given)

    @property
    def listener_specs(self) -> list[_listeners.ListenerSpec]:
        """Every listener the core binds, the first one --broker-addr's when --listeners is
        unset."""
        return _listeners.resolve(
            self.listeners,
            self.advertised_listeners,
            self.broker_addr,
            self.broker_host,
            self.broker_port,
        )

    @property
    def tls(self) -> _listeners.TlsFiles | None:
        """The SSL listeners' files, when a certificate is set."""
        if not (self.ssl_certfile and self.ssl_keyfile):
            return None
        return _listeners.TlsFiles(
            self.ssl_certfile,
            self.ssl_keyfile,
            self.ssl_cafile,
            self.ssl_client_auth,
            self.ssl_reload_interval_ms,
        )

    def _apply_storage_url(self) -> None:
        """--storage, parsed by the core's one parser of storage URLs, sets the settings that
        say the same in parts (frozen: set the way dataclasses do). A part given as well with
        another value is an error, never a silent choice."""
        if not self.storage:
            return
        from ._core import StorageLocation  # here: the Kafka CLI commands run without the core

        try:
            location = StorageLocation(self.storage)
        except ValueError as exc:
            raise SettingsError(f"{_both('storage')}: {exc}") from None
        not_s3 = {"s3_bucket": None, "s3_region": None, "s3_endpoint": None}
        says: dict[str, object] = {"s3_namespace": location.namespace}
        if location.scheme == "s3":
            says |= {"s3_bucket": location.bucket, "use_memory_s3": False}
            says |= {"s3_region": location.region} if location.region else {}
            says |= {"s3_endpoint": location.endpoint} if location.endpoint else {}
        elif location.scheme == "file":
            says |= not_s3 | {"data_dir": location.directory, "use_memory_s3": False}
        else:
            says |= not_s3 | {"use_memory_s3": True}
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name, value in says.items():
            given = getattr(self, name)
            if given not in (defaults[name], value):
                raise SettingsError(
                    f"{_both('storage')} {self.storage} and {_both(name)} {given} disagree about "
                    f"where segments go; give only {_both('storage')}, or only the parts"
                )
            object.__setattr__(self, name, value)

    def _check_storage(self) -> None:
        # Contradictory storage choices are errors: silently preferring one would put data
        # somewhere the operator did not expect.
        if self.use_memory_s3 and self.s3_bucket:
            raise SettingsError(
                f"{_both('use_memory_s3')} and {_both('s3_bucket')} are both set; choose one: "
                "unset the bucket to test with in-memory storage, or turn off in-memory S3"
            )
        if self.s3_bucket and not self.s3_region:
            raise SettingsError(
                f"{_both('s3_bucket')} is set but {_both('s3_region')} is not; set the "
                f"bucket's region, e.g. {_how_to_set('s3_region', 'us-east-1')} or "
                "s3://BUCKET/NAMESPACE?region=us-east-1 (S3-compatible servers usually accept any "
                "value)"
            )
        if self.etcd_endpoints and not self.s3_bucket:
            raise SettingsError(
                f"{_both('etcd_endpoints')} is set but {_both('s3_bucket')} is not; a cluster "
                "keeps segments in S3 so that every broker can read and take over every "
                "partition: set the bucket (and its region)"
            )
        if bool(self.etcd_username) != bool(self.etcd_password):
            raise SettingsError(
                f"{_both('etcd_username')} and {_both('etcd_password')} go together; set both "
                "or neither"
            )
        if not self.s3_bucket:
            for name in ("s3_region", "s3_endpoint"):
                if getattr(self, name):
                    raise SettingsError(
                        f"{_both(name)} is set but {_both('s3_bucket')} is not; set the "
                        f"bucket too, or unset {_both(name)}"
                    )


# --- loading --------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print usage and exit(2)
        raise SettingsError(f"{message}; run with --help to list every setting")


def _help_text(f: dataclasses.Field[object], meta: _Meta) -> str:
    default = meta.default_doc
    if default is None:
        default = str(f.default).lower() if isinstance(f.default, bool) else str(f.default)
    text = f"{meta.help} [env {env_var(f.name)}; default: {default}]"
    return text.replace("%", "%%")  # argparse %-formats help strings


def build_parser(prog: str = "kafscale-broker") -> argparse.ArgumentParser:
    from kafscale import __version__

    parser = _Parser(
        prog=prog,
        description="KafScale broker: a Kafka-compatible broker keeping segments in object "
        "storage. Every setting is a flag or a KAFSCALE_* environment variable (the flag "
        "wins; an empty variable counts as unset).",
        epilog="Sizes: whole bytes (4194304) or a KiB/MiB/GiB suffix (4MiB). Booleans in "
        "environment variables: 1/0, true/false, yes/no, on/off. S3 credentials are read "
        "from the standard AWS environment variables (AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).",
    )
    parser.add_argument("--version", action="version", version=f"kafscale {__version__}")
    for f in dataclasses.fields(Settings):
        meta: _Meta = f.metadata["kafscale"]
        if f.type in (bool, "bool"):
            parser.add_argument(
                flag(f.name),
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=_help_text(f, meta),
            )
        else:
            parser.add_argument(
                flag(f.name),
                dest=f.name,
                default=None,
                metavar=meta.metavar,
                help=_help_text(f, meta),
            )
    return parser


def load_settings(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    prog: str = "kafscale-broker",
) -> Settings:
    """Build :class:`Settings` from flags (``argv``, default ``sys.argv[1:]``) and environment
    variables (``environ``, default ``os.environ``). Raises :class:`SettingsError`.
    ``--help``/``--version`` print and raise ``SystemExit(0)`` as argparse does."""
    environ = os.environ if environ is None else environ
    args = build_parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    values: dict[str, Any] = {}
    given: dict[str, str] = {}  # setting -> the flag or variable it came from
    for f in dataclasses.fields(Settings):
        meta: _Meta = f.metadata["kafscale"]
        raw = getattr(args, f.name)
        if isinstance(raw, bool):  # --flag / --no-flag
            values[f.name] = raw
            given[f.name] = flag(f.name)
            continue
        if raw is not None:
            where, other = flag(f.name), f"env {env_var(f.name)}"
        else:
            raw = environ.get(env_var(f.name), "")
            if raw == "":
                continue  # default
            where, other = env_var(f.name), f"flag {flag(f.name)}"
        given[f.name] = where
        try:
            values[f.name] = meta.parse(raw)
        except _Unparsable as exc:
            raise SettingsError(f"invalid value {raw!r} for {where} ({other}): {exc}") from None

    _derive_advertised(values)
    token = _GIVEN.set(given)
    try:
        settings = Settings(**values)
    finally:
        _GIVEN.reset(token)
    # Not a field: it describes where the values came from, not a setting (frozen, so set
    # the way dataclasses do).
    object.__setattr__(settings, "_given_as", given)
    return settings


def _derive_advertised(values: dict[str, Any]) -> None:
    """Default the advertised host/port from the listen address.

    A wildcard listen host (0.0.0.0, ::) cannot be given to clients, so the advertised host
    falls back to this machine's hostname; set KAFSCALE_BROKER_HOST when clients reach the
    broker under another name (a load balancer, a Kubernetes service).
    """
    addr = values.get("broker_addr", Settings.broker_addr)
    try:
        host, port = split_host_port(addr)
    except ValueError:
        return  # Settings.__post_init__ reports the bad address with its setting name
    if "broker_host" not in values:
        values["broker_host"] = socket.gethostname() if _is_unspecified(host) else host
    values.setdefault("broker_port", port)
