"""``memoryd hook`` stays a short process (issue 15, Done when 2): what the agent waits for is
mostly the interpreter start and the imports, so the hook path must not load the daemon's
modules or the heavy libraries. A test that fails when someone adds such an import to a module
the hook path loads (``memoryd.cli``, ``cli.common``, ``client``, ``store.configfile``,
``core.config``, ``core.paths``, ``core.protocol``, ``core.hooks``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.cli import build_parser
from memoryd.cli.hook import quick_args

#: Never on the hook path: third-party libraries (each 5-40 ms to import), the daemon's layers,
#: and the memoryd modules only other commands need.
FORBIDDEN = (
    "anyio",
    "asyncio",
    "blake3",
    "httpx",
    "numpy",
    "sqlite3",
    "sqlite_vec",
    "structlog",
    "uvloop",
    "watchfiles",
    "yaml",
    "memoryd.client.aio",
    "memoryd.core.agents",
    "memoryd.core.chunking",
    "memoryd.core.secrets",
    "memoryd.providers",
    "memoryd.runtime",
    "memoryd.store.index",
)

HOOK_PATH = """
import json, sys
from memoryd.cli import main
code = main(["hook", "claude-code"])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

CONFIG = """
[inject]
on_prompt = true
min_score = 0.8

[agents.roles.reviewer]
description = "reads diffs"
model = "gpt-5"

[llm]
model = "gpt-5-mini"
"""


def hook_modules(home: Path, config: Path | None) -> tuple[set[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["MEMORYD_HOME"] = str(home)  # no daemon there
    if config is not None:
        env["MEMORYD_CONFIG"] = str(config)
    event = {"session_id": "s1", "cwd": str(home), "hook_event_name": "Stop"}
    done = subprocess.run(
        [sys.executable, "-c", HOOK_PATH],
        input=json.dumps(event).encode(),
        env=env,
        capture_output=True,
        timeout=30,
        check=True,
    )
    reply = json.loads(done.stdout)
    assert reply["code"] == 0
    return set(reply["modules"]), done.stderr.decode()


@pytest.mark.parametrize("with_config", [False, True], ids=["no-config-file", "config-file"])
def test_the_hook_path_imports_no_heavy_module(tmp_path: Path, with_config: bool) -> None:
    config = None
    if with_config:
        config = tmp_path / "config.toml"
        config.write_text(CONFIG, encoding="utf-8")
    modules, stderr = hook_modules(tmp_path, config)
    assert "memoryd is not running" in stderr  # it did go as far as the socket
    assert {"memoryd.cli.hook", "memoryd.client.sync", "memoryd.store.configfile"} <= modules
    loaded = sorted(
        name
        for name in modules
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)
    )
    assert loaded == []
    # no other command module either: the hook does not build the whole command line
    commands = sorted(m for m in modules if m.startswith("memoryd.cli."))
    assert commands == ["memoryd.cli.common", "memoryd.cli.hook"]


@pytest.mark.parametrize(
    "argv",
    [
        ["claude-code"],
        ["codex"],
        ["codex", "--config", "/etc/m.toml"],
        ["--config", "/etc/m.toml", "claude-code"],
        ["--config=/etc/m.toml", "codex"],
        ["codex", "--config=/etc/m.toml"],
    ],
)
def test_the_quick_reading_of_the_arguments_agrees_with_the_parser(argv: list[str]) -> None:
    args = build_parser().parse_args(["hook", *argv])
    assert quick_args(argv) == (args.agent, args.config)


@pytest.mark.parametrize(
    "argv",
    [[], ["gemini"], ["codex", "extra"], ["codex", "--conf", "f"], ["codex", "--config", "-x"]],
)
def test_other_arguments_go_to_the_parser(argv: list[str]) -> None:
    assert quick_args(argv) is None


def test_the_hook_process_ends_at_once_with_its_line_on_stderr(tmp_path: Path) -> None:
    """``memoryd hook`` ends with ``os._exit`` (no interpreter teardown): what it wrote still
    reaches the agent, and the status is 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["MEMORYD_HOME"] = str(tmp_path)  # no daemon there
    event = {"session_id": "s1", "cwd": str(tmp_path), "hook_event_name": "Stop"}
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "hook", "codex"],
        input=json.dumps(event).encode(),
        env=env,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == b""
    assert done.stderr.startswith(b"memoryd hook codex: memoryd is not running")
    assert done.stderr.count(b"\n") == 1
