"""`memoryd search / get / remember / reindex` against a live daemon, and without one.

One daemon per module runs as a real subprocess (``python -m memoryd serve --foreground``)
with ``MEMORYD_HOME`` in a short /tmp directory (a Unix socket path has ~100 bytes); the
commands run in-process through :func:`memoryd.cli.main`, which is what the console script
calls.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memoryd.cli import main
from memoryd.cli.render import progress_bar
from memoryd.client import Client
from memoryd.errors import MemorydError
from memoryd.store.layout import resolve_workspace

START_TIMEOUT_SECS = 30.0


@dataclass(frozen=True)
class LiveDaemon:
    home: Path
    project: Path
    proc: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.home / "run" / "memoryd.sock"

    @property
    def memory(self) -> Path:
        return self.home / "memory"


def daemon_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["MEMORYD_HOME"] = str(home)
    return env


def wait_for_socket(socket: Path, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``daemon.ping`` until it answers (fails if ``proc`` exits or time runs out)."""
    deadline = time.monotonic() + START_TIMEOUT_SECS
    while True:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the daemon exited with status {proc.returncode} before answering")
        try:
            with Client(socket, timeout=5.0) as client:
                if client.call("daemon.ping") == {"ok": True}:
                    return
        except (MemorydError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"no daemon answered on {socket} within {START_TIMEOUT_SECS} s")
        time.sleep(0.05)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextmanager
def running_daemon(**env: str) -> Iterator[LiveDaemon]:
    """A daemon subprocess serving a fresh MEMORYD_HOME, and an empty project directory.

    ``env`` adds environment variables (``MEMORYD_EMBEDDING_PROVIDER="hash"`` …).
    """
    base = Path(tempfile.mkdtemp(prefix="mdcli-", dir="/tmp"))
    home, project = base / "home", base / "project"
    home.mkdir()
    project.mkdir()
    with (base / "daemon.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--foreground"],
            env={**daemon_env(home), **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_for_socket(home / "run" / "memoryd.sock", proc)
        yield LiveDaemon(home=home, project=project, proc=proc)
    finally:
        stop_process(proc)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def live_daemon() -> Iterator[LiveDaemon]:
    # The hash provider (deterministic, offline) gives vectors, so search is hybrid and
    # `reindex --embeddings` has vectors to rebuild.
    with running_daemon(MEMORYD_EMBEDDING_PROVIDER="hash") as daemon:
        yield daemon


@pytest.fixture
def live(live_daemon: LiveDaemon, monkeypatch: pytest.MonkeyPatch) -> LiveDaemon:
    """The module's daemon, with this test's MEMORYD_HOME pointing at it."""
    monkeypatch.setenv("MEMORYD_HOME", str(live_daemon.home))
    return live_daemon


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def workspace_dir(live: LiveDaemon) -> str:
    """The project's memory directory name (``<slug>-<hash8>``)."""
    return resolve_workspace(live.project, live.memory).key.dirname


# --- against a live daemon -----------------------------------------------------------------


def test_remember_then_search_prints_the_hit_with_path_lines_and_score(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(live.project)
    code, out, err = run(capsys, "remember", "Zebrafish tanks need weekly filter changes", "-w", ws)
    assert code == 0, err
    assert out.startswith("remembered in ")
    path = out.removeprefix("remembered in ").strip()
    assert path.endswith("/MEMORY.md") and path.startswith(str(live.memory))  # opens as printed
    assert "Zebrafish" in Path(path).read_text(encoding="utf-8")

    code, out, err = run(capsys, "search", "zebrafish filter", "-w", ws)

    assert code == 0, err
    first = out.splitlines()[0]
    location, score = first.split("  ")[:2]
    assert location.startswith(f"{path}:")
    lines = location.removeprefix(f"{path}:").split("-")
    assert all(part.isdigit() for part in lines)
    assert score.startswith("score ") and 0.0 < float(score.removeprefix("score ")) <= 1.0
    assert "[workspace]" in first
    assert "Zebrafish tanks need weekly filter changes" in out
    assert "1 result(s)" in err


def test_search_json_parses(live: LiveDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(live.project)
    assert run(capsys, "remember", "Capybaras enjoy warm baths", "-w", ws)[0] == 0

    code, out, _ = run(capsys, "search", "capybaras", "-w", ws, "--json", "-n", "3")

    assert code == 0
    result = json.loads(out)
    assert result["mode"] in {"fts_only", "hybrid"}
    # One result: the note (a one-line note shares its chunk with the notes around it).
    assert len(result["results"]) == 1
    assert "## Capybaras enjoy warm baths" in result["results"][0]["snippet"]
    assert result["results"][0]["source"] == "workspace"


def test_search_with_no_hits_prints_nothing_on_stdout(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "search", "xylophonist", "-w", str(live.project))
    assert (code, out) == (0, "")
    assert "0 result(s)" in err


def test_remember_global_writes_the_global_memory_file(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "remember", "Prefer tabs in Makefiles", "--global", "-w", str(live.project)
    )

    assert (code, out) == (0, f"remembered in {live.memory / 'MEMORY.md'}\n")
    assert "## Prefer tabs in Makefiles" in (live.memory / "MEMORY.md").read_text(encoding="utf-8")


def test_remember_of_an_empty_note_writes_nothing(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "remember", "   ", "-w", str(live.project))
    assert (code, out) == (0, "")
    assert "nothing to remember" in err


def test_get_prints_numbered_lines_of_a_window(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "remember", "Window note", "-w", str(live.project))[0] == 0
    ws = workspace_dir(live)
    target = live.memory / ws / "MEMORY.md"
    lines = target.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 4

    code, out, _ = run(
        capsys, "get", f"{ws}/MEMORY.md", "--from", "2", "--lines", "3", "-w", str(live.project)
    )

    assert code == 0
    expected = [f"{n}  {lines[n - 1]}" if lines[n - 1] else str(n) for n in (2, 3, 4)]
    printed = out.splitlines()
    assert [line.strip() for line in printed] == [line.strip() for line in expected]
    assert len(printed) == 3


def test_get_json_parses(live: LiveDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "remember", "Global note", "--global", "-w", str(live.project))[0] == 0
    code, out, _ = run(
        capsys, "get", "MEMORY.md", "--lines", "1", "--json", "-w", str(live.project)
    )
    assert code == 0
    result = json.loads(out)
    assert result["path"] == "MEMORY.md"
    assert result["start_line"] == 1
    assert result["text"].rstrip("\n") == "# Global memory"


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "nope/../../x"])
def test_get_outside_the_memory_fails_with_1_and_names_the_path(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str], path: str
) -> None:
    code, out, err = run(capsys, "get", path, "-w", str(live.project))
    assert (code, out) == (1, "")
    assert err.startswith("memoryd: error: ")
    assert repr(path) in err or path in err
    assert "Traceback" not in err


