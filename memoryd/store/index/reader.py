"""Reading the index for a search (SPEC §5 steps 2–3): FTS, KNN, candidate rows; plus the
access counts a search bumps and the staleness check it runs first."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from memoryd.core.ranking import Candidate
from memoryd.core.replies import FileEntry
from memoryd.core.times import rfc3339
from memoryd.store.index.guard import rollback
from memoryd.store.index.vectors import Vectors
from memoryd.store.vectors import vector_blob

CURATED = ("global", "workspace")


def knn_k(limit: int, sources: Sequence[str] | None) -> int:
    """How many neighbours to scan for: more when a source filter will drop some."""
    return limit if sources is None else limit * 3


class Reader(Vectors):
    """Searches and reports over the index."""

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
            rollback(conn)
            raise

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

    def files(self) -> list[FileEntry]:
        rows = self.conn.execute(
            "SELECT f.path, f.size, f.mtime, (SELECT count(*) FROM chunks c WHERE c.path = f.path) "
            "FROM files f ORDER BY f.path"
        )
        return [
            {"path": path, "size": size, "mtime": rfc3339(mtime), "chunks": count}
            for path, size, mtime, count in rows
        ]

    def sample_texts(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` chunks at random, as ``(path, text)`` (``memoryd calibrate``)."""
        rows = self.conn.execute(
            "SELECT path, text FROM chunks ORDER BY random() LIMIT ?", (limit,)
        ).fetchall()
        return [(str(path), str(text)) for path, text in rows]
