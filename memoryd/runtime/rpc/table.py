"""A method table: async handlers registered by name, callable as the socket server's dispatch.

    table = MethodTable()

    @table.method("daemon.ping")
    async def ping(params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    server = SocketServer(path, table, max_request_bytes=...)

An unknown name raises :class:`~memoryd.errors.MethodNotFound` (JSON-RPC -32601).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from memoryd.errors import MethodNotFound

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
"""An async handler: the request's params in, a JSON-able result out."""

H = TypeVar("H", bound=Handler)


class MethodTable:
    """Handlers by method name; ``await table(method, params)`` runs one."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def add(self, name: str, handler: Handler) -> None:
        """Register ``handler`` as ``name``; a name can be registered once."""
        if name in self._handlers:
            raise ValueError(f"method {name!r} is already registered")
        self._handlers[name] = handler

    def method(self, name: str) -> Callable[[H], H]:
        """Decorator form of :meth:`add`."""

        def register(handler: H) -> H:
            self.add(name, handler)
            return handler

        return register

    @property
    def names(self) -> list[str]:
        """The registered method names, sorted."""
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    async def __call__(self, method: str, params: dict[str, Any]) -> Any:
        handler = self._handlers.get(method)
        if handler is None:
            raise MethodNotFound(f"unknown method {method!r}", method=method)
        return await handler(params)
