"""``kafscale quotas list|set|delete``: the client quotas the brokers enforce, through Kafka's
DescribeClientQuotas and AlterClientQuotas (KIP-546); what Kafka's kafka-configs sets with
--entity-type users, clients and ips.

A quota belongs to an entity: a user (its SASL name, or a client certificate's subject), a
client id, a user with a client id, or an IP address; or to a type's default
(--default-user, --default-client-id, --default-ip), which holds for every user, client id or
address without a quota of its own (the most specific quota applies, as in Kafka). Users and
client ids take producer_byte_rate and consumer_byte_rate (bytes per second) and
request_percentage (percent of one request handler thread); IP addresses take
connection_creation_rate (new connections per second). Listing needs DescribeConfigs on the
cluster and changing needs AlterConfigs on the cluster, or a super user (the brokers'
--super-users).
"""

from __future__ import annotations

import argparse
import ipaddress
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import output
from .args import plain
from .errors import EXIT_OK, CliError
from .kafka import add_connection_flags
from .quotas_wire import (
    ENTITY_TYPES,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    Component,
    Described,
    Entity,
    quota_client,
)
from .users import user_name

if TYPE_CHECKING:
    from .args import Subcommands

# Kafka error codes of these APIs (kafscale.errors.ErrorCode names the data plane's)
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42

LARGEST_WHOLE = 2**53  # the largest whole number a quota (a float64 on the wire) holds exactly
DEFAULT_NAME = "<default>"  # how Kafka's tools show a type's default entity
_LIST_HINT = "`kafscale quotas list` shows the quotas"


class _Any:
    """The value of a list filter flag given without a name (``--user``): any name."""

    def __repr__(self) -> str:
        return "any"


ANY = _Any()


# ---------------------------------------------------------------------------------------------
# argument types


