"""The actor of one workspace: memory, watcher, reconcile and embedding loops, sessions, dream.

An actor owns everything of one workspace. Requests are plain awaited method calls made
from the connection's task: reads (search, get, files, stats) may run concurrently, writes
(remember, reindex) are serialised by the actor's write lock. The actor's own background
tasks live in one task group — the watcher, the reconcile loop, the embedding loop, the
session manager (journals, idle flushes), the optional periodic dream check and dreams
triggered by a session's end. When one of them fails, the whole actor stops with that error
and the supervisor restarts it with backoff. A request that fails never stops the actor.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import structlog

from memoryd.core.config import Config
from memoryd.core.flushing import Message, Trigger
from memoryd.core.replies import (
    ActorStatus,
    CalibrateReply,
    DreamRunReply,
    DreamStatusError,
    DreamStatusReply,
    DreamUndoReply,
    FileEntry,
    FlushReply,
    GetReply,
    IngestReply,
    ReindexReply,
    RememberReply,
    SessionAppendReply,
    SessionCloseReply,
    SessionOpenReply,
    StatsReply,
    UsageReply,
    WorkspacePurge,
)
from memoryd.core.times import rfc3339
from memoryd.core.transcripts import Format
from memoryd.core.workspace import INDEX_FILE
from memoryd.errors import (
    ActorUnavailable,
    MemorydError,
    ReadOnly,
    WatcherUnavailable,
    leaf_errors,
)
from memoryd.providers.embeddings import EmbeddingProvider
from memoryd.providers.llm import ChatModel
from memoryd.runtime.adapters.watcher import watch_memory, workspace_targets
from memoryd.runtime.workspace import purge
from memoryd.runtime.workspace.calibrate import calibrate
from memoryd.runtime.workspace.coalesce import Coalescer
from memoryd.runtime.workspace.dreamer import Dreamer
from memoryd.runtime.workspace.ingest import Ingestor
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.runtime.workspace.search import SearchResponse
from memoryd.runtime.workspace.sessions import SessionManager
from memoryd.store.files import mkdtemp_private, read_text, sweep_temp_files
from memoryd.store.heap import release_free_memory
from memoryd.store.layout import Workspace, global_memory_file, writable_problem

log = structlog.get_logger(__name__)

WatcherMode = Literal["starting", "watching", "polling"]
MAX_EMBED_BACKOFF = 300.0
TEMP_FILE_AGE_SECS = 600.0  # temp files of atomic writes older than this were left by a kill


class WorkspaceActor:
    """Owns one workspace. ``await tg.start(actor.run)``; ``actor.stop()`` ends it."""

    def __init__(
        self,
        workspace: Workspace,
        root: Path,
        config: Config,
        provider: EmbeddingProvider | None,
        *,
        watch: Callable[..., Awaitable[None]] = watch_memory,
        chat_model: ChatModel | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.workspace = workspace
        self.root = root
        self.config = config
        self.memory = WorkspaceMemory(workspace, root, config, provider, clock=clock)
        self.sessions = SessionManager(
            self.memory, config, chat_model, clock=clock, on_write=self._on_write
        )
        self.ingestor = Ingestor(self.sessions, workspace, lambda: self.config.flush.max_tool_chars)
        self.sessions.on_closed = self.ingestor.closed  # idle closes too
        self.dreamer = Dreamer(
            workspace,
            config.dream,
            chat_model,
            clock=clock,
            reindex=self.memory.sync_paths,
            secrets=config.secrets,
        )
        self.next_dream_check: float | None = None
        self._config_changed: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.ingests: Coalescer[tuple[str, str, str]] = Coalescer()
        """Background reads of one transcript into one session: one runs, one waits."""
        self.clock = clock
        self._watch = watch
        self.watcher: WatcherMode = "starting"
        self.watcher_error: str | None = None
        self.read_only: str | None = None
        """Why this workspace's memory cannot be written (None: it can); see :meth:`run`."""
        self.started_at = clock()
        self.last_used = clock()
        self.last_search: dict[str, Any] | None = None
        self._write_lock = anyio.Lock()
        self._embed_wakeup = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._ready = False
        self.in_flight = 0
        self.log = log.bind(workspace=workspace.key.dirname)

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self.read_only = await anyio.to_thread.run_sync(writable_problem, self.workspace)
        private: Path | None = None
        if self.read_only is None:
            swept = await anyio.to_thread.run_sync(
                lambda: sweep_temp_files(
                    [self.root, self.workspace.dir, self.workspace.sessions_dir],
                    older_than=TEMP_FILE_AGE_SECS,
                    now=self.clock(),
                )
            )
            if swept:
                self.log.info("temp_files.removed", count=swept)
        else:
            # Serve search from an index rebuilt in a private temp directory; refuse writes.
            self.log.warning("workspace.read_only", reason=self.read_only)
            private = Path(await anyio.to_thread.run_sync(mkdtemp_private))
            self.memory.use_index_at(private / INDEX_FILE)
        try:
            await self.memory.open()
            async with anyio.create_task_group() as tg:
                self._tg, self._scope = tg, tg.cancel_scope
                self._config_changed = anyio.Event()
                await tg.start(self._watch_loop)
                if self.watcher == "starting":
                    self.watcher = "watching"
                tg.start_soon(self._reconcile_loop)
                tg.start_soon(self._big_sync_loop)
                tg.start_soon(self._embed_loop)
                if self.read_only is None:  # journals, flushes and dreams all write
                    await tg.start(self.sessions.run)
                    tg.start_soon(self._dream_check_loop)
                self._ready = True
                self.log.info("actor.started", watcher=self.watcher)
                task_status.started()
        finally:
            self._ready = False
            self._tg = None
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.memory.close()
                if private is not None:
                    await anyio.to_thread.run_sync(shutil.rmtree, private, True)
                # What the index, its threads and caches held, back to the OS (glibc): a
                # daemon that opened hundreds of workspaces does not keep their peak.
                await anyio.to_thread.run_sync(release_free_memory)
            self.log.info("actor.stopped")

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    @property
    def ready(self) -> bool:
        return self._ready

    def touch(self) -> None:
        self.last_used = self.clock()

    @property
    def busy(self) -> bool:
        """Requests in flight or sessions open: not to be stopped as idle."""
        return self.in_flight > 0 or bool(self.sessions.session_ids)

    def apply_config(self, config: Config, chat_model: ChatModel | None = None) -> None:
        self.config = config
        self.memory.set_config(config)
        self.sessions.set_config(config)
        self.sessions.set_model(chat_model)
        self.dreamer.set_config(config.dream)
        self.dreamer.secrets = config.secrets
        self.dreamer.model = chat_model
        if self._config_changed is not None:
            self._config_changed.set()

    # ------------------------------------------------------------------ background tasks

    def _on_write(self, _path: Path) -> None:
        self._embed_wakeup.set()

    def _on_change(self, paths: set[Path]) -> None:
        self.memory.mark_dirty(paths)
        self._embed_wakeup.set()

    async def _watch_loop(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = _Started(task_status)
        try:
            await self._watch(
                workspace_targets(self.workspace.dir, self.root),
                self._on_change,
                debounce_ms=self.config.index.watch_debounce_ms,
                task_status=started,
            )
        except (WatcherUnavailable, ExceptionGroup) as raised:
            exc = _watcher_failure(raised)
            if exc is None:
                raise
            self.watcher, self.watcher_error = "polling", str(exc)
            self.log.warning("watcher.unavailable", error=str(exc), fallback="polling")
            if not started.done:
                started.started()
            return
        # The watcher returned on its own: poll from now on.
        self.watcher = "polling"

    async def _big_sync_loop(self) -> None:
        """Sync the big files a search left behind (it does not wait for them)."""
        while True:
            await self.memory.big_pending.wait()
            self.memory.big_pending = anyio.Event()  # set again by files left meanwhile
            report = await self.memory.sync_big()
            if report.changed:
                self._embed_wakeup.set()

    async def _reconcile_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.index.reconcile_secs)
            changed = await self.memory.reconcile()
            if changed:
                self.log.info("reconcile", changed=changed, watcher=self.watcher)
                self._embed_wakeup.set()

    async def _embed_loop(self) -> None:
        """Give new chunks vectors in the background; back off while the provider fails.

        A provider whose dimension is not known yet (an OpenAI endpoint before its probe)
        is waited for; once known, its identity is recorded (a new model or dimension drops
        the old vectors, which are then rebuilt here, newest files first, resumably).
        """
        if self.memory.provider is None:
            return
        while not self.memory.provider_ready:  # noqa: ASYNC110 - readiness is the provider's state
            await anyio.sleep(1.0)
        await self.memory.refresh_identity()
        await self.memory.load_vectors()
        backoff = 1.0
        while True:
            # A fresh event before looking: a write landing while this batch is read or
            # embedded sets it, so it is never lost between "nothing pending" and the wait.
            wakeup = self._embed_wakeup = anyio.Event()
            try:
                await self.memory.sync()
                stored = await self.memory.embed_pending()
            except Exception as exc:  # noqa: BLE001 - provider failures must not stop the actor
                self.log.warning("embedding.failed", error=str(exc), retry_in=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, MAX_EMBED_BACKOFF)
                continue
            backoff = 1.0
            if stored == 0:
                await wakeup.wait()

    async def _dream_check_loop(self) -> None:
        """The optional periodic dream check (only while ``dream.check_interval_secs`` > 0)."""
        while True:
            changed = self._config_changed
            assert changed is not None
            interval = self.config.dream.check_interval_secs
            if interval <= 0:
                self.next_dream_check = None
                await changed.wait()
            else:
                self.next_dream_check = self.clock() + interval
                with anyio.move_on_after(interval):
                    await changed.wait()
                if not changed.is_set():
                    await self._dream("periodic")
                    continue
            self._config_changed = anyio.Event()

    async def _dream(
        self, trigger: str, *, subagent: bool = False, ending_session: str | None = None
    ) -> None:
        """One automatic dream attempt behind the gates; failures are logged, never raised
        (a dream that cannot run must not stop the actor)."""
        try:
            result = await self.dreamer.run(subagent=subagent, ending_session=ending_session)
        except Exception as exc:  # noqa: BLE001 - logged; the next trigger retries
            self.log.warning("dream.failed", trigger=trigger, error=str(exc))
            return
        self.log.info("dream", trigger=trigger, outcome=result.outcome, reason=result.reason)
        if result.outcome == "written":
            self._embed_wakeup.set()

    # ------------------------------------------------------------------ requests

    @contextmanager
    def _request(self, *, write: bool = False) -> Iterator[None]:
        """Account for one request: refused unless running (and a ``write`` unless the
        memory is writable, :class:`ReadOnly`); the actor is busy meanwhile."""
        if not self._ready:
            raise ActorUnavailable(f"workspace {self.workspace.key.dirname} is not running")
        if write and self.read_only is not None:
            raise ReadOnly(
                f"the memory of workspace {self.workspace.key.dirname} is read-only "
                f"({self.read_only}): search works, writes do not",
                reason=self.read_only,
                path=str(self.workspace.dir),
            )
        self.touch()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            self.touch()

    async def search(self, query: str, **kwargs: Any) -> SearchResponse:
        with self._request():
            response = await self.memory.search(query, **kwargs)
        self.last_search = {
            "at": rfc3339(self.clock()),
            "took_ms": response.took_ms,
            "mode": response.mode,
        }
        self._embed_wakeup.set()
        return response

    async def remember(self, text: str, scope: str, allow_secrets: bool = False) -> RememberReply:
        with self._request(write=True):
            async with self._write_lock:
                out = await self.memory.remember(text, scope, allow_secrets=allow_secrets)
        self._embed_wakeup.set()
        return out

    async def get(self, path: str, start: int, lines: int | None, start_char: int = 0) -> GetReply:
        with self._request():
            return await self.memory.get(path, start, lines, start_char)

    async def files(self) -> list[FileEntry]:
        with self._request():
            return await self.memory.files()

    async def stats(self) -> StatsReply:
        with self._request():
            return await self.memory.stats()

    async def calibrate(self) -> CalibrateReply:
        with self._request():
            return await calibrate(self.memory)

    async def reindex(self, embeddings: bool) -> ReindexReply:
        with self._request():
            async with self._write_lock:
                out = await self.memory.reindex(embeddings)
        self._embed_wakeup.set()
        return out

    # secrets (SPEC §18) ---------------------------------------------------------------

    async def secrets_purge(self) -> WorkspacePurge:
        with self._request(write=True):
            async with self._write_lock:
                out = await purge.purge_workspace(
                    self.memory, self.config.secrets.scrubber(), self.sessions
                )
        self._embed_wakeup.set()
        return out

    # sessions (SPEC §7) -------------------------------------------------------------

    async def session_open(self, session_id: str, subagent: bool) -> SessionOpenReply:
        with self._request(write=True):
            return await self.sessions.open(session_id, subagent)

    async def session_append(self, session_id: str, messages: list[Message]) -> SessionAppendReply:
        with self._request(write=True):
            return await self.sessions.append(session_id, messages)

    async def session_usage(self, session_id: str, **usage: Any) -> UsageReply:
        with self._request(write=True):
            out = await self.sessions.usage(session_id, **usage)
        self._embed_wakeup.set()
        return out

    async def session_flush(self, session_id: str) -> FlushReply:
        with self._request(write=True):
            out = await self.sessions.flush(session_id)
        self._embed_wakeup.set()
        return out

    async def session_close(self, session_id: str) -> SessionCloseReply:
        """Close a session (summary when due), then check the dream gates; an open gate
        starts a dream in the background — the reply does not wait for the model."""
        with self._request(write=True):
            subagent = self.sessions.is_subagent(session_id)
            closed = await self.sessions.close(session_id)  # its ingest marks kept (on_closed)
            try:
                gates = await anyio.to_thread.run_sync(
                    lambda: self.dreamer.gates(subagent=subagent, ending_session=session_id)
                )
            except (MemorydError, OSError) as exc:  # the session is closed: say so anyway
                self.log.warning("dream.gates_failed", error=str(exc))
                return {**closed, "dream": {"outcome": "error", "error": str(exc)}}
        out: SessionCloseReply = {**closed, "dream": gates.to_dict()}
        if gates.open and self._tg is not None:
            self._tg.start_soon(
                lambda: self._dream("session_end", subagent=subagent, ending_session=session_id)
            )
        self._embed_wakeup.set()
        return out

    # agent transcripts (SPEC §17) -----------------------------------------------------

    async def session_ingest(
        self,
        session_id: str,
        path: str | None,
        fmt: Format,
        *,
        after: str | None = None,
        background: bool = False,
    ) -> IngestReply:
        """Read what an agent's transcript gained into an open session, then flush
        (``after="flush"``, trigger ``pre_compaction``), close it (``after="close"``) or
        both (``after="flush_close"``, trigger ``manual``: ``memoryd ingest --flush``).
        With ``background`` the reply (``{accepted}``) does not wait: the work runs in the
        actor's task group and its failures are logged; plain reads of one transcript
        coalesce (:attr:`ingests`)."""
        with self._request(write=True):
            self.sessions.is_subagent(session_id)  # NotFound now, not in the background
            if background and self._tg is not None and path is not None and after is None:
                job = functools.partial(self._ingest_job, session_id, path, fmt, None)
                self.ingests.request((session_id, path, fmt), self._tg, job)
                return {"accepted": True}
            if background and self._tg is not None:
                self._tg.start_soon(self._ingest_job, session_id, path, fmt, after)
                return {"accepted": True}
        return await self._ingest_then(session_id, path, fmt, after)

    async def _ingest_then(
        self, session_id: str, path: str | None, fmt: Format, after: str | None
    ) -> IngestReply:
        out: IngestReply = {}
        with self._request():
            if path is not None:
                out = await self.ingestor.ingest(session_id, path, fmt)
            if after in ("flush", "flush_close"):
                trigger: Trigger = "pre_compaction" if after == "flush" else "manual"
                try:
                    out["flush"] = await self.sessions.flush(session_id, trigger)
                except MemorydError as exc:
                    out["flush"] = {"outcome": "error", "error": str(exc), "code": exc.code}
        if after in ("close", "flush_close"):
            out["close"] = await self.session_close(session_id)
        self._embed_wakeup.set()
        return out

    async def _ingest_job(
        self, session_id: str, path: str | None, fmt: Format, after: str | None
    ) -> None:
        try:
            await self._ingest_then(session_id, path, fmt, after)
        except (MemorydError, OSError) as exc:  # logged: the hook that asked is long gone
            self.log.warning(
                "session.ingest_failed", session_id=session_id, after=after, error=str(exc)
            )

    async def curated_memory(self, max_bytes: int) -> tuple[str, str]:
        """The workspace's and the global ``MEMORY.md`` texts (empty when missing), each at
        most its first ``max_bytes`` (cut at a line end: no file is read whole for this)."""
        paths = (self.workspace.memory_file, global_memory_file(self.root))
        texts = await anyio.to_thread.run_sync(
            lambda: [read_text(p, max_bytes) or "" for p in paths]
        )
        return texts[0], texts[1]

    # dream (SPEC §8) ----------------------------------------------------------------

    async def dream_run(self, force: bool) -> DreamRunReply:
        with self._request(write=True):
            result = await self.dreamer.run(manual=True, force=force)
        self._embed_wakeup.set()
        return result.to_dict()

    async def dream_undo(self, force: bool = False) -> DreamUndoReply:
        with self._request(write=True):
            out = await self.dreamer.undo(force=force)
            logs = [self.workspace.sessions_dir / n for n in out["logs_restored"]]
            await self.memory.sync_paths([self.workspace.memory_file, *logs])
        return out

    async def dream_status(self) -> DreamStatusReply:
        with self._request():
            state = await self.dreamer.status()
        return {**state, "next_check": self._next_check()}

    def _next_check(self) -> str:
        """When the periodic dream check runs next (ISO UTC), or ``off`` (the default)."""
        if self.next_dream_check is None:
            return "off"
        return rfc3339(self.next_dream_check)

    async def status(self) -> ActorStatus:
        scan = self.memory.scan  # a big sync holds the index: its stats wait until it ends
        stats: StatsReply | dict[str, Any] = {}
        if self._ready and scan is None:
            stats = await self.memory.stats()
        return {
            "scan": scan,
            "workspace": str(self.workspace.path),
            "memory_dir": self.workspace.key.dirname,
            "state": "running" if self._ready else "starting",
            "watcher": self.watcher,
            "watcher_error": self.watcher_error,
            "read_only": self.read_only,
            "dirty": self.memory.dirty_count,
            "last_used": rfc3339(self.last_used),
            "last_search": self.last_search,
            "index": stats,
            "sessions": self.sessions.status(),
            "dream": await self._dream_summary(),
        }

    async def _dream_summary(self) -> DreamStatusReply | DreamStatusError:
        try:
            state = await self.dreamer.status()
        except (MemorydError, OSError) as exc:
            return {"error": str(exc)}
        return {**state, "next_check": self._next_check()}


def _watcher_failure(exc: BaseException) -> WatcherUnavailable | None:
    """The watcher failure ``exc`` stands for, if it is one (or a group of nothing else).

    Both watches of an actor (its directory and the root) may fail at once, e.g. when the OS
    refuses every new watch; that arrives as a group of two WatcherUnavailable.
    """
    leaves = leaf_errors(exc)
    failures = [leaf for leaf in leaves if isinstance(leaf, WatcherUnavailable)]
    return failures[0] if len(failures) == len(leaves) else None


class _Started:
    """A task status that remembers whether ``started()`` was called."""

    def __init__(self, inner: anyio.abc.TaskStatus[None]) -> None:
        self.inner = inner
        self.done = False

    def started(self, value: None = None) -> None:
        self.done = True
        self.inner.started(value)
