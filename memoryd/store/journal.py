"""Transcript journals of open sessions: ``sessions/.live/<sid>.jsonl`` (SPEC §7, §15).

A journal makes a session survive a daemon crash or restart: every message is appended to
it — written, flushed and fsynced — *before* ``session.append`` is acknowledged, and so is
the session's flush state. The next daemon start replays the journals of the sessions that
were still open (:func:`load_all`); ``session.close`` removes a journal once the session's
summary is written.

One JSON object per line (ASCII-escaped, so any string round-trips), files ``0600``::

    {"type": "header", "version": 1, "workspace": "/abs/path", "session_id": "…",
     "subagent": false, "opened_at": 1735689600.0}
    {"type": "message", "role": "user", "content": "…", "at": 1735689601.5}
    {"type": "flush", "last_text": "## …", "last_at": …, "last_outcome": "written",
     "last_trigger": "manual", "last_error": null, "compaction_count": 2,
     "flushed_through": 14}
    {"type": "log", "date": "2025-01-01", "name": "2025-01-01-fix-login-1234abcd.md"}
    {"type": "ingest", "path": "/abs/transcript.jsonl", "format": "claude-code",
     "offset": 4096, "tail": "<hash of the bytes before offset>", "compactions": 1,
     "messages": [{"role": "user", "content": "…"}], "at": …}
    {"type": "closed", "summary_written": true}

The last ``flush`` record wins, and the last ``ingest`` record per transcript path. An
``ingest`` record carries the messages read from an agent's transcript *and* the offset
read up to on one line, so a crash keeps both or neither: a transcript is never read twice
nor a message lost. A crash in the middle of a write leaves at most a torn last
line; it was never acknowledged, so loading ignores it and reopening cuts it off before
the next append. A session id that is not a plain file name (``[A-Za-z0-9][A-Za-z0-9_.-]*``,
at most 128 characters) is stored under ``sid-<hash>.jsonl``; the header keeps the real id.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import blake3
import structlog

from memoryd.core.flushing import ROLES, Message, message_dict
from memoryd.core.workspace import LIVE_DIR, SESSIONS_DIR
from memoryd.errors import StorageError
from memoryd.store.files import (
    NotRegularFile,
    atomic_write_bytes,
    fsync_dir,
    make_private_dirs,
    open_regular,
    storage_error,
)

log = structlog.get_logger(__name__)

JOURNAL_VERSION = 1
JOURNAL_SUFFIX = ".jsonl"
_FILE_MODE = 0o600
_DIR_MODE = 0o700
#: A header line is a few hundred bytes (a path, an id); a first line longer is no header.
HEADER_MAX_BYTES = 64 * 1024
_PLAIN_SID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def journal_name(session_id: str) -> str:
    """The journal's file name for ``session_id`` (never a path: ``../x`` is hashed)."""
    if _PLAIN_SID.fullmatch(session_id) and not session_id.endswith("."):
        return f"{session_id}{JOURNAL_SUFFIX}"
    digest = blake3.blake3(session_id.encode("utf-8", "surrogatepass")).hexdigest(length=16)
    return f"sid-{digest}{JOURNAL_SUFFIX}"


@dataclass(frozen=True, slots=True)
class JournalHeader:
    """The first line of a journal: what ``session.open`` said."""

    workspace: str
    session_id: str
    subagent: bool
    opened_at: float


@dataclass(frozen=True, slots=True)
class JournalMessage:
    message: Message
    at: float
    """When the daemon received it (epoch seconds)."""


@dataclass(frozen=True, slots=True)
class FlushState:
    """What a session remembers about its flushes (recorded so that recovery keeps it)."""

    last_text: str | None = None
    """The text the last *written* flush stored (the delta prompt shows it)."""
    last_at: float | None = None
    """When the last flush finished (any outcome), epoch seconds."""
    last_outcome: str | None = None
    """written | nothing_to_store | rejected | duplicate | error."""
    last_trigger: str | None = None
    last_error: str | None = None
    compaction_count: int | None = None
    """The last compaction count a ``pre_compaction`` flush ran for."""
    flushed_through: int = 0
    """How many messages the session had when the last flush finished."""


@dataclass(frozen=True, slots=True)
class IngestMark:
    """How far an agent transcript has been read into a session (``session.ingest``)."""

    path: str
    format: str
    offset: int = 0
    """Bytes of the transcript read (always at a line boundary)."""
    tail: str = ""
    """Hash of the bytes just before ``offset``: a rewritten transcript no longer has them."""
    compactions: int = 0
    """Compactions the transcript recorded up to ``offset``."""
    at: float = 0.0