def test_reindex_prints_counts(live: LiveDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(live.project)
    assert run(capsys, "remember", "Reindex me", "-w", ws)[0] == 0
    assert run(capsys, "remember", "Reindex me too", "--global", "-w", ws)[0] == 0

    code, out, err = run(capsys, "reindex", "-w", ws)

    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("reindexed ")
    words = first.split()
    assert int(words[1]) >= 2  # the global and the workspace MEMORY.md
    assert "changed" in first and "chunk(s) added" in first


def test_reindex_embeddings_rebuilds_every_vector_with_a_progress_bar(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(live.project)
    assert run(capsys, "remember", "Vectors for everyone", "-w", ws)[0] == 0

    code, out, err = run(capsys, "reindex", "--embeddings", "-w", ws)

    assert code == 0, err
    assert out.startswith("reindexed ")
    assert re.search(r"vectors \[#{30}\] (\d+)/\1 \(100%\)\n$", err), err
    assert "\r" not in err  # stderr is not a terminal here: plain lines only
    code, out, _ = run(capsys, "status", "--json")
    actor = next(a for a in json.loads(out)["actors"] if a["workspace"] == ws)
    assert actor["index"]["vectors_pending"] == 0
    assert actor["index"]["embedding_model"]


def test_reindex_json_reports_counts_after_the_vectors(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(live.project)
    assert run(capsys, "remember", "Vectors in JSON", "-w", ws)[0] == 0
    code, out, err = run(capsys, "reindex", "--embeddings", "--json", "-w", ws)
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert result["files"] >= 1 and result["vectors_pending"] == 0
    assert result["embedding_error"] is None


def test_progress_redraws_on_a_terminal_and_prints_plain_lines_elsewhere() -> None:
    import io

    from memoryd.cli.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    bar = Progress("vectors", tty)
    for done in range(4):
        bar.update(done, 4)
    bar.finish(4, 4)
    assert tty.getvalue().count("\r") == 5 and tty.getvalue().endswith("4/4 (100%)\n")

    now = [0.0]
    log = io.StringIO()
    bar = Progress("vectors", log, every=5.0, clock=lambda: now[0])
    for done in range(10):  # one update a second: a line at 0 s and at 5 s
        bar.update(done, 10)
        now[0] += 1.0
    bar.finish(10, 10)
    assert "\r" not in log.getvalue()
    assert log.getvalue().splitlines() == [
        f"vectors {progress_bar(0, 10)}",
        f"vectors {progress_bar(5, 10)}",
        f"vectors {progress_bar(10, 10)}",
    ]


def test_search_prints_paths_that_open_and_get_takes_them_back(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = str(live.project)
    assert run(capsys, "remember", "Okapis eat leaves\n\nand clay for minerals", "-w", ws)[0] == 0
    code, out, _ = run(capsys, "search", "okapis clay", "-w", ws)
    assert code == 0
    printed = out.splitlines()[0].split("  ")[0]  # /abs/<ws>/MEMORY.md:START-END
    path, _, lines = printed.rpartition(":")
    assert Path(path).is_absolute() and "Okapis" in Path(path).read_text(encoding="utf-8")
    start, _, end = lines.partition("-")

    code, out, _ = run(capsys, "search", "okapis clay", "--json", "-w", ws)
    rel = json.loads(out)["results"][0]["path"]
    assert Path(path) == live.memory / rel and not Path(rel).is_absolute()  # JSON: root-relative

    code, out, err = run(capsys, "get", printed, "-w", ws)  # the printed form, suffix and all
    assert code == 0, err
    numbers = [int(line.split()[0]) for line in out.splitlines()]
    assert numbers == list(range(int(start), int(end or start) + 1))
    assert "Okapis" in out

    monkeypatch.chdir(live.memory / rel.split("/")[0])  # inside the memory: relative paths
    code, out, _ = run(capsys, "search", "okapis clay", "-w", ws)
    assert out.splitlines()[0].startswith("MEMORY.md:")
    code, out, err = run(capsys, "get", "MEMORY.md", "--json", "-w", ws)
    assert code == 0 and json.loads(out)["path"] == rel  # from here, not the global file
    code, out, err = run(capsys, "get", path, "--lines", "1", "--json", "-w", ws)
    assert json.loads(out)["path"] == rel


def test_remember_json(live: LiveDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "remember", "JSON note", "--json", "-w", str(live.project))
    result = json.loads(out)
    assert code == 0 and result["written"] is True and result["path"].endswith("/MEMORY.md")


def test_reindex_shows_the_file_scan_progress_in_plain_lines(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("memoryd.cli.memory.PROGRESS_POLL_SECS", 0.01)
    with running_daemon(MEMORYD_EMBEDDING_PROVIDER="none") as daemon:
        monkeypatch.setenv("MEMORYD_HOME", str(daemon.home))
        ws = str(daemon.project)
        assert run(capsys, "remember", "A first note", "-w", ws)[0] == 0
        sessions = daemon.memory / workspace_dir(daemon) / "sessions"
        sessions.mkdir(parents=True, exist_ok=True)
        body = "".join(f"## Topic {i}\n\nnotes about part {i} of the scan\n\n" for i in range(8))
        for n in range(3000):
            (sessions / f"2026-01-01-scan-{n:08d}.md").write_text(f"# Log {n}\n\n{body}")
        code, out, err = run(capsys, "reindex", "-w", ws)
    assert code == 0, err
    assert out.startswith("reindexed 3001 file(s)")
    lines = err.splitlines()
    assert "\r" not in err
    assert lines and lines[-1] == "files [##############################] 3001/3001 (100%)", err
    assert all(re.fullmatch(r"files \[[#.]{30}\] \d+/3001 \(\d+%\)", line) for line in lines)


def test_progress_bar() -> None:
    assert progress_bar(0, 4, width=8) == "[........] 0/4 (0%)"
    assert progress_bar(1, 4, width=8) == "[##......] 1/4 (25%)"
    assert progress_bar(4, 4, width=8) == "[########] 4/4 (100%)"
    assert progress_bar(0, 0, width=4) == "[####] 0/0 (100%)"


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "x", "-n", "0"],
        ["search", "x", "--min-score", "1.5"],
        ["get", "MEMORY.md", "--from", "0"],
        ["get", "MEMORY.md", "--lines", "0"],
    ],
)
def test_params_the_daemon_rejects_exit_2(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run(capsys, *argv, "-w", str(live.project))
    assert (code, out) == (2, "")
    assert err.startswith("memoryd: error: ")
    assert "Traceback" not in err


def test_a_workspace_that_does_not_exist_fails_with_1(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = live.project / "missing"
    code, _, err = run(capsys, "search", "x", "-w", str(missing))
    assert code == 1
    assert str(missing) in err


def test_workspace_defaults_to_the_current_directory(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(live.project)
    code, out, _ = run(capsys, "remember", "Otters hold hands while sleeping")
    assert code == 0
    code, out, _ = run(capsys, "search", "otters", "-w", str(live.project), "--json")
    assert [hit["path"] for hit in json.loads(out)["results"]] == [
        f"{workspace_dir(live)}/MEMORY.md"
    ]


# --- without a daemon ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["search", "anything"],
        ["get", "MEMORY.md"],
        ["remember", "a note"],
        ["remember", "a note", "--global"],
        ["reindex"],
    ],
)
def test_client_commands_without_a_daemon_exit_3_and_say_how_to_start_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (3, "")
    assert "memoryd is not running" in err
    assert "memoryd serve" in err
    assert "Traceback" not in err


def test_a_dead_daemons_socket_file_counts_as_no_daemon(
    memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    run_dir = memoryd_home / "run"
    run_dir.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(run_dir / "memoryd.sock"))  # bound, never listening: connection refused
    try:
        code, _, err = run(capsys, "search", "x")
    finally:
        stale.close()
    assert code == 3
    assert "memoryd serve" in err
