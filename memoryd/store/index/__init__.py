"""The SQLite index of one workspace: files, chunks, FTS5 and sqlite-vec vectors.

This package is the only code that speaks SQL about chunks. Everything here is synchronous and
runs in the index's own thread; nothing here awaits a model (SPEC §1). Each public method
is one *phase*: it opens at most one transaction and commits it before returning, so no
transaction is ever held while the caller awaits an embedding.

The index is derived data: a corrupt or unreadable file is detected at open
(``quick_check``) and rebuilt from the markdown files, which are the source of truth.
While it is open, :meth:`Index.guarded` runs each phase: the file deleted, replaced or cut
shorter behind the index's back, changed otherwise with a failing ``quick_check`` on a fresh
connection (the open connection's page cache would hide it), or a phase failing with a
corruption error → the index is rebuilt in place from the markdown (and the phase run
again); ``stats`` reports it (``rebuilt_reason``, ``rebuilt_at``, ``rebuilds``). Any other
SQLite failure (disk full, I/O error, locked) is a :class:`StorageError` naming the file.

The parts, one module each: ``guard`` (is the file damaged?), ``writer`` (sync),
``reader`` (search and reporting), ``vectors`` (vector identity and storage), ``state``
(what they share), ``records`` (settings and reports); this module opens, guards, rebuilds
and closes the index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from memoryd.core.chunking import chunker_signature
from memoryd.core.replies import IndexStats
from memoryd.core.workspace import MEMORY_FILE, SESSIONS_DIR
from memoryd.errors import IndexCorrupt
from memoryd.store import migrations
from memoryd.store.connection import Connection, DatabaseError, connect, quick_check
from memoryd.store.index.guard import (
    change_reason,
    discard_files,
    short,
    stat_id,
    storage_error,
)
from memoryd.store.index.reader import CURATED, Reader, knn_k
from memoryd.store.index.records import ChunkSettings, PendingVector, SyncReport
from memoryd.store.index.vectors import STALE_VECTORS
from memoryd.store.index.writer import (
    BULK_CACHE_KIB,
    COMMIT_CHUNKS,
    STAGING_KEEP_PAGES,
    SYNC_BATCH,
    SYNC_BATCHES,
    SYNC_FIRST_BATCH,
    Writer,
)

__all__ = [
    "BULK_CACHE_KIB",
    "COMMIT_CHUNKS",
    "CURATED",
    "STAGING_KEEP_PAGES",
    "STALE_VECTORS",
    "SYNC_BATCH",
    "SYNC_BATCHES",
    "SYNC_FIRST_BATCH",
    "WAL_LIMIT_BYTES",
    "ChunkSettings",
    "Index",
    "PendingVector",
    "SyncReport",
    "knn_k",
]

log = structlog.get_logger(__name__)

T = TypeVar("T")
WAL_LIMIT_BYTES = 16 << 20  # the WAL file is cut back to this after a checkpoint
CHUNKER_KEY = "chunker"  # meta: chunker_signature() of the settings the chunks were made with
MAX_LISTED_WARNINGS = 50  # files with warnings that stats() lists (all are counted)


class Index(Writer, Reader):
    """One workspace's index file. Not thread-safe: call it from one thread at a time.

    Built from its parts: :class:`~.writer.Writer` (sync), :class:`~.reader.Reader`
    (search, reporting), :class:`~.vectors.Vectors` (vector identity) over
    :class:`~.state.IndexState`; this class opens, guards, rebuilds and closes it.
    """

    # ------------------------------------------------------------------ open / close

    def open(self) -> None:
        """Open (creating or upgrading) the index; rebuild it when it is corrupt or missing."""
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        missing = not self.db_path.exists() and self._has_markdown()
        try:
            self._open_checked()
        except (DatabaseError, IndexCorrupt) as exc:
            reason = short(str(exc))
            log.warning("index.corrupt", path=str(self.db_path), reason=reason)
            self.close()
            discard_files(self.db_path)
            self._open_checked()
            self._rebuilt(reason)
        else:
            if missing:
                self._rebuilt("the index file was missing")
                log.warning("index.missing", path=str(self.db_path))
        self._file_id = stat_id(self.db_path)

    def _rebuilt(self, reason: str) -> None:
        self.rebuilt_reason, self.rebuilt_at = reason, self.clock()
        self.rebuilds += 1

    def _has_markdown(self) -> bool:
        """Whether this workspace has memory files (so a missing index existed before)."""
        sessions = self.workspace_dir / SESSIONS_DIR
        return (self.workspace_dir / MEMORY_FILE).is_file() or (
            sessions.is_dir() and any(sessions.glob("*.md"))
        )

    # ------------------------------------------------------------------ damage while open

    def guarded(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one phase ``fn(*args)``, rebuilding the index first (or after a corruption
        error, then running ``fn`` again) when its file was damaged; see the module docstring.
        Other SQLite failures become a :class:`StorageError` naming the file."""
        if self._file_id is None:  # not open (or closed): open, close and the like
            return fn(*args)
        try:
            if self._conn is None:  # an earlier rebuild failed half-way (disk full …)
                self.rebuild(self.rebuilt_reason or "the index could not be reopened")
            self._check_file()
            try:
                return fn(*args)
            except DatabaseError as exc:
                reason = self.damage(exc)
                if reason is None:
                    raise
                self.rebuild(reason)
                return fn(*args)
        except DatabaseError as exc:
            raise storage_error(self.db_path, exc) from exc
        finally:
            if self._conn is not None:
                self._file_id = stat_id(self.db_path)

    def _check_file(self) -> None:
        """Rebuild when the file changed behind our back and is damaged (see guarded)."""
        now = stat_id(self.db_path)
        before = self._file_id
        if before is None or now == before:
            return
        reason = change_reason(self.db_path, before, now)
        if reason is None:
            self._file_id = now  # another SQLite connection wrote it: fine
            return
        self.rebuild(reason)

    def rebuild(self, reason: str) -> None:
        """Throw the index away and rebuild it from the markdown files, now."""
        log.warning("index.corrupt", path=str(self.db_path), reason=reason, while_open=True)
        model, dims = self.vec_model, self.vec_dims
        self._close_conn()
        discard_files(self.db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self._open_checked()
        if model is not None and dims is not None:
            self.set_embedding_identity(model, dims)
        self._rebuilt(reason)
        self.sync_many(self.disk_files())
        self._file_id = stat_id(self.db_path)
        log.info("index.rebuilt", path=str(self.db_path), chunks=self.count_chunks())

    def count_chunks(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def _open_checked(self) -> None:
        conn, caps = connect(self.db_path)
        try:
            problem = quick_check(conn)
            if problem is not None:
                raise IndexCorrupt(f"index failed quick_check: {problem}")
            migrations.migrate(conn)
            # An FTS table this SQLite cannot use (made by a newer one: contentless_delete
            # needs 3.43) fails here, and the index is rebuilt, rather than at every search.
            conn.execute("SELECT rowid FROM chunks_fts WHERE 0").fetchall()
            # A big sync's transaction grows the WAL far past its usual few MB; without a
            # limit the file would keep that size on disk after the checkpoint.
            conn.execute(f"PRAGMA journal_size_limit = {int(WAL_LIMIT_BYTES)}")
            self._record_chunker(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self.caps = conn, caps
        # Vectors as recorded; the owner confirms or changes this with the provider it has.
        identity = self.embedding_identity() if caps.vec else None
        self.vec_model, self.vec_dims = identity if identity else (None, None)

    def _record_chunker(self, conn: Connection) -> None:
        """Record how chunks are made; when an index made otherwise (other chunk settings,
        another chunker version) has files, mark them all for re-chunking (see
        :func:`~memoryd.store.migrations.mark_for_rechunk`)."""
        s = self.settings
        signature = chunker_signature(s.max_chars, s.overlap_chars, s.min_chars)
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (CHUNKER_KEY,)).fetchone()
        if row is not None and row[0] == signature:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            if row is not None:
                migrations.mark_for_rechunk(conn)
                log.info("index.rechunk", was=row[0], now=signature)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) "
                "DO UPDATE SET value = excluded.value",
                (CHUNKER_KEY, signature),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        self._file_id = None
        self._close_conn()

    def _close_conn(self) -> None:
        self._mirror_invalidate()
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def stats(self) -> IndexStats:
        conn = self.conn
        chunks = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        files = int(conn.execute("SELECT count(*) FROM files").fetchone()[0])
        try:
            size = self.db_path.stat().st_size
        except OSError:
            size = 0
        caps = self.caps
        return {
            "path": str(self.db_path),
            "files": files,
            "chunks": chunks,
            "generation": self.generation(),
            "schema_version": migrations.schema_version(conn),
            "size_bytes": size,
            "sqlite_version": caps.sqlite_version if caps else None,
            "fts5": caps.fts5 if caps else False,
            "vec": caps.vec if caps else False,
            "vec_error": caps.vec_error if caps else None,
            "embedding_model": self.vec_model,
            "embedding_dims": self.vec_dims,
            "vectors_pending": self.count_pending_vectors(),
            "vectors_in_memory": None if self.mirror is None else self.mirror.count,
            "vectors_in_memory_bytes": None if self.mirror is None else self.mirror.nbytes,
            "rebuilt_reason": self.rebuilt_reason,
            "rebuilt_at": self.rebuilt_at,
            "rebuilds": self.rebuilds,
            "file_warnings": [
                {"path": rel, "warnings": list(self.file_warnings[rel])}
                for rel in sorted(self.file_warnings)[:MAX_LISTED_WARNINGS]
            ],
            "file_warnings_total": len(self.file_warnings),
        }
