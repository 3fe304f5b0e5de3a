"""Dream on a real daemon (issue 6 items 2, 3, 7, 8, 9), with a real fake model over HTTP.

The daemons run in this process (:func:`in_process_daemon`) or as child processes
(:class:`DaemonProcess`) that the crash tests SIGKILL — while the model call is held by the
fake server, and at the failpoints ``dream.before_write`` and ``dream.cleanup``
(:mod:`memoryd.runtime.failpoints`). The fake model answers with :func:`echo_dream`, which
never merges: a session log consumed twice would show up as a duplicated section.
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.errors import MemorydError, NotFound
from memoryd.runtime.failpoints import DIR_ENV, ENV, SECS_ENV
from memoryd.store.history import read_journal
from memoryd.store.layout import Workspace, resolve_workspace
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
    rpc,
    wait_until,
)
from tests.support.fake_llm import FakeLLM, Reply, echo_dream

Processes = Callable[..., DaemonProcess]
OPEN_GATES = "[dream]\nmin_hours = 0\nmin_sessions = 1\n"
ORIGINAL = "# Project memory\n\n## Build\n\nThe build runs `make all` inside the dev container.\n"
HEADING = re.compile(r"^## (.+)$", re.MULTILINE)


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(respond=echo_dream) as server:
        yield server


# --------------------------------------------------------------------------- helpers


def workspace_of(home: Path, name: str = "app") -> tuple[Path, Workspace]:
    path = project(home, name)
    return path, resolve_workspace(path, home / "memory")


def write_log(ws: Workspace, n: int, *, fact: str | None = None, age: float = 3600.0) -> Path:
    """A session log with one fact section, modified ``age`` seconds ago (older than the
    five minutes a dream leaves logs alone)."""
    ws.sessions_dir.mkdir(parents=True, exist_ok=True)
    path = ws.sessions_dir / f"2025-01-{n % 28 + 1:02d}-topic-{n:08d}.md"
    text = fact or f"Fact {n}"
    path.write_text(f"## {text}\n\nWhat session {n} found: {text.lower()}.\n", encoding="utf-8")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def headings(text: str) -> list[str]:
    return HEADING.findall(text)


def assert_no_duplicates(text: str) -> None:
    counts = Counter(headings(text))
    assert not [h for h, n in counts.items() if n > 1], f"duplicated sections:\n{text}"


def read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def assert_nothing_lost(ws: Workspace, logs: dict[Path, str]) -> None:
    """Every session log is still there, or its fact is in MEMORY.md (consolidated)."""
    memory = read(ws.memory_file) or ""
    for path, fact in logs.items():
        assert path.exists() or f"## {fact}" in memory, f"{path.name} deleted, {fact!r} lost"


def wait_for_file(path: Path, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {within}s"
        time.sleep(0.02)


def send_only(sock_path: Path, method: str, params: dict[str, Any]) -> socket.socket:
    """Send one request and leave its reply unread (the caller closes the socket)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(sock_path))
    sock.sendall(rpc(1, method, params))
    return sock


def dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(proc.stdout)


# --------------------------------------------------------------------------- triggers


