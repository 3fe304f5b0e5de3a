"""The ``memoryd`` command line: the parser built from every command module, and ``main``.

The package (the one place that prints)::

    common.py      exit statuses, the ``@command`` registry, client helpers
    render.py      status, lock, dream and confluence lines for people (pure)
    memory.py      search, get, remember, reindex, calibrate
    sessions.py    flush, dream
    daemon.py      serve, stop, restart, status, install-service
    doctor.py      doctor: probes of everything memoryd needs
    hook.py        hook AGENT (one agent lifecycle event; always exits 0)
    ingest.py      ingest --format F FILE | --all DIR
    integrate.py   integrate AGENT (hooks and MCP server in the agent's config files)
    config.py      config show|check
    agents.py      agents list|resolve
    confluence.py  confluence run|status
    secrets.py     secrets scan|purge
    mcp.py         the MCP bridge
    completion.py  bash/zsh/fish completion scripts generated from this parser

Handlers may raise any :class:`~memoryd.errors.MemorydError`: :func:`main` prints it on stderr
and returns :func:`~memoryd.cli.common.exit_status` of it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from memoryd import __version__
from memoryd.cli.common import (
    COMMANDS,
    EXIT_ERROR,
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_USAGE,
    Handler,
    exit_status,
)
from memoryd.errors import MemorydError, only_error


def _load_commands() -> None:
    """Import the command modules: each registers its commands with :func:`command`.

    Imported here, not at module level: ``memoryd.cli.common`` (which every command module
    imports) loads this package first, and ``memoryd --version`` needs none of them.
    """
    from memoryd.cli import (  # noqa: F401
        agents,
        completion,
        config,
        confluence,
        daemon,
        doctor,
        hook,
        ingest,
        integrate,
        mcp,
        memory,
        secrets,
        sessions,
    )


__all__ = [
    "EXIT_ERROR",
    "EXIT_NO_DAEMON",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "exit_status",
    "main",
    "report",
]


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
    for register in COMMANDS:
        register(subcommands)
    _finish(parser)
    parser.set_defaults(root_parser=parser)  # for `completion`, which must not import this
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
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["hook"] and not {"-h", "--help"} & set(given):
        from memoryd.cli.hook import end_process, main_hook  # an agent hook: the short way

        code = main_hook(given[1:])
        if argv is None:  # the process itself (`memoryd hook`), not a caller of main()
            end_process(code)
        return code
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
