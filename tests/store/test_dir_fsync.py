"""A created or moved file's directory entry is made durable (issue #16's one fsync policy).

``dreams.jsonl`` (which logs a dream consumed, by content hash), the logs a dream archives or an
undo brings back (both directories of the rename) and the ingest registry (which transcripts
were imported) are fsynced at the directory level when their names change, as atomic writes
and session journals are.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from blake3 import blake3
from structlog.testing import capture_logs

from memoryd.store import history, ingested
from memoryd.store.journal import IngestMark


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    monkeypatch.setattr(history, "fsync_dir", calls.append)
    monkeypatch.setattr(ingested, "fsync_dir", calls.append)
    return calls


def test_creating_the_dream_journal_syncs_its_directory_once(
    tmp_path: Path, synced: list[Path]
) -> None:
    history_dir = tmp_path / "ws" / ".history"
    (tmp_path / "ws").mkdir()
    history.append_journal(history_dir, {"kind": "dream"})
    assert synced == [history_dir, tmp_path / "ws"]  # the new file, then the new .history/
    history.append_journal(history_dir, {"kind": "dream"})
    assert synced == [history_dir, tmp_path / "ws"]  # an append changes no directory
    assert len(history.read_journal(history_dir)) == 2


def test_archiving_logs_syncs_both_directories(tmp_path: Path, synced: list[Path]) -> None:
    sessions, archive = tmp_path / "sessions", tmp_path / ".history" / "sessions" / "d1"
    sessions.mkdir()
    log = sessions / "2026-05-01-a-12345678.md"
    log.write_text("## Note\n\nkept whole\n")
    digest = blake3(log.read_bytes()).hexdigest()
    moved, kept = history.archive_unchanged(sessions, archive, {log.name: digest})
    assert (moved, kept) == ((log,), ())
    assert (archive / log.name).read_text() == "## Note\n\nkept whole\n"
    assert synced == [sessions, archive]


def test_nothing_moved_syncs_nothing(tmp_path: Path, synced: list[Path]) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "2026-05-01-a-12345678.md").write_text("changed since\n")
    moved, kept = history.archive_unchanged(
        sessions, tmp_path / "archive", {"2026-05-01-a-12345678.md": "0" * 64}
    )
    assert (moved, kept) == ((), ("2026-05-01-a-12345678.md",))
    assert synced == []


def test_an_archive_whose_directory_sync_fails_is_still_done_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def eio(directory: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(history, "fsync_dir", eio)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    log = sessions / "2026-05-01-a-12345678.md"
    log.write_text("text\n")
    digest = blake3(log.read_bytes()).hexdigest()
    with capture_logs() as logs:
        moved, _ = history.archive_unchanged(sessions, tmp_path / "archive", {log.name: digest})
    assert moved == (log,)  # the rename happened: the log is whole in the archive
    assert [e["event"] for e in logs] == ["dream.move_not_durable"] * 2
    assert (tmp_path / "archive" / log.name).read_text() == "text\n"


def test_creating_the_ingest_registry_syncs_the_workspace_directory(
    tmp_path: Path, synced: list[Path]
) -> None:
    mark = IngestMark(path="/t/a.jsonl", format="claude-code", offset=10)
    ingested.record(tmp_path, [mark], "s1")
    assert synced == [tmp_path]
    ingested.record(tmp_path, [mark], "s1")
    assert synced == [tmp_path]
    assert ingested.registry_path(tmp_path).read_bytes().count(b"\n") == 2
