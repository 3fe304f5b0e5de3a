"""The embedding cache: unchanged text is never embedded twice, across reopenings and models."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from memoryd.providers.cache import CachedProvider
from memoryd.providers.embeddings import HashProvider
from memoryd.store.embedcache import EmbeddingCacheStore, pack_vector, unpack_vector


class CountingProvider:
    """The hash provider under another model id, recording every batch it is asked for."""

    def __init__(self, model_id: str = "counting-16", dims: int = 16) -> None:
        self._model_id = model_id
        self._hash = HashProvider(dims)
        self.calls: list[list[str]] = []

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dims(self) -> int:
        return self._hash.dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await anyio.lowlevel.checkpoint()
        return [self._hash.embed_one(t) for t in texts]


def cached(path: Path, inner: CountingProvider) -> CachedProvider:
    return CachedProvider(inner, EmbeddingCacheStore(path))


def same(a: list[list[float]], b: list[list[float]]) -> bool:
    return len(a) == len(b) and all(
        x == pytest.approx(y, abs=1e-6) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.anyio
async def test_unchanged_text_is_embedded_only_once(tmp_path: Path) -> None:
    inner = CountingProvider()
    provider = cached(tmp_path / "cache.sqlite", inner)
    first = await provider.embed(["alpha note", "beta note"])
    again = await provider.embed(["alpha note", "beta note"])
    mixed = await provider.embed(["beta note", "gamma note", "alpha note"])
    await provider.aclose()
    assert inner.calls == [["alpha note", "beta note"], ["gamma note"]]
    assert same(again, first)
    assert same(mixed, [first[1], inner._hash.embed_one("gamma note"), first[0]])
    assert (provider.hits, provider.misses) == (4, 3)


@pytest.mark.anyio
async def test_a_text_repeated_in_one_call_is_sent_once(tmp_path: Path) -> None:
    inner = CountingProvider()
    provider = cached(tmp_path / "cache.sqlite", inner)
    vectors = await provider.embed(["same", "other", "same"])
    await provider.aclose()
    assert inner.calls == [["same", "other"]]
    assert vectors[0] == vectors[2]


@pytest.mark.anyio
async def test_a_different_model_id_misses(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    old, new = CountingProvider("model-a@16"), CountingProvider("model-b@16")
    first, second = cached(path, old), cached(path, new)
    await first.embed(["a note"])
    await second.embed(["a note"])
    await first.aclose()
    await second.aclose()
    assert old.calls == [["a note"]]
    assert new.calls == [["a note"]]


@pytest.mark.anyio
async def test_the_cache_survives_reopening_so_a_rebuild_calls_no_provider(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".cache" / "embeddings.sqlite"
    texts = [f"chunk {i}: 部署 notes" for i in range(50)]
    before = cached(path, CountingProvider())
    vectors = await before.embed(texts)
    await before.aclose()

    inner = CountingProvider()
    after = cached(path, inner)
    again = await after.embed(texts)
    await after.aclose()
    assert inner.calls == []
    assert after.hits == 50
    assert same(again, vectors)


@pytest.mark.anyio
async def test_two_providers_can_share_one_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    one, two = CountingProvider(), CountingProvider()
    first, second = cached(path, one), cached(path, two)
    texts = [f"shared text {i}" for i in range(120)]

    async def work(provider: CachedProvider, offset: int) -> None:
        for start in range(0, len(texts), 8):
            rotated = texts[offset:] + texts[:offset]
            await provider.embed(rotated[start : start + 8])

    async with anyio.create_task_group() as tg:
        tg.start_soon(work, first, 0)
        tg.start_soon(work, second, 60)
    await first.aclose()
    await second.aclose()

    store = EmbeddingCacheStore(path)
    assert store.count("counting-16") == len(texts)
    store.close()
    inner = CountingProvider()
    third = cached(path, inner)
    await third.embed(texts)
    await third.aclose()
    assert inner.calls == []
    assert first.last_error is None and second.last_error is None


class LateDimsProvider(CountingProvider):
    """Like ``openai`` with ``dimensions = 0``: the id gains its dimension after one answer."""

    answered = False

    @property
    def model_id(self) -> str:
        return "late@16" if self.answered else "late"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await super().embed(texts)
        self.answered = True
        return vectors


@pytest.mark.anyio
async def test_answers_are_stored_under_the_id_the_provider_has_after_answering(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache.sqlite"
    inner = LateDimsProvider()
    provider = cached(path, inner)
    await provider.embed(["x", "y"])
    await provider.embed(["x", "y"])
    await provider.aclose()
    assert inner.calls == [["x", "y"]]
    store = EmbeddingCacheStore(path)
    assert (store.count("late@16"), store.count("late")) == (2, 0)
    store.close()


@pytest.mark.anyio
async def test_a_broken_cache_file_does_not_stop_embedding(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"this is not a database, just garbage " * 100)
    inner = CountingProvider()
    provider = cached(path, inner)
    vectors = await provider.embed(["still works"])
    await provider.aclose()
    assert same(vectors, [inner._hash.embed_one("still works")])
    assert provider.last_error is not None and "embedding cache" in provider.last_error


def test_vectors_round_trip_as_float32_blobs() -> None:
    vector = [0.5, -0.25, 1.0, 3.0e-8, -7.5]
    blob = pack_vector(vector)
    assert len(blob) == 4 * len(vector)
    assert blob[:4] == b"\x00\x00\x00\x3f"  # little-endian 0.5
    assert unpack_vector(blob) == pytest.approx(vector, rel=1e-6)
