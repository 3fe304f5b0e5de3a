"""Sub-agent roles and personas: values and their validation from raw mappings (SPEC §9).

A **role** is chosen by sub-agent type (``[agents.roles.<name>]`` in the config or
``.grok/roles/<name>.toml``); a **persona** is chosen by name at spawn time
(``[agents.personas.<name>]`` or ``.grok/personas/<name>.toml``). Both arrive here as raw
mappings (already TOML-parsed) with an origin label for messages. Unknown fields and invalid
values are :class:`~memoryd.errors.AgentConfigError` naming the origin and the field. A
persona has **no capability mode**: a persona declaring one is rejected.

Paths (``prompt_file``, ``instructions_file``) are kept as written, with the directory they
are relative to; the I/O edge resolves, confines and reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memoryd.core.agents.definitions import (
    CAPABILITY_MODES,
    EFFORTS,
    ISOLATIONS,
    CapabilityMode,
    Effort,
    Isolation,
    check_enum,
    check_str,
    check_str_list,
    fail,
    is_valid_name,
)
from memoryd.errors import AgentConfigError

ROLE_FIELDS: frozenset[str] = frozenset(
    {
        "description",
        "default_capability_mode",
        "model",
        "reasoning_effort",
        "prompt_file",
        "default_isolation",
    }
)
PERSONA_FIELDS: frozenset[str] = frozenset(
    {
        "instructions",
        "instructions_file",
        "inputs",
        "outputs",
        "model",
        "reasoning_effort",
        "default_isolation",
    }
)
_CAPABILITY_SPELLINGS = frozenset(
    {"capability_mode", "default_capability_mode", "capabilityMode", "capability"}
)


@dataclass(frozen=True)
class Role:
    """A runtime preset for one sub-agent type.

    ``base_dir`` is the directory a relative ``prompt_file`` is resolved against (the
    declaring file's directory, or the config directory for config tables).
    """

    name: str
    origin: str
    description: str | None = None
    default_capability_mode: CapabilityMode | None = None
    model: str | None = None
    reasoning_effort: Effort | None = None
    prompt_file: str | None = None
    default_isolation: Isolation | None = None
    base_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view for listings."""
        return {
            "name": self.name,
            "origin": self.origin,
            "description": self.description,
            "default_capability_mode": self.default_capability_mode,
            "model": self.model,
            "reasoning_effort": self.reasoning_effort,
            "prompt_file": self.prompt_file,
            "default_isolation": self.default_isolation,
        }


@dataclass(frozen=True)
class Persona:
    """A behaviour layer chosen by name at spawn time. It has no capability mode."""

    name: str
    origin: str
    instructions: str | None = None
    instructions_file: str | None = None
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    model: str | None = None
    reasoning_effort: Effort | None = None
    default_isolation: Isolation | None = None
    base_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view for listings."""
        return {
            "name": self.name,
            "origin": self.origin,
            "instructions": self.instructions,
            "instructions_file": self.instructions_file,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "model": self.model,
            "reasoning_effort": self.reasoning_effort,
            "default_isolation": self.default_isolation,
        }


def _check_table(
    kind: str, name: str, raw: Any, origin: str, known: frozenset[str]
) -> dict[str, Any]:
    if not is_valid_name(name):
        fail(origin, "name", f"{kind} name must be letters, digits, '_', '.' or '-' ({name!r})")
    if not isinstance(raw, Mapping):
        fail(origin, kind, f"{kind} {name!r} must be a table (got {type(raw).__name__})")
    for key in raw:
        if key not in known:
            fail(origin, str(key), f"unknown {kind} field (known: {', '.join(sorted(known))})")
    return {k: v for k, v in raw.items() if v is not None}


def _optional_str(origin: str, key: str, raw: dict[str, Any]) -> str | None:
    return check_str(origin, key, raw[key]).strip() if key in raw else None


def role_from_mapping(name: str, raw: Any, origin: str, *, base_dir: str | None = None) -> Role:
    """Validate one role table; errors name ``origin`` and the field."""
    fields = _check_table("role", name, raw, origin, ROLE_FIELDS)
    return Role(
        name=name,
        origin=origin,
        description=_optional_str(origin, "description", fields),
        default_capability_mode=(
            check_enum(
                origin,
                "default_capability_mode",
                fields["default_capability_mode"],
                CAPABILITY_MODES,
            )
            if "default_capability_mode" in fields
            else None
        ),
        model=_optional_str(origin, "model", fields),
        reasoning_effort=(
            check_enum(origin, "reasoning_effort", fields["reasoning_effort"], EFFORTS)
            if "reasoning_effort" in fields
            else None
        ),
        prompt_file=_optional_str(origin, "prompt_file", fields),
        default_isolation=(
            check_enum(origin, "default_isolation", fields["default_isolation"], ISOLATIONS)
            if "default_isolation" in fields
            else None
        ),
        base_dir=base_dir,
    )


def persona_from_mapping(
    name: str, raw: Any, origin: str, *, base_dir: str | None = None
) -> Persona:
    """Validate one persona table; a capability mode or unknown field is an error."""
    if isinstance(raw, Mapping):
        for key in raw:
            if key in _CAPABILITY_SPELLINGS:
                fail(origin, str(key), "personas have no capability mode; set it on the role")
    fields = _check_table("persona", name, raw, origin, PERSONA_FIELDS)
    instructions = fields.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        fail(origin, "instructions", f"must be a string (got {instructions!r})")
    return Persona(
        name=name,
        origin=origin,
        instructions=instructions,
        instructions_file=_optional_str(origin, "instructions_file", fields),
        inputs=check_str_list(origin, "inputs", fields["inputs"]) if "inputs" in fields else (),
        outputs=(
            check_str_list(origin, "outputs", fields["outputs"]) if "outputs" in fields else ()
        ),
        model=_optional_str(origin, "model", fields),
        reasoning_effort=(
            check_enum(origin, "reasoning_effort", fields["reasoning_effort"], EFFORTS)
            if "reasoning_effort" in fields
            else None
        ),
        default_isolation=(
            check_enum(origin, "default_isolation", fields["default_isolation"], ISOLATIONS)
            if "default_isolation" in fields
            else None
        ),
        base_dir=base_dir,
    )


def table_problems(kind: str, tables: Mapping[str, Any]) -> list[AgentConfigError]:
    """Every error of the ``[agents.roles]`` (``kind = "roles"``) or ``[agents.personas]``
    tables, one per bad field (not only the first), each from ``agents.<kind>.<name>``."""
    check = role_from_mapping if kind == "roles" else persona_from_mapping
    errors: list[AgentConfigError] = []
    for name, raw in tables.items():
        origin = f"agents.{kind}.{name}"
        try:
            check(name, {}, origin)
        except AgentConfigError as exc:
            errors.append(exc)
            continue
        if not isinstance(raw, Mapping):
            errors.append(_table_error(kind, name, raw, origin))
            continue
        for key, value in raw.items():
            try:
                check(name, {key: value}, origin)
            except AgentConfigError as exc:
                errors.append(exc)
    return errors


def _table_error(kind: str, name: str, raw: Any, origin: str) -> AgentConfigError:
    try:
        _check_table(kind.rstrip("s"), name, raw, origin, frozenset())
    except AgentConfigError as exc:
        return exc
    raise AssertionError("not a table, yet accepted")  # pragma: no cover
