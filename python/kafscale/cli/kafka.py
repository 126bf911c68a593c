"""The Kafka side of the CLI: one confluent-kafka AdminClient per command, and the translation
of librdkafka's errors into sentences that say what went wrong and what to do.

librdkafka never fails fast on an unreachable bootstrap server: it retries until the request
times out and logs each failed attempt to stderr. :meth:`Kafka.connect` instead routes its log
and error callbacks into this object, asks for metadata in growing steps, and gives up at once
when librdkafka reports every bootstrap broker down (connection refused, unknown host), or at
``--timeout`` for an address that does not answer at all.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from kafscale.errors import ErrorCode

from .errors import CliError

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 30.0
K = TypeVar("K")
T = TypeVar("T")

# librdkafka's local error codes (negative); broker codes are kafscale.errors.ErrorCode
_TRANSPORT = -195
_RESOLVE = -193
_AUTHENTICATION = -169
_ALL_BROKERS_DOWN = -187
_LOCAL_TIMED_OUT = -185
_UNSUPPORTED_FEATURE = -165

_UNREACHABLE = {_TRANSPORT, _RESOLVE, _ALL_BROKERS_DOWN}
_TIMEOUTS = {_LOCAL_TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT}
_UNSUPPORTED = {_UNSUPPORTED_FEATURE, ErrorCode.UNSUPPORTED_VERSION}

# what to do about a broker's answer, by error code
_HINTS: dict[int, str] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "`kafscale topics list` shows the topics that exist",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "topic names are 1-249 characters from a-z A-Z 0-9 . _ -",
    ErrorCode.TOPIC_ALREADY_EXISTS: "pick another name, or add --if-not-exists",
    ErrorCode.INVALID_PARTITIONS: (
        "partitions can only be added: ask for more than the topic has now"
    ),
    ErrorCode.INVALID_REPLICATION_FACTOR: (
        "KafScale keeps no replicas: leave --replication-factor out"
    ),
    ErrorCode.INVALID_CONFIG: "check the --config keys and values",
    ErrorCode.NON_EMPTY_GROUP: (
        "stop the group's consumers (or wait for their session timeout) and retry"
    ),
    ErrorCode.GROUP_ID_NOT_FOUND: "`kafscale groups list` shows the groups that exist",
}


def check_bootstrap(value: str) -> str:
    """argparse type of --bootstrap-server: HOST:PORT[,HOST:PORT...]."""
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not HOST:PORT[,HOST:PORT...] (e.g. 127.0.0.1:9092)"
            )
    return value


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        type=check_bootstrap,
        default=DEFAULT_BOOTSTRAP,
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        type=read_command_config,
        default={},
        help="client properties for the connection, one key=value per line as in Kafka's "
        "tools, with librdkafka's names: security.protocol=SSL, ssl.ca.location=ca.pem, "
        "ssl.certificate.location=client.pem, ssl.key.location=client.key; for SASL "
        "security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username=NAME, "
        "sasl.password=PASSWORD",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_float,
        default=DEFAULT_TIMEOUT_S,
        help=f"how long to wait for the brokers' answers (default {DEFAULT_TIMEOUT_S:g})",
    )


# Properties the CLI sets itself: a command config may not change them.
_OWN_PROPERTIES = ("bootstrap.servers", "client.id", "logger", "error_cb", "socket.timeout.ms")


def read_command_config(path: str) -> dict[str, str]:
    """argparse type of --command-config: a properties file (``key=value`` or ``key: value``
    lines; ``#`` and ``!`` start comments) of librdkafka client properties."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=") if "=" in line else line.partition(":")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{path} line {number}: {raw!r} is not key=value")
        if key.strip() in _OWN_PROPERTIES:
            raise argparse.ArgumentTypeError(
                f"{path} line {number}: {key.strip()} is set by the command itself"
            )
        properties[key.strip()] = value.strip()
    return properties


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return number


class KafkaErrorLike(Protocol):
    """What is read of librdkafka's KafkaError (confluent-kafka has no type information, and
    :class:`_Timeout` stands in for one)."""

    def code(self) -> int: ...
    def str(self) -> str: ...


class _Collect(logging.Handler):
    """Keeps librdkafka's log lines (shown with the error when a connection fails)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Kafka:
    """An AdminClient for one command, plus what librdkafka reported on the side."""

    def __init__(
        self, bootstrap: str, timeout: float, properties: dict[str, str] | None = None
    ) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.timeout = timeout
        self.errors: list[KafkaErrorLike] = []  # KafkaError objects from error_cb
        self._log = _Collect()
        logger = logging.getLogger(f"kafscale.cli.librdkafka.{id(self)}")
        logger.propagate = False  # librdkafka's own lines stay out of the user's terminal
        logger.addHandler(self._log)
        config = {
            "bootstrap.servers": bootstrap,
            "client.id": "kafscale-cli",
            "logger": logger,
            "error_cb": self.errors.append,
            # librdkafka's bounds for socket.timeout.ms: 10 ms .. 5 minutes
            "socket.timeout.ms": min(max(int(timeout * 1000), 10), 300_000),
            **(properties or {}),
        }
        try:
            self.admin = AdminClient(config)
        except KafkaException as exc:
            raise CliError(
                f"cannot set up a Kafka client for {bootstrap}: {exc.args[0].str()}",
                "check --bootstrap-server and --command-config",
            ) from None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Kafka:
        return cls(args.bootstrap_server, args.timeout, args.command_config)

    # --- reaching the cluster ------------------------------------------------------------------

    def unreachable(self, detail: str | None) -> CliError:
        why = f" ({detail})" if detail else ""
        return CliError(
            f"cannot reach the Kafka bootstrap server {self.bootstrap}{why}",
            "check --bootstrap-server and that the broker runs and listens there",
        )

    def authentication_failed(self, err: KafkaErrorLike) -> CliError:
        return CliError(
            f"the brokers at {self.bootstrap} refused the client's authentication ({err.str()})",
            "check that --bootstrap-server is a SASL listener and the security.protocol, "
            "sasl.mechanism, sasl.username and sasl.password in --command-config",
        )

    def _connection_detail(self) -> str | None:
        """The most telling thing librdkafka said about the failed connections."""
        for err in self.errors:
            if err.code() in (_TRANSPORT, _RESOLVE):
                return err.str().split(": ", 1)[-1]
        return self._log.lines[-1] if self._log.lines else None

    def metadata(self) -> ClusterMetadata:
        """ClusterMetadata of every topic and broker (Metadata request without topic names, so
        nothing gets auto-created). Fails fast when no bootstrap broker can be connected."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout
        step = 0.5
        while True:
            left = deadline - time.monotonic()
            try:
                return self.admin.list_topics(timeout=max(0.05, min(step, left)))
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() not in _UNREACHABLE | _TIMEOUTS:
                    raise self.failure(err, "asking the brokers for metadata") from None
            self.admin.poll(0)  # delivers error_cb
            refused = next((e for e in self.errors if e.code() == _AUTHENTICATION), None)
            if refused is not None:  # librdkafka would retry the same credentials until timeout
                raise self.authentication_failed(refused)
            down = any(e.code() == _ALL_BROKERS_DOWN for e in self.errors)
            if down or time.monotonic() >= deadline:
                detail = self._connection_detail()
                if not down and detail is None:
                    detail = f"no answer within {self.timeout:g}s"
                raise self.unreachable(detail)
            step *= 2

    # --- answers -------------------------------------------------------------------------------

    def failure(self, err: KafkaErrorLike, doing: str, subject: str | None = None) -> CliError:
        """A CliError for librdkafka's KafkaError ``err`` raised while ``doing``."""
        code = err.code()
        about = f" {subject}" if subject else ""
        if code in _UNREACHABLE:
            return self.unreachable(err.str())
        if code == _AUTHENTICATION:
            return self.authentication_failed(err)
        if code in _TIMEOUTS:
            return CliError(
                f"no answer from the brokers at {self.bootstrap} within {self.timeout:g}s "
                f"while {doing}{about}",
                "the broker may be overloaded or a partition changing owner: retry, or give "
                "more --timeout",
            )
        if code in _UNSUPPORTED:
            return CliError(
                f"the brokers at {self.bootstrap} do not support {doing}{about}: {err.str()}",
                "KafScale serves the APIs that ApiVersions lists (see docs/compatibility.md); "
                "this operation needs one it does not",
            )
        return CliError(f"{doing}{about} failed: {err.str()}", _HINTS.get(code), code=code)

    def result(self, future: Future[T], doing: str, subject: str | None = None) -> T:
        """The future's result, or a CliError that explains librdkafka's failure."""
        from confluent_kafka import KafkaException

        try:
            return future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            raise self.failure(exc.args[0], doing, subject) from None
        except TimeoutError:
            raise self.failure(_Timeout(), doing, subject) from None

    def results(
        self, futures: Mapping[K, Future[T]], doing: str
    ) -> dict[K, tuple[T | None, CliError | None]]:
        """{key: (result, None) or (None, error)} for independent per-item futures."""
        out: dict[K, tuple[T | None, CliError | None]] = {}
        for key, future in futures.items():
            try:
                out[key] = (self.result(future, doing, str(key)), None)
            except CliError as exc:
                out[key] = (None, exc)
        return out


class _Timeout:
    """Stands in for librdkafka's KafkaError when the future itself timed out."""

    def code(self) -> int:
        return _LOCAL_TIMED_OUT

    def str(self) -> str:
        return "timed out"
