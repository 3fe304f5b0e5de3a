"""The raw building blocks: the same work as memoryd, done directly in one Python process.

Each memoryd figure is put next to one of these, measured in the same run on the same data:

- :class:`RawFts` — a bare FTS5 table (``porter unicode61``, same driver and pragmas as
  memoryd) filled by one bulk insert with exactly the texts memoryd gave its own FTS table
  (``fts_text`` of each chunk's text: memoryd's ``chunks_fts`` keeps no copy), queried
  with the same ``build_match_query`` expression: top-k rowids by ``bm25`` plus the k texts;
- :class:`RawVectors` — the same vectors (read back from memoryd's ``chunks_vec``) in a numpy
  matrix, exact top-k by dot product (needs numpy: optional, for the bench only);
- :func:`raw_hybrid` — FTS top-k + exact vector top-k + :func:`memoryd.core.ranking.rank`
  over candidates built from an in-memory copy of the chunk rows.

Run as ``python -m bench.raw rss DB [DB ...] [--vec QUERIES_FILE]`` it is the raw process
for the memory figures: it opens the index files with the same driver and sqlite-vec,
runs FTS (and KNN) queries on each, and prints its own RSS as JSON.
"""

from __future__ import annotations

import json
import math
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import blake3

from bench.corpus import DAEMON_CHUNKS, daemon_chunks
from memoryd.core.chunking import indexed_text
from memoryd.core.keywords import build_match_query, fts_text
from memoryd.core.ranking import Candidate, Ranked, RankParams, rank
from memoryd.providers.embeddings import HashProvider, normalize
from memoryd.store.connection import connect
from memoryd.store.index import Index, PendingVector

try:  # optional: only the raw "exact in-memory top-k" figure needs it
    import numpy as np
except ImportError:  # pragma: no cover - depends on the environment
    np = None  # type: ignore[assignment]

TOP_K = 18  # memoryd's candidate_limit at the default max_results (6 × 3)


def numpy_available() -> bool:
    return np is not None


class RawFts:
    """A bare FTS5 table holding the same bodies as memoryd's ``chunks_fts``."""

    def __init__(self, path: Path) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        self.conn, _ = connect(path)
        self.conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize = 'porter unicode61')")
        self.rowids_by_path: dict[str, list[int]] = {}
        self.next_rowid = 1

    @staticmethod
    def read_memoryd(db: Path) -> tuple[list[tuple[int, str]], dict[str, list[int]]]:
        """The (rowid, FTS body) pairs and the rowids of each path, from memoryd's index."""
        conn, _ = connect(db)
        try:
            # chunks_fts is contentless (schema v4): its bodies are fts_text of the chunk texts
            bodies = [
                (int(seq), fts_text(str(text)))
                for seq, text in conn.execute("SELECT seq, text FROM chunks ORDER BY seq")
            ]
            by_path: dict[str, list[int]] = {}
            for path, seq in conn.execute("SELECT path, seq FROM chunks"):
                by_path.setdefault(path, []).append(int(seq))
        finally:
            conn.close()
        return bodies, by_path

    def bulk_insert(
        self, bodies: Sequence[tuple[int, str]], by_path: dict[str, list[int]]
    ) -> float:
        """One transaction of inserts; returns the seconds it took."""
        started = time.perf_counter()
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO t (rowid, body) VALUES (?, ?)", bodies)
        self.conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        self.rowids_by_path = {k: list(v) for k, v in by_path.items()}
        self.next_rowid = max((r for r, _ in bodies), default=0) + 1
        return elapsed

    def top_k(self, match: str, k: int = TOP_K) -> list[tuple[int, float]]:
        rows = self.conn.execute(
            "SELECT rowid, bm25(t) AS r FROM t WHERE t MATCH ? ORDER BY r LIMIT ?", (match, k)
        )
        return [(int(rowid), float(r)) for rowid, r in rows]

    def search(self, query: str, k: int = TOP_K) -> list[tuple[int, float, str]]:
        """The same keyword query memoryd runs, top-k by bm25, with the k texts."""
        match = build_match_query(query)
        if match is None:
            return []
        hits = self.top_k(match, k)
        if not hits:
            return []
        marks = ",".join("?" * len(hits))
        texts = dict(
            self.conn.execute(
                f"SELECT rowid, body FROM t WHERE rowid IN ({marks})", [h[0] for h in hits]
            )
        )
        return [(rowid, r, texts.get(rowid, "")) for rowid, r in hits]

    def replace_file(self, rel: str, text: str) -> int:
        """Re-sync one file naively: chunk it, delete all its rows, insert all its chunks."""
        bodies = [fts_text(indexed_text(c.text)) for c in daemon_chunks(text)]
        conn = self.conn
        conn.execute("BEGIN")
        conn.executemany(
            "DELETE FROM t WHERE rowid = ?", [(r,) for r in self.rowids_by_path.get(rel, [])]
        )
        fresh = list(range(self.next_rowid, self.next_rowid + len(bodies)))
        conn.executemany(
            "INSERT INTO t (rowid, body) VALUES (?, ?)", zip(fresh, bodies, strict=True)
        )
        conn.execute("COMMIT")
        self.next_rowid += len(bodies)
        self.rowids_by_path[rel] = fresh
        return len(bodies)

    def close(self) -> None:
        self.conn.close()


