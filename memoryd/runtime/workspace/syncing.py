"""What a workspace has to sync (SPEC §4) and the sync of big files beside the searches.

:class:`Dirty` holds the files the watcher, a reconcile or a failed sync marked: a search
syncs them first, except the files over :data:`BIG_SYNC_BYTES`, which it leaves to
:func:`sync_big_file` (run by the actor, never by a search: issue #17, a file over the
size limit must not make its workspace unresponsive). It also notices a memory directory
that changed since it was last listed (a burst the watcher has not reported yet).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import anyio

from memoryd.errors import StorageError
from memoryd.store.connection import DatabaseError
from memoryd.store.heap import release_free_memory
from memoryd.store.index import Index, SyncReport

T = TypeVar("T")
Run = Callable[..., Awaitable[Any]]

BIG_SYNC_BYTES = 1 << 20  # a dirty file this big is read and chunked outside the DB phase
BIG_SYNC_CHUNKS = 500  # ... and written this many chunks per DB phase


class Dirty:
    """The dirty files of one workspace, the big ones apart."""

    def __init__(self, watched_dirs: Iterable[Path]) -> None:
        self.paths: set[Path] = set()
        self.big: set[Path] = set()  # dirty files over BIG_SYNC_BYTES, for sync_big_file
        self.big_pending = anyio.Event()
        """Set when a search left big dirty files behind (the actor syncs them)."""
        self._watched = tuple(watched_dirs)
        self._marks: dict[Path, int] = {}  # their mtimes when last listed

    def mark(self, paths: Iterable[Path]) -> None:
        self.paths.update(paths)

    def take(self) -> list[Path]:
        paths, self.paths = self.paths, set()
        return sorted(paths)

    def split_big(self, paths: list[Path]) -> list[Path]:
        """``paths`` without the files over :data:`BIG_SYNC_BYTES`, which are kept for
        :func:`sync_big_file` instead (and wake it). In the event loop."""
        small = self.big_aside(paths)
        self.wake_big()
        return small

    def wake_big(self) -> None:
        if self.big:
            self.big_pending.set()

    def big_aside(self, paths: Iterable[Path]) -> list[Path]:
        """``paths`` without the big files, which are put aside for :func:`sync_big_file`
        (any thread; the caller wakes it with :meth:`wake_big`)."""
        small: list[Path] = []
        for path in paths:
            try:
                big = os.stat(path).st_size > BIG_SYNC_BYTES
            except OSError:
                big = False
            if big:
                self.big.add(path)
            else:
                small.append(path)
        return small

    def dirs_changed(self) -> dict[Path, int] | None:
        """The watched directories' mtimes when one changed (a file created, renamed or
        deleted) since :meth:`listed`, else None. Three ``stat`` calls."""
        marks = {}
        for directory in self._watched:
            try:
                marks[directory] = os.stat(directory).st_mtime_ns
            except OSError:
                marks[directory] = -1
        return None if marks == self._marks else marks

    def listed(self, marks: dict[Path, int]) -> None:
        """The directories were listed as they were at ``marks`` (a change meanwhile is
        seen next time)."""
        self._marks = marks


async def sync_big_file(index: Index, run: Run, path: Path, log: Any) -> SyncReport:
    """Sync one big file: read and chunked in a worker thread without holding the index
    (searches go on meanwhile), then written in phases of :data:`BIG_SYNC_CHUNKS` chunks
    (a growing prefix of the file): a search waits for one phase at most. A storage
    failure propagates (the caller marks the file dirty again)."""
    report = SyncReport()
    started = time.perf_counter()
    item = await anyio.to_thread.run_sync(index.prepare, path)
    prepared = time.perf_counter()
    total = len(item.chunks) if item.chunks is not None else 0
    counts = range(BIG_SYNC_CHUNKS, total + BIG_SYNC_CHUNKS, BIG_SYNC_CHUNKS)
    parts = [item.prefix(n) for n in counts] if total > BIG_SYNC_CHUNKS else [item]
    for number, part in enumerate(parts, 1):
        last = number == len(parts)
        written: SyncReport = await run(functools.partial(index.write_prepared, part, last=last))
        if last:
            report.add(written)
        else:
            report.chunks_added += written.chunks_added
            report.chunks_removed += written.chunks_removed
    phases = len(parts)
    del item, parts, part
    await anyio.to_thread.run_sync(release_free_memory)  # its text and chunks
    log.info(
        "index.big_file_synced",
        path=str(path),
        chunks=total,
        phases=phases,
        prepare_secs=round(prepared - started, 3),
        write_secs=round(time.perf_counter() - prepared, 3),
    )
    return report


SYNC_ERRORS = (StorageError, DatabaseError)
