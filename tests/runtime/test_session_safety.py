"""Issue #16: session identity and lifecycle — nothing a flush does can misfile memory.

Global session ids (``session_conflict``, journals recovered into the workspace that opened
them, with a real daemon restarted on the same root), one log per session whatever its id's
first 8 characters, flush idempotence, idle close, and ``session.list``.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.core.config import Config
from memoryd.core.flushing import Message
from memoryd.errors import SessionConflict, StorageError
from memoryd.providers.llm import FakeChatModel
from memoryd.runtime.workspace.sessions import SessionManager
from memoryd.store.journal import journal_name
from memoryd.store.layout import resolve_workspace
from tests.runtime.conftest import Env, MemoryFactory
from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)

pytestmark = pytest.mark.anyio

TALK = [
    Message("user", "why does the build cache keep growing on the CI runners?"),
    Message("assistant", "It is never pruned."),
    Message("user", "where does the cache live on disk, exactly?"),
    Message("assistant", "Under /var/cache/zebrafish."),
]
WIRE = [{"role": m.role, "content": m.content} for m in TALK]
ANSWER = "## Build cache\n\nThe CI cache lives under /var/cache/zebrafish and is never pruned."


def flush_config(**changes: Any) -> Config:
    config = Config()
    return dataclasses.replace(config, flush=dataclasses.replace(config.flush, **changes))


async def manager(
    open_memory: MemoryFactory, model: FakeChatModel | None, config: Config | None = None
) -> SessionManager:
    cfg = config or Config()
    return SessionManager(await open_memory(None, cfg), cfg, model)


def logs(env: Env) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(env.workspace.sessions_dir.glob("*.md"))}


# ---------------------------------------------------------------------------- global ids


async def test_a_session_id_open_in_another_workspace_is_a_conflict(home: Path) -> None:
    a, b = project(home, "alpha"), project(home, "beta")
    async with in_process_daemon() as d:
        await d.call("session.open", workspace=str(a), session_id="dup-1")
        await d.call("session.append", session_id="dup-1", messages=WIRE[:2])
        with pytest.raises(SessionConflict, match=str(a)) as caught:
            await d.call("session.open", workspace=str(b), session_id="dup-1")
        assert caught.value.data["workspace"] == str(a)
        # A's session is untouched and still takes messages
        out = await d.call("session.append", session_id="dup-1", messages=WIRE[2:])
        assert out == {"count": 4}
        # reopening in the workspace that has it resumes it
        again = await d.call("session.open", workspace=str(a), session_id="dup-1")
        assert again["resumed"] is True
    ws_a, ws_b = resolve_workspace(a, home / "memory"), resolve_workspace(b, home / "memory")
    assert not (ws_b.live_dir / journal_name("dup-1")).exists()
    # after a restart the journal recovers into A, and B still cannot take the id
    async with in_process_daemon() as d:
        with pytest.raises(SessionConflict):
            await d.call("session.open", workspace=str(b), session_id="dup-1")
        await d.call("session.append", session_id="dup-1", messages=[WIRE[0]])
        listed = (await d.call("session.list"))["sessions"]
        assert [(s["session_id"], s["workspace"], s["messages"]) for s in listed] == [
            ("dup-1", str(a), 5)
        ]
        assert (ws_a.live_dir / journal_name("dup-1")).exists()
        await d.call("session.close", session_id="dup-1")
        # closed: the id is free again, anywhere
        opened = await d.call("session.open", workspace=str(b), session_id="dup-1")
        assert opened["messages"] == 0


async def test_ids_sharing_their_first_8_characters_get_their_own_logs(
    env: Env, open_memory: MemoryFactory
) -> None:
    model = FakeChatModel([ANSWER, "## Other\n\nThe second session's own finding: kestrel."])
    mgr = await manager(open_memory, model)
    for sid in ("abcdefgh-one", "abcdefgh-two"):
        await mgr.open(sid)
        await mgr.append(sid, TALK)  # the same first message: the same slug
    first = (await mgr.flush("abcdefgh-one"))["path"]
    second = (await mgr.flush("abcdefgh-two"))["path"]
    assert first != second
    texts = logs(env)
    assert len(texts) == 2
    assert sum("zebrafish" in t for t in texts.values()) == 1
    assert sum("kestrel" in t for t in texts.values()) == 1
    # a session reopened later keeps writing its own log
    await mgr.close("abcdefgh-one")
    await mgr.close("abcdefgh-two")
    assert len(logs(env)) == 2


# ---------------------------------------------------------------------------- flush idempotence


async def test_a_second_flush_without_new_messages_asks_nothing_and_writes_nothing(
    env: Env, open_memory: MemoryFactory
) -> None:
    model = FakeChatModel([ANSWER, ANSWER, ANSWER])
    mgr = await manager(open_memory, model)
    await mgr.open("s1")
    await mgr.append("s1", TALK)
    assert (await mgr.flush("s1"))["outcome"] == "written"
    assert await mgr.flush("s1") == {"outcome": "nothing_to_store"}
    assert await mgr.flush("s1", "idle") == {"outcome": "nothing_to_store"}
    assert model.calls == 1
    # new messages whose answer repeats the log's section: not written twice
    await mgr.append("s1", [Message("user", "anything else about the cache?")])
    assert (await mgr.flush("s1"))["outcome"] == "duplicate"
    (text,) = logs(env).values()
    assert text.count("/var/cache/zebrafish") == 1


# ---------------------------------------------------------------------------- idle close


async def test_an_idle_session_is_flushed_closed_and_its_journal_removed(
    env: Env, open_memory: MemoryFactory
) -> None:
    model = FakeChatModel([ANSWER])
    config = flush_config(session_idle_close_secs=0.3, idle_timeout_secs=0)
    mgr = await manager(open_memory, model, config)
    async with anyio.create_task_group() as tg:
        await tg.start(mgr.run)
        await mgr.open("idle-1")
        await mgr.append("idle-1", TALK)
        [entry] = mgr.status()
        close_at = datetime.fromisoformat(entry["idle_close_at"])  # RFC 3339, to the second
        seen = datetime.fromisoformat(entry["last_seen"])
        assert 0 <= (close_at - seen).total_seconds() <= 1
        with anyio.fail_after(10):
            while mgr.session_ids:  # noqa: ASYNC110 - polls the manager under test
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert model.calls == 1
    assert not (env.workspace.live_dir / journal_name("idle-1")).exists()
    (text,) = logs(env).values()
    assert "zebrafish" in text and "trigger=idle" in text
    assert "## Session Summary" not in text or "## Topics Discussed" in text


async def test_an_abandoned_session_no_longer_pins_its_actor(home: Path) -> None:
    app = project(home, "app")
    config = "[flush]\nsession_idle_close_secs = 0.3\n[daemon]\nactor_idle_secs = 0.2\n"
    async with in_process_daemon(config=config) as d:
        await d.call("session.open", workspace=str(app), session_id="gone-1")
        await d.call("session.append", session_id="gone-1", messages=WIRE)
        with anyio.fail_after(15):
            while True:
                actors = (await d.call("daemon.status"))["actors"]
                if all(a["state"] == "stopped" for a in actors):
                    break
                await anyio.sleep(0.1)
        assert (await d.call("session.list"))["sessions"] == []
    ws = resolve_workspace(app, home / "memory")
    assert not (ws.live_dir / journal_name("gone-1")).exists()


async def test_nul_and_control_characters_never_reach_a_session_log(
    env: Env, open_memory: MemoryFactory
) -> None:
    model = FakeChatModel([ANSWER.replace("zebrafish", "zebra\x00fish\x1b[2J") + "\x7f"])
    mgr = await manager(open_memory, model)
    await mgr.open("s1")
    await mgr.append("s1", TALK)
    assert (await mgr.flush("s1"))["outcome"] == "written"
    (text,) = logs(env).values()
    assert "zebrafish[2J" in text
    assert not any(c in text for c in "\x00\x1b\x7f")


async def test_a_rejected_flush_is_asked_again(env: Env, open_memory: MemoryFactory) -> None:
    model = FakeChatModel(["no heading at all", ANSWER])
    mgr = await manager(open_memory, model)
    await mgr.open("s1")
    await mgr.append("s1", TALK)
    assert (await mgr.flush("s1"))["outcome"] == "rejected"
    assert (await mgr.flush("s1"))["outcome"] == "written"  # not "nothing_to_store"
    assert model.calls == 2


# ------------------------------------------------------------------ journal durability


def fail_fsync_of(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """``os.fsync`` of ``directory`` fails with EIO (every other fsync works)."""
    real_fsync, inode = os.fsync, directory.stat().st_ino

    def fsync(fd: int) -> None:
        if os.fstat(fd).st_ino == inode:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


async def test_a_journal_whose_creation_or_removal_is_not_durable_fails_open_and_close(
    env: Env, open_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = await manager(open_memory, None)
    env.workspace.live_dir.mkdir(parents=True, exist_ok=True)
    fail_fsync_of(monkeypatch, env.workspace.live_dir)
    with pytest.raises(StorageError, match=r"cannot create journal .*EIO"):
        await mgr.open("s1")
    assert mgr.session_ids == []  # not acknowledged, nothing to lose
    monkeypatch.undo()
    await mgr.open("s1")
    await mgr.append("s1", TALK * 2)
    fail_fsync_of(monkeypatch, env.workspace.live_dir)
    with pytest.raises(StorageError, match=r"cannot remove journal .*EIO"):
        await mgr.close("s1")
    assert mgr.session_ids == ["s1"]  # still open: the close can be retried
    monkeypatch.undo()
    out = await mgr.close("s1")
    assert out["summary_written"] is True and mgr.session_ids == []
    assert not (env.workspace.live_dir / journal_name("s1")).exists()
    (text,) = logs(env).values()
    assert text.count("## Session Summary") == 1
