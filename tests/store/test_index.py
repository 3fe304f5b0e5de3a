"""The index on a real SQLite file: stable chunks, corruption, upgrades, cheap deletes."""

from __future__ import annotations

import shutil
import sqlite3 as std_sqlite3
from pathlib import Path

import pytest

from memoryd.providers.embeddings import HashProvider
from memoryd.store import index as index_module
from memoryd.store import migrations
from memoryd.store.connection import DatabaseError, connect
from memoryd.store.index import ChunkSettings, Index
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
    indexes = {
        r[0] for r in index.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    }
    assert "chunks_by_source" not in indexes and "chunks_by_path" in indexes  # v5
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


def test_a_v3_index_gets_a_contentless_fts_table_that_still_finds_and_forgets(
    ws: tuple[Path, Workspace],
) -> None:
    root, workspace = ws
    # The fixture: an index of schema version 3 (an FTS table holding a copy of the
    # bodies), with one plain and one CJK chunk in it.
    conn, _ = connect(workspace.index_path)
    conn.execute("BEGIN")
    for migrate in migrations.MIGRATIONS[:3]:
        migrate(conn)
    conn.execute("PRAGMA user_version = 3")
    for seq, text in ((1, "hello old world"), (2, "用SQLite存数据")):
        conn.execute(
            "INSERT INTO chunks (seq, id, path, start_line, end_line, heading, text, hash, "
            "source, chunk_time, created_at, updated_at) "
            "VALUES (?, ?, 'MEMORY.md', 1, 1, '', ?, 'h', 'global', 1, 1, 1)",
            (seq, f"c{seq}", text),
        )
    conn.execute(
        "INSERT INTO chunks_fts (rowid, body, source) VALUES (1, 'hello old world', 'global')"
    )
    conn.execute("COMMIT")
    conn.close()

    index = open_index(root, workspace)
    assert migrations.schema_version(index.conn) == migrations.LATEST
    sql = index.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()
    version = tuple(int(p) for p in index.caps.sqlite_version.split(".")[:3])  # type: ignore[union-attr]
    if version >= migrations.CONTENTLESS_DELETE:
        assert "content = ''" in sql[0] and "contentless_delete = 1" in sql[0]
    # Every chunk is in the rebuilt table (the CJK one bigrammed), ranked, sources kept.
    assert [seq for seq, _ in index.fts('"old"', 5, ["global"])] == [1]
    assert [seq for seq, _ in index.fts('"数据"', 5, None)] == [2]
    assert index.fts('"old"', 5, ["session"]) == []
    index.conn.execute("DELETE FROM chunks_fts WHERE rowid = 1")
    assert index.fts('"old"', 5, None) == []
    index.close()


def many_files(workspace: Workspace, count: int) -> list[Path]:
    paths = []
    for n in range(count):
        path = workspace.sessions_dir / f"2025-01-{n % 28 + 1:02d}-s-{n:08x}.md"
        path.write_text(f"## Topic {n}\n\nword{n} shared text\n\n## More {n}\n\nother{n}\n")
        paths.append(path)
    return paths


def index_contents(index: Index) -> tuple[object, ...]:
    chunks = index.conn.execute(
        "SELECT id, path, start_line, end_line, heading, text, hash, source, chunk_time "
        "FROM chunks ORDER BY id"
    ).fetchall()
    files = index.conn.execute("SELECT path, mtime, size, hash FROM files ORDER BY path").fetchall()
    return chunks, files


def test_sync_many_indexes_like_file_by_file_sync(
    ws: tuple[Path, Workspace], tmp_path: Path
) -> None:
    root, workspace = ws
    paths = many_files(workspace, 30)
    workspace.memory_file.write_text("# Facts\n\n用SQLite存数据\n")
    other = Index(tmp_path / "other.sqlite", root=root, workspace_dir=workspace.dir)
    other.open()
    one_by_one = other.sync_paths(other.disk_files())
    index = open_index(root, workspace)
    cache = index.conn.execute("PRAGMA cache_size").fetchone()[0]
    batched = index.sync_many(index.disk_files(), batch=4, commit_chunks=10)
    # The bigger page cache of a bulk sync is given back afterwards.
    assert index.conn.execute("PRAGMA cache_size").fetchone()[0] == cache
    assert (batched.synced, batched.changed, batched.chunks_added) == (
        one_by_one.synced,
        one_by_one.changed,
        one_by_one.chunks_added,
    )
    assert index_contents(index) == index_contents(other)
    # The FTS rows are those chunks, by seq (= rowid), CJK bigrammed.
    seqs = {cid: seq for seq, cid in index.conn.execute("SELECT seq, id FROM chunks")}
    assert len(seqs) == batched.chunks_added
    hit = index.fts('"word7"', 5, None)
    assert [
        index.conn.execute("SELECT path FROM chunks WHERE seq = ?", (seq,)).fetchone()[0]
        for seq, _ in hit
    ] == [index.rel(paths[7])]
    assert index.fts('"数据"', 5, ["workspace"])
    # Again: nothing changed, nothing rewritten.
    again = index.sync_many(index.disk_files(), batch=4)
    assert (again.synced, again.changed, again.chunks_added) == (batched.synced, 0, 0)
    index.close()
    other.close()


