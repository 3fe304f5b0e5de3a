"""The supervisor in a real daemon (issue 3 item 6): actors on demand, backoff, idle stop.

Faults are injected at the workspace's memory (``WorkspaceMemory.open`` / ``reconcile``
raising for one workspace only); everything else is real: socket, files, index, watcher.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from memoryd.errors import ActorUnavailable
from memoryd.runtime import supervisor
from memoryd.runtime.workspace.memory import WorkspaceMemory
from tests.runtime.daemon_fixtures import (
    RunningDaemon,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
    wait_until,
)

pytestmark = pytest.mark.anyio

FAST_BACKOFF = (0.05, 0.4)


class Fault:
    """Makes one WorkspaceMemory method raise for one workspace while ``on``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, method: str, workspace: Path) -> None:
        self.on = True
        self.calls = 0
        self.workspace = workspace
        original: Callable[..., Any] = getattr(WorkspaceMemory, method)

        async def faulty(memory: WorkspaceMemory, *args: Any, **kwargs: Any) -> Any:
            if memory.workspace.path == self.workspace and self.on:
                self.calls += 1
                raise RuntimeError(f"injected fault #{self.calls}")
            return await original(memory, *args, **kwargs)

        monkeypatch.setattr(WorkspaceMemory, method, faulty)


async def remember(d: RunningDaemon, ws: Path, text: str) -> None:
    await d.call("memory.remember", workspace=str(ws), text=text)


async def hits(d: RunningDaemon, ws: Path, query: str) -> list[str]:
    return [hit["snippet"] for hit in (await d.search(ws, query))["results"]]


async def test_actors_start_on_first_use(home: Path) -> None:
    a, b = project(home, "a"), project(home, "b")
    async with in_process_daemon() as d:
        assert (await d.status())["actors"] == []
        await d.search(a, "anything")
        [actor] = (await d.status())["actors"]
        assert actor["workspace"] == str(a) and actor["state"] == "running"
        await d.call("daemon.ping")
        assert len((await d.status())["actors"]) == 1  # pings start nothing
        await d.call("index.stats", workspace=str(b))
        states = {x["workspace"]: x["state"] for x in (await d.status())["actors"]}
        assert states == {str(a): "running", str(b): "running"}


async def test_configured_workspaces_start_with_the_daemon(home: Path) -> None:
    a = project(home, "a")
    missing = home / "projects" / "gone"
    config = f'[daemon]\nworkspaces = ["{a}", "{missing}"]\n'
    async with in_process_daemon(config=config) as d:

        async def running() -> bool:
            actor = await d.actor_status(a)
            return actor is not None and actor["state"] == "running"

        await wait_until(running)
        assert len((await d.status())["actors"]) == 1  # the missing one is only logged


