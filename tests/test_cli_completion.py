"""`memoryd completion bash|zsh|fish`: scripts generated from the parser, and they complete.

The bash script is sourced into a real bash and its function called the way bash calls it
(``COMP_WORDS``/``COMP_CWORD``); zsh and fish are syntax-checked when installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from memoryd.cli import build_parser
from memoryd.cli.completion import spec
from tests.test_cli_memory import run


def script(capsys: pytest.CaptureFixture[str], shell: str) -> str:
    code, out, err = run(capsys, "completion", shell)
    assert (code, err) == (0, "")
    return out


def complete(source: str, line: str, cwd: Path | None = None) -> list[str]:
    """What bash offers for ``line`` (the cursor at its end) with ``source`` loaded."""
    words = line.split(" ")
    program = (
        f"{source}\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n_memoryd\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        cwd=cwd,
    )
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_subcommands_options_and_choices(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = script(capsys, "bash")
    assert "complete -o filenames -F _memoryd memoryd" in source
    commands = complete(source, "memoryd ")
    assert {"search", "get", "doctor", "stop", "restart", "completion"} <= set(commands)
    assert complete(source, "memoryd re") == ["restart", "remember", "reindex"]
    assert complete(source, "memoryd config ") == ["show", "check"]
    assert complete(source, "memoryd search --so") == ["--source"]
    assert complete(source, "memoryd search --source ") == ["global", "workspace", "session"]
    assert complete(source, "memoryd completion ") == ["bash", "zsh", "fish"]
    assert "--timeout" in complete(source, "memoryd doctor --")
    assert "--json" in complete(source, "memoryd agents list --")
    (tmp_path / "notes.md").write_text("")
    (tmp_path / "project").mkdir()
    assert complete(source, "memoryd get no", cwd=tmp_path) == ["notes.md"]
    assert complete(source, "memoryd search x -w pro", cwd=tmp_path) == ["project"]
    assert complete(source, "memoryd serve --config no", cwd=tmp_path) == ["notes.md"]


def test_every_command_and_option_of_the_parser_is_in_every_script(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes = spec(build_parser())
    scripts = {shell: script(capsys, shell) for shell in ("bash", "zsh", "fish")}
    for path, node in nodes.items():
        for name in node.subcommands:
            for shell, text in scripts.items():
                assert name in text, (shell, path, name)
        for option in node.options:
            for flag in option.flags:
                assert flag in scripts["bash"], (path, flag)
                fish_flag = f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}"
                assert fish_flag in scripts["fish"], (path, flag)
    assert scripts["zsh"].startswith("#compdef memoryd\n")
    assert "bashcompinit" in scripts["zsh"]
    assert "complete -c memoryd -n '__fish_use_subcommand' -a search" in scripts["fish"]
    fish_config = "__fish_seen_subcommand_from config && not __fish_seen_subcommand_from show"
    assert fish_config in scripts["fish"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_script_parses_in_its_shell(capsys: pytest.CaptureFixture[str], shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    source = script(capsys, shell)
    done = subprocess.run(
        [shell, "-n"], input=source, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="needs fish")
def test_fish_completes_commands_subcommands_and_choices(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "memoryd.fish"
    source.write_text(script(capsys, "fish"))

    def offered(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {source}; complete -C {line!r}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            cwd=tmp_path,
        )
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    assert {"search", "doctor", "restart"} <= set(offered("memoryd "))
    assert sorted(offered("memoryd config ")) == ["check", "show"]
    assert sorted(offered("memoryd search --source ")) == ["global", "session", "workspace"]
    assert "--timeout" in offered("memoryd doctor --")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh")
def test_zsh_loads_the_script_and_completes_as_bashcompinit_calls_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "memoryd.zsh"
    source.write_text(script(capsys, "zsh"))

    def offered(*words: str) -> list[str]:
        program = (
            f"autoload -U compinit && compinit -u -d {tmp_path / 'zcomp'}; source {source}; "
            # what bashcompinit's _bash_complete does before calling the function
            "f() { emulate -L sh; setopt kshglob noshglob braceexpand; "
            f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
            '_memoryd; print -l -- "${COMPREPLY[@]}"; }; f'
        )
        done = subprocess.run(
            ["zsh", "-f", "-c", program], capture_output=True, text=True, timeout=30, check=True
        )
        return [line for line in done.stdout.splitlines() if line]

    assert offered("memoryd", "config", "") == ["show", "check"]
    assert offered("memoryd", "search", "--source", "") == ["global", "workspace", "session"]
