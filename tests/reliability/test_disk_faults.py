"""Disk faults (SPEC §15, issue 9 item 3): writes that fail leave memory as it was.

Faults are injected at the file layer of an in-process daemon: :data:`memoryd.store.files._fs`
(every atomic write of a memory file, backup and lock goes through it) fails with
``ENOSPC`` on ``write`` or ``EIO`` on ``fsync`` for the files a test names; the index's
SQLite file runs out of room through ``PRAGMA max_page_count`` (SQLite's own "database or
disk is full"). In every case the caller gets a clear answer naming the file and the errno,
the memory files keep their exact bytes, no temp file is left, the DreamLock is rolled back,
and the daemon keeps serving — the same request succeeds once the disk has room again.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memoryd.client import AsyncClient
from memoryd.errors import MemorydError, StorageError
from memoryd.store import files
from memoryd.store.layout import Workspace, resolve_workspace
from tests.reliability.harness import report
from tests.runtime.daemon_fixtures import (
    RunningDaemon,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)
from tests.support.fake_llm import FakeLLM, echo_dream

pytestmark = pytest.mark.anyio

FIGURES: dict[str, int] = {"faults_injected": 0, "requests_failed_cleanly": 0}
GATES = "[dream]\nmin_hours = 0\nmin_sessions = 1\n[flush]\nidle_timeout_secs = 0\n"


class FaultyFs:
    """Wraps the real ``files._fs``: fails writes to temp files whose target matches."""

    def __init__(self, real: Any, matches: Callable[[str], bool], code: int, op: str) -> None:
        self.real = real
        self.matches = matches
        self.code = code
        self.op = op  # "open", "write" or "fsync"
        self.doomed: set[int] = set()
        self.hits = 0

    def open_new(self, path: str, mode: int) -> int:
        target = os.path.basename(path)[len(files.TEMP_PREFIX) :].rsplit(".", 1)[0]
        doomed = self.matches(os.path.join(os.path.dirname(path), target))
        if doomed and self.op == "open":  # no room even for a new, empty file
            self.hits += 1
            FIGURES["faults_injected"] += 1
            raise OSError(self.code, os.strerror(self.code))
        fd: int = self.real.open_new(path, mode)
        if doomed:
            self.doomed.add(fd)
        return fd

    def _fail(self, fd: int, op: str) -> None:
        if fd in self.doomed and op == self.op:
            self.hits += 1
            FIGURES["faults_injected"] += 1
            raise OSError(self.code, os.strerror(self.code))

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._fail(fd, "write")
        return int(self.real.write(fd, data))

    def fsync(self, fd: int) -> None:
        self._fail(fd, "fsync")
        self.real.fsync(fd)

    def close(self, fd: int) -> None:
        self.doomed.discard(fd)
        self.real.close(fd)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """``with fault(matches, code, op):`` — the file layer fails inside the block."""
    real = files._fs

    @contextmanager
    def inject(
        matches: Callable[[str], bool], code: int = errno.ENOSPC, op: str = "write"
    ) -> Iterator[FaultyFs]:
        faulty = FaultyFs(real, matches, code, op)
        monkeypatch.setattr(files, "_fs", faulty)
        try:
            yield faulty
        finally:
            monkeypatch.setattr(files, "_fs", real)
        assert faulty.hits, "the fault was never hit"

    yield inject


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(respond=echo_dream) as server:
        yield server


def snapshot(ws: Workspace) -> dict[str, bytes]:
    """The memory files (MEMORY.md, session logs) of the workspace and the global file."""
    paths = [ws.memory_file, ws.dir.parent / "MEMORY.md", *ws.sessions_dir.glob("*.md")]
    return {p.relative_to(ws.dir.parent).as_posix(): p.read_bytes() for p in paths if p.exists()}


def no_temp_files(root: Path) -> None:
    left = list(root.rglob(f"{files.TEMP_PREFIX}*"))
    assert not left, left


async def refused(d: RunningDaemon, method: str, code: str, **params: Any) -> MemorydError:
    with pytest.raises(MemorydError) as raised:
        await d.call(method, **params)
    assert raised.value.code == code, raised.value
    FIGURES["requests_failed_cleanly"] += 1
    return raised.value


async def still_serving(d: RunningDaemon, path: Path) -> None:
    assert await d.call("daemon.ping") == {"ok": True}
    async with AsyncClient(d.socket, timeout=10.0) as other:
        result = await other.request("memory.search", {"workspace": str(path), "query": "kept"})
    assert "results" in result


def assert_storage_error(error: MemorydError, target: Path, name: str) -> None:
    assert isinstance(error, StorageError), error
    assert error.data["path"] == str(target), error.data
    assert error.data["errno"] == name, error.data
    assert str(target) in error.message and name in error.message, error.message


@pytest.mark.parametrize(("code", "op"), [(errno.ENOSPC, "write"), (errno.EIO, "fsync")])
async def test_remember_on_a_failing_disk_changes_nothing(
    home: Path, fault: Callable[..., Any], code: int, op: str
) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    async with in_process_daemon() as d:
        await d.call("memory.remember", workspace=str(path), text="Kept note one")
        before = snapshot(ws)
        with fault(lambda p: p == str(ws.memory_file), code, op):
            error = await refused(
                d, "memory.remember", "storage_error", workspace=str(path), text="Lost note"
            )
        assert_storage_error(error, ws.memory_file, errno.errorcode[code])
        assert snapshot(ws) == before
        no_temp_files(home / "memory")
        await still_serving(d, path)
        await d.call("memory.remember", workspace=str(path), text="Lost note, once more")
        assert "## Lost note, once more" in ws.memory_file.read_text(encoding="utf-8")
    report("disk_faults", dict(FIGURES))


async def test_flush_on_a_failing_disk_keeps_the_log_and_the_session(
    home: Path, fault: Callable[..., Any], llm: FakeLLM
) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    async with in_process_daemon(config=llm.config_toml() + GATES) as d:
        await d.call("session.open", workspace=str(path), session_id="disk-full-1")
        msgs = [{"role": "user", "content": "the kept build flag is -O2"}]
        await d.call("session.append", session_id="disk-full-1", messages=msgs)
        llm.queue("## Build flags\n\nThe kept build flag is -O2.\n")
        first = await d.call("session.flush", session_id="disk-full-1")
        log = home / "memory" / first["path"]
        more = [{"role": "user", "content": "and something new"}]
        await d.call("session.append", session_id="disk-full-1", messages=more)
        before = snapshot(ws)
        llm.queue("## Second thoughts\n\nSomething new.\n")
        with fault(lambda p: p == str(log), errno.ENOSPC):
            error = await refused(d, "session.flush", "storage_error", session_id="disk-full-1")
        assert_storage_error(error, log, "ENOSPC")
        assert snapshot(ws) == before
        no_temp_files(home / "memory")
        await still_serving(d, path)
        status = await d.actor_status(path)
        assert status is not None
        (session,) = status["sessions"]
        assert session["messages"] == 2 and session["last_flush"]["outcome"] == "error"
        llm.queue("## Second thoughts\n\nSomething new.\n")
        again = await d.call("session.flush", session_id="disk-full-1")
        assert again["outcome"] == "written"
        assert "## Second thoughts" in log.read_text(encoding="utf-8")
    report("disk_faults", dict(FIGURES))


def write_old_log(ws: Workspace, n: int) -> Path:
    ws.sessions_dir.mkdir(parents=True, exist_ok=True)
    log = ws.sessions_dir / f"2025-01-0{n}-topic-0000000{n}.md"
    log.write_text(f"## Fact {n}\n\nKept fact {n}.\n", encoding="utf-8")
    stamp = log.stat().st_mtime - 3600
    os.utime(log, (stamp, stamp))
    return log


@pytest.mark.parametrize("scope", ["memory_file", "everything_after_the_lock"])
async def test_dream_on_a_failing_disk_writes_nothing_and_rolls_the_lock_back(
    home: Path, fault: Callable[..., Any], llm: FakeLLM, scope: str
) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    async with in_process_daemon(config=llm.config_toml() + GATES) as d:
        await d.call("memory.remember", workspace=str(path), text="Kept note")
        write_old_log(ws, 1)
        first = await d.call("dream.run", workspace=str(path))
        assert first["outcome"] == "written", first
        settled = (await d.call("dream.status", workspace=str(path)))["last_consolidation"]
        logs = [write_old_log(ws, n) for n in (2, 3)]
        before = snapshot(ws)
        lock_writes = [0]

        def matches(target: str) -> bool:
            if scope == "memory_file":
                return target == str(ws.memory_file)
            # The disk fills up right after the lock was taken: even the rollback cannot
            # write a new file.
            if target == str(ws.lock_path):
                lock_writes[0] += 1
                return lock_writes[0] > 1
            return target.startswith(str(ws.dir))

        with fault(matches, errno.ENOSPC, "write" if scope == "memory_file" else "open"):
            result = await d.call("dream.run", workspace=str(path))
        FIGURES["requests_failed_cleanly"] += 1
        assert result["outcome"] == "failed" and result["reason"] == "write_error", result
        assert "ENOSPC" in result["error"] and str(ws.dir) in result["error"], result
        assert snapshot(ws) == before
        assert all(log.exists() for log in logs)
        no_temp_files(home / "memory")
        status = await d.call("dream.status", workspace=str(path))
        assert status["lock"]["held"] is False and status["lock"]["holder_pid"] is None, status
        assert status["last_consolidation"] == settled, status  # rolled back: the gate is open
        await still_serving(d, path)
        again = await d.call("dream.run", workspace=str(path))
        assert again["outcome"] == "written", again
        text = ws.memory_file.read_text(encoding="utf-8")
        assert all(f"## Fact {n}" in text for n in (1, 2, 3)) and "Kept note" in text
    report("disk_faults", dict(FIGURES))


async def test_a_full_index_keeps_notes_on_disk_and_serving(home: Path) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    async with in_process_daemon() as d:
        await d.call("memory.remember", workspace=str(path), text="Kept note zeta")
        slot = d.daemon.supervisor.slots[ws.key.dirname]
        assert slot.actor is not None
        index = slot.actor.memory.index
        pages = index.conn.execute("PRAGMA page_count").fetchone()[0]
        index.conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's disk is full
        FIGURES["faults_injected"] += 1
        big = "Huge note omega\n\n" + " ".join(f"word{i}" for i in range(20_000))
        out = await d.call("memory.remember", workspace=str(path), text=big)
        assert out["written"] is True and out.get("indexed") is False, out
        assert "ENOSPC" in out["warning"] and str(ws.index_path) in out["warning"], out
        assert "## Huge note omega" in ws.memory_file.read_text(encoding="utf-8")
        found = await d.search(path, "zeta")
        assert [h["path"] for h in found["results"]] == [f"{ws.key.dirname}/MEMORY.md"]
        assert "ENOSPC" in found["warning"], found
        error = await refused(d, "index.reindex", "storage_error", workspace=str(path))
        assert error.data["path"] == str(ws.index_path) and error.data["errno"] == "ENOSPC"
        index.conn.execute("PRAGMA max_page_count = 1073741823")  # room again
        found = await d.search(path, "omega")
        assert [h["path"] for h in found["results"]] == [f"{ws.key.dirname}/MEMORY.md"]
        assert "warning" not in found, found
    report("disk_faults", dict(FIGURES))
