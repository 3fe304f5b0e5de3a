"""The watcher with the real watchfiles backend on temp dirs, plus its pure filter."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import pytest
import watchfiles
from hypothesis import given
from hypothesis import strategies as st

from memoryd.errors import WatcherUnavailable
from memoryd.runtime.adapters.watcher import (
    RawChanges,
    WatchTarget,
    is_memory_file,
    watch_memory,
    workspace_targets,
)

pytestmark = pytest.mark.anyio

BOUND = 10  # seconds: generous upper bound so a broken watcher fails instead of hanging


class Collector:
    """An ``on_change`` callback that remembers every path and lets a test wait for one."""

    def __init__(self) -> None:
        self.seen: set[Path] = set()
        self._changed = anyio.Event()

    def __call__(self, paths: set[Path]) -> None:
        assert paths, "on_change must never be called with an empty set"
        self.seen |= paths
        event, self._changed = self._changed, anyio.Event()
        event.set()

    async def wait_for(self, *paths: Path) -> None:
        with anyio.fail_after(BOUND):
            while True:
                event = self._changed
                if set(paths) <= self.seen:
                    return
                await event.wait()


@asynccontextmanager
async def watching(
    targets: Sequence[WatchTarget | Path], collector: Collector
) -> AsyncIterator[None]:
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOUND):
            await tg.start(
                partial(watch_memory, targets, collector, debounce_ms=50, stop_event=stop)
            )
        yield
        stop.set()


def write(path: Path, text: str = "# note\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "memory"
    (root / "ws-a" / "sessions").mkdir(parents=True)
    return root


async def test_a_written_file_is_reported(root: Path) -> None:
    got = Collector()
    async with watching([root / "ws-a"], got):
        target = write(root / "ws-a" / "MEMORY.md")
        await got.wait_for(target)
    assert target.is_absolute()


async def test_an_editor_rename_save_is_reported_under_the_final_name(root: Path) -> None:
    final = write(root / "ws-a" / "MEMORY.md", "old\n")
    got = Collector()
    async with watching([root / "ws-a"], got):
        temp = write(root / "ws-a" / ".MEMORY.md.swp.tmp", "new\n")
        os.replace(temp, final)
        await got.wait_for(final)
    assert got.seen == {final}


async def test_a_deletion_is_reported(root: Path) -> None:
    doomed = write(root / "ws-a" / "sessions" / "2025-01-02-fix-abcdef12.md")
    got = Collector()
    async with watching([root / "ws-a"], got):
        doomed.unlink()
        await got.wait_for(doomed)


async def test_index_temp_history_and_live_files_are_ignored(root: Path) -> None:
    ws = root / "ws-a"
    (ws / ".history").mkdir()
    (ws / "sessions" / ".live").mkdir()
    got = Collector()
    async with watching([ws], got):
        write(ws / "index.sqlite", "db")
        write(ws / "index.sqlite-wal", "wal")
        write(ws / "MEMORY.md.tmp")
        write(ws / ".memoryd-tmp-MEMORY.md.1a2b3c4d")
        write(ws / ".history" / "MEMORY.2025-01-01T00-00-00.md")
        write(ws / "sessions" / ".live" / "abcdef12.md")
        # Written last: once it is reported, everything before it has been seen too.
        sentinel = write(ws / "sessions" / "2025-01-02-sentinel-abcdef12.md")
        await got.wait_for(sentinel)
    assert got.seen == {sentinel}


async def test_the_root_watch_sees_global_files_but_not_other_workspaces(root: Path) -> None:
    (root / "ws-b").mkdir()
    got = Collector()
    async with watching(workspace_targets(root / "ws-a", root), got):
        global_memory = write(root / "MEMORY.md")
        own = write(root / "ws-a" / "MEMORY.md")
        write(root / "ws-b" / "MEMORY.md")
        sentinel = write(root / "experience.md")
        await got.wait_for(global_memory, own, sentinel)
    assert got.seen == {global_memory, own, sentinel}


async def test_changes_are_reported_with_the_callers_spelling_of_the_path(
    root: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link-to-memory"
    link.symlink_to(root, target_is_directory=True)
    got = Collector()
    async with watching([link / "ws-a"], got):
        write(root / "ws-a" / "MEMORY.md")
        await got.wait_for(link / "ws-a" / "MEMORY.md")


async def test_a_missing_directory_raises_watcher_unavailable(tmp_path: Path) -> None:
    with anyio.fail_after(BOUND), pytest.raises(WatcherUnavailable) as caught:
        await watch_memory([tmp_path / "absent"], Collector(), debounce_ms=50)
    assert caught.value.code == "watcher_unavailable"
    assert caught.value.data["paths"] == [str(tmp_path / "absent")]


def refusing_awatch(*paths: str, **options: Any) -> AsyncGenerator[RawChanges, None]:
    """Like ``watchfiles.awatch`` when inotify has run out of watches."""

    async def gen() -> AsyncGenerator[RawChanges, None]:
        raise OSError(errno.ENOSPC, "OS file watch limit reached")
        yield set()  # pragma: no cover - makes this an async generator

    return gen()


async def test_an_os_refusal_raises_watcher_unavailable_from_tg_start(root: Path) -> None:
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            with pytest.raises(WatcherUnavailable) as caught:
                await tg.start(
                    partial(
                        watch_memory,
                        [root / "ws-a"],
                        Collector(),
                        debounce_ms=50,
                        awatch=refusing_awatch,
                    )
                )
    assert caught.value.data["errno"] == "ENOSPC"
    assert caught.value.data["started"] is False
    assert isinstance(caught.value.__cause__, OSError)
    assert "ENOSPC" in str(caught.value)


async def test_a_watcher_dying_later_raises_watcher_unavailable(root: Path) -> None:
    def dying_awatch(*paths: str, **options: Any) -> AsyncGenerator[RawChanges, None]:
        async def gen() -> AsyncGenerator[RawChanges, None]:
            yield set()  # the first tick: watching has started
            yield {(watchfiles.Change.modified, paths[0] + "/MEMORY.md")}
            raise RuntimeError("error in underlying watcher")

        return gen()

    got = Collector()
    with anyio.fail_after(BOUND), pytest.raises(WatcherUnavailable) as caught:
        await watch_memory([root / "ws-a"], got, debounce_ms=50, awatch=dying_awatch)
    assert caught.value.data["started"] is True
    assert got.seen == {root / "ws-a" / "MEMORY.md"}


class ScriptedAwatch:
    """A stand-in for ``awatch`` that yields given batches (like a platform's raw events)."""

    def __init__(self, *batches: RawChanges) -> None:
        self.batches = batches
        self.calls: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def __call__(self, *paths: str, **options: Any) -> AsyncGenerator[RawChanges, None]:
        self.calls.append((paths, options))

        async def gen() -> AsyncGenerator[RawChanges, None]:
            yield set()
            for batch in self.batches:
                yield batch

        return gen()


async def test_a_flat_target_drops_nested_paths_whatever_the_backend_reports(root: Path) -> None:
    added = watchfiles.Change.added
    fake = ScriptedAwatch({(added, str(root / "ws-b" / "MEMORY.md")), (added, str(root / "x.md"))})
    got = Collector()
    with anyio.fail_after(BOUND):
        await watch_memory([WatchTarget(root, recursive=False)], got, debounce_ms=50, awatch=fake)
    assert got.seen == {root / "x.md"}
    assert [paths for paths, _ in fake.calls] == [(str(root),)]
    assert fake.calls[0][1]["recursive"] is False
    assert fake.calls[0][1]["debounce"] == 50


async def test_paths_reported_under_the_resolved_root_are_mapped_back(
    root: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link-to-memory"
    link.symlink_to(root, target_is_directory=True)
    fake = ScriptedAwatch({(watchfiles.Change.modified, str(root / "ws-a" / "MEMORY.md"))})
    got = Collector()
    with anyio.fail_after(BOUND):
        await watch_memory([link / "ws-a"], got, debounce_ms=50, awatch=fake)
    assert got.seen == {link / "ws-a" / "MEMORY.md"}


async def test_the_stop_event_ends_the_watch(root: Path) -> None:
    stop = anyio.Event()
    finished = anyio.Event()

    async def run(task_status: anyio.abc.TaskStatus[None]) -> None:
        await watch_memory(
            workspace_targets(root / "ws-a", root),
            Collector(),
            debounce_ms=50,
            stop_event=stop,
            task_status=task_status,
        )
        finished.set()

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            await tg.start(run)
            stop.set()
    assert finished.is_set()


async def test_cancelling_the_watch_leaves_the_callers_stop_event_alone(root: Path) -> None:
    stop = anyio.Event()
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            await tg.start(
                partial(watch_memory, [root / "ws-a"], Collector(), debounce_ms=50, stop_event=stop)
            )
            tg.cancel_scope.cancel()
    assert not stop.is_set()


async def test_an_already_set_stop_event_returns_without_failing_tg_start(root: Path) -> None:
    stop = anyio.Event()
    stop.set()
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            await tg.start(
                partial(watch_memory, [root / "ws-a"], Collector(), debounce_ms=50, stop_event=stop)
            )


def inotify_fds() -> int:
    fd_dir = Path("/proc/self/fd")
    count = 0
    for entry in fd_dir.iterdir():
        try:
            count += os.readlink(entry) == "anon_inode:inotify"
        except OSError:  # the fd of the listing itself, closed by now
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
async def test_stopping_or_cancelling_releases_the_os_watches(root: Path) -> None:
    baseline = inotify_fds()
    for cancel in (False, True):
        stop = anyio.Event()
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                await tg.start(
                    partial(
                        watch_memory,
                        workspace_targets(root / "ws-a", root),
                        Collector(),
                        debounce_ms=50,
                        stop_event=stop,
                    )
                )
                assert inotify_fds() == baseline + 2  # one per recursion mode
                if cancel:
                    tg.cancel_scope.cancel()
                else:
                    stop.set()
        await released_to(baseline)


async def released_to(baseline: int) -> None:
    """Wait (bounded) until the inotify fds are back to ``baseline``.

    notify closes an inotify fd on its own event-loop thread shortly after the watcher is
    dropped, so the count settles a moment after the watch ends — but it must settle.
    """
    with anyio.fail_after(BOUND):
        while inotify_fds() != baseline:  # noqa: ASYNC110 - nothing signals an fd closing
            await anyio.sleep(0.01)


# --- the pure filter -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("MEMORY.md", True),
        ("experience.md", True),
        ("sessions/2025-01-02-fix-login-abcdef12.md", True),
        ("index.sqlite", False),
        ("index.sqlite-wal", False),
        ("index.sqlite-shm", False),
        ("MEMORY.md.tmp", False),
        (".memoryd-tmp-MEMORY.md.1a2b3c4d", False),
        (".MEMORY.md", False),
        (".history/MEMORY.2025-01-01.md", False),
        ("sessions/.live/abcdef12.md", False),
        (".git/description.md", False),
        (".dream-lock", False),
        ("sessions", False),
        ("notes.txt", False),
        ("", False),
    ],
)
def test_is_memory_file(relative: str, expected: bool) -> None:
    assert is_memory_file(PurePosixPath(relative)) is expected


_name = st.text(alphabet="abcdefghij-_0123456789", min_size=1, max_size=12)


@given(st.lists(_name, max_size=3), _name)
def test_plain_markdown_paths_are_memory_files(dirs: list[str], stem: str) -> None:
    assert is_memory_file(PurePosixPath(*dirs, f"{stem}.md"))


@given(st.lists(_name, max_size=3), _name, st.integers(min_value=0, max_value=3))
def test_anything_under_a_dot_name_is_ignored(dirs: list[str], stem: str, at: int) -> None:
    parts = [*dirs, f"{stem}.md"]
    at = min(at, len(parts) - 1)
    parts[at] = "." + parts[at]
    assert not is_memory_file(PurePosixPath(*parts))