@pytest.mark.anyio
async def test_dream_run_consolidates_logs_into_a_searchable_memory(
    home: Path, llm: FakeLLM
) -> None:
    path, ws = workspace_of(home)
    async with in_process_daemon(config=llm.config_toml()) as d:
        await d.call("memory.files", workspace=str(path))  # the actor makes the directories
        ws.memory_file.write_text(ORIGINAL, encoding="utf-8")
        logs = {
            write_log(ws, n, fact=f"Fact {n} about sqlite-vec"): f"Fact {n} about sqlite-vec"
            for n in (1, 2)
        }
        fresh = write_log(ws, 3, fact="Fresh fact", age=0)

        result = await d.call("dream.run", workspace=str(path))

        assert result["outcome"] == "written", result
        assert sorted(result["consumed"]) == sorted(p.name for p in [*logs, fresh])
        assert sorted(result["archived"]) == sorted(p.name for p in logs)
        archive = ws.history_dir / "sessions" / result["dream_id"]
        assert sorted(p.name for p in archive.iterdir()) == sorted(p.name for p in logs)
        assert result["kept"] == [fresh.name]  # modified within the last five minutes
        memory = read(ws.memory_file) or ""
        assert headings(memory) == ["Build", *logs.values(), "Fresh fact"]
        assert "<!-- dream" in memory and fresh.name in memory
        assert fresh.exists() and not any(p.exists() for p in logs)
        [entry] = read_journal(ws.history_dir)
        assert entry["outcome"] == "written" and entry["backup"]
        assert (ws.history_dir / entry["backup"]).read_text(encoding="utf-8") == ORIGINAL

        found = await d.search(path, "Fact 2 about sqlite-vec")
        paths = {(r["path"], r["source"]) for r in found["results"]}
        assert (f"{ws.key.dirname}/MEMORY.md", "workspace") in paths
        # the archived log is in .history/, never returned by search
        assert not any("topic-00000002" in p for p, _ in paths)
        assert not any(".history" in p for p, _ in paths)
        listed = {f["path"] for f in (await d.call("memory.files", workspace=str(path)))["files"]}
        assert not any(".history" in p for p in listed)


@pytest.mark.anyio
async def test_session_close_reports_the_gates_and_an_open_gate_dreams_in_the_background(
    home: Path, llm: FakeLLM
) -> None:
    lonely, lonely_ws = workspace_of(home, "lonely")
    busy, ws = workspace_of(home, "busy")
    talk = [
        {"role": "user", "content": f"question number {i} about the build cache"} for i in range(3)
    ]
    async with in_process_daemon(config=llm.config_toml() + OPEN_GATES) as d:
        # No other session log: the ending session does not count → too few sessions.
        await d.call("session.open", workspace=str(lonely), session_id="alone-1")
        await d.call("session.append", session_id="alone-1", messages=talk)
        closed = await d.call("session.close", session_id="alone-1")
        assert closed["summary_written"] is True
        assert closed["dream"] == {"outcome": "too_few_sessions", "count": 0, "min": 1}

        # A sub-agent session never triggers a dream.
        await d.call("memory.files", workspace=str(busy))
        write_log(ws, 1)
        await d.call("session.open", workspace=str(busy), session_id="sub-1", subagent=True)
        closed = await d.call("session.close", session_id="sub-1")
        assert closed["dream"] == {"outcome": "subagent"} and llm.requests == 0

        # One other log, gates open: the reply comes at once, the dream runs in the background.
        await d.call("session.open", workspace=str(busy), session_id="main-1")
        await d.call("session.append", session_id="main-1", messages=talk)
        with llm.holding():
            closed = await d.call("session.close", session_id="main-1")
            assert closed["dream"] == {"outcome": "open"}
            await anyio.to_thread.run_sync(llm.wait_held)
            assert read(ws.memory_file) is None  # still thinking
        await wait_until(lambda: "## Fact 1" in (read(ws.memory_file) or ""))
        [prompt] = llm.prompts
        assert prompt.kind == "dream" and "Fact 1" in prompt.user
        assert "question number 0" in prompt.user  # the ending session's summary is input
        assert not list(lonely_ws.history_dir.glob("*.jsonl"))  # no dream there


@pytest.mark.anyio
async def test_without_a_check_interval_the_actor_never_dreams_on_its_own(
    home: Path, llm: FakeLLM
) -> None:
    path, ws = workspace_of(home)
    async with in_process_daemon(config=llm.config_toml() + OPEN_GATES) as d:
        await d.call("memory.files", workspace=str(path))
        write_log(ws, 1)
        status = await d.call("dream.status", workspace=str(path))
        assert status["gates"]["outcome"] == "open" and status["next_check"] == "off"
        await anyio.sleep(1.5)  # five periods of the interval the next test uses
        assert llm.requests == 0
        assert read_journal(ws.history_dir) == []


