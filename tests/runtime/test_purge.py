"""``secrets purge`` of one workspace's memory, index and embedding cache (SPEC §18)."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from memoryd.core.secrets import scrubber
from memoryd.providers.cache import CachedProvider, text_key
from memoryd.providers.embeddings import HashProvider
from memoryd.runtime.workspace.purge import purge_workspace, scan_workspace
from memoryd.store.embedcache import EmbeddingCacheStore
from tests.runtime.conftest import Env, MemoryFactory

pytestmark = pytest.mark.anyio

RNG = random.Random(18)
TOKEN = "ghp_" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(36))
# Each section is long enough (index.min_chunk_chars) to be a chunk of its own.
CLEAN = (
    "## Build\n\nThe build uses `make -j4` and gcc 13. Release builds add -O2 and strip the"
    " binaries; debug builds keep symbols and turn on the address sanitizer. A clean build"
    " takes about four minutes on the CI runners.\n"
)
LEAKY = (
    f"## Deploy\n\nThe deploy bot authenticates with {TOKEN} for now. It pushes the"
    " release image to the registry, tags it with the commit id and restarts the staging"
    " service; production waits for a manual approval.\n"
)


async def test_purge_drops_the_affected_chunks_vectors_and_cache_entries(
    env: Env, open_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = EmbeddingCacheStore(tmp_path / "cache" / "embeddings.sqlite")
    provider = CachedProvider(HashProvider(16), store)
    env.workspace.memory_file.write_text(f"# Memory\n\n{CLEAN}\n{LEAKY}", encoding="utf-8")
    memory = await open_memory(provider)
    await memory.sync_paths([env.workspace.memory_file])
    while await memory.embed_pending():
        pass
    texts = [t for (t,) in memory.index.conn.execute("SELECT text FROM chunks")]
    leaky = [t for t in texts if TOKEN in t]
    clean = [t for t in texts if TOKEN not in t]
    assert leaky and clean
    assert store.get_many(provider.model_id, [text_key(t) for t in leaky])

    s = scrubber()
    [found] = await scan_workspace(memory, s)
    assert found.path == env.workspace.memory_file and found.findings[0].kind == "github-token"
    out = await purge_workspace(memory, s)

    assert out["files"] == [env.workspace.memory_file.relative_to(env.root).as_posix()]
    assert out["redacted"] == 1 and out["chunks_dropped"] == len(leaky)
    assert out["cache_entries_dropped"] == len(leaky)
    assert not store.get_many(provider.model_id, [text_key(t) for t in leaky])
    assert store.get_many(provider.model_id, [text_key(t) for t in clean])  # kept
    text = env.workspace.memory_file.read_text(encoding="utf-8")
    assert TOKEN not in text and "[REDACTED:github-token:" in text and CLEAN in text
    now = [t for (t,) in memory.index.conn.execute("SELECT text FROM chunks")]
    assert not any(TOKEN in t for t in now) and any("[REDACTED:" in t for t in now)
    assert TOKEN.encode() not in env.workspace.index_path.read_bytes()
    assert await scan_workspace(memory, s) == []
    store.close()
