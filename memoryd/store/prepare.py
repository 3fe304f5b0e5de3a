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
    session_chunk_times,
)
from memoryd.core.keywords import fts_text
from memoryd.core.workspace import session_date_from_name, source_of

log = structlog.get_logger(__name__)


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
    """The FTS5 text of each chunk (:func:`fts_text`)."""

    def chunked(self, max_chars: int, overlap_chars: int) -> Prepared:
        """This file with its chunks, ids, times and FTS bodies (as is when it has them)."""
        if self.chunks is not None or self.missing or self.error is not None:
            return self
        text = self.data.decode("utf-8", errors="replace")
        chunks = chunk_markdown(text, max_chars, overlap_chars)
        return replace(
            self,
            chunks=tuple(chunks),
            ids=tuple(chunk_ids(self.rel, chunks)),
            times=tuple(chunk_times(self.rel, text, chunks, self.mtime)),
            bodies=tuple(fts_text(chunk.text) for chunk in chunks),
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
) -> Prepared:
    """Read ``path`` (``rel`` to the memory root) and chunk it unless its hash is
    ``known_hash``. Never raises :class:`OSError`: a failure is in :attr:`Prepared.error`.
    ``real_dirs``: see :func:`inside`."""
    try:
        if not inside(real_root, path, real_dirs):
            # A symlink out of the memory root is never read: what it points to is not
            # memory, and search must not show what memory.get refuses.
            log.warning("index.symlink_outside_root", path=str(path))
            return Prepared(path, rel, missing=True)
        st = path.stat()
        data = path.read_bytes()
    except FileNotFoundError:
        return Prepared(path, rel, missing=True)
    except OSError as exc:
        return Prepared(path, rel, error=exc)
    digest = blake3.blake3(data).hexdigest()
    out = Prepared(path, rel, mtime=st.st_mtime, size=st.st_size, digest=digest, data=data)
    if digest == known_hash:
        return out
    return out.chunked(max_chars, overlap_chars)


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
