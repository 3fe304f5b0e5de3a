"""Markdown as memoryd reads it: fenced code, ATX headings, sections, HTML comments — pure.

One model for every module that reads markdown (the chunker, dream, flush and confluence
checks, the ranking's content-free filter), following CommonMark where it matters to them:

- a **fence** is a run of at least three backticks or tildes after at most three spaces; a
  backtick fence's info string may not hold a backtick. The block it opens is closed by a
  line of the same character, at least as long, after at most three spaces, with nothing
  but spaces and tabs after it. An unclosed fence runs to the end of the text;
- an **ATX heading** is one to six ``#`` after at most three spaces, then a space, a tab or
  the end of the line; its title drops surrounding blanks and a closing ``#`` run that
  follows a blank (``# C#`` is titled ``C#``). Lines inside fenced code are never headings;
- a **section** runs from a heading (or the start of the text) to the next heading: the
  sections of a text cover its lines exactly once, in order;
- an **HTML comment** runs from ``<!--`` to ``-->``, or to the end of the text when unclosed.

Lines are split at ``'\\n'``; a ``'\\r'`` ending a line is ignored by every test here.
Setext headings, indented code and block quotes are not looked at (memory files do not need
them).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "Fences",
    "Heading",
    "Section",
    "closes_fence",
    "heading",
    "headings",
    "marked_lines",
    "opening_fence",
    "sections",
    "strip_comments",
    "unwrap_fence",
]

_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
# CommonMark: an HTML comment without its closing ``-->`` runs to the end of the document.
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
# Where a line can open or close a fence or be a heading: its first character after at most
# three spaces is one of these (every other line is plain text to sections()).
# (Searched as "\n" + that, which SRE finds fast; the first line is looked at on its own.)
_MARKED_LINE = re.compile(r"\n {0,3}[#`~]")
_MARKED_FIRST_LINE = re.compile(r" {0,3}[#`~]")


class Heading(NamedTuple):
    """An ATX heading: its level (1–6) and its title (possibly empty)."""

    level: int
    title: str


class Section(NamedTuple):
    """Lines ``first`` to ``stop - 1`` (0-based) of a text: a heading line and what follows
    it up to the next heading, or (``heading`` None) what comes before the first heading."""

    heading: Heading | None
    first: int
    stop: int


def heading(line: str) -> Heading | None:
    """The ATX heading ``line`` is, else None (whether it lies in fenced code is not known
    here: see :func:`headings`)."""
    # A heading line may end in two "\r" (as the chunker has always read them: chunk ids
    # depend on where sections start).
    match = _HEADING.fullmatch(line.removesuffix("\r").removesuffix("\r"))
    if match is None:
        return None
    title = (match.group(2) or "").strip()
    if title.endswith("#"):
        title = _CLOSING_HASHES.sub("", title).strip()
    return Heading(len(match.group(1)), title)


def opening_fence(line: str) -> str | None:
    """The fence run (```` ``` ````, ``~~~~`` …) when ``line`` opens fenced code, else None."""
    match = _FENCE_OPEN.fullmatch(line.removesuffix("\r"))
    if match is None or (match.group(1)[0] == "`" and "`" in match.group(2)):
        return None
    return match.group(1)


def closes_fence(line: str, fence: str) -> bool:
    """True when ``line`` closes the fenced code that ``fence`` opened."""
    match = _FENCE_CLOSE.fullmatch(line.removesuffix("\r"))
    return match is not None and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence)


class Fences:
    """Whether lines fed in order are fenced code. ``fence`` is the open fence, if any."""

    __slots__ = ("fence",)

    def __init__(self) -> None:
        self.fence: str | None = None

    def feed(self, line: str) -> bool:
        """True when ``line`` (the next line) is fenced code: a fence line or inside one."""
        if self.fence is not None:
            if closes_fence(line, self.fence):
                self.fence = None
            return True
        self.fence = opening_fence(line)
        return self.fence is not None


def marked_lines(text: str) -> list[int]:
    """The 0-based indices of the lines of ``text`` that may be a fence or heading line.

    Every other line starts (after at most three spaces) with something other than ``#``,
    a backtick or ``~``, so it cannot change the fence state or be a heading: scanning only
    these lines gives the same :func:`headings` and :func:`sections` as scanning them all.
    """
    marked = [0] if _MARKED_FIRST_LINE.match(text) else []
    index, counted = 0, 0
    for match in _MARKED_LINE.finditer(text):
        at = match.start()  # the "\n" that ends the line before the marked one
        index += text.count("\n", counted, at) + 1
        counted = at + 1
        marked.append(index)
    return marked


def headings(
    lines: Sequence[str], marked: Iterable[int] | None = None
) -> list[tuple[int, Heading]]:
    """``(0-based index, heading)`` of each heading line outside fenced code, in order.

    ``marked`` (from :func:`marked_lines` of the same text) limits the scan to the lines
    that can matter; the result is the same.
    """
    found: list[tuple[int, Heading]] = []
    fences = Fences()
    for index in range(len(lines)) if marked is None else marked:
        line = lines[index]
        if fences.fence is None and line.lstrip(" ")[:1] == "#":  # opens no fence
            if (h := heading(line)) is not None:
                found.append((index, h))
        else:  # only a line that starts with "#" can be a heading
            fences.feed(line)
    return found


def sections(lines: Sequence[str], marked: Iterable[int] | None = None) -> list[Section]:
    """``lines`` cut at each heading outside fenced code; a heading opens its section.

    The first section (``heading`` None) holds what comes before the first heading and may
    be empty (``first == stop``); every other one starts at its heading line.
    """
    out: list[Section] = []
    current: Heading | None = None
    first = 0
    for index, h in headings(lines, marked):
        out.append(Section(current, first, index))
        current, first = h, index
    out.append(Section(current, first, len(lines)))
    return out


def strip_comments(text: str, replacement: str = "") -> str:
    """``text`` with its HTML comments (an unclosed one runs to the end) replaced by
    ``replacement`` (removed by default; a space keeps the words around one apart)."""
    return _HTML_COMMENT.sub(replacement, text)


def unwrap_fence(text: str, infos: Collection[str] | None = None) -> str | None:
    """The inside of ``text`` when all of it (trimmed) is one fenced code block, else None.

    ``infos`` are the info strings accepted (compared lowercase; ``""`` for none); None
    accepts any. The block must close on the last line, not before.
    """
    lines = text.strip().split("\n")
    fence = opening_fence(lines[0])
    if fence is None or len(lines) < 2:
        return None
    info = lines[0].strip()[len(fence) :].strip().lower()
    if infos is not None and info not in infos:
        return None
    for index in range(1, len(lines)):
        if closes_fence(lines[index], fence):
            return "\n".join(lines[1:-1]) if index == len(lines) - 1 else None
    return None
