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
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from memoryd import errors
from memoryd.core.protocol import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    ErrorReply,
    RequestId,
    Response,
    decode_response,
    encode_request,
)
from memoryd.errors import (
    DaemonNotRunning,
    DaemonTimeout,
    InvalidParams,
    MemorydError,
    MethodNotFound,
)

DEFAULT_TIMEOUT: Final = 30.0
MAX_REPLY_BYTES: Final = 64 * 1024 * 1024
_START_HINT: Final = "start it with `memoryd serve`"


def _error_classes() -> dict[str, type[MemorydError]]:
    """Every error class of :mod:`memoryd.errors` by its ``code``."""
    classes: dict[str, type[MemorydError]] = {}
    pending: list[type[MemorydError]] = [MemorydError]
    while pending:
        cls = pending.pop()
        if cls.__module__ == errors.__name__:
            classes.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return classes


ERROR_CLASSES: Final = _error_classes()
_BY_RPC_CODE: Final[dict[int, type[MemorydError]]] = {
    INVALID_PARAMS: InvalidParams,
    METHOD_NOT_FOUND: MethodNotFound,
}


def error_from_reply(reply: ErrorReply) -> MemorydError:
    """The exception an error reply stands for (see the module docstring)."""
    data = dict(reply.data)
    code = data.pop("code", None)
    cls = ERROR_CLASSES.get(code) if isinstance(code, str) else None
    cls = cls or _BY_RPC_CODE.get(reply.code)
    if cls is None:
        return MemorydError(reply.message, remote_code=code, rpc_code=reply.code)
    try:
        return cls(reply.message, **data)
    except TypeError:  # data that does not fit the class's constructor
        return cls(reply.message)


def _result(response: Response) -> Any:
    if response.error is not None:
        raise error_from_reply(response.error)
    return response.result


def _not_running(path: Path, reason: str) -> DaemonNotRunning:
    return DaemonNotRunning(
        f"memoryd is not running ({reason} on {path}); {_START_HINT}", path=str(path)
    )


def _timed_out(timeout: float | None) -> DaemonTimeout:
    return DaemonTimeout(f"memoryd did not answer within {timeout} s", timeout=timeout)


def _closed(path: Path) -> DaemonNotRunning:
    return DaemonNotRunning(
        f"memoryd closed the connection on {path} before answering; if it stopped, {_START_HINT}",
        path=str(path),
    )


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the daemon closed this idle connection (e.g. it restarted since the last call)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _decode(line: bytes) -> Response:
    try:
        return decode_response(line)
    except ValueError as exc:
        raise MemorydError(f"the daemon sent a malformed reply: {exc}") from None


class Client:
    """A blocking client over a plain socket; one call at a time (not thread-safe)."""

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
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        self._next_id = 1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the next call opens a new one)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer.clear()

    def call(self, method: str, /, **params: Any) -> Any:
        """Call ``method`` with keyword parameters; return its result."""
        return self.request(method, params)

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call ``method`` with a params object; return its result."""
        request_id = self._next_id
        self._next_id += 1
        line = encode_request(request_id, method, params or {})
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        sock = self._connect()
        try:
            try:
                sock.settimeout(self.timeout)
                sock.sendall(line)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon may have answered before closing (e.g. request too large)
            while True:
                response = _decode(self._read_line(sock, deadline))
                if response.id == request_id:
                    break
                if response.id is None and response.error is not None:
                    raise error_from_reply(response.error)  # e.g. request_too_large
        except TimeoutError:
            self.close()  # a late reply or a half-sent request would confuse the next call
            raise _timed_out(self.timeout) from None
        except OSError as exc:
            self.close()
            raise _closed(self.path) from exc
        except MemorydError:
            self.close()
            raise
        return _result(response)

    def _connect(self) -> socket.socket:
        if self._sock is not None and _peer_closed(self._sock):
            self.close()
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.path))
            except FileNotFoundError:
                sock.close()
                raise _not_running(self.path, "no socket") from None
            except ConnectionRefusedError:
                sock.close()
                raise _not_running(self.path, "nothing listening") from None
            except OSError as exc:
                sock.close()
                raise _not_running(self.path, exc.strerror or str(exc)) from exc
            self._sock = sock
        return self._sock

    def _read_line(self, sock: socket.socket, deadline: float | None) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > self._max_reply_bytes:
                raise MemorydError(f"the daemon's reply exceeds {self._max_reply_bytes} bytes")
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                raise _closed(self.path)
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line


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
            raise _timed_out(self.timeout) from None
        return _result(response)

    async def _connection(self) -> _Connection:
        if self._connect_lock is None:
            self._connect_lock = anyio.Lock()
        async with self._connect_lock:
            conn = self._conn
            if conn is not None and (
                conn.failure is not None
                or (conn.in_flight == 0 and not conn.reader.buffer and _peer_closed(conn.raw))
            ):
                await self.aclose()
            if self._conn is None:
                try:
                    stream = await anyio.connect_unix(self.path)
                except FileNotFoundError:
                    raise _not_running(self.path, "no socket") from None
                except ConnectionRefusedError:
                    raise _not_running(self.path, "nothing listening") from None
                except OSError as exc:
                    raise _not_running(self.path, exc.strerror or str(exc)) from exc
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
            return _closed(self.path)
        return MemorydError(conn.failure or "connection failed")
