"""Socket methods of a workspace's memory (SPEC §5–§7): memory.search, memory.get,
memory.remember, memory.files."""

from __future__ import annotations

from typing import Any

from memoryd.core import params as p
from memoryd.core.config import SOURCES
from memoryd.core.replies import FilesReply, GetReply, RememberReply, SearchReply
from memoryd.errors import InvalidParams
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.prologue import READ, WRITE, workspace_actor
from memoryd.runtime.rpc.table import MethodTable


def register(table: MethodTable, ctx: DaemonContext) -> None:
    supervisor = ctx.supervisor

    @table.method("memory.search")
    async def search(params: dict[str, Any]) -> SearchReply:
        p.known_only(params, ("workspace", "query", "max_results", "min_score", "sources"))
        query = p.string(params, "query", max_len=10_000)
        max_results = p.integer(params, "max_results", None, minimum=1, maximum=100)
        min_score = p.number(params, "min_score", None, minimum=0.0, maximum=1.0)
        sources = p.string_list(params, "sources", None, max_items=3)
        if sources is not None:
            bad = [s for s in sources if s not in SOURCES]
            if bad:
                raise InvalidParams(
                    f"parameter 'sources' has unknown source {bad[0]!r} "
                    f"(expected {', '.join(SOURCES)})",
                    param="sources",
                )
        async with workspace_actor(supervisor, params, READ) as actor:
            response = await actor.search(
                query, max_results=max_results, min_score=min_score, sources=sources
            )
        return response.to_dict()

    @table.method("memory.get")
    async def get(params: dict[str, Any]) -> GetReply:
        p.known_only(params, ("workspace", "path", "from", "from_char", "lines"))
        path = p.string(params, "path", max_len=4096)
        start = p.integer(params, "from", 1, minimum=1)
        start_char = p.integer(params, "from_char", 0, minimum=0)
        lines = p.integer(params, "lines", None, minimum=1)
        async with workspace_actor(supervisor, params, READ) as actor:
            return await actor.get(path, start, lines, start_char)

    @table.method("memory.remember")
    async def remember(params: dict[str, Any]) -> RememberReply:
        p.known_only(params, ("workspace", "text", "scope", "allow_secrets"))
        text = p.string(params, "text", max_len=200_000)
        scope = p.choice(params, "scope", ("workspace", "global"), "workspace")
        allow_secrets = p.boolean(params, "allow_secrets", False)
        async with workspace_actor(supervisor, params, WRITE) as actor:
            return await actor.remember(text, scope, allow_secrets)

    @table.method("memory.files")
    async def files(params: dict[str, Any]) -> FilesReply:
        p.known_only(params, ("workspace",))
        async with workspace_actor(supervisor, params, READ) as actor:
            return {"files": await actor.files()}
