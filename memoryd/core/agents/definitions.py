"""Agent definitions: markdown files with YAML front matter, parsed and validated (SPEC §9).

A definition is ``---`` … ``---`` (YAML front matter) followed by the prompt body. This
module parses ONE definition text given its origin label (usually the file path) and
checks every field; any problem is an :class:`~memoryd.errors.AgentConfigError` whose
message and data name the file and the field. It also holds the value vocabularies shared
by roles, personas and the cascade (effort, isolation, capability mode), and the small
field checkers the role and persona validation reuse.

Pure: the text comes in as a string; YAML is parsed with ``yaml.safe_load``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, TypeVar, get_args

from memoryd.core.replies import DefinitionView
from memoryd.errors import AgentConfigError

Effort = Literal["low", "medium", "high", "xhigh", "max"]
Isolation = Literal["none", "worktree"]
CapabilityMode = Literal["read-only", "read-write", "execute", "all"]
PromptMode = Literal["extend", "full"]
PermissionMode = Literal["default", "acceptEdits", "auto", "dontAsk", "bypassPermissions", "plan"]
McpInheritanceMode = Literal["all", "none", "named", "except"]

EFFORTS: tuple[Effort, ...] = get_args(Effort)
ISOLATIONS: tuple[Isolation, ...] = get_args(Isolation)
CAPABILITY_MODES: tuple[CapabilityMode, ...] = get_args(CapabilityMode)
PROMPT_MODES: tuple[PromptMode, ...] = get_args(PromptMode)
PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FENCE = re.compile(r"^---[ \t]*$", re.MULTILINE)

E = TypeVar("E", bound=str)


def fail(origin: str, field_name: str, problem: str, **data: Any) -> NoReturn:
    """Raise the one error shape of this package: ``<origin>: field '<field>': <problem>``."""
    raise AgentConfigError(
        f"{origin}: field {field_name!r}: {problem}", file=origin, field=field_name, **data
    )


def is_valid_name(name: str) -> bool:
    """Whether ``name`` can name an agent, role or persona (letters, digits, ``_.-``)."""
    return _NAME.fullmatch(name) is not None


def check_str(origin: str, field_name: str, value: Any) -> str:
    """A non-empty string, else an error naming the field."""
    if not isinstance(value, str) or not value.strip():
        fail(origin, field_name, f"must be a non-empty string (got {value!r})")
    return value


def check_enum(origin: str, field_name: str, value: Any, allowed: tuple[E, ...]) -> E:
    """One of ``allowed``, else an error naming the field, the value and the choices."""
    for choice in allowed:
        if value == choice and isinstance(value, str):
            return choice
    fail(origin, field_name, f"must be one of {', '.join(allowed)} (got {value!r})")


def check_str_list(origin: str, field_name: str, value: Any) -> tuple[str, ...]:
    """A list of non-empty strings, or one comma-separated string (``Read, Grep``)."""
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
        return tuple(item for item in items if item)
    if not isinstance(value, list):
        fail(origin, field_name, f"must be a list of strings (got {value!r})")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            fail(origin, field_name, f"must be a list of non-empty strings (got item {item!r})")
    return tuple(value)


def _is_plain(value: Any) -> bool:
    """JSON-shaped data only (YAML can also produce dates, sets, binary …)."""
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, list):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def check_mapping(origin: str, field_name: str, value: Any) -> dict[str, Any]:
    """A mapping of JSON-shaped data with string keys, else an error naming the field."""
    if not isinstance(value, dict) or not _is_plain(value):
        fail(origin, field_name, f"must be a mapping of plain values (got {value!r})")
    return dict(value)


@dataclass(frozen=True)
class McpInheritance:
    """Which of the parent's MCP servers the sub-agent inherits.

    ``all`` / ``none``, or ``named`` (only these) / ``except`` (all but these) with ``names``.
    """

    mode: McpInheritanceMode = "all"
    names: tuple[str, ...] = ()

    def to_value(self) -> str | dict[str, list[str]]:
        """The front-matter spelling: ``"all"``, ``"none"`` or ``{"named": [...]}`` …"""
        if self.mode in ("all", "none"):
            return self.mode
        return {self.mode: list(self.names)}


@dataclass(frozen=True)
class AgentDefinition:
    """One parsed agent definition. ``model`` is ``None`` for ``inherit`` (or absent)."""

    name: str
    description: str
    prompt: str
    origin: str
    prompt_mode: PromptMode = "extend"
    tool_config: dict[str, Any] | None = field(default=None, hash=False)
    capability_mode: CapabilityMode | None = None
    permission_mode: PermissionMode | None = None
    tools: tuple[str, ...] | None = None
    disallowed_tools: tuple[str, ...] = ()
    effort: Effort | None = None
    max_turns: int | None = None
    isolation: Isolation = "none"
    model: str | None = None
    hooks: dict[str, Any] | None = field(default=None, hash=False)
    mcp_servers: tuple[str, ...] | dict[str, Any] | None = field(default=None, hash=False)
    mcp_inheritance: McpInheritance = McpInheritance()
    skills: tuple[str, ...] = ()

    def to_dict(self) -> DefinitionView:
        """JSON-ready view (snake_case keys) for the socket and the CLI."""
        servers = self.mcp_servers
        return {
            "name": self.name,
            "description": self.description,
            "prompt": self.prompt,
            "prompt_mode": self.prompt_mode,
            "tool_config": self.tool_config,
            "capability_mode": self.capability_mode,
            "permission_mode": self.permission_mode,
            "tools": None if self.tools is None else list(self.tools),
            "disallowed_tools": list(self.disallowed_tools),
            "effort": self.effort,
            "max_turns": self.max_turns,
            "isolation": self.isolation,
            "model": self.model if self.model is not None else "inherit",
            "hooks": self.hooks,
            "mcp_servers": list(servers) if isinstance(servers, tuple) else servers,
            "mcp_inheritance": self.mcp_inheritance.to_value(),
            "skills": list(self.skills),
        }


FIELDS: frozenset[str] = frozenset(
    {
        "name",
        "description",
        "promptMode",
        "toolConfig",
        "capabilityMode",
        "permissionMode",
        "tools",
        "disallowedTools",
        "effort",
        "maxTurns",
        "isolation",
        "model",
        "hooks",
        "mcpServers",
        "mcpInheritance",
        "skills",
    }
)


def split_front_matter(text: str, origin: str) -> tuple[dict[str, Any], str]:
    """Split ``---`` front matter from the body and YAML-parse it into a mapping."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    first, _, rest = text.partition("\n")
    if first.rstrip() != "---":
        fail(origin, "front matter", "the file must start with a '---' line")
    closing = _FENCE.search(rest)
    if closing is None:
        fail(origin, "front matter", "no closing '---' line")
    raw_yaml = rest[: closing.start()]
    body = rest[closing.end() :]
    import yaml  # here, not at module level: ~10 ms that only definition files need

    try:
        meta = yaml.safe_load(raw_yaml)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        fail(origin, "front matter", f"invalid YAML{where}: {getattr(exc, 'problem', exc)}")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        fail(origin, "front matter", f"must be a YAML mapping (got {type(meta).__name__})")
    return meta, body.strip("\n").rstrip()


