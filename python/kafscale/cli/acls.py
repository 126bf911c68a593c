"""``kafscale acls list|add|remove``: the ACLs the brokers check every request against (with
``--authorizer acl``), through Kafka's DescribeAcls, CreateAcls and DeleteAcls, with the flags
of Kafka's kafka-acls tool.

An ACL allows or denies a principal (``User:alice``; a client certificate's subject is
``User:CN=…``; a client that did not log in is ``User:ANONYMOUS``) an operation on a resource
(a topic, a group, the cluster or a transactional id), named literally or by prefix, from a
host (``*``: any). Deny wins over allow; Read, Write, Delete and Alter imply Describe. Listing
needs Describe on the cluster and changing needs Alter on the cluster, or a super user
(the brokers' --super-users).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from . import output
from .args import plain
from .errors import EXIT_FAILED, EXIT_OK, CliError, print_error
from .kafka import Kafka, add_connection_flags

if TYPE_CHECKING:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    from .args import Subcommands

# AclBinding or AclBindingFilter: what ``_combinations`` makes
_Acl = TypeVar("_Acl")

# Kafka error codes of these APIs (kafscale.errors.ErrorCode names the data plane's)
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
SECURITY_DISABLED = 54

CLUSTER_NAME = "kafka-cluster"
ANY_HOST = "*"

# --operation values: Kafka's operations as kafka-acls spells them
OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)

_LIST_HINT = "`kafscale acls list` shows the ACLs"
_HINTS: dict[int, str] = {
    # KafScale's own message says this already (then the hint is left out, see CliError)
    SECURITY_DISABLED: "start the brokers with --authorizer acl",
    CLUSTER_AUTHORIZATION_FAILED: (
        "log in (--command-config) as one of the brokers' --super-users, or as a principal "
        "with an ACL allowing Alter on the cluster (Describe to list)"
    ),
    INVALID_REQUEST: (
        "check --principal (TYPE:NAME, e.g. User:alice), --host (an IP address or *) and the "
        "resource (the cluster is named kafka-cluster)"
    ),
}


# ---------------------------------------------------------------------------------------------
# argument types


def principal(value: str) -> str:
    """argparse type of --principal: ``TYPE:NAME`` (``User:alice``, ``User:CN=alice,O=org``)."""
    kind, sep, name = value.partition(":")
    if not sep or not kind.strip() or not name.strip():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a principal: write TYPE:NAME, e.g. User:alice"
        )
    return value


def operation_name(value: str) -> str:
    """argparse type of --operation: one of OPERATIONS, in any case, with or without ``_`` or
    ``-`` between the words (``describe-configs``, ``DESCRIBE_CONFIGS``)."""
    wanted = value.replace("_", "").replace("-", "").lower()
    for name in OPERATIONS:
        if name.lower() == wanted:
            return name
    raise argparse.ArgumentTypeError(
        f"{value!r} is not an operation: give one of {', '.join(OPERATIONS)}"
    )


def resource_name(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("a resource name must not be empty")
    return value


def host_name(value: str) -> str:
    if not value or value != value.strip():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a host: give an IP address, or * for any host"
        )
    return value


# ---------------------------------------------------------------------------------------------
# the parser


def _repeatable(
    p: argparse.ArgumentParser,
    flag: str,
    kind: Callable[[str], str],
    metavar: str,
    help: str,
    *,
    required: bool = False,
) -> None:
    """A flag that may be given many times, its values in a list (empty when not given)."""
    # Not given: an empty list, unless required (argparse's default, None, is never seen then).
    p.add_argument(
        flag,
        action="append",
        type=kind,
        metavar=metavar,
        help=help,
        required=required,
        default=None if required else [],
    )


def _resource_flags(p: argparse.ArgumentParser, patterns: list[str], default: str) -> None:
    _repeatable(p, "--topic", resource_name, "NAME", "a topic (repeatable; * is every topic)")
    _repeatable(
        p, "--group", resource_name, "NAME", "a consumer group (repeatable; * is every group)"
    )
    _repeatable(p, "--transactional-id", resource_name, "ID", "a transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help=f"the cluster ({CLUSTER_NAME})")
    p.add_argument(
        "--resource-pattern-type",
        choices=patterns,
        type=str.lower,
        default=default,
        help=f"how the names are matched (default {default}): literal names one resource "
        "(or * every one), prefixed every resource whose name starts with it"
        + (
            "; any takes ACLs of either pattern type, match those that apply to the named "
            "resource (its literal ACLs, * and the prefixes of its name)"
            if "match" in patterns
            else ""
        ),
    )


def _permission_flags(p: argparse.ArgumentParser, *, required: bool) -> None:
    group = p.add_mutually_exclusive_group(required=required)
    group.add_argument(
        "--allow",
        dest="permission",
        action="store_const",
        const="ALLOW",
        help="ACLs that allow",
    )
    group.add_argument(
        "--deny", dest="permission", action="store_const", const="DENY", help="ACLs that deny"
    )


def _filter_flags(p: argparse.ArgumentParser) -> None:
    _repeatable(
        p, "--principal", principal, "P", "only the ACLs of this principal, TYPE:NAME (repeatable)"
    )
    _repeatable(
        p,
        "--host",
        host_name,
        "HOST",
        "only the ACLs of this host (repeatable; * is the ACLs for any host)",
    )
    _repeatable(
        p,
        "--operation",
        operation_name,
        "OPERATION",
        "only the ACLs of this operation (repeatable)",
    )


def register(commands: Subcommands) -> None:
    acls = commands.add_parser(
        "acls",
        help="list, add and remove ACLs",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = acls.add_subparsers(dest="action", metavar="ACTION", title="actions")

    p = sub.add_parser(
        "list",
        help="the ACLs, all of them or those the flags select",
        description="List ACLs. Without flags: every ACL; each flag narrows the list (a "
        "resource flag with --resource-pattern-type match lists every ACL that applies to "
        "that resource).",
    )
    _filter_flags(p)
    _permission_flags(p, required=False)
    _resource_flags(p, ["any", "match", "literal", "prefixed"], "any")
    add_connection_flags(p)
    output.add_output_flag(p)
    p.set_defaults(func=cmd_list, parser=p)

    p = sub.add_parser(
        "add",
        help="allow or deny principals operations on resources",
        description="Add one ACL for every combination of --principal, --host, --operation and "
        "resource, e.g. `kafscale acls add --allow --principal User:alice --operation Read "
        "--operation Describe --topic orders --group orders-app`.",
    )
    _repeatable(
        p,
        "--principal",
        principal,
        "P",
        "TYPE:NAME, e.g. User:alice or User:CN=alice,O=org (repeatable; User:* is anyone)",
        required=True,
    )
    _repeatable(
        p, "--host", host_name, "HOST", "the client's IP address (repeatable; default *, any host)"
    )
    _repeatable(
        p,
        "--operation",
        operation_name,
        "OPERATION",
        f"repeatable: {', '.join(OPERATIONS)}",
        required=True,
    )
    _permission_flags(p, required=True)
    _resource_flags(p, ["literal", "prefixed"], "literal")
    add_connection_flags(p)
    p.set_defaults(func=cmd_add, parser=p)

    p = sub.add_parser(
        "remove",
        help="remove the ACLs of resources, all or those the flags select",
        description="Remove the ACLs of the named resources; --principal, --host, "
        "--operation and --allow/--deny narrow what is removed (each defaults to any).",
    )
    _filter_flags(p)
    _permission_flags(p, required=False)
    _resource_flags(p, ["any", "match", "literal", "prefixed"], "literal")
    p.add_argument(
        "--if-exists", action="store_true", help="succeed when no ACL matches (nothing removed)"
    )
    add_connection_flags(p)
    p.set_defaults(func=cmd_remove, parser=p)


# ---------------------------------------------------------------------------------------------
# bindings and filters


def resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (resource type name, resource name) pairs the flags name, in the order given."""
    named = [("TOPIC", n) for n in args.topic]
    named += [("GROUP", n) for n in args.group]
    named += [("TRANSACTIONAL_ID", n) for n in args.transactional_id]
    if args.cluster:
        named.append(("CLUSTER", CLUSTER_NAME))
    return list(dict.fromkeys(named))


