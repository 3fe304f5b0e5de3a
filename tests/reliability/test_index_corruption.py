"""Index corruption (SPEC §15, issue 9 item 2): the markdown is the truth, the index is not.

``index.sqlite`` is truncated, has pages zero-filled, or is deleted with its WAL — once
while the daemon is stopped, once while it runs with the file open. Each time the damage
is detected, the index is rebuilt from the markdown files, every note is found again, a
log deleted on disk is never returned, and ``daemon.status`` says the index was rebuilt and
why. Corruption of an open file that does not change its size or time (bit rot) hides in
SQLite's page cache until a page is read from disk again; that read fails inside a DB phase
and the phase rebuilds the index and runs again (the cache is dropped here with
``PRAGMA shrink_memory``, as memory pressure or a large index would).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.core.chunking import chunk_markdown
from memoryd.core.config import IndexConfig
from memoryd.store.connection import connect, quick_check
from memoryd.store.layout import Workspace, resolve_workspace
from tests.reliability.harness import report
from tests.runtime.daemon_fixtures import (
    RunningDaemon,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
    wait_until,
)

pytestmark = pytest.mark.anyio

NOTES = 40
PAGE = 4096
FIGURES: dict[str, int] = {"damaged": 0, "rebuilt": 0, "searches_checked": 0}


def truncate(db: Path) -> None:
    os.truncate(db, max(PAGE, db.stat().st_size // 2))


def zero_pages(db: Path) -> None:
    """Zero-fill pages (from the middle on) until a fresh connection sees corruption."""
    pages = db.stat().st_size // PAGE
    for page in [*range(pages // 2, pages), *range(1, pages // 2)]:
        with open(db, "r+b") as f:
            f.seek(page * PAGE)
            f.write(b"\0" * PAGE)
        if fresh_problem(db):
            return
    raise AssertionError("zero-filling pages did not corrupt the index")


def delete(db: Path) -> None:
    for suffix in ("", "-wal"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncate": truncate,
    "zero_pages": zero_pages,
    "delete": delete,
}


def fresh_problem(db: Path) -> str | None:
    try:
        conn, _ = connect(db)
    except Exception as exc:  # noqa: BLE001 - any failure to open is a problem
        return str(exc)
    try:
        return quick_check(conn)
    finally:
        conn.close()


def wal_exists(ws: Workspace) -> bool:
    return Path(f"{ws.index_path}-wal").exists()


def rot(db: Path) -> None:
    """Zero every page but the header page, keeping the file's size and times."""
    st = db.stat()
    with open(db, "r+b") as f:
        f.seek(PAGE)
        f.write(b"\0" * (st.st_size - PAGE))
    assert fresh_problem(db)
    os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))


def checkpoint(db: Path) -> None:
    """Move everything from the WAL into the main file (as a clean stop would)."""
    conn, _ = connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


async def fill(d: RunningDaemon, path: Path, ws: Workspace) -> Path:
    """Notes in MEMORY.md and two session logs; returns the log that the test deletes."""
    for i in range(NOTES):
        text = f"Note k{i}q\n\nThe service k{i}q retries {i} times before giving up."
        await d.call("memory.remember", workspace=str(path), text=text)
    ws.sessions_dir.mkdir(parents=True, exist_ok=True)
    kept = ws.sessions_dir / "2025-03-01-kept-aaaaaaaa.md"
    kept.write_text("## Kept log\n\nThe keptlogword stays.\n", encoding="utf-8")
    gone = ws.sessions_dir / "2025-03-02-gone-bbbbbbbb.md"
    gone.write_text("## Gone log\n\nThe gonelogword goes.\n", encoding="utf-8")
    await wait_until(lambda: found(d, path, "gonelogword"))
    return gone


async def found(d: RunningDaemon, path: Path, word: str) -> list[str]:
    result = await d.search(path, word, max_results=20)
    FIGURES["searches_checked"] += 1
    return [hit["path"] for hit in result["results"]]


