"""A second, read-only connection to an index for vector KNN scans.

sqlite-vec's ``vec0`` scan is exact and single-threaded (its Linux wheel scans float32
without SIMD: tens of milliseconds per 100k vectors). A hybrid search runs that scan here,
in its own thread, at the same time as the index's own connection syncs dirty files and
runs the FTS5 query — two phases on two cores instead of one after the other. Reads in WAL
mode never block the writer, and this connection never writes.

The index's file can be replaced (rebuilt after corruption); the reader reopens whenever
:attr:`Index.rebuilds` moves on.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path

import structlog

from memoryd.store.connection import Connection, Error, connect

log = structlog.get_logger(__name__)


def vector_blob(vector: Sequence[float]) -> bytes:
    """A vector as sqlite-vec stores it: little-endian float32."""
    return array("f", vector).tobytes()


class VectorReader:
    """KNN over ``chunks_vec`` on its own connection; call it from one thread at a time."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._conn: Connection | None = None
        self._generation = -1

    def knn(
        self, query: Sequence[float], k: int, *, rebuilds: int
    ) -> list[tuple[int, float]] | None:
        """The ``k`` nearest chunks (rowid, L2 distance), or None when the scan failed (the
        caller searches by keyword only). ``rebuilds`` is the index's rebuild counter."""
        if k <= 0:
            return []
        try:
            if self._conn is None or rebuilds != self._generation:
                self.close()
                self._conn, caps = connect(self.db_path)
                self._generation = rebuilds
                if not caps.vec:
                    self.close()
                    return None
            rows = self._conn.execute(
                "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?",
                (vector_blob(query), k),
            ).fetchall()
        except Error as exc:
            log.warning("search.knn_failed", error=str(exc))
            self.close()
            return None
        return [(int(seq), float(d)) for seq, d in rows]

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
