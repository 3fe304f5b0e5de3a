"""``secrets scan|purge`` at their edges (SPEC §18), through a real daemon.

- A memory file in UTF-16 (LE or BE, with its BOM) is indexed as text, so a secret in it is
  found by search; the scan read it as UTF-8 and found nothing, and the purge left it.
- A file over 64 MiB is neither scanned nor redacted; ``secrets.purge`` with ``all`` named
  the workspaces' ones but not the global memory's (or those of a workspace it could not
  serve), so "nothing left" was reported for a memory root holding one.
"""

from __future__ import annotations

import codecs
import shutil
from pathlib import Path

import pytest

from bench.secrets_corpus import planted
from memoryd.store.layout import ensure_workspace_dirs, resolve_workspace
from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)

pytestmark = pytest.mark.anyio

HASH_EMBEDDINGS = '[embedding]\nprovider = "hash"\n'
TOO_LARGE = 70 * 1024 * 1024  # over the scan's 64 MiB
ENCODINGS = (("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE))


async def test_a_secret_in_a_utf16_file_is_scanned_and_purged_in_its_encoding(
    home: Path,
) -> None:
    tokens = [p for p in planted(per_kind=2, seed=1616) if p.kind == "github-token"]
    ws_path = project(home, "wide")
    ws = resolve_workspace(ws_path, home / "memory")
    ensure_workspace_dirs(ws)
    files: dict[Path, tuple[str, bytes, str]] = {}
    for n, ((encoding, bom), token) in enumerate(zip(ENCODINGS, tokens, strict=False)):
        value = token.values[0]
        path = ws.sessions_dir / f"2026-03-0{n + 1}-wide-{encoding}.md"
        text = f"# Session\n\nThe quokka{n} deploy used GITHUB_TOKEN={value} from the vault.\n"
        path.write_bytes(bom + text.encode(encoding))
        files[path] = (encoding, bom, value)
    assert len(files) == 2
    async with in_process_daemon(config=HASH_EMBEDDINGS) as d:
        await d.call("index.reindex", workspace=str(ws_path))
        for path, (_encoding, _bom, value) in files.items():
            found = await d.search(ws_path, value, min_score=0.0)
            assert any(value in r["snippet"] for r in found["results"]), (path.name, found)

        scanned = await d.call("secrets.scan", workspace=str(ws_path))
        listed = {f["path"].rsplit("/", 1)[-1]: f["findings"] for f in scanned["files"]}
        for path in files:
            assert [(f["line"], f["kind"]) for f in listed.get(path.name, [])] == [
                (3, "github-token")
            ], scanned

        purged = await d.call("secrets.purge", workspace=str(ws_path))
        [result] = purged["workspaces"]
        assert {f.rsplit("/", 1)[-1] for f in result["files"]} == {p.name for p in files}
        assert result["redacted"] == 2

        for n, (path, (encoding, bom, value)) in enumerate(files.items()):
            data = path.read_bytes()
            assert data.startswith(bom)
            text = data[len(bom) :].decode(encoding)  # strict: still valid UTF-16
            assert value not in text and "[REDACTED:github-token:" in text
            assert text.startswith(f"# Session\n\nThe quokka{n} deploy used GITHUB_TOKEN=")
            assert text.endswith(" from the vault.\n")
            after = await d.search(ws_path, value, min_score=0.0)
            assert value not in str(after)
            kept = await d.search(ws_path, f"quokka{n}", min_score=0.0)
            assert any(path.name in r["path"] for r in kept["results"]), kept
        again = await d.call("secrets.scan", workspace=str(ws_path))
        assert again["findings"] == 0, again


def sparse_log_with_a_secret(path: Path) -> str:
    """A file over 64 MiB (sparse: no disk used) whose first line holds a planted token."""
    value = next(p for p in planted(per_kind=1, seed=6464) if p.kind == "github-token").values[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.write(f"# Pasted\n\nGITHUB_TOKEN={value}\n".encode())
        handle.truncate(TOO_LARGE)
    return value


async def test_purge_all_names_the_global_files_too_large_to_scan(home: Path) -> None:
    root = home / "memory"
    big = root / "pasted-build-log.md"
    sparse_log_with_a_secret(big)
    ws_path = project(home, "shop")
    async with in_process_daemon() as d:
        await d.call("memory.files", workspace=str(ws_path))  # a registered workspace too
        scanned = await d.call("secrets.scan", all=True)
        assert scanned["too_large"] == [big.name], scanned
        purged = await d.call("secrets.purge", all=True)
    assert purged["global"].get("too_large") == [big.name], purged
    [entry] = purged["workspaces"]
    assert "too_large" not in entry, purged  # listed once, where it lies
    assert big.stat().st_size == TOO_LARGE  # named, not rewritten


async def test_purge_all_names_the_large_files_of_a_workspace_it_cannot_serve(
    home: Path,
) -> None:
    ws_path = project(home, "gone")
    ws = resolve_workspace(ws_path, home / "memory")
    async with in_process_daemon() as d:
        await d.call("memory.files", workspace=str(ws_path))  # registered
    shutil.rmtree(ws_path)
    big = ws.sessions_dir / "2026-11-30-pasted-logs.md"
    sparse_log_with_a_secret(big)
    async with in_process_daemon() as d:
        purged = await d.call("secrets.purge", all=True)
    [entry] = purged["workspaces"]
    assert entry.get("index_removed") is True, purged
    assert [f for f in entry.get("too_large", []) if f.endswith(big.name)], purged
    assert "too_large" not in purged["global"], purged
