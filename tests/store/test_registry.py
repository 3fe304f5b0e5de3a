"""The workspace registry ``<root>/workspaces.json`` (SPEC §10): what the confluence reads."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from memoryd.store import files
from memoryd.store.layout import resolve_workspace
from memoryd.store.registry import (
    expected_dirname,
    load_registry,
    record_workspace,
    registry_path,
)

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 3, 2, 11, 30, tzinfo=UTC)


def _project(tmp_path: Path, name: str, origin: str | None = None) -> Path:
    path = tmp_path / "src" / name
    path.mkdir(parents=True)
    if origin is not None:
        (path / ".git").mkdir()
        (path / ".git" / "config").write_text(f'[remote "origin"]\n\turl = {origin}\n')
    return path.resolve()


def test_a_new_registry_records_path_identity_and_first_and_last_seen(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    ws = resolve_workspace(_project(tmp_path, "widgets", "git@github.com:acme/widgets.git"), root)

    assert record_workspace(root, ws, T1)

    [entry] = load_registry(root)
    assert entry.dirname == "widgets-7d43613e"
    assert (entry.path, entry.identity, entry.kind) == (str(ws.path), "acme/widgets", "git")
    assert entry.first_seen == entry.last_seen == "2025-03-01T10:00:00Z"
    on_disk = json.loads(registry_path(root).read_text())
    assert on_disk["workspaces"]["widgets-7d43613e"]["identity"] == "acme/widgets"


def test_recording_again_keeps_first_seen_and_moves_last_seen_and_path(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    clone_a = _project(tmp_path, "a", "https://github.com/example/demo")
    clone_b = _project(tmp_path, "b", "https://github.com/example/demo")
    record_workspace(root, resolve_workspace(clone_a, root), T1)
    record_workspace(root, resolve_workspace(clone_b, root), T2)

    [entry] = load_registry(root)  # two clones of one repository: one workspace
    assert entry.dirname == "demo-859248a6"
    assert entry.first_seen == "2025-03-01T10:00:00Z"
    assert entry.last_seen == "2025-03-02T11:30:00Z"
    assert entry.path == str(clone_b)


def test_path_workspaces_and_several_entries_are_listed_sorted(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    for name in ("zeta", "alpha"):
        record_workspace(root, resolve_workspace(_project(tmp_path, name), root), T1)
    entries = load_registry(root)
    assert [e.dirname.split("-")[0] for e in entries] == ["alpha", "zeta"]
    assert all(e.kind == "path" and e.identity == e.path for e in entries)


def test_a_missing_registry_is_empty(tmp_path: Path) -> None:
    assert load_registry(tmp_path / "nowhere") == []


@pytest.mark.parametrize("garbage", [b"{not json", b"[1, 2]", b'{"workspaces": 3}', b"\xff\xfe"])
def test_a_corrupt_registry_is_logged_kept_aside_and_rebuilt(
    tmp_path: Path, garbage: bytes
) -> None:
    root = tmp_path / "memory"
    root.mkdir()
    registry_path(root).write_bytes(garbage)

    with capture_logs() as logs:
        assert load_registry(root) == []
    assert any(e["event"] == "registry.corrupt" for e in logs)
    assert (root / "workspaces.json.corrupt").read_bytes() == garbage

    ws = resolve_workspace(_project(tmp_path, "fresh"), root)
    assert record_workspace(root, ws, T1)
    assert [e.dirname for e in load_registry(root)] == [ws.key.dirname]


def test_a_hand_edited_entry_that_does_not_match_its_identity_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    ws = resolve_workspace(_project(tmp_path, "real"), root)
    record_workspace(root, ws, T1)
    document = json.loads(registry_path(root).read_text())
    forged = dict(document["workspaces"][ws.key.dirname])
    document["workspaces"]["tmp-w7-bootstrap-12345678"] = forged  # a leftover dir's name
    document["workspaces"]["../outside-00000000"] = forged
    document["workspaces"]["half-11111111"] = {"path": "/x"}
    registry_path(root).write_text(json.dumps(document))

    with capture_logs() as logs:
        entries = load_registry(root)

    assert [e.dirname for e in entries] == [ws.key.dirname]
    assert sum(e["event"] == "registry.bad_entry" for e in logs) == 3


def test_expected_dirname_follows_the_spec_vectors() -> None:
    assert expected_dirname("acme/widgets", "git") == "widgets-7d43613e"
    assert expected_dirname("example/demo", "git") == "demo-859248a6"
    assert expected_dirname("/users/me/work/xai", "path") == "xai-e193d8ce"
    assert expected_dirname("/x", "other") is None


def test_a_failed_write_returns_false_and_leaves_the_old_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "memory"
    first = resolve_workspace(_project(tmp_path, "first"), root)
    record_workspace(root, first, T1)
    before = registry_path(root).read_bytes()

    def full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files._fs, "replace", full)
    with capture_logs() as logs:
        ok = record_workspace(root, resolve_workspace(_project(tmp_path, "second"), root), T2)

    assert ok is False
    assert registry_path(root).read_bytes() == before
    assert any(e["event"] == "registry.write_failed" for e in logs)


def test_concurrent_records_from_threads_lose_no_workspace(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    spaces = [resolve_workspace(_project(tmp_path, f"p{i}"), root) for i in range(12)]
    threads = [threading.Thread(target=record_workspace, args=(root, ws, T1)) for ws in spaces]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {e.dirname for e in load_registry(root)} == {ws.key.dirname for ws in spaces}
