"""Sessions and flush on a real daemon (issue 5 items 1, 2, 3, 5, 7), model over real HTTP.

Every session method goes over the daemon's Unix socket; the model is :class:`FakeLLM`, a
real OpenAI-compatible server on 127.0.0.1. The durability test SIGKILLs a daemon running
as a child process after acknowledged appends, several times over.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.errors import Busy, ModelNotConfigured, NotFound
from memoryd.runtime.failpoints import DIR_ENV, ENV, SECS_ENV
from memoryd.store.layout import resolve_workspace
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    RunningDaemon,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
    rpc,
    wait_until,
)
from tests.support.fake_llm import FakeLLM

Processes = Callable[..., DaemonProcess]
NOTE = "## Build cache\n\nThe build cache lives in `/var/cache/zebrafish`; wipe it after a bump.\n"
LOG_PATH = re.compile(r"[a-z0-9-]+-[0-9a-f]{8}/sessions/\d{4}-\d\d-\d\d-[a-z0-9-]+-[\w-]{1,8}\.md")


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


TALK = [
    user("why does the build cache keep growing on the CI runners?"),
    assistant("It is never pruned; the cache key includes the commit hash."),
    user("where does the cache live on disk, exactly?"),
    assistant("Under /var/cache/zebrafish."),
    user("ok, add a note to wipe it after each dependency bump"),
]


def send_only(sock_path: Path, method: str, params: dict[str, Any]) -> socket.socket:
    """Send one request and leave its reply unread (the caller closes the socket)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(sock_path))
    sock.sendall(rpc(1, method, params))
    return sock


async def session_log(d: RunningDaemon, path: str) -> str:
    return (d.root / path).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the protocol


@pytest.mark.anyio
async def test_every_session_method_answers_its_documented_shape(home: Path, llm: FakeLLM) -> None:
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    async with in_process_daemon(config=llm.config_toml()) as d:
        opened = await d.call("session.open", workspace=str(ws_path), session_id="sess-0001")
        assert opened == {
            "session_id": "sess-0001",
            "log_path": opened["log_path"],
            "messages": 0,
            "resumed": False,
        }
        assert LOG_PATH.fullmatch(opened["log_path"]), opened["log_path"]

        appended = await d.call("session.append", session_id="sess-0001", messages=TALK)
        assert appended == {"count": 5}
        journal = ws.live_dir / "sess-0001.jsonl"
        lines = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
        assert [r["content"] for r in lines if r["type"] == "message"] == [
            m["content"] for m in TALK
        ]

        low = {"tokens": 1000, "context_window": 100_000, "threshold_percent": 85.0}
        assert await d.call("session.usage", session_id="sess-0001", **low) == {"flushed": False}
        assert llm.requests == 0

        llm.queue(NOTE)
        flushed = await d.call("session.flush", session_id="sess-0001")
        assert flushed == {"outcome": "written", "path": flushed["path"], "session_id": "sess-0001"}
        text = await session_log(d, flushed["path"])
        assert re.search(r"^<!-- flush \S+ trigger=manual -->\n## Build cache", text, re.M)
        [prompt] = llm.prompts
        assert all(m["content"] in prompt.user for m in TALK)

        # A flushed section is found by the very next search (reindexed at once).
        found = await d.search(ws_path, "zebrafish cache")
        assert any(
            r["path"] == flushed["path"] and r["source"] == "session" for r in found["results"]
        ), found

        # A second flush is asked only for what is new, shown the first one's text.
        await d.call("session.append", session_id="sess-0001", messages=[user("and pruning?")])
        llm.queue("NO_REPLY")
        again = await d.call("session.flush", session_id="sess-0001")
        assert again == {"outcome": "nothing_to_store", "session_id": "sess-0001"}
        assert "/var/cache/zebrafish" in llm.prompts[-1].user.split("## Transcript")[0]

        # One flush per session at a time: a second one while the first waits is busy.
        # (It needs a new message: a flush with none since the last one asks no model.)
        await d.call("session.append", session_id="sess-0001", messages=[user("how often?")])
        with llm.holding():
            async with anyio.create_task_group() as tg:
                llm.queue("## Pruning\n\nPrune weekly.\n")
                tg.start_soon(lambda: d.call("session.flush", session_id="sess-0001"))
                await anyio.to_thread.run_sync(llm.wait_held)
                with pytest.raises(Busy):
                    await d.call("session.flush", session_id="sess-0001")
                llm.release()

        closed = await d.call("session.close", session_id="sess-0001")
        assert closed == {
            "summary_written": True,
            "messages": 7,
            "path": flushed["path"],
            "dream": {"outcome": "too_few_sessions", "count": 0, "min": 5},
        }
        log_text = await session_log(d, closed["path"])
        assert log_text.count("## Build cache") == 1 and "## Session Summary" in log_text
        assert log_text.index("## Build cache") < log_text.index("## Session Summary")
        assert "- why does the build cache keep growing on the CI runners?" in log_text
        assert not journal.exists()

        with pytest.raises(NotFound):
            await d.call("session.append", session_id="sess-0001", messages=TALK)

        remembered = await d.call(
            "memory.remember", workspace=str(ws_path), text="Prefer uv over pip", scope="global"
        )
        assert remembered["path"] == "MEMORY.md"
        assert "## Prefer uv over pip" in (d.root / "MEMORY.md").read_text(encoding="utf-8")


