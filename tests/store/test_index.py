"""The index on a real SQLite file: stable chunks, corruption, upgrades, cheap deletes."""

from __future__ import annotations

import sqlite3 as std_sqlite3
from pathlib import Path

import pytest

from memoryd.providers.embeddings import HashProvider
from memoryd.store import migrations
from memoryd.store.connection import connect
from memoryd.store.index import Index
from memoryd.store.layout import Workspace, ensure_workspace_dirs, resolve_workspace


@pytest.fixture
def ws(tmp_path: Path) -> tuple[Path, Workspace]:
    root = tmp_path / "memory"
    project = tmp_path / "proj"
    project.mkdir()
    workspace = resolve_workspace(project, root)
    ensure_workspace_dirs(workspace)
    return root, workspace


def open_index(root: Path, workspace: Workspace) -> Index:
    index = Index(workspace.index_path, root=root, workspace_dir=workspace.dir)
    index.open()
    return index


def chunk_rows(index: Index) -> dict[str, tuple[str, float, int, str | None]]:
    rows = index.conn.execute("SELECT heading, id, created_at, access_count, vec_model FROM chunks")
    return {heading: (cid, created, count, vec) for heading, cid, created, count, vec in rows}


BODY = "# Notes\n\n## Build\n\nmake all\n\n## Test\n\npytest -q\n\n## Deploy\n\nfly deploy\n"


def test_inserting_a_section_at_the_top_leaves_other_chunks_untouched(
    ws: tuple[Path, Workspace],
) -> None:
    root, workspace = ws
    path = workspace.memory_file
    path.write_text(BODY)
    clock = iter(float(t) for t in range(1000, 2000))
    index = Index(
        workspace.index_path, root=root, workspace_dir=workspace.dir, clock=lambda: next(clock)
    )
    index.open()
    provider = HashProvider(16)
    index.set_embedding_identity(provider.model_id, provider.dims)
    index.sync_paths([path])
    pending = index.pending_vectors(100)
    index.store_vectors(provider.model_id, [(p, provider.embed_one(p.text)) for p in pending])
    index.bump_access([chunk_rows(index)["Notes > Test"][0]])
    before = chunk_rows(index)
    vectors_before = dict(index.conn.execute("SELECT rowid, embedding FROM chunks_vec"))

    path.write_text("# Notes\n\n## New first section\n\nbrand new\n\n" + BODY.split("\n", 2)[2])
    report = index.sync_paths([path])
    after = chunk_rows(index)

    assert report.chunks_added == 1
    for heading in ("Notes > Build", "Notes > Test", "Notes > Deploy"):
        assert after[heading] == before[heading], heading
    assert after["Notes > Test"][2] == 1  # access count kept
    vectors_after = dict(index.conn.execute("SELECT rowid, embedding FROM chunks_vec"))
    assert all(vectors_after[k] == v for k, v in vectors_before.items() if k in vectors_after)
    assert len(index.pending_vectors(100)) == 1  # only the new section needs a vector
    lines = dict(index.conn.execute("SELECT heading, start_line FROM chunks"))
    assert lines["Notes > Build"] == 7  # line numbers follow the edit
    index.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "zero_page"])