async def test_a_failing_workspace_is_retried_with_backoff_while_another_answers(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad, good = project(home, "bad"), project(home, "good")
    fault = Fault(monkeypatch, "open", bad)
    async with in_process_daemon(backoff=FAST_BACKOFF) as d:
        await remember(d, good, "the good workspace keeps answering")
        with pytest.raises(ActorUnavailable) as caught:
            await d.search(bad, "anything")
        assert "injected fault" in str(caught.value)
        assert caught.value.data["failures"] >= 1

        # While the bad actor is restarted again and again, the good one answers every time.
        async def failures() -> int:
            actor = await d.actor_status(bad)
            assert actor is not None and actor["state"] in ("failed", "starting")
            assert "injected fault" in actor["last_error"]
            assert await hits(d, good, "answering") != []
            return int(actor["failures"]) if actor["failures"] >= 3 else 0

        assert await wait_until(failures) >= 3
        with pytest.raises(ActorUnavailable):
            await d.search(bad, "anything")
        assert fault.calls >= 3

        fault.on = False

        async def recovered() -> bool:
            try:
                await d.search(bad, "anything")
            except ActorUnavailable:
                return False
            return True

        await wait_until(recovered)
        actor = await d.actor_status(bad)
        assert actor is not None
        assert actor["state"] == "running" and actor["failures"] == 0 and actor["restarts"] >= 3
        await remember(d, bad, "the bad workspace is back")
        assert await hits(d, bad, "back") != []
        assert await hits(d, good, "answering") != []


async def test_an_actor_that_crashes_while_running_is_restarted(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, other = project(home, "crashy"), project(home, "other")
    config = "[index]\nreconcile_secs = 0.1\n"
    async with in_process_daemon(config=config, backoff=FAST_BACKOFF) as d:
        await remember(d, ws, "a note that survives the crash")
        await remember(d, other, "a neighbour that never notices")
        fault = Fault(monkeypatch, "reconcile", ws)  # the reconcile loop's next scan crashes
        await wait_until(lambda: fault.calls >= 1)
        fault.on = False

        async def restarted() -> bool:
            actor = await d.actor_status(ws)
            return actor is not None and actor["restarts"] >= 1 and actor["state"] == "running"

        await wait_until(restarted)
        assert await hits(d, ws, "survives") != []
        neighbour = await d.actor_status(other)
        assert neighbour is not None and neighbour["restarts"] == 0
        assert await hits(d, other, "neighbour") != []


async def test_idle_actors_stop_and_come_back_with_their_data(home: Path) -> None:
    a = project(home, "a")
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 0.3\n") as d:
        await remember(d, a, "remembered before the actor went idle")

        async def stopped() -> bool:
            actor = await d.actor_status(a)
            return actor is None  # a stopped workspace leaves status (issue #17)

        await wait_until(stopped)
        assert await hits(d, a, "idle") != []  # started again, with its index
        actor = await d.actor_status(a)
        assert actor is not None and actor["state"] == "running" and actor["failures"] == 0
        await wait_until(stopped)  # and it goes idle again
        await remember(d, a, "a write also brings it back")
        found = "\n".join(await hits(d, a, "remembered OR write"))  # one chunk or two
        assert "remembered before" in found and "a write also" in found


async def test_an_actor_with_a_request_in_flight_is_not_stopped_as_idle(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = project(home, "a")
    gate = anyio.Event()
    entered = anyio.Event()
    original = WorkspaceMemory.search

    async def slow_search(memory: WorkspaceMemory, query: str, **kwargs: Any) -> Any:
        if query == "slow":
            entered.set()
            await gate.wait()
        return await original(memory, query, **kwargs)

    monkeypatch.setattr(WorkspaceMemory, "search", slow_search)
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 0.2\n") as d:
        await remember(d, a, "slow searches still finish")
        result: dict[str, Any] = {}

        async def search() -> None:
            result.update(await d.search(a, "slow"))

        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(search)
                await entered.wait()
                await anyio.sleep(1.0)  # five idle periods with the request in flight
                actor = await d.actor_status(a)
                assert actor is not None and actor["state"] == "running"
                gate.set()
        assert not [e for e in logs if e["event"] == "actor.idle_stop"]
        assert result["results"] != []


async def test_a_request_arriving_while_an_idle_actor_stops_waits_for_the_restart(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = project(home, "a")
    closing = anyio.Event()
    gate = anyio.Event()
    original = WorkspaceMemory.close

    async def slow_close(memory: WorkspaceMemory) -> None:
        closing.set()
        await gate.wait()
        await original(memory)

    monkeypatch.setattr(WorkspaceMemory, "close", slow_close)
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 0.2\n") as d:
        await remember(d, a, "asked for while the actor was stopping")
        with anyio.fail_after(5):
            await closing.wait()
        actor = await d.actor_status(a)
        assert actor is not None and actor["state"] == "stopping"
        found: list[str] = []

        async def search() -> None:
            found.extend(await hits(d, a, "stopping"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(search)
            await anyio.sleep(0.1)  # the search is waiting for the stop to finish
            gate.set()
        assert found != []
        actor = await d.actor_status(a)
        assert actor is not None and actor["state"] in ("running", "stopping")


async def test_a_running_actor_is_found_without_resolving_its_workspace_again(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = project(home, "a")
    resolved: list[str] = []
    original = supervisor.resolve_workspace

    def counting(path: str, root: Path) -> Any:
        resolved.append(path)
        return original(path, root)

    monkeypatch.setattr(supervisor, "resolve_workspace", counting)
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 0.3\n") as d:
        await remember(d, a, "resolved once per actor life")
        for _ in range(5):
            assert await hits(d, a, "resolved") != []
        assert resolved == [str(a)]

        async def stopped() -> bool:
            actor = await d.actor_status(a)
            return actor is None  # a stopped workspace leaves status (issue #17)

        await wait_until(stopped)
        assert await hits(d, a, "resolved") != []
        assert resolved == [str(a), str(a)]  # a new life resolves it again (git origin …)


async def test_status_answers_when_one_actor_cannot_report(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = project(home, "a"), project(home, "b")
    async with in_process_daemon() as d:
        await remember(d, a, "a fine workspace")
        await remember(d, b, "a workspace whose index cannot be read")
        Fault(monkeypatch, "stats", b)
        actors = {x["workspace"]: x for x in (await d.status())["actors"]}
        assert actors[str(a)]["index"]["files"] >= 1
        assert "injected fault" in actors[str(b)]["status_error"]
        assert await hits(d, b, "index") != []  # searching it still works


async def test_stopped_workspaces_leave_status_and_the_supervisor(home: Path) -> None:
    """Issue #17: `daemon.status` kept every workspace ever opened, and so did the
    supervisor's slots; 300 idle-stopped workspaces grew RSS 46 → 108 MB."""
    projects = [project(home, f"w{i}") for i in range(12)]
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 0.2\n") as d:
        for ws in projects:
            await remember(d, ws, f"note of {ws.name}")

        async def all_gone() -> bool:
            return (await d.status())["actors"] == []

        await wait_until(all_gone, within=20)
        supervisor_ = d.daemon.supervisor
        assert supervisor_.slots == {} and supervisor_._known == {}
        assert await hits(d, projects[3], "note") != []  # and each comes back on demand
        assert [a["workspace"] for a in (await d.status())["actors"]] == [str(projects[3])]