@pytest.mark.anyio
async def test_without_a_model_flush_is_model_not_configured_and_the_rest_works(
    home: Path,
) -> None:
    ws_path = project(home, "app")
    async with in_process_daemon() as d:
        await d.call("session.open", workspace=str(ws_path), session_id="no-model")
        assert await d.call("session.append", session_id="no-model", messages=TALK) == {"count": 5}
        at_threshold = {"tokens": 90_000, "context_window": 100_000, "threshold_percent": 85.0}
        usage = await d.call("session.usage", session_id="no-model", **at_threshold)
        assert usage == {"flushed": False}
        with pytest.raises(ModelNotConfigured) as raised:
            await d.call("session.flush", session_id="no-model")
        assert "llm.base_url" in str(raised.value)

        await d.call("memory.remember", workspace=str(ws_path), text="Use tabs", scope="workspace")
        found = await d.search(ws_path, "tabs")
        assert found["results"]
        closed = await d.call("session.close", session_id="no-model")
        assert closed["summary_written"] is True
        assert "## Topics Discussed" in await session_log(d, closed["path"])
        status = await d.actor_status(ws_path)
        assert status is not None and status["sessions"] == []


# --------------------------------------------------------------------------- triggers


@pytest.mark.anyio
async def test_pre_compaction_flushes_once_per_compaction_count(home: Path, llm: FakeLLM) -> None:
    ws_path = project(home, "app")
    async with in_process_daemon(config=llm.config_toml()) as d:
        await d.call("session.open", workspace=str(ws_path), session_id="compact")
        await d.call("session.append", session_id="compact", messages=TALK)
        window = {"context_window": 100_000, "threshold_percent": 85.0}

        below = await d.call("session.usage", session_id="compact", tokens=80_999, **window)
        assert below == {"flushed": False} and llm.requests == 0

        llm.queue(NOTE)
        at = await d.call("session.usage", session_id="compact", tokens=81_000, **window)
        assert at["flushed"] is True and at["outcome"] == "written"
        assert "trigger=pre_compaction" in await session_log(d, at["path"])

        again = await d.call("session.usage", session_id="compact", tokens=95_000, **window)
        assert again == {"flushed": False} and llm.requests == 1

        await d.call("session.append", session_id="compact", messages=[user("new work")])
        llm.queue("## Later\n\nMore.\n")
        next_count = await d.call(
            "session.usage", session_id="compact", tokens=81_000, compaction_count=1, **window
        )
        assert next_count["flushed"] is True and llm.requests == 2


@pytest.mark.anyio
async def test_idle_flush_fires_after_the_timeout_and_not_again_without_news(
    home: Path, llm: FakeLLM
) -> None:
    ws_path = project(home, "app")
    config = llm.config_toml() + "[flush]\nidle_timeout_secs = 0.6\n"
    async with in_process_daemon(config=config) as d:
        await d.call("session.open", workspace=str(ws_path), session_id="idle-1")
        await d.call("session.append", session_id="idle-1", messages=TALK[:2])
        first_due = (await _session(d, ws_path, "idle-1"))["next_idle_flush"]
        await d.call("session.append", session_id="idle-1", messages=TALK[2:])
        second_due = (await _session(d, ws_path, "idle-1"))["next_idle_flush"]
        # reset by the new messages (RFC 3339 times, to the second: equal within a second)
        assert first_due is not None and second_due >= first_due

        llm.queue(NOTE)
        [prompt] = await anyio.to_thread.run_sync(llm.wait_for_requests, 1)
        assert all(m["content"] in prompt.user for m in TALK)  # after the last message
        state = await wait_until(lambda: _flushed(d, ws_path, "idle-1"))
        assert state["last_flush"]["outcome"] == "written"
        assert state["last_flush"]["trigger"] == "idle"
        assert state["next_idle_flush"] is None
        assert "trigger=idle" in await session_log(d, state["log_path"])

        await anyio.sleep(1.5)  # two and a half timeouts with nothing new: no other flush
        assert llm.requests == 1


async def _session(d: RunningDaemon, ws: Path, sid: str) -> dict[str, Any]:
    actor = await d.actor_status(ws)
    assert actor is not None
    return next(s for s in actor["sessions"] if s["session_id"] == sid)


async def _flushed(d: RunningDaemon, ws: Path, sid: str) -> dict[str, Any] | None:
    state = await _session(d, ws, sid)
    return state if state["last_flush"] else None


# --------------------------------------------------------------------------- durability


