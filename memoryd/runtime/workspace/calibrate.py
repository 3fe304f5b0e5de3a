"""``index.calibrate`` / ``memoryd calibrate``: the embedding model's similarity scale measured
on this workspace's notes (issue #19; what is measured: :mod:`memoryd.core.calibration`).

A sample of :data:`SAMPLE` chunks is read in one DB phase, then up to :data:`PER_CHUNK` of
each one's titled notes are embedded (title and body) with no transaction open, and the
cosines are reduced in a worker thread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import anyio.to_thread

from memoryd.core.calibration import Calibration, measure, titled_notes
from memoryd.core.ranking import is_content_free
from memoryd.core.replies import CalibrateReply
from memoryd.errors import ModelNotConfigured
from memoryd.providers.embeddings import EmbeddingProvider, normalize, similarity_scale
from memoryd.runtime.workspace.memory import WorkspaceMemory

SAMPLE = 120
PER_CHUNK = 4  # titled notes measured per sampled chunk (a chunk may hold a few small notes)
MAX_NOTES = 240  # at most this many (the pairs grow with its square)


async def calibrate(memory: WorkspaceMemory, sample: int = SAMPLE) -> CalibrateReply:
    """Measure the provider's scale on up to ``sample`` chunks of ``memory``'s index."""
    provider = memory.provider
    if provider is None or not memory.provider_ready:
        raise ModelNotConfigured(
            "calibrate needs an embedding provider (embedding.provider is none, or the "
            "endpoint has not answered yet)"
        )
    rows = await memory.db_phase(memory.index.sample_texts, sample)
    notes = [
        (path, note)
        for path, text in rows
        if not is_content_free(text)
        for note in titled_notes(text)[:PER_CHUNK]
    ][:MAX_NOTES]
    batch = memory.config.embedding.batch_size
    titles = await _embed(provider, [title for _, (title, _) in notes], batch)
    bodies = await _embed(provider, [body for _, (_, body) in notes], batch)
    result = await anyio.to_thread.run_sync(_measure, [p for p, _ in notes], titles, bodies)
    scale = similarity_scale(provider)
    return CalibrateReply(
        model_id=provider.model_id,
        unrelated=_round(result.unrelated),
        strong=_round(result.strong),
        unrelated_p90=_round(result.unrelated_p90),
        pairs=result.pairs,
        halves=result.halves,
        problem=result.problem,
        config_lines=result.config_lines(),
        in_use={"unrelated": scale.unrelated, "strong": scale.strong},
    )


async def _embed(provider: EmbeddingProvider, texts: list[str], batch: int) -> list[list[float]]:
    """Unit vectors for ``texts``, ``batch`` at a time (the provider times each call)."""
    out: list[list[float]] = []
    for start in range(0, len(texts), batch):
        part = texts[start : start + batch]
        vectors = await provider.embed(part)
        if len(vectors) != len(part):
            raise ValueError("the provider answered the wrong number of vectors")
        out.extend(normalize(v) for v in vectors)
    return out


def _measure(
    paths: Sequence[str], titles: Sequence[list[float]], bodies: Sequence[list[float]]
) -> Calibration:
    pairs = [
        _dot(titles[i], bodies[j])
        for i in range(len(titles))
        for j in range(len(bodies))
        if paths[i] != paths[j]
    ]
    own = [_dot(t, b) for t, b in zip(titles, bodies, strict=True)]
    return measure(pairs, own)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
