"""The schema side of the configuration: what one value may be (:class:`Rule`) and the
dataclass fields that carry a rule next to their default (:mod:`memoryd.core.config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Kind = Literal["str", "int", "float", "bool", "strs", "strmap", "tables"]


@dataclass(frozen=True)
class Rule:
    """What one configuration value may be: its kind, bounds and choices."""

    kind: Kind
    low: float | None = None
    high: float | None = None
    above: bool = False  # the low bound is exclusive
    choices: tuple[str, ...] = ()
    path: bool = False  # an absolute path or one starting with ~ (empty = the default)

    def expected(self) -> str:
        """The expected value in words, as error messages show it."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.path:
            return "an absolute path (or one starting with ~), or empty"
        if self.kind not in ("int", "float"):
            return _KIND_WORDS[self.kind]
        noun = "an integer" if self.kind == "int" else "a number"
        if self.low is not None and self.high is not None:
            return f"{noun} in [{self.low:g}, {self.high:g}]"
        return (
            f"{noun} {'>' if self.above else '>='} {self.low:g}" if self.low is not None else noun
        )


_KIND_WORDS = {
    "str": "a string",
    "bool": "true or false",
    "strs": "a list of non-empty strings",
    "strmap": "a table of name = non-empty string",
    "tables": "a table of tables",
}


def _frozen(value: Any) -> Any:
    """A read-only deep copy: tables become mapping proxies, arrays tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _text(default: str = "", *, choices: tuple[str, ...] = (), path: bool = False) -> str:
    return field(default=default, metadata={"rule": Rule("str", choices=choices, path=path)})


def _int(default: int, low: int = 0) -> int:
    return field(default=default, metadata={"rule": Rule("int", low=low)})


def _num(default: float, low: float = 0.0, high: float | None = None, above: bool = False) -> float:
    return field(default=default, metadata={"rule": Rule("float", low, high, above)})


def _flag(default: bool) -> bool:
    return field(default=default, metadata={"rule": Rule("bool")})


def _map(kind: Kind) -> Mapping[str, Any]:
    return field(default_factory=lambda: MappingProxyType({}), metadata={"rule": Rule(kind)})


def _keyed(keys: tuple[str, ...], default: float) -> Mapping[str, float]:
    """A mapping with exactly ``keys``, each a number >= 0 (a TOML sub-table)."""
    return field(
        default_factory=lambda: MappingProxyType(dict.fromkeys(keys, default)),
        metadata={"rule": Rule("float", low=0.0), "keys": keys},
    )
