"""Workspace identity and memory-file naming (SPEC §2, §3, §7, §10) — pure.

Everything here is a function of strings: which directory of the memory root a workspace's
memory lives in (``<slug>-<hash8>``), what kind of memory a root-relative path holds
(``global`` / ``workspace`` / ``session``), and how session logs are named. Finding the git
``origin`` and canonicalising paths are I/O and live in :mod:`memoryd.store`.

The naming is compatible with grok-build's ``~/.grok/memory``: the same repository gives the
same directory name, so pointing ``memory.root`` at an existing tree just works.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Container
from dataclasses import dataclass
from typing import Literal

from blake3 import blake3

from memoryd.core.secrets import REDACTION
from memoryd.errors import InvalidParams

Source = Literal["global", "workspace", "session"]
WorkspaceKind = Literal["git", "path"]

#: Files at the root of the memory tree that are global memory (SPEC §2, §10).
MEMORY_FILE = "MEMORY.md"
EXPERIENCE_FILE = "experience.md"
GLOBAL_FILES: tuple[str, ...] = (MEMORY_FILE, EXPERIENCE_FILE)
SESSIONS_DIR = "sessions"
#: In a workspace's memory directory: open sessions' journals (in sessions/), the index,
#: dream backups and journal (the README's "Memory on disk").
LIVE_DIR = ".live"
INDEX_FILE = "index.sqlite"
HISTORY_DIR = ".history"

SLUG_MAX = 40
SESSION_SLUG_MAX = 30

_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_SESSION_DATE = re.compile(r"\A(\d{4}-\d{2}-\d{2})-")
_SID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def slugify(text: str, max_len: int, *, empty: str = "workspace") -> str:
    """A file-name-safe slug of ``text`` (SPEC §2).

    Lowercase; every character that is not ASCII alphanumeric becomes ``-``; runs of ``-``
    collapse; the result is cut to ``max_len`` characters and *then* ``-`` is trimmed at
    both ends (so a cut landing on a ``-`` never leaves one dangling). An empty result
    gives ``empty`` (``workspace`` by default).
    """
    slug = _NOT_SLUG.sub("-", text.lower())[: max(max_len, 0)].strip("-")
    return slug or empty


def normalize_origin(url: str) -> str | None:
    """The ``org/repo`` identity of a git remote URL, or None when it has none (SPEC §2).

    - no ``:`` at all (a local path) → None;
    - scp form (the part before the first ``:`` has an ``@`` and no ``/``, as in
      ``git@github.com:acme/widgets.git``) → what follows the colon;
    - otherwise (``https://``, ``ssh://user@host:port/``, ``file:///`` …) → what follows
      ``//``, then what follows the first ``/`` (this drops the host and any port/user);
      a URL with a ``:`` but no ``//`` that is not scp form → None;
    - then a trailing ``.git`` is stripped, then leading/trailing ``/``;
    - empty, or no ``/`` left (no organisation) → None.

    Case is kept, and deep paths stay whole (``group/sub/repo``).
    """
    if ":" not in url:
        return None
    before, _, after = url.partition(":")
    if "@" in before and "/" not in before:
        rest = after
    else:
        _, slashes, tail = url.partition("//")
        if not slashes:
            return None
        _, slash, rest = tail.partition("/")
        if not slash:
            return None
    rest = rest.removesuffix(".git").strip("/")
    if not rest or "/" not in rest:
        return None
    return rest


@dataclass(frozen=True, slots=True)
class WorkspaceKey:
    """The identity of a workspace and the name of its directory under the memory root."""

    slug: str
    hash8: str
    identity: str
    """``org/repo`` for a git workspace, the canonical absolute path otherwise."""
    kind: WorkspaceKind

    @property
    def dirname(self) -> str:
        """``<slug>-<hash8>``: the workspace's directory under the memory root."""
        return f"{self.slug}-{self.hash8}"


def hash8_of(text: str) -> str:
    """The first 8 hex characters of blake3(``text``'s UTF-8 bytes).

    A path that came from the OS with undecodable bytes hashes those original bytes.
    """
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return blake3(data).hexdigest()[:8]


def workspace_key(origin_url: str | None, canonical_path: str) -> WorkspaceKey:
    """The key of the workspace at ``canonical_path`` whose git origin is ``origin_url``.

    With an ``org/repo`` identity, the slug comes from the repository name and the hash
    from ``org/repo`` — so clones and worktrees of one repository share one memory.
    Without one, both come from the canonical path (slug from its last component).
    """
    identity = normalize_origin(origin_url) if origin_url is not None else None
    if identity is not None:
        name = identity.rsplit("/", 1)[-1]
        return WorkspaceKey(slugify(name, SLUG_MAX), hash8_of(identity), identity, "git")
    name = canonical_path.rstrip("/").rsplit("/", 1)[-1]
    return WorkspaceKey(slugify(name, SLUG_MAX), hash8_of(canonical_path), canonical_path, "path")


def source_of(relpath: str) -> Source | None:
    """What kind of memory the file at ``relpath`` (relative to the memory root, ``/``
    separators) holds, or None when it is not a memory file at all.

    ``MEMORY.md`` and ``experience.md`` at the root are ``global``; ``<ws>/MEMORY.md`` is
    ``workspace``; ``<ws>/sessions/<name>.md`` is ``session``. Hidden names (temp files,
    ``.history``, ``.live``) are never memory.
    """
    parts = relpath.split("/")
    if any(not part or part.startswith(".") for part in parts):
        return None
    match parts:
        case [name] if name in GLOBAL_FILES:
            return "global"
        case [_, "MEMORY.md"]:
            return "workspace"
        case [_, "sessions", name] if name.endswith(".md"):
            return "session"
        case _:
            return None


def session_id_prefix(session_id: str) -> str:
    """``sid8``: the first 8 characters of a session id, made safe for a file name.

    Characters other than ASCII letters, digits, ``_`` and ``-`` become ``-`` so that a
    client-chosen id can never steer the path (``../x``). An empty id is refused.
    """
    sid8 = _SID_UNSAFE.sub("-", session_id[:8])
    if not sid8:
        raise InvalidParams("session_id must not be empty")
    return sid8


def session_log_name(
    date: datetime.date,
    first_user_message: str | None,
    session_id: str,
    taken: Container[str] = (),
) -> str:
    """``YYYY-MM-DD-<slug>-<sid8>.md``: the file name of a session's log for ``date`` (UTC).

    The slug is slugify(first real user message, 30), or ``session`` when there is none or
    it has nothing sluggable. Each session has its own log: when that name is in ``taken``
    (a file that exists, or a name another open session claimed — two ids sharing their
    first 8 characters), the name gets the session's own suffix, ``-<sid8>-<h6>.md`` with
    ``h6`` from blake3 of the whole id, then ``-2``, ``-3`` … until it is free. The message
    is scrubbed already (SPEC §18); its redaction marks are left out of the slug.
    """
    text = REDACTION.sub(" ", first_user_message or "")
    slug = slugify(text, SESSION_SLUG_MAX, empty="session")
    base = f"{date.isoformat()}-{slug}-{session_id_prefix(session_id)}"
    name = f"{base}.md"
    if name not in taken:
        return name
    own = f"{base}-{_session_suffix(session_id)}"
    name, n = f"{own}.md", 1
    while name in taken:
        n += 1
        name = f"{own}-{n}.md"
    return name


def _session_suffix(session_id: str) -> str:
    return blake3(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:6]


def is_log_of_session(name: str, session_id: str) -> bool:
    """True when the log ``name`` may be the session ``session_id``'s (``-<sid8>.md``, or
    its own suffixed name from :func:`session_log_name`)."""
    sid8 = session_id_prefix(session_id)
    if name.endswith(f"-{sid8}.md"):
        return True
    own = f"-{sid8}-{_session_suffix(session_id)}"
    stem = name[:-3] if name.endswith(".md") else name
    if stem.endswith(own):
        return True
    head, _, tail = stem.rpartition("-")
    return tail.isdigit() and head.endswith(own)


def session_date_from_name(name: str) -> datetime.date | None:
    """The date a session log's file name starts with, or None if it starts with none.

    Accepts a bare name or a ``/``-separated path (only the last component counts).
    """
    match = _SESSION_DATE.match(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    try:
        return datetime.date.fromisoformat(match.group(1))
    except ValueError:
        return None
