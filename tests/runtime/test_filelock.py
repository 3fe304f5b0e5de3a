"""The per-file write locks (runtime/workspace/filelock.py): one writer per file at a time,
and nothing kept for a file nobody holds or waits for (the daemon writes one session log
per session per day: the locks of all of them stayed for the daemon's life)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from memoryd.runtime.workspace import filelock
from memoryd.runtime.workspace.filelock import file_lock

pytestmark = pytest.mark.anyio


async def test_one_writer_per_file_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    inside = 0
    most = 0
    order: list[int] = []

    async def writer(n: int) -> None:
        nonlocal inside, most
        async with file_lock(path):
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.01)
            order.append(n)
            inside -= 1

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(writer, n)
    assert most == 1 and sorted(order) == list(range(5))
    assert filelock._file_locks == {}


async def test_no_lock_is_kept_for_a_file_nobody_holds(tmp_path: Path) -> None:
    for n in range(2000):
        async with file_lock(tmp_path / f"sessions/2026-12-01-s{n}.md"):
            pass
    assert filelock._file_locks == {}


async def test_a_waiter_gets_the_file_after_the_holder_and_a_cancelled_one_leaves_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.md"
    got: list[str] = []
    holding = anyio.Event()
    release = anyio.Event()

    async def first() -> None:
        async with file_lock(path):
            got.append("first in")
            holding.set()
            await release.wait()
            got.append("first out")

    async def second() -> None:
        await holding.wait()
        async with file_lock(path):
            got.append("second")

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        tg.start_soon(second)
        await holding.wait()
        with anyio.move_on_after(0.05):  # a third writer gives up while waiting
            async with file_lock(path):
                got.append("third")
        assert got == ["first in"] and path in filelock._file_locks
        release.set()
    assert got == ["first in", "first out", "second"]
    assert filelock._file_locks == {}
