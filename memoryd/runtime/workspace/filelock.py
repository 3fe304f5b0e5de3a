"""One in-process lock per memory file, shared by every service that writes memory files.

Two actors remembering into the global ``MEMORY.md``, a dream rewriting a workspace's
``MEMORY.md`` while ``remember`` appends to it, a session log written by a flush and a close:
each takes :func:`file_lock` of the file first, so no writer loses another's text. The lock
is per process (the daemon is the only writer); a person's editor is handled by the
read-compare-write checks of the writers themselves.

A lock is kept only while a writer holds it or waits for it: the daemon writes one session
log per session per day, and a lock kept for each file ever written grew for its whole life.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio


class _Entry:
    """A file's lock and how many writers hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = anyio.Lock()
        self.users = 0


_file_locks: dict[Path, _Entry] = {}


@asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """Hold the lock of one memory file (``async with file_lock(path):``)."""
    entry = _file_locks.get(path)
    if entry is None:
        entry = _file_locks[path] = _Entry()
    entry.users += 1
    try:
        async with entry.lock:
            yield
    finally:
        entry.users -= 1
        if entry.users == 0:
            del _file_locks[path]
