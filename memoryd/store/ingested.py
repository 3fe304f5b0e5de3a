"""Transcripts already read into closed sessions: ``<workspace dir>/ingested.jsonl`` (SPEC §17).

When a session that ingested agent transcripts closes, the mark of each transcript (how far
it was read, the hash of the bytes before that point) is appended here. A session that is
opened again under the same id (an agent's ``--resume``) goes on from there instead of
reading the transcript again, and ``memoryd ingest --all`` skips a transcript read before
that has not grown. One JSON object per line; the last line per path wins; a torn last
line (a crash mid-write) is ignored (the next append starts on a line of its own).

A resumed agent session appends a line for its transcript at every close: :class:`Registry`
rewrites the file with the last line per path whenever it has doubled since it was last
compacted (and is over :data:`COMPACT_MIN_BYTES`), so it holds about one line per transcript
and the work stays proportional to what was appended.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from memoryd.store.files import atomic_write_bytes, fsync_dir
from memoryd.store.journal import IngestMark

FILE_NAME = "ingested.jsonl"
#: The registry is not compacted below this size.
COMPACT_MIN_BYTES = 64 * 1024


def registry_path(workspace_dir: Path) -> Path:
    return workspace_dir / FILE_NAME


def load(workspace_dir: Path) -> dict[str, IngestMark]:
    """The last mark per transcript path (empty when nothing was ingested)."""
    try:
        data = registry_path(workspace_dir).read_bytes()
    except FileNotFoundError:
        return {}
    return {mark.path: mark for mark, _ in _records(data)}


def _records(data: bytes) -> list[tuple[IngestMark, bytes]]:
    """Each readable line's mark and the line itself, in file order."""
    out: list[tuple[IngestMark, bytes]] = []
    for raw in data.split(b"\n"):
        try:
            record = json.loads(raw)
            mark = IngestMark(
                str(record["path"]),
                str(record["format"]),
                int(record["offset"]),
                str(record["tail"]),
                int(record.get("compactions", 0)),
                float(record.get("at", 0.0)),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        out.append((mark, raw))
    return out


def record(workspace_dir: Path, marks: Iterable[IngestMark], session_id: str) -> int:
    """Append ``marks`` (durably: written and fsynced); the registry's size after."""
    lines = b"".join(
        json.dumps({**asdict(m), "session_id": session_id}, ensure_ascii=True).encode() + b"\n"
        for m in marks
    )
    new_file = not registry_path(workspace_dir).exists()
    fd = os.open(
        registry_path(workspace_dir), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
    )
    try:
        size = os.fstat(fd).st_size
        if not lines:
            return size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            lines = b"\n" + lines  # after a torn line: never glued to it
        os.write(fd, lines)
        os.fsync(fd)
    finally:
        os.close(fd)
    if new_file:  # the registry's name too must survive a crash
        fsync_dir(workspace_dir)
    return size + len(lines)


def compact(workspace_dir: Path) -> int:
    """Rewrite the registry with the last line per transcript (atomically); its new size."""
    path = registry_path(workspace_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    last = {mark.path: raw for mark, raw in _records(data)}
    kept = b"".join(raw.strip() + b"\n" for raw in last.values())
    atomic_write_bytes(path, kept)
    return len(kept)


class Registry:
    """The appends of one workspace's actor, compacted as the file grows (see the module
    docstring). Thread-safe: closes of two sessions may record at once."""

    def __init__(self, workspace_dir: Path) -> None:
        self.workspace_dir = workspace_dir
        self._lock = threading.Lock()
        self._compact_above = COMPACT_MIN_BYTES

    def record(self, marks: Iterable[IngestMark], session_id: str) -> None:
        with self._lock:
            size = record(self.workspace_dir, marks, session_id)
            if size > self._compact_above:
                size = compact(self.workspace_dir)
                self._compact_above = max(COMPACT_MIN_BYTES, 2 * size)
