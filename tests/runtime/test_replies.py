"""What the daemon sends is what ``memoryd.core.replies`` declares (issue #21, typed replies).

mypy checks the code that builds each reply; this checks the other direction over a real
socket: every required key of the declared TypedDict is in the reply, and the reply has
no key the TypedDict does not declare (nested TypedDicts too) — a reply patched outside the
types, or a TypedDict that drifted from the wire, fails here.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, NotRequired, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from memoryd.core import replies
from memoryd.providers.llm import FakeChatModel
from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)

pytestmark = pytest.mark.anyio


def problems(value: Any, hint: Any, where: str = "reply") -> list[str]:
    """How ``value`` differs from the type ``hint`` (keys of TypedDicts, recursively)."""
    if is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        hints = get_type_hints(hint, include_extras=True)
        # NotRequired written as a string annotation is not seen by __required_keys__ (3.11)
        required = {k for k in hint.__required_keys__ if get_origin(hints[k]) is not NotRequired}
        out = [f"{where}: missing {key!r}" for key in sorted(required) if key not in value]
        out += [f"{where}: undeclared {key!r}" for key in value if key not in hints]
        for key, item in value.items():
            if key in hints:
                out += problems(item, hints[key], f"{where}.{key}")
        return out
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [problems(value, arg, where) for arg in get_args(hint)]
        return [] if any(not found for found in options) else min(options, key=len)
    if origin is list and isinstance(value, list):
        [item_hint] = get_args(hint)
        return [
            p for i, item in enumerate(value) for p in problems(item, item_hint, f"{where}[{i}]")
        ]
    if origin in (NotRequired, typing.Required):
        return problems(value, get_args(hint)[0], where)
    return []


def test_the_checker_finds_missing_and_undeclared_keys() -> None:
    hit = {"chunk_id": "c", "path": "p", "start_line": 1, "end_line": 1, "score": 1.0}
    hit |= {"source": "workspace", "snippet": "s", "chunk_time": None, "heading": "h"}
    good = {"results": [hit], "mode": "fts_only", "synced_paths": 0, "generation": 1}
    good["took_ms"] = 1.0
    assert problems(good, replies.SearchReply) == []
    assert problems({**good, "extra": 1}, replies.SearchReply) == ["reply: undeclared 'extra'"]
    bad_hit = {k: v for k, v in hit.items() if k != "heading"}
    assert problems({**good, "results": [bad_hit]}, replies.SearchReply) == [
        "reply.results[0]: missing 'heading'"
    ]


async def test_every_reply_is_the_declared_shape(home: Path) -> None:
    ws = project(home, "app")
    workspace = str(ws)
    checks: list[tuple[str, Any, Any]] = []
    async with in_process_daemon() as d:
        d.daemon.supervisor.chat_model = FakeChatModel(["NO_REPLY"] * 4)  # dream.run

        async def call(method: str, hint: Any, **params: Any) -> Any:
            reply = await d.call(method, **params)
            checks.append((method, reply, hint))
            return reply

        await call("daemon.ping", replies.PingReply)
        note = await call(
            "memory.remember", replies.RememberReply, workspace=workspace, text="Use meson"
        )
        await call("memory.search", replies.SearchReply, workspace=workspace, query="meson")
        await call("memory.get", replies.GetReply, workspace=workspace, path=note["path"])
        await call("memory.files", replies.FilesReply, workspace=workspace)
        await call("index.stats", replies.StatsReply, workspace=workspace)
        await call("index.reindex", replies.ReindexReply, workspace=workspace)
        await call("session.open", replies.SessionOpenReply, workspace=workspace, session_id="s-1")
        messages = [{"role": "user", "content": "How do we build?"}]
        await call(
            "session.append", replies.SessionAppendReply, session_id="s-1", messages=messages
        )
        await call(
            "session.usage",
            replies.UsageReply,
            session_id="s-1",
            tokens=10,
            context_window=1000,
            threshold_percent=80.0,
            compaction_count=0,
        )
        await call("session.list", replies.SessionListReply)
        await call("daemon.status", replies.DaemonStatusReply)
        await call("session.close", replies.SessionCloseReply, session_id="s-1")
        await call("dream.status", replies.DreamStatusReply, workspace=workspace)
        await call("dream.run", replies.DreamRunReply, workspace=workspace, force=True)
        await call("agents.list", replies.AgentsListReply, workspace=workspace)
        await call(
            "agents.resolve",
            replies.AgentsResolveReply,
            workspace=workspace,
            subagent_type="explore",
        )
        await call("confluence.status", replies.ConfluenceStatusReply)
        await call("confluence.run", replies.ConfluenceRunReply)
        await call("secrets.scan", replies.ScanReply, workspace=workspace)
        await call("secrets.purge", replies.PurgeReply, workspace=workspace)
    found = [p for method, reply, hint in checks for p in problems(reply, hint, method)]
    assert found == []
    assert len(checks) == 21