def _resource_type(name: str) -> ResourceType:
    from confluent_kafka.admin import ResourceType

    # librdkafka calls the cluster resource BROKER (code 4, Kafka's CLUSTER)
    return ResourceType.BROKER if name == "CLUSTER" else ResourceType[name]


def _resource_type_name(restype: ResourceType) -> str:
    return "CLUSTER" if restype.name == "BROKER" else str(restype.name)


def _operation(name: str | None) -> AclOperation:
    from confluent_kafka.admin import AclOperation

    if name is None:
        return AclOperation.ANY
    upper = "".join(f"_{c}" if c.isupper() else c.upper() for c in name).lstrip("_")
    return AclOperation[upper]


def _permission(name: str | None) -> AclPermissionType:
    from confluent_kafka.admin import AclPermissionType

    return AclPermissionType[name or "ANY"]


def _pattern(name: str) -> ResourcePatternType:
    from confluent_kafka.admin import ResourcePatternType

    return ResourcePatternType[name.upper()]


def _combinations(
    make: Callable[..., _Acl],
    args: argparse.Namespace,
    named: Sequence[tuple[ResourceType, str | None]],
    principals: Sequence[str | None],
    hosts: Sequence[str | None],
    operations: Sequence[str | None],
) -> list[_Acl]:
    """``make`` (AclBinding or AclBindingFilter) of every combination of a (resource type,
    name), principal, host and operation, each list without repeats, in the order given;
    pattern type and permission from the flags."""
    return [
        make(
            restype,
            name,
            _pattern(args.resource_pattern_type),
            who,
            host,
            _operation(op),
            _permission(args.permission),
        )
        for (restype, name), who, host, op in itertools.product(
            named, *(list(dict.fromkeys(values)) for values in (principals, hosts, operations))
        )
    ]


