"""What every CLI command module shares: exit statuses, the command registry, client helpers.

Each top-level command is a function decorated with :func:`command`; it receives the
subparsers object, adds its parser and sets ``handler=`` (a function ``(args) -> int``) with
``set_defaults``. Exit statuses (SPEC §12): 0 ok, 1 error, 2 usage, 3 no daemon;
:func:`exit_status` is the one place an error's code maps to one.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from memoryd.client import Client
from memoryd.errors import MemorydError
from memoryd.store import configfile

if TYPE_CHECKING:
    from datetime import datetime

EXIT_OK = 0


EXIT_ERROR = 1


EXIT_USAGE = 2


EXIT_NO_DAEMON = 3


Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


Handler = Callable[[argparse.Namespace], int]


Registrar = Callable[[Subcommands], None]


COMMANDS: list[Registrar] = []


def command(register: Registrar) -> Registrar:
    """Register a top-level command (in the order commands appear in ``--help``)."""
    COMMANDS.append(register)
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


def add_common(parser: argparse.ArgumentParser, *, workspace: bool = True) -> None:
    parser.add_argument("--config", metavar="F", help="config file (default: the usual location)")
    if workspace:
        parser.add_argument(
            "-w",
            "--workspace",
            metavar="DIR",
            default=None,
            help="the workspace directory (default: the current directory)",
        )


def client_for(args: argparse.Namespace, timeout: float | None = 60.0) -> Client:
    loaded = configfile.load(getattr(args, "config", None))
    return Client(loaded.paths.socket_path, timeout=timeout)


def memory_root(args: argparse.Namespace) -> str:
    """The memory root of the configuration the command uses (the daemon's, normally)."""
    return configfile.load(getattr(args, "config", None)).paths.memory_root


def workspace_of(args: argparse.Namespace) -> str:
    return os.path.abspath(args.workspace or os.getcwd())


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def age(iso: str | None, now: datetime | None = None) -> str:
    """A short human age for an ISO timestamp ("3d", "5h", "now")."""
    if not iso:
        return ""
    from datetime import UTC, datetime  # not at import: `memoryd hook` needs no clock

    then = datetime.fromisoformat(iso)
    secs = ((now or datetime.now(UTC)) - then).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{int(secs // size)}{unit}"
    return "now"
