"""The scoring core of hybrid search (SPEC §5 steps 4–6): pure values in, values out.

The search orchestrator gathers raw hits (FTS5 ``bm25()`` values and sqlite-vec L2
distances) as :class:`Candidate` values and hands them to :func:`rank`, which

1. combines the two hits of one chunk (keyword and vector) by ``chunk_id``;
2. drops content-free chunks (whitespace, HTML comments, scaffold templates);
3. normalises BM25 within the remaining keyword hits (:func:`normalize_bm25`) and turns
   distances into cosines (:func:`cosine_from_l2`) on the reference scale
   (:func:`calibrated_cosine`, for a model whose cosines run lower);
4. merges both signals into a **relevance** in [0, 1] (:func:`merge`) and keeps only
   chunks whose relevance reaches ``min_score``;
5. computes the ordering **score** = relevance × decay (session chunks only,
   :func:`decay_factor`) × source weight × access boost (:func:`access_boost`);
6. orders by score, optionally re-ranks with :func:`mmr`, and cuts to ``max_results``.

``min_score`` is a relevance threshold on purpose: decay, weights and boost *order*
results, they never make a relevant chunk vanish. So an old session log that is the only
relevant hit is still returned, and a source weight of 0 sinks that source's chunks to the
bottom (score 0) without removing them — exclude a source with the search's ``sources``
filter instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from memoryd.core.markdown import strip_comments
from memoryd.core.templates import is_scaffold
from memoryd.core.text import words_and_bigrams

SECONDS_PER_DAY = 86_400.0
ACCESS_BOOST_RATE = 0.05
VECTOR_ONLY_FLOOR = 0.5
"""Cosine at or below which a vector-only hit scores 0 (see :func:`vector_only_score`)."""

EVERGREEN_SOURCES = frozenset({"global", "workspace"})
DECAYING_SOURCE = "session"


@dataclass(frozen=True, slots=True)
class SimilarityScale:
    """Where a model's cosines fall: ``unrelated`` texts of one project, a ``strong`` match.

    Models differ: the ranking assumes unrelated texts near 0.5 and a strong paraphrase near
    0.8 (:data:`REFERENCE_SCALE`), while USE multilingual, say, puts unrelated notes near 0.1
    and a question next to its answer at 0.3–0.45. An embedding provider may declare its
    scale; :func:`rank` maps its cosines onto the reference scale, so ``min_score`` means the
    same with every model.
    """

    unrelated: float
    strong: float

    def __post_init__(self) -> None:
        if not 0.0 < self.unrelated < self.strong < 1.0:
            raise ValueError("a similarity scale needs 0 < unrelated < strong < 1")


REFERENCE_SCALE = SimilarityScale(unrelated=VECTOR_ONLY_FLOOR, strong=0.8)
"""The scale the ranking of SPEC §5 is written for (its vector-only floor and strong match)."""


def _default_source_weights() -> Mapping[str, float]:
    return MappingProxyType({"global": 1.0, "workspace": 1.0, "session": 1.0})


@dataclass(frozen=True, slots=True)
class Candidate:
    """One raw hit from the index, as the orchestrator read it.

    A chunk may arrive twice (once from FTS with ``bm25`` set, once from KNN with
    ``distance`` set); :func:`rank` combines the two by ``chunk_id``.
    """

    chunk_id: str
    path: str
    """Relative to the memory root."""
    start_line: int
    end_line: int
    heading: str
    text: str
    source: str
    """``"global"``, ``"workspace"`` or ``"session"``."""
    chunk_time: float | None
    """Epoch seconds (UTC); ``None`` = unknown, never decayed."""
    access_count: int
    bm25: float | None
    """Raw FTS5 ``bm25()`` value (lower = better, usually negative); ``None`` = no keyword hit."""
    distance: float | None
    """L2 distance between unit vectors from sqlite-vec; ``None`` = no vector hit."""


@dataclass(frozen=True, slots=True)
class RankParams:
    """The knobs of SPEC §5 with their defaults."""

    max_results: int = 6
    min_score: float = 0.35
    text_weight: float = 0.3
    vector_weight: float = 0.7
    half_life_days: float = 30.0
    source_weights: Mapping[str, float] = field(default_factory=_default_source_weights)
    """Multiplies the final score; a source missing from the mapping weighs 1.0."""
    mmr_enabled: bool = False
    mmr_lambda: float = 0.7
    similarity: SimilarityScale = REFERENCE_SCALE
    """The embedding model's scale; its cosines are calibrated onto :data:`REFERENCE_SCALE`."""


@dataclass(frozen=True, slots=True)
class Ranked:
    """A result of :func:`rank`."""

    candidate: Candidate
    relevance: float
    """Merged score before decay, weights and boost, in [0, 1]; ``min_score`` applies here."""
    score: float
    """Full unclamped score used for ordering."""
    reported_score: float
    """``score`` clamped to [0, 1], the number shown to callers."""