def bindings(args: argparse.Namespace) -> list[AclBinding]:
    """One AclBinding per principal, host, operation and resource."""
    from confluent_kafka.admin import AclBinding

    named = [(_resource_type(kind), name) for kind, name in resources(args)]
    hosts = args.host or [ANY_HOST]
    return _combinations(AclBinding, args, named, args.principal, hosts, args.operation)


def filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """AclBindingFilters for every combination the flags give (a flag not given: any)."""
    from confluent_kafka.admin import AclBindingFilter, ResourceType

    named: list[tuple[ResourceType, str | None]] = [
        (_resource_type(kind), name) for kind, name in resources(args)
    ]
    return _combinations(
        AclBindingFilter,
        args,
        named or [(ResourceType.ANY, None)],
        args.principal or [None],
        args.host or [None],
        args.operation or [None],
    )


def row(binding: AclBinding) -> dict[str, str]:
    """An AclBinding as a row of the listing (Kafka's upper-case names)."""
    return {
        "principal": str(binding.principal),
        "host": str(binding.host),
        "operation": str(binding.operation.name),
        "permission": str(binding.permission_type.name),
        "resource_type": _resource_type_name(binding.restype),
        "resource_name": str(binding.name),
        "pattern_type": str(binding.resource_pattern_type.name),
    }


def sentence(binding: AclBinding) -> str:
    """``ALLOW READ on TOPIC orders (LITERAL) for User:alice from *``."""
    r = row(binding)
    return (
        f"{r['permission']} {r['operation']} on {r['resource_type']} {r['resource_name']} "
        f"({r['pattern_type']}) for {r['principal']} from {r['host']}"
    )


def _sort_key(r: dict[str, str]) -> tuple[str, ...]:
    return (
        r["resource_type"],
        r["pattern_type"],
        r["resource_name"],
        r["principal"],
        r["host"],
        r["operation"],
        r["permission"],
    )


def explained(err: CliError) -> CliError:
    """``err`` with the hint that fits these APIs' error codes."""
    hint = _HINTS.get(err.code) if err.code is not None else None
    if hint is None or err.hint:
        return err
    return CliError(err.what, hint, code=err.code)


def _connect(args: argparse.Namespace, *, needs_resource: bool) -> Kafka:
    """The brokers, once the flags pass the checks argparse cannot make: a resource named
    where the command needs one, and for --resource-pattern-type match."""
    if not resources(args):
        if needs_resource:
            args.parser.error("name a resource: --topic, --group, --transactional-id or --cluster")
        if args.resource_pattern_type == "match":
            args.parser.error(
                "--resource-pattern-type match needs a resource: --topic, --group, "
                "--transactional-id or --cluster"
            )
    kafka = Kafka.from_args(args)
    kafka.metadata()
    return kafka


