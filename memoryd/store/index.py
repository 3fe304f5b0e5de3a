"""The SQLite index of one workspace: files, chunks, FTS5 and sqlite-vec vectors.

This is the only module that speaks SQL about chunks. Everything here is synchronous and
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
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import blake3
import structlog

from memoryd.core.ranking import Candidate
from memoryd.core.workspace import source_of
from memoryd.errors import IndexCorrupt, StorageError
from memoryd.store import migrations
from memoryd.store.connection import Capabilities, Connection, DatabaseError, connect, quick_check
from memoryd.store.heap import release_free_memory
from memoryd.store.mirror import VectorMirror
from memoryd.store.prepare import Prepared, inside, prepare_file
from memoryd.store.vectors import vector_blob

log = structlog.get_logger(__name__)

T = TypeVar("T")
FileId = tuple[tuple[int, int, int, int] | None, ...]
MAX_REASON_CHARS = 300

CURATED = ("global", "workspace")
# Files read, chunked and written at a time when many are synced at once: a small first
# batch (prepared while nothing else runs), then about SYNC_BATCHES batches of at most
# SYNC_BATCH files — enough of them to overlap reading with writing, yet big ones at scale
# (each batch's new rows go to FTS5 in one statement, which ends in a segment of its own).
SYNC_FIRST_BATCH = 32
SYNC_BATCHES = 12
SYNC_BATCH = 1024
COMMIT_CHUNKS = 25_000  # chunks added or removed per transaction then (~3.5 KB of WAL each)
STAGING_KEEP_PAGES = 64  # temp tables bigger than this (pages) are freed after a sync
BULK_CACHE_KIB = 64 << 10  # SQLite page cache while sync_many runs (2 MiB otherwise)
WAL_LIMIT_BYTES = 16 << 20  # the WAL file is cut back to this after a checkpoint
STALE_VECTORS = "vectors_stale"  # meta key: chunks were deleted while sqlite-vec was missing


@dataclass(frozen=True, slots=True)
class ChunkSettings:
    max_chars: int = 1600
    overlap_chars: int = 320


@dataclass(slots=True)
class SyncReport:
    """What one sync phase did: paths looked at, re-chunked, removed; chunks added/removed."""

    synced: int = 0
    changed: int = 0
    removed: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    errors: list[str] = field(default_factory=list)
    failed: list[tuple[Path, StorageError]] = field(default_factory=list)
    """Paths the index could not take (disk full …); they are still to be synced."""

    def add(self, other: SyncReport) -> None:
        self.synced += other.synced
        self.changed += other.changed
        self.removed += other.removed
        self.chunks_added += other.chunks_added
        self.chunks_removed += other.chunks_removed
        self.errors.extend(other.errors)
        self.failed.extend(other.failed)


@dataclass(frozen=True, slots=True)
class PendingVector:
    seq: int
    hash: str
    text: str


def knn_k(limit: int, sources: Sequence[str] | None) -> int:
    """How many neighbours to scan for: more when a source filter will drop some."""
    return limit if sources is None else limit * 3


class Index:
    """One workspace's index file. Not thread-safe: call it from one thread at a time."""

    def __init__(
        self,
        db_path: Path,
        *,
        root: Path,
        workspace_dir: Path,
        settings: ChunkSettings = ChunkSettings(),
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

    # ------------------------------------------------------------------ open / close

    def open(self) -> None:
        """Open (creating or upgrading) the index; rebuild it when it is corrupt or missing."""
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        missing = not self.db_path.exists() and self._has_markdown()
        try:
            self._open_checked()
        except (DatabaseError, IndexCorrupt) as exc:
            reason = _short(str(exc))
            log.warning("index.corrupt", path=str(self.db_path), reason=reason)
            self.close()
            self._discard_files()
            self._open_checked()
            self._rebuilt(reason)
        else:
            if missing:
                self._rebuilt("the index file was missing")
                log.warning("index.missing", path=str(self.db_path))
        self._file_id = self._stat_id()

    def _rebuilt(self, reason: str) -> None:
        self.rebuilt_reason, self.rebuilt_at = reason, self.clock()
        self.rebuilds += 1

    def _has_markdown(self) -> bool:
        """Whether this workspace has memory files (so a missing index existed before)."""
        sessions = self.workspace_dir / "sessions"
        return (self.workspace_dir / "MEMORY.md").is_file() or (
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
            raise _storage_error(self.db_path, exc) from exc
        finally:
            if self._conn is not None:
                self._file_id = self._stat_id()

    def _stat_id(self) -> FileId:
        out: list[tuple[int, int, int, int] | None] = []
        for suffix in ("", "-wal"):
            try:
                st = os.stat(f"{self.db_path}{suffix}")
            except OSError:
                out.append(None)
                continue
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def _check_file(self) -> None:
        """Rebuild when the file changed behind our back and is damaged (see guarded)."""
        now = self._stat_id()
        before = self._file_id
        if before is None or now == before:
            return
        main, old = now[0], before[0]
        if main is None:
            reason: str | None = "the index file was deleted while open"
        elif old is not None and main[:2] != old[:2]:
            reason = "the index file was replaced while open"
        elif old is not None and main[2] < old[2]:
            reason = f"the index file was cut from {old[2]} to {main[2]} bytes while open"
        else:
            reason = self._fresh_check()
        if reason is None:
            self._file_id = now  # another SQLite connection wrote it: fine
            return
        self.rebuild(reason)

    def _fresh_check(self) -> str | None:
        """``quick_check`` on a new connection, which reads the file, not our cache."""
        try:
            conn, _ = connect(self.db_path)
        except DatabaseError as exc:
            return _short(str(exc))
        try:
            problem = quick_check(conn)
        finally:
            conn.close()
        return None if problem is None else _short(f"index failed quick_check: {problem}")

    def damage(self, exc: Exception) -> str | None:
        """Why a failed phase means a damaged index, or None (disk full, locked …)."""
        if not self.db_path.exists():
            return "the index file was deleted while open"
        found = self._fresh_check()
        if found is not None:
            return f"{_short(str(exc))}; {found}"
        return None

    def rebuild(self, reason: str) -> None:
        """Throw the index away and rebuild it from the markdown files, now."""
        log.warning("index.corrupt", path=str(self.db_path), reason=reason, while_open=True)
        model, dims = self.vec_model, self.vec_dims
        self._close_conn()
        self._discard_files()
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self._open_checked()
        if model is not None and dims is not None:
            self.set_embedding_identity(model, dims)
        self._rebuilt(reason)
        self.sync_many(self.disk_files())
        self._file_id = self._stat_id()
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
        except BaseException:
            conn.close()
            raise
        self._conn, self.caps = conn, caps
        # Vectors as recorded; the owner confirms or changes this with the provider it has.
        identity = self.embedding_identity() if caps.vec else None
        self.vec_model, self.vec_dims = identity if identity else (None, None)

    def _discard_files(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(f"{self.db_path}{suffix}")
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"cannot remove corrupt index {self.db_path}: {exc}") from exc

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

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise StorageError(f"index {self.db_path} is not open")
        return self._conn

    # ------------------------------------------------------------------ files on disk

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def disk_files(self) -> list[Path]:
        """The memory files that belong in this index, as they are on disk now (a symlink
        out of the memory root is not one)."""
        found = [p for p in (self.root / "MEMORY.md", self.root / "experience.md") if p.is_file()]
        ws_memory = self.workspace_dir / "MEMORY.md"
        if ws_memory.is_file():
            found.append(ws_memory)
        sessions = self.workspace_dir / "sessions"
        if sessions.is_dir():
            found.extend(sorted(p for p in sessions.glob("*.md") if p.is_file()))
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
            self.workspace_dir / "sessions",
        )

    # ------------------------------------------------------------------ sync

    def sync_paths(self, paths: Iterable[Path], *, tolerant: bool = False) -> SyncReport:
        """Re-chunk every path that exists, drop the chunks of every path that is gone.

        With ``tolerant``, a path the database cannot take (disk full, I/O error) is listed
        in ``failed`` and the others still sync; damage (:meth:`damage`) always raises.
        """
        report = SyncReport()
        real_root = os.path.realpath(self.root)
        for path in paths:
            if not self.belongs(path):
                continue
            try:
                report.add(self._sync_one(path, real_root))
            except OSError as exc:
                report.errors.append(f"{path}: {exc}")
                log.warning("index.sync_failed", path=str(path), error=str(exc))
            except DatabaseError as exc:
                if not tolerant or self.damage(exc) is not None:
                    raise
                error = _storage_error(self.db_path, exc)
                report.errors.append(error.message)
                report.failed.append((path, error))
                log.warning("index.sync_failed", path=str(path), error=error.message)
        self._trim_staging()
        return report

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One file's write in its own transaction (batches are :meth:`sync_many`'s)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            self._mirror_invalidate()
            _rollback(conn)
            raise

    def sync_many(
        self,
        paths: Sequence[Path],
        *,
        batch: int = SYNC_BATCH,
        commit_chunks: int = COMMIT_CHUNKS,
    ) -> SyncReport:
        """:meth:`sync_paths` for many files at once (a reindex, a cold start).

        Files are read and chunked in batches of up to ``batch`` (see ``SYNC_BATCHES``) —
        the next batch in a helper thread while this thread writes the current one (no
        connection is shared) — and written
        without a savepoint per file (FTS5 flushes its pending terms at every savepoint),
        in transactions of about ``commit_chunks`` new chunks (every commit costs FTS5 a
        segment and the WAL a copy of the pages it touched). A database error rolls back the
        open transaction and raises (what was committed stays); the caller can then go file
        by file (``sync_paths(tolerant=True)``).
        """
        report = SyncReport()
        wanted = [path for path in dict.fromkeys(paths) if self.belongs(path)]
        if not wanted:
            return report
        real_root = os.path.realpath(self.root)
        known: dict[str, str] = dict(self.conn.execute("SELECT path, hash FROM files"))
        max_chars, overlap = self.settings.max_chars, self.settings.overlap_chars

        real_dirs: dict[Path, str] = {}  # for the helper thread only

        def prepare(part: Sequence[Path]) -> list[Prepared]:
            out = []
            for path in part:
                rel = self.rel(path)
                known_hash = known.get(rel)
                out.append(
                    prepare_file(path, rel, real_root, known_hash, max_chars, overlap, real_dirs)
                )
            return out

        size = min(batch, max(SYNC_FIRST_BATCH, -(-len(wanted) // SYNC_BATCHES)))
        parts = _batches(wanted, min(SYNC_FIRST_BATCH, size), size)
        self._create_staging()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memoryd-prepare")
        conn = self.conn
        # A bigger page cache for the duration: FTS5 merges and the B-trees of a big
        # transaction re-read fewer pages and spill fewer to the WAL (~15 % at 100k chunks).
        cache = int(conn.execute("PRAGMA cache_size").fetchone()[0])
        conn.execute(f"PRAGMA cache_size = {-BULK_CACHE_KIB}")
        done = SyncReport()  # in the open transaction
        unreadable: list[Prepared] = []
        try:
            ahead = pool.submit(prepare, parts[0])
            for number in range(len(parts)):
                items = ahead.result()
                if not conn.in_transaction:
                    conn.execute("BEGIN IMMEDIATE")
                unreadable.extend(item for item in items if item.error is not None)
                staged = self._stage([item for item in items if item.error is None], done)
                last = number + 1 == len(parts)
                if not last:
                    # From here this thread runs a few long statements, without the GIL.
                    ahead = pool.submit(prepare, parts[number + 1])
                if staged:
                    self._insert_staged()
                if last or done.chunks_added + done.chunks_removed >= commit_chunks:
                    conn.execute("COMMIT")
                    report.add(done)
                    done = SyncReport()
        except BaseException:
            self._mirror_invalidate()  # deleted vectors may have left it already
            _rollback(conn)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            with suppress(DatabaseError):  # a second error must not hide the first
                conn.execute(f"PRAGMA cache_size = {cache}")  # gives the extra pages back
                self._trim_staging()
        release_free_memory()  # what the batches allocated, back to the OS (glibc)
        for item in unreadable:
            report.errors.append(f"{item.path}: {item.error}")
            log.warning("index.sync_failed", path=str(item.path), error=str(item.error))
        return report

    def _sync_one(self, path: Path, real_root: str) -> SyncReport:
        rel = self.rel(path)
        row = self.conn.execute("SELECT hash FROM files WHERE path = ?", (rel,)).fetchone()
        item = prepare_file(
            path,
            rel,
            real_root,
            None if row is None else row[0],
            self.settings.max_chars,
            self.settings.overlap_chars,
        )
        if item.error is not None:
            raise item.error
        report = SyncReport()
        with self._transaction():
            self._write([item], report)
        return report

    def _create_staging(self) -> None:
        """The connection's temp tables for new chunks (see :meth:`_stage`), once."""
        conn = self.conn
        if self._staging is conn:
            return
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS new_chunks (seq INTEGER PRIMARY KEY, id TEXT, "
            "path TEXT, start_line INTEGER, end_line INTEGER, heading TEXT, text TEXT, "
            "hash TEXT, source TEXT, chunk_time REAL, created_at REAL, updated_at REAL)"
        )
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS new_bodies (seq INTEGER PRIMARY KEY, body TEXT)"
        )
        self._staging = conn

    def _trim_staging(self) -> None:
        """Give back the memory of the temp tables once they grew past STAGING_KEEP_PAGES.

        The temp database lives in memory (``temp_store = MEMORY``) and never shrinks: after
        a big sync it would keep a batch's worth of chunk texts for the life of the
        connection (~1 MB per 1,500 chunks). Switching ``temp_store`` away and back closes
        it (outside a transaction only); the tables are created again when next needed."""
        conn = self._conn
        if conn is None:
            return
        if conn.in_transaction or id(self._staging) != id(conn):  # no temp tables here
            return
        if int(conn.execute("PRAGMA temp.page_count").fetchone()[0]) <= STAGING_KEEP_PAGES:
            return
        conn.execute("PRAGMA temp_store = FILE")
        conn.execute("PRAGMA temp_store = MEMORY")
        self._staging = None

    def _write(self, items: Sequence[Prepared], report: SyncReport) -> None:
        """Write these prepared files (distinct paths) inside the open transaction."""
        self._create_staging()
        if self._stage(items, report):
            self._insert_staged()

    def _stage(self, items: Sequence[Prepared], report: SyncReport) -> bool:
        """Everything of writing these files (distinct paths, in the open transaction) but
        the new chunks, which go to the temp tables ``new_chunks`` (and ``new_bodies``: an
        FTS body that differs from the text) with their seqs assigned here, for
        :meth:`_insert_staged`. True when it staged some."""
        conn = self.conn
        now = self.clock()
        added: list[tuple[object, ...]] = []
        bodies: list[tuple[int, str]] = []
        moved: list[tuple[object, ...]] = []
        files: list[tuple[str, float, int, str, float]] = []
        next_seq: int | None = None
        changed = False
        for item in items:
            report.synced += 1
            rel = item.rel
            if item.missing:
                removed = self._drop_path(rel)
                if removed >= 0:
                    report.removed += 1
                    report.chunks_removed += removed
                    changed = True
                continue
            row = conn.execute("SELECT hash FROM files WHERE path = ?", (rel,)).fetchone()
            if row is not None and row[0] == item.digest:
                conn.execute(
                    "UPDATE files SET mtime = ?, size = ? WHERE path = ?",
                    (item.mtime, item.size, rel),
                )
                continue
            item = item.chunked(self.settings.max_chars, self.settings.overlap_chars)
            assert item.chunks is not None
            source = source_of(rel)
            assert source is not None
            existing = {
                cid: seq
                for seq, cid in conn.execute("SELECT seq, id FROM chunks WHERE path = ?", (rel,))
            }
            keep = set(item.ids)
            gone = [seq for cid, seq in existing.items() if cid not in keep]
            self._delete_seqs(gone)
            for cid, chunk, ctime, body in zip(
                item.ids, item.chunks, item.times, item.bodies, strict=True
            ):
                seq = existing.get(cid)
                if seq is not None:
                    moved.append((chunk.start_line, chunk.end_line, chunk.heading, ctime, seq))
                    continue
                if next_seq is None:
                    top = conn.execute("SELECT max(seq) FROM chunks").fetchone()[0]
                    next_seq = 1 if top is None else int(top) + 1
                added.append(
                    (
                        next_seq,
                        cid,
                        rel,
                        chunk.start_line,
                        chunk.end_line,
                        chunk.heading,
                        chunk.text,
                        chunk.hash,
                        source,
                        ctime,
                        now,
                        now,
                    )
                )
                if body is not chunk.text and body != chunk.text:
                    bodies.append((next_seq, body))
                next_seq += 1
                report.chunks_added += 1
            files.append((rel, item.mtime, item.size, item.digest, now))
            report.changed += 1
            report.chunks_removed += len(gone)
            changed = True
        if moved:
            conn.executemany(
                "UPDATE chunks SET start_line = ?, end_line = ?, heading = ?, "
                "chunk_time = CASE WHEN source = 'session' THEN ? ELSE chunk_time END "
                "WHERE seq = ?",
                moved,
            )
        if files:
            conn.executemany(
                "INSERT INTO files (path, mtime, size, hash, indexed_at) VALUES (?,?,?,?,?) "
                "ON CONFLICT(path) DO UPDATE SET mtime = excluded.mtime, size = excluded.size, "
                "hash = excluded.hash, indexed_at = excluded.indexed_at",
                files,
            )
        if changed:
            self._bump_generation()
        if added:
            conn.executemany("INSERT INTO temp.new_chunks VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", added)
        if bodies:
            conn.executemany("INSERT INTO temp.new_bodies VALUES (?,?)", bodies)
        return bool(added)

    def _insert_staged(self) -> None:
        """Move the staged new chunks into ``chunks`` and ``chunks_fts`` (a statement each,
        however many chunks) and empty the temp tables."""
        conn = self.conn
        conn.execute(
            "INSERT INTO chunks (seq, id, path, start_line, end_line, heading, text, hash, "
            "source, chunk_time, created_at, updated_at) SELECT * FROM temp.new_chunks"
        )
        conn.execute(
            "INSERT INTO chunks_fts (rowid, body, source) "
            "SELECT n.seq, coalesce(b.body, n.text), n.source "
            "FROM temp.new_chunks n LEFT JOIN temp.new_bodies b ON b.seq = n.seq"
        )
        # Empty again in the same transaction: a rollback leaves them empty as well.
        conn.execute("DELETE FROM temp.new_chunks")
        conn.execute("DELETE FROM temp.new_bodies")

    def _delete_seqs(self, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        conn = self.conn
        rows = [(seq,) for seq in seqs]
        # rowid lookups: never a scan of the FTS or vec table.
        conn.executemany("DELETE FROM chunks_fts WHERE rowid = ?", rows)
        conn.executemany("DELETE FROM chunks WHERE seq = ?", rows)
        self._delete_vectors(seqs)

    def _delete_vectors(self, seqs: Sequence[int]) -> None:
        """Drop the vectors of deleted chunks, with or without a provider right now: a chunk
        ``seq`` can be reused, and must never inherit a stale vector."""
        if not seqs or not self._vec_table_exists():
            return
        if self.caps is None or not self.caps.vec:
            # sqlite-vec did not load this time: the table cannot be touched. Remember that
            # it holds stale rows; the next identity check rebuilds it.
            self._set_meta([(STALE_VECTORS, "1")])
            return
        for seq in seqs:
            self.conn.execute("DELETE FROM chunks_vec WHERE rowid = ?", (seq,))
        if self.mirror is not None:  # at once; a rollback drops the whole copy
            self.mirror.remove(seqs)

    def _drop_path(self, rel: str) -> int:
        """Drop a file's chunks in the open transaction; returns how many (or -1 when the
        file was not indexed)."""
        conn = self.conn
        known = conn.execute("SELECT 1 FROM files WHERE path = ?", (rel,)).fetchone()
        seqs = [r[0] for r in conn.execute("SELECT seq FROM chunks WHERE path = ?", (rel,))]
        self._delete_seqs(seqs)
        conn.execute("DELETE FROM files WHERE path = ?", (rel,))
        return len(seqs) if (known or seqs) else -1

    def _bump_generation(self) -> None:
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES ('generation', '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def generation(self) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def stale(self, rels: Iterable[str]) -> list[Path]:
        """Those of these indexed paths whose file is gone or differs from the ``files`` row
        (mtime, size) — changes the watcher has not reported yet (SPEC §4: a deleted file is
        never returned, an edit is seen by the next search)."""
        wanted = sorted(set(rels))
        if not wanted:
            return []
        known: dict[str, tuple[float, int]] = {}
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            rows = self.conn.execute(
                f"SELECT path, mtime, size FROM files WHERE path IN ({','.join('?' * len(part))})",
                part,
            )
            known.update((rel, (mtime, size)) for rel, mtime, size in rows)
        out: list[Path] = []
        for rel in wanted:
            path = self.root / rel
            try:
                st = os.stat(path)
            except OSError:
                out.append(path)
                continue
            if known.get(rel) != (st.st_mtime, st.st_size):
                out.append(path)
        return out

    def reconcile(self) -> list[Path]:
        """Paths whose disk state differs from the ``files`` table (mtime, size, then hash)."""
        known = {
            path: (mtime, size, digest)
            for path, mtime, size, digest in self.conn.execute(
                "SELECT path, mtime, size, hash FROM files"
            )
        }
        dirty: list[Path] = []
        seen: set[str] = set()
        for path in self.disk_files():
            rel = self.rel(path)
            seen.add(rel)
            row = known.get(rel)
            if row is None:
                dirty.append(path)
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                dirty.append(path)
                continue
            if (st.st_mtime, st.st_size) == (row[0], row[1]):
                continue
            try:
                digest = blake3.blake3(path.read_bytes()).hexdigest()
            except OSError:
                digest = ""
            if digest != row[2]:
                dirty.append(path)
            else:
                self.conn.execute(
                    "UPDATE files SET mtime = ?, size = ? WHERE path = ?",
                    (st.st_mtime, st.st_size, rel),
                )
        dirty.extend(self.root / rel for rel in known if rel not in seen)
        return dirty

    # ------------------------------------------------------------------ search

    def fts(self, match: str, limit: int, sources: Sequence[str] | None) -> list[tuple[int, float]]:
        """The best ``limit`` keyword hits (rowid, bm25) for a built MATCH query, optionally
        restricted to ``sources`` — one FTS5 query either way (no join), ranked by FTS5."""
        query = f"body : ({match})"
        if sources is not None:
            wanted = " OR ".join(f'"{source}"' for source in sources if source.isalpha())
            if not wanted:
                return []
            query = f"source : ({wanted}) AND {query}"
        rows = self.conn.execute(
            "SELECT rowid, bm25(chunks_fts, 1.0, 0.0) AS r FROM chunks_fts "
            "WHERE chunks_fts MATCH ? ORDER BY r LIMIT ?",
            (query, limit),
        )
        return [(int(seq), float(r)) for seq, r in rows]

    def knn(self, query: Sequence[float], k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks (seq, L2 distance), nearest first: from the in-memory
        copy when there is one (read from ``chunks_vec`` on first use), else vec0's scan."""
        if self.vec_dims is None or k <= 0:
            return []
        if self.mirror is not None:
            self.load_mirror()
            return self.mirror.knn(query, k)
        rows = self.conn.execute(
            "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?",
            (vector_blob(query), k),
        )
        return [(int(seq), float(d)) for seq, d in rows]

    def load(self, hits: dict[int, tuple[float | None, float | None]]) -> list[Candidate]:
        if not hits:
            return []
        seqs = list(hits)
        out: list[Candidate] = []
        for start in range(0, len(seqs), 500):
            part = seqs[start : start + 500]
            rows = self.conn.execute(
                "SELECT seq, id, path, start_line, end_line, heading, text, source, chunk_time, "
                f"access_count FROM chunks WHERE seq IN ({','.join('?' * len(part))})",
                part,
            )
            for seq, cid, path, start_line, end_line, heading, text, source, ctime, count in rows:
                bm25, distance = hits[seq]
                out.append(
                    Candidate(
                        chunk_id=cid,
                        path=path,
                        start_line=start_line,
                        end_line=end_line,
                        heading=heading,
                        text=text,
                        source=source,
                        chunk_time=ctime,
                        access_count=count,
                        bm25=bm25,
                        distance=distance,
                    )
                )
        return out

    def candidates(
        self,
        match: str | None,
        query_vector: Sequence[float] | None,
        limit: int,
        sources: Sequence[str] | None,
        *,
        knn_hits: Sequence[tuple[int, float]] | None = None,
    ) -> list[Candidate]:
        """SPEC §5 steps 2–3 in one read: FTS, the curated-only FTS pass, KNN, load chunks.

        ``knn_hits`` are nearest neighbours already found (by a :class:`VectorReader`, in
        parallel); without them the KNN scan runs here when ``query_vector`` is given.
        """
        hits = self.fts_hits(match, limit, sources)
        if knn_hits is None and query_vector is not None and self.vec_dims is not None:
            knn_hits = self.knn(query_vector, knn_k(limit, sources))
        return self.merged(hits, knn_hits, sources)

    def merged(
        self,
        hits: dict[int, tuple[float | None, float | None]],
        knn_hits: Sequence[tuple[int, float]] | None,
        sources: Sequence[str] | None,
    ) -> list[Candidate]:
        """Keyword hits plus nearest neighbours, loaded as candidates (rows deleted since
        the scan are simply absent), restricted to ``sources``."""
        for seq, distance in knn_hits or ():
            hits[seq] = (hits.get(seq, (None, None))[0], distance)
        out = self.load(hits)
        if sources is not None:
            out = [c for c in out if c.source in sources]
        return out

    def fts_hits(
        self, match: str | None, limit: int, sources: Sequence[str] | None
    ) -> dict[int, tuple[float | None, float | None]]:
        """Keyword hits by rowid: the FTS query, then the curated-only pass (SPEC §5 step 2)."""
        hits: dict[int, tuple[float | None, float | None]] = {}
        if match is None:
            return hits
        for seq, r in self.fts(match, limit, sources):
            hits[seq] = (r, None)
        curated = [s for s in (sources or CURATED) if s in CURATED]
        if curated:
            for seq, r in self.fts(match, limit, curated):
                hits.setdefault(seq, (r, None))
        return hits

    def bump_access(self, chunk_ids_: Sequence[str]) -> None:
        if not chunk_ids_:
            return
        now = self.clock()
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "UPDATE chunks SET access_count = access_count + 1, last_accessed = ? WHERE id = ?",
                [(now, cid) for cid in chunk_ids_],
            )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    # ------------------------------------------------------------------ vectors

    def load_mirror(self) -> int:
        """Read the vectors into memory now, if they are kept there and not loaded yet
        (~1 s per 100k 384-d vectors); returns how many are held."""
        if self.mirror is None or self.vec_dims is None:
            return 0
        if not self.mirror.loaded:
            self.mirror.load(self.conn, self.vec_dims)
        return self.mirror.count

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

    def embedding_identity(self) -> tuple[str, int] | None:
        """The identity record: the model id and dimension the stored vectors belong to."""
        model, dims = self._meta("embedding_model"), self._meta("embedding_dims")
        if model is None or dims is None or not self._vec_table_exists():
            return None
        return model, int(dims)

    def set_embedding_identity(
        self, model_id: str | None, dims: int | None, *, force: bool = False
    ) -> bool:
        """Use vectors of ``model_id``/``dims`` from now on; True when they must be rebuilt.

        The identity record in ``meta`` says which model the stored vectors belong to. The
        same model and dimension (after a restart, or after a while without a provider) keep
        every stored vector; a different one — or ``force`` (``reindex --embeddings``), or
        stale rows left while sqlite-vec could not load — drops them all in one transaction
        and records the new identity, and every chunk is then pending again (re-embedded in
        the background, newest first, resumably). ``None`` (no provider, or not ready yet)
        turns vector search off and keeps the record and the vectors.
        """
        if model_id is None or dims is None or self.caps is None or not self.caps.vec:
            self.vec_model, self.vec_dims = None, None
            self._mirror_invalidate()
            return False
        stale = self._meta(STALE_VECTORS) is not None
        if not force and not stale and self.embedding_identity() == (model_id, dims):
            self.vec_model, self.vec_dims = model_id, dims
            return False
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DROP TABLE IF EXISTS chunks_vec")
            conn.execute(
                f"CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[{int(dims)}])"
            )
            conn.execute("UPDATE chunks SET vec_model = NULL WHERE vec_model IS NOT NULL")
            self._set_meta([("embedding_model", model_id), ("embedding_dims", str(dims))])
            conn.execute("DELETE FROM meta WHERE key = ?", (STALE_VECTORS,))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        self._mirror_invalidate()
        self.vec_model, self.vec_dims = model_id, dims
        return True

    def pending_vectors(self, limit: int) -> list[PendingVector]:
        """Chunks lacking a vector for the current model, newest first."""
        if self.vec_dims is None:
            return []
        rows = self.conn.execute(
            "SELECT seq, hash, text FROM chunks WHERE vec_model IS NULL "
            "ORDER BY chunk_time DESC, seq DESC LIMIT ?",
            (limit,),
        )
        return [PendingVector(int(seq), h, t) for seq, h, t in rows]

    def count_pending_vectors(self) -> int:
        if self.vec_dims is None:
            return 0
        return int(
            self.conn.execute("SELECT count(*) FROM chunks WHERE vec_model IS NULL").fetchone()[0]
        )

    def store_vectors(
        self, model_id: str, items: Sequence[tuple[PendingVector, Sequence[float]]]
    ) -> int:
        """Store vectors for chunks that still exist unchanged; returns how many were stored."""
        if model_id != self.vec_model or not items:
            return 0
        conn = self.conn
        added: list[tuple[int, Sequence[float]]] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for pending, vector in items:
                row = conn.execute(
                    "SELECT hash FROM chunks WHERE seq = ?", (pending.seq,)
                ).fetchone()
                if row is None or row[0] != pending.hash:
                    continue
                conn.execute("DELETE FROM chunks_vec WHERE rowid = ?", (pending.seq,))
                conn.execute(
                    "INSERT INTO chunks_vec (rowid, embedding) VALUES (?, ?)",
                    (pending.seq, vector_blob(vector)),
                )
                conn.execute(
                    "UPDATE chunks SET vec_model = ? WHERE seq = ?", (model_id, pending.seq)
                )
                added.append((pending.seq, vector))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        if self.mirror is not None:  # only what committed
            self.mirror.put(added)
        return len(added)

    # ------------------------------------------------------------------ reporting

    def files(self) -> list[dict[str, object]]:
        rows = self.conn.execute(
            "SELECT f.path, f.size, f.mtime, (SELECT count(*) FROM chunks c WHERE c.path = f.path) "
            "FROM files f ORDER BY f.path"
        )
        return [
            {"path": path, "size": size, "mtime": mtime, "chunks": count}
            for path, size, mtime, count in rows
        ]

    def stats(self) -> dict[str, object]:
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
        }


def _batches(items: Sequence[T], first: int, size: int) -> list[Sequence[T]]:
    """``items`` cut into a batch of ``first`` items, then batches of ``size``."""
    first, size = max(1, first), max(1, size)
    out: list[Sequence[T]] = [items[:first]] if items else []
    out.extend(items[start : start + size] for start in range(first, len(items), size))
    return out


def _rollback(conn: Connection) -> None:
    """Roll back the open transaction, if SQLite has not already done so (a full disk or an
    I/O error ends it): a second error here must not hide the first."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


_ERRNO_HINTS = (("full", "ENOSPC"), ("i/o", "EIO"), ("locked", "EBUSY"), ("readonly", "EROFS"))


def _storage_error(path: Path, exc: Exception) -> StorageError:
    """A SQLite failure that is not damage, as the StorageError clients see."""
    text = str(exc)
    name = next((code for hint, code in _ERRNO_HINTS if hint in text.lower()), None)
    detail = f"{name}: {text}" if name else text
    return StorageError(f"cannot use index {path}: {detail}", path=str(path), errno=name)
