"""Confluence decisions, prompts and answer checks (SPEC §10) — pure functions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core import confluence as cf
from memoryd.core.templates import workspace_template
from memoryd.errors import ModelError

MEMORY = """\
# Memory: widgets

> Curated long-term memory for this workspace.

## Deploy

Deploy with `fly deploy`; the staging app is widgets-staging.

```sh
## not a heading: inside a fence
```

### Rollback

`fly releases rollback`.

## Testing

Run pytest with -x.

<!-- dream 2025-03-01T10:00:00Z consumed: a.md -->
"""

NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def sections(text: str = MEMORY, ws: str = "widgets-7d43613e") -> list[cf.MemorySection]:
    return cf.consolidated_sections(ws, text)


# ---------------------------------------------------------------------------- material


def test_sections_are_the_h2_sections_with_subsections_and_fences_inside() -> None:
    found = sections()
    assert [s.heading for s in found] == ["Deploy", "Testing"]
    assert "### Rollback" in found[0].body and "## not a heading" in found[0].body
    assert found[1].body == "Run pytest with -x."  # the dream footer is not material
    assert found[0].pointer == "widgets-7d43613e:MEMORY.md#Deploy"


@pytest.mark.parametrize("text", [None, "", workspace_template("x"), "# Title\n\nprose only\n"])
def test_no_material_in_missing_scaffold_or_heading_less_files(text: str | None) -> None:
    assert cf.consolidated_sections("w-00000000", text) == []


def test_a_title_line_ends_a_section() -> None:
    found = sections("## One\n\nbody\n\n# Another title\n\nintro\n\n## Two\nx\n")
    assert [(s.heading, s.body) for s in found] == [("One", "body"), ("Two", "x")]


def test_the_digest_ignores_whitespace_and_heading_case_but_not_content() -> None:
    a = sections("## Deploy\n\nUse   fly.\n")[0]
    b = sections("##  deploy ##\nUse fly.\n\n\n")[0]
    c = sections("## Deploy\n\nUse flyctl.\n")[0]
    assert a.digest == b.digest != c.digest


# ---------------------------------------------------------------------------- watermark


def test_unseen_is_everything_at_first_and_nothing_after_advancing() -> None:
    found = sections()
    assert cf.unseen(found, cf.Watermark()) == found
    mark = cf.Watermark().advance(found, {s.digest for s in found})
    assert mark.sections == 2
    assert cf.unseen(found, mark) == []


def test_the_watermark_counts_sections_so_the_same_text_rewritten_is_not_new() -> None:
    found = sections()
    mark = cf.Watermark().advance(found, {s.digest for s in found})
    rewritten = MEMORY.replace("## Testing", "## Testing   ").replace(
        "dream 2025-03-01", "dream 2026"
    )
    assert cf.unseen(sections(rewritten), mark) == []
    grown = MEMORY + "\n## Caching\n\nWarm the cache before load tests.\n"
    assert [s.heading for s in cf.unseen(sections(grown), mark)] == ["Caching"]


def test_advance_keeps_only_what_is_still_there_and_what_was_taken() -> None:
    found = sections()
    mark = cf.Watermark().advance(found, {found[0].digest})
    assert mark.digests == {found[0].digest}
    assert cf.unseen(found, mark) == [found[1]]
    shrunk = cf.Watermark(2, frozenset({"gone", found[0].digest})).advance(found[:1], [])
    assert shrunk == cf.Watermark(1, frozenset({found[0].digest}))


@pytest.mark.parametrize("raw", [None, 3, {"sections": "2", "digests": []}, {"sections": 1}])
def test_a_malformed_watermark_reads_as_empty(raw: object) -> None:
    assert cf.Watermark.from_dict(raw) == cf.Watermark()


def test_a_watermark_round_trips() -> None:
    mark = cf.Watermark(3, frozenset({"b", "a"}))
    assert cf.Watermark.from_dict(json.loads(json.dumps(mark.to_dict()))) == mark


# ---------------------------------------------------------------------------- batches


def _many(n: int, body_chars: int = 10) -> list[cf.MemorySection]:
    return [cf.MemorySection("w-00000000", f"H{i}", "x" * body_chars) for i in range(n)]


def test_batches_respect_size_and_count_and_keep_order() -> None:
    items = _many(10, body_chars=98)  # 100 chars each with the heading "Hn"
    batches = cf.plan_batches(items, max_chars=300, max_sections=5, max_batches=10)
    assert [len(b.sections) for b in batches] == [3, 3, 3, 1]
    assert [s for b in batches for s in b.sections] == items
    assert [len(b.sections) for b in cf.plan_batches(items, max_chars=10**6, max_sections=4)] == [
        4,
        4,
        2,
    ]


def test_a_huge_section_gets_a_batch_of_its_own_and_extra_batches_wait() -> None:
    items = [cf.MemorySection("w-00000000", "Huge", "y" * 50_000), *_many(3)]
    batches = cf.plan_batches(items, max_chars=1000, max_sections=10, max_batches=1)
    assert [b.sections for b in batches] == [(items[0],)]
    assert len(cf.distiller_input(batches[0])) < cf.SECTION_CHARS + 100


def test_the_distiller_input_has_ids_and_sections_but_no_workspace() -> None:
    batch = cf.Batch(tuple(sections()))
    text = cf.distiller_input(batch)
    assert text.startswith("[S1] ## Deploy\n")
    assert "[S2] ## Testing\nRun pytest with -x." in text
    assert "widgets-7d43613e" not in text


# ---------------------------------------------------------------------------- distiller answers


def _batch() -> cf.Batch:
    return cf.Batch(tuple(sections()))


def test_a_distiller_answer_parses_into_candidates_with_their_sections() -> None:
    answer = json.dumps(
        [
            {"title": "Keep a rollback command at hand", "body": "Know it.", "sources": ["S1"]},
            {
                "title": "## Fail fast",
                "body": "Stop on the first failure.",
                "sources": ["[S2]", "widgets-7d43613e:MEMORY.md#Deploy"],
            },
        ]
    )
    first, second = cf.parse_candidates(f"```json\n{answer}\n```", _batch())
    assert (first.title, first.pointers, first.problem) == (
        "Keep a rollback command at hand",
        ["widgets-7d43613e:MEMORY.md#Deploy"],
        None,
    )
    assert second.title == "Fail fast"
    assert [s.heading for s in second.sources] == ["Testing", "Deploy"]


def test_an_empty_list_is_no_lessons() -> None:
    assert cf.parse_candidates("[]", _batch()) == []


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "No lessons today.",
        "NO_REPLY",
        '{"title": "x", "body": "y", "sources": ["S1"]}',
        '[{"title": "x", "body": "y"}]',
        '[{"title": "", "body": "y", "sources": ["S1"]}]',
        '[{"title": "x", "body": 3, "sources": ["S1"]}]',
        '[{"title": "x", "body": "y", "sources": "S1"}]',
        '[{"title": "x", "body": "y", "sources": [1]}]',
        '["just a string"]',
        '[{"title": "x", "title": "z", "body": "y", "sources": ["S1"]}]',
        "[{'title': 'x'}]",
    ],
)
def test_an_unparsable_distiller_answer_is_an_error_never_no_lessons(answer: str) -> None:
    with pytest.raises(ModelError, match="distiller"):
        cf.parse_candidates(answer, _batch())


def test_candidates_citing_unknown_sources_or_too_long_carry_a_problem() -> None:
    answer = json.dumps(
        [
            {"title": "a", "body": "b", "sources": ["S9"]},
            {"title": "a", "body": "b", "sources": []},
            {"title": "a", "body": "b" * (cf.MAX_BODY_CHARS + 1), "sources": ["S1"]},
        ]
    )
    problems = [c.problem for c in cf.parse_candidates(answer, _batch())]
    assert problems[0] and "'S9'" in problems[0]
    assert problems[1] == "cites no source"
    assert problems[2] and "longer" in problems[2]


def test_candidates_over_the_batch_limit_are_not_screened() -> None:
    items = [{"title": f"t{i}", "body": "b", "sources": ["S1"]} for i in range(20)]
    found = cf.parse_candidates(json.dumps(items), _batch())
    assert [c.problem is None for c in found] == [True] * cf.MAX_CANDIDATES + [False] * (
        20 - cf.MAX_CANDIDATES
    )


# ---------------------------------------------------------------------------- screener


def test_the_screener_prompt_says_it_is_blind_and_its_input_is_title_and_body_only() -> None:
    assert cf.SCREENER_BLIND in cf.screener_prompt()
    assert cf.screener_input("T", "B\nline") == "Title: T\n\nBody:\nB\nline\n"


@pytest.mark.parametrize(
    ("answer", "shareable"),
    [
        ('{"shareable": true, "reason": "general advice"}', True),
        ('```json\n{"shareable": true, "reason": ""}\n```', True),
        ('{"shareable": false, "reason": "names a customer"}', False),
        ('{"shareable": "true", "reason": "x"}', False),
        ('{"shareable": 1, "reason": "x"}', False),
        ('{"shareable": null, "reason": "x"}', False),
        ('{"shareable": true}', False),
        ('{"shareable": true, "reason": 5}', False),
        ('{"shareable": false, "shareable": true, "reason": "x"}', False),
        ("[true]", False),
        ("true", False),
        ("Yes, this is shareable.", False),
        ("", False),
    ],
)
def test_only_a_json_boolean_true_is_shareable(answer: str, shareable: bool) -> None:
    verdict = cf.parse_verdict(answer)
    assert verdict.shareable is shareable
    if not shareable:
        assert verdict.reason


def test_unusable_verdicts_quote_the_answer_and_rejections_keep_the_reason() -> None:
    broken = cf.parse_verdict('{"shareable": "yes", "reason": "fine"}')
    assert "not a JSON boolean" in broken.reason and '\'{"shareable": "yes"' in broken.reason
    assert cf.parse_verdict('{"shareable": false, "reason": "names acme"}').reason == (
        "screener: names acme"
    )


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=5,
)


@given(st.text(max_size=200))
def test_parse_verdict_never_raises_on_any_text(answer: str) -> None:
    assert not cf.parse_verdict(answer).shareable or answer.lstrip().startswith(("{", "`"))


@given(JSON_VALUES, st.text(max_size=50))
def test_shareable_only_when_it_is_the_json_boolean_true(value: object, reason: str) -> None:
    answer = json.dumps({"shareable": value, "reason": reason})
    assert cf.parse_verdict(answer).shareable is (value is True)


@given(JSON_VALUES)
def test_parse_candidates_accepts_or_raises_model_error_only(value: object) -> None:
    try:
        cf.parse_candidates(json.dumps(value), _batch())
    except ModelError:
        pass


def test_the_leak_check_rejects_a_lesson_naming_a_registered_workspace() -> None:
    markers = ["widgets-7d43613e", "acme/widgets", "/src/widgets", "a/b"]
    assert cf.leak_check("Pin tools", "As in ACME/Widgets, pin them.", markers) == (
        "names a workspace ('acme/widgets')"
    )
    assert cf.leak_check("Pin tools", "Pin your tool versions.", markers) is None
    assert cf.leak_check("a/b testing", "a/b", markers) is None  # too short to mean anything


# ---------------------------------------------------------------------------- output


def test_rendered_lessons_are_sections_with_their_sources_and_time() -> None:
    lessons = [
        cf.Lesson("Pin tool versions", "Pin them.\n# not a title", ("w-1:MEMORY.md#Tools",)),
        cf.Lesson("Warm caches", "Before load tests.", ("a:MEMORY.md#X", "b:MEMORY.md#Y")),
    ]
    text = cf.render_lessons(lessons, NOW)
    assert "Sources:\n- w-1:MEMORY.md#Tools\n<!-- confluence 2025-03-04T05:06:07Z -->" in text
    assert "- a:MEMORY.md#X\n- b:MEMORY.md#Y" in text
    parsed = cf.consolidated_sections("", cf.EXPERIENCE_HEADER + "\n" + text)
    assert [s.heading for s in parsed] == ["Pin tool versions", "Warm caches"]
    assert "\\# not a title" in parsed[0].body
    assert cf.existing_titles(cf.EXPERIENCE_HEADER + "\n" + text) == {
        "pin tool versions",
        "warm caches",
    }


def test_the_daily_run_is_a_day_after_the_last_and_not_right_at_start() -> None:
    start = NOW
    assert cf.next_daily_run(None, start) == start + cf.STARTUP_DELAY
    assert cf.next_daily_run(start - timedelta(hours=30), start) == start + cf.STARTUP_DELAY
    last = start + timedelta(hours=2)
    assert cf.next_daily_run(last, start) == last + timedelta(days=1)


def test_control_characters_in_a_distiller_answer_are_stripped() -> None:
    answer = json.dumps(
        [{"title": "Roll\x00back", "body": "Know\x1b[0m it.\x07", "sources": ["S1"]}]
    )
    [candidate] = cf.parse_candidates(answer, _batch())
    assert (candidate.title, candidate.body) == ("Rollback", "Know[0m it.")
