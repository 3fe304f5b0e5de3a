"""One experience confluence run, its state and its daily schedule (SPEC §10).

A run:

1. enumerates workspaces from the registry (``<root>/workspaces.json``) only — never by
   listing the memory root — and reads each one's ``MEMORY.md``;
2. compares their ``##`` sections with the per-workspace watermark; nothing new anywhere →
   ``skipped: no_new_material`` with no model call at all;
3. checks with the git guard that ``experience.md`` may be written (it is only guarded when
   the memory root is in a git repository); refused → ``refused`` with the next step, no
   model call;
4. one **distiller** call per batch of new sections; an answer that does not parse is an
   error of that batch (its sections stay new and are retried next run);
5. one **screener** call per candidate, which sees only its title and body; unusable
   answers, timeouts and errors count as *not shareable*. Candidates that cite unknown
   sections, name a registered workspace, or are already in ``experience.md`` (same title)
   are settled without a screener call;
6. appends the accepted lessons, each with its source pointers, to ``<root>/experience.md``
   in one atomic write (through the git guard), then advances the watermark of every batch
   that was distilled (and whose lessons, if any, were written);
7. persists the run (time, trigger, outcome, counts, errors, rejections with reasons) and
   the watermarks in ``<root>/.confluence/state.json``, and logs one ``confluence.run``
   event plus one ``confluence.rejected`` event per rejection.

``confluence.enabled = false`` (the default) makes a run skip with ``skipped: disabled``
unless it is forced (``memoryd confluence run --force``), as ``memoryd dream --force`` does
for dream. The daily schedule (:meth:`Confluence.run_daily`) runs only when
``confluence.enabled`` and ``confluence.schedule = "daily"``, a day after the last run of
any trigger (and not in the first minutes after the daemon starts).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import structlog

from memoryd.core import confluence as cf
from memoryd.core.config import Config
from memoryd.core.dreaming import normalize_heading
from memoryd.core.replies import (
    ConfluenceCounts,
    ConfluenceRunReply,
    ConfluenceStatusReply,
    ConfluenceSummary,
)
from memoryd.core.times import rfc3339
from memoryd.core.workspace import EXPERIENCE_FILE, MEMORY_FILE
from memoryd.errors import Busy, MemorydError, ModelNotConfigured, StorageError, describe_error
from memoryd.providers.llm import ChatModel
from memoryd.runtime.workspace.filelock import file_lock
from memoryd.store.files import atomic_write_text, make_private_dirs, read_bytes, read_text
from memoryd.store.gitguard import GitWriteCheck, check_git_write, write_guarded
from memoryd.store.layout import experience_file
from memoryd.store.registry import RegistryEntry, load_registry

log = structlog.get_logger(__name__)

STATE_DIR = ".confluence"
STATE_FILE = "state.json"
#: The schedule looks at the config at least this often (a reload that enables it applies).
RECHECK_SECS = 3600.0
Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class RunReport:
    """What one run did; ``to_dict`` is what ``confluence.run`` answers and the state keeps."""

    trigger: str
    started_at: datetime
    outcome: str = "done"  # done | partial | failed | refused | skipped
    skipped: str | None = None  # no_new_material | disabled
    workspaces: int = 0
    new_sections: int = 0
    batches: int = 0
    candidates: int = 0
    shared: int = 0
    rejected: int = 0
    duplicates: int = 0
    model_calls: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[str, Any] | None = None
    finished_at: datetime | None = None

    def error(self, stage: str, message: str, **where: Any) -> None:
        self.errors.append({"stage": stage, "message": message, **where})
        log.warning("confluence.error", stage=stage, error=message, **where)

    def reject(self, candidate: cf.Candidate, reason: str, by: str) -> None:
        self.rejected += 1
        self.rejections.append({"title": candidate.title, "reason": reason, "by": by})
        log.info("confluence.rejected", title=candidate.title, reason=reason, by=by)

    def counts(self) -> ConfluenceCounts:
        return {
            "workspaces": self.workspaces,
            "new_sections": self.new_sections,
            "batches": self.batches,
            "candidates": self.candidates,
            "shared": self.shared,
            "rejected": self.rejected,
            "duplicates": self.duplicates,
            "model_calls": self.model_calls,
            "errors": len(self.errors),
        }

    def to_dict(self) -> ConfluenceRunReply:
        return {
            "outcome": self.outcome,
            "skipped": self.skipped,
            "trigger": self.trigger,
            "started_at": rfc3339(self.started_at),
            "finished_at": rfc3339(self.finished_at),
            "counts": self.counts(),
            "errors": self.errors,
            "rejections": self.rejections,
            "accepted": self.accepted,
            "refused": self.refused,
            "path": EXPERIENCE_FILE,
        }


@dataclass(slots=True)
class _Material:
    sections: dict[str, list[cf.MemorySection]] = field(default_factory=dict)
    entries: list[RegistryEntry] = field(default_factory=list)


class Confluence:
    """The confluence of one memory root: runs (one at a time), state, schedule."""

    def __init__(
        self,
        root: Path,
        config: Callable[[], Config],
        chat_model: Callable[[], ChatModel | None],
        *,
        clock: Clock = _utcnow,
        sleep: Sleep = anyio.sleep,
        call_timeout: float | None = None,
    ) -> None:
        self.root = root
        self.config = config
        self.chat_model = chat_model
        self.clock = clock
        self.sleep = sleep
        self.call_timeout = call_timeout
        self.daemon_started = clock()
        self._lock = anyio.Lock()
        self._state: dict[str, Any] | None = None
        self._last_started: datetime | None = None

    @property
    def state_path(self) -> Path:
        return self.root / STATE_DIR / STATE_FILE

    @property
    def running(self) -> bool:
        return self._lock.locked()

    # ------------------------------------------------------------------ state

    def _read_state(self) -> dict[str, Any]:
        try:
            data = read_bytes(self.state_path)
            state = json.loads(data.decode("utf-8")) if data is not None else {}
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
        except (StorageError, ValueError) as exc:
            log.warning("confluence.state_unreadable", path=str(self.state_path), error=str(exc))
            state = {}
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        make_private_dirs(self.state_path.parent)
        atomic_write_text(self.state_path, json.dumps(state, indent=1, ensure_ascii=False) + "\n")

    async def load(self) -> dict[str, Any]:
        """Read the state file (in a worker thread) and keep it for :meth:`summary`."""
        self._state = await anyio.to_thread.run_sync(self._read_state)
        last = (self._state.get("last_run") or {}).get("started_at")
        if isinstance(last, str) and self._last_started is None:
            try:
                self._last_started = datetime.fromisoformat(last)
            except ValueError:
                pass
        return self._state

    # ------------------------------------------------------------------ one run

    def _timeout(self, config: Config) -> float:
        if self.call_timeout is not None:
            return self.call_timeout
        llm = config.llm
        return llm.timeout_secs * (llm.max_retries + 1) + 10.0

    async def run(self, *, force: bool = False, trigger: str = "manual") -> ConfluenceRunReply:
        """One run (see the module docstring); :class:`Busy` if one is running already.

        Raises :class:`ModelNotConfigured` when there is new material but no chat model
        (the attempt is recorded first).
        """
        if self._lock.locked():
            raise Busy("a confluence run is already in progress")
        async with self._lock:
            config = self.config()
            report = RunReport(trigger, self.clock())
            if not config.confluence.enabled and not force:
                report.outcome, report.skipped = "skipped", "disabled"
                report.finished_at = report.started_at
                out = report.to_dict()
                out["message"] = (
                    "confluence is off (confluence.enabled = false): enable it in the config, "
                    "or run `memoryd confluence run --force` to run it once"
                )
                return out
            self._last_started = report.started_at
            state = await anyio.to_thread.run_sync(self._read_state)
            try:
                await self._run(config, state, report)
            finally:
                report.finished_at = self.clock()
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await self._persist(state, report)  # even when the daemon stops mid-run
            return report.to_dict()

    async def _run(self, config: Config, state: dict[str, Any], report: RunReport) -> None:
        material = await anyio.to_thread.run_sync(self._gather, report)
        marks = {
            name: cf.Watermark.from_dict(raw)
            for name, raw in (state.get("watermarks") or {}).items()
            if isinstance(name, str)
        }
        new = [
            section
            for name, sections in material.sections.items()
            for section in cf.unseen(sections, marks.get(name, cf.Watermark()))
        ]
        report.new_sections = len(new)
        taken: set[str] = set()
        try:
            if not new:
                report.outcome = "failed" if report.errors else "skipped"
                report.skipped = None if report.errors else "no_new_material"
                return
            model = self.chat_model()
            if model is None:
                report.outcome = "failed"
                report.error("model", "no chat model is configured ([llm] base_url and model)")
                raise ModelNotConfigured(
                    "confluence needs a chat model: set [llm] base_url and model"
                )
            target = experience_file(self.root)
            check = await anyio.to_thread.run_sync(check_git_write, target)
            if not check.allowed:
                self._refuse(report, check)
                return
            taken = await self._distil(model, config, material, new, report)
        finally:
            state["watermarks"] = {
                name: marks.get(name, cf.Watermark()).advance(sections, taken).to_dict()
                for name, sections in material.sections.items()
            } | {
                name: raw
                for name, raw in (state.get("watermarks") or {}).items()
                if name not in material.sections
            }

    def _gather(self, report: RunReport) -> _Material:
        """Read the ``MEMORY.md`` of every registered workspace (and nothing else)."""
        material = _Material(entries=load_registry(self.root))
        max_bytes = self.config().index.max_file_bytes  # as far as the index reads it
        for entry in material.entries:
            try:
                text = read_text(self.root / entry.dirname / MEMORY_FILE, max_bytes)
            except StorageError as exc:
                report.error("read", str(exc), workspace=entry.dirname)
                continue
            material.sections[entry.dirname] = cf.consolidated_sections(entry.dirname, text)
        report.workspaces = len(material.sections)
        return material

    def _refuse(self, report: RunReport, check: GitWriteCheck) -> None:
        report.outcome, report.refused = "refused", check.to_dict()
        log.warning("confluence.refused", path=check.path, reason=check.reason)

    async def _call(self, model: ChatModel, secs: float, system: str, user: str) -> str:
        """One model call, its input and answer scrubbed (SPEC §18): the lessons are parsed
        from the answer, so nothing the scrubber finds reaches ``experience.md``."""
        scrubber = self.config().secrets.scrubber()
        sent, answer = scrubber.scrub(user), ""
        with anyio.fail_after(secs):
            answer = await model.complete(system, sent.text)
        got = scrubber.scrub(answer)
        if sent.findings or got.findings:
            log.warning(
                "secrets.redacted",
                where="confluence",
                count=len(sent.findings) + len(got.findings),
                kinds=list(dict.fromkeys(sent.kinds + got.kinds)),
            )
        return got.text

    async def _distil(
        self,
        model: ChatModel,
        config: Config,
        material: _Material,
        new: list[cf.MemorySection],
        report: RunReport,
    ) -> set[str]:
        """Distil and screen every batch; write the lessons; return the digests taken."""
        timeout = self._timeout(config)
        target = experience_file(self.root)
        current = await anyio.to_thread.run_sync(read_text, target)
        known = cf.existing_titles(current)
        markers = [marker for entry in material.entries for marker in entry.markers]
        lessons: list[cf.Lesson] = []
        done: list[tuple[cf.Batch, int]] = []
        batches = cf.plan_batches(new)
        report.batches = len(batches)
        for number, batch in enumerate(batches, 1):
            report.model_calls += 1
            try:
                answer = await self._call(
                    model, timeout, cf.distiller_prompt(), cf.distiller_input(batch)
                )
                candidates = cf.parse_candidates(answer, batch)
            except TimeoutError:
                report.error("distiller", f"timed out after {timeout:g} s", batch=number)
                continue
            except Exception as exc:  # noqa: BLE001 - a failing batch is recorded, others go on
                report.error("distiller", describe_error(exc), batch=number)
                continue
            before = len(lessons)
            for candidate in candidates:
                lesson = await self._settle(model, timeout, candidate, known, markers, report)
                if lesson is not None:
                    lessons.append(lesson)
                    known.add(normalize_heading(lesson.title))
            done.append((batch, len(lessons) - before))
        written = await self._write(lessons, report) if lessons else True
        report.outcome = "done"
        if report.errors:
            report.outcome = "partial" if done else "failed"
        if not written and report.refused:
            report.outcome = "refused"
        return {
            section.digest
            for batch, accepted in done
            if written or not accepted
            for section in batch.sections
        }

    async def _settle(
        self,
        model: ChatModel,
        secs: float,
        candidate: cf.Candidate,
        known: set[str],
        markers: list[str],
        report: RunReport,
    ) -> cf.Lesson | None:
        """Decide one candidate: checks first, then one screener call."""
        report.candidates += 1
        if candidate.problem:
            report.reject(candidate, candidate.problem, "check")
            return None
        leak = cf.leak_check(candidate.title, candidate.body, markers)
        if leak:
            report.reject(candidate, leak, "check")
            return None
        if normalize_heading(candidate.title) in known:
            report.duplicates += 1
            return None
        report.model_calls += 1
        try:
            answer = await self._call(
                model,
                secs,
                cf.screener_prompt(),
                cf.screener_input(candidate.title, candidate.body),
            )
            verdict = cf.parse_verdict(answer)
        except TimeoutError:
            verdict = cf.Verdict(False, f"screener timed out after {secs:g} s")
        except Exception as exc:  # noqa: BLE001 - failing closed: an error is "not shareable"
            verdict = cf.Verdict(False, f"screener failed: {describe_error(exc)}")
        if not verdict.shareable:
            report.reject(candidate, verdict.reason, "screener")
            return None
        return cf.Lesson(candidate.title, candidate.body, tuple(candidate.pointers))

    async def _write(self, lessons: list[cf.Lesson], report: RunReport) -> bool:
        """Append ``lessons`` to ``experience.md`` through the git guard; True if written."""
        target = experience_file(self.root)
        block = cf.render_lessons(lessons, self.clock())

        def append() -> GitWriteCheck:
            current = read_text(target)  # decoded as the index decodes it (a UTF-16 BOM too)
            current = cf.EXPERIENCE_HEADER if current is None else current
            text = f"{current.rstrip()}\n\n{block}\n"
            return write_guarded(target, text)

        try:
            async with file_lock(target):
                check = await anyio.to_thread.run_sync(append)
        except StorageError as exc:
            report.error("write", str(exc), path=str(target))
            return False
        if not check.allowed:
            self._refuse(report, check)
            return False
        report.shared = len(lessons)
        report.accepted = [{"title": x.title, "sources": list(x.sources)} for x in lessons]
        for lesson in lessons:
            log.info("confluence.shared", title=lesson.title, sources=list(lesson.sources))
        return True

    async def _persist(self, state: dict[str, Any], report: RunReport) -> None:
        run = report.to_dict()
        state["version"] = 1
        state["last_run"] = run
        if report.outcome != "skipped":
            state["last_work"] = run
        self._state = state
        log.info(
            "confluence.run",
            outcome=report.outcome,
            skipped=report.skipped,
            trigger=report.trigger,
            took_ms=round(_secs(report.started_at, report.finished_at) * 1000, 1),
            **report.counts(),
        )
        try:
            await anyio.to_thread.run_sync(self._write_state, state)
        except (StorageError, OSError) as exc:
            log.error("confluence.state_write_failed", path=str(self.state_path), error=str(exc))

    # ------------------------------------------------------------------ status

    def next_run(self, config: Config) -> datetime | None:
        """When the daily schedule runs next, or None when it is off."""
        c = config.confluence
        if not (c.enabled and c.schedule == "daily"):
            return None
        return cf.next_daily_run(self._last_started, self.daemon_started)

    def summary(self) -> dict[str, ConfluenceSummary]:
        """``daemon.status``'s ``confluence`` entry (from memory: no I/O)."""
        config = self.config()
        last = (self._state or {}).get("last_run")
        nxt = self.next_run(config)
        return {
            "confluence": {
                "enabled": config.confluence.enabled,
                "schedule": config.confluence.schedule,
                "running": self.running,
                "next_run": rfc3339(nxt),
                "last_run": {
                    key: last.get(key)
                    for key in ("started_at", "trigger", "outcome", "skipped", "counts")
                }
                if isinstance(last, dict)
                else None,
            }
        }

    async def status(self) -> ConfluenceStatusReply:
        """``confluence.status``: settings, the last run and the last run that did work
        (with rejections and reasons), and the watermark of every workspace."""
        state = await self.load()
        return {
            **self.summary()["confluence"],
            "last_run": state.get("last_run"),
            "last_work": state.get("last_work"),
            "watermarks": {
                name: {"sections": mark.sections, "distilled": len(mark.digests)}
                for name, raw in sorted((state.get("watermarks") or {}).items())
                for mark in [cf.Watermark.from_dict(raw)]
            },
            "experience_path": EXPERIENCE_FILE,
            "state_path": f"{STATE_DIR}/{STATE_FILE}",
        }

    # ------------------------------------------------------------------ schedule

    async def run_daily(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The daily schedule: runs once a day while enabled with ``schedule = "daily"``."""
        await self.load()
        task_status.started()
        while True:
            config = self.config()
            wait = RECHECK_SECS
            due = self.next_run(config)
            if due is not None:
                now = self.clock()
                if now >= due:
                    await self._scheduled_run()
                    continue
                wait = min(wait, (due - now).total_seconds())
            await self.sleep(max(wait, 1.0))

    async def _scheduled_run(self) -> None:
        try:
            await self.run(trigger="schedule")
        except Busy:
            self._last_started = self.clock()  # a manual run is under way: it counts
        except MemorydError as exc:
            log.warning("confluence.schedule_failed", error=str(exc), code=exc.code)
        except Exception as exc:  # noqa: BLE001 - a scheduled run never takes the daemon down
            self._last_started = self.clock()
            log.error("confluence.schedule_crashed", error=describe_error(exc))


def _secs(start: datetime, end: datetime | None) -> float:
    return ((end or start) - start).total_seconds()
