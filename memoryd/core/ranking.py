"""The scoring core of hybrid search (SPEC §5 steps 4–6): pure values in, values out.

The search orchestrator gathers raw hits (FTS5 ``bm25()`` values and sqlite-vec L2
distances) as :class:`Candidate` values and hands them to :func:`rank`, which

1. combines the two hits of one chunk (keyword and vector) by ``chunk_id``;
2. drops content-free chunks (whitespace, HTML comments, scaffold templates);
3. scores keyword hits on an **absolute** scale (:func:`keyword_score`: BM25 measured in
   units of the IDF of a term found in one chunk of this index — never relative to the best
   hit of the query) and vector hits by their calibrated cosine (:func:`vector_score`,
   after :func:`calibrated_cosine` for a model whose cosines run lower);
4. fuses both into a **relevance** in [0, 1] (:func:`merge`, a noisy-OR: either signal alone
   counts in full, agreement counts more) and keeps only chunks whose relevance reaches
   ``min_score``;
5. computes the ordering **score** = relevance × a *bounded* recency factor (session chunks
   only, :func:`recency_factor`: at most :data:`RECENCY_WEIGHT` of the score) × source
   weight × a capped access boost (:func:`access_boost`);
6. orders by score, optionally re-ranks with :func:`mmr`, cuts to ``max_results`` and keeps
   every strong keyword match that FTS alone would have returned (:data:`STRONG_KEYWORD`).

``min_score`` is a relevance threshold on purpose: decay, weights and boost *order*
results, they never make a relevant chunk vanish. So an old session log that is the only
relevant hit is still returned, and a source weight of 0 sinks that source's chunks to the
bottom (score 0) without removing them — exclude a source with the search's ``sources``
filter instead. Recency and the access boost are bounded so they only reorder chunks of
similar relevance: a chunk more than ``ACCESS_BOOST_MAX / (1 − RECENCY_WEIGHT)`` (≈ 1.17×)
as relevant as another is never ranked below it because of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from memoryd.core.config import SearchConfig
from memoryd.core.markdown import strip_comments
from memoryd.core.templates import is_scaffold
from memoryd.core.text import words_and_bigrams

SECONDS_PER_DAY = 86_400.0
ACCESS_BOOST_RATE = 0.05
ACCESS_BOOST_MAX = 1.05
"""The access boost never lifts a chunk by more than 5 %."""
RECENCY_WEIGHT = 0.1
"""The share of a session chunk's score that recency decides (see :func:`recency_factor`)."""
VECTOR_ONLY_FLOOR = 0.5
"""Calibrated cosine at or below which a vector hit scores 0 (see :func:`vector_score`)."""
VECTOR_UNIT = 0.15
"""Calibrated cosine above :data:`VECTOR_ONLY_FLOOR` worth one rare keyword matched (see
:func:`vector_score`): a paraphrase halfway to a strong match."""
STRONG_KEYWORD = 0.8
"""A keyword score from here up is a strong (exact) keyword match: adding vectors never drops
such a hit out of the results FTS alone would have returned."""
REFERENCE_ROWS = 1000
"""The index size assumed when the caller does not know it (see :func:`keyword_score`)."""
SMALL_INDEX_ROWS = 16
"""Below this many rows, BM25's IDF cannot tell a specific term from a common one."""
SMALL_INDEX_SCORE = 0.5
"""The least score of a keyword match in a small index."""
NO_INFORMATION_BM25 = -1e-4
"""A ``bm25()`` above this (closer to 0) matched only terms in half the chunks or more, whose
IDF FTS5 clamps to 1e-6 (a name said in every session of a chat): from
:data:`SMALL_INDEX_ROWS` rows up, such a chunk is no keyword match at all, even at
``min_score`` 0 (see :func:`rank`)."""

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


