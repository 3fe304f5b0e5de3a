"""The one markdown model (fences, ATX headings, sections, comments) and its readers agree."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core import confluence, dreaming, flushing, markdown
from memoryd.core.chunking import chunk_markdown
from memoryd.core.markdown import Fences, Heading
from tests.core.test_chunking import markdownish

FENCE = "`" * 3

_fence_line = st.builds(
    lambda pad, ch, n, info, tail: " " * pad + ch * n + info + tail,
    st.integers(0, 5),
    st.sampled_from(["`", "~"]),
    st.integers(2, 6),
    st.sampled_from(["", "py", " json", "a`b", "~"]),
    st.sampled_from(["", " ", "\t", "\r", " x"]),
)
_odd_line = st.text(alphabet=" #`~\t\rx", max_size=10)
fenced_text = st.lists(
    st.one_of(_fence_line, _odd_line, st.sampled_from(["# A", "## B #", "  ### C", "x"])),
    max_size=30,
).map("\n".join)
any_text = st.one_of(markdownish, fenced_text)


def reference_fenced(lines: list[str]) -> list[bool]:
    """Per line, whether it is fenced code: CommonMark's rules, spelled out without regexes."""
    out: list[bool] = []
    open_: tuple[str, int] | None = None
    for raw in lines:
        line = raw.removesuffix("\r")
        rest = line.lstrip(" ")
        indent = len(line) - len(rest)
        char = rest[:1]
        run = len(rest) - len(rest.lstrip(char)) if char in ("`", "~") else 0
        after = rest[run:]
        if open_ is None:
            opens = indent <= 3 and run >= 3 and not (char == "`" and "`" in after)
            open_ = (char, run) if opens else None
            out.append(opens)
            continue
        if indent <= 3 and char == open_[0] and run >= open_[1] and not after.strip(" \t"):
            open_ = None
        out.append(True)
    return out


def fenced(lines: list[str]) -> list[bool]:
    fences = Fences()
    return [fences.feed(line) for line in lines]


@settings(max_examples=400, deadline=None)
@given(any_text)
def test_fences_open_and_close_as_commonmark_says(text: str) -> None:
    lines = text.split("\n")
    assert fenced(lines) == reference_fenced(lines)


@settings(max_examples=400, deadline=None)
@given(any_text)
def test_sections_cover_the_text_exactly_once_in_order(text: str) -> None:
    lines = text.split("\n")
    parts = markdown.sections(lines)
    assert parts[0].first == 0 and parts[0].heading is None
    assert parts[-1].stop == len(lines)
    for before, after in itertools.pairwise(parts):
        assert before.stop == after.first  # no gap, no overlap
        assert after.first < after.stop
        assert after.heading == markdown.heading(lines[after.first])
    assert sum(p.stop - p.first for p in parts) == len(lines)


@settings(max_examples=400, deadline=None)
@given(any_text)
def test_headings_inside_fences_never_count(text: str) -> None:
    lines = text.split("\n")
    inside = reference_fenced(lines)
    found = markdown.headings(lines)
    assert found == [
        (i, h)
        for i, line in enumerate(lines)
        if not inside[i] and (h := markdown.heading(line)) is not None
    ]
    # The same text (without its tilde lines) inside a tilde fence has no heading at all.
    guard = [line for line in lines if not line.lstrip(" ").startswith("~")]
    assert markdown.headings(["~~~~", *guard, "~~~~"]) == []


@settings(max_examples=400, deadline=None)
@given(any_text)
def test_scanning_only_the_marked_lines_gives_the_same_sections(text: str) -> None:
    lines = text.split("\n")
    assert markdown.sections(lines, markdown.marked_lines(text)) == markdown.sections(lines)


@settings(max_examples=300, deadline=None)
@given(any_text)
def test_every_reader_sees_the_same_headings(text: str) -> None:
    lines = text.split("\n")
    found = [h for _, h in markdown.headings(lines)]
    # The dream loss check splits at every heading.
    assert [(s.level, s.heading) for s in dreaming.split_sections(text) if s.level] == found
    # Flush and dream answers need a # or ## heading with a title.
    assert flushing.has_heading(text) == any(h.level <= 2 and h.title for h in found)
    # Confluence reads ## sections (with a title) of MEMORY.md.
    titles = [s.heading for s in confluence.consolidated_sections("w", text)]
    if "<!-- dream" not in text and "\r" not in text:
        assert titles == [h.title for h in found if h.level == 2 and h.title]
    # The chunker's heading paths are made of those titles.
    for chunk in chunk_markdown(text, 10**6):
        for title in filter(None, chunk.heading.split(" > ")):
            assert any(title == h.title for h in found)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("# Title", Heading(1, "Title")),
        ("###### Six", Heading(6, "Six")),
        ("####### Seven", None),
        ("#NoSpace", None),
        ("#", Heading(1, "")),
        ("# C#", Heading(1, "C#")),
        ("## Closed ##", Heading(2, "Closed")),
        ("   ## three spaces", Heading(2, "three spaces")),
        ("    # four spaces is code", None),
        ("\t# tab is code", None),
        ("#\tTabbed\r", Heading(1, "Tabbed")),
        ("## two CRs\r\r", Heading(2, "two CRs")),
        ("### ###", Heading(3, "")),
    ],
)
def test_atx_headings(line: str, expected: Heading | None) -> None:
    assert markdown.heading(line) == expected


def test_a_fence_closes_only_with_its_character_and_at_least_its_length() -> None:
    text = ["````", "```", "~~~~", "# not a heading", "`````  ", "# heading"]
    assert fenced(text) == [True, True, True, True, True, False]
    assert fenced(["```py`", "# h"]) == [False, False]  # a backtick in a backtick info
    assert fenced(["~~~ a`b", "```", "~~~ x", "~~~"]) == [True, True, True, True]


@pytest.mark.parametrize(
    ("text", "infos", "inside"),
    [
        (f"{FENCE}json\n[1]\n{FENCE}", ("", "json"), "[1]"),
        (f"  {FENCE}JSON\n[1]\n{FENCE}\n", ("", "json"), "[1]"),
        ("~~~~\n# A\n~~~~~", None, "# A"),
        (f"{FENCE}python\nx\n{FENCE}", ("", "json"), None),
        (f"{FENCE}\na\n{FENCE}\nb\n{FENCE}", None, None),  # two blocks, not one
        (f"{FENCE}\na\n~~~", None, None),
        ("# no fence", None, None),
    ],
)
def test_unwrap_fence(text: str, infos: tuple[str, ...] | None, inside: str | None) -> None:
    assert markdown.unwrap_fence(text, infos) == inside


@pytest.mark.parametrize(
    ("text", "stripped"),
    [
        ("a <!-- b --> c", "a  c"),
        ("a <!-- b\nc --> d <!-- e -->", "a  d "),
        ("a <!-- unclosed\n# b", "a "),
        ("no comment -->", "no comment -->"),
    ],
)
def test_strip_comments(text: str, stripped: str) -> None:
    assert markdown.strip_comments(text) == stripped