@pytest.mark.anyio
async def test_with_a_check_interval_the_actor_checks_on_that_period(
    home: Path, llm: FakeLLM
) -> None:
    path, ws = workspace_of(home)
    interval = 0.3
    llm.respond = lambda prompt: Reply(400, {"error": {"message": "no"}})  # fails: gate stays open
    config = llm.config_toml() + OPEN_GATES + f"check_interval_secs = {interval}\n"
    async with in_process_daemon(config=config) as d:
        await d.call("memory.files", workspace=str(path))
        write_log(ws, 1)
        status = await d.call("dream.status", workspace=str(path))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status["next_check"])
        prompts = await anyio.to_thread.run_sync(llm.wait_for_requests, 3)
        gaps = [b.at - a.at for a, b in itertools.pairwise(prompts)]
        assert all(gap >= interval * 0.9 for gap in gaps), gaps  # one check per period
        assert all(p.kind == "dream" for p in prompts)
        status = await d.call("dream.status", workspace=str(path))
        assert status["last_run"]["outcome"] == "failed"
        assert status["last_run"]["reason"] == "model_error"
        assert write_log(ws, 1).exists()  # a failed dream deletes nothing


# --------------------------------------------------------------------------- ops


@pytest.mark.anyio
async def test_dream_status_shows_gates_lock_last_consolidation_and_next_check(
    home: Path, llm: FakeLLM
) -> None:
    path, ws = workspace_of(home)
    async with in_process_daemon(config=llm.config_toml()) as d:
        await d.call("memory.files", workspace=str(path))
        write_log(ws, 1)
        write_log(ws, 2)
        crashed = dead_pid()
        ws.lock_path.write_text(str(crashed), encoding="utf-8")
        ten_minutes_ago = time.time() - 600
        os.utime(ws.lock_path, (ten_minutes_ago, ten_minutes_ago))

        status = await d.call("dream.status", workspace=str(path))
        assert status["gates"] == {
            "outcome": "too_few_sessions",
            "enabled": True,
            "hours_since_last": None,  # a holder that died never consolidated anything
            "min_hours": 24,
            "sessions_since_last": 2,
            "min_sessions": 5,
        }
        lock = status["lock"]
        assert lock["holder_pid"] == crashed and lock["alive"] is False
        assert lock["stale"] is False and lock["held"] is False
        assert 590 <= lock["age_secs"] <= 700
        assert status["last_consolidation"] is None and status["last_run"] is None
        assert status["next_check"] == "off"

        # A live holder (this test process, just now) makes a dream skip, without an error.
        ws.lock_path.write_text(str(os.getpid()), encoding="utf-8")
        skipped = await d.call("dream.run", workspace=str(path))
        assert skipped["outcome"] == "skipped" and skipped["reason"] == "lock_held"
        assert skipped["holder_pid"] == os.getpid() and llm.requests == 0
        held = (await d.call("dream.status", workspace=str(path)))["lock"]
        assert held["alive"] is True and held["held"] is True

        ws.lock_path.unlink()
        written = await d.call("dream.run", workspace=str(path))
        assert written["outcome"] == "written"
        status = await d.call("dream.status", workspace=str(path))
        assert status["lock"]["holder_pid"] is None and status["lock"]["held"] is False
        assert status["gates"]["hours_since_last"] == 0
        assert status["gates"]["sessions_since_last"] == 0
        assert status["last_consolidation"] is not None
        assert status["last_run"]["outcome"] == "written"

        actor = await d.actor_status(path)
        assert actor is not None and actor["dream"]["last_run"]["outcome"] == "written"


# --------------------------------------------------------------------------- crash safety


@dataclass
class CrashScene:
    home: Path
    path: Path
    ws: Workspace
    llm: FakeLLM
    logs: dict[Path, str]

    def check_after_crash(self) -> None:
        memory = read(self.ws.memory_file)
        assert memory is not None
        assert memory == ORIGINAL or memory.rstrip().endswith("-->"), memory  # whole files
        assert not list(self.ws.dir.glob(".memoryd-tmp-*"))  # no half-written MEMORY.md
        assert_nothing_lost(self.ws, self.logs)

    def next_dream_completes(self, daemon: DaemonProcess, dead: int) -> dict[str, Any]:
        status = daemon.call("dream.status", workspace=str(self.path))
        assert status["lock"]["holder_pid"] == dead and status["lock"]["alive"] is False
        extra = write_log(self.ws, 9, fact="After the crash")
        self.logs[extra] = "After the crash"
        result: dict[str, Any] = daemon.call("dream.run", workspace=str(self.path))
        assert result["outcome"] == "written", result
        memory = read(self.ws.memory_file) or ""
        assert_nothing_lost(self.ws, self.logs)
        assert all(f"## {fact}" in memory for fact in self.logs.values()), memory
        assert "## Build" in memory
        assert_no_duplicates(memory)
        assert not any(p.exists() for p in self.logs)
        assert self.ws.lock_path.read_text(encoding="utf-8") == ""  # reclaimed, released
        return result


