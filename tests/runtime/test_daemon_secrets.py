"""Secrets never reach memory (SPEC §18, issue 18): the planted corpus through a real daemon.

Sessions get the planted corpus by ``session.append`` and by ``session.ingest`` of an agent
transcript. The model is :class:`FakeLLM` (a real OpenAI-compatible server on 127.0.0.1)
answering every call with the prompt it was sent, as markdown: a secret that reached a
prompt would come back and be written to memory. After sessions (append or ingest, flush,
close), ``remember`` and a dream, no planted value may be anywhere under ``MEMORYD_HOME``
(memory files, journals, ``.history/``, ``dreams.jsonl``, the index, file names), in any
model request, or in search results.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.secrets_corpus import Planted, planted
from memoryd.core.flushing import Message
from memoryd.core.secrets import REDACTION
from memoryd.store.journal import Journal, JournalHeader
from memoryd.store.layout import ensure_workspace_dirs, resolve_workspace
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    ping_latencies,
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
    wait_until,
)
from tests.support.fake_llm import FakeLLM, Prompt

pytestmark = pytest.mark.anyio

SESSIONS = 12


def echo(prompt: Prompt) -> str:
    """A leaky model: it repeats what it was sent, under a heading."""
    return "## What I was told\n\n" + prompt.user


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(respond=echo) as server:
        yield server


def leaks(corpus: list[Planted], haystack: str) -> list[str]:
    return [f"{p.kind}/{p.context}" for p in corpus if any(v in haystack for v in p.values)]


def everything_on_disk(home: Path) -> str:
    """Every file's name and bytes under ``home`` (decoded leniently), as one text."""
    parts = []
    for path in sorted(home.rglob("*")):
        parts.append(str(path))
        if path.is_file() and not path.is_symlink():
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


async def test_planted_secrets_reach_no_file_request_name_or_search_result(
    home: Path, llm: FakeLLM, tmp_path: Path
) -> None:
    corpus = planted()
    notes = planted(per_kind=1, seed=99)
    ingested = planted(per_kind=2, seed=77)
    transcript = tmp_path / "agent-transcript.jsonl"  # outside MEMORYD_HOME
    transcript.write_text(
        "".join(
            json.dumps({"role": ("user", "tool", "assistant")[i % 3], "content": p.text}) + "\n"
            for i, p in enumerate(ingested)
        ),
        encoding="utf-8",
    )
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    roles = ("user", "tool", "assistant", "user")
    # No dream in the background after a close: the one below is run by hand.
    async with in_process_daemon(config=llm.config_toml() + "[dream]\nenabled = false\n") as d:
        for n in range(SESSIONS):
            sid = f"leaky-{n:04d}"
            batch = corpus[n::SESSIONS]
            await d.call("session.open", workspace=str(ws_path), session_id=sid)
            messages = [
                {"role": roles[i % len(roles)], "content": p.text} for i, p in enumerate(batch)
            ]
            await d.call("session.append", session_id=sid, messages=messages)
            journal = (ws.live_dir / f"{sid}.jsonl").read_text(encoding="utf-8")
            assert leaks(batch, journal) == []
            flushed = await d.call("session.flush", session_id=sid)
            assert flushed["outcome"] == "written", flushed
            closed = await d.call("session.close", session_id=sid)
            assert closed["summary_written"], closed
            # The log's name: from the first user message, with no value and no redaction.
            assert "redacted" not in flushed["path"]

        read = await d.call(
            "session.ingest",
            session_id="agent-0001",
            workspace=str(ws_path),
            path=str(transcript),
            format="plain",
            after="close",
        )
        assert read["ingested"] == len(ingested), read

        warnings = []
        for p in notes:
            out = await d.call("memory.remember", workspace=str(ws_path), text=p.text)
            assert out["written"] and out["redacted"], (p.kind, out)
            warnings.append(out["warning"])
        assert all("REDACTED:" in w for w in warnings)

        dreamed = await d.call("dream.run", workspace=str(ws_path), force=True)
        assert dreamed["outcome"] == "written", dreamed

        found = []
        for p in [*corpus[::8], *notes]:
            for value in p.values[:1]:
                result = await d.search(ws_path, value[:60], max_results=20, min_score=0.0)
                found.append(str(result["results"]))
        # Redacted notes are still found by their other words.
        hit = await d.search(ws_path, "debugging flaky retry cache", min_score=0.0)
        assert hit["results"]
        status = await d.status()

    everything = corpus + notes + ingested
    requests = "\n".join(p.system + "\n" + p.user for p in llm.prompts)
    assert llm.requests >= SESSIONS + 1
    assert REDACTION.search(requests)
    assert leaks(everything, requests) == []
    assert leaks(everything, "\n".join(found)) == []
    disk = everything_on_disk(home)
    assert leaks(everything, disk) == []
    assert REDACTION.search(ws.memory_file.read_text(encoding="utf-8"))
    assert status["secrets"]["redactions"] >= len(corpus) + len(notes)  # tool lines are cut


