"""Agent lifecycle hooks (SPEC §17) — pure: what an event asks for, what the agent is told.

Claude Code and Codex run ``memoryd hook AGENT`` with one JSON event on stdin
(``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name`` and per event e.g.
``source``, ``trigger``, ``reason``, ``prompt``). :func:`parse_event` checks it,
:func:`plan_for` says what the daemon does, :func:`compose_context` builds the memory put
into the agent's context and :func:`hook_output` the stdout the agent reads — the
``hookSpecificOutput.additionalContext`` JSON both agents document for ``SessionStart``
and ``UserPromptSubmit``. Every other event prints nothing.

=================  ======================================================================
event              the daemon
=================  ======================================================================
SessionStart       opens the session (id = the agent's, workspace = ``cwd``), reads what
                   the transcript already holds (a resume), answers the curated memory
Stop, SubagentStop reads the transcript lines written since the last read
UserPromptSubmit   the same; with ``[inject] on_prompt`` also answers hits for the prompt
PreCompact         reads, then flushes with trigger ``pre_compaction``
SessionEnd         reads, then closes the session (summary, dream gates)
=================  ======================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal, get_args

from memoryd.errors import InvalidParams

Agent = Literal["claude-code", "codex"]
AGENTS: tuple[str, ...] = get_args(Agent)
After = Literal["flush", "close"]

#: Events a hook acts on; any other event is accepted and does nothing.
EVENTS = ("SessionStart", "Stop", "SubagentStop", "UserPromptSubmit", "PreCompact", "SessionEnd")
#: Hits a prompt injection adds at most.
PROMPT_HITS = 3
#: The part of a prompt searched for them (``memory.search``'s query limit): a prompt holding
#: a pasted log searched whole cost the daemon 40 s of CPU for 900 KB.
PROMPT_QUERY_CHARS = 10_000
_CONTEXT_TITLE = "# Memory (memoryd)"


@dataclass(frozen=True, slots=True)
class HookEvent:
    agent: Agent
    name: str
    session_id: str
    cwd: str
    transcript_path: str | None = None
    prompt: str | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """What the daemon does for one event."""

    open: bool = False
    ingest: bool = False
    after: After | None = None
    inject: Literal["session", "prompt"] | None = None

    @property
    def nothing(self) -> bool:
        return not (self.open or self.ingest or self.after or self.inject)


def _text(raw: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidParams(f"hook event field {key!r} must be a non-empty string", param=key)
    return value


def parse_event(agent: str, raw: object) -> HookEvent:
    """A hook event as the agent sent it (unknown fields ignored)."""
    if agent not in AGENTS:
        raise InvalidParams(
            f"unknown agent {agent!r} (expected {', '.join(AGENTS)})", param="agent"
        )
    if not isinstance(raw, Mapping):
        raise InvalidParams("a hook event must be a JSON object", param="event")
    name = _text(raw, "hook_event_name", required=True)
    sid = _text(raw, "session_id", required=True)
    cwd = _text(raw, "cwd", required=True)
    assert name is not None and sid is not None and cwd is not None
    if not PurePath(cwd).is_absolute():
        raise InvalidParams(f"hook event cwd must be an absolute path, got {cwd!r}", param="cwd")
    transcript = _text(raw, "transcript_path") or None
    if transcript is not None and not PurePath(transcript).is_absolute():
        raise InvalidParams("hook event transcript_path must be absolute", param="transcript_path")
    return HookEvent(
        agent,  # type: ignore[arg-type]
        name,
        sid,
        cwd,
        transcript,
        _text(raw, "prompt"),
        _text(raw, "source"),
    )


def plan_for(event: HookEvent, *, on_prompt: bool) -> Plan:
    """What ``event`` asks of the daemon (see the module docstring)."""
    ingest = event.transcript_path is not None
    match event.name:
        case "SessionStart":
            return Plan(open=True, ingest=ingest, inject="session")
        case "Stop" | "SubagentStop":
            return Plan(ingest=ingest)
        case "UserPromptSubmit":
            return Plan(ingest=ingest, inject="prompt" if on_prompt and event.prompt else None)
        case "PreCompact":
            return Plan(ingest=ingest, after="flush")
        case "SessionEnd":
            return Plan(ingest=ingest, after="close")
        case _:
            return Plan()


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    start_line: int
    score: float
    snippet: str


def _fit(lines: list[str], budget: int) -> tuple[list[str], int]:
    """The leading ``lines`` that fit in ``budget`` characters (newlines counted)."""
    out: list[str] = []
    for line in lines:
        cost = len(line) + 1
        if cost > budget:
            break
        out.append(line)
        budget -= cost
    return out, budget


def compose_context(sources: Sequence[tuple[str, str]], hits: Sequence[Hit], max_chars: int) -> str:
    """The memory put into an agent's context: each ``(title, markdown)`` source's lines in
    file order, then the hits, within ``max_chars`` characters; never a cut mid-line.
    Empty when there is nothing to say."""
    blocks: list[str] = []
    budget = max_chars - len(_CONTEXT_TITLE) - 2
    for title, text in sources:
        body = [line.rstrip() for line in text.strip().splitlines()]
        if not any(body):
            continue
        fitted, left = _fit([f"## {title}", "", *body, ""], budget)
        if len(fitted) <= 2:
            break
        blocks.extend(fitted)
        budget = left
    if hits:
        lines = ["## Related memory (search)", ""]
        for hit in hits:
            snippet = " ".join(hit.snippet.split())
            lines.append(f"- {hit.path}:{hit.start_line} ({hit.score:.2f}): {snippet}")
        fitted, budget = _fit(lines, budget)
        if len(fitted) > 2:
            blocks.extend(fitted)
    if not blocks:
        return ""
    return "\n".join([_CONTEXT_TITLE, "", *blocks]).rstrip() + "\n"


def hook_output(event: HookEvent, context: str) -> str | None:
    """The stdout line for the agent: ``additionalContext`` JSON for ``SessionStart`` and
    ``UserPromptSubmit`` when there is context; None (print nothing) otherwise."""
    if not context or event.name not in ("SessionStart", "UserPromptSubmit"):
        return None
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event.name, "additionalContext": context}},
        ensure_ascii=False,
    )
