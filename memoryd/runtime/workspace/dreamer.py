"""One dream of one workspace: gates, lock, model call, safe write, cleanup, undo (SPEC §8).

:class:`Dreamer` runs SPEC §8.4 so that a failure at any point loses nothing:

1. the gates (:func:`memoryd.core.dreaming.check_gates`); then the DreamLock, taken
   **before** the model call (:mod:`memoryd.runtime.adapters.lockfile`);
2. gather ``MEMORY.md`` and the session logs (oldest first, ``MEMORY.md`` included up to
   ``max_input_chars``; a ``MEMORY.md`` that leaves no room stops the dream with reason
   ``memory_too_large``) and record the content hash of each; a log whose hash an earlier
   dream (not undone) consumed is not sent again — it is only archived;
3. await the model with nothing open; an empty / ``NO_REPLY`` / heading-less answer writes
   and archives nothing (lock released, time advanced), and so is an answer that is
   ``refused``: longer than ``max_write_chars`` (``too_large``), losing most ``##`` sections
   by content (``loss``) or taking nothing from the logs (``ignores_logs``);
4. commit, under a short exclusive ``flock`` of the workspace directory (a real mutex between
   processes, held only for file work, never across the model call): if ``MEMORY.md``
   changed since step 2 (a person's edit, or another dream) or a consumed log is gone
   (another dream consumed it), nothing is written and the lock is rolled back — this makes
   two dreams on the same material safe. Otherwise the old file is copied into
   ``.history/`` (the last ``keep_history`` kept) and the new one written atomically with its
   footer; a write failure rolls the lock back and deletes nothing;
5. journal the dream (``.history/dreams.jsonl``: inputs with their content hashes, the logs to
   archive), then move the consumed logs that are unchanged since step 2 and older than
   :data:`RECENT_SECS` into ``.history/sessions/<dream id>/``; release the lock;
6. hand the archived paths and ``MEMORY.md`` to the ``reindex`` callback (and list them in
   :attr:`DreamResult.reindex_paths`).

:meth:`Dreamer.undo` restores the ``MEMORY.md`` a dream replaced and the logs it archived
(refused when ``MEMORY.md`` changed since, unless forced); :meth:`Dreamer.status` reports
gates, lock and the last run for ops. ``.history/`` holds the backups
(``MEMORY.<UTC stamp>.md``), the archived logs and the journal (``dreams.jsonl``, one JSON
object per attempt that took the lock, plus one per undo).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import structlog

from memoryd.core.config import DreamConfig, SecretsConfig
from memoryd.core.dreaming import (
    MIN_LOG_CHARS,
    DreamInput,
    GateOutcome,
    adds_log_text,
    check_answer,
    check_gates,
    check_loss,
    dream_prompt,
    effective_mtime,
    is_session_log,
    with_footer,
)
from memoryd.core.replies import DreamState, DreamUndoReply
from memoryd.core.times import rfc3339, utc
from memoryd.errors import ModelNotConfigured, StorageError, describe_error
from memoryd.providers.llm import ChatModel
from memoryd.runtime import failpoints
from memoryd.runtime.adapters.lockfile import DreamLock, PidChecker, process_alive
from memoryd.runtime.workspace.dream_gather import Gathered, gather, read_budget
from memoryd.runtime.workspace.dream_result import DreamResult, Outcome
from memoryd.runtime.workspace.filelock import file_lock
from memoryd.store.files import atomic_write_text, read_bytes, read_text_capped
from memoryd.store.history import (
    JOURNAL,
    append_journal,
    archive_dir,
    archive_unchanged,
    backups,
    commit_guard,
    digest,
    finish_interrupted_clean_up,
    finish_interrupted_undo,
    last_settled,
    new_entry_id,
    plan_clean_up,
    prune_archives,
    prune_backups,
    read_journal,
    save_backup,
    undo_last,
)
from memoryd.store.layout import Workspace

__all__ = ["JOURNAL", "RECENT_SECS", "DreamResult", "Dreamer", "backups", "read_journal"]

log = structlog.get_logger(__name__)

#: Session logs modified this recently are consolidated but not archived (still being written).
RECENT_SECS = 300.0

Reindex = Callable[[Sequence[Path]], Awaitable[object]]


class Dreamer:
    """Runs dreams, undo and status for one workspace (see the module docstring)."""

    def __init__(
        self,
        workspace: Workspace,
        config: DreamConfig,
        model: ChatModel | None,
        *,
        clock: Callable[[], float] = time.time,
        is_alive: PidChecker = process_alive,
        reindex: Reindex | None = None,
        recent_secs: float = RECENT_SECS,
        secrets: SecretsConfig | None = None,
    ) -> None:
        self.workspace = workspace
        self.secrets = secrets or SecretsConfig()
        self.model = model
        self.clock = clock
        self.reindex = reindex
        self.recent_secs = recent_secs
        self._is_alive = is_alive
        self.config = config
        self.lock = self._make_lock()
        self.log = log.bind(workspace=workspace.key.dirname)

    def _make_lock(self) -> DreamLock:
        return DreamLock(
            self.workspace.lock_path,
            stale_secs=self.config.stale_lock_secs,
            clock=self.clock,
            is_alive=self._is_alive,
        )

    def set_config(self, config: DreamConfig) -> None:
        """Take a reloaded ``[dream]`` section (applies to the next attempt)."""
        self.config = config
        self.lock = self._make_lock()

    def _scrub(self, text: str, where: str) -> str:
        """``text`` with its secrets redacted (SPEC §18): what a dream sends and writes."""
        scrubbed = self.secrets.scrubber().scrub(text)
        if scrubbed.findings:
            self.log.warning(
                "secrets.redacted", where=where, count=len(scrubbed.findings), kinds=scrubbed.kinds
            )
        return scrubbed.text

    # ------------------------------------------------------------------ gates

    def _session_mtimes(self) -> dict[str, datetime]:
        """Each session log's effective mtime (a future mtime never counts as "new" again:
        :func:`~memoryd.core.dreaming.effective_mtime`)."""
        try:
            entries = list(os.scandir(self.workspace.sessions_dir))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        now = self.clock()
        out: dict[str, datetime] = {}
        for entry in entries:
            try:
                if is_session_log(entry.name) and entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out[entry.name] = utc(effective_mtime(st.st_mtime, st.st_ctime, now))
            except FileNotFoundError:
                continue
        return out

    def last_consolidation(self) -> float | None:
        """When the last dream settled (synchronous). The lock's mtime while its body is
        empty; while it names a holder — a dream running now, or one that crashed — that
        mtime is only when the holder began, so the journal says instead."""
        if self.lock.inspect().pid is None:
            return self.lock.last_consolidation()
        return last_settled(read_journal(self.workspace.history_dir))

    def gates(
        self,
        *,
        subagent: bool = False,
        ending_session: str | None = None,
        manual: bool = False,
        force: bool = False,
    ) -> GateOutcome:
        """The gate decision now (synchronous: stats the lock and the session logs)."""
        last = self.last_consolidation()
        return check_gates(
            enabled=self.config.enabled or force,
            subagent=subagent,
            last_consolidation=None if last is None else utc(last),
            now=utc(self.clock()),
            min_hours=self.config.min_hours,
            session_mtimes=self._session_mtimes(),
            ending_session=ending_session,
            min_sessions=self.config.min_sessions,
            manual=manual,
        )

    # ------------------------------------------------------------------ run

    async def run(
        self,
        *,
        manual: bool = False,
        subagent: bool = False,
        ending_session: str | None = None,
        force: bool = False,
    ) -> DreamResult:
        """One dream attempt (SPEC §8.4). ``manual`` skips the time and session gates;
        ``force`` also runs when ``dream.enabled`` is false. Neither bypasses the lock.

        Raises :class:`ModelNotConfigured` for a manual dream without a model; every other
        failure is reported in the result (and the lock rolled back).
        """
        started = time.perf_counter()
        result = await self._run(manual, subagent, ending_session, force)
        self.log.info(
            "dream",
            outcome=result.outcome,
            reason=result.reason,
            manual=manual,
            consumed=len(result.consumed),
            archived=len(result.archived),
            waiting=len(result.waiting),
            chars=result.chars,
            took_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        if result.outcome == "written":
            await self._reindex(result.reindex_paths)
        return result

    async def _reindex(self, paths: Sequence[Path]) -> None:
        if self.reindex is None:
            return
        try:
            await self.reindex(paths)
        except Exception as exc:  # noqa: BLE001 - the index is derived; the watcher catches up
            self.log.warning("dream.reindex_failed", error=str(exc))

    def _result(self, outcome: Outcome, reason: str | None = None, **kw: Any) -> DreamResult:
        return DreamResult(outcome, self.workspace.memory_file, reason, **kw)

    async def _run(
        self, manual: bool, subagent: bool, ending_session: str | None, force: bool
    ) -> DreamResult:
        gate = await anyio.to_thread.run_sync(
            lambda: self.gates(
                subagent=subagent, ending_session=ending_session, manual=manual, force=force
            )
        )
        if not gate.open:
            return self._result("skipped", gate.outcome, gates=gate)
        model = self.model
        if model is None:
            if manual:
                raise ModelNotConfigured("dream needs a chat model: set [llm] base_url and model")
            return self._result("skipped", "model_not_configured", gates=gate)
        if not await anyio.to_thread.run_sync(self._session_mtimes):
            return self._result("skipped", "nothing_to_do", gates=gate)
        lock = self.lock
        acq = await anyio.to_thread.run_sync(lock.acquire)
        if not acq.acquired:
            return self._result("skipped", acq.outcome, gates=gate, holder=acq.holder)
        prior = acq.prior
        if acq.reclaimed is not None:  # a crashed holder's mtime is no consolidation
            prior = await anyio.to_thread.run_sync(
                lambda: last_settled(read_journal(self.workspace.history_dir))
            )
        settled = [False]  # set by whichever step releases or rolls back the lock

        def settle(success: bool) -> None:
            if settled[0]:
                return
            settled[0] = True
            if success:
                lock.release()
            else:
                lock.rollback(prior)

        try:
            finished = await anyio.to_thread.run_sync(self._finish_interrupted_clean_up)
            if finished:
                await self._reindex(finished)
            return await self._locked(model, gate, settle)
        finally:
            if not settled[0]:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(settle, False)

    async def _locked(
        self,
        model: ChatModel,
        gate: GateOutcome,
        settle: Callable[[bool], None],
    ) -> DreamResult:
        got = await anyio.to_thread.run_sync(self._gather)
        inp = got.input
        if inp.memory_too_large:
            detail = (
                f"MEMORY.md has {'more than ' if got.memory_cut else ''}"
                f"{inp.memory_chars} characters, which leaves no room for a "
                f"session log within dream.max_input_chars = {self.config.max_input_chars}; "
                "shorten MEMORY.md or raise dream.max_input_chars"
            )
            self.log.warning("dream.memory_too_large", chars=inp.memory_chars)
            await anyio.to_thread.run_sync(settle, False)
            return self._result(
                "skipped", "memory_too_large", gates=gate, waiting=inp.waiting, detail=detail
            )
        if inp.empty:
            await anyio.to_thread.run_sync(settle, False)
            return self._result("skipped", "nothing_to_do", gates=gate, waiting=inp.waiting)
        common: dict[str, Any] = {
            "gates": gate,
            "consumed": inp.consumed,
            "waiting": inp.waiting,
            "truncated": inp.truncated,
        }
        now = utc(self.clock())

        async def finish(success: bool, outcome: Outcome, reason: str, **extra: Any) -> None:
            def work() -> None:
                settle(success)
                self._journal(outcome, reason, inp, **extra)

            await anyio.to_thread.run_sync(work)

        try:
            answer = await model.complete(dream_prompt(now), self._scrub(inp.text, "dream.input"))
        except Exception as exc:  # noqa: BLE001 - any model failure: roll back, retry later
            error = describe_error(exc)
            await finish(False, "failed", "model_error", error=error)
            return self._result("failed", "model_error", error=error, **common)
        verdict = check_answer(self._scrub(answer, "dream.answer"))
        if not verdict.ok:
            outcome: Outcome = "rejected" if verdict.outcome == "no_heading" else "nothing_to_store"
            await finish(True, outcome, verdict.outcome)
            return self._result(outcome, verdict.outcome, **common)
        limit = self.config.max_write_chars
        if len(verdict.text) > limit:
            detail = f"the answer has {len(verdict.text)} characters (max_write_chars {limit})"
            self.log.warning("dream.refused", reason="too_large", chars=len(verdict.text))
            await finish(True, "refused", "too_large", detail=detail)
            return self._result("refused", "too_large", detail=detail, **common)
        loss = check_loss(got.memory_text, verdict.text, self.config.max_loss_fraction)
        if loss.refused:
            self.log.warning("dream.refused", reason="loss", **loss.to_dict())
            detail = f"the answer drops the content of {len(loss.lost)} of {loss.total} sections"
            await finish(True, "refused", "loss", loss=loss.to_dict(), detail=detail)
            return self._result("refused", "loss", loss=loss, detail=detail, **common)
        if not adds_log_text(got.memory_text, [inp.log_text], verdict.text):
            detail = "the answer takes nothing from the session logs it was given"
            self.log.warning("dream.refused", reason="ignores_logs")
            await finish(True, "refused", "ignores_logs", detail=detail)
            return self._result("refused", "ignores_logs", detail=detail, **common)
        async with file_lock(self.workspace.memory_file):
            result = await anyio.to_thread.run_sync(self._commit, got, verdict.text, settle)
        return dataclasses.replace(result, gates=gate, loss=loss)

    def _gather(self) -> Gathered:
        return gather(self.workspace, self.config.max_input_chars, self._session_mtimes())

    def _commit(self, got: Gathered, text: str, settle: Callable[[bool], None]) -> DreamResult:
        ws, inp = self.workspace, got.input
        common: dict[str, Any] = {
            "consumed": inp.consumed,
            "waiting": inp.waiting,
            "truncated": inp.truncated,
        }
        with commit_guard(ws.dir):
            current = read_bytes(ws.memory_file)
            if digest(current) != got.memory_hash:
                settle(False)
                self._journal("conflict", "edited_meanwhile", inp)
                return self._result("conflict", "edited_meanwhile", **common)
            if any(not (ws.sessions_dir / name).exists() for name in inp.consumed):
                settle(False)
                self._journal("conflict", "superseded", inp)
                return self._result("conflict", "superseded", **common)
            now = self.clock()
            dream_id = new_entry_id()
            new_text = with_footer(text, inp.consumed, utc(now))
            try:
                ws.history_dir.mkdir(mode=0o700, exist_ok=True)
                backup = save_backup(ws.history_dir, current, now)
                failpoints.hit("dream.before_write")
                atomic_write_text(ws.memory_file, new_text)
            except (StorageError, OSError) as exc:
                settle(False)
                error = str(exc)
                self._journal("failed", "write_error", inp, error=error)
                return self._result("failed", "write_error", error=error, **common)
            # Journal before archiving: a crash during the cleanup leaves a journalled dream
            # (undo finds it) whose remaining logs the next dream archives unread.
            hashes = {**got.log_hashes, **got.already}
            doomed, kept = plan_clean_up(
                ws.sessions_dir,
                (*inp.consumed, *got.already),
                hashes,
                now - self.recent_secs,
                now,
            )
            self._journal(
                "written",
                None,
                inp,
                id=dream_id,
                backup=backup,
                chars=len(new_text),
                archived=list(doomed),
                kept=list(kept),
                memory_hash=digest(new_text.encode("utf-8")),
                input_hashes={n: got.log_hashes[n] for n in inp.consumed if n in got.log_hashes},
                archived_hashes=doomed,
                truncated=list(inp.truncated),
            )
            archived, late = archive_unchanged(
                ws.sessions_dir, archive_dir(ws.history_dir, dream_id), doomed, self._cleanup_hook
            )
            try:
                prune_backups(ws.history_dir, self.config.keep_history)
                prune_archives(
                    ws.history_dir,
                    self.config.keep_history,
                    self.config.keep_logs_days,
                    now,
                    read_journal(ws.history_dir),
                )
            except OSError as exc:
                self.log.warning("dream.prune_failed", error=str(exc))
            settle(True)
        return self._result(
            "written",
            None,
            archived=archived,
            kept=(*kept, *late),
            backup=backup,
            chars=len(new_text),
            dream_id=dream_id,
            **common,
        )

    def _finish_interrupted_clean_up(self) -> tuple[Path, ...]:
        """Complete a killed undo, then a killed cleanup; the paths the index must sync."""
        ws = self.workspace
        restored = finish_interrupted_undo(ws)
        if restored:
            self.log.info("dream.undo_finished", logs=len(restored))
        archived = finish_interrupted_clean_up(ws, self._cleanup_hook)
        if archived:
            self.log.info("dream.cleanup_finished", archived=len(archived))
        back = (ws.memory_file, *(ws.sessions_dir / n for n in restored)) if restored else ()
        return (*back, *archived)

    @staticmethod
    def _cleanup_hook() -> None:
        failpoints.hit("dream.cleanup")

    def _journal(self, outcome: str, reason: str | None, inp: DreamInput, **extra: Any) -> None:
        entry = {
            "time": rfc3339(self.clock()),
            "outcome": outcome,
            "reason": reason,
            "pid": os.getpid(),
            "inputs": list(inp.consumed),
            "memory_included": inp.memory_included,
            "waiting": len(inp.waiting),
            "backup": None,
            "chars": 0,
            **extra,
        }
        try:
            append_journal(self.workspace.history_dir, entry)
        except OSError as exc:
            self.log.warning("dream.journal_failed", error=str(exc))

    # ------------------------------------------------------------------ undo and status

    async def undo(self, *, force: bool = False) -> DreamUndoReply:
        """Undo the last (not yet undone) dream: its ``MEMORY.md`` backup and archived logs
        come back (see :func:`~memoryd.store.history.undo_last` for the reply). Raises
        :class:`MemoryChanged` when ``MEMORY.md`` changed since that dream wrote it (unless
        ``force``) and :class:`NotFound` when no dream can be undone.
        """
        async with file_lock(self.workspace.memory_file):
            out = await anyio.to_thread.run_sync(
                lambda: undo_last(
                    self.workspace,
                    self.config.keep_history,
                    self.clock(),
                    force=force,
                    after_journal=lambda: failpoints.hit("dream.undo"),
                )
            )
        self.log.info(
            "dream.undo",
            restored=out["restored"],
            dream_time=out["dream_time"],
            logs=len(out["logs_restored"]),
            forced=out["forced"],
        )
        logs = [self.workspace.sessions_dir / n for n in out["logs_restored"]]
        await self._reindex([self.workspace.memory_file, *logs])
        return out

    async def status(self) -> DreamState:
        """Gates (current values vs thresholds), lock, last consolidation and last run."""
        return await anyio.to_thread.run_sync(self._status)

    def _status(self) -> DreamState:
        gate = self.gates()
        info = self.lock.inspect()
        entries = read_journal(self.workspace.history_dir)
        if info.pid is None:
            stamp = info.mtime  # a released lock's mtime is the last consolidation
        else:
            stamp = last_settled(entries)
        last = rfc3339(stamp)
        last_run = entries[-1] if entries else None
        # Read as far as a dream could use and decoded as the index does (this runs for every
        # `status`): a larger file's count is a lower bound, and too large either way.
        budget = read_budget(self.config.max_input_chars)
        memory = read_text_capped(self.workspace.memory_file, budget)
        memory_chars = len(memory[0]) if memory is not None else 0
        cut = memory is not None and memory[1] is not None
        return {
            "memory_chars": memory_chars,
            "max_input_chars": self.config.max_input_chars,
            "memory_too_large": cut or memory_chars + MIN_LOG_CHARS > self.config.max_input_chars,
            "enabled": self.config.enabled,
            "gates": gate.values(),
            "lock": info.to_dict(),
            "last_consolidation": last,
            "last_run": (
                None
                if last_run is None
                else {k: last_run.get(k) for k in ("time", "outcome", "reason", "inputs")}
            ),
        }
