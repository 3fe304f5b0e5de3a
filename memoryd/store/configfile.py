"""Loading the configuration: read the TOML file, the environment and the platform, then resolve.

The I/O edge of :mod:`memoryd.core.config`: this module reads ``os.environ``, the home
directory, ``sys.platform`` and the config file, and hands them to the pure resolver.
A missing *default* config file means "all defaults"; a missing file that was named
explicitly (``--config`` or ``MEMORYD_CONFIG``) is a :class:`~memoryd.errors.ConfigError`, as is
a file that is not UTF-8 or not TOML.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memoryd.core.config import (
    Config,
    Resolved,
    parse_toml,
    problems,
    resolve,
)
from memoryd.core.paths import Paths, default_paths, effective_paths
from memoryd.errors import ConfigError, MemorydError


@dataclass(frozen=True)
class Loaded:
    """A resolved configuration, the paths it implies, and which file (if any) was read."""

    resolved: Resolved
    paths: Paths
    config_file: str  # the file that was looked for
    file_found: bool  # False: it did not exist and defaults were used

    @property
    def config(self) -> Config:
        return self.resolved.config

    @property
    def sources(self) -> Mapping[str, str]:
        return self.resolved.sources


def read_file(path: str) -> dict[str, Any]:
    """Read and parse one TOML config file; any failure is a ConfigError naming the file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist", file=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}", file=path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {exc.start})", file=path
        ) from None
    return parse_toml(text, path)


def load(config_path: str | None = None, flags: Mapping[str, Any] | None = None) -> Loaded:
    """Resolve the effective configuration from the file, ``MEMORYD_*`` variables and ``flags``.

    ``config_path`` (e.g. ``--config``) overrides the default file location.
    """
    env = dict(os.environ)
    defaults = default_paths(env, sys.platform, str(Path.home()))
    explicit = config_path is not None or bool(env.get("MEMORYD_CONFIG"))
    path = str(Path(config_path).expanduser()) if config_path else defaults.config_file
    found = explicit or Path(path).exists()
    data = read_file(path) if found else None
    resolved = resolve(data, env, flags or {}, file_origin=path)
    paths = replace(effective_paths(resolved.config, defaults), config_file=path)
    return Loaded(resolved, paths, path, found)


def check(path: str) -> Resolved:
    """Validate one config file on its own (no environment, no flags)."""
    return resolve(read_file(path), {}, {}, file_origin=path)


def check_all(path: str) -> list[MemorydError]:
    """Every error in one config file (no environment, no flags), the ``[agents]`` role and
    persona tables included; empty when the file is valid."""
    # here, not at module level: the agents package (and yaml) is no part of loading a config
    from memoryd.core.agents.roles import table_problems

    try:
        data = read_file(path)
    except ConfigError as exc:
        return [exc]
    errors: list[MemorydError] = [*problems(data, file_origin=path)]
    agents = data.get("agents")
    if isinstance(agents, Mapping):
        for kind in ("roles", "personas"):
            tables = agents.get(kind)
            if isinstance(tables, Mapping):
                errors.extend(table_problems(kind, tables))
    return errors