def test_sync_many_takes_edits_deletions_and_unreadable_files_in_one_pass(
    ws: tuple[Path, Workspace],
) -> None:
    root, workspace = ws
    paths = many_files(workspace, 10)
    index = open_index(root, workspace)
    index.sync_many(paths, batch=3)
    kept = dict(index.conn.execute("SELECT id, seq FROM chunks"))
    paths[1].write_text("## Topic 1\n\nword1 shared text\n\n## Changed\n\nbrand new words\n")
    paths[2].unlink()
    paths[3].unlink()
    paths[3].mkdir()  # unreadable as a file, even for root
    report = index.sync_many(paths, batch=3)
    assert report.removed == 1 and report.changed == 1 and report.chunks_added == 1
    assert report.chunks_removed == 2 + 1  # the deleted file's two, the edited section
    assert len(report.errors) == 1 and str(paths[3]) in report.errors[0]
    assert index.fts('"brand"', 5, None) and not index.fts('"other2"', 5, None)
    # A chunk that did not change keeps its seq; a new one never takes a seq in use.
    after = dict(index.conn.execute("SELECT id, seq FROM chunks"))
    assert all(after[cid] == seq for cid, seq in kept.items() if cid in after)
    assert len(set(after.values())) == len(after)

    def indexed(path: Path) -> bool:
        row = index.conn.execute("SELECT 1 FROM chunks WHERE path = ?", (index.rel(path),))
        return row.fetchone() is not None

    assert not indexed(paths[2]) and indexed(paths[3])  # an unreadable file keeps its chunks
    index.close()


def test_sync_many_rolls_back_the_open_transaction_when_the_disk_is_full(
    ws: tuple[Path, Workspace], tmp_path: Path
) -> None:
    root, workspace = ws
    many_files(workspace, 4)
    index = open_index(root, workspace)
    index.sync_many(index.disk_files())
    before = index_contents(index)
    for path in many_files(workspace, 40)[4:]:
        path.write_text(path.read_text() + "\n" + " ".join(f"filler{i}" for i in range(3000)))
    pages = index.conn.execute("PRAGMA page_count").fetchone()[0]
    index.conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(DatabaseError):
        index.sync_many(index.disk_files(), batch=4)
    assert not index.conn.in_transaction
    assert index_contents(index) == before
    index.conn.execute("PRAGMA max_page_count = 1073741823")
    report = index.sync_paths(index.disk_files(), tolerant=True)
    assert not report.failed and report.changed == 36
    # Nothing of the failed attempt is left over to be written again later.
    (workspace.sessions_dir / "2025-02-01-late-0000abcd.md").write_text("## Late\n\nlate word\n")
    assert index.sync_many(index.disk_files()).chunks_added == 1
    fresh = Index(tmp_path / "fresh.sqlite", root=root, workspace_dir=workspace.dir)
    fresh.open()
    fresh.sync_many(fresh.disk_files())
    assert index_contents(index)[0] == index_contents(fresh)[0]

    def hits(idx: Index) -> list[tuple[str, int]]:
        found = [s for s, _ in idx.fts('"filler7"', 50, None)]
        where = "SELECT path, start_line FROM chunks WHERE seq = ?"
        return sorted(idx.conn.execute(where, (s,)).fetchone() for s in found)

    assert len(hits(index)) == 36 and hits(index) == hits(fresh)
    fresh.close()
    index.close()


