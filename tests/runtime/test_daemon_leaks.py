"""Leak test (issue 3 item 11): 20 daemon starts and stops leave fds and threads as they were."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import anyio
import psutil

from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)

CYCLES = 20
WARM_UP = 2  # one life on each loop
SETTLE_SECS = 5.0
STEADY_SECS = 0.3


def run_once(ws: Path, n: int) -> None:
    """One daemon life in its own event loop: start, remember, search, stop.

    Lives alternate between asyncio's loop and uvloop (what `serve` runs on when installed).
    """
    uvloop = n % 2 == 1 and find_spec("uvloop") is not None

    async def life() -> None:
        async with in_process_daemon(loop="uvloop" if uvloop else "asyncio") as d:
            kept = await d.call("memory.remember", workspace=str(ws), text=f"note number life{n}")
            lines = (d.root / kept["path"]).read_text(encoding="utf-8").splitlines()
            line = lines.index(f"## note number life{n}") + 1  # a chunk may hold several notes
            # By its own word: words in every note ("note number") match nothing (issue 19).
            found = await d.search(ws, f"note number life{n}", max_results=50)
            assert any(
                r["path"] == kept["path"] and r["start_line"] <= line <= r["end_line"]
                for r in found["results"]
            ), (line, found)
            assert (await d.status())["loop"] == ("uvloop" if uvloop else "asyncio")

    anyio.run(life, backend_options={"use_uvloop": uvloop})


def counts(proc: psutil.Process) -> tuple[int, int]:
    return proc.num_fds(), proc.num_threads()


def settle(proc: psutil.Process, until: Callable[[tuple[int, int]], bool]) -> tuple[int, int]:
    """The counts once ``until`` holds for them, or as they are after a few seconds.

    Some resources outlive the event loop that used them by a few milliseconds, by design:
    anyio tells its idle worker threads to exit when ``anyio.run`` returns but does not
    join them, and watchfiles' Rust watcher (dropped when ``awatch`` closes) stops its
    own event-loop thread, which holds an epoll and an eventfd descriptor, the same way.
    """
    deadline = time.monotonic() + SETTLE_SECS
    now = counts(proc)
    while not until(now) and time.monotonic() < deadline:
        time.sleep(0.05)
        now = counts(proc)
    return now


def steady(proc: psutil.Process) -> tuple[int, int]:
    """The counts once they stay the same for :data:`STEADY_SECS` (see :func:`settle`)."""
    deadline = time.monotonic() + SETTLE_SECS
    before = counts(proc)
    while True:
        time.sleep(STEADY_SECS)
        now = counts(proc)
        if now == before or time.monotonic() > deadline:
            return now
        before = now


def test_starting_and_stopping_the_daemon_leaks_no_fds_or_threads(home: Path) -> None:
    ws = project(home, "app")
    proc = psutil.Process()
    for n in range(WARM_UP):  # imports, logging, process-wide objects of each loop
        run_once(ws, n)
    baseline = steady(proc)
    for n in range(WARM_UP, CYCLES):
        run_once(ws, n)
    # At most the baseline: a stray fd of an earlier test may be collected meanwhile.
    fds, threads = settle(proc, lambda now: now[0] <= baseline[0] and now[1] <= baseline[1])
    assert fds <= baseline[0] and threads <= baseline[1], ((fds, threads), baseline)
