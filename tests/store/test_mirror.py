"""The in-memory vector copy answers exactly what sqlite-vec's scan answers, whatever happened.

Each example drives a real index (real SQLite, real vec0 table, real files) through a random
sequence of edits, deletions, vector batches, failed transactions and identity changes, and
after every step compares ``Index.knn`` (served by the mirror) with vec0's own KNN query on
the same connection.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.blas import THREAD_ENV
from memoryd.store.connection import DatabaseError, driver
from memoryd.store.index import Index
from memoryd.store.layout import Workspace, ensure_workspace_dirs, resolve_workspace
from memoryd.store.vectors import vector_blob

DIMS = 8


def vec0_knn(index: Index, query: list[float], k: int) -> list[tuple[int, float]]:
    rows = index.conn.execute(
        "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?",
        (vector_blob(query), k),
    )
    return [(int(seq), float(d)) for seq, d in rows]


def assert_same_neighbours(index: Index, rng: random.Random) -> None:
    query = [rng.uniform(-1, 1) for _ in range(DIMS)]
    total = int(index.conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0])
    for k in (1, 5, min(total + 3, 4096)):  # vec0 answers at most k = 4096
        mine, theirs = index.knn(query, k), vec0_knn(index, query, k)
        assert [seq for seq, _ in mine] == [seq for seq, _ in theirs]
        assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(mine, theirs, strict=True))
    assert index.mirror is not None and index.mirror.count == total


class FailingConnection:
    """The index's connection, failing the n-th FTS insert as a full disk would."""

    def __init__(self, conn: Any, fail_at: int) -> None:
        self._conn, self._left = conn, fail_at

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _maybe_fail(self, sql: str, count: int) -> None:
        if sql.startswith("INSERT INTO chunks_fts"):
            self._left -= count
            if self._left <= 0:
                raise driver.OperationalError("database or disk is full")

    def execute(self, sql: str, *args: Any) -> Any:
        self._maybe_fail(sql, 1)
        return self._conn.execute(sql, *args)

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = list(rows)
        self._maybe_fail(sql, len(rows))
        return self._conn.executemany(sql, rows)


@pytest.fixture
def make_workspace() -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as tmp:
        count = iter(range(1_000_000))

        def make() -> tuple[Path, Workspace]:
            base = Path(tmp) / str(next(count))
            project = base / "proj"
            project.mkdir(parents=True)
            workspace = resolve_workspace(project, base / "memory")
            ensure_workspace_dirs(workspace)
            return base / "memory", workspace

        yield make


OPS = st.lists(
    st.sampled_from(["write", "rewrite", "delete", "embed", "embed_some", "fail", "identity"]),
    min_size=4,
    max_size=14,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, seed=st.integers(0, 2**32 - 1))
