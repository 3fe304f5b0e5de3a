"""The sub-agent cascade: spawn overrides, role, persona and definition → one answer (SPEC §9).

:func:`resolve_effective_overrides` is pure. Everything it needs arrives as values: the
definition, the role chosen by sub-agent type, the persona chosen by name, the spawn
:class:`Overrides`, the per-agent model pin, the parent's model, and the already-read
contents (or read errors) of the role's ``prompt_file`` and the persona's
``instructions_file``.

Per field: spawn override > role default > persona default > none. ``capability_mode``
never comes from a persona. Then the definition fallback: an empty ``reasoning_effort``
takes the definition's ``effort``; isolation ``none`` becomes ``worktree`` when the
definition says so; model is the resolved override > per-agent pin > the definition's
model > the parent's model.

Failure modes: a requested persona that is missing or empty sets ``persona_error`` (the
caller must abort the spawn) and the rest resolves; an unreadable persona file sets
``persona_error`` and leaves every other field at its default. An unreadable role prompt
only sets ``role_prompt_warning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memoryd.core.agents.definitions import (
    CAPABILITY_MODES,
    EFFORTS,
    ISOLATIONS,
    AgentDefinition,
    CapabilityMode,
    Effort,
    Isolation,
    is_valid_name,
)
from memoryd.core.agents.roles import Persona, Role
from memoryd.core.replies import EffectiveConfig
from memoryd.errors import InvalidParams

OVERRIDE_FIELDS: tuple[str, ...] = (
    "model",
    "reasoning_effort",
    "capability_mode",
    "persona",
    "isolation",
)


@dataclass(frozen=True)
class Overrides:
    """What the spawning agent asked for explicitly; ``None`` means "not given"."""

    model: str | None = None
    reasoning_effort: Effort | None = None
    capability_mode: CapabilityMode | None = None
    persona: str | None = None
    isolation: Isolation | None = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> Overrides:
        """Validate request parameters; unknown keys and bad values name the key."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise InvalidParams("overrides must be an object", key="overrides")
        unknown = sorted(str(k) for k in raw if k not in OVERRIDE_FIELDS)
        if unknown:
            raise InvalidParams(
                f"unknown override(s): {', '.join(unknown)} (known: {', '.join(OVERRIDE_FIELDS)})",
                key=f"overrides.{unknown[0]}",
            )
        values = {k: v for k, v in raw.items() if v is not None}
        for key in ("model", "persona"):
            if key in values and (not isinstance(values[key], str) or not values[key].strip()):
                raise InvalidParams(
                    f"overrides.{key} must be a non-empty string", key=f"overrides.{key}"
                )
        if "persona" in values and not is_valid_name(values["persona"]):
            raise InvalidParams(
                f"overrides.persona is not a valid name: {values['persona']!r}",
                key="overrides.persona",
            )
        for key, allowed in (
            ("reasoning_effort", EFFORTS),
            ("capability_mode", CAPABILITY_MODES),
            ("isolation", ISOLATIONS),
        ):
            if key in values and values[key] not in allowed:
                raise InvalidParams(
                    f"overrides.{key} must be one of {', '.join(allowed)} (got {values[key]!r})",
                    key=f"overrides.{key}",
                )
        return cls(**values)


@dataclass(frozen=True)
class FileText:
    """A referenced file that was read."""

    path: str
    text: str


@dataclass(frozen=True)
class FileUnreadable:
    """A referenced file that could not be read, and why."""

    path: str
    reason: str


FileContent = FileText | FileUnreadable


