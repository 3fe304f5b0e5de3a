"""Reading agent transcripts for ``session.ingest`` (SPEC §17): bounded reads from an offset.

:func:`read_from` opens a transcript (a regular file only: a FIFO, device or directory is
refused without blocking), checks that the bytes just before the offset are the ones read
last time (their hash, :func:`tail_hash`) and returns at most ``max_bytes`` from there. A
transcript that shrank below the offset, or whose bytes before it changed, was rewritten:
the chunk then starts again at 0 and says so (the caller drops what it already has).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import blake3

from memoryd.errors import InvalidParams, MemorydError
from memoryd.store.files import storage_error

#: Bytes before the offset whose hash detects a rewritten transcript.
TAIL_BYTES = 4096
#: Most bytes one read returns (a bigger transcript is read in several).
MAX_READ_BYTES = 8 * 1024 * 1024
#: The longest transcript line read; a longer one is skipped.
MAX_LINE_BYTES = 64 * 1024 * 1024


Stamp = tuple[int, int, int, int, int]
"""A file's device, inode, size, mtime and ctime (ns): equal stamps, the same bytes — once
the file's last change is older than :data:`COARSE_NS` (see :func:`settled`)."""

#: How coarse a file system's timestamps may be (FAT: 2 s; ext3, HFS+: 1 s; a kernel tick
#: anywhere): a file changed again within this time of a change may keep its stamp.
COARSE_NS = 2_000_000_000


def settled(stamp: Stamp, taken_ns: int) -> bool:
    """A change of the file after ``taken_ns`` (wall clock, ns, read before the ``stat``
    that gave ``stamp``) changes its stamp: its last change is older than that by more than
    :data:`COARSE_NS`. A same-size rewrite just after a read may otherwise keep the stamp."""
    return max(stamp[3], stamp[4]) < taken_ns - COARSE_NS


def _stamp(info: os.stat_result) -> Stamp:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def file_stamp(path: str) -> Stamp | None:
    """The transcript's :data:`Stamp` (a ``stat``: nothing is read, nothing blocks), or
    None when it cannot be had. A transcript whose stamp is the one of its last complete
    read has nothing new to read."""
    try:
        return _stamp(os.stat(path))
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class Chunk:
    data: bytes
    start: int
    """The offset ``data`` starts at (0 after a rewrite)."""
    before: bytes
    """Up to :data:`TAIL_BYTES` bytes just before ``start``."""
    size: int
    """The file's size when read."""
    rewritten: bool
    stamp: Stamp | None = None
    """The file as it was when read (:func:`file_stamp`)."""
    stamped_ns: int = 0
    """The wall clock just before :attr:`stamp` was taken (:func:`settled`)."""

    @property
    def more(self) -> bool:
        """Bytes remain after this chunk."""
        return self.start + len(self.data) < self.size


def tail_hash(before: bytes) -> str:
    """The hash of the last :data:`TAIL_BYTES` of ``before``."""
    return blake3.blake3(before[-TAIL_BYTES:]).hexdigest(length=16)


def _pread(fd: int, offset: int, length: int) -> bytes:
    parts: list[bytes] = []
    while length > 0:
        part = os.pread(fd, length, offset)
        if not part:
            break
        parts.append(part)
        offset += len(part)
        length -= len(part)
    return b"".join(parts)


def read_from(path: str, offset: int, tail: str, *, max_bytes: int | None = None) -> Chunk:
    """At most ``max_bytes`` of the transcript at ``path`` from ``offset`` (see the module
    docstring). Raises :class:`InvalidParams` for a path that is not a regular file and
    :class:`StorageError` when it cannot be read."""
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InvalidParams(f"transcript {path} does not exist", param="path") from None
    except OSError as exc:
        raise storage_error("open transcript", Path(path), exc) from exc
    try:
        stamped_ns = time.time_ns()
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidParams(f"transcript {path} is not a regular file", param="path")
        size = info.st_size
        rewritten = False
        before = b""
        if offset > 0:
            before = _pread(fd, max(0, offset - TAIL_BYTES), min(offset, TAIL_BYTES))
            if offset > size or tail_hash(before) != tail:
                rewritten, offset, before = True, 0, b""
        limit = MAX_READ_BYTES if max_bytes is None else max_bytes
        data = _pread(fd, offset, max(0, min(limit, size - offset)))
    except OSError as exc:
        raise storage_error("read transcript", Path(path), exc) from exc
    finally:
        os.close(fd)
    return Chunk(data, offset, before, size, rewritten, _stamp(info), stamped_ns)


def unchanged_since(path: str, stamp: Stamp, stamped_ns: int, offset: int, tail: str) -> int | None:
    """Whether the transcript read to ``offset`` (its end) when its stamp was ``stamp``
    (taken at ``stamped_ns``) is unchanged: the wall clock its :data:`Stamp` was last
    checked at, or None when it may have changed (read it). An equal stamp is enough once
    :func:`settled`; before, the bytes before ``offset`` are checked too, as
    :func:`read_from` checks them."""
    if file_stamp(path) != stamp:
        return None
    if settled(stamp, stamped_ns):
        return stamped_ns
    try:
        chunk = read_from(path, offset, tail, max_bytes=1)
    except MemorydError:
        return None  # the read proper says why
    if chunk.rewritten or chunk.data or chunk.stamp != stamp:
        return None
    return chunk.stamped_ns
