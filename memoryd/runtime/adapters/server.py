"""The JSON-RPC server on a Unix socket (SPEC §11, §14, §15), generic over a dispatch function.

:meth:`SocketServer.serve`, start to stop:

1. prepare the socket's directory: create it ``0700``; refuse one that is writable by group or
   others, or belongs to another user (:class:`~memoryd.errors.ConfigError` naming it);
2. take ``<socket>.lock`` (``flock``, holds our pid) — a second daemon on the same path gets
   :class:`~memoryd.errors.AlreadyRunning`, and so does one finding something answering on
   the socket; a socket file nobody answers on is stale and replaced;
3. listen, ``chmod 0600`` the socket, then ``task_status.started()`` (the moment to send
   ``READY=1``);
4. serve until :meth:`SocketServer.stop`. Per connection: on Linux the peer's uid is checked
   (``SO_PEERCRED``) and other users are disconnected unanswered. At most ``max_connections``
   are served at once (they are all ours): one more takes the place of the longest-connected
   client holding a partial request line (a client that sends half a line and waits is the
   cheapest way to hold a descriptor), and when no connection holds a partial line the new
   one gets a JSON-RPC error line (``too_many_connections``) and is closed — the listener
   never starves, whatever clients do. Then one JSON-RPC message per line; a partial line
   older than ``request_timeout`` seconds gets an error (``request_timeout``) and the
   connection is closed (an idle connection between lines may stay). Each request runs in
   its own task (a batch: one task running its members, answered as one array; at most
   ``max_in_flight`` per connection;
   beyond that the connection is not read, so a client cannot queue unbounded work) and its
   reply is written when it completes, carrying its id; writes are serialised and each must
   finish within ``send_timeout`` or the connection is given up (a client that stops reading
   cannot make the daemon buffer without bound). A line over ``max_request_bytes`` gets an
   error (-32600, ``request_too_large``) and the connection is closed; EOF mid-line just
   closes. An exception from dispatch that is not a :class:`~memoryd.errors.MemorydError` is
   logged and answered with -32603; nothing a client sends can stop the server;
5. stop: stop accepting and remove the socket file, stop reading requests, give in-flight
   requests ``stop_timeout`` seconds to answer, cancel the rest, close the connections and
   release the lock. Cancelling :meth:`~SocketServer.serve` skips the grace period but still
   cleans up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import anyio
import structlog
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup, TaskStatus

from memoryd.core.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    REQUEST_TIMEOUT,
    REQUEST_TOO_LARGE,
    SERVER_ERROR,
    Batch,
    ErrorReply,
    Request,
    decode_line,
    encode_batch,
    encode_error,
    encode_result,
    error_reply,
)
from memoryd.errors import (
    AlreadyRunning,
    ConfigError,
    TooManyConnections,
    only_error,
)
from memoryd.store.files import make_private_dirs

Dispatch = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``(method, params) → JSON-able result``; raises MemorydError subclasses for errors."""

log = structlog.get_logger(__name__)

_SUN_PATH_MAX: Final = 107  # bytes in sockaddr_un.sun_path, minus the terminating NUL
_PROBE_TIMEOUT: Final = 2.0
_ACCEPT_BACKOFF: Final = 0.1
_REFUSE_TIMEOUT: Final = 1.0  # seconds to write the refusal line to a connection over the cap
_READ_SIZE: Final = 65536


