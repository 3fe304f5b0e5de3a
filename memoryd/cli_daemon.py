"""CLI commands about the daemon itself: serve, status, doctor, install-service."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from memoryd.cli import EXIT_ERROR, EXIT_OK, Subcommands, command
from memoryd.cli_confluence import confluence_status_line
from memoryd.cli_memory import add_common, client_for, print_json
from memoryd.errors import AlreadyRunning, MemorydError, only_error
from memoryd.store import configfile

READY_TIMEOUT_SECS = 60.0


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

    loaded = configfile.load(args.config)  # a bad config fails here, before any fork
    _refuse_if_running(loaded.paths.socket_path)
    if args.foreground:
        runtime_main.serve(args.config)
        return EXIT_OK
    log_path = Path(loaded.paths.state_dir) / "memoryd.log"
    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = os.path.abspath(args.config) if args.config else None
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the daemon
        os.close(read_fd)
        _detach(log_path)
        os._exit(_run_detached(config, _Reporter(write_fd)))
    os.close(write_fd)
    answer = _read_report(read_fd, READY_TIMEOUT_SECS)
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


def _run_detached(config: str | None, reporter: _Reporter) -> int:
    """The detached child: serve until stopped; report "ok" or the error through the pipe."""
    from memoryd.runtime import main as runtime_main

    try:
        runtime_main.serve(config, on_ready=lambda: reporter.send("ok"))
    except MemorydError as exc:
        reporter.send(f"error: {exc}")
        return EXIT_ERROR
    except BaseExceptionGroup as group:
        error = only_error(group)
        reporter.send(f"error: {error or _describe(group)}")
        if error is None:
            traceback.print_exception(group)  # into the log
        return EXIT_ERROR
    except BaseException as exc:  # noqa: BLE001 - report anything, then exit the child
        reporter.send(f"error: {_describe(exc)}")
        traceback.print_exception(exc)
        return EXIT_ERROR
    finally:
        reporter.send("error: the daemon stopped before it was ready")
    return EXIT_OK


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _detach(log_path: Path) -> None:
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)


class _Reporter:
    """The child's end of the readiness pipe: the first message is sent, the rest dropped."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def send(self, message: str) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.write(fd, message.encode()[:4000])
        except OSError:
            pass  # the parent gave up waiting
        finally:
            os.close(fd)


def _read_report(fd: int, timeout: float) -> str:
    import select

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
            if not ready:
                break
            data = os.read(fd, 4096)
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace").strip()


# --- status --------------------------------------------------------------------------------


@command
def _status_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "status", help="show the daemon, its workspaces, watchers and indexes"
    )
    add_common(parser, workspace=False)
    parser.add_argument("--json", action="store_true", help="print the raw JSON status")
    parser.set_defaults(handler=_status)


def _mb(value: Any) -> str:
    return f"{int(value) / 1e6:.1f} MB" if isinstance(value, int | float) else "-"


def _duration(secs: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs / size:.0f}{unit}"
    return f"{secs:.0f}s"


def render_status(status: dict[str, Any], now: float | None = None) -> str:
    """The readable status table (what ops look at); ``now`` is a Unix time (default: now).

    One row per workspace; a failing actor's last error and an index rebuilt at open are
    printed under its row.
    """
    now = time.time() if now is None else now
    provider = status.get("embedding") or status.get("embedding_provider") or "none (FTS only)"
    if status.get("embedding_error"):
        provider += f" — not ready: {status['embedding_error']}"
    lines = [
        f"memoryd {status['version']}  pid {status['pid']}  up {_duration(status['uptime_secs'])}"
        f"  rss {_mb(status.get('rss_bytes'))}  loop {status.get('loop', '?')}",
        f"embeddings: {provider}",
        f"chat model: {status.get('chat_model') or 'not configured (flush and dream are off)'}",
        f"socket {status['socket']}",
        f"memory {status['memory_root']}",
        "",
    ]
    if isinstance(status.get("confluence"), dict):
        lines.insert(-1, confluence_status_line(status["confluence"]))
    actors: list[dict[str, Any]] = status.get("actors") or []
    if not actors:
        lines.append("no workspaces served yet (they start on first use)")
        return "\n".join(lines)
    header = (
        "WORKSPACE",
        "STATE",
        "WATCHER",
        "DIRTY",
        "FILES",
        "CHUNKS",
        "VEC PENDING",
        "LAST SEARCH",
    )
    rows: list[tuple[tuple[str, ...], list[str]]] = [(header, [])]
    rows.extend(_status_row(actor, now) for actor in actors)
    widths = [max(len(row[i]) for row, _ in rows) for i in range(len(header))]
    for row, notes in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        lines.extend(f"  {note}" for note in notes)
    return "\n".join(lines)


