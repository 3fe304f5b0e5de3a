"""``memoryd integrate`` (issue 15, Done when 3): real settings files holding other hooks and
MCP servers, run twice, uninstalled, dry-run, malformed."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from memoryd.cli import main
from memoryd.core.integrate import HOOK_EVENTS, is_our_command

CLAUDE_SETTINGS = {
    "permissions": {"allow": ["Bash(npm test:*)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}],
    },
    "model": "opus",
}
CLAUDE_JSON = {
    "numStartups": 42,
    "mcpServers": {"github": {"type": "stdio", "command": "gh-mcp", "args": []}},
    "projects": {"/src/app": {"allowedTools": []}},
}
CODEX_HOOKS = {
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "python3 check.py"}]}
        ]
    }
}
CODEX_TOML = """# my codex config
model = "gpt-5.1-codex"

[mcp_servers.docs]
command = "docs-mcp"
args = ["--stdio"]

[features]
web_search = true
"""


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return home


def _claude_files(home: Path) -> tuple[Path, Path]:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(CLAUDE_SETTINGS, indent=4))
    claude_json = home / ".claude.json"
    claude_json.write_text(json.dumps(CLAUDE_JSON))
    return settings, claude_json


def _snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


def test_claude_code_merge_twice_and_uninstall(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, claude_json = _claude_files(user_home)
    assert main(["integrate", "claude-code"]) == 0
    merged = json.loads(settings.read_text())
    # the user's settings and hooks are kept
    assert merged["permissions"] == CLAUDE_SETTINGS["permissions"] and merged["model"] == "opus"
    assert merged["hooks"]["PreToolUse"] == CLAUDE_SETTINGS["hooks"]["PreToolUse"]
    assert merged["hooks"]["Stop"][0] == CLAUDE_SETTINGS["hooks"]["Stop"][0]
    for event in HOOK_EVENTS["claude-code"]:
        ours = [
            h
            for g in merged["hooks"][event]
            for h in g["hooks"]
            if is_our_command(h["command"], "claude-code")
        ]
        assert len(ours) == 1 and ours[0]["type"] == "command", event
    servers = json.loads(claude_json.read_text())
    assert servers["mcpServers"]["github"] == CLAUDE_JSON["mcpServers"]["github"]
    assert servers["mcpServers"]["memoryd"]["args"][-1] == "mcp"
    assert servers["numStartups"] == 42 and servers["projects"] == CLAUDE_JSON["projects"]
    backups = sorted(p.name for p in user_home.rglob("*.memoryd-backup-*"))
    assert len(backups) == 2
    out = capsys.readouterr().out
    assert "backup:" in out

    # twice: nothing changes, no new backup
    before = _snapshot(user_home)
    assert main(["integrate", "claude-code"]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert _snapshot(user_home) == before

    # uninstall: the files equal the originals in meaning
    assert main(["integrate", "claude-code", "--uninstall"]) == 0
    assert json.loads(settings.read_text()) == CLAUDE_SETTINGS
    assert json.loads(claude_json.read_text()) == CLAUDE_JSON
    assert main(["integrate", "claude-code", "--uninstall"]) == 0
    assert "nothing to change" in capsys.readouterr().out


def test_dry_run_writes_nothing(user_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _claude_files(user_home)
    before = _snapshot(user_home)
    assert main(["integrate", "claude-code", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "+++" in out and "hook claude-code" in out and "nothing was written" in out
    assert _snapshot(user_home) == before
    assert main(["integrate", "codex", "--dry-run"]) == 0
    assert "[mcp_servers.memoryd]" in capsys.readouterr().out
    assert _snapshot(user_home) == before  # not even the missing ~/.codex files


def test_a_malformed_file_is_refused_and_nothing_written(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, claude_json = _claude_files(user_home)
    claude_json.write_text('{"mcpServers": {"github": ')  # torn
    before = _snapshot(user_home)
    assert main(["integrate", "claude-code"]) == 1
    err = capsys.readouterr().err
    assert str(claude_json) in err and "not valid JSON" in err and "nothing was written" in err
    assert _snapshot(user_home) == before  # settings.json (fine) was not written either

    settings.write_text('{"hooks": []}')
    claude_json.write_text("{}")
    assert main(["integrate", "claude-code"]) == 1
    assert "'hooks' is not an object" in capsys.readouterr().err

    codex = user_home / ".codex"
    codex.mkdir()
    (codex / "config.toml").write_text("model = \n")
    assert main(["integrate", "codex"]) == 1
    assert "not valid TOML" in capsys.readouterr().err
    assert not (codex / "hooks.json").exists()


def test_codex_merge_twice_and_uninstall(user_home: Path) -> None:
    codex = user_home / ".codex"
    codex.mkdir()
    (codex / "hooks.json").write_text(json.dumps(CODEX_HOOKS))
    (codex / "config.toml").write_text(CODEX_TOML)
    assert main(["integrate", "codex"]) == 0
    hooks = json.loads((codex / "hooks.json").read_text())
    assert hooks["hooks"]["PreToolUse"] == CODEX_HOOKS["hooks"]["PreToolUse"]
    assert set(hooks["hooks"]) == {"PreToolUse", *HOOK_EVENTS["codex"]}
    toml_text = (codex / "config.toml").read_text()
    assert toml_text.startswith(CODEX_TOML)  # every byte of the user's file kept
    config = tomllib.loads(toml_text)
    assert config["mcp_servers"]["docs"] == {"command": "docs-mcp", "args": ["--stdio"]}
    assert config["mcp_servers"]["memoryd"]["args"][-1] == "mcp"
    assert config["features"] == {"web_search": True}

    before = _snapshot(user_home)
    assert main(["integrate", "codex"]) == 0
    assert _snapshot(user_home) == before

    assert main(["integrate", "codex", "--uninstall"]) == 0
    assert (codex / "config.toml").read_text() == CODEX_TOML
    assert json.loads((codex / "hooks.json").read_text()) == CODEX_HOOKS


def test_a_server_the_user_named_memoryd_is_kept(user_home: Path) -> None:
    codex = user_home / ".codex"
    codex.mkdir()
    mine = '[mcp_servers.memoryd]\ncommand = "/opt/memoryd/bin/memoryd"\nargs = ["mcp"]\n'
    (codex / "config.toml").write_text(mine)
    assert main(["integrate", "codex"]) == 0
    assert (codex / "config.toml").read_text() == mine
    assert main(["integrate", "codex", "--uninstall"]) == 0
    assert (codex / "config.toml").read_text() == mine
    assert not (codex / "hooks.json").exists()  # it created it: removed with what it added


def test_project_scope_writes_the_project_files(user_home: Path, tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    assert main(["integrate", "claude-code", "--scope", "project", "-w", str(project)]) == 0
    assert "memoryd" in json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert (
        "SessionStart" in json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    )
    assert not (user_home / ".claude").exists()


def test_the_claude_code_plugin_registers_what_integrate_does() -> None:
    """integrations/claude-code-plugin (hooks + MCP server in one install) stays in step."""
    from memoryd.core.integrate import add_hooks, hook_command, server_entry

    plugin = Path(__file__).resolve().parents[1] / "integrations" / "claude-code-plugin"
    hooks = json.loads((plugin / "hooks" / "hooks.json").read_text())
    expected = add_hooks({}, "claude-code", hook_command(["memoryd"], "claude-code"))
    assert hooks["hooks"] == expected["hooks"]
    servers = json.loads((plugin / ".mcp.json").read_text())["mcpServers"]
    assert servers == {"memoryd": server_entry(["memoryd"])}
    manifest = json.loads((plugin / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "memoryd"
    market = json.loads((plugin.parent / ".claude-plugin" / "marketplace.json").read_text())
    assert market["plugins"][0]["source"] == "./claude-code-plugin"


def test_files_integrate_created_are_gone_after_uninstall(user_home: Path) -> None:
    assert main(["integrate", "codex"]) == 0
    assert main(["integrate", "claude-code"]) == 0
    assert main(["integrate", "codex", "--uninstall"]) == 0
    assert main(["integrate", "claude-code", "--uninstall"]) == 0
    left = sorted(str(p.relative_to(user_home)) for p in user_home.rglob("*") if p.is_file())
    assert left and all(".memoryd-backup-" in name for name in left), left


def test_integrate_json_lists_the_changes_and_backups(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, claude_json = _claude_files(user_home)
    assert main(["integrate", "claude-code", "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["dry_run"] is True and planned["backups"] == []
    assert {c["path"] for c in planned["changes"]} == {str(settings), str(claude_json)}
    assert all(c["action"] == "update" and c["diff"].startswith("---") for c in planned["changes"])
    assert json.loads(settings.read_text()) == CLAUDE_SETTINGS  # nothing written

    assert main(["integrate", "claude-code", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert len(done["backups"]) == 2 and all(Path(b).exists() for b in done["backups"])
    assert main(["integrate", "claude-code", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == []  # already registered


def test_a_symlinked_settings_file_is_written_through_its_link(user_home: Path) -> None:
    """Dotfile managers keep ``~/.claude/settings.json`` as a symlink into a repository:
    integrate edits the file the link points to and keeps the link (and its backup holds
    the target's text)."""
    dotfiles = user_home / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "claude-settings.json"
    target.write_text(json.dumps(CLAUDE_SETTINGS))
    target.chmod(0o600)
    (user_home / ".claude").mkdir()
    link = user_home / ".claude" / "settings.json"
    link.symlink_to(target)
    (user_home / ".claude.json").write_text("{}")

    assert main(["integrate", "claude-code"]) == 0
    assert link.is_symlink() and link.resolve() == target
    merged = json.loads(target.read_text())
    assert merged["model"] == "opus" and "SessionStart" in merged["hooks"]
    assert target.stat().st_mode & 0o777 == 0o600

    assert main(["integrate", "claude-code", "--uninstall"]) == 0
    assert link.is_symlink() and json.loads(target.read_text()) == CLAUDE_SETTINGS


def test_a_settings_path_that_is_a_fifo_is_refused_without_blocking(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (user_home / ".claude").mkdir()
    os.mkfifo(user_home / ".claude" / "settings.json")
    (user_home / ".claude.json").write_text("{}")
    assert main(["integrate", "claude-code"]) == 1
    assert "not a regular file" in capsys.readouterr().err


def test_project_files_linked_out_of_the_project_are_refused(
    user_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cloned repository may hold ``.mcp.json`` (or ``.claude``) as a symlink to a file of
    the user's: integrate read it, copied it into the project as a backup and merged its
    contents into a file there. Refused; nothing read or written."""
    private = user_home / "private.json"
    private.write_text(json.dumps({"token": "kept-out-of-the-repo"}))
    for linked in (".mcp.json", ".claude"):
        project = tmp_path / f"repo{linked}"
        project.mkdir()
        if linked == ".claude":
            (user_home / "elsewhere").mkdir(exist_ok=True)
            (project / ".claude").symlink_to(user_home / "elsewhere")
        else:
            (project / ".mcp.json").symlink_to(private)
        args = ["integrate", "claude-code", "--scope", "project", "-w", str(project)]
        assert main(args) == 1, linked
        assert "outside the project" in capsys.readouterr().err
        assert sorted(p.name for p in project.iterdir()) == [linked]
        assert json.loads(private.read_text()) == {"token": "kept-out-of-the-repo"}
        assert not list((user_home).rglob("*.memoryd-backup-*"))
    assert not list((user_home / "elsewhere").iterdir())


def test_a_settings_file_nested_too_deep_is_refused_not_a_traceback(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (user_home / ".claude").mkdir()
    (user_home / ".claude" / "settings.json").write_text("[" * 100_000)
    (user_home / ".claude.json").write_text("{}")
    assert main(["integrate", "claude-code"]) == 1
    assert "not valid JSON" in capsys.readouterr().err
