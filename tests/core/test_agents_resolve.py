"""The per-field cascade, the definition fallback and the failure modes (SPEC §9).

One table-driven test per cascade row. Values are spelled ``o`` (override), ``r`` (role),
``p`` (persona) and ``d`` (definition) so each table row reads as "who wins".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.agents.definitions import AgentDefinition
from memoryd.core.agents.resolve import (
    EffectiveRuntimeConfig,
    FileText,
    FileUnreadable,
    Overrides,
    render_persona,
    resolve_effective_overrides,
)
from memoryd.core.agents.roles import Persona, Role

SPEC_FIELDS = {
    "model",
    "reasoning_effort",
    "capability_mode",
    "persona",
    "persona_instructions",
    "role_prompt",
    "role_prompt_warning",
    "role_name",
    "persona_error",
    "isolation",
}


def definition(**fields: Any) -> AgentDefinition:
    return AgentDefinition(name="worker", description="d", prompt="", origin="w.md", **fields)


def role(**fields: Any) -> Role:
    return Role(name="worker", origin="r.toml", **fields)


def persona(**fields: Any) -> Persona:
    return Persona(name="sk", origin="p.toml", **({"instructions": "Be careful."} | fields))


def run(
    override: dict[str, Any] | None = None,
    role_fields: dict[str, Any] | None = None,
    persona_fields: dict[str, Any] | None = None,
    definition_fields: dict[str, Any] | None = None,
    **kwargs: Any,
) -> EffectiveRuntimeConfig:
    with_persona = persona_fields is not None
    return resolve_effective_overrides(
        definition(**definition_fields) if definition_fields is not None else None,
        role(**role_fields) if role_fields is not None else None,
        persona(**persona_fields) if persona_fields is not None else None,
        Overrides(**((override or {}) | ({"persona": "sk"} if with_persona else {}))),
        **kwargs,
    )


LEVELS = [
    # override, role, persona, expected
    ("o", "r", "p", "o"),
    ("o", None, "p", "o"),
    ("o", "r", None, "o"),
    ("o", None, None, "o"),
    (None, "r", "p", "r"),
    (None, "r", None, "r"),
    (None, None, "p", "p"),
    (None, None, None, None),
]


@pytest.mark.parametrize(("o", "r", "p", "expected"), LEVELS)
def test_model_cascade_override_role_persona_none(
    o: str | None, r: str | None, p: str | None, expected: str | None
) -> None:
    result = run(
        {"model": o and "model-o"},
        {"model": r and "model-r"},
        {"model": p and "model-p"},
    )
    assert result.model == (expected and f"model-{expected}")


EFFORT = {"o": "high", "r": "medium", "p": "low"}


@pytest.mark.parametrize(("o", "r", "p", "expected"), LEVELS)
def test_reasoning_effort_cascade_override_role_persona_none(
    o: str | None, r: str | None, p: str | None, expected: str | None
) -> None:
    result = run(
        {"reasoning_effort": o and EFFORT[o]},
        {"reasoning_effort": r and EFFORT[r]},
        {"reasoning_effort": p and EFFORT[p]},
    )
    assert result.reasoning_effort == (expected and EFFORT[expected])


@pytest.mark.parametrize(
    ("override", "role_mode", "expected"),
    [
        ("all", "read-only", "all"),
        ("execute", None, "execute"),
        (None, "read-write", "read-write"),
        (None, None, None),
    ],
)
def test_capability_mode_cascade_override_role_never_persona(
    override: str | None, role_mode: str | None, expected: str | None
) -> None:
    # The persona takes part in every row and can never contribute a capability mode;
    # the definition's capabilityMode is not part of the cascade either.
    result = run(
        {"capability_mode": override},
        {"default_capability_mode": role_mode},
        {"model": "pm", "default_isolation": "worktree"},
        {"capability_mode": "read-only"},
    )
    assert result.capability_mode == expected
    assert not hasattr(persona(), "capability_mode")


ISOLATION = {"o": "worktree", "r": "worktree", "p": "worktree"}


@pytest.mark.parametrize(
    ("o", "r", "p", "expected"),
    [
        ("worktree", "none", "none", "worktree"),
        ("none", "worktree", "worktree", "none"),
        (None, "worktree", "none", "worktree"),
        (None, "none", "worktree", "none"),
        (None, None, "worktree", "worktree"),
        (None, None, "none", "none"),
        (None, None, None, "none"),
    ],
)
def test_isolation_cascade_override_role_persona_then_none(
    o: str | None, r: str | None, p: str | None, expected: str
) -> None:
    result = run({"isolation": o}, {"default_isolation": r}, {"default_isolation": p})
    assert result.isolation == expected


@pytest.mark.parametrize(
    ("case", "kwargs", "field", "expected"),
    [
        # reasoning_effort: the definition's effort fills only an empty value
        ("effort fills empty", {"definition_fields": {"effort": "max"}}, "reasoning_effort", "max"),
        (
            "role effort beats definition",
            {"role_fields": {"reasoning_effort": "low"}, "definition_fields": {"effort": "max"}},
            "reasoning_effort",
            "low",
        ),
        (
            "override effort beats definition",
            {"override": {"reasoning_effort": "medium"}, "definition_fields": {"effort": "max"}},
            "reasoning_effort",
            "medium",
        ),
        # isolation: definition worktree upgrades none, never downgrades
        (
            "worktree upgrades none",
            {"definition_fields": {"isolation": "worktree"}},
            "isolation",
            "worktree",
        ),
        (
            "worktree upgrades an explicit none",
            {"override": {"isolation": "none"}, "definition_fields": {"isolation": "worktree"}},
            "isolation",
            "worktree",
        ),
        (
            "definition none keeps role worktree",
            {
                "role_fields": {"default_isolation": "worktree"},
                "definition_fields": {"isolation": "none"},
            },
            "isolation",
            "worktree",
        ),
        # model: resolved override > per-agent pin > definition model > parent
        (
            "resolved override beats pin",
            {
                "role_fields": {"model": "m-role"},
                "definition_fields": {"model": "m-def"},
                "pinned_model": "m-pin",
                "parent_model": "m-parent",
            },
            "model",
            "m-role",
        ),
        (
            "pin beats definition",
            {
                "definition_fields": {"model": "m-def"},
                "pinned_model": "m-pin",
                "parent_model": "m-parent",
            },
            "model",
            "m-pin",
        ),
        (
            "definition beats parent",
            {"definition_fields": {"model": "m-def"}, "parent_model": "m-parent"},
            "model",
            "m-def",
        ),
        (
            "inherit falls to parent",
            {"definition_fields": {"model": None}, "parent_model": "m-parent"},
            "model",
            "m-parent",
        ),
        ("nothing at all", {"definition_fields": {}}, "model", None),
    ],
)
def test_definition_fallback(case: str, kwargs: dict[str, Any], field: str, expected: Any) -> None:
    assert getattr(run(**kwargs), field) == expected, case


def test_role_name_and_persona_name_are_reported() -> None:
    result = run(role_fields={}, persona_fields={})
    assert (result.role_name, result.persona, result.persona_error) == ("worker", "sk", None)


# -- persona rendering and failure modes -------------------------------------------------


def test_persona_inline_then_file_in_one_block() -> None:
    result = run(
        persona_fields={"instructions": "Inline first.\n", "instructions_file": "sk.md"},
        persona_file=FileText("/p/sk.md", "\nFrom the file.\n"),
    )
    assert result.persona_instructions == "<persona>\nInline first.\n\nFrom the file.\n</persona>"
    assert result.persona_instructions.count("<persona>") == 1


@pytest.mark.parametrize(
    ("inline", "file_text", "expected"),
    [
        ("Only inline.", None, "<persona>\nOnly inline.\n</persona>"),
        (None, "Only file.", "<persona>\nOnly file.\n</persona>"),
        ("  ", "\n", None),
        (None, None, None),
    ],
)
def test_render_persona(inline: str | None, file_text: str | None, expected: str | None) -> None:
    assert render_persona(inline, file_text) == expected


def test_missing_persona_sets_persona_error_and_the_rest_resolves() -> None:
    result = resolve_effective_overrides(
        definition(effort="high"),
        role(model="m-role"),
        None,
        Overrides(persona="ghost"),
    )
    assert result.persona_error is not None
    assert "'ghost'" in result.persona_error
    assert (result.persona, result.persona_instructions) == ("ghost", None)
    assert (result.model, result.reasoning_effort) == ("m-role", "high")


@pytest.mark.parametrize(
    ("fields", "file"),
    [
        ({"instructions": ""}, None),
        ({"instructions": None}, None),
        ({"instructions": "  ", "instructions_file": "e.md"}, FileText("/p/e.md", "\n\n")),
    ],
)
def test_empty_persona_sets_persona_error_naming_it(
    fields: dict[str, Any], file: FileText | None
) -> None:
    result = run(persona_fields=fields, persona_file=file)
    assert result.persona_error is not None
    assert "'sk'" in result.persona_error
    assert "empty" in result.persona_error
    assert result.persona_instructions is None


def test_unreadable_persona_file_sets_persona_error_and_leaves_defaults() -> None:
    result = run(
        override={"model": "m-o", "capability_mode": "all"},
        role_fields={"reasoning_effort": "high", "default_isolation": "worktree"},
        persona_fields={"instructions_file": "gone.md", "model": "m-p"},
        definition_fields={"effort": "max", "isolation": "worktree"},
        persona_file=FileUnreadable("/p/gone.md", "No such file or directory"),
        parent_model="m-parent",
    )
    assert result == EffectiveRuntimeConfig(
        persona="sk",
        persona_error=result.persona_error,
    )
    assert result.persona_error is not None
    assert "'sk'" in result.persona_error
    assert "/p/gone.md" in result.persona_error


def test_unreadable_role_prompt_only_warns() -> None:
    result = run(
        override={"reasoning_effort": "low"},
        role_fields={"model": "m-r", "default_capability_mode": "execute", "prompt_file": "x"},
        persona_fields={"default_isolation": "worktree"},
        role_prompt_file=FileUnreadable("/p/x.md", "Permission denied"),
    )
    assert result.role_prompt is None
    assert result.role_prompt_warning is not None
    assert "'worker'" in result.role_prompt_warning
    assert "Permission denied" in result.role_prompt_warning
    assert result.persona_error is None
    assert (result.model, result.reasoning_effort, result.capability_mode, result.isolation) == (
        "m-r",
        "low",
        "execute",
        "worktree",
    )
    assert result.persona_instructions == "<persona>\nBe careful.\n</persona>"


def test_readable_role_prompt_is_returned() -> None:
    result = run(role_fields={"prompt_file": "x"}, role_prompt_file=FileText("/p/x", "Review.\n"))
    assert (result.role_prompt, result.role_prompt_warning) == ("Review.", None)


# -- the shape of the answer -------------------------------------------------------------


def test_result_has_exactly_the_spec_fields() -> None:
    names = {f.name for f in dataclasses.fields(EffectiveRuntimeConfig)}
    assert names == SPEC_FIELDS
    assert set(run().to_dict()) == SPEC_FIELDS
    for absent in ("temperature", "max_tokens", "tools"):
        assert absent not in names


MODELS = st.none() | st.sampled_from(["a", "b"])
EFFORTS = st.none() | st.sampled_from(["low", "medium", "high", "xhigh", "max"])
ISOLATIONS = st.none() | st.sampled_from(["none", "worktree"])


@given(
    o_model=MODELS,
    o_effort=EFFORTS,
    o_iso=ISOLATIONS,
    r_model=MODELS,
    r_effort=EFFORTS,
    r_iso=ISOLATIONS,
    p_model=MODELS,
    p_iso=ISOLATIONS,
    d_effort=EFFORTS,
    d_iso=st.sampled_from(["none", "worktree"]),
)
def test_an_explicit_override_always_wins(
    o_model: str | None,
    o_effort: Any,
    o_iso: Any,
    r_model: str | None,
    r_effort: Any,
    r_iso: Any,
    p_model: str | None,
    p_iso: Any,
    d_effort: Any,
    d_iso: Any,
) -> None:
    result = run(
        {"model": o_model, "reasoning_effort": o_effort, "isolation": o_iso},
        {"model": r_model, "reasoning_effort": r_effort, "default_isolation": r_iso},
        {"model": p_model, "default_isolation": p_iso},
        {"effort": d_effort, "isolation": d_iso, "model": "m-def"},
        parent_model="m-parent",
    )
    if o_model is not None:
        assert result.model == o_model
    if o_effort is not None:
        assert result.reasoning_effort == o_effort
    if o_iso == "worktree":
        assert result.isolation == "worktree"
    assert result.model is not None
    assert result.persona_error is None