@dataclass(frozen=True)
class EffectiveRuntimeConfig:
    """The answer: exactly the fields of SPEC §9 (no temperature, max_tokens or tools)."""

    model: str | None = None
    reasoning_effort: Effort | None = None
    capability_mode: CapabilityMode | None = None
    persona: str | None = None
    persona_instructions: str | None = None
    role_prompt: str | None = None
    role_prompt_warning: str | None = None
    role_name: str | None = None
    persona_error: str | None = None
    isolation: Isolation = "none"

    def to_dict(self) -> EffectiveConfig:
        """JSON-ready view with exactly the SPEC fields."""
        return {
            "model": self.model,
            "reasoning_effort": self.reasoning_effort,
            "capability_mode": self.capability_mode,
            "persona": self.persona,
            "persona_instructions": self.persona_instructions,
            "role_prompt": self.role_prompt,
            "role_prompt_warning": self.role_prompt_warning,
            "role_name": self.role_name,
            "persona_error": self.persona_error,
            "isolation": self.isolation,
        }


def render_persona(inline: str | None, file_text: str | None) -> str | None:
    """Inline instructions first, then the file's, one blank line apart, in one block.

    ``None`` when both are empty (an empty persona).
    """
    parts = [part.strip() for part in (inline, file_text) if part and part.strip()]
    if not parts:
        return None
    return "<persona>\n" + "\n\n".join(parts) + "\n</persona>"


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def resolve_effective_overrides(
    definition: AgentDefinition | None,
    role: Role | None,
    persona: Persona | None,
    overrides: Overrides,
    *,
    pinned_model: str | None = None,
    parent_model: str | None = None,
    role_prompt_file: FileContent | None = None,
    persona_file: FileContent | None = None,
) -> EffectiveRuntimeConfig:
    """Fold overrides, role, persona and definition into the effective runtime config.

    ``persona`` is the persona found for ``overrides.persona`` (``None`` if none was
    found); it is ignored when no persona was requested. ``role_prompt_file`` and
    ``persona_file`` are the read results of ``role.prompt_file`` and
    ``persona.instructions_file`` (``None`` when the field is unset).
    """
    requested = overrides.persona
    active = persona if requested is not None else None
    persona_error: str | None = None
    persona_instructions: str | None = None
    if requested is not None:
        if active is None:
            persona_error = f"persona {requested!r} not found"
        elif isinstance(persona_file, FileUnreadable):
            return EffectiveRuntimeConfig(
                persona=requested,
                persona_error=(
                    f"persona {requested!r}: cannot read instructions_file "
                    f"{persona_file.path}: {persona_file.reason}"
                ),
            )
        else:
            file_text = persona_file.text if isinstance(persona_file, FileText) else None
            persona_instructions = render_persona(active.instructions, file_text)
            if persona_instructions is None:
                persona_error = f"persona {requested!r} is empty: it has no instructions"

    role_prompt: str | None = None
    role_prompt_warning: str | None = None
    if role is not None and isinstance(role_prompt_file, FileText):
        role_prompt = role_prompt_file.text.strip() or None
    elif role is not None and isinstance(role_prompt_file, FileUnreadable):
        role_prompt_warning = (
            f"role {role.name!r}: cannot read prompt_file "
            f"{role_prompt_file.path}: {role_prompt_file.reason}"
        )

    r_model = role.model if role else None
    r_effort = role.reasoning_effort if role else None
    r_isolation = role.default_isolation if role else None
    p_model = active.model if active else None
    p_effort = active.reasoning_effort if active else None
    p_isolation = active.default_isolation if active else None

    model: str | None = _first(overrides.model, r_model, p_model)
    effort: Effort | None = _first(overrides.reasoning_effort, r_effort, p_effort)
    capability: CapabilityMode | None = _first(
        overrides.capability_mode, role.default_capability_mode if role else None
    )
    isolation: Isolation = _first(overrides.isolation, r_isolation, p_isolation) or "none"

    if definition is not None:
        effort = effort if effort is not None else definition.effort
        if isolation == "none" and definition.isolation == "worktree":
            isolation = "worktree"
    model = _first(model, pinned_model, definition.model if definition else None, parent_model)

    return EffectiveRuntimeConfig(
        model=model,
        reasoning_effort=effort,
        capability_mode=capability,
        persona=requested,
        persona_instructions=persona_instructions,
        role_prompt=role_prompt,
        role_prompt_warning=role_prompt_warning,
        role_name=role.name if role else None,
        persona_error=persona_error,
        isolation=isolation,
    )
