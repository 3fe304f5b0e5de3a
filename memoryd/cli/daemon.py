"""CLI commands about the daemon itself: serve, status, doctor, install-service."""

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
    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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


# --- doctor --------------------------------------------------------------------------------


@command
def _doctor_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "doctor",
        help="check SQLite (FTS5, sqlite-vec), the config, the socket, watcher limits, models",
    )
    add_common(parser, workspace=False)
    parser.set_defaults(handler=_doctor)


Check = tuple[str, bool, str]  # name, ok, detail


def doctor_checks(config_path: str | None) -> list[Check]:
    from memoryd.store.connection import probe

    checks: list[Check] = []
    try:
        loaded = configfile.load(config_path)
        found = "" if loaded.file_found else " (no file: defaults)"
        checks.append(("config", True, f"{loaded.config_file}{found}"))
    except MemorydError as exc:
        return [("config", False, str(exc))]
    caps = probe()
    checks.append(("sqlite", True, f"{caps.sqlite_version} via {caps.driver}"))
    checks.append(("fts5", caps.fts5, "available" if caps.fts5 else "missing: search cannot work"))
    checks.append(
        (
            "sqlite-vec",
            caps.vec,
            f"{caps.vec_version}"
            if caps.vec
            else f"unavailable, FTS-only search ({caps.vec_error})",
        )
    )
    checks.append(_socket_check(loaded))
    checks.append(_watch_limit_check())
    emb = loaded.config.embedding
    checks.append(("embeddings", True, f"provider = {emb.provider}"))
    checks.append(_vectors_in_memory_check(loaded.config.index.vectors_in_memory))
    llm = loaded.config.llm
    if llm.base_url and llm.model:
        has_key = bool(os.environ.get(llm.api_key_env))
        checks.append(
            (
                "chat model",
                True,
                f"{llm.model} at {llm.base_url}"
                + ("" if has_key else f" (no ${llm.api_key_env} set)"),
            )
        )
    else:
        checks.append(("chat model", True, "not configured: flush and dream are off"))
    return checks


def _socket_check(loaded: configfile.Loaded) -> Check:
    from memoryd.client import Client

    path = loaded.paths.socket_path
    try:
        with Client(path, timeout=3.0) as client:
            client.call("daemon.ping")
    except MemorydError:
        return ("daemon", True, f"not running (socket {path}); start it with `memoryd serve`")
    except TimeoutError:
        return ("daemon", False, f"not answering on {path} within 3 s")
    return ("daemon", True, f"answering on {path}")


def _vectors_in_memory_check(mode: str) -> Check:
    from memoryd.store.mirror import numpy_available

    name = "vector search"
    if mode == "off":
        return (name, True, "vectors_in_memory = off: sqlite-vec scans (slower at 100k chunks)")
    if numpy_available():
        return (name, True, f"vectors_in_memory = {mode}: exact numpy scan of an in-memory copy")
    if mode == "on":
        return (name, False, "vectors_in_memory = on, but numpy is not installed")
    return (name, True, "numpy not installed: sqlite-vec scans (slower at 100k chunks)")


def _watch_limit_check() -> Check:
    limit_file = Path("/proc/sys/fs/inotify/max_user_watches")
    if not limit_file.exists():
        return ("watcher", True, "no inotify limits to check on this platform")
    limit = int(limit_file.read_text().strip() or 0)
    ok = limit >= 8192
    detail = f"inotify max_user_watches = {limit}"
    if not ok:
        detail += " (low: the daemon falls back to polling; raise it with sysctl)"
    return ("watcher", ok, detail)


def _doctor(args: argparse.Namespace) -> int:
    checks = doctor_checks(args.config)
    width = max(len(name) for name, _, _ in checks)
    for name, ok, detail in checks:
        print(f"{'ok ' if ok else 'BAD'}  {name.ljust(width)}  {detail}")
    return EXIT_OK if all(ok for _, ok, _ in checks) else EXIT_ERROR


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
