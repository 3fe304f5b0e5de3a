"""The daemon's method table: each JSON-RPC method, its params and its result (SPEC §11).

Handlers validate params with :mod:`memoryd.core.params` (errors name the parameter),
take their place in the workspace's request order (before awaiting anything, so pipelined
writes apply in the order they were sent and a read sees the writes sent before it), find
the workspace's actor through the supervisor, and return plain JSON-able values.
The README's protocol section documents every method registered here (a test checks).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from memoryd import __version__
from memoryd.core import params as p
from memoryd.core.config import SOURCES
from memoryd.core.flushing import parse_messages
from memoryd.errors import InvalidParams
from memoryd.providers.factory import describe
from memoryd.runtime.rpc.table import MethodTable
from memoryd.runtime.supervisor import Supervisor
from memoryd.runtime.workspace.sessions import check_session_id


@dataclass(slots=True)
class DaemonContext:
    """What handlers can see of the running daemon."""

    supervisor: Supervisor
    socket_path: str
    loop: str  # what `serve` asked for; `daemon.status` reports the loop really running
    started_at: float = field(default_factory=time.time)
    config_file: str | None = None
    extra_status: list[Callable[[], dict[str, Any]]] = field(default_factory=list)


def running_loop() -> str:
    """The event loop actually running this code: ``uvloop`` or ``asyncio``."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.split(".")[0] == "uvloop" else "asyncio"


def _workspace(params: dict[str, Any]) -> str:
    workspace: str = p.string(params, "workspace", max_len=4096)
    if not os.path.isabs(workspace):
        raise InvalidParams(
            f"parameter 'workspace' must be an absolute path, got {workspace!r}", param="workspace"
        )
    return workspace


