"""Where memoryd keeps things (SPEC §2, §11, §13): memory root, state dir, socket, config file.

Pure: the environment, the platform and the home directory are passed in.
``MEMORYD_HOME`` relocates everything; otherwise the XDG base directories (or macOS's
Application Support) apply; ``memory.root`` and ``daemon.socket`` override the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from memoryd.core.config import Config

# --- paths -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    """Where memoryd keeps things; every field is an absolute path string."""

    memory_root: str
    state_dir: str
    runtime_dir: str
    socket_path: str
    config_file: str
    home: str = ""  # the user's home, used to expand ~ in configured paths
    xdg_runtime_dir: str = ""
    """``$XDG_RUNTIME_DIR`` when the default socket lives under it: it must exist (the login
    manager creates it; memoryd never does — see :func:`runtime_dir_problem`)."""


def default_paths(env: Mapping[str, str], platform: str, home: str) -> Paths:
    """The default paths for this environment (``MEMORYD_HOME``, XDG variables, platform)."""
    if env.get("MEMORYD_HOME"):
        base = PurePosixPath(_expand(env["MEMORYD_HOME"], home))
        config = env.get("MEMORYD_CONFIG") or str(base / "config.toml")
        return Paths(
            memory_root=str(base / "memory"),
            state_dir=str(base / "state"),
            runtime_dir=str(base / "run"),
            socket_path=str(base / "run" / "memoryd.sock"),
            config_file=_expand(config, home),
            home=home,
        )

    def xdg(name: str, fallback: PurePosixPath) -> PurePosixPath:
        value = env.get(name, "")  # relative XDG paths are invalid and ignored
        return PurePosixPath(value, "memoryd") if value.startswith("/") else fallback

    if platform == "darwin":
        support = PurePosixPath(home, "Library", "Application Support", "memoryd")
        data = xdg("XDG_DATA_HOME", support)
        state = xdg("XDG_STATE_HOME", support / "state")
    else:
        data = xdg("XDG_DATA_HOME", PurePosixPath(home, ".local", "share", "memoryd"))
        state = xdg("XDG_STATE_HOME", PurePosixPath(home, ".local", "state", "memoryd"))
    runtime = xdg("XDG_RUNTIME_DIR", state)
    xdg_runtime = env.get("XDG_RUNTIME_DIR", "") if runtime != state else ""
    config_dir = xdg("XDG_CONFIG_HOME", PurePosixPath(home, ".config", "memoryd"))
    config = env.get("MEMORYD_CONFIG") or str(config_dir / "config.toml")
    return Paths(
        memory_root=str(data / "memory"),
        state_dir=str(state),
        runtime_dir=str(runtime),
        socket_path=str(runtime / "memoryd.sock"),
        config_file=_expand(config, home),
        home=home,
        xdg_runtime_dir=xdg_runtime,
    )


def _expand(path: str, home: str) -> str:
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return path


def effective_paths(config: Config, defaults: Paths) -> Paths:
    """``defaults`` with ``memory.root`` and ``daemon.socket`` applied when they are set."""
    root = _expand(config.memory.root, defaults.home) or defaults.memory_root
    socket = _expand(config.daemon.socket, defaults.home)
    runtime = str(PurePosixPath(socket).parent) if socket else defaults.runtime_dir
    return Paths(
        memory_root=root,
        state_dir=defaults.state_dir,
        runtime_dir=runtime,
        socket_path=socket or defaults.socket_path,
        config_file=defaults.config_file,
        home=defaults.home,
        xdg_runtime_dir="" if socket else defaults.xdg_runtime_dir,
    )


def runtime_dir_problem(paths: Paths, exists: bool) -> str | None:
    """Why the socket cannot be placed, given whether ``paths.xdg_runtime_dir`` exists."""
    if not paths.xdg_runtime_dir or exists:
        return None
    return (
        f"XDG_RUNTIME_DIR={paths.xdg_runtime_dir} does not exist; memoryd never creates it "
        "(the login manager does). Log in again, fix or unset XDG_RUNTIME_DIR, or set "
        "daemon.socket"
    )
