"""Socket methods for sub-agent runtime configuration (SPEC §9): agents.resolve, agents.list.

They need no workspace actor: discovery reads the project's and the user's ``.grok`` files
at call time (in a worker thread), so an edited definition applies to the next spawn.
Parameter errors name the parameter in ``error.data.param`` like every other method's,
down to the override (``overrides.reasoning_effort``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from memoryd.core import params as p
from memoryd.core.agents.resolve import Overrides
from memoryd.core.config import Config
from memoryd.core.replies import AgentsListReply, AgentsResolveReply
from memoryd.errors import InvalidParams, WorkspaceNotFound
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.prologue import workspace_param
from memoryd.runtime.rpc.table import MethodTable
from memoryd.store.agents_loader import default_user_dir, list_agents, resolve


def user_dir_of(config: Config) -> Path:
    raw = config.agents.user_dir
    return Path(raw).expanduser() if raw else default_user_dir()


def _workspace(params: dict[str, Any]) -> Path:
    raw = workspace_param(params)
    path = Path(raw)
    if not path.is_dir():
        raise WorkspaceNotFound(f"workspace {raw!r} is not a directory", workspace=raw)
    return path


def _naming_param(exc: InvalidParams) -> InvalidParams:
    """The same error with the offending key as ``param`` (the core names it ``key``)."""
    if "param" in exc.data or "key" not in exc.data:
        return exc
    return InvalidParams(exc.message, param=exc.data["key"])


def register(table: MethodTable, ctx: DaemonContext) -> None:
    config, config_dir = ctx.config, ctx.config_dir

    @table.method("agents.resolve")
    async def agents_resolve(params: dict[str, Any]) -> AgentsResolveReply:
        p.known_only(params, ("workspace", "subagent_type", "overrides", "parent_model"))
        workspace = _workspace(params)
        subagent_type = p.string(params, "subagent_type", max_len=200)
        parent_model = p.string(params, "parent_model", None, max_len=500)
        raw_overrides = params.get("overrides")
        if raw_overrides is not None and not isinstance(raw_overrides, dict):
            raise InvalidParams("parameter 'overrides' must be an object", param="overrides")
        try:
            overrides = Overrides.from_mapping(raw_overrides)
        except InvalidParams as exc:
            raise _naming_param(exc) from None
        cfg = config()

        def run() -> AgentsResolveReply:
            try:
                answer = resolve(
                    workspace,
                    subagent_type,
                    overrides,
                    cfg.agents,
                    user_dir_of(cfg),
                    parent_model,
                    config_dir=config_dir(),
                )
            except InvalidParams as exc:
                raise _naming_param(exc) from None
            return answer.to_dict()

        return await anyio.to_thread.run_sync(run)

    @table.method("agents.list")
    async def agents_list(params: dict[str, Any]) -> AgentsListReply:
        p.known_only(params, ("workspace",))
        workspace = _workspace(params)
        cfg = config()

        def run() -> AgentsListReply:
            listing = list_agents(workspace, cfg.agents, user_dir_of(cfg), config_dir=config_dir())
            return listing.to_dict()

        return await anyio.to_thread.run_sync(run)
