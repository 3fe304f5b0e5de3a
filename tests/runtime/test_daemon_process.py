"""The daemon as a process (issue 3 items 1, 2, 10): signals, reload, logs, loop, one per socket.

Each test runs ``python -m memoryd serve --foreground`` (or a small script around
:class:`~memoryd.runtime.main.Daemon`) with ``MEMORYD_HOME`` set, talks to it over its socket
and signals it like systemd or a person at a terminal would.
"""

from __future__ import annotations

import json
import signal
import socket
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    memoryd_cli,
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
    write_config,
)

Processes = Callable[..., DaemonProcess]
STOP_WITHIN = 5.0  # issue 3 item 10: SIGTERM stops gracefully within 5 s


def wait_for(check: Callable[[], Any], within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not true within {within}s: {check}")


def search(daemon: DaemonProcess, ws: Path, query: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = daemon.call("memory.search", workspace=str(ws), query=query)[
        "results"
    ]
    return results


def test_with_no_config_the_cli_remembers_searches_and_shows_status(
    home: Path, processes: Processes
) -> None:
    ws = project(home, "app")
    assert not (home / "config.toml").exists()
    daemon = processes(embeddings=None).start()  # no config, no model server, no API key

    remembered = memoryd_cli(home, "remember", "Deploys go through the staging cluster", cwd=ws)
    assert remembered.returncode == 0, remembered.stderr
    assert "MEMORY.md" in remembered.stdout

    found = memoryd_cli(home, "search", "staging deploys", "-w", str(ws))
    assert found.returncode == 0, found.stderr
    assert "Deploys go through the staging cluster" in found.stdout

    status = memoryd_cli(home, "status")
    assert status.returncode == 0, status.stderr
    assert f"pid {daemon.pid}" in status.stdout and "uvloop" in status.stdout
    assert str(ws) in status.stdout and "running" in status.stdout

    daemon.send(signal.SIGTERM)
    assert daemon.wait(STOP_WITHIN) == 0
    gone = memoryd_cli(home, "status")
    assert gone.returncode == 3 and "memoryd serve" in gone.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_gracefully_and_removes_the_socket(
    home: Path, processes: Processes, signum: signal.Signals
) -> None:
    ws = project(home, "app")
    daemon = processes().start()
    daemon.call("memory.remember", workspace=str(ws), text="kept across a graceful stop")
    assert search(daemon, ws, "graceful") != []
    assert daemon.socket.is_socket()

    daemon.send(signum)
    assert daemon.wait(STOP_WITHIN) == 0
    assert not daemon.socket.exists()
    events = [e["event"] for e in daemon.events()]
    assert events.index("daemon.stopping") < events.index("actor.stopped")
    assert events[-1] == "daemon.stopped"


def test_sighup_reloads_the_configuration_without_a_restart(
    home: Path, processes: Processes
) -> None:
    ws = project(home, "app")
    write_config(home, "[search]\nmin_score = 0.7\n")
    daemon = processes().start()
    remembered = daemon.call(
        "memory.remember", workspace=str(ws), text="alpha beta alpha beta alpha beta"
    )
    weak = home / "memory" / remembered["path"].split("/")[0] / "sessions" / "weak.md"
    weak.write_text("# Session\n\n## Notes\n\nalpha came up once, among trains and violins\n")

    def found() -> int:
        return len(search(daemon, ws, "alpha beta"))

    wait_for(lambda: found() >= 1)
    assert found() == 1  # the weak hit is below min_score 0.7

    write_config(home, "[search]\nmin_score = 0.0\n")
    daemon.send(signal.SIGHUP)
    wait_for(lambda: found() == 2)
    assert daemon.call("daemon.status")["pid"] == daemon.pid
    assert "config.reloaded" in [e["event"] for e in daemon.events()]

    write_config(home, "[search]\nmin_score = 7\n")  # a bad file is refused, not applied
    daemon.send(signal.SIGHUP)
    wait_for(lambda: "config.reload_failed" in [e["event"] for e in daemon.events()])
    assert found() == 2 and daemon.running

    other_ws = project(home, "other")  # what a reload can start, it starts
    write_config(
        home,
        f'[search]\nmin_score = 0.0\n[memory]\nroot = "{home}/elsewhere"\n'
        f'[daemon]\nworkspaces = ["{other_ws}"]\n',
    )
    daemon.send(signal.SIGHUP)
    restart = wait_for(
        lambda: [e for e in daemon.events() if e["event"] == "config.restart_needed"]
    )
    assert restart[0]["keys"] == ["memory.root"]  # and it says what it cannot apply
    assert found() == 2
    wait_for(
        lambda: (
            [a["workspace"] for a in daemon.call("daemon.status")["actors"]]
            == sorted([str(ws), str(other_ws)])
        )
    )


HANGING_DAEMON = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import anyio

    from memoryd.runtime.main import Daemon
    from memoryd.store import configfile

    marker = Path(sys.argv[1])
    daemon = Daemon(configfile.load(), grace_secs=600.0)

    async def hang(params):
        marker.write_text("in flight")
        await anyio.sleep_forever()

    daemon.methods.add("test.hang", hang)
    anyio.run(daemon.run)
    """
)


def test_a_second_sigint_forces_the_exit(home: Path, processes: Processes) -> None:
    marker = home / "hanging"
    script = home / "hanging_daemon.py"
    script.write_text(HANGING_DAEMON)
    daemon = processes(args=(str(script), str(marker))).start()

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(daemon.socket))
        client.sendall(b'{"jsonrpc": "2.0", "id": 1, "method": "test.hang", "params": {}}\n')
        wait_for(marker.exists)

        daemon.send(signal.SIGINT)  # graceful: waits up to 600 s for the hanging request
        wait_for(lambda: "server.stopping" in [e["event"] for e in daemon.events()])
        time.sleep(0.3)
        assert daemon.running

        daemon.send(signal.SIGINT)  # forced
        assert daemon.wait(STOP_WITHIN) == 0  # it exited on its own, not killed by SIGINT
    assert not daemon.socket.exists()
    assert "daemon.forced_stop" in [e["event"] for e in daemon.events()]


def test_logs_are_json_lines_with_one_search_event_per_search_at_debug(
    home: Path, processes: Processes
) -> None:
    ws = project(home, "app")
    write_config(home, '[daemon]\nlog_level = "debug"\n')
    daemon = processes().start()
    daemon.call("memory.remember", workspace=str(ws), text="logs tell ops what happened")
    queries = ["logs", "ops happened", "nothing matches this"]
    for query in queries:
        search(daemon, ws, query)
    status = daemon.call("daemon.status")
    daemon.send(signal.SIGTERM)
    daemon.wait(STOP_WITHIN)

    lines = [line for line in daemon.stderr().splitlines() if line.strip()]
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    searches = [e for e in daemon.events() if e["event"] == "search"]
    assert len(searches) == len(queries)
    memory_dir = status["actors"][0]["memory_dir"]
    for event in searches:
        assert event["workspace"] == memory_dir
        assert isinstance(event["took_ms"], float) and event["took_ms"] >= 0
        assert event["mode"] == "fts_only"
        assert isinstance(event["results"], int)
        assert event["level"] == "debug" and "timestamp" in event
    assert [e["results"] for e in searches] == [1, 1, 0]


def test_at_info_searches_are_summed_up_not_logged_one_by_one(
    home: Path, processes: Processes
) -> None:
    ws = project(home, "app")
    daemon = processes().start()
    daemon.call("memory.remember", workspace=str(ws), text="summaries tell ops enough")
    for query in ("summaries", "ops", "nothing matches this"):
        search(daemon, ws, query)
    daemon.send(signal.SIGTERM)
    daemon.wait(STOP_WITHIN)
    events = daemon.events()
    assert [e for e in events if e["event"] == "search"] == []
    (summary,) = [e for e in events if e["event"] == "search.summary"]  # at the actor's stop
    assert summary["level"] == "info"
    assert (summary["searches"], summary["empty"], summary["modes"]) == (3, 1, {"fts_only": 3})
    assert summary["took_ms_max"] >= summary["took_ms_p50"] >= 0


def test_under_systemd_log_lines_carry_syslog_priorities(home: Path, processes: Processes) -> None:
    import os

    daemon = processes()
    daemon.stderr_path.touch()
    st = os.stat(daemon.stderr_path)  # the daemon's stderr is this file: as journald's socket
    daemon.env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
    daemon.start()
    daemon.call("memory.search", workspace=str(project(home, "app")), query="x")
    daemon.send(signal.SIGTERM)
    daemon.wait(STOP_WITHIN)
    lines = [line for line in daemon.stderr().splitlines() if line.strip()]
    assert lines and all(line.startswith(("<6>{", "<4>{", "<3>{", "<7>{")) for line in lines)
    started = next(json.loads(line[3:]) for line in lines if '"daemon.started"' in line)
    assert started["level"] == "info"


def test_serve_runs_on_uvloop(home: Path, processes: Processes) -> None:
    pytest.importorskip("uvloop")
    daemon = processes().start()
    status = daemon.call("daemon.status")
    assert status["loop"] == "uvloop"
    assert status["pid"] == daemon.pid
    started = next(e for e in daemon.events() if e["event"] == "daemon.started")
    assert started["loop"] == "uvloop"


def test_a_second_daemon_on_a_live_socket_exits_with_a_clear_message(
    home: Path, processes: Processes
) -> None:
    ws = project(home, "app")
    write_config(home, f'[daemon]\nworkspaces = ["{ws}"]\n')
    first = processes().start()
    second = processes().spawn()
    assert second.wait(20) == 1
    message = second.stderr()
    assert "already running" in message and str(first.pid) in message
    assert "Traceback" not in message
    assert "actor.started" not in message  # it never opened the workspace's index
    assert first.socket.is_socket()
    assert first.call("daemon.ping") == {"ok": True}


def test_a_stale_socket_from_a_killed_daemon_is_replaced(home: Path, processes: Processes) -> None:
    ws = project(home, "app")
    killed = processes().start()
    killed.call("memory.remember", workspace=str(ws), text="written before kill -9")
    killed.send(signal.SIGKILL)
    killed.wait(10)
    assert killed.socket.is_socket()  # left behind

    daemon = processes().start()
    assert daemon.call("daemon.status")["pid"] == daemon.pid
    assert "server.stale_socket_replaced" in [e["event"] for e in daemon.events()]
    assert search(daemon, ws, "kill") != []  # the acknowledged write survived


def test_a_provider_config_that_cannot_work_stops_serve_before_it_listens(
    home: Path, processes: Processes
) -> None:
    daemon = processes(env={"MEMORYD_EMBEDDING_PROVIDER": "openai"}).spawn()
    assert daemon.wait(20) == 1
    message = daemon.stderr()
    assert "embedding.base_url" in message and "Traceback" not in message
    assert not daemon.socket.exists()
