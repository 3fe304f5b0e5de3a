"""Scaffold templates for new ``MEMORY.md`` files (SPEC §2).

A new global or workspace ``MEMORY.md`` may be created from a short template: a title and
one ``>`` line. Template-only text is never returned by search, so :func:`is_scaffold`
recognises it (and nothing else).
"""

from __future__ import annotations

import re

GLOBAL_NOTE = (
    "> Preferences and knowledge that apply across all projects. "
    "Edit freely: memoryd indexes this file."
)
WORKSPACE_NOTE = (
    "> Curated long-term memory for this workspace. "
    "Edit freely: dream consolidates session logs into it."
)

_SCAFFOLD = re.compile(
    r"\A\s*#[ \t]+[^\n]*\n\s*(?P<note>>[^\n]*)\s*\Z",
)


def global_template() -> str:
    """The text of a new global ``MEMORY.md``."""
    return f"# Global memory\n\n{GLOBAL_NOTE}\n"


def workspace_template(name: str) -> str:
    """The text of a new workspace ``MEMORY.md`` for the workspace called ``name``."""
    return f"# Memory: {name}\n\n{WORKSPACE_NOTE}\n"


def is_scaffold(text: str) -> bool:
    """True when ``text`` is exactly a scaffold template (title + our ``>`` line)."""
    match = _SCAFFOLD.match(text)
    return match is not None and match.group("note").strip() in (GLOBAL_NOTE, WORKSPACE_NOTE)