def _clamp01(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, value))


def normalize_bm25(values: Sequence[float]) -> list[float]:
    """Normalise raw FTS5 ``bm25()`` values to [0, 1] within one candidate set, best = 1.

    FTS5's ``bm25()`` is lower-is-better and negative for a match. Each value becomes a
    strength ``r = max(−value, 0)`` and is divided by the strongest one:
    ``normalized = r / max(r)``. The best hit gets 1.0 and every other hit keeps its
    proportion of the best (half the BM25 strength → 0.5), so a weaker but genuine keyword
    hit is not pushed to 0 as min-max scaling would do to the worst hit of every set.
    If no value has positive strength (all ``≥ 0``), every hit is equally best and gets 1.0.
    NaN counts as strength 0; an infinite strength wins outright (1.0, the rest 0.0).
    """
    strengths = [0.0 if math.isnan(v) else max(-v, 0.0) for v in values]
    if not strengths:
        return []
    best = max(strengths)
    if best == 0.0:
        return [1.0] * len(strengths)
    if math.isinf(best):
        return [1.0 if math.isinf(s) else 0.0 for s in strengths]
    return [_clamp01(s / best) for s in strengths]


def cosine_from_l2(distance: float) -> float:
    """Cosine similarity from the L2 distance of two unit vectors: ``1 − d²/2`` in [0, 1]."""
    return _clamp01(1.0 - distance * distance / 2.0)


def calibrated_cosine(cosine: float, scale: SimilarityScale) -> float:
    """``cosine`` of a model with ``scale`` moved onto :data:`REFERENCE_SCALE`, in [0, 1].

    Piecewise linear and increasing: [0, unrelated] → [0, 0.5], [unrelated, strong] →
    [0.5, 0.8], and on at the same slope up to 1. The reference scale maps to itself.
    """
    if scale == REFERENCE_SCALE:
        return _clamp01(cosine)
    ref = REFERENCE_SCALE
    if cosine <= scale.unrelated:
        value = ref.unrelated * max(cosine, 0.0) / scale.unrelated
    else:
        slope = (ref.strong - ref.unrelated) / (scale.strong - scale.unrelated)
        value = ref.unrelated + (cosine - scale.unrelated) * slope
    return _clamp01(value)


def vector_only_score(cosine: float) -> float:
    """Relevance of a chunk found only by vector search: ``clamp((cos − 0.5) / 0.5, 0, 1)``.

    Raw cosines of unrelated texts are rarely near 0 (0.3–0.6 is common), so the raw value
    cannot be compared with a normalised keyword score. This rescales the useful band
    [0.5, 1] onto [0, 1]: a strong semantic match (cosine 0.8 → 0.6) passes the default
    ``min_score`` 0.35, a weak one (cosine 0.6 → 0.2) does not; the cut-over at the
    default threshold is cosine 0.675.
    """
    return _clamp01((cosine - VECTOR_ONLY_FLOOR) / (1.0 - VECTOR_ONLY_FLOOR))


def merge(fts: float | None, vec: float | None, text_weight: float, vector_weight: float) -> float:
    """Relevance in [0, 1] from a normalised keyword score and/or a cosine.

    Both: ``max(text_weight·fts + vector_weight·vec, fts)`` — adding vectors never lowers
    a keyword hit. Keyword only: ``fts``. Vector only: :func:`vector_only_score`.
    Neither: 0. Inputs are clamped to [0, 1], and so is the result (which keeps it
    ``≥ fts``, since ``fts ≤ 1``).
    """
    if fts is None and vec is None:
        return 0.0
    if vec is None:
        assert fts is not None
        return _clamp01(fts)
    if fts is None:
        return vector_only_score(vec)
    keyword = _clamp01(fts)
    weighted = text_weight * keyword + vector_weight * _clamp01(vec)
    return _clamp01(max(weighted, keyword))


def decay_factor(age_days: float, half_life_days: float) -> float:
    """``exp(−ln2 · age / half_life)``: 0.5 at one half-life.

    A half-life of 0 (or less) means no decay (1.0); a negative age (a chunk from the
    future, clock skew) is treated as fresh (1.0).
    """
    if half_life_days <= 0.0 or age_days <= 0.0:
        return 1.0
    return math.exp(-math.log(2.0) * age_days / half_life_days)


def access_boost(access_count: int) -> float:
    """A modest boost for chunks callers have used: ``1 + 0.05·ln(1 + count)`` (≥ 1)."""
    return 1.0 + ACCESS_BOOST_RATE * math.log1p(max(access_count, 0))


