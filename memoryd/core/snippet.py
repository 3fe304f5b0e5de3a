"""The snippet of a search hit: the part of its chunk that shows why it was found — pure.

A chunk holds up to ``index.max_chunk_chars`` of text, several small notes merged into one
(``index.min_chunk_chars``), and a hit's snippet shows at most ``limit`` characters of it.
When the whole chunk fits, the snippet is the chunk. Otherwise it is the chunk's beginning
if the line matching most of the query's keywords is in it, else a window starting at that
line (or at the heading just above it, when that fits too), marked with ``…`` where text
was left out — so a note found in the middle of a long chunk is shown, not the notes
around it.
"""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.core.markdown import headings

ELLIPSIS = "…"


def snippet_of(text: str, keywords: Sequence[str], limit: int) -> str:
    """At most ``limit`` characters of ``text`` (stripped) showing its best-matching line.

    ``keywords`` are the query's keywords (lowercase, :func:`memoryd.core.keywords.
    extract_keywords`); a line's match is how many of them it contains (as substrings,
    case-insensitively). With no matching line the snippet is the text's beginning.
    """
    body = text.strip()
    if len(body) <= limit:
        return body
    start = _window_start(body, keywords, limit)
    if start == 0:
        return body[: limit - 1].rstrip() + ELLIPSIS
    rest = body[start:]
    if len(rest) + 1 <= limit:
        return ELLIPSIS + rest
    return ELLIPSIS + rest[: limit - 2].rstrip() + ELLIPSIS


def _window_start(body: str, keywords: Sequence[str], limit: int) -> int:
    """Where the snippet starts: 0, or the start of the best line (or of its heading)."""
    terms = [k for k in keywords if k]
    if not terms:
        return 0
    best_start, best_end, best_count = 0, 0, 0
    heading_at: int | None = None  # start of the last heading line seen (this one's too)
    best_heading: int | None = None
    at = 0
    lines = body.split("\n")
    heading_lines = {index for index, _ in headings(lines)}
    for index, line in enumerate(lines):
        if index in heading_lines:
            heading_at = at
        lowered = line.lower()
        count = sum(1 for term in terms if term in lowered)
        if count > best_count:
            best_start, best_end, best_count = at, at + len(line), count
            best_heading = heading_at
        at += len(line) + 1
    if best_count == 0 or best_end <= limit - 1:
        return 0
    if best_heading is not None and best_end - best_heading <= limit - 2:
        return best_heading
    return best_start