def read_chunk_rows(db: Path) -> dict[int, Candidate]:
    """Every chunk row of memoryd's index, by seq, as candidates with no hit yet (the
    in-memory copy raw ranking reads)."""
    conn, _ = connect(db)
    try:
        rows = conn.execute(
            "SELECT seq, id, path, start_line, end_line, heading, text, source, chunk_time, "
            "access_count FROM chunks"
        )
        return {
            int(seq): Candidate(
                chunk_id=cid,
                path=path,
                start_line=start,
                end_line=end,
                heading=heading,
                text=text,
                source=source,
                chunk_time=ctime,
                access_count=count,
                bm25=None,  # no keyword or vector hit yet: candidates() fills them in
                distance=None,
            )
            for seq, cid, path, start, end, heading, text, source, ctime, count in rows
        }
    finally:
        conn.close()


class RawVectors:
    """memoryd's stored vectors as one float32 matrix; exact top-k by dot product (numpy)."""

    def __init__(self, db: Path) -> None:
        if np is None:
            raise RuntimeError("numpy is not installed")
        conn, caps = connect(db)
        try:
            if not caps.vec:
                raise RuntimeError(f"sqlite-vec did not load: {caps.vec_error}")
            rows = conn.execute("SELECT rowid, embedding FROM chunks_vec").fetchall()
        finally:
            conn.close()
        self.rowids = np.array([int(r[0]) for r in rows], dtype=np.int64)
        blob = b"".join(bytes(r[1]) for r in rows)
        self.matrix = np.frombuffer(blob, dtype=np.float32).reshape(len(rows), -1)

    def __len__(self) -> int:
        return int(self.matrix.shape[0])

    def top_k(self, query: Sequence[float], k: int = TOP_K) -> list[tuple[int, float]]:
        """(rowid, L2 distance) of the k nearest unit vectors, nearest first."""
        q = np.asarray(query, dtype=np.float32)
        scores = self.matrix @ q
        k = min(k, len(scores))
        if k <= 0:
            return []
        part = np.argpartition(-scores, k - 1)[:k]
        best = part[np.argsort(-scores[part])]
        return [
            (int(self.rowids[i]), math.sqrt(max(0.0, 2.0 - 2.0 * float(scores[i])))) for i in best
        ]


def candidates(
    rows: dict[int, Candidate],
    fts_hits: Sequence[tuple[int, float]],
    vec_hits: Sequence[tuple[int, float]],
) -> list[Candidate]:
    hits: dict[int, list[float | None]] = {}
    for seq, r in fts_hits:
        hits[seq] = [r, None]
    for seq, d in vec_hits:
        hits.setdefault(seq, [None, None])[1] = d
    out: list[Candidate] = []
    for seq, (bm25, distance) in hits.items():
        row = rows.get(seq)
        if row is None:
            continue
        out.append(replace(row, bm25=bm25, distance=distance))
    return out


def raw_hybrid(
    fts: RawFts,
    vectors: RawVectors,
    rows: dict[int, Candidate],
    query: str,
    query_vector: Sequence[float],
    params: RankParams,
) -> list[Ranked]:
    """FTS top-k + exact vector top-k + memoryd's merge, all in this process."""
    match = build_match_query(query)
    fts_hits = fts.top_k(match) if match is not None else []
    vec_hits = vectors.top_k(query_vector)
    return rank(candidates(rows, fts_hits, vec_hits), params, time.time())


# ---------------------------------------------------------------------- vectors for the index


