"""Watching memory directories for markdown changes (SPEC §4): a thin adapter over watchfiles.

An actor watches two things: its workspace directory, recursively (``MEMORY.md`` and
``sessions/*.md``), and the memory root, *non*-recursively (the global ``MEMORY.md`` and
``experience.md`` — but not the other workspaces below it). Each is a :class:`WatchTarget`;
:func:`workspace_targets` builds the pair. In the daemon the actors share one recursive
watch of the root instead (:mod:`memoryd.runtime.adapters.shared_watch`), which takes the
same pair and runs :func:`watch_memory` once for all of them.

:func:`watch_memory` runs one ``watchfiles.awatch`` per recursion mode, keeps only memory
files (:func:`is_memory_file`, a small pure filter) and hands every debounced batch of changed
absolute paths to a callback — added, modified and deleted alike, since the actor only needs
to know *which* paths are dirty (an editor's save-by-rename arrives as ``added`` under the
final name). Moving or deleting a whole directory may arrive as a single directory event,
which the filter drops; the actor's periodic reconcile scan covers that case.

When the OS refuses to watch (inotify limits ``ENOSPC``/``EMFILE``, a missing directory, any
``OSError``) or the watcher dies later, :func:`watch_memory` raises
:class:`~memoryd.errors.WatcherUnavailable` and the actor falls back to polling.

Readiness: ``awatch`` sets up its OS watches lazily, on first iteration, and gives no signal
when it has done so. It is therefore run with ``yield_on_timeout=True`` and a short
``rust_timeout`` (:data:`TICK_MS`): the first batch — an empty "nothing happened" tick or a
real one — proves the watches exist, and only then is ``task_status.started()`` called. A
caller that starts the watcher with ``await tg.start(watch_memory, …)`` and *then* scans the
disk misses no edit. The ticks also mean the watch thread hands its anyio worker-thread token
back every :data:`TICK_MS`, so many watchers share the default thread limiter instead of each
holding a token for good.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import anyio
import anyio.abc
import structlog
import watchfiles

from memoryd.errors import WatcherUnavailable, leaf_errors

log = structlog.get_logger(__name__)

#: How often (ms) the watch thread wakes to check for changes and the stop event. A single
#: write is reported about two steps after it lands (one to see it, one to see it settle).
DEFAULT_STEP_MS = 30
#: How long (ms) an idle watch waits before yielding an empty tick (see the module docstring).
TICK_MS = 100

#: What a watchfiles batch looks like: ``{(Change.added, "/abs/path"), …}``.
RawChanges = set[tuple[watchfiles.Change, str]]
#: ``watchfiles.awatch`` or a stand-in with the same keyword arguments (tests inject failures).
AwatchFactory = Callable[..., AsyncGenerator[RawChanges, None]]
#: Receives each non-empty batch of changed memory files (absolute paths).
ChangeCallback = Callable[[set[Path]], None]


@dataclass(frozen=True)
class WatchTarget:
    """A directory to watch; with ``recursive=False`` only files directly inside it count."""

    path: Path
    recursive: bool = True


def workspace_targets(workspace_dir: Path, memory_root: Path) -> tuple[WatchTarget, WatchTarget]:
    """The two targets of a workspace actor: its own directory and the root's global files."""
    return WatchTarget(workspace_dir, recursive=True), WatchTarget(memory_root, recursive=False)


def is_memory_file(relative: PurePath) -> bool:
    """Whether a path, relative to its watched directory, is a memory file worth syncing.

    Only ``*.md`` files count, so ``index.sqlite`` (and its ``-wal``/``-shm``), ``*.tmp`` files
    and lock files never do. Anything whose name or any parent directory starts with ``.``
    is ignored too: the temp files of atomic writes (``.memoryd-tmp-…``), ``.history/``,
    ``sessions/.live/`` and a ``.git/`` directory if the memory is kept in git. The check is
    made on the *relative* path, so a memory root that itself lives under a dot directory
    (``~/.grok/memory``) still works.
    """
    parts = relative.parts
    if not parts or not parts[-1].endswith(".md") or parts[-1].endswith(".tmp"):
        return False
    return not any(part.startswith(".") for part in parts)


@dataclass(frozen=True)
class _Root:
    """A watched directory as the caller spelled it, plus its resolved form.

    Some platforms report events under the resolved path (macOS: ``/private/var/…`` for
    ``/var/…``); such paths are mapped back to the caller's spelling.
    """

    path: Path
    real: Path
    recursive: bool

    def memory_file(self, raw: str) -> Path | None:
        """The caller-spelled path of a reported change, or None if it is not ours."""
        reported = Path(raw)
        for base in (self.path, self.real):
            if reported.is_relative_to(base):
                relative = reported.relative_to(base)
                if not self.recursive and len(relative.parts) != 1:
                    return None
                return self.path / relative if is_memory_file(relative) else None
        return None


def _memory_files(batch: RawChanges, roots: Sequence[_Root]) -> set[Path]:
    found: set[Path] = set()
    for _change, raw in batch:
        for root in roots:
            path = root.memory_file(raw)
            if path is not None:
                found.add(path)
                break
    return found


