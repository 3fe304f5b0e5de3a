"""The resolved configuration as data (``config show --json``) and as commented TOML
(``config show``): every value followed by the source it came from."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import date, datetime, time
from typing import Any

from memoryd.core.config import _SCHEMA, Config, Resolved, _Leaf, _Node


def _plain(value: Any) -> Any:
    """A dataclass / mapping / tuple tree as plain dicts and lists, with TOML key names."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name.rstrip("_"): _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def as_dict(config: Config) -> dict[str, Any]:
    """The config as nested plain dicts (TOML names: ``lambda``, not ``lambda_``)."""
    result: dict[str, Any] = _plain(config)
    return result


def _toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else toml_value(name)


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (strings as JSON strings, which TOML reads alike)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def render_toml(resolved: Resolved) -> str:
    """The effective config as TOML, each value followed by a comment naming its source."""
    lines: list[str] = []
    plain = as_dict(resolved.config)

    def emit(header: list[str], node: _Node, values: dict[str, Any]) -> None:
        lines.extend(["", f"[{'.'.join(header)}]"] if lines else [f"[{header[0]}]"])
        tables = []
        for name, child in node.items():
            if isinstance(child, _Leaf):
                source = resolved.sources[child.key]
                lines.append(f"{_toml_key(name)} = {toml_value(values[name])}  # {source}")
            else:
                tables.append(([*header, _toml_key(name)], child, values[name]))
        for sub_header, sub, sub_values in tables:
            emit(sub_header, sub, sub_values)

    for name, node in _SCHEMA.items():
        assert not isinstance(node, _Leaf)
        emit([_toml_key(name)], node, plain[name])
    return "\n".join(lines) + "\n"