class FastHash:
    """memoryd's ``hash`` provider with each word's bucket contributions memoised.

    Produces bit-identical vectors (same features, buckets, signs, order of additions and
    ``normalize`` calls) much faster, so the suite can fill a large index with exactly the
    vectors the daemon would have computed. :meth:`check_identical` proves it on a sample
    at every run; if memoryd's private feature helpers move, it falls back to the provider.
    """

    def __init__(self, dims: int) -> None:
        self.provider = HashProvider(dims)
        self.dims = dims
        self.words: dict[str, list[tuple[int, float]]] = {}
        try:
            from memoryd.providers.embeddings import _WORD, _features
        except ImportError:  # pragma: no cover - depends on memoryd's internals
            self._split = None
        else:
            self._split, self._features = _WORD.findall, _features

    def _contributions(self, word: str) -> list[tuple[int, float]]:
        out: list[tuple[int, float]] = []
        for feat in self._features(word):
            digest = blake3.blake3(feat.encode()).digest(length=8)
            bucket = int.from_bytes(digest[:4], "little") % self.dims
            out.append((bucket, 1.0 if digest[4] & 1 else -1.0))
        return out

    def embed(self, text: str) -> list[float]:
        if self._split is None:
            return self.provider.embed_one(text)
        vector = [0.0] * self.dims
        words = self.words
        for word in self._split(text.lower()):
            contributions = words.get(word)
            if contributions is None:
                contributions = words[word] = self._contributions(word)
            for bucket, sign in contributions:
                vector[bucket] += sign
        return normalize(vector)

    def check_identical(self, texts: Sequence[str]) -> None:
        for text in texts:
            if self.embed(text) != self.provider.embed_one(text):
                raise AssertionError("FastHash differs from memoryd's HashProvider")


def fill_vectors(index_path: Path, root: Path, workspace_dir: Path, dims: int) -> tuple[int, float]:
    """Give every chunk of a (closed) index its ``hash`` vector via memoryd's own Index API.

    Exactly what the daemon's embed loop stores (``normalize`` of the provider's vector),
    computed by :class:`FastHash`. Returns (vectors stored, seconds).
    """
    started = time.perf_counter()
    fast = FastHash(dims)
    index = Index(index_path, root=root, workspace_dir=workspace_dir, settings=DAEMON_CHUNKS)
    index.open()
    stored = 0
    try:
        index.set_embedding_identity(fast.provider.model_id, dims)
        checked = False
        while True:
            pending: list[PendingVector] = index.pending_vectors(5000)
            if not pending:
                break
            if not checked:
                fast.check_identical([p.text for p in pending[:50]])
                checked = True
            items = [(p, normalize(fast.embed(p.text))) for p in pending]
            stored += index.store_vectors(fast.provider.model_id, items)
    finally:
        index.close()
    return stored, time.perf_counter() - started


def query_vector_cost(queries: Sequence[str], dims: int) -> dict[str, tuple[list[float], float]]:
    """Each query's vector and the seconds memoryd's hash provider takes to make it."""
    provider = HashProvider(dims)
    out: dict[str, tuple[list[float], float]] = {}
    for query in queries:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            vector = normalize(provider.embed_one(query))
            times.append(time.perf_counter() - started)
        out[query] = (vector, sorted(times)[2])
    return out


# ---------------------------------------------------------------------- raw process for RSS


def _rss_main(argv: list[str]) -> int:
    import psutil

    dbs = [Path(a) for a in argv if not a.startswith("--")]
    queries = ["sqlite index migration", "redis timeout problem", "数据库 迁移"]
    vec = "--vec" in argv
    dims = 384
    conns = []
    for db in dbs:
        conn, _ = connect(db)
        conns.append(conn)
        for query in queries:
            match = build_match_query(query)
            conn.execute(
                "SELECT f.rowid, bm25(chunks_fts) AS r FROM chunks_fts f "
                "WHERE chunks_fts MATCH ? ORDER BY r LIMIT 18",
                (match,),
            ).fetchall()
            if vec:
                blob = array("f", HashProvider(dims).embed_one(query)).tobytes()
                conn.execute(
                    "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = 18",
                    (blob,),
                ).fetchall()
    rss = psutil.Process().memory_info().rss
    print(json.dumps({"rss_bytes": rss, "connections": len(conns)}))
    return 0


def _main(argv: list[str]) -> int:
    if argv[:1] == ["rss"]:
        return _rss_main(argv[1:])
    print("usage: python -m bench.raw rss DB [DB ...] [--vec]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
