"""Note formatting and line windows over memory text (SPEC §7 "remember", §11) — pure.

- :func:`format_note` turns the text given to ``memory.remember`` into a markdown section;
- :func:`append_note` appends a section to a file's text, one blank line after what was there
  and above a trailing dream footer (:data:`DREAM_FOOTER`, which stays the last line);
- :func:`numbered_lines` cuts the 1-based line window that ``memory.get`` returns.

Lines are separated by ``\\n`` only (as editors and ``grep -n`` count them).
"""

from __future__ import annotations

import re

from memoryd.core.replies import PageCursor, PageReply
from memoryd.errors import InvalidParams

#: A dream's footer comment line (``<!-- dream <UTC time> consumed: … -->``), SPEC §8.4.
DREAM_FOOTER = re.compile(r"^[ \t]*<!-- dream [^\n]*?-->[ \t]*\n?", re.MULTILINE)

#: A first line longer than this is not used as a heading.
MAX_HEADING_CHARS = 80


def format_note(text: str) -> str | None:
    """The markdown section ``memory.remember`` stores for ``text``, or None for nothing.

    Trimmed; empty → None; starting with ``#`` → as is; one line → ``## <line>``; several
    lines whose first line has at most 80 characters → that line as a ``##`` heading, a
    blank line, the rest; otherwise ``## Note``, a blank line, the text.
    """
    note = text.replace("\r\n", "\n").strip()
    if not note:
        return None
    if note.startswith("#"):
        return note
    first, newline, rest = note.partition("\n")
    if not newline:
        return f"## {note}"
    first = first.strip()
    if len(first) <= MAX_HEADING_CHARS:
        return f"## {first}\n\n{_drop_leading_blank_lines(rest)}"
    return f"## Note\n\n{note}"


def append_note(existing: str, note: str) -> str:
    """``existing`` with ``note`` appended after exactly one blank line; ends with ``\\n``.

    Trailing blank lines of ``existing`` and leading/trailing blank lines of ``note`` are
    dropped so that the separation is always exactly one blank line. Nothing else of
    ``existing`` changes. An empty (or blank) ``existing`` gives just the note; a blank
    ``note`` adds nothing. When the last non-blank line of ``existing`` is a dream footer,
    the note goes above it and the footer stays last.
    """
    body = _drop_trailing_blank_lines(existing)
    last = body.rfind("\n") + 1
    if body and DREAM_FOOTER.fullmatch(body[last:]) and _drop_leading_blank_lines(note).strip():
        above = append_note(body[:last], note)
        return f"{above}\n{body[last:]}\n"
    section = _drop_trailing_blank_lines(_drop_leading_blank_lines(note))
    if not section:
        return f"{body}\n" if body else ""
    if not body:
        return f"{section}\n"
    return f"{body}\n\n{section}\n"


def numbered_lines(text: str, start: int, count: int | None) -> tuple[str, int, int]:
    """The window of ``count`` lines of ``text`` from 1-based line ``start``.

    Returns ``(window_text, start_line, total_lines)``: ``window_text`` is the lines as they
    are (with their ``\\n``; no numbers added — ``start_line`` numbers the first), ``count``
    None means to the end. A window past the end is empty. ``start < 1`` or ``count < 0``
    is refused with :class:`InvalidParams`.
    """
    if start < 1:
        raise InvalidParams(f"from must be at least 1, got {start}", field="from")
    if count is not None and count < 0:
        raise InvalidParams(f"lines must not be negative, got {count}", field="lines")
    lines = split_lines(text)
    end = len(lines) if count is None else start - 1 + count
    return "".join(lines[start - 1 : end]), start, len(lines)


def page(text: str, start: int, lines: int | None, start_char: int, max_chars: int) -> PageReply:
    """The ``memory.get`` window of ``text``: ``lines`` lines from line ``start`` (from
    character ``start_char`` of that line), at most ``max_chars`` characters.

    A longer window ends at a line end and ``next_from`` names the next line, or — when one
    line alone is longer — it ends inside that line and ``next_from``/``next_char`` say
    where the rest begins. The cursor always moves.
    """
    window, first, total = numbered_lines(text, start, lines)
    if start_char:
        line_end = window.find("\n") + 1 or len(window)
        window = window[min(start_char, line_end) :]
    cursor: PageCursor = {"start_char": start_char} if start_char else {}
    if len(window) > max_chars:  # one reply stays small: a client pages with `from`
        window = window[:max_chars]
        whole = window.rfind("\n") + 1
        if whole:
            cursor["next_from"] = first + window.count("\n", 0, whole)
            window = window[:whole]
        else:  # one line longer than a reply: page inside it
            cursor["next_from"] = first
            cursor["next_char"] = start_char + len(window)
    return {"text": window, "start_line": first, **cursor, "total_lines": total}


def split_lines(text: str) -> list[str]:
    """``text`` split after each ``\\n`` (kept); a last line without one is kept too."""
    parts = text.split("\n")
    lines = [f"{part}\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _drop_leading_blank_lines(text: str) -> str:
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


def _drop_trailing_blank_lines(text: str) -> str:
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)
