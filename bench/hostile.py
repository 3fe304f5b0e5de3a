"""Figures for the README's Reliability table (issue #17): memoryd under hostile files, clients
and environments, each against a real ``memoryd serve`` subprocess.

    python -m bench.hostile            # all four, full sizes
    python -m bench.hostile --quick    # smaller sizes (a minute or so)
    python -m bench.hostile --only clients,workspaces --json out.json

- ``bigfile``: a 200 MB session log appears in a running workspace while another client
  searches it every 20 ms: the daemon's peak RSS, the longest any of those searches took
  (the time the workspace was blocked), and how long until the log's head is searchable.
- ``clients``: 2,000 clients each connect and send one byte, against a daemon whose
  descriptor limit is the default 1,024 of a user service: ``daemon.ping`` latency meanwhile.
- ``workspaces``: 500 workspaces opened: inotify instances the daemon holds, and the time
  from an edit (by another process) to the first search that finds it, sampled.
- ``idle``: RSS with no workspace open, then after 300 workspaces were opened (a remember
  and a search each) and idle-stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.daemon import BenchHome, DaemonProcess
from memoryd.client import Client
from memoryd.errors import MemorydError

Figures = dict[str, Any]


def _home(workdir: Path, name: str) -> BenchHome:
    path = workdir / name
    path.mkdir(parents=True, exist_ok=True)
    return BenchHome(path)


def _hwm(pid: int) -> int:
    """Peak RSS (VmHWM) of a process, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _inotify_instances(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                count += 1
        except OSError:
            continue
    return count


def _mb(n: float) -> float:
    return round(n / 1e6, 1)


# --------------------------------------------------------------------------- 200 MB file


def bigfile(workdir: Path, size_mb: int) -> Figures:
    home = _home(workdir, "bigfile")
    ws, mem = home.workspace("big")
    (mem / "sessions").mkdir(parents=True, exist_ok=True)
    with DaemonProcess(home) as daemon:
        daemon.call("memory.remember", workspace=str(ws), text="the ocarina is a small note")
        daemon.call("memory.search", workspace=str(ws), query="ocarina")
        rss_before = daemon.rss()
        latencies: list[float] = []
        stop = threading.Event()

        def search_loop() -> None:
            with daemon.client(timeout=600) as client:
                while not stop.is_set():
                    started = time.perf_counter()
                    client.call("memory.search", workspace=str(ws), query="ocarina")
                    latencies.append(time.perf_counter() - started)
                    time.sleep(0.02)

        searcher = threading.Thread(target=search_loop, daemon=True)
        searcher.start()
        time.sleep(0.5)
        line = b"filler words that repeat to pad out a hostile session log 0123456789\n"
        head = b"# Session\n\nthe zither head line\n\n"
        path = mem / "sessions" / "2025-05-01-big-0000aaaa.md"
        written_at = time.perf_counter()
        with path.open("wb") as out:  # written at once, as a copy would
            out.write(head)
            block = line * (1_048_576 // len(line))
            for _ in range(size_mb):
                out.write(block)
        written = time.perf_counter() - written_at
        found_after = None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            hits = daemon.call("memory.search", workspace=str(ws), query="zither")["results"]
            if hits:
                found_after = time.perf_counter() - written_at
                break
            time.sleep(0.05)
        time.sleep(2)
        stop.set()
        searcher.join(60)
        status = daemon.call("daemon.status")
        warnings = [
            w for actor in status["actors"] for w in actor.get("index", {}).get("file_warnings", [])
        ]
        stats = daemon.call("index.stats", workspace=str(ws))
        return {
            "file_mb": size_mb,
            "write_secs": round(written, 2),
            "rss_before_mb": _mb(rss_before),
            "peak_rss_mb": _mb(_hwm(daemon.pid)),
            "rss_after_mb": _mb(daemon.rss()),
            "searches": len(latencies),
            "longest_search_ms": round(max(latencies) * 1000, 1) if latencies else None,
            "p50_search_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
            "head_searchable_after_secs": round(found_after, 2) if found_after else None,
            "index_mb": _mb(stats.get("size_bytes", 0)),
            "chunks": stats.get("chunks"),
            "warning": warnings[0]["warnings"][0] if warnings else None,
        }


# --------------------------------------------------------------------------- slow clients


def clients(workdir: Path, count: int) -> Figures:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, count + 1024) if hard != resource.RLIM_INFINITY else count + 1024
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    home = _home(workdir, "clients")
    daemon = DaemonProcess(home)
    preexec: Callable[[], None] = lambda: resource.setrlimit(  # noqa: E731
        resource.RLIMIT_NOFILE, (1024, min(hard, 1024) if hard != resource.RLIM_INFINITY else 1024)
    )
    log = daemon.log_path.open("ab")
    daemon.proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve", "--foreground"],
        env=daemon.env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        cwd=home.path,
        preexec_fn=preexec,
    )
    log.close()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(home.socket, timeout=5) as client:
                    client.call("daemon.ping")
                break
            except (MemorydError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        slow: list[socket.socket] = []
        connect_failures = 0
        started = time.perf_counter()
        for _ in range(count):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(str(home.socket))
                s.send(b"{")
            except OSError:
                connect_failures += 1
                s.close()
                continue
            slow.append(s)
        opened = time.perf_counter() - started
        time.sleep(1.0)
        pings: list[float] = []
        ping_failures = 0
        for _ in range(20):
            t = time.perf_counter()
            try:
                with Client(home.socket, timeout=10) as client:
                    client.call("daemon.ping")
                pings.append(time.perf_counter() - t)
            except (MemorydError, OSError):
                ping_failures += 1
            time.sleep(0.05)
        proc = psutil.Process(daemon.pid)
        fds = proc.num_fds()
        for s in slow:
            s.close()
        return {
            "slow_clients": count,
            "daemon_nofile_limit": 1024,
            "connected": len(slow),
            "connect_failures": connect_failures,
            "open_secs": round(opened, 2),
            "ping_p50_ms": round(statistics.median(pings) * 1000, 2) if pings else None,
            "ping_max_ms": round(max(pings) * 1000, 2) if pings else None,
            "ping_failures": ping_failures,
            "daemon_fds": fds,
        }
    finally:
        daemon.stop()


# --------------------------------------------------------------------------- many workspaces


def workspaces(workdir: Path, count: int, samples: int = 20) -> Figures:
    home = _home(workdir, "workspaces")
    spaces = [home.workspace(f"w{i:04d}")[0] for i in range(count)]
    with DaemonProcess(home) as daemon:
        started = time.perf_counter()
        with daemon.client() as client:
            for ws in spaces:
                client.call("memory.remember", workspace=str(ws), text=f"note of {ws.name}")
        opened = time.perf_counter() - started
        instances = _inotify_instances(daemon.pid)
        status = daemon.call("daemon.status")
        modes: dict[str, int] = {}
        for actor in status["actors"]:
            modes[actor.get("watcher", "?")] = modes.get(actor.get("watcher", "?"), 0) + 1
        visible: list[float] = []
        missed = 0
        step = max(1, count // samples)
        with daemon.client() as client:
            for n, ws in enumerate(spaces[::step][:samples]):
                memory = (
                    home.root
                    / client.call("memory.remember", workspace=str(ws), text="warm")["path"]
                )
                word = f"krummhorn{n}x"
                subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        "import sys; open(sys.argv[1], 'a').write(sys.argv[2])",
                        str(memory),
                        f"\n## The {word} edit\n",
                    ],
                    check=True,
                )
                t = time.perf_counter()
                while True:
                    hits = client.call("memory.search", workspace=str(ws), query=word)["results"]
                    if hits:
                        visible.append(time.perf_counter() - t)
                        break
                    if time.perf_counter() - t > 10:
                        missed += 1
                        break
                    time.sleep(0.02)
        return {
            "workspaces": count,
            "open_secs": round(opened, 1),
            "inotify_instances": instances,
            "watcher_modes": modes,
            "edits_sampled": len(visible) + missed,
            "edit_visible_max_ms": round(max(visible) * 1000, 1) if visible else None,
            "edit_visible_p50_ms": round(statistics.median(visible) * 1000, 1) if visible else None,
            "edits_not_visible_in_10s": missed,
            "rss_mb": _mb(daemon.rss()),
        }