def whole_rate(value: str) -> int:
    """argparse type of a byte or connection rate: a whole number, 1 to 2**53."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 0 < number <= LARGEST_WHOLE:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a whole number from 1 to {LARGEST_WHOLE}"
        )
    return number


def positive_number(value: str) -> float:
    """argparse type of request_percentage and controller_mutation_rate: a number above 0
    (fractions allowed, e.g. 12.5)."""
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not (number > 0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number above 0 (e.g. 50 or 12.5)")
    return number


def client_id(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError(
            "a client id must not be empty (--default-client-id is the default)"
        )
    return value


def ip_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an IP address (e.g. 10.0.0.7 or 2001:db8::7); "
            "--default-ip is the default"
        ) from None
    return value


@dataclass(frozen=True)
class Quota:
    """One quota key and its flag."""

    key: str  # Kafka's name, e.g. producer_byte_rate
    metavar: str
    kind: Callable[[str], float]
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


QUOTAS = (
    Quota("producer_byte_rate", "BYTES", whole_rate, "bytes per second the clients may produce"),
    Quota("consumer_byte_rate", "BYTES", whole_rate, "bytes per second the clients may fetch"),
    Quota(
        "request_percentage",
        "PERCENT",
        positive_number,
        "percent of one request handler thread the clients' requests may take (e.g. 50)",
    ),
    Quota(
        "connection_creation_rate",
        "RATE",
        whole_rate,
        "new connections per second from the address (--ip or --default-ip only)",
    ),
    Quota(
        "controller_mutation_rate",
        "RATE",
        positive_number,
        "Kafka's topic creations and deletions per second (KafScale refuses it)",
    ),
)
KEYS = tuple(q.key for q in QUOTAS)

# the entity flags: (entity type, attribute of the parsed arguments, metavar, type, noun, what)
_ENTITIES: tuple[tuple[str, str, str, Callable[[str], str], str, str], ...] = (
    ("user", "user", "NAME", user_name, "user", "a user: its SASL name or certificate subject"),
    ("client-id", "client_id", "ID", client_id, "client id", "a client id (clients' client.id)"),
    ("ip", "ip", "ADDRESS", ip_address, "IP address", "an IP address clients connect from"),
)


# ---------------------------------------------------------------------------------------------
# the parser


def _entity_flags(p: argparse.ArgumentParser, *, listing: bool) -> None:
    group = p.add_argument_group(
        "entity",
        "only the quotas of these entities; without any flag: every quota (a type given "
        "without a name: any name)"
        if listing
        else "whose quotas: --user, --client-id or both, or --ip alone",
    )
    for kind, attr, metavar, kind_type, noun, what in _ENTITIES:
        flags = group.add_mutually_exclusive_group()
        if listing:
            flags.add_argument(
                f"--{kind}",
                dest=attr,
                metavar=metavar,
                type=kind_type,
                nargs="?",
                const=ANY,
                help=f"{what}; without {metavar}: any {noun}",
            )
        else:
            flags.add_argument(f"--{kind}", dest=attr, metavar=metavar, type=kind_type, help=what)
        flags.add_argument(
            f"--default-{kind}",
            dest=f"default_{attr}",
            action="store_true",
            help=f"the default of every {noun} without a quota of its own",
        )


def register(commands: Subcommands) -> None:
    quotas = commands.add_parser(
        "quotas",
        help="list, set and delete client quotas",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = quotas.add_subparsers(dest="action", metavar="ACTION", title="actions")

    p = sub.add_parser(
        "list",
        help="the quotas, all of them or those of the entities named",
        description="List client quotas. Without flags: every quota. --user alice lists "
        "alice's quotas and those of alice with a client id; --strict only the entities "
        "made of exactly the types given (--user alice --strict: alice's own).",
    )
    _entity_flags(p, listing=True)
    p.add_argument(
        "--strict",
        action="store_true",
        help="only entities of exactly the types given (not a user together with a client id "
        "when only --user is given)",
    )
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list, parser=p)

    p = sub.add_parser(
        "set",
        help="set quotas of a user, client id or IP address",
        description="Set the quotas given for one entity; its other quotas stay as they are. "
        "E.g. `kafscale quotas set --user alice --producer-byte-rate 1048576`, "
        "`kafscale quotas set --default-ip --connection-creation-rate 20`.",
    )
    _entity_flags(p, listing=False)
    values = p.add_argument_group("quotas", "at least one")
    for q in QUOTAS:
        values.add_argument(q.flag, dest=q.key, metavar=q.metavar, type=q.kind, help=q.help)
    add_connection_flags(p)
    p.set_defaults(func=cmd_set, parser=p)

    p = sub.add_parser(
        "delete",
        help="delete quotas of a user, client id or IP address",
        description="Delete the named quotas of one entity (or --all of them); the entity "
        "then falls back to the next quota that applies (e.g. the default). E.g. "
        "`kafscale quotas delete --user alice --producer-byte-rate`.",
    )
    _entity_flags(p, listing=False)
    keys = p.add_argument_group("quotas", "the quotas to delete: at least one, or --all")
    for q in QUOTAS:
        keys.add_argument(q.flag, dest=q.key, action="store_true", help=f"delete {q.key}")
    keys.add_argument("--all", action="store_true", help="delete every quota of the entity")
    p.add_argument(
        "--if-exists",
        action="store_true",
        help="succeed when the entity has none of these quotas (nothing deleted)",
    )
    add_connection_flags(p)
    p.set_defaults(func=cmd_delete, parser=p)


# ---------------------------------------------------------------------------------------------
# entities


def _given(args: argparse.Namespace) -> list[tuple[str, str | _Any | None]]:
    """(entity type, name, ANY or None for the default) of each entity flag given."""
    given: list[tuple[str, str | _Any | None]] = []
    for kind, attr, *_ in _ENTITIES:
        if getattr(args, f"default_{attr}"):
            given.append((kind, None))
        elif getattr(args, attr) is not None:
            given.append((kind, getattr(args, attr)))
    kinds = {kind for kind, _ in given}
    if "ip" in kinds and kinds != {"ip"}:
        args.parser.error(
            "--ip and --default-ip go alone: IP quotas are per address, not per user or client id"
        )
    return given


def entity(args: argparse.Namespace) -> Entity:
    """The one entity ``set`` and ``delete`` change."""
    parts = [(kind, name) for kind, name in _given(args) if not isinstance(name, _Any)]
    if not parts:
        args.parser.error(
            "name the entity: --user NAME and/or --client-id ID (or their --default-...), "
            "or --ip ADDRESS (or --default-ip)"
        )
    return tuple(parts)


def components(args: argparse.Namespace) -> list[Component]:
    """The DescribeClientQuotas filter of ``list``'s flags."""
    filters = []
    for kind, name in _given(args):
        if name is None:
            filters.append(Component(kind, MATCH_DEFAULT))
        elif isinstance(name, _Any):
            filters.append(Component(kind, MATCH_ANY))
        else:
            filters.append(Component(kind, MATCH_EXACT, name))
    if args.strict and not filters:
        args.parser.error("--strict needs an entity flag (--user, --client-id, --ip, ...)")
    return filters


def exact(entity: Entity) -> list[Component]:
    """A filter that matches ``entity`` alone (with ``strict``)."""
    return [
        Component(kind, MATCH_DEFAULT) if name is None else Component(kind, MATCH_EXACT, name)
        for kind, name in entity
    ]


def entity_text(entity: Entity) -> str:
    """``user alice with client-id app``, ``the default user``, ``ip 10.0.0.7``."""
    return " with ".join(
        f"the default {kind}" if name is None else f"{kind} {name}" for kind, name in entity
    )


def number(value: float) -> int | float:
    """1048576.0 -> 1048576 (whole rates print without a fraction); 12.5 stays."""
    value = float(value)
    return int(value) if value.is_integer() and abs(value) <= LARGEST_WHOLE else value


