"""What an open session holds in memory (issue 17): the flush window's tail, not its whole
transcript; its logs, prompts, summary and counts are those of the whole transcript.

A real :class:`SessionManager` on a real index and journal, :class:`FakeChatModel` at the
model boundary. Expected outputs come from the scenario (the pure reference rules applied
to the whole transcript, and counts written out by hand), never from what memory holds.
"""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.core.config import Config
from memoryd.core.flushing import Message, flush_prompt, flush_section, flush_window
from memoryd.core.workspace import session_log_name
from memoryd.providers.llm import FakeChatModel, Prompt
from memoryd.runtime.workspace.ingest import Ingestor
from memoryd.runtime.workspace.sessions import SessionManager
from memoryd.store.files import append_section
from memoryd.store.journal import journal_name, load
from tests.runtime.conftest import Env, MemoryFactory
from tests.support.transcript_lines import claude_line

pytestmark = pytest.mark.anyio

NOW = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)
SID = "9a1b2c3d-long-session"
TOTAL = 5000
#: Flush after this many messages; the answers each flush gets.
ROUNDS = [1000, 2200, 3000, 4000, 5000]
ANSWERS = [
    "## Round 1\n\nShard 1 of the zebrafish cache lives on runner 1.",
    "NO_REPLY",
    "just prose without a heading",  # rejected: the next flush covers these messages again
    "## Round 4\n\nShard 4 of the zebrafish cache lives on runner 4.",
    "## Round 5\n\nShard 5 of the zebrafish cache lives on runner 5.",
]
#: A turn without a user message from 3941 to 3999: the window at 4000 looks back to 3940.
AUTONOMOUS = range(3941, 4000)
FILLER = 1000  # characters of each message: 5 MB of transcript in all


def message(i: int) -> Message:
    """The scenario's message ``i``: turns of 10 (a user message, then assistant and tool
    messages), a system message now and then, one long turn without a user message."""
    if i % 500 == 5:
        role = "system"
    elif i % 10 == 0 and i not in AUTONOMOUS:
        role = "user"
    elif i % 2:
        role = "assistant"
    else:
        role = "tool"
    head = f"Turn {i // 10}, message {i}: how is zebrafish shard {i % 97} configured? "
    return Message(role, (head + f"runner {i} holds cache line {i * 7} ... " * 40)[:FILLER])  # type: ignore[arg-type]


def messages(start: int, stop: int) -> list[Message]:
    return [message(i) for i in range(start, stop)]


def config() -> Config:
    base = Config()
    return dataclasses.replace(base, flush=dataclasses.replace(base.flush, idle_timeout_secs=0))


@asynccontextmanager
async def running(memory: Any, model: FakeChatModel) -> AsyncIterator[SessionManager]:
    manager = SessionManager(memory, config(), model, clock=NOW.timestamp)
    async with anyio.create_task_group() as tg:
        await tg.start(manager.run)
        yield manager
        tg.cancel_scope.cancel()  # a crash, as far as sessions go: journals stay


async def feed(manager: SessionManager, start: int, stop: int, held: list[int]) -> None:
    """Append messages ``start``..``stop`` in batches of 100, flushing at each round."""
    for n in range(start, stop, 100):
        reply = await manager.append(SID, messages(n, min(n + 100, stop)))
        assert reply == {"count": min(n + 100, stop)}
        held.append(len(manager.held_messages(SID)))
        if reply["count"] in ROUNDS:
            await manager.flush(SID)


def expected_prompts() -> list[Prompt]:
    """What the model is asked at each round: the window of the whole transcript so far,
    after the text the last *written* flush stored."""
    whole = messages(0, TOTAL)
    out, last = [], None
    for count, answer in zip(ROUNDS, ANSWERS, strict=True):
        system, user = flush_prompt(flush_window(whole[:count]), last)
        out.append(Prompt(system, user))
        if answer.startswith("##"):
            last = answer
    return out


def expected_log(tmp: Path) -> tuple[str, str]:
    """The session log's name and text: the written flushes, then the summary."""
    whole = messages(0, TOTAL)
    users = [m for m in whole if m.role == "user"]
    counts = {role: sum(1 for m in whole if m.role == role) for role in ("assistant", "tool")}
    path = tmp / "expected.md"
    for answer in ANSWERS:
        if answer.startswith("##"):
            append_section(path, flush_section(answer, NOW, "manual"))
    topics = [f"- {' '.join(m.content.split())[:99].rstrip()}…" for m in users[:5]]
    summary = [
        "## Session Summary",
        "",
        "- Date: 2025-03-04 (UTC)",
        f"- Messages: 5000 (user {len(users)}, assistant {counts['assistant']}, system 10, "
        f"tool {counts['tool']})",
        f"- User messages: {len(users)}",
        "",
        "## Topics Discussed",
        "",
        *topics,
    ]
    append_section(path, "\n".join(summary) + "\n")
    name = session_log_name(NOW.date(), users[0].content.strip(), SID)
    return name, path.read_text()