@pytest.fixture
def scene(home: Path, llm: FakeLLM) -> CrashScene:
    path, ws = workspace_of(home)
    ws.sessions_dir.mkdir(parents=True)
    ws.memory_file.write_text(ORIGINAL, encoding="utf-8")
    logs = {write_log(ws, n): f"Fact {n}" for n in (1, 2, 3)}
    return CrashScene(home, path, ws, llm, logs)


def crashing_daemon(processes: Processes, scene: CrashScene, point: str | None) -> DaemonProcess:
    env = dict(scene.llm.env())
    if point is not None:
        env.update({ENV: point, DIR_ENV: str(scene.home), SECS_ENV: "30"})
    return processes(env=env)


def test_sigkill_during_the_model_call_loses_nothing(
    processes: Processes, scene: CrashScene
) -> None:
    daemon = crashing_daemon(processes, scene, None).start()
    with scene.llm.holding():
        sock = send_only(daemon.socket, "dream.run", {"workspace": str(scene.path)})
        scene.llm.wait_held()
        assert scene.ws.lock_path.read_text(encoding="utf-8") == str(daemon.pid)
        dead = daemon.pid
        daemon.kill()
        sock.close()
    scene.check_after_crash()
    assert read(scene.ws.memory_file) == ORIGINAL
    assert all(p.exists() for p in scene.logs)

    again = processes(env=scene.llm.env()).start()
    status = again.call("dream.status", workspace=str(scene.path))
    assert status["gates"]["hours_since_last"] is None  # the crashed dream consolidated nothing
    scene.next_dream_completes(again, dead)


def test_sigkill_during_the_write_loses_nothing(processes: Processes, scene: CrashScene) -> None:
    daemon = crashing_daemon(processes, scene, "dream.before_write").start()
    sock = send_only(daemon.socket, "dream.run", {"workspace": str(scene.path)})
    wait_for_file(scene.home / "dream.before_write.hit")
    dead = daemon.pid
    daemon.kill()
    sock.close()
    scene.check_after_crash()
    assert read(scene.ws.memory_file) == ORIGINAL
    assert all(p.exists() for p in scene.logs)

    again = processes(env=scene.llm.env()).start()
    scene.next_dream_completes(again, dead)


def test_sigkill_during_cleanup_loses_nothing_and_duplicates_nothing(
    processes: Processes, scene: CrashScene
) -> None:
    daemon = crashing_daemon(processes, scene, "dream.cleanup").start()
    sock = send_only(daemon.socket, "dream.run", {"workspace": str(scene.path)})
    wait_for_file(scene.home / "dream.cleanup.hit")
    dead = daemon.pid
    daemon.kill()
    sock.close()
    scene.check_after_crash()
    crashed_memory = read(scene.ws.memory_file) or ""
    assert all(f"## {fact}" in crashed_memory for fact in scene.logs.values())
    assert sum(p.exists() for p in scene.logs) == 2  # killed after the first move

    again = processes(env=scene.llm.env()).start()
    scene.next_dream_completes(again, dead)
    # Undo steps back to what the crashed dream wrote, then to the original.
    undone = again.call("dream.undo", workspace=str(scene.path))
    assert read(scene.ws.memory_file) == crashed_memory, undone
    undone = again.call("dream.undo", workspace=str(scene.path))
    assert read(scene.ws.memory_file) == ORIGINAL
    assert sorted(undone["logs_restored"]) == sorted(
        p.name for p in scene.logs if "0009" not in p.name
    )
    assert all(p.exists() for p in scene.logs)  # every consumed log came back


