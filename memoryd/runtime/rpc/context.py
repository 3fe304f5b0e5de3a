"""What socket handlers can see of the running daemon: :class:`DaemonContext`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.core.config import Config
from memoryd.runtime.supervisor import Supervisor
from memoryd.runtime.workspace.confluence import Confluence

StatusHook = Callable[[], dict[str, Any]]


@dataclass(slots=True)
class DaemonContext:
    """What handlers can see of the running daemon.

    ``config`` and ``config_dir`` are read at each call (a reloaded config applies);
    ``extra_status`` entries are merged into ``daemon.status``.
    """

    supervisor: Supervisor
    socket_path: str
    loop: str  # what `serve` asked for; `daemon.status` reports the loop really running
    config: Callable[[], Config]
    config_dir: Callable[[], Path | None] = lambda: None
    confluence: Confluence | None = None
    started_at: float = field(default_factory=time.time)
    config_file: str | None = None
    extra_status: list[StatusHook] = field(default_factory=list)


def running_loop() -> str:
    """The event loop actually running this code: ``uvloop`` or ``asyncio``."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.split(".")[0] == "uvloop" else "asyncio"
