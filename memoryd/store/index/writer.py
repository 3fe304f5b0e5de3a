"""Writing the index: syncing memory files into ``files``, ``chunks`` and ``chunks_fts`` —
one file in its own transaction, or many at once in batches (:meth:`Writer.sync_many`) — and
finding the files whose disk state differs from the index."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import blake3
import structlog

from memoryd.core.workspace import SESSIONS_DIR, source_of
from memoryd.store.connection import DatabaseError
from memoryd.store.files import DECODE_WARNING, read_regular
from memoryd.store.heap import release_free_memory
from memoryd.store.index.guard import rollback, storage_error
from memoryd.store.index.records import SyncReport
from memoryd.store.index.vectors import Vectors
from memoryd.store.prepare import PARTIAL, Prepared, prepare_file

log = structlog.get_logger("memoryd.store.index")

T = TypeVar("T")
# batch (prepared while nothing else runs), then about SYNC_BATCHES batches of at most
# SYNC_BATCH files — enough of them to overlap reading with writing, yet big ones at scale
# (each batch's new rows go to FTS5 in one statement, which ends in a segment of its own).
SYNC_FIRST_BATCH = 32
SYNC_BATCHES = 12
SYNC_BATCH = 1024
COMMIT_CHUNKS = 25_000  # chunks added or removed per transaction then (~3.5 KB of WAL each)
STAGING_KEEP_PAGES = 64  # temp tables bigger than this (pages) are freed after a sync
BULK_CACHE_KIB = 64 << 10  # SQLite page cache while sync_many runs (2 MiB otherwise)


class Writer(Vectors):
    """Syncs memory files into the index."""

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
                error = storage_error(self.db_path, exc)
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
            rollback(conn)
            raise

    def sync_many(
        self,
        paths: Sequence[Path],
        *,
        batch: int = SYNC_BATCH,
        commit_chunks: int = COMMIT_CHUNKS,
        progress: Callable[[int, int], None] | None = None,
    ) -> SyncReport:
        """:meth:`sync_paths` for many files at once (a reindex, a cold start).

        ``progress(files_done, files_total)`` is called (in this thread) after each batch.

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
                    prepare_file(
                        path,
                        rel,
                        real_root,
                        known_hash,
                        max_chars,
                        overlap,
                        real_dirs,
                        max_bytes=self.settings.max_file_bytes,
                        min_chars=self.settings.min_chars,
                    )
                )
            return out

        size = min(batch, max(SYNC_FIRST_BATCH, -(-len(wanted) // SYNC_BATCHES)))
        parts = batches(wanted, min(SYNC_FIRST_BATCH, size), size)
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
                if progress is not None:
                    progress(sum(len(part) for part in parts[: number + 1]), len(wanted))
        except BaseException:
            self._mirror_invalidate()  # deleted vectors may have left it already
            rollback(conn)
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
            max_bytes=self.settings.max_file_bytes,
            min_chars=self.settings.min_chars,
        )
        if item.error is not None:
            raise item.error
        report = SyncReport()
        with self._transaction():
            self._write([item], report)
        return report

    def prepare(self, path: Path) -> Prepared:
        """Read and chunk ``path`` for :meth:`write_prepared`, touching no connection: call
        it from any thread, without holding the index (a big file's minute of work is done
        while searches go on)."""
        return prepare_file(
            path,
            self.rel(path),
            os.path.realpath(self.root),
            None,
            self.settings.max_chars,
            self.settings.overlap_chars,
            max_bytes=self.settings.max_file_bytes,
            min_chars=self.settings.min_chars,
        )

    def write_prepared(self, item: Prepared, *, last: bool = True) -> SyncReport:
        """Write one file :meth:`prepare` read (in its own transaction); ``last=False``
        for all but the last of the phases a big file is written in (the memory is given
        back to the OS after the last)."""
        report = SyncReport()
        if item.error is not None:
            report.errors.append(f"{item.path}: {item.error}")
            log.warning("index.sync_failed", path=str(item.path), error=str(item.error))
            return report
        with self._transaction():
            self._write([item], report)
        if last:
            self._trim_staging()
            release_free_memory()
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
                self._note(item)
                removed = self._drop_path(rel)
                if removed >= 0:
                    report.removed += 1
                    report.chunks_removed += removed
                    changed = True
                continue
            row = conn.execute("SELECT hash FROM files WHERE path = ?", (rel,)).fetchone()
            if row is not None and row[0] == item.digest:
                self._note(item)
                conn.execute(
                    "UPDATE files SET mtime = ?, size = ? WHERE path = ?",
                    (item.mtime, item.size, rel),
                )
                continue
            item = item.chunked(
                self.settings.max_chars, self.settings.overlap_chars, self.settings.min_chars
            )
            assert item.chunks is not None
            self._note(item)
            source = source_of(rel)
            assert source is not None
            existing = {
                cid: seq
                for seq, cid in conn.execute("SELECT seq, id FROM chunks WHERE path = ?", (rel,))
            }
            keep = set(item.ids)
            partial = item.digest.startswith(PARTIAL)  # a prefix: drop nothing until the end
            gone = [] if partial else [seq for cid, seq in existing.items() if cid not in keep]
            self._delete_seqs(gone)
            for cid, chunk, ctime, body in zip(
                item.ids, item.chunks, item.times, item.bodies, strict=True
            ):
                seq = existing.get(cid)
                if seq is not None:
                    if not partial:  # the last phase puts every kept chunk in place
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

    def _note(self, item: Prepared) -> None:
        """Keep (and log once) why a file is not indexed whole: ``file_warnings``."""
        rel = item.rel
        old = self.file_warnings.get(rel, ())
        if item.chunks is None and not item.missing:  # content unchanged: not re-decoded
            decoded = (w for w in old if w.startswith(DECODE_WARNING))
            new = tuple(dict.fromkeys((*item.warnings, *decoded)))
        else:
            new = item.warnings
        if new == old:
            return
        if not new:
            del self.file_warnings[rel]
            return
        self.file_warnings[rel] = new
        for warning in new:
            if warning not in old:
                log.warning("index.file_warning", path=rel, warning=warning)

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
            try:  # hashed as prepare_file hashes it: regular files only, up to the limit
                data = read_regular(path, self.settings.max_file_bytes).data
                digest = blake3.blake3(data).hexdigest()
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

    def unlisted(self) -> list[Path]:
        """Memory files on disk that the ``files`` table does not know, and known ones no
        longer on disk: what a burst of creations or deletions left that the watcher may not
        have reported yet. Reads directory listings only (no stat, no file read), so a
        search can afford it whenever a memory directory changed (issue #17)."""
        known = {row[0] for row in self.conn.execute("SELECT path FROM files")}
        on_disk: dict[str, Path] = {}
        ws_rel = self.rel(self.workspace_dir)
        for directory, prefix in (
            (self.root, ""),
            (self.workspace_dir, f"{ws_rel}/"),
            (self.workspace_dir / SESSIONS_DIR, f"{ws_rel}/{SESSIONS_DIR}/"),
        ):
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        name = entry.name
                        if name.endswith(".md") and not name.startswith("."):
                            on_disk[prefix + name] = directory / name
            except OSError:
                continue
        new = [path for rel, path in on_disk.items() if rel not in known and self.belongs(path)]
        gone = [self.root / rel for rel in known if rel not in on_disk]
        return new + gone


def batches(items: Sequence[T], first: int, size: int) -> list[Sequence[T]]:
    """``items`` cut into a batch of ``first`` items, then batches of ``size``."""
    first, size = max(1, first), max(1, size)
    out: list[Sequence[T]] = [items[:first]] if items else []
    out.extend(items[start : start + size] for start in range(first, len(items), size))
    return out
