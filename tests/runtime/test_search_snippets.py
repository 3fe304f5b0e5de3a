"""A search hit's snippet shows the note that matched, though small notes share a chunk."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import Env, MemoryFactory

pytestmark = pytest.mark.anyio


async def test_a_note_deep_in_a_merged_chunk_is_in_its_snippet(
    env: Env, open_memory: MemoryFactory
) -> None:
    notes = [f"## Note k{i}q\n\nThe service k{i}q retries {i} times.\n" for i in range(40)]
    env.workspace.memory_file.write_text("# Memory\n\n" + "\n".join(notes), encoding="utf-8")
    memory = await open_memory()
    for i in (0, 17, 29, 39):
        hits = (await memory.search(f"k{i}q")).results
        assert hits, i
        # One chunk holds many notes (index.min_chunk_chars), longer than a snippet.
        assert any(h.end_line - h.start_line > 20 for h in hits), hits
        assert all(f"## Note k{i}q\n\nThe service k{i}q retries" in h.snippet for h in hits), (
            i,
            hits,
        )
