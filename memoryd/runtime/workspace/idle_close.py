"""Idle close of sessions (SPEC §7): a session without activity for
``flush.session_idle_close_secs`` is flushed — when it has unflushed messages and a chat
model is configured — and closed like ``session.close`` (summary when due, journal removed),
so an abandoned session no longer keeps its journal and pins its actor.

:func:`idle_close_loop` runs in the :class:`~memoryd.runtime.workspace.sessions.SessionManager`'s
task group; it checks every quarter of the idle time (at most once a minute) and reads the
setting each time, so a reloaded config applies at the next check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import anyio
import structlog

from memoryd.core.config import Config
from memoryd.core.flushing import Trigger
from memoryd.core.replies import FlushReply, SessionClosed
from memoryd.errors import MemorydError
from memoryd.providers.llm import ChatModel
from memoryd.runtime.workspace.open_session import OpenSession

log = structlog.get_logger(__name__)


class SessionManager(Protocol):
    """What idle close needs of :class:`~memoryd.runtime.workspace.sessions.SessionManager`."""

    config: Config
    model: ChatModel | None
    clock: Callable[[], float]

    def open_sessions(self) -> list[OpenSession]: ...

    async def flush(self, session_id: str, trigger: Trigger = "manual") -> FlushReply: ...

    async def close(self, session_id: str) -> SessionClosed: ...


#: The longest wait between two checks, seconds.
MAX_CHECK_SECS = 60.0


async def idle_close_loop(manager: SessionManager) -> None:
    """Close the manager's idle sessions until cancelled (``0`` = never)."""
    while True:
        secs = manager.config.flush.session_idle_close_secs
        await anyio.sleep(min(max(secs / 4, 0.05), MAX_CHECK_SECS) if secs > 0 else MAX_CHECK_SECS)
        if secs <= 0:
            continue
        now = manager.clock()
        for session in manager.open_sessions():
            busy = session.closing or session.flush_lock.locked()
            if busy or now - session.last_seen < secs:
                continue
            await expire(manager, session.session_id, session.unflushed)


async def expire(manager: SessionManager, session_id: str, unflushed: int) -> dict[str, Any] | None:
    """Flush (when ``unflushed`` and a model is configured) and close one session; None
    when it was not closed (closed meanwhile, or the close failed)."""
    flushed: str | None = None
    if unflushed and manager.model is not None:
        try:
            flushed = (await manager.flush(session_id, "idle"))["outcome"]
        except MemorydError as exc:  # closed anyway: the summary needs no model
            flushed = "error"
            log.warning("session.idle_flush_failed", session_id=session_id, error=str(exc))
    try:
        out = await manager.close(session_id)
    except MemorydError as exc:
        log.warning("session.idle_close_failed", session_id=session_id, error=str(exc))
        return None
    log.info("session.idle_closed", session_id=session_id, flush=flushed)
    return {**out, "flush": flushed}