def test_sync_many_never_reads_through_a_symlink_out_of_the_root(
    ws: tuple[Path, Workspace], tmp_path: Path
) -> None:
    root, workspace = ws
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("## Secret\n\ntopsecret words\n")
    paths = many_files(workspace, 3)
    escape = workspace.sessions_dir / "2025-01-09-escape-00000001.md"
    escape.symlink_to(outside / "secret.md")
    inner = workspace.sessions_dir / "2025-01-09-inner-00000002.md"
    inner.symlink_to(paths[0])  # a symlink that stays inside is fine
    index = open_index(root, workspace)
    report = index.sync_many([*paths, escape, inner], batch=2)
    assert report.chunks_added == 4 * 2
    assert index.fts('"topsecret"', 5, None) == []
    # A whole sessions directory that points out of the root is not memory either.
    (outside / "sessions").mkdir()
    (outside / "sessions" / "2025-01-10-x-00000003.md").write_text("## S\n\nlinkeddir words\n")
    shutil.rmtree(workspace.sessions_dir)
    workspace.sessions_dir.symlink_to(outside / "sessions", target_is_directory=True)
    index.sync_many([*index.disk_files(), workspace.sessions_dir / "2025-01-10-x-00000003.md"])
    assert index.fts('"linkeddir"', 5, None) == []
    index.close()


def test_the_wal_is_cut_back_after_a_big_sync(
    ws: tuple[Path, Workspace], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, workspace = ws
    monkeypatch.setattr(index_module, "WAL_LIMIT_BYTES", 64 * 1024)
    paths = many_files(workspace, 60)
    index = open_index(root, workspace)
    index.sync_many(index.disk_files())
    wal = Path(f"{workspace.index_path}-wal")
    assert wal.stat().st_size > 64 * 1024  # one big transaction
    index.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    paths[0].write_text("## Edited\n\nedit\n")
    index.sync_paths(paths[:1])  # the next write starts the WAL over, and cuts it
    assert wal.stat().st_size <= 64 * 1024
    index.close()


def test_an_fts_table_this_sqlite_cannot_use_is_rebuilt_at_open(
    ws: tuple[Path, Workspace],
) -> None:
    root, workspace = ws
    workspace.memory_file.write_text("# Facts\n\nkept words\n")
    index = open_index(root, workspace)
    index.sync_many(index.disk_files())
    index.close()
    # As a newer SQLite's option looks to an older one: unknown to this FTS5. (SQLite >= 3.44
    # finds it in quick_check already; an older one only when the table is first used.)
    conn = std_sqlite3.connect(workspace.index_path)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = replace(sql, 'tokenize', 'future_option = 1, tokenize') "
        "WHERE name = 'chunks_fts'"
    )
    conn.commit()
    conn.close()

    index = open_index(root, workspace)
    assert index.rebuilt_reason is not None and "future_option" in index.rebuilt_reason
    index.sync_many(index.reconcile())  # as the actor does after open
    assert index.fts('"kept"', 5, None)
    index.close()


def test_a_big_sync_gives_back_the_memory_of_its_staging_tables(
    ws: tuple[Path, Workspace],
) -> None:
    from memoryd.store.index import STAGING_KEEP_PAGES

    root, workspace = ws
    for n in range(20):  # ~1.5 MB of chunk text: far more than the pages kept
        (workspace.sessions_dir / f"2026-11-{n + 1:02d}-big.md").write_text(
            "".join(f"## Part {i}\n\n{f'word{i} ' * 100}\n\n" for i in range(100))
        )
    index = open_index(root, workspace)
    report = index.sync_many(index.disk_files())
    assert report.chunks_added >= 2000
    # The in-memory temp database (which never shrinks by itself) was closed ...
    assert index.conn.execute("PRAGMA temp.page_count").fetchone()[0] <= STAGING_KEEP_PAGES
    # ... and the next syncs stage again, file by file and in bulk.
    target = workspace.sessions_dir / "2026-11-01-big.md"
    target.write_text("## Fresh\n\nfreshly written note\n")
    assert index.sync_paths([target]).chunks_added == 1
    assert index.fts('"freshly"', 5, None)
    (workspace.sessions_dir / "2026-11-30-new.md").write_text("## New\n\nanother note\n")
    assert index.sync_many(index.disk_files()).chunks_added == 1
    index.close()


