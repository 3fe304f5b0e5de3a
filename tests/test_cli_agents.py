"""`memoryd agents list|resolve` against a live daemon: what a person and a spawning agent see.

One daemon per module runs as a real subprocess (``python -m memoryd serve --foreground``) with
``agents.user_dir`` pointing at a temp user directory; each test builds its own project under
the module's home. Most commands run in-process through :func:`memoryd.cli.main`; the README
example and the fail-closed exit status run as real ``python -m memoryd`` processes.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memoryd.cli import EXIT_ERROR, EXIT_NO_DAEMON, EXIT_OK, EXIT_USAGE, main
from tests.runtime.daemon_fixtures import DaemonProcess, memoryd_cli

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Live:
    home: Path
    user: Path


@pytest.fixture(scope="module")
def live_daemon() -> Iterator[Live]:
    home = Path(tempfile.mkdtemp(prefix="mdag-", dir="/tmp")).resolve()
    user = home / "user-grok"
    user.mkdir()
    (home / "config.toml").write_text(
        f'[embedding]\nprovider = "none"\n[agents]\nuser_dir = "{user}"\n'
        '[agents.roles.planner]\ndescription = "Plans work"\n',
        encoding="utf-8",
    )
    daemon = DaemonProcess(home)
    try:
        daemon.start()
        yield Live(home, user)
    finally:
        daemon.kill()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def live(live_daemon: Live, memoryd_home: Path, monkeypatch: pytest.MonkeyPatch) -> Live:
    """The module's daemon, with this test's MEMORYD_HOME pointing at it."""
    monkeypatch.setenv("MEMORYD_HOME", str(live_daemon.home))
    return live_daemon


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def new_project(live: Live, name: str) -> Path:
    """A git repository (``.git`` directory) under the module's home."""
    path = live.home / "projects" / name
    (path / ".git").mkdir(parents=True)
    return path


def reviewer_project(live: Live, name: str) -> Path:
    repo = new_project(live, name)
    grok = repo / ".grok"
    write(
        grok / "agents" / "reviewer.md",
        "---\nname: reviewer\ndescription: Reviews a change.\neffort: high\n"
        "isolation: worktree\n---\nReview it.\n",
    )
    write(grok / "agents" / "broken.md", "---\nname: broken\n---\nNo description.\n")
    write(grok / "roles" / "reviewer.toml", 'reasoning_effort = "xhigh"\nmodel = "role-model"\n')
    write(grok / "personas" / "skeptic.toml", 'instructions = "Doubt."\nmodel = "grok-4"\n')
    write(grok / "personas" / "operator.toml", 'capability_mode = "all"\n')
    return repo


# --------------------------------------------------------------------------- README


def readme_section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_the_readme_example_is_what_a_real_run_prints(live: Live) -> None:
    """The section's files, written where their comments say, give exactly its JSON."""
    section = readme_section("Sub-agent configuration")
    app = live.home / "src" / "app"
    (app / ".git").mkdir(parents=True)
    [agent_md] = re.findall(r"```markdown\n(.*?)```", section, re.S)
    write(app / ".grok" / "agents" / "reviewer.md", agent_md)
    for block in re.findall(r"```toml\n(.*?)```", section, re.S):
        where = re.match(r"# (\.grok/\S+\.toml)\n", block)
        assert where, f"a TOML example without its path comment:\n{block}"
        write(app / where.group(1), block)
    # The two files the role and the persona name (their text is in the JSON below).
    write(app / ".grok" / "roles" / "reviewer-prompt.md", "Focus on correctness before style.\n")
    write(app / ".grok" / "personas" / "skeptic.md", "Never accept 'it works on my machine'.\n")

    [command] = re.findall(r"`(memoryd agents resolve [^`]+)`", section)
    [expected_text] = re.findall(r"```json\n(.*?)```", section, re.S)
    expected = json.loads(expected_text)

    done = memoryd_cli(live.home, *shlex.split(command)[1:], cwd=app)
    assert done.returncode == EXIT_OK, done.stderr
    got = json.loads(done.stdout)
    shown_definition = expected.pop("definition")
    assert {k: v for k, v in got.items() if k != "definition"} == expected
    assert got["definition"]["name"] == shown_definition["name"]
    assert got["definition"]["origin"] == shown_definition["origin"]
    assert got["definition"]["path"] == str(app / ".grok" / "agents" / "reviewer.md")
    assert got["definition"]["path"].endswith(shown_definition["path"])
    # The JSON is printed as the README shows it: two-space indent, one key per line.
    for key in expected:
        assert f'\n  "{key}": ' in done.stdout


# --------------------------------------------------------------------------- list


