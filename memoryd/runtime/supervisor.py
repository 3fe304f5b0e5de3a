"""The supervisor: one actor per workspace, started on demand, restarted with backoff.

- An actor starts the first time a request names its workspace (or at daemon start for the
  workspaces listed in ``daemon.workspaces``).
- A crashed actor (or one that fails to start) is restarted with exponential backoff; while
  it is down, requests for that workspace get ``actor_unavailable`` with the last error.
  Other workspaces are untouched.
- Actors idle for ``daemon.actor_idle_secs`` (and with no request in flight) are stopped; the
  next request starts them again — one arriving while the actor stops waits for the restart.
  A stopped workspace leaves :attr:`Supervisor.slots` (and ``status``): nothing kept grows
  with the number of workspaces ever opened.
- :meth:`Supervisor.run` owns every actor task in one task group; cancelling it stops them all.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

from memoryd.core.config import Config
from memoryd.core.replies import (
    IdleWorkspace,
    RunningWorkspace,
    SessionOpenReply,
    SlotCounters,
    UnreportedWorkspace,
    WorkspaceEntry,
)
from memoryd.errors import (
    ActorUnavailable,
    EmbeddingError,
    MemorydError,
    NotFound,
    SessionConflict,
    describe_error,
)
from memoryd.providers.embeddings import EmbeddingProvider
from memoryd.providers.factory import start_provider
from memoryd.providers.llm import ChatModel, make_chat_model
from memoryd.runtime.adapters.shared_watch import SharedWatcher
from memoryd.runtime.adapters.watcher import watch_memory
from memoryd.runtime.workspace.actor import WorkspaceActor
from memoryd.store.journal import open_elsewhere, open_sessions
from memoryd.store.layout import Workspace, resolve_workspace
from memoryd.store.registry import record_workspace

log = structlog.get_logger(__name__)

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
PROVIDER_RETRY_MAX = 300.0
MAX_KNOWN_SPELLINGS = 1024
ActorFactory = Callable[[Workspace, Path, Config], WorkspaceActor]
WatchFn = Callable[..., Awaitable[None]]


@dataclass(slots=True)
class Slot:
    """Supervision state of one workspace.

    ``finished`` exists while a supervising task runs for the slot and is set when it ends;
    ``ready`` is set each time a start attempt ends, well or badly.
    """

    workspace: Workspace
    actor: WorkspaceActor | None = None
    ready: anyio.Event | None = None
    finished: anyio.Event | None = None
    failures: int = 0  # consecutive failed starts or crashes; 0 once a start succeeds
    restarts: int = 0  # crashes since the daemon started
    backoff_level: int = 0  # grows with each crash; reset by a run that lasted
    last_error: str | None = None
    retry_at: float = 0.0
    stopping: bool = False


class RequestOrder:
    """Arrival order of the requests of each workspace (SPEC §1: writes in order).

    A request takes its place synchronously, when it is dispatched and before it awaits
    anything, so requests pipelined on a connection keep the order they were sent in, however
    long each one then waits (resolving the workspace, starting the actor). Writes run one at
    a time in that order; a read waits for the writes that came before it (it sees them) but
    not for other reads. Keyed by the workspace as the client spelled it.
    """

    def __init__(self) -> None:
        self._last_write: dict[str, anyio.Event] = {}

    @asynccontextmanager
    async def write(self, key: str) -> AsyncIterator[None]:
        previous = self._last_write.get(key)
        mine = self._last_write[key] = anyio.Event()
        try:
            if previous is not None:
                await previous.wait()
            yield
        finally:
            mine.set()
            if self._last_write.get(key) is mine:
                del self._last_write[key]

    @asynccontextmanager
    async def read(self, key: str) -> AsyncIterator[None]:
        previous = self._last_write.get(key)
        if previous is not None:
            await previous.wait()
        yield


class Supervisor:
    def __init__(
        self,
        config: Config,
        root: Path,
        provider_factory: Callable[[Config], EmbeddingProvider | None],
        *,
        actor_factory: ActorFactory | None = None,
        watch: WatchFn = watch_memory,
        backoff_start: float = BACKOFF_START,
        backoff_max: float = BACKOFF_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.root = root
        self.provider_factory = provider_factory
        self._provider: EmbeddingProvider | None = None
        self._provider_made = False
        self.provider_error: str | None = None
        self.chat_model: ChatModel | None = None
        # session id → the workspace path its client named (session.* after open carry none)
        self.session_routes: dict[str, str] = {}
        self._session_open_lock = anyio.Lock()  # session ids are global: one open at a time
        self.actor_factory = actor_factory or self._default_actor
        # One watch of the memory root for every actor (bounded inotify instances, #17).
        self.watcher = SharedWatcher(root, watch)
        self.watch: WatchFn = self.watcher.watch
        self.backoff_start = backoff_start
        self.backoff_max = backoff_max
        self.clock = clock
        self.slots: dict[str, Slot] = {}
        self.order = RequestOrder()
        # Workspace paths as clients spell them → slot key, while the slot's actor runs: a
        # workspace's identity (canonical path, git origin) is fixed for an actor's life.
        self._known: dict[str, str] = {}
        self._registered: set[str] = set()  # recorded in workspaces.json in this daemon life
        self._tg: anyio.abc.TaskGroup | None = None

    def _make_provider(self) -> None:
        if not self._provider_made:
            self._provider = self.provider_factory(self.config)
            self.chat_model = make_chat_model(self.config)
            self._provider_made = True

    def _default_actor(self, ws: Workspace, root: Path, config: Config) -> WorkspaceActor:
        self._make_provider()
        return WorkspaceActor(
            ws, root, config, self._provider, watch=self.watch, chat_model=self.chat_model
        )

    @property
    def provider(self) -> EmbeddingProvider | None:
        return self._provider

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._make_provider()  # a provider config that cannot work stops the daemon at start
        try:
            async with anyio.create_task_group() as tg:
                self._tg = self.watcher.tg = tg
                tg.start_soon(self._reap_idle)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            closing = getattr(self._provider, "aclose", None)
            if closing is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await closing()

    async def start_provider(self) -> None:
        """Load the local model / probe an endpoint's dimension in the background, retrying
        with backoff; actors run FTS-only until it is ready."""
        delay = 1.0
        while self._provider is not None:
            try:
                await start_provider(self._provider)
            except (EmbeddingError, OSError) as exc:
                self.provider_error = str(exc)
                log.warning("embedding.start_failed", error=str(exc), retry_in=delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, PROVIDER_RETRY_MAX)
                continue
            self.provider_error = None
            log.info("embedding.ready", model=self._provider.model_id)
            return

    async def start_workspaces(self) -> None:
        """Start the actors of ``daemon.workspaces`` and of workspaces with open sessions
        (their journals are recovered and their idle flushes run)."""
        paths = list(self.config.daemon.workspaces)
        for header in await anyio.to_thread.run_sync(open_sessions, self.root):
            self.session_routes.setdefault(header.session_id, header.workspace)
            if header.workspace not in paths:
                paths.append(header.workspace)
        for path in paths:
            try:
                await self.actor_for(path)
            except MemorydError as exc:
                log.warning("supervisor.workspace_failed", workspace=path, error=str(exc))

    async def open_session(
        self, actor: WorkspaceActor, workspace_path: str, session_id: str, subagent: bool
    ) -> SessionOpenReply:
        """Open (or resume) ``session_id`` in ``actor``'s workspace; the session.open reply.

        Session ids are global (SPEC §7): an id whose journal is open in another workspace
        raises :class:`SessionConflict` naming that workspace — never a silent second
        session, whose messages a restart could journal into the wrong workspace.
        """
        async with self._session_open_lock:
            if not actor.sessions.has(session_id):
                own = actor.workspace.dir
                others = await anyio.to_thread.run_sync(open_elsewhere, self.root, session_id, own)
                if others:
                    ws_dir, header = others[0]
                    raise SessionConflict(
                        f"session {session_id!r} is open in workspace {header.workspace} "
                        f"({ws_dir.name}); close it there first or use another session id",
                        session_id=session_id,
                        workspace=header.workspace,
                        memory_dir=ws_dir.name,
                    )
            out = await actor.session_open(session_id, subagent)
            self.session_routes[session_id] = workspace_path
        return out

    async def actor_for_session(self, session_id: str) -> WorkspaceActor:
        """The actor holding an open session (session.* methods after open name none)."""
        route = self.session_routes.get(session_id)
        if route is not None:
            actor = await self.actor_for(route)
            if actor.sessions.has(session_id):
                return actor
            self.session_routes.pop(session_id, None)  # closed there (idle close, say)
        for slot in self.slots.values():
            running = slot.actor
            if running is not None and running.ready and running.sessions.has(session_id):
                return running
        raise NotFound(f"no open session {session_id!r}", session_id=session_id)

    def reload(self, config: Config) -> None:
        """Apply a reloaded config to every running actor (search settings take effect now)."""
        self.config = config
        try:
            self.chat_model = make_chat_model(config)
        except MemorydError as exc:
            log.error("config.reload_failed", key="llm", error=str(exc))
        for slot in self.slots.values():
            if slot.actor is not None:
                slot.actor.apply_config(config, self.chat_model)

    # ------------------------------------------------------------------ actors

    async def actor_for(self, workspace_path: str) -> WorkspaceActor:
        """The running actor of a workspace, starting it if needed.

        Raises :class:`ActorUnavailable` while the workspace's actor fails to start (and is
        being restarted with backoff); ``WorkspaceNotFound`` for a path that is no directory.
        """
        known = self._known.get(workspace_path)
        slot = self.slots.get(known) if known is not None else None
        if slot is not None and slot.actor is not None and slot.actor.ready and not slot.stopping:
            slot.actor.touch()  # the fast path: no resolving while the actor runs
            return slot.actor
        ws = await anyio.to_thread.run_sync(resolve_workspace, workspace_path, self.root)
        key = ws.key.dirname
        if key not in self._registered:  # the confluence's registry (SPEC §10), once per life
            if len(self._registered) >= MAX_KNOWN_SPELLINGS:
                self._registered.clear()  # bounded: at worst a workspace is recorded again
            self._registered.add(key)
            if not await anyio.to_thread.run_sync(record_workspace, self.root, ws):
                self._registered.discard(key)
        if len(self._known) >= MAX_KNOWN_SPELLINGS:
            self._known.clear()
        self._known[workspace_path] = key
        while True:
            slot = self.slots.get(key)
            if slot is None:  # never started, or stopped and forgotten
                slot = self.slots[key] = Slot(workspace=ws)
            if slot.stopping and slot.finished is not None:
                await slot.finished.wait()  # an idle stop is under way: wait, then start anew
                continue
            actor = slot.actor
            if actor is not None and actor.ready:
                actor.touch()  # so the idle reaper leaves it alone until the request runs
                return actor
            if slot.failures and self.clock() < slot.retry_at:
                raise self._unavailable(slot)
            if slot.finished is None:
                self._start(slot)
            assert slot.ready is not None
            await slot.ready.wait()
            actor = slot.actor
            if actor is not None and actor.ready:
                actor.touch()
                return actor
            if not slot.stopping:
                raise self._unavailable(slot)

    def _unavailable(self, slot: Slot) -> ActorUnavailable:
        wait = max(0.0, slot.retry_at - self.clock())
        return ActorUnavailable(
            f"workspace {slot.workspace.key.dirname} is failing ({slot.last_error}); "
            f"restarting in {wait:.1f}s",
            workspace=str(slot.workspace.path),
            failures=slot.failures,
            last_error=slot.last_error,
        )

    def _start(self, slot: Slot) -> None:
        if self._tg is None:
            raise ActorUnavailable("the supervisor is not running")
        slot.ready = anyio.Event()
        slot.finished = anyio.Event()
        slot.stopping = False
        self._tg.start_soon(self._supervise, slot, name=f"actor {slot.workspace.key.dirname}")

    async def _supervise(self, slot: Slot) -> None:
        """Run one actor; on failure, back off and restart it until it is stopped."""
        try:
            while True:
                started_at = self.clock()
                try:
                    actor = self.actor_factory(slot.workspace, self.root, self.config)
                    slot.actor = actor
                    async with anyio.create_task_group() as tg:
                        await tg.start(actor.run)
                        slot.failures, slot.last_error = 0, None
                        self._signal_ready(slot)
                except Exception as exc:  # noqa: BLE001 - one failing actor never takes the daemon down
                    delay = self._crashed(slot, exc, ran_for=self.clock() - started_at)
                    self._signal_ready(slot)  # waiters get actor_unavailable now
                    slot.ready = anyio.Event()
                    await anyio.sleep(delay)
                    if slot.stopping:
                        break
                    continue
                # The actor returned: it was stopped on purpose (idle or shutdown).
                break
        finally:
            slot.actor = None
            key = slot.workspace.key.dirname  # resolve again at the next start
            for spelling in [raw for raw, known in self._known.items() if known == key]:
                del self._known[spelling]
            finished, slot.finished = slot.finished, None
            slot.stopping = False
            self._signal_ready(slot)
            slot.ready = None
            if not slot.failures and self.slots.get(key) is slot:
                # Stopped on purpose (idle, shutdown): nothing of it stays behind, so memory
                # and `status` do not grow with every workspace ever opened. A failed slot
                # stays, with its error and backoff, until it runs again.
                del self.slots[key]
            if finished is not None:
                finished.set()

    def _crashed(self, slot: Slot, exc: Exception, *, ran_for: float) -> float:
        """Record a failed start or a crash; returns how long to wait before the next try."""
        slot.actor = None
        if ran_for >= self.backoff_max:
            slot.backoff_level = 0  # it ran well for a while: back off from the start again
        slot.failures += 1
        slot.restarts += 1
        slot.backoff_level += 1
        slot.last_error = describe_error(exc)
        delay = min(self.backoff_start * 2.0 ** (slot.backoff_level - 1), self.backoff_max)
        slot.retry_at = self.clock() + delay
        log.error(
            "actor.crashed",
            workspace=slot.workspace.key.dirname,
            error=slot.last_error,
            failures=slot.failures,
            retry_in=delay,
        )
        return delay

    @staticmethod
    def _signal_ready(slot: Slot) -> None:
        if slot.ready is not None:
            slot.ready.set()

    async def _reap_idle(self) -> None:
        while True:
            idle = self.config.daemon.actor_idle_secs
            await anyio.sleep(min(max(idle / 4, 0.05), 30.0))
            now = time.time()
            for slot in list(self.slots.values()):
                actor = slot.actor
                if (
                    actor is not None
                    and actor.ready
                    and not slot.stopping
                    and not actor.busy
                    and now - actor.last_used >= idle
                ):
                    log.info("actor.idle_stop", workspace=slot.workspace.key.dirname)
                    slot.stopping = True
                    actor.stop()

    # ------------------------------------------------------------------ reporting

    async def status(self) -> list[WorkspaceEntry]:
        out: list[WorkspaceEntry] = []
        for key, slot in sorted(self.slots.items()):
            counters: SlotCounters = {
                "failures": slot.failures,
                "restarts": slot.restarts,
                "retry_in": (
                    round(max(0.0, slot.retry_at - self.clock()), 3) if slot.failures else None
                ),
                "last_error": slot.last_error,
            }
            path = str(slot.workspace.path)
            actor = slot.actor
            if actor is not None and actor.ready and not slot.stopping:
                try:
                    running: RunningWorkspace = {**await actor.status(), **counters}
                    out.append(running)
                except Exception as exc:  # noqa: BLE001 - status must show every workspace
                    unreported: UnreportedWorkspace = {
                        "workspace": path,
                        "memory_dir": key,
                        "state": "running",
                        "status_error": describe_error(exc),
                        **counters,
                    }
                    out.append(unreported)
                continue
            if slot.stopping:
                state = "stopping"
            elif actor is not None:
                state = "starting"
            elif slot.failures:
                state = "failed"
            else:
                state = "stopped"
            idle: IdleWorkspace = {"workspace": path, "memory_dir": key, "state": state, **counters}
            out.append(idle)
        return out
