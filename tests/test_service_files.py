"""The systemd unit and launchd agent: the repository's files, rendering, and installing."""

from __future__ import annotations

import plistlib
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memoryd.core.service_files import (
    launchd_template,
    render_service,
    systemd_command_line,
    systemd_template,
)
from memoryd.errors import InvalidParams
from memoryd.runtime.service import daemon_command, install, plan_for_this_user

REPO = Path(__file__).resolve().parent.parent
COMMAND = ["/opt/memoryd/bin/memoryd", "serve", "--foreground"]
LINUX_ENABLE = "systemctl --user daemon-reload && systemctl --user enable --now memoryd.service"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """``[Section]`` / ``Key=Value`` lines of a unit file (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"a setting outside any section: {raw!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not a Key=Value line: {raw!r}"
        current.setdefault(key, []).append(value)
    return sections


def exec_args(value: str) -> list[str]:
    """How systemd splits an ExecStart value, for the subset of syntax memoryd writes."""
    return [literal(arg) for arg in shlex.split(value)]


def literal(arg: str) -> str:
    """``%%`` is ``%`` and ``$$`` is ``$``; a lone one would be expanded by systemd."""
    out, i = [], 0
    while i < len(arg):
        char = arg[i]
        if char in "%$":
            assert arg[i + 1 : i + 2] == char, f"systemd would expand {arg[i:]!r}"
            i += 1
        out.append(char)
        i += 1
    return "".join(out)


# --- the files in the repository ---------------------------------------------------------------


def test_the_repository_unit_is_a_notify_user_service() -> None:
    text = (REPO / "systemd" / "memoryd.service").read_text(encoding="utf-8")
    unit = parse_unit(text)
    service = unit["Service"]
    assert service["Type"] == ["notify"]
    assert service["Restart"] == ["on-failure"]
    assert service["RestartSec"]
    assert service["StandardError"] == ["journal"]
    assert service["NoNewPrivileges"] == ["yes"]
    # room for daemon.max_connections clients and the workspaces' files (issue #17)
    assert int(service["LimitNOFILE"][0]) >= 2 * 512 + 1024
    assert "PrivateTmp" not in service  # it would hide a socket or MEMORYD_HOME under /tmp
    program, *args = shlex.split(service["ExecStart"][0])
    assert program == "%h/.local/bin/memoryd"  # %h: systemd's specifier for the home dir
    assert args == ["serve", "--foreground"]
    assert unit["Install"]["WantedBy"] == ["default.target"]
    assert text == systemd_template(), "regenerate it from memoryd.core.service_files"


def test_the_repository_plist_is_a_keepalive_agent() -> None:
    data = (REPO / "launchd" / "dev.memoryd.plist").read_bytes()
    agent = plistlib.loads(data)
    assert agent["Label"] == "dev.memoryd"
    assert agent["ProgramArguments"][1:] == ["serve", "--foreground"]
    assert agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert PurePosixPath(agent[key]).parent == PurePosixPath("/Users/you/Library/Logs/memoryd")
    assert data.decode("utf-8") == launchd_template(), "regenerate it from core.service_files"


# --- rendering ---------------------------------------------------------------------------------


def test_linux_renders_a_user_unit_with_the_given_command() -> None:
    args = [*COMMAND, "--config", "/home/me/memoryd.toml"]
    plan = render_service("linux", args, {"MEMORYD_HOME": "/data/md"}, PurePosixPath("/home/me"))
    assert plan.path == PurePosixPath("/home/me/.config/systemd/user/memoryd.service")
    assert plan.enable_command == LINUX_ENABLE
    assert plan.directories == ()
    service = parse_unit(plan.content)["Service"]
    assert exec_args(service["ExecStart"][0]) == args
    assert service["Environment"] == ['"MEMORYD_HOME=/data/md"']
    assert service["Type"] == ["notify"]


def test_linux_honours_xdg_config_home() -> None:
    plan = render_service("linux", COMMAND, {"XDG_CONFIG_HOME": "/cfg"}, PurePosixPath("/home/me"))
    assert plan.path == PurePosixPath("/cfg/systemd/user/memoryd.service")
    assert "Environment=" not in plan.content


def test_only_memoryd_home_is_carried_into_the_service() -> None:
    env = {"MEMORYD_HOME": "/data/md", "OPENAI_API_KEY": "sk-secret", "MEMORYD_LOG_LEVEL": "debug"}
    for platform in ("linux", "darwin"):
        plan = render_service(platform, COMMAND, env, PurePosixPath("/home/me"))
        assert "/data/md" in plan.content
        assert "sk-secret" not in plan.content
        assert "MEMORYD_LOG_LEVEL" not in plan.content


def test_darwin_renders_a_launch_agent() -> None:
    home = PurePosixPath("/Users/Jane Doe")
    plan = render_service("darwin", COMMAND, {"MEMORYD_HOME": "/data/md"}, home)
    assert plan.path == home / "Library/LaunchAgents/dev.memoryd.plist"
    assert plan.enable_command == (
        "launchctl bootstrap gui/$(id -u) '/Users/Jane Doe/Library/LaunchAgents/dev.memoryd.plist'"
    )
    assert plan.directories == (home / "Library/Logs/memoryd",)
    agent = plistlib.loads(plan.content.encode("utf-8"))
    assert agent["ProgramArguments"] == COMMAND
    assert agent["EnvironmentVariables"] == {"MEMORYD_HOME": "/data/md"}
    assert agent["StandardErrorPath"] == "/Users/Jane Doe/Library/Logs/memoryd/memoryd.log"
    assert agent["RunAtLoad"] is True


@pytest.mark.parametrize("platform", ["win32", "cygwin", "freebsd14"])
def test_other_platforms_are_refused(platform: str) -> None:
    with pytest.raises(InvalidParams, match="linux and darwin"):
        render_service(platform, COMMAND, {}, PurePosixPath("/home/me"))


@pytest.mark.parametrize("args", [[], ["memoryd", "serve"]])
def test_the_program_must_be_an_absolute_path(args: list[str]) -> None:
    with pytest.raises(InvalidParams, match="absolute"):
        render_service("linux", args, {}, PurePosixPath("/home/me"))


_arg = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")))


@given(st.lists(_arg, max_size=6))
@example(["%h", "$HOME", "a b", 'say "hi"', "back\\slash", "", ";", "it's"])
def test_any_argument_survives_exec_start_quoting(args: list[str]) -> None:
    command = ["/opt/memoryd/bin/memoryd", *args]
    assert exec_args(systemd_command_line(command)) == command


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_a_rendered_unit(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "memoryd", "serve", "--foreground", "--config", "/a b/%x$y.toml"]
    plan = render_service("linux", args, {"MEMORYD_HOME": "/tmp/a b"}, tmp_path)
    unit = tmp_path / "memoryd.service"
    unit.write_text(plan.content, encoding="utf-8")
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "memoryd.service" not in done.stderr, done.stderr


# --- this machine's plan -----------------------------------------------------------------------


def test_the_daemon_command_prefers_the_script_next_to_the_interpreter(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    assert daemon_command(executable=str(python)) == [
        str(python),
        "-m",
        "memoryd",
        "serve",
        "--foreground",
    ]
    script = bin_dir / "memoryd"
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    script.chmod(0o755)
    assert daemon_command(executable=str(python)) == [str(script), "serve", "--foreground"]


def test_the_plan_keeps_config_and_memoryd_home_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = plan_for_this_user(
        Path("conf/memoryd.toml"),
        platform="darwin",
        env={"MEMORYD_HOME": "state", "OPENAI_API_KEY": "sk-secret"},
        home=tmp_path / "home",
        executable=str(tmp_path / "bin" / "python"),
    )
    agent = plistlib.loads(plan.content.encode("utf-8"))
    assert agent["ProgramArguments"][-2:] == ["--config", str(tmp_path / "conf/memoryd.toml")]
    assert agent["EnvironmentVariables"] == {"MEMORYD_HOME": str(tmp_path / "state")}


def test_the_default_plan_runs_this_installation(memoryd_home: Path) -> None:
    plan = plan_for_this_user(platform="linux", home=Path("/home/me"))
    service = parse_unit(plan.content)["Service"]
    assert exec_args(service["ExecStart"][0]) == daemon_command()
    assert service["Environment"] == [f'"MEMORYD_HOME={memoryd_home}"']


# --- installing ------------------------------------------------------------------------------


def test_a_dry_run_writes_nothing_and_shows_file_and_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    plan = render_service("linux", COMMAND, {}, home)
    shown = install(plan, dry_run=True)
    assert shown == (
        f"# would write {home}/.config/systemd/user/memoryd.service (mode 0644):\n"
        f"{plan.content}"
        f"# then enable and start it with:\n{LINUX_ENABLE}\n"
    )
    assert not home.exists()


def test_install_writes_the_unit_under_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    plan = render_service("linux", COMMAND, {}, home)
    said = install(plan, dry_run=False)
    unit = home / ".config/systemd/user/memoryd.service"
    assert unit.read_text(encoding="utf-8") == plan.content
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    assert said == f"wrote {unit}\nenable and start it with:\n  {LINUX_ENABLE}\n"
    assert install(plan, dry_run=False).startswith(f"unchanged {unit}\n")


def test_install_replaces_an_older_agent_and_creates_the_log_dir(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = render_service("darwin", COMMAND, {}, home)
    install(old, dry_run=False)
    new = render_service("darwin", [*COMMAND, "--config", "/c.toml"], {}, home)
    assert install(new, dry_run=False).startswith("wrote ")
    written = Path(new.path)
    assert written.read_text(encoding="utf-8") == new.content
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert (home / "Library/Logs/memoryd").is_dir()


# --- a pipx-style installation ---------------------------------------------------------------


def _pipx_style_install(tmp_path: Path) -> tuple[Path, Path]:
    """memoryd installed as pipx (or `uv tool install`) does it: its own virtualenv with the
    console script in its ``bin/``, and a symlink to that script on the user's PATH.

    The virtualenv finds memoryd and its dependencies through a ``.pth`` file (no network);
    returns (the venv's ``bin/memoryd``, the symlink in ``~/.local/bin``).
    """
    venv = tmp_path / "pipx" / "venvs" / "memoryd"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    site = next(venv.glob("lib/python*/site-packages"))
    here = [p for p in sys.path if p.endswith("site-packages")]
    (site / "memoryd-test.pth").write_text("\n".join([str(REPO), *here]) + "\n")
    script = venv / "bin" / "memoryd"
    script.write_text(  # what pip writes for a console_scripts entry point
        f"#!{venv / 'bin' / 'python'}\n"
        "import sys\nfrom memoryd.cli import main\nif __name__ == '__main__':\n"
        "    sys.exit(main())\n"
    )
    script.chmod(0o755)
    local_bin = tmp_path / "home" / ".local" / "bin"
    local_bin.mkdir(parents=True)
    (local_bin / "memoryd").symlink_to(script)
    return script, local_bin / "memoryd"


def test_install_service_from_a_pipx_install_runs_that_installations_entry_point(
    tmp_path: Path,
) -> None:
    script, on_path = _pipx_style_install(tmp_path)
    home = tmp_path / "home"
    env = {"HOME": str(home), "PATH": f"{on_path.parent}:/usr/bin:/bin"}
    done = subprocess.run(
        ["memoryd", "install-service", "--dry-run"],
        env={**env, "MEMORYD_HOME": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    unit_text = done.stdout.split("\n", 1)[1].split("# then enable")[0]
    service = parse_unit(unit_text)["Service"]
    command = exec_args(service["ExecStart"][0])
    assert command == [str(script), "serve", "--foreground"]  # the venv's, not this one's
    assert not command[0].startswith(str(Path(sys.executable).parent))
    ran = subprocess.run(  # and the program the unit names runs this memoryd
        [command[0], "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0 and ran.stdout.startswith("memoryd "), ran.stderr
