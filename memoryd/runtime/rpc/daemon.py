"""Socket methods of the daemon itself: daemon.ping, daemon.status."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, cast

import psutil

from memoryd import __version__
from memoryd.core import params as p
from memoryd.core.replies import DaemonStatusReply, PingReply
from memoryd.providers.factory import describe
from memoryd.runtime.rpc.context import DaemonContext, running_loop
from memoryd.runtime.rpc.table import MethodTable


def register(table: MethodTable, ctx: DaemonContext) -> None:
    @table.method("daemon.ping")
    async def ping(params: dict[str, Any]) -> PingReply:
        return {"ok": True}

    @table.method("daemon.status")
    async def status(params: dict[str, Any]) -> DaemonStatusReply:
        p.known_only(params, ())
        proc = psutil.Process()
        provider = ctx.supervisor.provider
        out: DaemonStatusReply = {
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
        extras: dict[str, Any] = {}
        for extra in ctx.extra_status:  # restart_pending, service, confluence, secrets
            extras.update(extra())
        return cast(DaemonStatusReply, {**out, **extras})