def _entity_order(described: Described) -> tuple[Any, ...]:
    """Users, users with client ids, client ids, addresses; each default before the names."""
    kinds = tuple(kind for kind, _ in described.entity)
    order = [("user",), ("user", "client-id"), ("client-id",), ("ip",)]
    rank = order.index(kinds) if kinds in order else len(order)
    return (rank, kinds, [(name is not None, name or "") for _, name in described.entity])


def _key_order(key: str) -> tuple[int, str]:
    return (KEYS.index(key) if key in KEYS else len(KEYS), key)


# ---------------------------------------------------------------------------------------------
# errors


def explained(err: CliError, needs: str) -> CliError:
    """``err`` with the hint that fits these APIs' error codes; ``needs`` names the cluster
    permissions of the command (DescribeConfigs, AlterConfigs)."""
    hints = {
        INVALID_REQUEST: "`kafscale quotas set --help` lists the quotas and the entities each "
        "applies to",
        CLUSTER_AUTHORIZATION_FAILED: "log in (--command-config) as one of the brokers' "
        f"--super-users, or as a principal with an ACL allowing {needs} on the cluster",
    }
    hint = hints.get(err.code) if err.code is not None else None
    if hint is None or err.hint:
        return err
    return CliError(err.what, hint, code=err.code)


# ---------------------------------------------------------------------------------------------
# the commands


def cmd_list(args: argparse.Namespace) -> int:
    wanted = components(args)
    with quota_client(args) as client:
        try:
            described = client.describe(wanted, strict=args.strict, doing="listing the quotas")
        except CliError as err:
            raise explained(err, "DescribeConfigs") from None
    described.sort(key=_entity_order)
    if args.output == output.JSON:
        output.print_json(
            [
                {
                    "entity": {kind.replace("-", "_"): name for kind, name in d.entity},
                    "quotas": {k: number(d.values[k]) for k in sorted(d.values, key=_key_order)},
                }
                for d in described
            ]
        )
        return EXIT_OK
    rows: list[list[object]] = []
    for d in described:
        names = dict(d.entity)
        cells = [
            (DEFAULT_NAME if names[kind] is None else names[kind]) if kind in names else None
            for kind in ENTITY_TYPES
        ]
        for key in sorted(d.values, key=_key_order):
            rows.append([*cells, key, number(d.values[key])])
    output.print_table(["USER", "CLIENT-ID", "IP", "QUOTA", "VALUE"], rows)
    return EXIT_OK


def cmd_set(args: argparse.Namespace) -> int:
    target = entity(args)
    ops: list[tuple[str, float | None]] = [
        (q.key, getattr(args, q.key)) for q in QUOTAS if getattr(args, q.key) is not None
    ]
    if not ops:
        args.parser.error(f"give at least one quota: {', '.join(q.flag for q in QUOTAS)}")
    with quota_client(args) as client:
        try:
            client.alter(target, ops, doing="setting the quotas of", subject=entity_text(target))
        except CliError as err:
            raise explained(err, "AlterConfigs") from None
    for key, value in ops:
        assert value is not None
        print(f"set {key}={number(value)} for {entity_text(target)}")
    return EXIT_OK


def _missing(target: Entity, keys: Sequence[str]) -> str:
    what = "quotas" if not keys else f"{', '.join(keys)} quota" + ("s" if len(keys) > 1 else "")
    return f"{entity_text(target)} has no {what}"


def cmd_delete(args: argparse.Namespace) -> int:
    target = entity(args)
    named = [q.key for q in QUOTAS if getattr(args, q.key)]
    if args.all and named:
        args.parser.error("--all deletes every quota of the entity: leave out the quota flags")
    if not args.all and not named:
        args.parser.error(
            f"name the quotas to delete ({', '.join(q.flag for q in QUOTAS)}), or give --all"
        )
    with quota_client(args) as client:
        try:
            found = client.describe(
                exact(target),
                strict=True,
                doing="looking up the quotas of",
                subject=entity_text(target),
            )
        except CliError as err:
            raise explained(err, "DescribeConfigs and AlterConfigs") from None
        current = found[0].values if found else {}
        keys = sorted(current, key=_key_order) if args.all else named
        present = [k for k in keys if k in current]
        absent = [k for k in keys if k not in current]
        if not present:
            message = _missing(target, [] if args.all else absent) + "; nothing deleted"
            if args.if_exists:
                output.note(message)
                return EXIT_OK
            raise CliError(message, _LIST_HINT)
        for key in absent:
            output.note(_missing(target, [key]))
        try:
            client.alter(
                target,
                [(k, None) for k in present],
                doing="deleting the quotas of",
                subject=entity_text(target),
            )
        except CliError as err:
            raise explained(err, "AlterConfigs") from None
    for key in present:
        print(f"deleted {key}={number(current[key])} of {entity_text(target)}")
    return EXIT_OK
