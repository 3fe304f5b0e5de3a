"""Start to stop: the daemon's life, top to bottom.

1. configure logging from the loaded config; install the signal receiver (SIGTERM, SIGINT,
   SIGHUP), so a signal that comes as soon as a client can connect is handled, not fatal;
2. start the supervisor (actors start on first use);
3. start the socket server; once it listens (the socket is ours, no other daemon runs), start
   the actors of ``daemon.workspaces`` and tell systemd ``READY=1``;
4. serve until SIGTERM/SIGINT (or the ``stop`` event in tests). SIGHUP reloads the config:
   search, index, idle and log settings apply at once (the next search uses them); the
   socket, memory root, request size limit and embedding provider need a restart: a
   reload that changes them says so in the log (``config.restart_needed``) and
   ``daemon.status`` lists them in ``restart_pending`` until the daemon restarts;
5. stop gracefully: stop accepting, let in-flight requests finish within a deadline, stop
   the actors (each closes its index), remove the socket file. A second SIGINT skips the
   grace period.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable, Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import anyio
import structlog

from memoryd.core import gitignore
from memoryd.core.config import Config
from memoryd.core.paths import runtime_dir_problem
from memoryd.errors import ConfigError, StorageError, only_error
from memoryd.providers.factory import advice as embedding_advice
from memoryd.providers.factory import make_provider
from memoryd.runtime.adapters import notify
from memoryd.runtime.adapters.logging import configure_logging, reopen_log
from memoryd.runtime.adapters.server import SocketServer
from memoryd.runtime.adapters.watcher import watch_memory
from memoryd.runtime.rpc.context import DaemonContext, running_loop
from memoryd.runtime.rpc.registry import build_methods
from memoryd.runtime.supervisor import (
    BACKOFF_MAX,
    BACKOFF_START,
    ActorFactory,
    Supervisor,
    WatchFn,
)
from memoryd.runtime.workspace.confluence import Confluence
from memoryd.store import configfile
from memoryd.store.files import atomic_write_text, make_private_dirs, read_text

log = structlog.get_logger(__name__)

GRACE_SECS = 5.0
CACHE_DIR = ".cache"  # under the memory root: the embedding cache outlives every index
GITIGNORE = ".gitignore"


def loop_name() -> str:
    """The event loop `serve` uses: uvloop when it is installed (not on Windows)."""
    return "uvloop" if sys.platform != "win32" and find_spec("uvloop") is not None else "asyncio"


class Daemon:
    """One run of the daemon; :meth:`run` owns every task it starts."""

    def __init__(
        self,
        loaded: configfile.Loaded,
        *,
        config_path: str | None = None,
        flags: Mapping[str, Any] | None = None,
        loop: str = "asyncio",
        grace_secs: float = GRACE_SECS,
        watch: WatchFn = watch_memory,
        actor_factory: ActorFactory | None = None,
        backoff: tuple[float, float] = (BACKOFF_START, BACKOFF_MAX),
        log_file: Path | None = None,
    ) -> None:
        """``watch``, ``actor_factory`` and ``backoff`` are seams for tests (see Supervisor)."""
        self.loaded = loaded
        self.log_file = log_file  # the detached daemon's log: reopened on SIGHUP
        self.started_with = loaded  # what the settings a reload cannot apply came from
        self.restart_pending: list[str] = []
        self.config: Config = loaded.config
        self.config_path = config_path
        self.flags = dict(flags or {})
        self.socket_path = Path(loaded.paths.socket_path)
        self.root = Path(loaded.paths.memory_root)
        self.supervisor = Supervisor(
            self.config,
            self.root,
            functools.partial(make_provider, cache_dir=self.root / CACHE_DIR),
            actor_factory=actor_factory,
            watch=watch,
            backoff_start=backoff[0],
            backoff_max=backoff[1],
        )
        self.confluence = Confluence(
            self.root, lambda: self.config, lambda: self.supervisor.chat_model
        )
        self.context = DaemonContext(
            supervisor=self.supervisor,
            socket_path=str(self.socket_path),
            loop=loop,
            config=lambda: self.config,
            config_dir=lambda: (
                Path(self.loaded.config_file).parent if self.loaded.file_found else None
            ),
            confluence=self.confluence,
            config_file=str(loaded.config_file) if loaded.file_found else None,
        )
        self.context.extra_status.append(
            lambda: {
                "restart_pending": list(self.restart_pending),
                "service": "systemd" if os.environ.get("INVOCATION_ID") else None,
                "embedding_advice": embedding_advice(self.supervisor.provider),
            }
        )
        self.context.extra_status.append(self.confluence.summary)
        self.methods = build_methods(self.context)
        self.server = SocketServer(
            self.socket_path,
            self.methods,
            max_request_bytes=self.config.daemon.max_request_bytes,
            request_timeout=self.config.daemon.request_timeout_secs,
            max_connections=self.config.daemon.max_connections,
            stop_timeout=grace_secs,
        )
        self._stopping = False
        self._scope: anyio.CancelScope | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(
        self,
        *,
        stop: anyio.Event | None = None,
        handle_signals: bool = True,
        on_ready: Callable[[], None] | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        configure_logging(self.config.daemon.log_level, self.config.daemon.log_format)
        await anyio.to_thread.run_sync(self._prepare_root)
        async with anyio.create_task_group() as tg:
            self._tg, self._scope = tg, tg.cancel_scope
            if handle_signals:  # before listening: a client may signal us as soon as it can connect
                await tg.start(self._signals)
            if stop is not None:
                tg.start_soon(self._stop_on, stop)
            await tg.start(self.supervisor.run)
            served = anyio.Event()
            self._listening = anyio.Event()
            tg.start_soon(self._serve, served)
            with anyio.fail_after(30):
                await self._listening.wait()
            # Only now that the socket is ours: another daemon must not open our indexes.
            tg.start_soon(self.supervisor.start_workspaces)
            tg.start_soon(self.supervisor.start_provider)
            tg.start_soon(self.confluence.run_daily)  # idle unless confluence.schedule = "daily"
            notify.ready()
            log.info(
                "daemon.started",
                socket=str(self.socket_path),
                root=str(self.root),
                loop=running_loop(),
                provider=self.supervisor.provider.model_id if self.supervisor.provider else None,
            )
            task_status.started()
            if on_ready is not None:
                on_ready()
            await served.wait()
            tg.cancel_scope.cancel()
        log.info("daemon.stopped")

    def _prepare_root(self) -> None:
        paths = self.loaded.paths
        problem = runtime_dir_problem(paths, os.path.isdir(paths.xdg_runtime_dir or "/"))
        if problem is not None:
            raise ConfigError(problem, key="XDG_RUNTIME_DIR")
        try:
            make_private_dirs(self.root)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the memory root {self.root}: {exc.strerror or exc}",
                key="memory.root",
            ) from exc
        self._merge_gitignore()

    def _merge_gitignore(self) -> None:
        """Give the memory root a ``.gitignore`` for derived files (never dropping a line)."""
        path = self.root / GITIGNORE
        try:
            text = gitignore.merged(read_text(path))
            if text is not None:
                atomic_write_text(path, text)
                log.info("memory.gitignore_updated", path=str(path))
        except StorageError as exc:
            log.warning("memory.gitignore_failed", path=str(path), error=str(exc))

    async def _serve(self, served: anyio.Event) -> None:
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.server.serve)
                self._listening.set()
        finally:
            served.set()

    async def _stop_on(self, event: anyio.Event) -> None:
        await event.wait()
        self.stop()

    def stop(self) -> None:
        """Begin a graceful stop (idempotent)."""
        if not self._stopping:
            self._stopping = True
            notify.stopping()
            log.info("daemon.stopping")
        self.server.stop()

    def force_stop(self) -> None:
        log.warning("daemon.forced_stop")
        if self._scope is not None:
            self._scope.cancel()

    async def _signals(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    await self.reload()
                elif signum == signal.SIGINT and self._stopping:
                    self.force_stop()
                else:
                    self.stop()

    async def reload(self) -> None:
        """Reload the configuration file and environment (SIGHUP); reopen the log file."""
        if self.log_file is not None:
            try:
                reopen_log(self.log_file)
            except OSError as exc:
                log.error("log.reopen_failed", path=str(self.log_file), error=str(exc))
        try:
            loaded = await anyio.to_thread.run_sync(
                lambda: configfile.load(self.config_path, self.flags)
            )
        except ConfigError as exc:
            log.error("config.reload_failed", error=str(exc), key=exc.key)
            return
        restart = needs_restart(self.started_with, loaded)
        self.restart_pending = restart
        self.loaded, self.config = loaded, loaded.config
        configure_logging(self.config.daemon.log_level, self.config.daemon.log_format)
        self.supervisor.reload(self.config)
        if self._tg is not None:  # workspaces newly listed in daemon.workspaces start now
            self._tg.start_soon(self.supervisor.start_workspaces)
        log.info("config.reloaded", file=str(loaded.config_file) if loaded.file_found else None)
        if restart:
            log.warning("config.restart_needed", keys=restart)


def needs_restart(old: configfile.Loaded, new: configfile.Loaded) -> list[str]:
    """The changed settings a reload cannot apply to the running daemon."""
    changed = [
        name
        for name, before, after in (
            ("daemon.socket", old.paths.socket_path, new.paths.socket_path),
            ("memory.root", old.paths.memory_root, new.paths.memory_root),
            (
                "daemon.max_request_bytes",
                old.config.daemon.max_request_bytes,
                new.config.daemon.max_request_bytes,
            ),
            ("embedding", old.config.embedding, new.config.embedding),
            (
                "index.watch_debounce_ms",
                old.config.index.watch_debounce_ms,
                new.config.index.watch_debounce_ms,
            ),
        )
        if before != after
    ]
    return changed


def serve(
    config_path: str | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    on_ready: Callable[[], None] | None = None,
    log_file: Path | None = None,
) -> None:
    """Load the config and run the daemon until it is stopped (the `memoryd serve` command).
    ``log_file``: where the detached daemon's stdout and stderr go (reopened on SIGHUP).

    Raises :class:`MemorydError` (already running, bad config …) for the CLI to report.
    """
    loaded = configfile.load(config_path, flags)
    loop = loop_name()
    daemon = Daemon(loaded, config_path=config_path, flags=flags, loop=loop, log_file=log_file)
    backend_options = {"use_uvloop": True} if loop == "uvloop" else {}
    try:
        anyio.run(
            functools.partial(daemon.run, on_ready=on_ready),
            backend="asyncio",
            backend_options=backend_options,
        )
    except BaseExceptionGroup as group:
        error = only_error(group)
        if error is not None:
            raise error from None
        raise
