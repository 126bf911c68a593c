"""``kafscale users list|set|delete``: the SASL/SCRAM credentials the brokers keep in their
metadata store, through Kafka's DescribeUserScramCredentials and AlterUserScramCredentials
(KIP-554).

A user may hold one credential per mechanism (SCRAM-SHA-256, SCRAM-SHA-512); it logs in with
SCRAM, or with PLAIN and the same password. The password of ``set`` comes from standard input
when that is a pipe (one line), otherwise from a prompt (twice, not echoed); never from the
command line, where other users of the machine could read it. Users of the brokers'
--sasl-users-file live in that file and are neither listed nor changed here.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import TYPE_CHECKING, TypedDict

from . import output
from .args import plain, positive_int
from .errors import EXIT_OK, CliError
from .kafka import Kafka, add_connection_flags

if TYPE_CHECKING:
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialsDescription

    from .args import Subcommands

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 8192

# Kafka error codes of these APIs (kafscale.errors.ErrorCode names the data plane's)
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93

_LIST_HINT = "`kafscale users list` shows the users and their mechanisms"
_HINTS: dict[int, str] = {
    RESOURCE_NOT_FOUND: _LIST_HINT,
    UNSUPPORTED_SASL_MECHANISM: f"give one of {', '.join(MECHANISMS)} as --mechanism",
    UNACCEPTABLE_CREDENTIAL: (
        "check the user name and --iterations (Kafka takes 4096 to 16384 iterations)"
    ),
    DUPLICATE_RESOURCE: "name each user and mechanism once",
}


def user_name(value: str) -> str:
    """argparse type of a user name: not empty, no surrounding blanks."""
    if not value or value != value.strip():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a user name: give a non-empty name without surrounding blanks"
        )
    return value


def register(commands: Subcommands) -> None:
    users = commands.add_parser(
        "users",
        help="list, set and delete SASL/SCRAM users",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = users.add_subparsers(dest="action", metavar="ACTION", title="actions")

    p = sub.add_parser("list", help="users with their SCRAM mechanisms and iteration counts")
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "set",
        help="create a user's SCRAM credential or change its password",
        description="Create or replace the SCRAM credential of NAME for one mechanism. The "
        "password is read from standard input when it is a pipe (one line, e.g. "
        '`printf %s "$PASSWORD" | kafscale users set NAME ...`), otherwise asked for '
        "twice without echo.",
    )
    p.add_argument("name", type=user_name, metavar="NAME")
    p.add_argument(
        "--mechanism", required=True, choices=MECHANISMS, help="the credential's SCRAM mechanism"
    )
    p.add_argument(
        "--iterations",
        type=positive_int,
        default=DEFAULT_ITERATIONS,
        metavar="N",
        help=f"PBKDF2 iterations of the credential (default {DEFAULT_ITERATIONS}; "
        "Kafka takes 4096 to 16384)",
    )
    add_connection_flags(p)
    p.set_defaults(func=cmd_set)

    p = sub.add_parser("delete", help="delete a user's SCRAM credentials")
    p.add_argument("name", type=user_name, metavar="NAME")
    p.add_argument(
        "--mechanism",
        choices=MECHANISMS,
        help="delete only this mechanism's credential (default: every mechanism of the user)",
    )
    add_connection_flags(p)
    p.set_defaults(func=cmd_delete)


# ---------------------------------------------------------------------------------------------
# passwords


def read_password(name: str) -> str:
    """The new password: one line from standard input when it is not a terminal, otherwise
    asked twice without echo. A CliError when there is none or the two differ."""
    stdin = sys.stdin
    if stdin is None:
        raise CliError(
            "no password: standard input is closed",
            "pipe the password on standard input, or run the command in a terminal",
        )
    if not stdin.isatty():
        return password_from_pipe(stdin.read())
    try:
        first = getpass.getpass(f"Password for {name}: ")
        second = getpass.getpass(f"Password for {name} (again): ")
    except EOFError:
        raise CliError("no password given; nothing changed", "type the password twice") from None
    if first != second:
        raise CliError("the two passwords differ; nothing changed", "run the command again")
    if not first:
        raise CliError("the password is empty; nothing changed", "type a password")
    return first


def password_from_pipe(text: str) -> str:
    """The password piped on standard input: one line; its line ending is not part of it."""
    password = text.removesuffix("\n").removesuffix("\r")
    if "\n" in password or "\r" in password:
        raise CliError(
            "standard input holds more than one line; nothing changed",
            "pipe the password alone, on one line",
        )
    if not password:
        raise CliError(
            "standard input holds no password; nothing changed",
            'pipe the password, e.g. printf %s "$PASSWORD" | kafscale users set ...',
        )
    return password


# ---------------------------------------------------------------------------------------------
# the commands


def mechanism_name(mechanism: ScramMechanism) -> str:
    """confluent-kafka's ScramMechanism.SCRAM_SHA_256 -> "SCRAM-SHA-256"."""
    return str(mechanism.name).replace("_", "-")


