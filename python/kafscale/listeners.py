"""Kafka listeners as settings: ``--listeners`` and ``--advertised-listeners`` in Kafka's form
(``NAME://HOST:PORT,...``, the name being the listener's security protocol), and the TLS files
an SSL listener serves with. The core reads :class:`ListenerSpec` and :class:`TlsFiles`."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = [
    "PROTOCOLS",
    "TLS_PROTOCOLS",
    "ListenerSpec",
    "TlsFiles",
    "check_advertised",
    "check_listeners",
    "parse_endpoints",
    "resolve",
]

# The security protocols a listener may have (its name is its protocol).
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The ones that speak TLS, and so need a certificate.
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class ListenerSpec:
    """One listener as the core binds and advertises it (``ListenerConfig`` in the core)."""

    name: str
    bind: str
    advertised_host: str
    advertised_port: int  # 0: the port bound


@dataclass(frozen=True)
class TlsFiles:
    """The SSL listeners' PEM files (``TlsFiles`` in the core)."""

    certfile: str
    keyfile: str
    cafile: str | None
    client_auth: str
    reload_interval_ms: int


def _split(item: str) -> tuple[str, str, int]:
    name, sep, address = item.partition("://")
    if not sep:
        raise ValueError(f"{item!r} is not NAME://HOST:PORT")
    name = name.strip().upper()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = address.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{item!r} has no port number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{item!r}: port {port} is not between 0 and 65535")
    return name, host, port


def parse_endpoints(text: str) -> dict[str, tuple[str, int]]:
    """``NAME://HOST:PORT,...`` as {name: (host, port)}; ValueError says what is wrong."""
    out: dict[str, tuple[str, int]] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, host, port = _split(item)
        if name not in PROTOCOLS:
            raise ValueError(
                f"unknown listener {name!r}: a listener's name is its security protocol, "
                f"one of {', '.join(PROTOCOLS)}"
            )
        if name in out:
            raise ValueError(f"listener {name} is named twice")
        out[name] = (host, port)
    if not out:
        raise ValueError("no listener given")
    return out


def check_listeners(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parse_endpoints(value)
    except ValueError as exc:
        return f"is not a list of NAME://HOST:PORT listeners ({exc}), e.g. PLAINTEXT://0.0.0.0:9092"
    return None


def check_advertised(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        endpoints = parse_endpoints(value)
    except ValueError as exc:
        return f"is not a list of NAME://HOST:PORT endpoints ({exc})"
    for name, (host, _) in endpoints.items():
        if not host or _is_wildcard(host):
            return f"gives listener {name} the host {host!r}; advertise a host clients can reach"
    return None


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve(
    listeners: str | None,
    advertised: str | None,
    broker_addr: str,
    broker_host: str,
    broker_port: int,
) -> list[ListenerSpec]:
    """Every listener to bind, the first being the one other settings refer to. Without
    ``listeners`` there is one PLAINTEXT listener on ``broker_addr``, advertised as
    ``broker_host:broker_port``. A listener left out of ``advertised`` advertises its own host
    (``broker_host`` for an empty or wildcard one) and its port."""
    if listeners is None:
        return [ListenerSpec("PLAINTEXT", broker_addr, broker_host, broker_port)]
    wanted = parse_endpoints(advertised) if advertised else {}
    unknown = set(wanted) - set(parse_endpoints(listeners))
    if unknown:
        raise ValueError(f"advertised listener(s) {', '.join(sorted(unknown))} not in listeners")
    specs = []
    for name, (host, port) in parse_endpoints(listeners).items():
        bind_host = host or "0.0.0.0"
        own_host = broker_host if _is_wildcard(bind_host) else host
        adv_host, adv_port = wanted.get(name, (own_host, port))
        specs.append(ListenerSpec(name, _join(bind_host, port), adv_host, adv_port))
    return specs
