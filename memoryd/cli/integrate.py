"""``memoryd integrate AGENT``: register memoryd's hooks and MCP server in the agent's own
config files, or take them out (SPEC §17). The merging is pure (:mod:`memoryd.core.integrate`);
this module finds, reads, checks and writes the files.

=============  ==========================================  ==================================
agent, scope   hooks                                        MCP server
=============  ==========================================  ==================================
claude-code    ``~/.claude/settings.json``                  ``~/.claude.json`` (``mcpServers``)
  project      ``<project>/.claude/settings.json``          ``<project>/.mcp.json``
codex          ``~/.codex/hooks.json``                      ``~/.codex/config.toml``
  project      ``<project>/.codex/hooks.json``              ``<project>/.codex/config.toml``
=============  ==========================================  ==================================

(``CLAUDE_CONFIG_DIR`` and ``CODEX_HOME`` move the user files as they move the agents'.)
Every file is read and checked before any is written: a malformed one is refused with its
name and the parse error, and nothing is written. A file that changes is first copied to
``<name>.memoryd-backup-<UTC time>``, then replaced atomically with its mode kept. Running it
twice changes nothing; ``--uninstall`` removes exactly what it added (a file left holding
nothing, e.g. one ``integrate`` created, is deleted); ``--dry-run`` prints the changes as a
diff and writes nothing. A symlinked file is edited where the link points (the link kept),
but a project file or folder linked out of the project is refused; a FIFO or device is
refused unread.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.cli.common import EXIT_OK, Subcommands, command, print_json, workspace_of
from memoryd.core import integrate as merge
from memoryd.core.hooks import AGENTS, Agent
from memoryd.errors import ConfigError
from memoryd.store.files import atomic_write_text, read_regular

#: The largest agent config file read (``~/.claude.json`` keeps per-project history).
MAX_CONFIG_BYTES = 64 * 1024 * 1024


@command
def _integrate_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "integrate",
        help="register memoryd's hooks and MCP server in an agent's own config files",
    )
    parser.add_argument("agent", choices=AGENTS, metavar="AGENT", help="claude-code or codex")
    parser.add_argument(
        "--scope",
        choices=("user", "project"),
        default="user",
        help="user: every project (default); project: this project's files only",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the changes as a diff and write nothing"
    )
    parser.add_argument(
        "--uninstall", action="store_true", help="remove what `memoryd integrate` added"
    )
    parser.add_argument(
        "-w",
        "--workspace",
        metavar="DIR",
        default=None,
        help="the project for --scope project (default: the current directory)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print {agent, scope, changes, backups} as JSON"
    )
    parser.set_defaults(handler=_integrate)


@dataclass(frozen=True, slots=True)
class Change:
    path: Path
    before: str | None
    """The file's text, None when it does not exist."""
    after: str
    remove: bool = False
    """The file holds nothing else any more (``--uninstall``): it is deleted."""


def program() -> list[str]:
    """How an agent should run this memoryd: the absolute path of the ``memoryd`` script
    running now, else this interpreter with ``-m memoryd``."""
    script = Path(sys.argv[0])
    if script.name == "memoryd" and script.exists():
        return [str(script.resolve())]
    found = shutil.which("memoryd")
    if found and Path(sys.executable).parent == Path(found).parent:
        return [found]
    return [sys.executable, "-m", "memoryd"]


def _claude_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def _claude_json() -> Path:
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(base) / ".claude.json" if base else Path.home() / ".claude.json"


def _codex_dir() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def paths(agent: Agent, scope: str, project: Path) -> tuple[Path, Path]:
    """(the hooks file, the MCP server file) for ``agent`` and ``scope``."""
    match agent, scope:
        case "claude-code", "user":
            return _claude_dir() / "settings.json", _claude_json()
        case "claude-code", _:
            return project / ".claude" / "settings.json", project / ".mcp.json"
        case "codex", "user":
            return _codex_dir() / "hooks.json", _codex_dir() / "config.toml"
        case _:
            return project / ".codex" / "hooks.json", project / ".codex" / "config.toml"


def _read(path: Path) -> str | None:
    """The file's text; a FIFO or device is refused unread, a file too large to be a config
    is refused whole (never edited from a cut copy)."""
    try:
        read = read_regular(path, MAX_CONFIG_BYTES)
        if read.truncated:
            raise ConfigError(f"cannot read {path}: larger than {MAX_CONFIG_BYTES} bytes")
        return read.data.decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def _json(path: Path, text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested beyond reason
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); fix it first, nothing was written"
        ) from exc
    return merge.check_settings(value, str(path))