MessageSink = Callable[[Sequence[JournalMessage]], None]
"""Takes the messages of a journal as :func:`load` reads them."""


@dataclass(frozen=True, slots=True)
class JournalState:
    """Everything a journal holds, as loaded."""

    path: Path
    header: JournalHeader
    messages: tuple[JournalMessage, ...]
    flush: FlushState
    log_names: Mapping[str, str] = field(default_factory=dict)
    """Session-log file name per UTC date (``YYYY-MM-DD``) this session wrote."""
    ingests: Mapping[str, IngestMark] = field(default_factory=dict)
    """The last ingest mark per transcript path."""
    closed: bool = False
    """``session.close`` finished writing (only the removal of the journal was lost)."""
    torn: bool = False
    """The last line was incomplete (a crash mid-write) and was ignored."""
    bad_lines: int = 0
    complete_bytes: int = 0
    """The size of the journal's complete lines (where a torn tail is cut off)."""


# ---------------------------------------------------------------------- reading


def _header(record: Mapping[str, Any]) -> JournalHeader | None:
    if record.get("type") != "header":
        return None
    workspace, sid = record.get("workspace"), record.get("session_id")
    subagent, opened = record.get("subagent"), record.get("opened_at")
    if not isinstance(workspace, str) or not isinstance(sid, str) or not sid:
        return None
    if not isinstance(subagent, bool) or not isinstance(opened, int | float):
        return None
    return JournalHeader(workspace, sid, subagent, float(opened))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _flush(record: Mapping[str, Any]) -> FlushState:
    def text(key: str) -> str | None:
        value = record.get(key)
        return value if isinstance(value, str) else None

    def number(key: str) -> float | None:
        value = record.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return None

    return FlushState(
        last_text=text("last_text"),
        last_at=number("last_at"),
        last_outcome=text("last_outcome"),
        last_trigger=text("last_trigger"),
        last_error=text("last_error"),
        compaction_count=_int(record.get("compaction_count")),
        flushed_through=_int(record.get("flushed_through")) or 0,
    )


def _mark(record: Mapping[str, Any]) -> IngestMark | None:
    path, fmt = record.get("path"), record.get("format")
    offset, tail = _int(record.get("offset")), record.get("tail")
    if not isinstance(path, str) or not isinstance(fmt, str) or offset is None:
        return None
    at = record.get("at")
    return IngestMark(
        path,
        fmt,
        offset,
        tail if isinstance(tail, str) else "",
        _int(record.get("compactions")) or 0,
        float(at) if isinstance(at, int | float) else 0.0,
    )


def _message(item: object) -> Message | None:
    """The message of ``{"role", "content", …}`` (:func:`message_dict`'s shape), else None."""
    if not isinstance(item, dict):
        return None
    role, content = item.get("role"), item.get("content")
    if role not in ROLES or not isinstance(content, str):
        return None
    return Message(role, content)


def _messages(raw: object) -> list[Message] | None:
    if not isinstance(raw, list):
        return None
    out = [_message(item) for item in raw]
    return None if None in out else [m for m in out if m is not None]


def _parse(path: Path, lines: Iterable[bytes], sink: MessageSink | None) -> JournalState | None:
    torn = False
    complete = 0
    header: JournalHeader | None = None
    messages: list[JournalMessage] = []
    take = messages.extend if sink is None else sink
    flush = FlushState()
    log_names: dict[str, str] = {}
    ingests: dict[str, IngestMark] = {}
    closed = False
    bad = 0
    for raw in lines:
        if not raw.endswith(b"\n"):
            torn = bool(raw)  # bytes after the last newline: an unacknowledged write
            break
        complete += len(raw)
        try:
            record = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        if not isinstance(record, dict):
            bad += 1
            continue
        if header is None:
            header = _header(record)
            if header is None:
                return None
            continue
        match record.get("type"):
            case "message" if (message := _message(record)) is not None:
                at = record.get("at")
                when = float(at) if isinstance(at, int | float) else header.opened_at
                take([JournalMessage(message, when)])
            case "flush":
                flush = _flush(record)
            case "log" if isinstance(record.get("date"), str) and isinstance(
                record.get("name"), str
            ):
                log_names[record["date"]] = record["name"]
            case "ingest" if (mark := _mark(record)) is not None and (
                batch := _messages(record.get("messages", []))
            ) is not None:
                if batch:
                    take([JournalMessage(m, mark.at or header.opened_at) for m in batch])
                ingests[mark.path] = mark
            case "closed":
                closed = True
            case _:
                bad += 1
    if header is None:
        return None
    return JournalState(
        path, header, tuple(messages), flush, log_names, ingests, closed, torn, bad, complete
    )


