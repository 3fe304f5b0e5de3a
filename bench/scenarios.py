"""Single-client scenarios: cold indexing, search latency, re-sync, time-to-searchable.

Every function drives the daemon through its socket (:class:`bench.daemon.DaemonProcess`)
and measures the raw building block for the same work in this process, interleaved with
the memoryd calls so both see the same machine noise. Each returns :class:`bench.report.Row`
values (plus what later scenarios reuse).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.corpus import BASE_DATE, needle_section
from bench.daemon import DaemonProcess
from bench.raw import RawFts
from bench.report import Row, Target, median, percentile

MS = 1000.0


def atomic_write(path: Path, text: str) -> None:
    """Write like an editor that saves safely: a hidden temp file, then rename over."""
    tmp = path.parent / f".bench-tmp-{os.getpid()}-{path.name}"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------- cold indexing


def cold_index(
    daemon: DaemonProcess, ws: Path, db: Path, raw_path: Path, label: str, expected: int
) -> tuple[list[Row], RawFts]:
    """Index a fresh workspace through the socket; then bulk-insert the same chunks raw."""
    started = time.perf_counter()
    daemon.call("index.stats", workspace=str(ws))
    actor_start = time.perf_counter() - started
    with daemon.client(timeout=None) as client:
        started = time.perf_counter()
        result = client.call("index.reindex", workspace=str(ws))
        wall = time.perf_counter() - started
    stats = daemon.call("index.stats", workspace=str(ws))
    chunks = int(stats["chunks"])
    bodies, by_path = RawFts.read_memoryd(db)
    raw = RawFts(raw_path)
    raw_secs = raw.bulk_insert(bodies, by_path)
    note = (
        f"{chunks} chunks in {stats['files']} files (generator counted {expected} + global); "
        f"memoryd {wall:.1f} s via index.reindex after actor start {actor_start:.2f} s; "
        f"raw: one-transaction bulk INSERT of the same FTS bodies ({raw_secs:.2f} s)"
    )
    row = Row(
        f"cold indexing {label}, FTS-only",
        "chunks/s",
        result["chunks_added"] / wall,
        len(bodies) / raw_secs,
        target=Target("ratio", ">=", 0.5),
        note=note,
        details={
            "chunks": chunks,
            "files": stats["files"],
            "memoryd_secs": wall,
            "raw_secs": raw_secs,
            "actor_start_secs": actor_start,
            "index_bytes": stats["size_bytes"],
            "reindex": result,
        },
    )
    return [row], raw


# ---------------------------------------------------------------------- search latency


@dataclass
class SearchFigures:
    """Per repeat: memoryd and raw latency samples (seconds), plus server-side took_ms."""

    mem: list[list[float]] = field(default_factory=list)
    raw: list[list[float]] = field(default_factory=list)
    took_ms: list[float] = field(default_factory=list)
    modes: set[str] = field(default_factory=set)
    queries: int = 0

    def p(self, which: str, pct: float) -> float:
        runs = self.mem if which == "mem" else self.raw
        return median([percentile(run, pct) for run in runs])

    def ratio(self, pct: float) -> float:
        return median(
            [
                percentile(m, pct) / percentile(r, pct)
                for m, r in zip(self.mem, self.raw, strict=True)
            ]
        )


def measure_search(
    daemon: DaemonProcess,
    ws: Path,
    queries: Sequence[str],
    raw_fn: Callable[[str], object],
    *,
    repeats: int,
    budget_secs: float,
    min_queries: int,
    embed_secs: dict[str, float] | None = None,
) -> SearchFigures:
    """Alternate one memoryd search and one raw search per query, ``repeats`` times.

    The number of queries per repeat is chosen from a short warm-up so the whole
    measurement fits ``budget_secs`` (never fewer than ``min_queries``). With
    ``embed_secs`` the query-embedding time is subtracted from each memoryd sample.
    """
    figures = SearchFigures()
    with daemon.client(timeout=300) as client:

        def mem(query: str) -> float:
            started = time.perf_counter()
            res = client.call("memory.search", workspace=str(ws), query=query)
            elapsed = time.perf_counter() - started
            figures.took_ms.append(float(res["took_ms"]))
            figures.modes.add(str(res["mode"]))
            return elapsed - (embed_secs or {}).get(query, 0.0)

        def raw(query: str) -> float:
            started = time.perf_counter()
            raw_fn(query)
            return time.perf_counter() - started

        warm = list(queries[: min(8, len(queries))])
        started = time.perf_counter()
        for query in warm:
            mem(query)
            raw(query)
        per_query = (time.perf_counter() - started) / max(1, len(warm))
        figures.took_ms.clear()
        count = int(budget_secs / max(per_query * repeats, 1e-6))
        count = max(min_queries, min(len(queries), count))
        figures.queries = count
        for rep in range(repeats):
            mem_run: list[float] = []
            raw_run: list[float] = []
            for i, query in enumerate(queries[:count]):
                if (i + rep) % 2:
                    raw_run.append(raw(query))
                    mem_run.append(mem(query))
                else:
                    mem_run.append(mem(query))
                    raw_run.append(raw(query))
            figures.mem.append(mem_run)
            figures.raw.append(raw_run)
    return figures


def search_rows(
    label: str, figures: SearchFigures, raw_label: str, target: float | None
) -> list[Row]:
    details: dict[str, Any] = {
        "queries_per_repeat": figures.queries,
        "repeats": len(figures.mem),
        "modes": sorted(figures.modes),
        "server_took_ms_p50": median(figures.took_ms),
        "memoryd_p50_ms_per_repeat": [percentile(r, 50) * MS for r in figures.mem],
        "raw_p50_ms_per_repeat": [percentile(r, 50) * MS for r in figures.raw],
    }
    note = (
        f"{figures.queries} queries × {len(figures.mem)} repeats, "
        f"mode {'/'.join(sorted(figures.modes))}; "
        f"server took_ms p50 {median(figures.took_ms):.1f}; raw = {raw_label}"
    )
    return [
        Row(
            f"search {label} p50",
            "ms",
            figures.p("mem", 50) * MS,
            figures.p("raw", 50) * MS,
            ratio=figures.ratio(50),
            target=Target("ratio", "<=", target) if target is not None else None,
            note=note,
            details=details,
        ),
        Row(
            f"search {label} p99",
            "ms",
            figures.p("mem", 99) * MS,
            figures.p("raw", 99) * MS,
            ratio=figures.ratio(99),
        ),
    ]


# ---------------------------------------------------------------------- freshness


def _found(result: dict[str, Any], token: str) -> bool:
    return any(token in str(hit.get("snippet", "")).lower() for hit in result["results"])


def time_to_searchable(
    daemon: DaemonProcess,
    ws: Path,
    memory_dir: Path,
    sessions: Sequence[str],
    raw: RawFts,
    scratch: Path,
    *,
    trials: int,
    label: str,
    timeout: float = 10.0,
) -> list[Row]:
    """Write a file (append to a session log, or a new one), then search until it is found."""
    samples: list[float] = []
    raw_samples: list[float] = []
    searches: list[int] = []
    missed = 0
    with daemon.client(timeout=60) as client:
        for trial in range(trials):
            token = f"ttsneedle{trial}x{os.getpid()}"
            when = BASE_DATE + timedelta(minutes=trial)
            if trial % 2 == 0:
                rel = sessions[(trial * 7919) % len(sessions)]
                path = memory_dir / rel
                text = path.read_text(encoding="utf-8") + needle_section(token, when)
            else:
                rel = f"sessions/{when:%Y-%m-%d}-bench-tts-{trial:08x}.md"
                path = memory_dir / rel
                text = needle_section(token, when).lstrip()
            started = time.perf_counter()
            atomic_write(path, text)
            count = 0
            while True:
                count += 1
                res = client.call("memory.search", workspace=str(ws), query=token, max_results=3)
                elapsed = time.perf_counter() - started
                if _found(res, token):
                    break
                if elapsed > timeout:
                    missed += 1
                    break
            samples.append(elapsed)
            searches.append(count)
            # raw: the same write (to a scratch copy), read + chunk + replace rows + query
            copy = scratch / path.name
            started = time.perf_counter()
            atomic_write(copy, text)
            raw.replace_file(f"{memory_dir.name}/{rel}", copy.read_text(encoding="utf-8"))
            hit = any(token in body for _, _, body in raw.search(token))
            raw_samples.append(time.perf_counter() - started)
            if not hit:
                raise AssertionError("raw search did not find the needle")
            time.sleep(0.25)
    note = (
        f"{trials} trials (even: append a flush section to a session log; odd: a new session "
        f"log), {median(searches):.0f} searches each (p50), {missed} not found within "
        f"{timeout:.0f} s; raw = write + read + chunk + replace rows + query in one process"
    )
    return [
        Row(
            f"time-to-searchable {label} p50",
            "ms",
            percentile(samples, 50) * MS,
            percentile(raw_samples, 50) * MS,
            target=Target("memoryd", "<=", 200, "ms"),
            note=note,
            details={"samples_ms": [s * MS for s in samples], "missed": missed},
        ),
        Row(
            f"time-to-searchable {label} p99",
            "ms",
            percentile(samples, 99) * MS,
            percentile(raw_samples, 99) * MS,
            target=Target("memoryd", "<=", 1000, "ms"),
        ),
    ]


def resync_one_file(
    daemon: DaemonProcess,
    ws: Path,
    memory_dir: Path,
    sessions: Sequence[str],
    raw: RawFts,
    *,
    trials: int,
    label: str,
) -> list[Row]:
    """Edit one line of one session log; time the search that re-syncs it vs a clean one."""
    costs: list[float] = []
    dirty_lat: list[float] = []
    clean_lat: list[float] = []
    raw_costs: list[float] = []
    synced: list[int] = []
    with daemon.client(timeout=300) as client:
        for trial in range(trials):
            rel = sessions[(trial * 104_729 + 13) % len(sessions)]
            path = memory_dir / rel
            token = f"resyncmark{trial}x{os.getpid()}"
            lines = path.read_text(encoding="utf-8").split("\n")
            at = next((i for i, line in enumerate(lines) if line.startswith("- ")), len(lines) // 2)
            lines[at] = f"- {token} was edited by the benchmark." + lines[at][1:]
            text = "\n".join(lines)
            atomic_write(path, text)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if client.call("index.stats", workspace=str(ws)).get("dirty", 0) >= 1:
                    break
                time.sleep(0.02)
            started = time.perf_counter()
            res = client.call("memory.search", workspace=str(ws), query=token)
            dirty = time.perf_counter() - started
            synced.append(int(res["synced_paths"]))
            started = time.perf_counter()
            client.call("memory.search", workspace=str(ws), query=token)
            clean = time.perf_counter() - started
            dirty_lat.append(dirty)
            clean_lat.append(clean)
            costs.append(max(0.0, dirty - clean))
            started = time.perf_counter()
            raw.replace_file(f"{memory_dir.name}/{rel}", path.read_text(encoding="utf-8"))
            raw_costs.append(time.perf_counter() - started)
    note = (
        f"{trials} one-line edits of a session log; memoryd = latency of the search that syncs "
        f"the file (synced_paths {sorted(set(synced))}) minus the same search right after "
        f"(p50 {median(dirty_lat) * MS:.1f} − {median(clean_lat) * MS:.1f} ms); raw = read + "
        "chunk + delete/insert all the file's rows in the raw FTS5 table"
    )
    return [
        Row(
            f"re-sync one edited file {label}",
            "ms",
            median(costs) * MS,
            median(raw_costs) * MS,
            note=note,
            details={
                "dirty_search_ms": [x * MS for x in dirty_lat],
                "clean_search_ms": [x * MS for x in clean_lat],
                "raw_ms": [x * MS for x in raw_costs],
                "synced_paths": synced,
            },
        )
    ]