def parse_definition(text: str, origin: str) -> AgentDefinition:
    """Parse one definition file's text; errors name ``origin`` and the field."""
    meta, body = split_front_matter(text, origin)
    for key in meta:
        if not isinstance(key, str) or key not in FIELDS:
            fail(origin, str(key), f"unknown field (known: {', '.join(sorted(FIELDS))})")
    for required in ("name", "description"):
        if meta.get(required) is None:
            fail(origin, required, "is required")
    name = check_str(origin, "name", meta["name"]).strip()
    if not is_valid_name(name):
        fail(origin, "name", f"must be letters, digits, '_', '.' or '-' (got {name!r})")
    present = {k: v for k, v in meta.items() if v is not None}
    try:
        return _build(present, name, body, origin)
    except AgentConfigError as exc:
        exc.data.setdefault("agent", name)
        raise


def _build(meta: dict[str, Any], name: str, body: str, origin: str) -> AgentDefinition:
    def enum(key: str, allowed: tuple[E, ...]) -> E | None:
        return check_enum(origin, key, meta[key], allowed) if key in meta else None

    def mapping(key: str) -> dict[str, Any] | None:
        return check_mapping(origin, key, meta[key]) if key in meta else None

    def str_list(key: str) -> tuple[str, ...] | None:
        return check_str_list(origin, key, meta[key]) if key in meta else None

    description = check_str(origin, "description", meta["description"]).strip()

    max_turns = meta.get("maxTurns")
    if max_turns is not None and (
        isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
    ):
        fail(origin, "maxTurns", f"must be a positive integer (got {max_turns!r})")

    model: str | None = None
    if "model" in meta:
        given = check_str(origin, "model", meta["model"]).strip()
        model = None if given == "inherit" else given

    return AgentDefinition(
        name=name,
        description=description,
        prompt=body,
        origin=origin,
        prompt_mode=enum("promptMode", PROMPT_MODES) or "extend",
        tool_config=mapping("toolConfig"),
        capability_mode=enum("capabilityMode", CAPABILITY_MODES),
        permission_mode=enum("permissionMode", PERMISSION_MODES),
        tools=str_list("tools"),
        disallowed_tools=str_list("disallowedTools") or (),
        effort=enum("effort", EFFORTS),
        max_turns=max_turns,
        isolation=enum("isolation", ISOLATIONS) or "none",
        model=model,
        hooks=mapping("hooks"),
        mcp_servers=_mcp_servers(meta, origin),
        mcp_inheritance=_mcp_inheritance(meta, origin),
        skills=str_list("skills") or (),
    )


def _mcp_servers(meta: dict[str, Any], origin: str) -> tuple[str, ...] | dict[str, Any] | None:
    value = meta.get("mcpServers")
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return check_str_list(origin, "mcpServers", value)
    servers = check_mapping(origin, "mcpServers", value)
    for server, spec in servers.items():
        if not isinstance(spec, Mapping):
            fail(origin, f"mcpServers.{server}", f"must be a mapping (got {spec!r})")
    return servers


def _mcp_inheritance(meta: dict[str, Any], origin: str) -> McpInheritance:
    value = meta.get("mcpInheritance")
    if value is None:
        return McpInheritance()
    if value == "all" or value == "none":
        return McpInheritance(mode=value)
    if isinstance(value, Mapping) and len(value) == 1:
        ((key, names),) = value.items()
        if key in ("named", "except"):
            listed = check_str_list(origin, f"mcpInheritance.{key}", names)
            return McpInheritance(mode=key, names=listed)
    problem = "must be 'all', 'none', {named: [...]} or {except: [...]}"
    fail(origin, "mcpInheritance", f"{problem} (got {value!r})")
