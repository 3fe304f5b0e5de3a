"""Rendering the files that run memoryd as a user service (SPEC §14) — pure, values in and out.

:func:`render_service` turns a platform name, the daemon's command line, the installing
user's environment and home directory into an :class:`InstallPlan`: where the file goes,
its exact text, and the shell command that enables it.

- ``linux``: a systemd *user* unit, ``~/.config/systemd/user/memoryd.service``
  (``$XDG_CONFIG_HOME/systemd/user`` when that is set). ``Type=notify``: the daemon sends
  ``READY=1`` once its socket listens. Logs go to the journal.
- ``darwin``: a launchd agent, ``~/Library/LaunchAgents/dev.memoryd.plist``, logging to
  ``~/Library/Logs/memoryd/``.

Of the environment, only ``MEMORYD_HOME`` is carried into the service, so a relocated
memoryd keeps its state. Nothing else is — in particular no API keys: those belong in the
config file or a ``systemctl --user edit memoryd`` drop-in, not in a generated file.

The repository's ``systemd/memoryd.service`` and ``launchd/dev.memoryd.plist`` are these
renderings for placeholder paths (:func:`systemd_template`, :func:`launchd_template`); a
test keeps them equal.
"""

from __future__ import annotations

import plistlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath

from memoryd.errors import InvalidParams

SYSTEMD_UNIT = "memoryd.service"
LAUNCHD_LABEL = "dev.memoryd"
#: Environment variables copied from the installing shell into the service.
CARRIED_ENV = ("MEMORYD_HOME",)
PLATFORMS = ("linux", "darwin")


@dataclass(frozen=True)
class InstallPlan:
    """What ``memoryd install-service`` writes and what the user runs afterwards.

    ``directories`` are created besides the file's own parent (launchd does not create the
    directory of its log files).
    """

    path: PurePath
    content: str
    enable_command: str
    directories: tuple[PurePath, ...] = ()


def render_service(
    platform: str, exec_args: Sequence[str], env: Mapping[str, str], home: PurePath
) -> InstallPlan:
    """The service file for ``platform`` (``sys.platform``) running ``exec_args``.

    Args:
        platform: ``linux`` or ``darwin``.
        exec_args: the daemon's full command line, starting with an absolute program path,
            e.g. ``["/home/me/.venv/bin/memoryd", "serve", "--foreground"]``.
        env: the installing user's environment; ``MEMORYD_HOME`` is carried into the
            service and ``XDG_CONFIG_HOME`` decides where a systemd unit goes.
        home: the user's home directory.

    Raises:
        InvalidParams: an unsupported platform, or no absolute program path.
    """
    if not exec_args or not exec_args[0].startswith("/"):
        raise InvalidParams(
            "the service command must start with an absolute program path",
            exec_args=list(exec_args),
        )
    environment = {name: env[name] for name in CARRIED_ENV if env.get(name)}
    if platform.startswith("linux"):
        config_home = env.get("XDG_CONFIG_HOME", "")
        base = PurePosixPath(config_home) if config_home.startswith("/") else home / ".config"
        path = base / "systemd" / "user" / SYSTEMD_UNIT
        content = systemd_unit(systemd_command_line(exec_args), environment)
        enable = f"systemctl --user daemon-reload && systemctl --user enable --now {SYSTEMD_UNIT}"
        return InstallPlan(path, content, enable)
    if platform == "darwin":
        path = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        logs = home / "Library" / "Logs" / "memoryd"
        content = launchd_plist(exec_args, environment, logs)
        enable = f"launchctl bootstrap gui/$(id -u) {shlex.quote(str(path))}"
        return InstallPlan(path, content, enable, directories=(logs,))
    raise InvalidParams(
        f"install-service supports {' and '.join(PLATFORMS)}, not {platform!r}",
        platform=platform,
    )


# --- systemd -----------------------------------------------------------------------------------

