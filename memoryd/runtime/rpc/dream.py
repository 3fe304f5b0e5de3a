"""Socket methods of dreaming (SPEC §8): dream.run, dream.undo, dream.status."""

from __future__ import annotations

from typing import Any

from memoryd.core import params as p
from memoryd.core.replies import DreamRunReply, DreamStatusReply, DreamUndoReply
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.prologue import READ, WRITE, workspace_actor
from memoryd.runtime.rpc.table import MethodTable


def register(table: MethodTable, ctx: DaemonContext) -> None:
    supervisor = ctx.supervisor

    @table.method("dream.run")
    async def dream_run(params: dict[str, Any]) -> DreamRunReply:
        p.known_only(params, ("workspace", "force"))
        force = p.boolean(params, "force", False)
        # A read: it sees the writes sent before it and holds back nothing sent after it,
        # however long the model takes; dreams exclude each other by the DreamLock.
        async with workspace_actor(supervisor, params, READ) as actor:
            return await actor.dream_run(force)

    @table.method("dream.undo")
    async def dream_undo(params: dict[str, Any]) -> DreamUndoReply:
        p.known_only(params, ("workspace", "force"))
        force = p.boolean(params, "force", False)
        async with workspace_actor(supervisor, params, WRITE) as actor:
            return await actor.dream_undo(force)

    @table.method("dream.status")
    async def dream_status(params: dict[str, Any]) -> DreamStatusReply:
        p.known_only(params, ("workspace",))
        async with workspace_actor(supervisor, params, READ) as actor:
            return await actor.dream_status()