_SEARCH = SearchConfig()  # RankParams' defaults are the [search] defaults


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

    max_results: int = _SEARCH.max_results
    min_score: float = _SEARCH.min_score
    text_weight: float = _SEARCH.text_weight
    """Scales the keyword score before fusion (see :func:`merge`)."""
    vector_weight: float = _SEARCH.vector_weight
    """Scales the vector score before fusion."""
    half_life_days: float = _SEARCH.half_life_days
    source_weights: Mapping[str, float] = field(default_factory=lambda: _SEARCH.source_weights)
    """Multiplies the final score; a source missing from the mapping weighs 1.0."""
    mmr_enabled: bool = _SEARCH.mmr.enabled
    mmr_lambda: float = _SEARCH.mmr.lambda_
    similarity: SimilarityScale = REFERENCE_SCALE
    """The embedding model's scale; its cosines are calibrated onto :data:`REFERENCE_SCALE`."""
    corpus_rows: int = 0
    """Rows in the index's FTS table (what its BM25 IDFs were computed over); 0 = unknown,
    :data:`REFERENCE_ROWS` is assumed."""

    @classmethod
    def of(
        cls,
        search: SearchConfig,
        max_results: int | None,
        min_score: float | None,
        similarity: SimilarityScale = REFERENCE_SCALE,
    ) -> RankParams:
        """The ``[search]`` settings, with a request's ``max_results``/``min_score``."""
        return cls(
            max_results=max_results if max_results is not None else search.max_results,
            min_score=min_score if min_score is not None else search.min_score,
            text_weight=search.text_weight,
            vector_weight=search.vector_weight,
            half_life_days=search.half_life_days,
            source_weights=search.source_weights,
            mmr_enabled=search.mmr.enabled,
            mmr_lambda=search.mmr.lambda_,
            similarity=similarity,
        )


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


def keyword_score(bm25: float, corpus_rows: int) -> float:
    """An absolute keyword relevance in [0, 1) from a raw FTS5 ``bm25()`` value.

    FTS5's BM25 is a sum over the query's terms of ``idf(term) × tf-saturation`` (negated),
    and a term's IDF depends on how many of the index's ``corpus_rows`` chunks hold it:
    ``ln((N − n + 0.5) / (n + 0.5))``, about 0 for a term in half the chunks or more. The
    strength ``x = −bm25 / idf₁`` measures it in units of ``idf₁``, the IDF of a term found
    in a single chunk, so it means the same in a small and a large index (one rare term
    matched once ≈ 1, two ≈ 2; only very common terms ≈ 0), and the score is
    ``1 − exp(−x)``: 0.63 for one rare term, 0.86 for two, ≈ 0 for common words only.

    It never depends on the other hits of the query: a weak best hit stays weak, and a
    second-best hit keeps its own score. NaN or a non-negative value (no match) scores 0.

    A small index (fewer than :data:`SMALL_INDEX_ROWS` rows) is the exception: there a term in
    half the chunks has an IDF of 0 however specific it is (in a memory of two notes, every
    word of one of them), so any match scores ``0.5 + 0.49 × the score above`` — a new
    memory answers from its first note on, the better match first.
    """
    if math.isnan(bm25) or bm25 >= 0.0:
        return 0.0
    rows = corpus_rows if corpus_rows > 0 else REFERENCE_ROWS
    idf_one = max(math.log((rows - 0.5) / 1.5), 1.0)
    strength = 1.0 - math.exp(bm25 / idf_one)
    if rows < SMALL_INDEX_ROWS:
        return _clamp01(SMALL_INDEX_SCORE + 0.49 * strength)
    return _clamp01(strength)


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


