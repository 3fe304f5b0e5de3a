"""A workspace's ``.history/``: earlier ``MEMORY.md`` versions and the dream journal (SPEC §8.4).

- Backups: ``MEMORY.<UTC stamp>.md``, one per dream (and per undo), written atomically;
  :func:`prune_backups` keeps the newest ``dream.keep_history``.
- The journal ``dreams.jsonl``: one JSON object per line, appended with a single ``write``
  (``O_APPEND``), so a crash leaves at most a torn last line, which :func:`read_journal` skips.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.store.files import atomic_write_bytes, read_bytes

JOURNAL = "dreams.jsonl"
#: Journal outcomes whose dream released the lock with the time advanced (a consolidation).
SETTLED = frozenset({"written", "nothing_to_store", "rejected", "refused"})
_BACKUP = re.compile(r"\AMEMORY\.\d{8}T\d{6}\.\d{6}Z(?:-\d+)?\.md\Z")


def utc(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, UTC)


def iso(stamp: float) -> str:
    """A Unix time as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    return utc(stamp).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: object) -> float | None:
    """The Unix time of an :func:`iso` string (None when it is not one)."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def new_entry_id() -> str:
    return secrets.token_hex(6)


def save_backup(history_dir: Path, data: bytes | None, now: float) -> str | None:
    """Copy ``data`` (the old ``MEMORY.md``) to ``.history/MEMORY.<stamp>.md``; its name."""
    if data is None:
        return None
    base = utc(now).strftime("MEMORY.%Y%m%dT%H%M%S.%fZ")
    name, n = f"{base}.md", 0
    while (history_dir / name).exists():
        n += 1
        name = f"{base}-{n}.md"
    atomic_write_bytes(history_dir / name, data)
    return name


def backups(history_dir: Path) -> list[str]:
    """The backup names in ``.history/``, oldest first."""
    try:
        names = [n for n in os.listdir(history_dir) if _BACKUP.match(n)]
    except FileNotFoundError:
        return []
    return sorted(names)


def prune_backups(history_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` backups."""
    names = backups(history_dir)
    for name in names[: max(0, len(names) - keep)]:
        (history_dir / name).unlink(missing_ok=True)


def append_journal(history_dir: Path, entry: dict[str, Any]) -> None:
    """Append one JSON line to ``.history/dreams.jsonl`` (one ``write`` with ``O_APPEND``,
    then fsync). The entry gets a random ``id`` unless it has one."""
    history_dir.mkdir(mode=0o700, exist_ok=True)
    line = json.dumps({"id": new_entry_id(), **entry}, ensure_ascii=False) + "\n"
    fd = os.open(
        history_dir / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
    )
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_journal(history_dir: Path) -> list[dict[str, Any]]:
    """Every well-formed entry of the dream journal, oldest first (bad lines skipped)."""
    data = read_bytes(history_dir / JOURNAL)
    entries: list[dict[str, Any]] = []
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def last_settled(entries: list[dict[str, Any]]) -> float | None:
    """The time of the newest journalled dream that advanced the lock (None = none)."""
    for entry in reversed(entries):
        if entry.get("outcome") in SETTLED:
            stamp = parse_iso(entry.get("time"))
            if stamp is not None:
                return stamp
    return None