def test_corrupt_index_is_detected_and_rebuilt_from_markdown(
    ws: tuple[Path, Workspace], damage: str
) -> None:
    root, workspace = ws
    workspace.memory_file.write_text(
        BODY + "".join(f"\n## S{i}\n\nfiller {i} " * 50 for i in range(40))
    )
    index = open_index(root, workspace)
    index.sync_paths(index.disk_files())
    chunks = index.stats()["chunks"]
    index.close()
    db = workspace.index_path
    data = db.read_bytes()
    if damage == "garbage":
        db.write_bytes(b"this is not a database" * 100)
    elif damage == "truncated":
        db.write_bytes(data[: len(data) // 3])
    else:
        page = 4096
        db.write_bytes(data[:page] + b"\0" * page + data[2 * page :])
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)

    index = open_index(root, workspace)
    assert index.rebuilt_reason
    index.sync_paths(index.reconcile())
    assert index.stats()["chunks"] == chunks
    assert index.fts('"pytest"', 5, None)
    index.close()


def test_an_older_schema_is_upgraded_in_place(ws: tuple[Path, Workspace]) -> None:
    root, workspace = ws
    # The fixture: an index written by schema version 1, with one chunk in it.
    conn, _ = connect(workspace.index_path)
    conn.execute("BEGIN")
    migrations.MIGRATIONS[0](conn)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO chunks (id, path, start_line, end_line, heading, text, hash, source, "
        "chunk_time, created_at, updated_at, access_count) "
        "VALUES ('c1', 'MEMORY.md', 1, 2, 'G', 'hello old world', 'h', 'global', 1, 1, 1, 7)"
    )
    conn.execute("INSERT INTO chunks_fts (rowid, body) VALUES (1, 'hello old world')")
    conn.execute("COMMIT")
    conn.close()

    index = open_index(root, workspace)
    assert migrations.schema_version(index.conn) == migrations.LATEST
    assert index.rebuilt_reason is None
    row = index.conn.execute(
        "SELECT access_count, vec_model FROM chunks WHERE id = 'c1'"
    ).fetchone()
    assert row == (7, None)
    assert index.fts('"old"', 5, None) == [(1, pytest.approx(index.fts('"old"', 5, None)[0][1]))]
    index.close()


def test_a_newer_schema_is_refused_not_clobbered(ws: tuple[Path, Workspace]) -> None:
    root, workspace = ws
    conn = std_sqlite3.connect(workspace.index_path)
    conn.execute(f"PRAGMA user_version = {migrations.LATEST + 1}")
    conn.close()
    with pytest.raises(ValueError, match="newer"):
        open_index(root, workspace)


def test_deleting_a_files_chunks_never_scans_the_fts_table(ws: tuple[Path, Workspace]) -> None:
    root, workspace = ws
    log = workspace.sessions_dir / "2026-01-02-x-12345678.md"
    log.write_text("## A\n\none\n\n## B\n\ntwo\n")
    index = open_index(root, workspace)
    index.sync_paths([log])
    statements: list[str] = []
    index.conn.set_trace_callback(statements.append)
    log.unlink()
    report = index.sync_paths([log])
    index.conn.set_trace_callback(None)
    assert report.removed == 1 and report.chunks_removed == 2
    fts = [s for s in statements if "chunks_fts" in s]
    ours = [s for s in fts if not s.startswith("--")]  # FTS5's own shadow-table statements
    assert ours and all("WHERE rowid = " in s for s in ours), ours
    reads = [s for s in fts if s.startswith("--") and "SELECT" in s and "_content" in s]
    assert all("WHERE" in s for s in reads), reads  # FTS5's own reads are rowid lookups too
    plan = index.conn.execute(
        "EXPLAIN QUERY PLAN SELECT seq FROM chunks WHERE path = 'x'"
    ).fetchall()
    assert any("chunks_by_path" in str(row) for row in plan)
    index.close()


def test_reconcile_reports_new_changed_and_deleted_files(ws: tuple[Path, Workspace]) -> None:
    root, workspace = ws
    a = workspace.memory_file
    b = workspace.sessions_dir / "2026-01-02-b-12345678.md"
    a.write_text("# A\n\nalpha\n")
    b.write_text("## B\n\nbeta\n")
    index = open_index(root, workspace)
    assert sorted(index.reconcile()) == sorted([a, b])
    index.sync_paths([a, b])
    assert index.reconcile() == []
    a.write_text("# A\n\nalpha changed\n")
    b.unlink()
    c = root / "MEMORY.md"
    c.write_text("# Global\n\nprefs\n")
    assert sorted(index.reconcile()) == sorted([a, b, c])
    index.close()


def test_other_workspaces_files_are_never_indexed(
    ws: tuple[Path, Workspace], tmp_path: Path
) -> None:
    root, workspace = ws
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = resolve_workspace(other_dir, root)
    ensure_workspace_dirs(other)
    other.memory_file.write_text("# Other\n\nsecret other stuff\n")
    index = open_index(root, workspace)
    index.sync_paths([other.memory_file])
    assert index.stats()["chunks"] == 0
    assert other.memory_file not in index.disk_files()
    index.close()
