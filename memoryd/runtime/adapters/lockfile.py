"""The DreamLock: best-effort coordination of dreams on one workspace (SPEC §8.3).

The file ``.dream-lock`` holds the holder's PID; its mtime is the time of the last successful
consolidation (while a dream runs: the time it took the lock). It is *not* mutual exclusion —
two processes may both believe they won — so a dream must also be idempotent (see
:mod:`memoryd.runtime.workspace.dreamer`).

- :meth:`DreamLock.acquire`: a live holder younger than ``stale_secs`` → not acquired
  (``lock_held``). Empty or garbage body, a dead PID or a stale age → reclaimed. A PID is
  live only if its process started before the lock's mtime, so a reused PID is dead. The
  prior mtime is remembered; our PID is written (atomically) and read back: someone else's
  PID there means a lost race (``lost_race``).
- :meth:`DreamLock.release` (success): body cleared, mtime = now.
- :meth:`DreamLock.rollback` (failure): the prior mtime restored and the body cleared, or the
  file deleted when there was none before — so the gate stays open and the next trigger retries.

Within one process, two holders of one lock file are refused outright (a process-wide set of
held paths): two tasks of one daemon share a PID, so the file alone cannot tell them apart.
The clock and the PID check are injectable for tests.

The one real mutex between processes is :func:`memoryd.store.history.commit_guard`, held
only for a dream's short file work.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from memoryd.errors import StorageError
from memoryd.store.files import atomic_write_text, read_text

#: A process must have started at least this long before the lock's mtime to be its holder
#: (process start times are only known to about a clock tick).
START_TIME_SLACK = 1.0

AcquireOutcome = Literal["acquired", "lock_held", "lost_race"]
PidChecker = Callable[[int, float], bool]

_held_here: set[str] = set()
_held_guard = threading.Lock()


def process_alive(pid: int, since: float) -> bool:
    """True when process ``pid`` runs and started before ``since`` (a Unix time).

    A process that started after ``since`` reuses the PID of a dead holder; a zombie is
    dead. If the process exists but cannot be inspected, it counts as alive (the safe side).
    """
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started: float = proc.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    return started <= since + START_TIME_SLACK


def parse_pid(body: str | None) -> int | None:
    """The PID a lock body names, or None for an empty or garbage body."""
    text = (body or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        return None
    pid = int(text)
    return pid if pid > 0 else None


@dataclass(frozen=True, slots=True)
class LockInfo:
    """What the lock file says right now (for ``status`` and for :meth:`DreamLock.acquire`)."""

    exists: bool
    pid: int | None
    """The holder's PID, None when the body is empty or garbage."""
    mtime: float | None
    alive: bool
    """The PID runs and started before the lock's mtime."""
    age: float | None
    """Seconds since the mtime (never negative)."""
    stale: bool
    """Older than ``stale_secs``."""

    @property
    def held(self) -> bool:
        """A live holder younger than the stale age: acquiring would be refused."""
        return self.pid is not None and self.alive and not self.stale

    def to_dict(self) -> dict[str, Any]:
        return {
            "exists": self.exists,
            "holder_pid": self.pid,
            "alive": self.alive,
            "age_secs": None if self.age is None else round(self.age, 3),
            "stale": self.stale,
            "held": self.held,
        }


@dataclass(frozen=True, slots=True)
class Acquisition:
    """The result of :meth:`DreamLock.acquire`; ``prior`` is the mtime before we took it."""

    outcome: AcquireOutcome
    prior: float | None = None
    holder: int | None = None
    reclaimed: int | None = None
    """The PID of a dead or stale holder whose lock was taken over: ``prior`` is then only
    when that holder's dream began, not a consolidation."""

    @property
    def acquired(self) -> bool:
        return self.outcome == "acquired"


class DreamLock:
    """The ``.dream-lock`` file of one workspace. All methods are synchronous file I/O."""

    def __init__(
        self,
        path: Path,
        *,
        stale_secs: float,
        clock: Callable[[], float] = time.time,
        pid: int | None = None,
        is_alive: PidChecker = process_alive,
    ) -> None:
        self.path = path
        self.stale_secs = stale_secs
        self.clock = clock
        self.pid = os.getpid() if pid is None else pid
        self.is_alive = is_alive
        self._key = os.path.abspath(path)

    # ------------------------------------------------------------------ reading

    def _stat_mtime(self) -> float | None:
        try:
            return self.path.stat().st_mtime
        except FileNotFoundError:
            return None

    def inspect(self) -> LockInfo:
        """The lock's holder, liveness, age and staleness as of now."""
        mtime = self._stat_mtime()
        if mtime is None:
            return LockInfo(False, None, None, False, None, False)
        pid = parse_pid(read_text(self.path))
        age = max(0.0, self.clock() - mtime)
        alive = pid is not None and self.is_alive(pid, mtime)
        return LockInfo(True, pid, mtime, alive, age, age >= self.stale_secs)

    def last_consolidation(self) -> float | None:
        """The lock's mtime: the last successful consolidation (None = never) — as long as
        the body is empty; while it names a holder, the mtime is when that holder's dream
        began (see :meth:`memoryd.runtime.workspace.dreamer.Dreamer.last_consolidation`)."""
        return self._stat_mtime()

    # ------------------------------------------------------------------ writing

    def _write(self, body: str, mtime: float) -> None:
        try:
            atomic_write_text(self.path, body)
        except StorageError:
            if body or not self.path.exists():
                raise
            # A full disk has no room for the temp file; emptying the lock in place needs
            # none, so a release or rollback still frees the lock for the next dream.
            os.truncate(self.path, 0)
        os.utime(self.path, (mtime, mtime))

    def _claim_here(self) -> bool:
        with _held_guard:
            if self._key in _held_here:
                return False
            _held_here.add(self._key)
            return True

    def _unclaim_here(self) -> None:
        with _held_guard:
            _held_here.discard(self._key)

    def acquire(self) -> Acquisition:
        """Take the lock if nobody live holds it (see the module docstring)."""
        if not self._claim_here():
            return Acquisition("lock_held", holder=self.pid)
        try:
            info = self.inspect()
            if info.held:
                self._unclaim_here()
                return Acquisition("lock_held", info.mtime, info.pid)
            self._write(str(self.pid), self.clock())
            holder = parse_pid(read_text(self.path))
            if holder != self.pid:
                self._unclaim_here()
                return Acquisition("lost_race", info.mtime, holder)
            return Acquisition("acquired", info.mtime, self.pid, reclaimed=info.pid)
        except BaseException:
            self._unclaim_here()
            raise

    def _still_ours(self) -> bool:
        return parse_pid(read_text(self.path)) == self.pid

    def release(self) -> bool:
        """After a successful dream: clear the body, mtime = now. False if no longer ours."""
        try:
            if not self._still_ours():
                return False
            self._write("", self.clock())
            return True
        finally:
            self._unclaim_here()

    def rollback(self, prior: float | None) -> bool:
        """After a failed dream: restore ``prior`` and clear the body, or delete the file.

        Does nothing (and returns False) when the lock is no longer ours — another process
        reclaimed it or already finished a dream, and its state must not be undone.
        """
        try:
            if not self._still_ours():
                return False
            if prior is None:
                self.path.unlink(missing_ok=True)
            else:
                self._write("", prior)
            return True
        finally:
            self._unclaim_here()
