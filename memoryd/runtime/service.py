"""``memoryd install-service``: plan the user-service file for this machine, then write it.

The rendering is pure (:mod:`memoryd.core.service_files`); this module supplies what it
needs from the running process — the platform, the home directory, the environment and the
command that starts *this* memoryd — and writes the result.

The daemon command is the ``memoryd`` console script installed next to the running
interpreter (a virtualenv's or pipx's ``bin/``), else ``<python> -m memoryd``; either way
the service runs the same installation as the one that installed it. The interpreter path is
used as given, never resolved: resolving a virtualenv's ``python`` symlink would leave the
virtualenv. ``--config`` and ``MEMORYD_HOME`` are made absolute and kept.

The CLI wiring::

    plan = plan_for_this_user(config_path=args.config)
    print(install(plan, dry_run=args.dry_run), end="")
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from memoryd.core.service_files import InstallPlan, render_service
from memoryd.errors import StorageError
from memoryd.store.files import atomic_write_text, read_text

__all__ = ["InstallPlan", "daemon_command", "install", "plan_for_this_user"]

FILE_MODE = 0o644


def daemon_command(config_path: Path | None = None, *, executable: str | None = None) -> list[str]:
    """The command line a service manager should run: ``… serve --foreground [--config F]``.

    Args:
        config_path: a config file to pass on (made absolute); None for the default one.
        executable: the Python interpreter; ``sys.executable`` by default.
    """
    python = Path(executable or sys.executable).absolute()
    script = python.parent / "memoryd"
    if script.is_file() and os.access(script, os.X_OK):
        program = [str(script)]
    else:
        program = [str(python), "-m", "memoryd"]
    args = [*program, "serve", "--foreground"]
    if config_path is not None:
        args += ["--config", str(config_path.expanduser().absolute())]
    return args


def plan_for_this_user(
    config_path: Path | None = None,
    *,
    platform: str | None = None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    executable: str | None = None,
) -> InstallPlan:
    """The install plan for the running user and installation (every argument overridable).

    Raises:
        InvalidParams: the platform is neither Linux nor macOS.
    """
    environment = dict(os.environ if env is None else env)
    if environment.get("MEMORYD_HOME"):
        environment["MEMORYD_HOME"] = str(Path(environment["MEMORYD_HOME"]).expanduser().absolute())
    return render_service(
        sys.platform if platform is None else platform,
        daemon_command(config_path, executable=executable),
        environment,
        Path.home() if home is None else home,
    )


def install(plan: InstallPlan, dry_run: bool) -> str:
    """Write ``plan``'s file (``0644``, creating directories) and say how to enable it.

    With ``dry_run`` nothing is touched and the text returned is exactly the file that would
    be written, its path and the enable command. The service is never enabled here: the
    returned text tells the user the command to run.

    Raises:
        StorageError: a directory or the file could not be written.
    """
    path = Path(plan.path)
    if dry_run:
        return (
            f"# would write {path} (mode {FILE_MODE:04o}):\n"
            f"{plan.content}"
            f"# then enable and start it with:\n"
            f"{plan.enable_command}\n"
        )
    for directory in (path.parent, *map(Path, plan.directories)):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {directory}: {exc}", path=str(directory)) from exc
    verb = "unchanged" if read_text(path) == plan.content else "wrote"
    if verb == "wrote":
        atomic_write_text(path, plan.content)
    try:
        path.chmod(FILE_MODE)
    except OSError as exc:
        raise StorageError(f"cannot chmod {path}: {exc}", path=str(path)) from exc
    return f"{verb} {path}\nenable and start it with:\n  {plan.enable_command}\n"