def build_methods(ctx: DaemonContext) -> MethodTable:
    table = MethodTable()

    @table.method("daemon.ping")
    async def ping(params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    @table.method("memory.search")
    async def search(params: dict[str, Any]) -> dict[str, Any]:
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
        workspace = _workspace(params)
        async with ctx.supervisor.order.read(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            response = await actor.search(
                query, max_results=max_results, min_score=min_score, sources=sources
            )
        return response.to_dict()

    @table.method("memory.get")
    async def get(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace", "path", "from", "from_char", "lines"))
        path = p.string(params, "path", max_len=4096)
        start = p.integer(params, "from", 1, minimum=1)
        start_char = p.integer(params, "from_char", 0, minimum=0)
        lines = p.integer(params, "lines", None, minimum=1)
        workspace = _workspace(params)
        async with ctx.supervisor.order.read(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            return await actor.get(path, start, lines, start_char)

    @table.method("memory.remember")
    async def remember(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace", "text", "scope", "allow_secrets"))
        text = p.string(params, "text", max_len=200_000)
        scope = p.choice(params, "scope", ("workspace", "global"), "workspace")
        allow_secrets = p.boolean(params, "allow_secrets", False)
        workspace = _workspace(params)
        async with ctx.supervisor.order.write(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            return await actor.remember(text, scope, allow_secrets)

    @table.method("memory.files")
    async def files(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace",))
        workspace = _workspace(params)
        async with ctx.supervisor.order.read(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            return {"files": await actor.files()}

    @table.method("index.stats")
    async def stats(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace",))
        workspace = _workspace(params)
        async with ctx.supervisor.order.read(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            return await actor.stats()

    @table.method("index.reindex")
    async def reindex(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace", "embeddings"))
        embeddings = p.boolean(params, "embeddings", False)
        workspace = _workspace(params)
        async with ctx.supervisor.order.write(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            return await actor.reindex(embeddings)

    # sessions (SPEC §7) ---------------------------------------------------------------

    @table.method("session.open")
    async def session_open(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace", "session_id", "subagent"))
        session_id = check_session_id(params.get("session_id"))
        subagent = p.boolean(params, "subagent", False)
        workspace = _workspace(params)
        async with ctx.supervisor.order.write(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            out = await actor.session_open(session_id, subagent)
        ctx.supervisor.session_routes[session_id] = workspace
        return out

    @table.method("session.append")
    async def session_append(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("session_id", "messages"))
        session_id = check_session_id(params.get("session_id"))
        messages = parse_messages(params.get("messages"))
        async with ctx.supervisor.order.write(f"session:{session_id}"):
            actor = await ctx.supervisor.actor_for_session(session_id)
            return await actor.session_append(session_id, messages)

    @table.method("session.usage")
    async def session_usage(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(
            params,
            ("session_id", "tokens", "context_window", "threshold_percent", "compaction_count"),
        )
        session_id = check_session_id(params.get("session_id"))
        usage = {
            "tokens": p.integer(params, "tokens", minimum=0),
            "context_window": p.integer(params, "context_window", minimum=1),
            "threshold_percent": p.number(params, "threshold_percent", minimum=0.0, maximum=100.0),
            "compaction_count": p.integer(params, "compaction_count", 0, minimum=0),
        }
        async with ctx.supervisor.order.write(f"session:{session_id}"):
            actor = await ctx.supervisor.actor_for_session(session_id)
        return await actor.session_usage(session_id, **usage)

    @table.method("session.flush")
    async def session_flush(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("session_id", "workspace"))
        if params.get("session_id") is None and "workspace" in params:
            # An agent does not know memoryd's ids: the workspace's most recent session.
            workspace = _workspace(params)
            async with ctx.supervisor.order.read(workspace):
                actor = await ctx.supervisor.actor_for(workspace)
            session_id = actor.sessions.most_recent()
        else:
            session_id = check_session_id(params.get("session_id"))
        async with ctx.supervisor.order.write(f"session:{session_id}"):
            actor = await ctx.supervisor.actor_for_session(session_id)
        return {**await actor.session_flush(session_id), "session_id": session_id}

    @table.method("session.close")
    async def session_close(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("session_id",))
        session_id = check_session_id(params.get("session_id"))
        async with ctx.supervisor.order.write(f"session:{session_id}"):
            actor = await ctx.supervisor.actor_for_session(session_id)
            out = await actor.session_close(session_id)
        ctx.supervisor.session_routes.pop(session_id, None)
        return out

    # dream (SPEC §8) -------------------------------------------------------------------

    @table.method("dream.run")
    async def dream_run(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace", "force"))
        force = p.boolean(params, "force", False)
        workspace = _workspace(params)
        async with ctx.supervisor.order.read(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
        return await actor.dream_run(force)

    @table.method("dream.undo")
    async def dream_undo(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace", "force"))
        force = p.boolean(params, "force", False)
        workspace = _workspace(params)
        async with ctx.supervisor.order.write(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            return await actor.dream_undo(force)

    @table.method("dream.status")
    async def dream_status(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ("workspace",))
        workspace = _workspace(params)
        async with ctx.supervisor.order.read(workspace):
            actor = await ctx.supervisor.actor_for(workspace)
            return await actor.dream_status()

    @table.method("daemon.status")
    async def status(params: dict[str, Any]) -> dict[str, Any]:
        p.known_only(params, ())
        proc = psutil.Process()
        provider = ctx.supervisor.provider
        out: dict[str, Any] = {
            "version": __version__,
            "pid": os.getpid(),
            "uptime_secs": round(time.time() - ctx.started_at, 3),
            "rss_bytes": proc.memory_info().rss,
            "loop": running_loop(),
            "python": sys.version.split()[0],
            "socket": ctx.socket_path,
            "config_file": ctx.config_file,
            "memory_root": str(ctx.supervisor.root),
            "embedding_provider": provider.model_id if provider else None,
            "embedding": describe(provider, ctx.supervisor.config),
            "embedding_error": ctx.supervisor.provider_error,
            "chat_model": getattr(ctx.supervisor.chat_model, "model_id", None),
            "actors": await ctx.supervisor.status(),
        }
        for extra in ctx.extra_status:
            out.update(extra())
        return out

    return table