def vector_score(cosine: float) -> float:
    """Vector relevance from a calibrated cosine: ``1 − exp(−x)``, ``x = (cos − 0.5) / 0.15``.

    The keyword score's shape and units (:func:`keyword_score`: ``1 − exp(−x)`` with ``x``
    the matched rare terms): on the reference scale unrelated texts sit near 0.5 and a
    strong paraphrase near 0.8 (see :class:`SimilarityScale`), and each
    :data:`VECTOR_UNIT` (0.15) above unrelated counts as one rare keyword. So unrelated → 0,
    a paraphrase halfway to strong (0.65) → 0.63 like one rare keyword, a strong match
    (0.8) → 0.86 like two, a near-duplicate → 0.96. A typical paraphrase found only by
    vectors competes with a keyword hit on one word, as it should (issue #19). (Before,
    ``(cos − 0.5) / 0.5`` gave a strong paraphrase 0.6, less than one ordinary keyword, and a
    vector-only answer rarely reached the top 10: paraphrase recall@10 on the project's
    dated set was 0.60 with the local model and 0.50 with MiniLM, now 0.70 and 0.65 with the
    same share of must-return-nothing queries answered with nothing.)
    """
    if math.isnan(cosine) or cosine <= VECTOR_ONLY_FLOOR:
        return 0.0
    return _clamp01(1.0 - math.exp(-(cosine - VECTOR_ONLY_FLOOR) / VECTOR_UNIT))


def merge(fts: float | None, vec: float | None, text_weight: float, vector_weight: float) -> float:
    """Relevance in [0, 1] from a keyword score and a vector score (:func:`vector_score`).

    A weighted noisy-OR: ``1 − (1 − text_weight·fts)·(1 − vector_weight·vec)``, a missing
    signal counting 0. Either signal alone counts in full (a strong vector-only match
    competes with a weak keyword match), agreement counts more than either, and adding a
    vector score never lowers what the keyword score alone gives. Inputs and weights are
    clamped to [0, 1].
    """
    keyword = _clamp01(text_weight) * _clamp01(fts) if fts is not None else 0.0
    vector = _clamp01(vector_weight) * _clamp01(vec) if vec is not None else 0.0
    return _clamp01(1.0 - (1.0 - keyword) * (1.0 - vector))


def decay_factor(age_days: float, half_life_days: float) -> float:
    """``exp(−ln2 · age / half_life)``: 0.5 at one half-life.

    A half-life of 0 (or less) means no decay (1.0); a negative age (a chunk from the
    future, clock skew) is treated as fresh (1.0).
    """
    if half_life_days <= 0.0 or age_days <= 0.0:
        return 1.0
    return math.exp(-math.log(2.0) * age_days / half_life_days)


def recency_factor(age_days: float, half_life_days: float) -> float:
    """``1 − RECENCY_WEIGHT × (1 − decay)``: from 1 (new) down to ``1 − RECENCY_WEIGHT``.

    Recency orders chunks of similar relevance and nothing more: a year-old session log
    keeps 90 % of its score, so it still beats a fresh one that is clearly less relevant
    (SPEC §5: old relevant notes surface). ``decay`` is :func:`decay_factor`.
    """
    return 1.0 - RECENCY_WEIGHT * (1.0 - decay_factor(age_days, half_life_days))


def access_boost(access_count: int) -> float:
    """A modest boost for chunks callers have used: ``1 + 0.05·ln(1 + count)``, at most
    :data:`ACCESS_BOOST_MAX` (≥ 1)."""
    return min(ACCESS_BOOST_MAX, 1.0 + ACCESS_BOOST_RATE * math.log1p(max(access_count, 0)))


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
    """Recency (session only) × source weight × access boost."""
    decay = 1.0
    if cand.source == DECAYING_SOURCE and cand.chunk_time is not None:
        decay = recency_factor((now - cand.chunk_time) / SECONDS_PER_DAY, params.half_life_days)
    source_weight = params.source_weights.get(cand.source, 1.0)
    return decay * source_weight * access_boost(cand.access_count)


