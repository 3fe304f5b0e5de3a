"""Agent hook events, plans, injected context and output (pure)."""

from __future__ import annotations

import json

import pytest

from memoryd.core.hooks import Hit, Plan, compose_context, hook_output, parse_event, plan_for
from memoryd.errors import InvalidParams

BASE = {"session_id": "s1", "cwd": "/src/app", "transcript_path": "/t/s1.jsonl"}


def test_events_and_their_plans() -> None:
    def plan(name: str, on_prompt: bool = False, **extra: object) -> Plan:
        event = parse_event("claude-code", {**BASE, "hook_event_name": name, **extra})
        return plan_for(event, on_prompt=on_prompt)

    assert plan("SessionStart", source="resume") == Plan(open=True, ingest=True, inject="session")
    assert plan("Stop") == plan("SubagentStop") == Plan(ingest=True)
    assert plan("UserPromptSubmit", prompt="hi") == Plan(ingest=True)
    assert plan("UserPromptSubmit", True, prompt="hi") == Plan(ingest=True, inject="prompt")
    assert plan("PreCompact", trigger="auto") == Plan(ingest=True, after="flush")
    assert plan("SessionEnd", reason="exit") == Plan(ingest=True, after="close")
    assert plan("PreToolUse").nothing and plan("Notification").nothing
    codex = parse_event("codex", {**BASE, "hook_event_name": "Stop", "transcript_path": None})
    assert plan_for(codex, on_prompt=False) == Plan(ingest=False)


@pytest.mark.parametrize(
    ("agent", "raw", "param"),
    [
        ("gemini", {**BASE, "hook_event_name": "Stop"}, "agent"),
        ("codex", [1, 2], "event"),
        ("codex", {**BASE}, "hook_event_name"),
        ("codex", {**BASE, "hook_event_name": "Stop", "cwd": "rel"}, "cwd"),
        ("codex", {**BASE, "hook_event_name": "Stop", "session_id": 5}, "session_id"),
        ("codex", {**BASE, "hook_event_name": "Stop", "transcript_path": "t.jsonl"}, None),
    ],
)
def test_bad_events_are_refused_naming_the_field(agent: str, raw: object, param: str) -> None:
    with pytest.raises(InvalidParams) as raised:
        parse_event(agent, raw)
    if param:
        assert raised.value.data.get("param") == param


def test_context_keeps_file_order_whole_lines_and_the_budget() -> None:
    workspace = "## Deploy\n\nUse infra/deploy.sh.\n\n## Tests\n\nRun make test.\n"
    global_md = "## Style\n\nPrefer small modules.\n"
    full = compose_context([("Workspace", workspace), ("Global", global_md)], [], 10_000)
    assert (
        full.index("Use infra/deploy.sh.")
        < full.index("Run make test.")
        < full.index("Prefer small modules.")
    )
    for budget in range(40, len(full) + 5, 7):
        text = compose_context([("Workspace", workspace), ("Global", global_md)], [], budget)
        assert len(text) <= budget
        for line in text.splitlines():  # never a cut line
            assert line in full.splitlines()
    assert compose_context([("Workspace", ""), ("Global", "  \n")], [], 6000) == ""
    hits = [Hit("sessions/x.md", 3, 0.95, "the   retry\nlimit is 5")]
    with_hits = compose_context([], hits, 6000)
    assert "- sessions/x.md:3 (0.95): the retry limit is 5" in with_hits


def test_output_is_the_documented_json_for_context_events_only() -> None:
    start = parse_event("codex", {**BASE, "hook_event_name": "SessionStart"})
    out = hook_output(start, "ctx")
    assert out is not None
    assert json.loads(out) == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "ctx"}
    }
    assert hook_output(start, "") is None
    stop = parse_event("codex", {**BASE, "hook_event_name": "Stop"})
    assert hook_output(stop, "ctx") is None
