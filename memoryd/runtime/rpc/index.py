"""Socket methods of a workspace's index (SPEC §4): index.stats, index.reindex,
index.calibrate."""

from __future__ import annotations

from typing import Any

from memoryd.core import params as p
from memoryd.core.replies import CalibrateReply, ReindexReply, StatsReply
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.prologue import READ, WRITE, workspace_actor
from memoryd.runtime.rpc.table import MethodTable


def register(table: MethodTable, ctx: DaemonContext) -> None:
    supervisor = ctx.supervisor

    @table.method("index.stats")
    async def stats(params: dict[str, Any]) -> StatsReply:
        p.known_only(params, ("workspace",))
        async with workspace_actor(supervisor, params, READ) as actor:
            return await actor.stats()

    @table.method("index.calibrate")
    async def calibrate(params: dict[str, Any]) -> CalibrateReply:
        p.known_only(params, ("workspace",))
        async with workspace_actor(supervisor, params, READ) as actor:
            return await actor.calibrate()

    @table.method("index.reindex")
    async def reindex(params: dict[str, Any]) -> ReindexReply:
        p.known_only(params, ("workspace", "embeddings"))
        embeddings = p.boolean(params, "embeddings", False)
        async with workspace_actor(supervisor, params, WRITE) as actor:
            return await actor.reindex(embeddings)
