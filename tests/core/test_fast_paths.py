"""The chunker's and FTS text's fast paths give exactly what the straightforward code gave.

The reference functions below are the earlier, line-by-line versions of the chunker's
section scan, chunk ids, flush marks and :func:`fts_text` (kept here as oracles): the
index's ids and FTS bodies must not change when memoryd is upgraded. The chunk times of a
whole session log, found in one pass, are those of each chunk on its own.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core import chunking, markdown
from memoryd.core.chunking import (
    Chunk,
    chunk_ids,
    chunk_markdown,
    chunk_time_for_session,
    flush_marks,
    session_chunk_times,
)
from memoryd.core.keywords import _alnum_pieces, fts_text
from memoryd.core.text import CJK_RUN, cjk_bigrams
from tests.core.test_chunking import markdownish

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_FLUSH_MARK = re.compile(r"\s*<!--\s*flush\s+(\S+)(?:\s+trigger=\S*)?\s*-->\s*")


def reference_sections(lines: Sequence[str]) -> list[tuple[str, int, int]]:
    sections: list[tuple[str, int, int]] = []
    path: list[tuple[int, str]] = []
    heading, first = "", 0
    fence: str | None = None
    for index, raw in enumerate(lines):
        line = raw.removesuffix("\r")
        if fence is not None:
            close = _FENCE_CLOSE.fullmatch(line)
            if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
                fence = None
            continue
        opening = _FENCE_OPEN.fullmatch(line)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            fence = opening.group(1)
            continue
        found = markdown.heading(line)
        if found is None:
            continue
        level, title = found
        sections.append((heading, first, index))
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        heading = " > ".join(t for _, t in path if t)
        first = index
    sections.append((heading, first, len(lines)))
    return sections


def sections_now(text: str) -> list[tuple[str, int, int]]:
    """The sections chunk_markdown cuts ``text`` into, read back from its chunks' input."""
    lines = text.split("\n")
    return [
        (s.heading, s.first, s.stop) for s in chunking._sections(lines, markdown.marked_lines(text))
    ]


def reference_ids(path: str, chunks: Sequence[Chunk]) -> list[str]:
    seen: Counter[tuple[str, str]] = Counter()
    ids: list[str] = []
    for chunk in chunks:
        key = (chunk.heading, chunk.hash)
        occurrence = seen[key]
        seen[key] += 1
        payload = json.dumps([path, chunk.heading, chunk.hash, occurrence]).encode()
        ids.append(blake3.blake3(payload).hexdigest(length=16))
    return ids


def reference_marks(text: str) -> list[tuple[int, datetime]]:
    marks: list[tuple[int, datetime]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _FLUSH_MARK.fullmatch(line)
        if match is None:
            continue
        try:
            when = datetime.fromisoformat(match.group(1))
        except ValueError:
            continue
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        marks.append((number, when))
    return marks


def reference_fts_text(text: str) -> str:
    if text.isascii():
        return text
    out: list[str] = []
    done = 0
    for match in CJK_RUN.finditer(text):
        start = match.start()
        for offset, piece in _alnum_pieces(match.group()):
            if not piece.isalnum():
                continue
            run_start, run_end = start + offset, start + offset + len(piece)
            out.append(text[done:run_start])
            if run_start > 0 and not text[run_start - 1].isspace():
                out.append(" ")
            out.append(" ".join(cjk_bigrams(piece)))
            if run_end < len(text) and not text[run_end].isspace():
                out.append(" ")
            done = run_end
    out.append(text[done:])
    return "".join(out)


_mark = st.sampled_from(
    [
        "<!-- flush 2025-01-02T03:04:05+00:00 trigger=manual -->",
        "  <!--flush 2025-01-02T03:04:05 -->  ",
        "<!-- flush not-a-time -->",
        "<!-- flush 2025-02-03T04:05:06+02:00 --> <!--",
        "text <!-- flush 2025-01-02T03:04:05 -->",
        "<!-- other -->",
        "\u00a0<!-- flush 2025-03-04T05:06:07Z -->\r",
    ]
)
with_marks = st.lists(st.one_of(_mark, markdownish), max_size=8).map("\n".join)
odd_lines = st.lists(st.text(alphabet=" #`~\r\t\n\u00a0x", max_size=12), max_size=30).map("\n".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(markdownish, odd_lines, with_marks))
def test_sections_are_those_of_the_line_by_line_scan(text: str) -> None:
    assert sections_now(text) == reference_sections(text.split("\n"))


@settings(max_examples=200, deadline=None)
@given(st.one_of(markdownish, with_marks), st.sampled_from(["MEMORY.md", 'w/"ö"\\.md']))
def test_chunk_ids_are_json_payload_ids(text: str, path: str) -> None:
    chunks = chunk_markdown(text, 300, 60)
    assert chunk_ids(path, chunks) == reference_ids(path, chunks)


@settings(max_examples=300, deadline=None)
@given(st.one_of(with_marks, odd_lines, st.text(alphabet="<!-\n flush", max_size=60)))
def test_flush_marks_are_those_of_the_line_by_line_scan(text: str) -> None:
    assert flush_marks(text) == reference_marks(text)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.text(alphabet="数据库东京データ・。한국어 a.\n\u3000ー々〆", max_size=60),
    )
)
def test_fts_text_is_that_of_the_straightforward_version(text: str) -> None:
    assert fts_text(text) == reference_fts_text(text)


@settings(max_examples=300, deadline=None)
@given(with_marks, st.sampled_from([None, datetime(2025, 5, 6, tzinfo=UTC)]))
def test_session_chunk_times_are_those_of_each_chunk(text: str, file_date: datetime | None) -> None:
    chunks = chunk_markdown(text, 120, 30)
    marks = flush_marks(text)
    assert session_chunk_times(chunks, marks, file_date) == [
        chunk_time_for_session(chunk, marks, file_date) for chunk in chunks
    ]
