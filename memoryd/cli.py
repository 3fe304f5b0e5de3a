"""The ``memoryd`` command line: a registry of subcommands, ``main`` and the exit statuses.

Each top-level command is a function decorated with :func:`command`; it receives the
subparsers object, adds its parser and sets ``handler=`` (a function ``(args) -> int``) with
``set_defaults``. Handlers may raise any :class:`~memoryd.errors.MemorydError`: :func:`main`
prints it on stderr and returns :func:`exit_status` of it. This is the one module that prints.

Exit statuses (SPEC §12): 0 ok, 1 error, 2 usage, 3 no daemon.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TypeAlias

from memoryd import __version__
from memoryd.core.config import as_dict, render_toml
from memoryd.errors import MemorydError, only_error
from memoryd.store import configfile

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_DAEMON = 3

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler = Callable[[argparse.Namespace], int]
Registrar = Callable[[Subcommands], None]

_COMMANDS: list[Registrar] = []


def command(register: Registrar) -> Registrar:
    """Register a top-level command (in the order commands appear in ``--help``)."""
    _COMMANDS.append(register)
    return register


def exit_status(error: MemorydError | None) -> int:
    """The process exit status for an error (None = success): the one place codes map to it."""
    if error is None:
        return EXIT_OK
    match error.code:
        case "daemon_not_running":
            return EXIT_NO_DAEMON
        case "invalid_params":
            return EXIT_USAGE
        case _:
            return EXIT_ERROR


def _load_commands() -> None:
    """Import the command modules: each registers its commands with :func:`command`.

    Imported here, not at module level, so a command module can import this one (and each
    other) in any order without an import cycle.
    """
    from memoryd import (  # noqa: F401
        cli_agents,
        cli_confluence,
        cli_daemon,
        cli_mcp,
        cli_memory,
        cli_sessions,
    )


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every registered command."""
    _load_commands()
    parser = argparse.ArgumentParser(
        prog="memoryd",
        description="Long-term markdown memory for coding agents, served by one daemon.",
    )
    parser.add_argument("--version", action="version", version=f"memoryd {__version__}")
    subcommands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands"
    )
    for register in _COMMANDS:
        register(subcommands)
    _finish(parser)
    return parser


def _finish(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand its one-line help as ``--help`` description, and its own parser.

    The parser is kept as the ``command_parser`` default so that :func:`main` reports an unknown
    argument with the usage of the command it was given to.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None and helps.get(name):
                    sub.description = str(helps[name]).capitalize() + "."
                sub.set_defaults(command_parser=sub)
                _finish(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status instead of exiting."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            command_parser: argparse.ArgumentParser = getattr(args, "command_parser", parser)
            command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse exits on usage errors (2), --help and --version (0)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler: Handler = args.handler
    try:
        return handler(args)
    except MemorydError as exc:
        return report(exc)
    except BaseExceptionGroup as group:  # from the daemon's task groups (`serve --foreground`)
        error = only_error(group)
        if error is None:
            raise
        return report(error)
    except TimeoutError as exc:  # the client's: the daemon did not answer in time
        print(f"memoryd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `memoryd config show | head`: the reader went away
        _silence_stdout()
        return EXIT_ERROR


def report(error: MemorydError) -> int:
    """Print an expected error on stderr (no traceback); return its exit status."""
    print(f"memoryd: error: {error}", file=sys.stderr)
    return exit_status(error)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# --- config ------------------------------------------------------------------------------------


@command
def _config_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("config", help="show or check the configuration")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser(
        "show", help="print the effective configuration and where each value came from"
    )
    show.add_argument("--config", metavar="F", help="config file (default: the usual location)")
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    show.set_defaults(handler=_config_show)
    check = actions.add_parser("check", help="validate a config file")
    check.add_argument("file", metavar="FILE", help="the TOML file to check")
    check.set_defaults(handler=_config_check)


def _config_show(args: argparse.Namespace) -> int:
    loaded = configfile.load(args.config)
    paths = {k: v for k, v in dataclasses.asdict(loaded.paths).items() if k != "home"}
    if args.json:
        report = {
            "config_file": loaded.config_file,
            "config_file_found": loaded.file_found,
            "paths": paths,
            "config": as_dict(loaded.config),
            "sources": dict(loaded.sources),
        }
        print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
        return EXIT_OK
    found = "" if loaded.file_found else " (not found: defaults apply)"
    print(f"# config file: {loaded.config_file}{found}")
    for name, path in paths.items():
        if name != "config_file":
            print(f"# {name.replace('_', ' ')}: {path}")
    print("# each value is followed by its source: default, file, env or flag\n")
    print(render_toml(loaded.resolved), end="")
    return EXIT_OK


def _config_check(args: argparse.Namespace) -> int:
    configfile.check(args.file)
    print(f"{args.file}: ok")
    return EXIT_OK
