"""What the session manager keeps of one open session (:class:`OpenSession`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio

from memoryd.core.flushing import Message
from memoryd.store.journal import FlushState, IngestMark, Journal


@dataclass(eq=False)
class OpenSession:
    """One open session: its transcript, journal, flush state, locks and idle timer."""

    session_id: str
    subagent: bool
    opened_at: float
    journal: Journal
    messages: list[Message] = field(default_factory=list)
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

    @property
    def unflushed(self) -> int:
        return max(0, len(self.messages) - self.flush.flushed_through)

    def status(self, log_path: str) -> dict[str, Any]:
        """What ``daemon.status`` shows of this session (its actor's ``sessions``)."""
        f = self.flush
        return {
            "session_id": self.session_id,
            "subagent": self.subagent,
            "opened_at": self.opened_at,
            "messages": len(self.messages),
            "unflushed": self.unflushed,
            "last_activity": self.last_activity,
            "next_idle_flush": self.idle_due,
            "flushing": self.flush_lock.locked(),
            "closing": self.closing,
            "last_flush": (
                {
                    "at": f.last_at,
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
        }


def _last_ingest(marks: Iterable[IngestMark]) -> dict[str, Any] | None:
    """The most recent transcript read into a session: ``{path, format, offset, at}``."""
    latest = max(marks, key=lambda m: m.at, default=None)
    if latest is None:
        return None
    return {"path": latest.path, "format": latest.format, "offset": latest.offset, "at": latest.at}