def rank(candidates: Iterable[Candidate], params: RankParams, now: float) -> list[Ranked]:
    """Score, filter, order and cut raw hits as SPEC §5 steps 4–6 say (see module doc).

    ``now`` is epoch seconds (UTC). Candidates with neither a keyword nor a vector hit are
    dropped, and so is a keyword hit on words that are in half the chunks or more and
    nothing else (:data:`NO_INFORMATION_BM25`), unless it is also a vector hit. Ordering is
    by score, ties by relevance, then by ``chunk_id``, so the result is deterministic for
    any input order.

    The keyword guarantee: a chunk whose keyword score reaches :data:`STRONG_KEYWORD` and
    that the same search without vectors would return is returned with them too (it takes
    the place of the weakest result that is not such a chunk).
    """
    combined = [
        c
        for c in _combine(candidates)
        if (c.bm25 is not None or c.distance is not None) and not is_content_free(c.text)
    ]
    results: list[Ranked] = []
    keyword_only: list[Ranked] = []
    for cand in combined:
        fts = _keyword(cand, params)
        vec = (
            vector_score(calibrated_cosine(cosine_from_l2(cand.distance), params.similarity))
            if cand.distance is not None
            else None
        )
        if fts is None and vec is None:  # matched only words of (nearly) every chunk
            continue
        weight = _weight(cand, params, now)
        relevance = merge(fts, vec, params.text_weight, params.vector_weight)
        if relevance >= params.min_score:
            results.append(_ranked(cand, relevance, weight))
        if fts is not None and fts >= STRONG_KEYWORD:
            alone = merge(fts, None, params.text_weight, params.vector_weight)
            if alone >= params.min_score:
                keyword_only.append(_ranked(cand, alone, weight))
    results.sort(key=_order)
    limit = max(params.max_results, 0)
    if params.mmr_enabled:
        chosen = mmr(results, params.mmr_lambda, limit)
    else:
        chosen = results[:limit]
    return _keep_strong_keywords(chosen, results, keyword_only, combined, params, now)


def _keyword(cand: Candidate, params: RankParams) -> float | None:
    """The keyword score, or None when there is no keyword match (see
    :data:`NO_INFORMATION_BM25`)."""
    if cand.bm25 is None:
        return None
    rows = params.corpus_rows if params.corpus_rows > 0 else REFERENCE_ROWS
    if cand.bm25 > NO_INFORMATION_BM25 and rows >= SMALL_INDEX_ROWS:
        return None
    return keyword_score(cand.bm25, params.corpus_rows)


def _ranked(cand: Candidate, relevance: float, weight: float) -> Ranked:
    score = relevance * weight
    if math.isnan(score):
        score = 0.0
    return Ranked(cand, relevance, score, _clamp01(score))


def _order(r: Ranked) -> tuple[float, float, str]:
    return (-r.score, -r.relevance, r.candidate.chunk_id)


def _keep_strong_keywords(
    chosen: list[Ranked],
    results: list[Ranked],
    strong: list[Ranked],
    combined: Sequence[Candidate],
    params: RankParams,
    now: float,
) -> list[Ranked]:
    """``chosen`` plus every strong keyword match FTS alone would have returned.

    ``strong`` holds the strong keyword matches, scored as FTS alone would score them. The
    FTS-only result is the top ``max_results`` of every keyword hit scored that way; a
    strong match in it that ``chosen`` lacks replaces the weakest chosen result that is not
    itself such a match.
    """
    if not strong or not chosen or all(c.distance is None for c in combined):
        return chosen
    limit = len(chosen)
    fts_alone: list[Ranked] = []
    for cand in combined:
        fts = _keyword(cand, params)
        if fts is None:
            continue
        alone = merge(fts, None, params.text_weight, params.vector_weight)
        if alone >= params.min_score:
            fts_alone.append(_ranked(cand, alone, _weight(cand, params, now)))
    fts_alone.sort(key=_order)
    limit_fts = max(params.max_results, 0)
    if params.mmr_enabled:
        fts_alone = mmr(fts_alone, params.mmr_lambda, limit_fts)
    would_return = {r.candidate.chunk_id for r in fts_alone[:limit_fts]}
    required = {r.candidate.chunk_id for r in strong if r.candidate.chunk_id in would_return}
    have = {r.candidate.chunk_id for r in chosen}
    missing = [r for r in results if r.candidate.chunk_id in required - have]
    if not missing:
        return chosen
    kept = list(chosen)
    for item in missing:
        for i in range(len(kept) - 1, -1, -1):
            if kept[i].candidate.chunk_id not in required:
                kept[i] = item
                break
    kept = kept[:limit]
    if not params.mmr_enabled:
        kept.sort(key=_order)
    return kept
