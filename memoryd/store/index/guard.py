"""The corruption guard's checks: is the index file still the one we opened, and undamaged?

The index is derived data (SPEC §1): these functions only *detect* damage — the file
deleted, replaced or cut shorter behind the index's back, or failing ``quick_check`` on a
fresh connection (the open connection's page cache would hide it) — and describe SQLite
failures that are not damage (disk full, I/O error, locked) as a :class:`StorageError`
naming the file. Rebuilding is :meth:`memoryd.store.index.Index.guarded`'s.
"""

from __future__ import annotations

import os
from pathlib import Path

from memoryd.errors import StorageError
from memoryd.store.connection import Connection, DatabaseError, connect, quick_check

FileId = tuple[tuple[int, int, int, int] | None, ...]
MAX_REASON_CHARS = 300


def stat_id(db_path: Path) -> FileId:
    """What identifies the index file and its WAL on disk (device, inode, size, mtime)."""
    out: list[tuple[int, int, int, int] | None] = []
    for suffix in ("", "-wal"):
        try:
            st = os.stat(f"{db_path}{suffix}")
        except OSError:
            out.append(None)
            continue
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def change_reason(db_path: Path, before: FileId, now: FileId) -> str | None:
    """Why the file that changed from ``before`` to ``now`` is damaged, or None when another
    SQLite connection wrote it (fine)."""
    main, old = now[0], before[0]
    if main is None:
        return "the index file was deleted while open"
    if old is not None and main[:2] != old[:2]:
        return "the index file was replaced while open"
    if old is not None and main[2] < old[2]:
        return f"the index file was cut from {old[2]} to {main[2]} bytes while open"
    return fresh_check(db_path)


def fresh_check(db_path: Path) -> str | None:
    """``quick_check`` on a new connection, which reads the file, not our cache."""
    try:
        conn, _ = connect(db_path)
    except DatabaseError as exc:
        return short(str(exc))
    try:
        problem = quick_check(conn)
    finally:
        conn.close()
    return None if problem is None else short(f"index failed quick_check: {problem}")


def damage(db_path: Path, exc: Exception) -> str | None:
    """Why a failed phase means a damaged index, or None (disk full, locked …)."""
    if not db_path.exists():
        return "the index file was deleted while open"
    found = fresh_check(db_path)
    if found is not None:
        return f"{short(str(exc))}; {found}"
    return None


def discard_files(db_path: Path) -> None:
    """Remove the index file and its companions (WAL, shared memory, journal)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{db_path}{suffix}")
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot remove corrupt index {db_path}: {exc}") from exc


def rollback(conn: Connection) -> None:
    """Roll back the open transaction, if SQLite has not already done so (a full disk or an
    I/O error ends it): a second error here must not hide the first."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


_ERRNO_HINTS = (("full", "ENOSPC"), ("i/o", "EIO"), ("locked", "EBUSY"), ("readonly", "EROFS"))


def storage_error(path: Path, exc: Exception) -> StorageError:
    """A SQLite failure that is not damage, as the StorageError clients see."""
    text = str(exc)
    name = next((code for hint, code in _ERRNO_HINTS if hint in text.lower()), None)
    detail = f"{name}: {text}" if name else text
    return StorageError(f"cannot use index {path}: {detail}", path=str(path), errno=name)