def is_content_free(text: str) -> bool:
    """True for text a search must never return.

    That is text of only whitespace and/or HTML comments, or a scaffold template
    (:func:`memoryd.core.templates.is_scaffold`), possibly with comments around it. A
    section that is only a heading (``## Use pnpm``) is content: a one-line ``remember``
    is stored that way.
    """
    stripped = strip_comments(text)
    return not stripped.strip() or is_scaffold(stripped) or is_scaffold(text)


def snippet_tokens(text: str) -> frozenset[str]:
    """The token set MMR compares: lowercase words, CJK runs as character bigrams."""
    words, bigrams = words_and_bigrams(text.lower())
    return frozenset(words).union(bigrams)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def mmr(ranked: Sequence[Ranked], lambda_: float, k: int) -> list[Ranked]:
    """Greedy maximal-marginal-relevance re-ranking; returns at most ``k`` items.

    Each step picks the item maximising
    ``λ·relevance − (1−λ)·max Jaccard(snippet tokens, already chosen)``.
    Here *relevance* is the item's full ordering score divided by the best score in
    ``ranked`` (so it lies in [0, 1] like the Jaccard term and keeps decay, source weights
    and access boost in force); when no score is positive, the merged relevance is used.
    Ties go to the earlier item, so with ``λ = 1`` the order is the input order (expected
    to be sorted by score, as :func:`rank` does).
    """
    if k <= 0 or not ranked:
        return []
    top = max(r.score for r in ranked)
    if top > 0.0:
        base = [_clamp01(r.score / top) for r in ranked]
    else:
        base = [r.relevance for r in ranked]
    tokens = [snippet_tokens(r.candidate.text) for r in ranked]
    remaining = list(range(len(ranked)))
    chosen: list[int] = []
    while remaining and len(chosen) < k:
        best_index = remaining[0]
        best_value = -math.inf
        for i in remaining:
            overlap = max((_jaccard(tokens[i], tokens[j]) for j in chosen), default=0.0)
            value = lambda_ * base[i] - (1.0 - lambda_) * overlap
            if value > best_value:
                best_index, best_value = i, value
        chosen.append(best_index)
        remaining.remove(best_index)
    return [ranked[i] for i in chosen]


def _combine(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per chunk id, in first-seen order, keeping the best of each signal."""
    by_id: dict[str, Candidate] = {}
    for cand in candidates:
        seen = by_id.get(cand.chunk_id)
        if seen is None:
            by_id[cand.chunk_id] = cand
            continue
        by_id[cand.chunk_id] = replace(
            seen,
            chunk_time=seen.chunk_time if seen.chunk_time is not None else cand.chunk_time,
            access_count=max(seen.access_count, cand.access_count),
            bm25=_best(seen.bm25, cand.bm25),
            distance=_best(seen.distance, cand.distance),
        )
    return list(by_id.values())


def _best(a: float | None, b: float | None) -> float | None:
    """The lower (better) of two optional lower-is-better values."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _weight(cand: Candidate, params: RankParams, now: float) -> float:
    """Decay (session only) × source weight × access boost."""
    decay = 1.0
    if cand.source == DECAYING_SOURCE and cand.chunk_time is not None:
        decay = decay_factor((now - cand.chunk_time) / SECONDS_PER_DAY, params.half_life_days)
    source_weight = params.source_weights.get(cand.source, 1.0)
    return decay * source_weight * access_boost(cand.access_count)


def rank(candidates: Iterable[Candidate], params: RankParams, now: float) -> list[Ranked]:
    """Score, filter, order and cut raw hits as SPEC §5 steps 4–6 say (see module doc).

    ``now`` is epoch seconds (UTC). Candidates with neither a keyword nor a vector hit are
    dropped. Ordering is by score, ties by relevance, then by ``chunk_id``, so the result
    is deterministic for any input order.
    """
    combined = [
        c
        for c in _combine(candidates)
        if (c.bm25 is not None or c.distance is not None) and not is_content_free(c.text)
    ]
    keyword_hits = [c for c in combined if c.bm25 is not None]
    fts_scores = dict(
        zip(
            (c.chunk_id for c in keyword_hits),
            normalize_bm25([c.bm25 for c in keyword_hits if c.bm25 is not None]),
            strict=True,
        )
    )
    results: list[Ranked] = []
    for cand in combined:
        vec = (
            calibrated_cosine(cosine_from_l2(cand.distance), params.similarity)
            if cand.distance is not None
            else None
        )
        relevance = merge(
            fts_scores.get(cand.chunk_id), vec, params.text_weight, params.vector_weight
        )
        if relevance < params.min_score:
            continue
        score = relevance * _weight(cand, params, now)
        if math.isnan(score):
            score = 0.0
        results.append(Ranked(cand, relevance, score, _clamp01(score)))
    results.sort(key=lambda r: (-r.score, -r.relevance, r.candidate.chunk_id))
    if params.mmr_enabled:
        return mmr(results, params.mmr_lambda, params.max_results)
    return results[: max(params.max_results, 0)]