def _status_row(actor: dict[str, Any], now: float) -> tuple[tuple[str, ...], list[str]]:
    """One workspace's cells and the notes printed under them."""
    index: dict[str, Any] = actor.get("index") or {}
    last = actor.get("last_search")
    last_text = (
        f"{_duration(max(0.0, now - last['at']))} ago, {last['took_ms']:.1f} ms {last['mode']}"
        if last
        else "-"
    )
    pending = index.get("vectors_pending") if index.get("embedding_model") else None
    cells = (
        f"{actor['workspace']} ({actor['memory_dir']})",
        str(actor.get("state", "?")),
        str(actor.get("watcher") or "-"),
        _cell(actor.get("dirty")),
        _cell(index.get("files")),
        _cell(index.get("chunks")),
        _cell(pending),
        last_text,
    )
    notes: list[str] = []
    if actor.get("last_error"):
        failures = actor.get("failures") or 0
        notes.append(
            f"last error ({failures} failure(s), restarted with backoff): {actor['last_error']}"
        )
    if actor.get("watcher_error"):
        notes.append(f"watcher: {actor['watcher_error']}")
    if index.get("rebuilt_reason"):
        when = index.get("rebuilt_at")
        ago = f" {_duration(max(0.0, now - when))} ago" if isinstance(when, int | float) else ""
        notes.append(f"index rebuilt from the markdown files{ago}: {index['rebuilt_reason']}")
    embedding = index.get("embedding")
    if isinstance(embedding, dict) and (embedding.get("pending") or embedding.get("last_error")):
        notes.append(_embedding_note(embedding))
    notes.extend(_session_note(session, now) for session in actor.get("sessions") or [])
    dream = actor.get("dream")
    if isinstance(dream, dict):
        notes.append(_dream_note(dream))
    return cells, notes


def _ago(now: float, then: Any) -> str:
    return f"{_duration(max(0.0, now - then))} ago" if isinstance(then, int | float) else "-"


def _embedding_note(e: dict[str, Any]) -> str:
    text = f"vectors: {e.get('done')}/{e.get('total')}"
    if e.get("rate_per_sec"):
        text += f" at {e['rate_per_sec']}/s"
    if e.get("eta_secs") is not None and e.get("pending"):
        text += f", ETA {_duration(float(e['eta_secs']))}"
    if e.get("last_error"):
        text += f"; last error: {e['last_error']}"
    return text


def _session_note(session: dict[str, Any], now: float) -> str:
    flush = session.get("last_flush") or {}
    idle = session.get("next_idle_flush")
    due = f"in {_duration(max(0.0, idle - now))}" if isinstance(idle, int | float) else "off"
    kind = " (sub-agent)" if session.get("subagent") else ""
    return (
        f"session {session['session_id']}{kind}: {session.get('messages', 0)} messages, "
        f"last activity {_ago(now, session.get('last_activity'))}, idle flush {due}, "
        f"last flush {flush.get('outcome') or 'never'}"
    )


def _dream_note(dream: dict[str, Any]) -> str:
    if dream.get("error"):
        return f"dream: status unavailable ({dream['error']})"
    g = dream.get("gates") or {}
    hours = g.get("hours_since_last")
    parts = [
        f"gates {g.get('outcome', '?')}" + ("" if g.get("enabled", True) else " (disabled)"),
        f"hours {'never' if hours is None else hours}/{g.get('min_hours', '?')}",
        f"sessions {g.get('sessions_since_last', '?')}/{g.get('min_sessions', '?')}",
    ]
    parts.append(describe_lock(dream.get("lock") or {}))
    last = dream.get("last_run") or {}
    parts.append(f"last consolidation {dream.get('last_consolidation') or 'never'}")
    if last:
        parts.append(f"last run {last.get('outcome')}")
    parts.append(f"next check {dream.get('next_check') or 'off'}")
    return "dream: " + "; ".join(parts)


def lock_details(lock: dict[str, Any]) -> list[str]:
    """A held DreamLock's state in words: ``["dead", "10m old", "not stale"]``."""
    age = lock.get("age_secs")
    return [
        "alive" if lock.get("alive") else "dead",
        f"{_duration(float(age))} old" if isinstance(age, int | float) else "age unknown",
        "stale" if lock.get("stale") else "not stale",
    ]


def describe_lock(lock: dict[str, Any]) -> str:
    """``lock pid 123 (dead, 10m old)`` / ``(alive, 2h old, stale)``, or ``lock free``."""
    pid = lock.get("holder_pid")
    if not pid:
        return "lock free"
    details = [d for d in lock_details(lock) if d != "not stale"]
    return f"lock pid {pid} ({', '.join(details)})"


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


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
