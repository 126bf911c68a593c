"""The ``kafscale`` command: administer a KafScale (or any Kafka) cluster over the Kafka
protocol, and inspect the segment objects it stores.

    kafscale topics   list | create | describe | alter | delete       (--bootstrap-server)
    kafscale groups   list | describe | delete | reset-offsets        (--bootstrap-server)
    kafscale brokers  list                                            (--bootstrap-server)
    kafscale users    list | set | delete                             (--bootstrap-server)
    kafscale acls     list | add | remove                             (--bootstrap-server)
    kafscale quotas   list | set | delete                             (--bootstrap-server)
    kafscale segments ls | dump | verify      (s3://BUCKET/NAMESPACE or DATA_DIR/NAMESPACE)

Exit codes: 0 success; 1 the command failed (the message on stderr says why and what to do),
or ``segments verify`` found problems; 2 bad arguments (a command or action left out: its help,
with the list of them, on stderr); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from . import acls, brokers, groups, quotas, segments, topics, users
from .args import plain
from .errors import EXIT_INTERRUPTED, EXIT_USAGE, CliError, print_error

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafscale",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    # Not required=True: argparse would then print only a usage line without the commands.
    # main() prints the help (that lists them) of a command or group given without one.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    topics.register(commands)
    groups.register(commands)
    brokers.register(commands)
    users.register(commands)
    acls.register(commands)
    quotas.register(commands)
    segments.register(commands)
    parser.set_defaults(func=None, command_parser=parser)
    for group in commands.choices.values():  # `kafscale topics` without an action
        group.set_defaults(command_parser=group)
    return parser


def missing_command(parser: argparse.ArgumentParser) -> int:
    """``kafscale`` or ``kafscale GROUP`` alone: the parser's help, which lists its commands
    (or actions), and argparse's error line on stderr; exit code 2 as for any missing
    argument."""
    parser.print_help(sys.stderr)
    what = "COMMAND" if parser.prog == "kafscale" else "ACTION"
    print(f"{parser.prog}: error: the following arguments are required: {what}", file=sys.stderr)
    return EXIT_USAGE


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kafscale")
    except PackageNotFoundError:
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version (0) or bad arguments (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    # every command's parser sets its handler as the default of ``func``
    command: Callable[[argparse.Namespace], int] | None = args.func
    if command is None:
        return missing_command(args.command_parser)
    try:
        return command(args)
    except CliError as err:
        print_error(err)
        return 1
    except KeyboardInterrupt:
        print("kafscale: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `kafscale ... | head`: the reader is gone. Point stdout at /dev/null so that the
        # interpreter's final flush does not fail again on the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
