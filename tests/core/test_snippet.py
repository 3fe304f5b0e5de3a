"""The snippet of a search hit shows the note that matched, even in a long merged chunk."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.snippet import ELLIPSIS, snippet_of

NOTES = "\n\n".join(f"## Note n{i}x\n\nThe service n{i}x retries {i} times." for i in range(40))


def test_a_short_text_is_its_own_snippet() -> None:
    assert snippet_of("  ## Note\n\nshort  \n", ["short"], 700) == "## Note\n\nshort"


def test_a_match_in_the_first_part_keeps_the_beginning() -> None:
    out = snippet_of(NOTES, ["n2x"], 700)
    assert out == NOTES[:699].rstrip() + ELLIPSIS  # as before: the chunk's beginning


def test_a_match_past_the_limit_is_shown_with_its_heading() -> None:
    assert NOTES.index("n20x") > 700
    out = snippet_of(NOTES, ["service", "n20x"], 700)
    assert out.startswith(ELLIPSIS + "## Note n20x\n\nThe service n20x retries 20 times.")
    assert out.endswith(ELLIPSIS) and len(out) <= 700


def test_the_last_note_ends_the_snippet_without_an_ellipsis() -> None:
    out = snippet_of(NOTES, ["n39x"], 700)
    assert out == ELLIPSIS + "## Note n39x\n\nThe service n39x retries 39 times."


def test_only_markdown_headings_start_the_window() -> None:
    # A "#tag" line and a shell comment in fenced code are no headings (core/markdown.py).
    body = "## Deploy\n\n" + "filler line\n" * 70 + "#ops\n```sh\n# run it\n```\nrollback n9x\n"
    out = snippet_of(body, ["n9x"], 700)
    assert out.startswith(ELLIPSIS + "rollback n9x"), out[:40]


def test_no_match_or_no_keywords_keeps_the_beginning() -> None:
    head = NOTES[:699].rstrip() + ELLIPSIS
    assert snippet_of(NOTES, ["absent"], 700) == head
    assert snippet_of(NOTES, [], 700) == head


def test_a_long_matching_line_is_cut_at_the_limit() -> None:
    text = "x" * 1000 + "\n" + "word " * 300
    out = snippet_of(text, ["word"], 100)
    assert out.startswith(ELLIPSIS + "word ") and len(out) <= 100


@given(st.text(max_size=3000), st.lists(st.text(min_size=1, max_size=5), max_size=3))
def test_a_snippet_never_exceeds_the_limit(text: str, keywords: list[str]) -> None:
    out = snippet_of(text, [k.lower() for k in keywords], 200)
    assert len(out) <= 200
    assert out.strip(ELLIPSIS).strip() in text or len(text.strip()) <= 200
