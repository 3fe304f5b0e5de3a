"""Every command's ``--help`` is accurate, usage errors exit 2, and the README documents them all.

The commands are read from the real parser (:func:`memoryd.cli.build_parser`), so a command
or option added later is covered without touching this file.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from memoryd.cli import build_parser, main

README = Path(__file__).resolve().parents[1] / "README.md"
#: Options every client command shares; the README's CLI section explains them once.
COMMON_OPTIONS = {"-h", "--help", "--config", "-w", "--workspace"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = []
    for name, sub in _subcommands(parser).items():
        found.append(((*path, name), sub))
        found.extend(_walk(sub, (*path, name)))
    return found


COMMANDS = dict(_walk(build_parser()))
#: Commands that run something (not a group such as ``config`` that only holds subcommands).
LEAVES = {path: parser for path, parser in COMMANDS.items() if not _subcommands(parser)}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [opt for action in parser._actions for opt in action.option_strings]


def _positionals(parser: argparse.ArgumentParser) -> list[str]:
    return [
        str(action.metavar or action.dest)
        for action in parser._actions
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction)
    ]


def test_the_commands_of_spec_12_that_exist_now_are_registered() -> None:
    expected = {
        ("serve",),
        ("status",),
        ("search",),
        ("get",),
        ("remember",),
        ("reindex",),
        ("doctor",),
        ("install-service",),
        ("config", "show"),
        ("config", "check"),
    }
    assert expected <= set(LEAVES)


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for path in COMMANDS:
        if len(path) == 1:
            assert re.search(rf"^\s+{re.escape(path[0])}\s", out, re.MULTILINE), path


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_help_exits_0_and_mentions_every_option(
    capsys: pytest.CaptureFixture[str], path: tuple[str, ...]
) -> None:
    assert main([*path, "--help"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out
    assert out.startswith(f"usage: memoryd {' '.join(path)}")
    parser = COMMANDS[path]
    for option in _options(parser):
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", out), option
    for positional in _positionals(parser):
        assert positional in out
    for name in _subcommands(parser):
        assert name in out
    assert parser.description, "the command says what it does"
    assert " ".join(parser.description.split()) in " ".join(out.split())


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_every_option_has_help_text(path: tuple[str, ...]) -> None:
    for action in LEAVES[path]._actions:
        assert action.help, f"memoryd {' '.join(path)}: {action.option_strings or action.dest}"


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_an_unknown_flag_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], path: tuple[str, ...]
) -> None:
    required = [
        arg
        for action in LEAVES[path]._actions
        if action.option_strings and action.required
        for arg in (action.option_strings[-1], "x")
    ]
    # hook's AGENT and completion's SHELL are choices
    value = {("hook",): "claude-code", ("integrate",): "claude-code", ("completion",): "bash"}.get(
        path, "x"
    )
    argv = [*path, *(value for _ in _positionals(LEAVES[path])), *required, "--no-such-flag"]
    # An agent runs `memoryd hook`: whatever it is given, it must not fail the agent (exit 0).
    assert main(argv) == (0 if path == ("hook",) else 2)
    err = capsys.readouterr().err
    assert "usage: memoryd" in err
    assert "--no-such-flag" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["search"],
        ["get"],
        ["remember"],
        ["config", "check"],
        ["search", "x", "-n", "many"],
        ["search", "x", "--min-score", "high"],
        ["search", "x", "--source", "elsewhere"],
        ["get", "MEMORY.md", "--from", "two"],
        ["get", "MEMORY.md", "--lines"],
        ["status", "extra"],
    ],
)
def test_missing_or_malformed_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"usage: memoryd {argv[0]}" in captured.err
    assert "Traceback" not in captured.err


def _readme_cli_section() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## CLI\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## CLI' section"
    return match.group(1)


def _readme_rows(path: tuple[str, ...]) -> list[str]:
    """The README CLI table rows that document ``memoryd <path>``."""
    pattern = re.compile(rf"`memoryd {re.escape(' '.join(path))}(?=[\s`\[])")
    return [
        line
        for line in _readme_cli_section().splitlines()
        if line.startswith("|") and pattern.search(line)
    ]


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_the_readme_documents_every_command_and_its_options(path: tuple[str, ...]) -> None:
    rows = _readme_rows(path)
    assert rows, f"README.md's CLI section does not mention `memoryd {' '.join(path)}`"
    documented = " ".join(rows)
    for action in LEAVES[path]._actions:
        options = set(action.option_strings)
        if options and not options & COMMON_OPTIONS:
            assert any(
                re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", documented) for opt in options
            ), f"README.md does not document {'/'.join(sorted(options))} of {' '.join(path)}"


def test_the_readme_explains_the_common_options_and_exit_statuses() -> None:
    section = _readme_cli_section()
    for text in ("-w/--workspace", "--config", "0 ok", "1 error", "2 usage", "3 no daemon"):
        assert text in section


def test_the_readme_check_finds_rows_and_misses_unknown_commands() -> None:
    assert _readme_rows(("config", "show"))
    assert _readme_rows(("search",))
    assert not _readme_rows(("frobnicate",))
    assert not _readme_rows(("config", "frobnicate"))
