"""The working sessions of one workspace: transcripts, flushes, idle timers, summaries (SPEC §7).

:class:`SessionManager` is owned by the workspace's actor (``await tg.start(manager.run)``).
For each open session it keeps the transcript in the session's journal
(``sessions/.live/<sid>.jsonl``), written and fsynced before an append is acknowledged, so a
crash loses nothing: :meth:`SessionManager.run` recovers every journal at start. Memory
holds only what a later step needs (:mod:`~memoryd.core.held_transcript`: the flush
window's tail, counts, digests), so a long session does not grow the daemon.

A **flush** is one model call over the session's recent messages whose checked answer is
appended to today's session log (``sessions/YYYY-MM-DD-<slug>-<sid8>.md``) under a
``<!-- flush … -->`` mark and reindexed at once. Triggers: ``manual`` (:meth:`flush`),
``pre_compaction`` (:meth:`usage`, at most once per compaction count) and ``idle`` (a timer
per session, ``flush.idle_timeout_secs`` after the last message, only when messages arrived
since the last flush). At most one flush per session runs at a time; the model is awaited
with no file or database transaction open. ``flush.enabled = false`` turns the automatic
triggers off; an explicit ``session.flush`` still runs.

:meth:`close` appends the model-free summary (not for sub-agent sessions) and removes the
journal; :mod:`~memoryd.runtime.workspace.idle_close` closes sessions left idle. Which log a
session writes, and the writing, is :mod:`~memoryd.runtime.workspace.session_logs`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal, TypeVar, assert_never

import anyio
import anyio.abc
import structlog

from memoryd.core.config import Config
from memoryd.core.flushing import (
    Message,
    Trigger,
    check_flush_answer,
    first_flush_of_compaction,
    flush_prompt,
    flush_section,
    flush_window,
    new_sections,
    pre_compaction_due,
)
from memoryd.core.params import check_session_id
from memoryd.core.replies import (
    FlushReply,
    SessionAppendReply,
    SessionClosed,
    SessionOpenReply,
    SessionStatus,
    UsageReply,
)
from memoryd.core.secrets import Scrubber
from memoryd.core.times import rfc3339, utc
from memoryd.errors import (
    Busy,
    InvalidParams,
    MemorydError,
    ModelError,
    ModelNotConfigured,
    describe_error,
)
from memoryd.errors import NotFound as SessionNotFound
from memoryd.providers.llm import ChatModel
from memoryd.runtime import failpoints
from memoryd.runtime.workspace.idle_close import idle_close_loop
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.runtime.workspace.open_session import OpenSession, Replay
from memoryd.runtime.workspace.redaction import redact, redact_messages
from memoryd.runtime.workspace.session_logs import SessionLogs
from memoryd.store.journal import FlushState, IngestMark, Journal, JournalHeader, load_all
from memoryd.store.layout import memory_relpath

log = structlog.get_logger(__name__)
#: Messages longer than this in all are scrubbed in a worker thread (about 16 ms of work).
THREAD_SCRUB_CHARS = 64 * 1024

T = TypeVar("T")
FlushOutcome = Literal["written", "nothing_to_store", "rejected", "duplicate"]

#: How many nearest chunks the dedupe check compares a flush with.
DEDUPE_NEIGHBOURS = 5


class SessionManager:
    """The open sessions of one workspace (see the module docstring).

    ``clock`` gives wall-clock epoch seconds for timestamps, dates and status; idle timers
    sleep on the event loop's own clock. ``on_write`` is called with each session log the
    manager wrote (the actor wakes its embedder with it).
    """

    def __init__(
        self,
        memory: WorkspaceMemory,
        config: Config,
        model: ChatModel | None,
        *,
        clock: Callable[[], float] = time.time,
        on_write: Callable[[Path], None] | None = None,
    ) -> None:
        self.memory = memory
        self.workspace = memory.workspace
        self.config = config
        self.model = model
        self.clock = clock
        self._sessions: dict[str, OpenSession] = {}
        self.logs = SessionLogs(memory, self._sessions, self._scrub, on_write)
        self._tg: anyio.abc.TaskGroup | None = None
        self._open_lock = anyio.Lock()
        self.log = log.bind(workspace=memory.workspace.key.dirname)
        self.on_closed: Callable[[str, list[IngestMark]], Awaitable[None]] | None = None
        """Told of each session closed (``session.close`` or idle) and its ingest marks."""

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Recover the sessions left open in journals, then own the idle timers until
        cancelled. Journals stay on disk when it stops; the next start recovers them."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await self.recover()
                tg.start_soon(idle_close_loop, self)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._tg = None
            sessions, self._sessions = list(self._sessions.values()), {}
            with anyio.CancelScope(shield=True):
                for s in sessions:
                    async with s.write_lock:  # never under a write in a worker thread
                        s.journal.close()

    async def recover(self) -> list[str]:
        """Reopen every session whose journal is in ``sessions/.live``; returns their ids."""
        live = self.workspace.live_dir  # which sessions: their messages are read on open
        states = await anyio.to_thread.run_sync(lambda: load_all(live, messages=False))
        recovered: list[str] = []
        for state in states:
            sid = state.header.session_id
            if sid in self._sessions:
                continue
            if state.closed:  # closed, but the journal's removal was lost
                try:
                    await anyio.to_thread.run_sync(Journal(self.workspace.live_dir, sid).remove)
                except MemorydError as exc:
                    self.log.error("session.recover_failed", session_id=sid, error=str(exc))
                continue
            try:
                await self._open(sid, state.header.subagent)
            except MemorydError as exc:
                self.log.error("session.recover_failed", session_id=sid, error=str(exc))
                continue
            if sid in self._sessions:
                recovered.append(sid)
        if recovered:
            self.log.info("session.recovered", sessions=len(recovered))
        return recovered

    def set_config(self, config: Config) -> None:
        """Take a reloaded configuration (applies to the next flush and timer)."""
        self.config = config

    def set_model(self, model: ChatModel | None) -> None:
        self.model = model

    @property
    def session_ids(self) -> list[str]:
        return list(self._sessions)

    def has(self, session_id: str) -> bool:
        return session_id in self._sessions

    def is_subagent(self, session_id: str) -> bool:
        """Whether an open session is a sub-agent's (NotFound when it is not open)."""
        return self._get(session_id).subagent

    # ------------------------------------------------------------------ plumbing

    def _get(self, session_id: str) -> OpenSession:
        s = self._sessions.get(session_id)
        if s is None or s.closing:
            raise SessionNotFound(
                f"no open session {session_id!r} in workspace {self.workspace.key.dirname}",
                session_id=session_id,
            )
        return s

    def _now(self) -> datetime:
        return utc(self.clock())

    @property
    def scrubber(self) -> Scrubber:
        return self.config.secrets.scrubber()

    def _scrub(self, text: str, what: str = "", session_id: str = "") -> str:
        return redact(self.scrubber, text, self.log, what, session_id)

    async def _scrub_messages(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        """``messages`` with their secrets redacted; a large batch (an ingest read of up to
        8 MB) in a worker thread, off the event loop."""
        args = (self.scrubber, messages, self.log, session_id)
        if sum(len(m.content) for m in messages) <= THREAD_SCRUB_CHARS:
            return redact_messages(*args)
        return await anyio.to_thread.run_sync(redact_messages, *args)

    def _rel(self, path: Path) -> str:
        return memory_relpath(self.memory.root, path)

    # ------------------------------------------------------------------ open / append

    async def open(self, session_id: str, subagent: bool = False) -> SessionOpenReply:
        """Open (or resume) a session; a session with a journal is recovered from it.

        Returns ``{session_id, log_path, messages, resumed}``: ``log_path`` is today's log
        (relative to the memory root; it exists once something is written), ``resumed`` says
        the session was already open or recovered from its journal.
        """
        check_session_id(session_id)
        if not isinstance(subagent, bool):
            raise InvalidParams("subagent must be a boolean", param="subagent")
        existing = self._sessions.get(session_id)
        resumed = existing is not None and not existing.closing
        if not resumed:
            resumed = await self._open(session_id, subagent)
        s = self._get(session_id)
        path = self.logs.path(s, self._now().date())
        return {
            "session_id": session_id,
            "log_path": self._rel(path),
            "messages": s.count,
            "resumed": resumed,
        }

    async def _open(self, session_id: str, subagent: bool) -> bool:
        """Open ``session_id`` from its journal or anew; True when recovered."""
        async with self._open_lock:
            if session_id in self._sessions and not self._sessions[session_id].closing:
                return True  # opened concurrently meanwhile
            return await self._open_locked(session_id, subagent)

    async def _open_locked(self, session_id: str, subagent: bool) -> bool:
        if session_id in self._sessions:
            raise Busy(f"session {session_id!r} is closing; try again", session_id=session_id)
        journal = Journal(self.workspace.live_dir, session_id)
        now = self.clock()
        header = JournalHeader(str(self.workspace.path), session_id, subagent, now)
        replay = Replay(self.scrubber, self.log, session_id)  # holds only what memory keeps
        state = await anyio.to_thread.run_sync(journal.open, header, replay)
        if state is not None and state.closed:
            # The last close wrote its summary but died before removing the journal.
            await anyio.to_thread.run_sync(journal.remove)
            state = await anyio.to_thread.run_sync(journal.open, header)
        if state is None:
            s = OpenSession(session_id, subagent, now, journal, last_seen=now)
        else:
            s = OpenSession.recovered(state, journal, replay)
        self._sessions[session_id] = s
        self.log.info(
            "session.open",
            session_id=session_id,
            subagent=s.subagent,
            recovered=state is not None,
            messages=s.count,
        )
        if s.unflushed:
            self._arm_idle(s)
        return state is not None

    async def append(
        self, session_id: str, messages: Sequence[Message], *, mark: IngestMark | None = None
    ) -> SessionAppendReply:
        """Append messages in order: to the journal (on disk before this returns), then to
        the transcript in memory. Resets the session's idle timer. Returns ``{count}``: the
        session's message count.

        ``session.ingest`` appends the messages it read from an agent transcript here too,
        with the transcript's new ``mark`` written on the same journal line.
        """
        self._get(session_id)
        batch = await self._scrub_messages(session_id, messages)
        s = self._get(session_id)  # closed during a threaded scrub: as if the request came later
        if batch or mark is not None:
            self._disarm_idle(s)  # no idle flush while a message is being written
            try:
                await s.append(batch, mark, self.clock())
            finally:
                self._arm_idle(s)
        return {"count": s.count}

    def most_recent(self) -> str:
        """The open (main-agent) session with the latest activity: what ``session.flush``
        without a session id flushes. NotFound when none is open."""
        candidates = [s for s in self._sessions.values() if not s.closing and not s.subagent]
        if not candidates:
            raise SessionNotFound(
                f"no open session in workspace {self.workspace.key.dirname}",
                workspace=str(self.workspace.path),
            )
        latest = max(candidates, key=lambda s: (s.last_activity or s.opened_at, s.opened_at))
        return latest.session_id

    def ingest_mark(self, session_id: str, path: str) -> IngestMark | None:
        """How far the transcript at ``path`` has been read into an open session."""
        return self._get(session_id).ingests.get(path)

    def count(self, session_id: str) -> int:
        """How many messages an open session has."""
        return self._get(session_id).count

    def held_messages(self, session_id: str) -> list[Message]:
        """The messages of an open session memory still holds (a copy): the flush window's
        and those after it; the journal has them all."""
        return list(self._get(session_id).held.tail)

    def unseen(self, session_id: str, digests: Sequence[bytes]) -> list[bool]:
        """For each :func:`~memoryd.core.held_transcript.message_digest`: True when the
        open session does not hold that message yet (counted as a multiset)."""
        return self._get(session_id).held.unseen(digests)

    # ------------------------------------------------------------------ triggers

    def _chat_model(self) -> ChatModel:
        if self.model is None:
            raise ModelNotConfigured(
                "no chat model is configured: set llm.base_url and llm.model to flush sessions"
            )
        return self.model

    def _auto_flush_possible(self) -> bool:
        return self.config.flush.enabled and self.model is not None

    async def usage(
        self,
        session_id: str,
        tokens: int,
        context_window: int,
        threshold_percent: float,
        compaction_count: int,
    ) -> UsageReply:
        """A token-usage report. Runs a ``pre_compaction`` flush when ``tokens ≥
        window·threshold% − flush.soft_threshold_tokens``, at most once per compaction
        count, and waits for it. Returns ``{flushed}`` (a flush ran) plus its ``outcome``
        and ``path``, or ``error`` when the model failed."""
        s = self._get(session_id)
        if isinstance(compaction_count, bool) or compaction_count < 0:
            raise InvalidParams("compaction_count must not be negative", param="compaction_count")
        due = pre_compaction_due(
            tokens, context_window, threshold_percent, self.config.flush.soft_threshold_tokens
        )
        s.last_seen = self.clock()
        s.usage = {
            "tokens": tokens,
            "context_window": context_window,
            "threshold_percent": threshold_percent,
            "compaction_count": compaction_count,
            "at": rfc3339(self.clock()),
        }
        if not due or not self._auto_flush_possible():
            return {"flushed": False}
        if not first_flush_of_compaction(s.flush.compaction_count, compaction_count):
            return {"flushed": False}
        # Claimed before any await: a concurrent report for this count does not flush again.
        s.flush = dataclasses.replace(s.flush, compaction_count=compaction_count)
        try:
            result = await self._flush(s, "pre_compaction")
        except MemorydError as exc:
            return {"flushed": False, "error": str(exc), "code": exc.code}
        out: UsageReply = {"flushed": True, "outcome": result["outcome"]}
        if "path" in result:
            out["path"] = result["path"]
        return out

    def _disarm_idle(self, s: OpenSession) -> None:
        if s.idle_scope is not None:
            s.idle_scope.cancel()
        s.idle_scope, s.idle_due = None, None

    def _arm_idle(self, s: OpenSession) -> None:
        """(Re)start the session's idle timer, or stop it when no idle flush is due."""
        self._disarm_idle(s)
        timeout = self.config.flush.idle_timeout_secs
        if timeout <= 0 or self._tg is None or s.closing or not s.unflushed:
            return
        if not self._auto_flush_possible():
            return
        scope = anyio.CancelScope()
        s.idle_scope, s.idle_due = scope, self.clock() + timeout
        self._tg.start_soon(self._idle_timer, s, scope, float(timeout))

    async def _idle_timer(self, s: OpenSession, scope: anyio.CancelScope, delay: float) -> None:
        with scope:
            await anyio.sleep(delay)
        if scope.cancel_called:
            return  # a newer message (or close) replaced this timer
        if s.idle_scope is scope:
            s.idle_scope, s.idle_due = None, None
        if s.closing or self._sessions.get(s.session_id) is not s:
            return
        if not s.unflushed or s.flush_lock.locked() or not self._auto_flush_possible():
            return
        try:
            await self._flush(s, "idle")
        except MemorydError as exc:
            self.log.warning(
                "flush.failed", session_id=s.session_id, trigger="idle", error=str(exc)
            )

    # ------------------------------------------------------------------ flush

    async def flush(self, session_id: str, trigger: Trigger = "manual") -> FlushReply:
        """Flush a session now. Returns ``{outcome, path?}``; ``path`` (relative to the
        memory root) when written. Raises :class:`ModelNotConfigured` without a model and
        :class:`Busy` while another flush of the session runs."""
        s = self._get(session_id)
        self._chat_model()
        if s.flush_lock.locked():
            raise Busy(
                f"a flush of session {session_id!r} is already running", session_id=session_id
            )
        return await self._flush(s, trigger)

    async def _flush(self, s: OpenSession, trigger: Trigger) -> FlushReply:
        """Run one flush under the session's flush lock and record its outcome."""
        async with s.flush_lock:
            started = time.perf_counter()
            count = s.count
            try:
                outcome, path, text = await self._attempt(s, trigger, count)
            except MemorydError as exc:
                failed = dataclasses.replace(
                    s.flush,
                    last_at=self.clock(),
                    last_outcome="error",
                    last_trigger=trigger,
                    last_error=str(exc),
                )
                await self._record(s, failed)
                self.log.warning(
                    "flush",
                    session_id=s.session_id,
                    trigger=trigger,
                    outcome="error",
                    error=str(exc),
                )
                raise
            done = FlushState(
                last_text=text if text is not None else s.flush.last_text,
                last_at=self.clock(),
                last_outcome=outcome,
                last_trigger=trigger,
                compaction_count=s.flush.compaction_count,
                # a rejected answer is no successful flush: the next one asks again
                flushed_through=s.flush.flushed_through if outcome == "rejected" else count,
            )
            await self._record(s, done)
            s.last_seen = self.clock()
            if not s.unflushed:
                self._disarm_idle(s)  # everything is flushed: no idle flush is due
            self.log.info(
                "flush",
                session_id=s.session_id,
                trigger=trigger,
                outcome=outcome,
                messages=count,
                chars=len(text or ""),
                took_ms=round((time.perf_counter() - started) * 1000, 3),
            )
        return {"outcome": outcome, "path": self._rel(path)} if path else {"outcome": outcome}

    async def _attempt(
        self, s: OpenSession, trigger: Trigger, count: int
    ) -> tuple[FlushOutcome, Path | None, str | None]:
        """Ask, check, dedupe, write: ``(outcome, written path, stored text)``."""
        answer = await self._ask(s, trigger, count)
        if answer is None:
            return "nothing_to_store", None, None
        verdict = check_flush_answer(answer, self.config.flush.max_write_chars)
        match verdict.outcome:
            case "nothing":
                return "nothing_to_store", None, None
            case "rejected":
                return "rejected", None, None
            case "store":
                logs = await anyio.to_thread.run_sync(s.log_texts, self.workspace.sessions_dir)
                text = new_sections(verdict.text, logs)  # what the log holds is not repeated
                if not text or await self._is_duplicate(text):
                    return "duplicate", None, None
                section = flush_section(text, self._now(), trigger)
                return "written", await self.logs.append(s, section, self._now().date()), text
            case other:
                assert_never(other)

    async def _ask(self, s: OpenSession, trigger: Trigger, count: int) -> str | None:
        """The model's answer for the session's window, or None when there is nothing to
        ask about: no messages, or none since the last flush (for every trigger, so a second
        manual flush neither calls the model nor writes the same section twice)."""
        model = self._chat_model()
        if count <= s.flush.flushed_through:
            return None
        window = flush_window(s.held.window_messages(count))
        if not window:
            return None
        system, user = flush_prompt(window, s.flush.last_text)
        user = self._scrub(user, "flush.prompt", s.session_id)
        try:
            answer = await model.complete(system, user)
        except MemorydError:
            raise
        except Exception as exc:  # any other model failure reaches clients as a ModelError
            raise ModelError(
                f"chat model {model.model_id!r} failed: {describe_error(exc)}"
            ) from exc
        return self._scrub(answer, "flush.answer", s.session_id)

    async def _record(self, s: OpenSession, state: FlushState) -> None:
        s.flush = state
        await s.journaled(s.journal.record_flush, state)

    async def _is_duplicate(self, text: str) -> bool:
        """True when an indexed chunk's vector has cosine ≥ ``flush.dedupe_threshold`` with
        the flush text's embedding. Without embeddings (or when they fail) nothing is a
        duplicate."""
        similarity = await self.memory.nearest_similarity(text, DEDUPE_NEIGHBOURS)
        return similarity is not None and similarity >= self.config.flush.dedupe_threshold

    # ------------------------------------------------------------------ close / status

    async def close(self, session_id: str) -> SessionClosed:
        """End a session: wait for a running flush, append the model-free summary when due
        (never for sub-agent sessions), then remove the journal. Returns
        ``{summary_written, messages, path?}``."""
        s = self._get(session_id)
        s.closing = True
        self._disarm_idle(s)
        try:
            async with s.flush_lock:
                path: Path | None = None
                summary = None if s.subagent else s.held.tally.summary(self._now())
                if summary is not None:
                    summary = self._scrub(summary, "session.summary", s.session_id)
                if summary is not None:
                    path = await self.logs.append(s, summary, self._now().date(), once=True)
                    await failpoints.hit_async("session.after_summary")
                if not s.close_recorded:  # a retry after a failed removal skips it
                    await s.journaled(s.journal.record_closed, summary is not None)
                    s.close_recorded = True
                await s.journaled(s.journal.remove)
        except BaseException:
            s.closing = False
            self._arm_idle(s)
            raise
        del self._sessions[session_id]
        self.log.info(
            "session.close",
            session_id=session_id,
            messages=s.count,
            summary_written=path is not None,
        )
        if self.on_closed is not None:
            await self.on_closed(session_id, list(s.ingests.values()))
        out: SessionClosed = {"summary_written": path is not None, "messages": s.count}
        if path is not None:
            out["path"] = self._rel(path)
        return out

    async def each_journal(self, fn: Callable[[Journal], T]) -> list[tuple[Path, T]]:
        """``fn(journal)`` in a worker thread for each open session, under its write lock
        (``secrets purge`` rewrites them); the transcripts in memory are scrubbed already."""
        out: list[tuple[Path, T]] = []
        for s in list(self._sessions.values()):
            with anyio.CancelScope(shield=True):
                async with s.write_lock:
                    out.append((s.journal.path, await anyio.to_thread.run_sync(fn, s.journal)))
        return out

    def open_sessions(self) -> list[OpenSession]:
        """The open sessions themselves (for the idle-close loop; replies use :meth:`status`)."""
        return list(self._sessions.values())

    def status(self) -> list[SessionStatus]:
        """Per open session: message count, last activity, next idle flush, last flush."""
        today = self._now().date()
        return [
            s.status(
                self._rel(self.logs.path(s, today)),
                self.config.flush.session_idle_close_secs,
            )
            for s in self._sessions.values()
        ]
