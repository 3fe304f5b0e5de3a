"""CLI commands about the daemon itself: serve, status, install-service (doctor: doctor.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memoryd.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    add_common,
    client_for,
    command,
    print_json,
)
from memoryd.cli.render import render_status
from memoryd.errors import AlreadyRunning, MemorydError
from memoryd.store import configfile
from memoryd.store.files import make_private_dirs

# --- serve ---------------------------------------------------------------------------------


@command
def _serve_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("serve", help="run the daemon (detaches unless --foreground)")
    add_common(parser, workspace=False)
    parser.add_argument(
        "--foreground",
        action="store_true",
        help="stay attached and log to stderr (what systemd and launchd run)",
    )
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from memoryd.runtime import main as runtime_main
    from memoryd.runtime.daemonize import start_detached

    loaded = configfile.load(args.config)  # a bad config fails here, before any fork
    _refuse_if_running(loaded.paths.socket_path)
    if args.foreground:
        runtime_main.serve(args.config)
        return EXIT_OK
    log_path = Path(loaded.paths.state_dir) / "memoryd.log"
    make_private_dirs(log_path.parent)
    config = os.path.abspath(args.config) if args.config else None
    started = start_detached(config, log_path)
    pid, answer = started.pid, started.answer
    if answer == "ok":
        print(f"memoryd is running (pid {pid}); socket {loaded.paths.socket_path}")
        print(f"logs: {log_path}; stop it with: kill {pid}")
        return EXIT_OK
    print(f"memoryd: {answer or 'the daemon did not start'} (see {log_path})", file=sys.stderr)
    return EXIT_ERROR


def _refuse_if_running(socket_path: str | Path) -> None:
    """Raise :class:`AlreadyRunning` when a daemon answers on the socket already."""
    from memoryd.client import Client

    try:
        with Client(socket_path, timeout=5.0) as client:
            pid = client.call("daemon.status").get("pid", "?")
    except (MemorydError, TimeoutError):
        return  # nothing answers: the server's own lock settles any race
    raise AlreadyRunning(
        f"memoryd is already running on {socket_path} (pid {pid}); stop it with `kill {pid}`",
        pid=pid,
    )


# --- status --------------------------------------------------------------------------------


@command
def _status_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "status", help="show the daemon, its workspaces, watchers and indexes"
    )
    add_common(parser, workspace=False)
    parser.add_argument("--json", action="store_true", help="print the raw JSON status")
    parser.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    with client_for(args, timeout=10.0) as client:
        status = client.call("daemon.status")
    if args.json:
        print_json(status)
    else:
        print(render_status(status))
    return EXIT_OK


# --- install-service -----------------------------------------------------------------------


@command
def _install_service_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "install-service",
        help="write the systemd user unit (Linux) or launchd agent (macOS) and print how to "
        "enable it",
    )
    add_common(parser, workspace=False)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be written, and where, without writing",
    )
    parser.set_defaults(handler=_install_service)


def _install_service(args: argparse.Namespace) -> int:
    from memoryd.runtime import service

    config = Path(args.config) if args.config else None
    plan = service.plan_for_this_user(config)
    print(service.install(plan, dry_run=args.dry_run), end="")
    return EXIT_OK
