"""The scoring core of hybrid search (SPEC §5 steps 4–6): merge, decay, boost, filter, MMR."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.ranking import (
    RECENCY_WEIGHT,
    REFERENCE_SCALE,
    STRONG_KEYWORD,
    Candidate,
    Ranked,
    RankParams,
    SimilarityScale,
    access_boost,
    calibrated_cosine,
    cosine_from_l2,
    decay_factor,
    is_content_free,
    keyword_score,
    merge,
    mmr,
    rank,
    recency_factor,
    snippet_tokens,
    vector_score,
)
from memoryd.core.templates import global_template, workspace_template

NOW = 1_750_000_000.0
DAY = 86_400.0

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def cand(
    chunk_id: str,
    *,
    text: str | None = None,
    source: str = "workspace",
    bm25: float | None = None,
    distance: float | None = None,
    age_days: float | None = None,
    access_count: int = 0,
) -> Candidate:
    return Candidate(
        chunk_id=chunk_id,
        path="widgets-7d43613e/MEMORY.md",
        start_line=1,
        end_line=3,
        heading="Notes",
        text=text if text is not None else f"## Notes\nfact number {chunk_id}\n",
        source=source,
        chunk_time=None if age_days is None else NOW - age_days * DAY,
        access_count=access_count,
        bm25=bm25,
        distance=distance,
    )


def l2_for_cosine(cosine: float) -> float:
    """The unit-vector L2 distance whose cosine is ``cosine``."""
    return math.sqrt(2.0 * (1.0 - cosine))


def ids(results: list[Ranked]) -> list[str]:
    return [r.candidate.chunk_id for r in results]


# --- normalise and merge ------------------------------------------------------------------


@given(fts=unit, vec=unit, text_weight=unit, vector_weight=unit)
def test_merged_score_never_below_keyword_score(
    fts: float, vec: float, text_weight: float, vector_weight: float
) -> None:
    merged = merge(fts, vec, text_weight, vector_weight)
    assert merged >= merge(fts, None, text_weight, vector_weight)  # what FTS alone gives
    assert merged >= merge(None, vec, text_weight, vector_weight)
    assert 0.0 <= merged <= 1.0


def test_merge_is_a_noisy_or_of_both_signals() -> None:
    assert merge(0.5, 0.6, 1.0, 1.0) == pytest.approx(0.8)  # agreement counts more
    assert merge(0.9, 0.0, 1.0, 1.0) == pytest.approx(0.9)
    assert merge(None, 0.6, 1.0, 1.0) == pytest.approx(0.6)  # a vector-only hit counts in full
    assert merge(0.4, None, 1.0, 1.0) == pytest.approx(0.4)
    assert merge(0.5, 1.0, 0.3, 0.7) == pytest.approx(1 - 0.85 * 0.3)  # weights scale each
    assert merge(None, None, 1.0, 1.0) == 0.0


@given(
    st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1),
    st.integers(min_value=0, max_value=10_000_000),
)
def test_keyword_score_is_absolute_and_monotone(values: list[float], rows: int) -> None:
    scores = [keyword_score(v, rows) for v in values]
    assert all(0.0 <= s <= 1.0 for s in scores)
    # A better (lower) raw value never scores lower, and no value depends on the others.
    for i in range(len(values)):
        assert scores[i] == keyword_score(values[i], rows)
        for j in range(len(values)):
            if values[i] <= values[j]:
                assert scores[i] >= scores[j]


def test_keyword_score_does_not_depend_on_the_best_hit() -> None:
    # One rare term in a 1,000-row index (idf of a single-row term ≈ 6.5): about 0.63.
    idf_one = math.log(999.5 / 1.5)
    assert keyword_score(-idf_one, 1000) == pytest.approx(1 - math.exp(-1))
    assert keyword_score(-2 * idf_one, 1000) == pytest.approx(1 - math.exp(-2))
    # The same raw value alone or next to a far better hit scores the same.
    params = RankParams(min_score=0.0, corpus_rows=1000)
    alone = rank([cand("weak", bm25=-2.0)], params, NOW)
    crowded = rank([cand("weak", bm25=-2.0), cand("best", bm25=-30.0)], params, NOW)
    weak = next(r for r in crowded if r.candidate.chunk_id == "weak")
    assert alone[0].relevance == pytest.approx(weak.relevance)
    # Only very common terms (FTS5 clamps their IDF to 1e-6): nothing at the default.
    assert rank([cand("common", bm25=-2e-6)], RankParams(corpus_rows=1000), NOW) == []
    assert keyword_score(0.0, 1000) == 0.0
    assert keyword_score(float("nan"), 1000) == 0.0


def test_a_match_on_words_of_every_chunk_is_no_match_even_at_min_score_0() -> None:
    # A name said in every session of a chat: FTS5 matches it, with an IDF clamped to 1e-6.
    # Such hits used to come back at min_score 0 in an order decided by chunk length alone.
    common = [cand(f"c{i}", bm25=-2e-6 - i * 1e-8) for i in range(5)]
    params = RankParams(min_score=0.0, corpus_rows=1000)
    assert rank(common, params, NOW) == []
    # ... unless the chunk is also a vector hit, which is scored by its vector alone.
    near = dataclasses.replace(common[0], distance=l2_for_cosine(0.95))
    assert ids(rank([near, *common[1:]], params, NOW)) == ["c0"]
    # In a small index every word is "in half the chunks": a match there still counts.
    small = rank(common[:2], RankParams(min_score=0.0, corpus_rows=2), NOW)
    assert len(small) == 2
    assert all(r.relevance >= 0.5 for r in small)


def test_keyword_score_means_the_same_in_small_and_large_indexes() -> None:
    for rows in (50, 1000, 100_000):
        idf_one = math.log((rows - 0.5) / 1.5)
        assert keyword_score(-idf_one, rows) == pytest.approx(1 - math.exp(-1))


def test_cosine_from_l2_on_unit_vectors() -> None:
    assert cosine_from_l2(0.0) == 1.0
    assert cosine_from_l2(math.sqrt(2.0)) == pytest.approx(0.0)  # orthogonal
    assert cosine_from_l2(2.0) == 0.0  # opposite: clamped, never negative
    assert cosine_from_l2(l2_for_cosine(0.8)) == pytest.approx(0.8)


def test_vector_only_scaling() -> None:
    # Each 0.15 of calibrated cosine above unrelated (0.5) counts as one rare keyword.
    assert vector_score(0.65) == pytest.approx(keyword_score(-math.log(999.5 / 1.5), 1000))
    assert vector_score(0.65) == pytest.approx(1 - math.exp(-1))
    assert vector_score(0.8) == pytest.approx(1 - math.exp(-2))
    assert vector_score(0.5) == 0.0
    assert vector_score(0.3) == 0.0
    assert vector_score(float("nan")) == 0.0
    assert 0.95 < vector_score(1.0) < 1.0


@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_vector_score_is_monotone_and_bounded(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert 0.0 <= vector_score(low) <= vector_score(high) < 1.0


def test_strong_vector_only_hit_passes_default_min_score_weak_one_does_not() -> None:
    strong = cand("strong", distance=l2_for_cosine(0.8))
    weak = cand("weak", distance=l2_for_cosine(0.52))
    results = rank([strong, weak], RankParams(), NOW)
    assert ids(results) == ["strong"]
    assert results[0].relevance == pytest.approx(1 - math.exp(-2))


def test_keyword_and_vector_hits_of_one_chunk_are_combined() -> None:
    keyword = cand("a", bm25=-5.0)
    vector = cand("a", distance=l2_for_cosine(0.9))
    other = cand("b", bm25=-10.0)
    results = rank([keyword, other, vector], RankParams(), NOW)
    assert sorted(ids(results)) == ["a", "b"]
    (a,) = (r for r in results if r.candidate.chunk_id == "a")
    assert a.candidate.bm25 == -5.0
    assert a.candidate.distance == pytest.approx(l2_for_cosine(0.9))
    assert a.relevance == pytest.approx(merge(keyword_score(-5.0, 0), vector_score(0.9), 1, 1))


# --- decay, weights, boost ----------------------------------------------------------------


def test_decay_halves_at_one_half_life() -> None:
    assert decay_factor(30.0, 30.0) == pytest.approx(0.5)
    assert decay_factor(60.0, 30.0) == pytest.approx(0.25)
    assert decay_factor(0.0, 30.0) == 1.0
    assert decay_factor(400.0, 0.0) == 1.0  # half-life 0 = no decay
    assert decay_factor(-5.0, 30.0) == 1.0  # a chunk from the future is fresh


@pytest.mark.parametrize("source", ["session", "workspace", "global"])
def test_only_session_chunks_decay(source: str) -> None:
    old = cand("old", source=source, bm25=-5.0, age_days=30.0)
    (result,) = rank([old], RankParams(), NOW)
    assert result.relevance == pytest.approx(keyword_score(-5.0, 0))
    expected = 0.95 if source == "session" else 1.0  # one half-life: recency takes half of 10 %
    assert result.score == pytest.approx(expected * result.relevance)


def test_session_chunk_without_time_does_not_decay() -> None:
    (result,) = rank([cand("s", source="session", bm25=-5.0)], RankParams(), NOW)
    assert result.score == pytest.approx(result.relevance)


def test_decay_orders_session_chunks_by_age() -> None:
    old = cand("old", source="session", bm25=-5.0, age_days=90.0)
    new = cand("new", source="session", bm25=-5.0, age_days=1.0)
    assert ids(rank([old, new], RankParams(), NOW)) == ["new", "old"]


def test_old_session_chunk_that_is_the_only_relevant_hit_is_returned() -> None:
    old = cand("old", source="session", bm25=-5.0, age_days=365.0)
    irrelevant = cand("weak", source="workspace", distance=l2_for_cosine(0.52))
    results = rank([old, irrelevant], RankParams(), NOW)
    assert ids(results) == ["old"]
    # Recency is bounded: a year-old log keeps 90 % of its score.
    assert results[0].score == pytest.approx(0.9 * results[0].relevance, rel=1e-3)


@given(
    rel_old=st.floats(0.05, 1.0),
    ratio=st.floats(1.0, 5.0),
    age=st.floats(0.0, 3650.0),
    half_life=st.floats(0.0, 365.0),
)
def test_recency_never_puts_a_clearly_less_relevant_chunk_first(
    rel_old: float, ratio: float, age: float, half_life: float
) -> None:
    # Relevance ratio above the bound (1 / (1 - RECENCY_WEIGHT)): the old one stays first.
    bound = 1.0 / (1.0 - RECENCY_WEIGHT)
    rel_new = rel_old / (ratio * bound * 1.0001)
    old_score = rel_old * recency_factor(age, half_life)
    new_score = rel_new * recency_factor(0.0, half_life)
    assert old_score > new_score


def test_access_boost_orders_two_otherwise_equal_chunks() -> None:
    used = cand("b-used", bm25=-5.0, access_count=10)
    unused = cand("a-unused", bm25=-5.0, access_count=0)
    results = rank([unused, used], RankParams(), NOW)
    assert ids(results) == ["b-used", "a-unused"]
    assert results[0].score == pytest.approx(results[0].relevance * 1.05)  # capped at 5 %
    assert access_boost(0) == 1.0
    assert access_boost(1) == pytest.approx(1.0 + 0.05 * math.log(2))
    strong = rank([cand("s", bm25=-100.0, access_count=10)], RankParams(), NOW)
    assert strong[0].score > 1.0
    assert strong[0].reported_score == 1.0  # reported score is clamped, ordering is not


def test_source_weight_multiplies_score_but_min_score_is_on_relevance() -> None:
    params = RankParams(source_weights={"global": 1.0, "workspace": 1.0, "session": 0.0})
    session = cand("session", source="session", bm25=-10.0)
    workspace = cand("workspace", source="workspace", bm25=-5.0)
    results = rank([session, workspace], params, NOW)
    assert ids(results) == ["workspace", "session"]
    assert results[1].score == 0.0
    assert results[1].relevance == pytest.approx(keyword_score(-10.0, 0))
    # With equal weights the stronger session hit is first again.
    assert ids(rank([session, workspace], RankParams(), NOW)) == ["session", "workspace"]


# --- content-free chunks ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t\n",
        "<!-- memoryd: nothing here yet -->\n",
        "<!-- one -->\n\n<!--\nmulti\nline\n-->\n",
        "<!-- never closed\nstill a comment\n",
        global_template(),
        workspace_template("widgets"),
        "<!-- note -->\n" + workspace_template("widgets"),
    ],
)
def test_content_free_text(text: str) -> None:
    assert is_content_free(text)


@pytest.mark.parametrize(
    "text",
    ["## Use pnpm", "## Use pnpm\n", "<!-- c -->\n## Use pnpm\n", "# Global memory\n\nreal"],
)
def test_text_with_content(text: str) -> None:
    assert not is_content_free(text)


def test_comment_and_scaffold_chunks_are_never_returned_but_heading_only_is() -> None:
    candidates = [
        cand("comment", text="<!-- todo -->\n", bm25=-20.0),
        cand("scaffold", text=workspace_template("widgets"), bm25=-20.0, source="workspace"),
        cand("global-scaffold", text=global_template(), distance=0.0, source="global"),
        cand("heading", text="## Use pnpm\n", bm25=-4.0),
    ]
    results = rank(candidates, RankParams(min_score=0.0), NOW)
    assert ids(results) == ["heading"]
    assert results[0].relevance == pytest.approx(keyword_score(-4.0, 0))


# --- rank as a whole ----------------------------------------------------------------------


TEXTS = [None, "## Use pnpm\n", "<!-- x -->", "deploy with pnpm run build", "Use pnpm always"]


@st.composite
def candidate_lists(draw: st.DrawFn) -> list[Candidate]:
    """Hits from FTS and KNN; the two hits of one chunk agree on everything but the scores."""
    chunks = draw(
        st.lists(
            st.tuples(
                st.sampled_from(TEXTS),
                st.sampled_from(["global", "workspace", "session"]),
                st.none() | st.floats(min_value=-10.0, max_value=1000.0, allow_nan=False),
                st.integers(min_value=0, max_value=1000),
            ),
            min_size=1,
            max_size=12,
        )
    )
    hits = st.tuples(
        st.integers(min_value=0, max_value=len(chunks) - 1),
        st.none()
        | st.sampled_from([-40.0, -15.0])  # strong keyword matches
        | st.floats(min_value=-30.0, max_value=0.0, allow_nan=False),
        st.none()
        | st.sampled_from([0.0, 0.1, 0.3])  # near-duplicates by vector
        | st.floats(min_value=0.0, max_value=2.0, allow_nan=False),
    )
    result = []
    for index, bm25, distance in draw(st.lists(hits, max_size=20)):
        text, source, age_days, access_count = chunks[index]
        result.append(
            cand(
                f"c{index}",
                text=text,
                source=source,
                age_days=age_days,
                access_count=access_count,
                bm25=bm25,
                distance=distance,
            )
        )
    return result


params_st = st.builds(
    RankParams,
    max_results=st.integers(min_value=0, max_value=10),
    min_score=unit,
    text_weight=unit,
    vector_weight=unit,
    half_life_days=st.floats(min_value=0.0, max_value=365.0, allow_nan=False),
    source_weights=st.fixed_dictionaries(
        {s: st.floats(0.0, 3.0, allow_nan=False) for s in ("global", "workspace", "session")}
    ),
    mmr_enabled=st.booleans(),
    mmr_lambda=unit,
    corpus_rows=st.integers(min_value=0, max_value=200_000),
)


@given(candidates=candidate_lists(), params=params_st, seed=st.integers())
def test_rank_is_deterministic_bounded_and_thresholded(
    candidates: list[Candidate], params: RankParams, seed: int
) -> None:
    results = rank(candidates, params, NOW)
    shuffled = list(candidates)
    random.Random(seed).shuffle(shuffled)
    # The input order of hits never changes the answer.
    assert ids(rank(shuffled, params, NOW)) == ids(results)
    assert rank(candidates, params, NOW) == results
    assert len(results) <= params.max_results
    assert len(set(ids(results))) == len(results)
    for r in results:
        assert 0.0 <= r.reported_score <= 1.0
        assert 0.0 <= r.relevance <= 1.0
        assert r.relevance >= params.min_score
        assert not is_content_free(r.candidate.text)
    if not params.mmr_enabled:
        scores = [r.score for r in results]
        assert scores == sorted(scores, reverse=True)


@settings(max_examples=400)
@given(candidates=candidate_lists(), params=params_st)
def test_adding_vectors_never_drops_a_strong_keyword_match(
    candidates: list[Candidate], params: RankParams
) -> None:
    keyword_only = [dataclasses.replace(c, distance=None) for c in candidates if c.bm25 is not None]
    alone = rank(keyword_only, params, NOW)
    with_vectors = ids(rank(candidates, params, NOW))
    for r in alone:
        assert r.candidate.bm25 is not None
        if keyword_score(r.candidate.bm25, params.corpus_rows) >= STRONG_KEYWORD:
            assert r.candidate.chunk_id in with_vectors


def test_near_duplicate_vector_hits_do_not_push_out_the_exact_keyword_match() -> None:
    exact = cand("exact", bm25=-15.0)  # ≈ 0.9: a strong keyword match
    echoes = [cand(f"v{i}", distance=l2_for_cosine(0.99)) for i in range(3)]  # ≈ 0.98 each
    alone = ids(rank([exact], RankParams(max_results=2), NOW))
    hybrid = ids(rank([exact, *echoes], RankParams(max_results=2), NOW))
    assert alone == ["exact"]
    assert "exact" in hybrid
    assert len(hybrid) == 2


def test_a_strong_vector_only_match_competes_with_weak_keyword_hits() -> None:
    weak = [cand(f"kw{i}", bm25=-2.0 - i * 0.1) for i in range(6)]  # ≈ 0.27–0.33 each
    paraphrase = cand("para", distance=l2_for_cosine(0.85))  # vector score 0.90
    exact = cand("exact", bm25=-30.0)  # two+ rare terms: ≈ 0.99
    results = ids(rank([*weak, paraphrase, exact], RankParams(max_results=5), NOW))
    assert results[:2] == ["exact", "para"]


def test_rank_cuts_to_max_results_keeping_the_best() -> None:
    candidates = [cand(f"c{i:02d}", bm25=-float(i + 1)) for i in range(20)]
    results = rank(candidates, RankParams(max_results=3), NOW)
    assert ids(results) == ["c19", "c18", "c17"]


def test_ties_are_broken_by_chunk_id() -> None:
    candidates = [cand(name, bm25=-5.0) for name in ("b", "c", "a")]
    assert ids(rank(candidates, RankParams(), NOW)) == ["a", "b", "c"]


# --- MMR ----------------------------------------------------------------------------------

DUPLICATE = "## Deploy\nrun pnpm build then copy dist to the server with rsync\n"


def mmr_candidates() -> list[Candidate]:
    return [
        cand("dup1", text=DUPLICATE, bm25=-10.0),
        cand("dup2", text=DUPLICATE + "again\n", bm25=-9.8),
        cand("dup3", text=DUPLICATE.replace("server", "host"), bm25=-9.6),
        cand("other", text="## Testing\npytest with hypothesis for pure functions\n", bm25=-8.0),
    ]


def test_mmr_off_by_default_and_lambda_changes_nothing_while_off() -> None:
    assert RankParams().mmr_enabled is False
    baseline = rank(mmr_candidates(), RankParams(max_results=3), NOW)
    assert ids(baseline) == ["dup1", "dup2", "dup3"]
    for lambda_ in (0.0, 0.3, 0.7, 1.0):
        params = RankParams(max_results=3, mmr_lambda=lambda_)
        assert rank(mmr_candidates(), params, NOW) == baseline


def test_mmr_spreads_out_near_duplicates() -> None:
    params = RankParams(max_results=3, mmr_enabled=True, mmr_lambda=0.7)
    results = rank(mmr_candidates(), params, NOW)
    assert ids(results)[0] == "dup1"
    assert ids(results)[1] == "other"  # the distinct chunk jumps over the near-duplicates
    assert len(results) == 3


def test_mmr_with_lambda_one_keeps_score_order() -> None:
    off = rank(mmr_candidates(), RankParams(max_results=4), NOW)
    on = rank(mmr_candidates(), RankParams(max_results=4, mmr_enabled=True, mmr_lambda=1.0), NOW)
    assert on == off


def test_mmr_returns_at_most_k_and_handles_empty() -> None:
    ranked = rank(mmr_candidates(), RankParams(max_results=10), NOW)
    assert len(mmr(ranked, 0.5, 2)) == 2
    assert mmr(ranked, 0.5, 0) == []
    assert mmr([], 0.5, 3) == []


def test_mmr_compares_cjk_text_by_bigrams() -> None:
    ranked = [
        Ranked(cand("a", text="部署前先运行测试"), 1.0, 1.0, 1.0),
        Ranked(cand("b", text="部署前先运行全部测试"), 0.99, 0.99, 0.99),
        Ranked(cand("c", text="数据库迁移按顺序执行"), 0.9, 0.9, 0.9),
    ]
    assert ids(mmr(ranked, 0.7, 2)) == ["a", "c"]


def test_snippet_tokens() -> None:
    assert snippet_tokens("Use PNPM, not npm!") == {"use", "pnpm", "not", "npm"}
    assert snippet_tokens("部署测试 ok") == {"部署", "署测", "测试", "ok"}
    assert snippet_tokens("猫 and 犬") == {"猫", "and", "犬"}


def test_mmr_keeps_decay_and_source_weights_in_force() -> None:
    old = cand(
        "old", source="session", text="## Old\nlegacy deploy via ftp\n", bm25=-8.2, age_days=120.0
    )
    fresh = cand(
        "fresh", source="session", text="## New\nrelease with pnpm\n", bm25=-8.0, age_days=1.0
    )
    params = RankParams(mmr_enabled=True, mmr_lambda=0.7)
    assert ids(rank([old, fresh], params, NOW)) == ["fresh", "old"]


def test_rank_params_defaults_match_spec() -> None:
    params = RankParams()
    assert (params.max_results, params.min_score) == (6, 0.25)
    assert (params.text_weight, params.vector_weight) == (1.0, 1.0)
    assert params.half_life_days == 30.0
    assert dict(params.source_weights) == {"global": 1.0, "workspace": 1.0, "session": 1.0}
    assert params.mmr_lambda == 0.7
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.max_results = 3  # type: ignore[misc]


@given(
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.floats(0.01, 0.6),
    st.floats(0.05, 0.39),
)
def test_calibrated_cosines_keep_their_order_and_the_reference_scale_is_unchanged(
    a: float, b: float, unrelated: float, gap: float
) -> None:
    scale = SimilarityScale(unrelated=unrelated, strong=min(unrelated + gap, 0.99))
    low, high = sorted((a, b))
    assert 0.0 <= calibrated_cosine(low, scale) <= calibrated_cosine(high, scale) <= 1.0
    assert calibrated_cosine(a, REFERENCE_SCALE) == pytest.approx(a)
    assert calibrated_cosine(scale.unrelated, scale) == pytest.approx(0.5)
    assert calibrated_cosine(scale.strong, scale) == pytest.approx(0.8)


def test_rank_calibrates_cosines_of_a_declared_scale_once() -> None:
    # A low-running model: cosine 0.4 is its "strong" match, 0.8 on the reference scale.
    scale = SimilarityScale(unrelated=0.12, strong=0.40)
    distance = math.sqrt(2.0 * (1.0 - 0.4))
    hit = cand("v", distance=distance)
    assert rank([hit], RankParams(), NOW) == []  # raw 0.4 is below the vector-only floor
    (result,) = rank([hit], RankParams(similarity=scale), NOW)
    assert result.relevance == pytest.approx(vector_score(0.8))
    assert result.relevance == pytest.approx(
        vector_score(calibrated_cosine(cosine_from_l2(distance), scale))
    )
