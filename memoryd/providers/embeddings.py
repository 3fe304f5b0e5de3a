"""Embedding providers: what turns text into vectors (SPEC §6).

A provider has a stable ``model_id`` (recorded in the index's ``meta`` so a change of model
or dimension is detected) and ``dims``, and one awaitable method, :meth:`embed`. Vectors are
L2-normalised by :func:`normalize` before they are stored or compared.

Models differ in where their cosines fall: the ranking of SPEC §5 assumes unrelated texts
near 0.5 and a strong paraphrase near 0.8 (the :data:`REFERENCE_SCALE`), while USE
multilingual, say, puts unrelated notes near 0.1 and a question next to its answer at
0.3–0.45. A provider may declare its :class:`SimilarityScale` (a ``similarity`` attribute);
:func:`calibrated_cosine` maps its cosines onto the reference scale before ranking, so
``min_score`` means the same with every model. Without one, cosines are used as they are.

The ``hash`` provider is deterministic feature hashing with blake3: words and their
character trigrams are hashed into ``dims`` signed buckets, so texts sharing words have
similar vectors. It is for tests and benchmarks only and is never chosen by ``auto``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import blake3

from memoryd.core.keywords import is_cjk


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Anything that embeds a batch of texts into vectors of ``dims`` floats."""

    @property
    def model_id(self) -> str: ...

    @property
    def dims(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@dataclass(frozen=True, slots=True)
class SimilarityScale:
    """Where a model's cosines fall: ``unrelated`` texts of one project, a ``strong`` match."""

    unrelated: float
    strong: float

    def __post_init__(self) -> None:
        if not 0.0 < self.unrelated < self.strong < 1.0:
            raise ValueError("a similarity scale needs 0 < unrelated < strong < 1")


REFERENCE_SCALE = SimilarityScale(unrelated=0.5, strong=0.8)
"""The scale the ranking of SPEC §5 is written for (its vector-only floor and strong match)."""


def calibrated_cosine(cosine: float, scale: SimilarityScale) -> float:
    """``cosine`` of a model with ``scale`` moved onto :data:`REFERENCE_SCALE`, in [0, 1].

    Piecewise linear and increasing: [0, unrelated] → [0, 0.5], [unrelated, strong] →
    [0.5, 0.8], and on at the same slope up to 1. The reference scale maps to itself.
    """
    ref = REFERENCE_SCALE
    if cosine <= scale.unrelated:
        value = ref.unrelated * max(cosine, 0.0) / scale.unrelated
    else:
        slope = (ref.strong - ref.unrelated) / (scale.strong - scale.unrelated)
        value = ref.unrelated + (cosine - scale.unrelated) * slope
    return min(1.0, max(0.0, value))


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


_WORD = re.compile(r"\w+", re.UNICODE)


def _features(text: str) -> list[str]:
    feats: list[str] = []
    for word in _WORD.findall(text.lower()):
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
