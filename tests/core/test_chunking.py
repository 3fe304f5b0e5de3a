"""The markdown chunker: sections, splitting, stable ids and chunk times (SPEC §3)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import blake3
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memoryd.core.chunking import (
    Chunk,
    chunk_ids,
    chunk_markdown,
    chunk_time_for_session,
    flush_marks,
    indexed_text,
)
from memoryd.core.templates import is_scaffold, workspace_template

FENCE = "`" * 3


def lines_of(text: str) -> list[str]:
    return text.split("\n")


def source_text(text: str, chunk: Chunk) -> str:
    return "\n".join(lines_of(text)[chunk.start_line - 1 : chunk.end_line])


# --- markdown-ish text for the properties -------------------------------------------------

_words = st.sampled_from(
    ["alpha", "beta", "gamma delta", "数据库", "データベース", "데이터", "x" * 50, "#", "~"]
)
_line = st.one_of(
    st.just(""),
    st.sampled_from(["   ", "\t", " \r"]),
    st.builds(lambda n, w: "#" * n + " " + w, st.integers(1, 7), _words),
    st.builds(lambda pad, w: " " * pad + "# " + w, st.integers(0, 5), _words),
    st.sampled_from([FENCE, FENCE + "python", "````", "~~~", "~~~~", "  " + FENCE, "#"]),
    st.lists(_words, min_size=1, max_size=12).map(" ".join),
    st.text(min_size=1, max_size=900),
    st.text(alphabet="数据库存储東京한국어 ab", min_size=100, max_size=2500),
)
markdownish = st.lists(_line, max_size=60).map("\n".join)
limits = st.tuples(st.integers(1, 400), st.integers(0, 300))


@settings(max_examples=300, deadline=None)
@given(markdownish, limits)
def test_chunks_cover_every_line_in_order_within_the_limit(
    text: str, limit: tuple[int, int]
) -> None:
    max_chars, overlap = limit
    chunks = chunk_markdown(text, max_chars, overlap)
    lines = lines_of(text)
    covered: set[int] = set()
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        assert len(chunk.text) <= max_chars
        assert chunk.text.strip()
        assert chunk.hash == blake3.blake3(chunk.text.encode()).hexdigest()
        covered.update(range(chunk.start_line, chunk.end_line + 1))
        claimed = source_text(text, chunk)
        if chunk.text != claimed:
            # Only a piece of one line longer than the limit may differ from its lines.
            assert chunk.start_line == chunk.end_line
            assert len(claimed) > max_chars
            assert chunk.text in claimed
    for before, after in itertools.pairwise(chunks):
        assert before.end_line <= after.end_line
        if (before.start_line, before.end_line) != (after.start_line, after.end_line):
            assert before.start_line < after.start_line  # no chunk swallows the one before
    for number, line in enumerate(lines, start=1):
        if line.strip():
            assert number in covered, f"line {number} not in any chunk"


@settings(max_examples=150, deadline=None)
@given(markdownish, limits)
def test_chunking_is_deterministic(text: str, limit: tuple[int, int]) -> None:
    assert chunk_markdown(text, *limit) == chunk_markdown(text, *limit)
    chunks = chunk_markdown(text, *limit)
    assert chunk_ids("a.md", chunks) == chunk_ids("a.md", chunk_markdown(text, *limit))


@settings(max_examples=150, deadline=None)
@given(markdownish)
def test_sections_that_fit_are_whole_and_disjoint(text: str) -> None:
    chunks = chunk_markdown(text, max_chars=10**6)
    for chunk in chunks:
        assert chunk.text == source_text(text, chunk)
    for before, after in itertools.pairwise(chunks):
        assert before.end_line < after.start_line


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["", "short", "a medium line of text", "z" * 90]), max_size=80))
def test_overlap_between_pieces_is_whole_lines_within_overlap_chars(lines: list[str]) -> None:
    text = "\n".join(["# One section", *lines])
    chunks = chunk_markdown(text, max_chars=200, overlap_chars=60)
    for before, after in itertools.pairwise(chunks):
        if after.start_line <= before.end_line:
            shared = "\n".join(lines_of(text)[after.start_line - 1 : before.end_line])
            assert len(shared) <= 60
            assert after.end_line > before.end_line  # every chunk brings new lines


# --- sections and headings ------------------------------------------------------------------


def test_hash_lines_inside_fenced_code_never_start_a_section() -> None:
    text = "\n".join(
        [
            "# Setup",
            FENCE + "bash",
            "# install it",
            "## not a heading",
            FENCE,
            "~~~~",
            "# still code",
            "~~~",  # shorter than the opening fence: does not close it
            FENCE,  # other character: does not close it
            "# code too",
            "~~~~~",
            "## Real",
            "after",
        ]
    )
    chunks = chunk_markdown(text)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("Setup", 1, 11),
        ("Setup > Real", 12, 13),
    ]


def test_an_unclosed_fence_runs_to_the_end_of_the_file() -> None:
    text = "# Top\n~~~\n# inside\n## inside too\n"
    chunks = chunk_markdown(text)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [("Top", 1, 4)]


def test_backtick_fence_with_a_backtick_in_its_info_is_not_a_fence() -> None:
    text = f"# A\n{FENCE} not `a` fence\n# B\n"
    assert [c.heading for c in chunk_markdown(text)] == ["A", "B"]


def test_heading_path_nests_and_pops() -> None:
    text = "# A\na\n## B\nb\n### C ###\nc\n## D\nd\n# E\ne\n"
    chunks = chunk_markdown(text)
    assert [c.heading for c in chunks] == ["A", "A > B", "A > B > C", "A > D", "E"]


def test_only_atx_headings_start_sections() -> None:
    text = "\n".join(
        ["intro", "#hashtag", "    # indented code", "####### seven", "   ### Three spaces", "x"]
    )
    chunks = chunk_markdown(text)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("", 1, 4),
        ("Three spaces", 5, 6),
    ]


def test_a_heading_at_the_end_of_a_line_with_no_title() -> None:
    chunks = chunk_markdown("# A\n##\ntext\n")
    assert [(c.heading, c.text) for c in chunks] == [("A", "# A"), ("A", "##\ntext")]


def test_a_heading_only_section_is_a_chunk() -> None:
    text = "# Memory\n\n## Use uv for installs\n\n## Tabs are 4 spaces\n"
    chunks = chunk_markdown(text)
    assert [(c.heading, c.text, c.start_line) for c in chunks] == [
        ("Memory", "# Memory", 1),
        ("Memory > Use uv for installs", "## Use uv for installs", 3),
        ("Memory > Tabs are 4 spaces", "## Tabs are 4 spaces", 5),
    ]


def test_blank_lines_around_a_section_are_not_part_of_its_chunk() -> None:
    text = "\n\nintro\n\n\n# A\n\nbody\n\n\n"
    chunks = chunk_markdown(text)
    assert [(c.start_line, c.end_line, c.text) for c in chunks] == [
        (3, 3, "intro"),
        (6, 8, "# A\n\nbody"),
    ]


def test_whitespace_only_text_has_no_chunks() -> None:
    assert chunk_markdown("") == []
    assert chunk_markdown(" \n\t\n\r\n   ") == []


def test_crlf_lines_keep_their_numbers_and_headings() -> None:
    text = "# A\r\none\r\n## B\r\ntwo\r\n"
    chunks = chunk_markdown(text)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("A", 1, 2),
        ("A > B", 3, 4),
    ]
    assert chunks[1].text == "## B\r\ntwo\r"


# --- splitting long sections ----------------------------------------------------------------


def test_a_long_section_is_split_at_blank_lines_first() -> None:
    paragraphs = [f"paragraph {i}\n" + "\n".join(["word " * 10] * 3) for i in range(8)]
    text = "# Long\n\n" + "\n\n".join(paragraphs)
    chunks = chunk_markdown(text, max_chars=400, overlap_chars=0)
    assert len(chunks) > 1
    lines = lines_of(text)
    for chunk in chunks[:-1]:
        assert lines[chunk.end_line] == ""  # each piece ends where a paragraph ends
        assert len(chunk.text) <= 400
    assert all(c.heading == "Long" for c in chunks)


def test_a_long_paragraph_is_split_at_line_ends_with_whole_line_overlap() -> None:
    body = [f"line {i:03d} " + "x" * 40 for i in range(60)]  # 49 chars a line, no blanks
    text = "# P\n" + "\n".join(body)
    chunks = chunk_markdown(text, max_chars=500, overlap_chars=100)
    assert len(chunks) > 1
    for before, after in itertools.pairwise(chunks):
        assert after.start_line == before.end_line - 1  # two 49-char lines of overlap
        assert after.text == source_text(text, after)
    assert chunks[-1].end_line == 61


def test_a_huge_line_is_split_at_the_limit_and_keeps_its_line_number() -> None:
    huge = "".join(chr(ord("a") + i % 26) for i in range(5000))
    text = f"# H\nbefore\n{huge}\nafter\n"
    chunks = chunk_markdown(text, max_chars=1600, overlap_chars=320)
    pieces = [c for c in chunks if c.start_line == c.end_line == 3]
    assert [p.text for p in pieces] == [huge[o : o + 1600] for o in (0, 1280, 2560, 3840)]
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 2)] + [(3, 3)] * 4 + [(4, 4)]
    assert all(len(c.text) <= 1600 for c in chunks)


def test_whitespace_pieces_of_a_huge_line_are_not_chunks() -> None:
    line = "x" + " " * 3998 + "y"
    chunks = chunk_markdown(line, max_chars=1000, overlap_chars=0)
    assert [c.text.strip() for c in chunks] == ["x", "y"]
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1), (1, 1)]


def test_overlap_is_capped_so_chunks_make_progress() -> None:
    text = "y" * 100
    chunks = chunk_markdown(text, max_chars=10, overlap_chars=50)
    assert [len(c.text) for c in chunks] == [10] * 19
    assert "".join(c.text[:5] for c in chunks) + chunks[-1].text[5:] == text


def test_bad_limits_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        chunk_markdown("x", max_chars=0)
    with pytest.raises(ValueError, match="overlap_chars"):
        chunk_markdown("x", overlap_chars=-1)


# --- stable ids -----------------------------------------------------------------------------

NOTES = "# Notes\n\n## Build\nuse make\n\n## Test\nrun pytest\n\n## Deploy\nship it\n"


def test_ids_are_32_hex_chars_and_depend_on_the_path() -> None:
    chunks = chunk_markdown(NOTES)
    ids = chunk_ids("ws/MEMORY.md", chunks)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == len(ids)
    assert set(ids).isdisjoint(chunk_ids("other/MEMORY.md", chunks))


def test_inserting_a_section_at_the_top_leaves_other_ids_unchanged() -> None:
    before = chunk_markdown(NOTES)
    after = chunk_markdown("## New first\nsomething\n\n" + NOTES)
    old = dict(zip(chunk_ids("m.md", before), before, strict=True))
    new = dict(zip(chunk_ids("m.md", after), after, strict=True))
    assert set(old) <= set(new)
    assert len(new) == len(old) + 1
    for cid, chunk in old.items():
        assert new[cid].text == chunk.text
        assert new[cid].start_line == chunk.start_line + 3  # moved, same id


def test_editing_one_section_changes_only_its_id() -> None:
    before = chunk_ids("m.md", chunk_markdown(NOTES))
    after = chunk_ids("m.md", chunk_markdown(NOTES.replace("run pytest", "run pytest -q")))
    assert [b == a for b, a in zip(before, after, strict=True)] == [True, True, False, True]


def test_identical_twin_sections_get_distinct_stable_ids() -> None:
    twins = "# T\n\n## Same\nbody\n\n## Same\nbody\n"
    first = chunk_ids("m.md", chunk_markdown(twins))
    assert len(set(first)) == 3
    assert chunk_ids("m.md", chunk_markdown(twins)) == first
    moved = chunk_ids("m.md", chunk_markdown("intro\n\n" + twins))
    assert moved[1:] == first


# --- chunk times ----------------------------------------------------------------------------

SESSION = "\n".join(
    [
        "<!-- flush 2025-03-01T10:00:00Z trigger=manual -->",  # 1
        "## First finding",  # 2
        "text",  # 3
        "",  # 4
        "<!-- flush 2025-03-01T15:30:00+00:00 trigger=idle -->",  # 5
        "## Second finding",  # 6
        "more",  # 7
        "<!-- flush not-a-time trigger=idle -->",  # 8
    ]
)
T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 3, 1, 15, 30, tzinfo=UTC)
DAY = datetime(2025, 3, 1, tzinfo=UTC)


def test_flush_marks_are_parsed_with_line_numbers_in_utc() -> None:
    assert flush_marks(SESSION) == [(1, T1), (5, T2)]
    assert flush_marks("  <!--flush 2025-03-01T12:00:00+02:00 trigger=pre_compaction-->") == [
        (1, datetime(2025, 3, 1, 10, 0, tzinfo=UTC))
    ]
    assert flush_marks("<!-- flush 2025-03-01T10:00:00 -->")[0][1].tzinfo is UTC
    assert flush_marks("text <!-- flush 2025-03-01T10:00:00Z trigger=x -->") == []


def test_a_chunk_takes_the_latest_flush_mark_before_it() -> None:
    marks = flush_marks(SESSION)
    chunks = chunk_markdown(SESSION)
    by_heading = {c.heading: c for c in chunks}
    # "First finding" (lines 2-5) holds the next flush's mark at its end: still T1.
    assert chunk_time_for_session(by_heading["First finding"], marks, DAY) == T1
    assert chunk_time_for_session(by_heading["Second finding"], marks, DAY) == T2


def test_a_chunk_before_every_mark_takes_the_first_mark_inside_it_else_the_file_date() -> None:
    marks = [(3, T1), (4, T2)]
    spanning = Chunk(1, 5, "", "x", "h")
    assert chunk_time_for_session(spanning, marks, DAY) == T1
    before = Chunk(1, 2, "", "x", "h")
    assert chunk_time_for_session(before, marks, DAY) == DAY
    assert chunk_time_for_session(before, [], None) is None


# --- small-section merging and indexed text (issue #19) -----------------------------------

_note = st.builds(
    lambda level, title, body: "#" * level + " " + title + ("\n\n" + body if body else ""),
    st.integers(1, 3),
    st.sampled_from(["Session", "Fix", "数据库", "Use pnpm", "2026-05-01"]),
    st.sampled_from(
        ["", "short note", "x" * 90, "a longer paragraph " * 12, "<!-- only a comment -->"]
    ),
)
notes_text = st.lists(_note, min_size=0, max_size=14).map("\n\n".join)
NO_SPLIT = 10**6  # no section is cut into pieces: merging alone decides the chunks


def content(text: str) -> int:
    return len(indexed_text(text).strip())


@settings(max_examples=300, deadline=None)
@given(st.one_of(notes_text, markdownish), st.integers(0, 400))
def test_merging_covers_every_non_blank_line_exactly_once(text: str, min_chars: int) -> None:
    chunks = chunk_markdown(text, NO_SPLIT, 0, min_chars)
    lines = lines_of(text)
    seen: list[int] = []
    for chunk in chunks:
        assert chunk.text == source_text(text, chunk)
        seen.extend(range(chunk.start_line, chunk.end_line + 1))
    assert len(seen) == len(set(seen))  # no line in two chunks
    non_blank = {i + 1 for i, line in enumerate(lines) if line.strip()}
    assert non_blank <= set(seen)


@settings(max_examples=300, deadline=None)
@given(notes_text, st.integers(1, 400))
def test_no_chunk_is_smaller_than_min_chars_unless_its_file_is(text: str, min_chars: int) -> None:
    chunks = chunk_markdown(text, NO_SPLIT, 0, min_chars)
    small = [c for c in chunks if content(c.text) < min_chars and not is_scaffold(c.text)]
    if small:
        assert len(chunks) == 1 and content(text) < min_chars


@settings(max_examples=300, deadline=None)
@given(notes_text, _note.map(lambda note: "###" + note.lstrip("#")), st.integers(0, 400))
def test_merged_chunk_ids_are_stable_under_an_insert_at_the_top(
    text: str, inserted: str, min_chars: int
) -> None:
    # A level-3 note: one at a higher level would become the parent of every heading below
    # it and change their heading paths, merging or not.
    before = chunk_markdown(text, NO_SPLIT, 0, min_chars)
    # Identical twins are numbered from the top (their ids are stable only among themselves).
    assume(len({(c.heading, c.hash) for c in before}) == len(before))
    new_text = inserted + " unique-inserted-marker\n\n" + text
    after = chunk_markdown(new_text, NO_SPLIT, 0, min_chars)
    old_ids = chunk_ids("MEMORY.md", before)
    new_ids = set(chunk_ids("MEMORY.md", after))
    # Only the first chunk of the old text may change (the insert can join its group).
    assert set(old_ids[1:]) <= new_ids


def test_a_title_and_date_line_join_the_first_note_under_its_heading() -> None:
    text = "# Session 12\n\n2026-05-01, Ana and Bo\n\n## Redis eviction\n\n" + "allkeys-lru. " * 20
    (chunk,) = chunk_markdown(text, 1600, 320, 200)
    assert chunk.heading == "Session 12 > Redis eviction"
    assert chunk.start_line == 1
    assert chunk.text == text.rstrip("\n")


def test_small_sibling_notes_merge_under_the_first_heading_and_a_lone_heading_stays() -> None:
    text = "## Use pnpm\n\n## Backups\n\nnightly at 02:00\n\n## Ports\n\n" + "port 5173. " * 25
    chunks = chunk_markdown(text, 1600, 320, 200)
    assert [c.heading for c in chunks] == ["Use pnpm"]
    assert [c.start_line for c in chunks] == [1]
    assert chunk_markdown("## Use pnpm\n", 1600, 320, 200)[0].text == "## Use pnpm"
    assert len(chunk_markdown(text, 1600, 320, 0)) == 3  # 0: one chunk a section


def test_a_small_last_section_joins_the_group_before_it() -> None:
    text = "## Long\n\n" + "words " * 60 + "\n\n## Tail\n\nok\n"
    (chunk,) = chunk_markdown(text, 1600, 320, 200)
    assert chunk.heading == "Long"
    assert chunk.end_line == len(text.rstrip("\n").split("\n"))


def test_a_scaffold_is_never_merged_with_a_note() -> None:
    text = workspace_template("shop") + "\n## Prefer tabs\n"
    chunks = chunk_markdown(text, 1600, 320, 200)
    assert [c.text for c in chunks] == [workspace_template("shop").rstrip("\n"), "## Prefer tabs"]


def test_indexed_text_leaves_html_comments_out() -> None:
    assert indexed_text("keep <!-- secret word -->this") == "keep  this"
    assert indexed_text("a\n<!-- dream 2026-01-01\nconsumed: x.md -->\n") == "a\n \n"
    assert indexed_text("<!-- unclosed\nrest") == " "
    assert indexed_text("no comment") == "no comment"


def test_a_file_of_one_line_notes_makes_groups_of_a_few_notes_not_one_blob() -> None:
    notes = "\n\n".join(
        f"## Note {i}: the build uses tool number {i} for step {i}" for i in range(60)
    )
    chunks = chunk_markdown(notes, 1600, 320, 200)
    sizes = [content(c.text) for c in chunks]
    assert all(size >= 200 for size in sizes)
    assert len(chunks) >= 4  # about 60 × 55 chars in groups of a few notes
    assert max(sizes) < 1600
