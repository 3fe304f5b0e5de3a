"""Leak test (issue 3 item 11): 20 daemon starts and stops leave fds and threads as they were."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import psutil

from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)

CYCLES = 20
SETTLE_SECS = 5.0
STEADY_SECS = 0.3


def run_once(ws: Path, n: int) -> None:
    """One daemon life in its own event loop: start, remember, search, stop."""

    async def life() -> None:
        async with in_process_daemon() as d:
            await d.call("memory.remember", workspace=str(ws), text=f"note number {n}")
            found = await d.search(ws, "note number", max_results=50)
            assert len(found["results"]) >= 1

    anyio.run(life)


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
    run_once(ws, 0)  # warm-up: imports, logging, process-wide objects created once
    baseline = steady(proc)
    for n in range(1, CYCLES):
        run_once(ws, n)
    assert settle(proc, lambda now: now == baseline) == baseline
