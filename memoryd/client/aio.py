"""The anyio client (:class:`AsyncClient`): concurrent calls pipelined over one connection.

Imported only when asked for (``memoryd.client.AsyncClient`` loads it on first use), so the
blocking client's users do not import anyio.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from memoryd.client.replies import (
    DEFAULT_TIMEOUT,
    MAX_REPLY_BYTES,
    closed,
    error_from_reply,
    not_running,
    peer_closed,
    result,
    timed_out,
)
from memoryd.core.protocol import ErrorReply, RequestId, Response, decode_response, encode_request
from memoryd.errors import MemorydError


@dataclass(eq=False)
class _Connection:
    """One open connection of an AsyncClient, shared by its concurrent calls."""

    stream: SocketStream
    reader: BufferedByteReceiveStream
    raw: socket.socket
    write_lock: anyio.Lock = field(default_factory=anyio.Lock)
    read_lock: anyio.Lock = field(default_factory=anyio.Lock)
    replies: dict[RequestId, Response] = field(default_factory=dict)
    abandoned: set[RequestId] = field(default_factory=set)
    # Why the connection is unusable: "closed", a message, or an error reply without an id
    # (the daemon could not read which request it answers, e.g. request_too_large).
    failure: str | ErrorReply | None = None
    in_flight: int = 0


class AsyncClient:
    """An anyio client; concurrent calls are pipelined over one connection."""

    def __init__(
        self,
        path: Path | str,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._max_reply_bytes = max_reply_bytes
        self._conn: _Connection | None = None
        self._connect_lock: anyio.Lock | None = None
        self._next_id = 1

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (the next call opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.failure = conn.failure or "closed"
            await conn.stream.aclose()

    async def call(self, method: str, /, **params: Any) -> Any:
        """Call ``method`` with keyword parameters; return its result."""
        return await self.request(method, params)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call ``method`` with a params object; return its result."""
        request_id = self._next_id
        self._next_id += 1
        line = encode_request(request_id, method, params or {})
        try:
            with anyio.fail_after(self.timeout):
                conn = await self._connection()
                conn.in_flight += 1
                try:
                    await self._send(conn, line)
                    response = await self._receive(conn, request_id)
                finally:
                    conn.in_flight -= 1
        except TimeoutError:
            raise timed_out(self.timeout) from None
        return result(response)

    async def _connection(self) -> _Connection:
        if self._connect_lock is None:
            self._connect_lock = anyio.Lock()
        async with self._connect_lock:
            conn = self._conn
            if conn is not None and (
                conn.failure is not None
                or (conn.in_flight == 0 and not conn.reader.buffer and peer_closed(conn.raw))
            ):
                await self.aclose()
            if self._conn is None:
                try:
                    stream = await anyio.connect_unix(self.path)
                except FileNotFoundError:
                    raise not_running(self.path, "no socket") from None
                except ConnectionRefusedError:
                    raise not_running(self.path, "nothing listening") from None
                except OSError as exc:
                    raise not_running(self.path, exc.strerror or str(exc)) from exc
                raw = stream.extra(SocketAttribute.raw_socket)
                self._conn = _Connection(stream, BufferedByteReceiveStream(stream), raw)
            return self._conn

    async def _send(self, conn: _Connection, line: bytes) -> None:
        async with conn.write_lock:
            if conn.failure is not None:
                raise self._failure(conn)
            try:
                await conn.stream.send(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # the daemon may have answered before closing (e.g. request too large)
            except BaseException:
                conn.failure = "a call was cancelled while sending"  # framing is broken now
                raise

    async def _receive(self, conn: _Connection, request_id: RequestId) -> Response:
        try:
            while request_id not in conn.replies:
                if conn.failure is not None:
                    raise self._failure(conn)
                async with conn.read_lock:
                    if request_id not in conn.replies and conn.failure is None:
                        await self._read_one(conn)
            return conn.replies.pop(request_id)
        except BaseException:
            if conn.replies.pop(request_id, None) is None:
                conn.abandoned.add(request_id)  # its reply, when it comes, is dropped
            raise

    async def _read_one(self, conn: _Connection) -> None:
        try:
            line = await conn.reader.receive_until(b"\n", self._max_reply_bytes)
        except (anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
            conn.failure = "closed"
            return
        except anyio.DelimiterNotFound:
            conn.failure = f"a reply exceeds {self._max_reply_bytes} bytes"
            return
        try:
            response = decode_response(line)
        except ValueError as exc:
            conn.failure = f"the daemon sent a malformed reply: {exc}"
            return
        if response.id is None and response.error is not None:
            conn.failure = response.error
        elif response.id in conn.abandoned:
            conn.abandoned.discard(response.id)
        else:
            conn.replies[response.id] = response

    def _failure(self, conn: _Connection) -> MemorydError:
        if isinstance(conn.failure, ErrorReply):
            return error_from_reply(conn.failure)
        if conn.failure == "closed":
            return closed(self.path)
        return MemorydError(conn.failure or "connection failed")
