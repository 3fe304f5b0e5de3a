"""Roles and personas from raw mappings: fields, unknown fields, enums, no persona capability."""

from __future__ import annotations

from typing import Any

import pytest

from memoryd.core.agents.resolve import Overrides
from memoryd.core.agents.roles import Persona, Role, persona_from_mapping, role_from_mapping
from memoryd.errors import AgentConfigError, InvalidParams


def test_role_with_every_field() -> None:
    raw = {
        "description": "Reviews code",
        "default_capability_mode": "read-only",
        "model": "m-1",
        "reasoning_effort": "high",
        "prompt_file": "reviewer.md",
        "default_isolation": "worktree",
    }
    role = role_from_mapping("reviewer", raw, "r.toml", base_dir="/p/.grok/roles")
    assert role == Role(
        name="reviewer",
        origin="r.toml",
        description="Reviews code",
        default_capability_mode="read-only",
        model="m-1",
        reasoning_effort="high",
        prompt_file="reviewer.md",
        default_isolation="worktree",
        base_dir="/p/.grok/roles",
    )


def test_persona_with_every_field() -> None:
    raw = {
        "instructions": "Be skeptical.",
        "instructions_file": "skeptic.md",
        "inputs": ["diff"],
        "outputs": "findings",
        "model": "m-2",
        "reasoning_effort": "max",
        "default_isolation": "none",
    }
    persona = persona_from_mapping("skeptic", raw, "s.toml")
    assert persona == Persona(
        name="skeptic",
        origin="s.toml",
        instructions="Be skeptical.",
        instructions_file="skeptic.md",
        inputs=("diff",),
        outputs=("findings",),
        model="m-2",
        reasoning_effort="max",
        default_isolation="none",
    )


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"temperature": 0.2}, "temperature"),
        ({"default_capability_mode": "root"}, "default_capability_mode"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"default_isolation": "vm"}, "default_isolation"),
        ({"model": 3}, "model"),
        ({"prompt_file": ""}, "prompt_file"),
    ],
)
def test_bad_role_fields_are_errors_naming_them(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(AgentConfigError) as info:
        role_from_mapping("reviewer", raw, "/p/.grok/roles/reviewer.toml")
    assert info.value.data == {"file": "/p/.grok/roles/reviewer.toml", "field": field}
    assert repr(field) in str(info.value)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"instructions": "x", "tone": "dry"}, "tone"),
        ({"instructions": "x", "reasoning_effort": "huge"}, "reasoning_effort"),
        ({"instructions": "x", "default_isolation": "vm"}, "default_isolation"),
        ({"instructions": 7}, "instructions"),
        ({"instructions": "x", "inputs": [1]}, "inputs"),
    ],
)
def test_bad_persona_fields_are_errors_naming_them(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(AgentConfigError) as info:
        persona_from_mapping("skeptic", raw, "p.toml")
    assert info.value.data["field"] == field


@pytest.mark.parametrize("key", ["capability_mode", "default_capability_mode", "capabilityMode"])
def test_persona_with_a_capability_mode_is_rejected(key: str) -> None:
    with pytest.raises(AgentConfigError, match="no capability mode") as info:
        persona_from_mapping("p", {"instructions": "x", key: "all"}, "p.toml")
    assert info.value.data["field"] == key


def test_table_must_be_a_mapping() -> None:
    with pytest.raises(AgentConfigError, match="must be a table"):
        role_from_mapping("r", "read-only", "config")


def test_overrides_from_params() -> None:
    raw = {"model": "m", "reasoning_effort": "low", "capability_mode": "all", "persona": "p"}
    assert Overrides.from_mapping(raw | {"isolation": None}) == Overrides(
        model="m", reasoning_effort="low", capability_mode="all", persona="p"
    )
    assert Overrides.from_mapping(None) == Overrides()


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"temperature": 1}, "overrides.temperature"),
        ({"isolation": "vm"}, "overrides.isolation"),
        ({"reasoning_effort": "huge"}, "overrides.reasoning_effort"),
        ({"capability_mode": "sudo"}, "overrides.capability_mode"),
        ({"persona": "../x"}, "overrides.persona"),
        ({"model": ""}, "overrides.model"),
    ],
)
def test_bad_overrides_are_invalid_params_naming_the_key(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(InvalidParams) as info:
        Overrides.from_mapping(raw)
    assert info.value.data["key"] == key
