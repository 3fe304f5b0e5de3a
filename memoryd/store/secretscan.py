"""Secrets in memory already on disk: find them, redact them in place (SPEC §18) — blocking I/O.

:func:`memory_text_files` lists every text file under a directory of the memory tree
(memory files, session logs, journals, ``.history/`` backups and ``dreams.jsonl``, the
confluence state), leaving out SQLite files, the embedding cache and lock files.
:func:`scan_file` finds the secrets in one (line, kind, fingerprint — never the value);
:func:`redact_file` rewrites it atomically with each secret replaced by its redaction. A
``.jsonl`` file is redacted line by line through its decoded JSON strings (an escaped
``\\n`` inside a PEM block stays valid JSON, a lone surrogate stays a ``\\u`` escape); other
files as text. A file is decoded as the indexer decodes it (UTF-8, or the UTF-16 LE/BE its
BOM names: a secret search finds is a secret the scan finds) and rewritten in its own
encoding, BOM and undecodable bytes kept (those of a JSON line rewritten become escapes).

:func:`compact_index` clears what SQLite keeps of deleted rows: FTS5 segments are merged
(``optimize``), free pages dropped (``VACUUM``) and the WAL truncated, so a purged secret is
not left in the index file's free space.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.core.secrets import Finding, Scrubber
from memoryd.store.files import (
    LONE_SURROGATE,
    ExactText,
    atomic_write_bytes,
    decode_exact,
    read_regular,
)

#: Files never scanned: SQLite databases (and their WAL/SHM), locks, the embedding cache.
SKIPPED_SUFFIXES = (".sqlite", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal", ".lock")
SKIPPED_DIRS = frozenset({".cache"})
MAX_SCAN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class FileScan:
    """The secrets found in one file."""

    path: Path
    findings: tuple[Finding, ...]


def memory_text_files(directory: Path, too_large: list[Path] | None = None) -> list[Path]:
    """Every regular text file under ``directory`` (recursively, symlinks not followed) of
    at most :data:`MAX_SCAN_BYTES`; the larger ones are added to ``too_large`` (they are
    not scanned: the caller says so rather than report them clean)."""
    out: list[Path] = []
    if not directory.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            if name.endswith(SKIPPED_SUFFIXES):
                continue
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_size <= MAX_SCAN_BYTES:
                out.append(path)
            elif too_large is not None:
                too_large.append(path)
    return out


def _read(path: Path) -> ExactText | None:
    """The file's text (:func:`~memoryd.store.files.decode_exact`); None when it is gone, no
    longer a regular file (never blocks on a FIFO swapped in) or grew past
    :data:`MAX_SCAN_BYTES` (never rewritten from a part)."""
    try:
        read = read_regular(path, MAX_SCAN_BYTES)
    except OSError:
        return None
    return None if read.truncated else decode_exact(read.data)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _scrub_json(value: Any, scrubber: Scrubber) -> Any:
    if isinstance(value, str):
        return scrubber.text(value)
    if isinstance(value, dict):
        return {k: _scrub_json(v, scrubber) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_json(v, scrubber) for v in value]
    return value


def _json_line(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def scan_text(text: str, scrubber: Scrubber, *, jsonl: bool = False) -> list[Finding]:
    """The secrets in a file's text; for JSON lines, in each line's decoded strings (the
    line number is the record's)."""
    if not jsonl:
        return scrubber.scan(text)
    found: list[Finding] = []
    for number, line in enumerate(text.split("\n"), 1):
        record = _json_line(line) if line.strip() else None
        parts = list(_strings(record)) if record is not None else [line]
        for part in parts:
            found.extend(
                Finding(f.kind, f.fingerprint, f.start, f.end, number) for f in scrubber.scan(part)
            )
    return found


def scan_file(path: Path, scrubber: Scrubber) -> FileScan:
    read = _read(path)
    findings = () if read is None else tuple(scan_text(read.text, scrubber, jsonl=_is_jsonl(path)))
    return FileScan(path, findings)


def _is_jsonl(path: Path) -> bool:
    return path.suffix == ".jsonl"


def redacted_text(text: str, scrubber: Scrubber, *, jsonl: bool = False) -> str:
    """``text`` with every secret redacted (JSON lines stay valid JSON)."""
    if not jsonl:
        return scrubber.text(text)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        record = _json_line(line)
        if record is None:
            lines[i] = scrubber.text(line)
            continue
        cleaned = _scrub_json(record, scrubber)
        if cleaned != record:
            dumped = json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))
            lines[i] = LONE_SURROGATE.sub(_escaped, dumped)  # dumps writes them raw
    return "\n".join(lines)


def _escaped(match: re.Match[str]) -> str:
    """A lone surrogate as its JSON escape: the line stays valid JSON of the same value in
    any encoding (raw, UTF-8 cannot write it and UTF-16 would write an invalid unit)."""
    return f"\\u{ord(match.group()):04x}"


def redact_file(path: Path, scrubber: Scrubber) -> int:
    """Rewrite ``path`` atomically with its secrets redacted; returns how many were found
    (0: the file is left as it is)."""
    read = _read(path)
    if read is None:
        return 0
    jsonl = _is_jsonl(path)
    found = scan_text(read.text, scrubber, jsonl=jsonl)
    if not found:
        return 0
    atomic_write_bytes(path, read.encode(redacted_text(read.text, scrubber, jsonl=jsonl)))
    return len(found)


def compact_index(conn: Any) -> None:
    """Merge the FTS5 segments, drop free pages and truncate the WAL of an index
    connection in autocommit mode."""
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
