"""CLI commands about the daemon itself: serve, stop, restart, status, install-service
(doctor: doctor.py).

``stop`` asks the daemon for its pid (``daemon.status``), sends it SIGTERM (a graceful stop)
and waits until the socket stops answering; ``restart`` is ``stop`` then a detached
``serve`` with the same ``--config``. A daemon run by systemd (``daemon.status`` says
``service: systemd``) is restarted by systemd, not by us: ``restart`` says so and exits 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

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
from memoryd.errors import AlreadyRunning, DaemonNotRunning, MemorydError
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
    parser.add_argument("--json", action="store_true", help="print {pid, socket, log} as JSON")
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from memoryd.runtime import main as runtime_main

    loaded = configfile.load(args.config)  # a bad config fails here, before any fork
    _refuse_if_running(loaded.paths.socket_path)
    if args.foreground:
        runtime_main.serve(args.config)
        return EXIT_OK
    return _start_detached(args, loaded)


def _start_detached(args: argparse.Namespace, loaded: configfile.Loaded) -> int:
    from memoryd.runtime.daemonize import start_detached

    log_path = Path(loaded.paths.state_dir) / "memoryd.log"
    make_private_dirs(log_path.parent)
    logged_before = _size(log_path)
    config = os.path.abspath(args.config) if args.config else None
    started = start_detached(config, log_path)
    pid, answer = started.pid, started.answer
    if answer == "ok":
        if args.json:
            print_json({"pid": pid, "socket": loaded.paths.socket_path, "log": str(log_path)})
            return EXIT_OK
        print(f"memoryd is running (pid {pid}); socket {loaded.paths.socket_path}")
        print(f"logs: {log_path}; stop it with: memoryd stop")
        return EXIT_OK
    why = answer.removeprefix("error: ") or "the daemon did not start within 60 s"
    # Point at the log only when the daemon wrote something there.
    see = f" (see {log_path})" if _size(log_path) > logged_before else ""
    print(f"memoryd: the daemon did not start: {why}{see}", file=sys.stderr)
    return EXIT_ERROR


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# --- stop / restart ------------------------------------------------------------------------

STOP_TIMEOUT_SECS = 30.0


@command
def _stop_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "stop", help="stop the running daemon gracefully (SIGTERM) and wait until it is gone"
    )
    add_common(parser, workspace=False)
    _add_stop_timeout(parser, "it")
    parser.add_argument("--json", action="store_true", help="print {stopped, pid} as JSON")
    parser.set_defaults(handler=_stop)


@command
def _restart_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "restart", help="stop the running daemon and start it again in the background"
    )
    add_common(parser, workspace=False)
    _add_stop_timeout(parser, "the old daemon")
    parser.add_argument("--json", action="store_true", help="print {pid, socket, log} as JSON")
    parser.set_defaults(handler=_restart)


def _add_stop_timeout(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=STOP_TIMEOUT_SECS,
        metavar="SECS",
        help=f"how long to wait for {what} to exit (default {STOP_TIMEOUT_SECS:g})",
    )


def _stop(args: argparse.Namespace) -> int:
    loaded = configfile.load(args.config)
    pid = _stop_daemon(loaded.paths.socket_path, args.timeout)
    if args.json:
        print_json({"stopped": pid is not None, "pid": pid})
    elif pid is None:
        print("memoryd is not running")
    else:
        print(f"memoryd stopped (pid {pid})")
    return EXIT_OK


def _restart(args: argparse.Namespace) -> int:
    loaded = configfile.load(args.config)  # a bad config fails here, before the stop
    status = _daemon_status(loaded.paths.socket_path)
    if status is not None and status.get("service") == "systemd":
        print(
            "memoryd: this daemon is run by systemd; restart it with "
            "`systemctl --user restart memoryd`",
            file=sys.stderr,
        )
        return EXIT_ERROR
    pid = _stop_daemon(loaded.paths.socket_path, args.timeout)
    if pid is not None and not args.json:
        print(f"memoryd stopped (pid {pid})")
    return _start_detached(args, loaded)


def _daemon_status(socket_path: str) -> dict[str, Any] | None:
    from memoryd.client import Client

    try:
        with Client(socket_path, timeout=10.0) as client:
            status: dict[str, Any] = client.call("daemon.status")
    except DaemonNotRunning:
        return None
    return status


def _stop_daemon(socket_path: str, timeout: float) -> int | None:
    """SIGTERM the daemon answering on ``socket_path``; wait until it is gone.

    Returns its pid, or None when none was running. Raises :class:`MemorydError` when it
    does not exit within ``timeout`` seconds (it is left running).
    """
    status = _daemon_status(socket_path)
    if status is None:
        return None
    pid = int(status["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return pid
        time.sleep(0.05)
    raise MemorydError(
        f"memoryd (pid {pid}) did not exit within {timeout:g} s of SIGTERM; "
        f"it may be finishing a long request (`kill -9 {pid}` forces it)",
        pid=pid,
    )


def _alive(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _refuse_if_running(socket_path: str | Path) -> None:
    """Raise :class:`AlreadyRunning` when a daemon answers on the socket already."""
    from memoryd.client import Client

    try:
        with Client(socket_path, timeout=5.0) as client:
            pid = client.call("daemon.status").get("pid", "?")
    except MemorydError:
        return  # nothing answers: the server's own lock settles any race
    raise AlreadyRunning(
        f"memoryd is already running on {socket_path} (pid {pid}); stop it with `memoryd stop`",
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
    parser.add_argument(
        "--json", action="store_true", help="print {path, content, enable_command, written}"
    )
    parser.set_defaults(handler=_install_service)


def _install_service(args: argparse.Namespace) -> int:
    from memoryd.runtime import service

    config = Path(args.config) if args.config else None
    plan = service.plan_for_this_user(config)
    said = service.install(plan, dry_run=args.dry_run)
    if args.json:
        print_json(
            {
                "path": str(plan.path),
                "content": plan.content,
                "enable_command": plan.enable_command,
                "written": said.startswith("wrote "),
                "dry_run": args.dry_run,
            }
        )
    else:
        print(said, end="")
    return EXIT_OK
