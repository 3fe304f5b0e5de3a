"""Typed reading of JSON-RPC params: each getter names the parameter it rejects.

Pure functions over the decoded ``params`` object; every failure is an
:class:`~memoryd.errors.InvalidParams` whose message names the parameter and what was
expected, so a client sees exactly what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from memoryd.core.workspace import session_id_prefix
from memoryd.errors import InvalidParams

MISSING: Any = object()


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _bad(name: str, expected: str, value: object) -> InvalidParams:
    return InvalidParams(
        f"parameter '{name}' must be {expected}, got {_type_name(value)}", param=name
    )


def _absent(value: Any, default: Any) -> bool:
    """No value given: missing, or null where the parameter has a default."""
    return value is MISSING or (value is None and default is not MISSING)


def _default(name: str, default: Any) -> Any:
    """The default of an absent parameter; a required one is an error naming it."""
    if default is MISSING:
        raise InvalidParams(f"missing parameter '{name}'", param=name)
    return default


def string(
    params: Mapping[str, Any], name: str, default: Any = MISSING, *, max_len: int = 1 << 20
) -> Any:
    """A required (or defaulted) string parameter."""
    value = params.get(name, MISSING)
    if _absent(value, default):
        return _default(name, default)
    if not isinstance(value, str):
        raise _bad(name, "a string", value)
    if len(value) > max_len:
        raise InvalidParams(f"parameter '{name}' is longer than {max_len} characters", param=name)
    if "\x00" in value:
        raise InvalidParams(f"parameter '{name}' contains a NUL character", param=name)
    return value


def absolute_path(params: Mapping[str, Any], name: str, default: Any = MISSING) -> Any:
    """A string parameter that is an absolute path (only its spelling is checked)."""
    value = string(params, name, default, max_len=4096)
    if isinstance(value, str) and not PurePath(value).is_absolute():
        raise InvalidParams(
            f"parameter '{name}' must be an absolute path, got {value!r}", param=name
        )
    return value


def integer(
    params: Mapping[str, Any],
    name: str,
    default: Any = MISSING,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> Any:
    value = params.get(name, MISSING)
    if _absent(value, default):
        return _default(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, "an integer", value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"[{minimum if minimum is not None else '-inf'}, "
        bounds += f"{maximum if maximum is not None else 'inf'}]"
        raise InvalidParams(f"parameter '{name}' must be in {bounds}, got {value}", param=name)
    return value


def number(
    params: Mapping[str, Any],
    name: str,
    default: Any = MISSING,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    value = params.get(name, MISSING)
    if _absent(value, default):
        return _default(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(name, "a number", value)
    value = float(value)
    if (
        value != value
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise InvalidParams(
            f"parameter '{name}' must be in [{minimum}, {maximum}], got {value}", param=name
        )
    return value


def boolean(params: Mapping[str, Any], name: str, default: Any = MISSING) -> Any:
    value = params.get(name, MISSING)
    if _absent(value, default):
        return _default(name, default)
    if not isinstance(value, bool):
        raise _bad(name, "true or false", value)
    return value


def choice(
    params: Mapping[str, Any], name: str, options: tuple[str, ...], default: Any = MISSING
) -> Any:
    value = string(params, name, default)
    if value is not default and value not in options:
        raise InvalidParams(
            f"parameter '{name}' must be one of {', '.join(options)}, got {value!r}", param=name
        )
    return value


def string_list(
    params: Mapping[str, Any], name: str, default: Any = MISSING, *, max_items: int = 1000
) -> Any:
    value = params.get(name, MISSING)
    if _absent(value, default):
        return _default(name, default)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(name, "a list of strings", value)
    if len(value) > max_items:
        raise InvalidParams(f"parameter '{name}' has more than {max_items} items", param=name)
    return value


def known_only(params: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Reject parameters the method does not take (a typo must not be silently ignored)."""
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise InvalidParams(
            f"unknown parameter '{extra[0]}' (this method takes: {', '.join(allowed) or 'none'})",
            param=extra[0],
        )


MAX_SESSION_ID_CHARS = 256


def check_session_id(session_id: object) -> str:
    """``session_id`` if it is a usable id (a non-empty string of at most 256 characters)."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise InvalidParams("session_id must be a non-empty string", param="session_id")
    if len(session_id) > MAX_SESSION_ID_CHARS or "\x00" in session_id:
        raise InvalidParams(
            f"session_id must be at most {MAX_SESSION_ID_CHARS} characters without NUL",
            param="session_id",
        )
    session_id_prefix(session_id)
    return session_id
