"""The blocking client (:class:`Client`): one call at a time over a plain socket.

Standard library only (no anyio): it is what ``memoryd hook`` and the CLI use, and a hook's
whole process is what an agent waits for.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

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
from memoryd.core.protocol import Response, decode_response, encode_request
from memoryd.errors import MemorydError


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
            raise timed_out(self.timeout) from None
        except OSError as exc:
            self.close()
            raise closed(self.path) from exc
        except MemorydError:
            self.close()
            raise
        return result(response)

    def _connect(self) -> socket.socket:
        if self._sock is not None and peer_closed(self._sock):
            self.close()
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.path))
            except FileNotFoundError:
                sock.close()
                raise not_running(self.path, "no socket") from None
            except ConnectionRefusedError:
                sock.close()
                raise not_running(self.path, "nothing listening") from None
            except OSError as exc:
                sock.close()
                raise not_running(self.path, exc.strerror or str(exc)) from exc
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
                raise closed(self.path)
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line
