"""JSON-RPC 2.0 message shapes of the socket protocol (SPEC §11), as pure functions.

One message per line (UTF-8 JSON, ``\\n``-terminated). The server side uses
:func:`decode_line` (bytes in, a :class:`Request`, a :class:`Batch`, an :class:`ErrorReply` to
send back, or ``None`` for nothing to do) and :func:`encode_result` / :func:`encode_error` /
:func:`error_reply` / :func:`encode_batch`; the client side uses :func:`encode_request` and
:func:`decode_response`.

Error codes: the JSON-RPC ones below, and every error reply also carries a memoryd code in
``error.data.code`` (``parse_error``, ``invalid_request``, ``request_too_large``,
``method_not_found``, ``invalid_params``, ``internal_error`` or the ``code`` of the
:class:`~memoryd.errors.MemorydError` a method raised), so a client needs only that field.

Batches (a JSON array of requests) get one array of replies, one per member that is not a
notification, each as that member alone would get it (an invalid member is an error in the
array, never a failure of the others); nothing is sent when every member is a notification.
An empty array, or one of more than :data:`MAX_BATCH` members, is refused whole with -32600.

Choices where JSON-RPC leaves room: ``params``
must be an object or absent (by-name parameters only; anything else is -32602); an ``id`` may
be a string, an integer or null (a boolean, float, array or object is -32600); a
notification (no ``id``) is executed but never answered, not even with an error; a blank line
is ignored; ``NaN``/``Infinity`` and nesting too deep for the parser are parse errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from memoryd.errors import InvalidParams, MemorydError, MethodNotFound

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
SERVER_ERROR: Final = -32000
"""Any :class:`~memoryd.errors.MemorydError` that is not about the request's shape."""

CODE_NAMES: Final[dict[int, str]] = {
    PARSE_ERROR: "parse_error",
    INVALID_REQUEST: "invalid_request",
    METHOD_NOT_FOUND: MethodNotFound.code,
    INVALID_PARAMS: InvalidParams.code,
    INTERNAL_ERROR: "internal_error",
    SERVER_ERROR: "server_error",
}
"""The ``error.data.code`` sent with each JSON-RPC code when no memoryd code applies."""

REQUEST_TOO_LARGE: Final = "request_too_large"
REQUEST_TIMEOUT: Final = "request_timeout"

MAX_BATCH: Final = 64
"""The most members one batch may have (a connection runs at most 64 requests at once)."""

RequestId = int | str | None
"""A JSON-RPC id: a string, an integer or null."""


@dataclass(frozen=True)
class Request:
    """One decoded call; ``notification`` requests (no ``id``) get no reply."""

    method: str
    params: dict[str, Any] = field(default_factory=dict)
    id: RequestId = None
    notification: bool = False


@dataclass(frozen=True)
class ErrorReply:
    """An error to send back for request ``id`` (null when the id could not be read)."""

    id: RequestId
    code: int
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The reply as one line; ``data.code`` defaults to the JSON-RPC code's name."""
        return encode_error(self.id, self.code, self.message, self.data)


@dataclass(frozen=True)
class Response:
    """A decoded reply: ``error`` is ``None`` for a success (whose ``result`` may be null)."""

    id: RequestId
    result: Any = None
    error: ErrorReply | None = None


