"""A workspace's ``.history/``: earlier ``MEMORY.md`` versions, archived session logs and the
dream journal (SPEC §8.4).

- Backups: ``MEMORY.<UTC stamp>.md``, one per dream (and per undo), written atomically;
  :func:`prune_backups` keeps the newest ``dream.keep_history``.
- Archived logs: ``sessions/<dream id>/<log name>``, the session logs a dream consumed, moved
  (renamed) out of ``sessions/`` — never deleted by a dream, never indexed (the index reads
  only ``sessions/*.md``). :func:`prune_archives` drops a dream's archive once it is older
  than ``dream.keep_logs_days`` *and* not among the newest ``dream.keep_history`` dreams.
- The journal ``dreams.jsonl``: one JSON object per line, appended with a single ``write``
  (``O_APPEND``), so a crash leaves at most a torn last line, which :func:`read_journal` skips.
- :func:`undo_last`: restore the ``MEMORY.md`` the last (not yet undone) dream replaced and
  move the logs it archived back into ``sessions/``; refused when ``MEMORY.md`` changed since
  that dream wrote it, unless forced.
- The journalled cleanup of consumed session logs: a written dream plans which logs to
  archive (:func:`plan_clean_up`), journals them with their content hashes, then moves them
  (:func:`archive_unchanged`); if it is killed in between, :func:`finish_interrupted_clean_up`
  completes the moves later — only while ``MEMORY.md`` is still what that dream wrote.
- :func:`commit_guard`: the one real mutex between processes — an exclusive ``flock`` of the
  workspace directory, held only for a dream's or an undo's short file work (never across a
  model call) and released by the kernel if its holder dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from blake3 import blake3

from memoryd.core.dreaming import effective_mtime, is_session_log, last_undoable
from memoryd.core.replies import DreamUndoReply
from memoryd.core.times import rfc3339, utc
from memoryd.errors import MemoryChanged, NotFound, StorageError
from memoryd.store.files import (
    FileRead,
    atomic_write_bytes,
    fsync_dir,
    read_bytes,
    scan_regular,
    storage_error,
)
from memoryd.store.layout import Workspace

log = structlog.get_logger(__name__)

JOURNAL = "dreams.jsonl"
#: The directory of ``.history/`` that holds archived session logs, one folder per dream.
ARCHIVE = "sessions"
#: Journal outcomes whose dream released the lock with the time advanced (a consolidation).
SETTLED = frozenset({"written", "nothing_to_store", "rejected", "refused"})
_BACKUP = re.compile(r"\AMEMORY\.\d{8}T\d{6}\.\d{6}Z(?:-\d+)?\.md\Z")


def digest(data: bytes | None) -> str | None:
    """The content hash (blake3, hex) of a file's bytes; None for a missing file."""
    return None if data is None else blake3(data).hexdigest()


def read_hashed(path: Path, keep_bytes: int) -> tuple[str, FileRead] | None:
    """The :func:`digest` of the whole file at ``path`` and its first ``keep_bytes`` bytes,
    streamed (:func:`~memoryd.store.files.scan_regular`: a 2 GB log is never in memory);
    None when it is missing. StorageError for anything else, a FIFO included."""
    hasher = blake3()
    try:
        read = scan_regular(path, keep_bytes, hasher.update)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise storage_error("read", path, exc) from exc
    return hasher.hexdigest(), read


