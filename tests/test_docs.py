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
