"""What both clients share: timeouts and limits, and the error a reply or a failure stands for.

:func:`error_from_reply` maps an error reply to the :class:`~memoryd.errors.MemorydError`
subclass named by its ``error.data.code``; :func:`not_running`, :func:`closed` and
:func:`timed_out` are the errors for a missing daemon, a lost connection and a late reply.
Standard library only: the blocking client must not pay for anyio (``memoryd hook``).
"""

from __future__ import annotations

import select
import socket
from pathlib import Path
from typing import Any, Final

from memoryd import errors
from memoryd.core.protocol import INVALID_PARAMS, METHOD_NOT_FOUND, ErrorReply, Response
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
    """The exception an error reply stands for (see :mod:`memoryd.client`)."""
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


def result(response: Response) -> Any:
    """The result of a reply; an error reply raises its error."""
    if response.error is not None:
        raise error_from_reply(response.error)
    return response.result


def not_running(path: Path, reason: str) -> DaemonNotRunning:
    return DaemonNotRunning(
        f"memoryd is not running ({reason} on {path}); {_START_HINT}", path=str(path)
    )


def timed_out(timeout: float | None) -> DaemonTimeout:
    return DaemonTimeout(f"memoryd did not answer within {timeout} s", timeout=timeout)


def closed(path: Path) -> DaemonNotRunning:
    return DaemonNotRunning(
        f"memoryd closed the connection on {path} before answering; if it stopped, {_START_HINT}",
        path=str(path),
    )


def peer_closed(sock: socket.socket) -> bool:
    """Whether the daemon closed this idle connection (e.g. it restarted since the last call)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