def live_status(manager: SessionManager) -> dict[str, Any]:
    (status,) = manager.status()
    return {k: status[k] for k in ("messages", "unflushed", "last_flush", "log_path")}


async def test_a_long_session_holds_only_its_flush_window(
    env: Env, open_memory: MemoryFactory, tmp_path: Path
) -> None:
    """5,000 messages of 1 KB, flushed in 5 rounds, with a crash after 3,400: memory holds
    the window's tail (at most 60 messages here, not 5,000), recovery reads the journal a
    line at a time into the same state, and the prompts, log, summary and counts are those
    of the whole transcript."""
    memory = await open_memory(None, config())
    model = FakeChatModel(ANSWERS)
    held: list[int] = []
    tracemalloc.start()
    try:
        async with running(memory, model) as manager:
            await manager.open(SID)
            await feed(manager, 0, 3400, held)
            before_crash = live_status(manager)
            tail = manager.held_messages(SID)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0]
        # flushed through 2,200 (the NO_REPLY round); the rejected round at 3,000 moved nothing
        assert before_crash["messages"] == 3400 and before_crash["unflushed"] == 1200
        assert before_crash["last_flush"]["outcome"] == "rejected"
        journal_size = (env.workspace.live_dir / journal_name(SID)).stat().st_size
        assert journal_size > TOTAL * 0.68 * FILLER
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        async with running(memory, model) as manager:  # a new daemon: recovers the journal
            peak = tracemalloc.get_traced_memory()[1] - base
            assert live_status(manager) == before_crash
            assert manager.held_messages(SID) == tail
            await feed(manager, 3400, TOTAL, held)
            final = live_status(manager)
            closed = await manager.close(SID)
    finally:
        tracemalloc.stop()
    print(
        f"held at most {max(held)} of {TOTAL} messages; traced memory after 3,400 messages "
        f"{grown / 1e6:.2f} MB; recovery of a {journal_size / 1e6:.1f} MB journal peaked at "
        f"{peak / 1e6:.2f} MB"
    )
    # Memory: the window's tail (60 at the long turn), 20 or so otherwise; no 3.4 MB of text.
    assert max(held) == 60 and held[-1] <= 22, held
    assert grown < 1.5e6, grown
    assert peak < 2.5e6, peak  # never the whole journal at once
    # What was written and asked is the whole transcript's.
    assert model.prompts == expected_prompts()
    name, text = expected_log(tmp_path)
    assert {p.name: p.read_text() for p in env.workspace.sessions_dir.glob("*.md")} == {name: text}
    assert final["messages"] == TOTAL and final["unflushed"] == 0
    assert final["last_flush"]["outcome"] == "written"
    assert closed == {
        "summary_written": True,
        "messages": TOTAL,
        "path": f"{env.workspace.key.dirname}/sessions/{name}",
    }


async def test_a_rewritten_transcript_is_compared_with_every_message_not_only_the_held(
    env: Env, open_memory: MemoryFactory, tmp_path: Path
) -> None:
    """After a flush the session holds 20 of 300 messages; a rewritten transcript read again
    from its start still appends only what is new (10), not the 280 let go."""
    memory = await open_memory(None, config())
    model = FakeChatModel(["## Zebrafish\n\nThe cache lives on the runners."])
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(b"".join(claude_line(i) for i in range(300)))
    async with running(memory, model) as manager:
        ingestor = Ingestor(manager, env.workspace, lambda: 2000)
        await manager.open(SID)
        first = await ingestor.ingest(SID, str(transcript), "claude-code")
        assert first["ingested"] == 300
        assert (await manager.flush(SID))["outcome"] == "written"
        assert len(manager.held_messages(SID)) == 20
        # Rewritten: shorter than the mark (250 of the lines, then 10 new ones).
        lines = [claude_line(i) for i in range(250)] + [claude_line(i) for i in range(300, 310)]
        transcript.write_bytes(b"".join(lines))
        again = await ingestor.ingest(SID, str(transcript), "claude-code")
        assert again["rewritten"] is True
        assert again["ingested"] == 10 and again["count"] == 310
        status = live_status(manager)
    state = load(env.workspace.live_dir / journal_name(SID))
    assert state is not None
    assert [m.message.content for m in state.messages] == [
        f"message {i}: the zebrafish cache on runner {i}" for i in range(310)
    ]
    assert status["messages"] == 310 and status["unflushed"] == 10


async def test_without_flushes_memory_still_holds_only_the_window(
    env: Env, open_memory: MemoryFactory
) -> None:
    """No model, so no flush: what is let go does not wait for one (the window is all a
    later flush could look at)."""
    memory = await open_memory(None, config())
    manager = SessionManager(memory, config(), None, clock=NOW.timestamp)
    async with anyio.create_task_group() as tg:
        await tg.start(manager.run)
        await manager.open(SID)
        for n in range(0, 1000, 50):
            await manager.append(SID, messages(n, n + 50))
        assert len(manager.held_messages(SID)) <= 21
        (status,) = manager.status()
        assert status["messages"] == 1000 and status["unflushed"] == 1000
        tg.cancel_scope.cancel()
