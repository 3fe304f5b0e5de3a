"""One in-process lock per memory file, shared by every service that writes memory files.

Two actors remembering into the global ``MEMORY.md``, a dream rewriting a workspace's
``MEMORY.md`` while ``remember`` appends to it, a session log written by a flush and a close:
each takes :func:`file_lock` of the file first, so no writer loses another's text. The lock
is per process (the daemon is the only writer); a person's editor is handled by the
read-compare-write checks of the writers themselves.
"""

from __future__ import annotations

from pathlib import Path

import anyio

_file_locks: dict[Path, anyio.Lock] = {}


def file_lock(path: Path) -> anyio.Lock:
    """The lock of one memory file (created on first use)."""
    lock = _file_locks.get(path)
    if lock is None:
        lock = _file_locks[path] = anyio.Lock()
    return lock