HASH_EMBEDDINGS = '[embedding]\nprovider = "hash"\n'


def note(n: int, p: Planted) -> str:
    body = "\n".join("    " + line for line in p.text.splitlines())  # no headings inside
    return f"## Deploy note {n}\n\nThe okapi{n} rollout needed this:\n\n{body}\n"


def indexed_text(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return "\n".join(text for (text,) in conn.execute("SELECT text FROM chunks"))
    finally:
        conn.close()


async def test_purge_leaves_no_secret_on_disk_or_in_the_index_and_search_still_works(
    home: Path,
) -> None:
    corpus = planted(per_kind=2, seed=404)
    memory_notes, log_notes, history_notes = corpus[0::3], corpus[1::3], corpus[2::3]
    glob = planted(per_kind=1, seed=405)[:5]
    journaled = planted(per_kind=1, seed=406)[5:10]
    ws_path = project(home, "svc")
    ws = resolve_workspace(ws_path, home / "memory")
    # A session left open by a daemon from before the scrubber: its journal holds secrets.
    ensure_workspace_dirs(ws)
    journal = Journal(ws.live_dir, "old-0001")
    journal.open(JournalHeader(str(ws_path), "old-0001", False, time.time()))
    journal.append_messages([Message("user", p.text) for p in journaled], time.time())
    journal.close()
    async with in_process_daemon(config=HASH_EMBEDDINGS) as d:
        await d.call("memory.files", workspace=str(ws_path))  # the actor makes the dirs
        # Memory written before the scrubber existed: straight to disk.
        ws.memory_file.write_text(
            "# Memory\n\n" + "\n".join(note(n, p) for n, p in enumerate(memory_notes)),
            encoding="utf-8",
        )
        (ws.sessions_dir / "2026-01-02-deploy-abcd1234.md").write_text(
            "\n".join(note(100 + n, p) for n, p in enumerate(log_notes)), encoding="utf-8"
        )
        ws.history_dir.mkdir(exist_ok=True)
        (ws.history_dir / "MEMORY.20260101T000000.000000Z.md").write_text(
            "\n".join(note(200 + n, p) for n, p in enumerate(history_notes)), encoding="utf-8"
        )
        (ws.history_dir / "dreams.jsonl").write_text(
            json.dumps({"outcome": "failed", "error": history_notes[0].text}) + "\n",
            encoding="utf-8",
        )
        (home / "memory" / "MEMORY.md").write_text(
            "# Global\n\n" + "\n".join(note(300 + n, p) for n, p in enumerate(glob)),
            encoding="utf-8",
        )
        await d.call("index.reindex", workspace=str(ws_path))

        async def embedded() -> bool:
            s = await d.call("index.stats", workspace=str(ws_path))
            return bool(s["embedding_model"] and s["chunks"] and s["vectors_pending"] == 0)

        await wait_until(embedded, within=20)
        assert len(leaks(corpus, indexed_text(ws.index_path))) == len(memory_notes + log_notes)

        scanned = await d.call("secrets.scan", all=True)
        listed = {f["path"] for f in scanned["files"]}
        assert scanned["findings"] >= len(corpus) + len(glob)
        assert {"MEMORY.md", ws.memory_file.relative_to(home / "memory").as_posix()} <= listed
        assert any(".history/" in path for path in listed)
        assert leaks(corpus + glob + journaled, str(scanned)) == []  # never the value
        assert any(".live/" in path for path in listed)

        purged = await d.call("secrets.purge", all=True)
        [result] = purged["workspaces"]
        assert purged["global"]["redacted"] >= len(glob)
        assert result["history_files"] == 2 and result["chunks_dropped"] > 0
        assert result["journals"] == 1
        # The open session still journals (to the rewritten file) and closes cleanly.
        later = {"role": "user", "content": "and the okapi canary goes first"}
        await d.call("session.append", session_id="old-0001", messages=[later])
        assert "okapi canary" in (ws.live_dir / "old-0001.jsonl").read_text(encoding="utf-8")
        assert result["cache_entries_dropped"] == 0  # the hash provider is not cached

        again = await d.call("secrets.scan", all=True)
        assert again["findings"] == 0, again["files"]
        await wait_until(embedded, within=20)
        after = await d.search(ws_path, "okapi7 rollout", min_score=0.0)
        assert any("okapi7" in r["snippet"] for r in after["results"]), after
        assert "[REDACTED:" in str(after)
        found = [await d.search(ws_path, p.values[0][:60], min_score=0.0) for p in corpus[::4]]
        assert leaks(corpus + glob, str(found)) == []

    assert leaks(corpus + glob + journaled, everything_on_disk(home)) == []  # the index too
    json.loads((ws.history_dir / "dreams.jsonl").read_text(encoding="utf-8"))  # still JSON


@pytest.mark.anyio
async def test_a_file_too_large_to_scan_is_named_not_passed_over(home: Path) -> None:
    """A memory file over 64 MiB is not scanned; ``secrets.scan`` and ``secrets.purge`` said
    nothing of it, so "0 secrets" was reported for a memory holding one."""
    ws_path = project(home, "shop")
    ws = resolve_workspace(ws_path, home / "memory")
    ensure_workspace_dirs(ws)
    big = ws.sessions_dir / "2026-11-30-pasted-logs.md"
    with big.open("wb") as handle:
        handle.write(b"# Logs\n\nSTRIPE_KEY=sk_live_51HqLyjWDarjtT1zdp7dcXoKPl3b9qbyAbC\n")
        handle.truncate(70 * 1024 * 1024)
    async with in_process_daemon() as d:
        for target in ({"workspace": str(ws_path)}, {"all": True}):
            scanned = await d.call("secrets.scan", **target)
            assert [f for f in scanned.get("too_large", []) if f.endswith(big.name)], scanned
        purged = await d.call("secrets.purge", workspace=str(ws_path))
        [entry] = purged["workspaces"]
        assert [f for f in entry.get("too_large", []) if f.endswith(big.name)], purged


def test_scrubbing_a_long_note_does_not_stall_the_daemon(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    """``remember`` scrubbed its note (up to 200,000 characters) on the event loop: a note
    of repeated ``token=`` kept every other request waiting 0.8 s."""
    ws_path = project(home, "shop")
    daemon = processes().start()
    with ping_latencies(daemon.socket) as pings:
        for _ in range(3):
            daemon.call("memory.remember", workspace=str(ws_path), text="token=" * 33_000)
    assert max(pings) < 0.4, f"a ping waited {max(pings):.2f} s during remember"


def test_scrubbing_a_large_recovered_journal_does_not_stall_the_daemon(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    """A session reopened from its journal has its messages scrubbed again (a journal from
    before the scrubber): 9 MB dense with secrets held every other request 2-3 s."""
    ws_path = project(home, "shop")
    ws = resolve_workspace(ws_path, home / "memory")
    daemon = processes().start()
    daemon.call("memory.files", workspace=str(ws_path))  # the actor makes the dirs
    unit = (
        "export API_TOKEN=abc123def456ghi789 https://user:pw@host/x Bearer abcdefghijklmnop "
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghij password: hunter2hunter2\n"
    )
    content = unit * (900_000 // len(unit))
    journal = Journal(ws.live_dir, "big-0001")
    journal.open(JournalHeader(str(ws_path), "big-0001", False, time.time()))
    journal.append_messages([Message("user", f"{i} {content}") for i in range(10)], time.time())
    journal.close()
    with ping_latencies(daemon.socket) as pings:
        opened = daemon.call("session.open", workspace=str(ws_path), session_id="big-0001")
    assert opened["resumed"] is True, opened
    assert max(pings) < 1.0, f"a ping waited {max(pings):.2f} s while the session reopened"
