"""Embedding providers: what turns text into vectors (SPEC §6).

A provider has a stable ``model_id`` (recorded in the index's ``meta`` so a change of model
or dimension is detected) and ``dims``, and one awaitable method, :meth:`embed`. Vectors are
L2-normalised by :func:`normalize` before they are stored or compared.

Models differ in where their cosines fall. A provider may declare its
:class:`~memoryd.core.ranking.SimilarityScale` (a ``similarity`` attribute, read by
:func:`similarity_scale`); the ranking calibrates its cosines onto the reference scale
(:func:`memoryd.core.ranking.calibrated_cosine`). Without one, cosines are used as they are.

The ``hash`` provider is deterministic feature hashing with blake3: words and their
character trigrams are hashed into ``dims`` signed buckets, so texts sharing words have
similar vectors. It is for tests and benchmarks only and is never chosen by ``auto``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, runtime_checkable

import blake3

from memoryd.core.ranking import REFERENCE_SCALE, SimilarityScale
from memoryd.core.text import WORD, is_cjk


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Anything that embeds a batch of texts into vectors of ``dims`` floats."""

    @property
    def model_id(self) -> str: ...

    @property
    def dims(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def similarity_scale(provider: object) -> SimilarityScale:
    """The provider's declared :class:`SimilarityScale`, else :data:`REFERENCE_SCALE`."""
    scale = getattr(provider, "similarity", None)
    return scale if isinstance(scale, SimilarityScale) else REFERENCE_SCALE


def normalize(vector: Sequence[float]) -> list[float]:
    """The L2-normalised copy of ``vector`` (a zero vector stays zero)."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0:
        return [0.0] * len(vector)
    return [x / norm for x in vector]


def _features(text: str) -> list[str]:
    feats: list[str] = []
    for word in WORD.findall(text.lower()):
        if any(is_cjk(ch) for ch in word):
            feats.extend(word[i : i + 2] for i in range(max(1, len(word) - 1)))
            continue
        feats.append(word)
        padded = f"^{word}$"
        feats.extend(padded[i : i + 3] for i in range(len(padded) - 2))
    return feats


class HashProvider:
    """Deterministic blake3 feature-hashing vectors; for tests and benchmarks, never a default."""

    def __init__(self, dims: int = 384) -> None:
        if dims <= 0:
            raise ValueError("dims must be positive")
        self._dims = dims

    @property
    def model_id(self) -> str:
        return f"hash-{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self._dims
        for feat in _features(text):
            digest = blake3.blake3(feat.encode()).digest(length=8)
            bucket = int.from_bytes(digest[:4], "little") % self._dims
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign
        return normalize(vector)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


def foreground(provider: object) -> AbstractContextManager[None]:
    """A context in which the provider puts a search's work first (its ``foreground()``, as
    the ``local`` model has: background batches wait); a no-op for other providers."""
    method = getattr(provider, "foreground", None)
    return method() if callable(method) else nullcontext()
