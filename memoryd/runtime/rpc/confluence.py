"""Socket methods of the experience confluence (SPEC §10): confluence.run, confluence.status.

They need no workspace actor: the confluence reads the workspace registry and the
workspaces' ``MEMORY.md`` files itself (in worker threads) and writes ``experience.md``,
which every actor's watcher picks up like any other change of the global memory. The
daemon makes the :class:`~memoryd.runtime.workspace.confluence.Confluence`
(``DaemonContext.confluence``) and starts its daily run; without one these methods are
not registered.
"""

from __future__ import annotations

from typing import Any

from memoryd.core import params as p
from memoryd.core.replies import ConfluenceRunReply, ConfluenceStatusReply
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.table import MethodTable


def register(table: MethodTable, ctx: DaemonContext) -> None:
    confluence = ctx.confluence
    if confluence is None:
        return

    @table.method("confluence.run")
    async def confluence_run(params: dict[str, Any]) -> ConfluenceRunReply:
        p.known_only(params, ("force",))
        force = p.boolean(params, "force", False)
        return await confluence.run(force=force)

    @table.method("confluence.status")
    async def confluence_status(params: dict[str, Any]) -> ConfluenceStatusReply:
        p.known_only(params, ())
        return await confluence.status()
