"""Transcripts already read into closed sessions: ``<workspace dir>/ingested.jsonl`` (SPEC §17).

When a session that ingested agent transcripts closes, the mark of each transcript (how far
it was read, the hash of the bytes before that point) is appended here. A session that is
opened again under the same id (an agent's ``--resume``) goes on from there instead of
reading the transcript again, and ``memoryd ingest --all`` skips a transcript read before
that has not grown. One JSON object per line; the last line per path wins; a torn last
line (a crash mid-write) is ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from memoryd.store.journal import IngestMark

FILE_NAME = "ingested.jsonl"


def registry_path(workspace_dir: Path) -> Path:
    return workspace_dir / FILE_NAME


def load(workspace_dir: Path) -> dict[str, IngestMark]:
    """The last mark per transcript path (empty when nothing was ingested)."""
    try:
        data = registry_path(workspace_dir).read_bytes()
    except FileNotFoundError:
        return {}
    out: dict[str, IngestMark] = {}
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
        out[mark.path] = mark
    return out


def record(workspace_dir: Path, marks: Iterable[IngestMark], session_id: str) -> None:
    """Append ``marks`` (durably: written and fsynced)."""
    lines = b"".join(
        json.dumps({**asdict(m), "session_id": session_id}, ensure_ascii=True).encode() + b"\n"
        for m in marks
    )
    if not lines:
        return
    fd = os.open(
        registry_path(workspace_dir), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
    )
    try:
        os.write(fd, lines)
        os.fsync(fd)
    finally:
        os.close(fd)