def test_sigkill_during_an_undo_is_completed_by_the_next_dream(
    processes: Processes, scene: CrashScene
) -> None:
    daemon = crashing_daemon(processes, scene, "dream.undo").start()
    assert daemon.call("dream.run", workspace=str(scene.path))["outcome"] == "written"
    dreamt = read(scene.ws.memory_file) or ""
    sock = send_only(daemon.socket, "dream.undo", {"workspace": str(scene.path)})
    wait_for_file(scene.home / "dream.undo.hit")
    daemon.kill()
    sock.close()
    # killed after journalling the undo, before any file changed: nothing is lost
    assert read(scene.ws.memory_file) == dreamt
    assert_nothing_lost(scene.ws, scene.logs)
    again = processes(env=scene.llm.env()).start()
    # the next undo (or dream) first completes the journalled one: nothing is left to undo
    with pytest.raises(NotFound, match="no dream to undo"):
        again.call("dream.undo", workspace=str(scene.path))
    assert read(scene.ws.memory_file) == ORIGINAL
    assert all(p.exists() for p in scene.logs)  # every archived log is back, whole
    assert_nothing_lost(scene.ws, scene.logs)
    assert [e["outcome"] for e in read_journal(scene.ws.history_dir)] == ["written", "undone"]
    # and the restored logs are consumed again by the next dream
    assert again.call("dream.run", workspace=str(scene.path))["outcome"] == "written"
    memory = read(scene.ws.memory_file) or ""
    assert all(f"## {fact}" in memory for fact in scene.logs.values())
    assert_no_duplicates(memory)


# --------------------------------------------------------------------------- race


@dataclass
class SecondSocket(DaemonProcess):
    """A daemon on its own socket (``daemon.socket``) sharing the first one's memory root."""

    @property
    def socket(self) -> Path:
        return Path(self.env["MEMORYD_DAEMON_SOCKET"])


def test_two_daemons_dreaming_together_lose_and_duplicate_nothing(
    home: Path, processes: Processes, llm: FakeLLM
) -> None:
    """Two daemons on one memory root triggered together, ten rounds (20 dreams), while a new
    session log arrives between their starts and model calls take varying times. The second
    daemon deems any lock older than 10 ms stale, so it often runs its dream beside the
    first one's (both "won" the lock) and may finish first with more material: only the
    dream's own idempotence keeps memory whole then."""
    path, ws = workspace_of(home)
    ws.sessions_dir.mkdir(parents=True)
    ws.memory_file.write_text(ORIGINAL, encoding="utf-8")
    jitter = random.Random(6)
    thinking: deque[float] = deque()  # how long each model call of a round takes, in order

    def slow_echo(prompt: Any) -> str:
        time.sleep(thinking.popleft() if thinking else 0.0)
        return echo_dream(prompt)

    llm.respond = slow_echo
    first = processes(env=llm.env()).start()
    socket2 = home / "run" / "second.sock"
    second = SecondSocket(
        home,
        env={
            **llm.env(),
            "MEMORYD_DAEMON_SOCKET": str(socket2),
            "MEMORYD_DREAM_STALE_LOCK_SECS": "0.01",
        },
        name="second",
    )
    try:
        second.start()
        facts: dict[Path, str] = {}
        outcomes: Counter[str] = Counter()

        def dream(daemon: DaemonProcess, delay: float) -> Any:
            time.sleep(delay)
            return daemon.call("dream.run", workspace=str(path))

        def late_log(n: int, delay: float) -> None:
            time.sleep(delay)
            facts[write_log(ws, n)] = f"Fact {n}"

        rounds = 10
        # A word of its own in each round's first fact, so a search can find that fact: the
        # words every fact shares match nothing (issue 19) and numbers are not keywords.
        words = "alpha bravo charlie delta echo foxtrot golf hotel india juliett".split()
        for r in range(rounds):
            n = 10 * r + 1
            fact = f"Fact {n} {words[r]}"
            facts[write_log(ws, n, fact=fact)] = fact
            early, late = jitter.sample([first, second], 2)
            slow, fast = jitter.uniform(0.1, 0.15), jitter.uniform(0.0, 0.04)
            # Mostly, the dream that started first (with less material) finishes last.
            thinking.extend([slow, fast] if jitter.random() < 0.7 else [fast, slow])
            results = _together(
                [
                    functools.partial(dream, early, 0.0),
                    functools.partial(dream, late, jitter.uniform(0.04, 0.06)),
                    functools.partial(late_log, n + 1, jitter.uniform(0.015, 0.03)),
                ]
            )[:2]
            thinking.clear()
            outcomes.update(f"{x['outcome']}:{x.get('reason')}" for x in results)
            memory = read(ws.memory_file) or ""
            assert_nothing_lost(ws, facts)
            assert_no_duplicates(memory)
            assert "## Build" in memory
        last = first.call("dream.run", workspace=str(path))  # whatever arrived last
        assert last["outcome"] in ("written", "skipped"), last
        memory = read(ws.memory_file) or ""
        assert all(f"## {fact}" in memory for fact in facts.values()), (outcomes, memory)
        assert_no_duplicates(memory)
        assert sum(outcomes.values()) == 2 * rounds and outcomes["written:None"] >= rounds
        assert first.running and second.running
        line = memory.splitlines().index("## Fact 71 hotel") + 1  # a chunk may hold several
        for daemon in (first, second):
            errors = [e for e in daemon.events() if e.get("level") in ("error", "critical")]
            assert errors == [], errors
            found = daemon.call("memory.search", workspace=str(path), query="Fact 71 hotel")
            assert any(
                r["path"].endswith("MEMORY.md") and r["start_line"] <= line <= r["end_line"]
                for r in found["results"]
            ), (line, found)
    finally:
        second.kill()


