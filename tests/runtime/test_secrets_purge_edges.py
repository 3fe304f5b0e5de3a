"""``secrets scan|purge`` at their edges (SPEC §18), through a real daemon.

- A memory file in UTF-16 (LE or BE, with its BOM) is indexed as text, so a secret in it is
  found by search; the scan read it as UTF-8 and found nothing, and the purge left it.
"""

from __future__ import annotations

import codecs
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