def test_sigkill_after_acknowledged_appends_loses_no_message(
    home: Path, processes: Processes, llm: FakeLLM
) -> None:
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    sent: list[str] = []
    daemon = processes(env=llm.env()).start()
    daemon.call("session.open", workspace=str(ws_path), session_id="durable-1")
    kills = 3
    for life in range(kills):
        for i in range(4):
            text = f"life {life} message {i}: keep the zebrafish notes"
            role = "user" if i % 2 == 0 else "assistant"
            answer = daemon.call(
                "session.append",
                session_id="durable-1",
                messages=[{"role": role, "content": text}],
            )
            sent.append(text)
            assert answer == {"count": len(sent)}
        if life == 1:  # this time, SIGKILL while a flush waits for the model
            with llm.holding():
                sock = send_only(daemon.socket, "session.flush", {"session_id": "durable-1"})
                llm.wait_held()
                daemon.kill()
                sock.close()
        else:
            daemon.kill()  # SIGKILL right after the acknowledgement
        assert (ws.live_dir / "durable-1.jsonl").exists()
        daemon = processes(env=llm.env()).start()
        # The restarted daemon recovers the session before anyone asks for it.
        [session] = _poll(functools.partial(_open_sessions, daemon))
        assert session["session_id"] == "durable-1" and session["messages"] == len(sent)

    reopened = daemon.call("session.open", workspace=str(ws_path), session_id="durable-1")
    assert reopened["resumed"] is True and reopened["messages"] == len(sent)
    daemon.call("session.append", session_id="durable-1", messages=[user("one more after all")])
    sent.append("one more after all")

    llm.queue(NOTE)
    flushed = daemon.call("session.flush", session_id="durable-1")
    assert flushed["outcome"] == "written"
    prompt = llm.prompts[-1]  # the one before was cut short by the kill
    assert len(llm.prompts) == 2
    assert all(text in prompt.user for text in sent)

    closed = daemon.call("session.close", session_id="durable-1")
    assert closed["summary_written"] is True and closed["messages"] == len(sent)
    log_text = (home / "memory" / closed["path"]).read_text(encoding="utf-8")
    user_texts = [t for i, t in enumerate(sent[:-1]) if i % 4 in (0, 2)] + [sent[-1]]
    assert all(f"- {t}" in log_text for t in user_texts[:5])
    assert not (ws.live_dir / "durable-1.jsonl").exists()


def _open_sessions(daemon: DaemonProcess) -> list[dict[str, Any]]:
    return [s for a in daemon.call("daemon.status")["actors"] for s in a.get("sessions") or []]


def _poll(check: Callable[[], Any], within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := check()):
        assert time.monotonic() < deadline, f"not true within {within}s"
        time.sleep(0.05)
    return value


def test_appends_right_after_a_restart_reach_sessions_not_yet_recovered(
    home: Path, processes: Processes
) -> None:
    """A client that reconnects as soon as a restarted daemon answers finds its session,
    even while the daemon is still recovering the journals of other workspaces."""
    names = [f"ws{i}" for i in range(6)]
    daemon = processes().start()
    for name in names:
        daemon.call("session.open", workspace=str(project(home, name)), session_id=f"s-{name}")
        daemon.call("session.append", session_id=f"s-{name}", messages=[user("before")])
    daemon.kill()

    daemon = processes().start()
    for name in reversed(names):  # the workspaces recovered last first
        answer = daemon.call("session.append", session_id=f"s-{name}", messages=[user("after")])
        assert answer == {"count": 2}
    assert len(_open_sessions(daemon)) == len(names)


def test_sigkill_while_closing_writes_the_summary_once(
    home: Path, processes: Processes, llm: FakeLLM
) -> None:
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    env = {ENV: "session.after_summary", DIR_ENV: str(home), SECS_ENV: "30"}
    daemon = processes(env=env).start()
    daemon.call("session.open", workspace=str(ws_path), session_id="closing-1")
    daemon.call("session.append", session_id="closing-1", messages=TALK)
    sock = send_only(daemon.socket, "session.close", {"session_id": "closing-1"})
    _poll(lambda: (home / "session.after_summary.hit").exists())
    daemon.kill()
    sock.close()
    [log] = ws.sessions_dir.glob("*-closing-.md")  # named after the first user message
    assert log.name.endswith("-why-does-the-build-cache-keep-closing-.md")
    assert log.read_text(encoding="utf-8").count("## Session Summary") == 1
    assert (ws.live_dir / "closing-1.jsonl").exists()  # not closed: recovered at the next start

    daemon = processes().start()
    [session] = _poll(lambda: _open_sessions(daemon))
    assert session["session_id"] == "closing-1" and session["messages"] == len(TALK)
    closed = daemon.call("session.close", session_id="closing-1")
    assert closed["summary_written"] is True and closed["path"].endswith(log.name)
    assert log.read_text(encoding="utf-8").count("## Session Summary") == 1
    assert not (ws.live_dir / "closing-1.jsonl").exists()
