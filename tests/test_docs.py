"""The README stays true: every socket method is documented, and the quick start's commands
are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

from memoryd.runtime.main import Daemon
from memoryd.store import configfile

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_every_socket_method_is_documented_in_the_protocol_table() -> None:
    methods = Daemon(configfile.load()).methods.names
    table = _section("Socket protocol")
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z_]+)` \|", table, re.M))
    assert methods, "the daemon registers methods"
    assert sorted(set(methods) - documented) == [], "methods missing from the README"
    assert sorted(documented - set(methods)) == [], "README documents methods that do not exist"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    quick = _section("Quick start")
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_the_readme_run_command_installs_and_serves() -> None:
    quick = _section("Quick start")
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    assert any("pip install ." in b and "memoryd serve" in b for b in blocks)


def test_the_agents_section_says_how_to_integrate_check_and_undo_each_agent() -> None:
    from memoryd.core.config import InjectConfig
    from memoryd.core.integrate import HOOK_EVENTS

    agents = _section("Agents")
    for title, agent in (("Claude Code", "claude-code"), ("Codex", "codex")):
        assert f"### {title}\n" in agents
        assert f"memoryd integrate {agent}" in agents
    for text in ("--uninstall", "--dry-run", "--scope project", "memoryd status", "last ingest"):
        assert text in agents
    table = {m for m in re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", agents, re.M) for m in m if m}
    assert set(HOOK_EVENTS["claude-code"]) | set(HOOK_EVENTS["codex"]) <= table
    for key in InjectConfig.__dataclass_fields__:
        assert f"[inject] {key}" in agents, key
    assert "https://code.claude.com/docs/en/hooks" in agents
    assert "https://developers.openai.com/codex/hooks" in agents
    assert "memoryd integrate" in _section("MCP clients")
