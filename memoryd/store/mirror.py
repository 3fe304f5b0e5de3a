"""An in-memory copy of an index's vectors, for exact KNN at numpy speed.

sqlite-vec stays the store of record: vectors are written to ``chunks_vec`` and survive
restarts there. But its Linux wheel scans float32 without SIMD (~55 ms per 100k 384-d
vectors on our 2-core machines), which alone would set hybrid-search latency. The mirror
holds the same vectors as one float32 matrix, so a query is one matrix-vector product and a
partial sort (~5 ms per 100k). Its cost is memory: 4 × dims bytes per vector (≈ 150 MB per
100k 384-d vectors).

It is owned by :class:`memoryd.store.index.Index` and touched only in the index's thread. The
index keeps it exact: vectors stored are added after their transaction commits, vectors
deleted are removed at once, and anything it cannot follow (a rolled-back transaction, a
rebuilt or reopened file, a new embedding identity) drops the copy, which is read back from
``chunks_vec`` at the next scan. numpy is imported only when a mirror first loads.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.blas import default_threads_before_numpy
from memoryd.store.connection import Connection

if TYPE_CHECKING:  # numpy is optional: imported on first load
    import numpy as np

log = structlog.get_logger(__name__)


def numpy_available() -> bool:
    return importlib.util.find_spec("numpy") is not None


def mirror_wanted(mode: str) -> bool:
    """Whether ``index.vectors_in_memory`` gives the index a mirror on this machine: "auto"
    and "on" when numpy can be imported ("on" without it: a warning, and sqlite-vec scans;
    ``doctor`` reports it as a failed check)."""
    if mode == "off":
        return False
    if numpy_available():
        return True
    if mode == "on":
        log.warning("index.vectors_in_memory_unavailable", reason="numpy is not installed")
    return False


class VectorMirror:
    """The vectors of ``chunks_vec`` as a float32 matrix; rows are chunk seqs."""

    def __init__(self) -> None:
        self.loaded = False
        self.dims = 0
        self._np: Any = None
        self._matrix: np.ndarray[Any, Any] | None = None  # capacity × dims, float32
        self._norms: np.ndarray[Any, Any] | None = None  # squared norm of each row
        self._seqs: np.ndarray[Any, Any] | None = None  # row → seq
        self._row: dict[int, int] = {}  # seq → row
        self.count = 0

    # ------------------------------------------------------------------ state

    def invalidate(self) -> None:
        """Forget everything; the next scan reads the vectors back from the table."""
        if self.loaded:
            log.debug("mirror.invalidated", vectors=self.count)
        self.loaded = False
        self._matrix = self._norms = self._seqs = None
        self._row = {}
        self.count = 0

    def load(self, conn: Connection, dims: int) -> None:
        """Read every vector of ``chunks_vec`` (``dims`` floats each), row by row straight
        into the matrix: the peak is the matrix itself, not a second copy of every blob."""
        np = self._numpy()
        self.invalidate()
        expected = int(conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0])
        capacity = max(1024, expected + expected // 8)
        matrix = np.empty((capacity, dims), dtype=np.float32)
        seqs = np.empty(capacity, dtype=np.int64)
        self._matrix, self._seqs, self.dims = matrix, seqs, dims
        self._norms = np.empty(capacity, dtype=np.float32)
        count = 0
        for seq, blob in conn.execute("SELECT rowid, embedding FROM chunks_vec"):
            if count == len(self._seqs):  # rows added since the count: make room
                self.count = count
                self._grow()
            self._matrix[count] = np.frombuffer(blob, dtype="<f4", count=dims)
            self._seqs[count] = seq
            count += 1
        self.count = count
        self._norms[:count] = np.einsum("ij,ij->i", self._matrix[:count], self._matrix[:count])
        self._row = {int(seq): row for row, seq in enumerate(self._seqs[:count].tolist())}
        self.loaded = True
        log.debug("mirror.loaded", vectors=count, dims=dims)

    def _numpy(self) -> Any:
        if self._np is None:
            default_threads_before_numpy()  # one BLAS thread unless configured
            import numpy

            self._np = numpy
        return self._np

    # ------------------------------------------------------------------ changes

    def put(self, items: Iterable[tuple[int, Sequence[float]]]) -> None:
        """Add or replace the vectors of these seqs (their transaction has committed)."""
        if not self.loaded:
            return
        np = self._numpy()
        for seq, vector in items:
            row = self._row.get(seq)
            if row is None:
                row = self._append_row(seq)
            assert self._matrix is not None and self._norms is not None
            values = np.asarray(vector, dtype=np.float32)
            if values.shape != (self.dims,):
                self.invalidate()  # cannot happen through Index; never guess
                return
            self._matrix[row] = values
            self._norms[row] = float(values @ values)

    def _append_row(self, seq: int) -> int:
        assert self._seqs is not None
        if self.count == len(self._seqs):
            self._grow()
        row = self.count
        self._seqs[row] = seq
        self._row[seq] = row
        self.count += 1
        return row

    def _grow(self) -> None:
        """Half as much room again (a doubling would briefly hold three copies' worth)."""
        np = self._numpy()
        assert self._matrix is not None and self._norms is not None and self._seqs is not None
        capacity = max(1024, self.count + self.count // 2)
        matrix = np.empty((capacity, self.dims), dtype=np.float32)
        matrix[: self.count] = self._matrix[: self.count]
        norms = np.empty(capacity, dtype=np.float32)
        norms[: self.count] = self._norms[: self.count]
        seqs = np.empty(capacity, dtype=np.int64)
        seqs[: self.count] = self._seqs[: self.count]
        self._matrix, self._norms, self._seqs = matrix, norms, seqs

    def remove(self, seqs: Iterable[int]) -> None:
        """Drop the vectors of these seqs (the last row moves into each hole)."""
        if not self.loaded:
            return
        assert self._matrix is not None and self._norms is not None and self._seqs is not None
        for seq in seqs:
            row = self._row.pop(seq, None)
            if row is None:
                continue
            last = self.count - 1
            if row != last:
                moved = int(self._seqs[last])
                self._matrix[row] = self._matrix[last]
                self._norms[row] = self._norms[last]
                self._seqs[row] = moved
                self._row[moved] = row
            self.count = last

    # ------------------------------------------------------------------ search

    def knn(self, query: Sequence[float], k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest seqs by L2 distance, nearest first (what ``vec0`` answers).

        It may run on another thread than the index's while that thread makes no change:
        it reads the arrays it found when it started."""
        matrix, norms, seqs, count = self._matrix, self._norms, self._seqs, self.count
        if not self.loaded or k <= 0 or count == 0:
            return []
        np = self._numpy()
        assert matrix is not None and norms is not None and seqs is not None
        q = np.asarray(query, dtype=np.float32)
        if q.shape != (self.dims,):
            raise ValueError(f"query has {q.shape[0]} dimensions, the vectors {self.dims}")
        # ‖v − q‖² = ‖v‖² − 2 v·q + ‖q‖²; the last term is the same for every row.
        partial = norms[:count] - 2.0 * (matrix[:count] @ q)
        k = min(k, count)
        if k < count:
            top = np.argpartition(partial, k - 1)[:k]
        else:
            top = np.arange(count)
        # The distances of the chosen few, computed directly (the expansion above cancels
        # badly for long vectors), and sorted by them.
        diff = matrix[top] - q
        distances = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        order = np.argsort(distances, kind="stable")
        return [
            (int(seq), float(d))
            for seq, d in zip(seqs[top[order]].tolist(), distances[order].tolist(), strict=True)
        ]

    @property
    def nbytes(self) -> int:
        """Memory held by the copy (capacity included)."""
        parts = (self._matrix, self._norms, self._seqs)
        return sum(int(p.nbytes) for p in parts if p is not None)
