"""``memoryd integrate AGENT`` — pure: memoryd's hooks and MCP server merged into an agent's
own config values, and taken out again (SPEC §17).

Values in, values out; :mod:`memoryd.cli.integrate` reads and writes the files.

- Hooks (Claude Code ``settings.json``, Codex ``hooks.json``; the same shape)::

      {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "memoryd hook codex",
                                       "timeout": 10}]}], ...}}

  :func:`add_hooks` adds one matcher group per event unless a handler running ``memoryd
  hook AGENT`` is already registered for it; :func:`remove_hooks` removes exactly the
  handlers that run it (and a group, an event list or ``hooks`` it left empty). The user's
  other hooks are never touched.
- MCP server: a ``memoryd`` entry in a JSON ``mcpServers`` table (Claude Code's
  ``~/.claude.json`` or a project's ``.mcp.json``, :func:`add_json_server`), or a
  ``[mcp_servers.memoryd]`` table in Codex's ``config.toml`` written as a delimited block
  of text (:func:`add_toml_block`), so every other byte of the file stays as it was. An
  entry the user wrote themselves is kept, and kept on ``--uninstall``.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.core.config_render import toml_value
from memoryd.core.hooks import Agent
from memoryd.errors import ConfigError

#: The events memoryd's hook is registered for, per agent.
HOOK_EVENTS: Mapping[str, tuple[str, ...]] = {
    "claude-code": (
        "SessionStart",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
        "PreCompact",
        "SessionEnd",
    ),
    "codex": ("SessionStart", "UserPromptSubmit", "Stop", "PreCompact", "SessionEnd"),
}
#: Seconds the agent gives the hook (it answers in well under one).
HOOK_TIMEOUT_SECS = 10
SERVER_NAME = "memoryd"
TOML_BEGIN = "# >>> memoryd: added by `memoryd integrate codex`; `--uninstall` removes it"
TOML_END = "# <<< memoryd"
_TOML_TABLE = re.compile(r"^\s*\[\s*mcp_servers\s*\.\s*\"?memoryd\"?\s*\]", re.M)


def hook_command(program: Sequence[str], agent: Agent) -> str:
    """The shell command an agent runs: ``<program> hook AGENT``."""
    return shlex.join([*program, "hook", agent])


def is_our_command(command: object, agent: Agent) -> bool:
    """A hook command that runs ``memoryd hook AGENT`` (any path to memoryd)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if words[-2:] != ["hook", agent] or len(words) < 3:
        return False
    return any(w.rsplit("/", 1)[-1] == "memoryd" for w in words[:-2])


def _groups(settings: Mapping[str, Any], event: str) -> list[Any]:
    hooks = settings.get("hooks")
    if not isinstance(hooks, Mapping):
        return []
    groups = hooks.get(event)
    return groups if isinstance(groups, list) else []


def _has_ours(groups: list[Any], agent: Agent) -> bool:
    for group in groups:
        handlers = group.get("hooks") if isinstance(group, Mapping) else None
        if isinstance(handlers, list) and any(
            isinstance(h, Mapping) and is_our_command(h.get("command"), agent) for h in handlers
        ):
            return True
    return False


def check_settings(settings: object, where: str) -> dict[str, Any]:
    """``settings`` if it is a JSON object whose ``hooks`` (if any) has the documented shape."""
    if not isinstance(settings, dict):
        raise ConfigError(f"{where} does not hold a JSON object")
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError(f"{where}: 'hooks' is not an object")
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise ConfigError(f"{where}: hooks.{event} is not a list")
    return settings


def add_hooks(settings: Mapping[str, Any], agent: Agent, command: str) -> dict[str, Any]:
    """``settings`` with memoryd's hook registered for each of the agent's events."""
    out = copy.deepcopy(dict(settings))
    for event in HOOK_EVENTS[agent]:
        if _has_ours(_groups(out, event), agent):
            continue
        hooks = out.setdefault("hooks", {})
        hooks.setdefault(event, []).append(
            {"hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_SECS}]}
        )
    return out


def remove_hooks(settings: Mapping[str, Any], agent: Agent) -> dict[str, Any]:
    """``settings`` without the handlers that run ``memoryd hook AGENT``."""
    out = copy.deepcopy(dict(settings))
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    removed = False
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(handlers, list):
                kept_groups.append(group)
                continue
            kept = [
                h
                for h in handlers
                if not (isinstance(h, Mapping) and is_our_command(h.get("command"), agent))
            ]
            removed = removed or len(kept) < len(handlers)
            if kept:
                kept_groups.append({**group, "hooks": kept})
            elif len(kept) == len(handlers):  # an empty group of the user's: theirs
                kept_groups.append(group)
        if kept_groups:
            hooks[event] = kept_groups
        elif groups:
            del hooks[event]
    if removed and not hooks:
        del out["hooks"]
    return out


def server_entry(program: Sequence[str], *, toml: bool = False) -> dict[str, Any]:
    """memoryd's MCP server entry (``memoryd mcp`` over stdio)."""
    entry: dict[str, Any] = {"command": program[0], "args": [*program[1:], "mcp"]}
    if toml:
        entry["tool_timeout_sec"] = 120  # memory_flush waits for the chat model
    else:
        entry = {"type": "stdio", **entry}
    return entry


def add_json_server(config: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with ``mcpServers.memoryd`` (an existing entry of that name is kept)."""
    out = copy.deepcopy(dict(config))
    servers = out.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError("'mcpServers' is not an object")
    servers.setdefault(SERVER_NAME, dict(entry))
    return out


def remove_json_server(config: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without ``mcpServers.memoryd`` if it is the entry memoryd adds."""
    out = copy.deepcopy(dict(config))
    servers = out.get("mcpServers")
    if isinstance(servers, dict) and servers.get(SERVER_NAME) == dict(entry):
        del servers[SERVER_NAME]
        if not servers:
            del out["mcpServers"]
    return out


def toml_block(entry: Mapping[str, Any]) -> str:
    lines = [TOML_BEGIN, f"[mcp_servers.{SERVER_NAME}]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in entry.items()]
    return "\n".join([*lines, TOML_END]) + "\n"


def has_toml_table(text: str) -> bool:
    """``text`` already defines ``[mcp_servers.memoryd]`` (ours or the user's)."""
    return bool(_TOML_TABLE.search(text))


def add_toml_block(text: str, entry: Mapping[str, Any]) -> str:
    """``text`` with memoryd's delimited ``[mcp_servers.memoryd]`` block appended, unless a
    table of that name is already there."""
    if has_toml_table(text):
        return text
    sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + toml_block(entry)


def remove_toml_block(text: str) -> str:
    """``text`` without memoryd's delimited block (and the blank line put before it)."""
    start = text.find(TOML_BEGIN + "\n")
    if start < 0:
        return text
    end = text.find(TOML_END + "\n", start)
    if end < 0:
        return text
    before, after = text[:start], text[end + len(TOML_END) + 1 :]
    if before.endswith("\n\n") and not after:
        before = before[:-1]
    return before + after
