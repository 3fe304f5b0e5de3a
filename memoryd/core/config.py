"""The configuration of memoryd as data, and the one pure function that resolves it (SPEC §13).

:class:`Config` holds one frozen dataclass per TOML section. Each field carries its
:class:`Rule` (kind, bounds, choices), so the schema lives next to the defaults.
:func:`resolve` layers defaults < file < ``MEMORYD_*`` environment < flags and validates every
value; errors are :class:`~memoryd.errors.ConfigError` naming the dotted key. The environment,
the platform and the home directory are passed in: nothing here reads them (see
``memoryd.store.configfile`` for the I/O; :mod:`memoryd.core.paths` places the memory root,
state dir, socket and config file). :func:`render_toml` and :func:`as_dict` serve
``memoryd config show``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from memoryd.core.config_rules import (
    Rule,
    _flag,
    _frozen,
    _int,
    _keyed,
    _map,
    _num,
    _text,
)
from memoryd.errors import ConfigError

if TYPE_CHECKING:
    from memoryd.core.secrets import Scrubber

# Environment variables named MEMORYD_* that are not configuration keys.
NOT_CONFIG_ENV = frozenset({"MEMORYD_HOME", "MEMORYD_CONFIG"})
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("auto", "json", "console")
EMBEDDING_PROVIDERS = ("auto", "none", "local", "openai", "hash")
VECTORS_IN_MEMORY = ("auto", "on", "off")
SCHEDULES = ("off", "daily")
SOURCES = ("global", "workspace", "session")


@dataclass(frozen=True)
class DaemonConfig:
    """``[daemon]``: the socket, logging, actor lifetime, request limits, connection cap,
    start-up workspaces."""

    socket: str = _text(path=True)
    log_level: str = _text("info", choices=LOG_LEVELS)
    log_format: str = _text("auto", choices=LOG_FORMATS)
    actor_idle_secs: float = _num(600.0, above=True)
    max_request_bytes: int = _int(1_048_576, low=1)
    request_timeout_secs: float = _num(30.0, above=True)
    max_connections: int = _int(512, low=1)
    workspaces: tuple[str, ...] = field(default=(), metadata={"rule": Rule("strs")})


@dataclass(frozen=True)
class MemoryConfig:
    """``[memory]``: where the markdown memory lives (empty = the platform default)."""

    root: str = _text(path=True)


@dataclass(frozen=True)
class IndexConfig:
    """``[index]``: chunk sizes, the reconcile scan period, the watcher debounce and whether
    vectors are also held in memory for search."""

    max_chunk_chars: int = _int(1600, low=1)
    chunk_overlap_chars: int = _int(320)
    min_chunk_chars: int = _int(200)  # smaller sections merge with the next (core.chunking)
    reconcile_secs: float = _num(300.0, above=True)
    watch_debounce_ms: int = _int(50)
    vectors_in_memory: str = _text("auto", choices=VECTORS_IN_MEMORY)
    max_file_bytes: int = _int(16 * 1024 * 1024, low=1)


@dataclass(frozen=True)
class MmrConfig:
    """``[search.mmr]``: maximal-marginal-relevance re-ranking (off by default)."""

    enabled: bool = _flag(False)
    lambda_: float = _num(0.7, high=1.0)


@dataclass(frozen=True)
class SearchConfig:
    """``[search]``: result count, relevance threshold, merge weights, decay, MMR (SPEC §5)."""

    max_results: int = _int(6, low=1)
    min_score: float = _num(0.25, high=1.0)
    text_weight: float = _num(1.0, high=1.0)
    vector_weight: float = _num(1.0, high=1.0)
    half_life_days: float = _num(30.0)
    source_weights: Mapping[str, float] = _keyed(SOURCES, 1.0)
    mmr: MmrConfig = field(default_factory=MmrConfig)


@dataclass(frozen=True)
class EmbeddingConfig:
    """``[embedding]``: the embedding provider and its endpoint (SPEC §6)."""

    provider: str = _text("auto", choices=EMBEDDING_PROVIDERS)
    model: str = _text()
    base_url: str = _text()
    api_key_env: str = _text("OPENAI_API_KEY")
    dimensions: int = _int(0)
    batch_size: int = _int(32, low=1)
    timeout_secs: float = _num(10.0, above=True)
    max_retries: int = _int(3)
    threads: int = _int(1, low=1)
    similarity_unrelated: float = _num(0.0, high=1.0)  # 0 = the model's own scale
    similarity_strong: float = _num(0.0, high=1.0)  # (see core.calibration, memoryd calibrate)


@dataclass(frozen=True)
class LlmConfig:
    """``[llm]``: the OpenAI-compatible chat model used by flush, dream and confluence."""

    base_url: str = _text()
    model: str = _text()
    api_key_env: str = _text("OPENAI_API_KEY")
    timeout_secs: float = _num(60.0, above=True)
    max_retries: int = _int(2)


@dataclass(frozen=True)
class FlushConfig:
    """``[flush]``: when and how much a session flush writes (SPEC §7)."""

    enabled: bool = _flag(True)
    soft_threshold_tokens: int = _int(4000)
    idle_timeout_secs: float = _num(300.0)
    max_write_chars: int = _int(8000, low=1)
    dedupe_threshold: float = _num(0.92, high=1.0)
    max_tool_chars: int = _int(200, low=20)
    session_idle_close_secs: float = _num(86400.0)


@dataclass(frozen=True)
class DreamConfig:
    """``[dream]``: the dream gates, lock and limits (SPEC §8); check interval 0 = none."""

    enabled: bool = _flag(True)
    min_hours: int = _int(24)
    min_sessions: int = _int(5)
    check_interval_secs: float = _num(0.0)
    stale_lock_secs: float = _num(3600.0, above=True)
    max_input_chars: int = _int(32000, low=1)
    max_write_chars: int = _int(32000, low=1)
    max_loss_fraction: float = _num(0.5, high=1.0)
    keep_history: int = _int(10, low=1)
    keep_logs_days: float = _num(30.0)


@dataclass(frozen=True)
class AgentsConfig:
    """``[agents]``: user agent dir, per-agent model pins, raw roles and personas (SPEC §9)."""

    user_dir: str = _text(path=True)
    models: Mapping[str, str] = _map("strmap")
    roles: Mapping[str, Any] = _map("tables")
    personas: Mapping[str, Any] = _map("tables")


@dataclass(frozen=True)
class ConfluenceConfig:
    """``[confluence]``: cross-workspace experience confluence (SPEC §10), off by default."""

    enabled: bool = _flag(False)
    schedule: str = _text("off", choices=SCHEDULES)


@dataclass(frozen=True)
class InjectConfig:
    """``[inject]``: the memory agent hooks put into the agent's context (SPEC §17)."""

    max_chars: int = _int(6000)
    min_score: float = _num(0.9, high=1.0)
    on_prompt: bool = _flag(False)


