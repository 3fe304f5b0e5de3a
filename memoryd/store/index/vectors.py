"""Vector identity and storage: which model the stored vectors belong to, which chunks still
lack one, storing and dropping them (``chunks_vec``, and the in-memory copy when kept)."""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.store.index.guard import rollback
from memoryd.store.index.records import PendingVector
from memoryd.store.index.state import IndexState
from memoryd.store.vectors import vector_blob

STALE_VECTORS = "vectors_stale"  # meta key: chunks were deleted while sqlite-vec was missing


class Vectors(IndexState):
    """The index's vectors (see :meth:`set_embedding_identity`)."""

    def load_mirror(self) -> int:
        """Read the vectors into memory now, if they are kept there and not loaded yet
        (~1 s per 100k 384-d vectors); returns how many are held."""
        if self.mirror is None or self.vec_dims is None:
            return 0
        if not self.mirror.loaded:
            self.mirror.load(self.conn, self.vec_dims)
        return self.mirror.count

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
            rollback(conn)
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
            rollback(conn)
            raise
        if self.mirror is not None:  # only what committed
            self.mirror.put(added)
        return len(added)

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