async def assert_searches_correct(d: RunningDaemon, path: Path, ws: Workspace) -> None:
    memory = f"{ws.key.dirname}/MEMORY.md"
    for i in range(NOTES):
        # Small notes share chunks, and pieces of a long run of them overlap: a note may be
        # in two chunks, never twice in one, and only in MEMORY.md.
        result = await d.search(path, f"k{i}q", max_results=20)
        FIGURES["searches_checked"] += 1
        hits = [(hit["path"], hit["chunk_id"]) for hit in result["results"]]
        assert hits and {p for p, _ in hits} == {memory}, (i, hits)
        assert len({c for _, c in hits}) == len(hits), (i, hits)
    kept = f"{ws.key.dirname}/sessions/2025-03-01-kept-aaaaaaaa.md"
    assert await found(d, path, "keptlogword") == [kept]
    assert await found(d, path, "gonelogword") == []
    stats = await d.call("index.stats", workspace=str(path))
    config = IndexConfig()
    chunks = chunk_markdown(
        ws.memory_file.read_text(encoding="utf-8"),
        config.max_chunk_chars,
        config.chunk_overlap_chars,
        config.min_chunk_chars,
    )
    assert stats["files"] == 2 and stats["chunks"] == len(chunks) + 1, stats


async def rebuilt(d: RunningDaemon, path: Path) -> dict[str, Any]:
    actor = await d.actor_status(path)
    assert actor is not None
    index = actor["index"]
    assert index["rebuilt_reason"], index
    assert index["rebuilt_at"] is not None and index["rebuilds"] >= 1, index
    FIGURES["rebuilt"] += 1
    return dict(index)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_damage_while_stopped_is_rebuilt_at_start(home: Path, damage: str) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    async with in_process_daemon() as d:
        gone = await fill(d, path, ws)
    gone.unlink()  # deleted while no daemon runs
    assert not wal_exists(ws)  # a clean stop checkpointed it
    DAMAGE[damage](ws.index_path)
    FIGURES["damaged"] += 1
    async with in_process_daemon() as d:
        await assert_searches_correct(d, path, ws)
        index = await rebuilt(d, path)
        if damage == "delete":
            assert "missing" in index["rebuilt_reason"]
    report("index_corruption", dict(FIGURES))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_damage_while_running_is_rebuilt_in_place(home: Path, damage: str) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    async with in_process_daemon() as d:
        gone = await fill(d, path, ws)
        checkpoint(ws.index_path)
        assert await found(d, path, "k1q")  # the daemon sees the checkpoint: no damage
        assert (await d.actor_status(path) or {})["index"]["rebuilds"] == 0
        gone.unlink()
        await wait_until(lambda: _gone(d, path))
        await anyio.sleep(0.05)  # past the file system's timestamp granularity
        DAMAGE[damage](ws.index_path)
        FIGURES["damaged"] += 1
        await assert_searches_correct(d, path, ws)
        index = await rebuilt(d, path)
        assert "open" in index["rebuilt_reason"] or "quick_check" in index["rebuilt_reason"]
        assert fresh_problem(ws.index_path) is None
        # Writes keep working on the rebuilt index.
        await d.call("memory.remember", workspace=str(path), text="After the damage zz9")
        assert await found(d, path, "zz9") == [f"{ws.key.dirname}/MEMORY.md"]
    report("index_corruption", dict(FIGURES))


async def _gone(d: RunningDaemon, path: Path) -> bool:
    return await found(d, path, "gonelogword") == []


async def test_bit_rot_surfacing_on_a_read_rebuilds_and_answers(home: Path) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    async with in_process_daemon() as d:
        gone = await fill(d, path, ws)
        gone.unlink()
        await wait_until(lambda: _gone(d, path))
        checkpoint(ws.index_path)
        assert await found(d, path, "k1q")
        rot(ws.index_path)
        FIGURES["damaged"] += 1
        slot = d.daemon.supervisor.slots[ws.key.dirname]
        assert slot.actor is not None
        slot.actor.memory.index.conn.execute("PRAGMA shrink_memory")  # the cache is gone
        await assert_searches_correct(d, path, ws)
        index = await rebuilt(d, path)
        assert "malformed" in index["rebuilt_reason"] or "quick_check" in index["rebuilt_reason"]
    report("index_corruption", dict(FIGURES))