def load(path: Path, sink: MessageSink | None = None) -> JournalState | None:
    """The journal at ``path``, or None when it is missing or has no valid header line.

    Read a line at a time. With ``sink``, the messages are handed to it as they are read
    (in order, in batches: a ``message`` record's one, an ``ingest`` record's) instead of
    being kept in the state (its ``messages`` is then empty): a recovering session keeps
    only what it holds of a long transcript."""
    try:
        with open_regular(path) as handle:
            return _parse(path, handle, sink)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _error("read", path, exc) from exc


def _discard(batch: Sequence[JournalMessage]) -> None:
    """A sink that keeps no message."""


def journal_paths(live_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in live_dir.iterdir() if p.name.endswith(JOURNAL_SUFFIX))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _error("list", live_dir, exc) from exc


def load_all(live_dir: Path, *, messages: bool = True) -> list[JournalState]:
    """Every open session's journal in ``live_dir``, oldest first (without ``messages``,
    their messages are read past, not kept: which sessions to recover).

    Journals without a valid header (a crash while one was being created: the open was
    never acknowledged) are skipped and logged; they are replaced when that session is
    opened again. A FIFO, socket or device named like a journal is skipped and logged
    unread (reading a FIFO would block the recovery for ever); opening that session is a
    StorageError.
    """
    states: list[JournalState] = []
    for path in journal_paths(live_dir):
        try:
            state = load(path, None if messages else _discard)
        except StorageError as exc:
            if not isinstance(exc.__cause__, NotRegularFile):
                raise
            state = None  # a FIFO, socket or device is never read (it would block)
        if state is None:
            log.warning("journal.unreadable", path=str(path))
            continue
        if state.torn or state.bad_lines:
            log.warning("journal.repaired", path=str(path), torn=state.torn, bad=state.bad_lines)
        states.append(state)
    states.sort(key=lambda s: (s.header.opened_at, s.header.session_id))
    return states


def read_header(path: Path) -> JournalHeader | None:
    """Only the header of the journal at ``path`` (cheap: reads the first line, at most
    :data:`HEADER_MAX_BYTES`); None when it cannot be read, a FIFO included (never opened
    for long)."""
    try:
        with open_regular(path) as handle:
            first = handle.readline(HEADER_MAX_BYTES)
    except OSError:
        return None
    try:
        record = json.loads(first)
    except ValueError:
        return None
    return _header(record) if isinstance(record, dict) else None


def open_sessions(root: Path) -> list[JournalHeader]:
    """The headers of every open session's journal under the memory ``root``.

    For the daemon's start: which workspaces have sessions to recover (so their actors
    start and ``session.append`` finds them).
    """
    headers: list[JournalHeader] = []
    try:
        workspaces = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return []
    for ws_dir in workspaces:
        for path in journal_paths(ws_dir / SESSIONS_DIR / LIVE_DIR):
            header = read_header(path)
            if header is not None:
                headers.append(header)
    return headers


def open_elsewhere(root: Path, session_id: str, own_dir: Path) -> list[tuple[Path, JournalHeader]]:
    """The workspace directories under ``root``, other than ``own_dir``, where
    ``session_id`` is open (its journal exists), with the journal's header. Session ids are
    global (SPEC §7): ``session.open`` refuses an id open in another workspace."""
    found: list[tuple[Path, JournalHeader]] = []
    name = journal_name(session_id)
    try:
        workspaces = sorted(p for p in root.iterdir() if p.is_dir() and p != own_dir)
    except OSError:
        return []
    for ws_dir in workspaces:
        header = read_header(ws_dir / SESSIONS_DIR / LIVE_DIR / name)
        if header is not None and header.session_id == session_id:
            found.append((ws_dir, header))
    return found


# ---------------------------------------------------------------------- writing


def _error(action: str, path: Path, exc: OSError) -> StorageError:
    return storage_error(f"{action} journal", path, exc)


def _line(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def _sync(fd: int) -> None:
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)


