"""The memory root's ``.gitignore``: derived and machine-local files stay out of git (pure).

The markdown files are the memory; everything else memoryd keeps beside them is rebuilt from
them or belongs to this machine: indexes, the embedding cache, dream locks, the live session
journals, dream backups, the registry of workspaces, confluence state, temp files of
interrupted writes. :func:`merged` adds the patterns a ``.gitignore`` lacks, keeping the
user's lines as they are, and skips a pattern the user negated (``!pattern``), so a file the
user chose to keep in git stays there.
"""

from __future__ import annotations

HEADER = "# memoryd: derived and machine-local files (the markdown is the memory)"
PATTERNS = (
    "index.sqlite",
    "index.sqlite-*",
    ".cache/",
    ".dream-lock",
    ".live/",
    ".history/",
    ".confluence/",
    "workspaces.json*",
    ".memoryd-tmp-*",
    "*.corrupt",
)


def merged(existing: str | None) -> str | None:
    """The ``.gitignore`` text with memoryd's missing patterns appended, or None when
    ``existing`` lacks none of them (then nothing needs writing)."""
    lines = {line.strip() for line in (existing or "").splitlines()}
    missing = [p for p in PATTERNS if p not in lines and f"!{p}" not in lines]
    if not missing:
        return None
    text = existing or ""
    if text and not text.endswith("\n"):
        text += "\n"
    block = ([] if HEADER in lines else [HEADER]) + missing
    return text + ("\n" if text else "") + "\n".join(block) + "\n"