def test_mirror_knn_equals_the_vec0_scan_after_any_sequence(
    make_workspace: Any, ops: list[str], seed: int
) -> None:
    rng = random.Random(seed)
    root, workspace = make_workspace()
    index = Index(
        workspace.index_path, root=root, workspace_dir=workspace.dir, vectors_in_memory=True
    )
    index.open()
    model = "random-8"
    index.set_embedding_identity(model, DIMS)
    files = [workspace.sessions_dir / f"2026-11-{day:02d}-s.md" for day in range(1, 5)]
    try:
        for op in ops:
            path = rng.choice(files)
            if op in ("write", "rewrite"):
                sections = rng.randint(1, 6)
                path.write_text(
                    "# Log\n\n"
                    + "".join(
                        f"## Part {rng.randint(0, 9)}\n\nnote {rng.random()}\n\n"
                        for _ in range(sections)
                    )
                )
                index.sync_paths([path])
            elif op == "delete":
                path.unlink(missing_ok=True)
                index.sync_paths([path])
            elif op in ("embed", "embed_some"):
                pending = index.pending_vectors(100)
                if op == "embed_some":
                    pending = pending[: len(pending) // 2]
                index.store_vectors(
                    model, [(p, [rng.uniform(-2, 2) for _ in range(DIMS)]) for p in pending]
                )
            elif op == "fail":  # a transaction that deletes vectors, then rolls back
                path.write_text("# Log\n\n## Other\n\n" + f"replaced {rng.random()}\n")
                real = index._conn
                index._conn = FailingConnection(real, fail_at=1)  # type: ignore[assignment]
                try:
                    report = index.sync_paths([path], tolerant=True)
                finally:
                    index._conn = real
                assert report.failed
            elif op == "identity":
                model = f"random-8-{rng.randint(0, 1)}"
                index.set_embedding_identity(model, DIMS)
            assert_same_neighbours(index, rng)
    finally:
        index.close()


def test_a_rolled_back_delete_leaves_the_vector_findable(make_workspace: Any) -> None:
    root, workspace = make_workspace()
    index = Index(
        workspace.index_path, root=root, workspace_dir=workspace.dir, vectors_in_memory=True
    )
    index.open()
    index.set_embedding_identity("m", DIMS)
    path = workspace.memory_file
    path.write_text("# M\n\n## Ferrets\n\nTwo ferrets live in the office.\n")
    index.sync_paths([path])
    (pending,) = [p for p in index.pending_vectors(10) if "ferrets" in p.text]
    target = [1.0] + [0.0] * (DIMS - 1)
    index.store_vectors("m", [(pending, target)])
    assert index.knn(target, 1) == [(pending.seq, pytest.approx(0.0, abs=1e-6))]
    path.write_text("# M\n\n## Stoats\n\nNo ferrets any more.\n")
    real = index._conn
    index._conn = FailingConnection(real, fail_at=1)  # type: ignore[assignment]
    try:
        with pytest.raises(DatabaseError):
            index.sync_paths([path])
    finally:
        index._conn = real
    # The delete of the old chunk rolled back, so its vector is still there and found.
    assert index.knn(target, 1) == [(pending.seq, pytest.approx(0.0, abs=1e-6))]
    index.close()


def test_memory_cost_is_reported_and_freed(make_workspace: Any) -> None:
    root, workspace = make_workspace()
    index = Index(
        workspace.index_path, root=root, workspace_dir=workspace.dir, vectors_in_memory=True
    )
    index.open()
    index.set_embedding_identity("m", DIMS)
    workspace.memory_file.write_text("".join(f"## S{i}\n\ntext {i}\n\n" for i in range(3000)))
    index.sync_paths([workspace.memory_file])
    pending = index.pending_vectors(5000)
    rng = random.Random(7)
    index.store_vectors("m", [(p, [rng.uniform(-1, 1) for _ in range(DIMS)]) for p in pending])
    index.knn([0.0] * DIMS, 1)
    stats = index.stats()
    assert stats["vectors_in_memory"] == len(pending) == 3000
    assert int(stats["vectors_in_memory_bytes"]) >= 3000 * DIMS * 4  # type: ignore[call-overload]
    # Past the room the load left: the copy grows and still answers what vec0 answers.
    (workspace.sessions_dir / "2026-11-30-more.md").write_text(
        "".join(f"## T{i}\n\nmore {i}\n\n" for i in range(2000))
    )
    index.sync_paths([workspace.sessions_dir / "2026-11-30-more.md"])
    pending = index.pending_vectors(5000)
    index.store_vectors("m", [(p, [rng.uniform(-1, 1) for _ in range(DIMS)]) for p in pending])
    assert index.stats()["vectors_in_memory"] == 5000
    assert_same_neighbours(index, rng)
    index.set_embedding_identity(None, None)  # vector search off: the copy is dropped
    assert index.stats()["vectors_in_memory"] == 0
    index.close()


BLAS_PROBE = """
import threadpoolctl
from memoryd.store.mirror import VectorMirror
VectorMirror()._numpy()  # the mirror's first numpy import
print(max(info["num_threads"] for info in threadpoolctl.threadpool_info()))
"""


@pytest.mark.parametrize(("configured", "expected"), [(None, "1"), ("2", "2")])
def test_the_mirror_asks_for_one_blas_thread_unless_configured(
    configured: str | None, expected: str
) -> None:
    pytest.importorskip("threadpoolctl")
    env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
    if configured is not None:
        env |= dict.fromkeys(THREAD_ENV, configured)
    out = subprocess.run(
        [sys.executable, "-c", BLAS_PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == expected


def test_vectors_in_memory_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    from structlog.testing import capture_logs

    from memoryd.store import mirror

    assert [mirror.mirror_wanted(m) for m in ("auto", "on", "off")] == [True, True, False]
    monkeypatch.setattr(mirror, "numpy_available", lambda: False)
    with capture_logs() as logs:
        assert [mirror.mirror_wanted(m) for m in ("auto", "on", "off")] == [False] * 3
    # Only "on" asked for it: that one says why it is not there.
    assert [e["event"] for e in logs] == ["index.vectors_in_memory_unavailable"]