def _together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls at the same moment in threads; their results (errors re-raised)."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait(5)
        try:
            results[i] = calls[i]()
        except MemorydError as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.mark.anyio
async def test_a_lock_that_cannot_be_read_fails_dreams_not_session_ends(
    home: Path, llm: FakeLLM
) -> None:
    path, ws = workspace_of(home)
    async with in_process_daemon(config=llm.config_toml() + OPEN_GATES) as d:
        await d.call("memory.files", workspace=str(path))
        write_log(ws, 1)
        ws.lock_path.mkdir()  # the lock cannot be read or written: every dream fails
        with pytest.raises(MemorydError, match="dream-lock"):
            await d.call("dream.run", workspace=str(path))  # a manual one reports it

        await d.call("session.open", workspace=str(path), session_id="ends-1")
        closed = await d.call("session.close", session_id="ends-1")
        assert closed["summary_written"] is False and closed["messages"] == 0
        assert closed["dream"]["outcome"] == "error" and "dream-lock" in closed["dream"]["error"]
        assert not (ws.live_dir / "ends-1.jsonl").exists()
        actor = await d.actor_status(path)
        assert actor is not None and actor["state"] == "running" and actor["sessions"] == []
        assert actor["restarts"] == 0, actor["last_error"]
        assert llm.requests == 0


@pytest.mark.anyio
async def test_a_stopping_daemon_rolls_its_dream_lock_back(home: Path, llm: FakeLLM) -> None:
    path, ws = workspace_of(home)
    async with in_process_daemon(config=llm.config_toml(), grace_secs=0.2) as d:
        await d.call("memory.files", workspace=str(path))
        ws.memory_file.write_text(ORIGINAL, encoding="utf-8")
        logs = {write_log(ws, 1): "Fact 1"}
        llm.hold()

        async def dream() -> None:
            with pytest.raises((MemorydError, OSError)):
                await d.call("dream.run", workspace=str(path))

        async with anyio.create_task_group() as tg:
            tg.start_soon(dream)
            await anyio.to_thread.run_sync(llm.wait_held)
            assert ws.lock_path.read_text(encoding="utf-8") == str(os.getpid())
            d.daemon.stop()
    assert not ws.lock_path.exists()  # rolled back: there was no lock before
    assert read(ws.memory_file) == ORIGINAL
    assert all(p.exists() for p in logs)
