"""Socket methods of agent sessions (SPEC §7): session.open, session.append,
session.usage, session.flush, session.list, session.close.

``session.open`` names the workspace and records the route; the others name only the
session and are ordered per session (``session:<id>``).
"""

from __future__ import annotations

from typing import Any

from memoryd.core import params as p
from memoryd.core.flushing import parse_messages
from memoryd.core.params import check_session_id
from memoryd.core.replies import (
    ListedSession,
    SessionAppendReply,
    SessionCloseReply,
    SessionFlushReply,
    SessionListReply,
    SessionOpenReply,
    UsageReply,
)
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.prologue import (
    READ,
    WRITE,
    session_actor,
    session_actor_outside_order,
    workspace_actor,
    workspace_param,
)
from memoryd.runtime.rpc.table import MethodTable


def register(table: MethodTable, ctx: DaemonContext) -> None:
    supervisor = ctx.supervisor

    @table.method("session.open")
    async def session_open(params: dict[str, Any]) -> SessionOpenReply:
        p.known_only(params, ("workspace", "session_id", "subagent"))
        session_id = check_session_id(params.get("session_id"))
        subagent = p.boolean(params, "subagent", False)
        async with workspace_actor(supervisor, params, WRITE) as actor:
            workspace = workspace_param(params)
            return await supervisor.open_session(actor, workspace, session_id, subagent)

    @table.method("session.append")
    async def session_append(params: dict[str, Any]) -> SessionAppendReply:
        p.known_only(params, ("session_id", "messages"))
        session_id = check_session_id(params.get("session_id"))
        messages = parse_messages(params.get("messages"))
        async with session_actor(supervisor, session_id) as actor:
            return await actor.session_append(session_id, messages)

    @table.method("session.usage")
    async def session_usage(params: dict[str, Any]) -> UsageReply:
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
        actor = await session_actor_outside_order(supervisor, session_id)
        # Outside the order slot: a usage report can start a flush, which awaits the chat
        # model (seconds to minutes) under the session's own flush lock and reads only the
        # messages appended before it; holding the slot would hold every later append.
        return await actor.session_usage(session_id, **usage)

    @table.method("session.flush")
    async def session_flush(params: dict[str, Any]) -> SessionFlushReply:
        p.known_only(params, ("session_id", "workspace"))
        if params.get("session_id") is None and "workspace" in params:
            # An agent does not know memoryd's ids: the workspace's most recent session.
            async with workspace_actor(supervisor, params, READ) as actor:
                session_id = actor.sessions.most_recent()
        else:
            session_id = check_session_id(params.get("session_id"))
        actor = await session_actor_outside_order(supervisor, session_id)
        # Outside the order slot, like session.usage: the flush awaits the chat model under
        # the session's flush lock; appends sent after it must not wait for the model.
        return {**await actor.session_flush(session_id), "session_id": session_id}

    @table.method("session.list")
    async def session_list(params: dict[str, Any]) -> SessionListReply:
        p.known_only(params, ("workspace",))
        only: str | None = None
        if params.get("workspace") is not None:
            async with workspace_actor(supervisor, params, READ) as actor:
                only = actor.workspace.key.dirname
        sessions: list[ListedSession] = []
        for key, slot in sorted(supervisor.slots.items()):
            running = slot.actor
            if running is None or not running.ready or (only is not None and key != only):
                continue
            path = str(slot.workspace.path)
            sessions.extend(
                {"workspace": path, "memory_dir": key, **entry}
                for entry in running.sessions.status()
            )
        return {"sessions": sessions}

    @table.method("session.close")
    async def session_close(params: dict[str, Any]) -> SessionCloseReply:
        p.known_only(params, ("session_id",))
        session_id = check_session_id(params.get("session_id"))
        async with session_actor(supervisor, session_id) as actor:
            out = await actor.session_close(session_id)
        supervisor.session_routes.pop(session_id, None)
        return out