# --------------------------------------------------------------------------- idle-stopped


def _settled_rss(daemon: DaemonProcess) -> int:
    time.sleep(2.0)
    samples = []
    for _ in range(5):
        samples.append(daemon.rss())
        time.sleep(0.3)
    return int(statistics.median(samples))


def _wait_all_stopped(daemon: DaemonProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while daemon.call("daemon.status")["actors"] and time.monotonic() < deadline:
        time.sleep(0.2)


def idle(workdir: Path, count: int) -> Figures:
    home = _home(workdir, "idle")
    warm = [home.workspace(f"warm{i}")[0] for i in range(5)]
    spaces = [home.workspace(f"w{i:04d}")[0] for i in range(count)]
    with DaemonProcess(home, extra_env={"MEMORYD_DAEMON_ACTOR_IDLE_SECS": "1"}) as daemon:
        with daemon.client() as client:  # the lazy imports and caches of a first workspace
            for ws in warm:
                client.call("memory.remember", workspace=str(ws), text="warm up")
                client.call("memory.search", workspace=str(ws), query="warm")
        _wait_all_stopped(daemon)
        before = _settled_rss(daemon)
        with daemon.client() as client:
            for ws in spaces:
                client.call("memory.remember", workspace=str(ws), text=f"note of {ws.name}")
                client.call("memory.search", workspace=str(ws), query="note")
        peak_actors = len(daemon.call("daemon.status")["actors"])
        _wait_all_stopped(daemon)
        after = _settled_rss(daemon)
        listed = len(daemon.call("daemon.status")["actors"])
        return {
            "workspaces": count,
            "rss_before_mb": _mb(before),
            "rss_after_mb": _mb(after),
            "rss_delta_mb": _mb(after - before),
            "actors_running_at_peak": peak_actors,
            "actors_listed_after": listed,
        }


# --------------------------------------------------------------------------- main

SCENARIOS = ("bigfile", "clients", "workspaces", "idle")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sizes = (
        {"bigfile": 20, "clients": 300, "workspaces": 40, "idle": 30}
        if args.quick
        else {"bigfile": 200, "clients": 2000, "workspaces": 500, "idle": 300}
    )
    runs: dict[str, Callable[[Path, int], Figures]] = {
        "bigfile": bigfile,
        "clients": clients,
        "workspaces": workspaces,
        "idle": idle,
    }
    figures: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="mdh-", dir="/tmp") as tmp:
        for name in args.only.split(","):
            name = name.strip()
            if name not in runs:
                print(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
                return 2
            started = time.perf_counter()
            figures[name] = runs[name](Path(tmp), sizes[name])
            figures[name]["bench_secs"] = round(time.perf_counter() - started, 1)
            print(name, json.dumps(figures[name]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
