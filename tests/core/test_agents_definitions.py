"""Agent definitions: front matter parsing and per-field validation naming file and field."""

from __future__ import annotations

import pytest

from memoryd.core.agents.definitions import AgentDefinition, McpInheritance, parse_definition
from memoryd.errors import AgentConfigError

FULL = """\
---
name: reviewer
description: Reviews diffs for bugs.
promptMode: full
toolConfig: {bash: {timeout: 30}}
capabilityMode: read-only
permissionMode: acceptEdits
tools: Read, Grep, Glob
disallowedTools: [Write]
effort: xhigh
maxTurns: 12
isolation: worktree
model: grok-code-fast
hooks: {PreToolUse: [{matcher: Bash}]}
mcpServers: [github]
mcpInheritance: {except: [slack]}
skills: [review]
---

You review code.

Be terse.
"""


def header(**fields: str) -> str:
    base = {"name": "a", "description": "An agent."} | fields
    lines = [f"{key}: {value}" for key, value in base.items()]
    return "---\n" + "\n".join(lines) + "\n---\nBody.\n"


def test_full_definition_parses_every_field() -> None:
    d = parse_definition(FULL, "/p/.grok/agents/reviewer.md")
    assert d == AgentDefinition(
        name="reviewer",
        description="Reviews diffs for bugs.",
        prompt="You review code.\n\nBe terse.",
        origin="/p/.grok/agents/reviewer.md",
        prompt_mode="full",
        tool_config={"bash": {"timeout": 30}},
        capability_mode="read-only",
        permission_mode="acceptEdits",
        tools=("Read", "Grep", "Glob"),
        disallowed_tools=("Write",),
        effort="xhigh",
        max_turns=12,
        isolation="worktree",
        model="grok-code-fast",
        hooks={"PreToolUse": [{"matcher": "Bash"}]},
        mcp_servers=("github",),
        mcp_inheritance=McpInheritance(mode="except", names=("slack",)),
        skills=("review",),
    )


def test_minimal_definition_has_defaults_and_inherit_means_parent_model() -> None:
    d = parse_definition(header(model="inherit"), "x.md")
    assert (d.prompt_mode, d.isolation, d.model, d.effort, d.tools) == (
        "extend",
        "none",
        None,
        None,
        None,
    )
    assert d.prompt == "Body."
    assert d.to_dict()["model"] == "inherit"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", McpInheritance("all")),
        ("none", McpInheritance("none")),
        ("{named: [a, b]}", McpInheritance("named", ("a", "b"))),
    ],
)
def test_mcp_inheritance_forms(value: str, expected: McpInheritance) -> None:
    assert parse_definition(header(mcpInheritance=value), "x.md").mcp_inheritance == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("effort", "huge"),
        ("isolation", "container"),
        ("promptMode", "replace"),
        ("permissionMode", "yolo"),
        ("capabilityMode", "write-only"),
        ("maxTurns", "0"),
        ("maxTurns", "many"),
        ("maxTurns", "true"),
        ("model", "''"),
        ("tools", "{a: 1}"),
        ("hooks", "[a]"),
        ("toolConfig", "{when: 2024-01-01}"),
        ("mcpInheritance", "some"),
        ("mcpInheritance", "{only: [a]}"),
        ("description", "''"),
        ("name", "'has space'"),
        ("colour", "blue"),
    ],
)
def test_invalid_field_is_an_error_naming_file_and_field(field: str, value: str) -> None:
    with pytest.raises(AgentConfigError) as info:
        parse_definition(header(**{field: value}), "/proj/.grok/agents/a.md")
    message = str(info.value)
    assert "/proj/.grok/agents/a.md" in message
    assert repr(field) in message
    assert info.value.data["file"] == "/proj/.grok/agents/a.md"
    assert info.value.data["field"] == field


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("---\ndescription: d\n---\n", "name"),
        ("---\nname: a\n---\n", "description"),
        ("---\nname: a\ndescription:\n---\n", "description"),
    ],
)
def test_name_and_description_are_required(text: str, missing: str) -> None:
    with pytest.raises(AgentConfigError, match=f"'{missing}': is required"):
        parse_definition(text, "a.md")


@pytest.mark.parametrize(
    "text",
    [
        "no front matter\n",
        "---\nname: a\ndescription: d\n",
        "---\nname: [unclosed\n---\n",
        "---\n- a list\n---\n",
    ],
)
def test_bad_front_matter_names_the_file(text: str) -> None:
    with pytest.raises(AgentConfigError) as info:
        parse_definition(text, "/home/u/.grok/agents/broken.md")
    assert "/home/u/.grok/agents/broken.md" in str(info.value)
    assert info.value.data["field"] == "front matter"


def test_errors_after_the_name_carry_the_agent_name() -> None:
    with pytest.raises(AgentConfigError) as info:
        parse_definition(header(name="scout", effort="huge"), "x.md")
    assert info.value.data["agent"] == "scout"


def test_windows_line_endings_and_bom_are_accepted() -> None:
    text = "\ufeff---\r\nname: a\r\ndescription: d\r\n---\r\nLine one.\r\nLine two.\r\n"
    d = parse_definition(text, "a.md")
    assert (d.name, d.prompt) == ("a", "Line one.\nLine two.")


def test_yaml_error_reports_the_file_line() -> None:
    with pytest.raises(AgentConfigError, match="line 3"):
        parse_definition("---\nname: a\ndescription: d: e\n---\n", "a.md")
