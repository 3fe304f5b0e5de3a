"""What the session manager keeps of one open session (:class:`OpenSession`).

Its transcript is a :class:`~memoryd.core.held_transcript.HeldTranscript`: the journal has
every message, memory the flush window's tail, counts and digests (:class:`Replay` rebuilds
it from a journal as the journal is read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

import anyio

from memoryd.core.flushing import Message
from memoryd.core.held_transcript import HeldTranscript, message_digest
from memoryd.core.replies import SessionStatus
from memoryd.core.secrets import Scrubber
from memoryd.core.times import rfc3339
from memoryd.runtime.workspace.redaction import redact_messages
from memoryd.store.files import read_text
from memoryd.store.journal import FlushState, IngestMark, Journal, JournalMessage, JournalState


@dataclass(eq=False)
class OpenSession:
    """One open session: its transcript, journal, flush state, locks and idle timer."""

    session_id: str
    subagent: bool
    opened_at: float
    journal: Journal
    held: HeldTranscript = field(default_factory=HeldTranscript)
    """The transcript, as far as memory keeps it (its ``count`` is every message)."""
    last_activity: float | None = None
    flush: FlushState = field(default_factory=FlushState)
    log_names: dict[str, str] = field(default_factory=dict)
    ingests: dict[str, IngestMark] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    flush_lock: anyio.Lock = field(default_factory=anyio.Lock)
    write_lock: anyio.Lock = field(default_factory=anyio.Lock)
    idle_scope: anyio.CancelScope | None = None
    idle_due: float | None = None
    closing: bool = False
    close_recorded: bool = False
    """``session.close`` journalled its ``closed`` record (the journal's removal may have
    failed since: a retried close only removes it)."""
    last_seen: float = 0.0
    """The last open, append, usage report or flush (wall clock): idle close counts from it."""

    @classmethod
    def recovered(cls, state: JournalState, journal: Journal, replay: Replay) -> Self:
        """The session a journal holds (its messages read into ``replay``)."""
        seen = [state.header.opened_at, state.flush.last_at or 0.0]
        seen += [replay.last_at or 0.0] + [m.at for m in state.ingests.values()]
        return cls(
            state.header.session_id,
            state.header.subagent,
            state.header.opened_at,
            journal,
            held=replay.held,
            last_activity=replay.last_at,
            flush=state.flush,
            log_names=dict(state.log_names),
            ingests=dict(state.ingests),
            last_seen=max(seen),
        )

    @property
    def count(self) -> int:
        """How many messages the session has (held in memory or not)."""
        return self.held.count

    @property
    def unflushed(self) -> int:
        return max(0, self.held.count - self.flush.flushed_through)

    async def journaled(self, fn: Callable[..., None], *args: Any) -> None:
        """One journal write (``fn(*args)`` in a worker thread), in order with the session's
        other writes, never half-done by a cancelled request."""
        with anyio.CancelScope(shield=True):
            async with self.write_lock:
                await anyio.to_thread.run_sync(fn, *args)

    async def append(self, batch: Sequence[Message], mark: IngestMark | None, now: float) -> None:
        """Journal ``batch`` (with an ingest ``mark``, on one line), then add it to the
        transcript: in order with the session's other writes, never half-done by a
        cancelled request. The messages' digests are taken in the journal's worker thread
        (an 8 MB ingest read: 25 ms of hashing, not on the event loop)."""
        if mark is not None:
            mark = replace(mark, at=now)

        def write() -> list[bytes]:
            if mark is None:
                self.journal.append_messages(batch, now)
            else:
                self.journal.append_ingest(batch, mark)
            return [message_digest(m) for m in batch]

        with anyio.CancelScope(shield=True):
            async with self.write_lock:
                digests = await anyio.to_thread.run_sync(write)
                if mark is not None:
                    self.ingests[mark.path] = mark
                self.held.extend(batch, digests)
                self.last_seen = now
                if batch:
                    self.last_activity = now

    def log_texts(self, sessions_dir: Path) -> list[str]:
        """The text of every log this session wrote (blocking: call from a worker thread)."""
        texts = (read_text(sessions_dir / name) for name in self.log_names.values())
        return [text for text in texts if text]

    def status(self, log_path: str, idle_close_secs: float = 0.0) -> SessionStatus:
        """What ``daemon.status`` shows of this session (its actor's ``sessions``)."""
        f = self.flush
        return {
            "session_id": self.session_id,
            "subagent": self.subagent,
            "opened_at": rfc3339(self.opened_at),
            "messages": self.held.count,
            "unflushed": self.unflushed,
            "last_activity": rfc3339(self.last_activity),
            "next_idle_flush": rfc3339(self.idle_due),
            "flushing": self.flush_lock.locked(),
            "closing": self.closing,
            "last_flush": (
                {
                    "at": rfc3339(f.last_at),
                    "outcome": f.last_outcome,
                    "trigger": f.last_trigger,
                    "error": f.last_error,
                }
                if f.last_outcome is not None
                else None
            ),
            "log_path": log_path,
            "usage": self.usage,
            "last_ingest": _last_ingest(self.ingests.values()),
            "last_seen": rfc3339(self.last_seen),
            "idle_close_at": (
                rfc3339(self.last_seen + idle_close_secs) if idle_close_secs > 0 else None
            ),
        }


class Replay:
    """A journal's messages as an open session holds them: :meth:`Journal.open`'s sink
    (called in the worker thread that reads the journal), each batch redacted as
    :meth:`SessionManager.append` does, with today's rules, then held."""

    def __init__(self, scrubber: Scrubber, log: Any, session_id: str) -> None:
        self.scrubber, self.log, self.session_id = scrubber, log, session_id
        self.held = HeldTranscript()
        self.last_at: float | None = None
        """When the last message was received."""

    def __call__(self, batch: Sequence[JournalMessage]) -> None:
        if batch:
            messages = [m.message for m in batch]
            self.held.extend(redact_messages(self.scrubber, messages, self.log, self.session_id))
            self.last_at = batch[-1].at


def _last_ingest(marks: Iterable[IngestMark]) -> dict[str, Any] | None:
    """The most recent transcript read into a session: ``{path, format, offset, at}``."""
    latest = max(marks, key=lambda m: m.at, default=None)
    if latest is None:
        return None
    return {
        "path": latest.path,
        "format": latest.format,
        "offset": latest.offset,
        "at": rfc3339(latest.at),
    }
