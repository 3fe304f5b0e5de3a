"""The daemon's method table: every method family registered in one table."""

from __future__ import annotations

from memoryd.runtime.rpc import (
    agents,
    confluence,
    daemon,
    dream,
    hooks,
    index,
    memory,
    secrets,
    sessions,
)
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.table import MethodTable

FAMILIES = (daemon, memory, index, sessions, hooks, dream, agents, confluence, secrets)


def build_methods(ctx: DaemonContext) -> MethodTable:
    """A table with every family's methods (``module.register(table, ctx)`` each)."""
    table = MethodTable()
    for family in FAMILIES:
        family.register(table, ctx)
    return table
