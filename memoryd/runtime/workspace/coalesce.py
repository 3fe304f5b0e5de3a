"""Coalescing of repeated background jobs: :class:`Coalescer`.

An agent may fire its hooks in a flood (``Stop`` after every turn, ``UserPromptSubmit``
before it); each asks for the same transcript to be read into the same session. A job is
idempotent — it reads whatever the transcript gained since the journaled offset — so of
all the requests for one key, at most one job runs and at most one waits: a request while
one runs makes one wait (it will read what the running one may have missed), a request
while one waits joins it. Nothing is lost: the waiting job starts after every request it
stands for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio.abc

K = TypeVar("K", bound=Hashable)


class Coalescer(Generic[K]):
    """At most one running and one waiting job per key (see the module docstring)."""

    def __init__(self) -> None:
        self._again: dict[K, bool] = {}
        """Key → whether a job waits behind the running one."""

    def request(self, key: K, tg: anyio.abc.TaskGroup, job: Callable[[], Awaitable[None]]) -> str:
        """Ask for ``job`` under ``key``: ``started`` (a task in ``tg``), ``queued`` (it
        runs after the running one) or ``joined`` (the waiting one stands for it)."""
        if key in self._again:
            joined = self._again[key]
            self._again[key] = True
            return "joined" if joined else "queued"
        self._again[key] = False
        tg.start_soon(self._run, key, job)
        return "started"

    async def _run(self, key: K, job: Callable[[], Awaitable[None]]) -> None:
        try:
            while True:
                await job()
                if not self._again.get(key):
                    return
                self._again[key] = False  # the waiting job starts: later requests wait anew
        finally:
            self._again.pop(key, None)

    @property
    def running(self) -> int:
        """Keys with a job running."""
        return len(self._again)