async def watch_memory(
    targets: Sequence[WatchTarget | Path],
    on_change: ChangeCallback,
    *,
    debounce_ms: int,
    step_ms: int = DEFAULT_STEP_MS,
    stop_event: anyio.Event | None = None,
    awatch: AwatchFactory = watchfiles.awatch,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    on_tick: Callable[[], None] | None = None,
) -> None:
    """Watch ``targets`` and call ``on_change`` with each batch of changed memory files.

    Args:
        targets: directories to watch; a bare :class:`~pathlib.Path` means a recursive
            :class:`WatchTarget`. Relative paths are made absolute against the current
            directory; reported paths use the same spelling as the targets.
        on_change: called (synchronously, in the event loop) with a non-empty set of
            absolute paths that were added, modified or deleted. It should only record them
            (e.g. add them to a dirty set); an exception it raises ends the watch.
        debounce_ms: the longest a burst of changes is held back before it is reported.
        step_ms: how often the watch thread checks for changes (see :data:`DEFAULT_STEP_MS`).
        stop_event: set it to end the watch; it returns within about ``step_ms``.
            Cancelling the calling task works as well.
        awatch: the watchfiles entry point, replaceable so tests can simulate an OS refusing
            to watch.
        task_status: ``started()`` is called once every target is really being watched.
        on_tick: called after every batch the watch thread hands back, empty ones included
            (at least every :data:`TICK_MS`): what was created before it is watched.

    Raises:
        WatcherUnavailable: the watch could not start or failed later; ``data`` carries the
            ``paths`` and the OS ``errno`` name when there is one.
    """
    if not targets:
        raise ValueError("watch_memory needs at least one target")
    roots = [_root(t if isinstance(t, WatchTarget) else WatchTarget(t)) for t in targets]
    groups = [[r for r in roots if r.recursive is mode] for mode in (True, False)]
    stop = anyio.Event()  # ours, so that awatch setting it on cancellation leaves the caller's
    try:
        async with anyio.create_task_group() as outer:
            if stop_event is not None:
                outer.start_soon(_relay, stop_event, stop)
            active = [group for group in groups if group]
            ready = _Countdown(len(active))
            async with anyio.create_task_group() as watchers:
                for group in active:  # started side by side: each waits for its first tick
                    watchers.start_soon(
                        _watch_group,
                        group,
                        on_change,
                        debounce_ms,
                        step_ms,
                        stop,
                        awatch,
                        ready,
                        on_tick,
                    )
                await ready.done.wait()
                log.debug("watcher.started", paths=[str(r.path) for r in roots])
                task_status.started()
            outer.cancel_scope.cancel()
    except BaseExceptionGroup as errors:  # one failure is raised as itself, not in a group
        leaves = leaf_errors(errors)
        if len(leaves) == 1:
            raise leaves[0] from leaves[0].__cause__
        raise


def _root(target: WatchTarget) -> _Root:
    path = target.path.absolute()
    return _Root(path=path, real=path.resolve(), recursive=target.recursive)


async def _relay(source: anyio.Event, target: anyio.Event) -> None:
    await source.wait()
    target.set()


class _Countdown:
    """Counts watch groups down to ready; ``done`` is set once every one is watching."""

    def __init__(self, count: int) -> None:
        self.pending = count
        self.done = anyio.Event()

    def tick(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.done.set()


async def _watch_group(
    roots: list[_Root],
    on_change: ChangeCallback,
    debounce_ms: int,
    step_ms: int,
    stop: anyio.Event,
    awatch: AwatchFactory,
    ready: _Countdown,
    on_tick: Callable[[], None] | None = None,
) -> None:
    """One ``awatch`` over directories sharing a recursion mode; ticks ``ready`` once."""
    options: dict[str, Any] = {
        "watch_filter": None,
        "debounce": debounce_ms,
        "step": step_ms,
        "stop_event": stop,
        "recursive": roots[0].recursive,
        "rust_timeout": TICK_MS,
        "yield_on_timeout": True,
    }
    started = False
    async with aclosing(awatch(*(str(r.path) for r in roots), **options)) as batches:
        while True:
            try:
                batch = await batches.__anext__()
            except StopAsyncIteration:
                break
            except (OSError, RuntimeError) as exc:
                raise _unavailable(exc, roots, started) from exc
            if not started:
                started = True
                ready.tick()
            changed = _memory_files(batch, roots)
            if changed:
                on_change(changed)
            if on_tick is not None:
                on_tick()
    if not started:  # stopped before the first tick: let the caller's tg.start() return
        ready.tick()


def _unavailable(exc: BaseException, roots: list[_Root], started: bool) -> WatcherUnavailable:
    errno_name = _errno_name(exc)
    verb = "failed" if started else "cannot start"
    reason = f"{errno_name}: {exc}" if errno_name else str(exc) or type(exc).__name__
    return WatcherUnavailable(
        f"file watcher {verb} on {', '.join(str(r.path) for r in roots)}: {reason}",
        paths=[str(r.path) for r in roots],
        errno=errno_name,
        started=started,
    )


def _errno_name(exc: BaseException) -> str | None:
    number = getattr(exc, "errno", None)
    return errno.errorcode.get(number) if isinstance(number, int) else None
