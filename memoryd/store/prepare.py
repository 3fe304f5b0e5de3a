"""Reading and chunking memory files ahead of the index writes.

:func:`prepare_file` does every part of syncing one file that needs no database: stat, read,
hash and — when the hash differs from the one the index knows — chunk it, with its chunk
ids, chunk times and FTS bodies. It touches no SQLite connection, so a batch of files can be
prepared in a helper thread while the index thread writes the previous batch
(:meth:`memoryd.store.index.Index.sync_many`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import blake3
import structlog

from memoryd.core.chunking import (
    Chunk,
    chunk_ids,
    chunk_markdown,
    flush_marks,
    indexed_text,
    session_chunk_times,
)
from memoryd.core.config import IndexConfig
from memoryd.core.keywords import fts_text
from memoryd.core.workspace import session_date_from_name, source_of
from memoryd.store.files import NotRegularFile, decode_text, read_regular

log = structlog.get_logger(__name__)

PARTIAL = "partial:"
"""How the hash of a file written only in part (:meth:`Prepared.prefix`) starts."""
DEFAULT_MAX_FILE_BYTES = IndexConfig().max_file_bytes
"""``index.max_file_bytes``: how much of one memory file is indexed."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """One file as the index will take it: gone, unreadable, or read (and maybe chunked)."""

    path: Path
    rel: str
    missing: bool = False
    """Gone (or a symlink out of the memory root): its chunks are to be dropped."""
    error: OSError | None = None
    """It could not be read (the index keeps what it had)."""
    mtime: float = 0.0
    size: int = 0
    digest: str = ""
    data: bytes = b""
    chunks: tuple[Chunk, ...] | None = None
    """None when not chunked yet (its hash was the one the index knew)."""
    ids: tuple[str, ...] = ()
    times: tuple[float | None, ...] = ()
    bodies: tuple[str, ...] = ()
    """The FTS5 text of each chunk (:func:`fts_text` of its :func:`indexed_text`)."""
    warnings: tuple[str, ...] = ()
    """Why this file is not indexed (whole): not a regular file, over the size limit, not
    valid UTF-8. The index logs each once and lists them in its stats (``status``)."""

    def prefix(self, count: int) -> Prepared:
        """This file as its first ``count`` chunks, for writing a big file in several
        phases (:meth:`memoryd.runtime.workspace.memory.WorkspaceMemory.sync_big`). Until
        the last one its hash is ``partial:<count>`` (never a file's), so each phase writes
        and a stop half-way leaves the file to sync again; no chunk of the file is dropped
        before the last phase (the whole old version stays searchable meanwhile)."""
        assert self.chunks is not None
        if count >= len(self.chunks):
            return self
        return replace(
            self,
            digest=f"{PARTIAL}{count}",
            chunks=self.chunks[:count],
            ids=self.ids[:count],
            times=self.times[:count],
            bodies=self.bodies[:count],
        )

    def chunked(self, max_chars: int, overlap_chars: int, min_chars: int = 0) -> Prepared:
        """This file with its chunks, ids, times and FTS bodies (as is when it has them)."""
        if self.chunks is not None or self.missing or self.error is not None:
            return self
        text, warning = decode_text(self.data)
        if warning is not None:
            self = replace(self, warnings=(*self.warnings, warning))
        chunks = chunk_markdown(text, max_chars, overlap_chars, min_chars)
        return replace(
            self,
            chunks=tuple(chunks),
            ids=tuple(chunk_ids(self.rel, chunks)),
            times=tuple(chunk_times(self.rel, text, chunks, self.mtime)),
            bodies=tuple(fts_text(indexed_text(chunk.text)) for chunk in chunks),
        )


def inside(real_root: str, path: Path, real_dirs: dict[Path, str] | None = None) -> bool:
    """True when ``path``, every symlink resolved, stays inside ``real_root`` (resolved).

    ``real_dirs`` caches the resolved directories of many paths checked in a row (a path
    that is not a symlink itself resolves to its resolved directory joined with its name).
    """
    if real_dirs is None or os.path.islink(path):
        real = os.path.realpath(path)
    else:
        parent = real_dirs.get(path.parent)
        if parent is None:
            parent = real_dirs[path.parent] = os.path.realpath(path.parent)
        real = os.path.join(parent, path.name)
    return real == real_root or real.startswith(real_root + os.sep)


def prepare_file(
    path: Path,
    rel: str,
    real_root: str,
    known_hash: str | None,
    max_chars: int,
    overlap_chars: int,
    real_dirs: dict[Path, str] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    min_chars: int = 0,
) -> Prepared:
    """Read ``path`` (``rel`` to the memory root) and chunk it unless its hash is
    ``known_hash``. Never raises :class:`OSError`: a failure is in :attr:`Prepared.error`.
    ``real_dirs``: see :func:`inside`.

    Only regular files are read (:func:`~memoryd.store.files.read_regular`): a FIFO,
    socket or device is skipped (its chunks dropped, a warning). A file over ``max_bytes``
    is indexed up to the limit (its last whole line within it), with a warning: memory
    and time spent on one file stay bounded by the limit, not by the file.
    """
    try:
        if not inside(real_root, path, real_dirs):
            # A symlink out of the memory root is never read: what it points to is not
            # memory, and search must not show what memory.get refuses.
            log.warning("index.symlink_outside_root", path=str(path))
            return Prepared(path, rel, missing=True)
        read = read_regular(path, max_bytes)
    except NotRegularFile as exc:
        warning = f"skipped: not a regular file ({exc.kind})"
        return Prepared(path, rel, missing=True, warnings=(warning,))
    except (FileNotFoundError, NotADirectoryError):
        return Prepared(path, rel, missing=True)
    except OSError as exc:
        return Prepared(path, rel, error=exc)
    data, st = read.data, read.stat
    digest = blake3.blake3(data).hexdigest()
    warnings: tuple[str, ...] = ()
    if read.truncated:
        warnings = (
            f"larger than index.max_file_bytes ({read.size} > {max_bytes} bytes): "
            f"only the first {len(data)} bytes are indexed",
        )
    out = Prepared(
        path,
        rel,
        mtime=st.st_mtime,
        size=st.st_size,
        digest=digest,
        data=data,
        warnings=warnings,
    )
    if digest == known_hash:
        return out
    return out.chunked(max_chars, overlap_chars, min_chars)


def chunk_times(rel: str, text: str, chunks: Sequence[Chunk], mtime: float) -> list[float | None]:
    """Each chunk's time (SPEC §3): a session log's flush marks or file date, else ``mtime``."""
    if source_of(rel) != "session":
        return [mtime] * len(chunks)
    day = session_date_from_name(rel.rsplit("/", 1)[-1])
    file_date = datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None
    stamps: dict[datetime, float] = {}
    out: list[float | None] = []
    for when in session_chunk_times(chunks, flush_marks(text), file_date):
        if when is None:
            out.append(mtime)
            continue
        stamp = stamps.get(when)
        if stamp is None:
            stamp = stamps[when] = when.timestamp()
        out.append(stamp)
    return out
