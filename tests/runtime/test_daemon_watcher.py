"""Freshness in a real daemon (issue 3 item 7, SPEC §4): the watcher, polling, edits at start.

Files are changed by another process or a plain thread, never through the daemon, and found
(or no longer found) by the next search over the socket.
"""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.runtime.adapters.watcher import RawChanges, watch_memory
from tests.runtime.daemon_fixtures import (
    RunningDaemon,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
    wait_until,
)

pytestmark = pytest.mark.anyio

NEXT_SEARCH_DELAY = 0.2  # issue 3 item 7: "the next search issued 200 ms later"


async def memory_file(d: RunningDaemon, ws: Path) -> Path:
    """Start the workspace's actor with one note; return its MEMORY.md."""
    result = await d.call("memory.remember", workspace=str(ws), text="the first note")
    return d.root / result["path"]


async def paths_found(d: RunningDaemon, ws: Path, query: str) -> list[str]:
    return [hit["path"] for hit in (await d.search(ws, query))["results"]]


def append_in_another_process(path: Path, text: str) -> None:
    code = "import sys; open(sys.argv[1], 'a', encoding='utf-8').write(sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, str(path), text], check=True, timeout=30)


@pytest.mark.parametrize("which", ["workspace", "global"])
async def test_a_file_written_by_another_process_is_found_by_a_search_200ms_later(
    home: Path, which: str
) -> None:
    ws, other = project(home, "app"), project(home, "other")
    async with in_process_daemon() as d:
        workspace_file = await memory_file(d, ws)
        await memory_file(d, other)  # a second actor watching the same global file
        target = workspace_file if which == "workspace" else d.root / "MEMORY.md"
        assert await paths_found(d, ws, "xylophone") == []
        await anyio.to_thread.run_sync(
            append_in_another_process, target, "\n## The xylophone is tuned to A440\n"
        )
        await anyio.sleep(NEXT_SEARCH_DELAY)
        expected = [target.relative_to(d.root).as_posix()]
        assert await paths_found(d, ws, "xylophone") == expected
        if which == "global":
            assert await paths_found(d, other, "xylophone") == expected
        else:
            assert await paths_found(d, other, "xylophone") == []


async def test_a_new_session_file_is_found_and_a_deleted_one_never_returned(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon() as d:
        memory = await memory_file(d, ws)
        session = memory.parent / "sessions" / "2025-03-01-tuba.md"
        await anyio.to_thread.run_sync(
            session.write_text, "# Session\n\n## The tuba needs a new valve\n"
        )
        await anyio.sleep(NEXT_SEARCH_DELAY)
        assert await paths_found(d, ws, "tuba valve") == [session.relative_to(d.root).as_posix()]

        await anyio.to_thread.run_sync(session.unlink)
        await anyio.sleep(NEXT_SEARCH_DELAY)
        assert await paths_found(d, ws, "tuba valve") == []
        files = (await d.call("memory.files", workspace=str(ws)))["files"]
        assert session.name not in str(files)


async def test_an_editor_save_by_rename_is_picked_up(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon() as d:
        memory = await memory_file(d, ws)
        await d.call("memory.remember", workspace=str(ws), text="The oboe reed is cane")
        assert await paths_found(d, ws, "oboe") != []

        def save_like_an_editor() -> None:
            text = memory.read_text().replace("The oboe reed is cane", "The bassoon reed is cane")
            temp = memory.with_name(".MEMORY.md.swp")
            temp.write_text(text)
            os.replace(temp, memory)

        await anyio.to_thread.run_sync(save_like_an_editor)
        await anyio.sleep(NEXT_SEARCH_DELAY)
        assert await paths_found(d, ws, "bassoon") == [memory.relative_to(d.root).as_posix()]
        assert await paths_found(d, ws, "oboe") == []


def refusing_awatch(*paths: str, **options: Any) -> AsyncGenerator[RawChanges, None]:
    """``watchfiles.awatch`` when the OS has run out of inotify watches."""

    async def gen() -> AsyncGenerator[RawChanges, None]:
        raise OSError(errno.ENOSPC, "OS file watch limit reached")
        yield set()  # pragma: no cover - makes this an async generator

    return gen()


def dying_awatch(*paths: str, **options: Any) -> AsyncGenerator[RawChanges, None]:
    """``watchfiles.awatch`` that starts, then fails (e.g. the watch descriptor table filled)."""

    async def gen() -> AsyncGenerator[RawChanges, None]:
        yield set()  # the first tick: watching has started
        await anyio.sleep(0.05)
        raise OSError(errno.EMFILE, "Too many open files")

    return gen()


@pytest.mark.parametrize(
    ("awatch", "errno_name"), [(refusing_awatch, "ENOSPC"), (dying_awatch, "EMFILE")]
)
async def test_without_a_watcher_the_actor_polls_and_still_finds_edits(
    home: Path, awatch: Any, errno_name: str
) -> None:
    ws = project(home, "app")
    broken_watch = functools.partial(watch_memory, awatch=awatch)
    config = "[index]\nreconcile_secs = 0.2\n"
    async with in_process_daemon(config=config, watch=broken_watch) as d:
        memory = await memory_file(d, ws)

        async def polling() -> dict[str, Any] | None:
            actor = await d.actor_status(ws)
            return actor if actor and actor["watcher"] == "polling" else None

        actor = await wait_until(polling)
        assert actor["state"] == "running"
        assert errno_name in actor["watcher_error"]

        with memory.open("a") as f:
            f.write("\n## The harpsichord was found by polling\n")

        async def found() -> bool:
            return await paths_found(d, ws, "harpsichord") != []

        await wait_until(found)
        actor = await d.actor_status(ws)
        assert actor is not None and actor["watcher"] == "polling" and actor["failures"] == 0


async def test_edits_made_while_the_daemon_was_stopped_are_found_at_start(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon() as d:
        memory = await memory_file(d, ws)
        await d.call("memory.remember", workspace=str(ws), text="The cello is out of tune")
        sessions = memory.parent / "sessions"
        old_session = sessions / "2025-02-01-lute.md"
        old_session.write_text("# Session\n\n## The lute string snapped\n")
        await anyio.sleep(NEXT_SEARCH_DELAY)
        assert await paths_found(d, ws, "lute") != []

    # Offline: edit, add and delete files as a person (or git) would.
    text = memory.read_text().replace("The cello is out of tune", "The viola is out of tune")
    memory.write_text(text)
    (sessions / "2025-02-02-sitar.md").write_text("# Session\n\n## The sitar arrived\n")
    old_session.unlink()
    (d.root / "MEMORY.md").write_text("# Global\n\n## The kazoo is global knowledge\n")

    async with in_process_daemon() as d:
        assert await paths_found(d, ws, "viola") == [memory.relative_to(d.root).as_posix()]
        assert await paths_found(d, ws, "cello") == []
        assert await paths_found(d, ws, "sitar") != []
        assert await paths_found(d, ws, "lute") == []
        assert await paths_found(d, ws, "kazoo") == ["MEMORY.md"]
