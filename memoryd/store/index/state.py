"""What every part of the index shares: its paths, settings, connection, meta table and the
memory files it covers. The parts (:mod:`.vectors`, :mod:`.reader`, :mod:`.writer`) build on
it and :class:`memoryd.store.index.Index` puts them together."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from memoryd.core.workspace import GLOBAL_FILES, MEMORY_FILE, SESSIONS_DIR, source_of
from memoryd.errors import StorageError
from memoryd.store.connection import Capabilities, Connection
from memoryd.store.index import guard
from memoryd.store.index.guard import FileId
from memoryd.store.index.records import ChunkSettings
from memoryd.store.mirror import VectorMirror
from memoryd.store.prepare import inside

DEFAULT_SETTINGS = ChunkSettings()


class IndexState:
    """The index's paths, settings, connection and recorded state, shared by its parts."""

    def __init__(
        self,
        db_path: Path,
        *,
        root: Path,
        workspace_dir: Path,
        settings: ChunkSettings = DEFAULT_SETTINGS,
        clock: Callable[[], float] = time.time,
        vectors_in_memory: bool = False,
    ) -> None:
        self.db_path = db_path
        self.root = root
        self.workspace_dir = workspace_dir
        self.settings = settings
        self.clock = clock
        self.rebuilt_reason: str | None = None
        self.rebuilt_at: float | None = None
        self.rebuilds = 0
        self._conn: Connection | None = None
        self._staging: Connection | None = None  # the connection that has the temp tables
        self._file_id: FileId | None = None
        self.caps: Capabilities | None = None
        self.vec_dims: int | None = None
        self.vec_model: str | None = None
        # Exact KNN from a float32 copy of the vectors (store/mirror.py) instead of vec0's scan.
        self.mirror = VectorMirror() if vectors_in_memory else None
        # rel path → why it is not indexed whole (not a regular file, cut at the size limit,
        # undecodable bytes); in stats() so that `status` lists them.
        self.file_warnings: dict[str, tuple[str, ...]] = {}

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise StorageError(f"index {self.db_path} is not open")
        return self._conn

    def damage(self, exc: Exception) -> str | None:
        """Why a failed phase means a damaged index, or None (disk full, locked …)."""
        return guard.damage(self.db_path, exc)

    def _mirror_invalidate(self) -> None:
        if self.mirror is not None:
            self.mirror.invalidate()

    def _vec_table_exists(self) -> bool:
        row = self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()
        return row is not None

    def _meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, items: Sequence[tuple[str, str]]) -> None:
        self.conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) "
            "DO UPDATE SET value = excluded.value",
            items,
        )

    def generation(self) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ files on disk

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def disk_files(self) -> list[Path]:
        """The memory files that belong in this index, as they are on disk now (a symlink
        out of the memory root is not one)."""
        found = [p for p in (self.root / name for name in GLOBAL_FILES) if _entry(p)]
        ws_memory = self.workspace_dir / MEMORY_FILE
        if _entry(ws_memory):
            found.append(ws_memory)
        sessions = self.workspace_dir / SESSIONS_DIR
        if sessions.is_dir():
            found.extend(sorted(p for p in sessions.glob("*.md") if _entry(p)))
        return [p for p in found if self.inside_root(p)]

    def inside_root(self, path: Path) -> bool:
        """True when ``path``, with every symlink resolved, stays inside the memory root."""
        return inside(os.path.realpath(self.root), path)

    def belongs(self, path: Path) -> bool:
        """True when ``path`` is a memory file of this index (global or this workspace)."""
        try:
            rel = self.rel(path)
        except ValueError:
            return False
        if source_of(rel) is None:
            return False
        return "/" not in rel or path.parent in (
            self.workspace_dir,
            self.workspace_dir / SESSIONS_DIR,
        )


def _entry(path: Path) -> bool:
    """Whether something that is not a directory is at ``path`` (symlinks followed): a FIFO,
    socket or device under a memory file's name is listed too — syncing it skips it unread
    and lists it in ``status``."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False
