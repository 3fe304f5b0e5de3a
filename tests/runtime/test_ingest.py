"""``session.ingest`` and ``memoryd ingest`` (issue 15, Done when 4 and 5) on real daemons."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bench.secrets_corpus import planted
from memoryd.client import AsyncClient, Client
from memoryd.core.flushing import MAX_MESSAGE_CHARS, message_dict
from memoryd.core.transcripts import parse
from memoryd.errors import InvalidParams
from memoryd.runtime.workspace import ingest as ingest_module
from memoryd.store import transcripts as transcript_files
from memoryd.store.journal import journal_name, load
from memoryd.store.layout import resolve_workspace
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    memoryd_cli,
    ping_latencies,
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
)
from tests.support.fake_llm import FakeLLM
from tests.support.transcript_lines import claude_line

Processes = Callable[..., DaemonProcess]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude-code-session.jsonl"
FLUSH = "## Checkout\n\nThe CSRF token lives in Redis under `csrf:<user>`.\n"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def _summary(text: str) -> str:
    return text[text.index("## Session Summary") :]


@pytest.mark.anyio
async def test_ingested_messages_take_the_path_of_appended_ones(home: Path, llm: FakeLLM) -> None:
    """One code path: journal, flush prompt and close summary are the same whether the
    messages came from a transcript or from session.append."""
    ws_path = project(home, "shop")
    ws = resolve_workspace(ws_path, home / "memory")
    messages = [message_dict(m) for m in parse("claude-code", CLAUDE.read_bytes()).messages]
    async with in_process_daemon(config=llm.config_toml()) as d:
        ingested = await d.call(
            "session.ingest",
            session_id="via-ingest",
            path=str(CLAUDE),
            format="claude-code",
            workspace=str(ws_path),
        )
        assert ingested["ingested"] == len(messages) == ingested["count"]
        assert ingested["offset"] == CLAUDE.stat().st_size and ingested["rewritten"] is False
        assert ingested["usage"] == {"flushed": False}
        await d.call("session.open", workspace=str(ws_path), session_id="via-append")
        appended = await d.call("session.append", session_id="via-append", messages=messages)
        assert appended == {"count": len(messages)}

        journals = [load(ws.live_dir / journal_name(sid)) for sid in ("via-ingest", "via-append")]
        assert journals[0] is not None and journals[1] is not None
        assert [m.message for m in journals[0].messages] == [
            m.message for m in journals[1].messages
        ]
        assert list(journals[0].ingests) == [str(CLAUDE)]

        llm.queue(FLUSH, FLUSH)
        for sid in ("via-ingest", "via-append"):
            assert (await d.call("session.flush", session_id=sid))["outcome"] == "written"
        first, second = llm.prompts
        assert first.user == second.user and first.system == second.system

        closed = [await d.call("session.close", session_id=s) for s in ("via-ingest", "via-append")]
        assert all(c["summary_written"] for c in closed)
        logs = [(d.root / c["path"]).read_text(encoding="utf-8") for c in closed]
        assert _summary(logs[0]) == _summary(logs[1])
        assert "The checkout page returns HTTP 500 after login" in logs[0]

        # Reading it again into a session that already read it appends nothing; nor does a
        # closed session's transcript when imported again unchanged.
        again = await d.call(
            "session.ingest",
            session_id="via-ingest",
            path=str(CLAUDE),
            format="claude-code",
            workspace=str(ws_path),
            after="close",
        )
        assert again == {"ingested": 0, "skipped": True}


@pytest.mark.anyio
async def test_bounded_reads_give_the_same_messages(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws_path = project(home, "shop")
    monkeypatch.setattr(transcript_files, "MAX_READ_BYTES", 700)
    whole = parse("claude-code", CLAUDE.read_bytes()).messages
    async with in_process_daemon() as d:
        out = await d.call(
            "session.ingest",
            session_id="small-reads",
            path=str(CLAUDE),
            format="claude-code",
            workspace=str(ws_path),
        )
        assert out["ingested"] == len(whole) and out["offset"] == CLAUDE.stat().st_size
        ws = resolve_workspace(ws_path, home / "memory")
        state = load(ws.live_dir / journal_name("small-reads"))
        assert state is not None
        assert tuple(m.message for m in state.messages) == whole


@pytest.mark.anyio
async def test_only_absolute_paths_of_regular_files_are_read(home: Path) -> None:
    ws_path = project(home, "shop")
    fifo = home / "pipe.jsonl"
    os.mkfifo(fifo)
    async with in_process_daemon() as d:
        base = {"session_id": "s1", "format": "claude-code", "workspace": str(ws_path)}
        for path, why in ((str(fifo), "not a regular file"), ("rel.jsonl", "absolute")):
            with pytest.raises(InvalidParams, match=why):
                await d.call("session.ingest", path=path, **base)
        with pytest.raises(InvalidParams, match="does not exist"):
            await d.call("session.ingest", path=str(home / "missing.jsonl"), **base)
        with pytest.raises(InvalidParams, match="'workspace' must be an absolute path"):
            await d.call("session.ingest", path=str(CLAUDE), **{**base, "workspace": "shop"})
        with pytest.raises(InvalidParams, match="format"):
            await d.call("session.ingest", path=str(CLAUDE), **{**base, "format": "gemini"})


def _transcript(i: int) -> bytes:
    sid = f"0000{i:04d}-1111-2222-3333-444455556666"
    lines: list[dict[str, Any]] = [
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
    ]
    prompts = [
        f"Service zorblax{i} keeps timing out when called from the billing job.",
        f"Which port does zorblax{i} listen on in staging?",
        f"Set the zorblax{i} client timeout to {i + 10} seconds then.",
    ]
    for n, prompt in enumerate(prompts):
        lines.append(
            {"type": "user", "sessionId": sid, "message": {"role": "user", "content": prompt}}
        )
        lines.append({"type": "progress", "sessionId": sid, "data": {"type": "hook_progress"}})
        lines.append(
            {
                "type": "assistant",
                "sessionId": sid,
                "message": {
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"zorblax{i} answer {n}"}],
                },
            }
        )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def test_ingest_all_imports_each_transcript_once_and_search_finds_them(
    home: Path, processes: Processes
) -> None:
    ws_path = project(home, "billing")
    folder = home / "claude-projects" / "billing"
    folder.mkdir(parents=True)
    for i in range(50):
        (folder / f"0000{i:04d}-1111-2222-3333-444455556666.jsonl").write_bytes(_transcript(i))
    (folder / "notes.txt").write_text("not a transcript")
    processes().start()

    first = memoryd_cli(
        home, "ingest", "--format", "claude-code", "--all", str(folder), "-w", str(ws_path)
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "50 imported, 0 skipped, 0 failed"
    assert first.stdout.count("imported 6 messages from") == 50

    second = memoryd_cli(home, "ingest", "--all", str(folder), "-w", str(ws_path), "--json")
    assert second.returncode == 0, second.stderr
    results = json.loads(second.stdout)
    assert len(results) == 50 and all(r["skipped"] for r in results)
    flushing = memoryd_cli(home, "ingest", "--all", str(folder), "-w", str(ws_path), "--flush")
    assert flushing.stdout.splitlines()[-1] == "0 imported, 50 skipped, 0 failed"

    for i in (0, 17, 49):
        found = memoryd_cli(home, "search", f"zorblax{i} timeout", "-w", str(ws_path), "--json")
        hits = json.loads(found.stdout)["results"]
        assert hits and f"zorblax{i}" in hits[0]["snippet"], hits[:1]
        assert hits[0]["source"] == "session"

    # a transcript that grew is read on from where the import stopped
    grown = folder / "00000003-1111-2222-3333-444455556666.jsonl"
    with grown.open("ab") as handle:
        handle.write(
            json.dumps(
                {"type": "user", "message": {"role": "user", "content": "One more thing."}}
            ).encode()
            + b"\n"
        )
    third = memoryd_cli(home, "ingest", "--all", str(folder), "-w", str(ws_path))
    assert third.stdout.splitlines()[-1] == "1 imported, 49 skipped, 0 failed", third.stdout
    assert f"imported 1 messages from {grown}" in third.stdout


@pytest.mark.anyio
async def test_a_rewritten_transcript_holding_a_secret_is_not_appended_twice(home: Path) -> None:
    """Messages are compared with what the session holds: their secrets redacted."""
    ws_path = project(home, "shop")
    secret = "sk-proj-xp5QEz-_x9L6HzGpPwEvEzUz_BMHaRZCZSIIMoK9s_uyA3q09mzHR8l-s9t-kFlT"
    lines = [
        {"type": "progress", "data": {}},
        {"type": "user", "message": {"role": "user", "content": f"I used {secret} to call it."}},
        {"type": "user", "message": {"role": "user", "content": "And then it worked."}},
    ]
    transcript = home / "t.jsonl"
    transcript.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    params = {"session_id": "sec-1", "path": str(transcript), "format": "claude-code"}
    async with in_process_daemon() as d:
        first = await d.call("session.ingest", workspace=str(ws_path), **params)
        assert first["ingested"] == 2
        transcript.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines[1:]))
        again = await d.call("session.ingest", **params)
        assert again["rewritten"] is True and again["ingested"] == 0 and again["count"] == 2
    ws = resolve_workspace(ws_path, home / "memory")
    assert secret.encode() not in (ws.live_dir / journal_name("sec-1")).read_bytes()


@pytest.mark.anyio
async def test_a_rewritten_transcript_counts_each_redaction_once(home: Path) -> None:
    """``status`` counts each secret redacted once: re-reading a rewritten transcript
    compared the messages (redacted) and counted again the ones the session already held,
    then counted the new ones a second time when they were appended."""
    ws_path = project(home, "shop")
    first, second = (
        p.values[0] for p in planted(per_kind=2, seed=1818) if p.kind == "github-token"
    )

    def line(text: str) -> bytes:
        record = {"type": "user", "message": {"role": "user", "content": text}}
        return json.dumps(record).encode() + b"\n"

    transcript = home / "rewritten.jsonl"
    transcript.write_bytes(line(f"The bot pushes with {first} today.") + line("It worked."))
    params = {"session_id": "count-1", "path": str(transcript), "format": "claude-code"}
    async with in_process_daemon() as d:

        async def redactions() -> int:
            return int((await d.status())["secrets"]["by_kind"].get("github-token", 0))

        before = await redactions()  # the scrubber (and its counts) outlives one daemon
        read = await d.call("session.ingest", workspace=str(ws_path), **params)
        assert read["ingested"] == 2 and await redactions() == before + 1
        # The agent rewrote its transcript: the same two messages (shorter: the mark is past
        # its end), then a new one holding a second secret.
        transcript.write_bytes(
            line(f"The bot pushes with {first} today.") + line(f"Rotated to {second}.")
        )
        again = await d.call("session.ingest", **params)
        assert again["rewritten"] is True and again["ingested"] == 1 and again["count"] == 3
        assert await redactions() == before + 2
        held = await d.call("session.ingest", **params)  # nothing new: nothing counted
        assert held["ingested"] == 0 and await redactions() == before + 2


@pytest.mark.anyio
async def test_an_ingested_message_is_held_to_the_size_session_append_takes(home: Path) -> None:
    """A transcript line of 3 MB (a pasted log) is one message of at most
    MAX_MESSAGE_CHARS, as ``session.append`` takes: it was journalled and kept whole."""
    ws_path = project(home, "shop")
    transcript = home / "pasted.jsonl"
    pasted = "Here is the log:\n" + "ERROR upstream timed out after 30 s\n" * 90_000
    lines = [
        {"type": "user", "sessionId": "p", "message": {"role": "user", "content": pasted}},
        {"type": "user", "sessionId": "p", "message": {"role": "user", "content": "Why?"}},
    ]
    transcript.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    async with in_process_daemon() as d:
        out = await d.call(
            "session.ingest",
            session_id="pasted",
            path=str(transcript),
            format="claude-code",
            workspace=str(ws_path),
        )
        assert out["ingested"] == 2
        ws = resolve_workspace(ws_path, home / "memory")
        state = load(ws.live_dir / journal_name("pasted"))
        assert state is not None
        first, second = (m.message for m in state.messages)
        assert len(pasted) > 3_000_000
        assert len(first.content) <= MAX_MESSAGE_CHARS
        assert first.content.startswith("Here is the log:") and second.content == "Why?"


def test_scrubbing_a_large_ingest_does_not_stall_the_daemon(
    home: Path, processes: Processes
) -> None:
    """The messages of an ingest read (up to 8 MB) were scrubbed on the event loop: with a
    transcript dense with secrets every other request waited seconds (3.6 s per chunk
    measured on 34 MB). They are scrubbed in a worker thread."""
    ws_path = project(home, "shop")
    transcript = home / "dense.jsonl"
    unit = (
        "export API_TOKEN=abc123def456ghi789 https://user:pw@host/x Bearer abcdefghijklmnop "
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghij password: hunter2hunter2\n"
    )
    content = unit * (900_000 // len(unit))
    with transcript.open("w", encoding="utf-8") as handle:
        for i in range(10):
            message = {"role": "user", "content": f"{i} {content}"}
            handle.write(json.dumps({"type": "user", "sessionId": "d", "message": message}))
            handle.write("\n")
    daemon = processes().start()
    with ping_latencies(daemon.socket, every=0.01) as pings:
        with Client(daemon.socket, timeout=120) as client:
            out = client.call(
                "session.ingest",
                session_id="dense",
                path=str(transcript),
                format="claude-code",
                workspace=str(ws_path),
            )
    assert out["ingested"] == 10
    assert max(pings) < 1.0, f"a ping waited {max(pings):.2f} s during the ingest"


@pytest.mark.anyio
async def test_a_flood_of_stop_hooks_reads_the_transcript_once_per_growth(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 concurrent ``hook.run`` Stop events for one session, the transcript growing three
    times meanwhile and one more Stop after the last growth (as an agent fires Stop after it
    wrote its turn): every message is journaled exactly once, in order, and the transcript is
    read at most once per growth (plus two): one ingest runs, one waits, the rest join it,
    and an ingest of an unchanged transcript reads nothing. (Without the last Stop, a loaded
    machine can serve all 50 before a growth, and nothing asks for it to be read.)"""
    ws_path = project(home, "shop")
    transcript = home / "flood.jsonl"
    transcript.write_bytes(b"".join(claude_line(i) for i in range(10)))
    reads: list[float] = []
    real_read = ingest_module._read_and_parse

    def spy(*args: Any) -> Any:
        reads.append(time.perf_counter())
        return real_read(*args)

    monkeypatch.setattr(ingest_module, "_read_and_parse", spy)
    sid, total, growths = "flood-1", 10, 0
    event = {
        "session_id": sid,
        "transcript_path": str(transcript),
        "cwd": str(ws_path),
        "hook_event_name": "Stop",
    }
    async with in_process_daemon() as d:

        async def fire(delay: float) -> None:
            await anyio.sleep(delay)
            async with AsyncClient(d.socket, timeout=30.0) as client:
                await client.request("hook.run", {"agent": "claude-code", "event": event})

        async def grow() -> None:  # the agent writes on during the flood
            nonlocal total, growths
            while not reads:  # noqa: ASYNC110 - waits for the daemon's first read
                await anyio.sleep(0.005)
            for _ in range(3):
                await anyio.sleep(0.04)
                with transcript.open("ab") as handle:
                    handle.write(b"".join(claude_line(i) for i in range(total, total + 5)))
                total, growths = total + 5, growths + 1
            await fire(0.0)  # the Stop that follows the agent's last write

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(grow)
            for n in range(50):
                tg.start_soon(fire, n * 0.006)
        replied = time.perf_counter() - started
        actor = await d.daemon.supervisor.actor_for_session(sid)
        with anyio.fail_after(20):
            while actor.ingests.running or actor.sessions.count(sid) < total:  # noqa: ASYNC110 - polls the daemon under test
                await anyio.sleep(0.01)
        settled = max(reads) - started
        await anyio.sleep(0.3)  # a straggling ingest would show by now
        count = actor.sessions.count(sid)
    print(
        f"50 hooks: replied {replied * 1e3:.0f} ms, read {settled * 1e3:.0f} ms, reads {len(reads)}"
    )
    state = load(resolve_workspace(ws_path, home / "memory").live_dir / journal_name(sid))
    assert state is not None and [m.message.content for m in state.messages] == [
        f"message {i}: the zebrafish cache on runner {i}" for i in range(total)
    ]
    assert count == total
    assert len(reads) <= 3 + growths, f"{len(reads)} reads for {growths} growths"


