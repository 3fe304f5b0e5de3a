"""`memoryd flush`, `memoryd remember --global`, `memoryd dream [--undo|--status]` and the
session and dream lines of `memoryd status`, against a live daemon (issues 5 and 6).

The daemon runs as a child process (``python -m memoryd serve --foreground``) pointed at
:class:`~tests.support.fake_llm.FakeLLM`, a real chat completions server on 127.0.0.1; the
commands run in this process through :func:`memoryd.cli.main`, what the console script calls.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memoryd.cli import main
from memoryd.store.layout import Workspace, resolve_workspace
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
)
from tests.support.fake_llm import FakeLLM, echo_dream

Processes = Callable[..., DaemonProcess]
ORIGINAL = "# Project memory\n\n## Build\n\nThe build runs `make all`.\n"
TALK = [
    {"role": "user", "content": "why does the build cache keep growing on the CI runners?"},
    {"role": "assistant", "content": "It is never pruned."},
    {"role": "user", "content": "where does the cache live on disk, exactly?"},
    {"role": "assistant", "content": "Under /var/cache/zebrafish."},
    {"role": "user", "content": "ok, add a note to wipe it after each dependency bump"},
]


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(respond=echo_dream) as server:
        yield server


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def aged_log(ws: Workspace, n: int) -> Path:
    ws.sessions_dir.mkdir(parents=True, exist_ok=True)
    path = ws.sessions_dir / f"2025-01-0{n}-topic-0000000{n}.md"
    path.write_text(f"## Fact {n}\n\nSession {n} learned fact {n}.\n", encoding="utf-8")
    stamp = time.time() - 3600
    os.utime(path, (stamp, stamp))
    return path


def test_flush_and_remember_global(
    home: Path, processes: Processes, llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    ws_path, other = project(home, "app"), project(home, "other")
    daemon = processes(env=llm.env()).start()
    daemon.call("session.open", workspace=str(ws_path), session_id="cli-1")
    daemon.call("session.append", session_id="cli-1", messages=TALK)

    llm.queue("## Build cache\n\nWipe `/var/cache/zebrafish` after a dependency bump.\n")
    code, out, err = cli(capsys, "flush", "--session", "cli-1")
    assert code == 0, err
    match = re.fullmatch(r"written: (\S+\.md)\n", out)
    assert match, out
    assert match[1].startswith(str(home / "memory"))  # it opens as printed
    assert "zebrafish" in Path(match[1]).read_text(encoding="utf-8")
    assert "why does the build cache keep growing" in llm.prompts[-1].user

    llm.queue("NO_REPLY")
    code, out, err = cli(capsys, "flush", "--session", "cli-1", "--json")
    assert code == 0 and json.loads(out) == {"outcome": "nothing_to_store", "session_id": "cli-1"}

    code, out, err = cli(capsys, "flush", "--session", "nobody")
    assert code == 1 and "no open session 'nobody'" in err

    code, out, err = cli(capsys, "remember", "--global", "Prefer uv over pip", "-w", str(ws_path))
    assert code == 0, err
    assert out == f"remembered in {home / 'memory' / 'MEMORY.md'}\n"
    assert "## Prefer uv over pip" in (home / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    code, out, err = cli(capsys, "search", "uv over pip", "-w", str(other))
    assert code == 0 and "Prefer uv over pip" in out  # global memory reaches every workspace


def test_without_a_model_flush_and_dream_say_so(
    home: Path, processes: Processes, capsys: pytest.CaptureFixture[str]
) -> None:
    ws_path = project(home, "app")
    daemon = processes().start()
    daemon.call("session.open", workspace=str(ws_path), session_id="cli-2")
    daemon.call("session.append", session_id="cli-2", messages=TALK)
    code, _, err = cli(capsys, "flush", "--session", "cli-2")
    assert code == 1 and "llm.base_url" in err
    code, _, err = cli(capsys, "dream", "-w", str(ws_path))
    assert code == 1 and "chat model" in err
    closed = daemon.call("session.close", session_id="cli-2")
    assert closed["summary_written"] is True  # the model-free summary needs no model


def test_dream_then_undo_restores_and_lists_the_consumed_logs(
    home: Path, processes: Processes, llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    daemon = processes(env=llm.env()).start()
    daemon.call("memory.files", workspace=str(ws_path))
    ws.memory_file.write_text(ORIGINAL, encoding="utf-8")
    logs = [aged_log(ws, 1), aged_log(ws, 2)]

    code, out, err = cli(capsys, "dream", "-w", str(ws_path))
    assert code == 0, err
    assert out.startswith("dream: written\n")
    assert f"consumed: {logs[0].name}, {logs[1].name}" in out
    assert re.search(r"previous MEMORY\.md saved as \.history/MEMORY\.\d{8}T\d{6}\.\d{6}Z\.md", out)
    assert re.search(r"archived logs are in \.history/sessions/[0-9a-f]+/", out), out
    dreamt = ws.memory_file.read_text(encoding="utf-8")
    assert "## Fact 1" in dreamt and "## Fact 2" in dreamt and "## Build" in dreamt
    assert not any(p.exists() for p in logs)

    code, out, err = cli(capsys, "dream", "--undo", "-w", str(ws_path))
    assert code == 0, err
    assert re.match(r"restored MEMORY\.md from \.history/MEMORY\.\S+\.md \(before the dream", out)
    assert "consumed (and deleted)" not in out
    assert f"2 session log(s) back in sessions/:\n  {logs[0].name}\n  {logs[1].name}\n" in out
    assert re.search(r"the replaced file was saved as \.history/MEMORY\.\S+\.md\n", out), out
    assert ws.memory_file.read_text(encoding="utf-8") == ORIGINAL
    assert all(p.exists() for p in logs)  # the logs came back, whole

    code, out, err = cli(capsys, "dream", "--undo", "-w", str(ws_path))
    assert code == 1 and "no dream to undo" in err

    # the restored logs are consumed again; a note remembered since makes undo refuse
    code, out, err = cli(capsys, "dream", "-w", str(ws_path))
    assert code == 0 and out.startswith("dream: written\n"), (out, err)
    code, out, err = cli(capsys, "remember", "Wipe the zebrafish cache", "-w", str(ws_path))
    assert code == 0, err
    code, out, err = cli(capsys, "dream", "--undo", "-w", str(ws_path))
    assert code == 1 and "changed since the dream" in err and "--force" in err, err
    assert "Wipe the zebrafish cache" in ws.memory_file.read_text(encoding="utf-8")
    code, out, err = cli(capsys, "dream", "--undo", "--force", "-w", str(ws_path))
    assert code == 0, err
    saved = re.search(r"the changed file was saved as \.history/(\S+)\n", out)
    assert saved, out
    assert "Wipe the zebrafish cache" in (ws.history_dir / saved.group(1)).read_text()
    assert ws.memory_file.read_text(encoding="utf-8") == ORIGINAL


def test_status_shows_open_sessions_and_the_dream_gates_and_lock(
    home: Path, processes: Processes, llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    daemon = processes(env=llm.env()).start()
    daemon.call("session.open", workspace=str(ws_path), session_id="main-1")
    daemon.call("session.append", session_id="main-1", messages=TALK)
    llm.queue("## Build cache\n\nWipe it.\n")
    daemon.call("session.flush", session_id="main-1")
    daemon.call("session.append", session_id="main-1", messages=TALK[:1])
    daemon.call("session.open", workspace=str(ws_path), session_id="helper-1", subagent=True)
    aged_log(ws, 1)
    crashed = _dead_pid()
    ws.lock_path.write_text(str(crashed), encoding="utf-8")
    ten_minutes_ago = time.time() - 600
    os.utime(ws.lock_path, (ten_minutes_ago, ten_minutes_ago))

    code, out, err = cli(capsys, "status")
    assert code == 0, err
    assert re.search(
        r"session main-1: 6 messages, last activity \d+s ago, idle flush in 5m, "
        r"last flush written",
        out,
    ), out
    assert (
        "session helper-1 (sub-agent): 0 messages, last activity -, idle flush off, "
        "last flush never" in out
    ), out
    dream_line = next(line for line in out.splitlines() if line.strip().startswith("dream:"))
    assert "gates too_few_sessions" in dream_line
    assert "hours never/24" in dream_line and "sessions 2/5" in dream_line
    assert re.search(rf"lock pid {crashed} \(dead, 10m old\)", dream_line), dream_line
    assert "last consolidation never" in dream_line and "next check off" in dream_line

    code, out, err = cli(capsys, "status", "--json")
    assert code == 0, err
    [actor] = json.loads(out)["actors"]
    sessions = {s["session_id"]: s for s in actor["sessions"]}
    assert sessions["main-1"]["messages"] == 6
    assert sessions["main-1"]["last_flush"]["outcome"] == "written"
    assert sessions["main-1"]["next_idle_flush"].endswith("Z")  # RFC 3339 UTC
    assert sessions["main-1"]["last_activity"].endswith("Z")
    assert actor["dream"]["lock"]["holder_pid"] == crashed
    assert actor["dream"]["gates"]["sessions_since_last"] == 2
    assert actor["dream"]["next_check"] == "off"

    code, out, err = cli(capsys, "dream", "--status", "-w", str(ws_path))
    assert code == 0, err
    assert "gate hours since last consolidation: never (min 24)" in out, out
    assert "gate sessions since last consolidation: 2 (min 5)" in out
    assert re.search(rf"lock: pid {crashed}, dead, 10m old, not stale", out), out
    assert "last consolidation: never" in out and "next periodic check: off" in out

    code, out, err = cli(capsys, "dream", "-w", str(ws_path))  # reclaims the dead lock
    assert code == 0 and out.startswith("dream: written"), out + err
    code, out, err = cli(capsys, "status")
    dream_line = next(line for line in out.splitlines() if line.strip().startswith("dream:"))
    assert "lock free" in dream_line and "last run written" in dream_line
    assert re.search(r"last consolidation \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", dream_line)


def test_without_a_daemon_flush_and_dream_exit_3(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (("flush", "--session", "x"), ("dream",), ("dream", "--undo")):
        code, _, err = cli(capsys, *args)
        assert code == 3 and "memoryd serve" in err, (args, err)


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(proc.stdout)


def test_a_requested_dream_that_did_not_run_exits_1(
    home: Path, processes: Processes, llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    processes(env=llm.env()).start()
    cli(capsys, "status")
    aged_log(ws, 1)
    ws.lock_path.parent.mkdir(parents=True, exist_ok=True)
    ws.lock_path.write_text(str(os.getpid()), encoding="utf-8")  # a live holder, just now

    code, out, _ = cli(capsys, "dream", "-w", str(ws_path))
    assert (code, out) == (1, "dream: skipped (lock_held)\n")
    code, out, _ = cli(capsys, "dream", "--json", "-w", str(ws_path))
    assert code == 1 and json.loads(out)["reason"] == "lock_held"
    assert llm.requests == 0

    ws.lock_path.unlink()
    code, out, _ = cli(capsys, "dream", "-w", str(ws_path))
    assert code == 0 and out.startswith("dream: written\n")


def test_sessions_list_and_close(
    home: Path, processes: Processes, llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    ws_path = project(home, "app")
    daemon = processes(env=llm.env()).start()
    code, out, _ = cli(capsys, "sessions", "list")
    assert code == 0 and out == "no open sessions\n"
    daemon.call("session.open", workspace=str(ws_path), session_id="main-1")
    daemon.call("session.append", session_id="main-1", messages=TALK)

    code, out, err = cli(capsys, "sessions", "list")
    assert code == 0, err
    assert re.match(
        r"main-1  app-[0-9a-f]{8}  5 messages, 5 unflushed, last seen .* ago, "
        r"idle close in 2\dh",
        out,
    ), out
    code, out, _ = cli(capsys, "sessions", "list", "--json")
    [entry] = json.loads(out)["sessions"]
    assert entry["session_id"] == "main-1" and entry["workspace"] == str(ws_path)

    code, out, err = cli(capsys, "sessions", "close", "main-1")
    assert code == 0, err
    assert out == "closed main-1: 5 messages, summary written\n"
    code, out, _ = cli(capsys, "sessions", "list")
    assert out == "no open sessions\n"
    code, out, err = cli(capsys, "sessions", "close", "main-1")
    assert code == 1 and "no open session" in err
