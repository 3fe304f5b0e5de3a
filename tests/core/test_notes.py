"""``remember`` note formatting, appending, and memory.get line windows (SPEC §7, §11)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.notes import append_note, format_note, numbered_lines
from memoryd.errors import InvalidParams

LONG_FIRST = "x" * 81


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("   \n\t \n", None),
        ("Use uv, not pip", "## Use uv, not pip"),
        ("  Use uv, not pip  \n", "## Use uv, not pip"),
        ("# Title\nbody", "# Title\nbody"),
        ("## Build\n\nrun make", "## Build\n\nrun make"),
        ("#hashtag-first", "#hashtag-first"),
        ("Build steps\nrun make\nthen test", "## Build steps\n\nrun make\nthen test"),
        ("Build steps\n\n\nrun make", "## Build steps\n\nrun make"),
        ("Build steps\r\nrun make", "## Build steps\n\nrun make"),
        ("Build steps\n  - indented item", "## Build steps\n\n  - indented item"),
        ("y" * 80 + "\nrest", "## " + "y" * 80 + "\n\nrest"),
        (LONG_FIRST + "\nrest", f"## Note\n\n{LONG_FIRST}\nrest"),
        # one long line is still a one-liner: it becomes the heading
        (LONG_FIRST, f"## {LONG_FIRST}"),
    ],
)
def test_format_note(text: str, expected: str | None) -> None:
    assert format_note(text) == expected


@given(st.text())
def test_format_note_always_makes_a_section_or_nothing(text: str) -> None:
    note = format_note(text)
    if note is None:
        assert not text.strip()
    else:
        assert note.startswith("#")
        assert note == note.strip()


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ("", "## New\n"),
        ("\n\n", "## New\n"),
        ("# Memory", "# Memory\n\n## New\n"),
        ("# Memory\n", "# Memory\n\n## New\n"),
        ("# Memory\n\n\n   \n", "# Memory\n\n## New\n"),
        ("# Memory\n\n> note\n", "# Memory\n\n> note\n\n## New\n"),
    ],
)
def test_append_note_separates_by_exactly_one_blank_line(existing: str, expected: str) -> None:
    assert append_note(existing, "## New") == expected


def test_append_note_trims_blank_lines_around_the_note() -> None:
    assert append_note("a\n", "\n\n## N\nbody\n\n\n") == "a\n\n## N\nbody\n"


def test_append_note_of_nothing_adds_nothing() -> None:
    assert append_note("a\n", "  \n") == "a\n"


@given(st.text(), st.text().filter(lambda t: t.strip()))
def test_append_note_keeps_existing_content_and_ends_with_the_note(
    existing: str, note: str
) -> None:
    result = append_note(existing, note)
    assert result.endswith("\n")
    body = existing.rstrip()
    assert result.startswith(body)
    assert result.rstrip().endswith(note.strip())
    if body:
        assert "\n\n" in result[len(body) - 1 :]


TEXT = "one\ntwo\nthree\nfour\n"


@pytest.mark.parametrize(
    ("text", "start", "count", "expected"),
    [
        (TEXT, 1, None, (TEXT, 1, 4)),
        (TEXT, 2, 2, ("two\nthree\n", 2, 4)),
        (TEXT, 4, 10, ("four\n", 4, 4)),
        (TEXT, 5, None, ("", 5, 4)),
        (TEXT, 1, 0, ("", 1, 4)),
        ("a\nb", 2, None, ("b", 2, 2)),
        ("", 1, None, ("", 1, 0)),
        ("\n", 1, None, ("\n", 1, 1)),
        ("a\r\nb\r\n", 2, 1, ("b\r\n", 2, 2)),
    ],
)
def test_numbered_lines(
    text: str, start: int, count: int | None, expected: tuple[str, int, int]
) -> None:
    assert numbered_lines(text, start, count) == expected


@pytest.mark.parametrize(("start", "count"), [(0, None), (-1, 3), (1, -1)])
def test_numbered_lines_refuses_bad_windows(start: int, count: int | None) -> None:
    with pytest.raises(InvalidParams):
        numbered_lines(TEXT, start, count)


@given(st.text(), st.integers(min_value=1, max_value=20))
def test_windows_tile_the_text(text: str, size: int) -> None:
    """Consecutive windows put back together give the text, and agree on the line count."""
    _, _, total = numbered_lines(text, 1, None)
    pieces = [numbered_lines(text, start, size) for start in range(1, total + 1, size)]
    assert "".join(piece for piece, _, _ in pieces) == text
    assert all(t == total for _, _, t in pieces)
    assert total == text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def test_a_note_goes_above_a_dream_footer_which_stays_last() -> None:
    dreamt = "# M\n\n## A\nbody\n\n<!-- dream 2025-01-01T00:00:00Z consumed: a.md -->\n"
    out = append_note(dreamt, "## Note\nnew")
    footer = "<!-- dream 2025-01-01T00:00:00Z consumed: a.md -->\n"
    assert out == "# M\n\n## A\nbody\n\n## Note\nnew\n\n" + footer
    assert append_note(dreamt, "  ") == dreamt