@pytest.mark.anyio
async def test_a_same_size_rewrite_within_the_timestamp_granularity_is_read(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system whose timestamps are coarse (whole seconds: ext3, HFS+; 2 s: FAT;
    a kernel tick anywhere) a transcript rewritten to the same size right after an ingest
    read it keeps its stamp: the rewrite must still be read, not skipped as unchanged."""
    ws_path = project(home, "shop")
    transcript = home / "coarse.jsonl"

    class Coarse:  # the stat of a file system with one-second timestamps
        def __init__(self, st: os.stat_result) -> None:
            self._st = st
            self.st_mtime_ns = st.st_mtime_ns // 10**9 * 10**9
            self.st_ctime_ns = st.st_ctime_ns // 10**9 * 10**9

        def __getattr__(self, name: str) -> Any:
            return getattr(self._st, name)

    class CoarseOs:  # the transcript reader's view of the OS
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def stat(self, path: str) -> Any:
            return Coarse(os.stat(path))

        def fstat(self, fd: int) -> Any:
            return Coarse(os.fstat(fd))

    monkeypatch.setattr(transcript_files, "os", CoarseOs())
    async with in_process_daemon() as d:
        for attempt in range(5):  # all within one second: retried when it straddles two
            sid = f"coarse-{attempt}"
            params = {"session_id": sid, "path": str(transcript), "format": "claude-code"}
            await anyio.sleep(1.02 - time.time() % 1)
            transcript.write_bytes(b"".join(claude_line(i) for i in range(4)))
            first = await d.call("session.ingest", workspace=str(ws_path), **params)
            assert first["ingested"] == 4
            before = transcript_files.file_stamp(str(transcript))
            rewritten = b"".join(claude_line(i) for i in range(4)).replace(
                b"message 3", b"massage 3"
            )
            with transcript.open("r+b") as handle:  # in place: same inode, same size
                handle.write(rewritten)
            if transcript_files.file_stamp(str(transcript)) != before:
                continue  # a second went by: the stamps differ anyway
            again = await d.call("session.ingest", **params)
            assert again["rewritten"] is True and again["ingested"] == 1
            actor = await d.daemon.supervisor.actor_for_session(sid)
            assert actor.sessions.held_messages(sid)[-1].content.startswith("massage 3")
            return
    pytest.fail("no rewrite within one second of its read in 5 attempts")


@pytest.mark.anyio
async def test_a_session_closed_for_idleness_keeps_its_transcript_marks(home: Path) -> None:
    """An idle close records the session's ingest marks as session.close does: the session
    resumed under the same id goes on from its mark, not from the transcript's start."""
    ws_path = project(home, "shop")
    config = "[flush]\nsession_idle_close_secs = 0.3\n"
    async with in_process_daemon(config=config) as d:
        args = {"session_id": "idler", "path": str(CLAUDE), "format": "claude-code"}
        first = await d.call("session.ingest", workspace=str(ws_path), **args)
        assert first["ingested"] > 0
        with anyio.fail_after(15):
            while True:
                if not (await d.call("session.list"))["sessions"]:
                    break  # closed for idleness
                await anyio.sleep(0.1)
        again = await d.call("session.ingest", workspace=str(ws_path), **args)
        assert again["ingested"] == 0 and again["offset"] == CLAUDE.stat().st_size