def _dump(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _json_change(path: Path, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Change | None:
    before = _read(path)
    value = _json(path, before)
    after = edit(value)
    if after == value:
        return None  # same meaning: the file is left as it is
    return Change(path, before, _dump(after), remove=not after)


def _toml_change(path: Path, edit: Callable[[str], str]) -> Change | None:
    before = _read(path)
    text = before or ""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid TOML ({exc}); fix it first, nothing was written"
        ) from exc
    after = edit(text)
    if after == text:
        return None
    tomllib.loads(after)  # never write a file the agent could not read
    return Change(path, before, after, remove=not after.strip())


def _inside_project(path: Path, project: Path) -> None:
    """A project file (or its folder) linked out of the project is refused: a cloned
    repository's ``.mcp.json`` may point at a file of the user's, which would be read,
    backed up into the project and merged into a file there."""
    root = project.resolve()
    if not path.resolve().is_relative_to(root):
        raise ConfigError(
            f"{path} is a symlink to {path.resolve()}, outside the project {root}; "
            "nothing was written"
        )


def plan(agent: Agent, scope: str, project: Path, *, uninstall: bool) -> list[Change]:
    """The changes ``memoryd integrate`` makes (every file read and checked first)."""
    hooks_path, mcp_path = paths(agent, scope, project)
    if scope == "project":
        for path in (hooks_path, mcp_path):
            _inside_project(path, project)
    prog = program()
    hook_cmd = merge.hook_command(prog, agent)
    changes: list[Change | None] = []
    if uninstall:
        changes.append(_json_change(hooks_path, lambda v: merge.remove_hooks(v, agent)))
    else:
        changes.append(_json_change(hooks_path, lambda v: merge.add_hooks(v, agent, hook_cmd)))
    if agent == "codex":
        entry = merge.server_entry(prog, toml=True)
        edit = merge.remove_toml_block if uninstall else lambda t: merge.add_toml_block(t, entry)
        changes.append(_toml_change(mcp_path, edit))
    else:
        entry = merge.server_entry(prog)
        if uninstall:
            changes.append(_json_change(mcp_path, lambda v: merge.remove_json_server(v, entry)))
        else:
            changes.append(_json_change(mcp_path, lambda v: merge.add_json_server(v, entry)))
    return [c for c in changes if c is not None]


def _action(change: Change) -> str:
    return "remove" if change.remove else "update" if change.before is not None else "create"


def _integrate_json(args: argparse.Namespace, changes: list[Change]) -> int:
    """``--json``: what changes (with its diff on a dry run) and the backups written."""
    backups = [] if args.dry_run or not changes else apply(changes, datetime.now(UTC))
    listed = [
        {"path": str(c.path), "action": _action(c), **({"diff": diff(c)} if args.dry_run else {})}
        for c in changes
    ]
    print_json(
        {
            "agent": args.agent,
            "scope": args.scope,
            "uninstall": args.uninstall,
            "dry_run": args.dry_run,
            "changes": listed,
            "backups": [str(b) for b in backups],
        }
    )
    return EXIT_OK


def apply(changes: list[Change], now: datetime) -> list[Path]:
    """Write ``changes``: each file's backup first, then the file (mode kept); the backups."""
    backups: list[Path] = []
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    for change in changes:
        mode = None
        # A symlinked file (dotfile managers) is written where it points; the link stays.
        linked = change.path.is_symlink()
        target = change.path.resolve() if linked else change.path
        if change.before is not None:
            backup = change.path.with_name(f"{change.path.name}.memoryd-backup-{stamp}")
            shutil.copy2(target, backup)
            backups.append(backup)
            mode = target.stat().st_mode & 0o777
        if change.remove and not linked:
            change.path.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, change.after)
        if mode is not None:
            os.chmod(target, mode)
    return backups


def diff(change: Change) -> str:
    return "".join(
        difflib.unified_diff(
            (change.before or "").splitlines(keepends=True),
            [] if change.remove else change.after.splitlines(keepends=True),
            fromfile=str(change.path) if change.before is not None else "/dev/null",
            tofile="/dev/null" if change.remove else str(change.path),
        )
    )


def _integrate(args: argparse.Namespace) -> int:
    agent: Agent = args.agent
    project = Path(workspace_of(args))
    changes = plan(agent, args.scope, project, uninstall=args.uninstall)
    what = "memoryd's hooks and MCP server"
    if args.json:
        return _integrate_json(args, changes)
    if not changes:
        state = "not registered" if args.uninstall else "already registered"
        print(f"{agent}: {what} {state} ({args.scope} scope); nothing to change")
        return EXIT_OK
    if args.dry_run:
        for change in changes:
            print(diff(change), end="")
        print(f"(dry run: {len(changes)} file(s) would change; nothing was written)")
        return EXIT_OK
    backups = apply(changes, datetime.now(UTC))
    for change in changes:
        done = "removed" if change.remove else "updated" if change.before is not None else "created"
        print(f"{done} {change.path}")
    for backup in backups:
        print(f"  backup: {backup}")
    if args.uninstall:
        print(f"{agent}: {what} removed")
    else:
        print(f"{agent}: {what} registered; start a new {agent} session to use them")
    return EXIT_OK