def test_list_shows_where_each_came_from_and_broken_files_on_stderr(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = reviewer_project(live, "listing")
    write(live.user / "agents" / "user-only.md", "---\nname: user-only\ndescription: U.\n---\nU\n")
    ws = repo / "deep" / "pkg"
    ws.mkdir(parents=True)

    code, out, err = run(capsys, "agents", "list", "-w", str(ws))
    assert code == EXIT_ERROR  # a broken file is an error, shown beside the rest
    lines = out.splitlines()
    entries = [line.split() for line in lines if re.match(r"  \S", line)]
    row = {entry[0]: entry[1] for entry in entries}
    assert row["reviewer"] == "project" and row["user-only"] == "user"
    assert row["explore"] == row["general-purpose"] == "bundled"
    assert row["planner"] == "config" and row["skeptic"] == "project"
    assert "broken" not in row and "operator" not in row
    assert str(repo / ".grok" / "agents" / "reviewer.md") in out
    assert str(live.user / "agents" / "user-only.md") in out
    assert all(line == line.rstrip() for line in lines)
    problems = err.splitlines()
    assert len(problems) == 2
    assert any("broken.md" in p and "'description'" in p for p in problems)
    assert any("operator.toml" in p and "'capability_mode'" in p for p in problems)

    code, out, err = run(capsys, "agents", "list", "-w", str(ws), "--json")
    assert code == EXIT_ERROR
    listing = json.loads(out)
    assert {a["name"]: a["origin"] for a in listing["agents"]}["reviewer"] == "project"
    assert {(Path(e["file"]).name, e["field"]) for e in listing["errors"]} == {
        ("broken.md", "description"),
        ("operator.toml", "capability_mode"),
    }

    (repo / ".grok" / "agents" / "broken.md").unlink()
    (repo / ".grok" / "personas" / "operator.toml").unlink()
    code, out, err = run(capsys, "agents", "list", "-w", str(ws))
    assert (code, err) == (EXIT_OK, "")


# --------------------------------------------------------------------------- resolve


def test_resolve_with_every_flag_gives_the_cascades_answer(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(reviewer_project(live, "flags"))
    base = ("agents", "resolve", "reviewer", "-w", ws)

    code, out, _ = run(capsys, *base, "--parent-model", "parent", "--json")
    assert code == EXIT_OK
    plain = json.loads(out)
    assert (plain["model"], plain["reasoning_effort"], plain["isolation"]) == (
        "role-model",
        "xhigh",
        "worktree",
    )

    flags = (
        "--persona", "skeptic", "--model", "flag-model", "--effort", "low",
        "--capability", "execute", "--isolation", "none", "--parent-model", "parent",
    )  # fmt: skip
    code, out, _ = run(capsys, *base, *flags, "--json")
    assert code == EXIT_OK
    answer: dict[str, Any] = json.loads(out)
    assert {k: v for k, v in answer.items() if k != "definition"} == {
        "model": "flag-model",
        "reasoning_effort": "low",
        "capability_mode": "execute",
        "persona": "skeptic",
        "persona_instructions": "<persona>\nDoubt.\n</persona>",
        "role_prompt": None,
        "role_prompt_warning": None,
        "role_name": "reviewer",
        "persona_error": None,
        "isolation": "worktree",  # `none` is upgraded by the definition's worktree
    }
    assert answer["definition"]["origin"] == "project"

    code, out, _ = run(capsys, *base, *flags)
    assert code == EXIT_OK
    table = dict(line.split(None, 1) for line in out.splitlines() if " " in line.strip())
    assert table["model"] == "flag-model" and table["capability_mode"] == "execute"
    assert table["persona_error"] == "-"
    assert table["definition"] == f"reviewer (project: {ws}/.grok/agents/reviewer.md)"

    write(Path(ws) / ".grok" / "roles" / "reviewer.toml", 'reasoning_effort = "medium"\n')
    code, out, _ = run(capsys, *base, "--parent-model", "parent", "--json")
    edited = json.loads(out)
    assert (edited["reasoning_effort"], edited["model"]) == ("medium", "parent")  # no restart


def test_a_persona_error_exits_1_so_the_caller_does_not_spawn(live: Live) -> None:
    ws = reviewer_project(live, "fail-closed")
    done = memoryd_cli(live.home, "agents", "resolve", "reviewer", "--persona", "ghost", cwd=ws)
    assert done.returncode == EXIT_ERROR
    assert "persona 'ghost' not found" in done.stderr and "do not spawn" in done.stderr
    assert re.search(r"^persona_error\s+persona 'ghost' not found$", done.stdout, re.M)

    done = memoryd_cli(
        live.home, "agents", "resolve", "reviewer", "--persona", "ghost", "--json", cwd=ws
    )
    assert done.returncode == EXIT_ERROR
    assert json.loads(done.stdout)["persona_error"] == "persona 'ghost' not found"


def test_bad_values_unknown_types_and_broken_definitions_are_reported(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(reviewer_project(live, "bad"))

    code, _, err = run(capsys, "agents", "resolve", "reviewer", "-w", ws, "--effort", "extreme")
    assert code == EXIT_USAGE and "--effort" in err and "extreme" in err

    code, _, err = run(capsys, "agents", "resolve", "reviewer", "-w", ws, "--persona", "two words")
    assert code == EXIT_USAGE and "overrides.persona" in err

    code, _, err = run(capsys, "agents", "resolve", "nobody", "-w", ws)
    assert code == EXIT_ERROR and "'nobody'" in err
    assert "known here:" in err and "reviewer" in err and "explore" in err

    code, _, err = run(capsys, "agents", "resolve", "broken", "-w", ws)
    assert code == EXIT_ERROR and "broken.md" in err and "'description'" in err


def test_without_a_daemon_agents_commands_exit_3(
    memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (("agents", "list"), ("agents", "resolve", "explore")):
        code, _, err = run(capsys, *argv, "-w", str(memoryd_home))
        assert code == EXIT_NO_DAEMON
        assert "memoryd serve" in err


def test_help_names_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "agents", "resolve", "--help")
    assert code == EXIT_OK
    flags = ("--persona", "--model", "--effort", "--capability", "--isolation", "--parent-model")
    for flag in (*flags, "--json", "--workspace"):
        assert flag in out