def test_a_big_file_written_as_growing_prefixes_ends_as_one_write(
    ws: tuple[Path, Workspace],
) -> None:
    """Issue #17: WorkspaceMemory.sync_big writes a big file a prefix per DB phase; the end
    state is the same as one write, and until the last phase its hash stays empty."""
    root, workspace = ws
    path = workspace.sessions_dir / "2025-01-01-big-0000aaaa.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(f"## Part {i}\n\nword{i} " + "filler " * 300 + "\n\n" for i in range(40))
    )
    index = open_index(root, workspace)
    item = index.prepare(path)
    assert item.chunks is not None and len(item.chunks) > 10
    for count in (5, 10):
        index.write_prepared(item.prefix(count), last=False)
        rel = index.rel(path)
        assert index.conn.execute("SELECT hash FROM files WHERE path = ?", (rel,)).fetchone() == (
            f"partial:{count}",
        )
        assert index.count_chunks() == count
    index.write_prepared(item.prefix(len(item.chunks)))
    phased = sorted(index.conn.execute("SELECT id, start_line, end_line FROM chunks"))
    # A changed big file: its old chunks stay searchable until the last phase.
    text = path.read_text()
    path.write_text("## Intro\n\nnew words\n\n" + text)
    again = index.prepare(path)
    assert again.chunks is not None
    before = index.count_chunks()
    index.write_prepared(again.prefix(3), last=False)
    assert index.count_chunks() >= before
    index.write_prepared(again)
    assert index.count_chunks() == len(again.chunks)
    phased = sorted(index.conn.execute("SELECT id, start_line, end_line FROM chunks"))
    assert index.reconcile() == []  # the hash is the file's now
    index.close()
    fresh = open_index(root, workspace)
    fresh.rebuild("compare")
    assert sorted(fresh.conn.execute("SELECT id, start_line, end_line FROM chunks")) == phased
    fresh.close()


SMALL_NOTES = (
    "# Session 3\n\n2026-05-01 with Ana\n\n## Cache\n\n"
    + "Redis runs with allkeys-lru so checkout never freezes. " * 5
    + "\n\n## Keys\n\nvalkey later <!-- zanzibar -->\n"
)


def test_other_chunk_settings_or_chunker_re_chunk_every_file_keeping_unchanged_chunks(
    ws: tuple[Path, Workspace],
) -> None:
    # Issue #19: an index made one chunk a section (min_chars 0, as before chunker v2);
    # opened with min_chars 200 every file is re-chunked at the next reconcile and sync.
    root, workspace = ws
    path = workspace.memory_file
    path.write_text(SMALL_NOTES)
    (workspace.dir / "sessions" / "2026-05-01-x-abcdef12.md").write_text("## One\n\n" + "y " * 150)
    old = Index(workspace.index_path, root=root, workspace_dir=workspace.dir)
    old.open()
    old.sync_many(old.disk_files())
    assert old.count_chunks() == 4
    kept_id = old.conn.execute("SELECT id FROM chunks WHERE heading = 'One'").fetchone()[0]
    old.close()

    merged = Index(
        workspace.index_path,
        root=root,
        workspace_dir=workspace.dir,
        settings=ChunkSettings(min_chars=200),
    )
    merged.open()
    dirty = merged.reconcile()
    assert len(dirty) == 2  # both files, though neither changed on disk
    merged.sync_paths(dirty)
    headings = [r[0] for r in merged.conn.execute("SELECT heading FROM chunks ORDER BY path")]
    assert sorted(headings) == ["One", "Session 3 > Cache"]
    assert merged.conn.execute("SELECT id FROM chunks WHERE heading = 'One'").fetchone()[0] == (
        kept_id
    )
    assert merged.reconcile() == []  # recorded: the next open does not re-chunk again
    merged.close()
    again = Index(
        workspace.index_path,
        root=root,
        workspace_dir=workspace.dir,
        settings=ChunkSettings(min_chars=200),
    )
    again.open()
    assert again.reconcile() == []
    assert again.fts('"zanzibar"', 5, None) == []  # comments are not indexed text
    again.close()


def test_the_chunker_v2_migration_drops_comments_from_fts_and_marks_files_changed(
    ws: tuple[Path, Workspace],
) -> None:
    root, workspace = ws
    conn, _ = connect(workspace.index_path)
    for version in range(1, 6):  # an index of schema v5, with a comment in its FTS body
        conn.execute("BEGIN")
        migrations.MIGRATIONS[version - 1](conn)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
    conn.execute(
        "INSERT INTO chunks (id, path, start_line, end_line, heading, text, hash, source, "
        "chunk_time, created_at, updated_at, access_count) VALUES ('c1', 'w/MEMORY.md', 1, 1, "
        "'G', 'kept <!-- zanzibar -->', 'h', 'workspace', 1, 1, 1, 0)"
    )
    seq = conn.execute("SELECT seq FROM chunks").fetchone()[0]
    conn.execute(
        "INSERT INTO chunks_fts (rowid, body, source) VALUES (?, ?, 'workspace')",
        (seq, "kept <!-- zanzibar -->"),
    )
    conn.execute("INSERT INTO files VALUES ('w/MEMORY.md', 5.0, 10, 'abc', 5.0)")
    conn.commit()
    conn.close()
    index = open_index(root, workspace)
    assert index.fts('"zanzibar"', 5, None) == []
    assert [s for s, _ in index.fts('"kept"', 5, None)] == [seq]
    assert index.conn.execute("SELECT hash, mtime FROM files").fetchall() == [("", -1.0)]
    index.close()
