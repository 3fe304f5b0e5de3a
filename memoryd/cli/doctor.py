"""``memoryd doctor``: probe what memoryd needs and say what is broken (exit 1 if anything is).

Each check probes the real thing on the layer that owns it: the config is loaded
(:mod:`memoryd.store.configfile`), SQLite opens a connection and creates an FTS5 table and
loads sqlite-vec (:func:`memoryd.store.connection.probe`), the socket answers ``daemon.ping``
(:mod:`memoryd.client`), the memory root takes a file and the inotify limits are read
(:mod:`memoryd.store.hostcheck`), and the embedding and chat endpoints answer one minimal
request within ``--timeout`` seconds (:mod:`memoryd.providers.probes`). ``--json`` prints
``{ok, checks: [{name, ok, detail, …}]}`` (the ``embeddings`` check adds ``configured``,
``resolved`` and ``endpoint``; ``chat model`` its ``endpoint``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from memoryd.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    add_common,
    command,
    print_json,
)
from memoryd.cli.render import secrets_status_line
from memoryd.errors import DaemonTimeout, MemorydError
from memoryd.store import configfile

PROBE_TIMEOUT = 10.0
MIN_WATCHES = 8192
MIN_INSTANCES = 16


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    data: dict[str, Any] | None = None  # facts for --json (what `auto` resolved to …)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "ok": self.ok, "detail": self.detail}
        return {**out, **self.data} if self.data else out


@command
def _doctor_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "doctor",
        help="probe SQLite (FTS5, sqlite-vec), the config, the socket, the memory root, "
        "watcher limits and the model endpoints",
    )
    add_common(parser, workspace=False)
    parser.add_argument(
        "--timeout",
        type=float,
        default=PROBE_TIMEOUT,
        metavar="SECS",
        help=f"how long each model endpoint may take to answer (default {PROBE_TIMEOUT:g})",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(handler=_doctor)


def doctor_checks(config_path: str | None, timeout: float = PROBE_TIMEOUT) -> list[Check]:
    from memoryd.providers.probes import probe_chat, probe_embedding, resolve_embedding
    from memoryd.store.connection import probe

    try:
        loaded = configfile.load(config_path)
    except MemorydError as exc:
        return [Check("config", False, str(exc))]
    found = "" if loaded.file_found else " (no file: defaults)"
    checks = [Check("config", True, f"{loaded.config_file}{found}")]
    caps = probe()
    checks.append(Check("sqlite", True, f"{caps.sqlite_version} via {caps.driver}"))
    checks.append(
        Check("fts5", caps.fts5, "available" if caps.fts5 else "missing: search cannot work")
    )
    vec_detail = (
        f"{caps.vec_version}" if caps.vec else f"unavailable, FTS-only search ({caps.vec_error})"
    )
    checks.append(Check("sqlite-vec", caps.vec, vec_detail))
    checks.extend(_daemon_checks(loaded))
    checks.append(_root_check(Path(loaded.paths.memory_root)))
    info = loaded.config.secrets.scrubber().describe()
    checks.append(
        Check(
            "secrets",
            True,
            f"{info['rule_set']} rules ({info['rules']}), {info['extra_patterns']} extra / "
            f"{info['allow_patterns']} allow patterns from [secrets]",
            {"rule_set": info["rule_set"], "rules": info["rules"]},
        )
    )
    checks.append(_watch_limit_check(Path(loaded.paths.memory_root)))
    config = loaded.config
    configured = config.embedding.provider
    resolved = resolve_embedding(config)
    embedding = anyio.run(probe_embedding, config, timeout)
    head = f"provider = {configured}" + (f" → {resolved}" if configured == "auto" else "")
    facts = {"configured": configured, "resolved": resolved, "endpoint": embedding.endpoint}
    checks.append(Check("embeddings", embedding.ok, f"{head}: {embedding.detail}", facts))
    checks.append(_vectors_in_memory_check(config.index.vectors_in_memory))
    chat = anyio.run(probe_chat, config, timeout)
    detail = chat.detail
    llm = config.llm
    if chat.endpoint and llm.api_key_env and not os.environ.get(llm.api_key_env):
        detail += f" (no ${llm.api_key_env} set)"
    checks.append(Check("chat model", chat.ok, detail, {"endpoint": chat.endpoint}))
    return checks


def _daemon_checks(loaded: configfile.Loaded) -> list[Check]:
    """The socket answers; a running daemon's own state (settings waiting for a restart,
    an embedding provider that fails)."""
    from memoryd.client import Client

    path = loaded.paths.socket_path
    try:
        with Client(path, timeout=3.0) as client:
            client.call("daemon.ping")
            status: dict[str, Any] = client.call("daemon.status")
    except DaemonTimeout:
        return [Check("daemon", False, f"not answering on {path} within 3 s")]
    except MemorydError:
        hint = f"not running (socket {path}); start it with `memoryd serve`"
        return [Check("daemon", True, hint)]
    checks = [Check("daemon", True, f"answering on {path}")]
    pending = status.get("restart_pending") or []
    if pending:
        checks.append(
            Check(
                "restart",
                False,
                f"changed settings wait for a restart: {', '.join(pending)} "
                "(run `memoryd restart`)",
            )
        )
    if status.get("embedding_error"):
        checks.append(Check("daemon embeddings", False, str(status["embedding_error"])))
    if status.get("embedding_advice"):  # its embedding calls time out: what to change
        checks.append(Check("embedding timeouts", False, str(status["embedding_advice"])))
    if isinstance(status.get("secrets"), dict):
        checks.append(Check("daemon secrets", True, secrets_status_line(status["secrets"])))
    return checks


def _root_check(root: Path) -> Check:
    from memoryd.store.hostcheck import root_writable

    problem = root_writable(root)
    if problem:
        return Check("memory root", False, f"{root}: {problem}")
    return Check("memory root", True, f"{root} is writable")


def _vectors_in_memory_check(mode: str) -> Check:
    from memoryd.store.mirror import numpy_available

    name = "vector search"
    if mode == "off":
        detail = "vectors_in_memory = off: sqlite-vec scans (slower at 100k chunks)"
        return Check(name, True, detail)
    if numpy_available():
        return Check(
            name, True, f"vectors_in_memory = {mode}: exact numpy scan of an in-memory copy"
        )
    if mode == "on":
        return Check(name, False, "vectors_in_memory = on, but numpy is not installed")
    return Check(name, True, "numpy not installed: sqlite-vec scans (slower at 100k chunks)")


def _watch_limit_check(root: Path) -> Check:
    """inotify limits against what memoryd needs: one instance (one recursive watch of the
    memory root, shared by every workspace) and one watch per directory under the root."""
    from memoryd.store.hostcheck import count_directories, inotify_limits

    limits = inotify_limits()
    if not limits:
        return Check("watcher", True, "no inotify limits to check on this platform")
    watches = limits.get("max_user_watches", 0)
    instances = limits.get("max_user_instances", 0)
    needed = count_directories(root)
    detail = (
        f"inotify max_user_watches = {watches}, max_user_instances = {instances}; memoryd "
        f"needs 1 instance and {needed} watches (one per directory under {root})"
    )
    low = [
        name
        for name, value, floor in (
            ("max_user_watches", watches, max(MIN_WATCHES, 2 * needed)),
            ("max_user_instances", instances, MIN_INSTANCES),
        )
        if name in limits and value < floor
    ]
    if low:
        detail += (
            f" (low: {', '.join(low)}; the daemon falls back to polling; raise with "
            f"sysctl fs.inotify.{low[0]}=…)"
        )
    facts = {"max_user_watches": watches, "max_user_instances": instances}
    facts |= {"needed_watches": needed, "needed_instances": 1}
    return Check("watcher", not low, detail, facts)


def _doctor(args: argparse.Namespace) -> int:
    checks = doctor_checks(args.config, args.timeout)
    ok = all(check.ok for check in checks)
    if args.json:
        print_json({"ok": ok, "checks": [check.to_dict() for check in checks]})
        return EXIT_OK if ok else EXIT_ERROR
    width = max(len(check.name) for check in checks)
    for check in checks:
        print(f"{'ok ' if check.ok else 'BAD'}  {check.name.ljust(width)}  {check.detail}")
    return EXIT_OK if ok else EXIT_ERROR
