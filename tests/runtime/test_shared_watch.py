"""One inotify instance for every workspace (issue #17 item 5).

On main before #17 each workspace took 2 inotify instances: with the common per-user limit
of 128, the 65th workspace fell back to polling every 5 minutes (its edits invisible) and
memoryd starved editors of instances.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
    wait_until,
)
from tests.runtime.test_daemon_watcher import append_in_another_process, memory_file, paths_found

pytestmark = pytest.mark.anyio


def inotify_instances() -> int:
    """This process's open inotify instances."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                count += 1
        except OSError:
            continue
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
async def test_two_dozen_workspaces_share_one_inotify_instance_and_see_edits_within_a_second(
    home: Path,
) -> None:
    before = inotify_instances()
    workspaces = [project(home, f"w{i:02d}") for i in range(24)]
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 600\n") as d:
        files = [await memory_file(d, ws) for ws in workspaces]
        assert inotify_instances() - before == 1
        status = await d.status()
        assert {a["watcher"] for a in status["actors"]} == {"watching"}
        for i in (0, 17, 23):
            started = time.monotonic()
            await anyio.to_thread.run_sync(
                append_in_another_process, files[i], f"\n## The theorbo{i} was edited\n"
            )

            async def found(i: int = i) -> bool:
                return await paths_found(d, workspaces[i], f"theorbo{i}") != []

            await wait_until(found, within=5, every=0.05)
            assert time.monotonic() - started < 1.0
        # A global file edit reaches every workspace.
        (d.root / "MEMORY.md").write_text("# Global\n\n## The serpent is global\n")
        await anyio.sleep(0.3)
        for ws in (workspaces[0], workspaces[23]):
            assert await paths_found(d, ws, "serpent") == ["MEMORY.md"]


async def test_the_root_watch_is_given_back_when_the_last_actor_stops(home: Path) -> None:
    before = inotify_instances()
    a, b = project(home, "a"), project(home, "b")
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 0.3\n") as d:
        await memory_file(d, a)
        await memory_file(d, b)
        watcher = d.daemon.supervisor.watcher
        assert watcher.running and watcher.subscribers == 2 and watcher.starts == 1

        async def released() -> bool:
            return not watcher.running and watcher.subscribers == 0

        await wait_until(released, within=10)
        assert inotify_instances() == before
        await memory_file(d, a)  # and it watches again on demand
        assert watcher.running and watcher.starts == 2


async def test_a_burst_of_new_files_is_fully_visible_to_the_next_search(home: Path) -> None:
    """Issue #17 item 10: on main the first search after 20,000 files appeared at once
    missed the newest ones (the watcher had not reported them yet)."""
    ws = project(home, "burst")
    async with in_process_daemon() as d:
        memory = await memory_file(d, ws)
        sessions = memory.parent / "sessions"

        def burst() -> None:
            for i in range(1500):
                (sessions / f"2025-07-01-burst-{i:08x}.md").write_text(
                    f"# Session\n\nthe cornett{i} log\n"
                )

        await anyio.to_thread.run_sync(burst)
        found = await d.search(ws, "cornett1499")  # at once: before the watcher reports it
        assert [hit["path"].rsplit("/", 1)[-1] for hit in found["results"]] == [
            "2025-07-01-burst-000005db.md"
        ]
        assert (await d.call("index.stats", workspace=str(ws)))["files"] == 1501
        for i in range(0, 1500, 300):  # and deletions the same way
            (sessions / f"2025-07-01-burst-{i:08x}.md").unlink()
        assert (await d.search(ws, "cornett300"))["results"] == []
