"""The memory tree on disk: where each workspace's files live, and safe client paths (SPEC §2, §15).

```
<root>/MEMORY.md                         global curated memory
<root>/experience.md                     lessons from the experience confluence (global)
<root>/<slug>-<hash8>/MEMORY.md          workspace curated memory
<root>/<slug>-<hash8>/sessions/*.md      session logs (sessions/.live/: transcript journals)
<root>/<slug>-<hash8>/index.sqlite       the index
<root>/<slug>-<hash8>/.dream-lock        DreamLock
<root>/<slug>-<hash8>/.history/          previous MEMORY.md versions + dream journal
```

Client paths (``memory.get``) follow one rule: they are relative to the memory root, with
``/`` separators, and name the global ``MEMORY.md``, ``experience.md`` or a ``.md`` file
inside the calling workspace's own directory — nothing else, however it is spelled.
"""

from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memoryd.core.workspace import (
    EXPERIENCE_FILE,
    GLOBAL_FILES,
    HISTORY_DIR,
    INDEX_FILE,
    LIVE_DIR,
    MEMORY_FILE,
    SESSIONS_DIR,
    WorkspaceKey,
)
from memoryd.core.workspace import workspace_key as make_workspace_key
from memoryd.errors import PathOutsideMemory, StorageError, WorkspaceNotFound
from memoryd.store.files import make_private_dirs
from memoryd.store.gitinfo import find_origin

MAX_CLIENT_PATH = 1024
_DIR_MODE = 0o700


@dataclass(frozen=True, slots=True)
class Workspace:
    """A workspace: its canonical directory, its identity and its memory directory."""

    path: Path
    """The canonical (symlink-free, absolute) workspace directory."""
    key: WorkspaceKey
    dir: Path
    """``<root>/<slug>-<hash8>``."""

    @property
    def memory_file(self) -> Path:
        return self.dir / MEMORY_FILE

    @property
    def sessions_dir(self) -> Path:
        return self.dir / SESSIONS_DIR

    @property
    def live_dir(self) -> Path:
        """``sessions/.live``: the transcript journals of open sessions."""
        return self.sessions_dir / LIVE_DIR

    @property
    def index_path(self) -> Path:
        return self.dir / INDEX_FILE

    @property
    def lock_path(self) -> Path:
        return self.dir / ".dream-lock"

    @property
    def history_dir(self) -> Path:
        return self.dir / HISTORY_DIR


def resolve_workspace(path: str | Path, memory_root: Path) -> Workspace:
    """The workspace at ``path`` (an absolute path to an existing directory).

    The path is canonicalised (``realpath``), so every spelling of one directory — and,
    through the git ``origin``, every clone and worktree of one repository — maps to the
    same memory directory. Anything else raises :class:`WorkspaceNotFound`.
    """
    text = os.fspath(path) if isinstance(path, str | os.PathLike) else ""
    if not text or "\x00" in text or not os.path.isabs(text):
        raise WorkspaceNotFound(
            f"workspace must be an absolute path to a directory, got {_show(text)}",
            path=_bounded(text),
        )
    canonical = Path(os.path.realpath(text))
    if not os.path.isdir(canonical):
        raise WorkspaceNotFound(
            f"workspace {_show(text)} is not an existing directory", path=_bounded(text)
        )
    key = make_workspace_key(find_origin(canonical), str(canonical))
    return Workspace(path=canonical, key=key, dir=memory_root / key.dirname)


def global_memory_file(root: Path) -> Path:
    """``<root>/MEMORY.md``: the global curated memory."""
    return root / MEMORY_FILE


def experience_file(root: Path) -> Path:
    """``<root>/experience.md``: lessons distilled across workspaces (SPEC §10)."""
    return root / EXPERIENCE_FILE


def memory_relpath(root: Path, path: Path) -> str:
    """``path`` relative to the memory root, with ``/`` separators (as clients see it)."""
    return path.relative_to(root).as_posix()


def ensure_workspace_dirs(ws: Workspace) -> None:
    """Create the memory root and the workspace's directories, each ``0700`` when new.

    Existing directories are left as they are (a person may have chosen other modes).
    """
    root = ws.dir.parent
    try:
        make_private_dirs(root.parent)
    except OSError as exc:
        raise _dir_error(root.parent, exc) from exc
    for directory in (root, ws.dir, ws.sessions_dir, ws.live_dir, ws.history_dir):
        _make_private_dir(directory)


_READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def writable_problem(ws: Workspace) -> str | None:
    """Create the workspace's directories (:func:`ensure_workspace_dirs`) and check that a
    file can be created in its memory directory; None when it can, else why not (a
    read-only file system or no permission: the workspace then serves search read-only).
    Any other failure raises :class:`StorageError`.
    """
    try:
        ensure_workspace_dirs(ws)
        fd, probe = tempfile.mkstemp(prefix=".memoryd-probe-", dir=ws.dir)
        os.close(fd)
        os.unlink(probe)
    except StorageError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno in _READ_ONLY_ERRNOS:
            return exc.message
        raise
    except OSError as exc:
        if exc.errno in _READ_ONLY_ERRNOS:
            return f"cannot create a file in {ws.dir}: {exc.strerror or exc}"
        raise StorageError(
            f"cannot write in {ws.dir}: {exc.strerror or exc}", path=str(ws.dir)
        ) from exc
    return None


def _make_private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=_DIR_MODE)
    except FileExistsError:
        if not directory.is_dir():
            raise StorageError(
                f"cannot create directory {directory}: a file is in the way",
                path=str(directory),
            ) from None
        return
    except OSError as exc:
        raise _dir_error(directory, exc) from exc
    try:
        os.chmod(directory, _DIR_MODE)  # exactly 0700, whatever the umask
    except OSError as exc:
        raise _dir_error(directory, exc) from exc


def _dir_error(directory: Path, exc: OSError) -> StorageError:
    reason = exc.strerror or str(exc)
    return StorageError(f"cannot create directory {directory}: {reason}", path=str(directory))


def resolve_client_path(root: Path, ws: Workspace, rel: str) -> Path:
    """The file a client's ``rel`` names, if this workspace may read it.

    ``rel`` is relative to the memory root with ``/`` separators (``MEMORY.md``,
    ``experience.md``, ``<slug>-<hash8>/sessions/2025-01-02-x-1234abcd.md``); empty and
    ``.`` segments are ignored. Refused with :class:`PathOutsideMemory` (the message names
    the path): empty or over-long paths, NUL bytes, backslashes, absolute paths, ``..``
    segments, other files of the root, another workspace's files, non-``.md`` files, and
    any path whose symlinks resolve outside the allowed file or directory. Returns the
    path under ``root`` (not the symlink-resolved one).
    """

    def refuse(reason: str) -> PathOutsideMemory:
        plain = _bounded(rel) if isinstance(rel, str) else None
        return PathOutsideMemory(f"path {_show(rel)} is refused: {reason}", path=plain)

    if not isinstance(rel, str):
        raise refuse("a path must be a string")
    if not rel:
        raise refuse("the path is empty")
    if len(rel) > MAX_CLIENT_PATH:
        raise refuse(f"the path is longer than {MAX_CLIENT_PATH} characters")
    if "\x00" in rel:
        raise refuse("the path contains a NUL byte")
    if "\\" in rel:
        raise refuse("use '/' as the separator, not '\\'")
    if rel.startswith("/") or os.path.isabs(rel):
        raise refuse("absolute paths are not allowed; give a path relative to the memory root")
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise refuse("'..' segments are not allowed")
    if not parts:
        raise refuse("the path names no file")

    dirname = ws.key.dirname
    real_root = Path(os.path.realpath(root))
    if len(parts) == 1:
        if parts[0] not in GLOBAL_FILES:
            raise refuse(
                f"at the memory root only {' and '.join(GLOBAL_FILES)} may be read; "
                f"this workspace's files are under {dirname}/"
            )
    elif parts[0] != dirname:
        raise refuse(f"only this workspace's files (under {dirname}/) may be read")
    elif not parts[-1].endswith(".md"):
        raise refuse("only markdown memory files (.md) may be read")

    candidate = root.joinpath(*parts)
    real = Path(os.path.realpath(candidate))
    if len(parts) == 1:
        inside = real == real_root / parts[0]
    else:
        area = real_root / dirname
        inside = real != area and real.is_relative_to(area) and real.name.endswith(".md")
    if not inside:
        raise refuse("it resolves (through a symlink) outside this workspace's memory")
    return candidate


def _bounded(text: str, limit: int = 200) -> str:
    """A client-supplied string as it is (for ``error.data``: plain JSON, no quoting), cut to
    ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit]}…"


def _show(text: str) -> str:
    """A printable, bounded rendering of a client-supplied string for messages."""
    shown = repr(text)
    return shown if len(shown) <= 200 else f"{shown[:200]}…"
