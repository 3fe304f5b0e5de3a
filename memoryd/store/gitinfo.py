"""Finding a workspace's git ``origin`` URL by reading git's files (SPEC §2).

No ``git`` subprocess: walk up from the workspace to the nearest ``.git`` — a directory, or
a file ``gitdir: <dir>`` (linked worktrees, submodules) — follow ``commondir`` (a worktree's
config lives in the main repository), read ``config`` and return ``remote "origin"``'s
``url``. Anything missing, unreadable or odd gives None (the workspace is then identified by
its path); nothing here raises.
"""

from __future__ import annotations

import os
from pathlib import Path

from memoryd.store.files import read_regular

_MAX_FILE_BYTES = 1 << 20
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}

Section = tuple[str, str | None]


def find_origin(path: Path) -> str | None:
    """The ``origin`` remote URL of the git repository containing ``path``, or None."""
    try:
        git_dir = find_git_dir(Path(os.path.abspath(path)))
        if git_dir is None:
            return None
        text = _read_small(_common_dir(git_dir) / "config")
    except (OSError, ValueError):
        return None
    return None if text is None else remote_url(text, "origin")


def find_git_dir(start: Path) -> Path | None:
    """The git directory of the nearest repository at or above ``start``, or None.

    Stops at the first ``.git`` found: if that one is unusable (a ``.git`` file without a
    valid ``gitdir:`` line, pointing nowhere) the answer is None rather than an outer
    repository.
    """
    for directory in (start, *start.parents):
        dot_git = directory / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            return _follow_gitfile(dot_git)
    return None


def _follow_gitfile(dot_git: Path) -> Path | None:
    text = _read_small(dot_git)
    if text is None:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "gitdir" and value.strip():
            target = dot_git.parent / value.strip()  # an absolute value replaces the base
            return target if target.is_dir() else None
    return None


def _common_dir(git_dir: Path) -> Path:
    """Where a (worktree's) git directory keeps the shared config: its ``commondir``."""
    text = _read_small(git_dir / "commondir")
    value = text.strip() if text is not None else ""
    if value:
        common = git_dir / value
        if common.is_dir():
            return common
    return git_dir


def _read_small(path: Path) -> str | None:
    """The text of a small regular file, or None if missing, not a file or too big."""
    try:
        read = read_regular(path, _MAX_FILE_BYTES)  # a FIFO is refused, never opened
    except OSError:
        return None
    if read.truncated:
        return None
    return read.data.decode("utf-8", "replace")


def remote_url(config_text: str, remote: str) -> str | None:
    """``remote.<remote>.url`` from the text of a git config file, or None.

    Understands what git writes and what people type: ``[remote "origin"]`` and the legacy
    ``[remote.origin]`` headers, case-insensitive section and key names, a key on the
    header's line, quoted values with escapes, ``#``/``;`` comments and ``\\``
    continuations. Several ``url`` lines → the last (as ``git config --get``).
    """
    lines = config_text.replace("\r\n", "\n").split("\n")
    section: Section | None = None
    url: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index].lstrip()
        index += 1
        if line.startswith("["):
            section, line = _parse_header(line)
            line = line.lstrip()
        if not line or line[0] in "#;":
            continue
        name, sep, raw = line.partition("=")
        if section != ("remote", remote) or name.strip().lower() != "url" or not sep:
            continue
        value, used = _parse_value(raw, lines, index)
        index += used
        if value:
            url = value
    return url


def _parse_header(line: str) -> tuple[Section | None, str]:
    """Parse ``[name "sub"]`` / ``[name.sub]`` at the start of ``line``.

    Returns the section (None if malformed) and the rest of the line after ``]``.
    """
    body = line[1:]
    end = 0
    while end < len(body) and body[end] not in ' \t"]':
        end += 1
    name = body[:end]
    rest = body[end:].lstrip(" \t")
    if rest.startswith("]"):
        section, dot, sub = name.partition(".")
        if not section:
            return None, ""
        return (section.lower(), sub.lower() if dot else None), rest[1:]
    if not rest.startswith('"') or not name:
        return None, ""
    chars: list[str] = []
    position = 1
    while position < len(rest):
        char = rest[position]
        if char == "\\" and position + 1 < len(rest):
            chars.append(rest[position + 1])
            position += 2
            continue
        if char == '"':
            after = rest[position + 1 :]
            if after.startswith("]"):
                return (name.lower(), "".join(chars)), after[1:]
            return None, ""
        chars.append(char)
        position += 1
    return None, ""


def _parse_value(raw: str, lines: list[str], index: int) -> tuple[str, int]:
    """Parse a config value starting with ``raw``; may consume continuation lines.

    Returns the value and how many following lines it consumed.
    """
    out: list[str] = []
    keep = 0  # length of ``out`` up to its last character that is not trailing blank
    quoted = False
    used = 0
    text = raw.lstrip(" \t")
    position = 0
    while position < len(text):
        char = text[position]
        position += 1
        if char == "\\":
            if position >= len(text):  # continuation: the value goes on on the next line
                if index + used >= len(lines):
                    break
                text, position = lines[index + used], 0
                used += 1
                continue
            out.append(_ESCAPES.get(text[position], text[position]))
            position += 1
            keep = len(out)
        elif char == '"':
            quoted = not quoted
            keep = len(out)
        elif not quoted and char in "#;":
            break
        else:
            out.append(char)
            if quoted or char not in " \t":
                keep = len(out)
    return "".join(out[:keep]), used
