"""The embedding cache in front of any provider: unchanged text is never embedded twice (SPEC §6).

:class:`CachedProvider` looks each text up by (``inner.model_id``, blake3 of the text) in an
:class:`~memoryd.store.embedcache.EmbeddingCacheStore` and sends only the misses to the inner
provider, in one call, in order (a text repeated within a call is sent once). The answers are
stored under the inner provider's model id, so a different model or dimension never reuses
them. Store calls run in a worker thread.

A broken cache file must not stop embedding: a store failure is remembered in
:attr:`CachedProvider.last_error` and the call goes on as if nothing were cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import anyio.to_thread
import blake3

from memoryd.core.ranking import SimilarityScale
from memoryd.errors import EmbeddingError, StorageError
from memoryd.providers.embeddings import EmbeddingProvider, foreground, similarity_scale
from memoryd.store.embedcache import EmbeddingCacheStore


@runtime_checkable
class Probing(Protocol):
    """A provider that must answer once before its dimension is known (``openai``)."""

    @property
    def dims_known(self) -> bool: ...

    async def probe(self) -> int: ...


@runtime_checkable
class Closing(Protocol):
    """A provider holding a resource (an HTTP client) to release at shutdown."""

    async def aclose(self) -> None: ...


def text_key(text: str) -> bytes:
    """The cache key of a text: its blake3 digest."""
    return blake3.blake3(text.encode("utf-8", "surrogatepass")).digest()


class CachedProvider:
    """``inner`` behind a (model id, text hash) → vector cache; counts hits and misses."""

    def __init__(self, inner: EmbeddingProvider, store: EmbeddingCacheStore) -> None:
        self.inner = inner
        self.store = store
        self.hits = 0  # input texts answered from the cache
        self.misses = 0  # distinct texts sent to the inner provider
        self.last_error: str | None = None  # the last cache (store) failure, if any

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dims(self) -> int:
        return self.inner.dims

    @property
    def dims_known(self) -> bool:
        return self.inner.dims_known if isinstance(self.inner, Probing) else True

    @property
    def similarity(self) -> SimilarityScale:
        return similarity_scale(self.inner)

    def foreground(self) -> AbstractContextManager[None]:
        """The inner provider's :func:`~memoryd.providers.embeddings.foreground`."""
        return foreground(self.inner)

    async def probe(self) -> int:
        """Probe the inner provider when it needs it; returns the dimension."""
        if isinstance(self.inner, Probing) and not self.inner.dims_known:
            return await self.inner.probe()
        return self.inner.dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        batch = list(texts)
        if not batch:
            return []
        model_id = self.inner.model_id
        keys = [text_key(t) for t in batch]
        found = await self._lookup(model_id, keys)
        if found and self.dims_known:  # belt and braces: a model id that hides its dimension
            found = {k: v for k, v in found.items() if len(v) == self.inner.dims}
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, batch, strict=True):
            if key not in found:
                missing.setdefault(key, text)
        self.hits += sum(1 for key in keys if key in found)
        if missing:
            fresh = await self.inner.embed(list(missing.values()))
            if len(fresh) != len(missing):
                raise EmbeddingError(
                    f"{self.inner.model_id} answered {len(fresh)} vectors for {len(missing)} texts"
                )
            self.misses += len(missing)
            answered = dict(zip(missing, fresh, strict=True))
            # Read the id again: a provider's first answer may fix its dimension (openai).
            await self._remember(self.inner.model_id, list(answered.items()))
            found.update(answered)
        return [found[key] for key in keys]

    async def aclose(self) -> None:
        if isinstance(self.inner, Closing):
            await self.inner.aclose()
        await anyio.to_thread.run_sync(self.store.close)

    async def _lookup(self, model_id: str, keys: list[bytes]) -> dict[bytes, list[float]]:
        try:
            return await anyio.to_thread.run_sync(self.store.get_many, model_id, keys)
        except StorageError as exc:
            self.last_error = str(exc)
            return {}

    async def _remember(self, model_id: str, items: list[tuple[bytes, list[float]]]) -> None:
        try:
            await anyio.to_thread.run_sync(self.store.put_many, model_id, items)
        except StorageError as exc:
            self.last_error = str(exc)