class SocketServer:
    """Serves ``dispatch`` over JSON-RPC on the Unix socket at ``path``.

    Run :meth:`serve` in a task group (``await tg.start(server.serve)`` returns once the
    socket listens); call :meth:`stop` from the event loop to stop it gracefully.
    """

    def __init__(
        self,
        path: Path,
        dispatch: Dispatch,
        *,
        max_request_bytes: int = 1_048_576,
        max_in_flight: int = 64,
        send_timeout: float = 30.0,
        stop_timeout: float = 5.0,
        request_timeout: float = 30.0,
        max_connections: int = 512,
    ) -> None:
        self.path = path
        self._dispatch = dispatch
        self._max_request_bytes = max_request_bytes
        self._request_timeout = request_timeout
        self._max_connections = max_connections
        self.refused = 0
        """Connections refused because ``max_connections`` were open (since start)."""
        self.evicted = 0
        """Connections closed to make room: each held a partial request line."""
        self.timed_out = 0
        """Connections closed because a partial line was older than ``request_timeout``."""
        self._max_in_flight = max_in_flight
        self._send_timeout = send_timeout
        self._stop_timeout = stop_timeout
        self._stopping = False
        self._stop_requested: anyio.Event | None = None
        self._drained: anyio.Event | None = None
        # In the order they were accepted (see _make_room).
        self._connections: dict[_Connection, None] = {}
        self._socket_id: tuple[int, int] | None = None

    @property
    def connections(self) -> int:
        """How many client connections are open."""
        return len(self._connections)

    def stop(self) -> None:
        """Ask :meth:`serve` to stop gracefully (idempotent; call from the event loop)."""
        self._stopping = True
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and answer until :meth:`stop`; raise AlreadyRunning or ConfigError at start."""
        self._stop_requested = anyio.Event()
        self._drained = anyio.Event()
        if self._stopping:
            self._stop_requested.set()
        _check_path_length(self.path)
        _prepare_directory(self.path.parent)
        lock_fd = _take_lock(self.path)
        try:
            await _clear_stale_socket(self.path)
            listener = await self._listen()
            try:
                await self._serve(listener, task_status)
            finally:
                with anyio.CancelScope(shield=True):
                    await listener.aclose()
                self._remove_socket_file()
        finally:
            os.close(lock_fd)
        log.info("server.stopped", path=str(self.path))

    async def _listen(self) -> SocketListener:
        try:
            listener = await anyio.create_unix_listener(self.path, mode=0o600)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {self.path}: {exc.strerror or exc}", key="daemon.socket"
            ) from exc
        st = self.path.lstat()
        self._socket_id = (st.st_dev, st.st_ino)
        return listener

    async def _serve(self, listener: SocketListener, task_status: TaskStatus[None]) -> None:
        assert self._stop_requested is not None and self._drained is not None
        async with anyio.create_task_group() as tg:
            accepting = anyio.CancelScope()
            tg.start_soon(self._accept, listener, tg, accepting)
            log.info("server.listening", path=str(self.path), pid=os.getpid())
            task_status.started()
            await self._stop_requested.wait()

            log.info("server.stopping", connections=len(self._connections))
            accepting.cancel()
            await listener.aclose()
            self._remove_socket_file()
            for connection in list(self._connections):
                connection.stop_reading()
            if self._connections:
                with anyio.move_on_after(self._stop_timeout):
                    await self._drained.wait()
            tg.cancel_scope.cancel()

    async def _accept(
        self, listener: SocketListener, tg: TaskGroup, accepting: anyio.CancelScope
    ) -> None:
        with accepting:
            while True:
                try:
                    stream = await listener.accept()
                except anyio.BrokenResourceError as exc:  # EMFILE, ENFILE, ENOBUFS …
                    log.warning("server.accept_failed", error=str(exc.__cause__ or exc))
                    await anyio.sleep(_ACCEPT_BACKOFF)
                    continue
                tg.start_soon(self._serve_connection, stream)

    async def _serve_connection(self, stream: SocketStream) -> None:
        async with stream:
            if self._stopping or not _peer_allowed(stream):
                return
            if len(self._connections) >= self._max_connections and not self._make_room():
                await self._refuse(stream)
                return
            connection = _Connection(
                stream,
                self._dispatch,
                max_request_bytes=self._max_request_bytes,
                max_in_flight=self._max_in_flight,
                send_timeout=self._send_timeout,
                request_timeout=self._request_timeout,
            )
            self._connections[connection] = None
            try:
                await connection.run()
            except Exception:  # a bug here must not take the daemon down
                log.exception("server.connection_failed")
            finally:
                self._connections.pop(connection, None)
                if connection.timed_out:
                    self.timed_out += 1
                if self._stopping and not self._connections and self._drained is not None:
                    self._drained.set()

    def _make_room(self) -> bool:
        """Close the longest-connected client holding a partial line; False if none does."""
        # The connection accepted first among those holding a partial line (connections are
        # kept in accept order: most often the first one looked at).
        oldest = next((c for c in self._connections if c.partial_since is not None), None)
        if oldest is None:
            return False
        self._connections.pop(oldest, None)
        oldest.evict()
        self.evicted += 1
        if self.evicted == 1 or self.evicted % 100 == 0:  # a flood must not flood the log
            log.warning(
                "server.connection_evicted",
                reason="max_connections reached; it held a partial request line",
                max_connections=self._max_connections,
                evicted=self.evicted,
            )
        return True

    async def _refuse(self, stream: SocketStream) -> None:
        """Tell a connection over the cap why it is closed (one error line), then close it."""
        self.refused += 1
        if self.refused == 1 or self.refused % 100 == 0:
            log.warning(
                "server.connection_refused",
                max_connections=self._max_connections,
                refused=self.refused,
            )
        error = TooManyConnections(
            f"too many connections: memoryd serves at most {self._max_connections} at once "
            "(daemon.max_connections); retry later",
            max_connections=self._max_connections,
        )
        reply = ErrorReply(None, SERVER_ERROR, error.message, error.to_dict())
        with anyio.move_on_after(_REFUSE_TIMEOUT):
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.send(reply.encode())

    def _remove_socket_file(self) -> None:
        """Unlink the socket file if it is still the one we bound."""
        if self._socket_id is None:
            return
        with contextlib.suppress(OSError):
            st = self.path.lstat()
            if (st.st_dev, st.st_ino) == self._socket_id:
                self.path.unlink()
        self._socket_id = None


class _Connection:
    """One client connection: reads requests, runs each in a task, writes replies."""

    def __init__(
        self,
        stream: SocketStream,
        dispatch: Dispatch,
        *,
        max_request_bytes: int,
        max_in_flight: int,
        send_timeout: float,
        request_timeout: float,
    ) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._request_timeout = request_timeout
        self.partial_since: float | None = None
        """When (monotonic) the first byte of the request line being read arrived."""
        self.timed_out = False
        self._dispatch = dispatch
        self._max_request_bytes = max_request_bytes
        self._send_timeout = send_timeout
        self._slots = anyio.Semaphore(max_in_flight)
        self._write_lock = anyio.Lock()
        self._reading = anyio.CancelScope()
        self._dead = False

    def stop_reading(self) -> None:
        """Read no further requests; those in flight still answer."""
        self._reading.cancel()

    def evict(self) -> None:
        """Close this connection now (its place is given to a new one)."""
        self._give_up()
        with contextlib.suppress(OSError):
            self._stream.extra(SocketAttribute.raw_socket).shutdown(socket.SHUT_RDWR)

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            with self._reading:
                await self._read_requests(tg)
        # Leaving the task group waits for the requests still in flight.

    async def _read_requests(self, tg: TaskGroup) -> None:
        while True:
            try:
                line = await self._read_line()
            except _LineTooLarge:
                await self._refuse_too_large()
                return
            except TimeoutError:
                await self._refuse_timed_out()
                return
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # EOF (maybe mid-line) or the peer is gone
            message = decode_line(line)
            if message is None:
                continue
            if isinstance(message, ErrorReply):
                log.info("rpc.bad_request", code=message.code, error=message.message)
                await self._send(message.encode())
                continue
            await self._slots.acquire()
            if isinstance(message, Batch):
                tg.start_soon(self._answer_batch, message)
            else:
                tg.start_soon(self._answer, message)

    async def _read_line(self) -> bytes:
        """The next request line (without its newline).

        Waiting between lines has no limit; once a line has begun it must end within
        ``request_timeout`` seconds (TimeoutError) and ``max_request_bytes`` (_LineTooLarge).
        """
        buffer = self._buffer
        searched = 0
        while True:
            end = buffer.find(b"\n", searched)
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                self.partial_since = time.monotonic() if buffer else None
                if len(line) > self._max_request_bytes:
                    raise _LineTooLarge
                return line
            if len(buffer) > self._max_request_bytes:
                raise _LineTooLarge
            searched = len(buffer)
            if self.partial_since is None:
                chunk = await self._stream.receive(_READ_SIZE)
                self.partial_since = time.monotonic()
            else:
                left = self.partial_since + self._request_timeout - time.monotonic()
                with anyio.fail_after(max(left, 0.0)):
                    chunk = await self._stream.receive(_READ_SIZE)
            buffer += chunk

    async def _refuse_timed_out(self) -> None:
        timeout = self._request_timeout
        self.timed_out = True
        log.warning("rpc.request_timeout", timeout_secs=timeout, pending_bytes=len(self._buffer))
        reply = ErrorReply(
            None,
            INVALID_REQUEST,
            f"request timed out: a request line must be complete within {timeout:g} s "
            "(daemon.request_timeout_secs)",
            {"code": REQUEST_TIMEOUT, "timeout_secs": timeout},
        )
        with anyio.move_on_after(_REFUSE_TIMEOUT):
            await self._send(reply.encode())

    async def _refuse_too_large(self) -> None:
        limit = self._max_request_bytes
        log.warning("rpc.request_too_large", max_bytes=limit)
        reply = ErrorReply(
            None,
            INVALID_REQUEST,
            f"request too large: a line may hold at most {limit} bytes",
            {"code": REQUEST_TOO_LARGE, "max_bytes": limit},
        )
        await self._send(reply.encode())

    async def _answer(self, request: Request) -> None:
        try:
            reply = await self._call(request)
            if not request.notification:
                await self._send(reply)
        finally:
            self._slots.release()

    async def _answer_batch(self, batch: Batch) -> None:
        """Run a batch's members (in order of arrival, concurrently, as pipelined requests
        run); send their replies as one array once all have answered."""
        replies: list[bytes | None] = [None] * len(batch.members)

        async def run(index: int, request: Request) -> None:
            reply = await self._call(request)
            replies[index] = None if request.notification else reply

        try:
            async with anyio.create_task_group() as tg:
                for index, member in enumerate(batch.members):
                    if isinstance(member, ErrorReply):
                        replies[index] = member.encode()
                    else:
                        tg.start_soon(run, index, member)
            payload = encode_batch([reply for reply in replies if reply is not None])
            if payload:
                await self._send(payload)
        finally:
            self._slots.release()

    async def _call(self, request: Request) -> bytes:
        try:
            result = await self._dispatch(request.method, request.params)
        except Exception as exc:
            error = only_error(exc)
            if error is None:
                log.exception("rpc.internal_error", method=request.method)
                return encode_error(request.id, INTERNAL_ERROR, "internal error (see daemon log)")
            log.info("rpc.error", method=request.method, code=error.code)
            return error_reply(request.id, error).encode()
        try:
            return encode_result(request.id, result)
        except (TypeError, ValueError):
            log.exception("rpc.unencodable_result", method=request.method)
            return encode_error(request.id, INTERNAL_ERROR, "internal error: result is not JSON")

    async def _send(self, payload: bytes) -> None:
        async with self._write_lock:
            if self._dead:
                return
            try:
                with anyio.fail_after(self._send_timeout):
                    await self._stream.send(payload)
            except TimeoutError:
                log.warning("rpc.send_timeout", timeout=self._send_timeout)
                self._give_up()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._give_up()

    def _give_up(self) -> None:
        """The peer is gone or not reading: send and read nothing more on this connection."""
        self._dead = True
        self._reading.cancel()


class _LineTooLarge(Exception):
    """A request line grew past ``max_request_bytes``."""


def _peer_allowed(stream: SocketStream) -> bool:
    """On Linux, whether the peer runs as our uid (SO_PEERCRED); elsewhere the 0700 dir rules."""
    if sys.platform != "linux":
        return True
    raw = stream.extra(SocketAttribute.raw_socket)
    try:
        creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError as exc:
        log.warning("server.peer_unknown", error=str(exc))
        return False
    pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        log.warning("server.peer_refused", peer_uid=uid, peer_pid=pid)
        return False
    return True


def _check_path_length(path: Path) -> None:
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise ConfigError(
            f"socket path {path} is longer than the {_SUN_PATH_MAX} bytes a Unix socket allows",
            key="daemon.socket",
        )


def _prepare_directory(directory: Path) -> None:
    """Create ``directory`` 0700, or check that an existing one is private to us."""
    try:
        make_private_dirs(directory)  # each new directory 0700, whatever the umask
    except OSError as exc:
        raise ConfigError(
            f"cannot create socket directory {directory}: {exc.strerror or exc}",
            key="daemon.socket",
        ) from exc
    st = directory.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"socket directory {directory} is not a directory", key="daemon.socket")
    if st.st_uid != os.getuid():
        raise ConfigError(
            f"refusing socket directory {directory}: it belongs to uid {st.st_uid}, not to us",
            key="daemon.socket",
        )
    if st.st_mode & 0o022:
        raise ConfigError(
            f"refusing socket directory {directory}: it is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o}); use a private directory or "
            f"`chmod 700 {directory}`",
            key="daemon.socket",
        )


def _take_lock(path: Path) -> int:
    """Hold ``<path>.lock`` for the server's life; another holder → AlreadyRunning."""
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise AlreadyRunning(
            f"memoryd is already running on {path}" + (f" (pid {holder})" if holder else ""),
            path=str(path),
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


async def _clear_stale_socket(path: Path) -> None:
    """Remove a socket file nobody answers on; raise if someone does."""
    if not _socket_file_exists(path):
        return
    if await _answers(path):
        raise AlreadyRunning(f"another process is listening on {path}", path=str(path))
    log.info("server.stale_socket_replaced", path=str(path))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _socket_file_exists(path: Path) -> bool:
    """Whether a socket file is at ``path``; something else there is a ConfigError."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(
            f"{path} exists and is not a socket; remove it or set another daemon.socket",
            key="daemon.socket",
        )
    return True


async def _answers(path: Path) -> bool:
    """Whether something accepts connections on the socket at ``path``."""
    with anyio.move_on_after(_PROBE_TIMEOUT):
        try:
            stream = await anyio.connect_unix(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except BlockingIOError:  # a full backlog: someone is there
            return True
        except OSError as exc:
            raise ConfigError(
                f"cannot tell whether {path} is in use: {exc.strerror or exc}",
                key="daemon.socket",
            ) from exc
        await stream.aclose()
    return True
