"""Load and memory scenarios: 16 clients + an editor, idle RSS with 10 workspaces, soak.

The concurrent clients are :class:`memoryd.client.AsyncClient` connections (one each) in
this process; the editor is another process (:mod:`bench.editor`). RSS is the daemon
process's resident set size read with psutil; the raw figure is a fresh Python process
that opens the same index files with the same SQLite driver and sqlite-vec and runs queries
on each (:mod:`bench.raw` ``rss``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from bench.daemon import BenchHome, DaemonProcess
from bench.raw import RawFts
from bench.report import Row, Target, median, percentile

MS = 1000.0
MB = 1024 * 1024


async def _clients(
    socket: Path,
    workspaces: Sequence[Path],
    queries: Sequence[str],
    clients: int,
    seconds: float,
) -> tuple[list[float], Counter[str], float]:
    from memoryd.client import AsyncClient

    latencies: list[float] = []
    errors: Counter[str] = Counter()
    deadline = time.monotonic() + seconds

    async def one(index: int) -> None:
        async with AsyncClient(socket, timeout=120) as client:
            i = index * 37
            while time.monotonic() < deadline:
                i += 1
                query = queries[i % len(queries)]
                ws = workspaces[i % len(workspaces)]
                started = time.perf_counter()
                try:
                    await client.call("memory.search", workspace=str(ws), query=query)
                except Exception as exc:  # noqa: BLE001 - every failure is a counted error
                    errors[type(exc).__name__] += 1
                    continue
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(clients):
            tg.start_soon(one, index)
    return latencies, errors, time.perf_counter() - started


def concurrent_clients(
    daemon: DaemonProcess,
    ws: Path,
    memory_dir: Path,
    queries: Sequence[str],
    raw: RawFts,
    *,
    clients: int,
    seconds: float,
    label: str,
) -> list[Row]:
    """``clients`` connections search for ``seconds`` while another process edits files."""
    editor = subprocess.Popen(
        [sys.executable, "-m", "bench.editor", str(memory_dir), str(seconds)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        latencies, errors, elapsed = anyio.run(
            _clients, daemon.home.socket, [ws], queries, clients, seconds
        )
    finally:
        out, _ = editor.communicate(timeout=seconds + 30)
    edits: dict[str, Any] = json.loads(out or b"{}")
    # raw: the same queries, one connection, as fast as it goes, for a few seconds
    raw_count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < min(5.0, seconds / 4):
        raw.search(queries[raw_count % len(queries)])
        raw_count += 1
    raw_rate = raw_count / (time.perf_counter() - started)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    n_errors = sum(errors.values())
    note = (
        f"{clients} clients × {elapsed:.0f} s while another process made {edits.get('edits', 0)} "
        f"edits ({edits}); {len(latencies)} searches ok, errors {dict(errors) or 0}; "
        "raw = the same queries on one raw FTS5 connection, sequential"
    )
    return [
        Row(
            f"{clients} clients + editor {label}: throughput",
            "searches/s",
            len(latencies) / elapsed,
            raw_rate,
            note=note,
            details={"edits": edits, "errors": dict(errors), "searches": len(latencies)},
        ),
        Row(f"{clients} clients + editor {label}: latency p50", "ms", p50 * MS),
        Row(f"{clients} clients + editor {label}: latency p99", "ms", p99 * MS),
        Row(
            f"{clients} clients + editor {label}: p99 / p50",
            "×",
            p99 / p50 if p50 else None,
            target=Target("memoryd", "<=", 10, "×"),
        ),
        Row(
            f"{clients} clients + editor {label}: errors",
            "",
            float(n_errors),
            target=Target("memoryd", "<=", 0),
        ),
    ]


def raw_process_rss(dbs: Sequence[Path], *, vec: bool = False) -> int:
    """RSS of a fresh Python process that opens ``dbs`` and queries each (bench.raw rss)."""
    args = [sys.executable, "-m", "bench.raw", "rss", *map(str, dbs)]
    if vec:
        args.append("--vec")
    out = subprocess.run(
        args, capture_output=True, check=True, cwd=Path(__file__).resolve().parent.parent
    )
    return int(json.loads(out.stdout)["rss_bytes"])


def settled_rss(daemon: DaemonProcess, wait: float = 2.0) -> int:
    time.sleep(wait)
    samples = []
    for _ in range(3):
        samples.append(daemon.rss())
        time.sleep(0.3)
    return int(median(samples))


def idle_rss(daemon: DaemonProcess, workspaces: Sequence[Path], dbs: Sequence[Path]) -> list[Row]:
    """Open every workspace with one search, let the daemon settle, read its RSS."""
    with daemon.client(timeout=300) as client:
        for ws in workspaces:
            client.call("memory.search", workspace=str(ws), query="sqlite index migration")
    status = daemon.call("daemon.status")
    rss = settled_rss(daemon)
    raw = raw_process_rss(dbs)
    chunks = [daemon.call("index.stats", workspace=str(ws))["chunks"] for ws in workspaces]
    return [
        Row(
            f"RSS idle, {len(workspaces)} workspaces open (FTS-only)",
            "MB",
            rss / MB,
            raw / MB,
            target=Target("memoryd", "<=", 80, "MB"),
            note=(
                f"{len(status['actors'])} actors, {sum(chunks)} chunks in all; raw = a fresh "
                "Python process with the same driver + sqlite-vec, the same index files open "
                "and queried"
            ),
            details={"chunks_per_workspace": chunks},
        )
    ]


def restarted_rss(
    home: BenchHome, workspaces: Sequence[Path], title: str, note: str, env: dict[str, str]
) -> Row:
    """Idle RSS of a fresh daemon that opens already-built indexes (no indexing in its life)."""
    with DaemonProcess(home, provider="none", extra_env=env) as daemon:
        with daemon.client(timeout=300) as client:
            for ws in workspaces:
                client.call("memory.search", workspace=str(ws), query="sqlite index migration")
        return Row(title, "MB", settled_rss(daemon) / MB, note=note)


def hidden_numpy(workdir: Path) -> dict[str, str]:
    """Environment that makes ``import numpy`` fail in the daemon (sqlite_vec imports it)."""
    package = workdir / "no-numpy" / "numpy"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('raise ImportError("numpy hidden by the benchmark")\n')
    return {"PYTHONPATH": str(package.parent)}


def soak(
    daemon: DaemonProcess,
    workspaces: Sequence[Path],
    queries: Sequence[str],
    *,
    seconds: float,
    clients: int = 4,
) -> list[Row]:
    """Search for ``seconds`` and sample RSS; growth after the warm-up (first quarter)."""
    samples: list[tuple[float, int]] = []
    started = time.monotonic()
    stop = False

    async def sampler() -> None:
        while not stop:
            samples.append((time.monotonic() - started, daemon.rss()))
            await anyio.sleep(1.0)

    async def main() -> tuple[list[float], Counter[str], float]:
        nonlocal stop
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler)
            result = await _clients(daemon.home.socket, workspaces, queries, clients, seconds)
            stop = True
        return result

    latencies, errors, elapsed = anyio.run(main)
    warm_until = max(5.0, seconds / 4)
    warm = [rss for t, rss in samples if t <= warm_until]
    after = [rss for t, rss in samples if t > warm_until]
    base = warm[-1] if warm else samples[0][1]
    final = max(after[-3:]) if after else samples[-1][1]
    growth = (final - base) / base * 100.0
    return [
        Row(
            f"soak {seconds:.0f} s: RSS growth after warm-up",
            "%",
            growth,
            target=Target("memoryd", "<=", 5, "%"),
            note=(
                f"{clients} clients over {len(workspaces)} workspaces, {len(latencies)} searches "
                f"({len(latencies) / elapsed:.0f}/s), errors {dict(errors) or 0}; RSS "
                f"{base / MB:.1f} MB at {warm_until:.0f} s → {final / MB:.1f} MB at the end"
            ),
            details={"rss_samples": samples, "errors": dict(errors)},
        )
    ]
