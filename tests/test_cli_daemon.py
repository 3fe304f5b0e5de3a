"""`memoryd serve / status / doctor / install-service`, and the status table.

``serve`` runs as real subprocesses (it forks and detaches); the client commands run
in-process against a daemon subprocess (see ``tests/test_cli_memory.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from memoryd.cli.render import render_status
from memoryd.client import Client
from memoryd.core.times import rfc3339
from memoryd.errors import AlreadyRunning, DaemonTimeout, InvalidParams, MemorydError
from memoryd.errors import only_error as single_error
from tests.test_cli_memory import (
    LiveDaemon,
    daemon_env,
    run,
    running_daemon,
    stop_process,
    wait_for_socket,
)

MEMORYD = [sys.executable, "-m", "memoryd"]


@pytest.fixture(scope="module")
def live_daemon() -> Iterator[LiveDaemon]:
    with running_daemon() as daemon:
        yield daemon


@pytest.fixture
def live(live_daemon: LiveDaemon, monkeypatch: pytest.MonkeyPatch) -> LiveDaemon:
    monkeypatch.setenv("MEMORYD_HOME", str(live_daemon.home))
    return live_daemon


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A fresh MEMORYD_HOME short enough for a Unix socket path."""
    home = Path(tempfile.mkdtemp(prefix="mdsrv-", dir="/tmp"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def memoryd(home: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MEMORYD, *argv],
        env=daemon_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def wait_until(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.05)


# --- serve ---------------------------------------------------------------------------------


def test_serve_detaches_prints_the_pid_keeps_serving_and_stops_on_kill(
    short_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started = memoryd(short_home, "serve")
    match = re.search(r"memoryd is running \(pid (\d+)\)", started.stdout)
    assert match, (started.stdout, started.stderr)
    pid = int(match.group(1))
    try:
        assert started.returncode == 0
        socket = short_home / "run" / "memoryd.sock"
        assert str(socket) in started.stdout
        assert "memoryd stop" in started.stdout
        assert pid != os.getpid() and not gone(pid)

        monkeypatch.setenv("MEMORYD_HOME", str(short_home))
        code, out, _ = run(capsys, "status", "--json")  # the command returned; the daemon serves
        assert code == 0
        assert json.loads(out)["pid"] == pid
        assert (short_home / "state" / "memoryd.log").exists()

        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: gone(pid), "the daemon exits after SIGTERM")
        assert not socket.exists()
        code, _, err = run(capsys, "status")
        assert code == 3 and "memoryd serve" in err
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", [[], ["--foreground"]], ids=["detached", "foreground"])
def test_a_second_serve_on_a_live_daemon_exits_1_with_a_clear_message(
    live_daemon: LiveDaemon, mode: list[str]
) -> None:
    second = memoryd(live_daemon.home, "serve", *mode)

    assert second.returncode == 1
    assert "already running" in second.stderr
    assert str(live_daemon.socket) in second.stderr
    assert str(live_daemon.proc.pid) in second.stderr
    assert "Traceback" not in second.stderr
    assert live_daemon.proc.poll() is None
    with Client(live_daemon.socket) as client:
        assert client.call("daemon.ping") == {"ok": True}


def test_stop_and_restart_a_detached_daemon(short_home: Path) -> None:
    started = memoryd(short_home, "serve", "--json")
    assert started.returncode == 0, started.stderr
    first = json.loads(started.stdout)["pid"]
    try:
        restarted = memoryd(short_home, "restart")
        assert restarted.returncode == 0, restarted.stderr
        assert f"memoryd stopped (pid {first})" in restarted.stdout
        match = re.search(r"memoryd is running \(pid (\d+)\)", restarted.stdout)
        assert match, restarted.stdout
        second = int(match.group(1))
        assert second != first and gone(first) and not gone(second)
        assert memoryd(short_home, "status", "--json").returncode == 0

        stopped = memoryd(short_home, "stop", "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout) == {"stopped": True, "pid": second}
        assert gone(second)
        assert not (short_home / "run" / "memoryd.sock").exists()
        again = memoryd(short_home, "stop")  # stopping a stopped daemon is fine
        assert (again.returncode, again.stdout) == (0, "memoryd is not running\n")
        assert memoryd(short_home, "status").returncode == 3
    finally:
        for pid in (first, locals().get("second")):
            if isinstance(pid, int) and not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_detached_daemon_reopens_its_log_on_sighup(short_home: Path) -> None:
    started = memoryd(short_home, "serve", "--json")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    log = short_home / "state" / "memoryd.log"
    try:
        wait_until(lambda: "daemon.started" in log.read_text(), "the daemon logs its start")
        rotated = log.rename(log.with_name("memoryd.log.1"))  # what logrotate does
        os.kill(pid, signal.SIGHUP)
        wait_until(
            lambda: log.exists() and "config.reloaded" in log.read_text(),
            "the reload is logged to a new memoryd.log",
        )
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        assert "daemon.started" in rotated.read_text()
        assert "config.reloaded" not in rotated.read_text()
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: gone(pid), "the daemon exits")


def test_a_refused_detached_start_says_why_on_stderr(short_home: Path) -> None:
    run_dir = short_home / "run"
    run_dir.mkdir()
    run_dir.chmod(0o777)  # a socket directory others can write to is refused
    started = memoryd(short_home, "serve")
    assert started.returncode == 1
    assert started.stderr.startswith("memoryd: the daemon did not start: ")
    assert str(run_dir) in started.stderr
    log = short_home / "state" / "memoryd.log"
    assert f"(see {log})" in started.stderr
    refused = [json.loads(line) for line in log.read_text().splitlines() if "refused" in line]
    assert refused and str(run_dir) in refused[-1]["error"]  # and the log says why too


def test_of_two_daemons_started_at_once_one_serves_and_one_exits_1(short_home: Path) -> None:
    procs = [
        subprocess.Popen(
            [*MEMORYD, "serve", "--foreground"],
            env=daemon_env(short_home),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        wait_for_socket(short_home / "run" / "memoryd.sock")
        wait_until(lambda: any(p.poll() is not None for p in procs), "one daemon gives up")
        loser = next(p for p in procs if p.poll() is not None)
        winner = next(p for p in procs if p is not loser)
        assert loser.returncode == 1
        assert loser.stderr is not None
        err = loser.stderr.read()
        assert "already running" in err
        assert "Traceback" not in err
        assert winner.poll() is None
    finally:
        for proc in procs:
            stop_process(proc)
            if proc.stderr is not None:
                proc.stderr.close()


def test_serve_reports_an_error_the_daemon_raises_inside_task_groups(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memoryd.runtime import main as runtime_main

    def serve(*args: Any, **kwargs: Any) -> None:
        error = AlreadyRunning("memoryd is already running on /x.sock (pid 42)")
        raise BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [error])])

    monkeypatch.setattr(runtime_main, "serve", serve)
    code, _, err = run(capsys, "serve", "--foreground")
    assert code == 1
    assert err == "memoryd: error: memoryd is already running on /x.sock (pid 42)\n"


def test_serve_with_a_bad_config_fails_before_starting(
    memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (memoryd_home / "config.toml").write_text("[search]\nmin_score = 'high'\n", encoding="utf-8")
    code, _, err = run(capsys, "serve")
    assert code == 1
    assert "search.min_score" in err
    assert not (memoryd_home / "run" / "memoryd.sock").exists()


def test_single_error_finds_the_one_memoryd_error_in_nested_groups() -> None:
    error = InvalidParams("bad")
    assert single_error(ExceptionGroup("a", [ExceptionGroup("b", [error])])) is error
    assert single_error(ExceptionGroup("a", [error, MemorydError("other")])) is None
    assert single_error(ExceptionGroup("a", [ValueError("not ours")])) is None


def test_a_daemon_that_does_not_answer_in_time_is_an_error_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def request(self: Client, method: str, params: dict[str, Any] | None = None) -> Any:
        raise DaemonTimeout("memoryd did not answer within 60.0 s")

    monkeypatch.setattr(Client, "request", request)
    code, out, err = run(capsys, "search", "x")
    assert (code, out) == (1, "")
    assert err == "memoryd: error: memoryd did not answer within 60.0 s\n"


# --- status --------------------------------------------------------------------------------


def test_status_prints_the_table_with_the_workspace(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "remember", "Status note", "-w", str(live.project))[0] == 0
    assert run(capsys, "search", "status", "-w", str(live.project))[0] == 0

    code, out, _ = run(capsys, "status")

    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("memoryd ") and f"pid {live.proc.pid}" in lines[0]
    assert f"socket {live.socket}" in lines
    header = next(line for line in lines if line.startswith("WORKSPACE"))
    for column in ("STATE", "WATCHER", "DIRTY", "FILES", "CHUNKS", "LAST SEARCH"):
        assert column in header
    row = next(line for line in lines if line.startswith(f"{live.project} ("))
    assert "running" in row
    assert re.search(r"ago, \d+\.\d ms", row)


def test_status_json_parses(live: LiveDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "remember", "Json status note", "-w", str(live.project))[0] == 0

    code, out, _ = run(capsys, "status", "--json")

    assert code == 0
    status = json.loads(out)
    assert status["pid"] == live.proc.pid
    assert status["socket"] == str(live.socket)
    workspaces = {actor["workspace"]: actor for actor in status["actors"]}
    assert workspaces[str(live.project)]["state"] == "running"


# --- doctor --------------------------------------------------------------------------------


def _doctor_lines(out: str) -> dict[str, str]:
    lines = {}
    for line in out.splitlines():
        status, name, detail = re.split(r"\s{2,}", line.strip(), maxsplit=2)
        lines[name] = f"{status} {detail}"
    return lines


def test_doctor_with_a_daemon_prints_ok_lines_and_exits_0(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "doctor")

    checks = _doctor_lines(out)
    for name in ("config", "sqlite", "fts5", "sqlite-vec", "daemon"):
        assert checks[name].startswith("ok "), (name, out)
    assert checks["daemon"] == f"ok answering on {live.socket}"
    assert checks["fts5"] == "ok available"
    assert all(line.startswith("ok ") for line in checks.values()), out
    assert code == 0


def test_doctor_without_a_daemon_says_how_to_start_it(
    memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "doctor")
    checks = _doctor_lines(out)
    assert checks["daemon"].startswith("ok not running")
    assert "memoryd serve" in checks["daemon"]
    assert code == 0


def test_doctor_reports_a_bad_config_and_exits_1(
    memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (memoryd_home / "config.toml").write_text("[serach]\n", encoding="utf-8")
    code, out, _ = run(capsys, "doctor")
    assert code == 1
    assert _doctor_lines(out)["config"].startswith("BAD ")
    assert "serach" in out


def test_doctor_says_whether_vectors_are_held_in_memory(
    memoryd_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(capsys, "doctor")
    assert _doctor_lines(out)["vector search"].startswith("ok vectors_in_memory = auto: exact")
    (memoryd_home / "config.toml").write_text('[index]\nvectors_in_memory = "on"\n')
    monkeypatch.setattr("memoryd.store.mirror.numpy_available", lambda: False)
    code, out, _ = run(capsys, "doctor")
    assert _doctor_lines(out)["vector search"] == (
        "BAD vectors_in_memory = on, but numpy is not installed"
    )
    assert code == 1


# --- install-service -----------------------------------------------------------------------


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def _files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*"))


def test_install_service_dry_run_prints_path_content_and_enable_command_and_writes_nothing(
    user_home: Path, memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memoryd.runtime import service

    code, out, err = run(capsys, "install-service", "--dry-run")

    assert (code, err) == (0, "")
    plan = service.plan_for_this_user()
    assert Path(plan.path).is_relative_to(user_home)
    assert str(plan.path) in out.splitlines()[0]
    assert plan.content in out
    assert plan.enable_command in out
    assert "serve --foreground" in plan.content
    assert str(memoryd_home) in plan.content  # MEMORYD_HOME is carried into the service
    assert out == service.install(plan, dry_run=True)
    assert _files_under(user_home) == []


def test_install_service_writes_the_unit_under_home(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memoryd.runtime import service

    assert run(capsys, "install-service", "--dry-run")[0] == 0
    plan = service.plan_for_this_user()

    code, out, _ = run(capsys, "install-service")

    assert code == 0
    written = Path(plan.path)
    assert written.is_file()
    assert written.read_text(encoding="utf-8") == plan.content
    assert str(written) in out
    assert plan.enable_command in out
    assert [p for p in _files_under(user_home) if p.is_file()] == [written]


def test_install_service_passes_the_config_file_on(
    user_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "conf" / "memoryd.toml"
    config.parent.mkdir()
    config.write_text("", encoding="utf-8")
    monkeypatch.chdir(config.parent)

    code, out, _ = run(capsys, "install-service", "--dry-run", "--config", "memoryd.toml")

    assert code == 0
    assert f"--config {config}" in out


# --- the status table ----------------------------------------------------------------------

NOW = 1_800_000_000.0


def _status(*actors: dict[str, Any], provider: str | None = None) -> dict[str, Any]:
    return {
        "version": "0.1.0",
        "pid": 4242,
        "uptime_secs": 7260.0,
        "rss_bytes": 52_400_000,
        "loop": "uvloop",
        "socket": "/run/user/1000/memoryd/memoryd.sock",
        "memory_root": "/home/me/.local/share/memoryd/memory",
        "embedding_provider": provider,
        "actors": list(actors),
    }


def _running(**changes: Any) -> dict[str, Any]:
    actor: dict[str, Any] = {
        "workspace": "/src/app",
        "memory_dir": "app-1a2b3c4d",
        "state": "running",
        "watcher": "watching",
        "watcher_error": None,
        "dirty": 0,
        "last_search": {"at": rfc3339(NOW - 90), "took_ms": 3.25, "mode": "fts_only"},
        "index": {"files": 3, "chunks": 41, "vectors_pending": 0, "embedding_model": None},
        "failures": 0,
        "last_error": None,
    }
    actor.update(changes)
    return actor


def test_render_status_without_workspaces() -> None:
    text = render_status(_status(), now=NOW)
    assert text.splitlines() == [
        "memoryd 0.1.0  pid 4242  up 2h  rss 52.4 MB  loop uvloop",
        "embeddings: none (FTS only)",
        "chat model: not configured (flush and dream are off)",
        "socket /run/user/1000/memoryd/memoryd.sock",
        "memory /home/me/.local/share/memoryd/memory",
        "",
        "no workspaces served yet (they start on first use)",
    ]


def test_render_status_with_one_running_workspace() -> None:
    text = render_status(_status(_running(), provider="hash-64"), now=NOW)
    lines = text.splitlines()
    assert lines[1] == "embeddings: hash-64"
    header, row = lines[6], lines[7]
    assert header.split("  ")[0].strip() == "WORKSPACE"
    assert re.split(r"\s{2,}", header) == [
        "WORKSPACE",
        "STATE",
        "WATCHER",
        "DIRTY",
        "FILES",
        "CHUNKS",
        "VEC PENDING",
        "LAST SEARCH",
    ]
    assert re.split(r"\s{2,}", row) == [
        "/src/app (app-1a2b3c4d)",
        "running",
        "watching",
        "0",
        "3",
        "41",
        "-",  # no embedding model: nothing can be pending
        "2m ago, 3.2 ms fts_only",
    ]
    assert header.index("STATE") == row.index("running")  # columns line up
    assert len(lines) == 8


def test_render_status_with_a_failed_workspace_shows_its_last_error() -> None:
    failed = {
        "workspace": "/src/broken",
        "memory_dir": "broken-99887766",
        "state": "failed",
        "failures": 3,
        "last_error": "disk I/O error",
    }
    text = render_status(_status(_running(), failed), now=NOW)
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("/src/broken"))
    assert re.split(r"\s{2,}", lines[row])[:3] == ["/src/broken (broken-99887766)", "failed", "-"]
    assert lines[row + 1] == ("  last error (3 failure(s), restarted with backoff): disk I/O error")
    assert lines[-1] == lines[row + 1]  # the note belongs to the failed row, not the running one


def test_render_status_notes_an_index_rebuilt_at_open_and_polling() -> None:
    actor = _running(
        watcher="polling",
        watcher_error="inotify watch limit reached",
        index={
            "files": 2,
            "chunks": 9,
            "vectors_pending": 5,
            "embedding_model": "hash-64",
            "rebuilt_reason": "quick_check failed: database disk image is malformed",
            "rebuilt_at": NOW - 7200,
        },
    )
    lines = render_status(_status(actor), now=NOW).splitlines()
    assert re.split(r"\s{2,}", lines[7])[2:7] == ["polling", "0", "2", "9", "5"]
    assert lines[8:] == [
        "  watcher: inotify watch limit reached",
        "  index rebuilt from the markdown files 2h ago: "
        "quick_check failed: database disk image is malformed",
    ]


def test_render_status_of_a_real_daemon_status(live: LiveDaemon) -> None:
    with Client(live.socket) as client:
        status = client.call("daemon.status")
    text = render_status(status)
    assert f"pid {live.proc.pid}" in text


# --- settings waiting for a restart -------------------------------------------------------


def test_status_lists_settings_a_reload_could_not_apply_until_the_restart(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_daemon(MEMORYD_EMBEDDING_PROVIDER="none") as daemon:
        monkeypatch.setenv("MEMORYD_HOME", str(daemon.home))
        code, out, _ = run(capsys, "status", "--json")
        assert (code, json.loads(out)["restart_pending"]) == (0, [])

        (daemon.home / "config.toml").write_text("[embedding]\nbatch_size = 8\n")
        daemon.proc.send_signal(signal.SIGHUP)

        def pending() -> list[str]:
            _, out, _ = run(capsys, "status", "--json")
            return list(json.loads(out)["restart_pending"])

        wait_until(lambda: pending() == ["embedding"], "status lists the pending key")
        code, out, _ = run(capsys, "status")
        assert "restart needed: changed settings not applied yet: embedding" in out

        (daemon.home / "config.toml").write_text("")  # changed back: nothing waits
        daemon.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: pending() == [], "the pending key is gone")


def test_install_service_json_says_where_and_what(
    user_home: Path, memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memoryd.runtime import service

    code, out, _ = run(capsys, "install-service", "--dry-run", "--json")
    plan = service.plan_for_this_user()
    assert code == 0
    assert json.loads(out) == {
        "path": str(plan.path),
        "content": plan.content,
        "enable_command": plan.enable_command,
        "written": False,
        "dry_run": True,
    }
    code, out, _ = run(capsys, "install-service", "--json")
    assert json.loads(out)["written"] is True and Path(plan.path).exists()


def test_render_status_shows_a_file_scan_under_way() -> None:
    scanning = _running(scan={"done": 750, "total": 3000}, index={})
    text = render_status(_status(scanning), now=NOW)
    assert "  scanning files [########......................] 750/3000 (25%)" in text.splitlines()


def test_doctor_reports_inotify_limits_against_what_memoryd_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #17: doctor checked only max_user_watches; now both limits, and the need (one
    instance, one watch per directory under the memory root)."""
    from memoryd.cli.doctor import _watch_limit_check
    from memoryd.store.hostcheck import count_directories

    root = tmp_path / "memory"
    for name in ("a-1/sessions/.live", "b-2/sessions", "b-2/.history"):
        (root / name).mkdir(parents=True)
    assert count_directories(root) == 7
    check = _watch_limit_check(root)
    if check.data is None:
        pytest.skip("no inotify limits on this platform")
    assert check.data["needed_instances"] == 1 and check.data["needed_watches"] == 7
    assert "max_user_instances" in check.detail and "needs 1 instance and 7 watches" in check.detail