def scram_mechanism(name: str) -> ScramMechanism:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def explained(err: CliError) -> CliError:
    """``err`` with the hint that fits these APIs' error codes."""
    hint = _HINTS.get(err.code) if err.code is not None else None
    if hint is None or err.hint:
        return err
    return CliError(err.what, hint, code=err.code)


class CredentialRow(TypedDict):
    user: str
    mechanism: str
    iterations: int


def credential_rows(
    described: dict[str, UserScramCredentialsDescription],
) -> list[CredentialRow]:
    """DescribeUserScramCredentials' answer as one row per user and mechanism."""
    rows: list[CredentialRow] = [
        {
            "user": name,
            "mechanism": mechanism_name(info.mechanism),
            "iterations": info.iterations,
        }
        for name, description in described.items()
        for info in description.scram_credential_infos
    ]
    return sorted(rows, key=lambda r: (r["user"], r["mechanism"]))


def cmd_list(args: argparse.Namespace) -> int:
    kafka = Kafka.from_args(args)
    kafka.metadata()
    future = kafka.admin.describe_user_scram_credentials(None, request_timeout=kafka.timeout)
    try:
        described = kafka.result(future, "listing the SCRAM users")
    except CliError as err:
        raise explained(err) from None
    rows = credential_rows(described)
    if args.output == output.JSON:
        output.print_json(rows)
    else:
        output.print_table(
            ["USER", "MECHANISM", "ITERATIONS"],
            [[r["user"], r["mechanism"], r["iterations"]] for r in rows],
        )
    return EXIT_OK


def cmd_set(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    password = read_password(args.name)  # before connecting: a typo costs no round trip
    kafka = Kafka.from_args(args)
    kafka.metadata()
    upsertion = UserScramCredentialUpsertion(
        args.name,
        ScramCredentialInfo(scram_mechanism(args.mechanism), args.iterations),
        password.encode(),
    )
    futures = kafka.admin.alter_user_scram_credentials([upsertion], request_timeout=kafka.timeout)
    try:
        kafka.result(futures[args.name], "setting the SCRAM credential of user", args.name)
    except CliError as err:
        raise explained(err) from None
    print(f"set the {args.mechanism} credential of user {args.name} ({args.iterations} iterations)")
    return EXIT_OK


def mechanisms_of(kafka: Kafka, name: str) -> list[str]:
    """The mechanisms ``name`` has credentials for; a CliError when it has none."""
    futures = kafka.admin.describe_user_scram_credentials([name], request_timeout=kafka.timeout)
    try:
        description = kafka.result(futures[name], "looking up user", name)
    except CliError as err:
        if err.code == RESOURCE_NOT_FOUND:
            raise CliError(
                f"user {name} has no SCRAM credentials",
                f"{_LIST_HINT}; users of the brokers' --sasl-users-file are changed in that file",
                code=err.code,
            ) from None
        raise explained(err) from None
    found = sorted(mechanism_name(i.mechanism) for i in description.scram_credential_infos)
    if not found:
        raise CliError(f"user {name} has no SCRAM credentials", _LIST_HINT, code=RESOURCE_NOT_FOUND)
    return found


def cmd_delete(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import UserScramCredentialDeletion

    kafka = Kafka.from_args(args)
    kafka.metadata()
    mechanisms = [args.mechanism] if args.mechanism else mechanisms_of(kafka, args.name)
    deletions = [UserScramCredentialDeletion(args.name, scram_mechanism(m)) for m in mechanisms]
    futures = kafka.admin.alter_user_scram_credentials(deletions, request_timeout=kafka.timeout)
    try:
        kafka.result(futures[args.name], "deleting the SCRAM credentials of user", args.name)
    except CliError as err:
        if err.code == RESOURCE_NOT_FOUND and args.mechanism:
            raise CliError(
                f"user {args.name} has no {args.mechanism} credential; nothing changed",
                _LIST_HINT,
                code=err.code,
            ) from None
        raise explained(err) from None
    for m in mechanisms:
        print(f"deleted the {m} credential of user {args.name}")
    return EXIT_OK