class Journal:
    """The journal of one session. Synchronous: call it from a worker thread, one call at a
    time per session."""

    def __init__(self, live_dir: Path, session_id: str) -> None:
        self.live_dir = live_dir
        self.session_id = session_id
        self.path = live_dir / journal_name(session_id)
        self._fd: int | None = None
        self._size = 0

    def open(self, header: JournalHeader, sink: MessageSink | None = None) -> JournalState | None:
        """Open for appending; returns the recovered state when a valid journal exists
        (its torn tail cut off; its messages handed to ``sink`` when given: :func:`load`),
        else creates a new journal with ``header`` → None."""
        try:
            make_private_dirs(self.live_dir)
        except OSError as exc:
            raise _error("create the directory of", self.path, exc) from exc
        state = load(self.path, sink)
        if state is not None and state.header.session_id != self.session_id:
            raise StorageError(
                f"journal {self.path} belongs to session {state.header.session_id!r}",
                path=str(self.path),
            )
        if state is not None:
            self._open_fd(create=False)
            if state.torn:
                self._cut_torn_tail(state.complete_bytes)
            return state
        self._open_fd(create=True)
        try:
            self._write([_header_record(header)])
            self._sync_dir("create")
        except BaseException:
            self.close()
            # Never acknowledged: leave no journal behind for the next open to "recover".
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise
        return None

    def _open_fd(self, *, create: bool) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT | os.O_TRUNC
        try:
            fd = os.open(self.path, flags, _FILE_MODE)
            try:
                os.fchmod(fd, _FILE_MODE)
                self._size = os.fstat(fd).st_size
            except OSError:
                os.close(fd)
                raise
        except OSError as exc:
            raise _error("open", self.path, exc) from exc
        self._fd = fd

    def _cut_torn_tail(self, keep: int) -> None:
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, keep)
            _sync(self._fd)
        except OSError as exc:
            raise _error("repair", self.path, exc) from exc
        self._size = keep

    def _write(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append ``records`` durably (write + fsync); on failure cut back what was written,
        so a failed (unacknowledged) append never leaves a partial line behind."""
        if self._fd is None:
            raise StorageError(f"journal {self.path} is not open", path=str(self.path))
        data = b"".join(_line(r) for r in records)
        fd = self._fd
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            _sync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                pass
            raise _error("append to", self.path, exc) from exc
        self._size += len(data)

    def append_messages(self, messages: Sequence[Message], at: float) -> None:
        """Append ``messages`` (one fsync for the batch). Returns once they are on disk."""
        if messages:
            self._write({"type": "message", **message_dict(m), "at": at} for m in messages)

    def append_ingest(self, messages: Sequence[Message], mark: IngestMark) -> None:
        """Append ``messages`` read from a transcript together with the transcript's new
        mark, on one line (both or neither survive a crash)."""
        self._write(
            [
                {
                    "type": "ingest",
                    **asdict(mark),
                    "messages": [message_dict(m) for m in messages],
                }
            ]
        )

    def record_flush(self, state: FlushState) -> None:
        self._write([{"type": "flush", **asdict(state)}])

    def record_log(self, date: str, name: str) -> None:
        self._write([{"type": "log", "date": date, "name": name}])

    def record_closed(self, summary_written: bool) -> None:
        self._write([{"type": "closed", "summary_written": summary_written}])

    def rewrite(self, transform: Callable[[bytes], bytes | None]) -> bool:
        """Replace the journal's bytes by ``transform(old)`` atomically (None: leave them),
        then append to the new file (``secrets purge`` redacts an open session's journal)."""
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise _error("read", self.path, exc) from exc
        new = transform(data)
        if new is None:
            return False
        was_open = self._fd is not None
        self.close()
        try:
            atomic_write_bytes(self.path, new)
        finally:
            if was_open:
                self._open_fd(create=False)
        return True

    def close(self) -> None:
        """Close the file (the journal stays on disk)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def remove(self) -> None:
        """Close and delete the journal (after ``session.close`` wrote the summary)."""
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass  # removed already, perhaps by a call whose directory sync failed: sync again
        except OSError as exc:
            raise _error("remove", self.path, exc) from exc
        self._sync_dir("remove", missing_ok=True)

    def _sync_dir(self, action: str, *, missing_ok: bool = False) -> None:
        """Make the journal's creation or removal durable (:func:`fsync_dir`'s policy); a
        failure is a StorageError like a failed append."""
        try:
            fsync_dir(self.live_dir)
        except OSError as exc:
            if missing_ok and isinstance(exc, FileNotFoundError):
                return  # no directory, nothing to remove
            raise _error(action, self.path, exc) from exc


def _header_record(header: JournalHeader) -> dict[str, Any]:
    return {"type": "header", "version": JOURNAL_VERSION, **asdict(header)}
