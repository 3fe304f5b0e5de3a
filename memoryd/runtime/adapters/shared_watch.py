"""One file watcher for the whole memory root, shared by every workspace actor (issue #17).

A watch per actor cost two inotify instances per workspace: with the common per-user limit
of 128, the 65th workspace fell back to polling (edits invisible for minutes) and memoryd
starved editors of instances. :class:`SharedWatcher` runs a single recursive watch of the
memory root (one inotify instance, one watch per directory) while at least one actor is
subscribed, and routes each batch of changed memory files to the actors it concerns: a
file at the root (the global ``MEMORY.md``, ``experience.md``) to every actor, a file under
``<root>/<dir>/`` to the actor of ``<dir>``.

:meth:`SharedWatcher.watch` has the signature of
:func:`~memoryd.runtime.adapters.watcher.watch_memory`, so an actor takes either: it calls
``task_status.started()`` once the root watch runs (and has seen the actor's directory),
calls ``on_change`` with the actor's changed files, and raises
:class:`~memoryd.errors.WatcherUnavailable` when the root watch cannot start or dies (the
actor then polls, as before). The next actor to subscribe after a failure starts a new
attempt. The root watch runs in the supervisor's task group (:attr:`SharedWatcher.tg`) and
stops when its last subscriber leaves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import structlog

from memoryd.errors import WatcherUnavailable
from memoryd.runtime.adapters.watcher import ChangeCallback, WatchTarget, watch_memory

log = structlog.get_logger(__name__)

WatchFn = Callable[..., Awaitable[None]]


@dataclass(eq=False)
class _Subscriber:
    dirname: str
    on_change: ChangeCallback
    ticks: int = 0
    seen: anyio.Event = field(default_factory=anyio.Event)
    """Set at the first tick of the root watch after subscribing: its directory is watched."""


@dataclass(eq=False)
class _Run:
    """One attempt at watching the root."""

    stop: anyio.Event = field(default_factory=anyio.Event)
    ready: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    error: WatcherUnavailable | None = None


class _Status:
    """The task status handed to the root watch: its start sets ``run.ready``."""

    def __init__(self, run: _Run) -> None:
        self.run = run

    def started(self, value: None = None) -> None:
        self.run.ready.set()


class SharedWatcher:
    """Watches ``root`` once for every subscribed actor (see the module docstring)."""

    def __init__(self, root: Path, watch: WatchFn = watch_memory) -> None:
        self.root = root.absolute()
        self._watch = watch
        self.tg: anyio.abc.TaskGroup | None = None
        """Where the root watch runs: the supervisor's task group (set by it)."""
        self._subscribers: dict[str, set[_Subscriber]] = {}
        self._run: _Run | None = None
        self.starts = 0
        """How many root watches were started (one per attempt)."""

    @property
    def running(self) -> bool:
        """Whether a root watch is running now (one inotify instance)."""
        run = self._run
        return run is not None and run.ready.is_set() and not run.done.is_set()

    @property
    def subscribers(self) -> int:
        return sum(len(subs) for subs in self._subscribers.values())

    async def watch(
        self,
        targets: Sequence[WatchTarget | Path],
        on_change: ChangeCallback,
        *,
        debounce_ms: int,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
        **options: object,
    ) -> None:
        """Subscribe the actor whose directory is ``targets[0]`` until cancelled; see the
        module docstring. Targets outside the root (or no task group) get a watch of their
        own, as :func:`watch_memory` would."""
        first = targets[0]
        path = (first.path if isinstance(first, WatchTarget) else first).absolute()
        if self.tg is None or not path.is_relative_to(self.root) or path == self.root:
            await self._watch(
                targets, on_change, debounce_ms=debounce_ms, task_status=task_status, **options
            )
            return
        subscriber = _Subscriber(path.relative_to(self.root).parts[0], on_change)
        self._subscribers.setdefault(subscriber.dirname, set()).add(subscriber)
        try:
            run = self._ensure_running(debounce_ms)
            await _first(run.ready, run.done)
            if run.error is None and not run.done.is_set():
                await _first(subscriber.seen, run.done)
            if run.error is not None:
                raise run.error
            task_status.started()
            await run.done.wait()
            if run.error is not None:
                raise run.error
        finally:
            self._unsubscribe(subscriber)

    def _ensure_running(self, debounce_ms: int) -> _Run:
        run = self._run
        if run is not None and not run.done.is_set():
            return run
        assert self.tg is not None
        run = self._run = _Run()
        self.starts += 1
        self.tg.start_soon(self._root_watch, run, debounce_ms, name="watch memory root")
        return run

    def _unsubscribe(self, subscriber: _Subscriber) -> None:
        subs = self._subscribers.get(subscriber.dirname)
        if subs is not None:
            subs.discard(subscriber)
            if not subs:
                del self._subscribers[subscriber.dirname]
        if not self._subscribers and self._run is not None:
            self._run.stop.set()  # the last one left: give the inotify instance back

    async def _root_watch(self, run: _Run, debounce_ms: int) -> None:
        try:
            await self._watch(
                [WatchTarget(self.root, recursive=True)],
                self._route,
                debounce_ms=debounce_ms,
                stop_event=run.stop,
                task_status=_Status(run),
                on_tick=self._tick,
            )
        except WatcherUnavailable as exc:
            run.error = exc
            log.warning("watcher.root_unavailable", error=str(exc), fallback="polling")
        except Exception as exc:  # the actors poll instead; never the daemon down
            run.error = WatcherUnavailable(
                f"file watcher failed on {self.root}: {exc}", paths=[str(self.root)]
            )
            log.exception("watcher.root_failed")
        finally:
            run.done.set()
            run.ready.set()
            if self._run is run:
                self._run = None

    def _tick(self) -> None:
        """The root watch handed back a batch after the subscription: the watch thread
        (which adds a watch for each new directory as soon as it sees it created) has run
        since the actor's directories were made."""
        for subs in self._subscribers.values():
            for subscriber in subs:
                subscriber.ticks += 1
                subscriber.seen.set()

    def _route(self, paths: set[Path]) -> None:
        """Hand each changed memory file to the actors it concerns."""
        shared: set[Path] = set()
        own: dict[str, set[Path]] = {}
        for path in paths:
            parts = path.relative_to(self.root).parts
            if len(parts) == 1:
                shared.add(path)
            elif parts[0] in self._subscribers:
                own.setdefault(parts[0], set()).add(path)
        for dirname, subs in list(self._subscribers.items()):
            changed = shared | own.get(dirname, set())
            if changed:
                for subscriber in list(subs):
                    subscriber.on_change(changed)


async def _first(*events: anyio.Event) -> None:
    """Wait until any of ``events`` is set."""
    if any(event.is_set() for event in events):
        return
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)
