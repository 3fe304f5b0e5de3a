"""`memoryd config show` / `memoryd config check`, and the CLI's exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.cli import exit_status, main
from memoryd.errors import ConfigError, DaemonNotRunning, InvalidParams, MemorydError


def test_config_show_lists_every_key_with_its_source(
    memoryd_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = memoryd_home / "config.toml"
    config_file.write_text("[search]\nmax_results = 9\n", encoding="utf-8")
    monkeypatch.setenv("MEMORYD_SEARCH_MIN_SCORE", "0.5")

    assert main(["config", "show"]) == 0

    out = capsys.readouterr().out
    assert f"# config file: {config_file}\n" in out
    assert f"# memory root: {memoryd_home / 'memory'}" in out
    assert f"max_results = 9  # file {config_file}" in out
    assert "min_score = 0.5  # env MEMORYD_SEARCH_MIN_SCORE" in out
    assert "half_life_days = 30.0  # default" in out
    assert "[search.mmr]" in out and "[confluence]" in out


def test_config_show_without_a_file_says_defaults_apply(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "show"]) == 0
    assert "(not found: defaults apply)" in capsys.readouterr().out


def test_config_show_json(
    memoryd_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "other.toml"
    config_file.write_text('[memory]\nroot = "/srv/memory"\n', encoding="utf-8")

    assert main(["config", "show", "--config", str(config_file), "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    assert report["config_file"] == str(config_file)
    assert report["config_file_found"] is True
    assert report["config"]["memory"]["root"] == "/srv/memory"
    assert report["config"]["search"]["mmr"]["lambda"] == 0.7
    assert report["sources"]["memory.root"] == f"file {config_file}"
    assert report["sources"]["search.mmr.lambda"] == "default"
    assert report["paths"]["memory_root"] == "/srv/memory"
    assert report["paths"]["socket_path"] == str(memoryd_home / "run" / "memoryd.sock")


def test_config_show_with_a_missing_explicit_file_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "show", "--config", str(tmp_path / "nope.toml")]) == 1
    assert "nope.toml does not exist" in capsys.readouterr().err


def test_config_show_reports_a_bad_environment_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMORYD_SEARCH_MAX_RESULT", "3")
    assert main(["config", "show"]) == 1
    assert "MEMORYD_SEARCH_MAX_RESULT" in capsys.readouterr().err


def test_config_check_accepts_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[search.mmr]\nenabled = true\nlambda = 0.5\n", encoding="utf-8")
    assert main(["config", "check", str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: ok\n"


def test_config_check_accepts_the_example_file(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[1] / "config.example.toml"
    assert main(["config", "check", str(example)]) == 0


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[search]\nmin_scor = 0.5\n", "search.min_scor"),
        ("[search]\nmin_score = 'high'\n", "search.min_score"),
        ("[dream]\nkeep_history = true\n", "dream.keep_history"),
        ("[search\n", "line 1"),
    ],
)
def test_config_check_rejects_a_bad_file_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: str
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(text, encoding="utf-8")
    assert main(["config", "check", str(bad)]) == 1
    captured = capsys.readouterr()
    assert named in captured.err
    assert str(bad) in captured.err
    assert captured.out == ""


def test_config_check_rejects_a_file_that_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[llm]\nmodel = "caf\xe9"\n')
    assert main(["config", "check", str(bad)]) == 1
    assert f"{bad} is not UTF-8" in capsys.readouterr().err


EVERY_ERROR = """
[serach]
x = 1
[search]
min_score = 7
max_results = "many"
[index]
max_chunk_chars = 100
chunk_overlap_chars = 200
[agents.roles.reviewer]
default_capability_mode = "godmode"
reasoning_effort = "extreme"
colour = "red"
description = "fine"
[agents.roles."bad name!"]
[agents.personas.skeptic]
capability_mode = "read-only"
instructions = "Doubt."
"""


def test_config_check_reports_every_error_each_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(EVERY_ERROR, encoding="utf-8")
    assert main(["config", "check", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert [error["key"] for error in report["errors"]] == [
        "serach",
        "search.min_score",
        "search.max_results",
        "index.chunk_overlap_chars",
        "agents.roles.reviewer.default_capability_mode",
        "agents.roles.reviewer.reasoning_effort",
        "agents.roles.reviewer.colour",
        "agents.roles.bad name!.name",
        "agents.personas.skeptic.capability_mode",
    ]
    assert "godmode" in report["errors"][4]["message"]

    assert main(["config", "check", str(bad)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 10 and lines[-1] == f"{bad}: 9 error(s)"
    assert all(line.startswith(f"memoryd: {bad}: ") for line in lines[:-1])


def test_config_check_ignores_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.toml"
    good.write_text("", encoding="utf-8")
    monkeypatch.setenv("MEMORYD_SEARCH_MIN_SCORE", "7")
    assert main(["config", "check", str(good)]) == 0


@pytest.mark.parametrize(
    "argv",
    [[], ["config"], ["config", "check"], ["config", "frobnicate"], ["no-such-command"]],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--help"]) == 0
    out = capsys.readouterr().out
    assert "show" in out and "check" in out


def test_exit_status_maps_error_codes() -> None:
    assert exit_status(None) == 0
    assert exit_status(ConfigError("bad", key="x")) == 1
    assert exit_status(MemorydError("boom")) == 1
    assert exit_status(InvalidParams("bad -n")) == 2
    assert exit_status(DaemonNotRunning("no daemon")) == 3


def test_python_dash_m_memoryd_runs_the_cli(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[serach]\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "config", "check", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "unknown key 'serach' (did you mean 'search'?)" in result.stderr


def test_memoryd_config_names_the_file_and_must_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    named = tmp_path / "named.toml"
    monkeypatch.setenv("MEMORYD_CONFIG", str(named))
    assert main(["config", "show"]) == 1
    assert "named.toml does not exist" in capsys.readouterr().err
    named.write_text("[flush]\nenabled = false\n", encoding="utf-8")
    assert main(["config", "show"]) == 0
    assert f"enabled = false  # file {named}" in capsys.readouterr().out