@dataclass(frozen=True)
class SecretsConfig:
    """``[secrets]``: the user's own rules for the secret scrubber (SPEC §18); regexes."""

    extra_patterns: tuple[str, ...] = field(default=(), metadata={"rule": Rule("strs")})
    allow_patterns: tuple[str, ...] = field(default=(), metadata={"rule": Rule("strs")})

    def scrubber(self) -> Scrubber:
        """The scrubber with these rules (built once per distinct set)."""
        from memoryd.core.secrets import scrubber  # not at import: a config load needs none

        return scrubber(self.extra_patterns, self.allow_patterns)


@dataclass(frozen=True)
class Config:
    """The whole effective configuration, one attribute per TOML section."""

    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    flush: FlushConfig = field(default_factory=FlushConfig)
    dream: DreamConfig = field(default_factory=DreamConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    confluence: ConfluenceConfig = field(default_factory=ConfluenceConfig)
    inject: InjectConfig = field(default_factory=InjectConfig)
    secrets: SecretsConfig = field(default_factory=SecretsConfig)


@dataclass(frozen=True)
class Resolved:
    """A resolved config and, per dotted key, where its value came from."""

    config: Config
    sources: Mapping[str, str]  # "default" | "file <path>" | "env MEMORYD_X_Y" | "flag"


# --- the schema, derived once from the dataclasses -------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    key: str
    rule: Rule
    default: Any


_Node = dict[str, "_Node | _Leaf"]


def _default_of(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    assert f.default_factory is not MISSING
    return f.default_factory()


def _schema(cls: type, prefix: str) -> _Node:
    node: _Node = {}
    for f in fields(cls):
        name, default = f.name.rstrip("_"), _default_of(f)
        key = prefix + name
        if is_dataclass(default):
            node[name] = _schema(type(default), key + ".")
        elif "keys" in f.metadata:
            rule = f.metadata["rule"]
            node[name] = {k: _Leaf(f"{key}.{k}", rule, default[k]) for k in f.metadata["keys"]}
        else:
            node[name] = _Leaf(key, f.metadata["rule"], default)
    return node


def _leaves(node: _Node) -> Iterator[_Leaf]:
    for child in node.values():
        if isinstance(child, _Leaf):
            yield child
        else:
            yield from _leaves(child)


_SCHEMA = _schema(Config, "")
LEAVES: Mapping[str, Rule] = MappingProxyType({leaf.key: leaf.rule for leaf in _leaves(_SCHEMA)})
_DEFAULTS = {leaf.key: leaf.default for leaf in _leaves(_SCHEMA)}


def env_name(key: str) -> str:
    """The environment variable that sets dotted ``key``: ``MEMORYD_SEARCH_MMR_ENABLED``."""
    return "MEMORYD_" + key.replace(".", "_").upper()


_ENV = {env_name(key): key for key in LEAVES}


def _build(cls: Any, prefix: str, values: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        key = prefix + f.name.rstrip("_")
        default = _default_of(f)
        if is_dataclass(default):
            kwargs[f.name] = _build(type(default), key + ".", values)
        elif "keys" in f.metadata:
            kwargs[f.name] = MappingProxyType({k: values[f"{key}.{k}"] for k in f.metadata["keys"]})
        else:
            kwargs[f.name] = values[key]
    return cls(**kwargs)


# --- parsing and resolving ---------------------------------------------------------------------


def parse_toml(text: str, origin: str) -> dict[str, Any]:
    """Parse TOML ``text``; a syntax error names ``origin`` and the line."""
    import tomllib  # only when there is a file: a hook with no config file does not pay for it

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"at line (\d+)", str(exc))
        raise ConfigError(
            f"{origin}: not valid TOML: {exc}",
            origin=origin,
            line=int(line.group(1)) if line else None,
        ) from None


def _closest(word: str, candidates: list[str]) -> list[str]:
    """The one candidate close to a misspelt ``word``, if any."""
    import difflib  # only for a mistake: a config load does not pay for it

    return difflib.get_close_matches(word, candidates, n=1)


def _unknown(key: str, candidates: list[str], source: str) -> ConfigError:
    last = key.rsplit(".", 1)[-1]  # a known key in the wrong section?
    close = [k for k in LEAVES if k.rsplit(".", 1)[-1] == last][:1]
    close = close or _closest(key, candidates)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown key {key!r}{hint} in {source}", key=key, source=source)


def _siblings(node: _Node, prefix: str) -> list[str]:
    return [prefix + name for name in node]


def _flatten(
    data: Mapping[str, Any],
    node: _Node,
    prefix: str,
    source: str,
    errors: list[ConfigError] | None = None,
) -> dict[str, Any]:
    """Dotted key → value; a bad key raises, or is added to ``errors`` when given."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        key = prefix + name
        child = node.get(name)
        error: ConfigError | None = None
        if child is None:
            error = _unknown(key, _siblings(node, prefix), source)
        elif isinstance(child, _Leaf):
            out[key] = value
        elif isinstance(value, Mapping):
            out.update(_flatten(value, child, key + ".", source, errors))
        else:
            error = ConfigError(f"{key} must be a table, got {value!r} in {source}", key=key)
        if error is not None:
            if errors is None:
                raise error
            errors.append(error)
    return out


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _from_text(rule: Rule, text: str) -> Any:
    """Parse an environment string by the field's kind; the text itself when it does not parse
    (so that validation names the key, the expected value and the text)."""
    word = text.strip().lower()
    try:
        match rule.kind:
            case "int":
                return int(word)
            case "float":
                return float(word)
            case "bool" if word in _TRUE + _FALSE:
                return word in _TRUE
            case "strs":
                return [part.strip() for part in text.split(",") if part.strip()]
            case "strmap":
                pairs = [part.split("=", 1) for part in text.split(",") if part.strip()]
                return {name.strip(): value.strip() for name, value in pairs}
    except ValueError:
        pass
    return text


_BAD: Any = object()


def _check(key: str, rule: Rule, raw: Any, source: str) -> Any:
    """Validate one value and return it in its final form, or fail naming key and expectation."""
    value = _checked(rule, raw)
    if value is _BAD:
        message = f"{key} must be {rule.expected()}, got {raw!r} (from {source})"
        raise ConfigError(message, key=key, source=source)
    return value


def _checked(rule: Rule, raw: Any) -> Any:
    match rule.kind:
        case "str":
            ok = isinstance(raw, str) and (not rule.choices or raw in rule.choices)
            return raw if ok and (not rule.path or raw[:1] in ("", "/", "~")) else _BAD
        case "bool":
            return raw if isinstance(raw, bool) else _BAD
        case "int" | "float":
            return _number(rule, raw)
        case "strs":
            ok = isinstance(raw, list | tuple) and all(isinstance(s, str) and s for s in raw)
            return tuple(raw) if ok else _BAD
        case "strmap":
            ok = isinstance(raw, Mapping) and all(isinstance(v, str) and v for v in raw.values())
            return _frozen(raw) if ok else _BAD
        case "tables":
            ok = isinstance(raw, Mapping) and all(isinstance(v, Mapping) for v in raw.values())
            return _frozen(raw) if ok else _BAD


def _number(rule: Rule, raw: Any) -> Any:
    if isinstance(raw, bool) or not isinstance(raw, int if rule.kind == "int" else int | float):
        return _BAD
    value = raw if rule.kind == "int" else float(raw)
    too_low = rule.low is not None and (value <= rule.low if rule.above else value < rule.low)
    too_high = rule.high is not None and value > rule.high
    return _BAD if too_low or too_high or not math.isfinite(value) else value


def _env_layer(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for name, text in env.items():
        if not name.startswith("MEMORYD_") or name in NOT_CONFIG_ENV:
            continue
        key = _ENV.get(name)
        if key is None:
            close = _closest(name, list(_ENV))
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"unknown environment variable {name}{hint}", variable=name)
        if LEAVES[key].kind == "tables":
            raise ConfigError(f"{key} cannot be set from the environment ({name})", key=key)
        out[key] = (_from_text(LEAVES[key], text), f"env {name}")
    return out


def _leaf_for(key: str) -> _Leaf:
    """The leaf a dotted flag key names, or an error naming the key (with a close match)."""
    node: _Node | _Leaf = _SCHEMA
    prefix = ""
    for part in key.split("."):
        if isinstance(node, _Leaf):
            break
        child = node.get(part)
        if child is None:
            raise _unknown(prefix + part, _siblings(node, prefix), "flags")
        node, prefix = child, f"{prefix}{part}."
    if not isinstance(node, _Leaf) or node.key != key:
        raise ConfigError(f"flag {key!r} does not name a single value", key=key)
    return node


def _flag_layer(flags: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for key, value in flags.items():
        if value is not None:  # None: a flag that was not given
            rule = _leaf_for(key).rule
            parse = isinstance(value, str) and rule.kind not in ("str", "tables")
            out[key] = (_from_text(rule, value) if parse else value, "flag")
    return out


def resolve(
    file_data: Mapping[str, Any] | None,
    env: Mapping[str, str],
    flags: Mapping[str, Any],
    *,
    file_origin: str = "",
) -> Resolved:
    """Resolve the effective config: flags > ``MEMORYD_*`` env > file > defaults.

    ``file_data`` is the parsed TOML (or None); ``flags`` maps dotted keys to values (typed,
    or strings parsed like environment values; None = not given).
    """
    file_source = f"file {file_origin}".rstrip()
    layers: dict[str, tuple[Any, str]] = {}
    for key, raw in _flatten(file_data or {}, _SCHEMA, "", file_source).items():
        layers[key] = (raw, file_source)
    layers.update(_env_layer(env))
    layers.update(_flag_layer(flags))
    values = dict(_DEFAULTS)
    sources = dict.fromkeys(_DEFAULTS, "default")
    for key, (raw, source) in layers.items():
        values[key] = _check(key, LEAVES[key], raw, source)
        sources[key] = source
    overlap_error = _overlap_error(values, sources)
    if overlap_error is not None:
        raise overlap_error
    pattern_errors = _pattern_errors(values, sources)
    if pattern_errors:
        raise pattern_errors[0]
    config: Config = _build(Config, "", values)
    return Resolved(config, MappingProxyType(sources))


PATTERN_KEYS = ("secrets.extra_patterns", "secrets.allow_patterns")


def _pattern_errors(values: Mapping[str, Any], sources: Mapping[str, str]) -> list[ConfigError]:
    """The user's secret patterns that do not compile (the secrets module, and its rule
    table, is imported only when there are some: ``memoryd hook`` loads the config)."""
    errors: list[ConfigError] = []
    if not any(values[key] for key in PATTERN_KEYS):
        return errors
    from memoryd.core.secrets import check_patterns

    for key in PATTERN_KEYS:
        try:
            check_patterns(values[key], f"{key} (from {sources[key]})", key)
        except ConfigError as exc:
            errors.append(exc)
    return errors


def _overlap_error(values: Mapping[str, Any], sources: Mapping[str, str]) -> ConfigError | None:
    overlap, size = values["index.chunk_overlap_chars"], values["index.max_chunk_chars"]
    if overlap < size:
        return None
    source = sources["index.chunk_overlap_chars"]
    return ConfigError(
        f"index.chunk_overlap_chars must be less than index.max_chunk_chars ({size}), "
        f"got {overlap} (from {source})",
        key="index.chunk_overlap_chars",
        source=source,
    )


def problems(file_data: Mapping[str, Any], *, file_origin: str = "") -> list[ConfigError]:
    """Every error in one file's data, not only the first (``config check``); each names its
    dotted key. The ``[agents]`` role and persona tables are checked by
    :func:`memoryd.core.agents.roles.table_problems`."""
    source = f"file {file_origin}".rstrip()
    errors: list[ConfigError] = []
    values, sources = dict(_DEFAULTS), dict.fromkeys(_DEFAULTS, "default")
    for key, raw in _flatten(file_data, _SCHEMA, "", source, errors).items():
        try:
            values[key] = _check(key, LEAVES[key], raw, source)
            sources[key] = source
        except ConfigError as exc:
            errors.append(exc)
    overlap_error = _overlap_error(values, sources)
    if overlap_error is not None:
        errors.append(overlap_error)
    errors.extend(_pattern_errors(values, sources))
    return errors