@dataclass(frozen=True)
class Batch:
    """A decoded batch: each member is a request to run or an error to send back in place."""

    members: tuple[Request | ErrorReply, ...]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _dumps(message: dict[str, Any]) -> bytes:
    """Compact JSON plus ``\\n``; raises TypeError/ValueError for a value JSON cannot hold."""
    text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate (from a client's "\ud800" escape) cannot be UTF-8 encoded; the
        # ASCII form escapes it again, which is valid JSON that decodes to the same string.
        ascii_text = json.dumps(message, allow_nan=False, separators=(",", ":"))
        return ascii_text.encode("ascii") + b"\n"


def _valid_id(value: object) -> bool:
    return value is None or isinstance(value, str) or type(value) is int


def decode_line(line: bytes) -> Request | Batch | ErrorReply | None:
    """Decode one line (without its ``\\n``); never raises.

    Returns a :class:`Request` to dispatch, a :class:`Batch` of them, an :class:`ErrorReply`
    to send back, or ``None`` when there is nothing to do (a blank line, or a notification
    whose params are invalid).
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ErrorReply(None, PARSE_ERROR, f"parse error: invalid UTF-8 at byte {exc.start}")
    if not text.strip():
        return None
    try:
        message = _loads(text)
    except RecursionError:
        return ErrorReply(None, PARSE_ERROR, "parse error: JSON nested too deeply")
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers too long
        return ErrorReply(None, PARSE_ERROR, f"parse error: {exc}")
    if isinstance(message, list):
        return _batch_from(message)
    return _request_from(message)


def _batch_from(messages: list[Any]) -> Batch | ErrorReply:
    if not messages:
        return ErrorReply(None, INVALID_REQUEST, "invalid request: an empty batch")
    if len(messages) > MAX_BATCH:
        return ErrorReply(
            None,
            INVALID_REQUEST,
            f"invalid request: a batch may hold at most {MAX_BATCH} requests, got {len(messages)}",
            {"max_batch": MAX_BATCH},
        )
    members = (_request_from(m) for m in messages)
    return Batch(tuple(m for m in members if m is not None))


def encode_batch(replies: list[bytes]) -> bytes:
    """One line holding the replies (each an encoded line) as a JSON array; empty when there
    is none to send."""
    if not replies:
        return b""
    return b"[" + b",".join(reply.rstrip(b"\n") for reply in replies) + b"]\n"


def _request_from(message: object) -> Request | ErrorReply | None:
    if isinstance(message, list):
        return ErrorReply(None, INVALID_REQUEST, "invalid request: a batch inside a batch")
    if not isinstance(message, dict):
        kind = type(message).__name__ if message is not None else "null"
        return ErrorReply(None, INVALID_REQUEST, f"invalid request: expected an object, not {kind}")
    has_id = "id" in message
    raw_id = message.get("id")
    if has_id and not _valid_id(raw_id):
        return ErrorReply(
            None, INVALID_REQUEST, "invalid request: id must be a string, an integer or null"
        )
    request_id: RequestId = raw_id if has_id else None
    if message.get("jsonrpc") != "2.0":
        return ErrorReply(request_id, INVALID_REQUEST, 'invalid request: jsonrpc must be "2.0"')
    method = message.get("method")
    if not isinstance(method, str):
        return ErrorReply(request_id, INVALID_REQUEST, "invalid request: method must be a string")
    params = message.get("params", {})
    if not isinstance(params, dict):
        if not has_id:
            return None
        return ErrorReply(
            request_id, INVALID_PARAMS, "invalid params: params must be an object (by name)"
        )
    return Request(method, params, request_id, notification=not has_id)


def encode_request(request_id: RequestId, method: str, params: dict[str, Any]) -> bytes:
    """One request line; raises TypeError/ValueError if ``params`` is not JSON-able."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params:
        message["params"] = params
    return _dumps(message)


def encode_result(request_id: RequestId, result: Any) -> bytes:
    """One success line; raises TypeError/ValueError if ``result`` is not JSON-able."""
    return _dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_error(
    request_id: RequestId, code: int, message: str, data: dict[str, Any] | None = None
) -> bytes:
    """One error line; ``data.code`` defaults to the name of ``code`` (see module docstring)."""
    payload = {"code": CODE_NAMES.get(code, "server_error"), **(data or {})}
    error = {"code": code, "message": message, "data": payload}
    try:
        return _dumps({"jsonrpc": "2.0", "id": request_id, "error": error})
    except (TypeError, ValueError):  # data a raiser attached that JSON cannot hold
        error["data"] = {"code": payload["code"]}
        return _dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def error_reply(request_id: RequestId, error: MemorydError) -> ErrorReply:
    """The reply for a :class:`MemorydError` a method raised.

    ``InvalidParams`` → -32602 and ``MethodNotFound`` → -32601; every other memoryd error →
    -32000 (server error). ``error.data`` is the error's own :meth:`~MemorydError.to_dict`.
    """
    if isinstance(error, InvalidParams):
        code = INVALID_PARAMS
    elif isinstance(error, MethodNotFound):
        code = METHOD_NOT_FOUND
    else:
        code = SERVER_ERROR
    return ErrorReply(request_id, code, error.message, plain_data(error.to_dict()))


def plain_data(data: dict[str, Any]) -> dict[str, Any]:
    """``error.data`` as plain JSON: strings, numbers, booleans, null, lists and objects of
    them as they are; anything else (a path, an enum …) as its ``str()``, never a repr."""
    return {str(key): _plain(value) for key, value in data.items()}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return plain_data(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item) for item in value]
    return str(value)


def decode_response(line: bytes) -> Response:
    """Decode one reply line; raises ValueError when it is not a JSON-RPC 2.0 response."""
    try:
        message = _loads(line.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"malformed reply: {exc}") from exc
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ValueError("malformed reply: not a JSON-RPC 2.0 object")
    request_id = message.get("id")
    if not _valid_id(request_id):
        raise ValueError("malformed reply: bad id")
    if "error" in message:
        error = message["error"]
        if not (
            isinstance(error, dict)
            and type(error.get("code")) is int
            and isinstance(error.get("message"), str)
        ):
            raise ValueError("malformed reply: bad error object")
        data = error.get("data")
        return Response(
            request_id,
            error=ErrorReply(
                request_id, error["code"], error["message"], data if isinstance(data, dict) else {}
            ),
        )
    if "result" not in message:
        raise ValueError("malformed reply: neither result nor error")
    return Response(request_id, result=message["result"])
