"""Ordered schema migrations, keyed on ``PRAGMA user_version``.

Each migration is a small function that takes the connection and runs inside one
transaction; the position in :data:`MIGRATIONS` is its version (1-based). Never edit a
released migration: append a new one.

The vector table (``chunks_vec``) is not created here: its dimension comes from the embedding
provider, so :mod:`memoryd.store.index` creates or recreates it when the embedding identity
in ``meta`` changes.
"""

from __future__ import annotations

from collections.abc import Callable

from memoryd.core.chunking import indexed_text
from memoryd.core.keywords import fts_text
from memoryd.store.connection import Connection


def _v1_initial(conn: Connection) -> None:
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
    conn.execute(
        """CREATE TABLE files (
            path TEXT PRIMARY KEY,
            mtime REAL NOT NULL,
            size INTEGER NOT NULL,
            hash TEXT NOT NULL,
            indexed_at REAL NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE chunks (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            path TEXT NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            heading TEXT NOT NULL,
            text TEXT NOT NULL,
            hash TEXT NOT NULL,
            source TEXT NOT NULL,
            chunk_time REAL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed REAL
        )"""
    )
    conn.execute("CREATE INDEX chunks_by_path ON chunks(path)")
    # rowid of chunks_fts == chunks.seq; the text given to FTS5 is CJK-bigrammed.
    conn.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(body, tokenize = 'porter unicode61')")


def _v2_vector_state(conn: Connection) -> None:
    # Which embedding model a chunk's vector belongs to (NULL: no vector yet), so vectors
    # can be (re)built in resumable batches without scanning the vec0 table.
    conn.execute("ALTER TABLE chunks ADD COLUMN vec_model TEXT")
    conn.execute("CREATE INDEX chunks_lacking_vectors ON chunks(vec_model, chunk_time)")
    conn.execute("CREATE INDEX chunks_by_source ON chunks(source)")


def _recreate_fts(conn: Connection, options: str) -> None:
    """Drop ``chunks_fts`` and build it again (``body``, ``source``; ``options`` before the
    tokenizer) from the chunks table, ranked by bm25 over the body only."""
    conn.execute("DROP TABLE chunks_fts")
    conn.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(body, source, "
        f"{options}tokenize = 'porter unicode61')"
    )
    conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('rank', 'bm25(1.0, 0.0)')")
    rows = conn.execute("SELECT seq, text, source FROM chunks").fetchall()
    conn.executemany(
        "INSERT INTO chunks_fts (rowid, body, source) VALUES (?, ?, ?)",
        [(seq, fts_text(indexed_text(text)), source) for seq, text, source in rows],
    )


def _v3_fts_source_column(conn: Connection) -> None:
    # The chunk's source as a second FTS column, so a search restricted to sources is one
    # FTS5 query (`source : (...) AND body : (...)`) instead of a join over every match; the
    # table's rank is bm25 over the body only. Rebuilt from the chunks table.
    _recreate_fts(conn, "")


CONTENTLESS_DELETE = (3, 43, 0)  # the first SQLite whose FTS5 has contentless_delete


def _contentless(conn: Connection) -> bool:
    version = str(conn.execute("SELECT sqlite_version()").fetchone()[0])
    return tuple(int(part) for part in version.split(".")[:3]) >= CONTENTLESS_DELETE


def _v4_contentless_fts(conn: Connection) -> None:
    # The FTS table keeps no copy of the chunk texts (chunks.text has them; memoryd only ever
    # reads rowids and bm25 from it): a third less to write when indexing, a smaller file.
    # contentless_delete keeps rows deletable by rowid. An older SQLite keeps the v3 table.
    if _contentless(conn):
        _recreate_fts(conn, "content = '', contentless_delete = 1, ")


def _v5_drop_source_index(conn: Connection) -> None:
    # Since v3 a search filters sources inside FTS5; no query reads chunks by source, and the
    # index cost every chunk insert an extra B-tree write (~5 % of a cold index).
    conn.execute("DROP INDEX IF EXISTS chunks_by_source")


def _v6_chunker_v2(conn: Connection) -> None:
    # Chunker v2 (#19): HTML comments are no longer indexed, and small sections merge with the
    # next. The FTS bodies are rebuilt without comments now; every file is marked changed
    # (no hash, no mtime) so the next reconcile re-chunks it (unchanged chunks keep their
    # ids and vectors). The index records the chunker it was built with from here on.
    _recreate_fts(conn, "content = '', contentless_delete = 1, " if _contentless(conn) else "")
    mark_for_rechunk(conn)


def mark_for_rechunk(conn: Connection) -> None:
    """Make every file look changed, so the next reconcile and sync re-chunk it."""
    conn.execute("UPDATE files SET hash = '', mtime = -1")


MIGRATIONS: tuple[Callable[[Connection], None], ...] = (
    _v1_initial,
    _v2_vector_state,
    _v3_fts_source_column,
    _v4_contentless_fts,
    _v5_drop_source_index,
    _v6_chunker_v2,
)
LATEST = len(MIGRATIONS)


def schema_version(conn: Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: Connection) -> tuple[int, int]:
    """Bring the schema to :data:`LATEST`; returns (version before, version after).

    Raises :class:`ValueError` for a database newer than this code knows.
    """
    before = schema_version(conn)
    if before > LATEST:
        raise ValueError(f"index schema version {before} is newer than this memoryd ({LATEST})")
    for version in range(before + 1, LATEST + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            MIGRATIONS[version - 1](conn)
            conn.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return before, LATEST
