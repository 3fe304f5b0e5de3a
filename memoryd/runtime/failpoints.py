"""Failpoints: named places where a crash test freezes the daemon, to SIGKILL it right there.

Inactive — one frozenset lookup per call — unless the environment variable ``MDD_FAILPOINTS``
names points (comma-separated, e.g. ``MDD_FAILPOINTS=dream.before_write``) when this module
is first imported. The variable is deliberately not ``MEMORYD_*``: those are configuration
keys. When code reaches an active point, :func:`hit` writes the marker file
``<MDD_FAILPOINT_DIR>/<name>.hit`` (body: the PID; the directory defaults to the system temp
dir) and then sleeps ``MDD_FAILPOINT_SECS`` seconds (default 30), blocking the calling thread,
so the test sees the marker and kills the process at exactly that moment. If nobody kills
it, the code carries on as if nothing happened.

Points (synchronous file work calls :func:`hit` in its worker thread; async code awaits
:func:`hit_async`, which runs it in a worker thread only when the point is active):

- ``dream.before_write`` — a dream saved the old ``MEMORY.md`` to ``.history/`` and is about to
  write the new one;
- ``dream.cleanup`` — a dream wrote ``MEMORY.md``, journalled it and archived the first
  consumed session log; the others are still in ``sessions/``;
- ``dream.undo`` — an undo journalled what it restores; ``MEMORY.md`` and the archived logs
  are not restored yet;
- ``session.after_summary`` — ``session.close`` appended the summary to the session's log
  and has not yet marked the journal closed.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import anyio

ENV = "MDD_FAILPOINTS"
DIR_ENV = "MDD_FAILPOINT_DIR"
SECS_ENV = "MDD_FAILPOINT_SECS"

_ACTIVE = frozenset(name.strip() for name in os.environ.get(ENV, "").split(",") if name.strip())


def active(name: str) -> bool:
    return name in _ACTIVE


def hit(name: str) -> None:
    """Freeze here when ``name`` is active (see the module docstring); otherwise nothing."""
    if name not in _ACTIVE:
        return
    directory = Path(os.environ.get(DIR_ENV) or tempfile.gettempdir())
    marker = directory / f"{name}.hit"
    marker.write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(float(os.environ.get(SECS_ENV) or 30.0))


async def hit_async(name: str) -> None:
    """:func:`hit` for async code: freezes a worker thread (and this task), not the loop."""
    if name in _ACTIVE:
        await anyio.to_thread.run_sync(hit, name)
