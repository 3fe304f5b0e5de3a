"""Clients of the daemon's socket protocol (SPEC §11): :class:`AsyncClient` and :class:`Client`.

    with Client(socket_path) as client:                      # blocking, one call at a time
        client.call("daemon.ping")                           # → {"ok": True}

    async with AsyncClient(socket_path) as client:           # anyio; calls may run concurrently
        await client.call("memory.search", workspace="/src/app", query="sqlite")
        await client.request("memory.get", {"workspace": "/src/app", "path": p, "from": 3})

``call(method, **params)`` is ``request(method, params)`` for parameter names that are Python
identifiers (``from`` is not: use :meth:`~Client.request`). Request ids count up from 1 per
client. The connection is opened on first use and reopened after it was lost.

Errors:

- an error reply raises the :class:`~memoryd.errors.MemorydError` subclass named by its
  ``error.data.code`` (:func:`error_from_reply`), e.g. ``InvalidParams``, ``MethodNotFound``,
  ``WorkspaceNotFound``; a code with no class (``parse_error``, ``request_too_large`` …)
  raises a plain ``MemorydError`` whose ``data`` holds ``remote_code``;
- no daemon (no socket file, connection refused, or the connection closed before the reply)
  raises :class:`~memoryd.errors.DaemonNotRunning`, whose message says to run
  ``memoryd serve``;
- no reply within ``timeout`` seconds raises :class:`~memoryd.errors.DaemonTimeout`
  (``daemon_timeout``; also a ``TimeoutError``).

The package: ``sync.py`` (:class:`Client`, standard library only), ``aio.py``
(:class:`AsyncClient`, anyio; imported on first use of the name, so that ``memoryd hook`` and
the other blocking users never load anyio), ``replies.py`` (the errors both raise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memoryd.client.replies import (
    DEFAULT_TIMEOUT,
    ERROR_CLASSES,
    MAX_REPLY_BYTES,
    error_from_reply,
)
from memoryd.client.sync import Client

if TYPE_CHECKING:
    from memoryd.client.aio import AsyncClient

__all__ = [
    "DEFAULT_TIMEOUT",
    "ERROR_CLASSES",
    "MAX_REPLY_BYTES",
    "AsyncClient",
    "Client",
    "error_from_reply",
]


def __getattr__(name: str) -> object:
    """``AsyncClient`` on first use (PEP 562): importing anyio costs the blocking path ~10 ms."""
    if name == "AsyncClient":
        from memoryd.client.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
