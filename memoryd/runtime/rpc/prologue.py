"""The prologue of every method that works on a workspace or a session.

Validate the ``workspace`` parameter → take the request's place in that workspace's
request order → find (or start) its actor::

    async with workspace_actor(ctx.supervisor, params, WRITE) as actor:
        return await actor.remember(text, scope)

The place is taken synchronously, when the handler is dispatched and before it awaits
anything (see :class:`~memoryd.runtime.supervisor.RequestOrder`), so call the helper before
the handler's first ``await``. A ``WRITE`` runs after the writes sent before it and before
the ones sent after it; a ``READ`` waits for the writes sent before it and holds nothing
back. The body of the ``async with`` runs in the slot; a call that must run *outside* it
uses :func:`session_actor_outside_order` and says why in a comment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

from memoryd.core import params as p
from memoryd.runtime.supervisor import RequestOrder, Supervisor
from memoryd.runtime.workspace.actor import WorkspaceActor

Slot = Literal["read", "write"]
READ: Slot = "read"
WRITE: Slot = "write"


def workspace_param(params: dict[str, Any]) -> str:
    """The ``workspace`` parameter: an absolute path (not resolved here)."""
    workspace: str = p.absolute_path(params, "workspace")
    return workspace


def _place(order: RequestOrder, key: str, slot: Slot) -> AbstractAsyncContextManager[None]:
    return order.write(key) if slot == WRITE else order.read(key)


def workspace_actor(
    supervisor: Supervisor, params: dict[str, Any], slot: Slot
) -> AbstractAsyncContextManager[WorkspaceActor]:
    """The actor of the request's ``workspace``, in the request's place in its order."""
    return ordered_actor(supervisor, workspace_param(params), slot)


@asynccontextmanager
async def ordered_actor(
    supervisor: Supervisor, workspace: str, slot: Slot
) -> AsyncIterator[WorkspaceActor]:
    """The actor of ``workspace`` (an absolute path, already checked), in the request's
    place in that workspace's order."""
    async with _place(supervisor.order, workspace, slot):
        yield await supervisor.actor_for(workspace)


@asynccontextmanager
async def session_actor(
    supervisor: Supervisor, session_id: str, slot: Slot = WRITE
) -> AsyncIterator[WorkspaceActor]:
    """The actor holding an open session, in the request's place in the session's order
    (``session.*`` after ``session.open`` name no workspace)."""
    async with _place(supervisor.order, f"session:{session_id}", slot):
        yield await supervisor.actor_for_session(session_id)


async def session_actor_outside_order(supervisor: Supervisor, session_id: str) -> WorkspaceActor:
    """The session's actor, found in the request's place in the session's order — which is
    then left: the call that follows runs **outside the order slot** (the caller says why)."""
    async with session_actor(supervisor, session_id) as actor:
        return actor
