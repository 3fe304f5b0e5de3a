"""The embedding cache's SQLite file: vectors keyed by (model id, blake3 of the text) (SPEC §6).

One small file per memory root (the caller picks the path, e.g.
``<root>/.cache/embeddings.sqlite``), apart from the workspace indexes, so deleting or
rebuilding an index never loses an embedding: a rebuild from scratch asks the provider for
nothing it embedded before. Vectors are stored as little-endian float32 blobs.

Several threads, actors and processes may share the file: WAL, ``busy_timeout``, one short
transaction per call. An :class:`EmbeddingCacheStore` holds one connection, opened by its
first call and guarded by a lock; its methods block, so async code runs them in a worker
thread. SQLite failures raise :class:`~memoryd.errors.StorageError`.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from memoryd.errors import StorageError
from memoryd.store.connection import create_private, set_wal
from memoryd.store.files import make_private_dirs

SCHEMA_VERSION = 1
_IN_CHUNK = 400  # keys per SELECT … IN (…), well under SQLite's parameter limit
_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL,
    key BLOB NOT NULL,
    dims INTEGER NOT NULL,
    vector BLOB NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (model, key)
) WITHOUT ROWID
"""


def pack_vector(vector: Sequence[float]) -> bytes:
    """``vector`` as a little-endian float32 blob."""
    packed = array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_vector(blob: bytes) -> list[float]:
    """The floats of a blob written by :func:`pack_vector`."""
    packed = array("f")
    packed.frombytes(blob)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()


class EmbeddingCacheStore:
    """Vectors by (model id, text key) in one SQLite file; blocking, thread-safe."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def get_many(self, model_id: str, keys: Sequence[bytes]) -> dict[bytes, list[float]]:
        """The cached vectors among ``keys`` for ``model_id`` (absent keys are left out)."""
        found: dict[bytes, list[float]] = {}
        unique = list(dict.fromkeys(keys))
        with self._connection() as conn:
            for start in range(0, len(unique), _IN_CHUNK):
                part = unique[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT key, dims, vector FROM vectors WHERE model = ? AND key IN ({marks})",
                    (model_id, *part),
                ).fetchall()
                for key, dims, blob in rows:
                    if len(blob) == 4 * dims:  # a torn or foreign row is a miss, not an error
                        found[bytes(key)] = unpack_vector(bytes(blob))
        return found

    def put_many(self, model_id: str, items: Sequence[tuple[bytes, Sequence[float]]]) -> None:
        """Remember ``items`` (key, vector) for ``model_id`` in one short transaction."""
        if not items:
            return
        now = time.time()
        rows = [(model_id, key, len(vec), pack_vector(vec), now) for key, vec in items]
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO vectors (model, key, dims, vector, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def delete_keys(self, keys: Sequence[bytes]) -> int:
        """Forget the vectors of these text keys, for every model; returns how many rows
        went (``secrets purge`` drops the vectors of texts that held a secret)."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            return 0
        deleted = 0
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for start in range(0, len(unique), _IN_CHUNK):
                    part = unique[start : start + _IN_CHUNK]
                    marks = ",".join("?" * len(part))
                    cur = conn.execute(f"DELETE FROM vectors WHERE key IN ({marks})", part)
                    deleted += cur.rowcount
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return deleted

    def count(self, model_id: str | None = None) -> int:
        """How many vectors are cached (for one model, or in all)."""
        with self._connection() as conn:
            if model_id is None:
                row = conn.execute("SELECT count(*) FROM vectors").fetchone()
            else:
                row = conn.execute(
                    "SELECT count(*) FROM vectors WHERE model = ?", (model_id,)
                ).fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = self._open()
                yield self._conn
            except sqlite3.Error as exc:
                raise StorageError(
                    f"embedding cache {self.path}: {exc}", path=str(self.path)
                ) from exc

    def _open(self) -> sqlite3.Connection:
        try:
            make_private_dirs(self.path.parent)
        except OSError as exc:
            raise StorageError(
                f"cannot create the embedding cache directory {self.path.parent}: {exc}"
            ) from exc
        create_private(self.path)  # 0600 (its -wal and -shm files take its mode)
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,  # autocommit; writes use explicit short transactions
            check_same_thread=False,  # used from worker threads, one at a time (the lock)
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            set_wal(conn, self._busy_timeout_ms / 1000, sqlite3.OperationalError)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")  # another process may be creating it right now
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StorageError(
                        f"embedding cache {self.path} has schema {version}, newer than this "
                        f"memoryd ({SCHEMA_VERSION}); delete it or upgrade"
                    )
                if version < SCHEMA_VERSION:
                    conn.execute(_SCHEMA)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except BaseException:
            conn.close()
            raise
        return conn