# ---------------------------------------------------------------------------------------------
# the commands


def cmd_list(args: argparse.Namespace) -> int:
    kafka = _connect(args, needs_resource=False)
    found: dict[tuple[str, ...], dict[str, str]] = {}
    for acl_filter in filters(args):
        future = kafka.admin.describe_acls(acl_filter, request_timeout=kafka.timeout)
        try:
            described = kafka.result(future, "listing the ACLs")
        except CliError as err:
            raise explained(err) from None
        for binding in described:
            r = row(binding)
            found[_sort_key(r)] = r
    rows = [found[k] for k in sorted(found)]
    if not rows:
        check_empty_listing(kafka)
    if args.output == output.JSON:
        output.print_json(rows)
    else:
        output.print_table(
            ["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "NAME", "PATTERN"],
            [
                [
                    r["principal"],
                    r["host"],
                    r["operation"],
                    r["permission"],
                    r["resource_type"],
                    r["resource_name"],
                    r["pattern_type"],
                ]
                for r in rows
            ],
        )
    return EXIT_OK


def check_empty_listing(kafka: Kafka) -> None:
    """Raise the refusal an empty listing may hide. librdkafka drops DescribeAcls' error code
    (2.12 does), so a principal that may not Describe the cluster, and brokers without an
    authorizer, both get an empty list. DescribeCluster tells the cluster operations the
    principal may do (none without Describe), and a DeleteAcls whose filter matches nothing
    answers SECURITY_DISABLED when there is no authorizer (it deletes nothing either way)."""
    import uuid

    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    future = kafka.admin.describe_cluster(
        include_authorized_operations=True, request_timeout=kafka.timeout
    )
    cluster = kafka.result(future, "asking the brokers what this principal may do")
    # librdkafka gives None for "no operations" (and for a broker that tells none)
    allowed = cluster.authorized_operations or []
    if not {AclOperation.DESCRIBE, AclOperation.ALL} & set(allowed):
        raise explained(
            CliError(
                "the brokers list no ACLs to this principal: it may not Describe the cluster",
                code=CLUSTER_AUTHORIZATION_FAILED,
            )
        )
    nobody = f"kafscale-acls-probe-{uuid.uuid4().hex}"
    probe = AclBindingFilter(
        ResourceType.TOPIC,
        nobody,
        ResourcePatternType.LITERAL,
        f"User:{nobody}",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    futures = kafka.admin.delete_acls([probe], request_timeout=kafka.timeout)
    try:
        kafka.result(futures[probe], "listing the ACLs")
    except CliError as err:
        if err.code == SECURITY_DISABLED:
            raise explained(err) from None
        # anything else (no Alter on the cluster, say) does not make the empty list wrong


def cmd_add(args: argparse.Namespace) -> int:
    kafka = _connect(args, needs_resource=True)
    new = bindings(args)
    futures = kafka.admin.create_acls(new, request_timeout=kafka.timeout)
    failed = False
    for binding in new:
        try:
            kafka.result(futures[binding], "adding the ACL", sentence(binding))
        except CliError as err:
            print_error(explained(err))
            failed = True
            continue
        print(f"added {sentence(binding)}")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_remove(args: argparse.Namespace) -> int:
    kafka = _connect(args, needs_resource=True)
    wanted = filters(args)
    futures = kafka.admin.delete_acls(wanted, request_timeout=kafka.timeout)
    removed: dict[tuple[str, ...], AclBinding] = {}
    for acl_filter in wanted:
        try:
            deleted = kafka.result(futures[acl_filter], "removing ACLs")
        except CliError as err:
            raise explained(err) from None
        for binding in deleted:
            removed[_sort_key(row(binding))] = binding
    if not removed:
        if args.if_exists:
            output.note("no ACL matches; nothing removed")
            return EXIT_OK
        raise CliError("no ACL matches; nothing removed", _LIST_HINT)
    for key in sorted(removed):
        print(f"removed {sentence(removed[key])}")
    return EXIT_OK
