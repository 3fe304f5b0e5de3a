"""The paths the CLI prints for people, and the forms ``memoryd get`` accepts back (pure).

The socket protocol speaks in paths relative to the memory root; a person needs a path that
opens as printed. :func:`shown` prints a hit's path relative to the current directory when
the file is inside it, else absolute. :func:`requested` turns what a person pastes back —
that printed path (absolute, relative to the current directory, or relative to the memory
root), optionally with the ``:LINE`` or ``:START-END`` suffix search prints — into the
root-relative path the daemon expects and the line range.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

_LINES = re.compile(r"^(?P<path>.+?):(?P<start>\d+)(?:-(?P<end>\d+))?$")


def shown(root: str, rel: str, cwd: str) -> str:
    """``rel`` (relative to ``root``) as a path that opens from ``cwd``."""
    absolute = os.path.normpath(os.path.join(root, rel))
    inside = os.path.relpath(absolute, cwd)
    if not inside.startswith(os.pardir + os.sep) and inside != os.pardir:
        return inside
    return absolute


@dataclass(frozen=True, slots=True)
class Requested:
    path: str  # relative to the memory root (or as given, for the daemon to judge)
    start: int | None = None
    end: int | None = None


def requested(given: str, root: str, cwd: str, is_file: Callable[[str], bool]) -> Requested:
    """What ``memoryd get GIVEN`` asks for; ``is_file`` says whether an absolute path is a
    file (the caller looks, so this stays testable without files).

    A relative path is taken from ``cwd`` when it names a file there, else from the root.
    """
    start = end = None
    match = _LINES.match(given)
    if match and not is_file(_absolute(given, cwd)):
        given = match["path"]
        start = int(match["start"])
        end = int(match["end"]) if match["end"] else start
    absolute = _absolute(given, cwd)
    root = os.path.normpath(root)
    if (os.path.isabs(given) or is_file(absolute)) and PurePath(absolute).is_relative_to(root):
        return Requested(PurePath(os.path.relpath(absolute, root)).as_posix(), start, end)
    return Requested(given, start, end)


def _absolute(path: str, cwd: str) -> str:
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