def file_digest(path: Path) -> str | None:
    """The :func:`digest` of the file at ``path``, streamed; None when it is missing."""
    got = read_hashed(path, 0)
    return None if got is None else got[0]


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
    then fsync; the directories too when the file or ``.history/`` is new, so the entry
    survives a crash). The entry gets a random ``id`` unless it has one."""
    new_dir = not history_dir.is_dir()
    history_dir.mkdir(mode=0o700, exist_ok=True)
    new_file = not (history_dir / JOURNAL).exists()
    line = json.dumps({"id": new_entry_id(), **entry}, ensure_ascii=False) + "\n"
    fd = os.open(
        history_dir / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
    )
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if new_file:
        fsync_dir(history_dir)
    if new_dir:
        fsync_dir(history_dir.parent)


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


@contextmanager
def commit_guard(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` (released on exit or if the process dies)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def archive_dir(history_dir: Path, dream_id: str) -> Path:
    """Where the logs consumed by the dream ``dream_id`` are archived."""
    return history_dir / ARCHIVE / dream_id


def archived_logs(history_dir: Path, dream_id: str) -> list[str]:
    """The names of the logs archived by the dream ``dream_id`` (sorted)."""
    try:
        return sorted(
            n for n in os.listdir(archive_dir(history_dir, dream_id)) if n.endswith(".md")
        )
    except (FileNotFoundError, NotADirectoryError):
        return []


def prune_archives(
    history_dir: Path, keep: int, keep_days: float, now: float, entries: list[dict[str, Any]]
) -> list[str]:
    """Delete the archives of dreams that are both older than ``keep_days`` and not among the
    newest ``keep`` written dreams (the ones whose ``MEMORY.md`` backups are kept); an
    archive no journal entry names is judged by its directory's mtime. Returns the ids."""
    base = history_dir / ARCHIVE
    try:
        ids = [e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    written = [e for e in entries if e.get("outcome") == "written" and isinstance(e.get("id"), str)]
    newest = {e["id"] for e in written[-keep:]} if keep > 0 else set()
    times = {e["id"]: parse_iso(e.get("time")) for e in written}
    dropped: list[str] = []
    for dream_id in ids:
        if dream_id in newest:
            continue
        stamp = times.get(dream_id)
        if stamp is None:
            try:
                stamp = (base / dream_id).stat().st_mtime
            except OSError:
                continue
        if now - stamp < keep_days * 86400:
            continue
        shutil.rmtree(base / dream_id, ignore_errors=True)
        dropped.append(dream_id)
    return dropped


def _restore_logs(ws: Workspace, dream_id: str) -> list[str]:
    """Move the logs archived by ``dream_id`` back into ``sessions/``; their names there. A
    log whose name is taken again (the session wrote on) comes back as
    ``<name>-restored-<dream id>.md`` — nothing is overwritten."""
    source = archive_dir(ws.history_dir, dream_id)
    names = archived_logs(ws.history_dir, dream_id)
    if names:
        ws.sessions_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    back: list[str] = []
    for name in names:
        target = ws.sessions_dir / name
        if target.exists():
            if read_bytes(target) == read_bytes(source / name):
                (source / name).unlink()
                back.append(name)
                continue
            target = ws.sessions_dir / f"{name[:-3]}-restored-{dream_id}.md"
        os.replace(source / name, target)
        back.append(target.name)
    if back:
        _moves_durable(source, ws.sessions_dir)
    try:
        source.rmdir()
    except OSError:
        pass
    return back


def _moves_durable(*directories: Path) -> None:
    """fsync the directories logs were moved between. A failure is logged, not raised: the
    move itself is done, and a rename leaves a log whole in one of the two places whatever a
    crash keeps (consumed logs are known by content hash, so one that comes back is not
    consumed twice)."""
    for directory in directories:
        try:
            fsync_dir(directory)
        except OSError as exc:
            log.warning("dream.move_not_durable", path=str(directory), error=str(exc))


def undo_last(
    ws: Workspace,
    keep: int,
    now: float,
    *,
    force: bool = False,
    after_journal: Callable[[], None] | None = None,
) -> DreamUndoReply:
    """Undo the last (not yet undone) dream (SPEC §8.4): restore the ``MEMORY.md`` it
    replaced and move the logs it archived back into ``sessions/``.

    Refused with :class:`MemoryChanged` when ``MEMORY.md`` is no longer what that dream wrote
    (a note remembered since, an edit) unless ``force``. The current file is saved into
    ``.history/`` first either way, so an undo loses nothing. The undo is journalled
    *before* the files change (what to restore, and the hash of the file it replaces), so an
    undo killed half-way is completed by :func:`finish_interrupted_undo`; ``after_journal``
    runs in between (a test seam). Returns ``{path, restored, removed, dream_time,
    saved_current, logs_restored, forced}``: ``restored`` is the backup put back (None: the
    dream created ``MEMORY.md``, which is ``removed``). Raises :class:`NotFound` when no dream
    can be undone.
    """
    with commit_guard(ws.dir):
        _finish_undo(ws)
        entry = last_undoable(read_journal(ws.history_dir))
        if entry is None:
            raise NotFound("no dream to undo: the dream journal has no undoable dream")
        current = read_bytes(ws.memory_file)
        wrote = entry.get("memory_hash")
        changed = wrote is not None and digest(current) != wrote
        if changed and not force:
            raise MemoryChanged(
                f"{ws.memory_file.name} changed since the dream of {entry.get('time')} wrote it "
                "(a note or an edit would be lost); nothing was undone. "
                "Run the undo with --force to undo anyway (the current file is saved in "
                ".history/ first)",
                dream_time=entry.get("time"),
            )
        backup = entry.get("backup")
        if backup and read_bytes(ws.history_dir / backup) is None:
            raise NotFound(f"the backup {backup} of that dream is no longer in .history/")
        saved = save_backup(ws.history_dir, current, now)
        dream_id = str(entry.get("id"))
        undo = {
            "time": rfc3339(now),
            "outcome": "undone",
            "undoes": dream_id,
            "restored": backup,
            "saved_current": saved,
            "replaced_hash": digest(current),
            "inputs": list(entry.get("inputs") or []),
            "logs_restored": archived_logs(ws.history_dir, dream_id),
            "forced": bool(changed),
            "pid": os.getpid(),
        }
        append_journal(ws.history_dir, undo)
        if after_journal is not None:
            after_journal()
        logs = _redo_undo(ws, undo)
        prune_backups(ws.history_dir, keep)
    return {
        "path": ws.memory_file.name,
        "restored": backup,
        "removed": not backup,
        "dream_time": entry.get("time"),
        "saved_current": saved,
        "logs_restored": logs,
        "forced": bool(changed),
    }


def _redo_undo(ws: Workspace, undo: dict[str, Any]) -> list[str]:
    """Do (or finish) a journalled undo: ``MEMORY.md`` is put back unless it already moved
    on from the file the undo replaced; the archived logs still in the archive come back."""
    if digest(read_bytes(ws.memory_file)) == undo.get("replaced_hash"):
        backup = undo.get("restored")
        data = read_bytes(ws.history_dir / backup) if isinstance(backup, str) else None
        if data is not None:
            atomic_write_bytes(ws.memory_file, data)
        elif not backup:
            ws.memory_file.unlink(missing_ok=True)
    return _restore_logs(ws, str(undo.get("undoes")))


def _finish_undo(ws: Workspace) -> list[str]:
    entries = [e for e in read_journal(ws.history_dir) if e.get("outcome") in ("written", "undone")]
    last = entries[-1] if entries else None
    if last is None or last.get("outcome") != "undone" or "replaced_hash" not in last:
        return []
    if not archived_logs(ws.history_dir, str(last.get("undoes"))) and digest(
        read_bytes(ws.memory_file)
    ) != last.get("replaced_hash"):
        return []  # done (or MEMORY.md moved on since: never overwritten)
    return _redo_undo(ws, last)


def finish_interrupted_undo(ws: Workspace) -> list[str]:
    """Complete the last journalled undo if it was killed half-way (``MEMORY.md`` still the
    file it replaced, or logs still in the archive); the names of the logs moved back."""
    with commit_guard(ws.dir):
        return _finish_undo(ws)


# ---------------------------------------------------------------------------- cleanup


def plan_clean_up(
    sessions_dir: Path,
    consumed: Sequence[str],
    hashes: dict[str, str],
    recent_after: float,
    now: float,
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Which consumed logs a written dream archives — those whose content still has the hash
    it had when gathered and that were not modified after ``recent_after`` (a session may
    still be writing them; a future mtime counts as when it was set, never as "recent
    forever") — with their hashes; and the names kept."""
    doomed: dict[str, str] = {}
    kept: list[str] = []
    for name in consumed:
        path = sessions_dir / name
        try:
            st = path.stat()
            recent = effective_mtime(st.st_mtime, st.st_ctime, now) > recent_after
            found = file_digest(path)
        except FileNotFoundError:
            continue
        except (OSError, StorageError) as exc:
            log.warning("dream.delete_failed", path=str(path), error=str(exc))
            kept.append(name)
            continue
        if recent or found is None or found != hashes.get(name):
            kept.append(name)
        else:
            doomed[name] = found
    return doomed, tuple(kept)


def archive_unchanged(
    sessions_dir: Path,
    target_dir: Path,
    doomed: dict[str, str],
    after_each: Callable[[], None] | None = None,
) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """Move the logs whose content still has the given hash into ``target_dir`` (a rename:
    a log is always whole in one of the two places): ``(archived paths as they were, kept
    names)``. ``after_each`` runs after each move (a test seam)."""
    deleted: list[Path] = []
    kept: list[str] = []
    for name, expected in doomed.items():
        path = sessions_dir / name
        try:
            if file_digest(path) != expected:
                kept.append(name)  # written to at the last moment: keep it
                continue
            target_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            target = target_dir / name
            if target.exists():  # archived before (a resumed cleanup): keep both
                target = target_dir / f"{name[:-3]}-{new_entry_id()}.md"
            os.replace(path, target)
        except FileNotFoundError:
            continue
        except (OSError, StorageError) as exc:
            log.warning("dream.archive_failed", path=str(path), error=str(exc))
            kept.append(name)
            continue
        deleted.append(path)
        if after_each is not None:
            after_each()
    if deleted:
        _moves_durable(sessions_dir, target_dir)
    return tuple(deleted), tuple(kept)


def finish_interrupted_clean_up(
    ws: Workspace, after_each: Callable[[], None] | None = None
) -> tuple[Path, ...]:
    """Archive the logs the last journalled dream meant to archive but did not (it was killed
    during its cleanup) — only while ``MEMORY.md`` is still exactly what that dream wrote,
    and only logs whose content is still what it consumed. Returns their old paths."""
    with commit_guard(ws.dir):
        entry = last_undoable(read_journal(ws.history_dir))
        doomed = entry.get("archived_hashes") if entry is not None else None
        if entry is None or not isinstance(doomed, dict) or not doomed:
            return ()
        if digest(read_bytes(ws.memory_file)) != entry.get("memory_hash"):
            return ()
        safe = {
            name: expected
            for name, expected in doomed.items()
            if isinstance(name, str)
            and isinstance(expected, str)
            and is_session_log(name)
            and "/" not in name
            and (ws.sessions_dir / name).exists()
        }
        target = archive_dir(ws.history_dir, str(entry.get("id")))
        deleted, _ = archive_unchanged(ws.sessions_dir, target, safe, after_each)
    return deleted
