"""The markdown chunker, stable chunk ids and chunk times (SPEC §3). Pure.

:func:`chunk_markdown` splits a file into sections at ATX headings (keeping the heading path
``Parent > Child`` as context), merges a section with less than ``min_chars`` of content into
the next one of the file (so no chunk is only a title or a date line), and cuts any section
longer than ``max_chars`` into overlapping pieces: at blank lines first, then at line ends,
and a single line longer than the limit at the limit itself.

:func:`indexed_text` is what the index makes of a chunk's text — for FTS and for the
embedding model alike: the text without its HTML comments (a dream footer, a commented-out
line, a flush mark never match a query).

Guarantees, for any input text:

- chunks come in file order (``start_line`` never decreases) and every non-blank line of
  the file lies inside at least one chunk's ``start_line..end_line`` (1-based, inclusive);
- ``len(chunk.text) <= max_chars`` for every chunk, without exception (a line longer than
  the limit is emitted as several pieces, each carrying that line's number);
- a chunk that is not a piece of a split line is exactly the source lines it claims, joined
  with ``'\\n'``; it starts and ends with a non-blank line;
- no chunk is only whitespace; a file that is only a heading line is one chunk;
- with ``min_chars > 0``, only the chunks of a file with less content than that in all, and
  pieces of a section longer than ``max_chars``, have less than ``min_chars`` of content
  (characters of :func:`indexed_text`, stripped);
- the result depends on nothing but the arguments.

Lines are separated by ``'\\n'`` only (as editors number them); a ``'\\r'`` before it stays
in the chunk text. :func:`chunk_ids` derives ids from content, never from position, so a
chunk keeps its id when the file changes around it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii as _json_string
from typing import NamedTuple

import blake3

from memoryd.core.config import IndexConfig
from memoryd.core.markdown import Heading, marked_lines, sections, strip_comments
from memoryd.core.templates import is_scaffold

__all__ = [
    "CHUNKER_VERSION",
    "Chunk",
    "chunk_ids",
    "chunk_markdown",
    "chunk_time_for_session",
    "chunker_signature",
    "flush_marks",
    "indexed_text",
    "session_chunk_times",
]

HEADING_SEPARATOR = " > "
CHUNKER_VERSION = 3
SCAFFOLD_MAX_LINES = 5  # a scaffold section is never longer (see _merge_small)
ANCHOR_SPAN = 1.0  # a run of small sections holds about this many min_chars (_merge_small)
"""Bumped whenever the same text and settings would give other chunks or indexed text: an
index built by another version is re-chunked (see :func:`chunker_signature`)."""

_FLUSH_MARK = re.compile(r"\s*<!--\s*flush\s+(\S+)(?:\s+trigger=\S*)?\s*-->\s*")
_COMMENT_OPEN = re.compile("<!--")

_INDEX = IndexConfig()  # chunk_markdown's sizes default to the [index] defaults


@dataclass(frozen=True, slots=True)
class Chunk:
    """One searchable piece of a markdown file."""

    start_line: int
    """First line, 1-based."""
    end_line: int
    """Last line, 1-based, inclusive."""
    heading: str
    """Heading path, ``"Parent > Child"``; ``''`` before the first heading."""
    text: str
    """The exact text of those lines joined with ``'\\n'`` (or a piece of one huge line)."""
    hash: str
    """blake3 hex digest of :attr:`text`."""


class _Section(NamedTuple):
    heading: str
    first: int  # 0-based index of the first line (the heading line, if any)
    stop: int  # 0-based, exclusive


def chunk_markdown(
    text: str,
    max_chars: int = _INDEX.max_chunk_chars,
    overlap_chars: int = _INDEX.chunk_overlap_chars,
    min_chars: int = 0,
) -> list[Chunk]:
    """Split markdown ``text`` into chunks of at most ``max_chars`` characters.

    ``overlap_chars`` is how much consecutive pieces of one long section share (whole lines
    when splitting at lines; characters when splitting a huge line). It is capped at
    ``max_chars // 2`` so every chunk makes progress. A section with less than
    ``min_chars`` of content is merged with the sections after it until they have that much
    (the last ones of a file with the group before them); 0 merges nothing. Raises
    ``ValueError`` if ``max_chars < 1`` or ``overlap_chars < 0`` (a caller bug: config
    validation rejects it).
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if overlap_chars < 0:
        raise ValueError(f"overlap_chars must be >= 0, got {overlap_chars}")
    overlap = min(overlap_chars, max_chars // 2)
    lines = text.split("\n")
    filled: list[_Section] = []
    for section in _sections(lines, marked_lines(text)):
        first, stop = section.first, section.stop
        while first < stop and _blank(lines[first]):
            first += 1
        while stop > first and _blank(lines[stop - 1]):
            stop -= 1
        if first < stop:
            filled.append(_Section(section.heading, first, stop))
    if min_chars > 0 and len(filled) > 1:
        filled = _merge_small(lines, filled, min_chars, max_chars)
    chunks: list[Chunk] = []
    for section in filled:
        chunks.extend(
            _split_section(lines, section.first, section.stop, section.heading, max_chars, overlap)
        )
    return chunks


def indexed_text(text: str) -> str:
    """The text the index makes searchable for a chunk: ``text`` without HTML comments
    (each replaced by a space). Text with no comment is returned as is."""
    return strip_comments(text, " ") if "<!--" in text else text


def chunker_signature(max_chars: int, overlap_chars: int, min_chars: int) -> str:
    """What an index records of how its chunks were made: a different one means re-chunk."""
    return f"v{CHUNKER_VERSION} max={max_chars} overlap={overlap_chars} min={min_chars}"


def chunk_ids(path: str, chunks: Sequence[Chunk]) -> list[str]:
    """Stable ids (32 hex chars) for the chunks of the file at ``path``.

    An id is blake3 of the path, the heading path, the content hash and the occurrence
    number among identical (heading, hash) twins earlier in the file — never of a line
    number, so inserting or editing text elsewhere leaves an unchanged chunk's id as is.
    ``path`` should be the file's path relative to the memory root, always spelled the same.
    """
    seen: Counter[tuple[str, str]] = Counter()
    ids: list[str] = []
    # The payload is json.dumps([path, heading, hash, occurrence]), spelled out: the same
    # bytes (ensure_ascii escaping, ", " separators) at a fraction of the cost.
    prefix = f"[{_json_string(path)}, "
    headings: dict[str, str] = {}
    for chunk in chunks:
        key = (chunk.heading, chunk.hash)
        occurrence = seen[key]
        seen[key] += 1
        heading = headings.get(chunk.heading)
        if heading is None:
            heading = headings[chunk.heading] = _json_string(chunk.heading)
        payload = f"{prefix}{heading}, {_json_string(chunk.hash)}, {occurrence}]".encode()
        ids.append(blake3.blake3(payload).hexdigest(length=16))
    return ids


def flush_marks(text: str) -> list[tuple[int, datetime]]:
    """The ``<!-- flush <UTC ISO time> trigger=<name> -->`` lines of a session log (SPEC §7).

    Returns ``(1-based line number, aware UTC datetime)`` in file order. A time without an
    offset is taken as UTC; a mark whose time does not parse is ignored.
    """
    marks: list[tuple[int, datetime]] = []
    for index, start in _matching_lines(text, _COMMENT_OPEN):  # a mark holds "<!--"
        end = text.find("\n", start)
        number = index + 1
        match = _FLUSH_MARK.fullmatch(text[start:] if end < 0 else text[start:end])
        if match is None:
            continue
        try:
            when = datetime.fromisoformat(match.group(1))
        except ValueError:
            continue
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        marks.append((number, when))
    return marks


def chunk_time_for_session(
    chunk: Chunk, marks: Sequence[tuple[int, datetime]], file_date: datetime | None
) -> datetime | None:
    """The time of a session-log chunk, for decay (SPEC §3).

    A flush writes its mark line just above its ``##`` sections, so a chunk belongs to the
    **latest mark on or before its first line**. A chunk that starts before every mark but
    contains one (text above the first mark) takes the first mark inside it. Otherwise the
    date from the file name, ``file_date`` (``None`` when unknown: the caller falls back).
    """
    before = [(line, when) for line, when in marks if line <= chunk.start_line]
    if before:
        return max(before, key=lambda mark: mark[0])[1]
    inside = [(line, when) for line, when in marks if line <= chunk.end_line]
    if inside:
        return min(inside, key=lambda mark: mark[0])[1]
    return file_date


def session_chunk_times(
    chunks: Sequence[Chunk], marks: Sequence[tuple[int, datetime]], file_date: datetime | None
) -> list[datetime | None]:
    """:func:`chunk_time_for_session` of every chunk, in one pass: ``marks`` as
    :func:`flush_marks` returns them (one per line, in file order)."""
    lines = [line for line, _ in marks]
    out: list[datetime | None] = []
    for chunk in chunks:
        before = bisect_right(lines, chunk.start_line)
        if before:
            out.append(marks[before - 1][1])  # the latest mark on or before its first line
        elif marks and lines[0] <= chunk.end_line:
            out.append(marks[0][1])  # the first mark inside it
        else:
            out.append(file_date)
    return out


def _blank(line: str) -> bool:
    return not line.strip()


def _matching_lines(text: str, pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    """``(0-based index, start offset)`` of each line of ``text`` (split at ``'\\n'``) where
    ``pattern`` finds a match, in order, each line once."""
    out: list[tuple[int, int]] = []
    index, counted, last = 0, 0, -1
    for match in pattern.finditer(text):
        at = match.start()
        index += text.count("\n", counted, at)
        counted = at
        start = text.rfind("\n", 0, at) + 1
        if start != last:
            out.append((index, start))
            last = start
    return out


def _sections(lines: Sequence[str], marked: Sequence[int]) -> list[_Section]:
    """The sections of :func:`memoryd.core.markdown.sections`, each with its heading path.

    ``marked`` are the lines that can be a heading or a fence line
    (:func:`~memoryd.core.markdown.marked_lines`); every other line is plain text.
    """
    out: list[_Section] = []
    path: list[Heading] = []  # the open headings
    heading = ""
    for section in sections(lines, marked):
        h = section.heading
        if h is not None:
            while path and path[-1].level >= h.level:
                path.pop()
            path.append(h)
            heading = HEADING_SEPARATOR.join(p.title for p in path if p.title)
        out.append(_Section(heading, section.first, section.stop))
    return out


def _content_size(lines: Sequence[str], first: int, stop: int) -> int:
    """Characters of content in lines ``first..stop-1``: comments and outer blanks left out."""
    return len(indexed_text("\n".join(lines[first:stop])).strip())


def _merge_small(
    lines: Sequence[str], filled: Sequence[_Section], min_chars: int, max_chars: int
) -> list[_Section]:
    """Group sections so that each group has ``min_chars`` of content, stably.

    Content-defined, the way rsync and deduplicating backups cut files, so that whether a
    cut falls after a section depends on that section alone, never on where the previous
    cut fell:

    - a section ends a *run* when it has ``min_chars`` of content itself, or when it is an
      *anchor* (:func:`_anchor`: by the hash of its text, with a probability that makes a
      run hold about :data:`ANCHOR_SPAN` × ``min_chars``);
    - a run with less than ``min_chars`` joins the runs after it up to one that has that
      much on its own; small runs at the end of the file join the group before them.

    So an edit or an insert changes the groups around it and no others (an insert at the
    top, the first group only), and a file of small notes (one-line ``remember`` notes)
    makes groups of a few notes each, not one blob. A scaffold template stays alone (search
    never returns it, SPEC §2). A group's heading is its first section's, or its last
    section's when that one is nested under the first (a title line followed by its first
    subsection) or the group is long enough to be cut into pieces (most of which are the
    last section's).
    """
    comments = any("<!--" in lines[i] for s in filled for i in range(s.first, s.stop))
    groups: list[tuple[list[_Section], bool]] = []  # (sections, sealed: takes no other)
    group: list[_Section] = []  # small runs waiting for a large one
    run: list[_Section] = []
    run_content = 0
    for section in filled:
        text = "\n".join(lines[section.first : section.stop])
        if section.stop - section.first <= SCAFFOLD_MAX_LINES and is_scaffold(text):
            if group or run:
                groups.append((group + run, False))
                group, run, run_content = [], [], 0
            groups.append(([section], True))
            continue
        size = _section_content(lines, section, comments)
        run.append(section)
        run_content += size
        if size >= min_chars or _anchor(text, size / min_chars):
            group.extend(run)
            if run_content >= min_chars:
                groups.append((group, False))
                group = []
            run, run_content = [], 0
    out = [
        members[0] if sealed else _group(lines, members, max_chars) for members, sealed in groups
    ]
    tail = group + run
    if tail:
        if groups and not groups[-1][1]:  # the group before takes it, its heading kept
            last = out.pop()
            out.append(_Section(last.heading, last.first, tail[-1].stop))
        else:
            out.append(_group(lines, tail, max_chars))
    return out


def _anchor(text: str, share: float) -> bool:
    """Whether a small section ends its run: with probability ``share / ANCHOR_SPAN`` (its
    content as a share of ``min_chars``), decided by the hash of its text — so a run holds
    about ``ANCHOR_SPAN × min_chars`` of content whatever the size of its notes."""
    draw = int.from_bytes(blake3.blake3(text.encode()).digest(length=4), "big") / 2**32
    return draw < share / ANCHOR_SPAN


def _section_content(lines: Sequence[str], section: _Section, comments: bool) -> int:
    """:func:`_content_size` of a section (which starts and ends with a non-blank line);
    without comments in the file, counted without joining its lines."""
    if comments:
        return _content_size(lines, section.first, section.stop)
    first, last = lines[section.first], lines[section.stop - 1]
    size = sum(len(lines[i]) for i in range(section.first, section.stop))
    size += section.stop - section.first - 1  # the newlines between
    if section.stop - section.first == 1:
        return len(first.strip())
    return size - (len(first) - len(first.lstrip())) - (len(last) - len(last.rstrip()))


def _group(lines: Sequence[str], group: Sequence[_Section], max_chars: int) -> _Section:
    first, last = group[0], group[-1]
    return _Section(_group_heading(lines, first, last, max_chars), first.first, last.stop)


def _group_heading(lines: Sequence[str], first: _Section, last: _Section, max_chars: int) -> str:
    if first is last:
        return first.heading
    nested = not first.heading or last.heading.startswith(first.heading + HEADING_SEPARATOR)
    if nested or _content_size(lines, first.first, last.stop) > max_chars:
        return last.heading
    return first.heading


def _make(start: int, end: int, heading: str, text: str) -> Chunk:
    """A chunk over 0-based lines ``start..end`` (inclusive)."""
    return Chunk(start + 1, end + 1, heading, text, blake3.blake3(text.encode()).hexdigest())


def _split_section(
    lines: Sequence[str], first: int, stop: int, heading: str, max_chars: int, overlap: int
) -> list[Chunk]:
    """Chunks for the non-blank-bounded lines ``first..stop-1`` of one section."""
    whole = "\n".join(lines[first:stop])
    if len(whole) <= max_chars:
        return [_make(first, stop - 1, heading, whole)]

    ends = [0] * (stop - first + 1)  # ends[i]: total length of lines first..first+i-1
    for i in range(first, stop):
        ends[i - first + 1] = ends[i - first] + len(lines[i])

    def size(a: int, b: int) -> int:  # length of lines a..b-1 joined with '\n'
        return ends[b - first] - ends[a - first] + (b - a - 1)

    chunks: list[Chunk] = []
    start = first  # the next chunk starts here (possibly in the previous chunk's overlap)
    fresh = first  # first line not yet in any chunk; always a non-blank line
    while fresh < stop:
        if len(lines[fresh]) > max_chars:
            chunks.extend(_split_line(lines[fresh], fresh, heading, max_chars, overlap))
            start = fresh = _next_filled(lines, fresh + 1, stop)
            continue
        # Longest run of whole lines from `start` that fits; it reaches past `fresh`.
        end = fresh + 1
        while end < stop and size(start, end + 1) <= max_chars:
            end += 1
        if end < stop:
            # Prefer to end just before a blank line, as long as it covers `fresh`.
            for cut in range(end, fresh, -1):
                if _blank(lines[cut]):
                    end = cut
                    break
        last = end
        while _blank(lines[last - 1]):
            last -= 1
        chunks.append(_make(start, last - 1, heading, "\n".join(lines[start:last])))
        previous, start = start, _next_filled(lines, end, stop)
        fresh = start
        if fresh >= stop:
            break
        if len(lines[fresh]) <= max_chars:
            # Overlap: whole trailing lines of this chunk, at most `overlap` chars, and
            # still leaving room for the next fresh line.
            back = last
            while (
                back - 1 > previous
                and size(back - 1, last) <= overlap
                and size(back - 1, fresh + 1) <= max_chars
            ):
                back -= 1
            while back < last and _blank(lines[back]):
                back += 1
            if back < last:
                start = back
    return chunks


def _next_filled(lines: Sequence[str], index: int, stop: int) -> int:
    while index < stop and _blank(lines[index]):
        index += 1
    return index


def _split_line(line: str, index: int, heading: str, max_chars: int, overlap: int) -> list[Chunk]:
    """Pieces of one line longer than ``max_chars``, cut at the limit, sharing ``overlap``."""
    step = max_chars - overlap
    pieces: list[Chunk] = []
    offset = 0
    while True:
        piece = line[offset : offset + max_chars]
        if piece.strip():
            pieces.append(_make(index, index, heading, piece))
        if offset + max_chars >= len(line):
            return pieces
        offset += step
