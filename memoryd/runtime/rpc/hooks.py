"""Socket methods for agent integrations (SPEC §17): ``session.ingest`` and ``hook.run``.

``session.ingest`` reads an agent's transcript into a session (the daemon reads the file
itself: same-uid clients only, as every method; regular files only; bounded reads).
``hook.run`` is one agent hook event (what ``memoryd hook AGENT`` sends): the session is
opened, the slow work (ingest, flush, close) is handed to the workspace's actor and runs
after the reply; the reply holds only what the agent prints (``output``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import structlog

from memoryd.core import params as p
from memoryd.core.hooks import (
    PROMPT_HITS,
    PROMPT_QUERY_CHARS,
    Hit,
    compose_context,
    hook_output,
    parse_event,
    plan_for,
)
from memoryd.core.params import check_session_id
from memoryd.core.replies import HookReply, IngestReply
from memoryd.core.transcripts import FORMATS, Format
from memoryd.errors import MemorydError, NotFound
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.prologue import WRITE, ordered_actor
from memoryd.runtime.rpc.table import MethodTable
from memoryd.runtime.workspace.actor import WorkspaceActor
from memoryd.runtime.workspace.redaction import redact

log = structlog.get_logger(__name__)

AFTER = ("flush", "close", "flush_close")


async def _session_actor(
    ctx: DaemonContext, session_id: str, workspace: str | None, subagent: bool = False
) -> WorkspaceActor:
    """The actor holding ``session_id``; opened in ``workspace`` when it is not open.

    Found outside the session's order slot: an ingest serialises itself (the ingestor's
    per-session lock, from the journaled offset) and its flush or close awaits the chat
    model, which must not hold the session's later requests; the open is a write in the
    workspace's order like ``session.open``."""
    try:
        return await ctx.supervisor.actor_for_session(session_id)
    except NotFound:
        if workspace is None:
            raise
    async with ordered_actor(ctx.supervisor, workspace, WRITE) as actor:
        await ctx.supervisor.open_session(actor, workspace, session_id, subagent)
    return actor


def register(table: MethodTable, ctx: DaemonContext) -> None:
    @table.method("session.ingest")
    async def session_ingest(params: dict[str, Any]) -> IngestReply:
        p.known_only(params, ("session_id", "path", "format", "workspace", "after", "background"))
        session_id = check_session_id(params.get("session_id"))
        path: str = p.absolute_path(params, "path")
        fmt: Format = p.choice(params, "format", FORMATS)
        after = p.choice(params, "after", AFTER, None)
        background = p.boolean(params, "background", False)
        workspace: str | None = p.absolute_path(params, "workspace", None)
        closing = after in ("close", "flush_close")
        if workspace is not None and closing and not await _is_open(ctx, session_id):
            # Outside the order slot: only asks whether the transcript changed since the
            # session was registered (a file check, no memory read or written).
            actor = await ctx.supervisor.actor_for(workspace)
            if await actor.ingestor.unchanged_since_registered(path):
                return {"ingested": 0, "skipped": True}
        actor = await _session_actor(ctx, session_id, workspace)
        return await actor.session_ingest(session_id, path, fmt, after=after, background=background)

    @table.method("hook.run")
    async def hook_run(params: dict[str, Any]) -> HookReply:
        p.known_only(params, ("agent", "event"))
        agent = p.string(params, "agent", max_len=64)
        event = parse_event(agent, params.get("event"))
        check_session_id(event.session_id)
        config = ctx.supervisor.config
        plan = plan_for(event, on_prompt=config.inject.on_prompt)
        if plan.nothing:
            return {"output": None, "event": event.name}
        fmt: Format = event.agent
        workspace = event.cwd
        # Opened by any event: hooks installed in the middle of a session work at once.
        actor = await _session_actor(ctx, event.session_id, workspace)
        if plan.ingest or plan.after:
            await actor.session_ingest(
                event.session_id,
                event.transcript_path if plan.ingest else None,
                fmt,
                after=plan.after,
                background=True,
            )
        # The reads below run outside the workspace's order slot: a hook answers from what
        # is indexed now (best effort, fast) rather than wait for writes sent before it.
        # What leaves for the agent's model is scrubbed (SPEC §18), before it is fitted in
        # max_chars: a secret a person typed into MEMORY.md, or one written before the
        # scrubber, is not injected.
        scrubber = config.secrets.scrubber()

        def scrub(text: str) -> str:
            return redact(scrubber, text, log, "hook.inject")

        context = ""
        if plan.inject == "session":
            # No more than max_chars can be shown: at most 4 UTF-8 bytes each are read.
            workspace_md, global_md = await actor.curated_memory(4 * config.inject.max_chars)
            hits = await _hits(actor, os.path.basename(workspace), ("session",), 3)
            context = compose_context(
                [
                    ("Workspace memory (MEMORY.md)", scrub(workspace_md)),
                    ("Global memory", scrub(global_md)),
                ],
                [dataclasses.replace(h, snippet=scrub(h.snippet)) for h in hits],
                config.inject.max_chars,
            )
        elif plan.inject == "prompt" and event.prompt:
            query = event.prompt[:PROMPT_QUERY_CHARS]
            hits = await _hits(actor, query, None, PROMPT_HITS)
            context = compose_context(
                [],
                [dataclasses.replace(h, snippet=scrub(h.snippet)) for h in hits],
                config.inject.max_chars,
            )
        return {"output": hook_output(event, context), "event": event.name}

    async def _is_open(ctx: DaemonContext, session_id: str) -> bool:
        """Whether the session is open (a lookup, outside any order slot)."""
        try:
            await ctx.supervisor.actor_for_session(session_id)
        except NotFound:
            return False
        return True

    async def _hits(
        actor: WorkspaceActor, query: str, sources: tuple[str, ...] | None, limit: int
    ) -> list[Hit]:
        min_score = ctx.supervisor.config.inject.min_score
        try:
            response = await actor.search(
                query,
                max_results=limit,
                min_score=min_score,
                sources=list(sources) if sources else None,
            )
        except MemorydError:
            return []  # no hits is better than a hook that fails
        return [
            Hit(h.path, h.start_line, h.score, h.snippet)
            for h in response.results
            if h.score >= min_score
        ][:limit]
