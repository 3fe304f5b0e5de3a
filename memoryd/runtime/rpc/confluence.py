"""Socket methods of the experience confluence (SPEC §10): confluence.run, confluence.status.

They need no workspace actor: the confluence reads the workspace registry and the
workspaces' ``MEMORY.md`` files itself (in worker threads) and writes ``experience.md``,
which every actor's watcher picks up like any other change of the global memory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from memoryd.core import params as p
from memoryd.core.config import Config
from memoryd.providers.llm import ChatModel
from memoryd.runtime.rpc.table import MethodTable
from memoryd.runtime.workspace.confluence import Confluence

StatusHook = Callable[[], dict[str, Any]]


def register_confluence_methods(
    table: MethodTable,
    root: Path,
    config: Callable[[], Config],
    chat_model: Callable[[], ChatModel | None],
    *,
    status_hooks: list[StatusHook] | None = None,
    **options: Any,
) -> Confluence:
    """Add ``confluence.run`` and ``confluence.status`` to ``table``.

    ``config`` and ``chat_model`` are read at each run (a reloaded config applies);
    ``status_hooks`` (``DaemonContext.extra_status``) gets the ``daemon.status`` entry;
    ``options`` go to :class:`Confluence` (test seams: clock, sleep, call_timeout). Returns
    the :class:`Confluence`, whose :meth:`~Confluence.run_daily` the daemon starts.
    """
    confluence = Confluence(root, config, chat_model, **options)
    if status_hooks is not None:
        status_hooks.append(confluence.summary)

    @table.method("confluence.run")
    async def confluence_run(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("force",))
        force = p.boolean(params, "force", False)
        return await confluence.run(force=force)

    @table.method("confluence.status")
    async def confluence_status(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ())
        return await confluence.status()

    return confluence