_UNIT = """\
# memoryd: long-term markdown memory for coding agents, as a systemd user service.
# Written by `memoryd install-service`, which puts the absolute path of the memoryd that
# ran it in ExecStart. Then:
#   systemctl --user daemon-reload && systemctl --user enable --now {unit}
# Logs: journalctl --user -u memoryd    Reload the config: systemctl --user reload memoryd

[Unit]
Description=memoryd - long-term markdown memory for coding agents
# Give up after 5 failed starts in a minute instead of restarting forever.
StartLimitIntervalSec=60
StartLimitBurst=5

[Service]
# The daemon sends READY=1 on $NOTIFY_SOCKET once its socket listens.
Type=notify
NotifyAccess=main
ExecStart={exec_start}
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
# A graceful stop takes under 5 s; after this systemd kills.
TimeoutStopSec=15
# Descriptors: up to daemon.max_connections (512) clients plus a few per open workspace
# (index, WAL, watcher); the default soft limit of 1024 is too tight for both.
LimitNOFILE=8192
StandardOutput=journal
StandardError=journal
SyslogIdentifier=memoryd
{environment}\
# Hardening a user service can use. Not PrivateTmp, ProtectHome or ProtectSystem: they need
# mount namespaces that not every user manager has, and would hide the memory in $HOME or a
# MEMORYD_HOME (or socket) under /tmp from the daemon.
NoNewPrivileges=yes
UMask=0077
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native

[Install]
WantedBy=default.target
"""


def systemd_unit(exec_start: str, environment: Mapping[str, str]) -> str:
    """The unit text for an already quoted ``ExecStart`` line and extra environment."""
    lines = "".join(
        f"Environment={_systemd_quote(f'{name}={value}', force=True, dollar=False)}\n"
        for name, value in environment.items()
    )
    return _UNIT.format(unit=SYSTEMD_UNIT, exec_start=exec_start, environment=lines)


def systemd_command_line(args: Sequence[str]) -> str:
    """``args`` as an ``ExecStart=`` value: quoted, with ``%`` and ``$`` made literal."""
    return " ".join(_systemd_quote(arg) for arg in args)


def _systemd_quote(arg: str, *, force: bool = False, dollar: bool = True) -> str:
    # Specifiers (%h …) are expanded everywhere, $VAR only in command lines; double both.
    text = arg.replace("%", "%%")
    if dollar:
        text = text.replace("$", "$$")
    if not force and text and not any(c in text for c in " \t\n\r\"'\\;"):
        return text
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def systemd_template() -> str:
    """The repository's ``systemd/memoryd.service``: ExecStart via ``%h`` (the home dir)."""
    return systemd_unit("%h/.local/bin/memoryd serve --foreground", {})


# --- launchd -----------------------------------------------------------------------------------

_PLIST_COMMENT = (
    "<!-- memoryd: long-term markdown memory for coding agents, as a launchd agent.\n"
    "     Written by `memoryd install-service`. Enable: launchctl bootstrap gui/$(id -u) <this"
    " file>\n"
    "     Logs: ~/Library/Logs/memoryd/. KeepAlive restarts it after a crash, not after a"
    " clean stop. -->\n"
)


def launchd_plist(
    program_arguments: Sequence[str], environment: Mapping[str, str], log_dir: PurePath
) -> str:
    """The agent plist running ``program_arguments``, logging into ``log_dir``."""
    agent: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": list(program_arguments),
    }
    if environment:
        agent["EnvironmentVariables"] = dict(environment)
    agent |= {
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 10,
        "StandardOutPath": str(log_dir / "memoryd.out.log"),
        "StandardErrorPath": str(log_dir / "memoryd.log"),
    }
    xml = plistlib.dumps(agent, sort_keys=False).decode("utf-8")
    head, doctype, body = xml.partition('.dtd">\n')
    return head + doctype + _PLIST_COMMENT + body


def launchd_template() -> str:
    """The repository's ``launchd/dev.memoryd.plist``, for a placeholder user ``you``."""
    home = PurePosixPath("/Users/you")
    return launchd_plist(
        [str(home / ".local/bin/memoryd"), "serve", "--foreground"],
        {},
        home / "Library" / "Logs" / "memoryd",
    )
