"""The DreamLock (SPEC §8.3): held, reclaimed, PID reuse, lost races, release and rollback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.runtime.adapters import lockfile
from memoryd.runtime.adapters.lockfile import DreamLock, parse_pid, process_alive
from memoryd.store import files

NOW = 1_750_000_000.0
OTHER_PID = 4_000_001  # our "own" PID in tests where a real process holds the lock


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / ".dream-lock"


def put(path: Path, body: str, mtime: float) -> None:
    path.write_text(body, encoding="utf-8")
    os.utime(path, (mtime, mtime))


def mtime(path: Path) -> float:
    return path.stat().st_mtime


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def young_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process started *now* (after any lock mtime in the past)."""
    proc = subprocess.Popen(["sleep", "30"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def real_lock(path: Path, **kw: object) -> DreamLock:
    """A lock with the real clock and the real PID check, acting as process OTHER_PID."""
    return DreamLock(path, stale_secs=3600, pid=OTHER_PID, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- acquire


def test_acquire_without_a_file_writes_our_pid_and_remembers_no_prior(lock_path: Path) -> None:
    clock = Clock()
    lock = DreamLock(lock_path, stale_secs=3600, clock=clock, pid=1234, is_alive=lambda p, s: True)
    got = lock.acquire()
    assert got.acquired and got.prior is None
    assert lock_path.read_text() == "1234"
    assert mtime(lock_path) == NOW
    assert lock.rollback(got.prior)


def test_a_live_young_holder_means_held_without_error(
    lock_path: Path, young_process: subprocess.Popen[bytes]
) -> None:
    put(lock_path, str(young_process.pid), time.time())  # written after the holder started
    before = mtime(lock_path)
    got = real_lock(lock_path).acquire()
    assert got.outcome == "lock_held"
    assert got.holder == young_process.pid
    assert lock_path.read_text() == str(young_process.pid)
    assert mtime(lock_path) == before


def test_a_dead_pid_is_reclaimed(lock_path: Path, dead_pid: int) -> None:
    put(lock_path, str(dead_pid), time.time() - 60)
    before = mtime(lock_path)
    lock = real_lock(lock_path)
    got = lock.acquire()
    assert got.acquired and got.prior == before
    assert lock_path.read_text() == str(OTHER_PID)
    lock.rollback(got.prior)


def test_a_stale_lock_is_reclaimed_even_with_a_live_pid(lock_path: Path) -> None:
    put(lock_path, "55", time.time() - 3601)
    before = mtime(lock_path)
    lock = real_lock(lock_path, is_alive=lambda pid, since: True)
    info = lock.inspect()
    assert info.alive and info.stale and not info.held
    got = lock.acquire()
    assert got.acquired and got.prior == before
    lock.rollback(got.prior)


@pytest.mark.parametrize("body", ["", "   \n", "garbage", "12ab", "-5", "0", "99999999999999"])
def test_an_empty_or_garbage_body_is_reclaimed(lock_path: Path, body: str) -> None:
    put(lock_path, body, time.time() - 10)
    before = mtime(lock_path)
    lock = real_lock(lock_path)
    got = lock.acquire()
    assert got.acquired and got.prior == before
    lock.rollback(got.prior)


def test_a_reused_pid_started_after_the_lock_counts_as_dead(
    lock_path: Path, young_process: subprocess.Popen[bytes]
) -> None:
    # The lock was written 10 minutes ago by a process that died; its PID now belongs to
    # a process that started just now.
    put(lock_path, str(young_process.pid), time.time() - 600)
    info = real_lock(lock_path).inspect()
    assert info.pid == young_process.pid
    assert not info.alive and not info.stale and not info.held
    lock = real_lock(lock_path)
    assert lock.acquire().acquired
    lock.release()


def test_process_alive_compares_start_time(young_process: subprocess.Popen[bytes]) -> None:
    assert process_alive(os.getpid(), time.time())
    assert not process_alive(os.getpid(), time.time() - 10 * 365 * 86400)
    assert process_alive(young_process.pid, time.time() + 5)
    assert not process_alive(young_process.pid, time.time() - 600)
    assert not process_alive(0, time.time())


def test_process_alive_says_dead_for_an_exited_pid(dead_pid: int) -> None:
    assert not process_alive(dead_pid, time.time())


def test_write_then_reread_detects_a_lost_race(
    lock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = files.atomic_write_text

    def racing_write(path: Path, text: str) -> None:
        real_write(path, text)
        if text:  # another process writes its PID right after ours
            real_write(path, "777777")

    monkeypatch.setattr(lockfile, "atomic_write_text", racing_write)
    lock = DreamLock(lock_path, stale_secs=3600, pid=1234, is_alive=lambda p, s: False)
    got = lock.acquire()
    assert got.outcome == "lost_race"
    assert got.holder == 777777
    # the loser leaves the winner's lock alone ...
    assert not lock.rollback(got.prior)
    assert lock_path.read_text() == "777777"
    # ... and is free to try again later in this process
    monkeypatch.setattr(lockfile, "atomic_write_text", real_write)
    assert lock.acquire().acquired


def test_two_holders_in_one_process_are_refused(lock_path: Path) -> None:
    first = DreamLock(lock_path, stale_secs=3600)
    second = DreamLock(lock_path, stale_secs=3600)
    got = first.acquire()
    assert got.acquired
    assert second.acquire().outcome == "lock_held"  # same PID: the file cannot tell them apart
    assert first.release()
    again = second.acquire()
    assert again.acquired
    second.rollback(again.prior)


# ---------------------------------------------------------------------------- release, rollback


def test_release_clears_the_body_and_sets_mtime_to_now(lock_path: Path) -> None:
    clock = Clock()
    put(lock_path, "", NOW - 86400)
    lock = DreamLock(lock_path, stale_secs=3600, clock=clock, pid=42, is_alive=lambda p, s: True)
    assert lock.acquire().acquired
    clock.now = NOW + 30
    assert lock.release()
    assert lock_path.read_text() == ""
    assert mtime(lock_path) == NOW + 30
    # a finished holder never blocks the next run
    assert not lock.inspect().held
    assert DreamLock(lock_path, stale_secs=3600, pid=43).acquire().acquired


def test_rollback_restores_the_prior_mtime_and_clears_the_body(lock_path: Path) -> None:
    put(lock_path, "", NOW - 86400)
    lock = DreamLock(lock_path, stale_secs=3600, clock=Clock(), pid=42, is_alive=lambda p, s: True)
    got = lock.acquire()
    assert got.prior == NOW - 86400
    assert mtime(lock_path) == NOW
    assert lock.rollback(got.prior)
    assert lock_path.read_text() == ""
    assert mtime(lock_path) == NOW - 86400


def test_rollback_without_a_prior_deletes_the_file(lock_path: Path) -> None:
    lock = DreamLock(lock_path, stale_secs=3600, clock=Clock(), pid=42, is_alive=lambda p, s: True)
    got = lock.acquire()
    assert lock_path.exists()
    assert lock.rollback(got.prior)
    assert not lock_path.exists()


def test_rollback_leaves_a_lock_someone_else_took_over(lock_path: Path) -> None:
    lock = DreamLock(lock_path, stale_secs=3600, clock=Clock(), pid=42, is_alive=lambda p, s: True)
    got = lock.acquire()
    put(lock_path, "", NOW + 100)  # another process finished a dream meanwhile
    assert not lock.rollback(got.prior)
    assert lock_path.exists() and mtime(lock_path) == NOW + 100
    assert not lock.release()


def test_inspect_reports_holder_alive_age_and_stale(lock_path: Path) -> None:
    clock = Clock()
    lock = DreamLock(lock_path, stale_secs=100, clock=clock, is_alive=lambda p, s: p == 55)
    assert lock.inspect().to_dict() == {
        "exists": False,
        "holder_pid": None,
        "alive": False,
        "age_secs": None,
        "stale": False,
        "held": False,
    }
    put(lock_path, "55\n", NOW - 40)
    info = lock.inspect()
    assert (info.pid, info.alive, info.age, info.stale, info.held) == (55, True, 40.0, False, True)
    clock.now = NOW + 60
    assert lock.inspect().stale and not lock.inspect().held
    assert lock.last_consolidation() == NOW - 40


def test_parse_pid() -> None:
    assert parse_pid(" 123\n") == 123
    for body in (None, "", "abc", "1.5", "-3", "0", "١٢٣"):
        assert parse_pid(body) is None
